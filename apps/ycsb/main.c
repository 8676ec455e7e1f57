/* SPDX-License-Identifier: MIT */
/* loco-ycsb: the YCSB driver of every index (apps/ycsb/index.h). Every
 * compute node runs it with the same options: each loads its clients'
 * share of the keys, the nodes pass a barrier, run the workload for
 * --duration seconds or --ops operations per thread (a progress line a
 * second on stderr), pass a barrier, read back every key they wrote (the
 * end-of-run check, track.c), pass a barrier, and print their JSON
 * result line; the lowest node id also prints the cluster's (scope
 * "cluster": counters summed, latency percentiles the maximum over the
 * nodes). Without a hosts file it runs as a private one-node cluster. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/common/local.h"
#include "apps/common/opts.h"
#include "apps/ycsb/ycsb.h"
#include <loco/history.h>
#include <loco/rtx/crash.h>

/* The barrier after the load waits this long (a load may take a while),
 * the others less: the nodes stop at the same time, give or take one
 * operation and its timeouts, and check about as many keys. */
#define SYNC_MS 300000
#define FINAL_MS 120000
#define READY_MS 60000

static const char usage[] =
"usage: loco-ycsb [options] (plus node options: --id/--hosts/--transport/..., or none for\n"
"                 a private one-node cluster)\n"
"  --index NAME      the index under test (default local); --list-indexes\n"
"                    prints those in this build, one a line: NAME, ordered or\n"
"                    unordered (scans), distributed or local (one process)\n"
"  --workload W      YCSB core workload a..f (default a):\n"
"                      a  50% reads, 50% updates\n"
"                      b  95% reads, 5% updates\n"
"                      c  reads only\n"
"                      d  95% reads of the latest keys, 5% inserts\n"
"                      e  95% scans, 5% inserts (ordered indexes only)\n"
"                      f  50% reads, 50% read-modify-writes\n"
"                    inserts add fresh keys past the loaded ones\n"
"  --zipf THETA      key popularity: Zipf skew in [0, 1), 0 = uniform (default 0.99)\n"
"  --keys N          keys loaded before the run, 0..N-1 (default 100000)\n"
"  --value-size B    value bytes, a multiple of 8, 8..4096 (default 64)\n"
"  --threads T       client threads per node, 1..64 (default 1)\n"
"  --window W        operations in flight per thread: only 1 (the index\n"
"                    interface is synchronous; more threads overlap more)\n"
"  --duration S      seconds of the measured phase (default 5)\n"
"  --ops N           stop each thread after N operations (alone: no time limit)\n"
"  --target R        at most R operations per second on this node, spread\n"
"                    over its threads (YCSB's -target; default: no limit)\n"
"  --scan-max M      scan lengths uniform in 1..M keys (default 100, at most\n"
"                    16 with --record: a history line holds 1 KiB)\n"
"  --delete-ratio D  a fraction D of the operations delete a chosen key and as\n"
"                    many insert one, in 0..0.5 (default 0; not YCSB's)\n"
"  --writers MODE    owner (default): each key has one writing client, the\n"
"                    one it belongs to, and the end check is exact; any:\n"
"                    anyone writes any key, as in YCSB (docs/ycsb.md)\n"
"  --resize MODE     how the index resizes or splits, its own word (race: rtx\n"
"                    or cas; sherman: plain or rtx); others refuse it\n"
"  --ix-opt KEY=VAL  an option of the index (repeatable, at most 16)\n"
"  --seed S          seed of the key and operation choices (default 1)\n"
"  --record FILE     record every index call for loco-lincheck (model map,\n"
"                    ordered-map with scans); %n in FILE is the node id, a\n"
"                    directory gets nodeID.jsonl\n"
"  --verify          after the check, the index walks its whole structure\n"
"                    (indexes that can)\n"
"  --verify-after-outage  crash tests: after the measured phase each thread\n"
"                    waits (60 s at most) until a memory node goes down and\n"
"                    comes back, unless it saw an outage during the run, so\n"
"                    the check reads what the restart kept\n"
"  --dead-ms MS      nodes may die (crash tests): instead of barriers, each\n"
"                    node's heartbeat and phase in a record on the first\n"
"                    memory node; a node silent for MS is dead, the others\n"
"                    go on, the lowest survivor reports (10..600000)\n"
"Exit status: 0; 1 on a failure, or when a written value was missing or\n"
"wrong or a read returned a value no write put there; 2 on bad options;\n"
"3 if this node was fenced (with --dead-ms: the others took it for dead).\n";

