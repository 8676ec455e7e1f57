/* SPDX-License-Identifier: MIT */
/* loco-pmap: persistent hash maps on the AsymNVM log (channels/oplog.h).
 * Every compute node runs T workers; worker t of node n is the single
 * writer (front end) of partition n * T + t, a hash table in the data area
 * of its log on a memory node (partitions spread over the memory nodes;
 * with none, on the node itself). For --duration seconds each worker runs
 * batches of puts and gets, one commit (one persistence point) per batch;
 * then it crashes its front end once more and reads every key back: no
 * key may read older than its last acknowledged put. One JSON line per
 * node and the cluster's; exit 1 if a key was lost.
 *
 *	tools/loco-run -m 1 -n 2 --durable --power-cut --restart 0@1 -- \
 *		loco-pmap --duration 3 --batch 8 --crash-every 0.5 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/common/local.h"
#include "apps/common/opts.h"
#include "apps/pmap/pmap.h"
#include <loco/history.h>

#define PROG "loco-pmap"
#define SYNC_MS 120000
#define FINAL_MS 120000

static void usage(FILE *f)
{
	fputs("usage: loco-pmap [options] (plus the node options --id/--hosts/"
	      "--transport/...)\n"
	      "  --threads T       workers (partitions) per node (default 1)\n"
	      "  --duration S      seconds (default 2)\n"
	      "  --keys N          keys per partition, 16..1048576 (default 256)\n"
	      "  --batch B         operations per commit, 1..32 (default 8)\n"
	      "  --apply-every A   commits per apply of the memory log (default 8)\n"
	      "  --write-pct P     puts among the operations, 0..100 (default 50)\n"
	      "  --cache-pages C   front-end cache frames, >= 2 (default: the\n"
	      "                    whole table)\n"
	      "  --sample S        replacement candidates (default 8; 1: random)\n"
	      "  --crash-every S   crash each front end every S seconds (default 0:\n"
	      "                    never)\n"
	      "  --pace-us U       sleep U microseconds after each batch (default 0;\n"
	      "                    bounds the rate of a recorded run)\n"
	      "  --record FILE     record the history for loco-lincheck (model map)\n"
	      "  --broken WHAT     deliberate bug: no-persist (commits without a\n"
	      "                    persistence point) or no-replay (recovery skips\n"
	      "                    the committed operations it should replay)\n", f);
}

static int parse_broken(struct pmap_opts *o, const char *s, char *expect)
{
	if (!strcmp(s, "no-persist"))
		o->no_persist = true;
	else if (!strcmp(s, "no-replay"))
		o->no_replay = true;
	else {
		snprintf(expect, BENCH_EXPECT_MAX, "no-persist or no-replay");
		return -1;
	}
	return 0;
}

static int parse_one(void *arg, int c, const char *s, char *expect)
{
	struct pmap_opts *o = arg;
	uint64_t v = 0;
	switch (c) {
	case 't': return bench_parse_uint(s, 1, 64, &o->threads, expect);
	case 'd': return bench_parse_duration(s, &o->duration, expect);
	case 'k':
		if (bench_parse_u64(s, 16, 1 << 20, &v, expect))
			return -1;
		o->keys = (uint32_t)v;
		return 0;
	case 'b': return bench_parse_uint(s, 1, PMAP_MAX_BATCH, &o->batch, expect);
	case 'a': return bench_parse_uint(s, 1, 1 << 20, &o->apply_every, expect);
	case 'w': return bench_parse_uint(s, 0, 100, &o->write_pct, expect);
	case 'c':
		if (bench_parse_u64(s, 2, 1 << 24, &v, expect))
			return -1;
		o->cache_pages = (uint32_t)v;
		return 0;
	case 's': return bench_parse_uint(s, 1, 1 << 20, &o->sample, expect);
	case 'C': return bench_parse_double(s, 0, 86400, &o->crash_every, expect);
	case 'p': return bench_parse_uint(s, 0, 1000000, &o->pace_us, expect);
	case 'R': o->record = s; return 0;
	case 'B': return parse_broken(o, s, expect);
	default: return -1;
	}
}

static int parse(void *arg, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "threads", required_argument, NULL, 't' },
		{ "duration", required_argument, NULL, 'd' },
		{ "keys", required_argument, NULL, 'k' },
		{ "batch", required_argument, NULL, 'b' },
		{ "apply-every", required_argument, NULL, 'a' },
		{ "write-pct", required_argument, NULL, 'w' },
		{ "cache-pages", required_argument, NULL, 'c' },
		{ "sample", required_argument, NULL, 's' },
		{ "crash-every", required_argument, NULL, 'C' },
		{ "pace-us", required_argument, NULL, 'p' },
		{ "record", required_argument, NULL, 'R' },
		{ "broken", required_argument, NULL, 'B' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct pmap *p = arg;
	return bench_getopt(argc, argv, "t:d:h", lo, parse_one, &p->o, PROG);
}

/* ---- geometry ------------------------------------------------------------- */

