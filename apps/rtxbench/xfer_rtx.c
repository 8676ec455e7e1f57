/* SPDX-License-Identifier: MIT */
/* The rTX workload of loco-rtx-transfer: accounts are TXObjs, each
 * transfer is one rTX over two random accounts; the reporter repairs what
 * dead nodes left, adopts their thread slots (allocation), audits the
 * data pool and sums the balances. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "apps/rtxbench/xfer.h"

#define SUM_GROUP 32

static uint64_t memory_nodes(struct loco_mgr *mgr)
{
	const struct loco_hosts *h = loco_mgr_hosts(mgr);
	uint64_t m = 0;
	for (uint32_t id = 0; id <= h->max_id; id++)
		if (h->node[id].present && h->node[id].role == LOCO_ROLE_MEMORY)
			m |= UINT64_C(1) << id;
	return m;
}

/* --count-commits: one commit counter object per (node, thread) after
 * the accounts of the first hosting node. */
#define COUNTERS (LOCO_MAX_NODES * XFER_MAX_THREADS)

static uint32_t per_node(const struct xfer *xf, unsigned nmem)
{
	return (xf->o.accounts + nmem - 1) / nmem;
}

/* The commit counter of thread IDX of node NODE. */
static loco_raddr_t counter_obj(const struct xfer *xf, uint32_t node,
				unsigned idx)
{
	uint64_t nodes = loco_rtx_nodes(xf->rtx);
	unsigned nmem = (unsigned)__builtin_popcountll(nodes);
	return loco_rtx_obj(xf->rtx, (uint32_t)__builtin_ctzll(nodes),
			    per_node(xf, nmem) + node * XFER_MAX_THREADS + idx);
}

/* --blocks' default: 8 a account object, at least 4,096 (the library's
 * default), and at least 3 chunks a worker thread of the cluster: each
 * worker holds chunks of its own, and with fewer than about 2 a worker
 * on a busy host waits out the others' give-backs and fails with
 * -ENOMEM (93 workers ran out of 125 chunks with the default). Every
 * node computes the same from the same options and hosts file. */
static uint32_t default_blocks(const struct xfer *xf, uint64_t objects)
{
	uint64_t nodes = 1 + (uint64_t)__builtin_popcountll(
		loco_mgr_compute_peers(xf->mgr));
	uint64_t b = objects * 8, min = 64 * LOCO_RTX_CHUNK_BLOCKS;
	uint64_t per_worker = 3 * LOCO_RTX_CHUNK_BLOCKS * nodes * xf->o.threads;
	b = b < min ? min : b;
	b = b < per_worker ? per_worker : b;
	return (uint32_t)(b > UINT32_MAX / 2 ? UINT32_MAX / 2 : b);
}

int xfer_rtx_open(struct xfer *xf)
{
	uint64_t mem = xf->o.all_mem ? memory_nodes(xf->mgr) : 0;
	unsigned nmem = mem ? (unsigned)__builtin_popcountll(mem) : 1;
	uint64_t objects = per_node(xf, nmem) +
			   (xf->o.count_commits ? COUNTERS : 0);
	struct loco_rtx_opts o = {
		.name = "xfer", .mem_nodes = mem, .data_len = 8,
		.objects = objects,
		.blocks = xf->o.blocks ? xf->o.blocks :
			  default_blocks(xf, objects),
		.drift_ms = xf->o.drift_ms,
		.no_opt1 = xf->o.no_opt1, .no_persist = xf->o.no_persist,
		.threads_per_node = XFER_SLOTS(xf->o.threads),
	};
	int rc = loco_rtx_create(xf->mgr, &o, &xf->rtx);
	xf->acct = rc ? NULL : calloc(xf->o.accounts, sizeof(*xf->acct));
	if (!rc && !xf->acct)
		rc = -ENOMEM;
	uint64_t nodes = rc ? 0 : loco_rtx_nodes(xf->rtx);
	uint32_t ids[LOCO_MAX_NODES], n = 0;
	xf->mem = nodes;
	for (uint64_t m = nodes; m; m &= m - 1)
		ids[n++] = (uint32_t)__builtin_ctzll(m);
	for (uint32_t i = 0; !rc && i < xf->o.accounts; i++)
		xf->acct[i] = loco_rtx_obj(xf->rtx, ids[i % n], i / n);
	return rc;
}

