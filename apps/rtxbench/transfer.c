/* SPDX-License-Identifier: MIT */
/* loco-rtx-transfer: bank transfers between accounts on a memory node,
 * each transfer one rTX over two random accounts (or, --mode lock, two
 * CAS spin locks), on every compute node, for --duration seconds. Nodes
 * may be killed at any time (tools/loco-run --kill, LOCO_CRASH_AT): at the
 * end one surviving node (--reporter, else the lowest) repairs what the
 * dead left, checks that the total is conserved and prints one JSON line
 * (apps/common/bench.h)
 * with "conserved", "repairs", "locks_held" and the data pool audit. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/common/local.h"
#include "apps/common/opts.h"
#include "apps/rtxbench/xfer.h"

#define PROG "loco-rtx-transfer"
#define LAT_CAP (1u << 20)

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [--accounts N] [--balance B] [--max-amount A]\n"
		"         [--duration S] [--threads T] [--mode rtx|lock]\n"
		"         [--drift-ms D] [--no-opt1] [--prelock] [--update]\n"
		"         [--touch-pct P]\n"
		"         [--mem-nodes first|all] [--blocks N]\n"
		"         [--timeline FILE.csv] [--hb-ms MS] [--dead-ms MS]\n"
		"         [--seed N] [--reporter ID] [--count-commits]\n"
		"         [--reclaim-dead]\n"
		"         [loco options: --id --hosts --transport ...]\n"
		"Defaults: 1000 accounts of 1000, amounts 1..100, 5 s, 2 threads,\n"
		"rtx, drift 8 ms, heartbeat 10 ms, dead after 500 ms without one.\n"
		"--prelock: OPT2 pre-locks (both accounts locked at first access).\n"
		"--update: read both accounts with loco_rtx_read_for_update (the\n"
		"write set named at the read: logged locks with the data READs,\n"
		"a 4-round-trip commit).\n"
		"--touch-pct: P%% of the ops rewrite one account unchanged (a\n"
		"one-object write set: an OPT1 commit without log).\n"
		"--blocks: data blocks per hosting node (default 8 per account\n"
		"there, at least 4096 and 192 per thread of the cluster); every\n"
		"node must pass the same.\n"
		"--count-commits: every transfer also adds one to its thread's\n"
		"commit counter; the reporter checks that no acknowledged transfer\n"
		"is missing (after memory nodes' power cuts: docs/durability.md).\n"
		"--reclaim-dead (rtx mode): during the run, a node silent for\n"
		"--dead-ms is fenced and, once fenced, its thread slots are\n"
		"adopted by the lowest compute node still running (their data\n"
		"chunks back in the pool; without it they come back only at the\n"
		"end); listed in the result's \"reclaimed\". A node that cannot be\n"
		"fenced is never adopted. Off by default: a live node stalled\n"
		"past --dead-ms on a busy host is then fenced mid-run.\n"
		"A memory node that dies is waited for; the workers go on when it\n"
		"is back (--no-persist, tests only: rtx without its persistence\n"
		"points, which a power cut must expose).\n"
		"Run on every compute node (tools/loco-run -m 1 -n 4 -- " PROG ").\n"
		"After the run one node repairs what the dead left, audits and\n"
		"prints the JSON result line: --reporter ID if that node finished,\n"
		"else the lowest node that did. Exit 1 if the total is not\n"
		"conserved or locks stay held; 3 if this node was fenced (the\n"
		"others took it for dead: it is then counted as dead).\n");
}

/* Unsigned options of at most 32 bits: the field each one sets and its
 * range. */