static const struct ycsb_mix mixes[] = {
	{ .name = 'a', .read = 0.5, .update = 0.5 },
	{ .name = 'b', .read = 0.95, .update = 0.05 },
	{ .name = 'c', .read = 1 },
	{ .name = 'd', .read = 0.95, .insert = 0.05, .latest = true },
	{ .name = 'e', .scan = 0.95, .insert = 0.05 },
	{ .name = 'f', .read = 0.5, .rmw = 0.5 },
};

/* ---- options --------------------------------------------------------------- */

/* ARG's "KEY=VALUE" into the index's options. */
static int parse_ix_opt(struct ycsb_opts *o, const char *arg, char *expect)
{
	struct ycsb_index_cfg *c = &o->cfg;
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg || c->nopts == YCSB_IX_OPTS) {
		snprintf(expect, BENCH_EXPECT_MAX, c->nopts == YCSB_IX_OPTS ?
			 "at most %u of them" : "KEY=VALUE", YCSB_IX_OPTS);
		return -1;
	}
	char *key = strndup(arg, (size_t)(eq - arg));
	if (!key)
		return -1;
	c->opt_key[c->nopts] = key;
	c->opt_val[c->nopts++] = eq + 1;
	return 0;
}

static int parse_index(struct ycsb_opts *o, const char *arg, char *expect)
{
	size_t at = 0;
	o->ix = ycsb_index_find(arg);
	if (o->ix)
		return 0;
	for (unsigned i = 0; ycsb_indexes[i] && at < BENCH_EXPECT_MAX; i++)
		at += (size_t)snprintf(expect + at, BENCH_EXPECT_MAX - at, "%s%s",
				       i ? ", " : "one of ", ycsb_indexes[i]->name);
	return -1;
}

static int parse_workload(struct ycsb_opts *o, const char *arg, char *expect)
{
	for (size_t i = 0; i < sizeof(mixes) / sizeof(mixes[0]); i++)
		if (arg[0] && !arg[1] && (arg[0] | 0x20) == mixes[i].name) {
			o->mix = mixes[i];
			return 0;
		}
	snprintf(expect, BENCH_EXPECT_MAX, "a, b, c, d, e or f");
	return -1;
}

static int parse_word(const char *arg, const char *a, const char *b,
		      bool *is_b, char *expect)
{
	if (strcmp(arg, a) && strcmp(arg, b)) {
		snprintf(expect, BENCH_EXPECT_MAX, "%s or %s", a, b);
		return -1;
	}
	*is_b = !strcmp(arg, b);
	return 0;
}

