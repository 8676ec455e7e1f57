/* SPDX-License-Identifier: MIT */
/* ticket_lock (LOCO §5.4): a cross-node mutex after Mellor-Crummey and
 * Scott's ticket lock. Two 8-byte words hosted at one participant, the
 * host, in one region and so in one cache line: "next" (next_ticket) and
 * "serving" (now_serving), as a shared-memory ticket lock keeps them (an
 * acquire and a release between nodes then move one line, not two). A
 * node takes a
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
 * t+1). A release is one FAA of serving; whoever waits behind a ticket
 * that stays served without moving looks at its slot (a READ, after a
 * few polls and then ever more rarely) and passes a marked ticket: CAS
 * skip[t % SLOTS]: t+1 -> 0, which only one node can win, then FAA
 * serving past it. The abandoning attempt then checks serving (an FAA of
 * 0): served meanwhile, it takes its mark back by the same CAS and holds
 * the lock after all. All of these are 8-byte remote atomics, totally
 * ordered, so a ticket is either held or passed, never both. The
 * endpoint keeps its abandoned ticket: its next lock attempt takes the
 * mark back (CAS t+1 -> 0) and waits on that ticket again instead of
 * taking a new one, unless a waiter already passed it. So an endpoint
 * has at most one ticket outstanding, no two outstanding tickets share a
 * skip slot, and a timed-out attempt never waits for a slot: it returns
 * after a bounded number of remote ops (test/model/ticket_lock.pml).
 * A lock left with only abandoned tickets is passed by the next attempt.
 *
 * Pauses. Nothing is taken over on a timer: a timeout gives up only the
 * caller's own ticket, and a ticket is passed only once its own endpoint
 * marked it. A holder that is descheduled or stopped past every waiter's
 * timeout still holds the lock when it resumes (the waiters return
 * -ETIMEDOUT meanwhile), so no fence is needed; the lin tests
 * lin_lock_pause_* check it, and lin_lock_pause_steal_shm shows the lost
 * updates of a takeover on that timer. The other side of it: a holder that
 * dies keeps the lock until the host goes. Taking a dead holder's turn
 * would need the holder's node per ticket and loco_fence_node first; it is
 * not built.
 *
 *	struct loco_ticket_lock l;
 *	loco_ticket_lock_init(&l, mgr, NULL, "lk", host, 0);
 *	loco_mgr_wait_ready(mgr, -1);
 *	loco_ticket_lock_lock(&l, thr, -1);
 *	... remote reads and writes of the protected data ...
 *	loco_ticket_lock_unlock(&l, thr, LOCO_FENCE_THREAD, 0);
 *
 * Split form, so that a lock's remote atomics share doorbells (and round
 * trips) with the caller's own ops: the acquire's FAA goes in a batch with
 * READs of the protected data, the release's FAA in the batch that writes
 * it (what LOCO §7.2 credits Sherman with: locks colocated with the data,
 * releases batched with the writes).
 *
 *	struct loco_tl_acquire a;
 *	loco_batch_init(&b, thr);
 *	loco_ticket_lock_lock_post(&l, thr, &b, &a, -1);
 *	if (a.speculate)
 *		loco_batch_read(&b, data, 0, &v, 8);   (READs only)
 *	rc = loco_batch_run(&b, -1);   (post and wait)
 *	rc = loco_ticket_lock_lock_finish(&l, thr, &a, rc);
 *	(rc 1: the READs ran under the lock; 0: held now, READ again)
 *	...
 *	struct loco_tl_release r;
 *	loco_batch_cas(&b, data, 0, v, v + 1, &old);   (to the lock's host)
 *	loco_ticket_lock_unlock_post(&l, thr, &b, &r);
 *	rc = loco_batch_run(&b, -1);
 *	rc = loco_ticket_lock_unlock_finish(&l, thr, &r, rc, LOCO_FENCE_THREAD, 0);
 *
 * A split trylock (trylock_post, trylock_finish) puts the CAS that takes
 * a free lock in the caller's batch the same way, READs behind it; it
 * never waits, so a caller may try a lock out of its lock order in the
 * round of another lock's acquire (loco-transfer: the higher of its two
 * locks), giving it back before any wait (loco_ticket_lock_lock_served).
 *
 * Regions "<lock>.words" (next at LOCO_TL_NEXT, serving at
 * LOCO_TL_SERVING) and "<lock>.skip" (LOCO_TICKET_LOCK_SLOTS words), at
 * the host only. Peers may READ and CAS/FAA both, never WRITE them
 * (LOCO_REGION_REMOTE_READ | LOCO_REGION_REMOTE_ATOMIC).
 * With LOCO_REGION_HOT (loco_ticket_lock_init_ex) the words go to the
 * host's device memory when it has room (every acquire's FAA and every
 * waiter's READs hit them); the skip table (2 KiB, read only by waiters
 * that find the lock not moving) stays in the arena, since device memory
 * is small (often 128-256 KiB). */