static unsigned *uint_field(struct xfer_opts *o, int c, unsigned *lo,
			    unsigned *hi)
{
	switch (c) {
	case 'a': *lo = 2; *hi = 1u << 24; return &o->accounts;
	case 'A': *lo = 1; *hi = 1000000000; return &o->max_amount;
	case 't': *lo = 1; *hi = XFER_MAX_THREADS; return &o->threads;
	case 'D': *lo = 1; *hi = 60000; return &o->drift_ms;
	case 'H': *lo = 1; *hi = 10000; return &o->hb_ms;
	case 'X': *lo = 10; *hi = 600000; return &o->dead_ms;
	case 'u': *lo = 0; *hi = 100; return &o->touch_pct;
	case 'R': *lo = 0; *hi = LOCO_MAX_NODES - 1; return &o->reporter;
	case 'B': *lo = 2 * LOCO_RTX_CHUNK_BLOCKS; *hi = 1u << 30;
		return &o->blocks;
	default: return NULL;
	}
}

static int parse_word(const char *arg, const char *a, const char *b,
		      bool *is_b, char *expect)
{
	*is_b = !strcmp(arg, b);
	if (*is_b || !strcmp(arg, a))
		return 0;
	snprintf(expect, BENCH_EXPECT_MAX, "%s or %s", a, b);
	return -1;
}

static int parse_one(void *arg, int c, const char *s, char *expect)
{
	struct xfer_opts *o = arg;
	unsigned lo, hi, *u = uint_field(o, c, &lo, &hi);
	bool b;
	int rc;
	if (u)
		return bench_parse_uint(s, lo, hi, u, expect);
	switch (c) {
	case 'b': return bench_parse_u64(s, 0, UINT64_C(1000000000000),
					 &o->balance, expect);
	case 'd': return bench_parse_double(s, 0.01, 3600, &o->duration, expect);
	case 's': return bench_parse_u64(s, 0, UINT64_MAX, &o->seed, expect);
	case 'm':
		rc = parse_word(s, "rtx", "lock", &b, expect);
		o->mode = b ? XFER_LOCK : XFER_RTX;
		return rc;
	case 'M': return parse_word(s, "first", "all", &o->all_mem, expect);
	case 'T': o->timeline = s; return 0;
	case 'n': o->no_opt1 = true; return 0;
	case 'P': o->prelock = true; return 0;
	case 'U': o->update = true; return 0;
	case 'C': o->count_commits = true; return 0;
	case 'N': o->no_persist = true; return 0;
	case 'K': o->reclaim_dead = true; return 0;
	default: return -1;
	}
}

static int parse(struct xfer_opts *o, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "accounts", required_argument, NULL, 'a' },
		{ "balance", required_argument, NULL, 'b' },
		{ "max-amount", required_argument, NULL, 'A' },
		{ "duration", required_argument, NULL, 'd' },
		{ "threads", required_argument, NULL, 't' },
		{ "mode", required_argument, NULL, 'm' },
		{ "drift-ms", required_argument, NULL, 'D' },
		{ "no-opt1", no_argument, NULL, 'n' },
		{ "prelock", no_argument, NULL, 'P' },
		{ "update", no_argument, NULL, 'U' },
		{ "touch-pct", required_argument, NULL, 'u' },
		{ "mem-nodes", required_argument, NULL, 'M' },
		{ "blocks", required_argument, NULL, 'B' },
		{ "timeline", required_argument, NULL, 'T' },
		{ "hb-ms", required_argument, NULL, 'H' },
		{ "dead-ms", required_argument, NULL, 'X' },
		{ "seed", required_argument, NULL, 's' },
		{ "reporter", required_argument, NULL, 'R' },
		{ "count-commits", no_argument, NULL, 'C' },
		{ "no-persist", no_argument, NULL, 'N' },
		{ "reclaim-dead", no_argument, NULL, 'K' },
		{ NULL, 0, NULL, 0 },
	};
	*o = (struct xfer_opts){ .accounts = 1000, .balance = 1000,
		.max_amount = 100, .duration = 5, .threads = 2,
		.drift_ms = 8, .hb_ms = 10, .dead_ms = 500,
		.seed = (uint64_t)time(NULL), .reporter = LOCO_MAX_NODES };
	if (bench_getopt(argc, argv, "", opts, parse_one, o, PROG))
		return 2;
	if (o->reclaim_dead && o->mode != XFER_RTX) {
		fprintf(stderr, PROG ": --reclaim-dead is for --mode rtx (the "
			"lock mode has no slots to adopt)\n");
		return 2;
	}
	return 0;
}

