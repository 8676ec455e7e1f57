/* SPDX-License-Identifier: MIT */
#include "loco/transport/verbs_wr.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include <loco/error.h>
#include <loco/log.h>

#define VERBS_RING_MASK (VERBS_RING_SLOTS - 1)

static const char *const verbs_op_names[] = {
	[LOCO_OP_READ] = "READ", [LOCO_OP_WRITE] = "WRITE",
	[LOCO_OP_CAS] = "CAS", [LOCO_OP_FAA] = "FAA", [LOCO_OP_FLUSH] = "FLUSH",
};
#define VERBS_FLUSH_READ 8  /* bytes a FLUSH reads back */

int verbs_mr_access(unsigned access, bool atomics)
{
	int f = 0;
	if (access & LOCO_REGION_REMOTE_READ)
		f |= IBV_ACCESS_REMOTE_READ;
	if (access & LOCO_REGION_REMOTE_WRITE)
		f |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
	if ((access & LOCO_REGION_REMOTE_ATOMIC) && atomics)
		f |= IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
	return f;
}

void verbs_sq_init(struct verbs_sq *sq, uint32_t depth, uint32_t max_inline,
		   uint32_t peer, uint8_t tag, bool atomics)
{
	sq->head = sq->tail = sq->done = 0;
	sq->fail_seq = UINT64_MAX;
	sq->fail_status = 0;
	sq->fail_reported = false;
	sq->depth = depth;
	sq->max_inline = max_inline;
	sq->peer = peer;
	sq->tag = tag;
	sq->atomics = atomics;
}

static bool verbs_lmr_holds(const struct verbs_lmr *m, const void *p,
			    uint64_t len)
{
	uintptr_t a = (uintptr_t)p;
	return p && a >= m->lo && a <= m->hi && len <= m->hi - a;
}

/* Reserve LEN bytes, 8-byte aligned and contiguous, from position *HEAD.
 * The caller commits *HEAD later; TAIL is only read. */
static int verbs_bounce_take(const struct verbs_bounce *b, uint64_t *head,
			     uint32_t len, uint32_t *off)
{
	uint64_t need = ((uint64_t)len + 7) & ~UINT64_C(7);
	if (need > b->cap)
		return -EMSGSIZE;
	uint64_t p = (*head + 7) & ~UINT64_C(7);
	if (p % b->cap + need > b->cap)
		p += b->cap - p % b->cap; /* does not fit before the end: next lap */
	if (p + need - b->tail > b->cap)
		return -EAGAIN;
	*off = (uint32_t)(p % b->cap);
	*head = p + need;
	return 0;
}

/* The peer's registration W targets: its arena or its device memory
 * (zero-based: addresses are offsets). NULL for an unknown space. */
static const struct verbs_rmr *verbs_wr_rmr(const struct verbs_sq *sq,
					    const struct loco_wr *w)
{
	switch (w->space) {
	case LOCO_SPACE_ARENA: return &sq->remote;
	case LOCO_SPACE_DM: return &sq->remote_dm;
	default: return NULL;
	}
}

/* Opcode, sizes, alignment and the peer's registration bounds; *RM: the
 * registration W targets. */
static int verbs_wr_check(const struct verbs_sq *sq, const struct loco_wr *w,
			  const struct verbs_rmr **rm)
{
	switch (w->opcode) {
	case LOCO_OP_READ:
	case LOCO_OP_WRITE:
		break;
	case LOCO_OP_FLUSH:
		if (w->space != LOCO_SPACE_ARENA)
			return -EINVAL;
		break;
	case LOCO_OP_CAS:
	case LOCO_OP_FAA:
		if (!sq->atomics)
			return -EOPNOTSUPP;
		if (w->len != 8 || w->remote_off % 8)
			return -EINVAL;
		break;
	default:
		return -EINVAL;
	}
	if (w->len && !w->local && w->opcode != LOCO_OP_FLUSH)
		return -EINVAL;
	*rm = verbs_wr_rmr(sq, w);
	if (!*rm || w->remote_off > (*rm)->len ||
	    w->len > (*rm)->len - w->remote_off)
		return -EINVAL;
	/* A device-memory registration starts at its region. */
	if (w->space == LOCO_SPACE_DM && w->len && w->remote_off < w->key_off)
		return -EINVAL;
	return 0;
}

