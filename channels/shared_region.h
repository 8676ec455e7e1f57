/* SPDX-License-Identifier: MIT */
/* shared_region (LOCO §5.1.1): a symmetric region of LEN bytes on every
 * participant; any participant reads and writes any participant's copy by
 * offset. The region gives no consistency of its own: concurrent accesses
 * need a protocol on top (locks, owned_vars, fences).
 *
 *	struct loco_shared_region sr;
 *	loco_shared_region_init(&sr, mgr, NULL, "table", 4096, 0);
 *	loco_mgr_wait_ready(mgr, -1);
 *	loco_shared_region_write(&sr, thr, 2, 128, buf, 64);
 *
 * Region name: "<channel>.data", which peers may read, write and CAS/FAA
 * unless loco_shared_region_init_ex declares less. */
#ifndef LOCO_CHANNELS_SHARED_REGION_H
#define LOCO_CHANNELS_SHARED_REGION_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channel.h>

struct loco_shared_region {
	struct loco_channel base;
	struct loco_region *local;  /* this node's copy */
	uint64_t len;
	unsigned idx;               /* expectation index of "data" */
};
static_assert(offsetof(struct loco_shared_region, base) == 0, "base first");

/* Create the endpoint NAME (under PARENT, may be NULL) with a zeroed local
 * copy of LEN bytes and start joining PARTICIPANTS (a bit per node id; 0:
 * every compute node). Every participant must use the same LEN, or the
 * join fails with -LOCO_EMISMATCH. Returns 0, -EINVAL (bad name, LEN 0),
 * -ENOMEM (arena full) or -EEXIST (name taken on this node). */
int loco_shared_region_init(struct loco_shared_region *sr, struct loco_mgr *mgr,
			    struct loco_channel *parent, const char *name,
			    uint64_t len, uint64_t participants);

/* As loco_shared_region_init with region FLAGS for this node's copy:
 * LOCO_REGION_HOT and the remote access peers (and this node, through the
 * transport) have to it, LOCO_REGION_REMOTE_READ, _WRITE, _ATOMIC (none
 * of them: all three); an op it does not allow fails with -EACCES.
 * -EINVAL for an unknown flag. */
int loco_shared_region_init_ex(struct loco_shared_region *sr,
			       struct loco_mgr *mgr, struct loco_channel *parent,
			       const char *name, uint64_t len,
			       uint64_t participants, unsigned flags);

/* Unregister and free the local copy. Ops posted on it must be complete. */
void loco_shared_region_fini(struct loco_shared_region *sr);

/* This node's copy, for local loads and stores (use atomics where peers
 * access the same bytes concurrently). */
static inline void *loco_shared_region_local(const struct loco_shared_region *sr)
{
	return sr->local->base;
}

static inline uint64_t loco_shared_region_len(const struct loco_shared_region *sr)
{
	return sr->len;
}

/* Descriptor of NODE's copy (this node's own included), for ops this
 * header does not wrap (CAS, FAA, batches). NULL if NODE is not a
 * participant or has not joined yet. */
const struct loco_rregion *loco_shared_region_at(struct loco_shared_region *sr,
						 uint32_t node);

/* Post a READ of LEN bytes at OFF of NODE's copy into DST.
 * Returns 0, -EINVAL (NODE not a participant, out of bounds) or -ENOTCONN
 * (NODE has not joined yet).
 * Ordering: as loco_post_read: after this thread's earlier WRITEs to NODE
 *   are placed; nothing else is ordered. Reads wider than 8 bytes may see
 *   a concurrent writer's update torn at 8-byte granularity.
 * Completion: ACK (unioned, may be NULL); DST is untouchable until then.
 * Caller: the thread owning THR; NODE may be this node. */
int loco_shared_region_post_read(struct loco_shared_region *sr,
				 struct loco_thread *thr, uint32_t node,
				 uint64_t off, void *dst, uint32_t len,
				 struct loco_ack *ack);

/* Post a WRITE of LEN bytes from SRC at OFF of NODE's copy.
 * Returns as loco_shared_region_post_read.
 * Ordering: placed after this thread's earlier ops to NODE; visible to
 *   other nodes only after a fence (loco_fence) by this thread.
 * Completion: ACK (unioned, may be NULL); SRC must not change until then.
 * Caller: the thread owning THR; NODE may be this node. */
int loco_shared_region_post_write(struct loco_shared_region *sr,
				  struct loco_thread *thr, uint32_t node,
				  uint64_t off, const void *src, uint32_t len,
				  struct loco_ack *ack);

/* Synchronous READ: as loco_shared_region_post_read, then wait.
 * Ordering: as loco_shared_region_post_read.
 * Completion: DST holds the data on return 0 (or -ETIMEDOUT, op error).
 * Caller: the thread owning THR. */
int loco_shared_region_read(struct loco_shared_region *sr,
			    struct loco_thread *thr, uint32_t node, uint64_t off,
			    void *dst, uint32_t len);

/* Synchronous WRITE: as loco_shared_region_post_write, then wait.
 * Ordering: as loco_shared_region_post_write: acknowledged on return, not
 *   necessarily placed; fence before publishing it.
 * Completion: SRC may be reused on return 0.
 * Caller: the thread owning THR. */
int loco_shared_region_write(struct loco_shared_region *sr,
			     struct loco_thread *thr, uint32_t node,
			     uint64_t off, const void *src, uint32_t len);

#endif
