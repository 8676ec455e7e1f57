/* SPDX-License-Identifier: MIT */
/* Transaction execution phase (rTX Fig. 7): reads with a local read set
 * and cache, local writes, OPT2 pre-locks; commit dispatch; the
 * RTRANSACTION block's retry loop. */
#include <errno.h>
#include <string.h>

#include "rtx/internal.h"

#define FETCH_TRIES 4

int loco_rtx_begin(struct loco_rtx_worker *w)
{
	if (w->active)
		return -EBUSY;
	w->active = true;
	w->single_node = true;
	w->nr = w->nw = 0;
	w->pretag = 0;
	w->prelocked = false;
	w->upd = RTX_UPD_NONE;
	w->nrep = 0;
	loco_ack_clear(&w->ack);
	return 0;
}

static struct rtx_rent *rs_find(struct loco_rtx_worker *w, loco_raddr_t obj)
{
	for (unsigned i = 0; i < w->nr; i++)
		if (w->rs[i].obj == obj)
			return &w->rs[i];
	return NULL;
}

static enum loco_rtx_cc classify(struct loco_rtx_worker *w, loco_raddr_t obj,
				 bool write)
{
	if (!w->hooks || !w->hooks->classify)
		return LOCO_RTX_CC_OCC;
	return w->hooks->classify(w->hook_arg, obj, write);
}

/* One TXObj READ (lock and data pointer); an expired lock is repaired
 * and the TXObj read again. */
static int fetch_meta(struct loco_rtx_worker *w, struct rtx_rent *r,
		      uint64_t meta[2])
{
	for (unsigned t = 0; t < FETCH_TRIES; t++) {
		int rc = loco_read(w->thr, rtx_meta(w->x, r->ni),
				   (uint64_t)r->idx * RTX_META_LEN, meta,
				   RTX_META_LEN);
		if (rc)
			return rc;
		if (!loco_lllock_is_locked(meta[0]))
			return 0;
		RTX_INC(w, lock_waits);
		if (!loco_lllock_expired(meta[0], rtx_now_ms(w->x)))
			return -EAGAIN;
		rc = rtx_repair(w, r->obj, meta[0]);
		if (rc)
			return rc;
	}
	return -EAGAIN;
}

/* ---- OPT2 pre-locks ------------------------------------------------------
 * A pre-lock is a CAS of the TXObj's lock word from the version read to
 * our no-log word, with a READ of the TXObj behind it on the same QP
 * unless the first READ was whole (loco_rtx_meta_whole): if we got the
 * lock, the data pointer read back is current (a torn first READ shows
 * here; a whole one cannot have torn, and the CAS proves its pointer
 * current). An object pre-locked at its first access gets both in the
 * round trip of its data READ: the CAS succeeds only if nobody
 * committed on the object since its TXObj was read, and then, the lock
 * ours, the pointer stays; so the block the data READ named was the
 * current one whether the READ ran before or after the CAS. */

/* Our no-log lock word for this transaction's pre-locks. */
static int prelock_word(struct loco_rtx_worker *w, uint64_t *plv)
{
	int rc = w->pretag ? 0 : rtx_next_tag(w, w->x->o.max_writes, &w->pretag);
	if (!rc)
		*plv = loco_lllock_make(w->pretag, w->slot, true);
	return rc;
}

/* Add the pre-lock of R (unlocked when read) to B: the CAS (its old word
 * into *OLD), then, unless R's first READ was whole, the TXObj READ into
 * r->vmeta. */
static void prelock_add(struct loco_rtx_worker *w, struct loco_batch *b,
			struct rtx_rent *r, uint64_t plv, uint64_t *old)
{
	const struct loco_rregion *m = rtx_meta(w->x, r->ni);
	uint64_t off = (uint64_t)r->idx * RTX_META_LEN;
	loco_batch_cas(b, m, off + RTX_LOCK_OFF, r->lock, plv, old);
	if (!loco_rtx_meta_whole(r->lock, r->dptr))
		loco_batch_read(b, m, off, r->vmeta, RTX_META_LEN);
}

