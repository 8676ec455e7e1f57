/* SPDX-License-Identifier: MIT */
/* loco-lockbench: contended single-lock throughput (LOCO §5.4 ticket
 * lock). Every compute node runs T threads that, for S seconds, take the
 * ticket lock "lk" (hosted at the lowest compute node), increment a plain
 * remote counter (a READ and a WRITE of an 8-byte word at the highest
 * compute node; --empty: nothing) and release it, fencing the pair to the
 * counter's node. Each node prints one JSON line: its own ops, ops/s,
 * latency percentiles of one lock+section+unlock, verbs and round trips
 * per op, and the cluster's total (summed through an atomic_var) with a
 * check that the counter equals it ("conserved").
 *
 *	tools/loco-run -n 4 -- loco-lockbench --threads 2 --duration 5
 *
 * Without a hosts file it runs as a private one-node cluster. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "apps/common/bench.h"
#include "apps/common/local.h"
#include "apps/common/opts.h"
#include "apps/common/pool.h"
#include <loco/channels/shared_region.h>
#include <loco/channels/ticket_lock.h>

struct opts {
	unsigned threads;
	double duration;
	int handover_max;           /* < 0: the lock's default */
	bool empty;
};

struct bench {
	struct opts o;
	struct loco_mgr *mgr;
	struct loco_ticket_lock lk;
	struct loco_shared_region ctr;
	struct bench_pool pool;     /* main thread, "total", "bar", workers */
	uint32_t first, last;       /* lowest and highest compute id */
	unsigned nodes;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: loco-lockbench [--threads T] [--duration S] "
		"[--handover-max N] [--empty]\n"
		"  (plus the node options --id/--hosts/--transport/--timeout-ms/\n"
		"  --arena-mb/--cpu-bind)\n"
		"Every compute node runs T threads (default 1) that for S seconds\n"
		"(default 2) lock the ticket lock \"lk\", increment a remote counter\n"
		"(--empty: do nothing) and unlock. --handover-max bounds local\n"
		"handovers (default %u). Prints one JSON line per node.\n",
		LOCO_TICKET_LOCK_HANDOVER_MAX);
}

static int parse_one(void *arg, int c, const char *s, char *expect)
{
	struct opts *o = arg;
	uint64_t v;
	int rc = bench_pool_opt(c, s, &o->threads, &o->duration, expect);
	if (rc <= 0)
		return rc;
	switch (c) {
	case 'm':
		if (bench_parse_u64(s, 0, INT_MAX, &v, expect))
			return -1;
		o->handover_max = (int)v;
		return 0;
	case 'e':
		o->empty = true;
		return 0;
	default:
		return -1;
	}
}

static int parse(void *arg, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "threads", required_argument, NULL, 't' },
		{ "duration", required_argument, NULL, 'd' },
		{ "handover-max", required_argument, NULL, 'm' },
		{ "empty", no_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts *o = &((struct bench *)arg)->o;
	return bench_getopt(argc, argv, "t:d:h", lo, parse_one, o,
			    "loco-lockbench");
}

/* ---- workers ------------------------------------------------------------ */

static int section(struct bench *b, struct loco_thread *thr)
{
	uint64_t v;
	if (b->o.empty)
		return 0;
	int rc = loco_shared_region_read(&b->ctr, thr, b->last, 0, &v, 8);
	v++;
	return rc ? rc : loco_shared_region_write(&b->ctr, thr, b->last, 0, &v, 8);
}

static int one_op(void *arg, struct loco_thread *thr, unsigned idx, uint64_t k)
{
	struct bench *b = arg;
	(void)idx;
	(void)k;
	int rc = loco_ticket_lock_lock(&b->lk, thr, -1);
	if (rc)
		return rc;
	rc = section(b, thr);
	int urc = loco_ticket_lock_unlock(&b->lk, thr, LOCO_FENCE_PAIR, b->last);
	return rc ? rc : urc;
}

/* ---- totals and report ---------------------------------------------------- */

