/* SPDX-License-Identifier: MIT */
/* The learned spin budget of <loco/wait.h> (struct loco_spin), the rule
 * the ticket lock's next in line spins by: halved by a wait whose budget
 * ran out, doubled by one served in the upper half of it, between
 * LOCO_SPIN_MIN (or a lower cap) and the cap, which is today's fixed
 * LOCO_WAIT_SPINS on every transport. Each test pins one part of the rule
 * to exact values, so that a changed factor, bound or threshold fails;
 * the last two run it against the waits measured on shm (a
 * ticket lock's next in line: served within 8 polls nearly always, or
 * its holder descheduled) and check where the budget settles. */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <loco/wait.h>

/* One wait under budget S on a holder that releases K spinning steps'
 * time after the wait began (UINT32_MAX: descheduled, served only after
 * many yields), as wait_step counts them: steps 1 .. budget-1 spin, the
 * later ones yield, each taking YIELD_STEPS spins' time (a sched_yield
 * with nothing else to run, about half a microsecond in this VM). */
#define YIELD_STEPS 16
#define DESCHEDULED_YIELDS 200

static void wait_k(struct loco_spin *s, unsigned k)
{
	if (k < s->budget)
		loco_spin_learn(s, k, 0);
	else if (k == UINT32_MAX)
		loco_spin_learn(s, s->budget, DESCHEDULED_YIELDS);
	else
		loco_spin_learn(s, s->budget,
				1 + (k - s->budget) / YIELD_STEPS);
}

/* xorshift64: a fixed sequence. */
static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

START_TEST(starts_at_cap)
{
	struct loco_spin s;
	loco_spin_init(&s, LOCO_WAIT_SPINS);
	ck_assert_uint_eq(s.budget, LOCO_WAIT_SPINS);
	ck_assert_uint_eq(s.cap, LOCO_WAIT_SPINS);
	ck_assert_uint_eq(LOCO_WAIT_SPINS, 128);
	ck_assert_uint_eq(LOCO_SPIN_MIN, 16);
}
END_TEST

/* Every wait whose budget ran out halves it, down to the floor. */
START_TEST(misses_halve_to_floor)
{
	static const unsigned want[] = { 64, 32, 16, 16, 16, 16 };
	struct loco_spin s;
	loco_spin_init(&s, LOCO_WAIT_SPINS);
	for (unsigned i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		loco_spin_learn(&s, s.budget, LOCO_SPIN_NEAR + 1);
		ck_assert_uint_eq(s.budget, want[i]);
	}
	/* A cap below the floor is the floor: the budget never moves. */
	loco_spin_init(&s, 3);
	loco_spin_learn(&s, 3, 1000);
	ck_assert_uint_eq(s.budget, 3);
	ck_assert_uint_eq(loco_spin_floor(&s), 3);
}
END_TEST

/* A wait served in the lower half of the budget leaves it: a smaller
 * budget would have caught it too. */
START_TEST(early_hits_leave_it)
{
	struct loco_spin s;
	loco_spin_init(&s, LOCO_WAIT_SPINS);
	for (unsigned k = 1; k <= 64; k++) {
		loco_spin_learn(&s, k, 0);
		ck_assert_uint_eq(s.budget, 128);
	}
	for (int i = 0; i < 3; i++)
		loco_spin_learn(&s, s.budget, LOCO_SPIN_NEAR + 1);
	ck_assert_uint_eq(s.budget, 16);
	for (unsigned k = 1; k <= 8; k++) {
		loco_spin_learn(&s, k, 0);
		ck_assert_uint_eq(s.budget, 16);
	}
}
END_TEST

/* A wait served in the upper half of the budget doubles it, back to the
 * cap and never past it. */