void xfer_rtx_close(struct xfer *xf)
{
	free(xf->acct);
	loco_rtx_destroy(xf->rtx);
}

/* Give account I its opening balance unless someone already did. */
static int init_one(struct xfer *xf, struct loco_rtx_worker *w, uint32_t i)
{
	int rc;
	LOCO_RTX_BLOCK(w, rc) {
		const void *p;
		if ((rc = loco_rtx_read(w, xf->acct[i], &p)) || p)
			continue;
		rc = loco_rtx_write(w, xf->acct[i], &xf->o.balance);
	}
	return rc;
}

static enum loco_rtx_cc prelock_all(void *arg, loco_raddr_t obj, bool write)
{
	(void)arg;
	(void)obj;
	(void)write;
	return LOCO_RTX_CC_PRELOCK;
}

/* A repair for thread slot OWNER, counted by the owner's node. */
static void count_repair(void *arg, uint32_t owner)
{
	struct xfer *xf = arg;
	uint32_t node = owner / loco_rtx_threads_per_node(xf->rtx);
	if (node < LOCO_MAX_NODES)
		/* Relaxed: a counter, published by the heartbeat's WRITE. */
		atomic_fetch_add_explicit(&xf->live_repairs_of[node], 1,
					  memory_order_relaxed);
}

static const struct loco_rtx_hooks run_hooks = { .repaired = count_repair };
static const struct loco_rtx_hooks prelock_hooks = {
	.classify = prelock_all, .repaired = count_repair,
};

/* Own share first, then every account (a node that died while
 * initialising its share leaves it to the others). A node that starts
 * late repairs here what the dead left on the accounts: counted by owner
 * like the run's repairs (the run's hooks). */
int xfer_rtx_init(struct xfer *xf, struct loco_rtx_worker *w)
{
	loco_rtx_set_hooks(w, &run_hooks, xf);
	unsigned k = (unsigned)__builtin_popcountll(
		xf->compute & ((UINT64_C(1) << xf->self) - 1));
	unsigned c = (unsigned)__builtin_popcountll(xf->compute);
	int rc = 0;
	for (uint32_t i = k; !rc && i < xf->o.accounts; i += c)
		rc = init_one(xf, w, i);
	for (uint32_t i = 0; !rc && i < xf->o.accounts; i++)
		rc = init_one(xf, w, i);
	return rc;
}

/* --count-commits: add one to the worker's commit counter CTR in the
 * open transaction (CTR is LOCO_RADDR_NULL without the option). */
static int count_commit(struct loco_rtx_worker *w, loco_raddr_t ctr)
{
	const uint64_t *pc;
	if (ctr == LOCO_RADDR_NULL)
		return 0;
	int rc = loco_rtx_read(w, ctr, (const void **)&pc);
	uint64_t n = (!rc && pc ? *pc : 0) + 1;
	return rc ? rc : loco_rtx_write(w, ctr, &n);
}

/* --update names the write set at the read: both accounts and the
 * commit counter, if any. */
static int read_accounts(struct xfer *xf, struct loco_rtx_worker *w,
			 const loco_raddr_t *obj, loco_raddr_t ctr,
			 const void **v)
{
	if (!xf->o.update)
		return loco_rtx_read_many(w, 2, obj, v);
	loco_raddr_t all[3] = { obj[0], obj[1], ctr };
	return loco_rtx_read_for_update(w, ctr == LOCO_RADDR_NULL ? 2 : 3,
					all, v);
}

static int transfer(struct xfer *xf, struct loco_rtx_worker *w,
		    loco_raddr_t ctr, uint32_t a, uint32_t b, uint64_t amount)
{
	int rc;
	loco_raddr_t obj[2] = { xf->acct[a], xf->acct[b] };
	LOCO_RTX_BLOCK(w, rc) {
		const void *v[3];
		if ((rc = read_accounts(xf, w, obj, ctr, v)) || !v[0] || !v[1])
			continue;
		const uint64_t *pa = v[0], *pb = v[1];
		uint64_t m = amount < *pa ? amount : *pa;
		uint64_t na = *pa - m, nb = *pb + m;
		if (!(rc = loco_rtx_write(w, xf->acct[a], &na)) &&
		    !(rc = loco_rtx_write(w, xf->acct[b], &nb)))
			rc = count_commit(w, ctr);
	}
	return rc;
}