static uint64_t pow2_at_least(uint64_t n)
{
	uint64_t v = 1;
	while (v < n)
		v <<= 1;
	return v;
}

void pmap_log_cfg(const struct pmap *p, struct loco_oplog_cfg *cfg)
{
	uint64_t data = p->nbuckets * 16;
	/* At least 16 pages (a batch dirties several), at most 4 KiB each. */
	uint64_t page = data / 64 < 64 ? 64 : data / 64 > 4096 ? 4096 : data / 64;
	uint64_t per_apply = (uint64_t)p->o.batch * p->o.apply_every;
	uint64_t mlog = 2 * (32 + 32 * per_apply);
	*cfg = (struct loco_oplog_cfg){
		.data_len = data, .rec_size = 40,
		.nrec = (uint32_t)(4 * per_apply < 256 ? 256 :
				   4 * per_apply > (1 << 20) ? 1 << 20 :
				   4 * per_apply),
		.mlog_len = (uint32_t)(mlog < 4096 ? 4096 :
				       mlog > (1 << 22) ? 1 << 22 : mlog),
		.page = (uint32_t)page,
		.cache_pages = p->o.cache_pages ? p->o.cache_pages :
			       (uint32_t)(data / page),
		.sample = p->o.sample, .no_persist = p->o.no_persist,
	};
}

/* ---- report --------------------------------------------------------------- */

static void report(void *arg, const struct cl_row *row, const uint64_t *cluster)
{
	struct pmap *p = arg;
	const struct pmap_opts *o = &p->o;
	const uint64_t *x = row->extra;
	struct bench_result r = {
		.app = "pmap", .transport = loco_mgr_transport(p->mgr),
		.nodes = p->nodes, .threads = o->threads,
	};
	double ops = row->ops ? (double)row->ops : 1.0;
	uint64_t lookups = x[X_CACHE_HITS] + x[X_CACHE_MISSES];
	struct loco_oplog_cfg cfg;
	pmap_log_cfg(p, &cfg);
	cl_json_begin(stdout, &r, row, cluster, p->self);
	printf(",\"keys\":%u,\"batch\":%u,\"apply_every\":%u,\"write_pct\":%u,"
	       "\"cache_pages\":%u,\"sample\":%u,\"durable\":%s,"
	       "\"broken\":\"%s\"", o->keys, o->batch, o->apply_every,
	       o->write_pct, cfg.cache_pages, o->sample,
	       p->nmem && loco_peer_durable(p->mgr, p->mem[0]) ? "true" : "false",
	       o->no_persist ? "no-persist" : o->no_replay ? "no-replay" : "none");
	printf(",\"puts\":%" PRIu64 ",\"gets\":%" PRIu64 ",\"hits\":%" PRIu64
	       ",\"batches\":%" PRIu64 ",\"commits\":%" PRIu64 ",\"applies\":%"
	       PRIu64 ",\"persists_per_op\":%.3f,\"flushes_per_op\":%.3f,"
	       "\"mlog_bytes_per_op\":%.1f,\"cache_miss_ratio\":%.4f",
	       x[X_PUTS], x[X_GETS], x[X_HITS], x[X_BATCHES], x[X_COMMITS],
	       x[X_APPLIES], (double)x[X_PERSISTS] / ops,
	       (double)x[X_FLUSHES] / ops, (double)x[X_MLOG_BYTES] / ops,
	       lookups ? (double)x[X_CACHE_MISSES] / (double)lookups : 0.0);
	printf(",\"outages\":%" PRIu64 ",\"crashes\":%" PRIu64 ",\"replayed\":%"
	       PRIu64 ",\"verified\":%" PRIu64 ",\"lost\":%" PRIu64,
	       x[X_OUTAGES], x[X_CRASHES], x[X_REPLAYED], x[X_VERIFIED],
	       x[X_LOST]);
	bench_json_end(stdout);
}

/* ---- the run -------------------------------------------------------------- */

