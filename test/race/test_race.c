/* SPDX-License-Identifier: MIT */
/* RACE hashing on an in-process cluster of two nodes (node 0 hosts the
 * table): the operations and their error codes, splits in both resize
 * modes, stale client caches, bad input, an exhausted pool, concurrent
 * inserts of one key, dead clients' leftovers (a tentative slot, a
 * resize stalled mid-way, in-flight blocks of a crashed incarnation),
 * and the full-table check after each. Runs on shm and shm-weak. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "channels/race/internal.h"
#include "rtx/internal.h"
#include "test/common/cluster.h"

static struct cluster cl;

static void setup(void)
{
	ck_assert_int_eq(cluster_start(&cl, 2, 0, 10000), 0);
}

static void teardown(void)
{
	cluster_stop(&cl);
}

static struct loco_race_opts opts(enum loco_race_resize mode)
{
	return (struct loco_race_opts){ .name = "t", .groups = 1,
					 .max_depth = 10, .key_max = 16,
					 .value_max = 40, .kv_blocks = 4096,
					 .resize = mode };
}

struct tab {
	struct loco_race *r;
	struct loco_race_client *c;
};

static void tab_open(struct tab *t, unsigned node,
		     const struct loco_race_opts *o)
{
	ck_assert_int_eq(loco_race_create(cl.mgr[node], o, &t->r), 0);
	ck_assert_int_eq(loco_race_client_create(t->r, cl.thr[node], &t->c), 0);
}

static void tab_close(struct tab *t)
{
	loco_race_client_destroy(t->c);
	loco_race_destroy(t->r);
}

static void verify_ok(struct loco_race_client *c, struct loco_race_audit *a)
{
	char msg[256];
	struct loco_race_audit tmp;
	int rc = loco_race_verify(c, a ? a : &tmp, msg, sizeof(msg));
	ck_assert_msg(rc == 0, "verify: %d %s", rc, msg);
}

/* The check passes with no KV block in use and nothing to reclaim. */
static void verify_empty(struct loco_race_client *c)
{
	struct loco_race_audit a;
	verify_ok(c, &a);
	ck_assert_uint_eq(a.allocated, 0);
	ck_assert_uint_eq(a.reclaimed, 0);
}

/* Key i as 8 bytes, value derived from (i, version). */
static int put(struct loco_race_client *c, uint64_t i, uint64_t ver)
{
	uint64_t v[2] = { i * 1000003u, ver };
	return loco_race_insert(c, &i, 8, v, sizeof(v));
}

static int upd(struct loco_race_client *c, uint64_t i, uint64_t ver)
{
	uint64_t v[2] = { i * 1000003u, ver };
	return loco_race_update(c, &i, 8, v, sizeof(v));
}

/* The version stored for key i, -1 if absent. */
static int64_t ver_of(struct loco_race_client *c, uint64_t i)
{
	uint64_t v[5];
	uint32_t n = 0;
	int rc = loco_race_get(c, &i, 8, v, sizeof(v), &n);
	if (rc == -ENOENT)
		return -1;
	ck_assert_msg(rc == 0, "get %llu: %d", (unsigned long long)i, rc);
	ck_assert_uint_eq(n, 16);
	ck_assert_uint_eq(v[0], i * 1000003u);
	return (int64_t)v[1];
}

static struct loco_race_stats stats(struct loco_race_client *c)
{
	struct loco_race_stats s;
	loco_race_client_stats(c, &s);
	return s;
}

/* ---- operations -------------------------------------------------------------------- */

static void basic_ops(enum loco_race_resize mode)
{
	struct loco_race_opts o = opts(mode);
	o.groups = 8;
	struct tab t;
	tab_open(&t, 0, &o);
	ck_assert_int_eq(ver_of(t.c, 1), -1);
	ck_assert_int_eq(put(t.c, 1, 7), 0);
	ck_assert_int_eq(put(t.c, 1, 8), -EEXIST);
	ck_assert_int_eq(ver_of(t.c, 1), 7);
	ck_assert_int_eq(upd(t.c, 1, 9), 0);
	ck_assert_int_eq(ver_of(t.c, 1), 9);
	ck_assert_int_eq(upd(t.c, 2, 1), -ENOENT);
	uint64_t k = 1;
	ck_assert_int_eq(loco_race_delete(t.c, &k, 8), 0);
	ck_assert_int_eq(loco_race_delete(t.c, &k, 8), -ENOENT);
	ck_assert_int_eq(ver_of(t.c, 1), -1);
	ck_assert_int_eq(put(t.c, 1, 10), 0);
	ck_assert_int_eq(ver_of(t.c, 1), 10);
	/* Variable keys and values, up to the limits. */
	char key[16], val[40], out[40];
	for (uint32_t kl = 1; kl <= 16; kl += 5) {
		for (uint32_t vl = 0; vl <= 40; vl += 13) {
			uint32_t n = 99;
			memset(key, 'a' + (int)kl, kl);
			memset(val, 'A' + (int)vl % 26, vl);
			ck_assert_int_eq(loco_race_insert(t.c, key, kl, val, vl), 0);
			ck_assert_int_eq(loco_race_get(t.c, key, kl, out, 40, &n), 0);
			ck_assert_uint_eq(n, vl);
			ck_assert(!memcmp(out, val, vl));
			ck_assert_int_eq(loco_race_delete(t.c, key, kl), 0);
		}
	}
	struct loco_race_stats s = stats(t.c);
	ck_assert_uint_ge(s.inserts, 4);
	verify_ok(t.c, NULL);
	tab_close(&t);
}

START_TEST(ops_rtx) { basic_ops(LOCO_RACE_RESIZE_RTX); }
END_TEST
START_TEST(ops_cas) { basic_ops(LOCO_RACE_RESIZE_CAS); }
END_TEST

/* Round trips of each operation, deterministic on every transport:
 * get 2, insert 3, update 3, delete 3 (no resize, no collision). */
START_TEST(round_trips)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_RTX);
	o.groups = 256;
	struct tab t;
	tab_open(&t, 0, &o);
	ck_assert_int_eq(put(t.c, 1000, 0), 0);   /* first allocations */
	struct loco_stats s0, s1;
	uint64_t rtt[4] = { 0 }, n = 200;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t k = i;
		loco_thread_stats(cl.thr[0], &s0);
		ck_assert_int_eq(put(t.c, i, 1), 0);
		loco_thread_stats(cl.thr[0], &s1);
		rtt[0] += s1.rtts - s0.rtts;
		ck_assert_int_eq(ver_of(t.c, i), 1);
		loco_thread_stats(cl.thr[0], &s0);
		rtt[1] += s0.rtts - s1.rtts;
		ck_assert_int_eq(upd(t.c, i, 2), 0);
		loco_thread_stats(cl.thr[0], &s1);
		rtt[2] += s1.rtts - s0.rtts;
		ck_assert_int_eq(loco_race_delete(t.c, &k, 8), 0);
		loco_thread_stats(cl.thr[0], &s0);
		rtt[3] += s0.rtts - s1.rtts;
	}
	/* A fingerprint collision costs one more READ: at most a few. */
	ck_assert_uint_ge(rtt[0], 3 * n);
	ck_assert_uint_le(rtt[0], 3 * n + n / 10);
	ck_assert_uint_eq(rtt[1], 2 * n);
	ck_assert_uint_eq(rtt[2], 3 * n);
	ck_assert_uint_eq(rtt[3], 3 * n);
	tab_close(&t);
}
END_TEST

