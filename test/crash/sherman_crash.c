/* SPDX-License-Identifier: MIT */
/* loco-sherman-crash: Sherman under clients that die (tools/loco-run
 * --kill, or LOCO_CRASH_AT=sherman.<point>), for the crash suite
 * (test/crash/check_sherman.py). A YCSB driver waits for every node at
 * its phase barriers; this program's nodes never wait for each other, so
 * the survivors of a kill finish and one of them checks the tree.
 *
 * Every node runs THREADS threads; each thread owns KEYS keys of its own
 * (inserted, updated and deleted only by it) spread over the key space,
 * and records for each key, in a hosted region of the first memory node,
 * its intent (the write it is about to make, placed before the write
 * starts) and its last acknowledged state. After --duration seconds a
 * node marks itself DONE. The reporter (--reporter ID if that node
 * finished, else the lowest DONE id) waits until every node is DONE or
 * dead (heartbeat still for --dead-ms), then: repairs every expired lock
 * (locks_held: those still held), verifies the tree (every level, fences,
 * order; missing parent entries linked), reads every key of every node
 * back and compares it with the acknowledged state, or with the intent
 * of a write that was in flight when its writer died (missing: an
 * acknowledged key not found; wrong: a value that is neither), and scans
 * the whole key space against those reads (scan_mismatch). One JSON
 * line; exit 0 if the checks ran (the verdict is the line's). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <loco/channels/sherman/sherman.h>
#include <loco/loco.h>
#include "apps/common/opts.h"

#define PROG "loco-sherman-crash"
#define MAX_THREADS 8
#define TOMB (UINT64_C(1) << 63)     /* an intent to delete */
#define BEAT_MS 10
#define SCAN_CHUNK 256

enum { ST_RUNNING = 1, ST_DONE = 2 };

/* A node's record (hosted): heartbeat, state, its counters. */
struct rec {
	uint64_t hb_ms, state, ops;
	uint64_t steals, redos, rtx_repairs, links, splits, lost;
};

/* One key's record: the write in flight and the last acknowledged state
 * (a value id, 0: absent). */
struct ack {
	uint64_t intent, acked;
};

struct opts {
	double duration;
	unsigned threads, keys, node, reporter, dead_ms, vlen, lease_ms;
	unsigned first, hold_ms;
	bool rtx;
};

struct node {
	struct opts o;
	struct loco_mgr *mgr;
	uint32_t self, home;
	struct loco_channel run;
	struct loco_rregion recs, acks;
	struct loco_sherman *t;
	_Atomic uint64_t ops;
	_Atomic bool stop;
	uint64_t t0_ns;
};

struct thr {
	struct node *n;
	unsigned idx;
	struct loco_thread *thr;
	struct loco_sherman_worker *w;
	uint64_t *state;          /* per own key: acknowledged value id */
	struct ack a;             /* WRITE source */
	uint64_t seq, rng;
	int rc;
};

static uint64_t realtime_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t rng(uint64_t *s)
{
	uint64_t x = *s;  /* xorshift64* */
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * UINT64_C(2685821657736338717);
}

/* Key I of thread T of node N: the nodes' keys interleave, so every leaf
 * is written by several nodes. */
static uint64_t key_of(uint32_t node, unsigned t, unsigned i)
{
	uint64_t owner = (uint64_t)node * MAX_THREADS + t;
	return ((uint64_t)i * LOCO_MAX_NODES * MAX_THREADS + owner) * 7 + 1;
}

static uint64_t ack_off(const struct node *n, uint32_t node, unsigned t,
			unsigned i)
{
	return (((uint64_t)node * MAX_THREADS + t) * n->o.keys + i) *
	       sizeof(struct ack);
}

/* The record index (ack_off / sizeof(struct ack)) of KEY, key_of's
 * inverse; false if no thread's keys hold it. */
static bool rec_of(const struct node *n, uint64_t key, size_t *k)
{
	uint64_t owners = (uint64_t)LOCO_MAX_NODES * MAX_THREADS;
	uint64_t x = (key - 1) / 7, i = x / owners;
	if (key % 7 != 1 || i >= n->o.keys)
		return false;
	*k = (size_t)((x % owners) * n->o.keys + i);
	return true;
}

/* ---- options -------------------------------------------------------------- */