/* After prelock_add's batch: 0 if R is pre-locked (r->prelock), else
 * -EAGAIN (taken by another: an expired one is noted for repair; or a
 * torn first read, the lock kept in r->prelock for the abort to
 * release). */
static int prelock_done(struct loco_rtx_worker *w, struct rtx_rent *r,
			uint64_t plv, uint64_t old)
{
	if (old != r->lock) {
		if (loco_lllock_expired(old, rtx_now_ms(w->x)))
			rtx_note_expired(w, r->obj, old);
		return -EAGAIN;
	}
	r->prelock = plv;
	w->prelocked = true;
	if (!loco_rtx_meta_whole(r->lock, r->dptr) && r->vmeta[1] != r->dptr)
		return -EAGAIN;
	rtx_crash_point("rtx.prelock_held");
	return 0;
}

/* Post batch B (nothing if empty, but an add's error is returned) and
 * wait for everything the worker posted. */
static int batch_run(struct loco_rtx_worker *w, struct loco_batch *b)
{
	int rc = loco_batch_post(b, &w->ack);
	return rc ? rc : rtx_wait(w, &w->ack);
}

/* Pre-lock R, read before (one round trip). */
static int prelock(struct loco_rtx_worker *w, struct rtx_rent *r)
{
	uint64_t plv, old = 0;
	struct loco_batch b;
	int rc = prelock_word(w, &plv);
	if (rc)
		return rc;
	loco_batch_init(&b, w->thr);
	prelock_add(w, &b, r, plv, &old);
	rc = batch_run(w, &b);
	return rc ? rc : prelock_done(w, r, plv, old);
}

/* ---- reads ----------------------------------------------------------------- */

/* R's data block, or 0 for a null object (whose value reads as zeros at
 * once); -EIO for a pointer outside the pool. */
static int data_block(struct loco_rtx_worker *w, struct rtx_rent *r,
		      uint64_t *block)
{
	*block = loco_rtx_dptr_block(r->dptr);
	r->null = *block == 0;
	if (r->null)
		memset(r->data, 0, w->x->block_len);
	return *block < w->x->nblocks ? 0 : -EIO;
}

/* Add R's data READ to B. */
static int data_add(struct loco_rtx_worker *w, struct loco_batch *b,
		    struct rtx_rent *r)
{
	uint64_t block;
	int rc = data_block(w, r, &block);
	if (!rc && block)
		loco_batch_read(b, &w->x->node[r->ni].data,
				block * w->x->block_len, r->data,
				w->x->o.data_len);
	return rc;
}

/* READ R's data on its own. */
static int fetch_data(struct loco_rtx_worker *w, struct rtx_rent *r)
{
	uint64_t block;
	int rc = data_block(w, r, &block);
	if (!rc && block)
		rc = loco_read(w->thr, &w->x->node[r->ni].data,
			       block * w->x->block_len, r->data,
			       w->x->o.data_len);
	return rc;
}

/* Count R (rs[nr]) into the read set. */
static void rent_keep(struct loco_rtx_worker *w, const struct rtx_rent *r)
{
	if (w->nr && w->rs[0].ni != r->ni)
		w->single_node = false;
	w->nr++;
}

/* Read OBJ into the read set: TXObj, then its data, and with the data
 * the pre-lock when LOCK or the hooks ask for one. */
