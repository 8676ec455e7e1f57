/* SPDX-License-Identifier: MIT */
/* Private helpers of the channels (not installed): word-wise atomic copies
 * of shared memory and the spin-then-yield wait used by every wait loop.
 *
 * Shared memory that a peer's NIC, the local NIC or another local thread
 * may write at the same time is only ever accessed as 8-byte atomic words:
 * that is the granularity at which the memory model (docs/ordering.md)
 * promises single-copy atomicity, and it keeps the C11 program race-free. */
#ifndef LOCO_CHANNELS_CHAN_UTIL_H
#define LOCO_CHANNELS_CHAN_UTIL_H

#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Load WORDS 8-byte words of shared SRC into private DST with order MO.
 * The caller's comment names what MO pairs with. */
static inline void chan_words_load(uint64_t *dst, const void *src,
				   size_t words, memory_order mo)
{
	const _Atomic uint64_t *s = src;
	for (size_t i = 0; i < words; i++)
		dst[i] = atomic_load_explicit(&s[i], mo);
}

/* Store WORDS words of private SRC into shared DST with order MO, in
 * ascending address order. */
static inline void chan_words_store(void *dst, const uint64_t *src,
				    size_t words, memory_order mo)
{
	_Atomic uint64_t *d = dst;
	for (size_t i = 0; i < words; i++)
		atomic_store_explicit(&d[i], src[i], mo);
}

#define CHAN_SPIN_LIMIT 128
#define CHAN_YIELD_LIMIT 2048
#define CHAN_NAP_NS 20000L

static inline void chan_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* One step of a wait loop with counter *SPINS (start at 0): spin briefly,
 * then yield the CPU (the peers we wait for may share it), then nap. */
static inline void chan_backoff(unsigned *spins)
{
	if (++*spins < CHAN_SPIN_LIMIT) {
		chan_cpu_relax();
		return;
	}
	if (*spins < CHAN_YIELD_LIMIT) {
		sched_yield();
		return;
	}
	struct timespec ts = { 0, CHAN_NAP_NS };
	nanosleep(&ts, NULL);
}

/* Deadline TIMEOUT_MS from NOW_NS. */
static inline uint64_t chan_deadline(uint64_t now_ns, int timeout_ms)
{
	return now_ns + (uint64_t)timeout_ms * 1000000u;
}

#endif
