/* SPDX-License-Identifier: MIT */
/* ticket_lock: see ticket_lock.h for the protocol.
 *
 * Invariants on the words at the host (serving only grows; next grows by
 * FAA and shrinks only when the owner of the last ticket gives it back):
 *  - serving <= next, and the tickets in [serving, next) are outstanding;
 *  - serving passes ticket t only by a release of t, by its holder or by
 *    a waiter that cleared t's abandoned mark (CAS t+1 -> 0);
 *  - skip[t % SLOTS] == t + 1 exactly while t is outstanding and marked;
 *    so a marked ticket is not held, and serving <= t while it is marked;
 *  - an endpoint has at most one ticket outstanding: its next attempt
 *    takes a marked ticket back (or finds it passed) before any FAA, so
 *    at most LOCO_MAX_NODES <= SLOTS tickets are outstanding and their
 *    slots differ.
 * So a value of serving once seen is a lower bound of serving, and a node
 * whose ticket equals such a value holds the lock: the hint `seen` spares
 * the READ of serving when this node released last. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <sched.h>
#include <time.h>

#include <loco/channels/ticket_lock.h>
#include <loco/log.h>
#include <loco/wait.h>

/* State of a local waiter; TL_HELD and TL_OWNER are also the results of
 * local_acquire. */
enum {
	TL_WAITING = 0,
	TL_HELD = 1,   /* handed the lock, still held globally */
	TL_OWNER = 2,  /* made local owner: must take a ticket */
};

/* lstate: the local owner bit and one unit per local waiter. */
#define LS_OWNED LOCO_TL_LS_OWNED
#define LS_WAITER UINT64_C(2)

struct loco_tl_waiter {
	struct loco_tl_waiter *next;
	_Atomic int state;
};

#define SLOT_BYTES ((uint64_t)LOCO_TICKET_LOCK_SLOTS * 8)
/* A local waiter spins, then yields, this many rounds before it sleeps on
 * the condition variable until granted. */
#define WAIT_SPINS 64
#define WAIT_YIELDS 256
/* A waiter looks for an abandoned mark on the ticket being served once
 * serving has not moved for this many of its polls, then after twice as
 * many, and so on up to PASS_POLLS_MAX: a few extra READs per wait. */
#define PASS_POLLS 4
#define PASS_POLLS_MAX 1024
/* A waiter with D > 1 tickets ahead naps (D - 1) x serve_ns between its
 * polls, at most NAP_MAX_NS: it cannot be served sooner, and its polls
 * would take the CPU and the host's time from the holder and the next in
 * line (a host with more nodes than cores; on ucx-tcp every poll is a
 * message the host's CPU answers). The next in line naps through the
 * first half of the turn it saw begin (at its own release, when the
 * holder took the lock from it), for the same reason. A nap shorter than
 * NAP_MIN_NS yields instead: a nap overshoots by the timer slack (50 us),
 * which would delay the handover of a lock whose turns are short (an idle
 * host; shm, where a ticket is served in a microsecond). serve_ns starts
 * at SERVE_NS_INIT and follows the waits' measurements. */
#define SERVE_NS_INIT 20000u
#define NAP_MIN_NS 200000u
#define NAP_MAX_NS 1000000u

/* A lock call's deadline is a struct loco_wait: it reads the clock only
 * once the call has to wait (an uncontended acquire reads no clock). It
 * is set up only then too (struct tl_deadline): an uncontended split
 * acquire (lock_post) does not look up the manager's default timeout
 * either. */
struct tl_deadline {
	struct loco_wait w;
	int timeout_ms;
	bool set;
};

/* ---- set-up ----------------------------------------------------------- */

/* The lock's words are read and CAS/FAA'd, never written. */
#define TL_ACCESS (LOCO_REGION_REMOTE_READ | LOCO_REGION_REMOTE_ATOMIC)

