/* SPDX-License-Identifier: MIT */
/* queue (LOCO §5.4): a linearizable FIFO of 32-bit values that every
 * participant pushes to and pops from, after Morrison and Afek's cyclic
 * ring queue (CRQ, PPoPP'13) with the ring closed for good instead of
 * chained (LCRQ): a full queue says so.
 *
 * Two atomic_vars count positions: "head" (pops, hosted at the lowest
 * member) and "tail" (pushes, at the second lowest). The ring has R =
 * slots_per_node x members cells, striped: cell i lives at member (i mod
 * P) in its region "cells". A cell is one 8-byte word holding the value,
 * a full bit, CRQ's unsafe bit and the cycle of the position it serves
 * (position = cycle x R + i), so one remote CAS both checks the cell's
 * state and publishes (or takes) the value: an item is never visible
 * before its value, and each pop takes exactly one push.
 *
 * push: t = FAA(tail); CAS the cell of t from {cycle(t), empty} to
 *   {cycle(t), full, v} (the expected state is a guess that holds unless
 *   the cell is behind or unsafe; the CAS returns the real state, and CRQ
 *   decides from it). A cell still full from the previous lap, or claimed
 *   by a pop that went past t, makes the push take a new position; when
 *   t - head >= R the queue is full: the push gives t back (CAS tail from
 *   t + 1 to t, if no push took a later position) and returns -EAGAIN.
 * pop: h = FAA(head); READ the cell; take the value with a CAS to
 *   {cycle(h) + 1, empty}, or close the cell to a push that has not
 *   arrived (same CAS on an empty cell, waiting briefly first when tail
 *   says a push of h is under way); if tail <= h + 1 the queue is empty:
 *   move tail up to head if it fell behind (CRQ's fixState), -ENODATA.
 *
 * Positions are 30-bit cycles of R: past 2^30 x R pushes the queue
 * reports -EOVERFLOW.
 *
 * Pauses. A pop that closes the cell of a push still under way (after a
 * few READs) gives up on that push without acting for it: the cell's new
 * cycle makes the pusher's late CAS fail, and the push takes a new
 * position. Every step of either side is a CAS or FAA that a late peer
 * cannot slip past, so a paused pusher or popper needs no fence
 * (lin_queue_pauses_*: every node stopped 10 times for 50 ms).
 *
 *	struct loco_queue q;
 *	loco_queue_init(&q, mgr, NULL, "q", 1024, 0);
 *	loco_mgr_wait_ready(mgr, -1);
 *	loco_queue_push(&q, thr, 42, -1);
 *	loco_queue_try_pop(&q, thr, &v);     (0, or -ENODATA when empty)
 *
 * Sub-channels "<q>/head", "<q>/tail"; region "<q>.cells"
 * (slots_per_node x 8 bytes at every member). Peers may READ and CAS/FAA
 * all of them, never WRITE. */
#ifndef LOCO_CHANNELS_QUEUE_H
#define LOCO_CHANNELS_QUEUE_H

#include <assert.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channels/atomic_var.h>
#include <loco/channel.h>

/* Remote layout of a cell word: value in bits 0..31, full bit 32, unsafe
 * bit 33, cycle in bits 34..63. All zero: cycle 0, empty, safe. */
#define LOCO_QUEUE_FULL (UINT64_C(1) << 32)
#define LOCO_QUEUE_UNSAFE (UINT64_C(1) << 33)
#define LOCO_QUEUE_CYCLE_SHIFT 34
#define LOCO_QUEUE_CYCLES (UINT64_C(1) << 30)

static inline uint64_t loco_queue_cell(uint64_t cycle, uint64_t flags,
				       uint32_t value)
{
	return cycle << LOCO_QUEUE_CYCLE_SHIFT | flags | value;
}

static inline uint64_t loco_queue_cell_cycle(uint64_t w)
{
	return w >> LOCO_QUEUE_CYCLE_SHIFT;
}

struct loco_queue_stats {
	uint64_t pushes, pops;   /* successful */
	uint64_t empty, full;    /* -ENODATA, -EAGAIN */
	uint64_t retries;        /* positions passed without a value (failed
				  * CRQ attempts of pushes and pops) */
	uint64_t fixes;          /* tail moved up to head */
};

