/* SPDX-License-Identifier: MIT */
/* Commit (rTX Fig. 8) and the idempotent TryCommit (Fig. 9), shared by
 * owners and repairers.
 *
 * Logged commit, per round trip:
 *   1  new data WRITEs (one per run of new blocks in a row,
 *      rtx_alloc_run) + log WRITE (INIT) and, in the same doorbell when
 *      every object is on the log's node (one QP places the log and data
 *      before any lock names them), the lock CASes, each followed on its
 *      QP by a 16-byte READ of the TXObj (the data pointer is current
 *      while we hold the lock) unless the object's first READ was whole
 *      (loco_rtx_meta_whole: the CAS itself then proves the pointer
 *      current); the read set validation READs ride along too, since
 *      the QP orders them after the locks. Objects on other nodes: the
 *      WRITEs are posted and thread-fenced first.
 *  (1b read set validation when objects span nodes: after all locks)
 *   2  CAS INIT -> DOING: the commit point; a repairer that CASes
 *      INIT -> ABORT first wins, and the owner aborts
 *   3  install CASes, release CASes, CAS DOING -> DONE (one batch when
 *      everything is on one node: the QP orders them; otherwise one round
 *      each, in that order)
 *
 * On durable memory nodes (docs/durability.md, "rTX") each round ends with
 * persists that make what it wrote durable before the next round acts on
 * it (they ride in the round's doorbell and wait, no extra round trip):
 * data, log and locks (1) before the commit point, the commit point (2)
 * before anything acts on it, the installs (3) before the locks are
 * released (a FLUSH executes between the requests of its QP), releases
 * and DONE (4) before the commit returns. A power cut then leaves every
 * transaction whole or absent, and every committed one whole. Aborts
 * need none: a lost abort is redone by a repairer from the durable INIT
 * log. The log need not be durable before its locks: a lock that a page
 * cache wrote back early, its log lost to the power cut, names a log
 * that does not match it (the slot's older one, or a torn one), and a
 * repairer steals it, as it does a lock whose log was reused; its
 * transaction never reached the commit point, whose persist comes after
 * round 1's. (Objects on other nodes than the log's: round 1's data and
 * log WRITEs take their own doorbell, persisted and fenced.)
 *
 * No-log commit (OPT1, one written object): data WRITE, lock CAS + READ
 * (one doorbell); install CAS + release CAS. A repairer steals such a lock and switches
 * the object to a copy, so the owner's install succeeds (and survives)
 * or fails (and the transaction aborts): never half of a transaction.
 *
 * Wrap guard (rTX §4.4): before each round of install or release CASes,
 * an executor that has not seen its log in DOING for guard_us re-reads
 * the state word and stops if the log moved on (another executor
 * finished it), so a stalled executor cannot apply a stale CAS after the
 * data pointer versions could have wrapped. */
#include <errno.h>
#include <string.h>

#include "rtx/internal.h"

/* ---- batches that post themselves when full ------------------------------ */

struct rtx_batch {
	struct loco_batch b;
	struct loco_ack *ack;
	int rc;
};

static void bt_init(struct rtx_batch *bt, struct loco_rtx_worker *w,
		    struct loco_ack *ack)
{
	loco_batch_init(&bt->b, w->thr);
	bt->ack = ack;
	bt->rc = 0;
}

__attribute__((noinline))
static void bt_flush(struct rtx_batch *bt)
{
	if (!bt->rc)
		bt->rc = loco_batch_post(&bt->b, bt->ack);
}

/* The adds below are inlined (a call each cost about a sixth of an
 * add); a full batch is posted out of line. */
__attribute__((always_inline))
static inline void bt_room(struct rtx_batch *bt)
{
	if (__builtin_expect(bt->b.n == LOCO_BATCH_MAX, 0))
		bt_flush(bt);
}

__attribute__((always_inline))
static inline void bt_read(struct rtx_batch *bt,
			   const struct loco_rregion *rr, uint64_t off,
			   void *dst, uint32_t len)
{
	bt_room(bt);
	loco_batch_read(&bt->b, rr, off, dst, len);
}

__attribute__((always_inline))
static inline void bt_write(struct rtx_batch *bt,
			    const struct loco_rregion *rr, uint64_t off,
			    const void *src, uint32_t len)
{
	bt_room(bt);
	loco_batch_write(&bt->b, rr, off, src, len);
}

__attribute__((always_inline))
static inline void bt_cas(struct rtx_batch *bt,
			  const struct loco_rregion *rr, uint64_t off,
			  uint64_t expect, uint64_t desired, uint64_t *old)
{
	bt_room(bt);
	loco_batch_cas(&bt->b, rr, off, expect, desired, old);
}

static int bt_post(struct rtx_batch *bt)
{
	return bt->rc ? bt->rc : loco_batch_post(&bt->b, bt->ack);
}

/* Post and wait. */
static int bt_run(struct rtx_batch *bt, struct loco_rtx_worker *w)
{
	int rc = bt_post(bt);
	return rc ? rc : rtx_wait(w, bt->ack);
}

/* Post, persist (durable nodes), and wait: a round whose writes are
 * durable before anything acts on them. */
static int bt_run_durable(struct rtx_batch *bt, struct loco_rtx_worker *w)
{
	int rc = bt_post(bt);
	if (!rc)
		rc = rtx_persist_post(w, bt->ack);
	return rc ? rc : rtx_wait(w, bt->ack);
}

static uint64_t obj_off(const struct rtx_rent *r, uint64_t field)
{
	return (uint64_t)r->idx * RTX_META_LEN + field;
}

/* ---- noted expired locks ------------------------------------------------- */

