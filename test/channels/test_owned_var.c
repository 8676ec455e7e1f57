/* SPDX-License-Identifier: MIT */
/* owned_var on an in-process two-node cluster (owner 0, reader 1): small
 * and large values through store/push/load and pull, odd sizes, the
 * initial zero value, owner-only operations, stage reuse with many pushes
 * in flight, torn copies detected by the checksum (load and pull
 * return -LOCO_ETORN, count their retries and leave DST alone), and nodes
 * that disagree on the owner failing the join. */
#include <check.h>
#include <errno.h>

#include <loco/channels/owned_var.h>
#include "test/common/cluster.h"
#include "test/common/skip.h"

static struct cluster cl;
static struct loco_owned_var ov[2];

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

static void pair_init(uint32_t len)
{
	for (unsigned i = 0; i < 2; i++)
		ck_assert_int_eq(loco_owned_var_init(&ov[i], cl.mgr[i], NULL, "v",
						     0, len, 0), 0);
	ck_assert_int_eq(cluster_ready(&cl, 3000), 0);
}

static void pair_fini(void)
{
	loco_owned_var_fini(&ov[0]);
	loco_owned_var_fini(&ov[1]);
}

static void push_placed(void)
{
	struct loco_ack ack;
	loco_ack_clear(&ack);
	ck_assert_int_eq(loco_owned_var_push(&ov[0], cl.thr[0], LOCO_PUSH_PLACE,
					     &ack), 0);
	ck_assert_int_eq(loco_ack_wait(cl.thr[0], &ack, -1), 0);
}

static void fill(uint8_t *buf, size_t len, uint8_t v)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(v + i);
}

START_TEST(init_errors)
{
	struct loco_owned_var v;
	ck_assert_int_eq(loco_owned_var_init(&v, cl.mgr[0], NULL, "v", 0, 0, 0),
			 -EINVAL);
	ck_assert_int_eq(loco_owned_var_init(&v, cl.mgr[0], NULL, "v", 0,
					     LOCO_OV_MAX_LEN + 1, 0), -EINVAL);
	/* owner 3 is not in the cluster, hence not a participant */
	ck_assert_int_eq(loco_owned_var_init(&v, cl.mgr[0], NULL, "v", 3, 8, 0),
			 -EINVAL);
	ck_assert_int_eq(loco_owned_var_init(&v, cl.mgr[0], NULL, "v.x", 0, 8, 0),
			 -EINVAL);
	ck_assert_int_eq(loco_owned_var_init(&v, cl.mgr[0], NULL, "v", 0,
					     LOCO_OV_MAX_LEN, 0), 0);
	ck_assert_uint_eq(v.copy_len, sizeof(struct loco_ov_hdr) + LOCO_OV_MAX_LEN);
	loco_owned_var_fini(&v);
}
END_TEST

START_TEST(small_value)
{
	uint64_t v = 0, w = 0;
	pair_init(8);
	ck_assert_uint_eq(ov[0].copy_len, 8);
	ck_assert(loco_owned_var_is_owner(&ov[0]));
	ck_assert(!loco_owned_var_is_owner(&ov[1]));
	ck_assert_int_eq(loco_owned_var_load(&ov[1], &w), 0);
	ck_assert_uint_eq(w, 0);
	v = 42;
	ck_assert_int_eq(loco_owned_var_store(&ov[0], &v), 0);
	ck_assert_int_eq(loco_owned_var_load(&ov[0], &w), 0);
	ck_assert_uint_eq(w, 42);
	push_placed();
	ck_assert_int_eq(loco_owned_var_load(&ov[1], &w), 0);
	ck_assert_uint_eq(w, 42);
	/* a pull sees the owner's newer value; the reader copy stays */
	v = 43;
	ck_assert_int_eq(loco_owned_var_store(&ov[0], &v), 0);
	ck_assert_int_eq(loco_owned_var_pull(&ov[1], cl.thr[1], &w), 0);
	ck_assert_uint_eq(w, 43);
	ck_assert_int_eq(loco_owned_var_load(&ov[1], &w), 0);
	ck_assert_uint_eq(w, 42);
	/* owner-only operations */
	ck_assert_int_eq(loco_owned_var_store(&ov[1], &v), -EPERM);
	ck_assert_int_eq(loco_owned_var_push(&ov[1], cl.thr[1], 0, NULL), -EPERM);
	ck_assert_int_eq(loco_owned_var_push(&ov[0], cl.thr[0], 0x80, NULL),
			 -EINVAL);
	/* the owner's pull is its load */
	ck_assert_int_eq(loco_owned_var_pull(&ov[0], cl.thr[0], &w), 0);
	ck_assert_uint_eq(w, 43);
	ck_assert_uint_eq(loco_owned_var_retries(&ov[1]), 0);
	pair_fini();
}
END_TEST