START_TEST(late_hits_double_to_cap)
{
	static const unsigned want[] = { 32, 64, 128, 128, 128 };
	struct loco_spin s;
	loco_spin_init(&s, LOCO_WAIT_SPINS);
	for (int i = 0; i < 4; i++)
		loco_spin_learn(&s, s.budget, LOCO_SPIN_NEAR + 1);
	ck_assert_uint_eq(s.budget, 16);
	for (unsigned i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		loco_spin_learn(&s, s.budget / 2 + 1, 0);
		ck_assert_uint_eq(s.budget, want[i]);
	}
	loco_spin_learn(&s, s.budget - 1, 0);
	ck_assert_uint_eq(s.budget, 128);
	/* A cap that is not a power of two is reached, not passed. */
	loco_spin_init(&s, 100);
	loco_spin_learn(&s, 100, LOCO_SPIN_NEAR + 1);
	ck_assert_uint_eq(s.budget, 50);
	loco_spin_learn(&s, 26, 0);
	ck_assert_uint_eq(s.budget, 100);
	loco_spin_learn(&s, 99, 0);
	ck_assert_uint_eq(s.budget, 100);
}
END_TEST

/* A wait that ran the budget out but was served within LOCO_SPIN_NEAR
 * yields doubles it (a longer budget would have caught it); one more
 * yield and it halves (spinning did not pay). */
START_TEST(near_misses_double)
{
	struct loco_spin s;
	loco_spin_init(&s, LOCO_WAIT_SPINS);
	for (int i = 0; i < 4; i++)
		loco_spin_learn(&s, s.budget, 1000);
	ck_assert_uint_eq(s.budget, 16);
	loco_spin_learn(&s, s.budget, 1);
	ck_assert_uint_eq(s.budget, 32);
	loco_spin_learn(&s, s.budget, LOCO_SPIN_NEAR);
	ck_assert_uint_eq(s.budget, 64);
	loco_spin_learn(&s, s.budget, LOCO_SPIN_NEAR + 1);
	ck_assert_uint_eq(s.budget, 32);
	for (int i = 0; i < 2; i++)
		loco_spin_learn(&s, s.budget, 1);
	ck_assert_uint_eq(s.budget, 128);
	ck_assert_uint_eq(LOCO_SPIN_NEAR, 2);
}
END_TEST

/* Any sequence of waits keeps the budget within [floor, cap]: a
 * transport whose polls are round trips (cap LOCO_WAIT_SPINS, as the
 * ticket lock sets it everywhere) never spins longer than the fixed
 * budget did. */
START_TEST(bounded_by_cap)
{
	static const unsigned caps[] = { 1, 3, 16, 17, 100, LOCO_WAIT_SPINS };
	uint64_t x = 0x9e3779b97f4a7c15u;
	for (unsigned c = 0; c < sizeof(caps) / sizeof(caps[0]); c++) {
		struct loco_spin s;
		unsigned top = 0;
		loco_spin_init(&s, caps[c]);
		for (int i = 0; i < 30000; i++) {
			uint64_t r = rnd(&x);
			wait_k(&s, r % 4 ? (unsigned)(r >> 8) % (2 * s.cap + 1) :
					   UINT32_MAX);
			ck_assert_uint_le(s.budget, caps[c]);
			ck_assert_uint_ge(s.budget, loco_spin_floor(&s));
			top = s.budget > top ? s.budget : top;
		}
		/* The sequence has late hits: it does reach the cap. */
		ck_assert_uint_eq(top, caps[c]);
	}
}
END_TEST

/* Waits as buckets of K (spinning steps until served: uniform in
 * [lo, hi]; lo UINT32_MAX: the holder descheduled), weights per 10^6. */
struct bucket {
	unsigned lo, hi, per_million;
};

static unsigned draw(const struct bucket *b, uint64_t *x)
{
	uint64_t r = rnd(x), v = r % 1000000;
	unsigned u = (unsigned)(r >> 32);
	for (;; b++) {
		if (v < b->per_million)
			return b->lo == UINT32_MAX ? b->lo :
						     b->lo + u % (b->hi - b->lo + 1);
		v -= b->per_million;
	}
}

/* Run N waits drawn from B from the cap: the mean budget; the waits that
 * ran it out, per million, into *OUT_PPM, and the steps they spun, per
 * such wait, into *SPUN_MEAN. */