/* W's remote address and rkey into S. FENCE: a zero-length READ, or
 * FLUSH's READ (below), which reads the first bytes of the peer's arena
 * through its read-only fence registration, whatever W named. */
static void verbs_wr_remote(const struct verbs_sq *sq,
			    const struct verbs_rmr *rm, const struct loco_wr *w,
			    bool fence, struct ibv_send_wr *s)
{
	uint64_t addr = w->space == LOCO_SPACE_DM ? w->remote_off - w->key_off :
			rm->addr + w->remote_off;
	uint32_t rkey = w->key;
	if (fence) {
		addr = sq->remote.addr;
		rkey = sq->remote.rkey;
	}
	switch (w->opcode) {
	case LOCO_OP_READ:
	case LOCO_OP_WRITE:
		s->opcode = w->opcode == LOCO_OP_READ ? IBV_WR_RDMA_READ
						      : IBV_WR_RDMA_WRITE;
		s->wr.rdma.remote_addr = addr;
		s->wr.rdma.rkey = rkey;
		break;
	case LOCO_OP_CAS:
		s->opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		s->wr.atomic.remote_addr = addr;
		s->wr.atomic.compare_add = w->compare;
		s->wr.atomic.swap = w->operand;
		s->wr.atomic.rkey = rkey;
		break;
	default: /* LOCO_OP_FAA, checked by verbs_wr_check */
		s->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		s->wr.atomic.remote_addr = addr;
		s->wr.atomic.compare_add = w->operand;
		s->wr.atomic.rkey = rkey;
		break;
	}
}

/* Local side: no sge (zero length), inline, the arena MR, or the bounce
 * buffer (WRITE data copied now, READ/atomic results copied at retirement). */
static int verbs_wr_local(struct verbs_sq *sq, const struct loco_wr *w,
			  struct ibv_send_wr *s, struct ibv_sge *g,
			  struct verbs_slot *slot, uint64_t *bhead)
{
	bool atomic = w->opcode == LOCO_OP_CAS || w->opcode == LOCO_OP_FAA;
	if (w->len == 0)
		return 0;
	s->sg_list = g;
	s->num_sge = 1;
	g->length = w->len;
	if (w->opcode == LOCO_OP_WRITE && w->len <= sq->max_inline) {
		s->send_flags |= IBV_SEND_INLINE; /* NIC copies at post time */
		g->addr = (uintptr_t)w->local;
		g->lkey = 0;
		return 0;
	}
	if (verbs_lmr_holds(&sq->arena, w->local, w->len) &&
	    (!atomic || (uintptr_t)w->local % 8 == 0)) {
		g->addr = (uintptr_t)w->local;
		g->lkey = sq->arena.lkey;
		return 0;
	}
	uint32_t off;
	int r = verbs_bounce_take(&sq->bounce, bhead, w->len, &off);
	if (r < 0)
		return r;
	g->addr = (uintptr_t)(sq->bounce.buf + off);
	g->lkey = sq->bounce.lkey;
	slot->uses_bounce = 1;
	slot->bounce_off = off;
	slot->bounce_end = *bhead;
	if (w->opcode == LOCO_OP_WRITE)
		memcpy(sq->bounce.buf + off, w->local, w->len);
	else
		slot->copy_dst = w->local;
	return 0;
}