START_TEST(bad_input)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_RTX);
	struct tab t;
	char big[64] = { 0 }, out[8];
	uint32_t n = 0;
	tab_open(&t, 0, &o);
	ck_assert_int_eq(loco_race_insert(t.c, big, 17, big, 4), -E2BIG);
	ck_assert_int_eq(loco_race_insert(t.c, big, 4, big, 41), -E2BIG);
	ck_assert_int_eq(loco_race_get(t.c, big, 17, out, 8, &n), -E2BIG);
	ck_assert_int_eq(loco_race_update(t.c, big, 4, big, 41), -E2BIG);
	ck_assert_int_eq(loco_race_delete(t.c, big, 17), -E2BIG);
	ck_assert_int_eq(loco_race_insert(t.c, big, 4, big, 20), 0);
	ck_assert_int_eq(loco_race_get(t.c, big, 4, out, 8, &n), -ENOBUFS);
	ck_assert_uint_eq(n, 20);
	/* Bad options. */
	struct loco_race *r2;
	struct loco_race_opts bad = o;
	bad.name = "u";
	bad.max_depth = LOCO_RACE_DEPTH_MAX + 1;
	ck_assert_int_eq(loco_race_create(cl.mgr[1], &bad, &r2), -EINVAL);
	bad = o;
	bad.name = "u";
	bad.key_max = 10000;
	ck_assert_int_eq(loco_race_create(cl.mgr[1], &bad, &r2), -EINVAL);
	bad = o;
	bad.name = "u";
	bad.initial_depth = 5;
	ck_assert_int_eq(loco_race_create(cl.mgr[1], &bad, &r2), -EINVAL);
	/* The same table with another geometry, from node 1: refused, and
	 * the table is untouched. */
	bad = o;
	bad.groups = 2;
	ck_assert_int_eq(loco_race_create(cl.mgr[1], &bad, &r2), -LOCO_EMISMATCH);
	bad = o;
	bad.resize = LOCO_RACE_RESIZE_CAS;
	ck_assert_int_eq(loco_race_create(cl.mgr[1], &bad, &r2), -LOCO_EMISMATCH);
	ck_assert_int_eq(loco_race_get(t.c, big, 4, out, 8, &n), -ENOBUFS);
	verify_ok(t.c, NULL);
	tab_close(&t);
}
END_TEST

/* A pool of 128 blocks runs out (-ENOMEM, nothing corrupted); deletes
 * free blocks that later inserts reuse. */
START_TEST(pool_exhausted)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_RTX);
	o.kv_blocks = 128;
	o.groups = 16;
	struct tab t;
	tab_open(&t, 0, &o);
	uint64_t i = 0;
	int rc = 0;
	for (; i < 1000 && !(rc = put(t.c, i, 1)); i++)
		;
	ck_assert_int_eq(rc, -ENOMEM);
	ck_assert_uint_eq(i, 128);
	for (uint64_t k = 0; k < i; k++)
		ck_assert_int_eq(ver_of(t.c, k), 1);
	ck_assert_int_eq(upd(t.c, 5, 2), -ENOMEM);   /* no block for it */
	ck_assert_int_eq(ver_of(t.c, 5), 1);
	for (uint64_t k = 0; k < 64; k++)
		ck_assert_int_eq(loco_race_delete(t.c, &k, 8), 0);
	for (uint64_t k = 1000; k < 1064; k++)
		ck_assert_int_eq(put(t.c, k, 3), 0);
	ck_assert_int_eq(put(t.c, 2000, 3), -ENOMEM);
	struct loco_race_audit a;
	verify_ok(t.c, &a);
	ck_assert_uint_eq(a.items, 128);
	ck_assert_uint_eq(a.allocated, 128);
	tab_close(&t);
}
END_TEST

/* A table that may not grow past depth 1: -ENOSPC, every key kept. */
START_TEST(max_depth)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_CAS);
	o.max_depth = 1;
	struct tab t;
	tab_open(&t, 0, &o);
	uint64_t i = 0, ok = 0;
	int rc = 0;
	for (; i < 200; i++) {
		rc = put(t.c, i, 4);
		if (rc == -ENOSPC)
			continue;
		ck_assert_int_eq(rc, 0);
		ok++;
	}
	ck_assert_uint_ge(ok, 21);          /* at least one full subtable */
	ck_assert_uint_le(ok, 2 * 21);
	for (uint64_t k = 0, found = 0; k < 200; k++) {
		found += ver_of(t.c, k) == 4;
		if (k == 199)
			ck_assert_uint_eq(found, ok);
	}
	struct loco_race_audit a;
	verify_ok(t.c, &a);
	ck_assert_uint_eq(a.depth, 1);
	ck_assert_uint_eq(a.items, ok);
	tab_close(&t);
}
END_TEST

/* Where key I's slot is: subtable *ST, byte offset *OFF, value *V (its
 * combined buckets searched, each item's block read). */
static void slot_of(struct tab *t, uint64_t i, struct race_st *st,
		    uint64_t *off, uint64_t *v)
{
	struct race_key k;
	race_key_init(t->r, &k, &i, 8);
	ck_assert_int_eq(race_locate(t->c, k.h1, st), 0);
	uint32_t m[2] = { k.m1, k.m2 };
	for (unsigned x = 0; x < 4; x++) {
		uint32_t b = (m[x / 2] / 2) * 3 + (x % 2 ? 1 : (m[x / 2] % 2) * 2);
		for (unsigned j = 0; j < RACE_SLOTS; j++) {
			uint64_t o = (uint64_t)b * RACE_BUCKET_BYTES + 8 + 8 * j, w;
			uint8_t blk[64];
			ck_assert_int_eq(loco_read(cl.thr[0], &st->rr, o, &w, 8), 0);
			if (!race_slot_item(w))
				continue;
			ck_assert_int_eq(loco_read(cl.thr[0], race_kv(t->r, 0),
				(uint64_t)race_slot_block(w) * t->r->block_len,
				blk, 64), 0);
			if (!memcmp(blk + RACE_KV_HDR, &i, 8)) {
				*off = o;
				*v = w;
				return;
			}
		}
	}
	ck_abort_msg("key %llu has no slot", (unsigned long long)i);
}

/* Change the word at OFF of ST from A to B (it must be A). */
static void poke(const struct race_st *st, uint64_t off, uint64_t a, uint64_t b)
{
	uint64_t old = 0;
	ck_assert_int_eq(loco_cas(cl.thr[0], &st->rr, off, a, b, &old), 0);
	ck_assert_uint_eq(old, a);
}

/* The first empty slot of subtable ST outside key I's buckets (OUT) or
 * inside them (!OUT), as a byte offset. */
static uint64_t empty_slot(struct tab *t, const struct race_st *st, uint64_t i,
			   bool out)
{
	struct race_key k;
	race_key_init(t->r, &k, &i, 8);
	for (uint32_t b = 0; b < 3 * t->r->groups; b++) {
		bool mine = b / 3 == k.m1 / 2 && (b % 3 == 1 || b % 3 == (k.m1 % 2) * 2);
		mine |= b / 3 == k.m2 / 2 && (b % 3 == 1 || b % 3 == (k.m2 % 2) * 2);
		for (unsigned j = 0; mine != out && j < RACE_SLOTS; j++) {
			uint64_t o = (uint64_t)b * RACE_BUCKET_BYTES + 8 + 8 * j, w;
			ck_assert_int_eq(loco_read(cl.thr[0], &st->rr, o, &w, 8), 0);
			if (!w)
				return o;
		}
	}
	ck_abort_msg("no empty slot");
	return 0;
}

static void verify_fails(struct loco_race_client *c, const char *says)
{
	char msg[256];
	struct loco_race_audit a;
	int rc = loco_race_verify(c, &a, msg, sizeof(msg));
	ck_assert_msg(rc == -EPROTO && strstr(msg, says),
		      "verify: %d '%s', expected -EPROTO '%s'", rc, msg, says);
}

/* loco_race_verify finds a table damaged behind its back: a key in two
 * slots, a key in a bucket its hash does not select, a slot naming a
 * freed block; once each is undone, the table passes again. */
START_TEST(verify_finds_damage)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_RTX);
	o.groups = 8;
	struct tab t;
	struct race_st st;
	uint64_t off, v, to;
	tab_open(&t, 0, &o);
	for (uint64_t i = 0; i < 10; i++)
		ck_assert_int_eq(put(t.c, i, 1), 0);
	verify_ok(t.c, NULL);
	slot_of(&t, 1, &st, &off, &v);
	to = empty_slot(&t, &st, 1, false);
	poke(&st, to, 0, v);
	verify_fails(t.c, "twice");
	poke(&st, to, v, 0);
	verify_ok(t.c, NULL);
	slot_of(&t, 2, &st, &off, &v);
	to = empty_slot(&t, &st, 2, true);
	poke(&st, off, v, 0);
	poke(&st, to, 0, v);
	verify_fails(t.c, "does not belong there");
	poke(&st, to, v, 0);
	poke(&st, off, 0, v);
	verify_ok(t.c, NULL);
	slot_of(&t, 3, &st, &off, &v);
	uint64_t w0, old = 0;
	const struct loco_rregion *kv = race_kv(t.r, 0);
	uint64_t at = (uint64_t)race_slot_block(v) * t.r->block_len;
	ck_assert_int_eq(loco_read(cl.thr[0], kv, at, &w0, 8), 0);
	ck_assert_int_eq(loco_cas(cl.thr[0], kv, at, w0, w0 | RACE_KV_DEAD,
				  &old), 0);
	verify_fails(t.c, "1 lost");
	ck_assert_int_eq(loco_cas(cl.thr[0], kv, at, w0 | RACE_KV_DEAD, w0,
				  &old), 0);
	verify_ok(t.c, NULL);
	tab_close(&t);
}
END_TEST

