/* SPDX-License-Identifier: MIT */
/* ticket_lock (LOCO §5.4): a cross-node mutex after Mellor-Crummey and
 * Scott's ticket lock. Two atomic_vars hosted at one participant, the
 * host: "next" (next_ticket) and "serving" (now_serving). A node takes a
 * ticket with a fetch-and-add on next and holds the lock once serving
 * reaches it; a release fences, then increments serving.
 *
 * The lock also excludes the threads of one node from each other. Each
 * endpoint keeps a local queue in front of the global lock: only one
 * thread per node (the local owner) takes tickets; a thread that arrives
 * while another local thread holds or is acquiring the lock waits in the
 * local queue. A release with local waiters hands the lock (still held
 * globally) straight to the first of them, without any remote operation,
 * up to handover_max times in a row; then the lock goes back to the
 * global queue so other nodes get their turn.
 *
 * Timeouts. A lock attempt that times out while holding a ticket leaves
 * that ticket without wedging the lock: it gives the ticket back when
 * nobody queued behind it (CAS next: t+1 -> t), else it marks the ticket
 * abandoned in the "skip" table at the host (CAS skip[t % SLOTS]: 0 ->
 * t+1), and the release that serves the ticket skips it (every release
 * CASes the slot of the ticket it serves: t+1 -> 0). If the ticket was
 * served before the mark landed, the attempt takes the mark back and holds
 * the lock after all. All of these are 8-byte remote atomics, totally
 * ordered, so the releaser and the abandoner cannot both miss each other.
 * The endpoint keeps its abandoned ticket: its next lock attempt takes the
 * mark back (CAS t+1 -> 0) and waits on that ticket again instead of
 * taking a new one, unless a release already skipped it. So an endpoint
 * has at most one ticket outstanding, no two outstanding tickets share a
 * skip slot, and a timed-out attempt never waits for a slot: it returns
 * after a bounded number of remote ops (test/model/ticket_lock.pml).
 *
 *	struct loco_ticket_lock l;
 *	loco_ticket_lock_init(&l, mgr, NULL, "lk", host, 0);
 *	loco_mgr_wait_ready(mgr, -1);
 *	loco_ticket_lock_lock(&l, thr, -1);
 *	... remote reads and writes of the protected data ...
 *	loco_ticket_lock_unlock(&l, thr, LOCO_FENCE_THREAD, 0);
 *
 * Sub-channels "<lock>/next" and "<lock>/serving" (words at the host);
 * region "<lock>.skip" (LOCO_TICKET_LOCK_SLOTS words, at the host only).
 * With LOCO_REGION_HOT (loco_ticket_lock_init_ex) the two words go to the
 * host's device memory when it has room (every acquire's FAA and every
 * waiter's READs hit them); the skip table (2 KiB, one CAS per release)
 * stays in the arena, since device memory is small (often 128-256 KiB). */
#ifndef LOCO_CHANNELS_TICKET_LOCK_H
#define LOCO_CHANNELS_TICKET_LOCK_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channels/atomic_var.h>
#include <loco/channel.h>

/* Skip slots at the host: one per outstanding ticket, which is one per
 * endpoint at most. */
#define LOCO_TICKET_LOCK_SLOTS 256
static_assert(LOCO_MAX_NODES <= LOCO_TICKET_LOCK_SLOTS,
	      "every endpoint's ticket has a skip slot of its own");
/* Default bound on consecutive local handovers. */
#define LOCO_TICKET_LOCK_HANDOVER_MAX 16

/* Counters of one endpoint (all its threads). */
struct loco_ticket_lock_stats {
	uint64_t acquires;   /* tickets served to this node (global acquires) */
	uint64_t handovers;  /* local handovers: acquired without remote ops */
	uint64_t timeouts;   /* lock attempts that returned -ETIMEDOUT */
	uint64_t returned;   /* timed-out tickets given back (next decremented) */
	uint64_t abandoned;  /* timed-out tickets left marked for a releaser */
	uint64_t reclaimed;  /* abandoned tickets taken back by a lock attempt */
	uint64_t skipped;    /* abandoned tickets our releases passed over */
};

struct loco_tl_waiter;

struct loco_ticket_lock {
	struct loco_channel base;
	struct loco_atomic_var next;     /* next_ticket */
	struct loco_atomic_var serving;  /* now_serving */
	uint32_t host;
	unsigned skip_idx;               /* expectation index of "skip" */
	_Atomic uint64_t seen;           /* a value serving had (a hint) */
	/* Node-local state, under mu. owned: a local thread holds the lock
	 * or is acquiring it (it took or is taking a ticket); ticket: the
	 * ticket this node holds while a local thread holds the lock. */
	pthread_mutex_t mu;
	pthread_cond_t cv;               /* local waiters sleep here */
	bool owned;
	uint64_t ticket;
	unsigned streak;                 /* handovers since the global acquire */
	unsigned handover_max;
	/* This node's abandoned ticket T as its skip-slot mark T + 1, 0 for
	 * none: the local owner's (only it runs the global protocol;
	 * ownership passes under mu). */
	uint64_t abandoned_mark;
	struct loco_tl_waiter *head, *tail;  /* local queue, FIFO */
	struct loco_ticket_lock_stats st;   /* under mu, but acquires: */
	_Atomic uint64_t acquires;          /* global acquires (the owner's) */
};
static_assert(offsetof(struct loco_ticket_lock, base) == 0, "base first");