START_TEST(large_value)
{
	uint8_t v[256], w[256];
	pair_init(sizeof(v));
	ck_assert_uint_eq(ov[0].copy_len, 16 + 256);
	/* the initial copy is a valid encoding of zero */
	memset(w, 0xee, sizeof(w));
	ck_assert_int_eq(loco_owned_var_load(&ov[1], w), 0);
	for (size_t i = 0; i < sizeof(w); i++)
		ck_assert_uint_eq(w[i], 0);
	ck_assert_int_eq(loco_owned_var_pull(&ov[1], cl.thr[1], w), 0);
	ck_assert_uint_eq(w[17], 0);
	for (uint8_t round = 1; round <= 3; round++) {
		fill(v, sizeof(v), round);
		ck_assert_int_eq(loco_owned_var_store(&ov[0], v), 0);
		push_placed();
		ck_assert_int_eq(loco_owned_var_load(&ov[1], w), 0);
		ck_assert_mem_eq(w, v, sizeof(v));
		ck_assert_int_eq(loco_owned_var_pull(&ov[1], cl.thr[1], w), 0);
		ck_assert_mem_eq(w, v, sizeof(v));
	}
	const struct loco_ov_hdr *h = ov[1].val->base;
	ck_assert_uint_eq(h->version, 3);
	ck_assert_uint_eq(loco_owned_var_retries(&ov[1]), 0);
	pair_fini();
}
END_TEST

START_TEST(odd_length)
{
	char v[13] = "thirteen byte", w[13];
	pair_init(sizeof(v));
	ck_assert_uint_eq(ov[0].copy_len, 16 + 16);
	ck_assert_int_eq(loco_owned_var_store(&ov[0], v), 0);
	push_placed();
	ck_assert_int_eq(loco_owned_var_load(&ov[1], w), 0);
	ck_assert_mem_eq(w, v, sizeof(v));
	pair_fini();
}
END_TEST

START_TEST(many_pushes_in_flight)
{
	uint8_t v[100], w[100];
	struct loco_ack ack;
	pair_init(sizeof(v));
	loco_ack_clear(&ack);
	/* more pushes than stages, none waited for: each reuses a stage
	 * only after its previous push completed */
	for (uint8_t i = 1; i <= 4 * LOCO_OV_STAGES + 1; i++) {
		fill(v, sizeof(v), i);
		ck_assert_int_eq(loco_owned_var_store(&ov[0], v), 0);
		ck_assert_int_eq(loco_owned_var_push(&ov[0], cl.thr[0], 0, &ack), 0);
	}
	ck_assert_int_eq(loco_fence(cl.thr[0], LOCO_FENCE_THREAD, 0), 0);
	ck_assert_int_eq(loco_ack_test(cl.thr[0], &ack), 1);
	ck_assert_int_eq(loco_owned_var_load(&ov[1], w), 0);
	ck_assert_mem_eq(w, v, sizeof(v));
	pair_fini();
}
END_TEST