#ifndef LOCO_CHANNELS_TICKET_LOCK_H
#define LOCO_CHANNELS_TICKET_LOCK_H

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channel.h>
#include <loco/wait.h>

/* Skip slots at the host: one per outstanding ticket, which is one per
 * endpoint at most. */
#define LOCO_TICKET_LOCK_SLOTS 256
static_assert(LOCO_MAX_NODES <= LOCO_TICKET_LOCK_SLOTS,
	      "every endpoint's ticket has a skip slot of its own");
/* Init flag (with LOCO_REGION_HOT or alone): one thread context of this
 * node uses the endpoint (the first to call lock, trylock or lock_post),
 * so it skips the local queue and its atomics; another thread context
 * gets -EPERM. For single-threaded nodes (loco-transfer --threads 1). */
#define LOCO_TICKET_LOCK_SOLO 0x100u

/* The offsets of the two words in region "<lock>.words". */
#define LOCO_TL_NEXT 0
#define LOCO_TL_SERVING 8
#define LOCO_TL_WORDS_BYTES 16

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
	uint64_t skipped;    /* abandoned tickets this node's waiters passed */
	uint64_t waits;      /* global acquires whose ticket was not served at
			      * the first look (they polled serving) */
	uint64_t polls;      /* READs of serving by waits, and by acquires that
			      * had guessed from this node's hint and missed */
	uint64_t spun_out;   /* waits next in line whose spin budget ran out
			      * before serving moved (the budget: struct
			      * loco_spin, loco/wait.h) */
	uint64_t yields;     /* sched_yields of those waits */
	uint64_t naps;       /* their naps (200 us or more each) */
};

struct loco_tl_waiter;

struct loco_ticket_lock {
	struct loco_channel base;
	uint32_t host;
	unsigned words_idx, skip_idx;    /* expectation indices */
	/* The host's two regions, looked up once they exist (owner only). */
	const struct loco_rregion *words_rr, *skip_rr;
	_Atomic uint64_t seen;           /* a value serving had (a hint) */
	/* Local state. LSTATE: bit 0 set while a local thread holds the lock
	 * or is acquiring it (the local owner), plus 2 per local waiter
	 * queued or about to be; the owner takes and gives it up by CAS
	 * without MU while nobody waits. Under MU: the queue, the waiters'
	 * count, handover_max and the stats (but acquires). */
	_Atomic uint64_t lstate;
	bool solo_mode;                  /* LOCO_TICKET_LOCK_SOLO */
	struct loco_thread *_Atomic solo; /* its one user, once known */
	pthread_mutex_t mu;
	pthread_cond_t cv;               /* local waiters sleep here */
	/* The local owner's (ownership passes by the CAS or under mu): the
	 * ticket this node holds while a local thread holds the lock, the
	 * handovers since the global acquire, and this node's abandoned
	 * ticket T as its skip-slot mark T + 1 (0 for none), and the time
	 * one ticket took to be served, as its waits saw it (a moving
	 * average that paces the polls of a waiter not next in line), and
	 * whether the last acquire that guessed the lock free (this node
	 * released it last) found another node had taken it meanwhile,
	 * whether this node's last wait for it had to poll, and (then) when
	 * this node last took and released it; and how long the next in
	 * line spins before it yields, learned from those waits. */
	uint64_t ticket;
	unsigned streak;
	uint64_t abandoned_mark;
	uint64_t serve_ns;
	bool guess_missed;
	bool contended;
	uint64_t held_ns, released_ns;
	struct loco_spin spin;
	unsigned handover_max;
	struct loco_tl_waiter *head, *tail;  /* local queue, FIFO */
	struct loco_ticket_lock_stats st;   /* under mu, but these (the
					     * local owner's, one at a time): */
	_Atomic uint64_t acquires;          /* global acquires */
	_Atomic uint64_t waits, polls, spun_out, yields, naps;
};
static_assert(offsetof(struct loco_ticket_lock, base) == 0, "base first");