/* Rewrite account A as it is: a one-object write set (OPT1). */
static int touch(struct xfer *xf, struct loco_rtx_worker *w,
		 loco_raddr_t ctr, uint32_t a)
{
	int rc;
	LOCO_RTX_BLOCK(w, rc) {
		const uint64_t *pa;
		if ((rc = loco_rtx_read(w, xf->acct[a], (const void **)&pa)) ||
		    !pa)
			continue;
		uint64_t v = *pa;
		if (!(rc = loco_rtx_write(w, xf->acct[a], &v)))
			rc = count_commit(w, ctr);
	}
	return rc;
}

static uint64_t met_locks(const struct loco_rtx_stats *s)
{
	return s->lock_waits + s->repair_waits + s->repairs;
}

/* The worker's counters before and after a transfer: the after of one
 * is the before of the next, so the two swap roles instead of being
 * copied. */
struct op_stats {
	struct loco_rtx_stats s[2];
	unsigned before;           /* index of the counters before */
};

static void op_stats_init(struct op_stats *st, struct loco_rtx_worker *w)
{
	st->before = 0;
	loco_rtx_worker_stats(w, &st->s[0]);
}

/* One transfer with its bookkeeping. */
static int one_op(struct xfer *xf, struct loco_rtx_worker *w,
		  loco_raddr_t ctr, struct xfer_wstats *ws, uint64_t *rng,
		  struct op_stats *st)
{
	const struct loco_rtx_stats *s0 = &st->s[st->before];
	struct loco_rtx_stats *s1 = &st->s[st->before ^ 1];
	uint32_t n = xf->o.accounts, a = (uint32_t)(xfer_rng(rng) % n);
	uint32_t b = (uint32_t)(xfer_rng(rng) % (n - 1));
	b += b >= a;
	uint64_t amount = 1 + xfer_rng(rng) % xf->o.max_amount;
	/* No fourth draw without --touch-pct: the lock mode's loop draws
	 * three numbers a transfer too. */
	bool one = xf->o.touch_pct && xfer_rng(rng) % 100 < xf->o.touch_pct;
	uint64_t t0 = loco_now_ns();
	int rc = one ? touch(xf, w, ctr, a) : transfer(xf, w, ctr, a, b, amount);
	uint64_t t1 = loco_now_ns();
	loco_rtx_worker_stats(w, s1);
	st->before ^= 1;
	ws->aborts += s1->aborts - s0->aborts;
	ws->lock_waits += s1->lock_waits - s0->lock_waits;
	ws->repairs += s1->repairs - s0->repairs;
	/* Relaxed: a counter for the heartbeats (a locked add only when it
	 * changes, as in the lock mode's loop, which has none). */
	if (s1->repairs != s0->repairs)
		atomic_fetch_add_explicit(&xf->live_repairs,
					  s1->repairs - s0->repairs,
					  memory_order_relaxed);
	if (rc)
		return rc;
	ws->ops++;
	ws->acked += ctr != LOCO_RADDR_NULL;
	/* Relaxed: a counter for the heartbeats. */
	if (ctr != LOCO_RADDR_NULL)
		atomic_fetch_add_explicit(&xf->live_acked, 1,
					  memory_order_relaxed);
	bench_lat_add(&ws->lat, t1 - t0);
	if (met_locks(s1) != met_locks(s0)) {
		ws->blocked++;
		bench_lat_add(&ws->blocked_lat, t1 - t0);
	}
	uint64_t now_us = xfer_realtime_us();
	if (s1->repairs != s0->repairs) {
		ws->stalls++;
		bench_lat_add(&ws->stall_lat, t1 - t0);
		if (!ws->repair_end_us)
			ws->repair_end_us = now_us;
	}
	xfer_tick(xf, now_us / 1000u);
	return 0;
}

/* A worker for THR (its slot settled: the log repaired, the chunks
 * adopted), with the run's hooks. */
static int worker_start(struct xfer *xf, struct loco_thread *thr,
			struct loco_rtx_worker **w)
{
	int rc = loco_rtx_worker_create(xf->rtx, thr, w);
	if (!rc)
		loco_rtx_set_hooks(*w, xf->o.prelock ? &prelock_hooks :
				   &run_hooks, xf);
	return rc;
}

