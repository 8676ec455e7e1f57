/* SPDX-License-Identifier: MIT */
/* loco-power: LOCO Appendix B. The lowest compute node is the controller,
 * every other compute node a converter; they exchange samples and duty
 * cycles through the power_controller channel "pc" in fixed-period loops
 * (docs/demos.md, "The power_controller demo").
 *
 * --mode lockstep (the default): simulated time advances by one period
 * per step whatever the wall clock does: converter step j integrates
 * [t_j, t_j+1) with the duty the controller computed at step j-1 (a
 * one-period computation delay, as in a digital PWM) and publishes its
 * state at t_j+1 (sample seq j+2); controller step k waits for every live
 * converter's sample at t_k (seq k+1) and publishes the duty of step k
 * (command seq k+1). Both wait for what they need, so the trajectory does
 * not depend on the machine's speed; a wall-clock period that overran is
 * a missed deadline, counted, not an error.
 *
 * --mode free: every loop runs on its own absolute wall-clock deadlines
 * and never waits for the other side: a converter integrates one period
 * with the latest duty it holds, the controller computes from the latest
 * sample of each converter, whatever step it is from. Late messages,
 * jitter and stalls then reach the control result; the controller reports
 * the age of the samples it used. */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/common/bench.h"
#include "apps/common/local.h"
#include "apps/common/opts.h"
#include "apps/power/model.h"
#include <loco/channels/power_controller.h>

#define PROG "loco-power"
#define SEQ_DONE (UINT64_C(1) << 62)  /* a converter's last sample */
#define MAX_EVENTS 64

struct popts {
	double period_us, vref, vin, l_uh, c_uf, rl_mohm, load_ohms;
	double kp, ki, dmax, band_pct, stale_ms, slowdown;
	uint64_t steps;
	unsigned substeps, converters;
	uint64_t load_step;           /* 0: none */
	double load_step_ohms;
	unsigned drop_id;             /* node id, 0 with drop_step 0: none */
	uint64_t drop_step;
	const char *trace;
	bool broken_raw;
	bool free_run;                /* --mode free */
};

/* Wall-clock pacing of one loop. CATCH_UP (free mode): the deadlines are
 * absolute, start + n periods, and a late loop runs its overdue
 * iterations back to back; otherwise a late step restarts the grid. */
struct pace {
	bool catch_up;
	uint64_t period_ns, next, last_start, missed;
	struct bench_lat jitter, lat;
	uint64_t step_start;
};

struct power {
	struct popts o;
	struct loco_mgr *mgr;
	struct loco_thread *thr;
	struct loco_power_ctl pc;
	uint32_t self, controller;
	uint64_t converters;
	unsigned nconv;
	struct pace pace;
	struct loco_stats before, stats;
	double wall_s;
	struct bench_lat age;         /* controller: ages of the samples used */
};

static void usage(FILE *f)
{
	fputs(
"usage: loco-power [options] (plus node options: --id/--hosts/--transport/...;\n"
"                  run on 2+ compute nodes: tools/loco-run -n N -- loco-power)\n"
"The lowest compute node is the controller, the others are converters.\n"
"  --converters N     expected converters (default: compute nodes - 1; a\n"
"                     different count is an error)\n"
"  --mode M           lockstep (default): each side waits for the other's\n"
"                     message of the step; free: every loop runs on its own\n"
"                     wall-clock deadlines with the latest message it holds\n"
"  --period-us P      loop period of every node, also the simulated control\n"
"                     period (default 40)\n"
"  --steps N          controller steps (default 5000)\n"
"  --slowdown F       wall-clock period = F x the simulated period (default 1:\n"
"                     real time; > 1 runs the same simulation slower)\n"
"  --vref V           reference of the summed output voltage (default 5)\n"
"  --vin V            input voltage of each converter (default 12)\n"
"  --inductance-uh L  (default 47)    --capacitance-uf C  (default 100)\n"
"  --rl-mohm R        inductor series resistance (default 20)\n"
"  --load-ohms R      load of each converter (default 2)\n"
"  --load-step S:R    from step S on, each load is R ohm (lockstep: converter\n"
"                     step S; free: once the controller did its step S)\n"
"  --drop ID@S        converter ID stops (exits) at its step S (free: once\n"
"                     the controller did its step S)\n"
"  --kp K             proportional gain, duty per Vin of error (default 0.02)\n"
"  --ki K             integral gain, 1/s (default 2000)\n"
"  --dmax D           largest duty (default 0.95)\n"
"  --substeps M       RK4 steps of the converter model per period (default 20)\n"
"  --stale-ms MS      a converter whose sample did not change for MS of wall\n"
"                     time (lockstep: while awaited) is dropped (default 200)\n"
"  --band PCT         settling band, percent of vref (default 1)\n"
"  --trace FILE       controller: one line per step (see docs/demos.md)\n"
"  --broken-raw-read  tests only: load messages without the checksum\n"
"Prints one JSON line per node; the controller's has settling_ms,\n"
"overshoot_pct, ss_error_pct, jitter_p50_us/p99_us, missed_deadlines,\n"
"age_p50/p99/max_periods.\n", f);
}