static int fetch(struct loco_rtx_worker *w, loco_raddr_t obj, bool write,
		 bool lock, struct rtx_rent **out)
{
	uint32_t ni, idx;
	uint64_t meta[2], plv = 0, old = 0;
	struct loco_batch b;
	if (rtx_locate(w->x, obj, &ni, &idx))
		return -EINVAL;
	if (w->nr == w->x->o.max_reads)
		return -E2BIG;
	struct rtx_rent *r = &w->rs[w->nr];
	*r = (struct rtx_rent){ .obj = obj, .ni = ni, .idx = idx, .wi = -1,
				.data = r->data };
	r->cc = (uint8_t)classify(w, obj, write);
	bool pre = lock || r->cc == LOCO_RTX_CC_PRELOCK;
	int rc = fetch_meta(w, r, meta);
	if (!rc && pre)
		rc = prelock_word(w, &plv);
	if (rc)
		return rc;
	r->lock = meta[0];
	r->dptr = meta[1];
	if (pre) {
		loco_batch_init(&b, w->thr);
		rc = data_add(w, &b, r);
		if (!rc)
			prelock_add(w, &b, r, plv, &old);
		if (!rc)
			rc = batch_run(w, &b);
	} else {
		rc = fetch_data(w, r);
	}
	if (rc)
		return rc;
	rent_keep(w, r);
	*out = r;
	return pre ? prelock_done(w, r, plv, old) : 0;
}

/* A new read-set entry for OBJ at rs[w->nr + K] (not counted yet). */
static int rent_new(struct loco_rtx_worker *w, loco_raddr_t obj, unsigned k,
		    struct rtx_rent **out)
{
	uint32_t ni, idx;
	if (rtx_locate(w->x, obj, &ni, &idx))
		return -EINVAL;
	if (w->nr + k >= w->x->o.max_reads)
		return -E2BIG;
	struct rtx_rent *r = &w->rs[w->nr + k];
	*r = (struct rtx_rent){ .obj = obj, .ni = ni, .idx = idx, .wi = -1,
				.data = r->data };
	*out = r;
	return 0;
}

/* What read_many did with each new entry R[i] in its second round. */
struct many_state {
	bool locked[LOCO_RTX_READ_MANY];  /* found locked: left for fetch() */
	bool pre[LOCO_RTX_READ_MANY];     /* pre-lock posted with the data */
	uint64_t old[LOCO_RTX_READ_MANY]; /* its CAS result */
	uint64_t plv;
};

/* The entries R[0..N) (new, at rs[nr..nr+N)) got their TXObj words in
 * META: READ the data of the unlocked ones in one batch, with the
 * pre-locks the hooks ask for; a locked one is left for fetch(). */
static int read_many_data(struct loco_rtx_worker *w, struct rtx_rent **r,
			  unsigned n, uint64_t (*meta)[2],
			  struct many_state *st)
{
	struct loco_batch b;
	int rc = 0;
	loco_batch_init(&b, w->thr);
	for (unsigned i = 0; i < n && !rc; i++) {
		st->pre[i] = false;
		st->locked[i] = loco_lllock_is_locked(meta[i][0]);
		if (st->locked[i])
			continue;
		r[i]->lock = meta[i][0];
		r[i]->dptr = meta[i][1];
		r[i]->cc = (uint8_t)classify(w, r[i]->obj, false);
		uint64_t block;
		rc = data_block(w, r[i], &block);
		if (!rc && block)
			loco_batch_read(&b, &w->x->node[r[i]->ni].data,
					block * w->x->block_len, r[i]->data,
					w->x->o.data_len);
		if (rc || r[i]->cc != LOCO_RTX_CC_PRELOCK)
			continue;
		rc = st->plv ? 0 : prelock_word(w, &st->plv);
		if (!rc)
			prelock_add(w, &b, r[i], st->plv, &st->old[i]);
		st->pre[i] = !rc;
	}
	return rc ? rc : batch_run(w, &b);
}

/* Count the entries read_many fetched (at rs[nr..nr+N), those not
 * locked) into the read set, in order, and settle their pre-locks.
 * Entries are swapped, not copied: each owns its data buffer. */
