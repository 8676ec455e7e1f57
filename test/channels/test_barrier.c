/* SPDX-License-Identifier: MIT */
/* barrier on an in-process cluster: sub-channel names, -ENOTCONN before
 * ready, -ETIMEDOUT when a peer does not arrive and the resumed round
 * afterwards, many rounds with one OS thread per node checking that no
 * node ever runs ahead, and a one-node barrier. */
#include <check.h>
#include <errno.h>
#include <pthread.h>

#include <loco/channels/barrier.h>
#include "test/common/cluster.h"
#include "test/common/skip.h"

#define ROUNDS 2000

static struct cluster cl;
static struct loco_barrier bar[3];

static void setup3(void)
{
	ck_assert_int_eq(cluster_start(&cl, 3, 0, 5000), 0);
}

static void setup_absent(void)
{
	ck_assert_int_eq(cluster_start(&cl, 1, 1, 3000), 0);
}

static void teardown(void)
{
	cluster_stop(&cl);
}

static void all_init(unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		ck_assert_int_eq(loco_barrier_init(&bar[i], cl.mgr[i], NULL, "bar",
						   0), 0);
	ck_assert_int_eq(cluster_ready(&cl, 5000), 0);
}

static void all_fini(unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		loco_barrier_fini(&bar[i]);
}

START_TEST(names)
{
	all_init(3);
	ck_assert_str_eq(bar[1].sst.base.name, "bar/sst");
	ck_assert_str_eq(loco_sst_row(&bar[1].sst, 2)->base.name, "bar/sst/ov2");
	all_fini(3);
}
END_TEST

static void *waiter(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	for (unsigned r = 1; r <= ROUNDS; r++) {
		if (loco_barrier_wait(&bar[id], cl.thr[id], 5000))
			return (void *)1;
		/* nobody can be past the next round while we are in this one */
		for (unsigned j = 0; j < 3; j++) {
			uint64_t c = 0;
			if (loco_sst_load(&bar[id].sst, j, &c) || c < r || c > r + 1)
				return (void *)2;
		}
	}
	return NULL;
}

START_TEST(rounds_stay_in_step)
{
	pthread_t t[3];
	all_init(3);
	for (unsigned i = 0; i < 3; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, waiter,
						(void *)(uintptr_t)i), 0);
	for (unsigned i = 0; i < 3; i++) {
		void *rc;
		pthread_join(t[i], &rc);
		ck_assert_ptr_null(rc);
		ck_assert_uint_eq(loco_barrier_count(&bar[i]), ROUNDS);
	}
	all_fini(3);
}
END_TEST

START_TEST(timeout_then_resume)
{
	all_init(3);
	uint64_t t0 = loco_now_ns();
	ck_assert_int_eq(loco_barrier_wait(&bar[0], cl.thr[0], 100), -ETIMEDOUT);
	ck_assert_uint_ge((loco_now_ns() - t0) / 1000000, 100);
	ck_assert_uint_eq(loco_barrier_count(&bar[0]), 1);
	/* resuming does not arrive twice */
	ck_assert_int_eq(loco_barrier_wait(&bar[0], cl.thr[0], 50), -ETIMEDOUT);
	ck_assert_uint_eq(loco_barrier_count(&bar[0]), 1);
	ck_assert_int_eq(loco_barrier_wait(&bar[1], cl.thr[1], 50), -ETIMEDOUT);
	/* the last one to arrive passes at once, then so do the others */
	ck_assert_int_eq(loco_barrier_wait(&bar[2], cl.thr[2], 1000), 0);
	ck_assert_int_eq(loco_barrier_wait(&bar[0], cl.thr[0], 1000), 0);
	ck_assert_int_eq(loco_barrier_wait(&bar[1], cl.thr[1], 1000), 0);
	for (unsigned i = 0; i < 3; i++)
		ck_assert_uint_eq(loco_barrier_count(&bar[i]), 1);
	all_fini(3);
}
END_TEST

START_TEST(init_errors)
{
	struct loco_barrier b;
	ck_assert_int_eq(loco_barrier_init(&b, cl.mgr[0], NULL, "a.b", 0), -EINVAL);
	ck_assert_int_eq(loco_barrier_init(&b, cl.mgr[0], NULL, "bar", 0), 0);
	struct loco_barrier dup;
	ck_assert_int_eq(loco_barrier_init(&dup, cl.mgr[0], NULL, "bar", 0),
			 -EEXIST);
	loco_barrier_fini(&b);
}
END_TEST

START_TEST(not_ready)
{
	struct loco_barrier b;
	ck_assert_int_eq(loco_barrier_init(&b, cl.mgr[0], NULL, "bar", 0), 0);
	ck_assert_int_eq(loco_barrier_wait(&b, cl.thr[0], 100), -ENOTCONN);
	ck_assert_uint_eq(loco_barrier_count(&b), 0);
	loco_barrier_fini(&b);
}
END_TEST

START_TEST(alone)
{
	struct loco_barrier b;
	ck_assert_int_eq(loco_barrier_init(&b, cl.mgr[0], NULL, "bar",
					   UINT64_C(1) << 0), 0);
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(loco_barrier_wait(&b, cl.thr[0], 100), 0);
	ck_assert_uint_eq(loco_barrier_count(&b), 10);
	loco_barrier_fini(&b);
}
END_TEST

int main(void)
{
	if (test_transport_skip())
		return TEST_SKIP;
	Suite *s = suite_create("barrier");
	TCase *tc = tcase_create("three_nodes");
	tcase_add_checked_fixture(tc, setup3, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, names);
	tcase_add_test(tc, rounds_stay_in_step);
	tcase_add_test(tc, timeout_then_resume);
	tcase_add_test(tc, init_errors);
	suite_add_tcase(s, tc);
	TCase *ta = tcase_create("absent_peer");
	tcase_add_checked_fixture(ta, setup_absent, teardown);
	tcase_set_timeout(ta, 30);
	tcase_add_test(ta, not_ready);
	tcase_add_test(ta, alone);
	suite_add_tcase(s, ta);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