/* ---- options -------------------------------------------------------------- */

static int parse_load_step(struct popts *o, const char *arg, char *expect)
{
	char *end;
	unsigned long long s = strtoull(arg, &end, 10);
	double r = *end == ':' ? strtod(end + 1, &end) : 0;
	if (*end || !s || !(r > 0) || r > 1e6) {
		snprintf(expect, BENCH_EXPECT_MAX, "STEP:OHMS, STEP >= 1, OHMS > 0");
		return -1;
	}
	o->load_step = s;
	o->load_step_ohms = r;
	return 0;
}

static int parse_drop(struct popts *o, const char *arg, char *expect)
{
	char *end;
	unsigned long id = strtoul(arg, &end, 10);
	unsigned long long s = *end == '@' ? strtoull(end + 1, &end, 10) : 0;
	if (*end || id >= LOCO_MAX_NODES || !s) {
		snprintf(expect, BENCH_EXPECT_MAX, "ID@STEP, ID 0..63, STEP >= 1");
		return -1;
	}
	o->drop_id = (unsigned)id;
	o->drop_step = s;
	return 0;
}

static int parse_mode(struct popts *o, const char *arg, char *expect)
{
	if (strcmp(arg, "lockstep") && strcmp(arg, "free")) {
		snprintf(expect, BENCH_EXPECT_MAX, "lockstep or free");
		return -1;
	}
	o->free_run = !strcmp(arg, "free");
	return 0;
}

static int parse_one(void *arg, int c, const char *v, char *expect)
{
	struct popts *o = arg;
	switch (c) {
	case 'n': return bench_parse_uint(v, 1, LOCO_MAX_NODES - 1, &o->converters, expect);
	case 'p': return bench_parse_double(v, 1, 1e6, &o->period_us, expect);
	case 's': return bench_parse_u64(v, 1, 100000000, &o->steps, expect);
	case 'r': return bench_parse_double(v, 0.001, 1e4, &o->vref, expect);
	case 'i': return bench_parse_double(v, 0.1, 1e4, &o->vin, expect);
	case 'L': return bench_parse_double(v, 0.01, 1e6, &o->l_uh, expect);
	case 'C': return bench_parse_double(v, 0.01, 1e6, &o->c_uf, expect);
	case 'e': return bench_parse_double(v, 0, 1e4, &o->rl_mohm, expect);
	case 'R': return bench_parse_double(v, 0.001, 1e6, &o->load_ohms, expect);
	case 'S': return parse_load_step(o, v, expect);
	case 'D': return parse_drop(o, v, expect);
	case 'P': return bench_parse_double(v, 0, 100, &o->kp, expect);
	case 'I': return bench_parse_double(v, 0, 1e7, &o->ki, expect);
	case 'x': return bench_parse_double(v, 0.01, 1, &o->dmax, expect);
	case 'm': return bench_parse_uint(v, 1, 10000, &o->substeps, expect);
	case 't': return bench_parse_double(v, 1, 3600000, &o->stale_ms, expect);
	case 'b': return bench_parse_double(v, 0.001, 50, &o->band_pct, expect);
	case 'w': return bench_parse_double(v, 1, 1e6, &o->slowdown, expect);
	case 'T': o->trace = v; return 0;
	case 'B': o->broken_raw = true; return 0;
	case 'M': return parse_mode(o, v, expect);
	default: return -1;
	}
}

