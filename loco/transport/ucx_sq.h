/* SPDX-License-Identifier: MIT */
/* ucx transport, the bookkeeping of one QP without UCX behind it:
 *  - every request's local memory is the transport's, never the caller's:
 *    WRITE sources and atomic operands are copied in at post time, READ
 *    and atomic results copied out when the request is retired (a bounce
 *    ring per QP; a buffer of its own for a request too big for it). So
 *    once a QP has failed or been aborted nothing UCX still does can touch
 *    the caller's buffers, whatever UCX's cancellation semantics;
 *  - the ring of posted requests, retired strictly in post order (UCX
 *    completes requests of one endpoint in any order), with the verbs
 *    transport's failure rules: the first failure goes to the first
 *    signalled request at or after it, later ones get -LOCO_EQP;
 *  - requests still running when their QP failed: kept as orphans until
 *    UCX is done with them, so their memory is not reused or freed early.
 * The caller (ucx.c) issues the UCX operations and checks requests through
 * struct ucx_req_ops. Internal to the library: every symbol is hidden. */
#ifndef LOCO_TRANSPORT_UCX_SQ_H
#define LOCO_TRANSPORT_UCX_SQ_H

#include <stdbool.h>
#include <stdint.h>

#include "loco/transport/transport.h"

#pragma GCC visibility push(hidden)

/* What the core keeps outstanding plus slack for its fence READs. */
#define UCX_SQ_DEPTH (LOCO_QP_DEPTH + 16)
#define UCX_RING_SLOTS 512 /* power of two >= UCX_SQ_DEPTH */
_Static_assert(UCX_RING_SLOTS >= UCX_SQ_DEPTH &&
	       (UCX_RING_SLOTS & (UCX_RING_SLOTS - 1)) == 0,
	       "ring must hold the send queue and be a power of two");
#define UCX_BOUNCE_BYTES (64u * 1024)
/* A request with more local bytes than this gets a buffer of its own
 * (so does one of a batch that overflows the empty ring). */
#define UCX_BOUNCE_MAX_OP (UCX_BOUNCE_BYTES / 4)
/* Local bytes of an atomic: operand (compare for CAS) at 0, the reply
 * buffer (swap value in, old value out) at 8. */
#define UCX_ATOMIC_BYTES 16

/* One posted request, until retired. */
struct ucx_slot {
	void *req;            /* UCX request not yet seen complete, or NULL */
	uint64_t wr_id;       /* the caller's */
	void *copy_dst;       /* READ / atomic destination, filled at retirement */
	uint8_t *buf;         /* the request's local memory; NULL if it has none */
	uint64_t bounce_end;  /* bounce position released at retirement */
	uint32_t copy_off;    /* where in BUF the result starts */
	uint32_t copy_len;
	int status;           /* UCX's verdict once complete: 0 or -errno */
	uint8_t signaled;
	uint8_t heap;         /* BUF is malloc'd */
	uint8_t silent;       /* issued as part of a refused batch: never reported */
	uint8_t uses_bounce;
	/* Executed by loco's messages (ucx_am.c): the target's reply, which
	 * carries TOKEN, has not arrived yet. */
	uint8_t am_wait;
	uint8_t am_op;        /* its opcode */
	uint64_t token;
};

struct ucx_bounce {
	uint8_t *buf;
	uint64_t cap;
	uint64_t head;        /* next free position (grows monotonically) */
	uint64_t tail;        /* oldest position still owned by a request */
};

/* A request that outlived its slot (reported failed while UCX still runs it). */
struct ucx_orphan {
	void *req;
	void *heap;           /* its own buffer, if it had one */
};

struct ucx_sq {
	struct ucx_slot slot[UCX_RING_SLOTS];
	uint64_t head;        /* next sequence number */
	uint64_t tail;        /* oldest not retired */
	uint64_t fail_seq;    /* first failed request, UINT64_MAX if none */
	int fail_status;
	bool fail_reported;
	uint32_t peer;        /* reported in every completion */
	struct ucx_bounce bounce;
	struct ucx_orphan orphan[UCX_RING_SLOTS];
	unsigned orphans;
};

