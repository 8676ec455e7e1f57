/* SPDX-License-Identifier: MIT */
#include "apps/common/bench.h"

#include <errno.h>
#include <stdlib.h>

int bench_lat_init(struct bench_lat *l, size_t cap)
{
	l->ns = malloc(cap * sizeof(*l->ns));
	l->n = 0;
	l->cap = l->ns ? cap : 0;
	return l->ns ? 0 : -ENOMEM;
}

void bench_lat_fini(struct bench_lat *l)
{
	free(l->ns);
	l->ns = NULL;
	l->n = l->cap = 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

double bench_lat_pct_us(struct bench_lat *l, double p)
{
	if (!l->n)
		return 0;
	qsort(l->ns, l->n, sizeof(*l->ns), cmp_u64);
	size_t i = (size_t)(p / 100.0 * (double)(l->n - 1) + 0.5);
	return (double)l->ns[i] / 1000.0;
}

void bench_lat_append(struct bench_lat *dst, const struct bench_lat *src)
{
	for (size_t k = 0; k < src->n; k++)
		bench_lat_add(dst, src->ns[k]);
}

void bench_json_begin(FILE *f, const struct bench_result *r)
{
	double ops = r->ops ? (double)r->ops : 1;
	fprintf(f, "{\"app\":\"%s\",\"transport\":\"%s\",\"nodes\":%u,"
		"\"threads\":%u,\"duration_s\":%.3f,\"ops\":%llu,"
		"\"ops_per_s\":%.1f,\"p50_us\":%.2f,\"p99_us\":%.2f,"
		"\"verbs_per_op\":%.3f,\"rtts_per_op\":%.3f",
		r->app, r->transport, r->nodes, r->threads, r->duration_s,
		(unsigned long long)r->ops,
		r->duration_s > 0 ? (double)r->ops / r->duration_s : 0.0,
		r->p50_us, r->p99_us,
		(double)loco_stats_verbs(&r->stats) / ops,
		(double)r->stats.rtts / ops);
}

void bench_json_dm(FILE *f, struct loco_mgr *mgr, bool hot)
{
	uint64_t total = 0, used = 0;
	loco_mgr_dm_usage(mgr, &total, &used);
	fprintf(f, ",\"hot_locks\":%s,\"dm_total\":%llu,\"dm_used\":%llu",
		hot ? "true" : "false", (unsigned long long)total,
		(unsigned long long)used);
}

void bench_json_end(FILE *f)
{
	fputs("}\n", f);
	fflush(f);
}

uint64_t bench_members(const struct loco_mgr *mgr)
{
	return loco_mgr_compute_peers(mgr) | UINT64_C(1) << loco_mgr_id(mgr);
}

void bench_stats_add(struct loco_stats *d, const struct loco_stats *s)
{
	d->reads += s->reads;
	d->writes += s->writes;
	d->cas += s->cas;
	d->faa += s->faa;
	d->bytes_read += s->bytes_read;
	d->bytes_written += s->bytes_written;
	d->doorbells += s->doorbells;
	d->rtts += s->rtts;
	d->fences += s->fences;
}

void bench_stats_sub(struct loco_stats *d, const struct loco_stats *s)
{
	d->reads -= s->reads;
	d->writes -= s->writes;
	d->cas -= s->cas;
	d->faa -= s->faa;
	d->bytes_read -= s->bytes_read;
	d->bytes_written -= s->bytes_written;
	d->doorbells -= s->doorbells;
	d->rtts -= s->rtts;
	d->fences -= s->fences;
}