static const char usage[] =
"usage: " PROG " [node options] [options]\n"
"  --duration S     seconds of writes per node (default 2)\n"
"  --threads T      writer threads per node, 1..8 (2)\n"
"  --keys K         keys per thread (200)\n"
"  --node BYTES     tree node size (256: many splits)\n"
"  --value-size B   value bytes, 8..256 (8)\n"
"  --rtx            split mode rtx (default plain)\n"
"  --lease-ms MS    plain mode lock lease (default the tree's)\n"
"  --first ID --hold-ms MS  the other nodes start writing MS later (node\n"
"                   ID alone grows the young tree: its root splits)\n"
"  --reporter ID    the node that checks, if it finishes (default: the\n"
"                   lowest that does)\n"
"  --dead-ms MS     heartbeat silence that makes a node dead (500)\n";

static int opt_one(void *p, int c, const char *arg, char *expect)
{
	struct opts *o = p;
	switch (c) {
	case 'd': return bench_parse_duration(arg, &o->duration, expect);
	case 't': return bench_parse_uint(arg, 1, MAX_THREADS, &o->threads, expect);
	case 'k': return bench_parse_uint(arg, 1, 100000, &o->keys, expect);
	case 'n': return bench_parse_uint(arg, LOCO_SHERMAN_NODE_MIN,
					  LOCO_SHERMAN_NODE_MAX, &o->node, expect);
	case 'v': return bench_parse_uint(arg, 8, LOCO_SHERMAN_VALUE_MAX,
					  &o->vlen, expect);
	case 'r': return bench_parse_uint(arg, 0, LOCO_MAX_NODES - 1,
					  &o->reporter, expect);
	case 'D': return bench_parse_uint(arg, 50, 600000, &o->dead_ms, expect);
	case 'x': o->rtx = true; return 0;
	case 'l': return bench_parse_uint(arg, 2, 60000, &o->lease_ms, expect);
	case 'f': return bench_parse_uint(arg, 0, LOCO_MAX_NODES - 1, &o->first,
					  expect);
	case 'H': return bench_parse_uint(arg, 0, 60000, &o->hold_ms, expect);
	default: return -1;
	}
}

