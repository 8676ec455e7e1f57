/* SPDX-License-Identifier: MIT */
/* Resizing: splitting a full subtable (RACE §3.4.2, extendible hashing).
 *
 * Both modes first pre-lock the subtable's descriptor (an rTX LLLock with a
 * lease, renewed while the resize runs), so one client resizes a
 * subtable at a time and a client that dies while resizing is detected
 * (its lease runs out) and its resize finished by whoever needs it next.
 * Normal operations never take the lock: they are stopped by frozen
 * slots (the M bit), which no operation may CAS.
 *
 * rtx mode (the rTX paper's design): the split of subtable O = (ld, s)
 * is one repairable transaction.
 *   1  pre-lock descriptor s, read it
 *   2  freeze every slot of O: CAS each word to itself | M (a tentative
 *      or empty slot to M alone); the CASes go out in pipelined batches
 *   3  READ the key hash of every item (word 1 of its block), in the same
 *      batches as the CASes (freeze_all says why that is safe)
 *   4  build O' = (ld + 1, s) and N = (ld + 1, s + 2^ld): every item keeps
 *      its bucket and slot index, in O' or N by hash bit ld; WRITE both
 *      into fresh regions named for this attempt (one region, one WRITE,
 *      when they share a memory node), fence
 *   5  rTX commit writing both descriptors: log, locks, DOING, the two
 *      pointer-install CASes, releases, DONE.
 * Frozen, O never changes again: its content, hence O' and N, is the
 * same for whoever runs steps 2-4, so a client that finds O frozen and
 * its descriptor's lock gone (stolen from a dead splitter by rTX repair)
 * simply runs the split again; a dead committer is finished by rTX's own
 * repair from its log. A slow splitter whose lock was stolen writes only
 * its own attempt's regions, which no descriptor will name.
 *
 * cas mode (RACE §3.4.2, slot by slot):
 *   T1 (a transaction): initialise child N = (ld + 1, s + 2^ld) with every
 *      group CLOSED (no insert), publish descriptors s SPLITTING and N
 *      MOVING; clients route N's keys to N and look in O for items not
 *      moved yet
 *   T2 (pre-lock s, held and renewed): per group of O,
 *      a  CAS the group's three headers to (ld + 1, s) (the paper's step 1)
 *      b  freeze the items whose hash bit ld is set (v -> v | M), clear
 *         tentative slots (their inserts retry)
 *      c  CAS each frozen item into the same bucket and slot of N (frozen;
 *         the group there is closed, so the slot is free: idempotent)
 *      d  clear the moved items in O (v | M -> 0)
 *      e  unfreeze them in N, then open N's group (CAS its headers)
 *   then commit descriptors s and N LIVE at depth ld + 1.
 * Every step is a CAS with exact expected values, so a client taking
 * over (the owner's lease ran out) runs the same steps from wherever the
 * state is. */
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loco/rtx/crash.h>
#include "channels/race/internal.h"

#define RENEW_NS (2u * 1000000u)     /* lease renewal period */
#define FREEZE_ROUNDS 64
#define GROUP_ROUNDS 64
#define WAIT_PEEK_EVERY 8            /* wait rounds between lock checks */

/* Renew the lease if due, closing phase PH first (the renewal is
 * phase RENEW). */
static int renew_maybe(struct loco_race_client *c, enum loco_race_phase ph)
{
	uint64_t now = loco_now_ns();
	if (now - c->renew_ns < RENEW_NS)
		return 0;
	race_phase_end(c, ph);
	c->renew_ns = now;
	int rc = loco_rtx_renew(c->w);
	race_phase_end(c, LOCO_RACE_PH_RENEW);
	return rc;
}

static uint64_t slot_word(uint32_t bucket, unsigned j)
{
	return (uint64_t)bucket * 8 + 1 + j;
}

/* ---- descriptors ----------------------------------------------------------------- */

static struct race_desc desc_of(enum race_state st, unsigned ld,
				const struct loco_rregion *rr, unsigned epoch)
{
	return (struct race_desc){
		race_desc_set_epoch(race_desc_w0(st, ld, rr->node), epoch),
		rr->off };
}

static unsigned desc_ld(const struct race_desc *d)
{
	return (unsigned)(d->w0 >> 40) & 0xff;
}

static enum race_state desc_state(const struct race_desc *d)
{
	return (enum race_state)((d->w0 >> 48) & 0xff);
}

static struct loco_rregion desc_rr(const struct loco_race *r,
				   const struct race_desc *d)
{
	return (struct loco_rregion){ .node = (uint32_t)(d->w0 & 0xffff),
				      .space = LOCO_SPACE_ARENA, .off = d->off,
				      .len = r->st_bytes };
}

/* Begin a transaction holding descriptor S's lock; *D its value (a copy).
 * A holder whose transaction rTX repaired on the way (its lease ran out)
 * is fenced before we act on the subtable (its late ops must not land):
 * with our lock released, since a fence may wait past our own lease
 * (the repair had freed the lock to anyone already), then we lock again. */
static int lock_desc(struct loco_race_client *c, uint32_t s,
		     struct race_desc *d)
{
	loco_raddr_t obj = race_desc_obj(c->r, s);
	for (;;) {
		const struct race_desc *v = NULL;
		int rc = loco_rtx_begin(c->w);
		if (rc)
			return rc;
		rc = loco_rtx_lock(c->w, obj);
		if (!rc)
			rc = loco_rtx_read(c->w, obj, (const void **)&v);
		if (!rc && !race_fence_pending(c)) {
			*d = v ? *v : (struct race_desc){ 0, 0 };
			c->renew_ns = loco_now_ns();
			return 0;
		}
		loco_rtx_abort(c->w);
		if (!rc)
			rc = race_fence_owed(c);
		if (rc)
			return rc == -EBUSY ? -EAGAIN : rc;
	}
}

