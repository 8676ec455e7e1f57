/* SPDX-License-Identifier: MIT */
/* Waiting on peers, and word-wise access to shared memory.
 *
 * Every wait loop in loco spins briefly, then yields, then naps: nodes may
 * outnumber cores (four nodes on two cores in CI), and a waiter that never
 * yields starves the node it waits for. Every wait on a peer has a
 * deadline. The loop of a channel method with a timeout:
 *
 *	struct loco_wait w;
 *	loco_wait_init(&w, ch->mgr, timeout_ms);     (< 0: manager default)
 *	while (!done(...)) {
 *		int rc = loco_wait_step(&w);         (-ETIMEDOUT, else 0)
 *		if (rc)
 *			return rc;
 *	}
 *
 * and a loop without a deadline (retries bounded by a count) calls
 * loco_backoff(&spins) with a counter starting at 0.
 *
 * Shared memory that a NIC, a peer's WRITE or another local thread may
 * change at the same time is accessed only as aligned 8-byte atomic words
 * (loco_words_load, loco_words_store): that is the granularity at which the
 * memory model (docs/ordering.md) moves data atomically, and it keeps the
 * C11 program free of data races. */
#ifndef LOCO_WAIT_H
#define LOCO_WAIT_H

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <loco/loco.h>

/* Steps of a wait that only spin (with a CPU hint), steps after which it
 * naps instead of yielding, and the nap. */
#define LOCO_WAIT_SPINS 128
#define LOCO_WAIT_YIELDS 2048
#define LOCO_WAIT_NAP_NS 20000L
/* loco_wait_step reads the clock once every this many steps. */
#define LOCO_WAIT_CLOCK_EVERY 64

/* Tell the CPU this is a spin loop (x86 pause, arm64 yield). */
static inline void loco_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* One step of a wait loop with counter *SPINS (start at 0): spin for the
 * first LOCO_WAIT_SPINS steps, yield the CPU until LOCO_WAIT_YIELDS, then
 * nap LOCO_WAIT_NAP_NS per step. Reset the counter to 0 when the loop
 * makes progress. */
static inline void loco_backoff(unsigned *spins)
{
	if (++*spins < LOCO_WAIT_SPINS) {
		loco_cpu_relax();
		return;
	}
	if (*spins < LOCO_WAIT_YIELDS) {
		sched_yield();
		return;
	}
	struct timespec ts = { 0, LOCO_WAIT_NAP_NS };
	nanosleep(&ts, NULL);
}

/* A spin budget that learns from its own waits: how many spinning steps
 * a wait takes before it yields (for the ticket lock's next in line). A
 * wait on a peer that runs ends in a few polls (shm: within 8 in nearly
 * every wait); one on a peer that is descheduled (more processes than
 * cores) outlasts any spin, and its spins only take the CPU from that
 * peer. So a wait that spun its budget out, yielded, and still was not
 * served within LOCO_SPIN_NEAR yields halves the budget, down to
 * LOCO_SPIN_MIN: spinning did not pay. One served while spinning in the
 * upper half of the budget (a smaller budget would have missed it), or
 * within LOCO_SPIN_NEAR yields of its end (a longer one would have
 * caught it), doubles it, up to its cap. Any other leaves it. Where
 * waits are short or their holders run (no more processes than cores)
 * the budget stays where it catches them, at the cap when they are long;
 * where a holder is often descheduled it sits near the floor. Never
 * above the cap, on any transport (LOCO_WAIT_SPINS, the fixed budget it
 * replaces, for round-trip polls too). Deterministic: counts only, no
 * clock. */
#define LOCO_SPIN_MIN 16
#define LOCO_SPIN_NEAR 2

struct loco_spin {
	unsigned budget;   /* spinning steps before a wait yields */
	unsigned cap;      /* the most it grows to */
};

/* Start at CAP (> 0), the budget of a host that is not oversubscribed. */
static inline void loco_spin_init(struct loco_spin *s, unsigned cap)
{
	s->budget = s->cap = cap;
}

