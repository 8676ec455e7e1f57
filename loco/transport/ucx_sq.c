/* SPDX-License-Identifier: MIT */
#include "loco/transport/ucx_sq.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <loco/error.h>

#define UCX_RING_MASK (UCX_RING_SLOTS - 1)

int ucx_sq_init(struct ucx_sq *sq, uint32_t peer)
{
	memset(sq, 0, sizeof(*sq));
	sq->bounce.buf = aligned_alloc(64, UCX_BOUNCE_BYTES);
	if (!sq->bounce.buf)
		return -ENOMEM;
	sq->bounce.cap = UCX_BOUNCE_BYTES;
	sq->fail_seq = UINT64_MAX;
	sq->peer = peer;
	return 0;
}

void *ucx_sq_fini(struct ucx_sq *sq, bool keep)
{
	void *b = sq->bounce.buf;
	sq->bounce.buf = NULL;
	if (keep)
		return b;
	free(b);
	return NULL;
}

/* Bytes of local memory a request needs (a FLUSH: none). */
static uint32_t local_bytes(const struct loco_wr *w)
{
	if (w->opcode == LOCO_OP_FLUSH)
		return 0;
	return w->opcode == LOCO_OP_CAS || w->opcode == LOCO_OP_FAA ?
	       UCX_ATOMIC_BYTES : w->len;
}

static int wr_check(const struct loco_wr *w, uint64_t arena_len)
{
	switch (w->opcode) {
	case LOCO_OP_READ:
	case LOCO_OP_WRITE:
		if (w->len && !w->local)
			return -EINVAL;
		break;
	case LOCO_OP_FLUSH:
		break;
	case LOCO_OP_CAS:
	case LOCO_OP_FAA:
		if (w->len != 8 || w->remote_off % 8 || !w->local)
			return -EINVAL;
		break;
	default:
		return -EINVAL;
	}
	if (w->space != LOCO_SPACE_ARENA ||
	    w->remote_off > arena_len || w->len > arena_len - w->remote_off)
		return -EINVAL;
	return 0;
}

/* Reserve LEN bytes, 8-byte aligned and contiguous, from position *HEAD
 * (the caller commits *HEAD later; TAIL is only read). */
static int bounce_take(const struct ucx_bounce *b, uint64_t *head,
		       uint32_t len, uint8_t **at)
{
	uint64_t need = ((uint64_t)len + 7) & ~UINT64_C(7);
	uint64_t p = (*head + 7) & ~UINT64_C(7);
	if (p % b->cap + need > b->cap)
		p += b->cap - p % b->cap; /* does not fit before the end: next lap */
	if (p + need - b->tail > b->cap)
		return -EAGAIN;
	*at = b->buf + p % b->cap;
	*head = p + need;
	return 0;
}

/* LEN bytes of local memory for S: from the bounce ring, or a buffer of
 * its own when the request is big or the ring, empty when the batch
 * began, cannot take the whole batch (so that retiring cannot help). */
static int slot_memory(struct ucx_sq *sq, struct ucx_slot *s, uint32_t len,
		       uint64_t *bhead)
{
	int rc = len > UCX_BOUNCE_MAX_OP ? -EMSGSIZE :
		 bounce_take(&sq->bounce, bhead, len, &s->buf);
	if (!rc) {
		s->uses_bounce = 1;
		s->bounce_end = *bhead;
		return 0;
	}
	if (rc == -EAGAIN && sq->bounce.tail != sq->bounce.head)
		return rc;
	s->buf = malloc(len);
	if (!s->buf)
		return -ENOMEM;
	s->heap = 1;
	return 0;
}

/* Fill S's local memory: WRITE data, atomic operands. */
static void slot_fill(struct ucx_slot *s, const struct loco_wr *w)
{
	switch (w->opcode) {
	case LOCO_OP_READ:
		s->copy_dst = w->local;
		s->copy_len = w->len;
		break;
	case LOCO_OP_WRITE:
		memcpy(s->buf, w->local, w->len);
		break;
	case LOCO_OP_CAS:
		memcpy(s->buf, &w->compare, 8);
		memcpy(s->buf + 8, &w->operand, 8);
		s->copy_dst = w->local;
		s->copy_off = 8;
		s->copy_len = 8;
		break;
	default: /* LOCO_OP_FAA, checked by wr_check */
		memcpy(s->buf, &w->operand, 8);
		memset(s->buf + 8, 0, 8);
		s->copy_dst = w->local;
		s->copy_off = 8;
		s->copy_len = 8;
		break;
	}
}

static void unstage(struct ucx_sq *sq, unsigned from, unsigned n)
{
	for (unsigned i = from; i < n; i++) {
		struct ucx_slot *s = ucx_sq_staged(sq, i);
		if (s->heap)
			free(s->buf);
		s->heap = 0;
		s->buf = NULL;
	}
}

