/* SPDX-License-Identifier: MIT */
/* atomic_var on an in-process two-node cluster, hosted at node 0: read,
 * write, CAS, FAA from the host and the other node, the cached copy, the
 * async forms, the host going through the transport (its verbs counted),
 * a hot word (device memory or the fallback to the arena, warned once), a
 * host outside the participants, and a host that never joined. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <loco/channels/atomic_var.h>
#include "test/common/cluster.h"
#include "test/common/skip.h"
#include "test/common/capture.h"

static struct cluster cl;
static struct loco_atomic_var av[2];

static void setup2(void)
{
	ck_assert_int_eq(cluster_start(&cl, 2, 0, 3000), 0);
}

static void setup_absent(void)
{
	ck_assert_int_eq(cluster_start(&cl, 1, 1, 3000), 0);
}

static void teardown(void)
{
	cluster_stop(&cl);
}

static void pair_init(void)
{
	for (unsigned i = 0; i < 2; i++)
		ck_assert_int_eq(loco_atomic_var_init(&av[i], cl.mgr[i], NULL, "a",
						      0, 0), 0);
	ck_assert_int_eq(cluster_ready(&cl, 3000), 0);
}

START_TEST(init_errors)
{
	struct loco_atomic_var a;
	ck_assert_int_eq(loco_atomic_var_init(&a, cl.mgr[0], NULL, "a", 3, 0),
			 -EINVAL);
	ck_assert_int_eq(loco_atomic_var_init(&a, cl.mgr[0], NULL, "a",
					      LOCO_MAX_NODES, 0), -EINVAL);
	ck_assert_int_eq(loco_atomic_var_init(&a, cl.mgr[0], NULL, "", 0, 0),
			 -EINVAL);
	/* node 1 hosts, but only node 0 participates */
	ck_assert_int_eq(loco_atomic_var_init(&a, cl.mgr[0], NULL, "a", 1,
					      UINT64_C(1) << 0), -EINVAL);
}
END_TEST

START_TEST(ops_from_both_nodes)
{
	uint64_t old = 99, v = 0;
	pair_init();
	ck_assert_uint_eq(loco_atomic_var_cached(&av[1]), 0);
	ck_assert_int_eq(loco_atomic_var_faa(&av[1], cl.thr[1], 5, &old), 0);
	ck_assert_uint_eq(old, 0);
	ck_assert_uint_eq(loco_atomic_var_cached(&av[1]), 5);
	ck_assert_int_eq(loco_atomic_var_faa(&av[0], cl.thr[0], 10, &old), 0);
	ck_assert_uint_eq(old, 5);
	/* a failing CAS reports and caches the current value */
	ck_assert_int_eq(loco_atomic_var_cas(&av[1], cl.thr[1], 5, 1, &old), 0);
	ck_assert_uint_eq(old, 15);
	ck_assert_uint_eq(loco_atomic_var_cached(&av[1]), 15);
	ck_assert_int_eq(loco_atomic_var_cas(&av[1], cl.thr[1], 15, 100, &old), 0);
	ck_assert_uint_eq(old, 15);
	ck_assert_uint_eq(loco_atomic_var_cached(&av[1]), 100);
	ck_assert_int_eq(loco_atomic_var_read(&av[0], cl.thr[0], &v), 0);
	ck_assert_uint_eq(v, 100);
	ck_assert_uint_eq(loco_atomic_var_cached(&av[0]), 100);
	/* write with a stale cache: the CAS loop still lands it */
	ck_assert_int_eq(loco_atomic_var_faa(&av[1], cl.thr[1], 1, &old), 0);
	ck_assert_int_eq(loco_atomic_var_write(&av[0], cl.thr[0], 7), 0);
	ck_assert_int_eq(loco_atomic_var_read(&av[1], cl.thr[1], &v), 0);
	ck_assert_uint_eq(v, 7);
	/* wrap-around of FAA */
	ck_assert_int_eq(loco_atomic_var_faa(&av[1], cl.thr[1], UINT64_MAX, &old), 0);
	ck_assert_int_eq(loco_atomic_var_read(&av[1], cl.thr[1], &v), 0);
	ck_assert_uint_eq(v, 6);
	loco_atomic_var_fini(&av[0]);
	loco_atomic_var_fini(&av[1]);
}
END_TEST

START_TEST(async_forms)
{
	uint64_t o1 = 0, o2 = 0, o3 = 0, r = 0;
	struct loco_ack ack;
	pair_init();
	loco_ack_clear(&ack);
	ck_assert_int_eq(loco_atomic_var_post_faa(&av[1], cl.thr[1], 3, &o1, &ack), 0);
	ck_assert_int_eq(loco_atomic_var_post_cas(&av[1], cl.thr[1], 3, 30, &o2,
						  &ack), 0);
	ck_assert_int_eq(loco_atomic_var_post_faa(&av[1], cl.thr[1], 1, &o3, &ack), 0);
	ck_assert_int_eq(loco_atomic_var_post_read(&av[1], cl.thr[1], &r, &ack), 0);
	ck_assert_int_eq(loco_ack_wait(cl.thr[1], &ack, -1), 0);
	ck_assert_uint_eq(o1, 0);
	ck_assert_uint_eq(o2, 3);
	ck_assert_uint_eq(o3, 30);
	ck_assert_uint_eq(r, 31);
	/* async forms leave the cache alone */
	ck_assert_uint_eq(loco_atomic_var_cached(&av[1]), 0);
	loco_atomic_var_fini(&av[0]);
	loco_atomic_var_fini(&av[1]);
}
END_TEST