/* An acquire in flight between loco_ticket_lock_lock_post and _finish. */
struct loco_tl_acquire {
	/* The flags, also as one word: lock_post stores them with one
	 * store, so that a caller testing two at once (which the compiler
	 * loads as one word) gets them forwarded from it; a load spanning
	 * several byte stores waits until they drain. */
	union {
		struct {
			bool held;        /* held at post (handover, or
					   * acquired there) */
			bool speculate;   /* READs added to the batch now
					   * probably run under the lock:
					   * held, or this node released it
					   * last */
			bool read;        /* a READ of serving rides behind
					   * the FAA: READs added now to the
					   * lock's host run after it */
			bool host_early;  /* set by finish: the lock was held
					   * before the batch's later ops to
					   * the lock's host ran */
		};
		uint32_t flags;
	};
	uint64_t guess;     /* serving as this node last saw it */
	uint64_t ticket;    /* the FAA's result */
	uint64_t serving;   /* the READ's result */
	int timeout_ms;
};

/* A trylock in flight between loco_ticket_lock_trylock_post and _finish. */
struct loco_tl_try {
	uint64_t guess;     /* serving as this node last saw it: the ticket */
	uint64_t next;      /* the CAS's result */
};

/* A release in flight between loco_ticket_lock_unlock_post and _finish. */
struct loco_tl_release {
	bool handover;      /* to a local waiter, at finish */
	uint64_t old;       /* the serving FAA's result */
};

/* Create endpoint NAME (under PARENT, may be NULL) of a lock hosted at
 * node HOST (this node or one of PARTICIPANTS; 0: every compute node) and
 * start joining. Returns 0, -EINVAL, -ENOMEM or -EEXIST; on failure
 * nothing is left to finish. */
int loco_ticket_lock_init(struct loco_ticket_lock *l, struct loco_mgr *mgr,
			  struct loco_channel *parent, const char *name,
			  uint32_t host, uint64_t participants);

/* As loco_ticket_lock_init with FLAGS: LOCO_REGION_HOT (next and serving
 * in the host's device memory if it has room, see above) and
 * LOCO_TICKET_LOCK_SOLO (see there), or 0. */
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
 * lock (handover without remote ops), else take a ticket (FAA next, with
 * a READ of serving behind it in the same doorbell unless this node
 * released last and its last such guess held; after a timeout, first a
 * CAS taking back the abandoned ticket) and wait until serving reaches it
 * (more READs of serving while it has not: the next in line spins
 * briefly, then yields; the others yield; where turns are long, the
 * others nap until their turn is near and the next in line through the
 * first half of the current turn, each nap 200 us or more; a ticket
 * ahead found abandoned is passed). Returns 0 (held; also when the ticket
 * turns out to be served while a timed-out attempt leaves it),
 * -ETIMEDOUT after TIMEOUT_MS (< 0: the manager default; the ticket is
 * given back or abandoned, see above, with at most four remote ops after
 * the deadline, and the lock is not held), -ENOTCONN before the host
 * joined, -LOCO_EPROTO if the lock's words break the protocol (e.g. more
 * tickets outstanding than skip slots, which only endpoints that died
 * holding tickets can cause), -EPERM (a LOCO_TICKET_LOCK_SOLO endpoint
 * called from a second thread context), or an op error (the host failed;
 * the lock may then stay taken).
 * Ordering: an acquire: remote reads after the return see every write the
 *   previous holder made before its release (its fence placed them before
 *   serving advanced or before the local handover).
 * Completion: synchronous.
 * Caller: the thread owning THR; it must not hold the lock already. */
int loco_ticket_lock_lock(struct loco_ticket_lock *l, struct loco_thread *thr,
			  int timeout_ms);

