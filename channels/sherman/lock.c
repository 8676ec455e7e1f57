/* SPDX-License-Identifier: MIT */
/* HOCL, the hierarchical lock (Sherman §4.3), and locked write-backs
 * (plain mode).
 *
 * Global lock words: "locks" on every hosting node (device memory where
 * it has room), a node's lock at hash(address) mod locks. 0 is free; a
 * held word is an LLLock word (<loco/rtx/lllock.h>): the holder's slot
 * and a tag of lease (ms) and sequence, unique per acquisition and
 * increasing per slot, so that a release (CAS word -> 0) can only undo
 * its own acquisition.
 *
 * Local lock table (one per process, one entry per global word): a
 * thread that finds the entry owned by another local thread waits for it
 * locally and makes no remote op. A releaser with local waiters hands
 * the lock over with the global word still held (at most handover_max
 * times in a row, then it goes back to the global table so other nodes
 * get their turn): it parks the word in the entry and frees the entry,
 * and whichever local thread takes the entry first takes the word. The
 * handover is not to a chosen waiter: with more threads than cores a
 * chosen one may be off its CPU for a time slice, with the lock. The
 * taker renews the word to its own (one CAS, batched with its node
 * READ), so the word always names the slot whose redo record matters.
 *
 * Command combination (§4.5): a write-back is one batch on the node's
 * QP: redo record, seq odd, the bytes, seq even, then the release CAS,
 * or (handing over) an 8-byte READ that places the writes before the
 * next local holder reads them on its own QP. The QP places them in
 * order, so a released lock means a complete write.
 *
 * Crashes and stalls: a lock whose lease is over only suspects its
 * holder, which may be paused rather than dead. The thief first fences
 * the holder's node (loco_fence_node: from then on no memory node
 * executes another op of that incarnation, so neither its posted
 * write-back nor a later one lands), then steals the word (CAS old ->
 * ours); a holder that cannot be fenced is waited for. The thief reads
 * the holder's redo record and, if it was written under the stolen word,
 * writes its bytes again (with its own redo record first): a write-back
 * cut short by its writer's death or fence is completed, and a seq left
 * odd made even. Since the redo record precedes the bytes on one QP, a
 * record that is not complete means nothing after it was placed. A live
 * holder renews its lease before a write-back when less than half of it
 * is left (sh_lock_keep), so a running holder is rarely fenced. A lease
 * does not run while the lock's memory node is down (expired), and a
 * worker's reset after an outage settles its own words at once
 * (settle_one), so a holder cut off by an outage is not fenced. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include <loco/rtx/crash.h>
#include <loco/wait.h>

#include "channels/sherman/internal.h"

int sh_llt_init(struct loco_sherman *t)
{
	t->llt = calloc((size_t)t->nparts * t->o.locks, sizeof(*t->llt));
	if (!t->llt)
		return -ENOMEM;
	for (unsigned i = 0; i < SH_STRIPES; i++)
		pthread_mutex_init(&t->stripe[i], NULL);
	return 0;
}

void sh_llt_fini(struct loco_sherman *t)
{
	if (!t->llt)
		return;
	for (unsigned i = 0; i < SH_STRIPES; i++)
		pthread_mutex_destroy(&t->stripe[i]);
	free(t->llt);
	t->llt = NULL;
}

uint32_t sh_lock_index(const struct loco_sherman *t, loco_raddr_t a)
{
	return (uint32_t)(((a * UINT64_C(0x9e3779b97f4a7c15)) >> 32) % t->o.locks);
}

static struct sh_llock *llock(struct loco_sherman *t, const struct sh_held *h,
			      pthread_mutex_t **mu)
{
	size_t i = (size_t)h->pi * t->o.locks + h->idx;
	*mu = &t->stripe[i % SH_STRIPES];
	return &t->llt[i];
}

static const struct loco_rregion *locks_of(const struct loco_sherman *t,
					   const struct sh_held *h)
{
	return &t->part[h->pi].locks;
}

/* A fresh word for an acquisition by this worker: tag strictly above the
 * last one, lease lease_ms from now. */
static uint64_t new_word(struct loco_sherman_worker *w)
{
	uint64_t tag = loco_lllock_tag_of(sh_now_ms(w->t) + w->t->o.lease_ms, 0);
	if (tag <= w->tag)
		tag = w->tag + 1;
	w->tag = tag;
	return loco_lllock_make(tag, w->slot, false);
}