static int parse(void *arg, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "converters", required_argument, NULL, 'n' },
		{ "period-us", required_argument, NULL, 'p' },
		{ "steps", required_argument, NULL, 's' },
		{ "vref", required_argument, NULL, 'r' },
		{ "vin", required_argument, NULL, 'i' },
		{ "inductance-uh", required_argument, NULL, 'L' },
		{ "capacitance-uf", required_argument, NULL, 'C' },
		{ "rl-mohm", required_argument, NULL, 'e' },
		{ "load-ohms", required_argument, NULL, 'R' },
		{ "load-step", required_argument, NULL, 'S' },
		{ "drop", required_argument, NULL, 'D' },
		{ "kp", required_argument, NULL, 'P' },
		{ "ki", required_argument, NULL, 'I' },
		{ "dmax", required_argument, NULL, 'x' },
		{ "substeps", required_argument, NULL, 'm' },
		{ "stale-ms", required_argument, NULL, 't' },
		{ "band", required_argument, NULL, 'b' },
		{ "slowdown", required_argument, NULL, 'w' },
		{ "trace", required_argument, NULL, 'T' },
		{ "broken-raw-read", no_argument, NULL, 'B' },
		{ "mode", required_argument, NULL, 'M' },
		{ NULL, 0, NULL, 0 },
	};
	return bench_getopt(argc, argv, "h", opts, parse_one, arg, PROG);
}

/* ---- pacing ----------------------------------------------------------------- */

static int pace_init(struct pace *p, double period_ns, uint64_t steps,
		     bool catch_up)
{
	memset(p, 0, sizeof(*p));
	p->catch_up = catch_up;
	p->period_ns = (uint64_t)period_ns;
	int rc = bench_lat_init(&p->jitter, steps);
	if (!rc && (rc = bench_lat_init(&p->lat, steps)))
		bench_lat_fini(&p->jitter);
	return rc;
}

static void pace_fini(struct pace *p)
{
	bench_lat_fini(&p->jitter);
	bench_lat_fini(&p->lat);
}

/* Wait for the next period's start (sleep while far, then yield). */
static void pace_wait(struct pace *p)
{
	uint64_t now = loco_now_ns();
	if (!p->next)
		p->next = now;
	while (now < p->next) {
		uint64_t left = p->next - now;
		if (left > 150000) {
			struct timespec ts = { 0, (long)(left - 100000) };
			nanosleep(&ts, NULL);
		} else {
			sched_yield();
		}
		now = loco_now_ns();
	}
	if (p->last_start) {
		uint64_t got = now - p->last_start;
		bench_lat_add(&p->jitter, got > p->period_ns ?
			      got - p->period_ns : p->period_ns - got);
	}
	p->last_start = p->step_start = now;
}

/* The step is over: a step that ends after the next period should have
 * started missed its deadline. Lockstep: the next one starts at once (no
 * catching up on lost periods). Free: the deadlines stay absolute. */
static void pace_end(struct pace *p)
{
	uint64_t now = loco_now_ns();
	bench_lat_add(&p->lat, now - p->step_start);
	p->next += p->period_ns;
	if (now > p->next) {
		p->missed++;
		if (!p->catch_up)
			p->next = now;
	}
}

/* ---- result line ------------------------------------------------------------ */

static void json_begin(struct power *w, const char *role, uint64_t ops)
{
	struct bench_result r = {
		.app = "power", .transport = loco_mgr_transport(w->mgr),
		.nodes = w->nconv + 1, .threads = 1, .duration_s = w->wall_s,
		.ops = ops, .p50_us = bench_lat_pct_us(&w->pace.lat, 50),
		.p99_us = bench_lat_pct_us(&w->pace.lat, 99), .stats = w->stats,
	};
	bench_json_begin(stdout, &r);
	printf(",\"role\":\"%s\",\"mode\":\"%s\",\"node\":%u,\"converters\":%u,"
	       "\"period_us\":%.1f,\"slowdown\":%.2f,\"steps\":%llu,"
	       "\"jitter_p50_us\":%.2f,\"jitter_p99_us\":%.2f,"
	       "\"missed_deadlines\":%llu",
	       role, w->o.free_run ? "free" : "lockstep", w->self, w->nconv,
	       w->o.period_us, w->o.slowdown,
	       (unsigned long long)w->o.steps,
	       bench_lat_pct_us(&w->pace.jitter, 50),
	       bench_lat_pct_us(&w->pace.jitter, 99),
	       (unsigned long long)w->pace.missed);
}

