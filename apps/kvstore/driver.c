/* SPDX-License-Identifier: MIT */
/* loco-kvstore: YCSB-style driver of the kvstore (LOCO §7.2). Every
 * compute node runs it with the same options: each prefills its share of
 * the keys, the nodes pass a barrier, run the mix for --duration seconds
 * (a progress line a second on stderr), pass a barrier again, and print
 * their JSON result line; the lowest node id also prints the cluster's
 * (scope "cluster": ops summed, latency percentiles the maximum over the
 * nodes). Without a hosts file it runs as a private one-node cluster. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "apps/common/local.h"
#include "apps/common/opts.h"
#include "apps/kvstore/drv.h"
#include <loco/history.h>

/* The barrier after the prefill waits this long (a prefill may take a
 * while), the final one less: the nodes stop at the same time, give or
 * take one operation and its timeouts. */
#define SYNC_MS 300000
#define FINAL_MS 60000
#define READY_MS 60000

static const char usage[] =
"usage: loco-kvstore [options] (plus node options: --id/--hosts/--transport/..., or none for\n"
"                    a private one-node cluster)\n"
"  --keys N          key space 0..N-1 (default 100000)\n"
"  --value-size B    value bytes, a multiple of 8, 8..4096 (default 64)\n"
"  --read-ratio R    fraction of gets (default 0.9)\n"
"  --insert-ratio I  fraction of inserts, and as many deletes (default 0.02)\n"
"  --put-ratio P     fraction of puts (default 0); the rest are updates\n"
"  --zipf THETA      Zipfian skew in [0, 1), 0 = uniform (default 0)\n"
"  --fill F          fraction of the keys prefilled (default 0.8)\n"
"  --threads T       worker threads per node (default 1)\n"
"  --window W        operations in flight per thread, 1..128 (default 1)\n"
"  --duration S      seconds of the measured phase (default 5)\n"
"  --ops N           stop each thread after N operations (default: no limit)\n"
"  --locks L         index locks (default 64 rounded up to a multiple of the\n"
"                    nodes, so a key's lock lives where the key is prefilled)\n"
"  --hot-locks       lock words in the NIC's device memory (verbs; falls back\n"
"                    to host memory with a warning, always on shm)\n"
"  --seed S          seed of the key and op choices (default 1)\n"
"  --record FILE     record the history for loco-lincheck (model map);\n"
"                    %n in FILE is the node id, a directory gets nodeID.jsonl\n"
"  --broken-fence    tests only: unlock without placing writes to other\n"
"                    hosts (shm-weak histories must then fail the check)\n"
"  --data compute|memory  where the slots live: in each compute node's arena\n"
"                    (default, LOCO's design) or on the first memory node,\n"
"                    durable there with loco-memnode --durable: every write\n"
"                    persisted before its lock goes; a dead memory node is\n"
"                    waited for (docs/durability.md)\n"
"  --broken-persist  tests only: with --data memory, unlock without persisting\n"
"                    (a power cut must then lose acknowledged writes)\n"
"  --broken-broadcast  tests only: an insert or delete whose broadcast gets\n"
"                    no answer within --timeout-ms fails at once, without\n"
"                    fencing the silent node (the key stays half indexed);\n"
"                    a write that timed out is recorded with an unknown\n"
"                    outcome and the worker goes on\n"
"  --verify          each thread works on its own keys only and, after the\n"
"                    run, reads every one back: it must hold the last\n"
"                    acknowledged write (exit 1 if not)\n"
"  --verify-after-outage  tests only: with --verify and --data memory, a\n"
"                    thread that saw no outage of the data node during the\n"
"                    run waits (60 s at most) for one before it checks, so\n"
"                    the check reads what a restart or a mirror kept\n"
"Each node stores up to --keys values (arena: keys x (value-size + 32) bytes;\n"
"raise --arena-mb for big runs).\n";