/* The floor: LOCO_SPIN_MIN, or the cap if that is lower. */
static inline unsigned loco_spin_floor(const struct loco_spin *s)
{
	return s->cap < LOCO_SPIN_MIN ? s->cap : LOCO_SPIN_MIN;
}

/* A wait was served (the awaited word moved) at its SPUN-th spinning
 * step (YIELDS 0; SPUN < budget), or after it spun the whole budget out
 * and then yielded YIELDS times (> 0). Learn from it. */
static inline void loco_spin_learn(struct loco_spin *s, unsigned spun,
				   unsigned yields)
{
	if (yields > LOCO_SPIN_NEAR) {
		unsigned half = s->budget / 2, lo = loco_spin_floor(s);
		s->budget = half > lo ? half : lo;
	} else if (yields || spun > s->budget / 2) {
		s->budget = s->budget < s->cap / 2 ? 2 * s->budget : s->cap;
	}
}

/* A wait with a deadline. The clock is read first by the first step, so
 * an operation that never has to wait reads no clock. */
struct loco_wait {
	uint64_t deadline_ns;    /* loco_now_ns() value; 0 until the first step */
	uint64_t timeout_ns;
	unsigned spins;
};

/* Start a wait of TIMEOUT_MS milliseconds; TIMEOUT_MS < 0 means MGR's
 * default (--timeout-ms, loco_mgr_timeout_ms); MGR may be NULL when
 * TIMEOUT_MS >= 0. */
static inline void loco_wait_init(struct loco_wait *w,
				  const struct loco_mgr *mgr, int timeout_ms)
{
	if (timeout_ms < 0)
		timeout_ms = loco_mgr_timeout_ms(mgr);
	w->deadline_ns = 0;
	w->timeout_ns = (uint64_t)timeout_ms * 1000000u;
	w->spins = 0;
}

/* True once the deadline has passed (reads the clock; the first call
 * starts the deadline). */
static inline bool loco_wait_expired(struct loco_wait *w)
{
	uint64_t now = loco_now_ns();
	if (!w->deadline_ns) {
		w->deadline_ns = now + w->timeout_ns;
		return false;
	}
	return now > w->deadline_ns;
}

/* The deadline as a loco_now_ns() value (CLOCK_MONOTONIC), for waits that
 * sleep on something else (pthread_cond_timedwait); starts it if no step
 * has. */
static inline uint64_t loco_wait_deadline(struct loco_wait *w)
{
	if (!w->deadline_ns)
		w->deadline_ns = loco_now_ns() + w->timeout_ns;
	return w->deadline_ns;
}

/* One step of the wait: -ETIMEDOUT once the deadline has passed (checked
 * on the first step and every LOCO_WAIT_CLOCK_EVERY steps after), else
 * backs off (loco_backoff) and returns 0. */
static inline int loco_wait_step(struct loco_wait *w)
{
	if (w->spins % LOCO_WAIT_CLOCK_EVERY == 0 && loco_wait_expired(w))
		return -ETIMEDOUT;
	loco_backoff(&w->spins);
	return 0;
}

/* Load WORDS 8-byte words of shared SRC (8-byte aligned) into private DST,
 * each with order MO. The caller's comment names what MO pairs with. */
static inline void loco_words_load(uint64_t *dst, const void *src,
				   size_t words, memory_order mo)
{
	const _Atomic uint64_t *s = src;
	for (size_t i = 0; i < words; i++)
		dst[i] = atomic_load_explicit(&s[i], mo);
}

/* Store WORDS words of private SRC into shared DST (8-byte aligned) with
 * order MO, in ascending address order. */
static inline void loco_words_store(void *dst, const uint64_t *src,
				    size_t words, memory_order mo)
{
	_Atomic uint64_t *d = dst;
	for (size_t i = 0; i < words; i++)
		atomic_store_explicit(&d[i], src[i], mo);
}

#endif
