/* SPDX-License-Identifier: MIT */
#include "apps/common/pool.h"
#include "apps/common/opts.h"

#include <errno.h>
#include <loco/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LAT_CAP (1u << 20)          /* samples kept per worker */
#define PROGRESS_NS 1000000000ull

int bench_pool_init(struct bench_pool *p, uint32_t host)
{
	int rc = loco_thread_create(p->mgr, &p->thr);
	if (rc)
		return rc;
	rc = loco_atomic_var_init_ex(&p->total, p->mgr, NULL, "total", host, 0,
				     LOCO_REGION_REMOTE_READ |
				     LOCO_REGION_REMOTE_ATOMIC);
	if (rc)
		goto destroy_thr;
	rc = loco_barrier_init(&p->bar, p->mgr, NULL, "bar", 0);
	if (!rc)
		return 0;
	loco_atomic_var_fini(&p->total);
destroy_thr:
	loco_thread_destroy(p->thr);
	return rc;
}

void bench_pool_fini(struct bench_pool *p)
{
	loco_barrier_fini(&p->bar);
	loco_atomic_var_fini(&p->total);
	loco_thread_destroy(p->thr);
}

/* ---- workers ------------------------------------------------------------ */

static void *worker_main(void *arg)
{
	struct bench_worker *w = arg;
	struct bench_pool *p = w->p;
	struct loco_thread *thr;
	w->err = loco_thread_create(p->mgr, &thr);
	unsigned spins = 0;
	/* Acquire: pairs with the release in workers_run (end_ns). */
	while (!atomic_load_explicit(&p->go, memory_order_acquire))
		loco_backoff(&spins);
	if (w->err)
		return NULL;
	uint64_t now = loco_now_ns();
	for (uint64_t k = 0; !w->err && now < p->end_ns; k++) {
		uint64_t t0 = now;
		int rc = p->op(p->arg, thr, w->idx, k);
		now = loco_now_ns();
		bench_lat_add(&w->lat, now - t0);
		if (rc == 1)
			w->empty++;
		else if (!rc)
			/* Relaxed: a counter the main thread samples for progress. */
			atomic_fetch_add_explicit(&w->ops, 1, memory_order_relaxed);
		else
			w->err = rc;
	}
	loco_thread_stats(thr, &w->st);
	int rc = loco_thread_destroy(thr);
	if (!w->err)
		w->err = rc;
	return NULL;
}

static uint64_t ops_of(struct bench_worker *w)
{
	/* Relaxed: progress, and totals after the join. */
	return atomic_load_explicit(&w->ops, memory_order_relaxed);
}

static void progress(struct bench_pool *p)
{
	while (loco_now_ns() + PROGRESS_NS < p->end_ns) {
		struct timespec ts = { 1, 0 };
		uint64_t sum = 0;
		nanosleep(&ts, NULL);
		for (unsigned i = 0; i < p->threads; i++)
			sum += ops_of(&p->w[i]);
		fprintf(stderr, "%s: node %u: %llu ops\n", p->name,
			loco_mgr_id(p->mgr), (unsigned long long)sum);
	}
}

/* Start the workers together, print progress each second, join them. */
static int workers_run(struct bench_pool *p)
{
	unsigned n = p->threads, started = 0;
	int rc = 0;
	for (unsigned i = 0; i < n && !rc; i++) {
		p->w[i] = (struct bench_worker){ .p = p, .idx = i };
		rc = bench_lat_init(&p->w[i].lat, LAT_CAP);
	}
	for (; started < n && !rc; started++)
		if (pthread_create(&p->w[started].tid, NULL, worker_main,
				   &p->w[started]))
			rc = -EAGAIN;
	p->end_ns = rc ? 0 : loco_now_ns() + (uint64_t)(p->duration * 1e9);
	/* Release: pairs with the acquire in worker_main. */
	atomic_store_explicit(&p->go, true, memory_order_release);
	progress(p);
	for (unsigned i = 0; i < started; i++) {
		pthread_join(p->w[i].tid, NULL);
		rc = rc ? rc : p->w[i].err;
	}
	return rc;
}

/* ---- the run -------------------------------------------------------------- */

int bench_pool_run(struct bench_pool *p)
{
	p->w = calloc(p->threads, sizeof(*p->w));
	if (!p->w)
		return -ENOMEM;
	int rc = loco_mgr_wait_ready(p->mgr, -1);
	if (!rc)
		rc = loco_barrier_wait(&p->bar, p->thr, -1);
	uint64_t t0 = loco_now_ns();
	if (!rc)
		rc = workers_run(p);
	double secs = (double)(loco_now_ns() - t0) / 1e9;
	if (!rc)
		p->report(p->arg, secs);
	for (unsigned i = 0; i < p->threads; i++)
		bench_lat_fini(&p->w[i].lat);
	free(p->w);
	p->w = NULL;
	/* Nobody leaves while others still use its memory. */
	int brc = loco_barrier_wait(&p->bar, p->thr, -1);
	return rc ? rc : brc;
}

/* ---- results -------------------------------------------------------------- */

int bench_pool_result(struct bench_pool *p, struct bench_result *r)
{
	struct bench_lat all;
	size_t n = 0;
	for (unsigned i = 0; i < p->threads; i++)
		n += p->w[i].lat.n;
	if (bench_lat_init(&all, n ? n : 1))
		return -ENOMEM;
	for (unsigned i = 0; i < p->threads; i++) {
		r->ops += ops_of(&p->w[i]);
		bench_stats_add(&r->stats, &p->w[i].st);
		bench_lat_append(&all, &p->w[i].lat);
	}
	r->p50_us = bench_lat_pct_us(&all, 50);
	r->p99_us = bench_lat_pct_us(&all, 99);
	bench_lat_fini(&all);
	return 0;
}

uint64_t bench_pool_empty(const struct bench_pool *p)
{
	uint64_t n = 0;
	for (unsigned i = 0; i < p->threads; i++)
		n += p->w[i].empty;
	return n;
}

int bench_pool_total(struct bench_pool *p, uint64_t ops, uint64_t *sum)
{
	uint64_t old;
	int rc = loco_atomic_var_faa(&p->total, p->thr, ops, &old);
	if (!rc)
		rc = loco_barrier_wait(&p->bar, p->thr, -1);
	return rc ? rc : loco_atomic_var_read(&p->total, p->thr, sum);
}

int bench_pool_opt(int c, const char *s, unsigned *threads, double *duration,
		   char *expect)
{
	if (c == 'd')
		return bench_parse_duration(s, duration, expect);
	return c == 't' ? bench_parse_uint(s, 1, 64, threads, expect) : 1;
}