/* Split acquire, first half: join the local queue as lock does (waiting
 * there up to TIMEOUT_MS), then either hold the lock already (a local
 * handover, or after a timeout's abandoned ticket: A->held, nothing added
 * to B) or add the ticket FAA to batch B, with a READ of serving behind it
 * when this node did not release the lock last, or did but found the
 * lock taken by another node since on its last such acquire (the READ
 * then tells whether the guess holds in the same round trip). A->speculate
 * says whether
 * READs the caller adds to B after this call will probably run under the
 * lock. Returns 0, -ETIMEDOUT (local queue), -ENOTCONN, -EPERM (as
 * lock), or B's error (B full); on an error the lock is not held and
 * nothing was added.
 * Ordering: none yet; see lock_finish.
 * Completion: the caller posts B and waits for its ack, then calls
 *   loco_ticket_lock_lock_finish with the result.
 * Caller: the thread owning THR and B, not holding the lock; between post
 *   and finish it adds no op but READs to B (their results count only if
 *   finish returns 1) and the CASes of other locks' trylock_post, and
 *   takes no other lock of this endpoint. */
static inline int loco_ticket_lock_lock_post(struct loco_ticket_lock *l,
					     struct loco_thread *thr,
					     struct loco_batch *b,
					     struct loco_tl_acquire *a,
					     int timeout_ms);

/* Split acquire, second half, once B completed (RC: 0, or the error of
 * posting or waiting for B): wait until the ticket is served, as lock
 * does. Returns 1 (held, and the lock was this node's before B's later
 * ops executed: the READs added after lock_post saw the protected data
 * under the lock), 0 (held now: READ again; but if A->host_early, the
 * READs to the lock's host did run under it: the READ of serving ahead of
 * them on that QP found the ticket served), or an error as lock returns
 * (not held; on RC != 0, RC).
 * Ordering: an acquire, as lock (on 1 it covers the READs in B).
 * Completion: synchronous.
 * Caller: the thread that called lock_post with A. */
static inline int loco_ticket_lock_lock_finish(struct loco_ticket_lock *l,
					       struct loco_thread *thr,
					       struct loco_tl_acquire *a,
					       int rc);

/* After lock_post's batch completed without error: whether lock_finish
 * will hold the lock at once, without waiting (held at post, or the
 * ticket found served). A caller holding a lock out of order (a
 * trylock) gives it back before a lock_finish that would wait. */
static inline bool loco_ticket_lock_lock_served(const struct loco_tl_acquire *a)
{
	return a->held || (a->read ? a->serving : a->guess) == a->ticket;
}

/* Acquire only if the lock is free: one CAS of next from the last seen
 * value of serving (plus a READ of serving when that guess is stale).
 * Returns 0 (held), -EBUSY (held, or another thread of this node owns or
 * is acquiring it: the lock may have been free at that instant, as C++
 * try_lock allows), -ENOTCONN, -EPERM (as lock) or an op error. Never
 * waits for a peer.
 * Ordering: on 0, an acquire as for loco_ticket_lock_lock.
 * Completion: synchronous.
 * Caller: the thread owning THR; it must not hold the lock already. */
int loco_ticket_lock_trylock(struct loco_ticket_lock *l,
			     struct loco_thread *thr);

/* Split trylock, first half: when this node released the lock last (its
 * hint then is serving, unless another node took a ticket since) and its
 * last such guess held (lock_post's and trylock's guesses), add to batch
 * B the CAS of next from the hint that takes the lock if it is free;
 * else add nothing and return -EBUSY at once (the hint is probably
 * stale: the spurious failure C++ try_lock allows). READs the caller adds to B behind the CAS
 * to the lock's host run under the lock if trylock_finish returns 0.
 * Never waits for a peer, so a caller may try a lock out of its lock
 * order; it must not wait for another lock while holding this one.
 * Returns 0 (the CAS is in B), -EBUSY (as loco_ticket_lock_trylock, or
 * the hint is another node's release), -ENOTCONN, -EPERM, or B's error;
 * on an error nothing is held and nothing was added.
 * Ordering: none yet; see trylock_finish.
 * Completion: post B, wait, then loco_ticket_lock_trylock_finish.
 * Caller: the thread owning THR and B, not holding the lock; between post
 *   and finish it takes no other lock of this endpoint. */
static inline int loco_ticket_lock_trylock_post(struct loco_ticket_lock *l,
						struct loco_thread *thr,
						struct loco_batch *b,
						struct loco_tl_try *t);

