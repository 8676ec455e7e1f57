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
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "apps/common/bench.h"
#include "apps/common/local.h"
#include "channels/atomic_var.h"
#include "channels/barrier.h"
#include "channels/shared_region.h"
#include "channels/ticket_lock.h"

#define LAT_CAP (1u << 20)
#define PROGRESS_NS 1000000000ull

struct opts {
	unsigned threads;
	double duration;
	int handover_max;           /* < 0: the lock's default */
	bool empty;
};

struct bench {
	struct opts o;
	struct loco_mgr *mgr;
	struct loco_thread *thr;    /* main thread: barrier, totals */
	struct loco_ticket_lock lk;
	struct loco_shared_region ctr;
	struct loco_atomic_var total;
	struct loco_barrier bar;
	uint32_t first, last;       /* lowest and highest compute id */
	unsigned nodes;
	_Atomic bool go;            /* workers start together */
	uint64_t end_ns;            /* written before go */
};

struct worker {
	pthread_t tid;
	struct bench *b;
	struct bench_lat lat;
	_Atomic uint64_t ops;
	struct loco_stats st;
	int err;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: loco-lockbench [--threads T] [--duration S] "
		"[--handover-max N] [--empty]\n"
		"  (plus --id/--hosts/--transport/--timeout-ms/--arena-mb)\n"
		"Every compute node runs T threads (default 1) that for S seconds\n"
		"(default 2) lock the ticket lock \"lk\", increment a remote counter\n"
		"(--empty: do nothing) and unlock. --handover-max bounds local\n"
		"handovers (default %u). Prints one JSON line per node.\n",
		LOCO_TICKET_LOCK_HANDOVER_MAX);
}