/* Region "skip" at the host, expected from the host by everyone. */
static int skip_add(struct loco_ticket_lock *l)
{
	int rc = 0;
	if (l->host == loco_channel_self(&l->base))
		rc = loco_channel_add_region_ex(&l->base, "skip", SLOT_BYTES,
						TL_ACCESS, NULL);
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
	l->words_rr = l->skip_rr = NULL;
	pthread_mutex_init(&l->mu, NULL);
	atomic_init(&l->lstate, 0);
	atomic_init(&l->solo, NULL);
	/* No ticket held yet: serving starts at ticket + 1 = 0, so a first
	 * split attempt speculates, as after this node's own release. */
	l->ticket = UINT64_MAX;
	l->streak = 0;
	l->handover_max = LOCO_TICKET_LOCK_HANDOVER_MAX;
	l->abandoned_mark = 0;
	l->serve_ns = SERVE_NS_INIT;
	l->guess_missed = false;
	l->released_ns = 0;
	l->held_ns = 0;
	l->contended = false;
	/* Today's fixed budget as the cap: on a transport whose polls are
	 * round trips the next in line never spins longer than it did. */
	loco_spin_init(&l->spin, LOCO_WAIT_SPINS);
	l->head = l->tail = NULL;
	l->st = (struct loco_ticket_lock_stats){ 0 };
	atomic_init(&l->acquires, 0);
	atomic_init(&l->waits, 0);
	atomic_init(&l->polls, 0);
	atomic_init(&l->spun_out, 0);
	atomic_init(&l->yields, 0);
	atomic_init(&l->naps, 0);
	atomic_init(&l->seen, 0);
}

/* Region "words" at the host (next and serving, one cache line: every
 * global acquire and release moves one line between nodes, not two),
 * expected from the host by everyone. FLAGS: LOCO_REGION_HOT or 0. */
static int words_add(struct loco_ticket_lock *l, unsigned flags)
{
	int rc = 0;
	if (l->host == loco_channel_self(&l->base))
		rc = loco_channel_add_region_ex(&l->base, "words",
						LOCO_TL_WORDS_BYTES,
						flags | TL_ACCESS, NULL);
	int idx = rc ? rc : loco_channel_expect(&l->base, "words",
						LOCO_TL_WORDS_BYTES,
						UINT64_C(1) << l->host);
	if (idx < 0)
		return idx;
	l->words_idx = (unsigned)idx;
	return 0;
}

/* The regions go with the channel. */
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
	if (host >= LOCO_MAX_NODES ||
	    (flags & ~(LOCO_REGION_HOT | LOCO_TICKET_LOCK_SOLO)))
		return -EINVAL;
	int rc = loco_channel_init(&l->base, mgr, parent, name, participants,
				   &ticket_lock_ops);
	if (rc)
		return rc;
	local_init(l, host);
	l->solo_mode = flags & LOCO_TICKET_LOCK_SOLO;
	if (host != loco_channel_self(&l->base) &&
	    !(l->base.participants & UINT64_C(1) << host))
		rc = -EINVAL;
	if (!rc)
		rc = skip_add(l);
	if (!rc)
		rc = words_add(l, flags & LOCO_REGION_HOT);
	if (!rc)
		rc = loco_channel_join(&l->base);
	if (rc)
		loco_channel_fini(&l->base);  /* the regions, the mutex */
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
	/* Relaxed: counters. */
	out->acquires = atomic_load_explicit(&l->acquires, memory_order_relaxed);
	out->waits = atomic_load_explicit(&l->waits, memory_order_relaxed);
	out->polls = atomic_load_explicit(&l->polls, memory_order_relaxed);
	out->spun_out = atomic_load_explicit(&l->spun_out, memory_order_relaxed);
	out->yields = atomic_load_explicit(&l->yields, memory_order_relaxed);
	out->naps = atomic_load_explicit(&l->naps, memory_order_relaxed);
}


/* ---- remote words (the local owner's) ---------------------------------- */

/* Look the host's two regions up once they are known (after the join);
 * the descriptors stay where they are. -ENOTCONN before. */
static int words_lookup(struct loco_ticket_lock *l)
{
	const struct loco_rregion *w = loco_channel_remote(&l->base, l->words_idx,
							   l->host);
	const struct loco_rregion *k = loco_channel_remote(&l->base, l->skip_idx,
							   l->host);
	if (!w || !k)
		return -ENOTCONN;
	l->words_rr = w;
	l->skip_rr = k;
	return 0;
}

/* The words known (the common case, inline), or words_lookup. */
static inline int words_known(struct loco_ticket_lock *l)
{
	return __builtin_expect(l->skip_rr != NULL, 1) ? 0 : words_lookup(l);
}

static uint64_t slot_off(uint64_t ticket)
{
	return ticket % LOCO_TICKET_LOCK_SLOTS * 8;
}

