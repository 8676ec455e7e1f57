/* SPDX-License-Identifier: MIT */
/* loco-race-resize: how long a RACE split takes in each resize mode, side
 * by side in one run (docs/race.md, "Resize time").
 *
 * For each mode (in --modes order) a fresh table of one subtable of
 * --groups groups (21 slots a group) is filled by one client with 8-byte
 * keys until --splits splits happened. Each split is timed inside
 * race_split (the table's split_ns counter, from the split's start: the
 * lock, the freeze or the moves, the new subtables, the descriptors; cas
 * mode's T1 included), and its round trips and verbs are the client's
 * thread counters over the insert that triggered it, less that insert's
 * own 3 round trips. The table's phase counters (enum loco_race_phase)
 * split that time, and count the split's own round trips and verbs, per
 * phase. One JSON line: the usual fields over every split of both modes
 * (ops = splits), then per mode the mean, p50 and p99 split time, round
 * trips, verbs and items moved per split, "<mode>_cpu_us" and
 * "_cpu_p50_us" (the client thread's CPU time over the insert that split:
 * what a busy host's preemption leaves out), per phase P "<mode>_P_us" (mean
 * a split), "_p50_us", "_rtts" and "_verbs" (a split), "<mode>_other_us"
 * (the split time in no phase), and "cas_over_rtx", the cas mode's mean
 * split time over the rtx mode's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <loco/channels/race/race.h>
#include "apps/common/bench.h"
#include "apps/common/local.h"
#include "apps/common/opts.h"

#define INSERT_RTTS 3

struct rz {
	unsigned groups, splits, value_size;
	unsigned nmodes;
	enum loco_race_resize order[2];   /* modes, in run order */
	struct loco_mgr *mgr;
};

struct rz_mode {
	const char *name;
	uint64_t splits, ns, rtts, verbs, moved, cpu_ns;
	struct bench_lat lat, cpu;   /* a sample a split: time, thread CPU */
	struct loco_stats st;
	uint64_t ph_ns[LOCO_RACE_PHASES], ph_rtts[LOCO_RACE_PHASES];
	uint64_t ph_verbs[LOCO_RACE_PHASES];
	struct bench_lat ph[LOCO_RACE_PHASES];   /* a sample a split */
};

static void usage(FILE *f)
{
	fputs("usage: loco-race-resize [--groups G] [--splits N] [--value-size B]\n"
	      "                        [--modes rtx,cas] (plus node options)\n"
	      "  --groups G      bucket groups per subtable (default 256: 5376 slots)\n"
	      "  --splits N      splits timed per mode (default 8)\n"
	      "  --value-size B  value bytes (default 8)\n"
	      "  --modes LIST    rtx, cas or both, in run order (default rtx,cas)\n"
	      "Fills a fresh table per mode with one client until N splits\n"
	      "happened; prints one JSON line with both modes' split times.\n", f);
}

static int parse_modes(struct rz *o, const char *arg, char *expect)
{
	unsigned seen = 0;
	o->nmodes = 0;
	for (const char *p = arg; *p;) {
		size_t n = strcspn(p, ",");
		enum loco_race_resize m;
		if (n == 3 && !strncmp(p, "rtx", 3))
			m = LOCO_RACE_RESIZE_RTX;
		else if (n == 3 && !strncmp(p, "cas", 3))
			m = LOCO_RACE_RESIZE_CAS;
		else
			break;
		if (seen & 1u << m)
			break;
		seen |= 1u << m;
		o->order[o->nmodes++] = m;
		p += n;
		if (*p == ',' && !*++p)
			break;
		if (!*p)
			return 0;
	}
	snprintf(expect, BENCH_EXPECT_MAX,
		 "rtx, cas, rtx,cas or cas,rtx (each once)");
	return -1;
}

static int parse_one(void *arg, int c, const char *val, char *expect)
{
	struct rz *o = arg;
	switch (c) {
	case 'g': return bench_parse_uint(val, 1, 65536, &o->groups, expect);
	case 's': return bench_parse_uint(val, 1, 1024, &o->splits, expect);
	case 'v': return bench_parse_uint(val, 1, 4096, &o->value_size, expect);
	case 'm': return parse_modes(o, val, expect);
	default: return -1;
	}
}

static int parse(void *arg, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "groups", required_argument, NULL, 'g' },
		{ "splits", required_argument, NULL, 's' },
		{ "value-size", required_argument, NULL, 'v' },
		{ "modes", required_argument, NULL, 'm' },
		{ NULL, 0, NULL, 0 },
	};
	if (bench_wants_help(argc, argv))
		return 1;
	return bench_getopt(argc, argv, "", opts, parse_one, arg,
			    "loco-race-resize") ? 2 : 0;
}