static int parse(struct opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "threads", required_argument, NULL, 't' },
		{ "duration", required_argument, NULL, 'd' },
		{ "handover-max", required_argument, NULL, 'm' },
		{ "empty", no_argument, NULL, 'e' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	char *end = NULL;
	while ((c = getopt_long(argc, argv, "t:d:h", lo, NULL)) != -1) {
		if (c == 't')
			o->threads = (unsigned)strtoul(optarg, &end, 10);
		else if (c == 'd')
			o->duration = strtod(optarg, &end);
		else if (c == 'm')
			o->handover_max = (int)strtol(optarg, &end, 10);
		else if (c == 'e')
			o->empty = true;
		else if (c == 'h')
			return 1;
		else
			return 2;
		if (end && *end)
			return 2;
	}
	bool ok = optind == argc && o->threads >= 1 && o->threads <= 64 &&
		  o->duration > 0;
	return ok ? 0 : 2;
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

static int one_op(struct bench *b, struct loco_thread *thr)
{
	int rc = loco_ticket_lock_lock(&b->lk, thr, -1);
	if (rc)
		return rc;
	rc = section(b, thr);
	int urc = loco_ticket_lock_unlock(&b->lk, thr, LOCO_FENCE_PAIR, b->last);
	return rc ? rc : urc;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct bench *b = w->b;
	struct loco_thread *thr;
	w->err = loco_thread_create(b->mgr, &thr);
	/* Acquire: pairs with the release in workers_run (end_ns). */
	while (!atomic_load_explicit(&b->go, memory_order_acquire))
		sched_yield();
	if (w->err)
		return NULL;
	uint64_t now = loco_now_ns();
	while (!w->err && now < b->end_ns) {
		uint64_t t0 = now;
		w->err = one_op(b, thr);
		now = loco_now_ns();
		bench_lat_add(&w->lat, now - t0);
		/* Relaxed: a counter the main thread samples for progress. */
		atomic_fetch_add_explicit(&w->ops, 1, memory_order_relaxed);
	}
	loco_thread_stats(thr, &w->st);
	loco_thread_destroy(thr);
	return NULL;
}

static uint64_t ops_now(struct worker *w, unsigned n)
{
	uint64_t sum = 0;
	for (unsigned i = 0; i < n; i++)
		/* Relaxed: progress only. */
		sum += atomic_load_explicit(&w[i].ops, memory_order_relaxed);
	return sum;
}

/* Start the workers together, print progress each second, join them. */
static int workers_run(struct bench *b, struct worker *w)
{
	unsigned n = b->o.threads, started = 0;
	int rc = 0;
	for (unsigned i = 0; i < n && !rc; i++) {
		w[i] = (struct worker){ .b = b };
		rc = bench_lat_init(&w[i].lat, LAT_CAP);
	}
	for (; started < n && !rc; started++)
		if (pthread_create(&w[started].tid, NULL, worker_main, &w[started]))
			rc = -EAGAIN;
	b->end_ns = rc ? 0 : loco_now_ns() + (uint64_t)(b->o.duration * 1e9);
	/* Release: pairs with the acquire in worker_main. */
	atomic_store_explicit(&b->go, true, memory_order_release);
	while (loco_now_ns() + PROGRESS_NS < b->end_ns) {
		struct timespec ts = { 1, 0 };
		nanosleep(&ts, NULL);
		fprintf(stderr, "lockbench: node %u: %llu ops\n", loco_mgr_id(b->mgr),
			(unsigned long long)ops_now(w, n));
	}
	for (unsigned i = 0; i < started; i++) {
		pthread_join(w[i].tid, NULL);
		rc = rc ? rc : w[i].err;
	}
	return rc;
}

/* ---- totals and report ---------------------------------------------------- */

static void stats_add(struct loco_stats *d, const struct loco_stats *s)
{
	d->reads += s->reads;
	d->writes += s->writes;
	d->cas += s->cas;
	d->faa += s->faa;
	d->bytes_read += s->bytes_read;
	d->bytes_written += s->bytes_written;
	d->doorbells += s->doorbells;
	d->rtts += s->rtts;
	d->fences += s->fences;
}

/* Sum every node's ops in "total"; the counter must equal the sum. */
static int cluster_total(struct bench *b, uint64_t ops, uint64_t *sum,
			 bool *conserved)
{
	uint64_t old, ctr = 0;
	int rc = loco_atomic_var_faa(&b->total, b->thr, ops, &old);
	if (!rc)
		rc = loco_barrier_wait(&b->bar, b->thr, -1);
	if (!rc)
		rc = loco_atomic_var_read(&b->total, b->thr, sum);
	if (!rc && !b->o.empty)
		rc = loco_shared_region_read(&b->ctr, b->thr, b->last, 0, &ctr, 8);
	*conserved = b->o.empty || ctr == *sum;
	return rc;
}

static void report(struct bench *b, struct worker *w, double secs)
{
	struct bench_lat all;
	struct bench_result r = {
		.app = "lockbench", .transport = loco_mgr_transport(b->mgr),
		.nodes = b->nodes, .threads = b->o.threads, .duration_s = secs,
	};
	struct loco_ticket_lock_stats ls;
	uint64_t sum = 0;
	bool conserved = false;
	if (bench_lat_init(&all, LAT_CAP * b->o.threads))
		return;
	for (unsigned i = 0; i < b->o.threads; i++) {
		r.ops += ops_now(&w[i], 1);
		stats_add(&r.stats, &w[i].st);
		for (size_t k = 0; k < w[i].lat.n; k++)
			bench_lat_add(&all, w[i].lat.ns[k]);
	}
	r.p50_us = bench_lat_pct_us(&all, 50);
	r.p99_us = bench_lat_pct_us(&all, 99);
	int rc = cluster_total(b, r.ops, &sum, &conserved);
	loco_ticket_lock_stats(&b->lk, &ls);
	bench_json_begin(stdout, &r);
	printf(",\"node\":%u,\"cluster_ops\":%llu,\"cluster_ops_per_s\":%.1f,"
	       "\"acquires\":%llu,\"handovers\":%llu,\"conserved\":%s",
	       loco_mgr_id(b->mgr), (unsigned long long)sum, (double)sum / secs,
	       (unsigned long long)ls.acquires, (unsigned long long)ls.handovers,
	       !rc && conserved ? "true" : "false");
	bench_json_end(stdout);
	bench_lat_fini(&all);
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
	rc = loco_shared_region_init(&b->ctr, b->mgr, NULL, "ctr", 64, 0);
	if (rc)
		goto fini_lock;
	rc = loco_atomic_var_init(&b->total, b->mgr, NULL, "total", b->first, 0);
	if (rc)
		goto fini_ctr;
	rc = loco_barrier_init(&b->bar, b->mgr, NULL, "bar", 0);
	if (!rc)
		return 0;
	loco_atomic_var_fini(&b->total);
fini_ctr:
	loco_shared_region_fini(&b->ctr);
fini_lock:
	loco_ticket_lock_fini(&b->lk);
	return rc;
}

static void channels_fini(struct bench *b)
{
	loco_barrier_fini(&b->bar);
	loco_atomic_var_fini(&b->total);
	loco_shared_region_fini(&b->ctr);
	loco_ticket_lock_fini(&b->lk);
}

static int run(struct bench *b)
{
	struct worker *w = calloc(b->o.threads, sizeof(*w));
	if (!w)
		return -ENOMEM;
	int rc = loco_mgr_wait_ready(b->mgr, -1);
	if (!rc)
		rc = loco_barrier_wait(&b->bar, b->thr, -1);
	uint64_t t0 = loco_now_ns();
	if (!rc)
		rc = workers_run(b, w);
	double secs = (double)(loco_now_ns() - t0) / 1e9;
	if (!rc)
		report(b, w, secs);
	for (unsigned i = 0; i < b->o.threads; i++)
		bench_lat_fini(&w[i].lat);
	free(w);
	/* Nobody leaves while others still use its memory. */
	int frc = loco_barrier_wait(&b->bar, b->thr, -1);
	return rc ? rc : frc;
}

int main(int argc, char **argv)
{
	struct bench b = { .o = { .threads = 1, .duration = 2,
				  .handover_max = -1 } };
	struct local_node ln;
	int rc = local_node_start(&ln, &argc, argv, "loco-lockbench", "shm");
	if (rc)
		return rc;
	rc = parse(&b.o, argc, argv);
	if (rc) {
		usage(rc == 1 ? stdout : stderr);
		local_node_stop(&ln);
		return rc == 1 ? 0 : 2;
	}
	b.mgr = ln.mgr;
	uint64_t members = loco_mgr_compute_peers(b.mgr) |
			   UINT64_C(1) << loco_mgr_id(b.mgr);
	b.first = (uint32_t)__builtin_ctzll(members);
	b.last = 63 - (uint32_t)__builtin_clzll(members);
	b.nodes = (unsigned)__builtin_popcountll(members);
	rc = loco_thread_create(b.mgr, &b.thr);
	if (!rc && !(rc = channels_init(&b))) {
		rc = run(&b);
		channels_fini(&b);
	}
	if (rc)
		fprintf(stderr, "loco-lockbench: %s\n", loco_strerror(rc));
	loco_thread_destroy(b.thr);
	local_node_stop(&ln);
	return rc ? 1 : 0;
}