static int read_many_keep(struct loco_rtx_worker *w, unsigned n,
			  const struct many_state *st)
{
	unsigned first = w->nr;
	int rc = 0;
	for (unsigned i = 0; i < n; i++) {
		if (st->locked[i])
			continue;
		if (first + i != w->nr) {
			struct rtx_rent t = w->rs[w->nr];
			w->rs[w->nr] = w->rs[first + i];
			w->rs[first + i] = t;
		}
		struct rtx_rent *r = &w->rs[w->nr];
		rent_keep(w, r);
		if (st->pre[i]) {
			int rc2 = prelock_done(w, r, st->plv, st->old[i]);
			rc = rc ? rc : rc2;
		}
	}
	return rc;
}

static const void *rent_value(struct loco_rtx_worker *w,
			      const struct rtx_rent *r);

/* VALS of read_many: each object's new entry (AT[i] >= 0, at
 * rs[FIRST + AT[i]] when none was left locked) or loco_rtx_read (an
 * object read before, named twice, or one that was found locked). */
static int read_many_vals(struct loco_rtx_worker *w, unsigned n,
			  const loco_raddr_t *objs, const void **vals,
			  const int8_t *at, unsigned first, bool any_locked)
{
	int rc = 0;
	for (unsigned i = 0; !rc && i < n; i++) {
		if (at[i] >= 0 && !any_locked)
			vals[i] = rent_value(w, &w->rs[first + (unsigned)at[i]]);
		else
			rc = loco_rtx_read(w, objs[i], &vals[i]);
	}
	return rc;
}

int loco_rtx_read_many(struct loco_rtx_worker *w, unsigned n,
		       const loco_raddr_t *objs, const void **vals)
{
	struct rtx_rent *r[LOCO_RTX_READ_MANY];
	uint64_t meta[LOCO_RTX_READ_MANY][2];
	struct many_state st;
	bool any_locked = false;
	int8_t at[LOCO_RTX_READ_MANY];
	unsigned k = 0, first = w->nr;
	if (!w->active || n > LOCO_RTX_READ_MANY)
		return -EINVAL;
	struct loco_batch b;
	loco_batch_init(&b, w->thr);
	for (unsigned i = 0; i < n; i++) {
		bool seen = rs_find(w, objs[i]) != NULL;
		for (unsigned j = 0; j < k && !seen; j++)
			seen = r[j]->obj == objs[i];
		at[i] = -1;
		if (seen)
			continue;
		int rc = rent_new(w, objs[i], k, &r[k]);
		if (rc)
			return rc;
		loco_batch_read(&b, rtx_meta(w->x, r[k]->ni),
				(uint64_t)r[k]->idx * RTX_META_LEN, meta[k],
				RTX_META_LEN);
		at[i] = (int8_t)k++;
	}
	st.plv = 0;
	int rc = k ? batch_run(w, &b) : 0;
	if (!rc && k)
		rc = read_many_data(w, r, k, meta, &st);
	for (unsigned i = 0; !rc && i < k; i++)
		any_locked |= st.locked[i];
	if (!rc && k)
		rc = read_many_keep(w, k, &st);
	return rc ? rc : read_many_vals(w, n, objs, vals, at, first,
					any_locked);
}

static const void *rent_value(struct loco_rtx_worker *w,
			      const struct rtx_rent *r)
{
	if (r->wi >= 0)
		return w->ws[r->wi].data;
	return r->null ? NULL : r->data;
}

int loco_rtx_read(struct loco_rtx_worker *w, loco_raddr_t obj,
		  const void **val)
{
	if (!w->active)
		return -EINVAL;
	struct rtx_rent *r = rs_find(w, obj);
	int rc = r ? 0 : fetch(w, obj, false, false, &r);
	if (!rc)
		*val = rent_value(w, r);
	return rc;
}

/* ---- read for update (commit.c: rtx_update_lock, rtx_commit_early) ------- */

/* Declare R (in the read set) written: a write set entry. */
static void went_add(struct loco_rtx_worker *w, struct rtx_rent *r)
{
	struct rtx_went *e = &w->ws[w->nw];
	*e = (struct rtx_went){ .ri = (uint32_t)(r - w->rs), .data = e->data };
	r->wi = (int32_t)w->nw++;
}

