/* SPDX-License-Identifier: MIT */
/* loco-queuebench: shared queue throughput (LOCO §5.4, CRQ over remote
 * memory). Every compute node runs T threads that, for S seconds, each
 * push a value and then pop one (an empty queue answers -ENODATA, counted
 * apart) on the queue "q". One JSON line per node: its ops (pushes + pops
 * that took a value), ops/s, latency percentiles of one push or pop,
 * verbs and round trips per op, and the cluster's total ops/s (summed
 * through an atomic_var).
 *
 *	tools/loco-run -n 4 -- loco-queuebench --threads 1 --duration 5 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "apps/common/bench.h"
#include "apps/common/local.h"
#include "apps/common/opts.h"
#include "apps/common/pool.h"
#include <loco/channels/queue.h>

struct opts {
	unsigned threads;
	double duration;
	uint32_t slots;
};

struct bench {
	struct opts o;
	struct loco_mgr *mgr;
	struct loco_queue q;
	struct bench_pool pool;      /* main thread, "total", "bar", workers */
	unsigned nodes;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: loco-queuebench [--threads T] [--duration S] "
		"[--slots N]\n"
		"  (plus the node options --id/--hosts/--transport/--timeout-ms/\n"
		"  --arena-mb/--cpu-bind)\n"
		"Every compute node runs T threads (default 1) that for S seconds\n"
		"(default 2) push a value, then pop one, on the queue \"q\" of N\n"
		"cells per node (default 4096). One JSON line per node.\n");
}

static int parse_one(void *arg, int c, const char *s, char *expect)
{
	struct opts *o = arg;
	uint64_t v;
	int rc = bench_pool_opt(c, s, &o->threads, &o->duration, expect);
	if (rc <= 0)
		return rc;
	if (c != 's' || bench_parse_u64(s, 1, UINT32_MAX, &v, expect))
		return -1;
	o->slots = (uint32_t)v;
	return 0;
}

static int parse(void *arg, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "threads", required_argument, NULL, 't' },
		{ "duration", required_argument, NULL, 'd' },
		{ "slots", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts *o = &((struct bench *)arg)->o;
	return bench_getopt(argc, argv, "t:d:h", lo, parse_one, o,
			    "loco-queuebench");
}

/* ---- workers ------------------------------------------------------------ */

/* The K-th op of worker IDX: a push (K even) or a pop (K odd); 1 if the
 * pop found the queue empty. */
static int one_op(void *arg, struct loco_thread *thr, unsigned idx, uint64_t k)
{
	struct bench *b = arg;
	uint32_t v = (uint32_t)(loco_mgr_id(b->mgr) << 24 | idx << 16 |
				(k & 0xffff));
	int rc = k % 2 ? loco_queue_try_pop(&b->q, thr, &v) :
			 loco_queue_push(&b->q, thr, v, -1);
	return rc == -ENODATA ? 1 : rc;
}

/* ---- report ---------------------------------------------------------------- */

static void report(void *arg, double secs)
{
	struct bench *b = arg;
	struct bench_result r = {
		.app = "queuebench", .transport = loco_mgr_transport(b->mgr),
		.nodes = b->nodes, .threads = b->o.threads, .duration_s = secs,
	};
	uint64_t sum = 0;
	if (bench_pool_result(&b->pool, &r))
		return;
	int rc = bench_pool_total(&b->pool, r.ops, &sum);
	bench_json_begin(stdout, &r);
	printf(",\"node\":%u,\"empty_pops\":%llu,\"slots\":%u,\"cluster_ops\":%llu,"
	       "\"cluster_ops_per_s\":%.1f", loco_mgr_id(b->mgr),
	       (unsigned long long)bench_pool_empty(&b->pool), b->o.slots,
	       (unsigned long long)sum, rc ? 0.0 : (double)sum / secs);
	bench_json_end(stdout);
}

/* ---- set-up -------------------------------------------------------------- */

static int channels_init(struct bench *b)
{
	uint64_t members = bench_members(b->mgr);
	b->nodes = (unsigned)__builtin_popcountll(members);
	int rc = loco_queue_init(&b->q, b->mgr, NULL, "q", b->o.slots, 0);
	if (rc)
		return rc;
	b->pool = (struct bench_pool){
		.name = "queuebench", .mgr = b->mgr, .threads = b->o.threads,
		.duration = b->o.duration, .op = one_op, .report = report,
		.arg = b,
	};
	rc = bench_pool_init(&b->pool, (uint32_t)__builtin_ctzll(members));
	if (rc)
		loco_queue_fini(&b->q);
	return rc;
}

static void channels_fini(struct bench *b)
{
	bench_pool_fini(&b->pool);
	loco_queue_fini(&b->q);
}

static int run(void *arg, struct loco_mgr *mgr)
{
	struct bench *b = arg;
	b->mgr = mgr;
	int rc = channels_init(b);
	if (rc)
		return rc;
	rc = bench_pool_run(&b->pool);
	channels_fini(b);
	return rc;
}

static const struct local_prog prog = {
	.name = "loco-queuebench", .usage = usage, .parse = parse, .run = run,
};

int main(int argc, char **argv)
{
	struct bench b = { .o = { .threads = 1, .duration = 2, .slots = 4096 } };
	return local_main(&prog, &b, argc, argv);
}
