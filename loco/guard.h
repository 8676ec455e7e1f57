/* SPDX-License-Identifier: MIT */
/* The fence guard of the transports whose initiator executes its ops on
 * shared memory (shm, shm-weak, ucx-sm: fence_file.h), shared
 * by the transport and the inline path of <loco/loco.h>: not API.
 *
 * Each node's fence file (run directory, node<ID>.fence, mapped by every
 * peer; fence_file.h) has, for every node N that may write to it, one fence line (how
 * many of N's incarnations this node fenced, then up to LOCO_GUARD_FENCED
 * of them, a ring) and LOCO_GUARD_SLOTS busy marks, a cache line each.
 * Whoever executes a WRITE, CAS, FAA or a placement for N (the posting
 * thread on shm, the emulated NIC on shm-weak, a QP's issue through UCX
 * on ucx-sm: all in N's process) first raises a mark of N, then reads
 * the fence line, and lowers the mark once the memory is written (on
 * ucx-sm: once UCX runs nothing N issued under it, ucx_guard.c). The fencer records the incarnation in the line,
 * then waits until N's marks are all down. Both sides order their store
 * before their load with a seq_cst read-modify-write (Dekker): either the
 * executor sees the fence and refuses, or the fencer sees the mark and
 * waits for the op to finish. READs are not guarded: a late READ changes
 * no state (docs/ordering.md, "Fencing"). */
#ifndef LOCO_GUARD_H
#define LOCO_GUARD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define LOCO_GUARD_FENCED 7   /* fenced incarnations remembered per node */
#define LOCO_GUARD_SLOTS 16   /* busy marks per node (threads share them) */

/* Whether incarnation SELF is among those LINE records (LINE[0]: how many
 * were recorded; LINE[1..LOCO_GUARD_FENCED]: the last ones). */
static inline bool loco_guard_refused(const _Atomic uint64_t *line,
				      uint64_t self)
{
	/* Seq_cst: after the mark's read-modify-write (loco_guard_enter), in
	 * the single order with the fencer's count increment. */
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

/* Raise MARK and check LINE: true if SELF may execute (then call
 * loco_guard_exit after the memory access), false if it is fenced (the
 * mark is down again). */
static inline bool loco_guard_enter(_Atomic uint64_t *mark,
				    const _Atomic uint64_t *line, uint64_t self)
{
	/* Seq_cst read-modify-write: a full barrier (StoreLoad), so that the
	 * fence line is read after the mark is visible; pairs with the
	 * fencer's increment of LINE[0] followed by its reads of the marks. */
	atomic_fetch_add_explicit(mark, 1, memory_order_seq_cst);
	if (!loco_guard_refused(line, self))
		return true;
	/* Relaxed: nothing was executed under this mark. */
	atomic_fetch_sub_explicit(mark, 1, memory_order_relaxed);
	return false;
}

static inline void loco_guard_exit(_Atomic uint64_t *mark)
{
	/* Release: the op's stores are visible to the fencer that sees the
	 * mark down (its acquire load of the mark). */
	atomic_fetch_sub_explicit(mark, 1, memory_order_release);
}

#endif