/* Each declared object is written with its current value unless the
 * caller gives another (R's copy: zeros for a null object). */
static void went_fill(struct loco_rtx_worker *w, unsigned n,
		      const loco_raddr_t *objs, const void **vals,
		      struct rtx_rent *const *r)
{
	size_t len = w->x->o.data_len;
	for (unsigned i = 0; i < w->nw; i++) {
		uint8_t *dst = w->ws[i].data;
		const uint8_t *src = w->rs[w->ws[i].ri].data;
		/* One word (as loco_rtx_write) inline, not a libc call. */
		if (len == 8)
			memcpy(dst, src, 8);
		else
			memcpy(dst, src, len);
	}
	for (unsigned i = 0; i < n; i++) {
		/* R[i] is objs[i]'s entry unless read_many placed them. */
		const struct rtx_rent *e = w->upd == RTX_UPD_EARLY ? r[i] :
					   rs_find(w, objs[i]);
		vals[i] = e->null ? NULL : e->data;
	}
}

/* The logged locks go with the data READs only when one QP orders them:
 * every object (and so every new block) on the log's node; a one-object
 * write set keeps OPT1's commit unless no_opt1. */
static bool update_early(const struct loco_rtx_worker *w, unsigned n,
			 struct rtx_rent *const *r)
{
	if (n < 2 && !w->x->o.no_opt1)
		return false;
	for (unsigned i = 0; i < n; i++)
		if (w->x->node[r[i]->ni].id != w->x->home)
			return false;
	return true;
}

/* E1: the TXObjs of R[0..N) in one batch; one found locked takes
 * fetch_meta's repair path on its own. */
static int update_meta(struct loco_rtx_worker *w, unsigned n,
		       struct rtx_rent **r)
{
	uint64_t meta[LOCO_RTX_READ_MANY][2];
	struct loco_batch b;
	loco_batch_init(&b, w->thr);
	for (unsigned i = 0; i < n; i++)
		loco_batch_read(&b, rtx_meta(w->x, r[i]->ni),
				(uint64_t)r[i]->idx * RTX_META_LEN, meta[i],
				RTX_META_LEN);
	int rc = batch_run(w, &b);
	for (unsigned i = 0; !rc && i < n; i++) {
		if (loco_lllock_is_locked(meta[i][0]))
			rc = fetch_meta(w, r[i], meta[i]);
		r[i]->lock = meta[i][0];
		r[i]->dptr = meta[i][1];
		r[i]->cc = (uint8_t)classify(w, r[i]->obj, true);
	}
	return rc;
}

/* The new read set entries R[0..N) (at rs[0..N)), declared written. */
static int update_read(struct loco_rtx_worker *w, unsigned n,
		       const loco_raddr_t *objs, const void **vals,
		       struct rtx_rent **r)
{
	int rc;
	if (!update_early(w, n, r)) {
		rc = loco_rtx_read_many(w, n, objs, vals);
		for (unsigned i = 0; !rc && i < n; i++)
			went_add(w, rs_find(w, objs[i]));
		if (!rc)
			w->upd = RTX_UPD_DECLARED;
		return rc;
	}
	rc = update_meta(w, n, r);
	for (unsigned i = 0; !rc && i < n; i++)
		rent_keep(w, r[i]);
	for (unsigned i = 0; !rc && i < n; i++)
		went_add(w, r[i]);
	return rc ? rc : rtx_update_lock(w);
}