/* ---- cluster ------------------------------------------------------------- */

static void cluster_info(struct xfer *xf)
{
	const struct loco_hosts *h = loco_mgr_hosts(xf->mgr);
	xf->self = loco_mgr_id(xf->mgr);
	for (uint32_t id = 0; id <= h->max_id; id++)
		if (h->node[id].present && h->node[id].role == LOCO_ROLE_COMPUTE)
			xf->compute |= UINT64_C(1) << id;
	int m = loco_mgr_first_memnode(xf->mgr);
	xf->home = m >= 0 ? (uint32_t)m : (uint32_t)__builtin_ctzll(xf->compute);
}

static int mode_open(struct xfer *xf)
{
	if (xf->o.mode == XFER_LOCK)
		return xfer_lock_open(xf);
	return xfer_rtx_open(xf);
}

static void mode_close(struct xfer *xf)
{
	if (xf->rtx)
		xfer_rtx_close(xf);
	xf->rtx = NULL;
}

int xfer_wait_memory(struct xfer *xf)
{
	int rc = 0;
	for (uint64_t m = xf->mem | UINT64_C(1) << xf->home; m && !rc; m &= m - 1)
		rc = loco_peer_wait(xf->mgr, (uint32_t)__builtin_ctzll(m),
				    XFER_BACK_MS);
	if (rc)
		fprintf(stderr, PROG ": node %u: a memory node did not come back: "
			"%s\n", xf->self, loco_strerror(rc));
	return rc;
}

/* Opening balances (idempotent: an account is set only while NULL), again
 * after a memory node's death interrupted them. */
static int rtx_init_once(struct xfer *xf)
{
	struct loco_rtx_worker *w;
	struct loco_rtx_stats s;
	int rc = loco_rtx_worker_create(xf->rtx, xf->thr, &w);
	if (!rc) {
		rc = xfer_rtx_init(xf, w);
		loco_rtx_worker_stats(w, &s);
		xf->init_repairs += s.repairs;
		/* Relaxed: a counter for the heartbeats. */
		atomic_fetch_add_explicit(&xf->live_repairs, s.repairs,
					  memory_order_relaxed);
		int drc = loco_rtx_worker_destroy(w);
		rc = rc ? rc : drc;
	}
	return rc;
}

static int mode_init(struct xfer *xf)
{
	if (xf->o.mode == XFER_LOCK)
		return xfer_lock_init(xf);
	int rc;
	while ((rc = rtx_init_once(xf)) == -LOCO_EDOWN && !xfer_wait_memory(xf))
		;
	return rc;
}

/* ---- the measured phase -------------------------------------------------- */

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static void progress(struct xfer *xf, double t)
{
	/* Relaxed: a counter for a progress line. */
	uint64_t ops = atomic_load_explicit(&xf->live_ops, memory_order_relaxed);
	fprintf(stderr, PROG ": node %u: %.0f s, %llu transfers\n", xf->self,
		t, (unsigned long long)ops);
}

/* Publish this node's record; a memory node's death is waited out. */
static int publish(struct xfer *xf, enum xfer_state st)
{
	int rc;
	while ((rc = xfer_publish(xf, st)) == -LOCO_EDOWN &&
	       !(rc = xfer_wait_memory(xf)))
		;
	return rc;
}

/* Heartbeats until the duration is over. */
static int beat(struct xfer *xf)
{
	uint64_t t0 = loco_now_ns(), next_progress = 1;
	uint64_t end = t0 + (uint64_t)(xf->o.duration * 1e9);
	int rc = 0;
	while (!rc && loco_now_ns() < end) {
		sleep_ms(xf->o.hb_ms);
		rc = publish(xf, XFER_RUNNING);
		double t = (double)(loco_now_ns() - t0) / 1e9;
		if (xf->o.duration >= 10 && t >= (double)next_progress) {
			progress(xf, t);
			next_progress++;
		}
	}
	return rc;
}