void sh_tag_floor(struct loco_sherman_worker *w)
{
	uint64_t tag = loco_lllock_tag_of(sh_now_ms(w->t) + w->t->o.lease_ms, 0);
	if (tag > w->tag)
		w->tag = tag;
	w->tag_floor = w->tag;
}

/* Whether the held word WORD of part PI may be taken over: its lease
 * (lease_ms from its acquisition) is over, and so is a whole lease since
 * this node last found the part's hosting node up. A holder can neither
 * renew nor release while that node is down, so its lease does not run
 * then: one taken before an outage counts anew from the node's return,
 * which every node finds at or after the moment it came back
 * (loco_peer_up_ns; docs/sherman.md, "Outages"). This only ever expires
 * a word later than its own lease: a taker still fences the holder. */
static bool expired(const struct loco_sherman *t, uint32_t pi, uint64_t word)
{
	if (!loco_lllock_expired(word, sh_now_ms(t)))
		return false;
	uint64_t up = loco_peer_up_ns(t->base.mgr, t->part[pi].id);
	uint64_t now = loco_lease_now_ns();
	return now >= up && now - up >= (uint64_t)t->o.lease_ms * 1000000u;
}

/* Whether WORD is one this worker made (a tag above its first): in
 * loco_sherman_worker_reset, between its operations, such a word was left
 * by an operation of its own that failed (or a handover nobody renewed). */
static bool own_word(const struct loco_sherman_worker *w, uint64_t word)
{
	return loco_lllock_owner(word) == w->slot &&
	       loco_lllock_tag(word) > w->tag_floor;
}

/* Before anyone acts for the holder of the expired word WORD (steals it,
 * completes its write-back): fence the holder's node, so that nothing it
 * posted, or posts when it runs again, lands after us. A lease over only
 * suspects the holder: it may be paused, not dead (docs/sherman.md,
 * "Lock leases, dead writers"). The holder's node is its slot's
 * (slot = node * threads_per_node + thread). A word of this process's
 * own slots needs no fence (one cannot fence oneself): with the local
 * lock table only the entry's holder takes the global word, so such a
 * word was left by a thread of ours that gave it up, or by an earlier
 * incarnation of this node id, which is gone; without it (no_hocl) the
 * threads of one process rely on the lease among themselves. Returns 0
 * (fenced, or a holder outside the cluster: act), or -ETIMEDOUT or another error (not fenced: do not act,
 * wait and try again later). */
static int fence_holder(struct loco_sherman_worker *w, uint64_t word)
{
	struct loco_sherman *t = w->t;
	uint32_t node = loco_lllock_owner(word) / t->o.threads_per_node;
	if (node == loco_mgr_id(t->base.mgr) ||
	    (t->o.unsafe & LOCO_SHERMAN_UNSAFE_NO_FENCE))
		return 0;
	int ms = t->o.lease_ms < SH_FENCE_MS_MIN ? SH_FENCE_MS_MIN :
		 (int)t->o.lease_ms;
	/* -EOPNOTSUPP (a transport that cannot refuse) is waited for like
	 * any fence that did not complete: never a steal on the lease alone
	 * (docs/ordering.md, "Fencing"). */
	int rc = loco_fence_node(t->base.mgr, node, ms);
	if (rc == -EINVAL)
		/* Not a node of this cluster's hosts file (the word is older
		 * than the cluster): no process of it can reach our memory. */
		return 0;
	if (rc) {
		SH_INC(w, fence_waits);
		loco_warn(t->base.name, "slot %u: holder %u of an expired lock "
			  "(node %u) not fenced: %s; waiting", w->slot,
			  loco_lllock_owner(word), node, loco_strerror(rc));
		return rc;
	}
	SH_INC(w, fences);
	return 0;
}

/* ---- writes ---------------------------------------------------------------- */

uint64_t sh_redo_check(const struct sh_redo *r, const void *data)
{
	return XXH3_64bits_withSeed(data, r->len,
				    r->word ^ r->target * 31 ^ r->len * 977);
}

/* Add to B the write of LEN bytes of DATA at offset OFF of node A (part
 * PI, region offset NOFF) under H, whose seq word was SEQ: redo record,
 * seq odd, data, seq even. */
