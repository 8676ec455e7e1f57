/* SPDX-License-Identifier: MIT */
/* The fence guard's Dekker pair (<loco/guard.h>, fence_file.c), as a
 * litmus test on a real fence file. Each round R, an executor thread
 * enters the guard as node 1's incarnation R, stays inside a while,
 * reads how many rounds the fencer finished, does its op (a store) and
 * leaves, while a fencer thread fences incarnation R (loco_ffile_fence),
 * then publishes that round R is done. Forbidden: the executor, inside
 * the guard as R, finds round R done (the fence returned while an op of
 * the incarnation it fenced could still land). Once both are in the
 * round, each starts after a random delay (the executor's steered to
 * be refused about half the time), so that the two sides' store-then-
 * load windows meet in many alignments.
 *  - own_marks: an own mark (relaxed raise, compiler barrier; the
 *    fencer's membarrier), the path of every process that registered;
 *  - shared_marks: a shared mark (read-modify-writes), the fallback.
 * Rounds: LOCO_GUARD_ROUNDS (default 20000) and on until both outcomes
 * showed ROUNDS/100 times, for at most MAX_S (beside CPU hogs a round
 * takes milliseconds: fewer rounds then, but both outcomes still must
 * show). A guard without its
 * StoreLoad barrier (the fencer skipping membarrier) fails own_marks
 * (docs/ordering.md, "The fence file"). */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <loco/log.h>
#include "loco/transport/fence_file.h"
#include "test/common/rundir.h"

#define EXEC_HOLD 1000   /* spins inside the guard before the check */
#define JITTER 16        /* random delays before a round, spins */
#define STEER 2          /* the executor's delay: STEER spins longer after
			  * an entry, shorter after a refusal, so that
			  * about half the rounds race */
#define OFFSET_MAX (1u << 18)
#define YIELD_EVERY 4096 /* spins of the executor's delay between yields */
#define MAX_S 20         /* the most a litmus runs: until both outcomes
			  * showed ROUNDS/100 times, at most this long */

static char dir[64];
static struct loco_ffile *ff;
static struct loco_guard_mark mark;
static _Atomic uint64_t op;        /* the executor's op writes it */
static _Atomic uint64_t round_now; /* the round being fenced */
static _Atomic uint64_t round_ack; /* the round the executor is in */
static _Atomic uint64_t round_done;/* rounds whose fence returned */
static _Atomic bool stop;
static uint64_t rounds;
/* The executor's outcomes: refused, entered, entered and found its
 * incarnation's fence returned (forbidden). */
static _Atomic uint64_t refused, entered, bad;

static uint64_t refused_n(void)
{
	/* Relaxed: a count, read while the executor runs. */
	return atomic_load_explicit(&refused, memory_order_relaxed);
}

static uint64_t entered_n(void)
{
	/* Relaxed: as refused_n. */
	return atomic_load_explicit(&entered, memory_order_relaxed);
}

static void spin(unsigned n)
{
	for (volatile unsigned i = 0; i < n; i++)
		;
}

/* The executor's steered delay: N spins, yielding every YIELD_EVERY of
 * them. On an idle host a yield returns at once; on a busy one it lets
 * the fencer run at all within the delay (a fresh CI run at load 21 saw
 * 78,411 rounds and not one refusal in 20 s with a delay of spins only). */
static void delay(unsigned n)
{
	for (unsigned done = 0; done < n; done += YIELD_EVERY) {
		spin(n - done < YIELD_EVERY ? n - done : YIELD_EVERY);
		if (n - done > YIELD_EVERY)
			sched_yield();
	}
}

/* Wait until *W reaches at least R (or STOP): spin, then yield. */
static uint64_t await(_Atomic uint64_t *w, uint64_t r)
{
	uint64_t v;
	/* Acquire: pairs with the other thread's release store of *W. */
	for (unsigned s = 0; (v = atomic_load_explicit(w, memory_order_acquire)) < r &&
	     /* Relaxed: a flag to stop, nothing to order. */
	     !atomic_load_explicit(&stop, memory_order_relaxed); s++)
		if (s > 2000)
			sched_yield();
	return v;
}

