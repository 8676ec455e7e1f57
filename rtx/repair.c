/* SPDX-License-Identifier: MIT */
/* Repair (rTX Fig. 10): on an expired LLLock, read the owner's log and
 *   INIT  -> CAS it to ABORT (the owner's INIT -> DOING CAS then fails),
 *   ABORT -> release its locks (to fresh versions), CAS to DONE,
 *   DOING with an expired repair lease -> take the repair lease (CAS) and
 *            re-run TryCommit from the log (idempotent CASes),
 *   DONE  -> only a lock taken after an abort can remain: release it.
 * A lock with the no-log bit (OPT1, OPT2 pre-locks), or whose log does not
 * match it (the slot moved on: reused log), is stolen instead: CAS the lock
 * to our own no-log word, switch the data pointer to a fresh copy of the
 * current value (so a late install CAS of the suspected owner can no
 * longer succeed), release; the hooks' taking() may refuse it first (the
 * lock then stays the owner's). Stealing a lock that was released
 * meanwhile fails at the first CAS and does nothing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rtx/internal.h"

#define REPAIR_STEPS 8
#define SWITCH_TRIES 16

/* One repair action for thread slot OWNER: counted, and told the hook. */
static void repaired(struct loco_rtx_worker *w, uint32_t owner)
{
	RTX_INC(w, repairs);
	if (w->hooks && w->hooks->repaired)
		w->hooks->repaired(w->hook_arg, owner);
}

static const struct loco_rtx_log_hdr *rlog_hdr(const struct loco_rtx_worker *w)
{
	return (const struct loco_rtx_log_hdr *)w->rlog;
}

static int read_log(struct loco_rtx_worker *w, uint32_t slot)
{
	return loco_read(w->thr, &w->x->logs, rtx_log_off(w->x, slot), w->rlog,
			 w->x->log_len);
}

static int cas_sync(struct loco_rtx_worker *w, const struct loco_rregion *rr,
		    uint64_t off, uint64_t expect, uint64_t desired,
		    uint64_t *old)
{
	return loco_cas(w->thr, rr, off, expect, desired, old);
}

static int cas_state(struct loco_rtx_worker *w, uint32_t slot, uint64_t expect,
		     uint64_t desired, uint64_t *old)
{
	return cas_sync(w, &w->x->logs, rtx_state_off(w->x, slot), expect,
			desired, old);
}

/* ---- steal --------------------------------------------------------------- */

/* Replace the data pointer D (current, or retried) by a copy of its block;
 * our lock keeps every other writer out except a suspected owner's one
 * late install, which the switch makes fail (or which we then copy). */
static int switch_copy(struct loco_rtx_worker *w, uint32_t ni, uint32_t idx)
{
	const struct loco_rtx *x = w->x;
	const struct loco_rregion *m = rtx_meta(x, ni);
	uint64_t moff = (uint64_t)idx * RTX_META_LEN, d = 0, old = 0;
	int rc = loco_read(w->thr, m, moff + RTX_DPTR_OFF, &d, 8);
	for (unsigned t = 0; !rc && t < SWITCH_TRIES; t++) {
		uint64_t block = 0, from = loco_rtx_dptr_block(d);
		if (from && from < x->nblocks) {
			rc = loco_read(w->thr, &x->node[ni].data,
				       from * x->block_len, w->copy,
				       x->o.data_len);
			if (!rc)
				rc = rtx_alloc(w, ni, &block);
			if (!rc)
				rc = loco_post_write(w->thr, &x->node[ni].data,
						     block * x->block_len,
						     w->copy, x->o.data_len, NULL);
			/* Durable before the pointer names it. */
			if (!rc)
				rc = rtx_persist_post(w, NULL);
		}
		/* Same QP as the copy's WRITE: placed before the pointer. */
		if (!rc)
			rc = cas_sync(w, m, moff + RTX_DPTR_OFF, d,
				      loco_rtx_dptr_next(d, block), &old);
		if (!rc && old == d)
			return 0;
		if (block)
			rtx_free_local(w, ni, block);
		d = old;
	}
	return rc ? rc : -EAGAIN;
}

/* The hook's word on stealing a lock of thread slot OWNER: 0 or why not.
 * Pre-locks, and a read for update's logged locks, are held from the
 * first one taken until the transaction closes (commit or abort releases
 * them before their repairs run). */
static int may_take(struct loco_rtx_worker *w, uint32_t owner)
{
	if (!w->hooks || !w->hooks->taking)
		return 0;
	return w->hooks->taking(w->hook_arg, owner, w->active &&
				(w->prelocked || w->upd == RTX_UPD_EARLY));
}