static int commit_descs(struct loco_race_client *c, uint32_t s1,
			const struct race_desc *d1, uint32_t s2,
			const struct race_desc *d2)
{
	int rc = loco_rtx_write(c->w, race_desc_obj(c->r, s1), d1);
	if (!rc)
		rc = loco_rtx_write(c->w, race_desc_obj(c->r, s2), d2);
	if (rc) {
		loco_rtx_abort(c->w);
		return rc;
	}
	return loco_rtx_commit(c->w);
}

/* A fresh region for N subtables from (LD, SUFFIX) on, named for this
 * attempt (one control-plane request). */
static int new_block(struct loco_race_client *c, unsigned ld, uint32_t suffix,
		     unsigned n, struct loco_rregion *rr)
{
	const struct loco_race *r = c->r;
	char name[LOCO_NAME_MAX];
	snprintf(name, sizeof(name), "%s.st%u-%u-%u-%llu-%u", r->base.name, ld,
		 suffix, c->slot, (unsigned long long)c->inc, ++c->split_seq);
	return loco_region_open_ex(r->base.mgr, r->mn[race_node_for(r, suffix)].id,
				   name, (uint64_t)n * r->st_bytes, RACE_ST_ACCESS,
				   rr);
}

/* ---- rtx mode --------------------------------------------------------------------- */

static uint64_t frozen_of(uint64_t v)
{
	return race_slot_tent(v) || !v ? RACE_SLOT_M : v | RACE_SLOT_M;
}

/* The hash READs of a freeze round, coalesced: items whose blocks lie
 * close together on one node are read by one READ over the blocks
 * between (a verb costs a NIC and its poster more than HASH_GAP bytes
 * more of a READ). A table whose subtables are few, or filled by few
 * clients, has many neighbouring blocks; a deep one filled by many
 * clients has almost none, and gets a READ an item. */
#define HASH_GAP 128            /* bytes a READ may skip to reach a hash */
#define HASH_RUN_MAX 65536      /* bytes of one hash READ at most */
#define HASH_BUF_WORDS 131072   /* a round's READs in 1 MiB, bar singles */
#define KEY_SHIFT 23            /* slot index bits */

struct freeze {
	uint64_t *res;          /* CAS results, a word per slot */
	uint64_t *h;            /* the items' hashes, a word per slot */
	uint8_t *hv;            /* per slot: h read */
	uint64_t *key, *tmp;    /* (node << 30 | block) << KEY_SHIFT | slot */
	uint32_t *at;           /* per sorted key: its word in buf */
	uint64_t *buf;          /* what the round's hash READs return */
	uint32_t n;             /* keys of the round */
};

static_assert(RACE_ST_BYTES_MAX / RACE_BUCKET_BYTES * RACE_SLOTS <
	      1u << KEY_SHIFT, "a slot index fits in a key");

/* Note the hash READ of the item in slot value V (slot K). */
static int hash_need(const struct loco_race *r, struct freeze *f, uint64_t v,
		     uint32_t k)
{
	uint64_t ni = race_slot_ni(v), b = race_slot_block(v);
	if (ni >= r->nmn || b >= r->nblocks)
		return -EPROTO;
	f->key[f->n++] = (ni << 30 | b) << KEY_SHIFT | k;
	return 0;
}

/* Sort F's keys by node and block (LSD radix, 12 bits a pass). */
static void keys_sort(struct freeze *f)
{
	uint64_t *a = f->key, *t = f->tmp;
	for (unsigned sh = KEY_SHIFT; sh < KEY_SHIFT + 36; sh += 12) {
		uint32_t cnt[4097] = { 0 };
		for (uint32_t i = 0; i < f->n; i++)
			cnt[((a[i] >> sh) & 4095) + 1]++;
		for (unsigned d = 0; d < 4096; d++)
			cnt[d + 1] += cnt[d];
		for (uint32_t i = 0; i < f->n; i++)
			t[cnt[(a[i] >> sh) & 4095]++] = a[i];
		uint64_t *x = a;
		a = t;
		t = x;
	}
	f->key = a;
	f->tmp = t;
}

/* One hash READ of the blocks FIRST..LAST (node << 30 | block) into
 * f->buf at word AT, if L. */
static void hash_read(struct race_ops *l, const struct loco_race *r,
		      struct freeze *f, uint64_t first, uint64_t last, uint64_t at)
{
	uint64_t bl = r->block_len;
	if (l)
		race_ops_read(l, race_kv(r, (unsigned)(first >> 30)),
			      (first & ((UINT64_C(1) << 30) - 1)) * bl + 8,
			      f->buf + at, (uint32_t)((last - first) * bl + 8));
}

/* Walk F's sorted keys into READs: with L, post them into f->buf; without,
 * only count the words they need. A run that would take the buffer over
 * HASH_BUF_WORDS is read an item at a time (the buffer stays under
 * HASH_BUF_WORDS + a word an item). Returns the words. */