struct loco_queue {
	struct loco_channel base;
	struct loco_atomic_var head, tail;
	uint32_t nmembers;
	uint32_t member[LOCO_MAX_NODES];  /* member ids, ascending */
	uint32_t per_node;                /* cells per member */
	uint64_t ring;                    /* R = per_node x nmembers */
	unsigned idx;                     /* expectation index of "cells" */
	struct {                          /* struct loco_queue_stats */
		_Atomic uint64_t pushes, pops, empty, full, retries, fixes;
	} ctr;
};
static_assert(offsetof(struct loco_queue, base) == 0, "base first");

/* Create endpoint NAME (under PARENT, may be NULL) of a queue with
 * SLOTS_PER_NODE (>= 1) cells at this node and each of PARTICIPANTS (0:
 * every compute node), and start joining. Every member must use the same
 * SLOTS_PER_NODE (checked by the join) and PARTICIPANTS. Returns 0,
 * -EINVAL, -ENOMEM or -EEXIST; on failure nothing is left to finish. */
int loco_queue_init(struct loco_queue *q, struct loco_mgr *mgr,
		    struct loco_channel *parent, const char *name,
		    uint32_t slots_per_node, uint64_t participants);

/* Unregister and free this node's cells. Ops must be complete. */
void loco_queue_fini(struct loco_queue *q);

/* Snapshot of this endpoint's counters (all its threads). */
void loco_queue_stats(struct loco_queue *q, struct loco_queue_stats *out);

/* Node and byte offset of ring cell I (< ring) in that node's "cells". */
static inline uint32_t loco_queue_cell_node(const struct loco_queue *q,
					    uint64_t i)
{
	return q->member[i % q->nmembers];
}

static inline uint64_t loco_queue_cell_off(const struct loco_queue *q,
					   uint64_t i)
{
	return i / q->nmembers * 8;
}

/* Append V. Returns 0, -EAGAIN (full: R items, or fewer while positions
 * that concurrent full pushes could not give back wait to be passed by
 * the pops), -EOVERFLOW, -ENOTCONN before every
 * member joined, or an op error (the push may then have happened).
 * Ordering: linearizable with every push and pop of every node; the CAS
 *   that stores V is the linearization point of a push. Like any remote
 *   atomic, it is not ordered after THR's earlier WRITEs to other peers:
 *   fence them first to publish data through V.
 * Completion: synchronous: 2 round trips (FAA, CAS) when uncontended.
 * Caller: any thread, with its own THR. */
int loco_queue_try_push(struct loco_queue *q, struct loco_thread *thr,
			uint32_t v);

/* As loco_queue_try_push, retrying while the queue is full (spin briefly,
 * yield, nap) up to TIMEOUT_MS (< 0: the manager default): -ETIMEDOUT.
 * Ordering: as loco_queue_try_push.
 * Completion: synchronous.
 * Caller: as loco_queue_try_push. */
int loco_queue_push(struct loco_queue *q, struct loco_thread *thr, uint32_t v,
		    int timeout_ms);

/* Remove the oldest value into *V. Returns 0, -ENODATA if the queue is
 * empty, -EOVERFLOW, -ENOTCONN, or an op error (a value may then have
 * been taken and lost).
 * Ordering: linearizable; an empty answer is linearized at the READ of
 *   tail that found tail <= h + 1.
 * Completion: synchronous: 3 round trips (FAA, READ, CAS) uncontended;
 *   more when the queue is empty.
 * Caller: any thread, with its own THR. */
int loco_queue_try_pop(struct loco_queue *q, struct loco_thread *thr,
		       uint32_t *v);

/* Wait for a value up to TIMEOUT_MS (< 0: the manager default): reads
 * head and tail (one round trip) and pops only when tail > head, so an
 * empty queue costs no FAA. Returns 0, -ETIMEDOUT, or as try_pop.
 * Ordering: as loco_queue_try_pop.
 * Completion: synchronous.
 * Caller: as loco_queue_try_pop. */
int loco_queue_pop(struct loco_queue *q, struct loco_thread *thr, uint32_t *v,
		   int timeout_ms);

#endif