static int parse_one(void *opts, int c, const char *arg, char *expect)
{
	struct ycsb_opts *o = opts;
	unsigned v;
	bool b;
	switch (c) {
	case 'I': return parse_index(o, arg, expect);
	case 'w': return parse_workload(o, arg, expect);
	case 'z': return bench_parse_double(arg, 0, 0.9999, &o->zipf, expect);
	case 'k': return bench_parse_u64(arg, 1, UINT64_C(1) << 36, &o->keys,
					 expect);
	case 'v':
		if (!bench_parse_uint(arg, 8, YCSB_VALUE_MAX, &v, expect) &&
		    v % 8 == 0) {
			o->value_size = v;
			return 0;
		}
		snprintf(expect, BENCH_EXPECT_MAX, "a multiple of 8 in 8..%u",
			 (unsigned)YCSB_VALUE_MAX);
		return -1;
	case 't': return bench_parse_uint(arg, 1, YCSB_MAX_THREADS, &o->threads,
					  expect);
	case 'W':
		if (!strcmp(arg, "1"))
			return 0;
		snprintf(expect, BENCH_EXPECT_MAX, "1: the index interface is "
			 "synchronous, --threads overlaps operations");
		return -1;
	case 'd':
		return bench_parse_duration(arg, &o->duration, expect);
	case 'o': return bench_parse_u64(arg, 1, UINT64_C(1) << 40, &o->max_ops,
					 expect);
	case 'T': return bench_parse_double(arg, 1, 1e9, &o->target, expect);
	case 'S':
		o->scan_max_set = true;
		return bench_parse_uint(arg, 1, YCSB_SCAN_MAX, &o->scan_max, expect);
	case 'D': return bench_parse_double(arg, 0, 0.5, &o->delete_ratio, expect);
	case 'r':
		if (parse_word(arg, "owner", "any", &b, expect))
			return -1;
		o->writers = b ? W_ANY : W_OWNER;
		return 0;
	case 'Z':
		if (!*arg)
			return -1;
		o->resize = arg;    /* the index says which it has */
		return 0;
	case 'x': return parse_ix_opt(o, arg, expect);
	case 's': return bench_parse_u64(arg, 0, UINT64_MAX, &o->seed, expect);
	case 'R': o->record = arg; return 0;
	case 'V': o->verify = true; return 0;
	case 'O': o->verify_after_outage = true; return 0;
	case 'M': return bench_parse_uint(arg, 10, 600000, &o->dead_ms, expect);
	default: return -1;
	}
}

static const struct option longopts[] = {
	{ "index", required_argument, NULL, 'I' },
	{ "workload", required_argument, NULL, 'w' },
	{ "zipf", required_argument, NULL, 'z' },
	{ "keys", required_argument, NULL, 'k' },
	{ "value-size", required_argument, NULL, 'v' },
	{ "threads", required_argument, NULL, 't' },
	{ "window", required_argument, NULL, 'W' },
	{ "duration", required_argument, NULL, 'd' },
	{ "ops", required_argument, NULL, 'o' },
	{ "target", required_argument, NULL, 'T' },
	{ "scan-max", required_argument, NULL, 'S' },
	{ "delete-ratio", required_argument, NULL, 'D' },
	{ "writers", required_argument, NULL, 'r' },
	{ "resize", required_argument, NULL, 'Z' },
	{ "ix-opt", required_argument, NULL, 'x' },
	{ "seed", required_argument, NULL, 's' },
	{ "record", required_argument, NULL, 'R' },
	{ "verify", no_argument, NULL, 'V' },
	{ "verify-after-outage", no_argument, NULL, 'O' },
	{ "dead-ms", required_argument, NULL, 'M' },
	{ NULL, 0, NULL, 0 },
};

static bool has_arg(int argc, char **argv, const char *name)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], name))
			return true;
	return false;
}

/* Options that conflict, once all are known. */
static int check_opts(struct ycsb_opts *o, bool duration_set)
{
	static const char prog[] = "loco-ycsb";
	if (o->max_ops && !duration_set)
		o->duration = 0;
	if (!o->scan_max_set)
		o->scan_max = o->record ? YCSB_SCAN_MAX_RECORDED : YCSB_DEFAULT_SCAN_MAX;
	if (o->mix.scan > 0 && !o->ix->ordered)
		return bench_opt_error(prog, "--workload e: index %s has no scans "
				       "(it is not ordered)", o->ix->name);
	if (o->record && o->scan_max > YCSB_SCAN_MAX_RECORDED)
		return bench_opt_error(prog, "--scan-max %u: at most %u with --record "
				       "(a history line holds 1 KiB)", o->scan_max,
				       YCSB_SCAN_MAX_RECORDED);
	if (o->verify && !o->ix->verify)
		return bench_opt_error(prog, "--verify: index %s cannot walk its "
				       "structure", o->ix->name);
	return 0;
}

