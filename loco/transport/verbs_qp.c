/* SPDX-License-Identifier: MIT */
/* verbs transport: the data path. A completion queue per application
 * thread, an RC queue pair per (thread, peer) connected through rdma_cm
 * (verbs_cm.c), posting as one chain with one doorbell, and polling that
 * retires completions in post order per QP (verbs_wr.c). */
#include "loco/transport/verbs_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loco/error.h>
#include <loco/log.h>

#define VERBS_LOG "verbs"
#define VERBS_POLL_BATCH 32

/* ---- completion queues -------------------------------------------------- */

int verbs_cq_create(struct loco_tp *tp, struct loco_tp_cq **out)
{
	int per = VERBS_SQ_DEPTH + 1;
	int cqe = VERBS_CQ_QPS * per;
	if (cqe > tp->attr.orig_attr.max_cqe)
		cqe = tp->attr.orig_attr.max_cqe / per * per;
	if (cqe < per) {
		loco_err(VERBS_LOG, "%s: CQs hold %d entries, one QP needs %d", tp->devname,
			 tp->attr.orig_attr.max_cqe, per);
		return -EOPNOTSUPP;
	}
	struct loco_tp_cq *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cq = ibv_create_cq(tp->ctx, cqe, NULL, NULL, 0);
	if (!c->cq) {
		int e = errno;
		loco_err(VERBS_LOG, "ibv_create_cq (%d entries): %s", cqe, strerror(e));
		free(c);
		return -e;
	}
	c->tp = tp;
	c->qp_cap = (uint32_t)(cqe / per);
	/* A unique thread index for connection private data: relaxed, a counter. */
	c->thread = atomic_fetch_add_explicit(&tp->next_thread, 1, memory_order_relaxed);
	for (unsigned i = 0; i < VERBS_CQ_QPS; i++)
		atomic_init(&c->qp[i], NULL);
	*out = c;
	return 0;
}

void verbs_cq_destroy(struct loco_tp_cq *c)
{
	int r = ibv_destroy_cq(c->cq);
	if (r)
		loco_err(VERBS_LOG, "ibv_destroy_cq (thread %u): %s", c->thread, strerror(r));
	free(c);
}

/* ---- queue pairs -------------------------------------------------------- */

/* The peer's arena with its fence rkey (RM) and device memory (DM; len 0
 * if none), and whether both NICs execute atomics. */
static int verbs_peer_target(struct loco_tp *tp, uint32_t peer,
			     struct verbs_rmr *rm, struct verbs_rmr *dm,
			     bool *atomics)
{
	if (peer >= LOCO_MAX_NODES || !tp->hosts->node[peer].present) {
		loco_err(VERBS_LOG, "qp_create: node %u is not in the hosts file", peer);
		return -EINVAL;
	}
	if (peer == tp->self) {
		*rm = (struct verbs_rmr){ (uintptr_t)tp->arena, tp->arena_len,
					  tp->fence_mr->rkey };
		*dm = (struct verbs_rmr){ 0, tp->dm_len, 0 };
		*atomics = tp->atomics;
		return 0;
	}
	struct verbs_desc d;
	if (verbs_peer_desc(tp, peer, &d)) {
		loco_err(VERBS_LOG, "qp_create: no arena descriptor from node %u yet (peer_add first)",
			 peer);
		return -ENOENT;
	}
	*rm = (struct verbs_rmr){ d.arena_addr, d.arena_len, d.fence_rkey };
	/* Each hot region's registration is zero-based (verbs_wr.c). */
	*dm = (struct verbs_rmr){ 0, d.dm_len, 0 };
	*atomics = tp->atomics && (d.flags & VERBS_DESC_F_ATOMIC);
	return 0;
}

/* RC QP whose sends complete on the thread's CQ; asks for VERBS_INLINE_WANT
 * inline bytes and settles for less if the device refuses. */
static int verbs_qp_alloc(struct loco_tp *tp, struct loco_tp_qp *q,
			  uint32_t *max_inline)
{
	static const uint32_t inline_try[] = { VERBS_INLINE_WANT, 128, 64, 0 };
	int e = 0;
	for (unsigned i = 0; i < sizeof(inline_try) / sizeof(inline_try[0]); i++) {
		struct ibv_qp_init_attr a = {
			.send_cq = q->cq->cq,
			.recv_cq = q->cq->cq,
			.qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = VERBS_SQ_DEPTH, .max_recv_wr = 1,
				 .max_send_sge = 1, .max_recv_sge = 1,
				 .max_inline_data = inline_try[i] },
		};
		q->qp = ibv_create_qp(tp->pd, &a);
		if (q->qp) {
			*max_inline = a.cap.max_inline_data;
			q->link.qp = q->qp;
			return 0;
		}
		e = errno ? errno : EIO;
		if (e != EINVAL)
			break;
	}
	loco_err(VERBS_LOG, "ibv_create_qp for node %u: %s", q->link.node, strerror(e));
	return -e;
}