static uint64_t hash_runs(struct race_ops *l, const struct loco_race *r,
			  struct freeze *f)
{
	uint64_t words = 0, bl = r->block_len;
	for (uint32_t i = 0, j; i < f->n; i = j) {
		uint64_t first = f->key[i] >> KEY_SHIFT, last = first;
		for (j = i + 1; j < f->n; j++) {
			uint64_t nx = f->key[j] >> KEY_SHIFT;
			if (nx >> 30 != first >> 30 || (nx - last) * bl > HASH_GAP ||
			    (nx - first) * bl + 8 > HASH_RUN_MAX)
				break;
			last = nx;
		}
		uint64_t run = (last - first) * bl / 8 + 1;
		if (j - i > 1 && words + run > HASH_BUF_WORDS) {
			for (uint32_t m = i; m < j; m++, words++) {
				uint64_t b = f->key[m] >> KEY_SHIFT;
				f->at[m] = (uint32_t)words;
				hash_read(l, r, f, b, b, words);
			}
			continue;
		}
		for (uint32_t m = i; m < j; m++)
			f->at[m] = (uint32_t)(words + ((f->key[m] >> KEY_SHIFT) -
						       first) * bl / 8);
		hash_read(l, r, f, first, last, words);
		words += run;
	}
	return words;
}

/* Post the round's hash READs into L. */
static int hash_post(struct race_ops *l, const struct loco_race *r,
		     struct freeze *f)
{
	keys_sort(f);
	f->buf = malloc((size_t)hash_runs(NULL, r, f) * 8);
	if (!f->buf)
		return -ENOMEM;
	hash_runs(l, r, f);
	return 0;
}

/* The round's READs done: each item's hash to f->h. */
static void hash_take(struct freeze *f)
{
	for (uint32_t i = 0; i < f->n; i++)
		f->h[f->key[i] & ((1u << KEY_SHIFT) - 1)] = f->buf[f->at[i]];
}

/* A freeze round's CASes done: a hit freezes the slot in SNAP (and its
 * hash READ counts), a miss leaves SNAP the value found. */
static void freeze_apply(uint64_t *snap, struct freeze *f, uint32_t nk)
{
	for (uint32_t k = 0; k < nk; k++) {
		uint64_t w = slot_word(k / RACE_SLOTS, k % RACE_SLOTS);
		if (race_slot_frozen(snap[w]) || f->res[k] == UINT64_MAX)
			continue;
		if (f->res[k] == snap[w]) {
			snap[w] = frozen_of(snap[w]);
			f->hv[k] = race_slot_item(snap[w]);
		} else
			snap[w] = f->res[k];
		f->res[k] = UINT64_MAX;
	}
}

/* Freeze every slot of ST and read the key hash of every item: SNAP
 * (st_bytes) ends with the frozen words, f->h with the hashes of its
 * items (f->hv marks those read; zeroed by the caller). Each item's hash
 * READ goes out in the round of its freeze CAS, unordered with it: a CAS
 * that hits proves the slot held the item from the snapshot READ on (no
 * ABA: a freed block comes back with another generation), and frozen it
 * keeps it for good, so its block is never freed and word 1 is the item's
 * hash whenever the READ executes; the READ of a CAS that missed is
 * dropped and redone with the value the CAS found. An item found frozen
 * (a dead or slow splitter's) gets its READ alone. */
static int freeze_all(struct loco_race_client *c, const struct race_st *st,
		      uint64_t *snap, struct freeze *f, bool *took_over)
{
	const struct loco_race *r = c->r;
	uint32_t nk = 3 * r->groups * RACE_SLOTS;
	int rc = loco_read(c->thr, &st->rr, 0, snap, r->st_bytes);
	for (uint32_t k = 0; !rc && k < nk; k++)
		*took_over |= race_slot_frozen(snap[slot_word(k / RACE_SLOTS,
							      k % RACE_SLOTS)]);
	for (unsigned round = 0; !rc; round++) {
		struct race_ops l;
		unsigned ncas = 0;
		bool split_point = loco_crash_armed("race.split_mid_freeze");
		if (round == FREEZE_ROUNDS)
			return -EAGAIN;
		race_ops_init(&l, c);
		f->n = 0;
		f->buf = NULL;
		for (uint32_t k = 0; !rc && k < nk; k++) {
			uint64_t w = slot_word(k / RACE_SLOTS, k % RACE_SLOTS);
			uint64_t v = snap[w];
			if (race_slot_frozen(v)) {
				if (race_slot_item(v) && !f->hv[k]) {
					rc = hash_need(r, f, v, k);
					f->hv[k] = 1;
				}
				continue;
			}
			if (split_point && ncas == nk / 2)
				continue;
			race_ops_cas(&l, &st->rr, w * 8, v, frozen_of(v), &f->res[k]);
			if (race_slot_item(frozen_of(v)))
				rc = hash_need(r, f, v, k);
			ncas++;
		}
		if (!rc && f->n)
			rc = hash_post(&l, r, f);
		/* Wait even after an error: the ops write into F. */
		int rc2 = race_ops_run(&l);
		rc = rc ? rc : rc2;
		if (!rc)
			hash_take(f);
		free(f->buf);
		if (rc || !(ncas + f->n))
			return rc;
		freeze_apply(snap, f, nk);
		if (split_point)
			race_point("race.split_mid_freeze");
		rc = renew_maybe(c, LOCO_RACE_PH_FREEZE);
	}
	return rc;
}