int loco_rtx_read_for_update(struct loco_rtx_worker *w, unsigned n,
			     const loco_raddr_t *objs, const void **vals)
{
	struct rtx_rent *r[LOCO_RTX_READ_MANY];
	if (!w->active || w->nr || w->upd || !n || n > LOCO_RTX_READ_MANY)
		return -EINVAL;
	if (n > w->x->o.max_writes)
		return -E2BIG;
	for (unsigned i = 0; i < n; i++) {
		for (unsigned j = 0; j < i; j++)
			if (objs[j] == objs[i])
				return -EINVAL;
		int rc = rent_new(w, objs[i], i, &r[i]);
		if (rc)
			return rc;
	}
	w->upd = RTX_UPD_FAILED;   /* until it succeeds */
	int rc = update_read(w, n, objs, vals, r);
	if (!rc)
		went_fill(w, n, objs, vals, r);
	return rc;
}

/* A declared write set does not grow: R (OBJ's entry, or NULL) must be
 * in it. */
static int declared(const struct loco_rtx_worker *w, const struct rtx_rent *r)
{
	return !w->upd || (r && r->wi >= 0) ? 0 : -EPERM;
}

int loco_rtx_write(struct loco_rtx_worker *w, loco_raddr_t obj,
		   const void *val)
{
	if (!w->active)
		return -EINVAL;
	struct rtx_rent *r = rs_find(w, obj);
	if (declared(w, r))
		return -EPERM;
	int rc = r ? 0 : fetch(w, obj, true, false, &r);
	if (rc)
		return rc;
	if (r->wi < 0) {
		if (w->nw == w->x->o.max_writes)
			return -E2BIG;
		struct rtx_went *e = &w->ws[w->nw];
		*e = (struct rtx_went){ .ri = (uint32_t)(r - w->rs),
					.data = e->data };
		r->wi = (int32_t)w->nw++;
	}
	uint8_t *dst = w->ws[r->wi].data;
	/* A one-word value (counters, balances, index pointers) inline,
	 * not through a libc call. */
	if (w->x->o.data_len == 8)
		memcpy(dst, val, 8);
	else
		memcpy(dst, val, w->x->o.data_len);
	return 0;
}

int loco_rtx_lock(struct loco_rtx_worker *w, loco_raddr_t obj)
{
	if (!w->active)
		return -EINVAL;
	struct rtx_rent *r = rs_find(w, obj);
	if (declared(w, r))
		return -EPERM;
	if (w->upd == RTX_UPD_EARLY)
		return 0;   /* its logged lock is held */
	int rc = r ? 0 : fetch(w, obj, true, true, &r);
	if (rc)
		return rc;
	return r->prelock ? 0 : prelock(w, r);
}

int loco_rtx_renew(struct loco_rtx_worker *w)
{
	if (!w->active)
		return -EINVAL;
	uint64_t tag, olds[LOCO_BATCH_MAX];
	int rc = rtx_next_tag(w, w->x->o.max_writes, &tag);
	if (rc)
		return rc;
	uint64_t fresh = loco_lllock_make(tag, w->slot, true);
	bool lost = false;
	for (unsigned from = 0; !rc && from < w->nr; from += LOCO_BATCH_MAX) {
		unsigned to = w->nr - from < LOCO_BATCH_MAX ? w->nr : from +
			      LOCO_BATCH_MAX;
		struct loco_batch b;
		struct loco_ack ack = { 0, 0 };
		loco_batch_init(&b, w->thr);
		for (unsigned i = from; i < to; i++) {
			struct rtx_rent *r = &w->rs[i];
			if (r->prelock)
				loco_batch_cas(&b, rtx_meta(w->x, r->ni),
					       (uint64_t)r->idx * RTX_META_LEN +
					       RTX_LOCK_OFF, r->prelock, fresh,
					       &olds[i - from]);
		}
		rc = loco_batch_post(&b, &ack);
		if (!rc)
			rc = rtx_wait(w, &ack);
		for (unsigned i = from; !rc && i < to; i++) {
			struct rtx_rent *r = &w->rs[i];
			if (!r->prelock)
				continue;
			bool kept = olds[i - from] == r->prelock;
			lost |= !kept;
			r->prelock = kept ? fresh : 0;
		}
	}
	if (!rc)
		w->pretag = tag;
	return rc ? rc : lost ? -EAGAIN : 0;
}

