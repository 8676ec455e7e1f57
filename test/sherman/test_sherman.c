/* SPDX-License-Identifier: MIT */
/* Sherman on in-process clusters (the transport from LOCO_TRANSPORT: the
 * meson file runs it on shm and shm-weak), in both split modes where it
 * matters: operations and their outcomes, bad input, splits of tiny nodes
 * to a deep tree checked by verify, scans with ranges and limits, nodes
 * spread over two hosting nodes, round trips per operation, HOCL's
 * handover and another node's writer getting its turn, torn reads with and without the checks, concurrent histories
 * checked by loco-lincheck's ordered-map model (and the broken scan
 * caught), crash states a dead writer leaves (crafted, or a worker
 * stalled at a sherman.* point past its lease), and verify catching a
 * broken tree. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "channels/sherman/internal.h"
#include "rtx/internal.h"
#include "test/common/cluster.h"
#include "test/common/skip.h"
#include "tools/lincheck/lincheck.h"

#define TIMEOUT_MS 8000

static struct cluster cl;

static bool weak(void)
{
	const char *t = getenv("LOCO_TRANSPORT");
	return t && !strcmp(t, "shm-weak");
}

static void setup1(void)
{
	ck_assert_int_eq(cluster_start(&cl, 1, 0, TIMEOUT_MS), 0);
}

static void setup2(void)
{
	ck_assert_int_eq(cluster_start(&cl, 2, 0, TIMEOUT_MS), 0);
}

static void teardown(void)
{
	cluster_stop(&cl);
}

/* Tiny nodes (two entries per leaf, three separators per internal node):
 * a few hundred keys make a tree of many levels. */
static struct loco_sherman_opts tiny(bool rtx)
{
	return (struct loco_sherman_opts){ .node_size = 128, .nodes = 4096,
					   .locks = 1024, .rtx = rtx };
}

static struct loco_sherman *make(unsigned node, struct loco_sherman_opts o)
{
	struct loco_sherman *t;
	ck_assert_int_eq(loco_sherman_create(cl.mgr[node], &o, &t), 0);
	return t;
}

static struct loco_sherman_worker *worker(struct loco_sherman *t,
					  struct loco_thread *thr)
{
	struct loco_sherman_worker *w;
	ck_assert_int_eq(loco_sherman_worker_create(t, thr, &w), 0);
	return w;
}

/* A loco thread of node NODE and a worker on T, for a test's OS thread;
 * and their end (the worker's counters into *ST, if not NULL). */
static struct loco_sherman_worker *thread_worker(struct loco_sherman *t,
						 unsigned node,
						 struct loco_thread **thr)
{
	ck_assert_int_eq(loco_thread_create(cl.mgr[node], thr), 0);
	return worker(t, *thr);
}

static void thread_worker_end(struct loco_sherman_worker *w,
			      struct loco_thread *thr,
			      struct loco_sherman_stats *st)
{
	if (st)
		loco_sherman_worker_stats(w, st);
	loco_sherman_worker_destroy(w);
	loco_thread_destroy(thr);
}

static uint64_t val_of(uint64_t key)
{
	return key * 1000003u + 7;
}

static void check_tree(struct loco_sherman_worker *w, uint64_t keys)
{
	struct loco_sherman_verify v;
	ck_assert_int_eq(loco_sherman_verify(w, false, &v), 0);
	ck_assert_msg(v.errors == 0, "verify: %s", v.first_error);
	ck_assert_uint_eq(v.unlinked, 0);
	ck_assert_uint_eq(v.keys, keys);
}

static void shuffle(uint64_t *k, unsigned n, uint64_t seed)
{
	for (unsigned i = n - 1; i > 0; i--) {
		seed = seed * 6364136223846793005u + 1442695040888963407u;
		unsigned j = (unsigned)((seed >> 33) % (i + 1));
		uint64_t x = k[i];
		k[i] = k[j];
		k[j] = x;
	}
}

/* ---- operations ------------------------------------------------------------ */