/* O' and N from the frozen SNAP: same bucket and slot, split by bit LD. */
static unsigned build_halves(const struct loco_race *r, const uint64_t *snap,
			     const uint64_t *h, unsigned ld, uint32_t s,
			     uint64_t *lo, uint64_t *hi)
{
	uint32_t nb = 3 * r->groups;
	unsigned moved = 0;
	memset(lo, 0, r->st_bytes);
	memset(hi, 0, r->st_bytes);
	for (uint32_t b = 0; b < nb; b++) {
		lo[b * 8] = race_hdr(ld + 1, s, false);
		hi[b * 8] = race_hdr(ld + 1, s | UINT32_C(1) << ld, false);
		for (unsigned j = 0; j < RACE_SLOTS; j++) {
			uint64_t w = slot_word(b, j), v = snap[w];
			if (!race_slot_item(v))
				continue;
			bool up = (h[b * RACE_SLOTS + j] >> ld) & 1;
			(up ? hi : lo)[w] = race_slot_plain(v);
			moved += up;
		}
	}
	return moved;
}

/* Write O' (LO) and N (HI = LO + st_bytes, adjacent) into fresh regions
 * of split ST (one region when they share a node): placed, and
 * on durable nodes persisted together with ST's frozen slots, before the
 * commit's descriptors name them (a power cut after the commit must find
 * O' and N whole, and O frozen for the clients that still read it). */
static int write_halves(struct loco_race_client *c, const struct race_st *st,
			const uint64_t *lo, const uint64_t *hi,
			struct loco_rregion *rlo, struct loco_rregion *rhi)
{
	const struct loco_race *r = c->r;
	unsigned ld = st->ld;
	uint32_t ns = st->suffix | UINT32_C(1) << ld;
	int rc;
	if (race_node_for(r, ns) == race_node_for(r, st->suffix)) {
		/* Both on one node: one region, O' then N, one WRITE. */
		rc = new_block(c, ld + 1, st->suffix, 2, rlo);
		race_phase_end(c, LOCO_RACE_PH_REGION);
		if (!rc)
			rc = loco_write(c->thr, rlo, 0, lo, 2 * r->st_bytes);
		if (!rc) {
			*rhi = *rlo;
			rhi->off += r->st_bytes;
			rlo->len = rhi->len = r->st_bytes;
		}
	} else {
		rc = new_block(c, ld + 1, st->suffix, 1, rlo);
		if (!rc)
			rc = new_block(c, ld + 1, ns, 1, rhi);
		race_phase_end(c, LOCO_RACE_PH_REGION);
		if (!rc)
			rc = loco_write(c->thr, rlo, 0, lo, r->st_bytes);
		if (!rc)
			rc = loco_write(c->thr, rhi, 0, hi, r->st_bytes);
	}
	if (rc)
		return rc;
	if (!race_durable(r, rlo->node) && !race_durable(r, rhi->node) &&
	    !race_durable(r, st->rr.node))
		return loco_fence(c->thr, LOCO_FENCE_THREAD, 0);
	rc = race_persist_post(c, rlo->node);
	if (!rc && rhi->node != rlo->node)
		rc = race_persist_post(c, rhi->node);
	if (!rc)
		rc = race_persist_seen(c, &st->rr, 0, r->st_bytes);
	return rc ? rc : race_pend_wait(c);
}

static int split_rtx(struct loco_race_client *c, const struct race_st *st,
		     bool *took_over)
{
	const struct loco_race *r = c->r;
	size_t nk = 3 * (size_t)r->groups * RACE_SLOTS;
	uint64_t *snap = (uint64_t *)c->big;
	uint64_t *lo = snap + r->st_bytes / 8, *hi = lo + r->st_bytes / 8;
	uint64_t *mem = malloc(nk * (4 * 8 + 4 + 1));
	struct loco_rregion rlo, rhi;
	if (!mem)
		return -ENOMEM;
	struct freeze f = { .res = mem, .h = mem + nk, .key = mem + 2 * nk,
			    .tmp = mem + 3 * nk,
			    .at = (uint32_t *)(mem + 4 * nk),
			    .hv = (uint8_t *)(mem + 4 * nk) + 4 * nk };
	memset(f.res, 0xff, nk * 8);
	memset(f.hv, 0, nk);
	int rc = freeze_all(c, st, snap, &f, took_over);
	race_phase_end(c, LOCO_RACE_PH_FREEZE);
	if (!rc)
		race_point("race.split_frozen");
	if (!rc) {
		race_count(c, RACE_STAT(moved),
			   build_halves(r, snap, f.h, st->ld, st->suffix, lo, hi));
		race_phase_end(c, LOCO_RACE_PH_BUILD);
		rc = write_halves(c, st, lo, hi, &rlo, &rhi);
		race_phase_end(c, LOCO_RACE_PH_WRITE);
	}
	free(mem);
	if (rc) {
		loco_rtx_abort(c->w);
		return rc;
	}
	race_point("race.split_written");
	struct race_desc dlo = desc_of(RACE_LIVE, st->ld + 1, &rlo, 0);
	struct race_desc dhi = desc_of(RACE_LIVE, st->ld + 1, &rhi, 0);
	rc = commit_descs(c, st->suffix, &dlo,
			  st->suffix | UINT32_C(1) << st->ld, &dhi);
	race_phase_end(c, LOCO_RACE_PH_COMMIT);
	return rc;
}

/* ---- cas mode --------------------------------------------------------------------- */