static int parse(int argc, char **argv, struct loco_opts *lo, struct opts *o)
{
	static const struct option longopts[] = {
		{ "duration", required_argument, NULL, 'd' },
		{ "threads", required_argument, NULL, 't' },
		{ "keys", required_argument, NULL, 'k' },
		{ "node", required_argument, NULL, 'n' },
		{ "value-size", required_argument, NULL, 'v' },
		{ "rtx", no_argument, NULL, 'x' },
		{ "lease-ms", required_argument, NULL, 'l' },
		{ "first", required_argument, NULL, 'f' },
		{ "hold-ms", required_argument, NULL, 'H' },
		{ "reporter", required_argument, NULL, 'r' },
		{ "dead-ms", required_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	char err[256];
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help")) {
			fputs(usage, stdout);
			return 0;
		}
	if (loco_opts_parse(lo, &argc, argv, err, sizeof(err))) {
		fprintf(stderr, PROG ": %s\n", err);
		return 2;
	}
	*o = (struct opts){ .duration = 2, .threads = 2, .keys = 200,
			    .node = 256, .vlen = 8, .reporter = LOCO_MAX_NODES,
			    .dead_ms = 500 };
	int rc = bench_getopt(argc, argv, "", longopts, opt_one, o, PROG);
	if (rc == 1)
		fputs(usage, stdout);
	if (!rc && o->vlen % 8)
		rc = bench_opt_error(PROG, "--value-size: bad value %u (a "
				     "multiple of 8)", o->vlen);
	return rc == 1 ? 0 : rc ? 2 : -1;
}

/* ---- records ------------------------------------------------------------------- */

static int publish(struct node *n, struct loco_thread *thr, uint64_t state)
{
	struct loco_sherman_stats s;
	loco_sherman_stats(n->t, &s);
	struct rec r = {
		.hb_ms = realtime_ms(), .state = ST_RUNNING,
		/* Relaxed: a counter, published by the WRITE. */
		.ops = atomic_load_explicit(&n->ops, memory_order_relaxed),
		.steals = s.steals, .redos = s.redos,
		.rtx_repairs = s.rtx_repairs, .links = s.links,
		.splits = s.splits, .lost = s.lost_locks,
	};
	uint64_t off = (uint64_t)n->self * sizeof(r);
	int rc = loco_write(thr, &n->recs, off, &r, sizeof(r));
	if (rc || state != ST_DONE)
		return rc;
	/* The record placed before the DONE mark, the mark before we go. */
	rc = loco_fence(thr, LOCO_FENCE_PAIR, n->home);
	if (!rc)
		rc = loco_write(thr, &n->recs, off + offsetof(struct rec, state),
				&state, 8);
	return rc ? rc : loco_fence(thr, LOCO_FENCE_PAIR, n->home);
}

static void *beat_main(void *p)
{
	struct node *n = p;
	struct loco_thread *thr;
	if (loco_thread_create(n->mgr, &thr))
		return NULL;
	/* Relaxed: a stop flag. */
	while (!atomic_load_explicit(&n->stop, memory_order_relaxed)) {
		publish(n, thr, ST_RUNNING);
		struct timespec ts = { 0, BEAT_MS * 1000000L };
		nanosleep(&ts, NULL);
	}
	loco_thread_destroy(thr);
	return NULL;
}

/* ---- the writers ---------------------------------------------------------------- */

/* Record the intent of the write of key I (placed before the write). */
static int intend(struct thr *t, unsigned i, uint64_t intent)
{
	struct node *n = t->n;
	t->a = (struct ack){ .intent = intent, .acked = t->state[i] };
	int rc = loco_write(t->thr, &n->acks, ack_off(n, n->self, t->idx, i),
			    &t->a, sizeof(t->a));
	return rc ? rc : loco_fence(t->thr, LOCO_FENCE_PAIR, n->home);
}

static int one_op(struct thr *t)
{
	struct node *n = t->n;
	unsigned i = (unsigned)(rng(&t->rng) % n->o.keys);
	uint64_t key = key_of(n->self, t->idx, i);
	uint64_t id = (uint64_t)(n->self + 1) << 48 | (uint64_t)t->idx << 40 |
		      ++t->seq;
	uint64_t val[LOCO_SHERMAN_VALUE_MAX / 8];
	for (unsigned k = 0; k < n->o.vlen / 8; k++)
		val[k] = id ^ key ^ k;
	bool present = t->state[i] != 0;
	bool del = present && rng(&t->rng) % 4 == 0;
	int rc = intend(t, i, del ? TOMB | id : id);
	if (rc)
		return rc;
	rc = del ? loco_sherman_delete(t->w, key) :
	     present ? loco_sherman_update(t->w, key, val) :
		       loco_sherman_insert(t->w, key, val);
	if (rc) {
		fprintf(stderr, PROG ": node %u: %s of key %" PRIu64 ": %s\n",
			n->self, del ? "delete" : present ? "update" : "insert",
			key, loco_strerror(rc));
		return rc;
	}
	t->state[i] = del ? 0 : id;
	t->a.acked = t->state[i];
	/* Relaxed: a counter. */
	atomic_fetch_add_explicit(&n->ops, 1, memory_order_relaxed);
	return loco_write(t->thr, &n->acks, ack_off(n, n->self, t->idx, i) +
			  offsetof(struct ack, acked), &t->a.acked, 8);
}

static void *writer_main(void *p)
{
	struct thr *t = p;
	struct node *n = t->n;
	t->rc = loco_thread_create(n->mgr, &t->thr);
	if (!t->rc)
		t->rc = loco_sherman_worker_create(n->t, t->thr, &t->w);
	uint64_t end = n->t0_ns + (uint64_t)(n->o.duration * 1e9);
	while (!t->rc && loco_now_ns() < end)
		t->rc = one_op(t);
	if (t->w) {
		if (!t->rc)
			t->rc = loco_fence(t->thr, LOCO_FENCE_THREAD, 0);
		loco_sherman_worker_destroy(t->w);
	}
	if (t->thr)
		loco_thread_destroy(t->thr);
	return NULL;
}

static int run_writers(struct node *n)
{
	pthread_t th[MAX_THREADS];
	struct thr t[MAX_THREADS];
	int rc = 0;
	if (n->self != n->o.first && n->o.hold_ms) {
		struct timespec ts = { n->o.hold_ms / 1000,
				       (long)(n->o.hold_ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
	n->t0_ns = loco_now_ns();
	for (unsigned i = 0; i < n->o.threads; i++) {
		t[i] = (struct thr){ .n = n, .idx = i,
				     .rng = n->self * 7919u + i * 104729u + 1 };
		t[i].state = calloc(n->o.keys, sizeof(uint64_t));
		if (!t[i].state || pthread_create(&th[i], NULL, writer_main, &t[i]))
			abort();
	}
	/* loco-run aims its kills at this line (--kill ID@after:ID:...). */
	fprintf(stderr, PROG ": node %u: measured phase begins\n", n->self);
	for (unsigned i = 0; i < n->o.threads; i++) {
		pthread_join(th[i], NULL);
		rc = rc ? rc : t[i].rc;
		free(t[i].state);
	}
	return rc;
}

/* ---- the reporter ---------------------------------------------------------------- */

struct result {
	uint64_t ops, dead, done, checked, missing, wrong, scan_mismatch;
	uint64_t held, repairs, links, splits, lost;
	struct loco_sherman_verify v;
};

/* Wait until every compute node is DONE or dead; 0 and the records. */
static int wait_all(struct node *n, struct loco_thread *thr, struct rec *r,
		    uint64_t *dead)
{
	const struct loco_hosts *h = loco_mgr_hosts(n->mgr);
	uint64_t last[LOCO_MAX_NODES] = { 0 }, since[LOCO_MAX_NODES] = { 0 };
	for (;;) {
		int rc = loco_read(thr, &n->recs, 0, r,
				   LOCO_MAX_NODES * sizeof(*r));
		if (rc)
			return rc;
		uint64_t now = realtime_ms(), open = 0;
		*dead = 0;
		for (uint32_t id = 0; id <= h->max_id; id++) {
			if (!h->node[id].present ||
			    h->node[id].role != LOCO_ROLE_COMPUTE ||
			    r[id].state == ST_DONE)
				continue;
			if (r[id].hb_ms != last[id] || !since[id]) {
				last[id] = r[id].hb_ms;
				since[id] = now;
			}
			/* Silent for --dead-ms: only a suspect; dead once
			 * fenced (it can write nothing more), else waited for. */
			if (now - since[id] >= n->o.dead_ms &&
			    !loco_fence_node(n->mgr, id, (int)n->o.dead_ms))
				(*dead)++;
			else
				open++;
		}
		if (!open)
			return 0;
		struct timespec ts = { 0, BEAT_MS * 1000000L };
		nanosleep(&ts, NULL);
	}
}

/* Key I of thread T of node ID against its record: the tree's state must
 * be the acknowledged one, or the intent's if a write was in flight. */
static int check_key(struct loco_sherman_worker *w,
		     uint32_t id, unsigned t, unsigned i, const struct ack *a,
		     struct result *res, uint64_t *found)
{
	uint64_t key = key_of(id, t, i);
	uint64_t val[LOCO_SHERMAN_VALUE_MAX / 8];
	int rc = loco_sherman_lookup(w, key, val);
	if (rc && rc != -ENOENT)
		return rc;
	uint64_t got = rc ? 0 : val[0] ^ key;
	*found = got;
	bool in_flight = a->intent && (a->intent & ~TOMB) != a->acked;
	uint64_t alt = a->intent & TOMB ? 0 : a->intent;
	res->checked++;
	if (got == a->acked || (in_flight && got == alt))
		return 0;
	if (!got)
		res->missing++;
	else
		res->wrong++;
	fprintf(stderr, PROG ": key %" PRIu64 " (node %u): found %#" PRIx64
		", acknowledged %#" PRIx64 ", intent %#" PRIx64 "\n", key, id,
		got, a->acked, a->intent);
	return 0;
}

/* The whole key space scanned against the reads (FOUND[k]: the value id
 * read of record k, 0: absent; PER records): each pair must be a key a
 * read found, with the value it found, and every key found must come
 * (scan_mismatch: the pairs that are not, and the keys missing). */
static int check_scan(struct node *n, struct loco_sherman_worker *w,
		      const uint64_t *found, size_t per, struct result *res)
{
	uint64_t keys[SCAN_CHUNK], from = 0, seen = 0, same = 0, want = 0;
	static uint64_t vals[SCAN_CHUNK * LOCO_SHERMAN_VALUE_MAX / 8];
	int rc = 0;
	for (size_t k = 0; k < per; k++)
		want += found[k] != 0;
	for (unsigned got = SCAN_CHUNK; !rc && got == SCAN_CHUNK;) {
		rc = loco_sherman_scan(w, from, LOCO_SHERMAN_KEY_MAX, SCAN_CHUNK,
				       keys, vals, &got);
		for (unsigned j = 0; !rc && j < got; j++) {
			size_t k;
			uint64_t id = vals[(size_t)j * n->o.vlen / 8] ^ keys[j];
			if (rec_of(n, keys[j], &k) && found[k] && found[k] == id)
				same++;
			else
				fprintf(stderr, PROG ": the scan found key %" PRIu64
					" with %#" PRIx64 ", the reads did not\n",
					keys[j], id);
		}
		seen += rc ? 0 : got;
		if (!rc && got)
			from = keys[got - 1] + 1;
	}
	if (!rc && (seen != same || same != want)) {
		res->scan_mismatch = (seen - same) + (want - same);
		fprintf(stderr, PROG ": the scan found %" PRIu64 " keys, %" PRIu64
			" of them as read; the reads %" PRIu64 "\n", seen, same,
			want);
	}
	return rc;
}

/* Every key of every node read back against its record, then the scan
 * against the reads. */
static int check_keys(struct node *n, struct loco_sherman_worker *w,
		      struct loco_thread *thr, struct result *res)
{
	const struct loco_hosts *h = loco_mgr_hosts(n->mgr);
	size_t per = (size_t)LOCO_MAX_NODES * MAX_THREADS * n->o.keys;
	struct ack *a = calloc(per, sizeof(*a));
	uint64_t *found = calloc(per, sizeof(*found));
	int rc = a && found ? 0 : -ENOMEM;
	for (uint64_t off = 0; !rc && off < per * sizeof(*a); off += 65536) {
		uint64_t len = per * sizeof(*a) - off;
		rc = loco_read(thr, &n->acks, off, (uint8_t *)a + off,
			       (uint32_t)(len < 65536 ? len : 65536));
	}
	for (uint32_t id = 0; !rc && id <= h->max_id; id++)
		for (unsigned t = 0; !rc && t < n->o.threads; t++)
			for (unsigned i = 0; !rc && i < n->o.keys; i++) {
				size_t k = ack_off(n, id, t, i) / sizeof(*a);
				if (!a[k].intent && !a[k].acked)
					continue;
				rc = check_key(w, id, t, i, &a[k], res,
					       &found[k]);
			}
	if (!rc)
		rc = check_scan(n, w, found, per, res);
	free(a);
	free(found);
	return rc;
}

static int report(struct node *n, struct loco_thread *thr, struct result *res)
{
	struct rec r[LOCO_MAX_NODES];
	int rc = wait_all(n, thr, r, &res->dead);
	for (uint32_t id = 0; !rc && id < LOCO_MAX_NODES; id++) {
		res->ops += r[id].ops;
		res->done += r[id].state == ST_DONE;
		res->repairs += r[id].steals + r[id].redos + r[id].rtx_repairs;
		res->links += r[id].links;
		res->splits += r[id].splits;
		res->lost += r[id].lost;
	}
	struct loco_sherman_worker *w;
	if (!rc)
		rc = loco_sherman_worker_create(n->t, thr, &w);
	if (rc)
		return rc;
	struct loco_sherman_stats s0, s1;
	loco_sherman_worker_stats(w, &s0);
	rc = loco_sherman_repair_locks(w, -1, &res->held);
	loco_sherman_worker_stats(w, &s1);
	res->repairs += s1.steals - s0.steals + s1.redos - s0.redos +
			s1.rtx_repairs - s0.rtx_repairs;
	if (!rc)
		rc = loco_sherman_verify(w, true, &res->v);
	if (!rc)
		rc = check_keys(n, w, thr, res);
	loco_sherman_worker_destroy(w);
	return rc;
}

static void print_line(const struct node *n, const struct result *r)
{
	printf("{\"app\":\"sherman-crash\",\"transport\":\"%s\",\"mode\":\"%s\","
	       "\"threads\":%u,\"duration_s\":%.3f,\"ops\":%" PRIu64 ","
	       "\"done\":%" PRIu64 ",\"dead\":%" PRIu64 ",\"splits\":%" PRIu64
	       ",\"repairs\":%" PRIu64 ",\"links\":%" PRIu64 ",\"lost_locks\":%"
	       PRIu64 ",\"locks_held\":%"
	       PRIu64 ",\"levels\":%u,\"leaves\":%" PRIu64 ",\"keys\":%" PRIu64
	       ",\"unlinked\":%" PRIu64 ",\"linked\":%" PRIu64
	       ",\"verify_errors\":%" PRIu64 ",\"checked\":%" PRIu64
	       ",\"missing\":%" PRIu64 ",\"wrong\":%" PRIu64
	       ",\"scan_mismatch\":%" PRIu64 "}\n",
	       loco_mgr_transport(n->mgr), n->o.rtx ? "rtx" : "plain",
	       n->o.threads, n->o.duration, r->ops, r->done, r->dead, r->splits,
	       r->repairs, r->links, r->lost, r->held, r->v.levels, r->v.leaves,
	       r->v.keys, r->v.unlinked, r->v.linked, r->v.errors, r->checked,
	       r->missing, r->wrong, r->scan_mismatch);
	if (r->v.errors)
		fprintf(stderr, PROG ": verify: %s\n", r->v.first_error);
	fflush(stdout);
}

/* The reporter: --reporter if it is DONE, else the lowest DONE node. */
static bool am_reporter(struct node *n, struct loco_thread *thr)
{
	struct rec r[LOCO_MAX_NODES];
	uint64_t dead;
	if (wait_all(n, thr, r, &dead))
		return false;
	if (n->o.reporter < LOCO_MAX_NODES && r[n->o.reporter].state == ST_DONE)
		return n->self == n->o.reporter;
	for (uint32_t id = 0; id < LOCO_MAX_NODES; id++)
		if (r[id].state == ST_DONE)
			return id == n->self;
	return false;
}

/* ---- setup ------------------------------------------------------------------------ */

static int node_open(struct node *n)
{
	int m = loco_mgr_first_memnode(n->mgr);
	n->home = m >= 0 ? (uint32_t)m : 0;
	int rc = loco_channel_init(&n->run, n->mgr, NULL, "shcrash",
				   UINT64_C(1) << n->self, NULL);
	if (!rc)
		rc = loco_channel_join(&n->run);
	if (!rc)
		rc = loco_channel_open_hosted(&n->run, n->home, "recs",
					      LOCO_MAX_NODES * sizeof(struct rec),
					      &n->recs);
	if (!rc)
		rc = loco_channel_open_hosted(&n->run, n->home, "acks",
			(uint64_t)LOCO_MAX_NODES * MAX_THREADS * n->o.keys *
			sizeof(struct ack), &n->acks);
	struct loco_sherman_opts so = { .name = "shtree", .rtx = n->o.rtx,
					.node_size = n->o.node,
					.value_len = n->o.vlen,
					.nodes = 4 * LOCO_MAX_NODES * n->o.keys,
					.lease_ms = n->o.lease_ms };
	if (!rc)
		rc = loco_sherman_create(n->mgr, &so, &n->t);
	return rc;
}

static int node_main(struct node *n)
{
	struct loco_thread *thr;
	int rc = loco_thread_create(n->mgr, &thr);
	if (rc)
		return rc;
	pthread_t beat;
	rc = publish(n, thr, ST_RUNNING);
	if (!rc)
		rc = pthread_create(&beat, NULL, beat_main, n) ? -EAGAIN : 0;
	if (rc) {
		loco_thread_destroy(thr);
		return rc;
	}
	rc = run_writers(n);
	/* Relaxed: a stop flag. */
	atomic_store_explicit(&n->stop, true, memory_order_relaxed);
	pthread_join(beat, NULL);
	if (!rc)
		rc = publish(n, thr, ST_DONE);
	if (!rc && am_reporter(n, thr)) {
		struct result res = { 0 };
		rc = report(n, thr, &res);
		if (!rc)
			print_line(n, &res);
	}
	loco_thread_destroy(thr);
	return rc;
}

int main(int argc, char **argv)
{
	struct loco_opts lo;
	struct node n = { 0 };
	int rc = parse(argc, argv, &lo, &n.o);
	if (rc >= 0)
		return rc;
	if ((rc = loco_mgr_create(&lo, &n.mgr))) {
		fprintf(stderr, PROG ": %s\n", loco_strerror(rc));
		return 1;
	}
	n.self = loco_mgr_id(n.mgr);
	rc = node_open(&n);
	if (!rc)
		rc = loco_mgr_wait_ready(n.mgr, -1);
	if (!rc)
		rc = node_main(&n);
	if (rc)
		fprintf(stderr, PROG ": node %u: %s\n", n.self, loco_strerror(rc));
	/* Exit 3 when fenced (taken for dead while it was silent): the crash
	 * checks count it as killed. */
	bool fenced = rc && loco_self_fenced(n.mgr);
	loco_sherman_destroy(n.t);
	loco_channel_fini(&n.run);
	loco_mgr_destroy(n.mgr);
	return fenced ? 3 : rc ? 1 : 0;
}