static int parse(struct ycsb_opts *o, int argc, char **argv)
{
	bool duration_set = has_arg(argc, argv, "--duration");
	for (int i = 1; i < argc; i++)
		duration_set |= !strncmp(argv[i], "--duration=", 11);
	int rc = bench_getopt(argc, argv, "", longopts, parse_one, o, "loco-ycsb");
	return rc ? 2 : check_opts(o, duration_set);
}

static void opts_fini(struct ycsb_opts *o)
{
	for (unsigned i = 0; i < o->cfg.nopts; i++)
		free((char *)o->cfg.opt_key[i]);
	o->cfg.nopts = 0;
}

static void list_indexes(void)
{
	for (unsigned i = 0; ycsb_indexes[i]; i++)
		printf("%s %s %s\n", ycsb_indexes[i]->name,
		       ycsb_indexes[i]->ordered ? "ordered" : "unordered",
		       ycsb_indexes[i]->distributed ? "distributed" : "local");
}

/* ---- set-up -------------------------------------------------------------- */

/* What the cluster's shape rules out: 2 if so (named on stderr). */
static int check_cluster(struct ycsb *y)
{
	static const char prog[] = "loco-ycsb";
	if (!y->o.ix->distributed && y->nmembers > 1)
		return bench_opt_error(prog, "--index %s runs in one process (this "
				       "cluster has %u compute nodes)", y->o.ix->name,
				       y->nmembers);
	if (y->o.writers == W_OWNER && y->o.keys < y->clients)
		return bench_opt_error(prog, "--keys %" PRIu64 ": fewer than the %"
				       PRIu64 " clients (nodes x --threads), each of "
				       "which owns keys with --writers owner",
				       y->o.keys, y->clients);
	return 0;
}

static void cluster_shape(struct ycsb *y)
{
	uint64_t members = bench_members(y->mgr);
	y->self = loco_mgr_id(y->mgr);
	y->nmembers = (unsigned)__builtin_popcountll(members);
	y->member = (unsigned)__builtin_popcountll(members &
						   ((UINT64_C(1) << y->self) - 1));
	y->clients = (uint64_t)y->nmembers * y->o.threads;
	y->fresh_base = (y->o.keys + y->clients - 1) / y->clients * y->clients;
}

/* The fresh keys the measured phase may insert (cfg.fresh): bounded by
 * --ops, and by --duration at YCSB_RATE_MAX per thread. */
static uint64_t fresh_bound(const struct ycsb *y)
{
	double ops = y->o.duration > 0 ? y->o.duration * YCSB_RATE_MAX : 0;
	if (y->o.max_ops && (!ops || (double)y->o.max_ops < ops))
		ops = (double)y->o.max_ops;
	return (uint64_t)(ops * y->o.mix.insert + 0.5) * y->clients;
}

static int open_index(struct ycsb *y)
{
	struct ycsb_index_cfg *c = &y->o.cfg;
	c->name = "ycsb";
	c->keys = y->o.keys;
	c->fresh = fresh_bound(y);
	c->arena_bytes = y->arena_bytes;
	c->value_size = y->o.value_size;
	c->threads = y->o.threads;
	c->resize = y->o.resize;
	c->seed = y->o.seed;
	int rc = y->o.ix->open(y->mgr, c, &y->ix);
	if (rc == -EINVAL)
		return 2;       /* the index named the bad option */
	if (rc)
		fprintf(stderr, "loco-ycsb: --index %s: %s\n", y->o.ix->name,
			loco_strerror(rc));
	return rc;
}

/* The cluster barrier, or with --dead-ms the node records (ctl.c) in
 * its place: then no channel has a compute peer to join, and a node that
 * dies in set-up or load is found dead at the first phase, like one that
 * dies in the run. */