static int run_phase(struct xfer *xf)
{
	pthread_t th[XFER_MAX_THREADS];
	struct xfer_warg wa[XFER_MAX_THREADS];
	void *(*fn)(void *) = xf->o.mode == XFER_RTX ? xfer_rtx_worker :
						       xfer_lock_worker;
	loco_mgr_stats(xf->mgr, &xf->st0);
	unsigned n = 0;
	pthread_t rth;
	struct xfer_warg rwa = { .xf = xf };
	bool reclaimer = false;
	int rc = publish(xf, XFER_RUNNING);
	for (; !rc && n < xf->o.threads; n++) {
		wa[n] = (struct xfer_warg){ .xf = xf, .idx = n };
		if (pthread_create(&th[n], NULL, fn, &wa[n]))
			break;
	}
	if (!rc && n == xf->o.threads && xf->o.reclaim_dead) {
		reclaimer = !pthread_create(&rth, NULL, xfer_reclaimer, &rwa);
		rc = reclaimer ? 0 : -EAGAIN;
	}
	if (!rc) {
		/* loco-run aims its faults at this line (ID@after:NODE:...). */
		fprintf(stderr, PROG ": node %u: measured phase begins\n",
			xf->self);
		rc = beat(xf);
	}
	/* Relaxed: a stop flag; the joins order everything after it. */
	atomic_store_explicit(&xf->stop, true, memory_order_relaxed);
	for (unsigned i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		if (!rc)
			rc = wa[i].rc;
	}
	if (reclaimer) {
		pthread_join(rth, NULL);
		rc = rc ? rc : rwa.rc;
	}
	loco_mgr_stats(xf->mgr, &xf->st1);
	return rc ? rc : n == xf->o.threads ? 0 : -EAGAIN;
}

/* ---- results ------------------------------------------------------------- */

/* The final record: counters, remote-op deltas, blocked latencies. */
static void final_rec(struct xfer *xf, struct bench_lat *lat)
{
	struct xfer_rec *r = &xf->rec;
	struct bench_lat bl, sl;
	bench_lat_init(&bl, LAT_CAP);
	bench_lat_init(&sl, LAT_CAP);
	r->hb_ms = xfer_realtime_ms();
	r->ops = r->aborts = r->lock_waits = r->blocked = r->stalls = 0;
	r->acked = r->unknown = r->outages = 0;
	r->repair_end_us = 0;
	r->repairs = xf->init_repairs + xf->reclaim_repairs;
	/* Relaxed: the reclaimer is joined. */
	r->reclaimed = atomic_load_explicit(&xf->live_reclaimed,
					    memory_order_relaxed);
	for (unsigned i = 0; i < xf->o.threads; i++) {
		struct xfer_wstats *w = &xf->ws[i];
		r->ops += w->ops;
		r->aborts += w->aborts;
		r->repairs += w->repairs;
		r->lock_waits += w->lock_waits;
		r->blocked += w->blocked;
		r->stalls += w->stalls;
		r->acked += w->acked;
		r->unknown += w->unknown;
		r->outages += w->outages;
		r->repair_end_us = xfer_min_set(r->repair_end_us,
						w->repair_end_us);
		bench_lat_append(lat, &w->lat);
		bench_lat_append(&bl, &w->blocked_lat);
		bench_lat_append(&sl, &w->stall_lat);
	}
	xfer_rec_stats(xf, &xf->st1);
	r->blocked_p99_us = (uint64_t)bench_lat_pct_us(&bl, 99);
	r->blocked_max_us = (uint64_t)bench_lat_pct_us(&bl, 100);
	r->stall_p50_us = (uint64_t)bench_lat_pct_us(&sl, 50);
	r->stall_p99_us = (uint64_t)bench_lat_pct_us(&sl, 99);
	r->stall_max_us = (uint64_t)bench_lat_pct_us(&sl, 100);
	bench_lat_fini(&bl);
	bench_lat_fini(&sl);
}