START_TEST(host_goes_through_transport)
{
	struct loco_stats before, after;
	uint64_t old;
	pair_init();
	loco_thread_stats(cl.thr[0], &before);
	ck_assert_int_eq(loco_atomic_var_faa(&av[0], cl.thr[0], 1, &old), 0);
	ck_assert_int_eq(loco_atomic_var_cas(&av[0], cl.thr[0], 1, 2, &old), 0);
	loco_thread_stats(cl.thr[0], &after);
	ck_assert_uint_eq(after.faa - before.faa, 1);
	ck_assert_uint_eq(after.cas - before.cas, 1);
	loco_atomic_var_fini(&av[0]);
	loco_atomic_var_fini(&av[1]);
}
END_TEST

static struct loco_atomic_var hot[2][2];

static void hot_init(void)
{
	const char *names[2] = { "h1", "h2" };
	for (unsigned v = 0; v < 2; v++)
		for (unsigned i = 0; i < 2; i++)
			ck_assert_int_eq(loco_atomic_var_init_ex(&hot[v][i], cl.mgr[i], NULL,
								 names[v], 0, 0,
								 LOCO_REGION_HOT), 0);
}

/* A hot word: in the host's device memory if its transport has some,
 * else in its arena with one warning for the node (shm, shm-weak: always);
 * the channel works the same either way, the host through the transport. */
START_TEST(hot_word)
{
	struct loco_atomic_var a;
	uint64_t old = 1, v = 0, total, used;
	char log[4096];
	ck_assert_int_eq(loco_atomic_var_init_ex(&a, cl.mgr[0], NULL, "a", 0, 0, 0x100),
			 -EINVAL);
	ck_assert_int_eq(loco_atomic_var_init_ex(&a, cl.mgr[0], NULL, "a", 0, 0,
						 LOCO_REGION_REMOTE_NONE), -EINVAL);
	loco_log_set_level(LOCO_LOG_INFO);
	struct capture cap;
	capture_start(&cap);
	hot_init();
	capture_end(&cap, log, sizeof(log));
	ck_assert_int_eq(cluster_ready(&cl, 3000), 0);
	loco_mgr_dm_usage(cl.mgr[0], &total, &used);
	const struct loco_region *reg = loco_channel_local(&hot[0][0].base, "word");
	ck_assert_ptr_nonnull(reg);
	const struct loco_rregion *rr = loco_channel_remote(&hot[0][1].base,
							    hot[0][1].idx, 0);
	ck_assert_ptr_nonnull(rr);
	if (total) { /* a transport with device memory (verbs with DM) */
		ck_assert_uint_eq(reg->space, LOCO_SPACE_DM);
		ck_assert_ptr_null(reg->base);
		ck_assert_uint_eq(rr->space, LOCO_SPACE_DM);
		ck_assert_uint_ge(used, 16);
	} else {
		ck_assert_uint_eq(reg->space, LOCO_SPACE_ARENA);
		ck_assert_ptr_nonnull(reg->base);
		ck_assert_uint_eq(rr->space, LOCO_SPACE_ARENA);
		ck_assert_uint_eq(used, 0);
		ck_assert_msg(count_substr(log, "is in host memory") == 1 &&
			      strstr(log, "hot region h1.word (8 bytes)") &&
			      strstr(log, "offers no device memory"), "log: %s", log);
	}
	for (unsigned w = 0; w < 2; w++) {
		ck_assert_int_eq(loco_atomic_var_faa(&hot[w][1], cl.thr[1], 5 + w, &old), 0);
		ck_assert_uint_eq(old, 0);
		ck_assert_int_eq(loco_atomic_var_cas(&hot[w][0], cl.thr[0], 5 + w, 9, &old), 0);
		ck_assert_uint_eq(old, 5 + w);
		ck_assert_int_eq(loco_atomic_var_read(&hot[w][1], cl.thr[1], &v), 0);
		ck_assert_uint_eq(v, 9);
	}
	for (unsigned w = 0; w < 2; w++)
		for (unsigned i = 0; i < 2; i++)
			loco_atomic_var_fini(&hot[w][i]);
}
END_TEST

START_TEST(host_not_joined)
{
	struct loco_atomic_var a;
	uint64_t v;
	ck_assert_int_eq(loco_atomic_var_init(&a, cl.mgr[0], NULL, "a", 1, 0), 0);
	ck_assert_int_eq(loco_atomic_var_read(&a, cl.thr[0], &v), -ENOTCONN);
	ck_assert_int_eq(loco_atomic_var_faa(&a, cl.thr[0], 1, &v), -ENOTCONN);
	ck_assert_int_eq(loco_atomic_var_write(&a, cl.thr[0], 1), -ENOTCONN);
	loco_atomic_var_fini(&a);
}
END_TEST

int main(void)
{
	if (test_transport_skip())
		return TEST_SKIP;
	Suite *s = suite_create("atomic_var");
	TCase *tc = tcase_create("two_nodes");
	tcase_add_checked_fixture(tc, setup2, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, init_errors);
	tcase_add_test(tc, ops_from_both_nodes);
	tcase_add_test(tc, async_forms);
	tcase_add_test(tc, host_goes_through_transport);
	tcase_add_test(tc, hot_word);
	suite_add_tcase(s, tc);
	TCase *ta = tcase_create("absent_peer");
	tcase_add_checked_fixture(ta, setup_absent, teardown);
	tcase_set_timeout(ta, 30);
	tcase_add_test(ta, host_not_joined);
	suite_add_tcase(s, ta);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