static int phases_open(struct ycsb *y)
{
	if (y->o.dead_ms)
		return ycsb_ctl_open(y);
	int rc = cl_run_init(&y->run, y->mgr, "ycsbrun");
	if (rc)
		fprintf(stderr, "loco-ycsb: set-up: %s\n", loco_strerror(rc));
	return rc;
}

static void phases_close(struct ycsb *y)
{
	if (y->ctl)
		ycsb_ctl_close(y);
	else
		cl_run_fini(&y->run);
}

/* Every failure is named on stderr here. */
static int setup(struct ycsb *y)
{
	cluster_shape(y);
	int rc = check_cluster(y);
	if (!rc && y->o.record && (rc = loco_history_open(y->mgr, y->o.record)))
		fprintf(stderr, "loco-ycsb: --record %s: %s\n", y->o.record,
			loco_strerror(rc));
	if (!rc && (rc = zipf_init(&y->zipf, y->o.keys, y->o.zipf)))
		fprintf(stderr, "loco-ycsb: --zipf %g: %s\n", y->o.zipf,
			loco_strerror(rc));
	if (!rc)
		rc = open_index(y);
	if (rc)
		return rc;
	rc = phases_open(y);
	if (rc) {
		y->o.ix->close(y->ix);
		return rc;
	}
	if (y->ctl)
		ycsb_ctl_meet(y);
	loco_crash_point("ycsb.setup");
	rc = loco_mgr_wait_ready(y->mgr, READY_MS);
	if (!rc && y->o.ix->start)
		rc = y->o.ix->start(y->ix);
	if (!rc)
		return 0;
	fprintf(stderr, "loco-ycsb: set-up: %s\n", loco_strerror(rc));
	phases_close(y);
	y->o.ix->close(y->ix);
	return rc;
}

static int teardown(struct ycsb *y)
{
	phases_close(y);
	int rc = y->o.ix->close(y->ix);
	if (rc)
		fprintf(stderr, "loco-ycsb: node %u: closing %s: %s\n", y->self,
			y->o.ix->name, loco_strerror(rc));
	return rc;
}

/* ---- the run ------------------------------------------------------------- */

static void workers_start(struct ycsb *y)
{
	for (unsigned i = 0; i < y->o.threads; i++) {
		y->w[i].y = y;
		y->w[i].idx = i;
		if (pthread_create(&y->w[i].tid, NULL, ycsb_worker_main, &y->w[i])) {
			fprintf(stderr, "loco-ycsb: cannot start a thread\n");
			exit(1);
		}
	}
}

static void progress(struct ycsb *y, uint64_t t0)
{
	struct cl_progress p = {
		.name = "ycsb", .unit = "ops", .node = y->self,
		.threads = y->o.threads, .done = &y->done,
		.ops = &y->w[0].live_ops, .stride = sizeof(y->w[0]),
	};
	cl_progress_run(&p, t0);
}

/* Sum the workers and the index's counters into ROW. */
static int row_fill(struct ycsb *y, struct cl_row *row)
{
	struct bench_lat lat;
	size_t n = 0;
	int rc = 0;
	for (unsigned i = 0; i < y->o.threads; i++) {
		for (unsigned x = 0; x < X_N; x++)
			row->extra[x] += y->w[i].n[x];
		rc = rc ? rc : y->w[i].rc;
		n += y->w[i].lat.n;
	}
	struct ycsb_index_counters c = { 0 };
	if (y->o.ix->counters)
		y->o.ix->counters(y->ix, &c);
	row->extra[X_RESIZES] = c.resizes;
	row->extra[X_RETRIES] = c.retries;
	row->extra[X_CACHE_MISSES] = c.cache_misses;
	row->extra[X_REPAIRS] = c.repairs;
	row->extra[X_MEM_USED] = c.mem_used;
	row->extra[X_MEM_RESERVED] = c.mem_reserved;
	row->extra[X_MEM_KEYS] = c.mem_keys;
	for (unsigned k = 0; k < K_N; k++)
		row->ops += row->extra[X_GET + k];
	row->ops -= row->extra[X_RMW];
	int lrc = bench_lat_init(&lat, n ? n : 1);
	for (unsigned i = 0; i < y->o.threads; i++) {
		if (!lrc)
			bench_lat_append(&lat, &y->w[i].lat);
		bench_lat_fini(&y->w[i].lat);
	}
	if (!lrc)
		cl_row_lat(row, &lat);
	bench_lat_fini(&lat);
	return rc ? rc : lrc;
}