/* A FLUSH goes out as the classic flush, an RDMA READ after the WRITEs
 * of its QP (SNIA's "appliance persistency method", PMDK librpmem's
 * APM): the responder executes it after them, so its response leaves
 * only once they are placed in the target's memory, which with DDIO off
 * (or eADR) and ADR is its persistence domain. Any address of the target
 * will do (PCIe does not let the READ pass the posted WRITEs): it reads
 * 8 bytes of the fence target, which every peer may read whatever the
 * flushed range's region allows, into the bounce buffer and discards
 * them. rdma-core's native FLUSH (ibv_wr_flush, extended QP API) is not
 * in the rdma-core this builds against (v44): docs/durability.md. */
static struct loco_wr verbs_flush_read(const struct loco_wr *w)
{
	struct loco_wr r = *w;
	r.opcode = LOCO_OP_READ;
	r.space = LOCO_SPACE_ARENA;
	r.remote_off = 0;
	r.len = w->len ? VERBS_FLUSH_READ : 0;
	r.local = NULL;
	return r;
}

static int verbs_wr_one(struct verbs_sq *sq, const struct loco_wr *w,
			uint64_t seq, struct ibv_send_wr *s, struct ibv_sge *g,
			uint64_t *bhead)
{
	struct verbs_slot *slot = &sq->slot[seq & VERBS_RING_MASK];
	const struct verbs_rmr *rm;
	int r = verbs_wr_check(sq, w, &rm);
	if (r < 0)
		return r;
	struct loco_wr fr;
	bool fence = w->opcode == LOCO_OP_FLUSH ||
		     (w->opcode == LOCO_OP_READ && !w->len);
	if (w->opcode == LOCO_OP_FLUSH) {
		fr = verbs_flush_read(w);
		w = &fr;
	}
	memset(s, 0, sizeof(*s));
	memset(g, 0, sizeof(*g));
	*slot = (struct verbs_slot){ .wr_id = w->wr_id, .len = w->len,
				     .signaled = w->signaled != 0 };
	s->wr_id = verbs_wrid_make(sq->tag, seq);
	if (slot->signaled)
		s->send_flags = IBV_SEND_SIGNALED;
	verbs_wr_remote(sq, rm, w, fence, s);
	return verbs_wr_local(sq, w, s, g, slot, bhead);
}

static void verbs_wr_log(const struct verbs_sq *sq, const struct loco_wr *w,
			 unsigned i, unsigned n, int r)
{
	const char *op = w->opcode <= LOCO_OP_FLUSH ? verbs_op_names[w->opcode] :
			 "opcode?";
	loco_err("verbs", "peer %u: request %u of %u (%s %" PRIu32 " bytes at %s offset %"
		 PRIu64 ", local %p) refused: %s", sq->peer, i, n, op, w->len,
		 w->space == LOCO_SPACE_DM ? "device-memory" : "arena", w->remote_off,
		 w->local, loco_strerror(r));
}

int verbs_sq_build(struct verbs_sq *sq, const struct loco_wr *wr, unsigned n,
		   struct ibv_send_wr *swr, struct ibv_sge *sge,
		   uint64_t *bounce_head)
{
	uint64_t bhead = sq->bounce.head;
	for (unsigned i = 0; i < n; i++) {
		int r = verbs_wr_one(sq, &wr[i], sq->head + i, &swr[i], &sge[i],
				     &bhead);
		if (r == -EAGAIN && sq->bounce.tail == sq->bounce.head)
			r = -EMSGSIZE; /* the batch alone overflows the empty buffer */
		if (r < 0) {
			if (r != -EAGAIN)
				verbs_wr_log(sq, &wr[i], i, n, r);
			return r;
		}
		swr[i].next = i + 1 < n ? &swr[i + 1] : NULL;
	}
	*bounce_head = bhead;
	return 0;
}

void verbs_sq_commit(struct verbs_sq *sq, unsigned n, uint64_t bounce_head)
{
	sq->head += n;
	sq->bounce.head = bounce_head;
}