struct move {
	struct loco_rregion o, n;
	unsigned ld;               /* the parent's depth before the split */
	uint32_t s;
	unsigned ep;               /* this mover's epoch (internal.h) */
	uint64_t ow[3 * 8], nw[3 * 8];   /* a group of O, of N */
	uint64_t h[3 * RACE_SLOTS];      /* item hashes */
	uint64_t fpw[3 * RACE_SLOTS];    /* per slot: the committed word we
					  * froze (its fingerprint), 0 */
	uint8_t fph[3 * RACE_SLOTS];     /* per slot: h[k] is N's item's */
	uint64_t res[3 * 8 + 3];
};

static uint64_t grp_off(uint32_t g)
{
	return (uint64_t)g * RACE_GROUP_BYTES;
}

/* A closed-empty word of epoch EP (0 in the broken variant without
 * epochs, as before them). */
static uint64_t closed_empty(const struct loco_race *r, unsigned ep)
{
	return r->o.broken & LOCO_RACE_BROKEN_NO_EPOCH ? 0 :
	       race_slot_mark(0, ep);
}

static uint64_t closed_hdr(const struct move *m)
{
	return race_hdr(m->ld + 1, m->s | UINT32_C(1) << m->ld, true);
}

/* READ O's and N's group G behind what L holds. */
static void group_reads(struct race_ops *l, struct move *m, uint32_t g)
{
	race_ops_read(l, &m->o, grp_off(g), m->ow, RACE_GROUP_BYTES);
	race_ops_read(l, &m->n, grp_off(g), m->nw, RACE_GROUP_BYTES);
}

/* a: O's group headers to depth ld + 1, then READ the group (and N's). */
static int group_headers(struct loco_race_client *c, struct move *m, uint32_t g)
{
	uint64_t from = race_hdr(m->ld, m->s, false);
	uint64_t to = race_hdr(m->ld + 1, m->s, false);
	struct race_ops l;
	race_ops_init(&l, c);
	for (unsigned k = 0; k < 3; k++)
		race_ops_cas(&l, &m->o, grp_off(g) + k * RACE_BUCKET_BYTES, from, to,
		       &m->res[k]);
	group_reads(&l, m, g);
	int rc = race_ops_run_durable(&l, m->o.node);
	for (unsigned k = 0; !rc && k < 3; k++)
		if (m->res[k] != from && m->res[k] != to)
			/* Deeper already: this move was finished, and the
			 * parent split again, by others while we stalled. */
			rc = race_hdr_ld(m->res[k]) > m->ld + 1 ? -EAGAIN : -EPROTO;
	return rc;
}

static uint64_t ow_slot(const struct move *m, unsigned k)
{
	return m->ow[(k / RACE_SLOTS) * 8 + 1 + k % RACE_SLOTS];
}

static uint64_t nw_slot(const struct move *m, unsigned k)
{
	return m->nw[(k / RACE_SLOTS) * 8 + 1 + k % RACE_SLOTS];
}

static uint64_t kslot_off(uint32_t g, unsigned k)
{
	return grp_off(g) + (k / RACE_SLOTS) * RACE_BUCKET_BYTES + 8 +
	       8 * (k % RACE_SLOTS);
}

/* A frozen word of another mover's epoch (one we took the move over
 * from, or a stale one). */
static bool foreign(const struct move *m, uint64_t v)
{
	return race_slot_frozen(v) && race_slot_epoch(v) != (m->ep & 0xff);
}

/* b: freeze the items bound for N (v -> v marked with our epoch), clear
 * tentative slots, and re-mark with our epoch every word of another
 * mover's in O's group and N's (N is MOVING, so every frozen word there
 * is this move's), so that none of that mover's CASes can hit from now
 * on; until a round has nothing to do (then the group READs are what
 * the freeze left). */
static int group_freeze(struct loco_race_client *c, struct move *m, uint32_t g)
{
	const struct loco_race *r = c->r;
	for (unsigned round = 0; round < GROUP_ROUNDS; round++) {
		struct race_ops l;
		race_ops_init(&l, c);
		for (unsigned k = 0; k < 3 * RACE_SLOTS; k++) {
			uint64_t v = ow_slot(m, k);
			if (!race_slot_item(v) || race_slot_frozen(v) ||
			    race_slot_tent(v))
				continue;
			if (race_slot_ni(v) >= r->nmn ||
			    race_slot_block(v) >= r->nblocks)
				return -EPROTO;
			race_ops_read(&l, race_kv(r, race_slot_ni(v)),
				(uint64_t)race_slot_block(v) * r->block_len + 8,
				&m->h[k], 8);
		}
		int rc = race_ops_run(&l);
		if (rc)
			return rc;
		unsigned n = 0;
		race_ops_init(&l, c);
		for (unsigned k = 0; k < 3 * RACE_SLOTS; k++) {
			uint64_t v = ow_slot(m, k), nv = nw_slot(m, k), to;
			if (foreign(m, nv)) {
				race_ops_cas(&l, &m->n, kslot_off(g, k), nv,
					     race_slot_mark(nv, m->ep), &m->res[k]);
				n++;
			}
			if (!v || (race_slot_frozen(v) && !foreign(m, v)))
				continue;
			if (race_slot_frozen(v))
				to = race_slot_mark(v, m->ep);
			else if (race_slot_tent(v))
				to = 0;
			else if ((m->h[k] >> m->ld) & 1) {
				to = race_slot_mark(v, m->ep);
				m->fpw[k] = v;
			} else
				continue;
			race_ops_cas(&l, &m->o, kslot_off(g, k), v, to, &m->res[k]);
			n++;
		}
		if (!n)
			return 0;
		/* Then READ the groups again behind the CASes. */
		group_reads(&l, m, g);
		rc = race_ops_run_durable(&l, m->o.node);
		if (!rc && m->n.node != m->o.node)
			rc = race_persist(c, m->n.node);
		if (rc)
			return rc;
	}
	return -EAGAIN;
}

