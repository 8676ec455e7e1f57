/* SPDX-License-Identifier: MIT */
#include "apps/common/zipf.h"

#include <errno.h>
#include <math.h>

uint64_t rng_mix(uint64_t x)
{
	x += UINT64_C(0x9e3779b97f4a7c15);
	x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
	return x ^ (x >> 31);
}

double rng_unit(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

static double zeta(uint64_t n, double theta)
{
	double sum = 0;
	for (uint64_t i = 1; i <= n; i++)
		sum += 1.0 / pow((double)i, theta);
	return sum;
}

int zipf_init(struct zipf *z, uint64_t n, double theta)
{
	if (!n || theta < 0 || theta >= 1)
		return -EINVAL;
	z->n = n;
	z->theta = theta;
	if (theta == 0)
		return 0;
	z->zetan = zeta(n, theta);
	z->alpha = 1.0 / (1.0 - theta);
	z->half_pow_theta = 1.0 + pow(0.5, theta);
	z->eta = (1.0 - pow(2.0 / (double)n, 1.0 - theta)) /
		 (1.0 - zeta(2, theta) / z->zetan);
	return 0;
}

uint64_t zipf_next(const struct zipf *z, uint64_t *s)
{
	if (z->theta == 0)
		return rng_next(s) % z->n;
	return rng_mix(zipf_rank(z, s)) % z->n;
}

uint64_t zipf_rank(const struct zipf *z, uint64_t *s)
{
	if (z->theta == 0)
		return rng_next(s) % z->n;
	double u = rng_unit(s), uz = u * z->zetan;
	uint64_t rank;
	if (uz < 1.0)
		rank = 0;
	else if (uz < z->half_pow_theta)
		rank = 1;
	else
		rank = (uint64_t)((double)z->n *
				  pow(z->eta * u - z->eta + 1.0, z->alpha));
	return rank < z->n ? rank : z->n - 1;
}