START_TEST(ops_and_outcomes)
{
	bool rtx = _i;
	struct loco_sherman *t = make(0, tiny(rtx));
	struct loco_sherman_worker *w = worker(t, cl.thr[0]);
	uint64_t v = 0, x = 5;
	ck_assert_int_eq(loco_sherman_lookup(w, 1, &v), -ENOENT);
	ck_assert_int_eq(loco_sherman_insert(w, 1, &x), 0);
	ck_assert_int_eq(loco_sherman_insert(w, 1, &x), -EEXIST);
	ck_assert_int_eq(loco_sherman_lookup(w, 1, &v), 0);
	ck_assert_uint_eq(v, 5);
	x = 6;
	ck_assert_int_eq(loco_sherman_update(w, 1, &x), 0);
	ck_assert_int_eq(loco_sherman_update(w, 2, &x), -ENOENT);
	ck_assert_int_eq(loco_sherman_lookup(w, 1, &v), 0);
	ck_assert_uint_eq(v, 6);
	ck_assert_int_eq(loco_sherman_delete(w, 1), 0);
	ck_assert_int_eq(loco_sherman_delete(w, 1), -ENOENT);
	v = 99;
	ck_assert_int_eq(loco_sherman_lookup(w, 1, &v), -ENOENT);
	ck_assert_uint_eq(v, 99);                 /* untouched */
	/* The extreme keys. */
	ck_assert_int_eq(loco_sherman_insert(w, 0, &x), 0);
	ck_assert_int_eq(loco_sherman_insert(w, LOCO_SHERMAN_KEY_MAX, &x), 0);
	ck_assert_int_eq(loco_sherman_lookup(w, LOCO_SHERMAN_KEY_MAX, &v), 0);
	ck_assert_int_eq(loco_sherman_insert(w, UINT64_MAX, &x), -EINVAL);
	ck_assert_int_eq(loco_sherman_lookup(w, UINT64_MAX, &v), -EINVAL);
	ck_assert_int_eq(loco_sherman_insert(w, 3, NULL), -EINVAL);
	check_tree(w, 2);
	struct loco_sherman_stats s;
	loco_sherman_worker_stats(w, &s);
	ck_assert_uint_eq(s.inserts, 6);
	ck_assert_uint_eq(s.torn_returned, 0);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

START_TEST(bad_options)
{
	struct loco_sherman *t;
	struct loco_sherman_opts o = tiny(false);
	struct loco_mgr *m = cl.mgr[0];
	o.node_size = 100;
	ck_assert_int_eq(loco_sherman_create(m, &o, &t), -EINVAL);
	o.node_size = 8192;
	ck_assert_int_eq(loco_sherman_create(m, &o, &t), -EINVAL);
	o = tiny(false);
	o.value_len = 12;
	ck_assert_int_eq(loco_sherman_create(m, &o, &t), -EINVAL);
	o.value_len = 64;                      /* 128-byte node: one entry */
	ck_assert_int_eq(loco_sherman_create(m, &o, &t), -EINVAL);
	o = tiny(false);
	o.mem_nodes = UINT64_C(1) << 5;        /* not in the hosts file */
	ck_assert_int_eq(loco_sherman_create(m, &o, &t), -EINVAL);
	o = tiny(false);
	o.name = "a/b";
	ck_assert_int_eq(loco_sherman_create(m, &o, &t), -EINVAL);
	o = tiny(false);
	o.unsafe = 0x80;
	ck_assert_int_eq(loco_sherman_create(m, &o, &t), -EINVAL);
	/* A second handle of one name on one node; another layout. */
	struct loco_sherman *a = make(0, tiny(false)), *b;
	ck_assert_int_eq(loco_sherman_create(m, &(struct loco_sherman_opts){
		.node_size = 128, .nodes = 4096, .locks = 1024 }, &b), -EEXIST);
	loco_sherman_destroy(a);
	struct loco_sherman_opts other = tiny(false);
	other.name = "t2";
	a = make(0, other);
	struct loco_sherman_worker *w = worker(a, cl.thr[0]);
	uint64_t x = 1, keys[2], vals[2];
	unsigned n;
	ck_assert_int_eq(loco_sherman_scan(w, 5, 4, 2, keys, vals, &n), -EINVAL);
	ck_assert_int_eq(loco_sherman_scan(w, 4, 5, 0, keys, vals, &n), -EINVAL);
	ck_assert_int_eq(loco_sherman_scan(w, 4, UINT64_MAX, 2, keys, vals, &n),
			 -EINVAL);
	ck_assert_int_eq(loco_sherman_insert(w, 1, &x), 0);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(a);
}
END_TEST

START_TEST(layout_mismatch)
{
	struct loco_sherman_opts o = tiny(false);
	o.mem_nodes = 1;                       /* node 0 hosts */
	struct loco_sherman *a = make(0, o), *b;
	o.value_len = 16;
	ck_assert_int_eq(loco_sherman_create(cl.mgr[1], &o, &b), -LOCO_EMISMATCH);
	o.value_len = 8;
	o.rtx = true;
	ck_assert_int_eq(loco_sherman_create(cl.mgr[1], &o, &b), -LOCO_EMISMATCH);
	loco_sherman_destroy(a);
}
END_TEST

/* ---- splits, scans ------------------------------------------------------------ */

#define NKEYS 600

START_TEST(splits_to_a_deep_tree)
{
	bool rtx = _i;
	struct loco_sherman *t = make(0, tiny(rtx));
	struct loco_sherman_worker *w = worker(t, cl.thr[0]);
	static uint64_t k[NKEYS];
	for (unsigned i = 0; i < NKEYS; i++)
		k[i] = (uint64_t)i * 3;
	shuffle(k, NKEYS, 42);
	for (unsigned i = 0; i < NKEYS; i++) {
		uint64_t v = val_of(k[i]);
		ck_assert_int_eq(loco_sherman_insert(w, k[i], &v), 0);
	}
	struct loco_sherman_verify v;
	ck_assert_int_eq(loco_sherman_verify(w, false, &v), 0);
	ck_assert_msg(v.errors == 0, "verify: %s", v.first_error);
	ck_assert_uint_eq(v.keys, NKEYS);
	ck_assert_uint_eq(v.unlinked, 0);
	ck_assert_uint_ge(v.levels, 5);
	ck_assert_uint_ge(v.leaves, NKEYS / 2);
	for (unsigned i = 0; i < NKEYS; i++) {
		uint64_t got = 0;
		ck_assert_int_eq(loco_sherman_lookup(w, (uint64_t)i * 3, &got), 0);
		ck_assert_uint_eq(got, val_of((uint64_t)i * 3));
		ck_assert_int_eq(loco_sherman_lookup(w, (uint64_t)i * 3 + 1, &got),
				 -ENOENT);
	}
	static uint64_t keys[NKEYS], vals[NKEYS];
	unsigned n = 0;
	ck_assert_int_eq(loco_sherman_scan(w, 0, LOCO_SHERMAN_KEY_MAX, NKEYS,
					   keys, vals, &n), 0);
	ck_assert_uint_eq(n, NKEYS);
	for (unsigned i = 0; i < n; i++) {
		ck_assert_uint_eq(keys[i], (uint64_t)i * 3);
		ck_assert_uint_eq(vals[i], val_of(keys[i]));
	}
	/* Deletes in place: nodes stay, keys go. */
	for (unsigned i = 0; i < NKEYS; i += 2)
		ck_assert_int_eq(loco_sherman_delete(w, (uint64_t)i * 3), 0);
	check_tree(w, NKEYS / 2);
	ck_assert_int_eq(loco_sherman_scan(w, 0, LOCO_SHERMAN_KEY_MAX, NKEYS,
					   keys, vals, &n), 0);
	ck_assert_uint_eq(n, NKEYS / 2);
	for (unsigned i = 0; i < n; i++)
		ck_assert_uint_eq(keys[i], (uint64_t)(2 * i + 1) * 3);
	struct loco_sherman_stats s;
	loco_sherman_worker_stats(w, &s);
	ck_assert_uint_ge(s.splits, NKEYS / 2);
	ck_assert_uint_ge(s.root_splits, 4);
	/* A split leaves its separator missing from at most one cached copy
	 * of its parent, which the first move right it causes drops: moves
	 * stay below splits (a stale copy kept, e.g. the root's from before
	 * a root split, sends descents along whole levels: 4585 here). */
	ck_assert_uint_le(s.sibling_moves, s.splits);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

START_TEST(scan_ranges_and_limits)
{
	bool rtx = _i;
	struct loco_sherman *t = make(0, tiny(rtx));
	struct loco_sherman_worker *w = worker(t, cl.thr[0]);
	for (uint64_t key = 10; key < 200; key += 10) {
		uint64_t v = val_of(key);
		ck_assert_int_eq(loco_sherman_insert(w, key, &v), 0);
	}
	uint64_t keys[32], vals[32];
	unsigned n = 99;
	ck_assert_int_eq(loco_sherman_scan(w, 11, 19, 8, keys, vals, &n), 0);
	ck_assert_uint_eq(n, 0);                     /* empty range */
	ck_assert_int_eq(loco_sherman_scan(w, 50, 50, 8, keys, vals, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(keys[0], 50);
	ck_assert_uint_eq(vals[0], val_of(50));
	ck_assert_int_eq(loco_sherman_scan(w, 45, 125, 32, keys, vals, &n), 0);
	ck_assert_uint_eq(n, 8);                     /* 50..120 */
	for (unsigned i = 0; i < n; i++)
		ck_assert_uint_eq(keys[i], 50 + 10 * i);
	ck_assert_int_eq(loco_sherman_scan(w, 0, LOCO_SHERMAN_KEY_MAX, 3, keys,
					   vals, &n), 0);
	ck_assert_uint_eq(n, 3);                     /* the smallest three */
	ck_assert_uint_eq(keys[0], 10);
	ck_assert_uint_eq(keys[2], 30);
	ck_assert_int_eq(loco_sherman_scan(w, 185, LOCO_SHERMAN_KEY_MAX, 32,
					   keys, vals, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(keys[0], 190);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

/* Two hosting nodes, a handle on each: nodes are allocated on both, and
 * each node's cache, stale after the other's splits, still leads right. */
START_TEST(two_hosting_nodes)
{
	bool rtx = _i;
	struct loco_sherman_opts o = tiny(rtx);
	o.mem_nodes = 3;
	struct loco_sherman *t0 = make(0, o), *t1 = make(1, o);
	struct loco_sherman_worker *w0 = worker(t0, cl.thr[0]);
	struct loco_sherman_worker *w1 = worker(t1, cl.thr[1]);
	unsigned on[2] = { 0, 0 };
	for (uint64_t key = 0; key < 200; key++) {
		uint64_t v = val_of(key), got;
		ck_assert_int_eq(loco_sherman_insert(key & 1 ? w1 : w0, key, &v), 0);
		ck_assert_int_eq(loco_sherman_lookup(key & 1 ? w0 : w1, key, &got), 0);
		ck_assert_uint_eq(got, v);
	}
	for (uint64_t key = 0; key < 200; key++) {
		uint64_t got;
		ck_assert_int_eq(loco_sherman_lookup(w0, key, &got), 0);
		ck_assert_int_eq(loco_sherman_lookup(w1, key, &got), 0);
	}
	/* Where the leaves are. */
	loco_raddr_t a = 0;
	struct sh_path path;
	ck_assert_int_eq(sh_descend(w0, 0, 0, true, &a, &path), 0);
	for (; a; a = ((struct sh_hdr *)w0->nb[2])->sibling) {
		ck_assert_int_eq(sh_read_node(w0, a, w0->nb[2]), 0);
		on[loco_raddr_node(a)]++;
	}
	ck_assert_uint_gt(on[0], 10);
	ck_assert_uint_gt(on[1], 10);
	check_tree(w1, 200);
	struct loco_sherman_stats s0, s1;
	loco_sherman_stats(t0, &s0);
	loco_sherman_stats(t1, &s1);
	ck_assert_uint_gt(s0.cache_hits + s1.cache_hits, 0);
	ck_assert_uint_gt(s0.sibling_moves + s1.sibling_moves +
			  s0.cache_stale + s1.cache_stale, 0);
	loco_sherman_worker_destroy(w0);
	loco_sherman_worker_destroy(w1);
	loco_sherman_destroy(t0);
	loco_sherman_destroy(t1);
}
END_TEST

/* ---- round trips ------------------------------------------------------------------ */

static uint64_t rtts(struct loco_thread *thr)
{
	struct loco_stats s;
	loco_thread_stats(thr, &s);
	return s.rtts;
}

/* Plain mode, 1 KiB nodes, warm cache: a lookup is one READ (one round
 * trip), an insert or update two (lock CAS + leaf READ; write-back +
 * release), three without command combination. rtx mode: a lookup is
 * two (TXObj, then data and TXObj). */
/* Round trips of THR since R0 less the re-READs of torn nodes since S0
 * (shm-weak may still be placing the last write-back's pieces when the
 * next operation reads the leaf: one more round trip, counted). */
static uint64_t rtts_untorn(struct loco_thread *thr, uint64_t r0,
			    struct loco_sherman_worker *w,
			    const struct loco_sherman_stats *s0)
{
	struct loco_sherman_stats s1;
	loco_sherman_worker_stats(w, &s1);
	return rtts(thr) - r0 - (s1.torn_retries - s0->torn_retries);
}

START_TEST(round_trips_per_op)
{
	unsigned mode = (unsigned)_i;   /* 0 plain, 1 no combine, 2 rtx */
	struct loco_sherman_opts o = { .node_size = 1024, .nodes = 1024,
				       .locks = 1024, .rtx = mode == 2,
				       .no_combine = mode == 1 };
	struct loco_sherman *t = make(0, o);
	struct loco_sherman_worker *w = worker(t, cl.thr[0]);
	struct loco_thread *thr = cl.thr[0];
	struct loco_sherman_stats s0, s1;
	for (uint64_t key = 0; key < 400; key++) {   /* some splits: levels */
		uint64_t v = val_of(key);
		ck_assert_int_eq(loco_sherman_insert(w, key * 4, &v), 0);
	}
	uint64_t got;
	for (uint64_t key = 0; key < 400; key++)     /* warm the cache */
		ck_assert_int_eq(loco_sherman_lookup(w, key * 4, &got), 0);
	loco_sherman_worker_stats(w, &s0);
	uint64_t r0 = rtts(thr);
	for (uint64_t key = 0; key < 400; key++)
		ck_assert_int_eq(loco_sherman_lookup(w, key * 4, &got), 0);
	ck_assert_uint_eq(rtts_untorn(thr, r0, w, &s0), mode == 2 ? 800 : 400);
	if (mode == 2)
		goto out;
	/* Updates (no split): exactly 2 (or 3) round trips each. */
	loco_sherman_worker_stats(w, &s0);
	r0 = rtts(thr);
	for (uint64_t key = 0; key < 400; key++) {
		uint64_t v = key;
		ck_assert_int_eq(loco_sherman_update(w, key * 4, &v), 0);
	}
	ck_assert_uint_eq(rtts_untorn(thr, r0, w, &s0), mode == 1 ? 1200 : 800);
	/* Inserts into leaves with room (ascending inserts left the leaves
	 * but the last half full). */
	loco_sherman_worker_stats(w, &s0);
	r0 = rtts(thr);
	for (uint64_t key = 0; key < 300; key += 6) {
		uint64_t v = key;
		ck_assert_int_eq(loco_sherman_insert(w, key * 4 + 1, &v), 0);
	}
	loco_sherman_worker_stats(w, &s1);
	ck_assert_uint_eq(s1.splits, s0.splits);
	ck_assert_uint_eq(rtts_untorn(thr, r0, w, &s0), (mode == 1 ? 3 : 2) * 50);
out:
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

/* ---- HOCL ------------------------------------------------------------------------- */

#define HOT_THREADS 4
#define HOT_OPS 1500

static pthread_barrier_t start_line;

struct hot_arg {
	struct loco_sherman *t;
	uint64_t rtts, ops;
	struct loco_sherman_stats st;
	unsigned id;
};

static void *hot_thread(void *p)
{
	struct hot_arg *a = p;
	struct loco_thread *thr;
	struct loco_sherman_worker *w = thread_worker(a->t, 0, &thr);
	uint64_t got;
	for (uint64_t key = 0; key < 4; key++)      /* warm the cache */
		ck_assert_int_eq(loco_sherman_lookup(w, key, &got), 0);
	pthread_barrier_wait(&start_line);
	uint64_t r0 = rtts(thr), rng = a->id * 7919u + 1;
	for (unsigned i = 0; i < HOT_OPS; i++) {
		rng = rng * 6364136223846793005u + 1442695040888963407u;
		uint64_t key = (rng >> 40) % 4, v = i;
		ck_assert_int_eq(loco_sherman_update(w, key, &v), 0);
	}
	a->rtts = rtts(thr) - r0;
	a->ops = HOT_OPS;
	thread_worker_end(w, thr, &a->st);
	return NULL;
}

/* Four threads of one node update four keys of one leaf (under a root
 * they find in the cache). With HOCL they queue locally: the global word
 * is never found held (one thread of the node CASes it at a time), and
 * every update costs two round trips, handed over or not. Without HOCL
 * the threads' CASes collide. How often either happens depends on the
 * scheduler: printed (hocl_hands_over makes a handover happen). */
START_TEST(hocl_handover)
{
	bool hocl = _i;
	struct loco_sherman_opts o = { .node_size = 256, .nodes = 256,
				       .locks = 64, .no_hocl = !hocl };
	struct loco_sherman *t = make(0, o);
	struct loco_sherman_worker *w = worker(t, cl.thr[0]);
	for (uint64_t key = 0; key < 40; key++)
		ck_assert_int_eq(loco_sherman_insert(w, key, &key), 0);
	loco_sherman_worker_destroy(w);
	pthread_barrier_init(&start_line, NULL, HOT_THREADS);
	pthread_t th[HOT_THREADS];
	struct hot_arg a[HOT_THREADS];
	for (unsigned i = 0; i < HOT_THREADS; i++) {
		a[i] = (struct hot_arg){ .t = t, .id = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, hot_thread, &a[i]), 0);
	}
	uint64_t r = 0, ops = 0, fails = 0, hand = 0;
	for (unsigned i = 0; i < HOT_THREADS; i++) {
		pthread_join(th[i], NULL);
		r += a[i].rtts;
		ops += a[i].ops;
		fails += a[i].st.lock_fails;
		hand += a[i].st.handovers;
	}
	fprintf(stderr, "hocl %d: %.3f round trips per update, %llu handovers, "
		"%llu failed lock CASes\n", hocl, (double)r / (double)ops,
		(unsigned long long)hand, (unsigned long long)fails);
	if (hocl) {
		ck_assert_uint_eq(fails, 0);
		/* 2 each; a holder preempted past half its lease renews it. */
		ck_assert_uint_le(r, 2 * ops + ops / 20);
	} else {
		ck_assert_uint_eq(hand, 0);
	}
	pthread_barrier_destroy(&start_line);
	w = worker(t, cl.thr[0]);
	check_tree(w, 40);
	uint64_t held = 1;
	ck_assert_int_eq(loco_sherman_repair_locks(w, 100, &held), 0);
	ck_assert_uint_eq(held, 0);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

/* ---- a remote waiter against a node's handovers ------------------------------------ */

#define LOCAL_HOGS 3
#define REMOTE_OPS 200

struct hog_arg {
	struct loco_sherman *t;
	uint64_t key, last;        /* its own key, the last value written */
	struct loco_sherman_stats st;
};

static atomic_bool remote_done;
static atomic_uint hogs_going;

/* A thread of node 0: updates its key (values 1, 2, ...) until the
 * remote writer is done; counted as going after its 20th. */
static void *hog_thread(void *p)
{
	struct hog_arg *a = p;
	struct loco_thread *thr;
	struct loco_sherman_worker *w = thread_worker(a->t, 0, &thr);
	/* Relaxed: a stop flag; nothing is published with it. */
	while (!atomic_load_explicit(&remote_done, memory_order_relaxed)) {
		uint64_t v = a->last + 1;
		ck_assert_int_eq(loco_sherman_update(w, a->key, &v), 0);
		a->last = v;
		if (v == 20)
			/* Relaxed: a count the test thread waits for;
			 * nothing is published with it. */
			atomic_fetch_add_explicit(&hogs_going, 1,
						  memory_order_relaxed);
	}
	thread_worker_end(w, thr, &a->st);
	return NULL;
}

/* Node 0's threads keep one leaf's lock busy, handing it over among
 * themselves; node 1's writer of a key of that leaf gets its turn
 * whenever a streak ends (handover_max), its CASes spaced by its
 * backoff: every one of its updates completes (no -ETIMEDOUT) while node
 * 0 never stops, and no update of either node is lost. Whether node 1's
 * CASes fail, and how often, depends on the scheduler: printed. (With
 * streaks unbounded, handover_max 10^9, node 1 times out on shm-weak.) */
START_TEST(remote_waiter_gets_its_turn)
{
	struct loco_sherman_opts o = { .node_size = 256, .nodes = 256,
				       .locks = 64 };
	struct loco_sherman *t0 = make(0, o), *t1 = make(1, o);
	struct loco_sherman_worker *w = worker(t0, cl.thr[0]);
	for (uint64_t key = 0; key <= LOCAL_HOGS; key++) {
		uint64_t v = 0;
		ck_assert_int_eq(loco_sherman_insert(w, key, &v), 0);
	}
	loco_sherman_worker_destroy(w);
	w = worker(t1, cl.thr[1]);
	uint64_t got;
	ck_assert_int_eq(loco_sherman_lookup(w, LOCAL_HOGS, &got), 0);
	/* Relaxed: set before the threads start (pthread_create orders). */
	atomic_store_explicit(&remote_done, false, memory_order_relaxed);
	atomic_store_explicit(&hogs_going, 0, memory_order_relaxed);
	pthread_t th[LOCAL_HOGS];
	struct hog_arg a[LOCAL_HOGS];
	for (unsigned i = 0; i < LOCAL_HOGS; i++) {
		a[i] = (struct hog_arg){ .t = t0, .key = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, hog_thread, &a[i]), 0);
	}
	uint64_t until = loco_now_ns() + (uint64_t)TIMEOUT_MS * 1000000u;
	/* Relaxed: see hog_thread. */
	while (atomic_load_explicit(&hogs_going, memory_order_relaxed) <
	       LOCAL_HOGS && loco_now_ns() < until)
		sched_yield();
	int rc = 0;
	for (uint64_t i = 1; i <= REMOTE_OPS && !rc; i++)
		rc = loco_sherman_update(w, LOCAL_HOGS, &i);
	/* Relaxed: see hog_thread. */
	atomic_store_explicit(&remote_done, true, memory_order_relaxed);
	uint64_t hand = 0, local_ops = 0;
	for (unsigned i = 0; i < LOCAL_HOGS; i++) {
		pthread_join(th[i], NULL);
		hand += a[i].st.handovers;
		local_ops += a[i].last;
	}
	struct loco_sherman_stats s1;
	loco_sherman_worker_stats(w, &s1);
	fprintf(stderr, "remote waiter: %d updates, %llu failed lock CASes; "
		"node 0: %llu updates, %llu handovers\n", REMOTE_OPS,
		(unsigned long long)s1.lock_fails,
		(unsigned long long)local_ops, (unsigned long long)hand);
	ck_assert_int_eq(rc, 0);
	for (unsigned i = 0; i < LOCAL_HOGS; i++) {
		ck_assert_int_eq(loco_sherman_lookup(w, i, &got), 0);
		ck_assert_uint_eq(got, a[i].last);
	}
	ck_assert_int_eq(loco_sherman_lookup(w, LOCAL_HOGS, &got), 0);
	ck_assert_uint_eq(got, REMOTE_OPS);
	check_tree(w, LOCAL_HOGS + 1);
	uint64_t held = 1;
	ck_assert_int_eq(loco_sherman_repair_locks(w, 100, &held), 0);
	ck_assert_uint_eq(held, 0);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t0);
	loco_sherman_destroy(t1);
}
END_TEST

/* ---- torn reads -------------------------------------------------------------------- */

#define TORN_VLEN 32

struct torn_arg {
	struct loco_sherman *t;
	unsigned ops;
	bool writer;
	uint64_t mismatched;
	struct loco_sherman_stats st;
};

static atomic_bool torn_stop;

static void *torn_thread(void *p)
{
	struct torn_arg *a = p;
	struct loco_thread *thr;
	struct loco_sherman_worker *w = thread_worker(a->t, 0, &thr);
	uint64_t v[TORN_VLEN / 8];
	for (unsigned i = 0; i < a->ops; i++) {
		uint64_t key = i % 8;
		if (a->writer) {
			for (unsigned k = 0; k < TORN_VLEN / 8; k++)
				v[k] = i;
			ck_assert_int_eq(loco_sherman_update(w, key, v), 0);
			continue;
		}
		/* Relaxed: a stop flag; nothing is published with it. */
		if (atomic_load_explicit(&torn_stop, memory_order_relaxed))
			break;
		ck_assert_int_eq(loco_sherman_lookup(w, key, v), 0);
		for (unsigned k = 1; k < TORN_VLEN / 8; k++)
			a->mismatched += v[k] != v[0];
	}
	if (a->writer)
		/* Relaxed: see above. */
		atomic_store_explicit(&torn_stop, true, memory_order_relaxed);
	thread_worker_end(w, thr, &a->st);
	return NULL;
}

/* One writer rewrites 32-byte values (all four words equal) of eight keys
 * of one leaf; two readers look them up. shm-weak places the writes in
 * random 8-byte pieces and reads them in random order: without the
 * checks readers get torn leaves (counted as torn_returned) and values
 * mixed from two writes; with them, none is ever returned (the torn
 * reads are read again). */
START_TEST(torn_reads)
{
	bool unsafe = _i;
	struct loco_sherman_opts o = { .node_size = 1024, .nodes = 256,
				       .locks = 64, .value_len = TORN_VLEN,
				       .unsafe = unsafe ?
					   LOCO_SHERMAN_UNSAFE_NO_CHECK : 0 };
	struct loco_sherman *t = make(0, o);
	struct loco_sherman_worker *w = worker(t, cl.thr[0]);
	uint64_t v[TORN_VLEN / 8] = { 0 };
	for (uint64_t key = 0; key < 8; key++)
		ck_assert_int_eq(loco_sherman_insert(w, key, v), 0);
	loco_sherman_worker_destroy(w);
	atomic_store(&torn_stop, false);
	struct torn_arg a[3] = {
		{ .t = t, .ops = 20000, .writer = true },
		{ .t = t, .ops = 1000000 },
		{ .t = t, .ops = 1000000 },
	};
	pthread_t th[3];
	for (unsigned i = 0; i < 3; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, torn_thread, &a[i]), 0);
	uint64_t mixed = 0, returned = 0, retried = 0, reads = 0;
	for (unsigned i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		if (i) {
			mixed += a[i].mismatched;
			returned += a[i].st.torn_returned;
			retried += a[i].st.torn_retries;
			reads += a[i].st.lookups;
		}
	}
	fprintf(stderr, "torn reads (%s): %llu lookups, %llu torn returned, "
		"%llu mixed values, %llu read again\n",
		unsafe ? "no check" : "checked", (unsigned long long)reads,
		(unsigned long long)returned, (unsigned long long)mixed,
		(unsigned long long)retried);
	if (unsafe) {
		ck_assert_uint_eq(retried, 0);
		if (weak())
			ck_assert_uint_gt(returned, 0);
	} else {
		ck_assert_uint_eq(returned, 0);
		ck_assert_uint_eq(mixed, 0);
		if (weak())
			ck_assert_uint_gt(retried, 0);
	}
	loco_sherman_destroy(t);
}
END_TEST

/* ---- recorded histories, checked by loco-lincheck ------------------------------------ */

#define LIN_THREADS 3
#define LIN_OPS 400
#define LIN_KEYS 24

struct lin_arg {
	struct loco_sherman *t;
	unsigned id, role;
	char *buf;
	size_t len, cap;
};

static void lin_emit(struct lin_arg *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void lin_emit(struct lin_arg *a, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int n = vsnprintf(a->buf + a->len, a->cap - a->len, fmt, ap);
		va_end(ap);
		ck_assert_int_ge(n, 0);
		if ((size_t)n < a->cap - a->len) {
			a->len += (size_t)n;
			return;
		}
		a->cap = 2 * a->cap + (size_t)n;
		a->buf = realloc(a->buf, a->cap);
		ck_assert_ptr_nonnull(a->buf);
	}
}

static void lin_inv(struct lin_arg *a, unsigned id, const char *op,
		    const char *key_args)
{
	lin_emit(a, "{\"t\":%llu,\"ev\":\"inv\",\"pid\":1,\"tid\":%u,\"id\":%u,"
		 "\"op\":\"%s\",%s}\n", (unsigned long long)loco_now_ns(), a->id,
		 id, op, key_args);
}

static void lin_ret(struct lin_arg *a, unsigned id, int rc, const char *res)
{
	if (rc && rc != -ENOENT && rc != -EEXIST) {
		lin_emit(a, "{\"t\":%llu,\"ev\":\"info\",\"pid\":1,\"tid\":%u,"
			 "\"id\":%u}\n", (unsigned long long)loco_now_ns(), a->id, id);
		return;
	}
	lin_emit(a, "{\"t\":%llu,\"ev\":\"ret\",\"pid\":1,\"tid\":%u,\"id\":%u,"
		 "\"res\":%s}\n", (unsigned long long)loco_now_ns(), a->id, id, res);
}

static void lin_scan(struct lin_arg *a, struct loco_sherman_worker *w,
		     unsigned id, uint64_t lo, uint64_t hi)
{
	uint64_t keys[LIN_KEYS], vals[LIN_KEYS];
	unsigned n = 0;
	char ka[64];
	snprintf(ka, sizeof(ka), "\"args\":[%llu,%llu]", (unsigned long long)lo,
		 (unsigned long long)hi);
	lin_inv(a, id, "scan", ka);
	int rc = loco_sherman_scan(w, lo, hi, LIN_KEYS, keys, vals, &n);
	char res[LIN_KEYS * 48 + 8];
	size_t p = 0;
	p += (size_t)snprintf(res + p, sizeof(res) - p, "[[");
	for (unsigned i = 0; i < n && !rc; i++)
		p += (size_t)snprintf(res + p, sizeof(res) - p, "%s[%llu,%llu]",
				      i ? "," : "", (unsigned long long)keys[i],
				      (unsigned long long)vals[i]);
	snprintf(res + p, sizeof(res) - p, "]]");
	lin_ret(a, id, rc, res);
}

static void lin_one(struct lin_arg *a, struct loco_sherman_worker *w,
		    unsigned id, uint64_t r)
{
	uint64_t key = (r >> 8) % LIN_KEYS, v = (uint64_t)a->id << 32 | id, got = 0;
	char ka[80], res[40];
	unsigned op = (unsigned)(r % 100);
	if (op < 25) {
		lin_scan(a, w, id, key, key + 3 + (r >> 20) % 6);
		return;
	}
	const char *name = op < 45 ? "get" : op < 70 ? "insert" :
			   op < 85 ? "update" : "delete";
	if (op < 45 || op >= 85)
		snprintf(ka, sizeof(ka), "\"key\":%llu", (unsigned long long)key);
	else
		snprintf(ka, sizeof(ka), "\"key\":%llu,\"args\":[%llu]",
			 (unsigned long long)key, (unsigned long long)v);
	lin_inv(a, id, name, ka);
	int rc;
	if (op < 45) {
		rc = loco_sherman_lookup(w, key, &got);
		if (rc == -ENOENT)
			snprintf(res, sizeof(res), "[null]");
		else
			snprintf(res, sizeof(res), "[%llu]", (unsigned long long)got);
	} else {
		rc = op < 70 ? loco_sherman_insert(w, key, &v) :
		     op < 85 ? loco_sherman_update(w, key, &v) :
			       loco_sherman_delete(w, key);
		snprintf(res, sizeof(res), "[%s]", rc ? "false" : "true");
	}
	lin_ret(a, id, rc, res);
}

/* Roles: random mixed ops; a mover that moves two tokens rightwards
 * (delete the left key, insert the right one: at no instant are both
 * present) and back; a scanner of the whole key range. */
enum lin_role { LIN_MIXED, LIN_MOVER, LIN_SCANNER };

static void lin_move(struct lin_arg *a, struct loco_sherman_worker *w,
		     unsigned id, uint64_t from, uint64_t to)
{
	char ka[64];
	snprintf(ka, sizeof(ka), "\"key\":%llu", (unsigned long long)from);
	lin_inv(a, id, "delete", ka);
	int rc = loco_sherman_delete(w, from);
	lin_ret(a, id, rc, rc ? "[false]" : "[true]");
	uint64_t v = (uint64_t)a->id << 32 | id;
	snprintf(ka, sizeof(ka), "\"key\":%llu,\"args\":[%llu]",
		 (unsigned long long)to, (unsigned long long)v);
	lin_inv(a, id + 1, "insert", ka);
	rc = loco_sherman_insert(w, to, &v);
	lin_ret(a, id + 1, rc, rc ? "[false]" : "[true]");
}

static void lin_role_op(struct lin_arg *a, struct loco_sherman_worker *w,
			unsigned i, uint64_t r)
{
	if (a->role == LIN_MIXED) {
		lin_one(a, w, i, r);
	} else if (a->role == LIN_SCANNER) {
		lin_scan(a, w, i, 0, LIN_KEYS - 1);
	} else {
		/* Tokens 1 and 22 move to 11 and 12 and back: two ops. */
		uint64_t k = i & 2 ? 22 : 1, m = i & 2 ? 12 : 11;
		lin_move(a, w, i, i & 4 ? m : k, i & 4 ? k : m);
	}
}

static void *lin_thread(void *p)
{
	struct lin_arg *a = p;
	struct loco_thread *thr;
	struct loco_sherman_worker *w = thread_worker(a->t, 0, &thr);
	uint64_t r = a->id * 0x9e3779b97f4a7c15u + 12345;
	pthread_barrier_wait(&start_line);
	for (unsigned i = 1; i <= 2 * LIN_OPS; i += 2) {
		r ^= r << 13;
		r ^= r >> 7;
		r ^= r << 17;
		lin_role_op(a, w, i, r);
	}
	thread_worker_end(w, thr, NULL);
	return NULL;
}

/* Before the threads: the tokens and every other even key, recorded as
 * one more process's inserts. */
static void lin_prefill(struct lin_arg *a, struct loco_sherman *t)
{
	struct loco_sherman_worker *w = worker(t, cl.thr[0]);
	unsigned id = 1;
	for (uint64_t key = 0; key < LIN_KEYS; key++) {
		if (key != 1 && key != 22 && (key & 1 || key == 12))
			continue;
		char ka[64];
		uint64_t v = 7000 + key;
		snprintf(ka, sizeof(ka), "\"key\":%llu,\"args\":[%llu]",
			 (unsigned long long)key, (unsigned long long)v);
		lin_inv(a, id, "insert", ka);
		int rc = loco_sherman_insert(w, key, &v);
		lin_ret(a, id++, rc, rc ? "[false]" : "[true]");
	}
	loco_sherman_worker_destroy(w);
}

/* Prefill, run threads of ROLES on tree T and check the merged history. */
static enum lc_verdict lin_run(struct loco_sherman *t, const enum lin_role *roles)
{
	pthread_t th[LIN_THREADS];
	struct lin_arg a[LIN_THREADS + 1];
	pthread_barrier_init(&start_line, NULL, LIN_THREADS);
	for (unsigned i = 0; i <= LIN_THREADS; i++) {
		a[i] = (struct lin_arg){ .t = t, .id = i, .cap = 1 << 16,
					 .role = i < LIN_THREADS ? roles[i] : 0 };
		a[i].buf = malloc(a[i].cap);
	}
	lin_prefill(&a[LIN_THREADS], t);
	for (unsigned i = 0; i < LIN_THREADS; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, lin_thread, &a[i]), 0);
	size_t total = a[LIN_THREADS].len;
	for (unsigned i = 0; i < LIN_THREADS; i++) {
		pthread_join(th[i], NULL);
		total += a[i].len;
	}
	pthread_barrier_destroy(&start_line);
	char *all = malloc(total + 1);
	size_t at = 0;
	for (unsigned i = 0; i <= LIN_THREADS; i++) {
		memcpy(all + at, a[i].buf, a[i].len);
		at += a[i].len;
		free(a[i].buf);
	}
	struct lc_history h;
	struct lc_diag d;
	ck_assert_msg(lc_history_parse("sherman", all, total, LC_FMT_JSONL,
				       lc_model_find("ordered-map"), &h, &d) == 0,
		      "history line %u: %s", d.line, d.msg);
	struct lc_check_opts o = { .deadline_ns = lc_now_ns() + 60000000000LL };
	struct lc_result r;
	ck_assert_int_eq(lc_check(&h, &o, &r), 0);
	enum lc_verdict v = r.verdict;
	lc_result_fini(&r);
	lc_history_fini(&h);
	free(all);
	return v;
}

static const enum lin_role mixed_roles[LIN_THREADS] = {
	LIN_MIXED, LIN_MIXED, LIN_MIXED,
};
static const enum lin_role token_roles[LIN_THREADS] = {
	LIN_MOVER, LIN_SCANNER, LIN_SCANNER,
};

/* Three threads over 24 keys in tiny nodes (splits all the time, also
 * inside scanned ranges): mixed lookups, inserts, updates, deletes and
 * scans; then a mover of tokens across leaves and two scanners of the
 * whole range. Linearizable in both modes. */
START_TEST(lin_mixed)
{
	bool rtx = _i;
	struct loco_sherman_opts o = tiny(rtx);
	for (unsigned k = 0; k < 2; k++) {
		o.name = k ? "tok" : "mix";
		struct loco_sherman *t = make(0, o);
		ck_assert_int_eq(lin_run(t, k ? token_roles : mixed_roles),
				 LC_LINEARIZABLE);
		struct loco_sherman_worker *w = worker(t, cl.thr[0]);
		struct loco_sherman_verify v;
		ck_assert_int_eq(loco_sherman_verify(w, false, &v), 0);
		ck_assert_msg(v.errors == 0, "verify: %s", v.first_error);
		struct loco_sherman_stats s;
		loco_sherman_stats(t, &s);
		fprintf(stderr, "lin %s %s: %llu splits, %llu scan retries, "
			"%llu torn retries\n", rtx ? "rtx" : "plain", o.name,
			(unsigned long long)s.splits,
			(unsigned long long)s.scan_retries,
			(unsigned long long)s.torn_retries);
		loco_sherman_worker_destroy(w);
		loco_sherman_destroy(t);
	}
}
END_TEST

/* The broken scan (no validation: each leaf read alone) under the token
 * load returns both tokens' keys at times: a result that never was the
 * map's content. Up to five runs (each on a fresh tree). Registered on
 * shm-weak, whose delays open the window reliably (on shm a scan of the
 * dozen leaves takes about as long as one move). */
START_TEST(lin_broken_scan)
{
	struct loco_sherman_opts o = tiny(false);
	o.unsafe = LOCO_SHERMAN_UNSAFE_NO_SCAN_CHECK;
	enum lc_verdict v = LC_LINEARIZABLE;
	for (unsigned run = 0; run < 5 && v == LC_LINEARIZABLE; run++) {
		char name[16];
		snprintf(name, sizeof(name), "b%u", run);
		o.name = name;
		struct loco_sherman *t = make(0, o);
		v = lin_run(t, token_roles);
		fprintf(stderr, "broken scan, run %u: %s\n", run,
			v == LC_NOT_LINEARIZABLE ? "not linearizable" :
			v == LC_LINEARIZABLE ? "linearizable" : "unknown");
		loco_sherman_destroy(t);
	}
	ck_assert_int_eq(v, LC_NOT_LINEARIZABLE);
}
END_TEST

/* ---- crash states ------------------------------------------------------------------
 * What a dead writer leaves, crafted in the remote state as a "ghost"
 * client of a node id that never runs would have left it. */

#define GHOST_SLOT (40 * 8)

static uint64_t ghost_word(struct loco_sherman *t, int64_t lease_delta)
{
	uint64_t lease = (uint64_t)((int64_t)sh_now_ms(t) + lease_delta);
	return loco_lllock_make(loco_lllock_tag_of(lease, 0), GHOST_SLOT, false);
}

static uint64_t lock_word(struct loco_sherman_worker *w, loco_raddr_t a)
{
	uint64_t v = 0;
	ck_assert_int_eq(loco_read(w->thr, &w->t->part[0].locks,
				   (uint64_t)sh_lock_index(w->t, a) * 8, &v, 8), 0);
	return v;
}

static void set_lock_word(struct loco_sherman_worker *w, loco_raddr_t a,
			  uint64_t v)
{
	ck_assert_int_eq(loco_write(w->thr, &w->t->part[0].locks,
				    (uint64_t)sh_lock_index(w->t, a) * 8, &v, 8), 0);
	ck_assert_int_eq(loco_fence(w->thr, LOCO_FENCE_THREAD, 0), 0);
}

/* The ghost's redo record: LEN bytes of DATA at offset OFF of node A,
 * under lock word WORD. */
static void ghost_redo(struct loco_sherman_worker *w, uint64_t word,
		       loco_raddr_t a, uint32_t off, const void *data,
		       uint32_t len)
{
	struct loco_sherman *t = w->t;
	uint8_t rec[sizeof(struct sh_redo) + LOCO_SHERMAN_NODE_MAX];
	struct sh_redo *r = (struct sh_redo *)rec;
	*r = (struct sh_redo){ .word = word, .target = a + off, .len = len };
	memcpy(r + 1, data, len);
	r->check = sh_redo_check(r, data);
	ck_assert_int_eq(loco_write(w->thr, &t->part[0].redo,
				    (uint64_t)GHOST_SLOT * t->redo_len, rec,
				    (uint32_t)sizeof(*r) + len), 0);
}

static void raw_write(struct loco_sherman_worker *w, loco_raddr_t a,
		      uint32_t off, const void *data, uint32_t len)
{
	uint32_t pi;
	uint64_t noff;
	ck_assert_int_eq(sh_locate(w->t, a, &pi, &noff), 0);
	ck_assert_int_eq(loco_write(w->thr, &w->t->part[pi].nodes, noff + off,
				    data, len), 0);
	ck_assert_int_eq(loco_fence(w->thr, LOCO_FENCE_THREAD, 0), 0);
}

/* The leaf holding KEY, read into IMG. */
static loco_raddr_t leaf_of(struct loco_sherman_worker *w, uint64_t key,
			    void *img)
{
	struct sh_path path;
	loco_raddr_t a;
	ck_assert_int_eq(sh_descend(w, key, 0, true, &a, &path), 0);
	ck_assert_int_eq(sh_read_covering(w, key, &a, img), 0);
	return a;
}

/* A plain tree of NODE_SIZE-byte nodes and LEASE_MS leases holding the
 * keys 0, STEP, .. below END; *W a worker of the test thread on it. */
static struct loco_sherman *filled_tree(struct loco_sherman_worker **w,
					uint32_t node_size, uint32_t lease_ms,
					uint64_t end, uint64_t step)
{
	struct loco_sherman_opts o = tiny(false);
	o.node_size = node_size;
	o.lease_ms = lease_ms;
	struct loco_sherman *t = make(0, o);
	*w = worker(t, cl.thr[0]);
	for (uint64_t key = 0; key < end; key += step) {
		uint64_t v = val_of(key);
		ck_assert_int_eq(loco_sherman_insert(*w, key, &v), 0);
	}
	return t;
}

static struct loco_sherman *ghost_tree(struct loco_sherman_worker **w)
{
	return filled_tree(w, 256, 200, 40, 1);
}

/* A ghost died in the middle of an update's write-back: its redo record
 * placed, the seq odd, the entry torn (the key piece of the new entry
 * only). Readers find the leaf torn until one of them takes the expired
 * lock over and writes the redo record's bytes again. */
START_TEST(dead_writer_torn_entry_redone)
{
	struct loco_sherman_worker *w;
	struct loco_sherman *t = ghost_tree(&w);
	uint8_t img[LOCO_SHERMAN_NODE_MAX], upd[LOCO_SHERMAN_NODE_MAX];
	loco_raddr_t a = leaf_of(w, 17, img);
	int i = sh_leaf_find(t, img, 17, NULL);
	ck_assert_int_ge(i, 0);
	memcpy(upd, img, t->o.node_size);
	uint64_t nv = 777;
	sh_leaf_set(t, upd, (unsigned)i, 17, &nv);
	uint32_t off = SH_HDR + (uint32_t)i * t->entry_len;
	uint64_t word = ghost_word(t, -5);
	ghost_redo(w, word, a, off, upd + off, t->entry_len);
	set_lock_word(w, a, word);
	struct sh_hdr *h = (struct sh_hdr *)img;
	uint64_t odd = h->seq | 1, junk = 0xdeadbeef;
	raw_write(w, a, SH_SEQ_OFF, &odd, 8);
	raw_write(w, a, off + 8, &junk, 8);          /* value torn */
	uint64_t got = 0;
	ck_assert_int_eq(loco_sherman_lookup(w, 17, &got), 0);
	ck_assert_uint_eq(got, 777);
	struct loco_sherman_stats s;
	loco_sherman_worker_stats(w, &s);
	ck_assert_uint_eq(s.steals, 1);
	ck_assert_uint_eq(s.redos, 1);
	ck_assert_uint_ge(s.torn_retries, SH_REPAIR_EVERY);
	ck_assert_uint_eq(lock_word(w, a), 0);
	ck_assert_int_eq(sh_read_node(w, a, img), 0);
	ck_assert_uint_eq(h->seq & 1, 0);             /* made even */
	check_tree(w, 40);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

/* A ghost's expired lock whose redo record is of an earlier write (another
 * word): taken over, nothing rewritten; a lock with a live lease is
 * waited for, then taken over. */
START_TEST(dead_writer_lock_taken_over)
{
	struct loco_sherman_worker *w;
	struct loco_sherman *t = ghost_tree(&w);
	uint8_t img[LOCO_SHERMAN_NODE_MAX];
	loco_raddr_t a = leaf_of(w, 5, img);
	uint64_t stale = 555;
	ghost_redo(w, ghost_word(t, -50), a, SH_HDR + 8, &stale, 8);
	set_lock_word(w, a, ghost_word(t, -5));
	uint64_t v = 1;
	ck_assert_int_eq(loco_sherman_update(w, 5, &v), 0);
	struct loco_sherman_stats s;
	loco_sherman_worker_stats(w, &s);
	ck_assert_uint_eq(s.steals, 1);
	ck_assert_uint_eq(s.redos, 0);
	check_tree(w, 40);
	for (uint64_t key = 0; key < 40; key++) {
		uint64_t got;
		ck_assert_int_eq(loco_sherman_lookup(w, key, &got), 0);
		ck_assert_uint_eq(got, key == 5 ? 1 : val_of(key));
	}
	/* A live ghost lock: the update waits out its lease (150 ms). */
	set_lock_word(w, a, ghost_word(t, 150));
	uint64_t t0 = loco_now_ns();
	ck_assert_int_eq(loco_sherman_update(w, 5, &v), 0);
	ck_assert_uint_ge(loco_now_ns() - t0, 100 * 1000000u);
	loco_sherman_worker_stats(w, &s);
	ck_assert_uint_eq(s.steals, 2);
	ck_assert_uint_gt(s.lock_fails, 0);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

/* A new worker settles the locks its slot's earlier incarnation left;
 * repair_locks settles everyone's and counts the live ones it had to
 * leave. */
START_TEST(slot_settled_and_locks_audited)
{
	struct loco_sherman_worker *w;
	struct loco_sherman *t = ghost_tree(&w);
	uint8_t img[LOCO_SHERMAN_NODE_MAX];
	loco_raddr_t a = leaf_of(w, 3, img), b = leaf_of(w, 30, img);
	ck_assert_uint_ne(sh_lock_index(t, a), sh_lock_index(t, b));
	/* The next worker of this process takes thread slot 1. */
	uint32_t next = loco_mgr_id(cl.mgr[0]) * t->o.threads_per_node + 1;
	uint64_t mine = loco_lllock_make(loco_lllock_tag_of(sh_now_ms(t) - 5, 0),
					 next, false);
	set_lock_word(w, a, mine);
	struct loco_thread *thr2;
	ck_assert_int_eq(loco_thread_create(cl.mgr[0], &thr2), 0);
	struct loco_sherman_worker *w2 = worker(t, thr2);
	ck_assert_uint_eq(w2->slot, next);
	ck_assert_uint_eq(lock_word(w, a), 0);
	thread_worker_end(w2, thr2, NULL);
	set_lock_word(w, a, ghost_word(t, -5));
	set_lock_word(w, b, ghost_word(t, 60000));
	uint64_t held = 0;
	ck_assert_int_eq(loco_sherman_repair_locks(w, 50, &held), 0);
	ck_assert_uint_eq(held, 1);                   /* b's lease runs */
	ck_assert_uint_eq(lock_word(w, a), 0);
	set_lock_word(w, b, 0);
	ck_assert_int_eq(loco_sherman_repair_locks(w, 50, &held), 0);
	ck_assert_uint_eq(held, 0);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

/* A node split off at separator K leads to the node of low fence K by its
 * leftmost child: linking that node again is a no-op (two linkers of one
 * split, one of whose insert split the parent at K). */
START_TEST(link_of_a_leftmost_child_is_a_noop)
{
	struct loco_sherman *t = make(0, tiny(false));
	struct loco_sherman_worker *w = worker(t, cl.thr[0]);
	for (uint64_t key = 0; key < 200; key++)
		ck_assert_int_eq(loco_sherman_insert(w, key, &key), 0);
	struct loco_sherman_verify v0, v1;
	ck_assert_int_eq(loco_sherman_verify(w, false, &v0), 0);
	/* A level-1 node that is not the first: its leftmost child. */
	uint8_t img[LOCO_SHERMAN_NODE_MAX];
	struct sh_path path;
	loco_raddr_t a;
	ck_assert_int_eq(sh_descend(w, 150, 1, true, &a, &path), 0);
	ck_assert_int_eq(sh_read_covering(w, 150, &a, img), 0);
	struct sh_hdr *h = (struct sh_hdr *)img;
	ck_assert_uint_gt(h->low, 0);
	loco_raddr_t left = sh_int_child(img, 0);
	ck_assert_int_eq(sh_plain_link(w, 1, h->low, left, 0), 0);
	ck_assert_int_eq(loco_sherman_verify(w, false, &v1), 0);
	ck_assert_msg(v1.errors == 0, "verify: %s", v1.first_error);
	ck_assert_uint_eq(v1.nodes, v0.nodes);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

/* A thief at sherman.split_parent_locked: it takes the lock the
 * splitter's link has just taken (and lets it go), and the splitter
 * stalls past half its lease, so the link loses its lock at the
 * write-back, every attempt. */
struct link_thief {
	struct loco_sherman_worker *w;
	unsigned hits;
};

static void link_thief_hook(const char *name, void *arg)
{
	struct link_thief *lt = arg;
	if (strcmp(name, "sherman.split_parent_locked"))
		return;
	struct loco_sherman_worker *w = lt->w;
	struct loco_sherman *t = w->t;
	uint64_t *words = malloc((size_t)t->o.locks * 8), got = 0;
	ck_assert_ptr_nonnull(words);
	ck_assert_int_eq(loco_read(w->thr, &t->part[0].locks, 0, words,
				   t->o.locks * 8), 0);
	for (uint32_t i = 0; i < t->o.locks; i++)
		if (loco_lllock_is_locked(words[i]) &&
		    loco_lllock_owner(words[i]) == w->slot)
			ck_assert_int_eq(loco_cas(w->thr, &t->part[0].locks,
						  (uint64_t)i * 8, words[i], 0,
						  &got), 0);
	free(words);
	lt->hits++;
	usleep((t->o.lease_ms / 2 + 2) * 1000);
}

/* Tiny nodes, 10 ms leases, keys 0, 10, .., 50: an insert of 60 splits
 * the last leaf, which is not the root. */
static struct loco_sherman *full_last_leaf(struct loco_sherman_worker **w)
{
	return filled_tree(w, 128, 10, 60, 10);
}

/* An insert whose leaf split is published is done, whatever becomes of
 * the parent entry (a missing one is a valid B-link state that verify,
 * or the next writer walking to the leaf, adds): every attempt of its
 * link losing its lock must not make the insert fail, nor run it again
 * (it would find its own key: -EEXIST). */
START_TEST(split_done_when_its_link_fails)
{
	struct loco_sherman_worker *w;
	struct loco_sherman *t = full_last_leaf(&w);
	uint8_t img[LOCO_SHERMAN_NODE_MAX];
	loco_raddr_t a = leaf_of(w, 60, img);
	ck_assert_uint_ne(a, t->root);
	ck_assert_int_lt(sh_leaf_find(t, img, 60, NULL), 0);
	int fs;
	sh_leaf_find(t, img, 60, &fs);
	ck_assert_int_lt(fs, 0);                      /* full: 60 splits it */
	struct link_thief lt = { .w = w };
	struct loco_sherman_stats s0, s1;
	loco_sherman_worker_stats(w, &s0);
	rtx_crash_set_hook(link_thief_hook, &lt);
	uint64_t v = val_of(60), got = 0;
	int rc = loco_sherman_insert(w, 60, &v);
	rtx_crash_set_hook(NULL, NULL);
	ck_assert_int_eq(rc, 0);
	loco_sherman_worker_stats(w, &s1);
	ck_assert_uint_ge(lt.hits, 2);
	ck_assert_uint_eq(s1.lost_locks - s0.lost_locks, lt.hits);
	ck_assert_int_eq(loco_sherman_lookup(w, 60, &got), 0);
	ck_assert_uint_eq(got, v);
	struct loco_sherman_verify r;
	ck_assert_int_eq(loco_sherman_verify(w, true, &r), 0);
	ck_assert_msg(r.errors == 0, "verify: %s", r.first_error);
	ck_assert_uint_ge(r.unlinked, 1);
	ck_assert_uint_eq(r.linked, r.unlinked);
	check_tree(w, 7);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

/* At sherman.split_locked: the splitter stalls past half its lease (its
 * write-back renews the lock first), and its handle's lock table region
 * is made empty, so that renewal fails with an op error (-EINVAL), as
 * one to a node that went down would. */
static struct loco_rregion saved_locks;

static void renew_fails_hook(const char *name, void *arg)
{
	struct loco_sherman *t = arg;
	if (strcmp(name, "sherman.split_locked") || !t->part[0].locks.len)
		return;
	usleep((t->o.lease_ms / 2 + 2) * 1000);
	saved_locks = t->part[0].locks;
	t->part[0].locks.len = 0;
}

/* A write whose lock fails at its renewal (an op error) lets the local
 * lock go: the next write of the node in this process takes it (after
 * the global word's lease) instead of queueing behind a holder that is
 * gone until its wait times out. */
START_TEST(failed_renewal_frees_the_local_lock)
{
	struct loco_sherman_worker *w;
	struct loco_sherman *t = full_last_leaf(&w);
	rtx_crash_set_hook(renew_fails_hook, t);
	uint64_t v = 7, got = 0;
	int rc = loco_sherman_insert(w, 60, &v);     /* splits the last leaf */
	rtx_crash_set_hook(NULL, NULL);
	ck_assert_int_eq(rc, -EINVAL);
	t->part[0].locks = saved_locks;
	uint64_t t0 = loco_now_ns();
	ck_assert_int_eq(loco_sherman_update(w, 50, &v), 0);
	ck_assert_uint_lt(loco_now_ns() - t0, TIMEOUT_MS / 2 * 1000000ull);
	ck_assert_int_eq(loco_sherman_lookup(w, 50, &got), 0);
	ck_assert_uint_eq(got, 7);
	ck_assert_int_eq(loco_sherman_lookup(w, 60, &got), -ENOENT);
	check_tree(w, 6);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

/* A broken tree: a sealed leaf with a key outside its fences. */
START_TEST(verify_finds_a_broken_tree)
{
	struct loco_sherman_worker *w;
	struct loco_sherman *t = ghost_tree(&w);
	uint8_t img[LOCO_SHERMAN_NODE_MAX];
	loco_raddr_t a = leaf_of(w, 20, img);
	int i = sh_leaf_find(t, img, 20, NULL);
	uint64_t v = 1;
	sh_leaf_set(t, img, (unsigned)i, ((struct sh_hdr *)img)->high + 5, &v);
	raw_write(w, a, 8, img + 8, t->o.node_size - 8);
	struct loco_sherman_verify r;
	ck_assert_int_eq(loco_sherman_verify(w, false, &r), 0);
	ck_assert_uint_ge(r.errors, 1);
	ck_assert_msg(strstr(r.first_error, "outside"), "%s", r.first_error);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

/* ---- stalled writers --------------------------------------------------------------
 * A worker stopped at a sherman.* point (the crash hook) as a client that
 * died there, or is only slow, would be: others go on past it. */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	const char *point;
	bool armed, stalled, release;
} stall = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static _Thread_local bool stall_me;

static void stall_hook(const char *name, void *arg)
{
	(void)arg;
	if (!stall_me || strcmp(name, stall.point))
		return;
	pthread_mutex_lock(&stall.mu);
	if (stall.armed) {
		stall.armed = false;
		stall.stalled = true;
		pthread_cond_broadcast(&stall.cv);
		while (!stall.release)
			pthread_cond_wait(&stall.cv, &stall.mu);
	}
	pthread_mutex_unlock(&stall.mu);
}

struct staller {
	struct loco_sherman *t;
	uint64_t first, n;       /* inserts keys first, first + 2, ... */
	int rc;
};

static void *staller_main(void *p)
{
	struct staller *s = p;
	struct loco_thread *thr;
	struct loco_sherman_worker *w = thread_worker(s->t, 0, &thr);
	stall_me = true;
	for (uint64_t k = 0; k < s->n && !s->rc; k++) {
		uint64_t key = s->first + 2 * k;
		s->rc = loco_sherman_insert(w, key, &key);
	}
	thread_worker_end(w, thr, NULL);
	return NULL;
}

/* Run a staller on node 0's tree T inserting odd keys until it stalls at
 * POINT; then the test thread, on OTHER (node 1's handle, or T), inserts
 * the even keys and updates every key present twice (a write that walks
 * past an unlinked node adds its parent entry if it read the parent, not
 * the cache: of two walks at least one did; the staller's keys are the
 * ones in its split's range); then the staller is let go. */
static void stall_run(struct loco_sherman *t, struct loco_sherman *other,
		      const char *point, struct loco_sherman_stats *during)
{
	struct loco_sherman_worker *w = worker(other, cl.thr[other == t ? 0 : 1]);
	stall.point = point;
	stall.armed = true;
	stall.stalled = stall.release = false;
	rtx_crash_set_hook(stall_hook, NULL);
	struct staller s = { .t = t, .first = 1, .n = 60 };
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, staller_main, &s), 0);
	pthread_mutex_lock(&stall.mu);
	while (!stall.stalled)
		pthread_cond_wait(&stall.cv, &stall.mu);
	pthread_mutex_unlock(&stall.mu);
	for (uint64_t key = 0; key < 120; key += 2)
		ck_assert_int_eq(loco_sherman_insert(w, key, &key), 0);
	for (unsigned pass = 0; pass < 2; pass++)
		for (uint64_t key = 0; key < 120; key++) {
			int rc = loco_sherman_update(w, key, &key);
			ck_assert(rc == 0 || (rc == -ENOENT && key & 1));
		}
	loco_sherman_worker_stats(w, during);
	pthread_mutex_lock(&stall.mu);
	stall.release = true;
	pthread_cond_broadcast(&stall.cv);
	pthread_mutex_unlock(&stall.mu);
	pthread_join(th, NULL);
	rtx_crash_set_hook(NULL, NULL);
	ck_assert_int_eq(s.rc, 0);
	check_tree(w, 120);
	for (uint64_t key = 0; key < 120; key++) {
		uint64_t got;
		ck_assert_int_eq(loco_sherman_lookup(w, key, &got), 0);
		ck_assert_uint_eq(got, key);
	}
	loco_sherman_worker_destroy(w);
}

/* Plain mode, a splitter of node 0 stalled holding its leaf's lock past
 * the lease: node 1's writer takes the lock over (a thread of node 0
 * would wait in the local queue: the local owner is alive); the staller,
 * let go, finds its lock lost before writing anything and does its
 * insert again. */
START_TEST(stalled_holder_loses_its_lock)
{
	struct loco_sherman_opts o = tiny(false);
	o.lease_ms = 20;
	o.mem_nodes = 1;
	struct loco_sherman *t = make(0, o), *t1 = make(1, o);
	struct loco_sherman_stats s;
	stall_run(t, t1, "sherman.split_locked", &s);
	ck_assert_uint_ge(s.steals, 1);
	struct loco_sherman_stats all;
	loco_sherman_stats(t, &all);
	ck_assert_uint_ge(all.lost_locks, 1);
	loco_sherman_destroy(t1);
	loco_sherman_destroy(t);
}
END_TEST

/* Plain mode, a splitter stalled after its half split (leaf and sibling
 * published, lock released, parent not updated): the next writer that
 * walks to the sibling adds the parent entry; the staller's own link,
 * later, finds it there. */
START_TEST(stalled_half_split_linked_by_others)
{
	struct loco_sherman *t = make(0, tiny(false));
	struct loco_sherman_stats s;
	stall_run(t, t, "sherman.split_half", &s);
	ck_assert_uint_ge(s.links, 1);
	loco_sherman_destroy(t);
}
END_TEST

/* rtx mode, a splitter stalled with its leaf and parent pre-locked (the
 * split's transaction not committed): the other writer repairs the
 * expired locks (steals them back) and goes on; the staller's commit then
 * fails and its insert runs again. */
START_TEST(stalled_rtx_split_repaired)
{
	struct loco_sherman *t = make(0, tiny(true));
	struct loco_sherman_stats s;
	stall_run(t, t, "sherman.split_parent_locked", &s);
	ck_assert_uint_ge(s.rtx_repairs, 1);
	struct loco_sherman_stats all;
	loco_sherman_stats(t, &all);
	ck_assert_uint_ge(all.rtx_retries, 1);
	/* Splits are counted as they commit: every one made a node (a root
	 * split two), none is counted twice for the staller's aborts. */
	struct loco_sherman_worker *w = worker(t, cl.thr[0]);
	struct loco_sherman_verify v;
	ck_assert_int_eq(loco_sherman_verify(w, false, &v), 0);
	ck_assert_uint_eq(v.nodes, 1 + all.splits + all.root_splits);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

/* A thread of node 0 that wants a leaf another thread of node 0 holds
 * (stalled inside a split) waits in the local queue, making no remote
 * op; the holder's release hands it the lock with the global word still
 * held (one renewing CAS, no acquire). */
struct hocl_waiter {
	struct loco_sherman *t;
	uint64_t key;
	struct loco_sherman_stats st;
	int rc;
};

static void *hocl_waiter_main(void *p)
{
	struct hocl_waiter *h = p;
	struct loco_thread *thr;
	struct loco_sherman_worker *w = thread_worker(h->t, 0, &thr);
	h->rc = loco_sherman_insert(w, h->key, &h->key);
	thread_worker_end(w, thr, &h->st);
	return NULL;
}

START_TEST(hocl_hands_over)
{
	struct loco_sherman *t = make(0, tiny(false));
	stall.point = "sherman.split_locked";
	stall.armed = true;
	stall.stalled = stall.release = false;
	rtx_crash_set_hook(stall_hook, NULL);
	struct staller s = { .t = t, .first = 1, .n = 3 };
	pthread_t th, tw;
	ck_assert_int_eq(pthread_create(&th, NULL, staller_main, &s), 0);
	pthread_mutex_lock(&stall.mu);
	while (!stall.stalled)
		pthread_cond_wait(&stall.cv, &stall.mu);
	pthread_mutex_unlock(&stall.mu);
	/* The staller holds the root leaf {1, 3} while splitting it for 5;
	 * 2 goes into the same leaf. */
	struct hocl_waiter h = { .t = t, .key = 2 };
	ck_assert_int_eq(pthread_create(&tw, NULL, hocl_waiter_main, &h), 0);
	struct sh_held at = { .pi = 0, .idx = sh_lock_index(t, t->root) };
	struct sh_llock *ll = &t->llt[at.idx];
	pthread_mutex_t *mu = &t->stripe[at.idx % SH_STRIPES];
	for (bool queued = false; !queued;) {
		pthread_mutex_lock(mu);
		queued = ll->waiters != 0;
		pthread_mutex_unlock(mu);
		usleep(1000);
	}
	pthread_mutex_lock(&stall.mu);
	stall.release = true;
	pthread_cond_broadcast(&stall.cv);
	pthread_mutex_unlock(&stall.mu);
	pthread_join(th, NULL);
	pthread_join(tw, NULL);
	rtx_crash_set_hook(NULL, NULL);
	ck_assert_int_eq(s.rc, 0);
	ck_assert_int_eq(h.rc, 0);
	ck_assert_uint_eq(h.st.handovers, 1);
	ck_assert_uint_eq(h.st.lock_fails, 0);
	struct loco_sherman_worker *w = worker(t, cl.thr[0]);
	check_tree(w, 4);
	loco_sherman_worker_destroy(w);
	loco_sherman_destroy(t);
}
END_TEST

/* ---- registration -------------------------------------------------------------------- */

static TCase *tc(Suite *s, const char *name, void (*setup)(void), int timeout)
{
	TCase *t = tcase_create(name);
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, timeout);
	suite_add_tcase(s, t);
	return t;
}

int main(void)
{
	int skip = test_transport_skip();
	if (skip)
		return skip;
	Suite *s = suite_create("sherman");
	TCase *t = tc(s, "ops", setup1, 60);
	tcase_add_loop_test(t, ops_and_outcomes, 0, 2);
	tcase_add_test(t, bad_options);
	tcase_add_loop_test(t, splits_to_a_deep_tree, 0, 2);
	tcase_add_loop_test(t, scan_ranges_and_limits, 0, 2);
	tcase_add_loop_test(t, round_trips_per_op, 0, 3);
	t = tc(s, "crash", setup1, 60);
	tcase_add_test(t, dead_writer_torn_entry_redone);
	tcase_add_test(t, dead_writer_lock_taken_over);
	tcase_add_test(t, slot_settled_and_locks_audited);
	tcase_add_test(t, link_of_a_leftmost_child_is_a_noop);
	tcase_add_test(t, verify_finds_a_broken_tree);
	tcase_add_test(t, split_done_when_its_link_fails);
	tcase_add_test(t, failed_renewal_frees_the_local_lock);
	tcase_add_test(t, stalled_half_split_linked_by_others);
	tcase_add_test(t, stalled_rtx_split_repaired);
	t = tc(s, "two", setup2, 60);
	tcase_add_test(t, stalled_holder_loses_its_lock);
	tcase_add_test(t, layout_mismatch);
	tcase_add_loop_test(t, two_hosting_nodes, 0, 2);
	tcase_add_test(t, remote_waiter_gets_its_turn);
	t = tc(s, "concurrency", setup1, 120);
	tcase_add_loop_test(t, hocl_handover, 0, 2);
	tcase_add_test(t, hocl_hands_over);
	tcase_add_loop_test(t, torn_reads, 0, 2);
	tcase_add_loop_test(t, lin_mixed, 0, 2);
	if (weak())
		tcase_add_test(t, lin_broken_scan);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