/* ---- splits and caches ------------------------------------------------------------ */

static void grow(enum loco_race_resize mode)
{
	struct loco_race_opts o = opts(mode);
	struct tab t;
	tab_open(&t, 0, &o);
	const uint64_t n = 600;
	for (uint64_t i = 0; i < n; i++)
		ck_assert_int_eq(put(t.c, i, i), 0);
	for (uint64_t i = 0; i < n; i++)
		ck_assert_int_eq(ver_of(t.c, i), (int64_t)i);
	for (uint64_t i = 0; i < n; i += 2)
		ck_assert_int_eq(upd(t.c, i, i + 1), 0);
	for (uint64_t i = 0; i < n; i += 3)
		ck_assert_int_eq(loco_race_delete(t.c, &i, 8), 0);
	for (uint64_t i = 0; i < n; i++)
		ck_assert_int_eq(ver_of(t.c, i),
				 i % 3 == 0 ? -1 : (int64_t)(i % 2 ? i : i + 1));
	struct loco_race_stats s = stats(t.c);
	ck_assert_uint_ge(s.splits, 15);    /* 600 keys, 21 slots a subtable */
	struct loco_race_audit a;
	verify_ok(t.c, &a);
	ck_assert_uint_eq(a.items, n - n / 3);
	ck_assert_uint_eq(a.subtables, s.splits + 1);
	ck_assert_uint_eq(a.leaked, 0);
	tab_close(&t);
}

START_TEST(grow_rtx) { grow(LOCO_RACE_RESIZE_RTX); }
END_TEST
START_TEST(grow_cas) { grow(LOCO_RACE_RESIZE_CAS); }
END_TEST

/* One client splits the table a few times: the phase counters hold each
 * split's time (no more than split_ns, which also counts the gaps
 * between phases), round trips and verbs, in the phases of its mode. */
static void split_phases(enum loco_race_resize mode)
{
	struct loco_race_opts o = opts(mode);
	struct tab t;
	struct loco_stats t0, t1;
	tab_open(&t, 0, &o);
	loco_thread_stats(cl.thr[0], &t0);
	for (uint64_t i = 0; stats(t.c).splits < 4; i++)
		ck_assert_int_eq(put(t.c, i, i), 0);
	loco_thread_stats(cl.thr[0], &t1);
	struct loco_race_stats s = stats(t.c);
	uint64_t ns = 0, verbs = 0;
	for (unsigned p = 0; p < LOCO_RACE_PHASES; p++) {
		ck_assert_ptr_nonnull(loco_race_phase_name(p));
		ns += s.phase_ns[p];
		verbs += s.phase_verbs[p];
	}
	ck_assert_ptr_null(loco_race_phase_name(LOCO_RACE_PHASES));
	ck_assert_uint_gt(ns, 0);
	ck_assert_uint_le(ns, s.split_ns);
	ck_assert_uint_le(verbs, loco_stats_verbs(&t1) - loco_stats_verbs(&t0));
	static const enum loco_race_phase every[] = {
		LOCO_RACE_PH_LOCK, LOCO_RACE_PH_FREEZE, LOCO_RACE_PH_WRITE,
		LOCO_RACE_PH_COMMIT };
	for (unsigned i = 0; i < sizeof(every) / sizeof(every[0]); i++) {
		ck_assert_uint_ge(s.phase_rtts[every[i]], s.splits);
		ck_assert_uint_ge(s.phase_verbs[every[i]], s.splits);
	}
	static const enum loco_race_phase moves[] = {
		LOCO_RACE_PH_HEADERS, LOCO_RACE_PH_COPY, LOCO_RACE_PH_CLEAR,
		LOCO_RACE_PH_OPEN };
	for (unsigned i = 0; i < sizeof(moves) / sizeof(moves[0]); i++) {
		enum loco_race_phase p = moves[i];
		if (mode == LOCO_RACE_RESIZE_RTX) {
			ck_assert_uint_eq(s.phase_ns[p], 0);
			ck_assert_uint_eq(s.phase_verbs[p], 0);
		} else
			ck_assert_uint_gt(s.phase_ns[p], 0);
	}
	/* rtx: the whole subtable frozen, a CAS a slot; cas: a round of
	 * header CASes a group. */
	if (mode == LOCO_RACE_RESIZE_RTX)
		ck_assert_uint_ge(s.phase_verbs[LOCO_RACE_PH_FREEZE],
				  s.splits * 3 * RACE_SLOTS * o.groups);
	else
		ck_assert_uint_eq(s.phase_rtts[LOCO_RACE_PH_HEADERS],
				  s.splits * o.groups);
	tab_close(&t);
}

START_TEST(phases_rtx) { split_phases(LOCO_RACE_RESIZE_RTX); }
END_TEST
START_TEST(phases_cas) { split_phases(LOCO_RACE_RESIZE_CAS); }
END_TEST

/* Client A on node 1 caches the directory; client B on node 0 splits the
 * table many times and adds keys; A finds every key, refreshing only on
 * need. With the stale check off (BROKEN) A misses keys instead. */
static void stale_cache(enum loco_race_resize mode, bool broken)
{
	struct loco_race_opts o = opts(mode);
	struct tab a, b;
	tab_open(&b, 0, &o);
	if (broken)
		o.broken = LOCO_RACE_BROKEN_NO_STALE_CHECK;
	tab_open(&a, 1, &o);
	for (uint64_t i = 0; i < 10; i++) {
		ck_assert_int_eq(put(a.c, i, 1), 0);
		ck_assert_int_eq(ver_of(a.c, i), 1);
	}
	uint64_t before = stats(a.c).refreshes;
	for (uint64_t i = 10; i < 400; i++)
		ck_assert_int_eq(put(b.c, i, 2), 0);
	ck_assert_uint_ge(stats(b.c).splits, 10);
	unsigned wrong = 0;
	/* Writes first, through the stale cache: B's keys exist. */
	for (uint64_t i = 300; i < 400 && !broken; i += 2)
		ck_assert_int_eq(upd(a.c, i, 2), 0);
	for (uint64_t i = 301; i < 400 && !broken; i += 2)
		ck_assert_int_eq(loco_race_delete(a.c, &i, 8), 0);
	for (uint64_t i = 301; i < 400 && !broken; i += 2)
		ck_assert_int_eq(put(a.c, i, 2), 0);
	for (uint64_t i = 0; i < 400; i++)
		wrong += ver_of(a.c, i) != (i < 10 ? 1 : 2);
	if (broken) {
		ck_assert_uint_gt(wrong, 0);
	} else {
		ck_assert_uint_eq(wrong, 0);
		uint64_t refreshes = stats(a.c).refreshes - before;
		ck_assert_uint_gt(refreshes, 0);
		ck_assert_uint_lt(refreshes, 100);  /* not one per get */
		for (uint64_t i = 0; i < 400; i += 7)
			ck_assert_int_eq(upd(a.c, i, 3), 0);
		for (uint64_t i = 0; i < 400; i++)
			ck_assert_int_eq(ver_of(b.c, i), i % 7 ? (i < 10 ? 1 : 2) : 3);
		verify_ok(b.c, NULL);
	}
	tab_close(&a);
	tab_close(&b);
}

START_TEST(stale_rtx) { stale_cache(LOCO_RACE_RESIZE_RTX, false); }
END_TEST
START_TEST(stale_cas) { stale_cache(LOCO_RACE_RESIZE_CAS, false); }
END_TEST
START_TEST(stale_broken_rtx) { stale_cache(LOCO_RACE_RESIZE_RTX, true); }
END_TEST
START_TEST(stale_broken_cas) { stale_cache(LOCO_RACE_RESIZE_CAS, true); }
END_TEST

/* ---- concurrency --------------------------------------------------------------------- */

#define NTHR 4

struct worker {
	pthread_t tid;
	unsigned id;
	struct loco_race *r;
	struct loco_thread *thr;
	struct loco_race_client *c;
	pthread_barrier_t *bar;
	_Atomic unsigned *wins;
	unsigned rounds, ops;
	int err;
	char msg[160];
};

