/* SPDX-License-Identifier: MIT */
/* loco-smoke: every compute node FAAs one shared counter ITERS times, then
 * announces it is done on a second counter; when all are done, each node
 * reads the total and checks it is exactly nodes x iters. The counters live
 * on the first memory node if there is one, else on the lowest compute
 * node (through a channel). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/common/bench.h"
#include "apps/common/opts.h"
#include <loco/channel.h>
#include <loco/wait.h>

#define PROG "loco-smoke"
#define CTR_TOTAL 0
#define CTR_DONE 8

struct smoke {
	struct loco_mgr *mgr;
	struct loco_thread *thr;
	struct loco_channel ch;
	struct loco_rregion ctr;
	unsigned nodes;
	long iters;
	struct loco_stats stats;  /* over the FAA loop only */
};

static int lowest(uint64_t mask)
{
	return mask ? __builtin_ctzll(mask) : -1;
}

/* Where the counters live: a memory node region, or the channel region
 * of the lowest compute node. */
static int counters_attach(struct smoke *s)
{
	/* The counters are FAA'd and read, nothing else. */
	const unsigned access = LOCO_REGION_REMOTE_READ |
				LOCO_REGION_REMOTE_ATOMIC;
	int mem = loco_mgr_first_memnode(s->mgr);
	if (mem >= 0)
		return loco_region_open_ex(s->mgr, (uint32_t)mem, "smoke.ctr", 64,
					   access, &s->ctr);
	int rc = loco_channel_init(&s->ch, s->mgr, NULL, "smoke", 0, NULL);
	if (!rc)
		rc = loco_channel_add_region_ex(&s->ch, "ctr", 64, access, NULL);
	int idx = rc ? rc : loco_channel_expect(&s->ch, "ctr", 64, 0);
	if (idx < 0)
		return idx;
	rc = loco_channel_join(&s->ch);
	if (!rc)
		rc = loco_mgr_wait_ready(s->mgr, -1);
	if (rc)
		return rc;
	uint64_t all = bench_members(s->mgr);
	s->ctr = *loco_channel_remote(&s->ch, (unsigned)idx,
				      (uint32_t)lowest(all));
	return 0;
}

static int run(struct smoke *s, struct bench_lat *lat)
{
	for (long i = 0; i < s->iters; i++) {
		uint64_t old, t0 = loco_now_ns();
		int rc = loco_faa(s->thr, &s->ctr, CTR_TOTAL, 1, &old);
		if (rc)
			return rc;
		bench_lat_add(lat, loco_now_ns() - t0);
	}
	loco_thread_stats(s->thr, &s->stats);
	uint64_t old;
	return loco_faa(s->thr, &s->ctr, CTR_DONE, 1, &old);
}

/* Wait for every node's done mark, then read the total. */
static int collect(struct smoke *s, uint64_t *total)
{
	struct loco_wait w;
	uint64_t done = 0;
	loco_wait_init(&w, s->mgr, -1);
	while (done < s->nodes) {
		int rc = loco_read(s->thr, &s->ctr, CTR_DONE, &done, 8);
		if (!rc && done < s->nodes && (rc = loco_wait_step(&w)))
			fprintf(stderr, "smoke: only %llu of %u nodes finished\n",
				(unsigned long long)done, s->nodes);
		if (rc)
			return rc;
	}
	return loco_read(s->thr, &s->ctr, CTR_TOTAL, total, 8);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: loco-smoke [--iters N] (plus node options: --id/--hosts/--transport/\n"
		"  --timeout-ms/--arena-mb/--cpu-bind)\n"
		"Every compute node FAAs a shared counter N times; the\n"
		"total is checked. Prints a JSON result line.\n");
}

static void report(struct smoke *s, struct bench_lat *lat, double secs,
		   uint64_t total)
{
	struct bench_result r = {
		.app = "smoke", .transport = loco_mgr_transport(s->mgr),
		.nodes = s->nodes, .threads = 1, .duration_s = secs,
		.ops = (uint64_t)s->iters, .p50_us = bench_lat_pct_us(lat, 50),
		.p99_us = bench_lat_pct_us(lat, 99), .stats = s->stats,
	};
	uint64_t expect = (uint64_t)s->nodes * (uint64_t)s->iters;
	printf("smoke: node %u: counter = %llu, expected %llu: %s\n",
	       loco_mgr_id(s->mgr), (unsigned long long)total,
	       (unsigned long long)expect, total == expect ? "ok" : "WRONG");
	bench_json_begin(stdout, &r);
	printf(",\"total\":%llu,\"expected\":%llu,\"ok\":%s",
	       (unsigned long long)total, (unsigned long long)expect,
	       total == expect ? "true" : "false");
	bench_json_end(stdout);
}

int main(int argc, char **argv)
{
	struct smoke s = { .iters = 10000 };
	struct loco_opts opts;
	int rc = bench_iters_options(&argc, argv, &opts, &s.iters, PROG, usage);
	if (rc >= 0)
		return rc;
	struct bench_lat lat;
	if (bench_lat_init(&lat, (size_t)s.iters) ||
	    loco_mgr_create(&opts, &s.mgr))
		return 1;
	s.nodes = (unsigned)__builtin_popcountll(loco_mgr_compute_peers(s.mgr)) + 1;
	rc = loco_thread_create(s.mgr, &s.thr);
	if (!rc)
		rc = counters_attach(&s);
	uint64_t total = 0, t0 = loco_now_ns();
	if (!rc)
		rc = run(&s, &lat);
	double secs = (double)(loco_now_ns() - t0) / 1e9;
	if (!rc)
		rc = collect(&s, &total);
	if (!rc)
		report(&s, &lat, secs, total);
	else
		fprintf(stderr, PROG ": %s\n", loco_strerror(rc));
	bool ok = !rc && total == (uint64_t)s.nodes * (uint64_t)s.iters;
	if (loco_thread_destroy(s.thr))
		ok = false;
	if (s.ch.mgr)
		loco_channel_fini(&s.ch);
	loco_mgr_destroy(s.mgr);
	bench_lat_fini(&lat);
	return ok ? 0 : 1;
}
