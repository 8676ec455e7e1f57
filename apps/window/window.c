/* SPDX-License-Identifier: MIT */
/* loco-window: an atomic_var FAA loop keeping W operations outstanding per
 * thread, for each W given (LOCO's small vs large window). Meant for
 * shm-weak with an emulated round trip (default 10 us here), where the
 * window decides throughput: W in flight per RTT. Prints one JSON line per
 * window and a final line with the ratio of the last to the first. */
#include <errno.h>
#include <stdbool.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/common/bench.h"
#include "apps/common/local.h"
#include "channels/atomic_var.h"

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

static int parse(struct win_opts *o, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "windows", required_argument, NULL, 'w' },
		{ "duration", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	char *end;
	while ((c = getopt_long(argc, argv, "w:d:h", opts, NULL)) != -1) {
		if (c == 'd' && (o->duration = strtod(optarg, &end)) > 0 && !*end)
			continue;
		if (c == 'w') {
			o->nwin = 0;
			for (char *tok = strtok(optarg, ","); tok && o->nwin < MAX_WINDOWS;
			     tok = strtok(NULL, ",")) {
				unsigned long v = strtoul(tok, &end, 10);
				if (*end || !v || v > 128) {
					fprintf(stderr, "loco-window: bad window '%s' "
						"(1..128)\n", tok);
					return 2;
				}
				o->windows[o->nwin++] = (unsigned)v;
			}
			continue;
		}
		if (c == 'h') {
			printf("usage: loco-window [--windows 3,128] [--duration S]\n"
			       "  [--transport T] (run alone: shm-weak with "
			       "LOCO_SHM_WEAK_RTT_NS=10000 by default;\n"
			       "  under loco-run: its --transport)\n");
			exit(0);
		}
		fprintf(stderr, "loco-window: bad option\n");
		return 2;
	}
	return optind == argc && o->nwin ? 0 : 2;
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

static int run_all(struct loco_mgr *mgr, const struct win_opts *o)
{
	struct loco_atomic_var av;
	struct loco_thread *thr;
	double rate[MAX_WINDOWS];
	int rc = loco_atomic_var_init(&av, mgr, NULL, "window", loco_mgr_id(mgr), 0);
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
		loco_thread_destroy(thr);
	}
	if (!rc && o->nwin > 1)
		printf("{\"app\":\"window-ratio\",\"small\":%u,\"large\":%u,"
		       "\"speedup\":%.2f}\n", o->windows[0], o->windows[o->nwin - 1],
		       rate[o->nwin - 1] / rate[0]);
	loco_atomic_var_fini(&av);
	return rc;
}

int main(int argc, char **argv)
{
	struct win_opts o = { .windows = { 3, 128 }, .nwin = 2, .duration = 2 };
	struct local_node ln;
	setenv("LOCO_SHM_WEAK_RTT_NS", "10000", 0);
	int rc = local_node_start(&ln, &argc, argv, "loco-window", "shm-weak");
	if (rc)
		return rc;
	if (parse(&o, argc, argv)) {
		local_node_stop(&ln);
		return 2;
	}
	rc = run_all(ln.mgr, &o);
	if (rc)
		fprintf(stderr, "loco-window: %s\n", loco_strerror(rc));
	local_node_stop(&ln);
	return rc ? 1 : 0;
}
