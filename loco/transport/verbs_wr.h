/* SPDX-License-Identifier: MIT */
/* verbs transport, the data path without a device behind it:
 *  - the access flags a region's memory registration grants;
 *  - turning loco_wr[] into ONE linked chain of ibv_send_wr (one doorbell):
 *    opcode, the target region's rkey and address (or the fence target's),
 *    inline decision, signalled flag, sge and lkey, bounce buffer;
 *  - the per-QP ring of posted requests that completions retire in post
 *    order (an unsignalled request completes with the next signalled one),
 *    copying READ and atomic results out of the bounce buffer;
 *  - the mapping of ibv_wc_status to errno.
 * The caller (verbs.c) owns the QP and does the ibv_post_send / poll.
 * Internal to the library: every symbol here is hidden. */
#ifndef LOCO_TRANSPORT_VERBS_WR_H
#define LOCO_TRANSPORT_VERBS_WR_H

#include <stdbool.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#include "loco/transport/transport.h"

#pragma GCC visibility push(hidden)

/* Send-queue depth: what the core keeps outstanding plus slack for the
 * zero-length fence READs it may add. */
#define VERBS_SQ_SLACK 16
#define VERBS_SQ_DEPTH (LOCO_QP_DEPTH + VERBS_SQ_SLACK)
#define VERBS_RING_SLOTS 512 /* power of two >= VERBS_SQ_DEPTH */
_Static_assert(VERBS_RING_SLOTS >= VERBS_SQ_DEPTH &&
	       (VERBS_RING_SLOTS & (VERBS_RING_SLOTS - 1)) == 0,
	       "ring must hold the send queue and be a power of two");

/* ibv wr_id = QP tag (its index in the CQ) in the top 8 bits, the request's
 * sequence number in the low 56. */
#define VERBS_SEQ_BITS 56
#define VERBS_SEQ_MASK ((UINT64_C(1) << VERBS_SEQ_BITS) - 1)

static inline uint64_t verbs_wrid_make(uint8_t tag, uint64_t seq)
{
	return ((uint64_t)tag << VERBS_SEQ_BITS) | (seq & VERBS_SEQ_MASK);
}

static inline uint8_t verbs_wrid_tag(uint64_t wrid)
{
	return (uint8_t)(wrid >> VERBS_SEQ_BITS);
}

/* A registered local range [lo, hi). */
struct verbs_lmr {
	uintptr_t lo;
	uintptr_t hi;
	uint32_t lkey;
};

/* Per-QP bounce buffer, used as a ring: positions grow monotonically,
 * the buffer offset is position % cap. */
struct verbs_bounce {
	uint8_t *buf;
	uint64_t cap;
	uint32_t lkey;
	uint64_t head;   /* next free position */
	uint64_t tail;   /* oldest position still owned by a posted request */
};

/* One memory space of the peer the QP targets: where it starts, how long
 * it is; in the arena, the rkey of its fence target (its first
 * LOCO_FENCE_LEN bytes, read-only). Every other request carries the rkey
 * of its own region's registration (loco_wr.key). */
struct verbs_rmr {
	uint64_t addr;
	uint64_t len;
	uint32_t rkey;
};

/* The ibv access flags of the registration of a region peers may reach
 * with ACCESS (LOCO_REGION_REMOTE_*) on a NIC with (ATOMICS) or without
 * RDMA atomics: exactly those, plus local write where the verbs require
 * it (remote write and atomics). 0 for no remote access. */
int verbs_mr_access(unsigned access, bool atomics);

/* One posted request, until retired. */
struct verbs_slot {
	uint64_t wr_id;       /* the caller's */
	void *copy_dst;       /* READ/atomic destination to fill from the bounce buffer */
	uint64_t bounce_end;  /* bounce position released when retired */
	uint32_t bounce_off;
	uint32_t len;
	uint8_t signaled;
	uint8_t uses_bounce;
	uint8_t silent;       /* never report (part of a batch that was refused) */
};

/* Send-side bookkeeping of one QP. Sequence numbers: TAIL <= DONE <= HEAD;
 * [TAIL, DONE) are known complete but not yet retired (reported). */
