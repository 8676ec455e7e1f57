/* SPDX-License-Identifier: MIT */
/* shared_region on an in-process two-node cluster: read and write any
 * copy (sync and async), bounds, non-members, a peer that never joined,
 * and a length mismatch failing the join. */
#include <check.h>
#include <errno.h>
#include <stdatomic.h>

#include <loco/channels/shared_region.h>
#include "test/common/cluster.h"
#include "test/common/skip.h"

static struct cluster cl;

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

static void pair_init(struct loco_shared_region sr[2], uint64_t len0,
		      uint64_t len1)
{
	ck_assert_int_eq(loco_shared_region_init(&sr[0], cl.mgr[0], NULL, "sr",
						 len0, 0), 0);
	ck_assert_int_eq(loco_shared_region_init(&sr[1], cl.mgr[1], NULL, "sr",
						 len1, 0), 0);
}

START_TEST(init_errors)
{
	struct loco_shared_region sr, dup;
	ck_assert_int_eq(loco_shared_region_init(&sr, cl.mgr[0], NULL, "sr", 0, 0),
			 -EINVAL);
	ck_assert_int_eq(loco_shared_region_init(&sr, cl.mgr[0], NULL, "a.b", 64, 0),
			 -EINVAL);
	ck_assert_int_eq(loco_shared_region_init(&sr, cl.mgr[0], NULL, "sr", 64, 0),
			 0);
	ck_assert_str_eq(sr.local->name, "sr.data");
	ck_assert_uint_eq(loco_shared_region_len(&sr), 64);
	ck_assert_int_eq(loco_shared_region_init(&dup, cl.mgr[0], NULL, "sr", 64, 0),
			 -EEXIST);
	loco_shared_region_fini(&sr);
}
END_TEST

START_TEST(read_write_every_copy)
{
	struct loco_shared_region sr[2];
	char msg[40] = "written by node 0 into node 1", back[40];
	pair_init(sr, 4096, 4096);
	ck_assert_int_eq(cluster_ready(&cl, 3000), 0);
	/* node 0 -> node 1's copy, seen locally at node 1 */
	ck_assert_int_eq(loco_shared_region_write(&sr[0], cl.thr[0], 1, 128, msg,
						  sizeof(msg)), 0);
	ck_assert_int_eq(loco_fence(cl.thr[0], LOCO_FENCE_PAIR, 1), 0);
	ck_assert_mem_eq((char *)loco_shared_region_local(&sr[1]) + 128, msg,
			 sizeof(msg));
	/* node 1 reads it back from its own copy through the transport */
	ck_assert_int_eq(loco_shared_region_read(&sr[1], cl.thr[1], 1, 128, back,
						 sizeof(back)), 0);
	ck_assert_mem_eq(back, msg, sizeof(msg));
	/* async forms, node 1 -> node 0, one ack for both */
	struct loco_ack ack;
	uint64_t v = 0x1122334455667788ull, r = 0;
	loco_ack_clear(&ack);
	ck_assert_int_eq(loco_shared_region_post_write(&sr[1], cl.thr[1], 0, 4088,
						       &v, 8, &ack), 0);
	ck_assert_int_eq(loco_shared_region_post_read(&sr[1], cl.thr[1], 0, 4088,
						      &r, 8, &ack), 0);
	ck_assert_int_eq(loco_ack_wait(cl.thr[1], &ack, -1), 0);
	ck_assert_uint_eq(r, v);  /* the READ follows the WRITE on one QP */
	ck_assert_ptr_nonnull(loco_shared_region_at(&sr[0], 1));
	ck_assert_ptr_nonnull(loco_shared_region_at(&sr[0], 0));
	loco_shared_region_fini(&sr[0]);
	loco_shared_region_fini(&sr[1]);
}
END_TEST

START_TEST(bounds_and_members)
{
	struct loco_shared_region sr[2];
	char buf[16] = "";
	pair_init(sr, 256, 256);
	ck_assert_int_eq(cluster_ready(&cl, 3000), 0);
	ck_assert_int_eq(loco_shared_region_write(&sr[0], cl.thr[0], 1, 250, buf,
						  8), -EINVAL);
	ck_assert_int_eq(loco_shared_region_read(&sr[0], cl.thr[0], 0, 256, buf,
						 1), -EINVAL);
	ck_assert_int_eq(loco_shared_region_write(&sr[0], cl.thr[0], 1, 248, buf,
						  8), 0);
	ck_assert_int_eq(loco_shared_region_write(&sr[0], cl.thr[0], 3, 0, buf, 8),
			 -EINVAL);
	ck_assert_int_eq(loco_shared_region_read(&sr[0], cl.thr[0], 999, 0, buf, 8),
			 -EINVAL);
	ck_assert_ptr_null(loco_shared_region_at(&sr[0], 3));
	loco_shared_region_fini(&sr[0]);
	loco_shared_region_fini(&sr[1]);
}
END_TEST

START_TEST(length_mismatch_fails_join)
{
	struct loco_shared_region sr[2];
	pair_init(sr, 256, 512);
	ck_assert_int_eq(loco_mgr_wait_ready(cl.mgr[0], 3000), -LOCO_EMISMATCH);
	loco_shared_region_fini(&sr[0]);
	loco_shared_region_fini(&sr[1]);
}
END_TEST

START_TEST(peer_not_joined)
{
	struct loco_shared_region sr;
	uint64_t v = 1;
	ck_assert_int_eq(loco_shared_region_init(&sr, cl.mgr[0], NULL, "sr", 64, 0),
			 0);
	ck_assert_ptr_null(loco_shared_region_at(&sr, 1));
	ck_assert_int_eq(loco_shared_region_write(&sr, cl.thr[0], 1, 0, &v, 8),
			 -ENOTCONN);
	/* its own copy works without any peer: placed after a fence */
	ck_assert_int_eq(loco_shared_region_write(&sr, cl.thr[0], 0, 0, &v, 8), 0);
	ck_assert_int_eq(loco_fence(cl.thr[0], LOCO_FENCE_PAIR, 0), 0);
	_Atomic uint64_t *word = loco_shared_region_local(&sr);
	/* Relaxed: the fence above placed the WRITE before returning. */
	ck_assert_uint_eq(atomic_load_explicit(word, memory_order_relaxed), 1);
	loco_shared_region_fini(&sr);
}
END_TEST

int main(void)
{
	if (test_transport_skip())
		return TEST_SKIP;
	Suite *s = suite_create("shared_region");
	TCase *tc = tcase_create("two_nodes");
	tcase_add_checked_fixture(tc, setup2, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, init_errors);
	tcase_add_test(tc, read_write_every_copy);
	tcase_add_test(tc, bounds_and_members);
	tcase_add_test(tc, length_mismatch_fails_join);
	suite_add_tcase(s, tc);
	TCase *ta = tcase_create("absent_peer");
	tcase_add_checked_fixture(ta, setup_absent, teardown);
	tcase_set_timeout(ta, 30);
	tcase_add_test(ta, peer_not_joined);
	suite_add_tcase(s, ta);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