static int repair_steal(struct loco_rtx_worker *w, loco_raddr_t obj,
			uint64_t lockv)
{
	uint32_t ni, idx;
	uint64_t tag, old = 0;
	if (rtx_locate(w->x, obj, &ni, &idx))
		return -EINVAL;
	int rc = may_take(w, loco_lllock_owner(lockv));
	if (rc)
		return rc;
	const struct loco_rregion *m = rtx_meta(w->x, ni);
	uint64_t off = (uint64_t)idx * RTX_META_LEN + RTX_LOCK_OFF;
	rc = rtx_next_tag(w, 1, &tag);
	uint64_t mine = loco_lllock_make(tag, w->slot, true);
	if (!rc)
		rc = cas_sync(w, m, off, lockv, mine, &old);
	if (rc || old != lockv)
		return rc;
	rtx_crash_point("rtx.repair_after_steal");
	RTX_INC(w, steals);
	repaired(w, loco_lllock_owner(lockv));
	rc = switch_copy(w, ni, idx);
	/* The switch durable before others may build on it. */
	if (!rc)
		rc = rtx_persist(w);
	int rc2 = cas_sync(w, m, off, mine, rtx_fresh_version(w), &old);
	return rc ? rc : rc2;
}

/* ---- log-driven steps ---------------------------------------------------- */

/* INIT -> ABORT; *STATE becomes what the word now holds. */
static int step_abort(struct loco_rtx_worker *w, uint32_t slot,
		      uint64_t *state)
{
	uint64_t ab = loco_rtx_state_word(LOCO_RTX_LOG_ABORT,
					  loco_rtx_state_seq(*state),
					  loco_rtx_state_ms(*state));
	uint64_t old = 0;
	int rc = cas_state(w, slot, *state, ab, &old);
	if (rc)
		return rc;
	if (old != *state) {
		*state = old;
		return 0;
	}
	RTX_INC(w, rep_aborts);
	repaired(w, slot);
	rtx_crash_point("rtx.repair_mid_abort");
	*state = ab;
	return 0;
}

static const struct loco_rtx_log_ent *rlog_ent(const struct loco_rtx_worker *w)
{
	return (const struct loco_rtx_log_ent *)(w->rlog +
						 sizeof(struct loco_rtx_log_hdr));
}

/* ABORT: release the aborted transaction's locks, then DONE. */
static int step_release(struct loco_rtx_worker *w, uint64_t lockv,
			uint32_t slot, uint64_t state)
{
	const struct loco_rtx_log_ent *ent = rlog_ent(w);
	unsigned n = loco_rtx_log_nent(rlog_hdr(w));
	struct loco_ack ack = { 0, 0 };
	uint64_t old[LOCO_RTX_WRITES_MAX];
	int rc = 0;
	for (unsigned i = 0; i < n && !rc; i++) {
		uint32_t ni, idx;
		if (rtx_locate(w->x, ent[i].mptr, &ni, &idx))
			continue;
		rc = loco_post_cas(w->thr, rtx_meta(w->x, ni),
				   (uint64_t)idx * RTX_META_LEN + RTX_LOCK_OFF,
				   lockv, rtx_fresh_version(w), &old[i], &ack);
	}
	if (!rc)
		rc = rtx_wait(w, &ack);
	uint64_t done = loco_rtx_state_word(LOCO_RTX_LOG_DONE,
					    loco_rtx_state_seq(state),
					    loco_rtx_state_ms(state)), prev = 0;
	if (!rc)
		rc = cas_state(w, slot, state, done, &prev);
	if (!rc && prev == state) {
		RTX_INC(w, rep_releases);
		repaired(w, slot);
	}
	return rc;
}

/* DOING, repair lease over: take it, then TryCommit from the log. */
static int step_recommit(struct loco_rtx_worker *w, uint64_t lockv,
			 uint32_t slot, uint64_t *state)
{
	unsigned n = loco_rtx_log_nent(rlog_hdr(w));
	uint64_t take_ns, old = 0;
	uint64_t take = rtx_doing_word(w, loco_rtx_state_seq(*state), n, &take_ns);
	int rc = cas_state(w, slot, *state, take, &old);
	if (rc)
		return rc;
	if (old != *state) {
		*state = old;
		return -EAGAIN;
	}
	rtx_crash_point("rtx.repair_after_take");
	RTX_INC(w, rep_recommits);
	repaired(w, slot);
	struct rtx_loc loc[LOCO_RTX_WRITES_MAX];
	rtx_exec_locate(w->x, rlog_ent(w), n, loc);
	struct rtx_exec e = { .ent = rlog_ent(w), .loc = loc, .n = n,
			      .lockv = lockv, .release = NULL, .slot = slot,
			      .state = take, .confirmed_ns = take_ns };
	return rtx_exec_commit(w, &e);
}