static void add_writes(struct loco_sherman_worker *w, struct loco_batch *b,
		       const struct sh_held *h, loco_raddr_t a, uint32_t pi,
		       uint64_t noff, uint64_t seq, uint32_t off,
		       const void *data, uint32_t len)
{
	struct loco_sherman *t = w->t;
	const struct sh_part *p = &t->part[pi];
	struct sh_redo *r = (struct sh_redo *)w->redo;
	*r = (struct sh_redo){ .word = h->word, .target = a + off, .len = len };
	memcpy(r + 1, data, len);
	r->check = sh_redo_check(r, data);
	loco_batch_write(b, &p->redo, (uint64_t)w->slot * t->redo_len, r,
			 (uint32_t)sizeof(*r) + len);
	w->seqw[0] = seq | 1;
	w->seqw[1] = (seq | 1) + 1;
	if (!(seq & 1))
		loco_batch_write(b, &p->nodes, noff + SH_SEQ_OFF, &w->seqw[0], 8);
	loco_batch_write(b, &p->nodes, noff + off, data, len);
	loco_batch_write(b, &p->nodes, noff + SH_SEQ_OFF, &w->seqw[1], 8);
}

/* Post B (a write-back), then the persist of this thread's writes to
 * NODE, then REL (its release, if any), and wait: one round trip. */
static int write_persist(struct loco_sherman_worker *w, struct loco_batch *b,
			 uint32_t node, struct loco_batch *rel)
{
	struct loco_ack ack = { 0, 0 };
	int rc = loco_batch_post(b, &ack);
	/* Ordering: the FLUSH executes after the write-back on their QP and
	 * before the release behind it (docs/ordering.md rule 7): nobody
	 * sees the lock free before the node is durable. */
	if (!rc)
		rc = loco_post_persist(w->thr, node, &ack);
	if (!rc && rel && rel->n)
		rc = loco_batch_post(rel, &ack);
	if (rc) {
		/* Nothing more is posted: wait out what was. */
		loco_ack_wait(w->thr, &ack, -1);
		loco_ack_clear(&ack);
		return rc;
	}
	return sh_wait(w, &ack);
}

int sh_write_placed(struct loco_sherman_worker *w, struct sh_held *h,
		    loco_raddr_t a, uint64_t seq, uint32_t off,
		    const void *data, uint32_t len)
{
	uint32_t pi;
	uint64_t noff;
	struct loco_batch b;
	int rc = sh_node_batch(w, a, &b, &pi, &noff);
	if (rc)
		return rc;
	add_writes(w, &b, h, a, pi, noff, seq, off, data, len);
	if (sh_op_durable(w->t, loco_raddr_node(a)))
		return write_persist(w, &b, loco_raddr_node(a), NULL);
	/* Ordering: a READ on the same QP completes after the WRITEs before
	 * it are placed (docs/ordering.md rule 3). */
	loco_batch_read(&b, &w->t->part[pi].nodes, noff + SH_SEQ_OFF,
			&w->cas_old, 8);
	return sh_batch_wait(w, &b);
}

/* ---- the local lock table ------------------------------------------------- */

/* The entry is ours now (mutex held): *WORD the global word parked for
 * us, or 0. */
static void take_entry(struct sh_llock *ll, uint64_t *word)
{
	/* Relaxed: the entry's mutex orders it. */
	atomic_store_explicit(&ll->owned, true, memory_order_relaxed);
	*word = ll->parked;
	ll->parked = 0;
}

/* Free the entry (mutex held), parking WORD (0: none) for the next local
 * holder. */
static void free_entry(struct sh_llock *ll, uint64_t word)
{
	ll->parked = word;
	ll->streak = word ? ll->streak + 1 : 0;
	/* Relaxed: the entry's mutex orders it; a waiter's peek is a hint. */
	atomic_store_explicit(&ll->owned, false, memory_order_relaxed);
}

/* Our lock was taken over while we held it: our lease ran out (a stall
 * longer than the lease assumption allows, docs/sherman.md "Leases"). */
static void lost(struct loco_sherman_worker *w, const struct sh_held *h,
		 const char *when)
{
	SH_INC(w, lost_locks);
	loco_warn(w->t->base.name, "slot %u: lock %u:%u taken over %s (lease "
		  "over)", w->slot, h->pi, h->idx, when);
}

