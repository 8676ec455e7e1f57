/* SPDX-License-Identifier: MIT */
/* loco-power's model (the averaged buck converter, the PI law, the
 * figures of merit) and the power_controller channel on an in-process
 * 3-node cluster (node 0 the controller, 1 and 2 converters): bad ids and
 * roles, one exchange each way, the staleness check dropping a converter
 * that stopped publishing and taking it back, and wait timeouts. */
#include <check.h>
#include <errno.h>
#include <math.h>

#include "apps/power/model.h"
#include <loco/channels/power_controller.h>
#include "test/common/cluster.h"

static const struct buck_params bp = { 12, 47e-6, 100e-6, 0.02 };

START_TEST(buck_steady_state)
{
	struct buck_state s = { 0, 0 };
	for (int k = 0; k < 2000; k++)   /* 80 ms: many time constants */
		buck_step(&bp, &s, 0.25, 2.0, 40e-6, 20);
	/* DC: v = d Vin R / (R + rL), i = v / R */
	ck_assert_double_eq_tol(s.v, 0.25 * 12 * 2 / 2.02, 1e-6);
	ck_assert_double_eq_tol(s.i, s.v / 2, 1e-6);
}
END_TEST

/* The closed loop of one converter with the one-period delay of
 * loco-power settles within 1% and has no steady-state error. */
START_TEST(pi_closed_loop)
{
	struct pi_params pp = { 0.02, 2000, 40e-6, 0.95, 12 };
	struct pi_state ps = { 0, 0 };
	struct buck_state s = { 0, 0 };
	double v[1000], applied = 0;
	for (int k = 0; k < 1000; k++) {
		v[k] = s.v;
		double d = pi_step(&pp, &ps, 3.0, s.v);
		buck_step(&bp, &s, applied, 2.0, 40e-6, 20);
		applied = d;
	}
	struct seg_figs f;
	seg_figures(v, 1000, 3.0, 0.01, &f);
	ck_assert_uint_lt(f.settle, 200);           /* within 8 ms */
	ck_assert_double_lt(f.overshoot, 0.05);
	ck_assert_double_lt(mean_rel_error(v + 900, 100, 3.0), 1e-4);
}
END_TEST

START_TEST(pi_clamps)
{
	struct pi_params pp = { 0.02, 2000, 40e-6, 0.5, 12 };
	struct pi_state ps = { 0, 0 };
	for (int k = 0; k < 10000; k++)
		pi_step(&pp, &ps, 100, 0);
	ck_assert_double_eq(ps.d, 0.5);
	for (int k = 0; k < 10000; k++)
		pi_step(&pp, &ps, 0, 100);
	ck_assert_double_eq(ps.d, 0);
}
END_TEST

START_TEST(figures)
{
	double v[] = { 0, 5, 6, 4.5, 5.04, 4.96, 5.0 };
	struct seg_figs f;
	seg_figures(v, 7, 5.0, 0.01, &f);
	ck_assert_uint_eq(f.settle, 4);
	ck_assert_double_eq_tol(f.overshoot, 0.2, 1e-12);
	ck_assert_double_eq_tol(f.peak_dev, 1.0, 1e-12);
	seg_figures(v, 4, 5.0, 0.01, &f);
	ck_assert_uint_eq(f.settle, 4);            /* never settled */
}
END_TEST

/* ---- the channel ------------------------------------------------------- */

static struct cluster cl;
static struct loco_power_ctl pc[3];
#define CONV (UINT64_C(1) << 1 | UINT64_C(1) << 2)

static void setup(void)
{
	ck_assert_int_eq(cluster_start(&cl, 3, 0, 5000), 0);
}

static void teardown(void)
{
	cluster_stop(&cl);
}

static void all_init(void)
{
	for (unsigned i = 0; i < 3; i++)
		ck_assert_int_eq(loco_power_ctl_init(&pc[i], cl.mgr[i], NULL,
						     "pc", 0, CONV), 0);
	ck_assert_int_eq(cluster_ready(&cl, 5000), 0);
}

static void all_fini(void)
{
	for (unsigned i = 0; i < 3; i++)
		ck_assert_int_eq(loco_power_ctl_flush(&pc[i], cl.thr[i], ~0ull,
						      -1), 0);
	for (unsigned i = 0; i < 3; i++)
		loco_power_ctl_fini(&pc[i]);
}

