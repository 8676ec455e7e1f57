/* SPDX-License-Identifier: MIT */
/* The fence guard of the transports whose initiator executes its ops on
 * shared memory (shm, shm-weak, ucx-sm: fence_file.h), shared
 * by the transport and the inline path of <loco/loco.h>: not API.
 *
 * Each node's fence file (run directory, node<ID>.fence, mapped by every
 * peer; fence_file.h) has, for every node N that may write to it, one
 * fence line (how many of N's incarnations this node fenced, then up to
 * LOCO_GUARD_FENCED of them, a ring) and busy marks, a cache line each:
 * LOCO_GUARD_OWN marks that one executing context each claims for
 * itself, and LOCO_GUARD_SLOTS shared ones. Whoever executes a WRITE,
 * CAS, FAA or a placement for N (the posting thread on shm, the emulated
 * NIC on shm-weak, a QP's issue through UCX on ucx-sm: all in N's
 * process) first raises its mark, then reads the fence line, and lowers
 * the mark once the memory is written (on ucx-sm: once UCX runs nothing
 * N issued under it, ucx_guard.c). The fencer records the incarnation in
 * the line, then waits until N's marks are all down. Either the executor
 * sees the fence and refuses, or the fencer sees the mark and waits for
 * the op to finish: each side's store must be ordered before its load
 * (StoreLoad, a Dekker pair).
 *
 * An own mark (docs/ordering.md, "The fence file"): raised with a plain
 * (relaxed) store and a compiler barrier, lowered with a release store;
 * the StoreLoad barrier is the fencer's: membarrier(2) with
 * MEMBARRIER_CMD_GLOBAL_EXPEDITED (MEMBARRIER_CMD_GLOBAL if that fails)
 * between its store of the fence and its loads of the marks. On return
 * every thread of a registered process that was running has executed a
 * full barrier, and one that was not running was switched out (a full
 * barrier too): call P that point in the executor's program order. If
 * its raise comes before P, the fencer's loads after the call see it
 * (or see it lowered, with the op's stores, by the release); if it comes
 * after P, so does its load of the line, which then sees the fence
 * stored before the call. A stopped executor is not running: its raise
 * is visible (the fencer waits, -ETIMEDOUT, until it ran and lowered
 * it) or its load will see the fence. A process claims own marks only
 * after MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED returned: the kernel
 * orders its later accesses after the registration, so a fencer's call
 * either covers it or precedes them all.
 *
 * A shared mark (a process that could not register, or more than
 * LOCO_GUARD_OWN contexts of one node at a peer): a counter, raised with
 * a seq_cst read-modify-write (a full barrier on the executor side, as
 * before membarrier) and lowered with a release one; the fencer issues a
 * seq_cst fence between its store and its loads, so this pair needs no
 * membarrier. READs are not guarded: a late READ changes no state
 * (docs/ordering.md, "Fencing"). */
#ifndef LOCO_GUARD_H
#define LOCO_GUARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define LOCO_GUARD_FENCED 7   /* fenced incarnations remembered per node */
#define LOCO_GUARD_OWN 64     /* own marks per node (one per context) */
#define LOCO_GUARD_SLOTS 16   /* shared marks per node (contexts beyond) */

/* A busy mark as its executing context holds it. */
struct loco_guard_mark {
	_Atomic uint64_t *n;  /* the mark: how many ops run under it */
	bool own;             /* this context's alone (see above) */
};

/* Whether incarnation SELF is among those LINE records (LINE[0]: how many
 * were recorded; LINE[1..LOCO_GUARD_FENCED]: the last ones). */
static inline bool loco_guard_refused(const _Atomic uint64_t *line,
				      uint64_t self)
{
	/* Seq_cst: after a shared mark's read-modify-write, in the single
	 * order with the fencer's count increment and fence. For an own
	 * mark the fencer's membarrier orders it (see above). */
	uint64_t n = atomic_load_explicit(&line[0], memory_order_seq_cst);
	if (!n)
		return false;
	for (unsigned i = 1; i <= LOCO_GUARD_FENCED; i++)
		/* Seq_cst: a fencer claims an entry (the count) before it
		 * stores it; a mark it missed makes us see the store
		 * (fence_file.c, fence_record). */
		if (atomic_load_explicit(&line[i], memory_order_seq_cst) == self)
			return true;
	return false;
}

/* Raise M and check LINE: true if SELF may execute (then call
 * loco_guard_exit after the memory access), false if it is fenced (the
 * mark is down again). */
static inline bool loco_guard_enter(struct loco_guard_mark m,
				    const _Atomic uint64_t *line, uint64_t self)
{
	uint64_t was = 0;
	if (m.own) {
		/* Relaxed: only this context writes its own mark. */
		was = atomic_load_explicit(m.n, memory_order_relaxed);
		/* Relaxed: the fencer's membarrier orders it before our load
		 * of the line (see above). */
		atomic_store_explicit(m.n, was + 1, memory_order_relaxed);
		/* A compiler barrier: the line is loaded after the store in
		 * program order, which is all membarrier needs. */
		atomic_signal_fence(memory_order_seq_cst);
	} else {
		/* Seq_cst read-modify-write: a full barrier (StoreLoad), so
		 * that the line is read after the mark is visible; pairs
		 * with the fencer's seq_cst fence between its store of the
		 * fence and its loads of the marks. */
		atomic_fetch_add_explicit(m.n, 1, memory_order_seq_cst);
	}
	if (!loco_guard_refused(line, self))
		return true;
	if (m.own)
		/* Relaxed: nothing was executed under this raise. */
		atomic_store_explicit(m.n, was, memory_order_relaxed);
	else
		/* Relaxed: nothing was executed under this raise. */
		atomic_fetch_sub_explicit(m.n, 1, memory_order_relaxed);
	return false;
}

static inline void loco_guard_exit(struct loco_guard_mark m)
{
	if (m.own)
		/* Release (the load is relaxed: our own mark): the op's
		 * stores are visible to the fencer that sees the mark down
		 * (its acquire load of the mark). */
		atomic_store_explicit(m.n, atomic_load_explicit(m.n,
				      memory_order_relaxed) - 1,
				      memory_order_release);
	else
		/* Release: as above. */
		atomic_fetch_sub_explicit(m.n, 1, memory_order_release);
}

#endif