static void worker_fail(struct worker *w, const char *fmt, uint64_t a, int64_t b)
{
	if (!w->err) {
		w->err = 1;
		snprintf(w->msg, sizeof(w->msg), fmt, (unsigned long long)a,
			 (long long)b);
	}
}

/* Every round all threads insert the same new key: exactly one wins,
 * and everyone then reads the winner's value. */
static void *dup_worker(void *arg)
{
	struct worker *w = arg;
	for (unsigned r = 0; r < w->rounds; r++) {
		uint64_t key = 77777 + r, v[2] = { key * 1000003u, w->id };
		pthread_barrier_wait(w->bar);
		int rc = loco_race_insert(w->c, &key, 8, v, sizeof(v));
		if (rc == 0)
			atomic_fetch_add(w->wins, 1);
		else if (rc != -EEXIST)
			worker_fail(w, "insert %llu: %lld", key, rc);
		pthread_barrier_wait(w->bar);
		unsigned wins = atomic_load(w->wins);
		if (wins != 1)
			worker_fail(w, "round %llu: %lld inserts won", r, wins);
		uint64_t got[2];
		uint32_t n = 0;
		rc = loco_race_get(w->c, &key, 8, got, sizeof(got), &n);
		if (rc || got[0] != key * 1000003u)
			worker_fail(w, "get %llu: %lld", key, rc);
		pthread_barrier_wait(w->bar);
		if (w->id == 0)
			atomic_store(w->wins, 0);
	}
	return NULL;
}

/* Each thread owns keys id*1000 .. +150 (an exact model of them) and
 * reads everybody's; random inserts, updates, deletes, gets. */
static void *mixed_worker(void *arg)
{
	struct worker *w = arg;
	int64_t model[150];
	uint64_t rng = 0x9e3779b97f4a7c15ull * (w->id + 1);
	for (unsigned i = 0; i < 150; i++)
		model[i] = -1;
	pthread_barrier_wait(w->bar);
	for (unsigned n = 0; n < w->ops && !w->err; n++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		unsigned i = (unsigned)(rng % 150), what = (unsigned)(rng >> 32) % 5;
		uint64_t key = w->id * 1000u + i, ver = n + 1;
		if (what == 4) {   /* someone else's key: whole, or absent */
			uint64_t k2 = ((rng >> 40) % NTHR) * 1000u + i, got[2];
			uint32_t len = 0;
			int rc = loco_race_get(w->c, &k2, 8, got, sizeof(got), &len);
			if (rc != -ENOENT && (rc || got[0] != k2 * 1000003u))
				worker_fail(w, "get %llu: %lld", k2, rc);
			continue;
		}
		int rc = what == 0 ? put(w->c, key, ver) :
			 what == 1 ? upd(w->c, key, ver) :
			 what == 2 ? loco_race_delete(w->c, &key, 8) : 0;
		int want = what == 0 ? (model[i] < 0 ? 0 : -EEXIST) :
			   what == 3 ? 0 : (model[i] < 0 ? -ENOENT : 0);
		if (rc != want)
			worker_fail(w, "op on %llu: %lld", key, rc);
		if (!rc && what < 2)
			model[i] = (int64_t)ver;
		if (!rc && what == 2)
			model[i] = -1;
		if (what == 3) {
			uint64_t got[2];
			uint32_t len = 0;
			rc = loco_race_get(w->c, &key, 8, got, sizeof(got), &len);
			int64_t v = rc == -ENOENT ? -1 : rc ? -2 : (int64_t)got[1];
			if (v != model[i])
				worker_fail(w, "get %llu: %lld", key, v);
		}
	}
	return NULL;
}

static void run_workers(enum loco_race_resize mode, void *(*fn)(void *),
			unsigned rounds, unsigned ops, unsigned broken)
{
	struct loco_race_opts o = opts(mode);
	struct loco_race *r[2];
	struct worker w[NTHR];
	pthread_barrier_t bar;
	_Atomic unsigned wins = 0;
	o.broken = broken;
	for (unsigned n = 0; n < 2; n++)
		ck_assert_int_eq(loco_race_create(cl.mgr[n], &o, &r[n]), 0);
	pthread_barrier_init(&bar, NULL, NTHR);
	for (unsigned i = 0; i < NTHR; i++) {
		w[i] = (struct worker){ .id = i, .r = r[i % 2], .bar = &bar,
					.wins = &wins, .rounds = rounds,
					.ops = ops };
		ck_assert_int_eq(loco_thread_create(cl.mgr[i % 2], &w[i].thr), 0);
		ck_assert_int_eq(loco_race_client_create(w[i].r, w[i].thr,
							 &w[i].c), 0);
	}
	for (unsigned i = 0; i < NTHR; i++)
		pthread_create(&w[i].tid, NULL, fn, &w[i]);
	for (unsigned i = 0; i < NTHR; i++)
		pthread_join(w[i].tid, NULL);
	for (unsigned i = 0; i < NTHR; i++)
		ck_assert_msg(!w[i].err, "thread %u: %s", i, w[i].msg);
	verify_ok(w[0].c, NULL);
	for (unsigned i = 0; i < NTHR; i++) {
		loco_race_client_destroy(w[i].c);
		loco_thread_destroy(w[i].thr);
	}
	pthread_barrier_destroy(&bar);
	loco_race_destroy(r[0]);
	loco_race_destroy(r[1]);
}

START_TEST(dup_inserts_rtx) { run_workers(LOCO_RACE_RESIZE_RTX, dup_worker, 150, 0, 0); }
END_TEST
START_TEST(dup_inserts_cas) { run_workers(LOCO_RACE_RESIZE_CAS, dup_worker, 150, 0, 0); }
END_TEST
START_TEST(mixed_rtx) { run_workers(LOCO_RACE_RESIZE_RTX, mixed_worker, 0, 3000, 0); }
END_TEST
START_TEST(mixed_cas) { run_workers(LOCO_RACE_RESIZE_CAS, mixed_worker, 0, 3000, 0); }
END_TEST

/* ---- dead clients ---------------------------------------------------------------------- */

/* A client "dies" at a crash point: the hook stops its thread there (for
 * the others it is dead: its lease runs out) until released. */
static struct {
	const char *point;
	pthread_t victim;
	sem_t stopped, go;
	_Atomic int hit;
} stall;

static void stall_hook(const char *name, void *arg)
{
	(void)arg;
	if (strcmp(name, stall.point) || !pthread_equal(pthread_self(), stall.victim) ||
	    atomic_exchange(&stall.hit, 1))
		return;
	sem_post(&stall.stopped);
	sem_wait(&stall.go);
}

struct victim {
	struct loco_race *r;
	struct loco_thread *thr;
	struct loco_race_client *c;
	uint64_t from, n;
	_Atomic uint64_t at;   /* the key being inserted */
	int rc;
};

/* Insert keys FROM.. until the stall point is hit (and released). */
static void *victim_inserts(void *arg)
{
	struct victim *v = arg;
	stall.victim = pthread_self();   /* read by the hook on this thread */
	v->rc = 0;
	for (uint64_t i = v->from; i < v->from + v->n && !v->rc; i++) {
		atomic_store(&v->at, i);
		v->rc = put(v->c, i, 5);
		if (v->rc == -EEXIST)
			v->rc = 0;
	}
	return NULL;
}

static void stall_start(struct victim *v, pthread_t *tid, const char *point,
			struct loco_race *r, unsigned node)
{
	stall.point = point;
	atomic_store(&stall.hit, 0);
	sem_init(&stall.stopped, 0, 0);
	sem_init(&stall.go, 0, 0);
	v->r = r;
	ck_assert_int_eq(loco_thread_create(cl.mgr[node], &v->thr), 0);
	ck_assert_int_eq(loco_race_client_create(r, v->thr, &v->c), 0);
	rtx_crash_set_hook(stall_hook, NULL);
	pthread_create(tid, NULL, victim_inserts, v);
}

/* The client stalls at POINT while resizing; the other client's
 * operations on the subtable wait, take the resize over once its lease
 * ran out (fencing the stalled client's node when they took its lock),
 * and go on; released, the stalled client finishes too, or finds its
 * node fenced. */