static void *executor(void *arg)
{
	(void)arg;
	uint64_t rng = 0xbf58476d1ce4e5b9u;
	unsigned offset = 0;
	for (uint64_t last = 0;;) {
		uint64_t r = await(&round_now, last + 1);
		/* Relaxed: as in await. */
		if (atomic_load_explicit(&stop, memory_order_relaxed))
			break;
		last = r;
		/* Release: the fencer starts its delay once we are here. */
		atomic_store_explicit(&round_ack, r, memory_order_release);
		rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
		delay(offset + (unsigned)(rng % JITTER));
		if (!loco_guard_enter(mark, ff->node[1].line, r)) {
			/* Relaxed: a count (single writer). */
			atomic_store_explicit(&refused, refused_n() + 1,
					      memory_order_relaxed);
			offset -= offset >= STEER ? STEER : offset;
			continue;
		}
		if (offset < OFFSET_MAX)
			offset += STEER;
		/* Inside for a while, the CPU left to the fencer too (on a
		 * busy host the two threads seldom run at the same time). */
		spin(EXEC_HOLD);
		sched_yield();
		/* Acquire: pairs with the fencer's release after its fence. */
		uint64_t done = atomic_load_explicit(&round_done,
						     memory_order_acquire);
		/* Relaxed: the op; loco_guard_exit's release orders it. */
		atomic_store_explicit(&op, r, memory_order_relaxed);
		loco_guard_exit(mark);
		/* Relaxed: counts (single writer). */
		atomic_store_explicit(&entered, entered_n() + 1, memory_order_relaxed);
		if (done >= r)
			atomic_store_explicit(&bad, atomic_load_explicit(&bad,
					      memory_order_relaxed) + 1,
					      memory_order_relaxed);
	}
	return NULL;
}

/* Run the rounds with M as the executor's mark. */
static void litmus(struct loco_guard_mark m, const char *name)
{
	mark = m;
	atomic_store(&refused, 0);
	atomic_store(&entered, 0);
	atomic_store(&bad, 0);
	atomic_store(&round_now, 0);
	atomic_store(&round_ack, 0);
	atomic_store(&round_done, 0);
	atomic_store(&stop, false);
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, executor, NULL), 0);
	uint64_t rng = 0x9e3779b97f4a7c15u;
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	uint64_t r = 1;
	for (;; r++) {
		/* Relaxed: counts the executor updates; rough is fine. */
		if (r > rounds && refused_n() >= rounds / 100 &&
		    entered_n() >= rounds / 100)
			break;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec >= MAX_S)
			break;
		rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
		/* Release: the round before its fence. */
		atomic_store_explicit(&round_now, r, memory_order_release);
		await(&round_ack, r);
		spin((unsigned)(rng % JITTER));
		ck_assert_int_eq(loco_ffile_fence(dir, ff, 0, 0, 1, r, 10000), 0);
		/* Release: after the fence returned. */
		atomic_store_explicit(&round_done, r, memory_order_release);
	}
	/* Relaxed: see the executor. */
	atomic_store_explicit(&stop, true, memory_order_relaxed);
	pthread_join(t, NULL);
	fprintf(stderr, "%s: %llu rounds: the executor was refused %llu times, "
		"entered %llu times, %llu of them inside while its fence "
		"returned\n", name, (unsigned long long)r - 1,
		(unsigned long long)refused_n(), (unsigned long long)entered_n(),
		(unsigned long long)atomic_load(&bad));
	ck_assert_msg(!atomic_load(&bad), "%s: %llu ops ran on after their "
		      "fence returned", name, (unsigned long long)atomic_load(&bad));
	/* Both outcomes the guard allows showed: the two raced. */
	ck_assert_msg(refused_n() && entered_n(), "%s: the executor never %s in "
		      "%d s", name, refused_n() ? "entered" : "was refused", MAX_S);
}

static void setup(void)
{
	const char *env = getenv("LOCO_GUARD_ROUNDS");
	rounds = env ? strtoull(env, NULL, 10) : 20000;
	rundir_name(dir, sizeof(dir), "guard");
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	rundir_at_exit(dir);
	char path[128];
	loco_ffile_path(path, sizeof(path), dir, 0);
	ck_assert_int_eq(loco_ffile_map(path, true, &ff), 0);
	/* An 8th fenced incarnation evicts the oldest: warned each round. */
	loco_log_set_level(LOCO_LOG_ERR);
}

static void teardown(void)
{
	loco_ffile_unmap(ff);
}

START_TEST(own_marks)
{
	if (!loco_ffile_own_marks()) {
		fprintf(stderr, "own_marks: no membarrier here (shared marks only)\n");
		return;
	}
	struct loco_ffile_mark m;
	loco_ffile_mark_get(&ff->node[1], 0, &m);
	ck_assert(m.m.own);
	litmus(m.m, "own_marks");
	loco_ffile_mark_put(&m);
}
END_TEST

START_TEST(shared_marks)
{
	litmus((struct loco_guard_mark){ .n = &ff->node[1].mark[0].n,
					 .own = false }, "shared_marks");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("guard");
	TCase *tc = tcase_create("guard");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 100);
	tcase_add_test(tc, own_marks);
	tcase_add_test(tc, shared_marks);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
