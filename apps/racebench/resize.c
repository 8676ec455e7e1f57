/* SPDX-License-Identifier: MIT */
/* loco-race-resize: how long a RACE split takes in each resize mode, side
 * by side in one run (docs/race.md, "Resize time").
 *
 * For each mode (rtx, then cas) a fresh table of one subtable of
 * --groups groups (21 slots a group) is filled by one client with 8-byte
 * keys until --splits splits happened. Each split is timed inside
 * race_split (the table's split_ns counter: the freeze or the moves, the
 * new subtables, the descriptors), and its round trips and verbs are the
 * client's thread counters over the insert that triggered it, less that
 * insert's own 3 round trips. One JSON line: the usual fields over every
 * split of both modes (ops = splits), then per mode the mean, p50 and p99
 * split time, round trips, verbs and items moved per split, and
 * "cas_over_rtx", the cas mode's mean split time over the rtx mode's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loco/channels/race/race.h>
#include "apps/common/bench.h"
#include "apps/common/local.h"
#include "apps/common/opts.h"

#define INSERT_RTTS 3

struct rz {
	unsigned groups, splits, value_size;
	unsigned modes;             /* bit per enum loco_race_resize */
	struct loco_mgr *mgr;
};

struct rz_mode {
	const char *name;
	uint64_t splits, ns, rtts, verbs, moved;
	struct bench_lat lat;
	struct loco_stats st;
};

static void usage(FILE *f)
{
	fputs("usage: loco-race-resize [--groups G] [--splits N] [--value-size B]\n"
	      "                        [--modes rtx,cas] (plus node options)\n"
	      "  --groups G      bucket groups per subtable (default 256: 5376 slots)\n"
	      "  --splits N      splits timed per mode (default 8)\n"
	      "  --value-size B  value bytes (default 8)\n"
	      "  --modes LIST    rtx, cas or both (default rtx,cas)\n"
	      "Fills a fresh table per mode with one client until N splits\n"
	      "happened; prints one JSON line with both modes' split times.\n", f);
}

static int parse_modes(struct rz *o, const char *arg, char *expect)
{
	o->modes = 0;
	for (const char *p = arg; *p;) {
		size_t n = strcspn(p, ",");
		if (n == 3 && !strncmp(p, "rtx", 3))
			o->modes |= 1u << LOCO_RACE_RESIZE_RTX;
		else if (n == 3 && !strncmp(p, "cas", 3))
			o->modes |= 1u << LOCO_RACE_RESIZE_CAS;
		else {
			snprintf(expect, BENCH_EXPECT_MAX, "rtx, cas or rtx,cas");
			return -1;
		}
		p += n + (p[n] == ',');
	}
	return o->modes ? 0 : -1;
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

/* Insert key K and account the split it triggered, if any. */
static int insert_one(struct loco_race_client *c, struct loco_thread *thr,
		      uint64_t k, const void *val, uint32_t vlen,
		      struct rz_mode *m)
{
	struct loco_race_stats a, b;
	struct loco_stats s0, s1;
	loco_race_client_stats(c, &a);
	loco_thread_stats(thr, &s0);
	int rc = loco_race_insert(c, &k, sizeof(k), val, vlen);
	loco_thread_stats(thr, &s1);
	loco_race_client_stats(c, &b);
	if (rc || b.splits == a.splits)
		return rc;
	uint64_t ns = (b.split_ns - a.split_ns) / (b.splits - a.splits);
	struct loco_stats d = s1;
	bench_stats_sub(&d, &s0);
	m->splits += b.splits - a.splits;
	m->ns += b.split_ns - a.split_ns;
	m->rtts += d.rtts > INSERT_RTTS ? d.rtts - INSERT_RTTS : 0;
	m->verbs += loco_stats_verbs(&d);
	m->moved += b.moved - a.moved;
	bench_stats_add(&m->st, &d);
	bench_lat_add(&m->lat, ns);
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

static void report(struct rz *o, struct rz_mode *m, unsigned nm)
{
	struct bench_result r = { .app = "race-resize",
				  .transport = loco_mgr_transport(o->mgr),
				  .nodes = 1, .threads = 1 };
	struct bench_lat all;
	uint64_t ns = 0;
	bench_lat_init(&all, 2 * o->splits + 64);
	for (unsigned i = 0; i < nm; i++) {
		r.ops += m[i].splits;
		ns += m[i].ns;
		bench_stats_add(&r.stats, &m[i].st);
		bench_lat_append(&all, &m[i].lat);
	}
	r.duration_s = (double)ns / 1e9;
	r.p50_us = bench_lat_pct_us(&all, 50);
	r.p99_us = bench_lat_pct_us(&all, 99);
	bench_lat_fini(&all);
	bench_json_begin(stdout, &r);
	printf(",\"groups\":%u,\"slots\":%u,\"value_size\":%u", o->groups,
	       o->groups * 21, o->value_size);
	double mean[2] = { 0, 0 };
	for (unsigned i = 0; i < nm; i++) {
		const struct rz_mode *x = &m[i];
		mean[i] = per(x->ns, x->splits) / 1e3;
		printf(",\"%s_splits\":%llu,\"%s_split_us\":%.1f,\"%s_p50_us\":%.1f,"
		       "\"%s_p99_us\":%.1f,\"%s_rtts_per_split\":%.1f,"
		       "\"%s_verbs_per_split\":%.1f,\"%s_moved_per_split\":%.1f",
		       x->name, (unsigned long long)x->splits, x->name, mean[i],
		       x->name, bench_lat_pct_us(&m[i].lat, 50), x->name,
		       bench_lat_pct_us(&m[i].lat, 99), x->name,
		       per(x->rtts, x->splits), x->name, per(x->verbs, x->splits),
		       x->name, per(x->moved, x->splits));
		printf(",\"%s_reads_per_split\":%.1f,\"%s_writes_per_split\":%.1f,"
		       "\"%s_cas_per_split\":%.1f,\"%s_faa_per_split\":%.1f",
		       x->name, per(x->st.reads, x->splits), x->name,
		       per(x->st.writes, x->splits), x->name,
		       per(x->st.cas, x->splits), x->name,
		       per(x->st.faa, x->splits));
	}
	if (nm == 2 && mean[0] > 0)
		printf(",\"cas_over_rtx\":%.2f", mean[1] / mean[0]);
	bench_json_end(stdout);
}

static int run(void *arg, struct loco_mgr *mgr)
{
	struct rz *o = arg;
	struct rz_mode m[2] = { { .name = "rtx" }, { .name = "cas" } };
	struct rz_mode done[2];
	unsigned nm = 0;
	int rc = 0;
	o->mgr = mgr;
	for (unsigned mode = 0; !rc && mode < 2; mode++) {
		if (!(o->modes & 1u << mode))
			continue;
		rc = run_mode(o, (enum loco_race_resize)mode, &m[mode]);
		done[nm++] = m[mode];
	}
	if (!rc)
		report(o, done, nm);
	bench_lat_fini(&m[0].lat);   /* done[] shares their samples */
	bench_lat_fini(&m[1].lat);
	return rc;
}

int main(int argc, char **argv)
{
	static struct rz o = { .groups = 256, .splits = 8, .value_size = 8,
			       .modes = 3 };
	static const struct local_prog prog = {
		.name = "loco-race-resize", .usage = usage, .parse = parse,
		.run = run,
	};
	return local_main(&prog, &o, argc, argv);
}