/* DONE (or a later transaction's log) and OBJ still locked by LOCKV. */
static int step_late(struct loco_rtx_worker *w, loco_raddr_t obj,
		     uint64_t lockv)
{
	uint32_t ni, idx;
	uint64_t old = 0;
	if (rtx_locate(w->x, obj, &ni, &idx))
		return -EINVAL;
	int rc = cas_sync(w, rtx_meta(w->x, ni),
			  (uint64_t)idx * RTX_META_LEN + RTX_LOCK_OFF, lockv,
			  rtx_fresh_version(w), &old);
	if (!rc && old == lockv) {
		RTX_INC(w, rep_late);
		repaired(w, loco_lllock_owner(lockv));
	}
	return rc;
}

/* The state word read must belong to the log read (same sequence). */
static bool log_consistent(const struct loco_rtx_worker *w, uint64_t lockv,
			   uint64_t state)
{
	return loco_rtx_log_matches(w->rlog, lockv, w->x->o.max_writes) &&
	       loco_rtx_state_of_log(state, rlog_hdr(w));
}

static int repair_log(struct loco_rtx_worker *w, loco_raddr_t obj,
		      uint64_t lockv, uint32_t slot, uint64_t state)
{
	for (unsigned t = 0; t < REPAIR_STEPS; t++) {
		bool match = log_consistent(w, lockv, state);
		int rc = 0;
		switch (loco_rtx_repair_decide(lockv, match, state,
					       rtx_now_ms(w->x))) {
		case LOCO_RTX_REPAIR_NONE:
			return 0;
		case LOCO_RTX_REPAIR_WAIT:
			RTX_INC(w, repair_waits);
			return -EBUSY;
		case LOCO_RTX_REPAIR_STEAL:
			return obj ? repair_steal(w, obj, lockv) : 0;
		case LOCO_RTX_REPAIR_ABORT:
			rc = step_abort(w, slot, &state);
			break;
		case LOCO_RTX_REPAIR_RELEASE:
			return step_release(w, lockv, slot, state);
		case LOCO_RTX_REPAIR_RECOMMIT:
			rc = step_recommit(w, lockv, slot, &state);
			if (rc != -EAGAIN)
				return rc;
			rc = 0;
			break;
		case LOCO_RTX_REPAIR_LATE_LOCK:
			return obj ? step_late(w, obj, lockv) : 0;
		}
		if (rc)
			return rc;
	}
	return -EBUSY;
}

int rtx_repair(struct loco_rtx_worker *w, loco_raddr_t obj, uint64_t lockv)
{
	if (!loco_lllock_expired(lockv, rtx_now_ms(w->x)))
		return 0;
	uint32_t slot = loco_lllock_owner(lockv);
	if (loco_lllock_nolog(lockv) || slot >= w->x->nslots)
		return obj ? repair_steal(w, obj, lockv) : 0;
	int rc = read_log(w, slot);
	return rc ? rc : repair_log(w, obj, lockv, slot, rlog_hdr(w)->state);
}

/* ---- a gone client's slot ------------------------------------------------ */

static uint32_t log_last_seq(const struct loco_rtx_worker *w)
{
	uint32_t a = loco_rtx_log_seq(rlog_hdr(w)) & LOCO_RTX_LOG_SEQ_MASK;
	uint32_t b = loco_rtx_state_seq(rlog_hdr(w)->state);
	return a > b ? a : b;
}

int rtx_recover_log(struct loco_rtx_worker *w, uint32_t slot, uint32_t *seq)
{
	uint64_t deadline = loco_now_ns() +
			    (uint64_t)loco_mgr_timeout_ms(w->x->base.mgr) * 2000000u;
	for (;;) {
		int rc = read_log(w, slot);
		if (rc)
			return rc;
		const struct loco_rtx_log_hdr *h = rlog_hdr(w);
		uint64_t lockv = h->lockv, state = h->state;
		if (seq)
			*seq = log_last_seq(w);
		if (!loco_rtx_log_open(w->rlog, w->x->o.max_writes))
			return 0;
		if (loco_now_ns() > deadline)
			return -ETIMEDOUT;
		if (!loco_lllock_expired(lockv, rtx_now_ms(w->x))) {
			rtx_sleep_us(1000);
			continue;
		}
		rc = repair_log(w, LOCO_RADDR_NULL, lockv, slot, state);
		if (rc == -EBUSY)
			rtx_sleep_us(1000);
		else if (rc)
			return rc;
	}
}

