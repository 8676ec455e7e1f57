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
#include "channels/queue.h"

#define LAT_CAP (1u << 20)
#define PROGRESS_NS 1000000000ull

struct opts {
	unsigned threads;
	double duration;
	uint32_t slots;
};

struct bench {
	struct opts o;
	struct loco_mgr *mgr;
	struct loco_thread *thr;     /* main thread: barrier, totals */
	struct loco_queue q;
	struct loco_atomic_var total;
	struct loco_barrier bar;
	unsigned nodes;
	_Atomic bool go;             /* workers start together */
	uint64_t end_ns;             /* written before go */
};

struct worker {
	pthread_t tid;
	struct bench *b;
	unsigned idx;
	struct bench_lat lat;
	_Atomic uint64_t ops;
	uint64_t empty;
	struct loco_stats st;
	int err;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: loco-queuebench [--threads T] [--duration S] "
		"[--slots N]\n"
		"  (plus --id/--hosts/--transport/--timeout-ms/--arena-mb)\n"
		"Every compute node runs T threads (default 1) that for S seconds\n"
		"(default 2) push a value, then pop one, on the queue \"q\" of N\n"
		"cells per node (default 4096). One JSON line per node.\n");
}

static int parse(struct opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "threads", required_argument, NULL, 't' },
		{ "duration", required_argument, NULL, 'd' },
		{ "slots", required_argument, NULL, 's' },
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
		else if (c == 's')
			o->slots = (uint32_t)strtoul(optarg, &end, 10);
		else
			return c == 'h' ? 1 : 2;
		if (end && *end)
			return 2;
	}
	bool ok = optind == argc && o->threads >= 1 && o->threads <= 64 &&
		  o->duration > 0 && o->slots >= 1;
	return ok ? 0 : 2;
}

/* ---- workers ------------------------------------------------------------ */

/* One push (K even) or pop (K odd); a timed op, counted if it moved a
 * value. */
static int one_op(struct worker *w, struct loco_thread *thr, uint64_t k)
{
	struct bench *b = w->b;
	uint32_t v = (uint32_t)(loco_mgr_id(b->mgr) << 24 | w->idx << 16 |
				(k & 0xffff));
	uint64_t t0 = loco_now_ns();
	int rc = k % 2 ? loco_queue_try_pop(&b->q, thr, &v) :
			 loco_queue_push(&b->q, thr, v, -1);
	bench_lat_add(&w->lat, loco_now_ns() - t0);
	if (rc == -ENODATA) {
		w->empty++;
		return 0;
	}
	if (!rc)
		/* Relaxed: a counter the main thread samples for progress. */
		atomic_fetch_add_explicit(&w->ops, 1, memory_order_relaxed);
	return rc;
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
	for (uint64_t k = 0; !w->err && loco_now_ns() < b->end_ns; k++)
		w->err = one_op(w, thr, k);
	loco_thread_stats(thr, &w->st);
	loco_thread_destroy(thr);
	return NULL;
}

static uint64_t ops_of(struct worker *w)
{
	/* Relaxed: progress and totals after the join. */
	return atomic_load_explicit(&w->ops, memory_order_relaxed);
}

/* Start the workers together, print progress each second, join them. */
static int workers_run(struct bench *b, struct worker *w)
{
	unsigned n = b->o.threads, started = 0;
	int rc = 0;
	for (unsigned i = 0; i < n && !rc; i++) {
		w[i] = (struct worker){ .b = b, .idx = i };
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
		uint64_t sum = 0;
		nanosleep(&ts, NULL);
		for (unsigned i = 0; i < n; i++)
			sum += ops_of(&w[i]);
		fprintf(stderr, "queuebench: node %u: %llu ops\n",
			loco_mgr_id(b->mgr), (unsigned long long)sum);
	}
	for (unsigned i = 0; i < started; i++) {
		pthread_join(w[i].tid, NULL);
		rc = rc ? rc : w[i].err;
	}
	return rc;
}