void rtx_note_expired(struct loco_rtx_worker *w, loco_raddr_t obj,
		      uint64_t word)
{
	for (unsigned i = 0; i < w->nrep; i++)
		if (w->rep_obj[i] == obj && w->rep_word[i] == word)
			return;
	if (w->nrep == RTX_MAX_REPAIRS)
		return;
	w->rep_obj[w->nrep] = obj;
	w->rep_word[w->nrep++] = word;
}

void rtx_repair_noted(struct loco_rtx_worker *w)
{
	for (unsigned i = 0; i < w->nrep; i++) {
		int rc = rtx_repair(w, w->rep_obj[i], w->rep_word[i]);
		if (rc && rc != -EBUSY)
			loco_warn(w->x->base.name, "slot %u: repair: %s", w->slot,
				  loco_strerror(rc));
	}
	w->nrep = 0;
}

/* A lock word that is not ours stopped us: count it, note it if expired,
 * else remember when it expires (the retry wakes then, not later). */
static void met_lock(struct loco_rtx_worker *w, const struct rtx_rent *r,
		     uint64_t word)
{
	if (!loco_lllock_is_locked(word))
		return;
	RTX_INC(w, lock_waits);
	uint64_t lease = loco_lllock_lease(word);
	if (loco_lllock_expired(word, rtx_now_ms(w->x)))
		rtx_note_expired(w, r->obj, word);
	else if (!w->wake_lease || lease < w->wake_lease)
		w->wake_lease = lease;
}

/* ---- blocks and pre-locks ------------------------------------------------ */

static void free_blocks(struct loco_rtx_worker *w)
{
	for (unsigned i = 0; i < w->nw; i++) {
		struct rtx_went *e = &w->ws[i];
		if (e->block)
			rtx_free_local(w, w->rs[e->ri].ni, e->block);
		e->block = 0;
	}
}

/* A run of blocks for the whole write set when it is on one node (one
 * data WRITE, post_data), else one block per object. */
static bool alloc_run(struct loco_rtx_worker *w)
{
	uint32_t ni = w->rs[w->ws[0].ri].ni;
	uint64_t first;
	for (unsigned i = 1; i < w->nw; i++)
		if (w->rs[w->ws[i].ri].ni != ni)
			return false;
	if (rtx_alloc_run(w, ni, w->nw, &first))
		return false;
	for (unsigned i = 0; i < w->nw; i++) {
		struct rtx_went *e = &w->ws[i];
		e->block = first + i;
		e->new_dptr = loco_rtx_dptr_next(w->rs[e->ri].dptr, e->block);
	}
	return true;
}

static int alloc_blocks(struct loco_rtx_worker *w)
{
	if (w->nw > 1 && alloc_run(w))
		return 0;
	for (unsigned i = 0; i < w->nw; i++) {
		struct rtx_went *e = &w->ws[i];
		const struct rtx_rent *r = &w->rs[e->ri];
		int rc = rtx_alloc(w, r->ni, &e->block);
		if (rc) {
			free_blocks(w);
			return rc;
		}
		e->new_dptr = loco_rtx_dptr_next(r->dptr, e->block);
	}
	return 0;
}

/* The new data: one WRITE per run of written objects whose new blocks
 * follow each other on one node. The write set's buffers lie apart by
 * the block length (worker_alloc), as the blocks do, so a run's source
 * is one range too (the padding between values is zero). */
static void post_data(struct loco_rtx_worker *w, struct rtx_batch *bt)
{
	const struct loco_rtx *x = w->x;
	unsigned j;
	for (unsigned i = 0; i < w->nw; i = j) {
		const struct rtx_went *e = &w->ws[i];
		uint32_t ni = w->rs[e->ri].ni;
		for (j = i + 1; j < w->nw && w->rs[w->ws[j].ri].ni == ni &&
		     w->ws[j].block == w->ws[j - 1].block + 1; j++)
			;
		bt_write(bt, &x->node[ni].data, e->block * x->block_len, e->data,
			 (j - i - 1) * x->block_len + x->o.data_len);
	}
}

int rtx_release_prelocks_slow(struct loco_rtx_worker *w)
{
	struct rtx_batch bt;
	struct loco_ack ack = { 0, 0 };
	bt_init(&bt, w, &ack);
	for (unsigned i = 0; i < w->nr; i++) {
		struct rtx_rent *r = &w->rs[i];
		if (!r->prelock)
			continue;
		bt_cas(&bt, rtx_meta(w->x, r->ni), obj_off(r, RTX_LOCK_OFF),
		       r->prelock, r->lock, &r->vmeta[0]);
		r->prelock = 0;
	}
	return bt_run(&bt, w);
}

/* ---- validation ---------------------------------------------------------- */

static bool validated_here(const struct rtx_rent *r)
{
	return r->wi < 0 && r->cc != LOCO_RTX_CC_DELEGATE;
}

static void post_validation(struct loco_rtx_worker *w, struct rtx_batch *bt)
{
	for (unsigned i = 0; i < w->nr; i++) {
		struct rtx_rent *r = &w->rs[i];
		if (validated_here(r))
			bt_read(bt, rtx_meta(w->x, r->ni), obj_off(r, 0),
				r->vmeta, RTX_META_LEN);
	}
}

/* Every read-only object still has the lock word and data pointer it had
 * when read (16-byte READ: a torn first read is caught by the pointer). */
static bool reads_valid(struct loco_rtx_worker *w)
{
	bool ok = true;
	for (unsigned i = 0; i < w->nr; i++) {
		const struct rtx_rent *r = &w->rs[i];
		if (!validated_here(r))
			continue;
		uint64_t want = r->prelock ? r->prelock : r->lock;
		if (r->vmeta[0] != want || r->vmeta[1] != r->dptr) {
			met_lock(w, r, r->vmeta[0]);
			ok = false;
		}
	}
	return ok;
}