static int release_global(struct loco_sherman_worker *w, struct sh_held *h)
{
	uint64_t old = 0;
	int rc = loco_cas(w->thr, locks_of(w->t, h), (uint64_t)h->idx * 8,
			  h->word, 0, &old);
	if (!rc && old != h->word)
		lost(w, h, "before its release");
	return rc;
}

/* After our use: with GLOBAL_HELD, hand the lock over to the local
 * waiters (the word parked in the entry), else leave the entry. A
 * handover that finds no waiter after all releases the global word
 * first. */
static void local_pass(struct loco_sherman_worker *w, struct sh_held *h,
		       bool global_held)
{
	struct loco_sherman *t = w->t;
	if (!h->local)
		return;
	pthread_mutex_t *mu;
	struct sh_llock *ll = llock(t, h, &mu);
	pthread_mutex_lock(mu);
	bool release_first = global_held && !ll->waiters;
	if (!release_first)
		free_entry(ll, global_held ? h->word : 0);
	pthread_mutex_unlock(mu);
	if (!release_first)
		return;
	release_global(w, h);
	pthread_mutex_lock(mu);
	free_entry(ll, 0);
	pthread_mutex_unlock(mu);
}

/* Whether a release now should hand over (a local waiter, streak left). */
static bool want_handover(struct loco_sherman_worker *w, struct sh_held *h)
{
	struct loco_sherman *t = w->t;
	if (!h->local || t->o.handover_max == ~0u)
		return false;
	pthread_mutex_t *mu;
	struct sh_llock *ll = llock(t, h, &mu);
	pthread_mutex_lock(mu);
	bool hand = ll->waiters && ll->streak < t->o.handover_max;
	pthread_mutex_unlock(mu);
	return hand;
}

/* ---- acquiring --------------------------------------------------------------- */

static int redo(struct loco_sherman_worker *w, struct sh_held *h, uint64_t old);

/* Batch a lock CAS (EXPECT -> WORD) with a READ of node A into IMG behind
 * it on the same QP: if the CAS won, the READ saw the node after the last
 * holder's release (it placed the writes before it). */
static int cas_and_read(struct loco_sherman_worker *w, struct sh_held *h,
			uint64_t expect, uint64_t word, loco_raddr_t a,
			void *img, uint64_t *old)
{
	uint32_t pi;
	uint64_t noff;
	struct loco_batch b;
	int rc = sh_node_batch(w, a, &b, &pi, &noff);
	if (rc)
		return rc;
	loco_batch_cas(&b, locks_of(w->t, h), (uint64_t)h->idx * 8, expect,
		       word, old);
	loco_batch_read(&b, &w->t->part[pi].nodes, noff, img, w->t->o.node_size);
	return sh_batch_wait(w, &b);
}

/* The node read under the lock: the batch's copy if it is whole, else
 * read again (a node torn under a held lock can only be a writer that
 * lost its lock mid-way; sh_read_node waits it out). */
static int locked_image(struct loco_sherman_worker *w, struct sh_held *h,
			loco_raddr_t a, void *img, bool have)
{
	if (have && (h->raw || sh_node_ok(w->t, img, a)))
		return 0;
	if (!h->raw)
		return sh_read_node(w, a, img);
	struct loco_ack ack = { 0, 0 };
	int rc = loco_post_read_raddr(w->thr, a, img, w->t->o.node_size, &ack);
	return rc ? rc : sh_wait(w, &ack);
}

/* Take the expired word OLD of H over: fence its holder, CAS OLD ->
 * MINE; on success complete what its holder left (redo) and read node A.
 * *WON: whether the CAS won (false too when the holder is not fenced). */
static int steal(struct loco_sherman_worker *w, struct sh_held *h,
		 uint64_t old, uint64_t mine, loco_raddr_t a, void *img,
		 bool *won)
{
	uint64_t got = 0;
	*won = false;
	if (fence_holder(w, old))
		return 0;   /* not fenced: wait for it like a held lock */
	int rc = loco_cas(w->thr, locks_of(w->t, h), (uint64_t)h->idx * 8, old,
			  mine, &got);
	*won = !rc && got == old;
	if (!*won)
		return rc;
	h->word = mine;
	SH_INC(w, steals);
	rc = redo(w, h, old);
	if (!rc)
		rc = locked_image(w, h, a, img, false);
	if (rc)
		release_global(w, h);
	return rc;
}

