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

#include "channels/race/internal.h"
#include "rtx/internal.h"
#include "test/channels/cluster.h"

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
	t = tcase(s, "grow");
	tcase_add_test(t, grow_rtx);
	tcase_add_test(t, grow_cas);
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