static void resize_takeover(enum loco_race_resize mode, const char *point)
{
	struct loco_race_opts o = opts(mode);
	struct tab t;
	struct victim v = { .from = 0, .n = 300 };
	pthread_t tid;
	tab_open(&t, 0, &o);
	struct loco_race *r1;
	ck_assert_int_eq(loco_race_create(cl.mgr[1], &o, &r1), 0);
	stall_start(&v, &tid, point, r1, 1);
	sem_wait(&stall.stopped);
	/* Every key the victim inserted, and new ones: some are frozen. */
	for (uint64_t i = 0; i < 400; i++) {
		int64_t cur = ver_of(t.c, i);
		if (cur >= 0)
			ck_assert_int_eq(upd(t.c, i, 6), 0);
		else
			ck_assert_int_eq(put(t.c, i + 1000, 6), 0);
	}
	struct loco_race_stats s = stats(t.c);
	ck_assert_uint_ge(s.takeovers, 1);
	/* The takeover is timed (the phases of the move or split it
	 * finished), and so are the waits, if any (a cas split that finds
	 * its parent published takes over without one). */
	ck_assert_uint_eq(s.resize_waits > 0, s.resize_wait_ns > 0);
	ck_assert_uint_gt(s.phase_ns[LOCO_RACE_PH_LOCK], 0);
	ck_assert_uint_gt(s.phase_ns[LOCO_RACE_PH_COMMIT], 0);
	sem_post(&stall.go);
	pthread_join(tid, NULL);
	bool fenced = loco_self_fenced(cl.mgr[1]);
	ck_assert_uint_eq(stats(t.c).fences, fenced);
	ck_assert_msg(v.rc == 0 || fenced, "victim: %d", v.rc);
	rtx_crash_set_hook(NULL, NULL);
	verify_ok(t.c, NULL);
	for (uint64_t i = 0; i < (fenced ? atomic_load(&v.at) : 300); i++)
		ck_assert_int_ge(ver_of(t.c, i), 5);
	loco_race_client_destroy(v.c);
	loco_thread_destroy(v.thr);
	loco_race_destroy(r1);
	tab_close(&t);
}

START_TEST(takeover_rtx_frozen) { resize_takeover(LOCO_RACE_RESIZE_RTX, "race.split_frozen"); }
END_TEST
START_TEST(takeover_rtx_written) { resize_takeover(LOCO_RACE_RESIZE_RTX, "race.split_written"); }
END_TEST
START_TEST(takeover_cas_group) { resize_takeover(LOCO_RACE_RESIZE_CAS, "race.cas_mid_group"); }
END_TEST
START_TEST(takeover_cas_published) { resize_takeover(LOCO_RACE_RESIZE_CAS, "race.cas_published"); }
END_TEST

/* Issue 26: a cas-mode mover stalls after freezing a group's items
 * (race.after_group_freeze) past its lease. Another client's deletes of
 * those items wait, take the move over (fencing the mover's node first),
 * finish and commit it, and delete every key. Released, the stale mover
 * goes on with its old snapshot: its CASes into the child (copy,
 * unfreeze) must all fail, or a deleted key comes back (or a slot stays
 * frozen in a live subtable). FENCED: they fail with -LOCO_EFENCED; with
 * LOCO_RACE_BROKEN_NO_FENCE, on the move epoch alone; with _NO_EPOCH as
 * well (broken), they hit. */
enum stale_guard { GUARD_FENCE, GUARD_EPOCH, GUARD_NONE };

static void stale_mover(enum stale_guard guard)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_CAS);
	bool broken = guard == GUARD_NONE;
	o.broken = guard == GUARD_FENCE ? 0 : guard == GUARD_EPOCH ?
		   LOCO_RACE_BROKEN_NO_FENCE :
		   LOCO_RACE_BROKEN_NO_FENCE | LOCO_RACE_BROKEN_NO_EPOCH;
	struct victim v = { .from = 0, .n = 60 };
	struct timespec ts;
	struct tab t;
	pthread_t tid;
	tab_open(&t, 0, &o);
	struct loco_race *r1;
	ck_assert_int_eq(loco_race_create(cl.mgr[1], &o, &r1), 0);
	stall_start(&v, &tid, "race.after_group_freeze", r1, 1);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 20;
	ck_assert_msg(sem_timedwait(&stall.stopped, &ts) == 0,
		      "the mover never reached race.after_group_freeze");
	uint64_t at = atomic_load(&v.at);
	for (uint64_t i = 0; i < at; i++)
		ck_assert_int_eq(loco_race_delete(t.c, &i, 8), 0);
	ck_assert_uint_ge(stats(t.c).takeovers, 1);
	for (uint64_t i = 0; i < at; i++)
		ck_assert_int_eq(ver_of(t.c, i), -1);
	sem_post(&stall.go);
	pthread_join(tid, NULL);
	rtx_crash_set_hook(NULL, NULL);
	if (broken) {
		/* The stale mover's CASes hit: a slot frozen for good in
		 * the live child (the check says so; gets of it would time
		 * out), or, unfrozen, a deleted key back. */
		struct loco_race_audit a;
		char msg[256] = "";
		unsigned back = 0;
		int rc = loco_race_verify(t.c, &a, msg, sizeof(msg));
		for (uint64_t i = 0; !rc && i < at; i++) {
			uint64_t val[2];
			uint32_t n = 0;
			back += loco_race_get(t.c, &i, 8, val, sizeof(val), &n) == 0;
		}
		ck_assert_msg(rc || back, "no damage: verify passed, no deleted "
			      "key back");
	} else {
		/* Fenced, the mover's node gets -LOCO_EFENCED from then on. */
		ck_assert_int_eq(v.rc, guard == GUARD_FENCE ? -LOCO_EFENCED : 0);
		ck_assert_uint_eq(stats(t.c).fences, guard == GUARD_FENCE);
		for (uint64_t i = 0; i < at; i++)
			ck_assert_msg(ver_of(t.c, i) == -1,
				      "deleted key %llu is back",
				      (unsigned long long)i);
		for (uint64_t i = at; guard == GUARD_EPOCH && i < 60; i++)
			ck_assert_int_eq(ver_of(t.c, i), 5);
		verify_ok(t.c, NULL);
	}
	loco_race_client_destroy(v.c);
	loco_thread_destroy(v.thr);
	loco_race_destroy(r1);
	tab_close(&t);
}

START_TEST(stale_mover_cas) { stale_mover(GUARD_FENCE); }
END_TEST
START_TEST(stale_mover_cas_epoch) { stale_mover(GUARD_EPOCH); }
END_TEST
START_TEST(stale_mover_cas_broken) { stale_mover(GUARD_NONE); }
END_TEST

/* Issue 27: an rtx split's commit installs the parent's new descriptor
 * (ld 1) and then the child's; a client that read the directory between
 * the two found no subtable for a key of the child ("the directory has
 * a hole", -EPROTO). The splitter stalls there (rtx.mid_install, armed
 * never to kill, so the commit's installs go one round each) and the
 * other client's operations on keys of both halves must wait for the
 * commit, or repair it once its lease ran out, and find every key. */
START_TEST(hole_mid_install)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_RTX);
	struct victim v = { .from = 0, .n = 60 };
	struct timespec ts;
	struct tab t;
	pthread_t tid;
	ck_assert_int_eq(setenv("LOCO_CRASH_AT", "rtx.mid_install:1000000000", 1), 0);
	tab_open(&t, 0, &o);
	struct loco_race *r1;
	ck_assert_int_eq(loco_race_create(cl.mgr[1], &o, &r1), 0);
	stall_start(&v, &tid, "rtx.mid_install", r1, 1);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 20;
	ck_assert_msg(sem_timedwait(&stall.stopped, &ts) == 0,
		      "the splitter never reached rtx.mid_install");
	/* The first split is half installed: the keys before the one
	 * being inserted are in, on both sides of hash bit 0. */
	unsigned sides[2] = { 0, 0 };
	for (uint64_t i = 0; i < atomic_load(&v.at); i++) {
		struct race_key k;
		race_key_init(t.r, &k, &i, 8);
		sides[k.h1 & 1]++;
		ck_assert_int_eq(ver_of(t.c, i), 5);
	}
	ck_assert_uint_gt(sides[0], 0);
	ck_assert_uint_gt(sides[1], 0);
	for (uint64_t i = 1000; i < 1040; i++)
		ck_assert_int_eq(put(t.c, i, 6), 0);
	ck_assert_uint_ge(stats(t.c).hole_waits, 1);
	sem_post(&stall.go);
	pthread_join(tid, NULL);
	/* The repaired committer's node is fenced before anyone splits
	 * again: its next op failed. */
	ck_assert(v.rc == 0 || v.rc == -LOCO_EFENCED);
	rtx_crash_set_hook(NULL, NULL);
	verify_ok(t.c, NULL);
	for (uint64_t i = 0; i < (v.rc ? atomic_load(&v.at) : 60); i++)
		ck_assert_int_eq(ver_of(t.c, i), 5);
	for (uint64_t i = 1000; i < 1040; i++)
		ck_assert_int_eq(ver_of(t.c, i), 6);
	loco_race_client_destroy(v.c);
	loco_thread_destroy(v.thr);
	loco_race_destroy(r1);
	tab_close(&t);
}
END_TEST