/* Wait before the next CAS of a lock that FAILS CASes in a row found
 * held, the last one taking RTT_NS: a holder keeps it about a round trip
 * more (its write-back) when it runs, far longer when it is descheduled
 * or its writes are placed late, so the wait starts at one round trip
 * and doubles up to 2^SH_BACKOFF_SHIFT of them (jittered, so that two
 * waiters do not retry in step). Capped so that a waiter still tries
 * several times while another node's threads hand the lock round their
 * streak (handover_max): it gets its turn when the streak releases the
 * word. Yields (more threads than cores) until the last few microseconds
 * of the wait, which it spins. */
static void lock_backoff(uint64_t rtt_ns, unsigned fails)
{
	if (rtt_ns > SH_BACKOFF_RTT_MAX_NS)
		rtt_ns = SH_BACKOFF_RTT_MAX_NS;
	unsigned shift = fails - 1 < SH_BACKOFF_SHIFT ? fails - 1 :
			 SH_BACKOFF_SHIFT;
	uint64_t now = loco_now_ns();
	uint64_t span = rtt_ns << shift;
	/* Jitter: 1/2 to 3/2 of the span, from the clock's low bits. */
	uint64_t until = now + span / 2 +
			 (now * UINT64_C(0x9e3779b97f4a7c15) >> 40) % (span + 1);
	while ((now = loco_now_ns()) < until) {
		if (until - now > SH_BACKOFF_SPIN_NS)
			sched_yield();
		else
			loco_cpu_relax();
	}
}

/* The global word of H for node A: CAS 0 -> ours (the first try batched
 * with the node READ), stealing it once its lease is over; a CAS that
 * finds it held is followed by a wait (lock_backoff). */
static int acquire_global(struct loco_sherman_worker *w, struct sh_held *h,
			  loco_raddr_t a, void *img)
{
	struct loco_sherman *t = w->t;
	uint64_t old = 0;
	struct loco_wait wait;
	loco_wait_init(&wait, t->base.mgr, -1);
	for (unsigned fails = 0;; fails++) {
		uint64_t mine = new_word(w);
		uint64_t t0 = loco_now_ns();
		int rc = !fails ? cas_and_read(w, h, 0, mine, a, img, &old) :
			 loco_cas(w->thr, locks_of(t, h), (uint64_t)h->idx * 8,
				  0, mine, &old);
		if (rc)
			return rc;
		if (!old) {
			h->word = mine;
			rc = locked_image(w, h, a, img, !fails);
			if (rc)
				release_global(w, h);
			return rc;
		}
		if (expired(t, h->pi, old)) {
			bool won;
			rc = steal(w, h, old, mine, a, img, &won);
			if (won || rc)
				return rc;
		}
		SH_INC(w, lock_fails);
		if (loco_wait_step(&wait)) {
			loco_err(t->base.name, "lock %u:%u held by slot %u past "
				 "the timeout", h->pi, h->idx,
				 loco_lllock_owner(old));
			return -ETIMEDOUT;
		}
		lock_backoff(loco_now_ns() - t0, fails + 1);
	}
}

/* Wait until H's entry is free and take it (*WORD: the global word
 * parked in it, or 0), or time out. */
static int local_wait(struct loco_sherman_worker *w, struct sh_llock *ll,
		      pthread_mutex_t *mu, uint64_t *word)
{
	struct loco_wait wait;
	loco_wait_init(&wait, w->t->base.mgr, -1);
	for (;;) {
		int rc = loco_wait_step(&wait);
		/* Relaxed: a hint; the mutex decides. */
		if (!rc && atomic_load_explicit(&ll->owned, memory_order_relaxed))
			continue;
		pthread_mutex_lock(mu);
		bool got = !atomic_load_explicit(&ll->owned,
						 memory_order_relaxed);
		if (got)
			take_entry(ll, word);
		if (got || rc)
			ll->waiters--;
		pthread_mutex_unlock(mu);
		if (got || rc)
			return got ? 0 : rc;
	}
}

