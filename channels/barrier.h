/* SPDX-License-Identifier: MIT */
/* barrier (LOCO Fig. 1a, after Gupta et al.): each participant counts its
 * arrivals in its SST row; a wait publishes count+1 and returns when every
 * row has reached it.
 *
 *	struct loco_barrier bar;
 *	loco_barrier_init(&bar, mgr, NULL, "bar", 0);
 *	loco_mgr_wait_ready(mgr, -1);
 *	loco_barrier_wait(&bar, thr, -1);
 *
 * Sub-channels: "<bar>/sst" with 8-byte rows "<bar>/sst/ov<ID>". */
#ifndef LOCO_CHANNELS_BARRIER_H
#define LOCO_CHANNELS_BARRIER_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channels/sst.h>
#include <loco/channel.h>

struct loco_barrier {
	struct loco_channel base;
	struct loco_sst sst;        /* rows: uint64_t arrival counts */
	uint64_t count;             /* arrivals of this node */
	bool pending;               /* count published, not yet passed */
	bool ready;                 /* every row seen joined */
	struct loco_ack ack;        /* the current round's push */
};
static_assert(offsetof(struct loco_barrier, base) == 0, "base first");

/* Create endpoint NAME (under PARENT, may be NULL) for this node and
 * PARTICIPANTS (0: every compute node) and start joining. Returns 0,
 * -EINVAL, -ENOMEM or -EEXIST; on failure nothing is left to finish. */
int loco_barrier_init(struct loco_barrier *b, struct loco_mgr *mgr,
		      struct loco_channel *parent, const char *name,
		      uint64_t participants);

/* Finish the barrier and its SST. The last wait's push must be complete
 * (e.g. the waiting thread destroyed or fenced). */
void loco_barrier_fini(struct loco_barrier *b);

/* Arrive and wait until every participant has arrived as often: global
 * fence, count++, store the count in this node's row, push it to all
 * (placed), then wait (spin briefly, then yield) until every row >= count.
 * Returns 0, -ENOTCONN before the barrier is ready (nothing done),
 * -ETIMEDOUT after TIMEOUT_MS (< 0: the manager default) or a fence/push
 * error. After -ETIMEDOUT the arrival stands: the next call resumes the
 * same round without arriving again.
 * Ordering: a release and an acquire: every remote op any thread of any
 *   participant issued before its arrival is placed before any
 *   participant returns, and loads after the return see what the others
 *   stored before arriving (LOCO §5.4: global fence).
 * Completion: synchronous.
 * Caller: one waiting thread per node at a time; THR's owner. */
int loco_barrier_wait(struct loco_barrier *b, struct loco_thread *thr,
		      int timeout_ms);

/* Arrivals of this node so far (rounds passed, plus one while pending). */
static inline uint64_t loco_barrier_count(const struct loco_barrier *b)
{
	return b->count;
}

#endif