/* A memory node died under the worker: the transfer's outcome is
 * unknown. Once the node is back, the worker starts over on its slot as
 * a new incarnation (the repair of its log and the adoption of its chunks
 * rebuild what it held locally, which the restart may have reverted). */
static int recover(struct xfer *xf, struct loco_thread *thr,
		   struct loco_rtx_worker **w, struct xfer_wstats *ws)
{
	int rc = 0;
	ws->unknown++;
	ws->outages++;
	/* Relaxed: counters for the heartbeats. */
	atomic_fetch_add_explicit(&xf->live_unknown, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&xf->live_outages, 1, memory_order_relaxed);
	do {
		rc = xfer_wait_memory(xf);
		/* What it gives back is rescanned first (rtx_pools_release). */
		if (!rc && *w && loco_rtx_worker_destroy(*w) == -LOCO_EDOWN)
			rc = -LOCO_EDOWN;
		if (!rc || rc == -LOCO_EDOWN)
			*w = NULL;
		if (!rc)
			rc = worker_start(xf, thr, w);
	} while (rc == -LOCO_EDOWN);
	return rc;
}

void *xfer_rtx_worker(void *arg)
{
	struct xfer_warg *wa = arg;
	struct xfer *xf = wa->xf;
	struct xfer_wstats *ws = &xf->ws[wa->idx];
	struct loco_thread *thr;
	struct loco_rtx_worker *w = NULL;
	uint64_t rng = xf->o.seed ^ ((uint64_t)xf->self << 32) ^ (wa->idx + 1) *
		       UINT64_C(0x9e3779b97f4a7c15);
	wa->rc = loco_thread_create(xf->mgr, &thr);
	if (wa->rc)
		return NULL;
	wa->rc = worker_start(xf, thr, &w);
	loco_raddr_t ctr = xf->o.count_commits ?
			   counter_obj(xf, xf->self, wa->idx) : LOCO_RADDR_NULL;
	struct op_stats st;
	if (!wa->rc)
		op_stats_init(&st, w);
	/* Relaxed: a stop flag; nothing is published with it. */
	while (!wa->rc && !atomic_load_explicit(&xf->stop, memory_order_relaxed)) {
		wa->rc = one_op(xf, w, ctr, ws, &rng, &st);
		if (wa->rc == -LOCO_EDOWN) {
			wa->rc = recover(xf, thr, &w, ws);
			if (!wa->rc)
				op_stats_init(&st, w);
		}
	}
	if (wa->rc)
		fprintf(stderr, "loco-rtx-transfer: node %u thread %u: %s\n",
			xf->self, wa->idx, loco_strerror(wa->rc));
	int drc = loco_rtx_worker_destroy(w);
	int trc = loco_thread_destroy(thr);
	if (!wa->rc)
		wa->rc = drc ? drc : trc;
	return NULL;
}

/* ---- reclaims during the run (--reclaim-dead) ---------------------------- */

/* Take over every thread slot of compute node ID but W's own: its logs
 * settled, its allocation chunks rebuilt (the caller fenced ID, or every
 * client of the run is DONE or fenced). */
static int adopt_node(struct xfer *xf, struct loco_rtx_worker *w, uint32_t id)
{
	uint32_t tpn = loco_rtx_threads_per_node(xf->rtx);
	int rc = 0;
	for (uint32_t t = 0; t < tpn && !rc; t++) {
		uint32_t slot = id * tpn + t;
		if (slot != loco_rtx_worker_slot(w))
			rc = loco_rtx_adopt_slot(w, slot);
	}
	return rc;
}

int xfer_rtx_reclaim(struct xfer *xf, struct loco_thread *thr, uint32_t id)
{
	struct loco_rtx_worker *w;
	struct loco_rtx_stats s;
	int rc = loco_rtx_worker_create(xf->rtx, thr, &w);
	if (rc)
		return rc;
	loco_rtx_set_hooks(w, &run_hooks, xf);
	rc = adopt_node(xf, w, id);
	loco_rtx_worker_stats(w, &s);
	xf->reclaim_repairs += s.repairs;
	/* Relaxed: a counter for the heartbeats. */
	atomic_fetch_add_explicit(&xf->live_repairs, s.repairs,
				  memory_order_relaxed);
	/* Every adopted chunk back to the pool, its live blocks marked. */
	int drc = loco_rtx_worker_destroy(w);
	return rc ? rc : drc;
}