static int parse_one(void *opts, int c, const char *arg, char *expect)
{
	struct drv_opts *o = opts;
	unsigned v;
	switch (c) {
	case 'k': return bench_parse_u64(arg, 1, UINT64_C(1) << 40, &o->keys,
					 expect);
	case 'v':
		if (!bench_parse_uint(arg, 8, KV_VALUE_MAX, &v, expect) && v % 8 == 0) {
			o->value_size = v;
			return 0;
		}
		snprintf(expect, BENCH_EXPECT_MAX, "a multiple of 8 in 8..%u",
			 (unsigned)KV_VALUE_MAX);
		return -1;
	case 'r': return bench_parse_double(arg, 0, 1, &o->read, expect);
	case 'i': return bench_parse_double(arg, 0, 0.5, &o->insert, expect);
	case 'p': return bench_parse_double(arg, 0, 1, &o->put, expect);
	case 'z': return bench_parse_double(arg, 0, 0.9999, &o->zipf, expect);
	case 'f': return bench_parse_double(arg, 0, 1, &o->fill, expect);
	case 't': return bench_parse_uint(arg, 1, DRV_MAX_THREADS, &o->threads, expect);
	case 'w': return bench_parse_uint(arg, 1, DRV_MAX_WINDOW, &o->window, expect);
	case 'd': return bench_parse_duration(arg, &o->duration, expect);
	case 'l': return bench_parse_uint(arg, 1, 4096, &o->locks, expect);
	case 's': return bench_parse_u64(arg, 0, UINT64_MAX, &o->seed, expect);
	case 'o': return bench_parse_u64(arg, 1, UINT64_MAX, &o->max_ops, expect);
	case 'R': o->record = arg; return 0;
	case 'B': o->broken_fence = true; return 0;
	case 'H': o->hot_locks = true; return 0;
	case 'V': o->verify = true; return 0;
	case 'P': o->broken_persist = true; return 0;
	case 'O': o->verify_after_outage = true; return 0;
	case 'T': o->broken_broadcast = true; return 0;
	case 'D':
		if (!strcmp(arg, "memory") || !strcmp(arg, "compute")) {
			o->data_memory = arg[0] == 'm';
			return 0;
		}
		snprintf(expect, BENCH_EXPECT_MAX, "compute or memory");
		return -1;
	default: return -1;
	}
}

static int parse(struct drv_opts *o, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "keys", required_argument, NULL, 'k' },
		{ "value-size", required_argument, NULL, 'v' },
		{ "read-ratio", required_argument, NULL, 'r' },
		{ "insert-ratio", required_argument, NULL, 'i' },
		{ "put-ratio", required_argument, NULL, 'p' },
		{ "zipf", required_argument, NULL, 'z' },
		{ "fill", required_argument, NULL, 'f' },
		{ "threads", required_argument, NULL, 't' },
		{ "window", required_argument, NULL, 'w' },
		{ "duration", required_argument, NULL, 'd' },
		{ "locks", required_argument, NULL, 'l' },
		{ "seed", required_argument, NULL, 's' },
		{ "ops", required_argument, NULL, 'o' },
		{ "record", required_argument, NULL, 'R' },
		{ "broken-fence", no_argument, NULL, 'B' },
		{ "hot-locks", no_argument, NULL, 'H' },
		{ "data", required_argument, NULL, 'D' },
		{ "verify", no_argument, NULL, 'V' },
		{ "broken-persist", no_argument, NULL, 'P' },
		{ "verify-after-outage", no_argument, NULL, 'O' },
		{ "broken-broadcast", no_argument, NULL, 'T' },
		{ NULL, 0, NULL, 0 },
	};
	if (bench_getopt(argc, argv, "", opts, parse_one, o, "loco-kvstore"))
		return 2;
	if (o->verify_after_outage && (!o->verify || !o->data_memory))
		return bench_opt_error("loco-kvstore", "--verify-after-outage "
				       "needs --verify and --data memory");
	if (o->read + 2 * o->insert + o->put > 1.0 + 1e-9)
		return bench_opt_error("loco-kvstore", "--read-ratio %g + 2 x "
				       "--insert-ratio %g + --put-ratio %g "
				       "exceed 1", o->read, o->insert, o->put);
	return 0;
}

/* ---- set-up -------------------------------------------------------------- */

static void member_rank(struct drv *d)
{
	uint64_t members = bench_members(d->mgr);
	d->nmembers = (unsigned)__builtin_popcountll(members);
	d->member = (unsigned)__builtin_popcountll(members &
						   ((UINT64_C(1) << d->self) - 1));
}

/* The default lock count: 64 rounded up to a multiple of the nodes, so
 * that key I's lock (I mod L, hosted at member I mod L mod P) lives with
 * its prefilled slot (at member I mod P), and an update's slot WRITE and
 * lock release share one QP (kv.c). */
static unsigned default_locks(unsigned members)
{
	return (64 + members - 1) / members * members;
}

