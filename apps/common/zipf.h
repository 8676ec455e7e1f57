/* SPDX-License-Identifier: MIT */
/* Key choosers of the benchmark drivers: a per-thread xorshift generator
 * and YCSB's scrambled Zipfian distribution (Gray et al., "Quickly
 * generating billion-record synthetic databases"), as in YCSB-C. */
#ifndef LOCO_APPS_ZIPF_H
#define LOCO_APPS_ZIPF_H

#include <stdint.h>

/* splitmix64: seeds and scrambles. */
uint64_t rng_mix(uint64_t x);

/* xorshift64*: next value of state *S (never 0). Inline: a driver draws
 * a few a transfer or op, and a call costs as much as the draw. */
static inline uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s ? *s : UINT64_C(0x2545f4914f6cdd1d);
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * UINT64_C(0x2545f4914f6cdd1d);
}

/* Uniform in [0, 1). */
double rng_unit(uint64_t *s);

struct zipf {
	uint64_t n;
	double theta;       /* 0: uniform */
	double alpha, zetan, eta, half_pow_theta;
};

/* Items 0..N-1 (N >= 1) with skew THETA in [0, 1). -EINVAL otherwise.
 * Costs O(N) once (the zeta sum). */
int zipf_init(struct zipf *z, uint64_t n, double theta);

/* Next item: rank drawn from Zipf(theta), then scrambled over 0..N-1 so
 * the hot items are spread (YCSB's ScrambledZipfianGenerator). */
uint64_t zipf_next(const struct zipf *z, uint64_t *s);

/* Next rank in 0..N-1, not scrambled: 0 is the most popular (YCSB's
 * ZipfianGenerator; uniform when theta is 0). */
uint64_t zipf_rank(const struct zipf *z, uint64_t *s);

#endif
