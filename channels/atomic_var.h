/* SPDX-License-Identifier: MIT */
/* atomic_var (LOCO §5.1.1): one 8-byte word hosted at one participant (the
 * host); every participant reads, writes, compare-and-swaps and
 * fetch-and-adds it remotely, the host too: on RDMA, CPU atomics are not
 * atomic with NIC atomics, so the host goes through the transport like
 * everyone else. Each endpoint keeps a cached copy: the last value its
 * synchronous operations saw.
 *
 *	struct loco_atomic_var ctr;
 *	loco_atomic_var_init(&ctr, mgr, NULL, "ctr", 0, 0);
 *	loco_mgr_wait_ready(mgr, -1);
 *	loco_atomic_var_faa(&ctr, thr, 1, &old);
 *
 * Region: "<channel>.word" (8 bytes, at the host only), which every
 * participant may read, write and CAS/FAA unless the host's flags say
 * less (loco_atomic_var_init_ex: a lock word that is never written, only
 * read and CAS/FAA'd, passes LOCO_REGION_REMOTE_READ |
 * LOCO_REGION_REMOTE_ATOMIC; a refused op fails with -EACCES). With
 * LOCO_REGION_HOT the word goes to the host's device memory (verbs: NIC
 * memory) when there is room, else to its arena with one warning; shm has
 * none, so the same code runs everywhere. The host never touches the
 * word with the CPU either way. */
#ifndef LOCO_CHANNELS_ATOMIC_VAR_H
#define LOCO_CHANNELS_ATOMIC_VAR_H

#include <assert.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channel.h>

struct loco_atomic_var {
	struct loco_channel base;
	uint32_t host;
	unsigned idx;               /* expectation index of "word" */
	_Atomic uint64_t cached;    /* last value seen */
};
static_assert(offsetof(struct loco_atomic_var, base) == 0, "base first");

/* Create endpoint NAME (under PARENT, may be NULL) of a word hosted at node
 * HOST (this node or one of PARTICIPANTS; 0: every compute node). The word
 * starts at 0. Starts joining: the host joins every participant, the
 * others the host. Returns 0, -EINVAL, -ENOMEM or -EEXIST; on failure
 * nothing is left to finish. */
int loco_atomic_var_init(struct loco_atomic_var *av, struct loco_mgr *mgr,
			 struct loco_channel *parent, const char *name,
			 uint32_t host, uint64_t participants);

/* As loco_atomic_var_init with region FLAGS: LOCO_REGION_HOT (the word in
 * the host's device memory if it has room) and the word's remote access
 * (LOCO_REGION_REMOTE_READ, _WRITE, _ATOMIC; none of them: all three).
 * Only the host's flags matter; the others learn where the word is, and
 * what they may do to it, when they join. -EINVAL for an unknown flag or
 * LOCO_REGION_REMOTE_NONE. */
int loco_atomic_var_init_ex(struct loco_atomic_var *av, struct loco_mgr *mgr,
			    struct loco_channel *parent, const char *name,
			    uint32_t host, uint64_t participants, unsigned flags);

/* Unregister (and free the word at the host). Ops must be complete. */
void loco_atomic_var_fini(struct loco_atomic_var *av);

/* The last value this endpoint's synchronous ops saw (0 at first): a
 * hint, possibly stale, e.g. the first guess of a CAS loop. */
static inline uint64_t loco_atomic_var_cached(const struct loco_atomic_var *av)
{
	/* Relaxed: a hint; nothing is published with it. */
	return atomic_load_explicit(&av->cached, memory_order_relaxed);
}

/* Post an 8-byte READ of the word into *DST. The async forms return
 * -ENOTCONN before the host joined and do not update the cached copy.
 * Ordering: atomic; after THR's earlier WRITEs to the host are placed.
 * Completion: ACK (unioned, may be NULL); *DST valid once it completes.
 * Caller: the thread owning THR. */
int loco_atomic_var_post_read(struct loco_atomic_var *av,
			      struct loco_thread *thr, uint64_t *dst,
			      struct loco_ack *ack);

/* Post a compare-and-swap: if the word is EXPECT, make it DESIRED; *OLD
 * gets the previous value either way.
 * Ordering: atomic with every other CAS/FAA on the word (all nodes).
 * Completion: ACK (unioned, may be NULL); *OLD valid once it completes.
 * Caller: the thread owning THR. */
int loco_atomic_var_post_cas(struct loco_atomic_var *av,
			     struct loco_thread *thr, uint64_t expect,
			     uint64_t desired, uint64_t *old,
			     struct loco_ack *ack);

/* Post a fetch-and-add of ADD (wrapping); *OLD gets the previous value.
 * Ordering: atomic with every other CAS/FAA on the word (all nodes).
 * Completion: ACK (unioned, may be NULL); *OLD valid once it completes.
 * Caller: the thread owning THR. */
int loco_atomic_var_post_faa(struct loco_atomic_var *av,
			     struct loco_thread *thr, uint64_t add,
			     uint64_t *old, struct loco_ack *ack);

/* Synchronous read into *OUT; updates the cached copy.
 * Ordering: as loco_atomic_var_post_read.
 * Completion: done on return 0 (else -ENOTCONN, -ETIMEDOUT, op error).
 * Caller: the thread owning THR. */
int loco_atomic_var_read(struct loco_atomic_var *av, struct loco_thread *thr,
			 uint64_t *out);

/* Synchronous write of VALUE, as a CAS loop starting from the cached
 * copy: a plain RDMA WRITE is not atomic with NIC atomics, a CAS is. Costs
 * one CAS when the cache is right, one more per concurrent change.
 * Ordering: atomic with CAS/FAA; like them not ordered with earlier WRITEs
 *   of THR to other peers: fence first to publish with it.
 * Completion: the word held VALUE at some point before return 0.
 * Caller: the thread owning THR. */
int loco_atomic_var_write(struct loco_atomic_var *av, struct loco_thread *thr,
			  uint64_t value);

/* Synchronous CAS; *OLD gets the previous value (success iff == EXPECT);
 * updates the cached copy (to DESIRED on success, else to *OLD).
 * Ordering: as loco_atomic_var_post_cas.
 * Completion: done on return 0.
 * Caller: the thread owning THR. */
int loco_atomic_var_cas(struct loco_atomic_var *av, struct loco_thread *thr,
			uint64_t expect, uint64_t desired, uint64_t *old);

/* Synchronous FAA; *OLD gets the previous value; cache = *OLD + ADD.
 * Ordering: as loco_atomic_var_post_faa.
 * Completion: done on return 0.
 * Caller: the thread owning THR. */
int loco_atomic_var_faa(struct loco_atomic_var *av, struct loco_thread *thr,
			uint64_t add, uint64_t *old);

#endif