/* Keys whose fingerprint is FP, bound for the child of a depth-0 split
 * (hash bit 0 set), with two distinct main buckets in a one-group table:
 * N of them into OUT. */
static void fp_twins(const struct loco_race *r, uint8_t fp, uint64_t *out,
		     unsigned n)
{
	for (uint64_t i = 0, got = 0; got < n; i++) {
		struct race_key k;
		race_key_init(r, &k, &i, 8);
		if (k.fp == fp && (k.h1 & 1) && k.m1 != k.m2)
			out[got++] = i;
	}
}

/* A cas-mode move stalled with the group's items frozen in the parent and
 * copied into the child: a get routed to the child reads both, 42 slots
 * that all carry the key's fingerprint (keys chosen to collide), more
 * KV READs than one batch holds. Every key is found. */
START_TEST(fp_flood_moving)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_CAS);
	struct tab t;
	struct victim v = { .from = UINT64_C(1) << 40, .n = 1 };
	pthread_t tid;
	uint64_t keys[3 * RACE_SLOTS];
	tab_open(&t, 0, &o);
	fp_twins(t.r, 0x5a, keys, 3 * RACE_SLOTS);
	for (unsigned i = 0; i < 3 * RACE_SLOTS; i++)
		ck_assert_int_eq(put(t.c, keys[i], 1), 0);
	struct loco_race *r1;
	ck_assert_int_eq(loco_race_create(cl.mgr[1], &o, &r1), 0);
	stall_start(&v, &tid, "race.cas_mid_group", r1, 1);
	sem_wait(&stall.stopped);
	for (unsigned i = 0; i < 3 * RACE_SLOTS; i++)
		ck_assert_int_eq(ver_of(t.c, keys[i]), 1);
	sem_post(&stall.go);
	pthread_join(tid, NULL);
	ck_assert_int_eq(v.rc, 0);
	rtx_crash_set_hook(NULL, NULL);
	verify_ok(t.c, NULL);
	loco_race_client_destroy(v.c);
	loco_thread_destroy(v.thr);
	loco_race_destroy(r1);
	tab_close(&t);
}
END_TEST

/* The allocator never hands out a block it handed out before and nobody
 * freed since: random allocations and frees (DEAD CASes, as unlinkers
 * post them, and the owner's own frees of blocks it never linked) of
 * blocks larger than 256 bytes (a chunk's words are read one by one),
 * with the client's waits at random points. */
START_TEST(alloc_no_double)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_RTX);
	o.value_max = 512;
	struct tab t;
	tab_open(&t, 0, &o);
	struct loco_race_client *c = t.c;
	uint32_t nb = t.r->nblocks;
	uint64_t *held = calloc(nb, 8), rng = 12345;
	uint32_t *list = calloc(nb, 4), n = 0;
	for (unsigned step = 0; step < 20000; step++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		if (n < 300 && (rng % 3 || !n)) {
			uint32_t b;
			unsigned g;
			ck_assert_int_eq(race_alloc(c, 0, &b, &g), 0);
			ck_assert_msg(!held[b], "step %u: block %u handed out twice",
				      step, b);
			held[b] = race_kv_w0(g, 8, 16);
			ck_assert_int_eq(loco_write(cl.thr[0], race_kv(t.r, 0),
						    (uint64_t)b * t.r->block_len,
						    &held[b], 8), 0);
			list[n++] = b;
		} else {
			uint32_t k = (uint32_t)(rng >> 20) % n, b = list[k];
			uint64_t slot = race_slot(1, 1, 0, race_kv_gen(held[b]), b);
			ck_assert_int_eq((rng >> 50) % 4 ?
					 race_free_remote(c, slot, held[b]) :
					 race_free_local(c, 0, b, held[b]), 0);
			held[b] = 0;
			list[k] = list[--n];
		}
		if ((rng >> 40) % 4 == 0)
			ck_assert_int_eq(race_pend_wait(c), 0);
	}
	while (n) {
		uint32_t b = list[--n];
		uint64_t slot = race_slot(1, 1, 0, race_kv_gen(held[b]), b);
		ck_assert_int_eq(race_free_remote(c, slot, held[b]), 0);
	}
	verify_empty(c);
	free(held);
	free(list);
	tab_close(&t);
}
END_TEST

struct pool_view {
	struct loco_race *r;
	struct loco_race_client *c;
	uint64_t *held;          /* word 0 we wrote, per block; 0 free */
	uint32_t *list, n;       /* blocks held */
};

static int view_alloc(struct pool_view *v, unsigned step)
{
	uint32_t b;
	unsigned g;
	int rc = race_alloc(v->c, 0, &b, &g);
	if (rc)
		return rc;
	ck_assert_msg(!v->held[b], "step %u: block %u handed out twice", step, b);
	v->held[b] = race_kv_w0(g, 8, 16);
	ck_assert_int_eq(loco_write(cl.thr[0], race_kv(v->r, 0),
				    (uint64_t)b * v->r->block_len, &v->held[b],
				    8), 0);
	v->list[v->n++] = b;
	return 0;
}

/* Free the K-th held block as an unlinker does (a DEAD CAS): the owner
 * learns of it only by reading the block's word 0. */
static void view_free(struct pool_view *v, uint32_t k)
{
	uint32_t b = v->list[k];
	uint64_t slot = race_slot(1, 1, 0, race_kv_gen(v->held[b]), b);
	ck_assert_int_eq(race_free_remote(v->c, slot, v->held[b]), 0);
	v->held[b] = 0;
	v->list[k] = v->list[--v->n];
}

/* Blocks freed by DEAD CASes only (as other clients free an owner's
 * blocks): with half the pool live and one free per allocation, no block
 * is handed out twice and reclaiming reads a bounded number of chunks
 * per block it finds (the owner does not read every chunk it owns each
 * time it runs short); then the pool fills to its last block before
 * -ENOMEM, and a block freed then is found again. */
START_TEST(alloc_remote_frees)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_RTX);
	o.kv_blocks = 16384;   /* 128 chunks held at half */
	struct tab t;
	tab_open(&t, 0, &o);
	uint32_t nb = t.r->nblocks;
	struct pool_view v = { .r = t.r, .c = t.c, .held = calloc(nb, 8),
			       .list = calloc(nb, 4) };
	uint64_t rng = 777;
	for (unsigned i = 0; i < nb / 2; i++)
		ck_assert_int_eq(view_alloc(&v, i), 0);
	struct loco_race_stats s0 = stats(t.c);
	unsigned steps = 20000;
	for (unsigned step = 0; step < steps; step++) {
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		view_free(&v, (uint32_t)(rng >> 20) % v.n);
		ck_assert_int_eq(view_alloc(&v, step), 0);
		if ((rng >> 40) % 4 == 0)
			ck_assert_int_eq(race_pend_wait(t.c), 0);
	}
	struct loco_race_stats s1 = stats(t.c);
	uint64_t reads = s1.reclaim_reads - s0.reclaim_reads +
			 s1.ahead_reads - s0.ahead_reads;
	ck_assert_msg(reads < steps / 2, "%llu READs of chunk words for %u "
		      "allocations", (unsigned long long)reads, steps);
	ck_assert_int_eq(race_pend_wait(t.c), 0);
	int rc = 0;
	while (v.n < nb && !(rc = view_alloc(&v, steps)))
		;
	ck_assert_uint_eq(v.n, nb);
	ck_assert_int_eq(view_alloc(&v, steps), -ENOMEM);
	uint32_t last = v.list[v.n / 3];
	view_free(&v, v.n / 3);
	ck_assert_int_eq(race_pend_wait(t.c), 0);
	ck_assert_int_eq(view_alloc(&v, steps), 0);
	ck_assert_uint_eq(v.list[v.n - 1], last);
	while (v.n)
		view_free(&v, v.n - 1);
	verify_empty(t.c);
	free(v.held);
	free(v.list);
	tab_close(&t);
}
END_TEST