static void stats_end(struct power *w, uint64_t t0)
{
	w->wall_s = (double)(loco_now_ns() - t0) / 1e9;
	loco_thread_stats(w->thr, &w->stats);
	bench_stats_sub(&w->stats, &w->before);
}

/* ---- converter ---------------------------------------------------------------- */

/* A converter's simulated plant and what its samples carry. */
struct conv_sim {
	struct buck_params bp;
	struct buck_state x, prev;
	double dt;
	uint64_t t_last;             /* when the last sample was published */
};

static void conv_sim_init(const struct popts *o, struct conv_sim *s)
{
	*s = (struct conv_sim){
		.bp = { o->vin, o->l_uh * 1e-6, o->c_uf * 1e-6, o->rl_mohm * 1e-3 },
		.dt = o->period_us * 1e-6,
	};
}

static int converter_report(struct power *w, struct conv_sim *s, uint64_t seq,
			    uint64_t flags)
{
	uint64_t now = loco_now_ns();
	struct loco_pc_sample smp = { .seq = seq, .v = s->x.v, .i = s->x.i,
				      .v_prev = s->prev.v, .i_prev = s->prev.i,
				      .flags = flags, .t_ns = now,
				      .t_prev_ns = s->t_last };
	s->t_last = now;
	return loco_power_ctl_report(&w->pc, w->thr, &smp);
}

/* Integrate one period with DUTY and load R, publish the state as SEQ. */
static int converter_advance(struct power *w, struct conv_sim *s, double duty,
			     double r, uint64_t seq)
{
	s->prev = s->x;
	buck_step(&s->bp, &s->x, duty, r, s->dt, w->o.substeps);
	return converter_report(w, s, seq, 0);
}

static double load_at(const struct popts *o, uint64_t j)
{
	return o->load_step && j >= o->load_step ? o->load_step_ohms :
						   o->load_ohms;
}

static bool drop_at(const struct power *w, uint64_t j)
{
	return w->o.drop_step && w->o.drop_id == w->self && j >= w->o.drop_step;
}

/* The duty of converter step J: command J (d_{J-1}), or its copy in
 * command J+1 when the controller is already one step further. */
static double duty_of(const struct loco_pc_cmd *c, uint64_t j)
{
	return c->seq == j + 1 ? c->duty_prev : c->duty;
}

/* Lockstep: steps until STOP (or the --drop step). Returns 0 or -errno. */
static int converter_lockstep(struct power *w, struct conv_sim *s,
			      uint64_t *steps, bool *dropped)
{
	int rc = 0;
	uint64_t j = 0;
	for (; !rc; j++) {
		if (drop_at(w, j)) {
			*dropped = true;
			break;
		}
		struct loco_pc_cmd c;
		pace_wait(&w->pace);
		rc = loco_power_ctl_wait_cmd(&w->pc, w->thr, j, -1, &c);
		if (rc || c.flags & LOCO_PC_STOP)
			break;
		rc = converter_advance(w, s, duty_of(&c, j), load_at(&w->o, j),
				       j + 2);
		pace_end(&w->pace);
	}
	*steps = j;
	return rc;
}

/* Free: -ETIMEDOUT once the controller's command has not changed for
 * the manager's timeout (the controller is gone); *SEQ and *SINCE track
 * the last change. */
static int controller_alive(struct power *w, const struct loco_pc_cmd *c,
			    uint64_t *seq, uint64_t *since)
{
	uint64_t now = loco_now_ns();
	if (c->seq != *seq || !*since) {
		*seq = c->seq;
		*since = now;
		return 0;
	}
	if (now - *since <= (uint64_t)loco_mgr_timeout_ms(w->mgr) * 1000000u)
		return 0;
	fprintf(stderr, PROG ": node %u: no new command from the controller "
		"for %d ms\n", w->self, loco_mgr_timeout_ms(w->mgr));
	return -ETIMEDOUT;
}

/* Free: one period per deadline with the latest command held, until
 * STOP; events are due once the controller did step S (command seq
 * S+1). Returns 0 or -errno. */
