/* SPDX-License-Identifier: MIT */
/* ticket_lock: see ticket_lock.h for the protocol.
 *
 * Invariants on the words at the host (serving only grows; next grows by
 * FAA and shrinks only when the owner of the last ticket gives it back):
 *  - serving <= next, and the tickets in [serving, next) are outstanding;
 *  - serving passes ticket t only by a release of t, by its holder or by
 *    a releaser that found t marked abandoned;
 *  - skip[t % SLOTS] == t + 1 exactly while t is outstanding and marked;
 *  - an endpoint has at most one ticket outstanding: its next attempt
 *    takes a marked ticket back (or finds it passed) before any FAA, so
 *    at most LOCO_MAX_NODES <= SLOTS tickets are outstanding and their
 *    slots differ.
 * So a value of serving once seen is a lower bound of serving, and a node
 * whose ticket equals such a value holds the lock: the hint `seen` spares
 * the READ of serving when this node released last. */
#include <errno.h>
#include <sched.h>
#include <time.h>

#include <loco/channels/ticket_lock.h>
#include <loco/wait.h>

/* State of a local waiter; TL_HELD and TL_OWNER are also the results of
 * local_acquire. */
enum {
	TL_WAITING = 0,
	TL_HELD = 1,   /* handed the lock, still held globally */
	TL_OWNER = 2,  /* made local owner: must take a ticket */
};

struct loco_tl_waiter {
	struct loco_tl_waiter *next;
	_Atomic int state;
};

#define SLOT_BYTES ((uint64_t)LOCO_TICKET_LOCK_SLOTS * 8)
/* A local waiter spins, then yields, this many rounds before it sleeps on
 * the condition variable until granted. */
#define WAIT_SPINS 64
#define WAIT_YIELDS 256

/* A lock call's deadline is a struct loco_wait: it reads the clock only
 * once the call has to wait (an uncontended acquire reads no clock). */

/* ---- set-up ----------------------------------------------------------- */

/* Region "skip" at the host, expected from the host by everyone. */
static int skip_add(struct loco_ticket_lock *l)
{
	int rc = 0;
	if (l->host == loco_channel_self(&l->base))
		rc = loco_channel_add_region(&l->base, "skip", SLOT_BYTES, NULL);
	int idx = rc ? rc : loco_channel_expect(&l->base, "skip", SLOT_BYTES,
						UINT64_C(1) << l->host);
	if (idx < 0)
		return idx;
	l->skip_idx = (unsigned)idx;
	return 0;
}

static void local_init(struct loco_ticket_lock *l, uint32_t host)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	/* The deadlines are CLOCK_MONOTONIC (loco_now_ns). */
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&l->cv, &ca);
	pthread_condattr_destroy(&ca);
	l->host = host;
	pthread_mutex_init(&l->mu, NULL);
	l->owned = false;
	l->ticket = 0;
	l->streak = 0;
	l->handover_max = LOCO_TICKET_LOCK_HANDOVER_MAX;
	l->abandoned_mark = 0;
	l->head = l->tail = NULL;
	l->st = (struct loco_ticket_lock_stats){ 0 };
	atomic_init(&l->acquires, 0);
	atomic_init(&l->seen, 0);
}

/* The two words, over the lock's participants and this node (a mask of 0
 * would mean every compute node). */
static int words_init(struct loco_ticket_lock *l, struct loco_mgr *mgr,
		      unsigned flags)
{
	uint64_t members = l->base.participants |
			   UINT64_C(1) << loco_channel_self(&l->base);
	int rc = loco_atomic_var_init_ex(&l->next, mgr, &l->base, "next", l->host,
					 members, flags);
	return rc ? rc : loco_atomic_var_init_ex(&l->serving, mgr, &l->base,
						 "serving", l->host, members,
						 flags);
}

/* The words are sub-channels, finished already. */
static void tl_release(struct loco_channel *ch)
{
	struct loco_ticket_lock *l = (struct loco_ticket_lock *)ch;
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
}

static const struct loco_channel_ops ticket_lock_ops = {
	.fini = tl_release,
};

int loco_ticket_lock_init(struct loco_ticket_lock *l, struct loco_mgr *mgr,
			  struct loco_channel *parent, const char *name,
			  uint32_t host, uint64_t participants)
{
	return loco_ticket_lock_init_ex(l, mgr, parent, name, host, participants, 0);
}