static void cluster_info(struct pmap *p)
{
	const struct loco_hosts *h = loco_mgr_hosts(p->mgr);
	uint64_t members = bench_members(p->mgr);
	p->self = loco_mgr_id(p->mgr);
	p->nodes = (unsigned)__builtin_popcountll(members);
	p->rank = (uint32_t)__builtin_popcountll(members &
						 ((UINT64_C(1) << p->self) - 1));
	for (uint32_t id = 0; id <= h->max_id && p->nmem < 64; id++)
		if (h->node[id].present && h->node[id].role == LOCO_ROLE_MEMORY)
			p->mem[p->nmem++] = id;
	p->nbuckets = pow2_at_least(2 * (uint64_t)p->o.keys);
}

static int row_fill(struct pmap *p, struct cl_row *row)
{
	size_t n = 0;
	int rc = 0;
	for (unsigned i = 0; i < p->o.threads; i++) {
		for (unsigned x = 0; x < X_N; x++)
			row->extra[x] += p->w[i].n[x];
		rc = rc ? rc : p->w[i].rc;
		n += p->w[i].lat.n;
	}
	row->ops = row->extra[X_PUTS] + row->extra[X_GETS];
	struct bench_lat lat;
	if (bench_lat_init(&lat, n ? n : 1))
		return -ENOMEM;
	for (unsigned i = 0; i < p->o.threads; i++) {
		bench_lat_append(&lat, &p->w[i].lat);
		bench_lat_fini(&p->w[i].lat);
	}
	cl_row_lat(row, &lat);
	bench_lat_fini(&lat);
	return rc;
}

static int workers_run(struct pmap *p, struct loco_thread *thr,
		       struct cl_row *row)
{
	pthread_barrier_init(&p->phase, NULL, p->o.threads + 1);
	for (unsigned i = 0; i < p->o.threads; i++) {
		p->w[i].p = p;
		p->w[i].idx = i;
		if (pthread_create(&p->w[i].tid, NULL, pmap_worker_main, &p->w[i])) {
			fprintf(stderr, PROG ": cannot start a thread\n");
			exit(1);
		}
	}
	pthread_barrier_wait(&p->phase);
	int rc = cl_run_sync(&p->run, thr, SYNC_MS);
	struct loco_stats s0, s1;
	loco_mgr_stats(p->mgr, &s0);
	uint64_t t0 = loco_now_ns();
	p->end_ns = rc ? 0 : t0 + (uint64_t)(p->o.duration * 1e9);
	pthread_barrier_wait(&p->phase);
	struct cl_progress pr = {
		.name = "pmap", .unit = "ops", .node = p->self,
		.threads = p->o.threads, .done = &p->done,
		.ops = &p->w[0].live_ops, .stride = sizeof(p->w[0]),
	};
	cl_progress_run(&pr, t0);
	for (unsigned i = 0; i < p->o.threads; i++)
		pthread_join(p->w[i].tid, NULL);
	row->dur_ns = loco_now_ns() - t0;
	loco_mgr_stats(p->mgr, &s1);
	cl_row_verbs(row, &s0, &s1);
	row->extra[X_FLUSHES] = s1.flushes - s0.flushes;
	pthread_barrier_destroy(&p->phase);
	int wrc = row_fill(p, row);
	return rc ? rc : wrc;
}

static int run(void *arg, struct loco_mgr *mgr)
{
	struct pmap *p = arg;
	struct loco_thread *thr;
	struct cl_row row = { 0 };
	p->mgr = mgr;
	cluster_info(p);
	int rc = p->o.record ? loco_history_open(mgr, p->o.record) : 0;
	if (rc)
		return rc;
	p->w = calloc(p->o.threads, sizeof(*p->w));
	if (!p->w)
		return -ENOMEM;
	rc = loco_thread_create(mgr, &thr);
	if (!rc) {
		rc = cl_run_init(&p->run, mgr, "pmaprun");
		if (!rc) {
			rc = loco_mgr_wait_ready(mgr, SYNC_MS);
			if (!rc)
				rc = workers_run(p, thr, &row);
			if (!rc)
				rc = cl_run_finish(&p->run, thr, &row, FINAL_MS,
						   report, p);
			cl_run_fini(&p->run);
		}
		int drc = loco_thread_destroy(thr);
		rc = rc ? rc : drc;
	}
	free(p->w);
	return rc ? rc : row.extra[X_LOST] ? -EIO : 0;
}

static const struct local_prog prog = {
	.name = PROG, .usage = usage, .parse = parse, .run = run,
};

int main(int argc, char **argv)
{
	struct pmap p = {
		.o = { .threads = 1, .duration = 2, .keys = 256, .batch = 8,
		       .apply_every = 8, .write_pct = 50, .sample = 8 },
	};
	return local_main(&prog, &p, argc, argv);
}