static double per(uint64_t sum, uint64_t n)
{
	return n ? (double)sum / (double)n : 0;
}

/* CLUSTER: the fewest and most ops of a node for the cluster line, or
 * NULL for this node's line. */
static void report(void *arg, const struct cl_row *row,
		   const uint64_t *cluster)
{
	struct ycsb *y = arg;
	const struct ycsb_opts *o = &y->o;
	const uint64_t *x = row->extra;
	struct bench_result r = {
		.app = "ycsb", .transport = loco_mgr_transport(y->mgr),
		.nodes = y->nmembers, .threads = o->threads,
	};
	cl_json_begin(stdout, &r, row, cluster, y->self);
	printf(",\"index\":\"%s\",\"ordered\":%s,\"distributed\":%s,"
	       "\"workload\":\"%c\",\"zipf\":%g,\"keys\":%" PRIu64 ",\"value_size\":%u,\"window\":1,\"writers\":\"%s\","
	       "\"scan_max\":%u,\"delete_ratio\":%g,\"recorded\":%s", o->ix->name,
	       o->ix->ordered ? "true" : "false",
	       o->ix->distributed ? "true" : "false", o->mix.name, o->zipf, o->keys, o->value_size,
	       o->writers == W_OWNER ? "owner" : "any", o->scan_max,
	       o->delete_ratio, o->record ? "true" : "false");
	printf(",\"gets\":%" PRIu64 ",\"inserts\":%" PRIu64 ",\"updates\":%"
	       PRIu64 ",\"deletes\":%" PRIu64 ",\"scans\":%" PRIu64 ",\"rmws\":%"
	       PRIu64 ",\"hits\":%" PRIu64 ",\"scanned\":%" PRIu64
	       ",\"not_done\":%" PRIu64, x[X_GET], x[X_INSERT], x[X_UPDATE],
	       x[X_DELETE], x[X_SCAN], x[X_RMW], x[X_HIT], x[X_SCANNED],
	       x[X_DONE_FALSE]);
	printf(",\"get_rtts\":%.3f,\"insert_rtts\":%.3f,\"update_rtts\":%.3f,"
	       "\"delete_rtts\":%.3f,\"scan_rtts\":%.3f",
	       per(x[X_GET_RTT], x[X_GET]), per(x[X_INSERT_RTT], x[X_INSERT]),
	       per(x[X_UPDATE_RTT], x[X_UPDATE]), per(x[X_DELETE_RTT], x[X_DELETE]),
	       per(x[X_SCAN_RTT], x[X_SCAN]));
	printf(",\"resizes\":%" PRIu64 ",\"retries\":%" PRIu64 ",\"cache_misses\":%"
	       PRIu64 ",\"repairs\":%" PRIu64 ",\"lock_fails\":%" PRIu64
	       ",\"loaded\":%" PRIu64 ",\"checked\":%"
	       PRIu64 ",\"missing\":%" PRIu64 ",\"wrong\":%" PRIu64 ",\"corrupt\":%"
	       PRIu64, x[X_RESIZES], x[X_RETRIES], x[X_CACHE_MISSES], x[X_REPAIRS],
	       x[X_LOCK_FAILS], x[X_LOADED], x[X_CHECKED], x[X_MISSING], x[X_WRONG], x[X_CORRUPT]);
	printf(",\"lost_writes\":%" PRIu64 ",\"unknown\":%" PRIu64
	       ",\"outages\":%" PRIu64 ",\"flushes_per_op\":%.3f",
	       x[X_MISSING] + x[X_WRONG], x[X_UNKNOWN], x[X_OUTAGES],
	       per(x[X_FLUSHES], row->ops));
	printf(",\"mem_used_bytes\":%" PRIu64 ",\"mem_reserved_bytes\":%"
	       PRIu64 ",\"mem_keys\":%" PRIu64 ",\"used_bytes_per_key\":%.1f,"
	       "\"reserved_bytes_per_key\":%.1f", x[X_MEM_USED],
	       x[X_MEM_RESERVED], x[X_MEM_KEYS], per(x[X_MEM_USED], x[X_MEM_KEYS]),
	       per(x[X_MEM_RESERVED], x[X_MEM_KEYS]));
	if (o->verify)
		printf(",\"verify_failed\":%" PRIu64, x[X_VERIFY_FAILED]);
	if (o->dead_ms) {
		printf(",\"dead\":[");
		for (uint64_t m = y->dead; m; m &= m - 1)
			printf("%d%s", __builtin_ctzll(m), m & (m - 1) ? "," : "");
		printf("]");
	}
	bench_json_end(stdout);
}