/* Depth for N splits of one subtable whatever the hash puts where. */
static unsigned depth_for(unsigned splits)
{
	unsigned d = 4;
	while ((1u << d) < 4 * splits && d < LOCO_RACE_DEPTH_MAX)
		d++;
	return d;
}

static uint64_t thread_cpu_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Insert key K and account the split it triggered, if any. */
static int insert_one(struct loco_race_client *c, struct loco_thread *thr,
		      uint64_t k, const void *val, uint32_t vlen,
		      struct rz_mode *m)
{
	struct loco_race_stats a, b;
	struct loco_stats s0, s1;
	uint64_t cpu0 = thread_cpu_ns();
	loco_race_client_stats(c, &a);
	loco_thread_stats(thr, &s0);
	int rc = loco_race_insert(c, &k, sizeof(k), val, vlen);
	loco_thread_stats(thr, &s1);
	loco_race_client_stats(c, &b);
	uint64_t cpu = thread_cpu_ns() - cpu0;
	for (unsigned p = 0; p < LOCO_RACE_PHASES; p++) {
		m->ph_ns[p] += b.phase_ns[p] - a.phase_ns[p];
		m->ph_rtts[p] += b.phase_rtts[p] - a.phase_rtts[p];
		m->ph_verbs[p] += b.phase_verbs[p] - a.phase_verbs[p];
	}
	if (rc || b.splits == a.splits)
		return rc;
	uint64_t n = b.splits - a.splits, ns = (b.split_ns - a.split_ns) / n;
	for (unsigned p = 0; p < LOCO_RACE_PHASES; p++)
		bench_lat_add(&m->ph[p], (b.phase_ns[p] - a.phase_ns[p]) / n);
	struct loco_stats d = s1;
	bench_stats_sub(&d, &s0);
	m->splits += b.splits - a.splits;
	m->ns += b.split_ns - a.split_ns;
	m->rtts += d.rtts > INSERT_RTTS ? d.rtts - INSERT_RTTS : 0;
	m->verbs += loco_stats_verbs(&d);
	m->moved += b.moved - a.moved;
	bench_stats_add(&m->st, &d);
	bench_lat_add(&m->lat, ns);
	m->cpu_ns += cpu;
	bench_lat_add(&m->cpu, cpu / n);
	return 0;
}

static int run_mode(struct rz *o, enum loco_race_resize mode,
		    struct rz_mode *m)
{
	char name[16];
	snprintf(name, sizeof(name), "rz-%s", m->name);
	uint64_t cap = (uint64_t)o->groups * 21 * (o->splits + 1) * 2;
	struct loco_race_opts ro = {
		.name = name, .groups = o->groups, .max_depth = depth_for(o->splits),
		.key_max = 8, .value_max = o->value_size, .resize = mode,
		.kv_blocks = (uint32_t)(cap < 65536 ? 65536 : cap),
		.threads_per_node = 1,
	};
	struct loco_race *r = NULL;
	struct loco_thread *thr = NULL;
	struct loco_race_client *c = NULL;
	uint8_t *val = calloc(1, o->value_size);
	int rc = val ? loco_race_create(o->mgr, &ro, &r) : -ENOMEM;
	if (!rc)
		rc = loco_thread_create(o->mgr, &thr);
	if (!rc)
		rc = loco_race_client_create(r, thr, &c);
	if (!rc)
		rc = bench_lat_init(&m->lat, o->splits + 64);
	if (!rc)
		rc = bench_lat_init(&m->cpu, o->splits + 64);
	for (unsigned p = 0; !rc && p < LOCO_RACE_PHASES; p++)
		rc = bench_lat_init(&m->ph[p], o->splits + 64);
	for (uint64_t k = 0; !rc && m->splits < o->splits; k++)
		rc = insert_one(c, thr, k, val, o->value_size, m);
	if (c)
		loco_race_client_destroy(c);
	if (thr)
		loco_thread_destroy(thr);
	if (r)
		loco_race_destroy(r);
	free(val);
	return rc;
}

static double per(uint64_t a, uint64_t n)
{
	return n ? (double)a / (double)n : 0;
}

/* Per phase of mode X: mean and p50 time, round trips and verbs a split;
 * then the split time no phase holds. */
static void report_phases(struct rz_mode *x)
{
	double sum = 0;
	for (unsigned p = 0; p < LOCO_RACE_PHASES; p++) {
		const char *ph = loco_race_phase_name(p);
		double us = per(x->ph_ns[p], x->splits) / 1e3;
		sum += us;
		printf(",\"%s_%s_us\":%.1f,\"%s_%s_p50_us\":%.1f,"
		       "\"%s_%s_rtts\":%.1f,\"%s_%s_verbs\":%.1f",
		       x->name, ph, us, x->name, ph,
		       bench_lat_pct_us(&x->ph[p], 50), x->name, ph,
		       per(x->ph_rtts[p], x->splits), x->name, ph,
		       per(x->ph_verbs[p], x->splits));
	}
	printf(",\"%s_other_us\":%.1f", x->name,
	       per(x->ns, x->splits) / 1e3 - sum);
}

