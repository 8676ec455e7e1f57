/* SPDX-License-Identifier: MIT */
/* ucx transport: READ, WRITE, CAS and FAA executed by loco's own active
 * messages where UCX would emulate RMA and atomics (TCP).
 *
 * Why: UCX 1.13 emulates RMA and atomics over TCP with active messages
 * that the target's worker executes, and answers a GET, an atomic or a
 * PUT's completion with ucp_request_send, which aborts the whole process
 * ("Fatal: unexpected error") when that answer cannot be sent: a client
 * SIGKILLed with a request in flight took its memory node down with it.
 * Answers sent with ucp_am_send_nbx fail like any request (its callback
 * gets the error), so a memory node outlives its dead clients.
 *
 * The protocol, on one endpoint (one UCX lane, eager only: UCX delivers
 * the messages of one endpoint in order and runs their handlers in that
 * order, which is the per-QP order of docs/ordering.md):
 *  - request (UCX_AM_REQ, to the peer's target worker, the reply endpoint
 *    attached): struct ucx_am_req, a WRITE's data as payload;
 *  - the target's handler checks the range against its arena, executes
 *    the request (memcpy, or a CPU atomic) and answers (UCX_AM_REP, to
 *    the requester's worker): struct ucx_am_rep, a READ's data as payload,
 *    copied when the request executes;
 *  - the requester's handler finds the request's slot by its token (the
 *    QP's id and the request's sequence number; a reply for a request
 *    already retired, its QP failed, is dropped), copies the result into
 *    the slot's own memory and lets it retire (ucx_sq.c).
 * A WRITE completes when its reply says it was placed. */
#include "loco/transport/copy.h"
#include "loco/transport/ucx_int.h"

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <loco/error.h>
#include <loco/log.h>

#define UCX_AM_REQ 0x4c0
#define UCX_AM_REP 0x4c1

/* The answer; little-endian. */
struct ucx_am_rep {
	uint64_t token;
	int32_t status;              /* 0 or -errno */
	uint32_t len;                /* payload bytes (a READ's data) */
	uint64_t old;                /* CAS, FAA: the word before */
};

/* ---- target side -------------------------------------------------------- */

/* A reply went out (or could not: the requester is gone, nobody to tell). */
static void rep_sent(void *req, ucs_status_t st, void *user_data)
{
	(void)req;
	(void)st;
	free(user_data);
}

/* Execute Q (a WRITE's DATA of LEN bytes) on TP's arena, filling REP's
 * old word. A READ's data is at *SRC on return. 0 or -errno. */
static int execute(struct loco_tp *tp, const struct ucx_am_req *q,
		   const void *data, size_t len, struct ucx_am_rep *rep,
		   const uint8_t **src)
{
	uint64_t off = le64toh(q->off);
	uint32_t n = le32toh(q->len);
	if (off > tp->arena_len || n > tp->arena_len - off)
		return -EINVAL;
	uint8_t *at = tp->arena + off;
	switch (q->op) {
	case LOCO_OP_READ:
		*src = at;
		return 0;
	case LOCO_OP_WRITE:
		if (len != n)
			return -EPROTO;
		/* 8-byte release stores, as a shm WRITE places its words:
		 * the target's own threads load them concurrently. */
		loco_tp_copy_out(at, data, n);
		return 0;
	case LOCO_OP_CAS:
	case LOCO_OP_FAA: {
		if (n != 8 || off % 8)
			return -EINVAL;
		uint64_t *w = (uint64_t *)(void *)at;
		uint64_t old = le64toh(q->a);
		if (q->op == LOCO_OP_CAS)
			__atomic_compare_exchange_n(w, &old, le64toh(q->b), false,
						    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
		else
			old = __atomic_fetch_add(w, old, __ATOMIC_SEQ_CST);
		rep->old = htole64(old);
		return 0;
	}
	default:
		return -EPROTO;
	}
}

/* UCX_AM_REQ on the target worker (the progress thread, or an application
 * thread lending a hand, with tp->target_lock held). */
static ucs_status_t req_handler(void *arg, const void *header, size_t hlen,
				void *data, size_t len, const ucp_am_recv_param_t *param)
{
	struct loco_tp *tp = arg;
	struct ucx_am_req q;
	if (hlen != sizeof(q) || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ||
	    !param->reply_ep) {
		loco_warn(UCX_LOG, "dropped a malformed request message (%zu header bytes)",
			  hlen);
		return UCS_OK;
	}
	memcpy(&q, header, sizeof(q));
	struct ucx_am_rep rep = { .token = q.token };
	const uint8_t *src = NULL;
	/* Eager only (the sender says so): a rendezvous message would carry
	 * no data here. */
	int rc = param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV ? -EPROTO :
		 execute(tp, &q, data, len, &rep, &src);
	uint32_t n = !rc && src ? le32toh(q.len) : 0;
	struct ucx_am_rep *r = malloc(sizeof(*r) + n);
	if (!r) {
		loco_err(UCX_LOG, "no memory for a reply: a peer's request times out");
		return UCS_OK;
	}
	rep.status = (int32_t)htole32((uint32_t)rc);
	rep.len = htole32(n);
	*r = rep;
	/* Acquire loads, as a shm READ takes the words: the target's own
	 * threads store them concurrently. */
	if (n)
		loco_tp_copy_in((uint8_t *)(r + 1), src, n);
	ucp_request_param_t p = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
				UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE,
		.flags = UCP_AM_SEND_FLAG_EAGER,
		.cb.send = rep_sent,
		.user_data = r,
		.memory_type = UCS_MEMORY_TYPE_HOST,
	};
	void *sr = tp->api->am_send_nbx(param->reply_ep, UCX_AM_REP, r, sizeof(*r),
					n ? (void *)(r + 1) : NULL, n, &p);
	/* Sent at once, or failed (the requester died): no callback comes. */
	if (!UCS_PTR_IS_PTR(sr))
		free(r);
	return UCS_OK;
}