START_TEST(torn_copy_detected)
{
	uint8_t v[64], w[64], keep[64];
	pair_init(sizeof(v));
	fill(v, sizeof(v), 7);
	ck_assert_int_eq(loco_owned_var_store(&ov[0], v), 0);
	push_placed();
	/* one payload word of the reader's copy from "another store" */
	uint64_t *copy = ov[1].val->base;
	copy[2 + 3] ^= 0xff;
	memset(w, 0x5a, sizeof(w));
	memcpy(keep, w, sizeof(w));
	ck_assert_int_eq(loco_owned_var_load(&ov[1], w), -LOCO_ETORN);
	ck_assert_mem_eq(w, keep, sizeof(w));
	ck_assert_uint_eq(loco_owned_var_retries(&ov[1]), LOCO_OV_RETRY_MAX);
	/* the same at the owner, seen by a pull; a version from another
	 * store with the right payload is caught too */
	copy = ov[0].val->base;
	copy[0]++;
	ck_assert_int_eq(loco_owned_var_pull(&ov[1], cl.thr[1], w), -LOCO_ETORN);
	ck_assert_mem_eq(w, keep, sizeof(w));
	ck_assert_uint_eq(loco_owned_var_retries(&ov[1]), 2 * LOCO_OV_RETRY_MAX);
	/* a new store repairs the owner's copy, a push the reader's */
	ck_assert_int_eq(loco_owned_var_store(&ov[0], v), 0);
	push_placed();
	ck_assert_int_eq(loco_owned_var_pull(&ov[1], cl.thr[1], w), 0);
	ck_assert_mem_eq(w, v, sizeof(v));
	ck_assert_int_eq(loco_owned_var_load(&ov[1], w), 0);
	ck_assert_mem_eq(w, v, sizeof(v));
	pair_fini();
}
END_TEST

START_TEST(owner_disagreement_fails_join)
{
	/* both nodes believe they own "v" */
	for (unsigned i = 0; i < 2; i++)
		ck_assert_int_eq(loco_owned_var_init(&ov[i], cl.mgr[i], NULL, "v",
						     i, 8, 0), 0);
	ck_assert_int_eq(loco_mgr_wait_ready(cl.mgr[0], 3000), -LOCO_EMISMATCH);
	ck_assert_int_eq(loco_mgr_wait_ready(cl.mgr[1], 3000), -LOCO_EMISMATCH);
	pair_fini();
}
END_TEST

START_TEST(reader_not_joined)
{
	struct loco_owned_var v;
	uint64_t x = 5, y = 0;
	ck_assert_int_eq(loco_owned_var_init(&v, cl.mgr[0], NULL, "v", 0, 8, 0), 0);
	ck_assert_int_eq(loco_owned_var_store(&v, &x), 0);
	ck_assert_int_eq(loco_owned_var_push(&v, cl.thr[0], 0, NULL), -ENOTCONN);
	ck_assert_int_eq(loco_owned_var_load(&v, &y), 0);
	ck_assert_uint_eq(y, 5);
	loco_owned_var_fini(&v);
	/* a reader whose owner never joined cannot pull */
	ck_assert_int_eq(loco_owned_var_init(&v, cl.mgr[0], NULL, "w", 1, 8, 0), 0);
	ck_assert_int_eq(loco_owned_var_pull(&v, cl.thr[0], &y), -ENOTCONN);
	loco_owned_var_fini(&v);
}
END_TEST

int main(void)
{
	if (test_transport_skip())
		return TEST_SKIP;
	Suite *s = suite_create("owned_var");
	TCase *tc = tcase_create("two_nodes");
	tcase_add_checked_fixture(tc, setup2, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, init_errors);
	tcase_add_test(tc, small_value);
	tcase_add_test(tc, large_value);
	tcase_add_test(tc, odd_length);
	tcase_add_test(tc, many_pushes_in_flight);
	tcase_add_test(tc, torn_copy_detected);
	tcase_add_test(tc, owner_disagreement_fails_join);
	suite_add_tcase(s, tc);
	TCase *ta = tcase_create("absent_peer");
	tcase_add_checked_fixture(ta, setup_absent, teardown);
	tcase_set_timeout(ta, 30);
	tcase_add_test(ta, reader_not_joined);
	suite_add_tcase(s, ta);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