/* ---- report ---------------------------------------------------------------- */

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

static void report(struct bench *b, struct worker *w, double secs)
{
	struct bench_lat all;
	struct bench_result r = {
		.app = "queuebench", .transport = loco_mgr_transport(b->mgr),
		.nodes = b->nodes, .threads = b->o.threads, .duration_s = secs,
	};
	uint64_t empty = 0, sum = 0, old;
	if (bench_lat_init(&all, LAT_CAP * b->o.threads))
		return;
	for (unsigned i = 0; i < b->o.threads; i++) {
		r.ops += ops_of(&w[i]);
		empty += w[i].empty;
		stats_add(&r.stats, &w[i].st);
		for (size_t k = 0; k < w[i].lat.n; k++)
			bench_lat_add(&all, w[i].lat.ns[k]);
	}
	r.p50_us = bench_lat_pct_us(&all, 50);
	r.p99_us = bench_lat_pct_us(&all, 99);
	int rc = loco_atomic_var_faa(&b->total, b->thr, r.ops, &old);
	if (!rc)
		rc = loco_barrier_wait(&b->bar, b->thr, -1);
	if (!rc)
		rc = loco_atomic_var_read(&b->total, b->thr, &sum);
	bench_json_begin(stdout, &r);
	printf(",\"node\":%u,\"empty_pops\":%llu,\"slots\":%u,\"cluster_ops\":%llu,"
	       "\"cluster_ops_per_s\":%.1f", loco_mgr_id(b->mgr),
	       (unsigned long long)empty, b->o.slots, (unsigned long long)sum,
	       rc ? 0.0 : (double)sum / secs);
	bench_json_end(stdout);
	bench_lat_fini(&all);
}

/* ---- set-up -------------------------------------------------------------- */

static int channels_init(struct bench *b)
{
	uint64_t members = loco_mgr_compute_peers(b->mgr) |
			   UINT64_C(1) << loco_mgr_id(b->mgr);
	b->nodes = (unsigned)__builtin_popcountll(members);
	int rc = loco_queue_init(&b->q, b->mgr, NULL, "q", b->o.slots, 0);
	if (rc)
		return rc;
	rc = loco_atomic_var_init(&b->total, b->mgr, NULL, "total",
				  (uint32_t)__builtin_ctzll(members), 0);
	if (rc)
		goto fini_q;
	rc = loco_barrier_init(&b->bar, b->mgr, NULL, "bar", 0);
	if (!rc)
		return 0;
	loco_atomic_var_fini(&b->total);
fini_q:
	loco_queue_fini(&b->q);
	return rc;
}

static void channels_fini(struct bench *b)
{
	loco_barrier_fini(&b->bar);
	loco_atomic_var_fini(&b->total);
	loco_queue_fini(&b->q);
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
	int brc = loco_barrier_wait(&b->bar, b->thr, -1);
	return rc ? rc : brc;
}

int main(int argc, char **argv)
{
	struct bench b = { .o = { .threads = 1, .duration = 2, .slots = 4096 } };
	struct local_node ln;
	int rc = local_node_start(&ln, &argc, argv, "loco-queuebench", "shm");
	if (rc)
		return rc;
	rc = parse(&b.o, argc, argv);
	if (rc) {
		usage(rc == 1 ? stdout : stderr);
		local_node_stop(&ln);
		return rc == 1 ? 0 : 2;
	}
	b.mgr = ln.mgr;
	rc = loco_thread_create(b.mgr, &b.thr);
	if (!rc && !(rc = channels_init(&b))) {
		rc = run(&b);
		channels_fini(&b);
	}
	if (rc)
		fprintf(stderr, "loco-queuebench: %s\n", loco_strerror(rc));
	loco_thread_destroy(b.thr);
	local_node_stop(&ln);
	return rc ? 1 : 0;
}