static bool hooks_valid(struct loco_rtx_worker *w)
{
	return !w->hooks || !w->hooks->validate ||
	       w->hooks->validate(w->hook_arg, w) == 0;
}

int rtx_commit_readonly(struct loco_rtx_worker *w)
{
	struct rtx_batch bt;
	bt_init(&bt, w, &w->ack);
	post_validation(w, &bt);
	int rc = bt_run(&bt, w);
	if (!rc && !(reads_valid(w) && hooks_valid(w)))
		rc = -EAGAIN;
	int rc2 = rtx_release_prelocks(w);
	return rc ? rc : rc2;
}

/* ---- locking the write set ----------------------------------------------- */

static uint64_t lock_expect(const struct rtx_rent *r)
{
	return r->prelock ? r->prelock : r->lock;
}

/* Lock CAS per written object, with a TXObj READ behind it (same QP: it
 * sees our lock and the current data pointer) unless the first READ was
 * whole (loco_rtx_meta_whole: then the CAS, succeeding from that
 * version, proves the pointer current). A pre-locked object needs no
 * READ: the pre-lock's READ found the pointer current, and a conversion
 * CAS that finds our pre-lock word proves nobody held the object since
 * (OPT1 keeps the pre-lock as it is: no CAS either). */
static void post_locks(struct loco_rtx_worker *w, struct rtx_batch *bt)
{
	for (unsigned i = 0; i < w->nw; i++) {
		struct rtx_went *e = &w->ws[i];
		struct rtx_rent *r = &w->rs[e->ri];
		const struct loco_rregion *m = rtx_meta(w->x, r->ni);
		if (!(r->prelock && r->prelock == w->lockv))
			bt_cas(bt, m, obj_off(r, RTX_LOCK_OFF), lock_expect(r),
			       w->lockv, &e->lock_old);
		else
			e->lock_old = r->prelock;
		e->reread = !r->prelock &&
			    !loco_rtx_meta_whole(r->lock, r->dptr);
		if (e->reread)
			bt_read(bt, m, obj_off(r, 0), r->vmeta, RTX_META_LEN);
	}
}

/* Which locks we got (bit i: ws[i]); false unless all, with the data
 * pointers unchanged. A converted pre-lock is now held as lockv. */
static bool locks_check(struct loco_rtx_worker *w, uint64_t *acquired)
{
	bool ok = true;
	for (unsigned i = 0; i < w->nw; i++) {
		struct rtx_went *e = &w->ws[i];
		struct rtx_rent *r = &w->rs[e->ri];
		if (e->lock_old != lock_expect(r)) {
			met_lock(w, r, e->lock_old);
			ok = false;
			continue;
		}
		*acquired |= UINT64_C(1) << i;
		r->prelock = 0;
		if (e->reread &&
		    (r->vmeta[0] != w->lockv || r->vmeta[1] != r->dptr))
			ok = false;
	}
	return ok;
}

/* Lock the write set and validate the read set, the lock CASes added to
 * BT behind whatever the commit put there already (its data and log
 * WRITEs, when one QP orders them before the locks). */
static int lock_and_validate(struct loco_rtx_worker *w, struct rtx_batch *bt0,
			     uint64_t *acquired, bool *ok)
{
	struct rtx_batch bt;
	post_locks(w, bt0);
	if (w->single_node)
		post_validation(w, bt0);
	int rc = bt_run_durable(bt0, w);
	if (rc)
		return rc;
	*ok = locks_check(w, acquired);
	if (*ok)
		rtx_crash_point(w->nw == 1 && !w->x->o.no_opt1 ?
				 "rtx.opt1_after_lock" : "rtx.after_lock");
	if (*ok && !w->single_node) {
		bt_init(&bt, w, &w->ack);
		post_validation(w, &bt);
		rc = bt_run(&bt, w);
		if (rc)
			return rc;
	}
	*ok = *ok && reads_valid(w) && hooks_valid(w);
	return 0;
}

/* Release the locks in ACQUIRED (held as lockv) to the versions read, and
 * the remaining pre-locks. */
static int release_acquired(struct loco_rtx_worker *w, uint64_t acquired)
{
	struct rtx_batch bt;
	bt_init(&bt, w, &w->ack);
	for (unsigned i = 0; i < w->nw; i++) {
		struct rtx_went *e = &w->ws[i];
		const struct rtx_rent *r = &w->rs[e->ri];
		if (acquired & UINT64_C(1) << i)
			bt_cas(&bt, rtx_meta(w->x, r->ni),
			       obj_off(r, RTX_LOCK_OFF), w->lockv, r->lock,
			       &e->cas_old[1]);
	}
	int rc = bt_run(&bt, w);
	int rc2 = rtx_release_prelocks(w);
	return rc ? rc : rc2;
}

/* ---- TryCommit (owner and repairer) -------------------------------------- */

/* 0: go on; 1: the log left DOING (finished by another executor). */
static int exec_guard(struct loco_rtx_worker *w, struct rtx_exec *e)
{
	uint64_t now = loco_now_ns();
	if (now - e->confirmed_ns < (uint64_t)w->x->o.guard_us * 1000u)
		return 0;
	uint64_t s = 0;
	int rc = loco_read(w->thr, &w->x->logs, rtx_state_off(w->x, e->slot),
			   &s, 8);
	if (rc)
		return rc;
	if (loco_rtx_state_of(s) == LOCO_RTX_LOG_DOING &&
	    loco_rtx_state_seq(s) == loco_rtx_state_seq(e->state)) {
		e->state = s;
		e->confirmed_ns = now;  /* sampled before the READ: earlier */
		return 0;
	}
	RTX_INC(w, guard_stops);
	return 1;
}