static double per_op(uint64_t v, uint64_t ops)
{
	return ops ? (double)v / (double)ops : 0.0;
}

static void print_ids(const char *key, uint64_t set)
{
	printf(",\"%s\":[", key);
	for (uint64_t m = set; m; m &= m - 1)
		printf("%u%s", __builtin_ctzll(m), m & (m - 1) ? "," : "");
	printf("]");
}

static void report(struct xfer *xf, struct xfer_result *res,
		   struct bench_lat *lat)
{
	struct bench_result r = {
		.app = "rtx-transfer", .transport = loco_mgr_transport(xf->mgr),
		.nodes = (unsigned)__builtin_popcountll(xf->compute),
		.threads = xf->o.threads, .duration_s = xf->o.duration,
		.ops = res->ops, .p50_us = bench_lat_pct_us(lat, 50),
		.p99_us = bench_lat_pct_us(lat, 99), .stats = res->st,
	};
	bool ok = res->total == res->expected && !res->nulls;
	bench_json_begin(stdout, &r);
	printf(",\"mode\":\"%s\",\"accounts\":%u,\"conserved\":%s,"
	       "\"total\":%llu,\"expected\":%llu,\"repairs\":%llu,"
	       "\"final_repairs\":%llu,\"dead_repairs\":%llu,"
	       "\"locks_held\":%llu,\"aborts\":%llu",
	       xf->o.mode == XFER_RTX ? "rtx" : "lock", xf->o.accounts,
	       ok ? "true" : "false", (unsigned long long)res->total,
	       (unsigned long long)res->expected,
	       (unsigned long long)res->repairs,
	       (unsigned long long)res->final_repairs,
	       (unsigned long long)res->dead_repairs,
	       (unsigned long long)res->locks_held,
	       (unsigned long long)res->aborts);
	print_ids("dead", res->dead);
	print_ids("reclaimed", res->reclaimed);
	printf(",\"leaked_blocks\":%llu,\"lost_blocks\":%llu,\"lease_ms\":%llu,"
	       "\"blocked\":%llu,\"blocked_p99_ms\":%.3f,\"blocked_max_ms\":%.3f,"
	       "\"stalls\":%llu,\"stall_p50_ms\":%.3f,\"stall_p99_ms\":%.3f,"
	       "\"stall_max_ms\":%.3f,\"first_repair_end_us\":%llu,"
	       "\"reads_per_op\":%.3f,\"writes_per_op\":%.3f,\"cas_per_op\":%.3f,"
	       "\"read_bytes_per_op\":%.1f,\"write_bytes_per_op\":%.1f",
	       (unsigned long long)res->leaked, (unsigned long long)res->lost,
	       (unsigned long long)(xf->rtx ? loco_rtx_lease_ms(xf->rtx, 4) : 0),
	       (unsigned long long)res->blocked, res->blocked_p99_us / 1000.0,
	       res->blocked_max_us / 1000.0, (unsigned long long)res->stalls,
	       res->stall_p50_us / 1000.0, res->stall_p99_us / 1000.0,
	       res->stall_max_us / 1000.0,
	       (unsigned long long)res->repair_end_us,
	       per_op(res->st.reads, res->ops),
	       per_op(res->st.writes, res->ops), per_op(res->st.cas, res->ops),
	       per_op(res->st.bytes_read, res->ops),
	       per_op(res->st.bytes_written, res->ops));
	printf(",\"outages\":%llu,\"flushes_per_op\":%.3f",
	       (unsigned long long)res->outages, per_op(res->st.flushes, res->ops));
	if (xf->o.count_commits)
		printf(",\"acked\":%llu,\"unknown\":%llu,\"counted\":%llu,"
		       "\"lost_commits\":%llu", (unsigned long long)res->acked,
		       (unsigned long long)res->unknown,
		       (unsigned long long)res->counted,
		       (unsigned long long)res->lost_commits);
	bench_json_end(stdout);
}