/* ---- the reporter's final phase ------------------------------------------ */

/* Take over every thread slot the run used (all its clients are DONE or
 * dead): logs settled, allocation chunks rebuilt. */
static int adopt_all(struct xfer *xf, struct loco_rtx_worker *w)
{
	int rc = 0;
	for (uint64_t m = xf->compute; m && !rc; m &= m - 1)
		rc = adopt_node(xf, w, (uint32_t)__builtin_ctzll(m));
	return rc;
}

static int sum_group(struct xfer *xf, struct loco_rtx_worker *w, uint32_t f,
		     uint32_t n, uint64_t *total, uint64_t *nulls)
{
	int rc;
	uint64_t t = 0, z = 0;
	LOCO_RTX_BLOCK(w, rc) {
		t = z = 0;
		for (uint32_t i = f; i < f + n && !rc; i++) {
			const uint64_t *p;
			rc = loco_rtx_read(w, xf->acct[i], (const void **)&p);
			if (!rc && p)
				t += *p;
			z += !rc && !p;
		}
	}
	*total += t;
	*nulls += z;
	return rc;
}

static int sum_all(struct xfer *xf, struct loco_rtx_worker *w,
		   struct xfer_result *res)
{
	int rc = 0;
	for (uint32_t f = 0; f < xf->o.accounts && !rc; f += SUM_GROUP) {
		uint32_t n = xf->o.accounts - f < SUM_GROUP ?
			     xf->o.accounts - f : SUM_GROUP;
		rc = sum_group(xf, w, f, n, &res->total, &res->nulls);
	}
	return rc;
}

/* --count-commits: the commit counters of every compute node's threads
 * (read-only transactions), against the transfers they acknowledged: an
 * acknowledged transfer missing from its counter was lost. */
static int sum_counters(struct xfer *xf, struct loco_rtx_worker *w,
			struct xfer_result *res)
{
	int rc = 0;
	res->counted = 0;
	for (uint64_t m = xf->compute; m && !rc; m &= m - 1) {
		uint32_t id = (uint32_t)__builtin_ctzll(m);
		uint64_t n = 0;
		LOCO_RTX_BLOCK(w, rc) {
			n = 0;
			for (unsigned t = 0; t < xf->o.threads && !rc; t++) {
				const uint64_t *p;
				rc = loco_rtx_read(w, counter_obj(xf, id, t),
						   (const void **)&p);
				n += !rc && p ? *p : 0;
			}
		}
		res->counted += n;
	}
	res->lost_commits = res->acked > res->counted ?
			    res->acked - res->counted : 0;
	return rc;
}

static int final_steps(struct xfer *xf, struct loco_rtx_worker *w,
		       struct xfer_result *res)
{
	struct loco_rtx_audit au;
	int timeout = (int)loco_rtx_lease_ms(xf->rtx, 64) * 20 + 5000;
	int rc = loco_rtx_repair_all(w, timeout, &res->locks_held);
	if (!rc)
		rc = adopt_all(xf, w);
	if (!rc)
		rc = loco_rtx_repair_all(w, timeout, &res->locks_held);
	if (!rc)
		rc = loco_rtx_audit(w, &au);
	if (!rc) {
		res->leaked = au.leaked;
		res->lost = au.lost;
		rc = sum_all(xf, w, res);
	}
	if (!rc && xf->o.count_commits)
		rc = sum_counters(xf, w, res);
	return rc;
}

int xfer_rtx_final(struct xfer *xf, struct xfer_result *res)
{
	struct loco_rtx_worker *w;
	struct loco_rtx_stats s;
	int rc = loco_rtx_worker_create(xf->rtx, xf->thr, &w);
	if (rc)
		return rc;
	loco_rtx_set_hooks(w, &run_hooks, xf);
	rc = final_steps(xf, w, res);
	xfer_dead_repairs(xf, res);
	loco_rtx_worker_stats(w, &s);
	res->final_repairs = s.repairs;
	res->repairs += s.repairs;
	int drc = loco_rtx_worker_destroy(w);
	return rc ? rc : drc;
}