/* Create endpoint NAME (under PARENT, may be NULL) of a lock hosted at
 * node HOST (this node or one of PARTICIPANTS; 0: every compute node) and
 * start joining. Returns 0, -EINVAL, -ENOMEM or -EEXIST; on failure
 * nothing is left to finish. */
int loco_ticket_lock_init(struct loco_ticket_lock *l, struct loco_mgr *mgr,
			  struct loco_channel *parent, const char *name,
			  uint32_t host, uint64_t participants);

/* As loco_ticket_lock_init with FLAGS: 0 or LOCO_REGION_HOT (next and
 * serving in the host's device memory if it has room, see above). */
int loco_ticket_lock_init_ex(struct loco_ticket_lock *l, struct loco_mgr *mgr,
			     struct loco_channel *parent, const char *name,
			     uint32_t host, uint64_t participants, unsigned flags);

/* Unregister. No thread of this node may hold or wait for the lock, and
 * the remote ops of the threads that used it must be complete. */
void loco_ticket_lock_fini(struct loco_ticket_lock *l);

/* Bound the consecutive local handovers (0: never hand over locally,
 * every acquire takes a ticket). Default LOCO_TICKET_LOCK_HANDOVER_MAX. */
void loco_ticket_lock_set_handover_max(struct loco_ticket_lock *l, unsigned n);

/* Snapshot of this endpoint's counters. */
void loco_ticket_lock_stats(struct loco_ticket_lock *l,
			    struct loco_ticket_lock_stats *out);

/* Acquire: join the local queue if another thread of this node owns the
 * lock (handover without remote ops), else take a ticket (FAA next; after
 * a timeout, first a CAS taking back the abandoned ticket) and wait until
 * serving reaches it (READs of serving, none if this node released last:
 * the next in line spins briefly, then yields; the others yield). Returns
 * 0 (held; also when the ticket turns out to be served while a timed-out
 * attempt leaves it), -ETIMEDOUT after TIMEOUT_MS (< 0: the manager
 * default; the ticket is given back or abandoned, see above, with at most
 * four remote ops after the deadline, and the lock is not held),
 * -ENOTCONN before the host joined, -LOCO_EPROTO if the lock's words
 * break the protocol (e.g. more tickets outstanding than skip slots,
 * which only endpoints that died holding tickets can cause), or an op
 * error (the host failed; the lock may then stay taken).
 * Ordering: an acquire: remote reads after the return see every write the
 *   previous holder made before its release (its fence placed them before
 *   serving advanced or before the local handover).
 * Completion: synchronous.
 * Caller: the thread owning THR; it must not hold the lock already. */
int loco_ticket_lock_lock(struct loco_ticket_lock *l, struct loco_thread *thr,
			  int timeout_ms);

/* Acquire only if the lock is free: one CAS of next from the last seen
 * value of serving (plus a READ of serving when that guess is stale).
 * Returns 0 (held), -EBUSY (held, or another thread of this node owns or
 * is acquiring it: the lock may have been free at that instant, as C++
 * try_lock allows), -ENOTCONN or an op error. Never waits for a peer.
 * Ordering: on 0, an acquire as for loco_ticket_lock_lock.
 * Completion: synchronous.
 * Caller: the thread owning THR; it must not hold the lock already. */
int loco_ticket_lock_trylock(struct loco_ticket_lock *l,
			     struct loco_thread *thr);

/* Release: loco_fence(THR, SCOPE, PEER), then hand the lock to the first
 * local waiter (no remote op) or, past handover_max or with no local
 * waiter, increment serving (one FAA, plus one CAS of the skip slot of
 * the ticket served next, both in one doorbell; more if abandoned tickets
 * are skipped). SCOPE must cover every remote write made under the lock:
 * PAIR with PEER if they all went to PEER from this thread, THREAD if they
 * came from this thread only, GLOBAL if other threads of this node made
 * them. The lock is released even if the fence fails; the fence's error is
 * returned then (those writes may not be visible).
 * Ordering: a release: the fence places the writes in SCOPE before the
 *   next holder (local or remote) can acquire.
 * Completion: synchronous.
 * Caller: the thread that holds the lock, with THR its context. */
int loco_ticket_lock_unlock(struct loco_ticket_lock *l, struct loco_thread *thr,
			    enum loco_fence_scope scope, uint32_t peer);

#endif