int loco_ticket_lock_init_ex(struct loco_ticket_lock *l, struct loco_mgr *mgr,
			     struct loco_channel *parent, const char *name,
			     uint32_t host, uint64_t participants, unsigned flags)
{
	if (host >= LOCO_MAX_NODES || (flags & ~LOCO_REGION_HOT))
		return -EINVAL;
	int rc = loco_channel_init(&l->base, mgr, parent, name, participants,
				   &ticket_lock_ops);
	if (rc)
		return rc;
	local_init(l, host);
	if (host != loco_channel_self(&l->base) &&
	    !(l->base.participants & UINT64_C(1) << host))
		rc = -EINVAL;
	if (!rc)
		rc = skip_add(l);
	if (!rc)
		rc = words_init(l, mgr, flags);
	if (!rc)
		rc = loco_channel_join(&l->base);
	if (rc)
		loco_channel_fini(&l->base);  /* the words, the mutex */
	return rc;
}

void loco_ticket_lock_fini(struct loco_ticket_lock *l)
{
	loco_channel_fini(&l->base);
}

void loco_ticket_lock_set_handover_max(struct loco_ticket_lock *l, unsigned n)
{
	pthread_mutex_lock(&l->mu);
	l->handover_max = n;
	pthread_mutex_unlock(&l->mu);
}

void loco_ticket_lock_stats(struct loco_ticket_lock *l,
			    struct loco_ticket_lock_stats *out)
{
	pthread_mutex_lock(&l->mu);
	*out = l->st;
	pthread_mutex_unlock(&l->mu);
	out->acquires = atomic_load_explicit(&l->acquires, memory_order_relaxed); /* a counter */
}

/* ---- remote words ------------------------------------------------------ */

static const struct loco_rregion *word_rr(struct loco_atomic_var *av)
{
	return loco_channel_remote(&av->base, av->idx, av->host);
}

static uint64_t slot_off(uint64_t ticket)
{
	return ticket % LOCO_TICKET_LOCK_SLOTS * 8;
}

/* CAS of ticket T's skip slot. */
static int slot_cas(struct loco_ticket_lock *l, struct loco_thread *thr,
		    uint64_t t, uint64_t expect, uint64_t desired, uint64_t *old)
{
	const struct loco_rregion *rr =
		loco_channel_remote(&l->base, l->skip_idx, l->host);
	return rr ? loco_cas(thr, rr, slot_off(t), expect, desired, old) :
		    -ENOTCONN;
}

static uint64_t seen_get(struct loco_ticket_lock *l)
{
	/* Relaxed: a hint; every use is checked by the remote words. */
	return atomic_load_explicit(&l->seen, memory_order_relaxed);
}

static void seen_set(struct loco_ticket_lock *l, uint64_t v)
{
	/* Relaxed: a hint (a value serving had). */
	atomic_store_explicit(&l->seen, v, memory_order_relaxed);
}

/* ---- local queue (l->mu held unless noted) ---------------------------- */

static void queue_push(struct loco_ticket_lock *l, struct loco_tl_waiter *w)
{
	w->next = NULL;
	if (l->tail)
		l->tail->next = w;
	else
		l->head = w;
	l->tail = w;
}

static struct loco_tl_waiter *queue_pop(struct loco_ticket_lock *l)
{
	struct loco_tl_waiter *w = l->head;
	l->head = w->next;
	if (!l->head)
		l->tail = NULL;
	return w;
}

static void queue_unlink(struct loco_ticket_lock *l, struct loco_tl_waiter *w)
{
	struct loco_tl_waiter *prev = NULL;
	for (struct loco_tl_waiter *p = l->head; p != w; p = p->next)
		prev = p;
	if (prev)
		prev->next = w->next;
	else
		l->head = w->next;
	if (l->tail == w)
		l->tail = prev;
}

/* Wake W with STATE (l->mu held); W may return, and its frame vanish, as
 * soon as l->mu is released. */
static void grant(struct loco_ticket_lock *l, struct loco_tl_waiter *w,
		  int state)
{
	/* Release: pairs with the acquire load in waiter_spin; the waiter
	 * sees everything the granter did before. */
	atomic_store_explicit(&w->state, state, memory_order_release);
	pthread_cond_broadcast(&l->cv);
}