struct verbs_sq {
	struct verbs_slot slot[VERBS_RING_SLOTS];
	uint64_t head;        /* next sequence number to post */
	uint64_t tail;        /* oldest not retired */
	uint64_t done;        /* everything below is complete */
	uint64_t fail_seq;    /* first failed request, UINT64_MAX if none */
	int fail_status;      /* its status (negative) */
	bool fail_reported;   /* FAIL_STATUS went to a signalled request */
	uint32_t depth;       /* send-queue slots the QP has */
	uint32_t max_inline;  /* the QP's max_inline_data */
	uint32_t peer;        /* reported in every completion */
	uint8_t tag;          /* high bits of every ibv wr_id */
	bool atomics;         /* the NIC executes RDMA atomics */
	struct verbs_lmr arena;
	struct verbs_rmr remote;     /* the peer's arena (LOCO_SPACE_ARENA) and
				      * its fence rkey */
	struct verbs_rmr remote_dm;  /* its device memory (LOCO_SPACE_DM), len 0
				      * if it has none; each region's
				      * registration there is zero-based */
	struct verbs_bounce bounce;
};

/* Initialise SQ (everything but the registrations, which the caller sets). */
void verbs_sq_init(struct verbs_sq *sq, uint32_t depth, uint32_t max_inline,
		   uint32_t peer, uint8_t tag, bool atomics);

/* Free send-queue slots. */
static inline uint32_t verbs_sq_free(const struct verbs_sq *sq)
{
	return sq->depth - (uint32_t)(sq->head - sq->tail);
}

/* Build the chain for N requests (1 <= N <= verbs_sq_free) into SWR[0..N-1]
 * and SGE[0..N-1], linked in order, SWR[N-1].next = NULL. Writes the ring
 * slots HEAD..HEAD+N-1 and copies unregistered WRITE sources into the bounce
 * buffer, but commits nothing: *BOUNCE_HEAD receives the bounce position to
 * commit with verbs_sq_commit. Each request targets the peer's arena or
 * device memory by its space, with its region's rkey (KEY; in device memory
 * at its offset from the region's start, KEY_OFF); a zero-length READ and
 * FLUSH's READ go to the fence target with the fence rkey. Returns 0,
 * -EINVAL (malformed request, unknown space, outside the peer's space or
 * before its region), -EOPNOTSUPP (atomics on a NIC without them),
 * -EMSGSIZE (the batch's unregistered buffers do not fit the bounce
 * buffer even when it is empty), or -EAGAIN (bounce buffer busy with
 * outstanding requests: poll, then retry). */
int verbs_sq_build(struct verbs_sq *sq, const struct loco_wr *wr, unsigned n,
		   struct ibv_send_wr *swr, struct ibv_sge *sge,
		   uint64_t *bounce_head);

/* The first N built requests were handed to the NIC. */
void verbs_sq_commit(struct verbs_sq *sq, unsigned n, uint64_t bounce_head);

/* The NIC accepted only the first N built requests of a batch the caller
 * reports as refused: commit them as silent and fail every outstanding
 * request with STATUS (their outcome is unknown; the QP is going down). */
void verbs_sq_fail_partial(struct verbs_sq *sq, unsigned n, int status);

/* A completion for the request with ibv wr_id WRID arrived with STATUS
 * (0 or negative). Success completes everything up to it; an error also
 * dooms every later request (the QP is in the error state). Returns false
 * if WRID is not outstanding (stale, e.g. a flush already accounted for). */
bool verbs_sq_mark(struct verbs_sq *sq, uint64_t wrid, int status);

/* True if the QP failed (posting must be refused). */
static inline bool verbs_sq_failed(const struct verbs_sq *sq)
{
	return sq->fail_seq != UINT64_MAX;
}

/* Retire up to the DONE mark: copy READ/atomic results out of the bounce
 * buffer for successful requests, release bounce space, and write one
 * completion per signalled request into OUT (at most MAX). After a failure
 * the first signalled request at or after the failed one gets the failure's
 * status, later ones -LOCO_EQP. Returns the number written; call again while
 * verbs_sq_pending. */
unsigned verbs_sq_drain(struct verbs_sq *sq, struct loco_cqe *out, unsigned max);

static inline bool verbs_sq_pending(const struct verbs_sq *sq)
{
	return sq->tail != sq->done;
}

/* 0 for IBV_WC_SUCCESS, otherwise a negative errno / -LOCO_EQP:
 * remote access -EACCES, retries exceeded -ETIMEDOUT, flushed -LOCO_EQP, ... */
int verbs_wc_errno(enum ibv_wc_status status);

#pragma GCC visibility pop

#endif