void rtx_exec_locate(const struct loco_rtx *x,
		     const struct loco_rtx_log_ent *ent, unsigned n,
		     struct rtx_loc *loc)
{
	for (unsigned i = 0; i < n; i++) {
		uint32_t ni = 0, idx = 0;
		bool ok = !rtx_locate(x, ent[i].mptr, &ni, &idx);
		loc[i] = (struct rtx_loc){ ok ? rtx_meta(x, ni) : NULL,
					   (uint64_t)idx * RTX_META_LEN };
	}
}

__attribute__((always_inline))
static inline void post_installs(struct loco_rtx_worker *w,
				 const struct rtx_exec *e, struct rtx_batch *bt,
				 unsigned from, unsigned to)
{
	for (unsigned i = from; i < to; i++)
		if (e->loc[i].meta)
			bt_cas(bt, e->loc[i].meta, e->loc[i].off + RTX_DPTR_OFF,
			       e->ent[i].old_dptr, e->ent[i].new_dptr,
			       &w->xres[i]);
}

__attribute__((always_inline))
static inline void post_releases(struct loco_rtx_worker *w,
				 const struct rtx_exec *e, struct rtx_batch *bt,
				 unsigned from, unsigned to)
{
	for (unsigned i = from; i < to; i++) {
		if (!e->loc[i].meta)
			continue;
		uint64_t rel = e->release ? e->release[i] : rtx_fresh_version(w);
		bt_cas(bt, e->loc[i].meta, e->loc[i].off + RTX_LOCK_OFF,
		       e->lockv, rel, &w->xres[LOCO_RTX_WRITES_MAX + i]);
	}
}

static uint64_t done_word(const struct rtx_exec *e)
{
	return loco_rtx_state_word(LOCO_RTX_LOG_DONE,
				   loco_rtx_state_seq(e->state),
				   loco_lllock_lease(e->lockv));
}

__attribute__((always_inline))
static inline void post_done(struct loco_rtx_worker *w,
			     const struct rtx_exec *e, struct rtx_batch *bt)
{
	bt_cas(bt, &w->x->logs, rtx_state_off(w->x, e->slot), e->state,
	       done_word(e), &w->state_old);
}

/* CAS DOING -> DONE, following repairers that renewed the repair lease. */
static int exec_done(struct loco_rtx_worker *w, struct rtx_exec *e)
{
	for (;;) {
		struct rtx_batch bt;
		struct loco_ack ack = { 0, 0 };
		bt_init(&bt, w, &ack);
		post_done(w, e, &bt);
		int rc = bt_run(&bt, w);
		if (rc || w->state_old == e->state)
			return rc;
		if (loco_rtx_state_of(w->state_old) != LOCO_RTX_LOG_DOING ||
		    loco_rtx_state_seq(w->state_old) != loco_rtx_state_seq(e->state))
			return 0;
		e->state = w->state_old;
	}
}

/* Run install CASes [0, n) (split after the first for the crash point). */
static int exec_installs(struct loco_rtx_worker *w, struct rtx_exec *e)
{
	struct rtx_batch bt;
	struct loco_ack ack = { 0, 0 };
	unsigned first = rtx_crash_armed("rtx.mid_install") && e->n > 1 ?
			 1 : e->n;
	bt_init(&bt, w, &ack);
	post_installs(w, e, &bt, 0, first);
	int rc = bt_run(&bt, w);
	if (rc || first == e->n)
		return rc;
	rtx_crash_point("rtx.mid_install");
	bt_init(&bt, w, &ack);
	post_installs(w, e, &bt, first, e->n);
	return bt_run(&bt, w);
}

static int exec_releases(struct loco_rtx_worker *w, struct rtx_exec *e)
{
	struct rtx_batch bt;
	struct loco_ack ack = { 0, 0 };
	unsigned first = rtx_crash_armed("rtx.mid_release") && e->n > 1 ?
			 1 : e->n;
	rtx_crash_point("rtx.before_release");
	bt_init(&bt, w, &ack);
	post_releases(w, e, &bt, 0, first);
	int rc = bt_run(&bt, w);
	if (rc || first == e->n)
		return rc;
	rtx_crash_point("rtx.mid_release");
	bt_init(&bt, w, &ack);
	post_releases(w, e, &bt, first, e->n);
	return bt_run(&bt, w);
}

static bool exec_one_node(const struct loco_rtx_worker *w,
			  const struct rtx_exec *e)
{
	static const char *const split[] = { "rtx.mid_install",
		"rtx.before_release", "rtx.mid_release", "rtx.before_done" };
	for (unsigned i = 0; i < 4; i++)
		if (rtx_crash_armed(split[i]))
			return false;
	for (unsigned i = 0; i < e->n; i++)
		if (loco_raddr_node(e->ent[i].mptr) != w->x->home)
			return false;
	return true;
}

/* Everything on the log's node: installs, releases and DONE in one
 * round; the QP executes them in that order (with the installs' persist
 * between installs and releases). */
static int exec_batched(struct loco_rtx_worker *w, struct rtx_exec *e)
{
	struct rtx_batch bt;
	struct loco_ack ack = { 0, 0 };
	int rc = 0;
	bt_init(&bt, w, &ack);
	post_installs(w, e, &bt, 0, e->n);
	if (rtx_durable(w)) {
		rc = bt_post(&bt);
		if (!rc)
			rc = rtx_persist_post(w, &ack);
	}
	post_releases(w, e, &bt, 0, e->n);
	post_done(w, e, &bt);
	if (!rc)
		rc = bt_run_durable(&bt, w);
	if (rc || w->state_old == e->state)
		return rc;
	if (loco_rtx_state_of(w->state_old) != LOCO_RTX_LOG_DOING ||
	    loco_rtx_state_seq(w->state_old) != loco_rtx_state_seq(e->state))
		return 0;
	e->state = w->state_old;
	return exec_done(w, e);
}

