/* SPDX-License-Identifier: MIT */
/* loco-barrier: LOCO Fig. 1(b). Every compute node creates the barrier
 * "bar", waits until it is ready, then times N barrier waits one by one and
 * prints one JSON line with the latency percentiles. */
#include <stdio.h>
#include <stdlib.h>

#include "apps/common/bench.h"
#include "apps/common/opts.h"
#include <loco/channels/barrier.h>

#define PROG "loco-barrier"
#define PROGRESS_NS 1000000000ull

struct bench {
	struct loco_mgr *mgr;
	struct loco_thread *thr;
	struct loco_barrier bar;
	bool bar_ok;
	long iters;
	unsigned nodes;
	struct loco_stats stats;  /* over the timed waits only */
};

static void usage(FILE *f)
{
	fprintf(f, "usage: loco-barrier [--iters N] (plus node options: --id/--hosts/--transport/\n"
		"  --timeout-ms/--arena-mb/--cpu-bind)\n"
		"Every compute node waits N times (default 10000) on the barrier\n"
		"\"bar\" (LOCO Fig. 1) and times each wait; prints a JSON result\n"
		"line with p50/p99 latency in microseconds.\n");
}

static int run(struct bench *s, struct bench_lat *lat)
{
	struct loco_stats before;
	uint64_t start = loco_now_ns(), last = start;
	loco_thread_stats(s->thr, &before);
	for (long i = 0; i < s->iters; i++) {
		uint64_t t0 = loco_now_ns();
		int rc = loco_barrier_wait(&s->bar, s->thr, -1);
		if (rc) {
			fprintf(stderr, "barrier: wait %ld: %s\n", i,
				loco_strerror(rc));
			return rc;
		}
		uint64_t t1 = loco_now_ns();
		bench_lat_add(lat, t1 - t0);
		if (t1 - last >= PROGRESS_NS) {
			fprintf(stderr, "barrier: node %u: %ld/%ld waits\n",
				loco_mgr_id(s->mgr), i + 1, s->iters);
			last = t1;
		}
	}
	loco_thread_stats(s->thr, &s->stats);
	bench_stats_sub(&s->stats, &before);
	return 0;
}

static void report(struct bench *s, struct bench_lat *lat, double secs)
{
	struct bench_result r = {
		.app = "barrier", .transport = loco_mgr_transport(s->mgr),
		.nodes = s->nodes, .threads = 1, .duration_s = secs,
		.ops = (uint64_t)s->iters, .p50_us = bench_lat_pct_us(lat, 50),
		.p99_us = bench_lat_pct_us(lat, 99), .stats = s->stats,
	};
	bench_json_begin(stdout, &r);
	printf(",\"node\":%u", loco_mgr_id(s->mgr));
	bench_json_end(stdout);
}

/* Manager, thread, barrier "bar", wait_ready. */
static int setup(struct bench *s, const struct loco_opts *opts)
{
	int rc = loco_mgr_create(opts, &s->mgr);
	if (rc)
		return rc;
	s->nodes = (unsigned)__builtin_popcountll(loco_mgr_compute_peers(s->mgr)) + 1;
	rc = loco_thread_create(s->mgr, &s->thr);
	if (!rc)
		rc = loco_barrier_init(&s->bar, s->mgr, NULL, "bar", 0);
	s->bar_ok = !rc;
	if (!rc)
		rc = loco_mgr_wait_ready(s->mgr, -1);
	return rc;
}

int main(int argc, char **argv)
{
	struct bench s = { .iters = 10000 };
	struct loco_opts opts;
	int rc = bench_iters_options(&argc, argv, &opts, &s.iters, PROG, usage);
	if (rc >= 0)
		return rc;
	struct bench_lat lat;
	if (bench_lat_init(&lat, (size_t)s.iters))
		return 1;
	rc = setup(&s, &opts);
	uint64_t t0 = loco_now_ns();
	if (!rc)
		rc = run(&s, &lat);
	double secs = (double)(loco_now_ns() - t0) / 1e9;
	if (s.thr) {
		int drc = loco_thread_destroy(s.thr);
		rc = rc ? rc : drc;
	}
	if (!rc)
		report(&s, &lat, secs);
	else
		fprintf(stderr, PROG ": %s\n", loco_strerror(rc));
	if (s.bar_ok)
		loco_barrier_fini(&s.bar);
	loco_mgr_destroy(s.mgr);
	bench_lat_fini(&lat);
	return rc ? 1 : 0;
}
