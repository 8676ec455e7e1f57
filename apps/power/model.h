/* SPDX-License-Identifier: MIT */
/* The plant and the control law of loco-power (docs/demos.md, "The
 * power_controller demo"): an averaged buck converter, a PI controller
 * and the step-response figures of merit. Pure computation, no loco. */
#ifndef LOCO_APPS_POWER_MODEL_H
#define LOCO_APPS_POWER_MODEL_H

#include <stddef.h>
#include <stdint.h>

/* Averaged (state-space averaged, continuous conduction) buck converter:
 *	L di/dt = d Vin - v - rL i
 *	C dv/dt = i - v / R
 * d the duty cycle held over a step, R the load. */
struct buck_params {
	double vin;     /* input voltage, V */
	double l;       /* inductance, H */
	double c;       /* output capacitance, F */
	double rl;      /* inductor series resistance, ohm */
};

struct buck_state {
	double i;       /* inductor current, A */
	double v;       /* output voltage, V */
};

/* Advance S by DT seconds with duty D and load R ohm, in SUBSTEPS
 * fourth-order Runge-Kutta steps (the duty and load are constant). */
void buck_step(const struct buck_params *p, struct buck_state *s, double d,
	       double r, double dt, unsigned substeps);

/* Discrete PI in velocity form on the error normalised by Vin:
 *	e_k = (ref - v_k) / Vin
 *	d_k = clamp(d_{k-1} + kp (e_k - e_{k-1}) + ki T e_k, 0, dmax)
 * The clamp of the accumulated duty is the anti-windup. */
struct pi_params {
	double kp;      /* proportional gain, duty per unit of e */
	double ki;      /* integral gain, 1/s */
	double t;       /* sample period, s */
	double dmax;    /* largest duty */
	double vin;
};

struct pi_state {
	double d, e;    /* last output and error */
};

double pi_step(const struct pi_params *p, struct pi_state *s, double ref,
	       double v);

/* Figures of one segment of the output V[0..n) against REF: the first
 * index from which every sample stays within BAND * REF (n if none), the
 * largest excess above REF and the largest deviation, both relative to
 * REF. */
struct seg_figs {
	size_t settle;
	double overshoot;
	double peak_dev;
};

void seg_figures(const double *v, size_t n, double ref, double band,
		 struct seg_figs *out);

/* Mean of |V[i] - REF| / REF over V[0..n). */
double mean_rel_error(const double *v, size_t n, double ref);

#endif
