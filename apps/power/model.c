/* SPDX-License-Identifier: MIT */
/* loco-power's model: see model.h. */
#include <math.h>

#include "apps/power/model.h"

static void deriv(const struct buck_params *p, const struct buck_state *s,
		  double d, double r, struct buck_state *ds)
{
	ds->i = (d * p->vin - s->v - p->rl * s->i) / p->l;
	ds->v = (s->i - s->v / r) / p->c;
}

static struct buck_state axpy(const struct buck_state *x, double h,
			      const struct buck_state *k)
{
	return (struct buck_state){ x->i + h * k->i, x->v + h * k->v };
}

void buck_step(const struct buck_params *p, struct buck_state *s, double d,
	       double r, double dt, unsigned substeps)
{
	double h = dt / substeps;
	for (unsigned n = 0; n < substeps; n++) {
		struct buck_state k1, k2, k3, k4, x;
		deriv(p, s, d, r, &k1);
		x = axpy(s, h / 2, &k1);
		deriv(p, &x, d, r, &k2);
		x = axpy(s, h / 2, &k2);
		deriv(p, &x, d, r, &k3);
		x = axpy(s, h, &k3);
		deriv(p, &x, d, r, &k4);
		s->i += h / 6 * (k1.i + 2 * k2.i + 2 * k3.i + k4.i);
		s->v += h / 6 * (k1.v + 2 * k2.v + 2 * k3.v + k4.v);
	}
}

double pi_step(const struct pi_params *p, struct pi_state *s, double ref,
	       double v)
{
	double e = (ref - v) / p->vin;
	double d = s->d + p->kp * (e - s->e) + p->ki * p->t * e;
	s->d = fmin(fmax(d, 0.0), p->dmax);
	s->e = e;
	return s->d;
}

void seg_figures(const double *v, size_t n, double ref, double band,
		 struct seg_figs *out)
{
	out->settle = 0;
	out->overshoot = 0;
	out->peak_dev = 0;
	for (size_t i = 0; i < n; i++) {
		double dev = (v[i] - ref) / ref;
		if (fabs(dev) > band)
			out->settle = i + 1;
		if (dev > out->overshoot)
			out->overshoot = dev;
		if (fabs(dev) > out->peak_dev)
			out->peak_dev = fabs(dev);
	}
}

double mean_rel_error(const double *v, size_t n, double ref)
{
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += fabs(v[i] - ref) / ref;
	return n ? sum / (double)n : 0;
}