/* How the ring asks about a UCX request. CHECK returns 1 and sets
 * *STATUS (0 or -errno) when REQ is complete, 0 while it runs; FREE
 * releases it (complete or not: UCX then finishes it on its own). */
struct ucx_req_ops {
	int (*check)(void *ctx, void *req, int *status);
	void (*free)(void *ctx, void *req);
	void *ctx;
};

/* Initialise SQ with its bounce buffer. 0 or -ENOMEM. */
int ucx_sq_init(struct ucx_sq *sq, uint32_t peer);
/* Free the bounce buffer, unless KEEP (a request may still write it):
 * then return it for the caller to free later, else NULL. */
void *ucx_sq_fini(struct ucx_sq *sq, bool keep);

static inline bool ucx_sq_failed(const struct ucx_sq *sq)
{
	return sq->fail_seq != UINT64_MAX;
}

static inline uint64_t ucx_sq_outstanding(const struct ucx_sq *sq)
{
	return sq->head - sq->tail;
}

/* Stage N requests (1 <= N): check each (opcode, length, space ARENA and
 * the peer's arena of ARENA_LEN bytes; CAS and FAA 8 bytes and aligned),
 * give it local memory and copy WRITE data and atomic operands into it,
 * filling slots HEAD..HEAD+N-1 without committing them. Returns 0;
 * -EINVAL (malformed or out of bounds, or N > UCX_SQ_DEPTH), -ENOMEM, or
 * -EAGAIN (ring or bounce buffer busy: retire, then retry). On failure
 * nothing is staged. */
int ucx_sq_stage(struct ucx_sq *sq, const struct loco_wr *wr, unsigned n,
		 uint64_t arena_len, uint64_t *bounce_head);
/* Slot of the I-th staged request. */
static inline struct ucx_slot *ucx_sq_staged(struct ucx_sq *sq, unsigned i)
{
	return &sq->slot[(sq->head + i) & (UCX_RING_SLOTS - 1)];
}
/* The N staged requests were issued: commit them. */
void ucx_sq_commit(struct ucx_sq *sq, unsigned n, uint64_t bounce_head);
/* Only the first K of N staged requests were issued before one was
 * refused with STATUS: commit those K as silent, drop the other staged
 * ones and fail the QP. */
void ucx_sq_refused(struct ucx_sq *sq, unsigned k, unsigned n,
		    uint64_t bounce_head, int status);
/* The QP failed (endpoint error, abort): every outstanding request fails;
 * the first signalled one gets STATUS. A no-op if it already failed. */
void ucx_sq_fail(struct ucx_sq *sq, int status);
/* Retire requests in post order while they are complete (their UCX
 * request done and, for a request executed by a message, its reply in: see
 * ucx_sq_reply; or the QP failed): copy results out of successful READs and atomics, release
 * their memory, write one completion per signalled request into OUT (at
 * most MAX). Returns the number written. */
unsigned ucx_sq_drain(struct ucx_sq *sq, const struct ucx_req_ops *ops,
		      struct loco_cqe *out, unsigned max);
/* The slot of a request executed by a message whose reply carries TOKEN
 * (sequence number in its low UCX_TOKEN_SEQ_BITS), if it still awaits
 * it; else NULL (retired, its QP failed: the reply is dropped). The
 * caller fills the result into the slot's buffer and clears am_wait. */
#define UCX_TOKEN_SEQ_BITS 40
struct ucx_slot *ucx_sq_reply(struct ucx_sq *sq, uint64_t token);
/* Check the orphans; free the finished ones. Returns how many still run. */
unsigned ucx_sq_reap(struct ucx_sq *sq, const struct ucx_req_ops *ops);

#pragma GCC visibility pop

#endif