/* Take the lock handed over with the global word WORD: renew it to ours
 * (batched with the node READ). *WON: false if it was taken from the
 * node meanwhile (lease over): then acquire it anew. */
static int take_handed(struct loco_sherman_worker *w, struct sh_held *h,
		       uint64_t word, loco_raddr_t a, void *img, bool *won)
{
	uint64_t mine = new_word(w), old = 0;
	int rc = cas_and_read(w, h, word, mine, a, img, &old);
	*won = !rc && old == word;
	if (!*won)
		return rc;
	h->word = mine;
	SH_INC(w, handovers);
	rc = locked_image(w, h, a, img, true);
	if (rc)
		release_global(w, h);
	return rc;
}

int sh_lock_node(struct loco_sherman_worker *w, loco_raddr_t a, void *img,
		 struct sh_held *h)
{
	struct loco_sherman *t = w->t;
	uint64_t noff;
	int rc = sh_locate(t, a, &h->pi, &noff);
	if (rc)
		return rc;
	h->idx = sh_lock_index(t, a);
	h->local = t->llt != NULL;
	if (!h->local)
		return acquire_global(w, h, a, img);
	pthread_mutex_t *mu;
	struct sh_llock *ll = llock(t, h, &mu);
	uint64_t word = 0;
	pthread_mutex_lock(mu);
	/* Relaxed: the mutex orders it. */
	bool busy = atomic_load_explicit(&ll->owned, memory_order_relaxed);
	if (busy)
		ll->waiters++;
	else
		take_entry(ll, &word);
	pthread_mutex_unlock(mu);
	if (busy && (rc = local_wait(w, ll, mu, &word)))
		return rc;
	bool won = false;
	if (word)
		rc = take_handed(w, h, word, a, img, &won);
	if (!rc && !won)
		rc = acquire_global(w, h, a, img);
	if (rc)
		local_pass(w, h, false);
	return rc;
}

int sh_lock_keep(struct loco_sherman_worker *w, struct sh_held *h)
{
	struct loco_sherman *t = w->t;
	if (loco_lllock_lease(h->word) > sh_now_ms(t) + t->o.lease_ms / 2)
		return 0;
	uint64_t mine = new_word(w), old = 0;
	int rc = loco_cas(w->thr, locks_of(t, h), (uint64_t)h->idx * 8, h->word,
			  mine, &old);
	if (!rc && old != h->word) {
		lost(w, h, "before its write-back");
		rc = -EAGAIN;
	}
	if (rc) {
		/* Not ours, or not known to be: a word of ours left in the
		 * table expires with its lease. */
		local_pass(w, h, false);
		return rc;
	}
	h->word = mine;
	return 0;
}

/* ---- releasing --------------------------------------------------------------- */

void sh_unlock(struct loco_sherman_worker *w, struct sh_held *h)
{
	if (want_handover(w, h)) {
		local_pass(w, h, true);
		return;
	}
	release_global(w, h);
	local_pass(w, h, false);
}

int sh_write_release(struct loco_sherman_worker *w, struct sh_held *h,
		     loco_raddr_t a, uint64_t seq, uint32_t off,
		     const void *data, uint32_t len)
{
	return sh_write_release_pre(w, h, a, seq, off, data, len, 0, NULL);
}

/* Add to B (ops to part PI) the whole-node write of new node PRE (image
 * PRE_IMG): -EINVAL if PRE is on another part. */
static int add_pre(struct loco_sherman_worker *w, struct loco_batch *b,
		   uint32_t pi, loco_raddr_t pre, const void *pre_img)
{
	struct loco_sherman *t = w->t;
	uint32_t ppi;
	uint64_t pnoff;
	if (sh_locate(t, pre, &ppi, &pnoff) || ppi != pi)
		return -EINVAL;
	/* Ordering: placed before the node that will point to it, by the
	 * QP's order. */
	loco_batch_write(b, &t->part[pi].nodes, pnoff, pre_img, t->o.node_size);
	return 0;
}

/* Add to B, behind H's write-back on part PI, its release: a READ of
 * the lock word when handing over (HAND), else the release CAS (not
 * with no_combine: released after the wait). */