/* c: copy every frozen item of O's group into the same slot of N, where
 * our closed-empty word is (an earlier mover's copy there was re-marked
 * ours by step b). */
static int group_copy(struct loco_race_client *c, struct move *m, uint32_t g)
{
	uint64_t empty = closed_empty(c->r, m->ep);
	struct race_ops l;
	unsigned n = 0;
	race_ops_init(&l, c);
	for (unsigned k = 0; k < 3 * RACE_SLOTS; k++) {
		uint64_t v = ow_slot(m, k);
		if (!race_slot_frozen(v) || !race_slot_item(v))
			continue;
		race_ops_cas(&l, &m->n, kslot_off(g, k), empty, v, &m->res[k]);
		n++;
	}
	int rc = race_ops_run_durable(&l, m->n.node);
	for (unsigned k = 0; !rc && n && k < 3 * RACE_SLOTS; k++) {
		uint64_t v = ow_slot(m, k), got = m->res[k];
		if (!race_slot_frozen(v) || !race_slot_item(v) ||
		    got == empty || got == v)
			continue;
		/* Not our closed-empty word nor our copy: a takeover
		 * re-marked the group (we are the stale mover), or it was
		 * finished. Stop; whoever holds the move goes on. */
		rc = -EAGAIN;
	}
	return rc;
}

/* d: clear the moved items from O. */
static int group_clear(struct loco_race_client *c, struct move *m, uint32_t g)
{
	struct race_ops l;
	race_ops_init(&l, c);
	for (unsigned k = 0; k < 3 * RACE_SLOTS; k++) {
		uint64_t v = ow_slot(m, k);
		if (race_slot_frozen(v) && race_slot_item(v))
			race_ops_cas(&l, &m->o, kslot_off(g, k), v, 0, &m->res[k]);
	}
	return race_ops_run_durable(&l, m->o.node);
}

/* The fingerprints of N's frozen items in NW whose O copy we did not
 * freeze ourselves (an earlier mover's, whose O copy is gone): from
 * their blocks' hash words, one round trip. */
static int group_fps(struct loco_race_client *c, struct move *m)
{
	const struct loco_race *r = c->r;
	struct race_ops l;
	bool any = false;
	race_ops_init(&l, c);
	for (unsigned k = 0; k < 3 * RACE_SLOTS; k++) {
		uint64_t v = nw_slot(m, k);
		if (!race_slot_frozen(v) || !race_slot_item(v) ||
		    (m->fpw[k] && race_slot_same(v, m->fpw[k])))
			continue;
		if (race_slot_ni(v) >= r->nmn || race_slot_block(v) >= r->nblocks)
			return -EPROTO;
		race_ops_read(&l, race_kv(r, race_slot_ni(v)),
			      (uint64_t)race_slot_block(v) * r->block_len + 8,
			      &m->h[k], 8);
		m->fph[k] = 1;
		any = true;
	}
	return any ? race_ops_run(&l) : 0;
}

/* e: unfreeze N's group (items of our epoch back to their committed
 * word, closed-empty words to 0), then open it. */
static int group_open(struct loco_race_client *c, struct move *m, uint32_t g)
{
	uint64_t closed = closed_hdr(m);
	uint64_t open = race_hdr(m->ld + 1, m->s | UINT32_C(1) << m->ld, false);
	int rc = loco_read(c->thr, &m->n, grp_off(g), m->nw, RACE_GROUP_BYTES);
	if (!rc)
		rc = group_fps(c, m);
	if (rc)
		return rc;
	struct race_ops l;
	race_ops_init(&l, c);
	for (unsigned k = 0; k < 3 * RACE_SLOTS; k++) {
		uint64_t v = nw_slot(m, k), to = 0;
		if (!race_slot_frozen(v))
			continue;
		if (foreign(m, v))
			return -EAGAIN;   /* re-marked: we are stale */
		if (race_slot_item(v)) {
			uint8_t fp = m->fph[k] ? (uint8_t)(m->h[k] >> 56) :
				     race_slot_fp(m->fpw[k]);
			to = (v & ~(UINT64_C(0xff) << 56) & ~RACE_SLOT_M) |
			     (uint64_t)fp << 56;
		}
		race_ops_cas(&l, &m->n, kslot_off(g, k), v, to, &m->res[k]);
	}
	/* Same QP, after the unfreezing CASes: open last. */
	for (unsigned b = 0; b < 3; b++)
		race_ops_cas(&l, &m->n, grp_off(g) + b * RACE_BUCKET_BYTES, closed, open,
		       &m->res[3 * RACE_SLOTS + b]);
	return race_ops_run_durable(&l, m->n.node);
}

/* Steps a-e on group G. Ordering: each step's CASes are complete before
 * the next step posts (race_ops_run waits; a completed CAS has executed
 * at its target, unlike a completed WRITE), so across O's and N's QPs the
 * headers change before any slot, and an item is in N before it leaves O.
 * On durable nodes each step's round also persists its CASes, so what a
 * power cut leaves is a prefix of the steps, from which whoever takes the
 * move over goes on. */