static void report(unsigned node, uint64_t seq, double v)
{
	struct loco_pc_sample s = { .seq = seq, .v = v, .i = v / 2,
				    .v_prev = v - 1 };
	ck_assert_int_eq(loco_power_ctl_report(&pc[node], cl.thr[node], &s), 0);
	/* Placed at the controller before the test goes on (shm-weak
	 * places pushes late and in any order across nodes). */
	ck_assert_int_eq(loco_power_ctl_flush(&pc[node], cl.thr[node], 1, -1), 0);
}

START_TEST(bad_ids)
{
	struct loco_power_ctl p;
	ck_assert_int_eq(loco_power_ctl_init(&p, cl.mgr[0], NULL, "x", 0, 0),
			 -EINVAL);
	ck_assert_int_eq(loco_power_ctl_init(&p, cl.mgr[0], NULL, "x", 1,
					     CONV), -EINVAL);   /* 1 in both */
	ck_assert_int_eq(loco_power_ctl_init(&p, cl.mgr[0], NULL, "x", 1,
					     UINT64_C(1) << 2), -EINVAL);
	ck_assert_int_eq(loco_power_ctl_init(&p, cl.mgr[0], NULL, "x", 64,
					     CONV), -EINVAL);
}
END_TEST

START_TEST(roles)
{
	all_init();
	struct loco_pc_sample out[LOCO_MAX_NODES];
	struct loco_pc_cmd c = { .seq = 1 };
	struct loco_pc_sample s = { .seq = 1 };
	ck_assert_int_eq(loco_power_ctl_report(&pc[0], cl.thr[0], &s), -EPERM);
	ck_assert_int_eq(loco_power_ctl_command(&pc[1], cl.thr[1], 1, &c), -EPERM);
	ck_assert_int_eq(loco_power_ctl_command(&pc[0], cl.thr[0], 0, &c), -EINVAL);
	ck_assert_int_eq(loco_power_ctl_gather(&pc[1], cl.thr[1], 1, 1000, out),
			 -EPERM);
	ck_assert_int_eq(loco_power_ctl_wait_cmd(&pc[0], cl.thr[0], 1, 10, &c),
			 -EPERM);
	/* Nothing commanded yet: the converter's wait times out. */
	ck_assert_int_eq(loco_power_ctl_wait_cmd(&pc[1], cl.thr[1], 1, 50, &c),
			 -ETIMEDOUT);
	all_fini();
}
END_TEST

START_TEST(exchange)
{
	all_init();
	struct loco_pc_sample out[LOCO_MAX_NODES];
	report(1, 1, 1.5);
	report(2, 1, 2.5);
	ck_assert_int_eq(loco_power_ctl_gather(&pc[0], cl.thr[0], 1,
					       10000000000ull, out), 0);
	ck_assert_uint_eq(pc[0].live, CONV);
	ck_assert_double_eq(out[1].v, 1.5);
	ck_assert_double_eq(out[1].i, 0.75);
	ck_assert_double_eq(out[1].v_prev, 0.5);
	ck_assert_double_eq(out[2].v, 2.5);
	struct loco_pc_cmd c = { .seq = 1, .duty = 0.25, .duty_prev = 0.125 };
	ck_assert_int_eq(loco_power_ctl_command(&pc[0], cl.thr[0], 2, &c), 0);
	struct loco_pc_cmd got;
	ck_assert_int_eq(loco_power_ctl_wait_cmd(&pc[2], cl.thr[2], 1, 5000,
						 &got), 0);
	ck_assert_uint_eq(got.seq, 1);
	ck_assert_double_eq(got.duty, 0.25);
	ck_assert_double_eq(got.duty_prev, 0.125);
	c = (struct loco_pc_cmd){ .seq = 2, .flags = LOCO_PC_STOP };
	ck_assert_int_eq(loco_power_ctl_command(&pc[0], cl.thr[0], 1, &c), 0);
	ck_assert_int_eq(loco_power_ctl_wait_cmd(&pc[1], cl.thr[1], 99, 5000,
						 &got), 0);
	ck_assert_uint_eq(got.flags, LOCO_PC_STOP);
	all_fini();
}
END_TEST

/* Converter 1 stops publishing: the gather gives up on it after the
 * staleness bound and goes on with 2; when 1 catches up it is back. */