static unsigned settle(const struct bucket *b, uint64_t seed,
		       unsigned *out_ppm, unsigned *spun_mean)
{
	const unsigned n = 300000;
	uint64_t x = seed, sum = 0, out = 0, spun = 0;
	struct loco_spin s;
	loco_spin_init(&s, LOCO_WAIT_SPINS);
	for (unsigned i = 0; i < n; i++) {
		unsigned k = draw(b, &x);
		if (k >= s.budget) {
			out++;
			spun += s.budget;
		}
		wait_k(&s, k);
		sum += s.budget;
	}
	*out_ppm = (unsigned)(out * 1000000 / n);
	*spun_mean = out ? (unsigned)(spun / out) : 0;
	if (getenv("LOCO_TEST_VERBOSE"))
		printf("settle: mean budget %u, ran out %u ppm, spun %u\n",
		       (unsigned)(sum / n), *out_ppm, *spun_mean);
	return (unsigned)(sum / n);
}

/* Two processes on two cores, shm (loco-transfer --single-lock, next in
 * line, 2026-12-07, under chrt: 2.3 M waits): served within 1 step
 * 88.9 %, 2-3 steps 9 %, 4-7 2 %, 8-15 0.02 %, 16-127 0.012 %, never
 * while spinning 0.004 %. The budget stays at 32 or more on average,
 * and runs out in at most 200 waits a million (the fixed 128: 40; a
 * fixed 2 ran out in one wait in ten here, and cost two thirds of the
 * rate). */
START_TEST(settles_high_two_processes)
{
	static const struct bucket b[] = {
		{ 1, 1, 889000 }, { 2, 3, 90000 }, { 4, 7, 20640 },
		{ 8, 15, 200 }, { 16, 127, 120 }, { UINT32_MAX, 0, 40 },
	};
	unsigned out, spun;
	ck_assert_uint_ge(settle(b, 12345, &out, &spun), 32);
	ck_assert_uint_le(out, 200);
}
END_TEST

/* A lock whose turns are longer (holders that run, served after 20 to
 * 100 steps), one wait in a hundred on a descheduled holder: spinning
 * pays, and the budget stays where it catches them (a fixed 16 would run
 * out in every wait). */
START_TEST(settles_high_long_turns)
{
	static const struct bucket b[] = {
		{ 1, 19, 40000 }, { 20, 100, 950000 }, { UINT32_MAX, 0, 10000 },
	};
	unsigned out, spun;
	ck_assert_uint_ge(settle(b, 4242, &out, &spun), 64);
}
END_TEST

/* Three processes on two cores: one next-in-line wait in ten finds its
 * holder descheduled (and yields hundreds of times). The budget sits
 * near the floor: its mean is at most 24, and the waits that ran it out
 * spin a quarter of the 128 steps they spun before. */
START_TEST(settles_low_oversubscribed)
{
	static const struct bucket b[] = {
		{ 1, 1, 700000 }, { 2, 3, 150000 }, { 4, 7, 48000 },
		{ 8, 127, 2000 }, { UINT32_MAX, 0, 100000 },
	};
	unsigned out, spun;
	ck_assert_uint_le(settle(b, 777, &out, &spun), 24);
	ck_assert_uint_le(spun, LOCO_WAIT_SPINS / 4);
}
END_TEST

static Suite *wait_suite(void)
{
	Suite *s = suite_create("wait");
	TCase *tc = tcase_create("spin budget");
	tcase_add_test(tc, starts_at_cap);
	tcase_add_test(tc, misses_halve_to_floor);
	tcase_add_test(tc, early_hits_leave_it);
	tcase_add_test(tc, late_hits_double_to_cap);
	tcase_add_test(tc, bounded_by_cap);
	tcase_add_test(tc, near_misses_double);
	tcase_add_test(tc, settles_high_two_processes);
	tcase_add_test(tc, settles_high_long_turns);
	tcase_add_test(tc, settles_low_oversubscribed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(wait_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed != 0 ? 1 : 0;
}