static int move_group(struct loco_race_client *c, struct move *m, uint32_t g)
{
	memset(m->fpw, 0, sizeof(m->fpw));
	memset(m->fph, 0, sizeof(m->fph));
	int rc = group_headers(c, m, g);
	race_phase_end(c, LOCO_RACE_PH_HEADERS);
	if (!rc) {
		rc = group_freeze(c, m, g);
		race_phase_end(c, LOCO_RACE_PH_FREEZE);
	}
	if (!rc)
		race_point("race.after_group_freeze");
	if (!rc) {
		rc = group_copy(c, m, g);
		race_phase_end(c, LOCO_RACE_PH_COPY);
	}
	if (!rc && g == 0)
		race_point("race.cas_mid_group");
	if (!rc) {
		rc = group_clear(c, m, g);
		race_phase_end(c, LOCO_RACE_PH_CLEAR);
	}
	if (!rc) {
		rc = group_open(c, m, g);
		race_phase_end(c, LOCO_RACE_PH_OPEN);
	}
	for (unsigned k = 0; !rc && k < 3 * RACE_SLOTS; k++)
		if (race_slot_frozen(ow_slot(m, k)) && race_slot_item(ow_slot(m, k)))
			race_count(c, RACE_STAT(moved), 1);
	return rc;
}

/* T2 with the lock on the parent S held (D: its value, with our epoch). */
static int move_all(struct loco_race_client *c, uint32_t s,
		    const struct race_desc *d)
{
	const struct loco_race *r = c->r;
	const struct race_desc *dn = NULL;
	unsigned ld = desc_ld(d), ep = race_desc_epoch(d->w0);
	uint32_t ns = s | UINT32_C(1) << ld;
	int rc = loco_rtx_read(c->w, race_desc_obj(r, ns), (const void **)&dn);
	if (!rc && (!dn || desc_state(dn) != RACE_MOVING))
		rc = -EPROTO;
	struct move *m = rc ? NULL : calloc(1, sizeof(*m));
	if (!rc && !m)
		rc = -ENOMEM;
	if (m) {
		m->o = desc_rr(r, d);
		m->n = desc_rr(r, dn);
		m->ld = ld;
		m->s = s;
		m->ep = ep;
	}
	race_phase_end(c, LOCO_RACE_PH_LOCK);
	for (uint32_t g = 0; !rc && g < r->groups; g++) {
		rc = move_group(c, m, g);
		if (!rc && g == r->groups / 2)
			race_point("race.cas_mid_move");
		if (!rc)
			rc = renew_maybe(c, LOCO_RACE_PH_OPEN);
	}
	if (rc) {
		free(m);
		loco_rtx_abort(c->w);
		return rc;
	}
	race_point("race.cas_moved");
	struct race_desc lo = desc_of(RACE_LIVE, ld + 1, &m->o, ep);
	struct race_desc hi = desc_of(RACE_LIVE, ld + 1, &m->n, ep);
	free(m);
	rc = commit_descs(c, s, &lo, ns, &hi);
	race_phase_end(c, LOCO_RACE_PH_COMMIT);
	return rc;
}

/* Lock parent S for its move, under an epoch of our own: MINE (the
 * epoch our T1 published, -1 for none) if the descriptor still has it,
 * else a new one, committed before we move (one more transaction), so
 * that the words of whoever moved before us can be told from ours. 0 with
 * the lock held and *D the value; 1: no move left (finished meanwhile;
 * nothing held); or an error. */
static int lock_move(struct loco_race_client *c, uint32_t s, int mine,
		     struct race_desc *d)
{
	for (;;) {
		int rc = lock_desc(c, s, d);
		if (rc)
			return rc;
		if (!(d->w0 & RACE_DESC_VALID) || desc_state(d) != RACE_SPLITTING) {
			loco_rtx_abort(c->w);
			return 1;
		}
		unsigned ep = race_desc_epoch(d->w0);
		if (mine == (int)ep || (c->r->o.broken & LOCO_RACE_BROKEN_NO_EPOCH))
			return 0;
		struct race_desc nd = { race_desc_set_epoch(d->w0, ep + 1), d->off };
		rc = loco_rtx_write(c->w, race_desc_obj(c->r, s), &nd);
		if (rc) {
			loco_rtx_abort(c->w);
			return rc;
		}
		rc = loco_rtx_commit(c->w);
		if (rc)
			return rc;
		mine = (int)((ep + 1) & 0xff);
	}
}

/* Lock and move parent S; a split counted from T0 (the phase clock
 * running). */
static int move_finish(struct loco_race_client *c, uint32_t s, bool takeover,
		       int mine, uint64_t t0)
{
	struct race_desc d;
	int rc = lock_move(c, s, mine, &d);
	race_phase_end(c, LOCO_RACE_PH_LOCK);
	if (rc)
		return rc > 0 ? 0 : rc;
	rc = move_all(c, s, &d);
	if (!rc && takeover)
		RACE_INC(c, takeovers);
	if (!rc) {
		RACE_INC(c, splits);
		race_count(c, RACE_STAT(split_ns), loco_now_ns() - t0);
	}
	return rc;
}

int race_move_finish(struct loco_race_client *c, uint32_t s, bool takeover)
{
	race_phase_start(c);
	return move_finish(c, s, takeover, -1, c->ph_ns);
}