/* The node that repairs, checks and reports among the finished ones
 * (DONE, a bit per id): --reporter if it finished, else the lowest. */
static uint32_t reporter_of(const struct xfer *xf, uint64_t done)
{
	if (xf->o.reporter < LOCO_MAX_NODES && (done >> xf->o.reporter & 1))
		return xf->o.reporter;
	return (uint32_t)__builtin_ctzll(done);
}

/* After the run: DONE mark, wait for the others, and if this is the
 * reporter, repair, check and report. */
static int finish(struct xfer *xf, struct bench_lat *lat, bool *failed)
{
	struct xfer_result res = { .expected = (uint64_t)xf->o.accounts *
					       xf->o.balance };
	final_rec(xf, lat);
	int rc = publish(xf, XFER_DONE);
	if (!rc)
		rc = xfer_wait_others(xf, &res);
	if (rc || reporter_of(xf, res.done) != xf->self)
		return rc;
	rc = xf->o.mode == XFER_RTX ? xfer_rtx_final(xf, &res) :
				      xfer_lock_final(xf, &res);
	if (!rc && xf->o.timeline)
		rc = xfer_write_timeline(xf, &res);
	if (!rc) {
		report(xf, &res, lat);
		*failed = res.total != res.expected || res.nulls ||
			  res.locks_held || res.lost_commits;
	}
	return rc;
}

static int run(struct xfer *xf, bool *failed)
{
	struct bench_lat lat;
	int rc = bench_lat_init(&lat, LAT_CAP);
	for (unsigned i = 0; !rc && i < xf->o.threads; i++) {
		rc = bench_lat_init(&xf->ws[i].lat, LAT_CAP);
		if (!rc)
			rc = bench_lat_init(&xf->ws[i].blocked_lat, LAT_CAP / 4);
		if (!rc)
			rc = bench_lat_init(&xf->ws[i].stall_lat, LAT_CAP / 16);
	}
	if (!rc)
		rc = xfer_ctl_open(xf);
	if (!rc)
		xfer_ctl_meet(xf);
	if (!rc)
		rc = mode_open(xf);
	if (!rc)
		rc = mode_init(xf);
	if (!rc)
		rc = run_phase(xf);
	if (!rc)
		rc = finish(xf, &lat, failed);
	mode_close(xf);
	xfer_ctl_close(xf);
	for (unsigned i = 0; i < xf->o.threads; i++) {
		bench_lat_fini(&xf->ws[i].lat);
		bench_lat_fini(&xf->ws[i].blocked_lat);
		bench_lat_fini(&xf->ws[i].stall_lat);
	}
	bench_lat_fini(&lat);
	return rc;
}

/* The program: loco-rtx-transfer, and loco-transfer --rtx. */
int rtx_transfer_main(int argc, char **argv)
{
	static struct xfer xf;
	struct local_node ln;
	bool failed = false;
	if (bench_wants_help(argc, argv)) {
		usage(stdout);
		return 0;
	}
	int rc = local_node_start(&ln, &argc, argv, PROG, "shm");
	if (rc)
		return rc;
	rc = parse(&xf.o, argc, argv);
	if (rc) {
		local_node_stop(&ln);
		return rc;
	}
	xf.mgr = ln.mgr;
	cluster_info(&xf);
	rc = loco_thread_create(xf.mgr, &xf.thr);
	if (!rc) {
		rc = run(&xf, &failed);
		int drc = loco_thread_destroy(xf.thr);
		rc = rc ? rc : drc;
	}
	bool fenced = rc == -LOCO_EFENCED || loco_self_fenced(xf.mgr);
	if (fenced)
		fprintf(stderr, PROG ": node %u: fenced: the others took this "
			"node for dead (no heartbeat for %u ms) and took its "
			"slots over; exiting\n", xf.self, xf.o.dead_ms);
	else if (rc)
		fprintf(stderr, PROG ": node %u: %s\n", xf.self, loco_strerror(rc));
	local_node_stop(&ln);
	return fenced ? 3 : rc ? 1 : failed ? 1 : 0;
}