/* Split trylock, second half, once B completed (RC: 0, or the error of
 * posting or waiting for B): 0 (held: the READs B carried behind the CAS
 * to the lock's host ran under the lock), -EBUSY (not held: taken, or
 * tickets queued), or RC.
 * Ordering: on 0, an acquire as for loco_ticket_lock_lock.
 * Completion: synchronous, no remote op.
 * Caller: the thread that called trylock_post with T. */
static inline int loco_ticket_lock_trylock_finish(struct loco_ticket_lock *l,
						  struct loco_thread *thr,
						  struct loco_tl_try *t,
						  int rc);

/* Release: loco_fence(THR, SCOPE, PEER), then hand the lock to the first
 * local waiter (no remote op) or, past handover_max or with no local
 * waiter, increment serving (one FAA). SCOPE must cover every remote
 * write made under the lock: PAIR with PEER if they all went to PEER from
 * this thread, THREAD if they came from this thread only, GLOBAL if other
 * threads of this node made them. The lock is released even if the fence
 * fails; the fence's error is returned then (those writes may not be
 * visible).
 * Ordering: a release: the fence places the writes in SCOPE before the
 *   next holder (local or remote) can acquire.
 * Completion: synchronous.
 * Caller: the thread that holds the lock, with THR its context. */
int loco_ticket_lock_unlock(struct loco_ticket_lock *l, struct loco_thread *thr,
			    enum loco_fence_scope scope, uint32_t peer);

/* Split release, first half: add the serving FAA to batch B, behind the
 * caller's ops already in B, or (a local waiter, within handover_max)
 * nothing: the handover happens at finish. Returns 0 or B's error.
 * Ordering: the FAA executes after B's earlier ops to the lock's host
 *   (one QP) only: every write made under the lock must be one of those,
 *   or complete and placed before this call (a fence). The host is
 *   loco_ticket_lock_host(l).
 * Completion: post B, wait, then loco_ticket_lock_unlock_finish.
 * Caller: the thread that holds the lock, owning THR and B. */
static inline int loco_ticket_lock_unlock_post(struct loco_ticket_lock *l,
					       struct loco_thread *thr,
					       struct loco_batch *b,
					       struct loco_tl_release *r);

/* Split release, second half, once B completed (RC as for lock_finish):
 * a handover fences SCOPE/PEER (as unlock) and grants the waiter (or, if
 * it left meanwhile, releases globally); then this endpoint gives up local
 * ownership. Returns 0, RC, or the fence's or an op's error; the lock is
 * released either way (with RC != 0 the FAA may not have executed: the
 * lock may then stay taken, as after any failed op).
 * Ordering: a release, as unlock.
 * Completion: synchronous.
 * Caller: the thread that called unlock_post with R. */
static inline int loco_ticket_lock_unlock_finish(struct loco_ticket_lock *l,
						 struct loco_thread *thr,
						 struct loco_tl_release *r,
						 int rc,
						 enum loco_fence_scope scope,
						 uint32_t peer);

/* The node hosting the lock's words. */
static inline uint32_t loco_ticket_lock_host(const struct loco_ticket_lock *l)
{
	return l->host;
}

/* ---- the split calls' common case, inline -------------------------------
 * Not API. Each split call above runs its common case here, inline in the
 * caller (a transfer makes six of them: as calls across the library they
 * cost as much as their work); every other case goes to its
 * out-of-line *_slow function in ticket_lock.c, which handles them all,
 * the common case too, with the same steps. The common case: lock_post
 * and trylock_post by a LOCO_TICKET_LOCK_SOLO endpoint's one user, the
 * lock's words known, no abandoned ticket to take back; lock_finish and
 * trylock_finish when the ticket is ours at once; unlock_finish when
 * the FAA released the lock (no handover) and this node's last wait for
 * it did not poll (its turns are not timed). */

/* The local owner bit of lstate (ticket_lock.c). */
#define LOCO_TL_LS_OWNED UINT64_C(1)

int loco_ticket_lock_lock_post_slow(struct loco_ticket_lock *l,
				    struct loco_thread *thr,
				    struct loco_batch *b,
				    struct loco_tl_acquire *a, int timeout_ms);