int loco_rtx_adopt_slot(struct loco_rtx_worker *w, uint32_t slot)
{
	if (slot >= w->x->nslots || slot == w->slot || w->active)
		return -EINVAL;
	int rc = rtx_recover_log(w, slot, NULL);
	return rc ? rc : rtx_adopt_chunks(w, slot, false);
}

/* ---- logs ---------------------------------------------------------------- */

/* Slots (not ours) whose log is open (loco_rtx_log_open), into OUT
 * (nslots). */
static int logs_open(struct loco_rtx_worker *w, uint32_t *out, uint32_t *n)
{
	const struct loco_rtx *x = w->x;
	uint32_t per = RTX_SCAN_BYTES / x->log_len;
	int rc = 0;
	*n = 0;
	for (uint32_t f = 0; !rc && f < x->nslots; f += per) {
		uint32_t k = x->nslots - f < per ? x->nslots - f : per;
		rc = loco_read(w->thr, &x->logs, rtx_log_off(x, f), w->scan,
			       k * x->log_len);
		for (uint32_t i = 0; !rc && i < k; i++) {
			const uint8_t *buf = w->scan + (size_t)i * x->log_len;
			if (f + i != w->slot &&
			    loco_rtx_log_open(buf, x->o.max_writes))
				out[(*n)++] = f + i;
		}
	}
	return rc;
}

int loco_rtx_settle_logs(struct loco_rtx_worker *w, uint64_t *pending)
{
	if (w->active)
		return -EINVAL;
	uint32_t *open = malloc(w->x->nslots * sizeof(*open)), n = 0;
	int rc = open ? logs_open(w, open, &n) : -ENOMEM;
	for (uint32_t i = 0; !rc && i < n; i++)
		rc = rtx_recover_log(w, open[i], NULL);
	if (!rc)
		rc = logs_open(w, open, &n);
	free(open);
	if (!rc && pending)
		*pending = n;
	return rc;
}

/* ---- sweep --------------------------------------------------------------- */

struct held_lock {
	uint32_t idx;
	uint64_t word;
};

/* Locked TXObjs of node NI among [FIRST, FIRST+N): into OUT, count *HELD. */
static int sweep_piece(struct loco_rtx_worker *w, uint32_t ni, uint32_t first,
		       uint32_t n, struct held_lock *out, unsigned *nout)
{
	uint64_t *meta = (uint64_t *)w->scan;
	int rc = loco_read(w->thr, rtx_meta(w->x, ni),
			   (uint64_t)first * RTX_META_LEN, meta,
			   n * RTX_META_LEN);
	*nout = 0;
	for (uint32_t i = 0; !rc && i < n; i++)
		if (loco_lllock_is_locked(meta[2 * i]))
			out[(*nout)++] = (struct held_lock){ first + i,
							     meta[2 * i] };
	return rc;
}

/* One pass: repair what is expired; *HELD gets the locked count seen. */
static int sweep(struct loco_rtx_worker *w, uint64_t *held, bool repair)
{
	const uint32_t per = RTX_SCAN_BYTES / RTX_META_LEN;
	struct held_lock *hl = malloc(per * sizeof(*hl));
	int rc = hl ? 0 : -ENOMEM;
	*held = 0;
	for (uint32_t ni = 0; !rc && ni < w->x->nnodes; ni++) {
		for (uint32_t f = 0; !rc && f < w->x->o.objects; f += per) {
			uint32_t n = w->x->o.objects - f < per ?
				     w->x->o.objects - f : per;
			unsigned nh;
			rc = sweep_piece(w, ni, f, n, hl, &nh);
			*held += nh;
			for (unsigned i = 0; !rc && repair && i < nh; i++) {
				loco_raddr_t obj = loco_rtx_obj(
					w->x, w->x->node[ni].id, hl[i].idx);
				rc = rtx_repair(w, obj, hl[i].word);
				if (rc == -EBUSY)
					rc = 0;
			}
		}
	}
	free(hl);
	return rc;
}

int loco_rtx_repair_all(struct loco_rtx_worker *w, int timeout_ms,
			uint64_t *held)
{
	if (w->active)
		return -EINVAL;
	uint64_t deadline = loco_now_ns() + (uint64_t)timeout_ms * 1000000u;
	uint64_t n = 0;
	int rc;
	for (;;) {
		rc = sweep(w, &n, true);
		if (rc || !n || loco_now_ns() > deadline)
			break;
		rtx_sleep_us(1000);
	}
	if (!rc && n)
		rc = sweep(w, &n, false);
	if (!rc && held)
		*held = n;
	return rc;
}