void verbs_sq_fail_partial(struct verbs_sq *sq, unsigned n, int status)
{
	uint64_t bhead = sq->bounce.head;
	for (unsigned i = 0; i < n; i++) {
		struct verbs_slot *s = &sq->slot[(sq->head + i) & VERBS_RING_MASK];
		s->silent = 1;
		if (s->uses_bounce)
			bhead = s->bounce_end;
	}
	verbs_sq_commit(sq, n, bhead);
	if (!verbs_sq_failed(sq)) {
		sq->fail_seq = sq->tail;
		sq->fail_status = status;
	}
	sq->done = sq->head;
}

bool verbs_sq_mark(struct verbs_sq *sq, uint64_t wrid, int status)
{
	uint64_t seq = sq->tail + ((wrid - sq->tail) & VERBS_SEQ_MASK);
	if (seq < sq->done || seq >= sq->head)
		return false;
	if (status == 0) {
		sq->done = seq + 1;
		return true;
	}
	if (!verbs_sq_failed(sq)) {
		sq->fail_seq = seq;
		sq->fail_status = status;
	}
	sq->done = sq->head; /* RC: nothing after a failure executes */
	return true;
}

/* Status of the request at SEQ, consuming the failure's own status for the
 * first signalled request at or after it. */
static int verbs_slot_status(struct verbs_sq *sq, uint64_t seq,
			     const struct verbs_slot *s)
{
	if (seq < sq->fail_seq)
		return 0;
	if (!sq->fail_reported && s->signaled && !s->silent) {
		sq->fail_reported = true;
		return sq->fail_status;
	}
	return -LOCO_EQP;
}

unsigned verbs_sq_drain(struct verbs_sq *sq, struct loco_cqe *out, unsigned max)
{
	unsigned n = 0;
	while (sq->tail < sq->done && n < max) {
		struct verbs_slot *s = &sq->slot[sq->tail & VERBS_RING_MASK];
		int st = verbs_slot_status(sq, sq->tail, s);
		if (st == 0 && s->copy_dst)
			memcpy(s->copy_dst, sq->bounce.buf + s->bounce_off, s->len);
		if (s->uses_bounce)
			sq->bounce.tail = s->bounce_end;
		if (s->signaled && !s->silent)
			out[n++] = (struct loco_cqe){ .wr_id = s->wr_id, .status = st,
						      .peer = sq->peer };
		sq->tail++;
	}
	return n;
}

int verbs_wc_errno(enum ibv_wc_status status)
{
	switch (status) {
	case IBV_WC_SUCCESS:
		return 0;
	case IBV_WC_REM_ACCESS_ERR:       /* rkey, bounds or permissions at the peer */
		return -EACCES;
	case IBV_WC_RETRY_EXC_ERR:        /* peer unreachable: no ACK after retries */
	case IBV_WC_RNR_RETRY_EXC_ERR:
	case IBV_WC_RESP_TIMEOUT_ERR:
		return -ETIMEDOUT;
	case IBV_WC_WR_FLUSH_ERR:         /* QP already in the error state */
		return -LOCO_EQP;
	case IBV_WC_LOC_LEN_ERR:
		return -EMSGSIZE;
	case IBV_WC_LOC_PROT_ERR:         /* local lkey / buffer not registered */
	case IBV_WC_LOC_ACCESS_ERR:
		return -EFAULT;
	case IBV_WC_LOC_QP_OP_ERR:
	case IBV_WC_REM_INV_REQ_ERR:      /* e.g. misaligned atomic, op not allowed */
	case IBV_WC_MW_BIND_ERR:
		return -EINVAL;
	case IBV_WC_REM_OP_ERR:
	case IBV_WC_REM_INV_RD_REQ_ERR:
		return -EREMOTEIO;
	case IBV_WC_REM_ABORT_ERR:
		return -ECONNABORTED;
	case IBV_WC_BAD_RESP_ERR:
	case IBV_WC_INV_EECN_ERR:
	case IBV_WC_INV_EEC_STATE_ERR:
	case IBV_WC_LOC_EEC_OP_ERR:
	case IBV_WC_LOC_RDD_VIOL_ERR:
		return -EPROTO;
	default:                          /* fatal, general, tag matching */
		return -EIO;
	}
}
