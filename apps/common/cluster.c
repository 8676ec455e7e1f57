/* SPDX-License-Identifier: MIT */
#include "apps/common/cluster.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <time.h>

/* The final barrier waits in rounds this long, looking for fenced
 * participants between them. */
#define FINISH_ROUND_MS 200

int cl_run_init(struct cl_run *r, struct loco_mgr *mgr, const char *name)
{
	int rc = loco_channel_init(&r->base, mgr, NULL, name, 0, NULL);
	if (rc)
		return rc;
	uint64_t members = r->base.participants |
			   UINT64_C(1) << loco_channel_self(&r->base);
	r->nodes = (unsigned)__builtin_popcountll(members);
	rc = loco_barrier_init(&r->bar, mgr, &r->base, "bar", 0);
	if (!rc)
		rc = loco_sst_init(&r->rows, mgr, &r->base, "rows",
				   sizeof(struct cl_row), 0);
	if (!rc)
		rc = loco_channel_join(&r->base);
	if (rc)
		loco_channel_fini(&r->base);  /* and the barrier, the rows */
	return rc;
}

void cl_run_fini(struct cl_run *r)
{
	loco_channel_fini(&r->base);
}

static bool any_fenced(struct cl_run *r);

/* The barrier in rounds of FINISH_ROUND_MS (an arrival stands across
 * rounds), looking for fenced participants between them. */
int cl_run_sync(struct cl_run *r, struct loco_thread *thr, int timeout_ms)
{
	uint64_t end = loco_now_ns() + (uint64_t)timeout_ms * 1000000u;
	for (;;) {
		uint64_t now = loco_now_ns();
		uint64_t left = now < end ? (end - now) / 1000000u : 0;
		int rc = loco_barrier_wait(&r->bar, thr, left < FINISH_ROUND_MS ?
					   (int)left : FINISH_ROUND_MS);
		if (rc != -ETIMEDOUT)
			return rc;
		if (any_fenced(r))
			return -ESRCH;
		if (loco_now_ns() >= end)
			return -ETIMEDOUT;
	}
}

int cl_run_publish(struct cl_run *r, struct loco_thread *thr,
		   const struct cl_row *mine, int timeout_ms)
{
	struct loco_ack ack = { 0, 0 };
	loco_sst_store_mine(&r->rows, mine);
	int rc = loco_sst_push_broadcast(&r->rows, thr, LOCO_PUSH_PLACE, &ack);
	if (!rc)
		rc = loco_ack_wait(thr, &ack, -1);
	return rc ? rc : cl_run_sync(r, thr, timeout_ms);
}

void cl_row_add(struct cl_row *sum, const struct cl_row *x)
{
	sum->ops += x->ops;
	sum->dur_ns = x->dur_ns > sum->dur_ns ? x->dur_ns : sum->dur_ns;
	sum->p50_ns = x->p50_ns > sum->p50_ns ? x->p50_ns : sum->p50_ns;
	sum->p99_ns = x->p99_ns > sum->p99_ns ? x->p99_ns : sum->p99_ns;
	sum->reads += x->reads;
	sum->writes += x->writes;
	sum->cas += x->cas;
	sum->faa += x->faa;
	sum->rtts += x->rtts;
	for (unsigned i = 0; i < CL_EXTRA; i++)
		sum->extra[i] += x->extra[i];
}

int cl_run_sum(struct cl_run *r, struct cl_row *out, uint64_t *min_ops,
	       uint64_t *max_ops)
{
	struct cl_row sum = { 0 };
	uint64_t lo = UINT64_MAX, hi = 0;
	uint64_t members = r->base.participants |
			   UINT64_C(1) << loco_channel_self(&r->base);
	for (; members; members &= members - 1) {
		struct cl_row x;
		/* Acquire (inside the load): pairs with the node's release
		 * store of its row, pushed and placed before its arrival. */
		int rc = loco_sst_load(&r->rows, (uint32_t)__builtin_ctzll(members),
				       &x);
		if (rc)
			return rc;
		cl_row_add(&sum, &x);
		lo = x.ops < lo ? x.ops : lo;
		hi = x.ops > hi ? x.ops : hi;
	}
	*out = sum;
	*min_ops = lo;
	*max_ops = hi;
	return 0;
}