/* ---- requester side ----------------------------------------------------- */

/* UCX_AM_REP on an application thread's worker (cq->lock held). */
static ucs_status_t rep_handler(void *arg, const void *header, size_t hlen,
				void *data, size_t len, const ucp_am_recv_param_t *param)
{
	struct loco_tp_cq *cq = arg;
	struct ucx_am_rep rep;
	if (hlen != sizeof(rep))
		return UCS_OK;
	memcpy(&rep, header, sizeof(rep));
	uint64_t token = le64toh(rep.token);
	uint32_t id = (uint32_t)(token >> UCX_TOKEN_SEQ_BITS);
	struct loco_tp_qp *q = cq->qps;
	while (q && q->id != id)
		q = q->next;
	struct ucx_slot *s = q ? ucx_sq_reply(&q->sq, token) : NULL;
	if (!s)
		return UCS_OK; /* its QP failed or is gone: dropped */
	int st = (int32_t)le32toh((uint32_t)rep.status);
	if (!st && s->am_op == LOCO_OP_READ) {
		if (len != s->copy_len || param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
			st = -LOCO_EPROTO;
		else
			memcpy(s->buf, data, len);
	} else if (!st && (s->am_op == LOCO_OP_CAS || s->am_op == LOCO_OP_FAA)) {
		uint64_t old = le64toh(rep.old);
		memcpy(s->buf + s->copy_off, &old, 8);
	}
	s->status = st;
	s->am_wait = 0;
	return UCS_OK;
}

void *ucx_am_issue(struct loco_tp_qp *q, const struct loco_wr *w,
		   struct ucx_slot *s, uint64_t seq)
{
	const uint64_t mask = (UINT64_C(1) << UCX_TOKEN_SEQ_BITS) - 1;
	struct ucx_am_req *h = &q->am_hdr[seq & (UCX_RING_SLOTS - 1)];
	uint64_t token = (uint64_t)q->id << UCX_TOKEN_SEQ_BITS | (seq & mask);
	*h = (struct ucx_am_req){
		.op = (uint8_t)w->opcode,
		.len = htole32(w->len),
		.token = htole64(token),
		.off = htole64(w->remote_off),
		.a = htole64(w->opcode == LOCO_OP_CAS ? w->compare : w->operand),
		.b = htole64(w->opcode == LOCO_OP_CAS ? w->operand : 0),
	};
	s->token = token;
	s->am_op = (uint8_t)w->opcode;
	s->am_wait = 1;
	ucp_request_param_t p = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_MEMORY_TYPE,
		.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
		.memory_type = UCS_MEMORY_TYPE_HOST,
	};
	bool write = w->opcode == LOCO_OP_WRITE;
	return q->cq->tp->api->am_send_nbx(q->ep, UCX_AM_REQ, h, sizeof(*h),
					   write ? s->buf : NULL, write ? w->len : 0, &p);
}

/* ---- set-up ------------------------------------------------------------- */

static int handler_set(struct loco_tp *tp, ucp_worker_h w, unsigned id,
		       ucp_am_recv_callback_t cb, void *arg)
{
	ucp_am_handler_param_t p = {
		.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
			      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
		.id = id,
		.flags = UCP_AM_FLAG_WHOLE_MSG,
		.cb = cb,
		.arg = arg,
	};
	ucs_status_t st = tp->api->worker_set_am_recv_handler(w, &p);
	if (st != UCS_OK) {
		loco_err(UCX_LOG, "ucp_worker_set_am_recv_handler: %s",
			 tp->api->status_string(st));
		return ucx_errno(st) ? ucx_errno(st) : -EIO;
	}
	return 0;
}

int ucx_am_target_init(struct loco_tp *tp)
{
	return tp->am ? handler_set(tp, tp->target, UCX_AM_REQ, req_handler, tp) : 0;
}

int ucx_am_cq_init(struct loco_tp_cq *cq)
{
	return cq->tp->am ? handler_set(cq->tp, cq->worker, UCX_AM_REP, rep_handler, cq) : 0;
}