int rtx_exec_commit(struct loco_rtx_worker *w, struct rtx_exec *e)
{
	int rc = exec_guard(w, e);
	if (rc)
		return rc > 0 ? 0 : rc;
	if (exec_one_node(w, e))
		return exec_batched(w, e);
	rc = exec_installs(w, e);
	if (!rc)
		rc = rtx_persist(w);
	if (!rc)
		rc = exec_guard(w, e);
	if (rc)
		return rc > 0 ? 0 : rc;
	rc = exec_releases(w, e);
	if (rc)
		return rc;
	rtx_crash_point("rtx.before_done");
	rc = exec_done(w, e);
	return rc ? rc : rtx_persist(w);
}

/* ---- logged commit ------------------------------------------------------- */

static uint64_t tx_lease(const struct loco_rtx_worker *w)
{
	return loco_lllock_lease(w->lockv);
}

static struct loco_rtx_log_ent *log_entries(struct loco_rtx_worker *w)
{
	return (struct loco_rtx_log_ent *)(w->logbuf +
					   sizeof(struct loco_rtx_log_hdr));
}

/* rtx.mid_log armed: what BT holds (the data WRITEs, or the data READs)
 * and the log's first word, its state, run alone, then the point; the
 * rest of the log goes into BT, begun again. What a writer killed inside
 * its log WRITE leaves (shm places a WRITE word by word, in order).
 * Returns the bytes placed (0 if the round failed: BT then fails). */
__attribute__((noinline))
static uint32_t log_first_word(struct loco_rtx_worker *w, struct rtx_batch *bt)
{
	static_assert(offsetof(struct loco_rtx_log_hdr, state) == 0,
		      "the state word leads the log");
	struct loco_ack *ack = bt->ack;
	bt_write(bt, &w->x->logs, rtx_log_off(w->x, w->slot), w->logbuf, 8);
	int rc = bt_run_durable(bt, w);
	bt_init(bt, w, ack);
	bt->rc = rc;
	if (rc)
		return 0;
	rtx_crash_point("rtx.mid_log");
	return 8;
}

static void post_log(struct loco_rtx_worker *w, struct rtx_batch *bt)
{
	struct loco_rtx_log_hdr *h = (struct loco_rtx_log_hdr *)w->logbuf;
	struct loco_rtx_log_ent *ent = log_entries(w);
	for (unsigned i = 0; i < w->nw; i++) {
		const struct rtx_went *e = &w->ws[i];
		const struct rtx_rent *r = &w->rs[e->ri];
		ent[i] = (struct loco_rtx_log_ent){ .mptr = r->obj,
			.old_dptr = r->dptr, .new_dptr = e->new_dptr };
	}
	loco_rtx_log_seal(h, ent, w->nw, w->lockv, w->seq, tx_lease(w));
	uint32_t at = rtx_crash_armed("rtx.mid_log") ? log_first_word(w, bt) : 0;
	bt_write(bt, &w->x->logs, rtx_log_off(w->x, w->slot) + at,
		 w->logbuf + at, (uint32_t)loco_rtx_log_bytes(w->nw) - at);
}

/* Data and log must be placed before the first lock names them: one QP
 * orders that by itself, several need a fence. */
static bool need_fence(const struct loco_rtx_worker *w)
{
	for (unsigned i = 0; i < w->nw; i++)
		if (w->x->node[w->rs[w->ws[i].ri].ni].id != w->x->home)
			return true;
	return false;
}

static uint64_t state_now(const struct loco_rtx_worker *w,
			  enum loco_rtx_log_state st)
{
	return loco_rtx_state_word(st, w->seq, tx_lease(w));
}

/* The owner's abort after writing its log: INIT -> ABORT (a repairer may
 * have done it), release what we hold, ABORT -> DONE. */
static int abort_logged(struct loco_rtx_worker *w, uint64_t acquired)
{
	struct rtx_batch bt;
	bt_init(&bt, w, &w->ack);
	bt_cas(&bt, &w->x->logs, rtx_state_off(w->x, w->slot),
	       state_now(w, LOCO_RTX_LOG_INIT), state_now(w, LOCO_RTX_LOG_ABORT),
	       &w->state_old);
	int rc = bt_run(&bt, w);
	if (!rc) {
		rtx_crash_point("rtx.mid_abort");
		rc = release_acquired(w, acquired);
	}
	bt_init(&bt, w, &w->ack);
	bt_cas(&bt, &w->x->logs, rtx_state_off(w->x, w->slot),
	       state_now(w, LOCO_RTX_LOG_ABORT), state_now(w, LOCO_RTX_LOG_DONE),
	       &w->state_old);
	int rc2 = bt_run(&bt, w);
	free_blocks(w);
	return rc ? rc : rc2;
}

uint64_t rtx_doing_word(struct loco_rtx_worker *w, uint32_t seq, unsigned n,
			uint64_t *at_ns)
{
	*at_ns = loco_now_ns();
	return loco_rtx_state_word(LOCO_RTX_LOG_DOING, seq,
				   rtx_lease_end_ms(w->x, n));
}

/* INIT -> DOING: the commit point. The repair lease is the locks' lease
 * and the wrap guard counts from the clock read of their tag: both were
 * taken before this CAS, so neither reads the clock again (docs/rtx.md,
 * "Clock reads"). */