/* A participant found fenced (by this node or another): it may never
 * arrive. */
static bool any_fenced(struct cl_run *r)
{
	for (uint64_t m = r->base.participants; m; m &= m - 1)
		if (loco_peer_fenced(r->base.mgr, (uint32_t)__builtin_ctzll(m)))
			return true;
	return false;
}

int cl_run_finish(struct cl_run *r, struct loco_thread *thr,
		  const struct cl_row *mine, int timeout_ms,
		  cl_report_fn *report, void *arg)
{
	int rc = cl_run_publish(r, thr, mine, timeout_ms);
	report(arg, mine, NULL);
	if (rc == -ESRCH) {
		fprintf(stderr, "loco: node %u: a node was fenced during the "
			"run: no cluster line (its row is not there)\n",
			loco_channel_self(&r->base));
		return 0;
	}
	struct cl_row sum;
	uint64_t spread[2];
	if (!rc && cl_run_leader(r) &&
	    !(rc = cl_run_sum(r, &sum, &spread[0], &spread[1])))
		report(arg, &sum, spread);
	return rc;
}

bool cl_run_leader(const struct cl_run *r)
{
	uint64_t lower = (UINT64_C(1) << loco_channel_self(&r->base)) - 1;
	return !(r->base.participants & lower);
}

void cl_row_verbs(struct cl_row *row, const struct loco_stats *a,
		  const struct loco_stats *b)
{
	row->reads = b->reads - a->reads;
	row->writes = b->writes - a->writes;
	row->cas = b->cas - a->cas;
	row->faa = b->faa - a->faa;
	row->rtts = b->rtts - a->rtts;
}

void cl_row_lat(struct cl_row *row, struct bench_lat *lat)
{
	row->p50_ns = (uint64_t)(bench_lat_pct_us(lat, 50) * 1000);
	row->p99_ns = (uint64_t)(bench_lat_pct_us(lat, 99) * 1000);
}

void cl_json_begin(FILE *f, struct bench_result *r, const struct cl_row *row,
		   const uint64_t *cluster, uint32_t node)
{
	r->duration_s = (double)row->dur_ns / 1e9;
	r->ops = row->ops;
	r->p50_us = (double)row->p50_ns / 1000;
	r->p99_us = (double)row->p99_ns / 1000;
	r->stats = (struct loco_stats){ .reads = row->reads, .writes = row->writes,
					.cas = row->cas, .faa = row->faa,
					.rtts = row->rtts };
	bench_json_begin(f, r);
	if (cluster)
		fprintf(f, ",\"scope\":\"cluster\",\"clients\":%u,"
			"\"min_node_ops\":%" PRIu64 ",\"max_node_ops\":%" PRIu64,
			r->nodes * r->threads, cluster[0], cluster[1]);
	else
		fprintf(f, ",\"scope\":\"node\",\"node\":%u", node);
}

void cl_progress_run(const struct cl_progress *p, uint64_t t0)
{
	uint64_t last_ns = t0, last_ops = 0;
	/* loco-run aims its faults at this line (ID@after:NODE:...). */
	fprintf(stderr, "%s: node %u: measured phase begins\n", p->name,
		p->node);
	/* Acquire: pairs with each worker's release increment of *done. */
	while (atomic_load_explicit(p->done, memory_order_acquire) < p->threads) {
		struct timespec ts = { 0, 50000000 };
		nanosleep(&ts, NULL);
		uint64_t now = loco_now_ns();
		if (now - last_ns < 1000000000u)
			continue;
		uint64_t ops = 0;
		for (unsigned i = 0; i < p->threads; i++)
			/* Relaxed: a progress counter. */
			ops += atomic_load_explicit((const _Atomic uint64_t *)
				((const char *)p->ops + i * p->stride),
				memory_order_relaxed);
		fprintf(stderr, "%s: node %u: %.0f s, %.0f %s/s\n", p->name,
			p->node, (double)(now - t0) / 1e9,
			(double)(ops - last_ops) * 1e9 / (double)(now - last_ns),
			p->unit);
		last_ns = now;
		last_ops = ops;
	}
}