int ucx_sq_stage(struct ucx_sq *sq, const struct loco_wr *wr, unsigned n,
		 uint64_t arena_len, uint64_t *bounce_head)
{
	if (n > UCX_SQ_DEPTH)
		return -EINVAL;
	if (ucx_sq_outstanding(sq) + n > UCX_SQ_DEPTH)
		return -EAGAIN;
	uint64_t bhead = sq->bounce.head;
	for (unsigned i = 0; i < n; i++) {
		const struct loco_wr *w = &wr[i];
		struct ucx_slot *s = ucx_sq_staged(sq, i);
		int rc = wr_check(w, arena_len);
		*s = (struct ucx_slot){ .wr_id = w->wr_id, .signaled = w->signaled != 0 };
		uint32_t len = local_bytes(w);
		if (!rc && len)
			rc = slot_memory(sq, s, len, &bhead);
		if (rc) {
			unstage(sq, 0, i);
			return rc;
		}
		if (len)
			slot_fill(s, w);
	}
	*bounce_head = bhead;
	return 0;
}

void ucx_sq_commit(struct ucx_sq *sq, unsigned n, uint64_t bounce_head)
{
	sq->head += n;
	sq->bounce.head = bounce_head;
}

void ucx_sq_fail(struct ucx_sq *sq, int status)
{
	if (ucx_sq_failed(sq))
		return;
	sq->fail_seq = sq->tail;
	sq->fail_status = status;
}

void ucx_sq_refused(struct ucx_sq *sq, unsigned k, unsigned n,
		    uint64_t bounce_head, int status)
{
	for (unsigned i = 0; i < k; i++)
		ucx_sq_staged(sq, i)->silent = 1;
	unstage(sq, k, n);
	ucx_sq_commit(sq, k, bounce_head);
	ucx_sq_fail(sq, status);
}

/* Status of the request at SEQ, consuming the failure's own status for
 * the first signalled request at or after it. */
static int slot_status(struct ucx_sq *sq, uint64_t seq, const struct ucx_slot *s)
{
	if (seq < sq->fail_seq)
		return 0;
	if (!sq->fail_reported && s->signaled && !s->silent) {
		sq->fail_reported = true;
		return sq->fail_status;
	}
	return -LOCO_EQP;
}

/* Whether the request at the tail may be retired: its UCX request is
 * complete (a failure fails the QP from it on), or the QP failed already
 * (a request still running becomes an orphan). */
static bool slot_settled(struct ucx_sq *sq, struct ucx_slot *s,
			 const struct ucx_req_ops *ops)
{
	if (s->req) {
		int st;
		if (ops->check(ops->ctx, s->req, &st)) {
			ops->free(ops->ctx, s->req);
			s->req = NULL;
			if (!s->status)
				s->status = st;
		} else if (!ucx_sq_failed(sq)) {
			return false;
		}
	}
	/* Sent, the reply still out: wait, unless the send failed or the QP
	 * did (the reply, if any, is then dropped). */
	if (s->am_wait && !s->status && !ucx_sq_failed(sq))
		return false;
	if (s->status && !ucx_sq_failed(sq)) {
		sq->fail_seq = sq->tail;
		sq->fail_status = s->status;
	}
	return true;
}

unsigned ucx_sq_drain(struct ucx_sq *sq, const struct ucx_req_ops *ops,
		      struct loco_cqe *out, unsigned max)
{
	unsigned n = 0;
	while (sq->tail < sq->head && n < max) {
		struct ucx_slot *s = &sq->slot[sq->tail & UCX_RING_MASK];
		if (!slot_settled(sq, s, ops))
			break;
		int st = slot_status(sq, sq->tail, s);
		if (st == 0 && s->copy_dst)
			memcpy(s->copy_dst, s->buf + s->copy_off, s->copy_len);
		if (s->req) {
			sq->orphan[sq->orphans++] =
				(struct ucx_orphan){ s->req, s->heap ? s->buf : NULL };
		} else if (s->heap) {
			free(s->buf);
		}
		if (s->uses_bounce)
			sq->bounce.tail = s->bounce_end;
		if (s->signaled && !s->silent)
			out[n++] = (struct loco_cqe){ .wr_id = s->wr_id, .status = st,
						      .peer = sq->peer };
		*s = (struct ucx_slot){ 0 };
		sq->tail++;
	}
	return n;
}

struct ucx_slot *ucx_sq_reply(struct ucx_sq *sq, uint64_t token)
{
	const uint64_t mask = (UINT64_C(1) << UCX_TOKEN_SEQ_BITS) - 1;
	/* The full sequence number: the one at or after the tail with these
	 * low bits (staged requests, not committed yet, included). */
	uint64_t seq = sq->tail + (((token & mask) - sq->tail) & mask);
	if (seq - sq->tail >= UCX_RING_SLOTS)
		return NULL;
	struct ucx_slot *s = &sq->slot[seq & UCX_RING_MASK];
	return s->am_wait && s->token == token ? s : NULL;
}

unsigned ucx_sq_reap(struct ucx_sq *sq, const struct ucx_req_ops *ops)
{
	unsigned left = 0;
	for (unsigned i = 0; i < sq->orphans; i++) {
		struct ucx_orphan *o = &sq->orphan[i];
		int st;
		if (ops->check(ops->ctx, o->req, &st)) {
			ops->free(ops->ctx, o->req);
			free(o->heap);
		} else {
			sq->orphan[left++] = *o;
		}
	}
	sq->orphans = left;
	return left;
}