/* ---- two owners sharing a pool to its last block ------------------------------- */

struct fill {
	struct loco_race *r;
	struct loco_race_client *c[2];   /* one per node, one table */
	struct loco_thread *thr[2];
	uint64_t *held;          /* word 0 we wrote, per block; 0 free */
	uint32_t *list, n;       /* blocks held */
	uint64_t rng;
};

static uint64_t fill_rand(struct fill *f)
{
	f->rng ^= f->rng << 13;
	f->rng ^= f->rng >> 7;
	f->rng ^= f->rng << 17;
	return f->rng;
}

/* Client X allocates a block and writes its word 0 as an insert does;
 * every DEAD CAS posted so far has completed (race_pend_wait both). */
static int fill_alloc(struct fill *f, unsigned x)
{
	uint32_t b;
	unsigned g;
	ck_assert_int_eq(race_pend_wait(f->c[0]), 0);
	ck_assert_int_eq(race_pend_wait(f->c[1]), 0);
	int rc = race_alloc(f->c[x], 0, &b, &g);
	if (rc)
		return rc;
	ck_assert_msg(!f->held[b], "block %u handed out twice", b);
	f->held[b] = race_kv_w0(g, 8, 16);
	uint64_t off = (uint64_t)b * f->r->block_len, w;
	ck_assert_int_eq(loco_write(f->thr[x], race_kv(f->r, 0), off,
				    &f->held[b], 8), 0);
	/* Placed before the other client's DEAD CAS (shm-weak places a
	 * WRITE late, but before a later READ of its QP), as an insert's
	 * slot CAS orders it. */
	ck_assert_int_eq(loco_read(f->thr[x], race_kv(f->r, 0), off, &w, 8), 0);
	ck_assert_uint_eq(w, f->held[b]);
	f->list[f->n++] = b;
	return 0;
}

/* A random held block freed by a random client's DEAD CAS (an unlinker:
 * mostly not the block's owner). */
static void fill_free(struct fill *f)
{
	uint64_t x = fill_rand(f);
	uint32_t k = (uint32_t)(x >> 20) % f->n, b = f->list[k];
	uint64_t slot = race_slot(1, 1, 0, race_kv_gen(f->held[b]), b);
	ck_assert_int_eq(race_free_remote(f->c[x >> 60 & 1], slot, f->held[b]),
			 0);
	f->held[b] = 0;
	f->list[k] = f->list[--f->n];
}

/* The owner table and every block's word 0 as the memory node holds
 * them (after both clients' waits). */
static void fill_read(struct fill *f, uint64_t *own, uint64_t *w0)
{
	const struct loco_race *r = f->r;
	ck_assert_int_eq(loco_read(f->thr[0], &r->mn[0].kvc, 0, own,
				   r->nchunks * 8), 0);
	for (uint32_t b = 0; b < r->nblocks; b++)
		ck_assert_int_eq(loco_read(f->thr[0], race_kv(r, 0),
					   (uint64_t)b * r->block_len, &w0[b], 8),
				 0);
}

/* The allocators' books against memory: each chunk a client lists is
 * its own in the owner table, and each chunk owned there is listed by
 * its owner; a chunk's blocks are free or handed out, not both; a free
 * one is neither held nor LIVE, a held one is handed out; nfree counts
 * the free ones. Returns the blocks a client lists free or handed out:
 * every block of the pool when it is all owned. */
static uint64_t fill_books(struct fill *f, const uint64_t *own,
			   const uint64_t *w0)
{
	const struct loco_race *r = f->r;
	uint64_t blocks = 0;
	uint32_t listed = 0, owned = 0;
	for (uint32_t i = 0; i < r->nchunks; i++)
		owned += own[i] != 0;
	for (unsigned x = 0; x < 2; x++) {
		const struct loco_race_client *c = f->c[x];
		const struct race_pool *p = &c->pool[0];
		uint64_t nfree = 0;
		for (unsigned k = 0; k < p->n; k++) {
			const struct race_own *o = &p->ch[k];
			ck_assert_uint_eq(own[o->idx], c->inc << 16 | (c->slot + 1));
			ck_assert_msg(!(o->free & o->used) && (o->free | o->used) ==
				      ~UINT64_C(0), "client %u chunk %u: free %llx "
				      "used %llx", x, o->idx,
				      (unsigned long long)o->free,
				      (unsigned long long)o->used);
			for (unsigned i = 0; i < RACE_CHUNK_BLOCKS; i++) {
				uint32_t b = o->idx * RACE_CHUNK_BLOCKS + i;
				if (!(o->free >> i & 1))
					continue;
				ck_assert_msg(!f->held[b] && !race_kv_live(w0[b]),
					      "block %u listed free but in use", b);
			}
			nfree += (unsigned)__builtin_popcountll(o->free);
			blocks += RACE_CHUNK_BLOCKS;
		}
		ck_assert_uint_eq(nfree, p->nfree);
		listed += p->n;
	}
	ck_assert_uint_eq(listed, owned);
	return blocks;
}

/* Client X found no block: every chunk is owned, and every block of
 * X's chunks is held (LIVE): none of them was freed unseen. */
static void fill_full_for(struct fill *f, unsigned x)
{
	const struct loco_race *r = f->r;
	uint64_t *own = calloc(r->nchunks, 8), *w0 = calloc(r->nblocks, 8);
	fill_read(f, own, w0);
	for (uint32_t i = 0; i < r->nchunks; i++)
		ck_assert_msg(own[i], "-ENOMEM with chunk %u unowned", i);
	const struct race_pool *p = &f->c[x]->pool[0];
	for (unsigned k = 0; k < p->n; k++)
		for (unsigned i = 0; i < RACE_CHUNK_BLOCKS; i++) {
			uint32_t b = p->ch[k].idx * RACE_CHUNK_BLOCKS + i;
			ck_assert_msg(f->held[b] && race_kv_live(w0[b]),
				      "-ENOMEM for client %u but its block %u "
				      "is free", x, b);
		}
	ck_assert_uint_eq(fill_books(f, own, w0), r->nblocks);
	free(own);
	free(w0);
}

/* Two clients (one per node) allocate from one pool and free each
 * other's blocks (DEAD CASes: an owner learns of them only by reading),
 * allocating a little more than they free, until one finds no block:
 * no block is handed out twice; then every chunk is owned and every
 * block of that client's chunks is in use; the books of both agree with
 * memory. Then everything is freed by the other side and both clients
 * allocate until each finds none: together they hand out every block of
 * the pool again (none lost to the allocator), and the audit agrees. */
static void shared_fill(uint32_t value_max)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_RTX);
	o.value_max = value_max;
	struct tab t0, t1;
	tab_open(&t0, 0, &o);
	tab_open(&t1, 1, &o);
	uint32_t nb = t0.r->nblocks;
	struct fill f = { .r = t0.r, .c = { t0.c, t1.c },
			  .thr = { cl.thr[0], cl.thr[1] },
			  .held = calloc(nb, 8), .list = calloc(nb, 4),
			  .rng = 4242 + value_max };
	unsigned x = 0;
	int rc = 0;
	for (unsigned step = 0; !rc; step++) {
		x = fill_rand(&f) >> 63;
		rc = fill_alloc(&f, x);
		if (!rc && f.n > 64 && fill_rand(&f) % 8 < 7)
			fill_free(&f);
		ck_assert_uint_lt(step, 100 * nb);
	}
	ck_assert_int_eq(rc, -ENOMEM);
	fill_full_for(&f, x);
	while (f.n)
		fill_free(&f);
	bool done[2] = { false, false };
	while (!done[0] || !done[1]) {
		x = fill_rand(&f) >> 63;
		if (done[x])
			continue;
		rc = fill_alloc(&f, x);
		ck_assert(!rc || rc == -ENOMEM);
		done[x] = rc == -ENOMEM;
	}
	ck_assert_uint_eq(f.n, nb);
	fill_full_for(&f, 0);
	fill_full_for(&f, 1);
	while (f.n)
		fill_free(&f);
	ck_assert_int_eq(race_pend_wait(t1.c), 0);
	verify_empty(t0.c);
	free(f.held);
	free(f.list);
	loco_race_client_destroy(t1.c);
	loco_race_destroy(t1.r);
	tab_close(&t0);
}