/* A cluster barrier, or with --dead-ms the records' phase PHASE. */
static int sync_all(struct ycsb *y, struct loco_thread *thr, uint64_t phase,
		    int timeout_ms)
{
	if (y->ctl)
		return ycsb_ctl_sync(y, thr, phase, timeout_ms);
	int rc = cl_run_sync(&y->run, thr, timeout_ms);
	if (rc == -ESRCH)
		fprintf(stderr, "loco-ycsb: node %u: a node was fenced during "
			"the run (another took its work over): it cannot reach "
			"the barrier; the run fails (--dead-ms lets the others "
			"finish without it)\n", y->self);
	return rc;
}

/* The index's failed lock CASes so far (0 without counters). */
static uint64_t lock_fails(struct ycsb *y)
{
	struct ycsb_index_counters c = { 0 };
	if (y->o.ix->counters)
		y->o.ix->counters(y->ix, &c);
	return c.lock_fails;
}

/* The main thread's side of the workers' phases (ycsb_worker_main):
 * a cluster barrier between each two of their local ones. */
static int phases(struct ycsb *y, struct loco_thread *thr, struct cl_row *row)
{
	struct loco_stats s0, s1;
	pthread_barrier_wait(&y->phase);            /* loaded */
	int rc = sync_all(y, thr, YCSB_PHASE_LOADED, SYNC_MS);
	loco_mgr_stats(y->mgr, &s0);
	uint64_t lf0 = lock_fails(y);
	uint64_t t0 = loco_now_ns();
	y->end_ns = rc ? t0 : y->o.duration > 0 ?
		    t0 + (uint64_t)(y->o.duration * 1e9) : 0;
	if (rc)
		y->o.max_ops = 0;
	pthread_barrier_wait(&y->phase);
	progress(y, t0);
	pthread_barrier_wait(&y->phase);            /* run over */
	row->dur_ns = 0;
	for (unsigned i = 0; i < y->o.threads; i++)
		if (y->w[i].end_ns > t0 && y->w[i].end_ns - t0 > row->dur_ns)
			row->dur_ns = y->w[i].end_ns - t0;
	loco_mgr_stats(y->mgr, &s1);
	cl_row_verbs(row, &s0, &s1);
	/* Of the measured phase (an index started over after an outage may
	 * have counted afresh). */
	uint64_t lf1 = lock_fails(y);
	row->extra[X_LOCK_FAILS] = lf1 >= lf0 ? lf1 - lf0 : lf1;
	int src = sync_all(y, thr, YCSB_PHASE_RUN, FINAL_MS);
	rc = rc ? rc : src;
	pthread_barrier_wait(&y->phase);
	pthread_barrier_wait(&y->phase);            /* checked */
	src = sync_all(y, thr, YCSB_PHASE_CHECKED, FINAL_MS);
	rc = rc ? rc : src;
	pthread_barrier_wait(&y->phase);
	return rc;
}