/* T1: child N initialised CLOSED (closed-empty words of the move's
 * epoch, the parent's next) and published with the parent SPLITTING;
 * then T2. */
static int split_cas(struct loco_race_client *c, const struct race_st *st,
		     const struct race_desc *d, uint64_t t0)
{
	const struct loco_race *r = c->r;
	uint32_t ns = st->suffix | UINT32_C(1) << st->ld;
	unsigned ep = (race_desc_epoch(d->w0) + 1) & 0xff;
	uint64_t *init = (uint64_t *)c->big;
	struct loco_rregion rn;
	for (uint32_t b = 0; b < 3 * r->groups; b++) {
		init[b * 8] = race_hdr(st->ld + 1, ns, true);
		for (unsigned j = 0; j < RACE_SLOTS; j++)
			init[slot_word(b, j)] = closed_empty(r, ep);
	}
	race_phase_end(c, LOCO_RACE_PH_BUILD);
	int rc = new_block(c, st->ld + 1, ns, 1, &rn);
	race_phase_end(c, LOCO_RACE_PH_REGION);
	if (!rc)
		rc = loco_write(c->thr, &rn, 0, init, r->st_bytes);
	/* N's headers are placed (durable on a durable node) before a
	 * descriptor names it. */
	if (!rc)
		rc = race_durable(r, rn.node) ? race_persist(c, rn.node) :
		     loco_fence(c->thr, LOCO_FENCE_THREAD, 0);
	race_phase_end(c, LOCO_RACE_PH_WRITE);
	if (rc) {
		loco_rtx_abort(c->w);
		return rc;
	}
	struct race_desc dp = { race_desc_set_epoch(
		race_desc_w0(RACE_SPLITTING, st->ld, (uint32_t)(d->w0 & 0xffff)),
		ep), d->off };
	struct race_desc dn = desc_of(RACE_MOVING, st->ld + 1, &rn, ep);
	rc = commit_descs(c, st->suffix, &dp, ns, &dn);
	race_phase_end(c, LOCO_RACE_PH_COMMIT);
	if (rc)
		return rc;
	race_point("race.cas_published");
	rc = move_finish(c, st->suffix, false, (int)ep, t0);
	return rc == -EAGAIN ? 0 : rc;   /* someone took the move over */
}

/* ---- entry points -------------------------------------------------------------- */

int race_split(struct loco_race_client *c, const struct race_st *st)
{
	const struct loco_race *r = c->r;
	struct race_desc d;
	bool took_over = false;
	if (st->ld >= r->o.max_depth && st->state == RACE_LIVE)
		return -ENOSPC;
	race_phase_start(c);
	uint64_t t0 = c->ph_ns;
	int rc = lock_desc(c, st->suffix, &d);
	race_phase_end(c, LOCO_RACE_PH_LOCK);
	if (rc)
		return rc;
	race_point("race.split_locked");
	if (!(d.w0 & RACE_DESC_VALID) || d.off != st->rr.off ||
	    desc_ld(&d) != st->ld) {
		loco_rtx_abort(c->w);
		return 0;   /* split meanwhile: refresh */
	}
	if (desc_state(&d) == RACE_SPLITTING || desc_state(&d) == RACE_MOVING) {
		uint32_t ps = desc_state(&d) == RACE_MOVING ?
			      st->suffix & ~(UINT32_C(1) << (st->ld - 1)) :
			      st->suffix;
		loco_rtx_abort(c->w);
		return move_finish(c, ps, true, -1, t0);
	}
	if (st->ld >= r->o.max_depth) {
		loco_rtx_abort(c->w);
		return -ENOSPC;
	}
	if (r->o.resize == LOCO_RACE_RESIZE_CAS)
		return split_cas(c, st, &d, t0);
	rc = split_rtx(c, st, &took_over);
	if (rc)
		return rc;
	race_point("race.split_done");
	RACE_INC(c, splits);
	if (took_over)
		RACE_INC(c, takeovers);
	race_count(c, RACE_STAT(split_ns), loco_now_ns() - t0);
	return 0;
}

int race_wait_resize(struct loco_race_client *c, const struct race_st *st,
		     unsigned *tries)
{
	const struct loco_race *r = c->r;
	race_backoff(c, tries);
	if (*tries % WAIT_PEEK_EVERY)
		return 0;
	bool cas = r->o.resize == LOCO_RACE_RESIZE_CAS;
	uint32_t s = cas && st->state == RACE_MOVING ?
		     st->suffix & ~(UINT32_C(1) << (st->ld - 1)) : st->suffix;
	struct race_cdesc before = c->cache[s];
	uint64_t lock = 0;
	int rc = race_refresh_one(c, s, &lock);
	if (rc)
		return rc;
	const struct race_cdesc *e = &c->cache[s];
	if (!e->valid || memcmp(e, &before, sizeof(before)))
		return 0;   /* moved on: the caller retries with it */
	if (loco_lllock_is_locked(lock) &&
	    !loco_lllock_expired(lock, loco_rtx_now_ms(r->rtx)))
		return 0;   /* its owner is at it */
	/* Nobody holds it, or its holder's lease ran out: finish it. */
	if (cas && e->state != RACE_SPLITTING)
		return 0;
	if (cas)
		rc = race_move_finish(c, s, true);
	else {
		struct race_st cur;
		race_st_of(r, e, s, &cur);
		rc = race_split(c, &cur);
	}
	return rc == -EAGAIN ? 0 : rc;
}