static int go_doing(struct loco_rtx_worker *w, struct rtx_batch *bt,
		    uint64_t *doing, uint64_t *at_ns)
{
	uint64_t init = state_now(w, LOCO_RTX_LOG_INIT);
	*doing = state_now(w, LOCO_RTX_LOG_DOING);
	*at_ns = w->tag_ns;
	bt_cas(bt, &w->x->logs, rtx_state_off(w->x, w->slot), init, *doing,
	       &w->state_old);
	int rc = bt_run_durable(bt, w);
	return rc ? rc : w->state_old == init ? 0 : -EAGAIN;
}

static int owner_exec(struct loco_rtx_worker *w, uint64_t doing,
		      uint64_t doing_ns)
{
	uint64_t rel[LOCO_RTX_WRITES_MAX];
	struct rtx_loc loc[LOCO_RTX_WRITES_MAX];
	for (unsigned i = 0; i < w->nw; i++) {
		const struct rtx_rent *r = &w->rs[w->ws[i].ri];
		rel[i] = loco_lllock_version(r->lock) + 1;
		loc[i] = (struct rtx_loc){ rtx_meta(w->x, r->ni),
					   obj_off(r, 0) };
	}
	struct rtx_exec e = { .ent = log_entries(w), .loc = loc, .n = w->nw,
			      .lockv = w->lockv, .release = rel,
			      .slot = w->slot, .state = doing,
			      .confirmed_ns = doing_ns };
	int rc = rtx_exec_commit(w, &e);
	int rc2 = rtx_release_prelocks(w);
	return rc ? rc : rc2;
}

/* writes_before_locks when it posts: BT now, its persists behind it,
 * and with FENCE a thread fence. */
static int writes_before_locks_slow(struct loco_rtx_worker *w,
				    struct rtx_batch *bt, bool fence)
{
	int rc = bt_post(bt);
	/* Completes with the locking round's wait. */
	if (!rc)
		rc = rtx_persist_post(w, &w->ack);
	if (!rc && fence)
		rc = loco_fence(w->thr, LOCO_FENCE_THREAD, 0);
	bt_init(bt, w, &w->ack);
	return rc;
}

/* The data (and log) WRITEs in BT share the lock CASes' doorbell unless
 * SPLIT (objects on other nodes than the log's: posted and fenced now,
 * or a crash point between them armed) or the hosting nodes are durable
 * (posted now with their persists behind them, which the locking round's
 * wait completes): one QP places them before any lock names them.
 * Inline: the usual case (one QP, volatile nodes) has nothing to do, and
 * a call to learn it cost ~15 instructions (two a transfer). */
static inline int writes_before_locks(struct loco_rtx_worker *w,
				      struct rtx_batch *bt, bool split,
				      bool fence)
{
	return split || rtx_durable(w) ?
	       writes_before_locks_slow(w, bt, fence) : 0;
}

/* The data and log WRITEs in BT share the lock CASes' doorbell (one QP
 * places them before any lock names them; on durable nodes the persist
 * behind the locks covers all three, see the top) unless SPLIT: objects
 * on other nodes than the log's, or a crash point between log and locks
 * armed. Then they are posted now with their persists behind them, and
 * with FENCE thread-fenced. */
static inline int log_before_locks(struct loco_rtx_worker *w,
				   struct rtx_batch *bt, bool split, bool fence)
{
	return split ? writes_before_locks_slow(w, bt, fence) : 0;
}

/* Blocks, tag, data and log WRITEs into BT (round trip 1, shared with
 * the locks when log_before_locks allows). */
static int prepare_logged(struct loco_rtx_worker *w, struct rtx_batch *bt)
{
	uint64_t tag;
	int rc = alloc_blocks(w);
	if (!rc)
		rc = rtx_next_tag(w, w->nw + w->nr, &tag);
	if (rc) {
		free_blocks(w);
		return rc;
	}
	w->lockv = loco_lllock_make(tag, w->slot, false);
	w->seq = (w->seq + 1) & LOCO_RTX_LOG_SEQ_MASK;
	post_data(w, bt);
	post_log(w, bt);
	bool fence = need_fence(w);
	return log_before_locks(w, bt, fence ||
				rtx_crash_armed("rtx.after_log"), fence);
}

int rtx_commit_logged(struct loco_rtx_worker *w)
{
	uint64_t acquired = 0, doing = 0, doing_ns = 0;
	bool ok = false;
	struct rtx_batch bt;
	bt_init(&bt, w, &w->ack);
	int rc = prepare_logged(w, &bt);
	if (rc) {
		rtx_release_prelocks(w);
		return rc;
	}
	rtx_crash_point("rtx.after_log");
	rc = lock_and_validate(w, &bt, &acquired, &ok);
	if (!rc && ok) {
		rtx_crash_point("rtx.after_validate");
		bt_init(&bt, w, &w->ack);
		rc = go_doing(w, &bt, &doing, &doing_ns);
		if (rc == -EAGAIN)
			ok = false;
	}
	if (rc || !ok) {
		int rc2 = abort_logged(w, acquired);
		return rc && rc != -EAGAIN ? rc : rc2 ? rc2 : -EAGAIN;
	}
	rtx_crash_point("rtx.after_doing");
	return owner_exec(w, doing, doing_ns);
}