static void add_release(struct loco_sherman_worker *w, struct loco_batch *b,
			const struct sh_held *h, uint32_t pi, bool hand)
{
	struct loco_sherman *t = w->t;
	if (hand)
		/* Ordering: placed before the next local holder's READ on its
		 * own QP (a READ completes after earlier WRITEs are placed).
		 * The READ is of our lock word: still ours, or lost. */
		loco_batch_read(b, &t->part[pi].locks, (uint64_t)h->idx * 8,
				&w->cas_old, 8);
	else if (!t->o.no_combine)
		/* Ordering: the release follows the writes on one QP, which
		 * places them first (command combination). */
		loco_batch_cas(b, &t->part[pi].locks, (uint64_t)h->idx * 8,
			       h->word, 0, &w->cas_old);
}

int sh_write_release_pre(struct loco_sherman_worker *w, struct sh_held *h,
			 loco_raddr_t a, uint64_t seq, uint32_t off,
			 const void *data, uint32_t len, loco_raddr_t pre,
			 const void *pre_img)
{
	uint32_t pi;
	uint64_t noff;
	struct loco_batch b;
	int rc = sh_node_batch(w, a, &b, &pi, &noff);
	if (!rc && pre)
		rc = add_pre(w, &b, pi, pre, pre_img);
	if (rc) {
		sh_unlock(w, h);
		return rc;
	}
	if ((rc = sh_lock_keep(w, h)))
		return rc;   /* lost or failed: nothing written, nothing held */
	loco_crash_point("sherman.write_back");
	bool hand = want_handover(w, h);
	add_writes(w, &b, h, a, pi, noff, seq, off, data, len);
	if (sh_op_durable(w->t, loco_raddr_node(a))) {
		struct loco_batch rel;
		loco_batch_init(&rel, w->thr);
		add_release(w, &rel, h, pi, hand);
		rc = write_persist(w, &b, loco_raddr_node(a), &rel);
	} else {
		add_release(w, &b, h, pi, hand);
		rc = sh_batch_wait(w, &b);
	}
	if (!rc && !hand && w->t->o.no_combine) {
		/* Ordering: the CAS follows the writes on their QP (the node
		 * and its lock word share a hosting node), which places them
		 * before it executes. */
		rc = release_global(w, h);
	} else if (!rc && w->cas_old != h->word) {
		lost(w, h, "before its release");
		hand = false;
	}
	local_pass(w, h, hand && !rc);
	return rc;
}

/* ---- crash recovery ------------------------------------------------------------ */

/* The node holding TARGET and TARGET's offset in it, if TARGET..+LEN lies
 * inside one node's body of part PI. */
static bool redo_target(const struct loco_sherman *t, uint32_t pi,
			const struct sh_redo *r, loco_raddr_t *node,
			uint32_t *off)
{
	uint32_t p;
	uint64_t o;
	if (sh_locate(t, r->target, &p, &o) || p != pi)
		return false;
	*off = (uint32_t)(o % t->o.node_size);
	*node = r->target - *off;
	return *off >= 8 && r->len && r->len <= t->o.node_size - *off;
}

/* Complete what the holder of the stolen word OLD left (H is ours now):
 * its redo record, if written under OLD, is written again. */
static int redo(struct loco_sherman_worker *w, struct sh_held *h, uint64_t old)
{
	struct loco_sherman *t = w->t;
	const struct sh_part *p = &t->part[h->pi];
	uint32_t owner = loco_lllock_owner(old);
	if (owner >= t->nslots)
		return 0;
	int rc = loco_read(w->thr, &p->redo, (uint64_t)owner * t->redo_len,
			   w->redo, t->redo_len);
	if (rc)
		return rc;
	const struct sh_redo *r = (const struct sh_redo *)w->redo;
	loco_raddr_t node;
	uint32_t off;
	if (r->word != old || !redo_target(t, h->pi, r, &node, &off) ||
	    r->check != sh_redo_check(r, r + 1))
		return 0;   /* nothing of its write-back was placed */
	uint8_t *data = w->nb[5];
	uint32_t len = (uint32_t)r->len;
	memcpy(data, r + 1, len);
	uint64_t seq = 0, noff = 0;
	rc = sh_locate(t, node, &(uint32_t){ 0 }, &noff);
	if (!rc)
		rc = loco_read(w->thr, &p->nodes, noff + SH_SEQ_OFF, &seq, 8);
	if (!rc)
		rc = sh_write_placed(w, h, node, seq, off, data, len);
	if (!rc)
		SH_INC(w, redos);
	return rc;
}

