/* SPDX-License-Identifier: MIT */
/* Shared pieces of the benchmark programs: latency samples, the final
 * JSON result line (its fields: docs/demos.md, "Result lines") and the
 * compute nodes. */
#ifndef LOCO_APPS_BENCH_H
#define LOCO_APPS_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <loco/loco.h>

struct bench_lat {
	uint64_t *ns;
	size_t n, cap;
};

int bench_lat_init(struct bench_lat *l, size_t cap);
void bench_lat_fini(struct bench_lat *l);
/* Keeps the first CAP samples. */
static inline void bench_lat_add(struct bench_lat *l, uint64_t ns)
{
	if (l->n < l->cap)
		l->ns[l->n++] = ns;
}
/* Percentile P (0..100) in microseconds; sorts the samples. 0 if none. */
double bench_lat_pct_us(struct bench_lat *l, double p);
/* Add SRC's samples to DST (up to DST's capacity). */
void bench_lat_append(struct bench_lat *dst, const struct bench_lat *src);

struct bench_result {
	const char *app;
	const char *transport;
	unsigned nodes, threads;
	double duration_s;
	uint64_t ops;
	double p50_us, p99_us;
	struct loco_stats stats;   /* counted over the measured ops */
};

/* Print `{"app":...,"rtts_per_op":X` without the closing brace, so callers
 * append their own fields and then call bench_json_end. */
void bench_json_begin(FILE *f, const struct bench_result *r);
void bench_json_end(FILE *f);
/* Append `,"hot_locks":HOT,"dm_total":T,"dm_used":U`: whether hot
 * (device-memory) locks were asked for, and this node's device memory
 * (bytes; 0 and 0 without, as on shm). */
void bench_json_dm(FILE *f, struct loco_mgr *mgr, bool hot);

/* D += S and D -= S, field by field (S taken before: a difference). */
void bench_stats_add(struct loco_stats *d, const struct loco_stats *s);
void bench_stats_sub(struct loco_stats *d, const struct loco_stats *s);

/* The compute nodes, this one included, as a mask of node ids. */
uint64_t bench_members(const struct loco_mgr *mgr);

#endif