static int converter_free(struct power *w, struct conv_sim *s,
			  uint64_t *steps, bool *dropped)
{
	int rc = 0;
	uint64_t j = 0, seq = 0, since = 0;
	for (; !rc; j++) {
		struct loco_pc_cmd c;
		pace_wait(&w->pace);
		rc = loco_power_ctl_latest_cmd(&w->pc, w->thr, &c);
		if (rc || c.flags & LOCO_PC_STOP)
			break;
		uint64_t done = c.seq;    /* controller steps done */
		if (done && drop_at(w, done - 1)) {
			*dropped = true;
			break;
		}
		rc = controller_alive(w, &c, &seq, &since);
		if (!rc)
			rc = converter_advance(w, s, c.duty, done ?
					       load_at(&w->o, done - 1) :
					       w->o.load_ohms, j + 2);
		pace_end(&w->pace);
	}
	*steps = j;
	return rc;
}

static int converter_loop(struct power *w, uint64_t *steps, bool *dropped)
{
	struct conv_sim s;
	conv_sim_init(&w->o, &s);
	int rc = converter_report(w, &s, 1, 0);
	/* loco-run aims its faults at this line (ID@after:NODE:...). */
	fprintf(stderr, PROG ": node %u: measured phase begins\n", w->self);
	if (!rc)
		rc = w->o.free_run ? converter_free(w, &s, steps, dropped) :
				     converter_lockstep(w, &s, steps, dropped);
	if (rc || *dropped)
		return rc;
	s.prev = s.x;
	rc = converter_report(w, &s, SEQ_DONE, LOCO_PC_DONE);
	return rc ? rc : loco_power_ctl_flush(&w->pc, w->thr,
					      UINT64_C(1) << w->controller, -1);
}

static int converter_run(struct power *w)
{
	uint64_t steps = 0, t0 = loco_now_ns();
	bool dropped = false;
	loco_thread_stats(w->thr, &w->before);
	int rc = converter_loop(w, &steps, &dropped);
	stats_end(w, t0);
	if (rc)
		return rc;
	json_begin(w, "converter", steps);
	printf(",\"dropped\":%s", dropped ? "true" : "false");
	bench_json_end(stdout);
	return 0;
}

/* ---- controller --------------------------------------------------------------- */

/* A change the output must recover from: the load step, a converter
 * dropped or taken back. */
struct ctl_event {
	uint64_t step;
	const char *kind;
	uint32_t id;
};

/* What the controller keeps per step and per event. */
struct ctl_run {
	double *vsum;                    /* summed output per step */
	struct pi_state pi[LOCO_MAX_NODES];
	struct loco_pc_sample smp[LOCO_MAX_NODES];
	double v[LOCO_MAX_NODES];           /* each output at this step */
	double duty[LOCO_MAX_NODES], duty_prev[LOCO_MAX_NODES];
	uint64_t live;
	unsigned nev;
	struct ctl_event ev[MAX_EVENTS];
	FILE *trace;
};

static void event_add(struct ctl_run *c, uint64_t step, const char *kind,
		      uint32_t id)
{
	if (c->nev < MAX_EVENTS)
		c->ev[c->nev++] = (struct ctl_event){ step, kind, id };
}

/* Live-set changes since the last step become events; a converter taken
 * back restarts its PI from its last duty. */
static void live_changes(struct power *w, struct ctl_run *c, uint64_t k)
{
	uint64_t now = w->pc.live;
	for (uint64_t m = c->live & ~now; m; m &= m - 1)
		event_add(c, k, "drop", (uint32_t)__builtin_ctzll(m));
	for (uint64_t m = now & ~c->live; m; m &= m - 1)
		event_add(c, k, "rejoin", (uint32_t)__builtin_ctzll(m));
	c->live = now;
}

static void trace_head(struct power *w, struct ctl_run *c)
{
	fprintf(c->trace, "# loco-power trace: step t_ms vsum vref live");
	for (uint64_t m = w->converters; m; m &= m - 1)
		fprintf(c->trace, " v%d", __builtin_ctzll(m));
	for (uint64_t m = w->converters; m; m &= m - 1)
		fprintf(c->trace, " d%d", __builtin_ctzll(m));
	fprintf(c->trace, "\n");
}

/* A row of the trace; a converter that is not live has "nan" (a gap in
 * the plot). */