/* Settle one held word WORD at index IDX of part PI: wait for its lease
 * (not for a word of this worker's own with OWN: settle_locks),
 * steal, redo, release. Returns 0 (settled or moved on: free, or taken by
 * a slot other than SLOT) or -EBUSY (still held at the deadline). */
static int settle_one(struct loco_sherman_worker *w, uint32_t pi, uint32_t idx,
		      uint64_t word, uint32_t slot, bool own, uint64_t deadline)
{
	struct loco_sherman *t = w->t;
	struct sh_held h = { .pi = pi, .idx = idx };
	for (;;) {
		if (!loco_lllock_is_locked(word) ||
		    (slot != ~0u && loco_lllock_owner(word) != slot))
			return 0;
		if ((own && own_word(w, word)) ||
		    (expired(t, pi, word) && !fence_holder(w, word))) {
			uint64_t mine = new_word(w), got = 0;
			int rc = loco_cas(w->thr, &t->part[pi].locks,
					  (uint64_t)idx * 8, word, mine, &got);
			if (rc)
				return rc;
			if (got == word) {
				h.word = mine;
				SH_INC(w, steals);
				rc = redo(w, &h, word);
				int rc2 = release_global(w, &h);
				return rc ? rc : rc2;
			}
			word = got;
			continue;
		}
		if (loco_now_ns() > deadline)
			return -EBUSY;
		struct timespec ts = { 0, 200000 };
		nanosleep(&ts, NULL);
		int rc = loco_read(w->thr, &t->part[pi].locks, (uint64_t)idx * 8,
				   &word, 8);
		if (rc)
			return rc;
	}
}

static int settle_part(struct loco_sherman_worker *w, uint32_t pi,
		       uint32_t slot, bool own, uint64_t deadline,
		       uint64_t *held)
{
	struct loco_sherman *t = w->t;
	uint64_t *buf = malloc(SH_READ_MAX);
	if (!buf)
		return -ENOMEM;
	int rc = 0;
	uint64_t len = (uint64_t)t->o.locks * 8;
	for (uint64_t at = 0; at < len && !rc; at += SH_READ_MAX) {
		uint32_t n = (uint32_t)(len - at < SH_READ_MAX ? len - at : SH_READ_MAX);
		rc = loco_read(w->thr, &t->part[pi].locks, at, buf, n);
		for (uint32_t i = 0; i < n / 8 && !rc; i++) {
			uint64_t word = buf[i];
			if (!loco_lllock_is_locked(word) ||
			    (slot != ~0u && loco_lllock_owner(word) != slot))
				continue;
			rc = settle_one(w, pi, (uint32_t)(at / 8) + i, word,
					slot, own, deadline);
			if (rc == -EBUSY) {
				(*held)++;
				rc = 0;
			}
		}
	}
	free(buf);
	return rc;
}

int sh_settle_locks(struct loco_sherman_worker *w, uint32_t slot, bool own,
		    int timeout_ms, uint64_t *held)
{
	struct loco_sherman *t = w->t;
	if (timeout_ms < 0)
		timeout_ms = loco_mgr_timeout_ms(t->base.mgr);
	uint64_t deadline = loco_now_ns() + (uint64_t)timeout_ms * 1000000u;
	uint64_t n = 0;
	int rc = 0;
	for (uint32_t pi = 0; pi < t->nparts && !rc; pi++)
		rc = settle_part(w, pi, slot, own, deadline, &n);
	if (!rc && held)
		*held = n;
	return rc;
}

int sh_lock_repair(struct loco_sherman_worker *w, loco_raddr_t a)
{
	struct loco_sherman *t = w->t;
	uint32_t pi, idx = sh_lock_index(t, a);
	uint64_t noff, word = 0;
	int rc = sh_locate(t, a, &pi, &noff);
	if (!rc)
		rc = loco_read(w->thr, &t->part[pi].locks, (uint64_t)idx * 8,
			       &word, 8);
	if (rc || !loco_lllock_is_locked(word) || !expired(t, pi, word))
		return rc;
	rc = settle_one(w, pi, idx, word, ~0u, false, 0);
	return rc == -EBUSY ? 0 : rc;
}