/* Claim a free tag (CQ slot) for Q: the CAS makes concurrent qp_create
 * calls on one CQ safe; release publishes Q's set-up fields to the poller's
 * acquire in verbs_wc_take. */
static int verbs_cq_attach(struct loco_tp_cq *c, struct loco_tp_qp *q)
{
	for (uint32_t tag = 0; tag < c->qp_cap; tag++) {
		struct loco_tp_qp *none = NULL;
		q->sq.tag = (uint8_t)tag;
		if (atomic_compare_exchange_strong_explicit(&c->qp[tag], &none, q,
							    memory_order_release,
							    memory_order_relaxed))
			return 0;
	}
	loco_err(VERBS_LOG, "thread %u: its CQ already serves %u QPs", c->thread, c->qp_cap);
	return -ENOSPC;
}

static void verbs_sq_setup(struct loco_tp *tp, struct loco_tp_qp *q,
			   uint32_t max_inline, const struct verbs_rmr *rm,
			   const struct verbs_rmr *dm, bool atomics)
{
	verbs_sq_init(&q->sq, VERBS_SQ_DEPTH, max_inline, q->link.node, 0, atomics);
	q->sq.arena = (struct verbs_lmr){ (uintptr_t)tp->arena,
					  (uintptr_t)tp->arena + tp->arena_len,
					  tp->arena_mr->lkey };
	q->sq.remote = *rm;
	q->sq.remote_dm = *dm;
	q->sq.bounce = (struct verbs_bounce){ .buf = q->bounce->buf,
					      .cap = VERBS_BOUNCE_BYTES,
					      .lkey = q->bounce->lkey };
}

int verbs_qp_create(struct loco_tp *tp, struct loco_tp_cq *cq,
		    uint32_t peer, struct loco_tp_qp **out)
{
	struct verbs_rmr rm, dm;
	bool atomics;
	uint32_t max_inline = 0;
	int r = verbs_peer_target(tp, peer, &rm, &dm, &atomics);
	if (r < 0)
		return r;
	struct loco_tp_qp *q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->tp = tp;
	q->cq = cq;
	q->link = (struct verbs_link){ .node = peer, .thread = cq->thread };
	atomic_init(&q->link.state, VERBS_LINK_UP);
	r = verbs_pool_get(tp, &q->bounce);
	if (r < 0)
		goto free_qp;
	r = verbs_qp_alloc(tp, q, &max_inline);
	if (r < 0)
		goto put_bounce;
	verbs_sq_setup(tp, q, max_inline, &rm, &dm, atomics);
	r = verbs_cq_attach(cq, q);
	if (r < 0)
		goto destroy_qp;
	r = verbs_cm_connect(tp, q);
	if (r < 0)
		goto detach;
	*out = q;
	return 0;
detach:
	atomic_store_explicit(&cq->qp[q->sq.tag], NULL, memory_order_relaxed); /* never used */
destroy_qp:
	ibv_destroy_qp(q->qp);
put_bounce:
	verbs_pool_put(tp, q->bounce);
free_qp:
	free(q);
	return r;
}

void verbs_qp_destroy(struct loco_tp_qp *q)
{
	struct loco_tp_cq *c = q->cq;
	verbs_cm_disconnect(q);
	int r = ibv_destroy_qp(q->qp);
	if (r)
		loco_err(VERBS_LOG, "ibv_destroy_qp (node %u): %s", q->link.node, strerror(r));
	/* Stale completions of Q left in the CQ now find no QP and are dropped;
	 * relaxed: only this thread polls. */
	atomic_store_explicit(&c->qp[q->sq.tag], NULL, memory_order_relaxed);
	c->dirty &= ~(UINT64_C(1) << q->sq.tag);
	verbs_pool_put(q->tp, q->bounce);
	free(q);
}

/* ---- data path ---------------------------------------------------------- */

/* ibv_post_send returned ERR at BAD: nothing or a prefix went to the NIC. */
static int verbs_post_refused(struct loco_tp_qp *q, unsigned n, int err,
			      struct ibv_send_wr *bad)
{
	unsigned k = bad ? (unsigned)(bad - q->swr) : 0;
	if (k == 0 || k >= n) {
		if (err == ENOMEM)
			return -EAGAIN; /* provider found the send queue full */
		loco_err(VERBS_LOG, "ibv_post_send to node %u: %s", q->link.node, strerror(err));
		return -err;
	}
	loco_err(VERBS_LOG, "ibv_post_send to node %u took %u of %u requests (%s): "
		 "QP moved to the error state", q->link.node, k, n, strerror(err));
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
	verbs_sq_fail_partial(&q->sq, k, -LOCO_EQP);
	q->cq->dirty |= UINT64_C(1) << q->sq.tag;
	return -LOCO_EQP;
}