/* Give up local ownership (not holding the global lock): the first local
 * waiter becomes owner and takes a ticket itself. Takes l->mu. */
static void local_pass(struct loco_ticket_lock *l)
{
	pthread_mutex_lock(&l->mu);
	if (l->head)
		grant(l, queue_pop(l), TL_OWNER);
	else
		l->owned = false;
	pthread_mutex_unlock(&l->mu);
}

/* Spin, then yield, for a grant: the state, or TL_WAITING. */
static int waiter_spin(struct loco_tl_waiter *w)
{
	for (unsigned i = 0; i < WAIT_SPINS + WAIT_YIELDS; i++) {
		/* Acquire: pairs with the release store in grant. */
		int s = atomic_load_explicit(&w->state, memory_order_acquire);
		if (s != TL_WAITING)
			return s;
		if (i < WAIT_SPINS)
			loco_cpu_relax();
		else
			sched_yield();
	}
	return TL_WAITING;
}

/* Wait in the local queue: TL_HELD, TL_OWNER or -ETIMEDOUT. Spins first
 * (a handover on an idle host takes microseconds), then sleeps on l->cv
 * until granted (on a busy host a polling nap would be scheduled late). */
static int waiter_wait(struct loco_ticket_lock *l, struct loco_tl_waiter *w,
		       struct loco_wait *dl)
{
	int s = waiter_spin(w);
	if (s != TL_WAITING)
		return s;
	uint64_t deadline = loco_wait_deadline(dl);
	struct timespec ts = { (time_t)(deadline / 1000000000u),
			       (long)(deadline % 1000000000u) };
	int rc = 0;
	pthread_mutex_lock(&l->mu);
	/* Relaxed: grant stores under l->mu, which orders it with this load. */
	while ((s = atomic_load_explicit(&w->state, memory_order_relaxed)) ==
	       TL_WAITING && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&l->cv, &l->mu, &ts);
	if (s == TL_WAITING)
		queue_unlink(l, w);
	pthread_mutex_unlock(&l->mu);
	return s == TL_WAITING ? -ETIMEDOUT : s;
}

/* Become local owner (TL_OWNER), be handed the held lock (TL_HELD), or
 * -ETIMEDOUT. Takes l->mu. */
static int local_acquire(struct loco_ticket_lock *l, struct loco_wait *dl)
{
	struct loco_tl_waiter w;
	atomic_init(&w.state, TL_WAITING);
	pthread_mutex_lock(&l->mu);
	if (!l->owned) {
		l->owned = true;
		pthread_mutex_unlock(&l->mu);
		return TL_OWNER;
	}
	queue_push(l, &w);
	pthread_mutex_unlock(&l->mu);
	return waiter_wait(l, &w, dl);
}

/* This node now holds ticket T. The ticket and the streak are the local
 * owner's, as abandoned_mark (ownership passes under l->mu): no lock. */