static void trace_row(struct power *w, struct ctl_run *c, uint64_t k)
{
	fprintf(c->trace, "%llu %.4f %.5f %.4f %d", (unsigned long long)k,
		(double)k * w->o.period_us / 1000, c->vsum[k], w->o.vref,
		__builtin_popcountll(c->live));
	for (int pass = 0; pass < 2; pass++)
		for (uint64_t m = w->converters; m; m &= m - 1) {
			unsigned id = (unsigned)__builtin_ctzll(m);
			if (!(c->live & UINT64_C(1) << id))
				fprintf(c->trace, " nan");
			else
				fprintf(c->trace, " %.5f",
					pass ? c->duty[id] : c->v[id]);
		}
	fprintf(c->trace, "\n");
}

/* The output of a converter used at step K, and when it was published.
 * Lockstep: the output at t_K, sample K+1, or its copy in sample K+2
 * when the converter is already one step further. Free: the latest. */
static double volt_of(const struct power *w, const struct loco_pc_sample *s,
		      uint64_t k, uint64_t *t_ns)
{
	bool prev = !w->o.free_run && s->seq == k + 2;
	*t_ns = prev ? s->t_prev_ns : s->t_ns;
	return prev ? s->v_prev : s->v;
}

/* The age of a sample published at T_NS, used now (0 if unknown). */
static void age_add(struct power *w, uint64_t t_ns)
{
	uint64_t now = loco_now_ns();
	if (t_ns)
		bench_lat_add(&w->age, now > t_ns ? now - t_ns : 0);
}

/* Duties of step K from the samples: the live converters share vref
 * equally. Commands go to every converter (a dropped one that catches up
 * finds the current duty); a dropped one's push errors are ignored. */
static int control_step(struct power *w, struct ctl_run *c, uint64_t k)
{
	const struct popts *o = &w->o;
	struct pi_params pp = { o->kp, o->ki, o->period_us * 1e-6, o->dmax,
				o->vin };
	int nlive = __builtin_popcountll(c->live);
	double sum = 0;
	for (uint64_t m = c->live; m; m &= m - 1) {
		unsigned id = (unsigned)__builtin_ctzll(m);
		uint64_t t_ns;
		double v = volt_of(w, &c->smp[id], k, &t_ns);
		age_add(w, t_ns);
		c->v[id] = v;
		sum += v;
		c->duty_prev[id] = c->duty[id];
		c->duty[id] = pi_step(&pp, &c->pi[id], o->vref / nlive, v);
	}
	c->vsum[k] = sum;
	for (uint64_t m = w->converters; m; m &= m - 1) {
		unsigned id = (unsigned)__builtin_ctzll(m);
		struct loco_pc_cmd cmd = { .seq = k + 1, .duty = c->duty[id],
					   .duty_prev = c->duty_prev[id] };
		int rc = loco_power_ctl_command(&w->pc, w->thr, id, &cmd);
		if (rc && c->live & UINT64_C(1) << id)
			return rc;
	}
	return 0;
}

/* The samples of step K: lockstep waits for sample K+1 of every live
 * converter, free takes the latest ones. */
static int ctl_samples(struct power *w, struct ctl_run *c, uint64_t k)
{
	uint64_t stale = (uint64_t)(w->o.stale_ms * 1e6);
	if (w->o.free_run)
		return loco_power_ctl_latest(&w->pc, w->thr, stale, c->smp);
	return loco_power_ctl_gather(&w->pc, w->thr, k + 1, stale, c->smp);
}

/* Free: start the loop once every converter published its first sample
 * (it runs, with duty 0, until our first command), lest the PI wind up
 * against a plant that has not started; one that does not show within
 * --stale-ms is dropped. */
static int free_start(struct power *w, struct ctl_run *c)
{
	uint64_t stale = (uint64_t)(w->o.stale_ms * 1e6);
	return loco_power_ctl_gather(&w->pc, w->thr, 1, stale, c->smp);
}

static int controller_loop(struct power *w, struct ctl_run *c)
{
	c->live = w->pc.live;
	int rc = w->o.free_run ? free_start(w, c) : 0;
	if (rc)
		return rc;
	for (uint64_t k = 0; k < w->o.steps; k++) {
		pace_wait(&w->pace);
		rc = ctl_samples(w, c, k);
		if (!rc) {
			live_changes(w, c, k);
			rc = control_step(w, c, k);
		}
		if (rc)
			return rc;
		if (c->trace)
			trace_row(w, c, k);
		pace_end(&w->pace);
	}
	return 0;
}

/* STOP to every converter, then wait (bounded by --stale-ms) until each
 * live one answered DONE, so their last pushes to us are complete. */