/* ---- read for update: the logged locks before the commit ----------------
 * loco_rtx_read_for_update names the write set when it reads it, so its
 * log (entries hold pointers: the old ones from the TXObj READs, the new
 * blocks allocated then) and the logged lock CASes ride in the round trip
 * of the data READs, and the commit writes the new data with the commit
 * point's CAS in one doorbell:
 *
 *   E1  TXObj READs (tx.c)
 *   E2  data READs + log WRITE (INIT) + per object the lock CAS (version
 *       read -> lockv) and, unless the first READ was whole, the TXObj
 *       READ back: one doorbell to the home node, whose QP places the log
 *       before any lock names it
 *   C1  new data WRITEs + CAS INIT -> DOING (the commit point): one
 *       doorbell, the QP places the data before DOING
 *   C2  installs, releases, DONE (exec_batched)
 *
 * Only taken when every written object (hence every new block) is on the
 * log's node: the argument rests on one QP ordering log before locks and
 * data before DOING. A log whose new blocks are not written yet is
 * harmless while INIT: a repairer only aborts an INIT log and releases
 * its locks, and installs only ever follow DOING. The blocks are the
 * owner's (nobody else writes them) and the log names them, so no scan
 * frees them before the log is DONE. A read-only object read after the
 * read for update is validated in a round of its own before C1 (DOING
 * cannot wait on a READ in its own doorbell).
 *
 * Durable nodes: E2 persists nothing; its log and locks are persisted
 * with C1's data, before DOING. Both must be durable before the commit
 * point, not before the application computes: a power cut before C1's
 * persist leaves each of them durable or not (a page cache writes pages
 * back when it likes). A durable INIT log's abort settles its locks,
 * durable or not (its release CASes expect lockv); a durable lock whose
 * log is not names a log that does not match it, which a repairer
 * steals (the top of this file). C1's persist covers the log and the
 * locks only if it reaches the incarnation they went to: the commit
 * compares the home QP's generation (loco_peer_qp_gen) before DOING. */

/* The data READs of the write set into BT (R's copy, zeros for a null
 * object); -EIO for a pointer outside the pool, before anything is
 * added. */
static int post_data_reads(struct loco_rtx_worker *w, struct rtx_batch *bt)
{
	const struct loco_rtx *x = w->x;
	for (unsigned i = 0; i < w->nw; i++)
		if (loco_rtx_dptr_block(w->rs[w->ws[i].ri].dptr) >= x->nblocks)
			return -EIO;
	for (unsigned i = 0; i < w->nw; i++) {
		struct rtx_rent *r = &w->rs[w->ws[i].ri];
		uint64_t block = loco_rtx_dptr_block(r->dptr);
		r->null = block == 0;
		if (r->null)
			memset(r->data, 0, x->block_len);
		else
			bt_read(bt, &x->node[r->ni].data, block * x->block_len,
				r->data, x->o.data_len);
	}
	return 0;
}

static uint64_t all_acquired(const struct loco_rtx_worker *w)
{
	return w->nw == 64 ? UINT64_MAX : (UINT64_C(1) << w->nw) - 1;
}

int rtx_update_lock(struct loco_rtx_worker *w)
{
	uint64_t tag, acquired = 0;
	struct rtx_batch bt;
	int rc = alloc_blocks(w);
	if (!rc && (rc = rtx_next_tag(w, w->nw + w->nr, &tag)))
		free_blocks(w);
	if (rc)
		return rc;
	w->lockv = loco_lllock_make(tag, w->slot, false);
	w->seq = (w->seq + 1) & LOCO_RTX_LOG_SEQ_MASK;
	bt_init(&bt, w, &w->ack);
	rc = post_data_reads(w, &bt);
	if (rc) {
		free_blocks(w);
		return rc;
	}
	post_log(w, &bt);
	/* Durable nodes: C1's persist covers the log with the locks. */
	rc = log_before_locks(w, &bt, rtx_crash_armed("rtx.after_log"), false);
	if (rc)
		return rc;
	rtx_crash_point("rtx.after_log");
	post_locks(w, &bt);
	/* Durable nodes: the log and the locks need only be durable before
	 * the commit point, so C1's persist of the data covers them (no
	 * sync wait here; docs/rtx.md, "Read for update", durable nodes). */
	rc = bt_run(&bt, w);
	/* Only a durable commit compares it (rtx_commit_early). */
	if (rtx_durable(w))
		w->upd_gen = loco_peer_qp_gen(w->thr, w->x->home);
	bool ok = !rc && locks_check(w, &acquired);
	if (rc || !ok) {
		int rc2 = abort_logged(w, acquired);
		return rc && rc != -EAGAIN ? rc : rc2 ? rc2 : -EAGAIN;
	}
	w->upd = RTX_UPD_EARLY;
	rtx_crash_point("rtx.update_locked");
	return 0;
}

static bool any_validated(const struct loco_rtx_worker *w)
{
	for (unsigned i = 0; i < w->nr; i++)
		if (validated_here(&w->rs[i]))
			return true;
	return false;
}

/* C1's first half into BT: the new data, and the validation READs of
 * read-only objects (then run here, a round of its own, as is a crash
 * point between the data and the commit point when armed). */
static int early_data(struct loco_rtx_worker *w, struct rtx_batch *bt,
		      bool *ok)
{
	bool val = any_validated(w);
	int rc;
	post_data(w, bt);
	if (val)
		post_validation(w, bt);
	if (val || rtx_crash_armed("rtx.update_data")) {
		rc = bt_run_durable(bt, w);
		bt_init(bt, w, &w->ack);
		if (!rc)
			rtx_crash_point("rtx.update_data");
	} else {
		/* Durable nodes: the data, and E2's lock CASes (this thread's
		 * writes since its last persist), persisted before the commit
		 * point. */
		rc = writes_before_locks(w, bt, false, false);
	}
	*ok = !rc && reads_valid(w) && hooks_valid(w);
	return rc;
}