static void hold(struct loco_ticket_lock *l, uint64_t t)
{
	l->ticket = t;
	l->streak = 0;
	/* Relaxed: a counter; its one writer at a time is the local owner. */
	atomic_store_explicit(&l->acquires,
			      atomic_load_explicit(&l->acquires,
						   memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

static void count(struct loco_ticket_lock *l, uint64_t *ctr)
{
	pthread_mutex_lock(&l->mu);
	(*ctr)++;
	pthread_mutex_unlock(&l->mu);
}

/* ---- global lock ------------------------------------------------------- */

/* One step of a ticket wait with D tickets still to be served before
 * ours: the next in line spins briefly, then yields; the others yield at
 * once (on a host with more nodes than cores the holder and the next in
 * line need the CPU). No sleep: a sleeper that is served before it wakes
 * leaves the lock idle. */
static void wait_step(uint64_t d, unsigned *spins)
{
	if (d == 1 && ++*spins < LOCO_WAIT_SPINS)
		loco_cpu_relax();
	else
		sched_yield();
}

/* Wait until serving reaches T: 1 when it does, 0 past DEADLINE, or an
 * error. Ordering: the READ that sees T is the acquire (docs/ordering.md:
 * the releaser fenced before its FAA). */
static int wait_served(struct loco_ticket_lock *l, struct loco_thread *thr,
		       uint64_t t, struct loco_wait *dl)
{
	unsigned spins = 0;
	uint64_t s = seen_get(l);
	while (s != t) {
		if (s > t) {
			loco_err(l->base.name, "serving %llu passed ticket %llu",
				 (unsigned long long)s, (unsigned long long)t);
			return -LOCO_EPROTO;
		}
		if (loco_wait_expired(dl))
			return 0;
		wait_step(t - s, &spins);
		int rc = loco_atomic_var_read(&l->serving, thr, &s);
		if (rc)
			return rc;
		seen_set(l, s);
	}
	return 1;
}

/* T is marked abandoned; if serving reached T before the mark landed, the
 * releaser may have missed it: take the mark back and hold the lock (0).
 * Else, while no release passed T, this node keeps T as its abandoned
 * ticket (-ETIMEDOUT); once one did, the mark is gone and nothing is kept.
 * The check is an FAA of 0, not a READ: with the releaser's FAA and CAS
 * it forms a store-buffering pattern that only atomics totally ordered
 * with each other rule out. */
static int mark_settle(struct loco_ticket_lock *l, struct loco_thread *thr,
		       uint64_t t)
{
	uint64_t s, old;
	int rc = loco_atomic_var_faa(&l->serving, thr, 0, &s);
	if (rc)
		return rc;
	seen_set(l, s);
	if (s == t) {
		rc = slot_cas(l, thr, t, t + 1, 0, &old);
		if (rc || old == t + 1)
			return rc;
	}
	if (s < t)
		l->abandoned_mark = t + 1;
	count(l, &l->st.abandoned);
	return -ETIMEDOUT;
}

/* Ticket T timed out: give it back if it is the last one, else mark it
 * abandoned. -ETIMEDOUT, 0 if T was served meanwhile (now held), or an
 * error. Its slot is free (one outstanding ticket per endpoint, see the
 * top): nothing here waits. */
static int ticket_leave(struct loco_ticket_lock *l, struct loco_thread *thr,
			uint64_t t)
{
	uint64_t old;
	int rc = loco_atomic_var_cas(&l->next, thr, t + 1, t, &old);
	if (rc)
		return rc;
	if (old == t + 1) {
		count(l, &l->st.returned);
		return -ETIMEDOUT;
	}
	/* An 8-byte CAS at the host, totally ordered with serve_next's CAS
	 * of this slot; a release that read the slot before the mark landed
	 * is caught by mark_settle's FAA on serving. */
	rc = slot_cas(l, thr, t, 0, t + 1, &old);
	if (rc)
		return rc;
	if (old) {
		loco_err(l->base.name, "skip slot of ticket %llu holds mark %llu: "
			 "more than %u tickets outstanding",
			 (unsigned long long)t, (unsigned long long)old,
			 LOCO_TICKET_LOCK_SLOTS);
		return -LOCO_EPROTO;
	}
	return mark_settle(l, thr, t);
}

/* This node's ticket: its abandoned one if no release passed it yet (the
 * CAS t+1 -> 0 takes the mark back, so no release skips it now), else a
 * new one (FAA next). */
static int ticket_take(struct loco_ticket_lock *l, struct loco_thread *thr,
		       uint64_t *t)
{
	uint64_t mark = l->abandoned_mark;
	if (mark) {
		uint64_t old;
		l->abandoned_mark = 0;
		/* An 8-byte CAS at the host, totally ordered with serve_next's
		 * CAS of the same slot: exactly one of them clears mark T + 1,
		 * so either we hold T again or a release passed it. */
		int rc = slot_cas(l, thr, mark - 1, mark, 0, &old);
		if (rc)
			return rc;
		if (old == mark) {
			count(l, &l->st.reclaimed);
			*t = mark - 1;
			return 0;
		}
	}
	return loco_atomic_var_faa(&l->next, thr, 1, t);
}

/* Take a ticket and wait for it: 0 (held), -ETIMEDOUT or an error. */
static int global_acquire(struct loco_ticket_lock *l, struct loco_thread *thr,
			  struct loco_wait *dl)
{
	uint64_t t;
	int rc = ticket_take(l, thr, &t);
	if (rc)
		return rc;
	rc = wait_served(l, thr, t, dl);
	rc = rc == 0 ? ticket_leave(l, thr, t) : rc == 1 ? 0 : rc;
	if (!rc)
		hold(l, t);
	return rc;
}

/* Take ticket S if next == S; serving <= next and serving >= S (a value
 * it had) then make serving == S: the lock was free and is ours. */
static int try_ticket(struct loco_ticket_lock *l, struct loco_thread *thr,
		      uint64_t s, uint64_t *next)
{
	int rc = loco_atomic_var_cas(&l->next, thr, s, s + 1, next);
	if (rc)
		return rc;
	if (*next != s)
		return -EBUSY;
	/* serving == s: every earlier ticket, an abandoned one of ours too,
	 * was passed (its mark cleared by a release). */
	l->abandoned_mark = 0;
	hold(l, s);
	return 0;
}

static int global_try(struct loco_ticket_lock *l, struct loco_thread *thr)
{
	uint64_t next, s;
	int rc = try_ticket(l, thr, seen_get(l), &next);
	if (rc != -EBUSY)
		return rc;
	rc = loco_atomic_var_read(&l->serving, thr, &s);
	if (rc)
		return rc;
	seen_set(l, s);
	return s == next ? try_ticket(l, thr, s, &next) : -EBUSY;
}

/* Release ticket T: serving = T + 1, and if T + 1 is marked abandoned,
 * clear the mark and release it too, and so on. The FAA and the CAS go to
 * the host in one doorbell on one QP: the CAS executes after the FAA. */
static int serve_next(struct loco_ticket_lock *l, struct loco_thread *thr,
		      uint64_t t)
{
	const struct loco_rregion *srv = word_rr(&l->serving);
	const struct loco_rregion *skip =
		loco_channel_remote(&l->base, l->skip_idx, l->host);
	if (!srv || !skip)
		return -ENOTCONN;
	for (;; t++) {
		uint64_t old, mark;
		struct loco_ack ack = { 0, 0 };
		struct loco_batch b;
		loco_batch_init(&b, thr);
		loco_batch_faa(&b, srv, 0, 1, &old);
		loco_batch_cas(&b, skip, slot_off(t + 1), t + 2, 0, &mark);
		int rc = loco_batch_post(&b, &ack);
		if (!rc)
			rc = loco_ack_wait(thr, &ack, -1);
		if (rc)
			return rc;
		seen_set(l, t + 1);
		if (mark != t + 2)
			return 0;
		count(l, &l->st.skipped);
	}
}

/* ---- public operations --------------------------------------------------- */

int loco_ticket_lock_lock(struct loco_ticket_lock *l, struct loco_thread *thr,
			  int timeout_ms)
{
	struct loco_wait dl;
	loco_wait_init(&dl, l->base.mgr, timeout_ms);
	int rc = local_acquire(l, &dl);
	if (rc == TL_HELD)
		return 0;
	if (rc == TL_OWNER) {
		rc = global_acquire(l, thr, &dl);
		if (rc)
			local_pass(l);
	}
	if (rc == -ETIMEDOUT)
		count(l, &l->st.timeouts);
	return rc;
}

int loco_ticket_lock_trylock(struct loco_ticket_lock *l,
			     struct loco_thread *thr)
{
	pthread_mutex_lock(&l->mu);
	bool busy = l->owned;
	if (!busy)
		l->owned = true;
	pthread_mutex_unlock(&l->mu);
	if (busy)
		return -EBUSY;
	int rc = global_try(l, thr);
	if (rc)
		local_pass(l);
	return rc;
}

int loco_ticket_lock_unlock(struct loco_ticket_lock *l, struct loco_thread *thr,
			    enum loco_fence_scope scope, uint32_t peer)
{
	/* Release: places the writes made under the lock before the next
	 * holder can see the lock move (pairs with the acquire load of the
	 * waiter state in waiter_spin, or l->mu in waiter_wait, or the next
	 * holder's READ of serving in wait_served). */
	int frc = loco_fence(thr, scope, peer);
	pthread_mutex_lock(&l->mu);
	if (l->head && l->streak < l->handover_max) {
		l->streak++;
		l->st.handovers++;
		grant(l, queue_pop(l), TL_HELD);
		pthread_mutex_unlock(&l->mu);
		return frc;
	}
	uint64_t t = l->ticket;
	pthread_mutex_unlock(&l->mu);
	int rc = serve_next(l, thr, t);
	local_pass(l);
	return frc ? frc : rc;
}