static int controller_stop(struct power *w, struct ctl_run *c)
{
	for (uint64_t m = w->converters; m; m &= m - 1) {
		unsigned id = (unsigned)__builtin_ctzll(m);
		struct loco_pc_cmd cmd = { .seq = w->o.steps + 1,
					   .duty = c->duty[id],
					   .duty_prev = c->duty[id],
					   .flags = LOCO_PC_STOP };
		int rc = loco_power_ctl_command(&w->pc, w->thr, id, &cmd);
		if (rc && c->live & UINT64_C(1) << id)
			return rc;
	}
	int rc = loco_power_ctl_gather(&w->pc, w->thr, SEQ_DONE,
				       (uint64_t)(w->o.stale_ms * 1e6), c->smp);
	return rc ? rc : loco_power_ctl_flush(&w->pc, w->thr, w->pc.live, -1);
}

static void event_sort(struct ctl_run *c)
{
	for (unsigned i = 1; i < c->nev; i++)
		for (unsigned j = i; j && c->ev[j].step < c->ev[j - 1].step; j--) {
			struct ctl_event t = c->ev[j];
			c->ev[j] = c->ev[j - 1];
			c->ev[j - 1] = t;
		}
}

/* End of the segment starting at step S: the next event after it. */
static uint64_t seg_end(const struct power *w, const struct ctl_run *c,
			uint64_t s)
{
	for (unsigned i = 0; i < c->nev; i++)
		if (c->ev[i].step > s)
			return c->ev[i].step;
	return w->o.steps;
}

/* "settling_ms":X or null, from step S: the time until the output stays
 * in the band up to the next event. Returns whether it settled. */
static bool seg_print(const struct power *w, const struct ctl_run *c,
		      uint64_t s, const char *name, struct seg_figs *f)
{
	uint64_t e = seg_end(w, c, s);
	seg_figures(c->vsum + s, e - s, w->o.vref, w->o.band_pct / 100, f);
	bool ok = f->settle < e - s;
	if (ok)
		printf(",\"%s\":%.3f", name,
		       (double)f->settle * w->o.period_us / 1000);
	else
		printf(",\"%s\":null", name);
	return ok;
}

static void events_print(const struct power *w, const struct ctl_run *c)
{
	printf(",\"events\":[");
	for (unsigned i = 0; i < c->nev; i++) {
		struct seg_figs f;
		printf("%s{\"step\":%llu,\"kind\":\"%s\",\"node\":%u", i ? "," : "",
		       (unsigned long long)c->ev[i].step, c->ev[i].kind,
		       c->ev[i].id);
		seg_print(w, c, c->ev[i].step, "recovery_ms", &f);
		printf(",\"peak_dev_pct\":%.3f}", f.peak_dev * 100);
	}
	printf("]");
}

static void controller_report(struct power *w, struct ctl_run *c)
{
	const struct popts *o = &w->o;
	struct seg_figs f;
	if (o->load_step && o->load_step < o->steps)
		event_add(c, o->load_step, "load", 0);
	event_sort(c);
	uint64_t last = c->nev ? c->ev[c->nev - 1].step : 0;
	uint64_t tail = o->steps - last < o->steps / 10 + 1 ?
			o->steps - last : o->steps / 10 + 1;
	json_begin(w, "controller", o->steps);
	printf(",\"vref\":%.4f,\"band_pct\":%.3f", o->vref, o->band_pct);
	seg_print(w, c, 0, "settling_ms", &f);
	printf(",\"overshoot_pct\":%.3f", f.overshoot * 100);
	seg_figures(c->vsum + last, o->steps - last, o->vref, o->band_pct / 100,
		    &f);
	printf(",\"settled\":%s,\"ss_error_pct\":%.4f,\"final_v\":%.4f",
	       f.settle < o->steps - last ? "true" : "false",
	       mean_rel_error(c->vsum + o->steps - tail, tail, o->vref) * 100,
	       c->vsum[o->steps - 1]);
	double per_us = o->period_us * o->slowdown;
	printf(",\"age_p50_periods\":%.3f,\"age_p99_periods\":%.3f,"
	       "\"age_max_periods\":%.3f",
	       bench_lat_pct_us(&w->age, 50) / per_us,
	       bench_lat_pct_us(&w->age, 99) / per_us,
	       bench_lat_pct_us(&w->age, 100) / per_us);
	printf(",\"live_end\":%d,\"drops\":%llu,\"rejoins\":%llu",
	       __builtin_popcountll(c->live), (unsigned long long)w->pc.drops,
	       (unsigned long long)w->pc.rejoins);
	events_print(w, c);
	bench_json_end(stdout);
}