/* CAS of ticket T's skip slot. */
static int slot_cas(struct loco_ticket_lock *l, struct loco_thread *thr,
		    uint64_t t, uint64_t expect, uint64_t desired, uint64_t *old)
{
	return loco_cas(thr, l->skip_rr, slot_off(t), expect, desired, old);
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
	/* Relaxed: waiter units change under l->mu only (the CASes without
	 * it need the count to be 0). */
	atomic_fetch_sub_explicit(&l->lstate, LS_WAITER, memory_order_relaxed);
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
	/* Relaxed: as in queue_pop. */
	atomic_fetch_sub_explicit(&l->lstate, LS_WAITER, memory_order_relaxed);
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

/* Give up local ownership (not holding the global lock): with nobody
 * waiting, one CAS; else the first local waiter becomes owner and takes
 * a ticket itself. */
void loco_tl_local_pass(struct loco_ticket_lock *l)
{
	uint64_t owned = LS_OWNED;
	if (l->solo_mode)
		return;
	/* Release: pairs with the acquire CAS of the next local owner, who
	 * then sees this owner's ticket, streak and abandoned mark. */
	if (atomic_compare_exchange_strong_explicit(&l->lstate, &owned, 0,
						    memory_order_release,
						    memory_order_relaxed))
		return;
	pthread_mutex_lock(&l->mu);
	if (l->head)
		grant(l, queue_pop(l), TL_OWNER);
	else  /* the waiters timed out meanwhile: no unit is left */
		/* Release: as the CAS above. */
		atomic_store_explicit(&l->lstate, 0, memory_order_release);
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

/* A LOCO_TICKET_LOCK_SOLO endpoint: THR is its one user (TL_OWNER), or
 * -EPERM. */
static int solo_take(struct loco_ticket_lock *l, struct loco_thread *thr)
{
	struct loco_thread *none = NULL;
	/* Relaxed: only the one user finds its own pointer there. */
	if (atomic_load_explicit(&l->solo, memory_order_relaxed) == thr)
		return TL_OWNER;
	/* Acq_rel: the first user claims the endpoint once. */
	if (atomic_compare_exchange_strong_explicit(&l->solo, &none, thr,
						    memory_order_acq_rel,
						    memory_order_relaxed))
		return TL_OWNER;
	loco_err(l->base.name, "a second thread context uses a lock made "
		 "LOCO_TICKET_LOCK_SOLO");
	return -EPERM;
}

/* D's wait, set up at the first call. */
static struct loco_wait *deadline(struct loco_ticket_lock *l,
				  struct tl_deadline *d)
{
	if (!d->set) {
		loco_wait_init(&d->w, l->base.mgr, d->timeout_ms);
		d->set = true;
	}
	return &d->w;
}

/* local_acquire when the CAS found another local thread in the way:
 * queue behind it. */
static int local_queue(struct loco_ticket_lock *l, struct tl_deadline *d)
{
	struct loco_tl_waiter w;
	atomic_init(&w.state, TL_WAITING);
	pthread_mutex_lock(&l->mu);
	/* Acquire: as above, when this finds the owner gone. Waiter units
	 * change under l->mu only; the owner bit also by the CASes, which
	 * fail while a unit is counted. */
	uint64_t s = atomic_fetch_add_explicit(&l->lstate, LS_WAITER,
					       memory_order_acquire);
	if (!(s & LS_OWNED)) {
		/* Relaxed: l->mu and the acquire above order it. */
		atomic_fetch_add_explicit(&l->lstate, LS_OWNED - LS_WAITER,
					  memory_order_relaxed);
		pthread_mutex_unlock(&l->mu);
		return TL_OWNER;
	}
	queue_push(l, &w);
	pthread_mutex_unlock(&l->mu);
	return waiter_wait(l, &w, deadline(l, d));
}

/* Become local owner (TL_OWNER), be handed the held lock (TL_HELD), or
 * -ETIMEDOUT (-EPERM: see solo_take). Nobody local in the way: one CAS
 * (a solo endpoint's user: one load), inline. */
static inline int local_acquire(struct loco_ticket_lock *l,
				struct loco_thread *thr, struct tl_deadline *d)
{
	uint64_t free_ = 0;
	/* Relaxed: only the one user finds its own pointer there. */
	if (l->solo_mode && atomic_load_explicit(&l->solo,
						 memory_order_relaxed) == thr)
		return TL_OWNER;
	if (l->solo_mode)
		return solo_take(l, thr);
	/* Acquire: pairs with loco_tl_local_pass's release CAS. */
	if (atomic_compare_exchange_strong_explicit(&l->lstate, &free_, LS_OWNED,
						    memory_order_acquire,
						    memory_order_relaxed))
		return TL_OWNER;
	return local_queue(l, d);
}


static void count(struct loco_ticket_lock *l, uint64_t *ctr)
{
	pthread_mutex_lock(&l->mu);
	(*ctr)++;
	pthread_mutex_unlock(&l->mu);
}

/* A lock attempt that returned -ETIMEDOUT: counted; past the manager's
 * default timeout (TIMEOUT_MS < 0: a caller that set its own expects
 * timeouts) also said, at the 1st, 2nd, 4th, 8th ... time, with what this
 * node saw of serving, so a run that fails on it names the lock (the
 * timeout only suspects the holder: a stopped, descheduled or fenced
 * node; the caller decides). */
static void timed_out(struct loco_ticket_lock *l, int timeout_ms)
{
	pthread_mutex_lock(&l->mu);
	uint64_t n = ++l->st.timeouts;
	pthread_mutex_unlock(&l->mu);
	if (timeout_ms >= 0 || (n & (n - 1)))
		return;
	loco_warn("ticket_lock", "lock %s (host %u): not acquired within the "
		  "timeout (%" PRIu64 " time%s); serving last seen at %" PRIu64
		  ": its holder has not released it", l->base.name, l->host, n,
		  n == 1 ? "" : "s",
		  /* Relaxed: a hint, for the message. */
		  atomic_load_explicit(&l->seen, memory_order_relaxed));
}

/* Hand the held lock to the first local waiter (true), unless past
 * handover_max or nobody waits (false). */
static bool handover(struct loco_ticket_lock *l)
{
	/* Relaxed: a hint; a waiter that arrives later is found by
	 * loco_tl_local_pass's CAS failing. */
	if (l->solo_mode ||
	    atomic_load_explicit(&l->lstate, memory_order_relaxed) == LS_OWNED)
		return false;
	bool done = false;
	pthread_mutex_lock(&l->mu);
	if (l->head && l->streak < l->handover_max) {
		l->streak++;
		l->st.handovers++;
		grant(l, queue_pop(l), TL_HELD);
		done = true;
	}
	pthread_mutex_unlock(&l->mu);
	return done;
}

/* ---- global lock ------------------------------------------------------- */

/* One step of a ticket wait with D tickets still to be served before
 * ours, serving last seen to move at MOVED_NS (0: not seen): the next in
 * line spins (its *SPINS-th step: the first l->spin.budget - 1, a budget
 * learned from its waits, spin_learn), then yields, but naps while the
 * holder that began at MOVED_NS is probably in the first half of its
 * turn; the others nap until their turn is near. Naps shorter than
 * NAP_MIN_NS yield instead (see NAP_MIN_NS), so on an idle host or on shm
 * nothing naps. Returns what it did: STEP_SPUN (no system call),
 * STEP_YIELDED or STEP_NAPPED. */
enum { STEP_SPUN, STEP_YIELDED, STEP_NAPPED };

static int wait_step(struct loco_ticket_lock *l, uint64_t d, uint64_t moved_ns,
		     unsigned *spins)
{
	uint64_t ns = (d - 1) * l->serve_ns;
	/* The clock only when half a turn could reach a nap (else ns stays
	 * below NAP_MIN_NS anyway): on shm a turn is a microsecond, and a
	 * clock read in a VM can cost more than a poll. */
	if (d == 1 && moved_ns && l->serve_ns / 2 >= NAP_MIN_NS) {
		uint64_t now = loco_now_ns(), half = moved_ns + l->serve_ns / 2;
		ns = now < half ? half - now : 0;
	}
	if (ns >= NAP_MIN_NS) {
		struct timespec ts = { 0, (long)(ns < NAP_MAX_NS ? ns : NAP_MAX_NS) };
		nanosleep(&ts, NULL);
		return STEP_NAPPED;
	}
	if (d == 1 && ++*spins < l->spin.budget) {
		loco_cpu_relax();
		return STEP_SPUN;
	}
	sched_yield();
	return STEP_YIELDED;
}

/* Serving moved by N tickets in NS: fold it into serve_ns (1/4 weight). */
static void serve_learn(struct loco_ticket_lock *l, uint64_t n, uint64_t ns)
{
	uint64_t per = ns / n;
	l->serve_ns = (3 * l->serve_ns + (per < NAP_MAX_NS ? per : NAP_MAX_NS)) / 4;
}

/* This node released its ticket: when (a waiter's turn after it starts
 * then), and how long it held the lock, a turn's length as the holder
 * saw it. Timed only while the lock is contended (this node's last wait
 * had to poll): an uncontended lock reads no clock. */
static void released(struct loco_ticket_lock *l)
{
	if (!l->contended)
		return;
	uint64_t now = loco_now_ns();
	if (l->held_ns && now > l->held_ns)
		serve_learn(l, 1, now - l->held_ns);
	l->released_ns = now;
}

/* Serving sits at S, ahead of our ticket: if S is marked abandoned, take
 * the mark (CAS S+1 -> 0: only one node wins it) and move serving past S
 * (serving is S: a marked ticket is neither held nor passed). *S becomes
 * the new value when we passed it. */
static int pass_abandoned(struct loco_ticket_lock *l, struct loco_thread *thr,
			  uint64_t *s)
{
	uint64_t mark, old;
	int rc = loco_read(thr, l->skip_rr, slot_off(*s), &mark, 8);
	if (rc || mark != *s + 1)
		return rc;
	rc = slot_cas(l, thr, *s, *s + 1, 0, &old);
	if (rc || old != *s + 1)
		return rc;
	rc = loco_faa(thr, l->words_rr, LOCO_TL_SERVING, 1, &old);
	if (rc)
		return rc;
	if (old != *s) {
		loco_err(l->base.name, "serving %llu, not the passed ticket %llu",
			 (unsigned long long)old, (unsigned long long)*s);
		return -LOCO_EPROTO;
	}
	count(l, &l->st.skipped);
	*s = old + 1;
	loco_tl_seen_set(l, *s);
	return 0;
}

/* Polls and yields of one wait. */
struct wait_count {
	bool waited;
	uint64_t polls, spun_out, yields, naps;
};

/* Serving reached ticket T while this node was next in line, after SPINS
 * of wait_step's steps for it, the last one spun (SPUN) or not: teach the
 * spin budget (loco/wait.h, struct loco_spin). Not spun with SPINS at the
 * budget or past it: the budget ran out and the wait yielded SPINS -
 * budget + 1 times (counted in C); not spun below it: the wait napped,
 * spinning was not tried, and nothing is learned. */
static void spin_learn(struct loco_ticket_lock *l, unsigned spins, bool spun,
		       struct wait_count *c)
{
	unsigned b = l->spin.budget;
	if (spun) {
		loco_spin_learn(&l->spin, spins, 0);
	} else if (spins >= b) {
		loco_spin_learn(&l->spin, b, spins - b + 1);
		c->spun_out++;
	}
}

/* Wait until serving, last seen at S, reaches T: 1 when it does, 0 past
 * the deadline, or an error; counted into *C. FRESH: S was read behind
 * this ticket's FAA; else S is this node's hint (it released last, or an
 * older value), so serving is read at once: the distance from a stale S
 * says nothing about the wait, and a yield or nap on it costs a system
 * call where one READ would do (the other node took the lock since: a
 * guess missed; a hint equal to T needs no READ: T is held). Only a
 * ticket not served at that fresh look waits (and
 * marks the lock contended: its turns are timed). A ticket ahead that stays served without
 * moving is checked for an abandoned mark now and then, and passed. The
 * wait of the next in line teaches the spin budget (spin_learn).
 * Ordering: the READ that sees T is the acquire (docs/ordering.md: the
 * releaser fenced before its FAA). */
static int wait_poll(struct loco_ticket_lock *l, struct loco_thread *thr,
		     uint64_t t, uint64_t s, bool fresh, struct loco_wait *dl,
		     struct wait_count *c)
{
	unsigned spins = 0, still = 0, check = PASS_POLLS, polls = 0;
	bool spun = false;
	if (!fresh && s != t) {  /* s == t: a value serving had, so held */
		int rc = loco_read(thr, l->words_rr, LOCO_TL_SERVING, &s, 8);
		if (rc)
			return rc;
		c->polls++;
		loco_tl_seen_set(l, s);
	}
	/* When serving was last seen to move: at this node's release, if
	 * the holder now is the one after it (who may have taken its ticket
	 * later: an early bound of its turn's start, which paces the polls
	 * but is not learned from). */
	uint64_t moved_ns = s == l->ticket + 1 ? l->released_ns : 0;
	bool seen_move = false;
	l->contended = c->waited = s != t;
	while (s != t) {
		if (s > t) {
			loco_err(l->base.name, "serving %llu passed ticket %llu",
				 (unsigned long long)s, (unsigned long long)t);
			return -LOCO_EPROTO;
		}
		/* The clock after each nap or yield, but only every
		 * LOCO_WAIT_CLOCK_EVERY spinning polls: on shm a poll is a
		 * load, a clock read ten of them. */
		if ((!spun || ++polls % LOCO_WAIT_CLOCK_EVERY == 0) &&
		    loco_wait_expired(dl))
			return 0;
		if (still >= check) {
			uint64_t was = s;
			int rc = pass_abandoned(l, thr, &s);
			if (rc)
				return rc;
			still = 0;
			check = s != was ? PASS_POLLS :
				check < PASS_POLLS_MAX ? 2 * check : check;
			continue;
		}
		int step = wait_step(l, t - s, moved_ns, &spins);
		spun = step == STEP_SPUN;
		c->yields += step == STEP_YIELDED;
		c->naps += step == STEP_NAPPED;
		c->polls++;
		uint64_t now;
		int rc = loco_read(thr, l->words_rr, LOCO_TL_SERVING, &now, 8);
		if (rc)
			return rc;
		still = now == s ? still + 1 : 0;
		if (now != s && t - s == 1)
			spin_learn(l, spins, spun, c);
		if (now != s) {
			uint64_t at = loco_now_ns();
			if (seen_move && now > s)
				serve_learn(l, now - s, at - moved_ns);
			moved_ns = at;
			seen_move = true;
			check = PASS_POLLS;
		}
		s = now;
		loco_tl_seen_set(l, s);
	}
	return 1;
}

/* wait_poll, counted in the lock's stats when it had to poll. */
static int wait_served(struct loco_ticket_lock *l, struct loco_thread *thr,
		       uint64_t t, uint64_t s, bool fresh, struct loco_wait *dl)
{
	struct wait_count c = { false, 0, 0, 0, 0 };
	int rc = wait_poll(l, thr, t, s, fresh, dl, &c);
	loco_tl_owner_add(&l->polls, c.polls);
	if (c.waited) {
		loco_tl_owner_add(&l->waits, 1);
		loco_tl_owner_add(&l->spun_out, c.spun_out);
		loco_tl_owner_add(&l->yields, c.yields);
		loco_tl_owner_add(&l->naps, c.naps);
	}
	return rc;
}

/* T is marked abandoned; if serving reached T meanwhile, take the mark
 * back (CAS: a waiter passing T may win it instead) and hold the lock (0).
 * Else, while serving is below T, this node keeps T as its abandoned
 * ticket (-ETIMEDOUT); once a waiter passed it, nothing is kept. The
 * check is an FAA of 0 (an atomic at the host like the passer's). */
static int mark_settle(struct loco_ticket_lock *l, struct loco_thread *thr,
		       uint64_t t)
{
	uint64_t s, old;
	int rc = loco_faa(thr, l->words_rr, LOCO_TL_SERVING, 0, &s);
	if (rc)
		return rc;
	loco_tl_seen_set(l, s);
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
	int rc = loco_cas(thr, l->words_rr, LOCO_TL_NEXT, t + 1, t, &old);
	if (rc)
		return rc;
	if (old == t + 1) {
		count(l, &l->st.returned);
		return -ETIMEDOUT;
	}
	/* An 8-byte CAS at the host, totally ordered with a passer's CAS of
	 * this slot; a passer reads serving first, so it passes T only once
	 * serving reached it, which mark_settle's FAA then sees. */
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

/* This node's abandoned ticket if no waiter passed it yet (the CAS t+1 ->
 * 0 takes the mark back, so nobody passes it now): 1 and *T; 0 if there
 * is none (take a new one); or an error. */
static int ticket_reclaim(struct loco_ticket_lock *l, struct loco_thread *thr,
			  uint64_t *t)
{
	uint64_t mark = l->abandoned_mark, old;
	if (!mark)
		return 0;
	l->abandoned_mark = 0;
	/* An 8-byte CAS at the host, totally ordered with a passer's CAS of
	 * the same slot: exactly one of them clears mark T + 1, so either we
	 * hold T again or a waiter passed it. */
	int rc = slot_cas(l, thr, mark - 1, mark, 0, &old);
	if (rc || old != mark)
		return rc;
	count(l, &l->st.reclaimed);
	*t = mark - 1;
	return 1;
}

/* Wait for ticket T from serving S (FRESH: as wait_poll): 0 (held),
 * -ETIMEDOUT or an error. */
static int ticket_wait(struct loco_ticket_lock *l, struct loco_thread *thr,
		       uint64_t t, uint64_t s, bool fresh, struct loco_wait *dl)
{
	int rc = wait_served(l, thr, t, s, fresh, dl);
	rc = rc == 0 ? ticket_leave(l, thr, t) : rc == 1 ? 0 : rc;
	if (!rc)
		loco_tl_hold(l, t);
	return rc;
}


/* After loco_tl_ticket_post's batch completed: the value of serving to wait from. */
static uint64_t ticket_seen(struct loco_ticket_lock *l,
			    const struct loco_tl_acquire *a)
{
	if (!a->read)
		return a->guess;
	loco_tl_seen_set(l, a->serving);
	return a->serving;
}

/* Take a ticket and wait for it: 0 (held), -ETIMEDOUT or an error. */
static int global_acquire(struct loco_ticket_lock *l, struct loco_thread *thr,
			  struct loco_wait *dl)
{
	struct loco_tl_acquire a = { 0 };
	struct loco_batch b;
	uint64_t t = 0;
	int rc = words_known(l);
	if (!rc && (rc = ticket_reclaim(l, thr, &t)) == 1)
		return ticket_wait(l, thr, t, loco_tl_seen_get(l), false, dl);
	if (rc)
		return rc;
	loco_batch_init(&b, thr);
	loco_tl_ticket_post(l, &b, &a);
	rc = loco_batch_run(&b, -1);
	return rc ? rc : ticket_wait(l, thr, a.ticket, ticket_seen(l, &a), a.read,
				     dl);
}

/* Take ticket S if next == S; serving <= next and serving >= S (a value
 * it had) then make serving == S: the lock was free and is ours. */
static int try_ticket(struct loco_ticket_lock *l, struct loco_thread *thr,
		      uint64_t s, uint64_t *next)
{
	int rc = loco_cas(thr, l->words_rr, LOCO_TL_NEXT, s, s + 1, next);
	if (rc)
		return rc;
	if (*next != s)
		return -EBUSY;
	/* serving == s: every earlier ticket, an abandoned one of ours too,
	 * was passed (its mark cleared by a waiter). */
	l->abandoned_mark = 0;
	loco_tl_hold(l, s);
	return 0;
}

static int global_try(struct loco_ticket_lock *l, struct loco_thread *thr)
{
	uint64_t next, s;
	int rc = words_known(l);
	if (!rc)
		rc = try_ticket(l, thr, loco_tl_seen_get(l), &next);
	if (rc != -EBUSY)
		return rc;
	rc = loco_read(thr, l->words_rr, LOCO_TL_SERVING, &s, 8);
	if (rc)
		return rc;
	loco_tl_seen_set(l, s);
	return s == next ? try_ticket(l, thr, s, &next) : -EBUSY;
}

/* Release ticket T: serving = T + 1 (one FAA; waiters pass an abandoned
 * T + 1 themselves). */
static int serve_next(struct loco_ticket_lock *l, struct loco_thread *thr,
		      uint64_t t)
{
	uint64_t old;
	int rc = loco_faa(thr, l->words_rr, LOCO_TL_SERVING, 1, &old);
	if (!rc) {
		loco_tl_seen_set(l, t + 1);
		released(l);
	}
	return rc;
}

/* ---- public operations --------------------------------------------------- */

int loco_ticket_lock_lock(struct loco_ticket_lock *l, struct loco_thread *thr,
			  int timeout_ms)
{
	struct tl_deadline d = { .timeout_ms = timeout_ms };
	int rc = local_acquire(l, thr, &d);
	if (rc == TL_HELD)
		return 0;
	if (rc == TL_OWNER) {
		rc = global_acquire(l, thr, deadline(l, &d));
		if (rc)
			loco_tl_local_pass(l);
	}
	if (rc == -ETIMEDOUT)
		timed_out(l, timeout_ms);
	return rc;
}

int loco_ticket_lock_lock_post_slow(struct loco_ticket_lock *l,
				    struct loco_thread *thr,
				    struct loco_batch *b,
				    struct loco_tl_acquire *a, int timeout_ms)
{
	struct tl_deadline d = { .timeout_ms = timeout_ms };
	*a = (struct loco_tl_acquire){ .timeout_ms = timeout_ms };
	int rc = local_acquire(l, thr, &d);
	if (rc == TL_HELD) {
		a->held = a->speculate = true;
		return 0;
	}
	if (rc < 0) {
		if (rc == -ETIMEDOUT)
			timed_out(l, timeout_ms);
		return rc;
	}
	rc = words_known(l);
	if (!rc && l->abandoned_mark) {
		/* After a timeout: take the old ticket back, synchronously. */
		rc = global_acquire(l, thr, deadline(l, &d));
		a->held = a->speculate = !rc;
	} else if (!rc) {
		loco_tl_ticket_post(l, b, a);
		rc = b->err;
	}
	if (rc == -ETIMEDOUT)
		timed_out(l, timeout_ms);
	if (rc)
		loco_tl_local_pass(l);
	return rc;
}

int loco_ticket_lock_lock_finish_slow(struct loco_ticket_lock *l,
				      struct loco_thread *thr,
				      struct loco_tl_acquire *a, int rc)
{
	if (a->held) {
		a->host_early = true;
		return 1;
	}
	if (rc) {
		loco_tl_local_pass(l);
		return rc;
	}
	uint64_t s = ticket_seen(l, a);
	/* Held before the batch's later ops ran iff serving was already at
	 * our ticket when we posted: nobody could hold the lock between the
	 * release we saw and our FAA (a holder of that ticket would have
	 * made our FAA return more). */
	bool early = a->ticket == a->guess;
	if (a->speculate)
		l->guess_missed = !early;
	/* The READ of serving executed after the FAA, and the caller's ops
	 * to the host after it, on one QP: served then, they ran under the
	 * lock. */
	a->host_early = early || (a->read && a->serving == a->ticket);
	if (s == a->ticket) {
		/* Served at the first look: ticket_wait without a wait (the
		 * lock not contended, nothing polled). */
		l->contended = false;
		loco_tl_hold(l, s);
		return early;
	}
	struct loco_wait dl;
	loco_wait_init(&dl, l->base.mgr, a->timeout_ms);
	rc = ticket_wait(l, thr, a->ticket, s, a->read, &dl);
	if (rc) {
		if (rc == -ETIMEDOUT)
			timed_out(l, a->timeout_ms);
		loco_tl_local_pass(l);
		return rc;
	}
	return early;
}

/* A trylock's local part: local owner now (0), -EBUSY (another thread
 * of this node owns or is acquiring it) or -EPERM (see solo_take). */
static int local_try(struct loco_ticket_lock *l, struct loco_thread *thr)
{
	uint64_t free_ = 0;
	if (l->solo_mode)
		return solo_take(l, thr) < 0 ? -EPERM : 0;
	/* Acquire: pairs with loco_tl_local_pass's release CAS. */
	if (!atomic_compare_exchange_strong_explicit(&l->lstate, &free_,
						     LS_OWNED,
						     memory_order_acquire,
						     memory_order_relaxed))
		return -EBUSY;
	return 0;
}

int loco_ticket_lock_trylock(struct loco_ticket_lock *l,
			     struct loco_thread *thr)
{
	int rc = local_try(l, thr);
	if (rc)
		return rc;
	rc = global_try(l, thr);
	if (rc)
		loco_tl_local_pass(l);
	return rc;
}

int loco_ticket_lock_trylock_post_slow(struct loco_ticket_lock *l,
				       struct loco_thread *thr,
				       struct loco_batch *b,
				       struct loco_tl_try *t)
{
	int rc = local_try(l, thr);
	if (rc)
		return rc;
	rc = words_known(l);
	t->guess = loco_tl_seen_get(l);
	/* Not released last by this node, or its last such guess missed
	 * (another node took the lock since its release): the hint is
	 * probably stale, and the CAS would fail. */
	if (!rc && (t->guess != l->ticket + 1 || l->guess_missed))
		rc = -EBUSY;
	if (!rc) {
		/* As try_ticket: the CAS takes ticket GUESS iff next is
		 * GUESS, and then serving is GUESS too (a value it had, and
		 * serving <= next): the lock was free and is ours. */
		loco_batch_cas(b, l->words_rr, LOCO_TL_NEXT, t->guess,
			       t->guess + 1, &t->next);
		rc = b->err;
	}
	if (rc)
		loco_tl_local_pass(l);
	return rc;
}

int loco_ticket_lock_trylock_finish_slow(struct loco_ticket_lock *l,
					 struct loco_thread *thr,
					 struct loco_tl_try *t, int rc)
{
	(void)thr;
	if (!rc) {
		l->guess_missed = t->next != t->guess;
		if (l->guess_missed)
			rc = -EBUSY;
	}
	if (rc) {
		loco_tl_local_pass(l);
		return rc;
	}
	/* serving == guess: every earlier ticket, an abandoned one of ours
	 * too, was passed (as try_ticket). */
	l->abandoned_mark = 0;
	loco_tl_hold(l, t->guess);
	return 0;
}

int loco_ticket_lock_unlock(struct loco_ticket_lock *l, struct loco_thread *thr,
			    enum loco_fence_scope scope, uint32_t peer)
{
	/* Release: places the writes made under the lock before the next
	 * holder can see the lock move (pairs with the acquire load of the
	 * waiter state in waiter_spin, or l->mu in waiter_wait, or the next
	 * holder's READ of serving in wait_served). */
	int frc = loco_fence(thr, scope, peer);
	if (handover(l))
		return frc;
	int rc = serve_next(l, thr, l->ticket);
	loco_tl_local_pass(l);
	return frc ? frc : rc;
}

int loco_ticket_lock_unlock_finish_slow(struct loco_ticket_lock *l,
					struct loco_thread *thr,
					struct loco_tl_release *r, int rc,
					enum loco_fence_scope scope,
					uint32_t peer)
{
	if (!r->handover) {
		if (!rc) {
			loco_tl_seen_set(l, l->ticket + 1);
			released(l);
		}
		loco_tl_local_pass(l);
		return rc;
	}
	/* The batch did not release: as loco_ticket_lock_unlock. */
	int urc = loco_ticket_lock_unlock(l, thr, scope, peer);
	return rc ? rc : urc;
}