int loco_ticket_lock_lock_finish_slow(struct loco_ticket_lock *l,
				      struct loco_thread *thr,
				      struct loco_tl_acquire *a, int rc);
int loco_ticket_lock_trylock_post_slow(struct loco_ticket_lock *l,
				       struct loco_thread *thr,
				       struct loco_batch *b,
				       struct loco_tl_try *t);
int loco_ticket_lock_trylock_finish_slow(struct loco_ticket_lock *l,
					 struct loco_thread *thr,
					 struct loco_tl_try *t, int rc);
int loco_ticket_lock_unlock_finish_slow(struct loco_ticket_lock *l,
					struct loco_thread *thr,
					struct loco_tl_release *r, int rc,
					enum loco_fence_scope scope,
					uint32_t peer);
/* Give up local ownership (ticket_lock.c). */
void loco_tl_local_pass(struct loco_ticket_lock *l);

/* THR is the one user of L, a LOCO_TICKET_LOCK_SOLO endpoint. */
static inline bool loco_tl_solo_user(struct loco_ticket_lock *l,
				     const struct loco_thread *thr)
{
	/* Relaxed: only the one user finds its own pointer there. */
	return l->solo_mode &&
	       atomic_load_explicit(&l->solo, memory_order_relaxed) == thr;
}

static inline uint64_t loco_tl_seen_get(struct loco_ticket_lock *l)
{
	/* Acquire: pairs with loco_tl_seen_set's release; a node that finds
	 * its ticket equal to it holds the lock, and its next reads must
	 * see what the previous holder wrote (placed before serving
	 * moved). */
	return atomic_load_explicit(&l->seen, memory_order_acquire);
}

static inline void loco_tl_seen_set(struct loco_ticket_lock *l, uint64_t v)
{
	/* Release: pairs with loco_tl_seen_get (a value serving had, seen
	 * after the release that made it so). */
	atomic_store_explicit(&l->seen, v, memory_order_release);
}

