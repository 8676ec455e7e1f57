/* SPDX-License-Identifier: MIT */
/* loco-window: an atomic_var FAA loop keeping W operations outstanding per
 * thread, for each W given (LOCO's small vs large window). Meant for
 * shm-weak with an emulated round trip (default 10 us here), where the
 * window decides throughput: W in flight per RTT. Prints one JSON line per
 * window and a final line with the ratio of the last to the first. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/common/bench.h"
#include "apps/common/local.h"
#include "apps/common/opts.h"
#include <loco/channels/atomic_var.h>

#define MAX_WINDOWS 8

struct win_opts {
	unsigned windows[MAX_WINDOWS];
	unsigned nwin;
	double duration;
};

struct slot {
	struct loco_ack ack;
	uint64_t old;
	uint64_t t0;
};

/* Keep W FAAs in flight for DURATION seconds; returns completed ops. */
static int window_run(struct loco_atomic_var *av, struct loco_thread *thr,
		      unsigned w, double duration, struct bench_lat *lat,
		      uint64_t *ops)
{
	struct slot *s = calloc(w, sizeof(*s));
	if (!s)
		return -ENOMEM;
	uint64_t end = loco_now_ns() + (uint64_t)(duration * 1e9), n = 0;
	int rc = 0;
	for (unsigned i = 0; i < w && !rc; i++) {
		s[i].t0 = loco_now_ns();
		rc = loco_atomic_var_post_faa(av, thr, 1, &s[i].old, &s[i].ack);
	}
	for (unsigned i = 0; !rc; i = (i + 1) % w) {
		rc = loco_ack_wait(thr, &s[i].ack, -1);  /* the oldest in flight */
		if (rc)
			break;
		uint64_t now = loco_now_ns();
		bench_lat_add(lat, now - s[i].t0);
		n++;
		if (now > end)
			break;
		loco_ack_clear(&s[i].ack);
		s[i].t0 = now;
		rc = loco_atomic_var_post_faa(av, thr, 1, &s[i].old, &s[i].ack);
	}
	if (!rc)
		rc = loco_fence(thr, LOCO_FENCE_THREAD, 0);  /* drain the rest */
	free(s);
	*ops = n;
	return rc;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: loco-window [--windows W1,W2,...] [--duration S]\n"
		"  (plus the node options --id/--hosts/--transport/--timeout-ms/\n"
		"  --arena-mb/--cpu-bind)\n"
		"An FAA loop on one atomic_var keeping W operations in flight, for\n"
		"each W in 1..128 (at most %d; default 3,128), S seconds each\n"
		"(default 2). Run alone: shm-weak with LOCO_SHM_WEAK_RTT_NS=10000\n"
		"unless set; under loco-run: its --transport. One JSON line per\n"
		"window, then the ratio of the last window's rate to the first's.\n",
		MAX_WINDOWS);
}

/* "W1,W2,...": 1..MAX_WINDOWS windows, each in 1..128. */
static int parse_windows(struct win_opts *o, const char *arg, char *expect)
{
	char buf[256];
	snprintf(expect, BENCH_EXPECT_MAX, "1 to %d windows in 1..128, "
		 "comma-separated", MAX_WINDOWS);
	if (strlen(arg) >= sizeof(buf))
		return -1;
	strcpy(buf, arg);
	o->nwin = 0;
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (o->nwin == MAX_WINDOWS ||
		    bench_parse_uint(tok, 1, 128, &o->windows[o->nwin], NULL))
			return -1;
		o->nwin++;
	}
	return o->nwin ? 0 : -1;
}

static int parse_one(void *arg, int c, const char *s, char *expect)
{
	struct win_opts *o = arg;
	switch (c) {
	case 'w': return parse_windows(o, s, expect);
	case 'd': return bench_parse_duration(s, &o->duration, expect);
	default: return -1;
	}
}

static int parse(void *arg, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "windows", required_argument, NULL, 'w' },
		{ "duration", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	return bench_getopt(argc, argv, "w:d:h", lo, parse_one, arg,
			    "loco-window");
}

static void report(struct loco_mgr *mgr, unsigned w, double secs,
		   uint64_t ops, struct bench_lat *lat, const struct loco_stats *st)
{
	struct bench_result r = {
		.app = "window", .transport = loco_mgr_transport(mgr),
		.nodes = 1, .threads = 1, .duration_s = secs, .ops = ops,
		.p50_us = bench_lat_pct_us(lat, 50),
		.p99_us = bench_lat_pct_us(lat, 99), .stats = *st,
	};
	bench_json_begin(stdout, &r);
	/* Only shm-weak emulates a round trip; other transports have their
	 * own (shm: none to speak of, verbs: the network's). */
	const char *rtt = getenv("LOCO_SHM_WEAK_RTT_NS");
	bool weak = !strcmp(r.transport, "shm-weak");
	printf(",\"window\":%u,\"rtt_ns\":%s", w, weak && rtt ? rtt : "null");
	bench_json_end(stdout);
}

/* Every window of O (a struct win_opts) on MGR, in turn. */
static int run_all(void *arg, struct loco_mgr *mgr)
{
	const struct win_opts *o = arg;
	struct loco_atomic_var av;
	struct loco_thread *thr;
	double rate[MAX_WINDOWS];
	int rc = loco_atomic_var_init_ex(&av, mgr, NULL, "window",
					 loco_mgr_id(mgr), 0,
					 LOCO_REGION_REMOTE_ATOMIC);
	if (rc)
		return rc;
	if (!(rc = loco_mgr_wait_ready(mgr, -1)) &&
	    !(rc = loco_thread_create(mgr, &thr))) {
		for (unsigned i = 0; i < o->nwin && !rc; i++) {
			struct bench_lat lat;
			struct loco_stats s0, d;
			uint64_t ops = 0, t0 = loco_now_ns();
			if ((rc = bench_lat_init(&lat, 1 << 22)))
				break;
			loco_thread_stats(thr, &s0);
			rc = window_run(&av, thr, o->windows[i], o->duration, &lat, &ops);
			double secs = (double)(loco_now_ns() - t0) / 1e9;
			loco_thread_stats(thr, &d);
			bench_stats_sub(&d, &s0);
			if (!rc)
				report(mgr, o->windows[i], secs, ops, &lat, &d);
			rate[i] = (double)ops / secs;
			bench_lat_fini(&lat);
		}
		int drc = loco_thread_destroy(thr);
		rc = rc ? rc : drc;
	}
	if (!rc && o->nwin > 1)
		printf("{\"app\":\"window-ratio\",\"small\":%u,\"large\":%u,"
		       "\"speedup\":%.2f}\n", o->windows[0], o->windows[o->nwin - 1],
		       rate[o->nwin - 1] / rate[0]);
	loco_atomic_var_fini(&av);
	return rc;
}

static const struct local_prog prog = {
	.name = "loco-window", .transport = "shm-weak", .usage = usage,
	.parse = parse, .run = run_all,
};

int main(int argc, char **argv)
{
	struct win_opts o = { .windows = { 3, 128 }, .nwin = 2, .duration = 2 };
	setenv("LOCO_SHM_WEAK_RTT_NS", "10000", 0);
	return local_main(&prog, &o, argc, argv);
}