void verbs_qp_abort(struct loco_tp_qp *q)
{
	if (verbs_sq_failed(&q->sq))
		return;
	loco_err(VERBS_LOG, "giving up on the requests of thread %u to node %u: QP moved to "
		 "the error state", q->link.thread, q->link.node);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	int r = ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
	if (r)
		loco_err(VERBS_LOG, "moving the QP to node %u to the error state: %s",
			 q->link.node, strerror(r));
	verbs_sq_fail_partial(&q->sq, 0, -ETIMEDOUT);
	q->cq->dirty |= UINT64_C(1) << q->sq.tag;
}

int verbs_post(struct loco_tp_qp *q, const struct loco_wr *wr, unsigned n)
{
	struct verbs_sq *sq = &q->sq;
	if (n == 0)
		return 0;
	/* Relaxed: the link state publishes no data, a stale UP only delays
	 * the error to the completions. */
	if (verbs_sq_failed(sq) ||
	    atomic_load_explicit(&q->link.state, memory_order_relaxed) != VERBS_LINK_UP)
		return -LOCO_EQP;
	if (n > sq->depth) {
		loco_err(VERBS_LOG, "post: batch of %u exceeds the send queue (%u)", n, sq->depth);
		return -EINVAL;
	}
	if (n > verbs_sq_free(sq))
		return -EAGAIN;
	uint64_t bhead;
	int r = verbs_sq_build(sq, wr, n, q->swr, q->sge, &bhead);
	if (r < 0)
		return r;
	struct ibv_send_wr *bad = NULL;
	r = ibv_post_send(q->qp, q->swr, &bad);
	if (r)
		return verbs_post_refused(q, n, r, bad);
	verbs_sq_commit(sq, n, bhead);
	return 0;
}

static void verbs_wc_log(const struct loco_tp_qp *q, const struct ibv_wc *wc,
			 int st)
{
	/* A flush after the listener reported the lost connection says nothing new. */
	if (wc->status == IBV_WC_WR_FLUSH_ERR &&
	    atomic_load_explicit(&q->link.state, memory_order_relaxed) != VERBS_LINK_UP)
		return;
	loco_err(VERBS_LOG, "node %u (thread %u): request failed: %s (vendor error %#x): "
		 "%s; the QP is in the error state", q->link.node, q->link.thread,
		 ibv_wc_status_str(wc->status), wc->vendor_err, loco_strerror(st));
}

static void verbs_wc_take(struct loco_tp_cq *c, const struct ibv_wc *wc)
{
	uint8_t tag = verbs_wrid_tag(wc->wr_id);
	if (tag >= VERBS_CQ_QPS)
		return;
	/* Pairs with the release in verbs_cq_attach. */
	struct loco_tp_qp *q = atomic_load_explicit(&c->qp[tag], memory_order_acquire);
	if (!q || q->qp->qp_num != wc->qp_num)
		return; /* completion of a QP destroyed since */
	int st = verbs_wc_errno(wc->status);
	if (st && !verbs_sq_failed(&q->sq))
		verbs_wc_log(q, wc, st);
	if (verbs_sq_mark(&q->sq, wc->wr_id, st))
		c->dirty |= UINT64_C(1) << tag;
}

/* Report what the dirty QPs have retired, at most MAX. */
static unsigned verbs_cq_drain(struct loco_tp_cq *c, struct loco_cqe *out,
			       unsigned max)
{
	unsigned n = 0;
	for (uint64_t m = c->dirty; m && n < max; m &= m - 1) {
		unsigned tag = (unsigned)__builtin_ctzll(m);
		/* Relaxed: dirty tags are QPs this thread already loaded. */
		struct loco_tp_qp *q = atomic_load_explicit(&c->qp[tag], memory_order_relaxed);
		n += verbs_sq_drain(&q->sq, out + n, max - n);
		if (!verbs_sq_pending(&q->sq))
			c->dirty &= ~(UINT64_C(1) << tag);
	}
	return n;
}

int verbs_poll(struct loco_tp_cq *c, struct loco_cqe *out, unsigned max)
{
	unsigned n = verbs_cq_drain(c, out, max);
	while (n < max) {
		struct ibv_wc wc[VERBS_POLL_BATCH];
		int want = max - n < VERBS_POLL_BATCH ? (int)(max - n) : VERBS_POLL_BATCH;
		int k = ibv_poll_cq(c->cq, want, wc);
		if (k < 0) {
			loco_err(VERBS_LOG, "thread %u: ibv_poll_cq failed (%d)", c->thread, k);
			return n ? (int)n : -EIO;
		}
		for (int i = 0; i < k; i++)
			verbs_wc_take(c, &wc[i]);
		n += verbs_cq_drain(c, out + n, max - n);
		if (k < want)
			break;
	}
	return (int)n;
}