int rtx_commit_early(struct loco_rtx_worker *w)
{
	uint64_t doing = 0, doing_ns = 0;
	bool ok = false;
	struct rtx_batch bt;
	bt_init(&bt, w, &w->ack);
	int rc = early_data(w, &bt, &ok);
	/* Durable nodes: the persist just posted covers the locks only if
	 * they went to the incarnation it reaches (their loss may have been
	 * reported, once, to another operation of this thread meanwhile). */
	if (!rc && rtx_durable(w) &&
	    loco_peer_qp_gen(w->thr, w->x->home) != w->upd_gen)
		rc = -LOCO_EDOWN;
	if (!rc && ok) {
		rtx_crash_point("rtx.after_validate");
		rc = go_doing(w, &bt, &doing, &doing_ns);
		if (rc == -EAGAIN)
			ok = false;
	}
	if (rc || !ok) {
		int rc2 = rtx_abort_early(w);
		return rc && rc != -EAGAIN ? rc : rc2 ? rc2 : -EAGAIN;
	}
	w->upd = RTX_UPD_NONE;
	rtx_crash_point("rtx.after_doing");
	return owner_exec(w, doing, doing_ns);
}

int rtx_abort_early(struct loco_rtx_worker *w)
{
	w->upd = RTX_UPD_FAILED;
	return abort_logged(w, all_acquired(w));
}

/* ---- no-log commit (OPT1) ------------------------------------------------ */

/* Blocks, tag and the data WRITE into BT, whose lock CAS follows on the
 * same QP (the object's node), so one doorbell carries both. */
static int prepare_nolog(struct loco_rtx_worker *w, struct rtx_batch *bt)
{
	struct rtx_rent *r = &w->rs[w->ws[0].ri];
	int rc = alloc_blocks(w);
	if (rc)
		return rc;
	if (r->prelock) {
		w->lockv = r->prelock;
	} else {
		uint64_t tag;
		rc = rtx_next_tag(w, 1 + w->nr, &tag);
		if (rc) {
			free_blocks(w);
			return rc;
		}
		w->lockv = loco_lllock_make(tag, w->slot, true);
	}
	post_data(w, bt);
	return writes_before_locks(w, bt, false,
				   rtx_durable(w) && need_fence(w));
}

/* Install CAS, then (same QP, so after it) the release CAS, added to BT
 * behind what it holds (the data WRITE, when no lock round came first).
 * If the install fails, a repairer stole the lock, so the release fails
 * too. */
static int install_nolog(struct loco_rtx_worker *w, struct rtx_batch *bt,
			 bool *installed)
{
	struct rtx_went *e = &w->ws[0];
	const struct rtx_rent *r = &w->rs[e->ri];
	const struct loco_rregion *m = rtx_meta(w->x, r->ni);
	bool split = rtx_crash_armed("rtx.opt1_installed");
	bt_cas(bt, m, obj_off(r, RTX_DPTR_OFF), r->dptr, e->new_dptr,
	       &e->cas_old[0]);
	/* The install durable before the release (same QP: in order). */
	int rc = 0;
	if (split || rtx_durable(w)) {
		rc = bt_post(bt);
		if (!rc)
			rc = rtx_persist_post(w, &w->ack);
	}
	if (!rc && split) {
		rc = rtx_wait(w, &w->ack);
		if (rc)
			return rc;
		rtx_crash_point("rtx.opt1_installed");
	}
	bt_cas(bt, m, obj_off(r, RTX_LOCK_OFF), w->lockv,
	       loco_lllock_version(r->lock) + 1, &e->cas_old[1]);
	if (!rc)
		rc = bt_run_durable(bt, w);
	*installed = e->cas_old[0] == r->dptr;
	return rc;
}

/* The written object is pre-locked (its pre-lock is the commit's lock
 * word) and no object needs a validation READ: the lock round would only
 * carry the data WRITE, which then goes with the install instead (same
 * QP: placed before the install names it). OPT2's pre-lock with OPT1's
 * commit, as an index updating one pre-locked node does: one round trip. */
static bool nolog_held(const struct loco_rtx_worker *w)
{
	const struct rtx_rent *r = &w->rs[w->ws[0].ri];
	if (!r->prelock || r->prelock != w->lockv)
		return false;
	for (unsigned i = 0; i < w->nr; i++)
		if (validated_here(&w->rs[i]))
			return false;
	return true;
}

/* nolog_held's commit: the lock is ours already (as locks_check would
 * find it), then the crash point and the index's check. */
static bool held_check(struct loco_rtx_worker *w, uint64_t *acquired)
{
	w->rs[w->ws[0].ri].prelock = 0;
	*acquired = 1;
	rtx_crash_point("rtx.opt1_after_lock");
	return hooks_valid(w);
}

int rtx_commit_nolog(struct loco_rtx_worker *w)
{
	uint64_t acquired = 0;
	bool ok = false, installed = false;
	struct rtx_batch bt;
	bt_init(&bt, w, &w->ack);
	int rc = prepare_nolog(w, &bt);
	if (rc) {
		rtx_release_prelocks(w);
		return rc;
	}
	if (nolog_held(w))
		ok = held_check(w, &acquired);
	else
		rc = lock_and_validate(w, &bt, &acquired, &ok);
	if (rc || !ok) {
		int rc2 = release_acquired(w, acquired);
		free_blocks(w);
		return rc && rc != -EAGAIN ? rc : rc2 ? rc2 : -EAGAIN;
	}
	rc = install_nolog(w, &bt, &installed);
	int rc2 = rtx_release_prelocks(w);
	if (!rc && !installed) {
		free_blocks(w);
		return -EAGAIN;
	}
	w->ws[0].block = 0;
	if (!rc && !rc2)
		RTX_INC(w, nolog_commits);
	return rc ? rc : rc2;
}