static int setup(struct drv *d)
{
	int mem = loco_mgr_first_memnode(d->mgr);
	d->self = loco_mgr_id(d->mgr);
	member_rank(d);
	if (!d->o.locks)
		d->o.locks = default_locks(d->nmembers);
	struct kv_config cfg = {
		.capacity = d->o.keys, .value_size = d->o.value_size,
		.nlocks = d->o.locks, .broken_fence = d->o.broken_fence,
		.hot_locks = d->o.hot_locks, .remote_data = d->o.data_memory,
		.broken_persist = d->o.broken_persist,
		.broken_broadcast = d->o.broken_broadcast,
		.data_node = mem >= 0 ? (uint32_t)mem : 0,
	};
	if (d->o.data_memory && mem < 0) {
		fprintf(stderr, "loco-kvstore: --data memory: the hosts file "
			"has no memory node\n");
		return -EINVAL;
	}
	int rc = d->o.record ? loco_history_open(d->mgr, d->o.record) : 0;
	if (!rc)
		rc = zipf_init(&d->zipf, d->o.keys, d->o.zipf);
	if (!rc)
		rc = kv_init(&d->kv, d->mgr, NULL, "kv", &cfg);
	if (rc)
		return rc;
	rc = cl_run_init(&d->run, d->mgr, "kvrun");
	if (rc)
		goto fini_kv;
	rc = loco_mgr_wait_ready(d->mgr, READY_MS);
	if (!rc)
		rc = kv_start(&d->kv);
	if (!rc)
		return 0;
	cl_run_fini(&d->run);
fini_kv:
	kv_fini(&d->kv);
	return rc;
}

static void teardown(struct drv *d)
{
	kv_stop(&d->kv);
	cl_run_fini(&d->run);
	kv_fini(&d->kv);
}

/* ---- the run ------------------------------------------------------------- */

/* Print a progress line a second until every worker is done. */
static void progress(struct drv *d, uint64_t t0)
{
	struct cl_progress p = {
		.name = "kvstore", .unit = "ops", .node = d->self,
		.threads = d->o.threads, .done = &d->done,
		.ops = &d->w[0].live_ops, .stride = sizeof(d->w[0]),
	};
	cl_progress_run(&p, t0);
}

/* The phase barrier counts every worker: one that cannot start leaves
 * the process nothing to do but exit. */
static void workers_start(struct drv *d)
{
	for (unsigned i = 0; i < d->o.threads; i++) {
		d->w[i].d = d;
		d->w[i].idx = i;
		if (pthread_create(&d->w[i].tid, NULL, drv_worker_main, &d->w[i])) {
			fprintf(stderr, "loco-kvstore: cannot start a thread\n");
			exit(1);
		}
	}
}

/* Sum the workers into ROW (and their latencies into LAT). */
static int row_fill(struct drv *d, struct cl_row *row, struct bench_lat *lat)
{
	size_t n = 0;
	int rc = 0;
	for (unsigned i = 0; i < d->o.threads; i++) {
		for (unsigned x = 0; x < X_N; x++)
			row->extra[x] += d->w[i].n[x];
		rc = rc ? rc : d->w[i].rc;
		n += d->w[i].lat.n;
	}
	struct kv_stats st = { 0 };
	kv_store_stats(&d->kv, &st);
	row->extra[X_APPLIED] = st.applied;
	row->ops = row->extra[X_GETS] + row->extra[X_INSERTS] +
		   row->extra[X_DELETES] + row->extra[X_UPDATES] + row->extra[X_PUTS];
	if (bench_lat_init(lat, n ? n : 1))
		return -ENOMEM;
	for (unsigned i = 0; i < d->o.threads; i++) {
		bench_lat_append(lat, &d->w[i].lat);
		bench_lat_fini(&d->w[i].lat);
	}
	cl_row_lat(row, lat);
	return rc;
}

/* ---- report -------------------------------------------------------------- */

/* CLUSTER: the fewest and most ops of a node for the cluster line, or
 * NULL for this node's line. */
