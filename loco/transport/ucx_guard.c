/* SPDX-License-Identifier: MIT */
/* The fence of ucx with UCX's RMA on shared memory only (ucx-sm, or
 * UCX_TLS naming only sm transports): docs/ordering.md, "Fencing".
 *
 * There UCX executes a peer's WRITE, CAS and FAA in the initiator's own
 * process (posix, sysv, xpmem: stores and CPU atomics on the mapped
 * arena; cma: process_vm_writev), or, for what it emulates with
 * messages, at the target before the reply that completes the request.
 * No target can revoke an rkey (cma needs only the pid), so ucx-sm
 * fences as shm does, with the fence files of fence_file.h: a QP raises
 * its busy mark at the peer before it issues, reads the fence line
 * (<loco/guard.h>), and lowers the mark only once nothing it issued can
 * execute any more: every request complete and, after a WRITE or atomic,
 * an endpoint flush complete (a completed put is executed locally, not
 * necessarily at the target). The fencer records the fence in the
 * target's file and waits for the marks, as on shm. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <loco/error.h>
#include <loco/log.h>
#include "loco/transport/ucx_int.h"

/* UCX's shared-memory transports: with only these in UCX_TLS, RMA runs
 * in the initiator's process. */
static const char *const sm_tls[] = { "sm", "shm", "mm", "posix", "sysv",
				      "cma", "xpmem", "knem", "self", NULL };

int ucx_guard_open(struct loco_tp *tp, const struct loco_tp_config *cfg,
		   const char *tls)
{
	if (tp->am || !*tls || !ucx_tls_only(tls, sm_tls))
		return 0;
	snprintf(tp->run_dir, sizeof(tp->run_dir), "%s", cfg->run_dir);
	if (mkdir(tp->run_dir, 0700) && errno != EEXIST) {
		int rc = -errno;
		loco_err(UCX_LOG, "cannot create the run directory %s: %s",
			 tp->run_dir, loco_strerror(rc));
		return rc;
	}
	loco_ffile_path(tp->fence_path, sizeof(tp->fence_path), tp->run_dir,
			tp->self);
	int rc = loco_ffile_map(tp->fence_path, true, &tp->fence);
	if (rc) {
		loco_err(UCX_LOG, "cannot open the fence file %s: %s",
			 tp->fence_path, loco_strerror(rc));
		return rc;
	}
	/* The guard's mode, chosen (membarrier registered) before any mark
	 * is claimed. */
	loco_ffile_own_marks();
	const char *stop = getenv("LOCO_SHM_STOP_IN_POST");
	tp->stop_at = stop ? strtoull(stop, NULL, 10) : 0;
	tp->guard = true;
	return 0;
}

void ucx_guard_close(struct loco_tp *tp)
{
	for (unsigned i = 0; i < LOCO_MAX_NODES; i++)
		loco_ffile_unmap(tp->peer_fence[i]);
	if (tp->fence) {
		if (!loco_ffile_any(tp->fence))
			unlink(tp->fence_path);
		loco_ffile_unmap(tp->fence);
	}
}

void ucx_guard_cq(struct loco_tp *tp, struct loco_tp_cq *cq)
{
	/* Relaxed: a spread of threads over the shared marks, nothing more. */
	cq->slot = atomic_fetch_add_explicit(&tp->cqs_made, 1, memory_order_relaxed) %
		   LOCO_GUARD_SLOTS;
}

int ucx_guard_qp(struct loco_tp *tp, struct loco_tp_qp *q)
{
	if (!tp->guard)
		return 0;
	int rc = 0;
	pthread_mutex_lock(&tp->peer_lock);
	struct loco_ffile *f = q->peer == tp->self ? tp->fence : tp->peer_fence[q->peer];
	if (!f) {
		/* Made if missing: the peer opens (keeps) it at its start. */
		char path[LOCO_PATH_MAX + 64];
		loco_ffile_path(path, sizeof(path), tp->run_dir, q->peer);
		rc = loco_ffile_map(path, true, &f);
		if (!rc)
			tp->peer_fence[q->peer] = f;
		else
			loco_err(UCX_LOG, "cannot open node %u's fence file %s: %s",
				 q->peer, path, loco_strerror(rc));
	}
	if (!rc) {
		/* peer_lock: threads of one process take over one after the
		 * other. */
		struct loco_ffile_node *fn = &f->node[tp->self];
		loco_ffile_mark_get(fn, q->cq->slot, &q->mark);
		q->line = fn->line;
	}
	pthread_mutex_unlock(&tp->peer_lock);
	return rc;
}