START_TEST(staleness)
{
	all_init();
	struct loco_pc_sample out[LOCO_MAX_NODES];
	report(1, 1, 1);
	report(2, 1, 1);
	report(2, 2, 1);
	uint64_t t0 = loco_now_ns();
	ck_assert_int_eq(loco_power_ctl_gather(&pc[0], cl.thr[0], 2,
					       50000000, out), 0);
	ck_assert_uint_ge(loco_now_ns() - t0, 50000000);
	ck_assert_uint_eq(pc[0].live, UINT64_C(1) << 2);
	ck_assert_uint_eq(pc[0].drops, 1);
	/* The next steps do not wait for it. */
	report(2, 3, 1);
	ck_assert_int_eq(loco_power_ctl_gather(&pc[0], cl.thr[0], 3,
					       10000000000ull, out), 0);
	report(1, 3, 1);
	report(2, 4, 1);
	report(1, 4, 1);
	ck_assert_int_eq(loco_power_ctl_gather(&pc[0], cl.thr[0], 4,
					       10000000000ull, out), 0);
	ck_assert_uint_eq(pc[0].live, CONV);
	ck_assert_uint_eq(pc[0].rejoins, 1);
	all_fini();
}
END_TEST

/* Free-running: loco_power_ctl_latest returns at once, whatever step
 * each sample is from; converter 1, whose sample stops changing, is
 * dropped after the bound (counted from the first call, not before)
 * while 2 keeps publishing, and taken back when its sample changes. */
START_TEST(latest)
{
	all_init();
	struct loco_pc_sample out[LOCO_MAX_NODES];
	struct loco_pc_cmd got;
	const uint64_t stale = 100000000;
	ck_assert_int_eq(loco_power_ctl_latest(&pc[1], cl.thr[1], stale, out),
			 -EPERM);
	ck_assert_int_eq(loco_power_ctl_latest_cmd(&pc[0], cl.thr[0], &got),
			 -EPERM);
	ck_assert_int_eq(loco_power_ctl_latest_cmd(&pc[1], cl.thr[1], &got), 0);
	ck_assert_uint_eq(got.seq, 0);
	report(1, 1, 1.5);
	report(2, 3, 2.5);
	uint64_t t0 = loco_now_ns(), seq = 3;
	ck_assert_int_eq(loco_power_ctl_latest(&pc[0], cl.thr[0], stale, out), 0);
	ck_assert_uint_eq(out[1].seq, 1);
	ck_assert_double_eq(out[1].v, 1.5);
	ck_assert_uint_eq(out[2].seq, 3);
	ck_assert_uint_eq(pc[0].live, CONV);
	while (pc[0].live == CONV && loco_now_ns() - t0 < 20 * stale) {
		report(2, ++seq, 2.5);
		ck_assert_int_eq(loco_power_ctl_latest(&pc[0], cl.thr[0], stale,
						       out), 0);
	}
	ck_assert_uint_ge(loco_now_ns() - t0, stale);
	ck_assert_uint_eq(pc[0].live, UINT64_C(1) << 2);
	ck_assert_uint_eq(pc[0].drops, 1);
	report(1, 2, 1.5);
	ck_assert_int_eq(loco_power_ctl_latest(&pc[0], cl.thr[0], stale, out), 0);
	ck_assert_uint_eq(pc[0].live, CONV);
	ck_assert_uint_eq(pc[0].rejoins, 1);
	struct loco_pc_cmd c = { .seq = 7, .duty = 0.25 };
	ck_assert_int_eq(loco_power_ctl_command(&pc[0], cl.thr[0], 1, &c), 0);
	ck_assert_int_eq(loco_power_ctl_flush(&pc[0], cl.thr[0], 1u << 1, -1), 0);
	ck_assert_int_eq(loco_power_ctl_latest_cmd(&pc[1], cl.thr[1], &got), 0);
	ck_assert_uint_eq(got.seq, 7);
	ck_assert_double_eq(got.duty, 0.25);
	all_fini();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("power");
	TCase *m = tcase_create("model");
	tcase_add_test(m, buck_steady_state);
	tcase_add_test(m, pi_closed_loop);
	tcase_add_test(m, pi_clamps);
	tcase_add_test(m, figures);
	suite_add_tcase(s, m);
	TCase *c = tcase_create("channel");
	tcase_add_checked_fixture(c, setup, teardown);
	tcase_set_timeout(c, 60);
	tcase_add_test(c, bad_ids);
	tcase_add_test(c, roles);
	tcase_add_test(c, exchange);
	tcase_add_test(c, staleness);
	tcase_add_test(c, latest);
	suite_add_tcase(s, c);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