static int controller_run(struct power *w)
{
	struct ctl_run c = { .nev = 0 };
	c.vsum = calloc(w->o.steps, sizeof(double));
	if (!c.vsum)
		return -ENOMEM;
	if (w->o.trace && !(c.trace = fopen(w->o.trace, "w"))) {
		fprintf(stderr, PROG ": --trace %s: %s\n", w->o.trace,
			strerror(errno));
		free(c.vsum);
		return -errno;
	}
	if (c.trace)
		trace_head(w, &c);
	uint64_t t0 = loco_now_ns();
	loco_thread_stats(w->thr, &w->before);
	int rc = controller_loop(w, &c);
	if (!rc)
		rc = controller_stop(w, &c);
	stats_end(w, t0);
	if (!rc)
		controller_report(w, &c);
	if (c.trace && fclose(c.trace) && !rc)
		rc = -EIO;
	free(c.vsum);
	return rc;
}

/* ---- set-up ------------------------------------------------------------------- */

static int roles(struct power *w)
{
	uint64_t all = loco_mgr_compute_peers(w->mgr) | UINT64_C(1) << w->self;
	w->controller = (uint32_t)__builtin_ctzll(all);
	w->converters = all & ~(UINT64_C(1) << w->controller);
	w->nconv = (unsigned)__builtin_popcountll(w->converters);
	if (!w->nconv) {
		fprintf(stderr, PROG ": needs a controller and at least one "
			"converter: run on 2 or more compute nodes "
			"(tools/loco-run -n N -- loco-power)\n");
		return -EINVAL;
	}
	if (w->o.converters && w->o.converters != w->nconv) {
		fprintf(stderr, PROG ": --converters %u, but the cluster has %u "
			"compute nodes besides the controller\n",
			w->o.converters, w->nconv);
		return -EINVAL;
	}
	if (w->o.drop_step && !(w->converters & UINT64_C(1) << w->o.drop_id)) {
		fprintf(stderr, PROG ": --drop %u@...: node %u is not a "
			"converter\n", w->o.drop_id, w->o.drop_id);
		return -EINVAL;
	}
	return 0;
}

static int run(void *arg, struct loco_mgr *mgr)
{
	struct power *w = arg;
	w->mgr = mgr;
	w->self = loco_mgr_id(mgr);
	int rc = roles(w);
	if (rc)
		return rc;
	if ((rc = pace_init(&w->pace, w->o.period_us * 1000 * w->o.slowdown,
			   w->o.steps + 1, w->o.free_run)))
		return rc;
	if (w->self == w->controller &&
	    (rc = bench_lat_init(&w->age, w->o.steps * w->nconv))) {
		pace_fini(&w->pace);
		return rc;
	}
	if (!(rc = loco_thread_create(mgr, &w->thr))) {
		rc = loco_power_ctl_init(&w->pc, mgr, NULL, "pc", w->controller,
					 w->converters);
		bool pc_ok = !rc;
		w->pc.broken_raw = w->o.broken_raw;
		if (!rc && !(rc = loco_mgr_wait_ready(mgr, -1)))
			rc = w->self == w->controller ? controller_run(w) :
							converter_run(w);
		int drc = loco_thread_destroy(w->thr);  /* completes the last pushes */
		rc = rc ? rc : drc;
		if (pc_ok)
			loco_power_ctl_fini(&w->pc);
	}
	pace_fini(&w->pace);
	bench_lat_fini(&w->age);
	return rc;
}

static const struct local_prog prog = {
	.name = PROG, .usage = usage, .parse = parse, .run = run,
};

int main(int argc, char **argv)
{
	static struct power w = { .o = {
		.period_us = 40, .vref = 5, .vin = 12, .l_uh = 47, .c_uf = 100,
		.rl_mohm = 20, .load_ohms = 2, .kp = 0.02, .ki = 2000,
		.dmax = 0.95, .band_pct = 1, .stale_ms = 200, .steps = 5000, .slowdown = 1,
		.substeps = 20,
	} };
	setvbuf(stdout, NULL, _IOLBF, 0);
	return local_main(&prog, &w, argc, argv);
}