int ucx_guard_post(struct loco_tp_qp *q, const struct loco_wr *wr, unsigned n)
{
	struct loco_tp *tp = q->cq->tp;
	if (!tp->guard)
		return 0;
	if (!q->marked) {
		if (!loco_guard_enter(q->mark.m, q->line, tp->incarnation))
			return -LOCO_EFENCED;
		q->marked = true;
	} else if (loco_guard_refused(q->line, tp->incarnation)) {
		/* Mark up since an earlier post: the fencer waits for it to
		 * drop; nothing more is issued meanwhile. */
		return -LOCO_EFENCED;
	}
	/* Relaxed: a count (the test hook). */
	if (tp->stop_at &&
	    atomic_fetch_add_explicit(&tp->posts, 1, memory_order_relaxed) + 1 ==
	    tp->stop_at)
		raise(SIGSTOP);
	for (unsigned i = 0; i < n; i++)
		q->wrote |= wr[i].opcode == LOCO_OP_WRITE || wr[i].opcode == LOCO_OP_CAS ||
			    wr[i].opcode == LOCO_OP_FAA;
	return 0;
}

/* Lower Q's mark (cq->lock held). */
static void mark_drop(struct loco_tp_qp *q)
{
	q->marked = false;
	q->wrote = false;
	loco_guard_exit(q->mark.m);
}

/* Whether a request Q issued may still run in UCX (not yet retired ones
 * that completed inline, or since, do not count). */
static bool inflight(const struct loco_tp_qp *q)
{
	const struct ucx_api *api = q->cq->tp->api;
	if (q->sq.orphans)
		return true;
	for (uint64_t s = q->sq.tail; s != q->sq.head; s++) {
		void *r = q->sq.slot[s & (UCX_RING_SLOTS - 1)].req;
		if (r && api->request_check_status(r) == UCS_INPROGRESS)
			return true;
	}
	return false;
}

void ucx_guard_settle(struct loco_tp_qp *q)
{
	const struct ucx_api *api = q->cq->tp->api;
	if (!q->marked || inflight(q))
		return;
	if (q->flush) {
		ucs_status_t st = api->request_check_status(q->flush);
		if (st == UCS_INPROGRESS)
			return;
		api->request_free(q->flush);
		q->flush = NULL;
		/* A failed flush (the endpoint broke): the mark stays up
		 * until the endpoint is closed (ucx_guard_drop). */
		if (st == UCS_OK)
			mark_drop(q);
		return;
	}
	if (!q->wrote || !q->ep) {
		if (q->ep)
			mark_drop(q);
		return;
	}
	void *r = api->ep_flush_nbx(q->ep, &(ucp_request_param_t){ 0 });
	if (!r)
		mark_drop(q);
	else if (!UCS_PTR_IS_ERR(r))
		q->flush = r;
}

void ucx_guard_drop(struct loco_tp_qp *q)
{
	if (q->flush) {
		q->cq->tp->api->request_free(q->flush);
		q->flush = NULL;
	}
	if (q->marked)
		mark_drop(q);
}

void ucx_guard_put(struct loco_tp_qp *q)
{
	if (q->cq->tp->guard)
		loco_ffile_mark_put(&q->mark);
}

bool ucx_guard_fenced(struct loco_tp *tp, uint32_t peer, uint64_t incarnation)
{
	return tp->guard && loco_ffile_fenced(tp->fence, peer, incarnation);
}

int ucx_guard_fence(struct loco_tp *tp, uint32_t target, uint32_t peer,
		    uint64_t incarnation, int timeout_ms)
{
	if (!tp->guard)
		return -EOPNOTSUPP;
	if (target >= LOCO_MAX_NODES)
		return -EINVAL;
	pthread_mutex_lock(&tp->peer_lock);
	struct loco_ffile *f = target == tp->self ? tp->fence : tp->peer_fence[target];
	pthread_mutex_unlock(&tp->peer_lock);
	return loco_ffile_fence(tp->run_dir, f, tp->self, target, peer,
				incarnation, timeout_ms);
}