/* Sum every node's ops in "total"; the counter must equal the sum. */
static int cluster_total(struct bench *b, uint64_t ops, uint64_t *sum,
			 bool *conserved)
{
	uint64_t ctr = 0;
	int rc = bench_pool_total(&b->pool, ops, sum);
	if (!rc && !b->o.empty)
		rc = loco_shared_region_read(&b->ctr, b->pool.thr, b->last, 0,
					     &ctr, 8);
	*conserved = b->o.empty || ctr == *sum;
	return rc;
}

static void report(void *arg, double secs)
{
	struct bench *b = arg;
	struct bench_result r = {
		.app = "lockbench", .transport = loco_mgr_transport(b->mgr),
		.nodes = b->nodes, .threads = b->o.threads, .duration_s = secs,
	};
	struct loco_ticket_lock_stats ls;
	uint64_t sum = 0;
	bool conserved = false;
	if (bench_pool_result(&b->pool, &r))
		return;
	int rc = cluster_total(b, r.ops, &sum, &conserved);
	loco_ticket_lock_stats(&b->lk, &ls);
	bench_json_begin(stdout, &r);
	printf(",\"node\":%u,\"cluster_ops\":%llu,\"cluster_ops_per_s\":%.1f,"
	       "\"acquires\":%llu,\"handovers\":%llu,\"waits\":%llu,"
	       "\"polls\":%llu,\"spun_out\":%llu,\"yields\":%llu,"
	       "\"conserved\":%s",
	       loco_mgr_id(b->mgr), (unsigned long long)sum, (double)sum / secs,
	       (unsigned long long)ls.acquires, (unsigned long long)ls.handovers,
	       (unsigned long long)ls.waits, (unsigned long long)ls.polls,
	       (unsigned long long)ls.spun_out, (unsigned long long)ls.yields,
	       !rc && conserved ? "true" : "false");
	bench_json_end(stdout);
}

/* ---- set-up -------------------------------------------------------------- */

static int channels_init(struct bench *b)
{
	int rc = loco_ticket_lock_init(&b->lk, b->mgr, NULL, "lk", b->first, 0);
	if (rc)
		return rc;
	if (b->o.handover_max >= 0)
		loco_ticket_lock_set_handover_max(&b->lk,
						  (unsigned)b->o.handover_max);
	rc = loco_shared_region_init_ex(&b->ctr, b->mgr, NULL, "ctr", 64, 0,
					LOCO_REGION_REMOTE_READ |
					LOCO_REGION_REMOTE_WRITE);
	if (rc)
		goto fini_lock;
	b->pool = (struct bench_pool){
		.name = "lockbench", .mgr = b->mgr, .threads = b->o.threads,
		.duration = b->o.duration, .op = one_op, .report = report,
		.arg = b,
	};
	rc = bench_pool_init(&b->pool, b->first);
	if (!rc)
		return 0;
	loco_shared_region_fini(&b->ctr);
fini_lock:
	loco_ticket_lock_fini(&b->lk);
	return rc;
}

static void channels_fini(struct bench *b)
{
	bench_pool_fini(&b->pool);
	loco_shared_region_fini(&b->ctr);
	loco_ticket_lock_fini(&b->lk);
}

static int run(void *arg, struct loco_mgr *mgr)
{
	struct bench *b = arg;
	uint64_t members = bench_members(mgr);
	b->mgr = mgr;
	b->first = (uint32_t)__builtin_ctzll(members);
	b->last = 63 - (uint32_t)__builtin_clzll(members);
	b->nodes = (unsigned)__builtin_popcountll(members);
	int rc = channels_init(b);
	if (rc)
		return rc;
	rc = bench_pool_run(&b->pool);
	channels_fini(b);
	return rc;
}

static const struct local_prog prog = {
	.name = "loco-lockbench", .usage = usage, .parse = parse, .run = run,
};

int main(int argc, char **argv)
{
	struct bench b = { .o = { .threads = 1, .duration = 2,
				  .handover_max = -1 } };
	return local_main(&prog, &b, argc, argv);
}