static void report_mode(struct rz_mode *x)
{
	printf(",\"%s_splits\":%llu,\"%s_split_us\":%.1f,\"%s_p50_us\":%.1f,"
	       "\"%s_p99_us\":%.1f,\"%s_rtts_per_split\":%.1f,"
	       "\"%s_verbs_per_split\":%.1f,\"%s_moved_per_split\":%.1f",
	       x->name, (unsigned long long)x->splits, x->name,
	       per(x->ns, x->splits) / 1e3, x->name,
	       bench_lat_pct_us(&x->lat, 50), x->name,
	       bench_lat_pct_us(&x->lat, 99), x->name,
	       per(x->rtts, x->splits), x->name, per(x->verbs, x->splits),
	       x->name, per(x->moved, x->splits));
	printf(",\"%s_reads_per_split\":%.1f,\"%s_writes_per_split\":%.1f,"
	       "\"%s_cas_per_split\":%.1f,\"%s_faa_per_split\":%.1f",
	       x->name, per(x->st.reads, x->splits), x->name,
	       per(x->st.writes, x->splits), x->name,
	       per(x->st.cas, x->splits), x->name,
	       per(x->st.faa, x->splits));
	printf(",\"%s_cpu_us\":%.1f,\"%s_cpu_p50_us\":%.1f", x->name,
	       per(x->cpu_ns, x->splits) / 1e3, x->name,
	       bench_lat_pct_us(&x->cpu, 50));
	report_phases(x);
}

/* M: per enum loco_race_resize; the modes O ran, in its order. */
static void report(struct rz *o, struct rz_mode *m)
{
	struct bench_result r = { .app = "race-resize",
				  .transport = loco_mgr_transport(o->mgr),
				  .nodes = 1, .threads = 1 };
	struct bench_lat all;
	uint64_t ns = 0;
	bench_lat_init(&all, 2 * o->splits + 64);
	for (unsigned i = 0; i < o->nmodes; i++) {
		struct rz_mode *x = &m[o->order[i]];
		r.ops += x->splits;
		ns += x->ns;
		bench_stats_add(&r.stats, &x->st);
		bench_lat_append(&all, &x->lat);
	}
	r.duration_s = (double)ns / 1e9;
	r.p50_us = bench_lat_pct_us(&all, 50);
	r.p99_us = bench_lat_pct_us(&all, 99);
	bench_lat_fini(&all);
	bench_json_begin(stdout, &r);
	printf(",\"groups\":%u,\"slots\":%u,\"value_size\":%u,\"order\":\"",
	       o->groups, o->groups * 21, o->value_size);
	for (unsigned i = 0; i < o->nmodes; i++)
		printf("%s%s", i ? "," : "", m[o->order[i]].name);
	putchar('"');
	for (unsigned i = 0; i < o->nmodes; i++)
		report_mode(&m[o->order[i]]);
	const struct rz_mode *x = &m[LOCO_RACE_RESIZE_RTX];
	const struct rz_mode *y = &m[LOCO_RACE_RESIZE_CAS];
	if (x->splits && y->splits && x->ns)
		printf(",\"cas_over_rtx\":%.2f",
		       per(y->ns, y->splits) / per(x->ns, x->splits));
	bench_json_end(stdout);
}

static void mode_fini(struct rz_mode *m)
{
	bench_lat_fini(&m->lat);
	bench_lat_fini(&m->cpu);
	for (unsigned p = 0; p < LOCO_RACE_PHASES; p++)
		bench_lat_fini(&m->ph[p]);
}

static int run(void *arg, struct loco_mgr *mgr)
{
	struct rz *o = arg;
	struct rz_mode m[2] = { { .name = "rtx" }, { .name = "cas" } };
	int rc = 0;
	o->mgr = mgr;
	for (unsigned i = 0; !rc && i < o->nmodes; i++)
		rc = run_mode(o, o->order[i], &m[o->order[i]]);
	if (!rc)
		report(o, m);
	mode_fini(&m[0]);
	mode_fini(&m[1]);
	return rc;
}

int main(int argc, char **argv)
{
	static struct rz o = { .groups = 256, .splits = 8, .value_size = 8,
			       .nmodes = 2,
			       .order = { LOCO_RACE_RESIZE_RTX,
					  LOCO_RACE_RESIZE_CAS } };
	static const struct local_prog prog = {
		.name = "loco-race-resize", .usage = usage, .parse = parse,
		.run = run,
	};
	return local_main(&prog, &o, argc, argv);
}
