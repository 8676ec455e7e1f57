/* SPDX-License-Identifier: MIT */
/* SST on an in-process cluster: rows created by the join callback and
 * named "<sst>/ov<ID>", store/push/load of 8-byte and 24-byte rows across
 * three nodes, members and errors, a member that never joined (no row,
 * push refused), and a one-member table. */
#include <check.h>
#include <errno.h>

#include <loco/channels/sst.h>
#include "test/common/cluster.h"
#include "test/common/skip.h"

static struct cluster cl;

struct row {
	uint64_t id, round, check;
};

static void setup3(void)
{
	ck_assert_int_eq(cluster_start(&cl, 3, 0, 3000), 0);
}

static void setup_absent(void)
{
	ck_assert_int_eq(cluster_start(&cl, 1, 1, 3000), 0);
}

static void teardown(void)
{
	cluster_stop(&cl);
}

static void push_placed(struct loco_sst *sst, struct loco_thread *thr)
{
	struct loco_ack ack;
	loco_ack_clear(&ack);
	ck_assert_int_eq(loco_sst_push_broadcast(sst, thr, LOCO_PUSH_PLACE, &ack),
			 0);
	ck_assert_int_eq(loco_ack_wait(thr, &ack, -1), 0);
}

START_TEST(rows_from_join_callbacks)
{
	struct loco_sst sst[3];
	for (unsigned i = 0; i < 3; i++) {
		ck_assert_int_eq(loco_sst_init(&sst[i], cl.mgr[i], NULL, "s",
					       sizeof(struct row), 0), 0);
		/* only its own row exists before anyone joins */
		ck_assert_ptr_nonnull(loco_sst_row(&sst[i], i));
	}
	ck_assert_int_eq(cluster_ready(&cl, 3000), 0);
	for (unsigned i = 0; i < 3; i++) {
		ck_assert(loco_sst_ready(&sst[i]));
		ck_assert_uint_eq(loco_sst_members(&sst[i]), 7);
		for (unsigned j = 0; j < 3; j++) {
			char name[32];
			snprintf(name, sizeof(name), "s/ov%u", j);
			ck_assert_str_eq(loco_sst_row(&sst[i], j)->base.name, name);
		}
	}
	for (unsigned i = 0; i < 3; i++) {
		struct row r = { i, 1, i * 1000 + 1 };
		ck_assert_int_eq(loco_sst_store_mine(&sst[i], &r), 0);
		push_placed(&sst[i], cl.thr[i]);
	}
	for (unsigned i = 0; i < 3; i++) {
		for (unsigned j = 0; j < 3; j++) {
			struct row r;
			ck_assert_int_eq(loco_sst_load(&sst[i], j, &r), 0);
			ck_assert_uint_eq(r.id, j);
			ck_assert_uint_eq(r.round, 1);
			ck_assert_uint_eq(r.check, j * 1000 + 1);
		}
	}
	struct row r;
	ck_assert_int_eq(loco_sst_load(&sst[0], 3, &r), -EINVAL);
	ck_assert_int_eq(loco_sst_load(&sst[0], LOCO_MAX_NODES, &r), -EINVAL);
	ck_assert_ptr_null(loco_sst_row(&sst[0], 3));
	for (unsigned i = 0; i < 3; i++)
		loco_sst_fini(&sst[i]);
}
END_TEST

START_TEST(word_rows_and_subset)
{
	/* nodes 0 and 2 only; node 1 has no endpoint and is not waited for */
	struct loco_sst a, b;
	uint64_t members = UINT64_C(1) << 0 | UINT64_C(1) << 2, v;
	ck_assert_int_eq(loco_sst_init(&a, cl.mgr[0], NULL, "w", 8, members), 0);
	ck_assert_int_eq(loco_sst_init(&b, cl.mgr[2], NULL, "w", 8, members), 0);
	ck_assert_int_eq(cluster_ready(&cl, 3000), 0);
	ck_assert_uint_eq(loco_sst_members(&a), members);
	v = 11;
	ck_assert_int_eq(loco_sst_store_mine(&a, &v), 0);
	push_placed(&a, cl.thr[0]);
	v = 22;
	ck_assert_int_eq(loco_sst_store_mine(&b, &v), 0);
	push_placed(&b, cl.thr[2]);
	ck_assert_int_eq(loco_sst_load(&a, 2, &v), 0);
	ck_assert_uint_eq(v, 22);
	ck_assert_int_eq(loco_sst_load(&b, 0, &v), 0);
	ck_assert_uint_eq(v, 11);
	ck_assert_int_eq(loco_sst_load(&b, 2, &v), 0);
	ck_assert_uint_eq(v, 22);
	ck_assert_int_eq(loco_sst_load(&a, 1, &v), -EINVAL);
	loco_sst_fini(&a);
	loco_sst_fini(&b);
}
END_TEST

START_TEST(init_errors)
{
	struct loco_sst s;
	ck_assert_int_eq(loco_sst_init(&s, cl.mgr[0], NULL, "s", 0, 0), -EINVAL);
	ck_assert_int_eq(loco_sst_init(&s, cl.mgr[0], NULL, "s",
				       LOCO_OV_MAX_LEN + 1, 0), -EINVAL);
	ck_assert_int_eq(loco_sst_init(&s, cl.mgr[0], NULL, "s/t", 8, 0), -EINVAL);
}
END_TEST

START_TEST(member_never_joins)
{
	struct loco_sst s;
	uint64_t v = 3;
	ck_assert_int_eq(loco_sst_init(&s, cl.mgr[0], NULL, "s", 8, 0), 0);
	ck_assert(!loco_sst_ready(&s));
	ck_assert_int_eq(loco_sst_load(&s, 1, &v), -ENOENT);
	ck_assert_int_eq(loco_sst_store_mine(&s, &v), 0);
	ck_assert_int_eq(loco_sst_push_broadcast(&s, cl.thr[0], 0, NULL), -ENOTCONN);
	ck_assert_int_eq(loco_sst_load(&s, 0, &v), 0);
	ck_assert_uint_eq(v, 3);
	loco_sst_fini(&s);
}
END_TEST

START_TEST(one_member)
{
	struct loco_sst s;
	uint64_t v = 9;
	ck_assert_int_eq(loco_sst_init(&s, cl.mgr[0], NULL, "s", 8,
				       UINT64_C(1) << 0), 0);
	ck_assert(loco_sst_ready(&s));
	ck_assert_int_eq(loco_sst_store_mine(&s, &v), 0);
	ck_assert_int_eq(loco_sst_push_broadcast(&s, cl.thr[0], LOCO_PUSH_PLACE,
						 NULL), 0);
	ck_assert_int_eq(loco_sst_load(&s, 0, &v), 0);
	ck_assert_uint_eq(v, 9);
	loco_sst_fini(&s);
}
END_TEST

int main(void)
{
	if (test_transport_skip())
		return TEST_SKIP;
	Suite *s = suite_create("sst");
	TCase *tc = tcase_create("three_nodes");
	tcase_add_checked_fixture(tc, setup3, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, rows_from_join_callbacks);
	tcase_add_test(tc, word_rows_and_subset);
	tcase_add_test(tc, init_errors);
	suite_add_tcase(s, tc);
	TCase *ta = tcase_create("absent_peer");
	tcase_add_checked_fixture(ta, setup_absent, teardown);
	tcase_set_timeout(ta, 30);
	tcase_add_test(ta, member_never_joins);
	tcase_add_test(ta, one_member);
	suite_add_tcase(s, ta);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