/* Add N to one of the local owner's counters (one writer at a time). */
static inline void loco_tl_owner_add(_Atomic uint64_t *c, uint64_t n)
{
	/* Relaxed: a counter; ownership passes with acquire and release. */
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

/* This node now holds ticket T. The ticket and the streak are the local
 * owner's, as abandoned_mark: no lock. */
static inline void loco_tl_hold(struct loco_ticket_lock *l, uint64_t t)
{
	l->ticket = t;
	l->streak = 0;
	/* The clock only where turns are timed (ticket_lock.c, released). */
	l->held_ns = l->contended ? loco_now_ns() : 0;
	loco_tl_owner_add(&l->acquires, 1);
}

/* Add the ticket's FAA to B and, unless this node released last (its
 * hint then still is serving), a READ of serving behind it on the same
 * QP, which the wait starts from: A's guess, speculate, read. */
__attribute__((always_inline))
static inline void loco_tl_ticket_post(struct loco_ticket_lock *l,
				       struct loco_batch *b,
				       struct loco_tl_acquire *a)
{
	uint64_t guess = loco_tl_seen_get(l);
	bool speculate = guess == l->ticket + 1;
	/* Also when the last such guess was wrong: the READ rides in the
	 * FAA's round trip, where a wrong guess costs a READ of serving
	 * and the caller's READs again, two round trips. */
	bool read = !speculate || l->guess_missed;
	/* The flags in one store (struct loco_tl_acquire): a load of two of
	 * them that spanned byte stores took some 10 % of a one-process
	 * transfer's time here. */
	union {
		struct { bool held, speculate, read, host_early; } f;
		uint32_t w;
	} u = { .f = { false, speculate, read, false } };
	a->flags = u.w;
	a->guess = guess;
	loco_batch_faa(b, l->words_rr, LOCO_TL_NEXT, 1, &a->ticket);
	if (a->read)
		loco_batch_read(b, l->words_rr, LOCO_TL_SERVING, &a->serving, 8);
}

__attribute__((always_inline))
static inline int loco_ticket_lock_lock_post(struct loco_ticket_lock *l,
					     struct loco_thread *thr,
					     struct loco_batch *b,
					     struct loco_tl_acquire *a,
					     int timeout_ms)
{
	if (__builtin_expect(!loco_tl_solo_user(l, thr) || !l->skip_rr ||
			     l->abandoned_mark || b->err, 0))
		return loco_ticket_lock_lock_post_slow(l, thr, b, a, timeout_ms);
	/* The fields finish reads: loco_tl_ticket_post sets the flags and the
	 * guess (the FAA the ticket, the READ, if added, serving). */
	a->timeout_ms = timeout_ms;
	loco_tl_ticket_post(l, b, a);
	/* An add that failed: as the slow path (nothing held; a solo
	 * endpoint has no local ownership to give up). */
	return b->err;
}

static inline int loco_ticket_lock_lock_finish(struct loco_ticket_lock *l,
					       struct loco_thread *thr,
					       struct loco_tl_acquire *a,
					       int rc)
{
	if (__builtin_expect(rc || a->held || !loco_ticket_lock_lock_served(a), 0))
		return loco_ticket_lock_lock_finish_slow(l, thr, a, rc);
	/* Served at the first look (the slow path's steps, without a
	 * wait): held before the batch's later ops ran iff serving was
	 * already at our ticket when we posted. */
	bool early = a->ticket == a->guess;
	if (a->read)
		loco_tl_seen_set(l, a->serving);
	if (a->speculate)
		l->guess_missed = !early;
	/* The READ of serving ran after the FAA, and the caller's ops to
	 * the host after it, on one QP: served then, they ran under the
	 * lock. */
	a->host_early = early || (a->read && a->serving == a->ticket);
	l->contended = false;
	loco_tl_hold(l, a->ticket);
	return early;
}

static inline int loco_ticket_lock_trylock_post(struct loco_ticket_lock *l,
						struct loco_thread *thr,
						struct loco_batch *b,
						struct loco_tl_try *t)
{
	if (__builtin_expect(!loco_tl_solo_user(l, thr) || !l->skip_rr, 0))
		return loco_ticket_lock_trylock_post_slow(l, thr, b, t);
	t->guess = loco_tl_seen_get(l);
	/* As the slow path: a hint that is probably stale adds nothing. */
	if (t->guess != l->ticket + 1 || l->guess_missed)
		return -EBUSY;
	/* The CAS takes ticket GUESS iff next is GUESS, and then serving
	 * is GUESS too (a value it had, and serving <= next): the lock was
	 * free and is ours. */
	loco_batch_cas(b, l->words_rr, LOCO_TL_NEXT, t->guess, t->guess + 1,
		       &t->next);
	return b->err;
}

static inline int loco_ticket_lock_trylock_finish(struct loco_ticket_lock *l,
						  struct loco_thread *thr,
						  struct loco_tl_try *t,
						  int rc)
{
	if (__builtin_expect(rc || t->next != t->guess, 0))
		return loco_ticket_lock_trylock_finish_slow(l, thr, t, rc);
	/* serving == guess: every earlier ticket, an abandoned one of ours
	 * too, was passed. */
	l->guess_missed = false;
	l->abandoned_mark = 0;
	loco_tl_hold(l, t->guess);
	return 0;
}

static inline int loco_ticket_lock_unlock_post(struct loco_ticket_lock *l,
					       struct loco_thread *thr,
					       struct loco_batch *b,
					       struct loco_tl_release *r)
{
	(void)thr;
	/* Relaxed: a hint, rechecked at finish. */
	r->handover = !l->solo_mode &&
		      atomic_load_explicit(&l->lstate, memory_order_relaxed) !=
		      LOCO_TL_LS_OWNED;
	if (r->handover)
		return 0;
	loco_batch_faa(b, l->words_rr, LOCO_TL_SERVING, 1, &r->old);
	return b->err;
}

static inline int loco_ticket_lock_unlock_finish(struct loco_ticket_lock *l,
						 struct loco_thread *thr,
						 struct loco_tl_release *r,
						 int rc,
						 enum loco_fence_scope scope,
						 uint32_t peer)
{
	if (__builtin_expect(r->handover || rc || l->contended, 0))
		return loco_ticket_lock_unlock_finish_slow(l, thr, r, rc, scope,
							   peer);
	/* The FAA released ticket T: serving is T + 1 (a value it had). */
	loco_tl_seen_set(l, l->ticket + 1);
	if (!l->solo_mode)
		loco_tl_local_pass(l);
	return 0;
}

#endif