/* ---- reading without a transaction ----------------------------------------- */

#define PEEK_CHUNK 16   /* objects per round: 2 ops each in one batch */
#define PEEK_TRIES 16

/* One round over OBJS[0..n): TXObjs, then data + TXObjs again; *MOVED
 * gets a bit per object whose pointer changed between the two reads. */
static int peek_round(struct loco_rtx_worker *w, const loco_raddr_t *objs,
		      unsigned n, uint8_t *vals, uint64_t *locks,
		      uint32_t *moved)
{
	const struct loco_rtx *x = w->x;
	uint64_t meta[PEEK_CHUNK][2], again[PEEK_CHUNK][2];
	uint32_t ni[PEEK_CHUNK], idx[PEEK_CHUNK];
	struct loco_batch b;
	struct loco_ack ack = { 0, 0 };
	loco_batch_init(&b, w->thr);
	for (unsigned i = 0; i < n; i++) {
		if (rtx_locate(x, objs[i], &ni[i], &idx[i]))
			return -EINVAL;
		loco_batch_read(&b, rtx_meta(x, ni[i]),
				(uint64_t)idx[i] * RTX_META_LEN, meta[i],
				RTX_META_LEN);
	}
	int rc = loco_batch_post(&b, &ack);
	if (!rc)
		rc = rtx_wait(w, &ack);
	if (rc)
		return rc;
	loco_batch_init(&b, w->thr);
	for (unsigned i = 0; i < n; i++) {
		uint64_t block = loco_rtx_dptr_block(meta[i][1]);
		uint8_t *v = vals + (size_t)i * x->o.data_len;
		if (block >= x->nblocks)
			return -EIO;
		if (block)
			loco_batch_read(&b, &x->node[ni[i]].data,
					block * x->block_len, v, x->o.data_len);
		else
			memset(v, 0, x->o.data_len);
		/* Same QP, after the data READ: the pointer still names the
		 * block, so the block was not reused while we read it. */
		loco_batch_read(&b, rtx_meta(x, ni[i]),
				(uint64_t)idx[i] * RTX_META_LEN, again[i],
				RTX_META_LEN);
	}
	rc = loco_batch_post(&b, &ack);
	if (!rc)
		rc = rtx_wait(w, &ack);
	*moved = 0;
	for (unsigned i = 0; !rc && i < n; i++) {
		if (again[i][1] != meta[i][1])
			*moved |= UINT32_C(1) << i;
		else if (locks)
			locks[i] = again[i][0];
	}
	return rc;
}

int loco_rtx_peek(struct loco_rtx_worker *w, const loco_raddr_t *objs,
		  unsigned n, void *vals, uint64_t *locks)
{
	uint8_t *v = vals;
	size_t dl = w->x->o.data_len;
	for (unsigned from = 0; from < n; from += PEEK_CHUNK) {
		unsigned k = n - from < PEEK_CHUNK ? n - from : PEEK_CHUNK;
		uint32_t moved = 0;
		int rc = peek_round(w, objs + from, k, v + from * dl,
				    locks ? locks + from : NULL, &moved);
		/* Objects whose pointer moved: again, one at a time. */
		for (unsigned t = 0; !rc && moved && t < PEEK_TRIES; t++) {
			for (unsigned i = 0; !rc && i < k; i++) {
				uint32_t m = 0, bit = UINT32_C(1) << i;
				if (!(moved & bit))
					continue;
				rc = peek_round(w, objs + from + i, 1,
						v + (from + i) * dl,
						locks ? locks + from + i : NULL,
						&m);
				if (!m)
					moved &= ~bit;
			}
		}
		if (rc)
			return rc;
		if (moved)
			return -EAGAIN;
	}
	return 0;
}

/* ---- end of a transaction ------------------------------------------------ */