static void report(void *arg, const struct cl_row *row,
		   const uint64_t *cluster)
{
	struct drv *d = arg;
	const struct drv_opts *o = &d->o;
	const uint64_t *x = row->extra;
	struct bench_result r = {
		.app = "kvstore", .transport = loco_mgr_transport(d->mgr),
		.nodes = d->nmembers, .threads = o->threads,
	};
	cl_json_begin(stdout, &r, row, cluster, d->self);
	printf(",\"keys\":%" PRIu64 ",\"value_size\":%u,\"read_ratio\":%g,"
	       "\"insert_ratio\":%g,\"put_ratio\":%g,\"zipf\":%g,\"window\":%u,"
	       "\"locks\":%u,\"recorded\":%s,\"broken_fence\":%s,"
	       "\"broken_persist\":%s", o->keys, o->value_size, o->read,
	       o->insert, o->put, o->zipf, o->window, o->locks,
	       o->record ? "true" : "false", o->broken_fence ? "true" : "false",
	       o->broken_persist ? "true" : "false");
	bench_json_dm(stdout, d->mgr, o->hot_locks);
	printf(",\"gets\":%" PRIu64 ",\"hits\":%" PRIu64 ",\"inserts\":%" PRIu64
	       ",\"inserted\":%" PRIu64 ",\"deletes\":%" PRIu64 ",\"deleted\":%"
	       PRIu64 ",\"updates\":%" PRIu64 ",\"updated\":%" PRIu64
	       ",\"puts\":%" PRIu64, x[X_GETS], x[X_HITS], x[X_INSERTS],
	       x[X_INSERTED], x[X_DELETES], x[X_DELETED], x[X_UPDATES],
	       x[X_UPDATED], x[X_PUTS]);
	printf(",\"torn_retries\":%" PRIu64 ",\"stale\":%" PRIu64 ",\"invalid\":%"
	       PRIu64 ",\"applied\":%" PRIu64 ",\"prefilled\":%" PRIu64
	       ",\"bad_values\":%" PRIu64, x[X_TORN], x[X_STALE], x[X_INVALID],
	       x[X_APPLIED], x[X_PREFILL], x[X_BAD]);
	printf(",\"data\":\"%s\",\"outages\":%" PRIu64 ",\"flushes_per_op\":%.3f",
	       o->data_memory ? "memory" : "compute", x[X_OUTAGES],
	       row->ops ? (double)x[X_FLUSHES] / (double)row->ops : 0.0);
	if (o->verify)
		printf(",\"verified\":%" PRIu64 ",\"lost_writes\":%" PRIu64,
		       x[X_VERIFIED], x[X_LOST]);
	bench_json_end(stdout);
}

static int run_all(struct drv *d)
{
	struct loco_thread *thr;
	int rc = loco_thread_create(d->mgr, &thr);
	if (rc)
		return rc;
	pthread_barrier_init(&d->phase, NULL, d->o.threads + 1);
	workers_start(d);
	pthread_barrier_wait(&d->phase);
	rc = cl_run_sync(&d->run, thr, SYNC_MS);
	struct loco_stats s0, s1;
	loco_mgr_stats(d->mgr, &s0);
	uint64_t t0 = loco_now_ns();
	d->end_ns = rc ? t0 : t0 + (uint64_t)(d->o.duration * 1e9);
	pthread_barrier_wait(&d->phase);
	progress(d, t0);
	for (unsigned i = 0; i < d->o.threads; i++)
		pthread_join(d->w[i].tid, NULL);
	struct cl_row row = { .dur_ns = loco_now_ns() - t0 };
	loco_mgr_stats(d->mgr, &s1);
	cl_row_verbs(&row, &s0, &s1);
	row.extra[X_FLUSHES] = s1.flushes - s0.flushes;
	struct bench_lat lat;
	int wrc = row_fill(d, &row, &lat);
	bench_lat_fini(&lat);
	if (!rc)
		rc = cl_run_finish(&d->run, thr, &row, FINAL_MS, report, d);
	pthread_barrier_destroy(&d->phase);
	int drc = loco_thread_destroy(thr);
	rc = rc ? rc : drc;
	return rc ? rc : wrc ? wrc : row.extra[X_BAD] || row.extra[X_LOST] ?
	       -EIO : 0;
}

int main(int argc, char **argv)
{
	if (bench_wants_help(argc, argv)) {
		fputs(usage, stdout);
		return 0;
	}
	struct drv *d = calloc(1, sizeof(*d));
	struct local_node ln;
	if (!d)
		return 1;
	d->o = (struct drv_opts){ .keys = 100000, .value_size = 64, .read = 0.9,
				  .insert = 0.02, .threads = 1, .window = 1,
				  .locks = 0, .duration = 5, .fill = 0.8,
				  .seed = 1 };
	int rc = local_node_start(&ln, &argc, argv, "loco-kvstore", "shm");
	if (rc) {
		free(d);
		return rc;
	}
	d->mgr = ln.mgr;
	rc = parse(&d->o, argc, argv);
	if (!rc && (rc = setup(d)))
		fprintf(stderr, "loco-kvstore: set-up: %s\n", loco_strerror(rc));
	else if (!rc) {
		rc = run_all(d);
		if (rc)
			fprintf(stderr, "loco-kvstore: node %u: %s\n", d->self,
				loco_strerror(rc));
		teardown(d);
	}
	bool fenced = loco_self_fenced(ln.mgr);
	if (fenced)
		fprintf(stderr, "loco-kvstore: node %u: fenced: another node "
			"took over for it while it was silent (paused or slow "
			"past --timeout-ms); it stops\n", d->self);
	local_node_stop(&ln);
	free(d);
	return fenced ? 3 : rc == 2 ? 2 : rc ? 1 : 0;
}