static int run_all(struct ycsb *y)
{
	struct loco_thread *thr;
	int rc = loco_thread_create(y->mgr, &thr);
	if (rc)
		return rc;
	pthread_barrier_init(&y->phase, NULL, y->o.threads + 1);
	workers_start(y);
	struct cl_row row = { 0 };
	rc = phases(y, thr, &row);
	for (unsigned i = 0; i < y->o.threads; i++)
		pthread_join(y->w[i].tid, NULL);
	int wrc = row_fill(y, &row);
	if (!rc && y->ctl)
		rc = ycsb_ctl_finish(y, thr, &row, FINAL_MS, report, y);
	else if (!rc)
		rc = cl_run_finish(&y->run, thr, &row, FINAL_MS, report, y);
	pthread_barrier_destroy(&y->phase);
	int drc = loco_thread_destroy(thr);
	rc = rc ? rc : drc;
	const uint64_t *x = row.extra;
	if (!rc && !wrc && (x[X_MISSING] || x[X_WRONG] || x[X_CORRUPT] ||
			    x[X_VERIFY_FAILED]))
		fprintf(stderr, "loco-ycsb: node %u: %" PRIu64 " missing, %" PRIu64
			" wrong, %" PRIu64 " corrupt%s\n", y->self, x[X_MISSING],
			x[X_WRONG], x[X_CORRUPT],
			x[X_VERIFY_FAILED] ? ", --verify failed" : "");
	return rc ? rc : wrc ? wrc : x[X_MISSING] || x[X_WRONG] || x[X_CORRUPT] ||
	       x[X_VERIFY_FAILED] ? -EIO : 0;
}

/* Did the others fence this node (it was taken for dead)? RC: the run's. */
static bool fenced(struct ycsb *y, int rc)
{
	return y->mgr && (rc == -LOCO_EFENCED || loco_self_fenced(y->mgr));
}

int main(int argc, char **argv)
{
	if (bench_wants_help(argc, argv)) {
		fputs(usage, stdout);
		return 0;
	}
	if (has_arg(argc, argv, "--list-indexes")) {
		list_indexes();
		return 0;
	}
	struct ycsb *y = calloc(1, sizeof(*y));
	struct local_node ln;
	if (!y)
		return 1;
	y->o = (struct ycsb_opts){ .ix = ycsb_indexes[0], .mix = mixes[0],
				   .zipf = 0.99, .keys = 100000, .value_size = 64,
				   .threads = 1, .duration = 5, .seed = 1 };
	int rc = local_node_start(&ln, &argc, argv, "loco-ycsb", "shm");
	if (rc) {
		free(y);
		return rc;
	}
	y->mgr = ln.mgr;
	y->arena_bytes = ln.arena_bytes;
	rc = parse(&y->o, argc, argv);
	if (!rc)
		rc = setup(y);
	if (!rc) {
		rc = run_all(y);
		if (rc && rc != -EIO && rc != -ESRCH && !fenced(y, rc))
			fprintf(stderr, "loco-ycsb: node %u: %s\n", y->self,
				loco_strerror(rc));
		int trc = teardown(y);
		rc = rc ? rc : trc;
	}
	bool was_fenced = fenced(y, rc);
	if (was_fenced)
		fprintf(stderr, "loco-ycsb: node %u: fenced: another node took "
			"over its work while it was silent (paused or slow past "
			"a lease, a timeout or --dead-ms); it stops\n", y->self);
	local_node_stop(&ln);
	opts_fini(&y->o);
	free(y);
	return was_fenced ? 3 : rc == 2 ? 2 : rc ? 1 : 0;
}
