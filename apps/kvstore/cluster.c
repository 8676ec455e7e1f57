/* SPDX-License-Identifier: MIT */
#include "apps/kvstore/cluster.h"

#include <errno.h>

int cl_run_init(struct cl_run *r, struct loco_mgr *mgr, const char *name)
{
	int rc = loco_channel_init(&r->base, mgr, NULL, name, 0);
	if (rc)
		return rc;
	uint64_t members = r->base.participants |
			   UINT64_C(1) << loco_channel_self(&r->base);
	r->nodes = (unsigned)__builtin_popcountll(members);
	rc = loco_barrier_init(&r->bar, mgr, &r->base, "bar", 0);
	if (rc)
		goto fini_base;
	rc = loco_sst_init(&r->rows, mgr, &r->base, "rows", sizeof(struct cl_row),
			   0);
	if (rc)
		goto fini_bar;
	rc = loco_channel_join(&r->base);
	if (!rc)
		return 0;
	loco_sst_fini(&r->rows);
fini_bar:
	loco_barrier_fini(&r->bar);
fini_base:
	loco_channel_fini(&r->base);
	return rc;
}

void cl_run_fini(struct cl_run *r)
{
	loco_sst_fini(&r->rows);
	loco_barrier_fini(&r->bar);
	loco_channel_fini(&r->base);
}

int cl_run_sync(struct cl_run *r, struct loco_thread *thr, int timeout_ms)
{
	return loco_barrier_wait(&r->bar, thr, timeout_ms);
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

static void row_add(struct cl_row *sum, const struct cl_row *x)
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
		row_add(&sum, &x);
		lo = x.ops < lo ? x.ops : lo;
		hi = x.ops > hi ? x.ops : hi;
	}
	*out = sum;
	*min_ops = lo;
	*max_ops = hi;
	return 0;
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