START_TEST(alloc_shared_fill) { shared_fill(40); }
END_TEST
START_TEST(alloc_shared_fill_big) { shared_fill(512); }
END_TEST

struct creator {
	const struct loco_race_opts *o;
	struct loco_race *r;
	int rc;
};

static void *creator_main(void *arg)
{
	struct creator *k = arg;
	stall.victim = pthread_self();   /* read by the hook on this thread */
	k->rc = loco_race_create(cl.mgr[1], k->o, &k->r);
	return NULL;
}

/* A creator that found the roots missing stalls (race.create_peeked)
 * while node 0 creates the table and a cas-mode move starts on root 0
 * (its first step: the group's headers to depth 1). Coming back, the
 * late creator leaves those headers as they are: set back, they would
 * tell readers that the group has not moved. */
START_TEST(late_creator)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_CAS);
	struct creator k = { .o = &o };
	uint64_t from = race_hdr(0, 0, false), to = race_hdr(1, 0, false);
	uint64_t old = 0, now = 0;
	struct race_st st;
	struct tab t;
	pthread_t tid;
	stall.point = "race.create_peeked";
	atomic_store(&stall.hit, 0);
	sem_init(&stall.stopped, 0, 0);
	sem_init(&stall.go, 0, 0);
	rtx_crash_set_hook(stall_hook, NULL);
	pthread_create(&tid, NULL, creator_main, &k);
	sem_wait(&stall.stopped);
	tab_open(&t, 0, &o);
	ck_assert_int_eq(race_locate(t.c, 0, &st), 0);
	for (unsigned b = 0; b < 3; b++) {
		ck_assert_int_eq(loco_cas(cl.thr[0], &st.rr, b * RACE_BUCKET_BYTES,
					  from, to, &old), 0);
		ck_assert_uint_eq(old, from);
	}
	sem_post(&stall.go);
	pthread_join(tid, NULL);
	rtx_crash_set_hook(NULL, NULL);
	ck_assert_int_eq(k.rc, 0);
	for (unsigned b = 0; b < 3; b++) {
		ck_assert_int_eq(loco_read(cl.thr[0], &st.rr, b * RACE_BUCKET_BYTES,
					   &now, 8), 0);
		ck_assert_msg(now == to, "bucket %u header %016llx", b,
			      (unsigned long long)now);
		ck_assert_int_eq(loco_cas(cl.thr[0], &st.rr, b * RACE_BUCKET_BYTES,
					  to, from, &old), 0);
	}
	verify_ok(t.c, NULL);
	loco_race_destroy(k.r);
	tab_close(&t);
}
END_TEST

/* An insert that stalls with its slot tentative: readers never see it;
 * an insert of the same key by another client clears it once it is
 * stale and succeeds; the stalled one, released, finds the key there. */
START_TEST(dead_tentative)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_RTX);
	o.groups = 16;
	struct tab t;
	struct victim v = { .from = 42, .n = 1 };
	pthread_t tid;
	tab_open(&t, 0, &o);
	struct loco_race *r1;
	ck_assert_int_eq(loco_race_create(cl.mgr[1], &o, &r1), 0);
	stall_start(&v, &tid, "race.insert_tentative", r1, 1);
	sem_wait(&stall.stopped);
	ck_assert_int_eq(ver_of(t.c, 42), -1);
	ck_assert_int_eq(put(t.c, 42, 8), 0);
	ck_assert_uint_eq(stats(t.c).tent_steals, 1);
	sem_post(&stall.go);
	pthread_join(tid, NULL);
	ck_assert_int_eq(v.rc, 0);          /* -EEXIST, counted as done */
	rtx_crash_set_hook(NULL, NULL);
	ck_assert_int_eq(ver_of(t.c, 42), 8);
	verify_ok(t.c, NULL);
	loco_race_client_destroy(v.c);
	loco_thread_destroy(v.thr);
	loco_race_destroy(r1);
	tab_close(&t);
}
END_TEST

/* A crashed client's in-flight block (written, never linked) is found
 * by the next incarnation of its slot and freed: nothing leaks. */
START_TEST(restart_adopts_chunks)
{
	struct loco_race_opts o = opts(LOCO_RACE_RESIZE_RTX);
	struct tab t;
	tab_open(&t, 0, &o);
	struct loco_race *r1;
	struct loco_thread *thr;
	struct loco_race_client *x, *y;
	ck_assert_int_eq(loco_race_create(cl.mgr[1], &o, &r1), 0);
	ck_assert_int_eq(loco_thread_create(cl.mgr[1], &thr), 0);
	ck_assert_int_eq(loco_race_client_create(r1, thr, &x), 0);
	for (uint64_t i = 0; i < 50; i++)
		ck_assert_int_eq(put(x, i, 1), 0);
	uint32_t block;
	unsigned gen;
	ck_assert_int_eq(race_alloc(x, 0, &block, &gen), 0);
	uint64_t w0 = race_kv_w0(gen, 8, 16);
	ck_assert_int_eq(loco_write(thr, race_kv(r1, 0),
				    (uint64_t)block * r1->block_len, &w0, 8), 0);
	uint32_t slot = x->slot;
	rtx_worker_drop(x->w);
	race_client_forget(x);
	ck_assert_int_eq(loco_race_client_create(r1, thr, &y), 0);
	ck_assert_uint_eq(y->slot, slot);
	uint64_t now = 0;
	ck_assert_int_eq(loco_read(thr, race_kv(r1, 0),
				   (uint64_t)block * r1->block_len, &now, 8), 0);
	ck_assert_uint_eq(now, w0 | RACE_KV_DEAD);
	struct loco_race_audit a;
	verify_ok(t.c, &a);
	ck_assert_uint_eq(a.reclaimed, 0);
	ck_assert_uint_eq(a.items, 50);
	for (uint64_t i = 0; i < 50; i++)
		ck_assert_int_eq(ver_of(y, i), 1);
	loco_race_client_destroy(y);
	loco_thread_destroy(thr);
	loco_race_destroy(r1);
	tab_close(&t);
}
END_TEST

static TCase *tcase(Suite *s, const char *name)
{
	TCase *t = tcase_create(name);
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 120);
	suite_add_tcase(s, t);
	return t;
}

static Suite *suite(void)
{
	Suite *s = suite_create("race");
	TCase *t = tcase(s, "ops");
	tcase_add_test(t, ops_rtx);
	tcase_add_test(t, ops_cas);
	tcase_add_test(t, round_trips);
	t = tcase(s, "limits");
	tcase_add_test(t, bad_input);
	tcase_add_test(t, pool_exhausted);
	tcase_add_test(t, max_depth);
	tcase_add_test(t, verify_finds_damage);
	t = tcase(s, "grow");
	tcase_add_test(t, grow_rtx);
	tcase_add_test(t, grow_cas);
	tcase_add_test(t, phases_rtx);
	tcase_add_test(t, phases_cas);
	tcase_add_test(t, stale_rtx);
	tcase_add_test(t, stale_cas);
	tcase_add_test(t, stale_broken_rtx);
	tcase_add_test(t, stale_broken_cas);
	t = tcase(s, "concurrent");
	tcase_add_test(t, dup_inserts_rtx);
	tcase_add_test(t, dup_inserts_cas);
	tcase_add_test(t, mixed_rtx);
	tcase_add_test(t, mixed_cas);
	t = tcase(s, "dead");
	tcase_add_test(t, takeover_rtx_frozen);
	tcase_add_test(t, takeover_rtx_written);
	tcase_add_test(t, takeover_cas_group);
	tcase_add_test(t, takeover_cas_published);
	tcase_add_test(t, fp_flood_moving);
	tcase_add_test(t, late_creator);
	tcase_add_test(t, dead_tentative);
	tcase_add_test(t, restart_adopts_chunks);
	t = tcase(s, "resize-races");
	tcase_add_test(t, hole_mid_install);
	tcase_add_test(t, stale_mover_cas);
	tcase_add_test(t, stale_mover_cas_epoch);
	tcase_add_test(t, stale_mover_cas_broken);
	t = tcase(s, "alloc");
	tcase_add_test(t, alloc_no_double);
	tcase_add_test(t, alloc_remote_frees);
	tcase_add_test(t, alloc_shared_fill);
	tcase_add_test(t, alloc_shared_fill_big);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