static void tx_close(struct loco_rtx_worker *w)
{
	int rc = rtx_wait(w, &w->ack);
	if (rc)
		loco_warn(w->x->base.name, "slot %u: ops of the transaction: %s",
			  w->slot, loco_strerror(rc));
	w->active = false;
}

void loco_rtx_abort(struct loco_rtx_worker *w)
{
	if (!w->active)
		return;
	if (w->upd == RTX_UPD_EARLY)
		rtx_abort_early(w);
	rtx_release_prelocks(w);
	tx_close(w);
	RTX_INC(w, aborts);
	rtx_repair_noted(w);
}

int loco_rtx_commit(struct loco_rtx_worker *w)
{
	if (!w->active)
		return -EINVAL;
	int rc;
	if (w->upd == RTX_UPD_FAILED)
		rc = -EAGAIN;
	else if (w->upd == RTX_UPD_EARLY)
		rc = rtx_commit_early(w);
	else if (w->nw == 0)
		rc = rtx_commit_readonly(w);
	else if (w->nw == 1 && !w->x->o.no_opt1)
		rc = rtx_commit_nolog(w);
	else
		rc = rtx_commit_logged(w);
	tx_close(w);
	if (rc) {
		RTX_INC(w, aborts);
		rtx_repair_noted(w);
	} else {
		RTX_INC(w, commits);
	}
	return rc;
}

/* ---- LOCO_RTX_BLOCK ------------------------------------------------------ */

#define BACKOFF_MAX_US 200u

static uint64_t rng_next(struct loco_rtx_worker *w)
{
	uint64_t x = w->rng;  /* xorshift64* */
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	w->rng = x;
	return x * UINT64_C(2685821657736338717);
}

/* Microseconds until a lock with lease LEASE_MS has expired (at the start
 * of that millisecond: loco_lease_over), 0 if it has. */
static unsigned lease_left_us(const struct loco_rtx *x, uint64_t lease_ms)
{
	uint64_t now = rtx_clock_ns() / 1000u;
	uint64_t at = (x->epoch_ms + lease_ms) * 1000u;
	return at > now ? (unsigned)(at - now) : 0;
}

/* Random exponential back-off, cut short at the moment the live lock that
 * stopped us expires: a dead owner's lock is repaired without oversleeping
 * its lease. */
static void backoff(struct loco_rtx_worker *w)
{
	unsigned t = w->block_tries++;
	uint64_t lease = w->wake_lease;
	w->wake_lease = 0;
	if (t < 2)
		return;
	unsigned cap = t < 10 ? 1u << (t - 2) : BACKOFF_MAX_US;
	if (cap > BACKOFF_MAX_US)
		cap = BACKOFF_MAX_US;
	unsigned us = 1 + (unsigned)(rng_next(w) % cap);
	unsigned left = lease ? lease_left_us(w->x, lease) : 0;
	if (left && left < us)
		us = left;
	rtx_sleep_us(us);
}

int loco_rtx_block_start_(struct loco_rtx_worker *w, int *rc)
{
	w->block_t0 = 0;  /* the first failure reads the clock */
	w->block_tries = 0;
	w->wake_lease = 0;
	*rc = loco_rtx_begin(w);
	return *rc == 0;
}

int loco_rtx_block_next_(struct loco_rtx_worker *w, int *rc)
{
	if (*rc == 0)
		*rc = loco_rtx_commit(w);
	else
		loco_rtx_abort(w);
	if (*rc != -EAGAIN && *rc != -EBUSY)
		return 0;
	uint64_t limit = (uint64_t)loco_mgr_timeout_ms(w->x->base.mgr) * 1000000u;
	uint64_t now = loco_now_ns();
	if (!w->block_t0)
		w->block_t0 = now;
	if (now - w->block_t0 > limit) {
		*rc = -ETIMEDOUT;
		return 0;
	}
	backoff(w);
	*rc = loco_rtx_begin(w);
	return *rc == 0;
}
