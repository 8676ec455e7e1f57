/* SPDX-License-Identifier: MIT */
/* Whole-table walks: the reference scan (which KV blocks some slot names,
 * for adoption and audits) and loco_race_verify (settle what dead clients
 * left, then check every invariant of the table). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loco/rtx/lllock.h>
#include "channels/race/internal.h"

#define SCAN_TRIES 32
#define SETTLE_ROUNDS 64

/* ---- descriptors ------------------------------------------------------------------ */

/* Every descriptor's value (ndesc of them). */
static int peek_all(struct loco_race_client *c, struct race_desc *d,
		    uint64_t *locks)
{
	const struct loco_race *r = c->r;
	loco_raddr_t *objs = malloc((size_t)r->ndesc * sizeof(*objs));
	if (!objs)
		return -ENOMEM;
	for (uint32_t s = 0; s < r->ndesc; s++)
		objs[s] = race_desc_obj(r, s);
	int rc = loco_rtx_peek(c->w, objs, r->ndesc, d, locks);
	free(objs);
	/* Durable as read (docs/race.md, "Durability"): the TXObjs are
	 * contiguous, one FLUSH. */
	if (!rc && race_durable(r, r->meta.node)) {
		uint64_t at = loco_raddr_off(race_desc_obj(r, 0)) - r->meta.off;
		rc = race_persist_seen(c, &r->meta, at, (uint64_t)r->ndesc * 16);
		if (!rc)
			rc = race_pend_wait(c);
	}
	return rc;
}

static bool desc_valid(const struct race_desc *d)
{
	return (d->w0 & RACE_DESC_VALID) != 0;
}

static void st_from(const struct loco_race *r, const struct race_desc *d,
		    uint32_t s, struct race_st *st)
{
	struct race_cdesc e = { 0 };
	race_cdesc_set(r, &e, d);
	race_st_of(r, &e, s, st);
}

/* ---- reference scan ----------------------------------------------------------------- */

void race_refs_free(const struct loco_race *r, uint64_t **refs)
{
	for (unsigned i = 0; refs && i < r->nmn; i++)
		free(refs[i]);
	free(refs);
}

static uint64_t **refs_alloc(const struct loco_race *r)
{
	uint64_t **refs = calloc(r->nmn, sizeof(*refs));
	for (unsigned i = 0; refs && i < r->nmn; i++) {
		refs[i] = calloc(r->nchunks, 8);
		if (!refs[i]) {
			race_refs_free(r, refs);
			return NULL;
		}
	}
	return refs;
}

static void mark_refs(const struct loco_race *r, const uint64_t *w,
		      uint64_t **refs)
{
	for (uint32_t b = 0; b < 3 * r->groups; b++) {
		for (unsigned j = 0; j < RACE_SLOTS; j++) {
			uint64_t v = w[b * 8 + 1 + j];
			if (!race_slot_item(v) || race_slot_tent(v) ||
			    race_slot_ni(v) >= r->nmn ||
			    race_slot_block(v) >= r->nblocks)
				continue;
			uint32_t blk = race_slot_block(v);
			refs[race_slot_ni(v)][blk / 64] |= UINT64_C(1) << (blk % 64);
		}
	}
}

/* One pass: every valid descriptor's subtable, by ascending suffix (a
 * cas-mode parent before its child: an item copied to the child before
 * it is cleared from the parent is seen in one of them). */
static int scan_pass(struct loco_race_client *c, const struct race_desc *d,
		     uint64_t **refs)
{
	const struct loco_race *r = c->r;
	int rc = 0;
	for (uint32_t s = 0; !rc && s < r->ndesc; s++) {
		struct race_st st;
		if (!desc_valid(&d[s]))
			continue;
		st_from(r, &d[s], s, &st);
		/* Durable as read: blocks are freed on the strength of it. */
		rc = race_read_seen(c, &st.rr, 0, c->big, r->st_bytes);
		if (!rc)
			mark_refs(r, (const uint64_t *)c->big, refs);
	}
	return rc;
}

int race_scan_refs(struct loco_race_client *c, uint64_t ***out)
{
	const struct loco_race *r = c->r;
	size_t dlen = (size_t)r->ndesc * sizeof(struct race_desc);
	struct race_desc *d0 = malloc(dlen), *d1 = malloc(dlen);
	uint64_t **refs = NULL;
	int rc = d0 && d1 ? peek_all(c, d0, NULL) : -ENOMEM;
	for (unsigned t = 0; !rc; t++) {
		if (t == SCAN_TRIES) {
			rc = -EAGAIN;
			break;
		}
		race_refs_free(r, refs);
		refs = refs_alloc(r);
		rc = refs ? scan_pass(c, d0, refs) : -ENOMEM;
		if (!rc)
			rc = peek_all(c, d1, NULL);
		/* No split published anything while we read: a consistent
		 * snapshot of where the items are. */
		if (!rc && !memcmp(d0, d1, dlen))
			break;
		struct race_desc *tmp = d0;
		d0 = d1;
		d1 = tmp;
	}
	free(d0);
	free(d1);
	if (rc) {
		race_refs_free(r, refs);
		return rc;
	}
	*out = refs;
	return 0;
}

/* ---- verify: settling ---------------------------------------------------------------- */

struct verify {
	struct loco_race_client *c;
	struct loco_race_audit a;
	char *msg;
	size_t len;
	int bad;
	struct race_desc *d;
};

static void bad(struct verify *v, const char *fmt, ...)
{
	if (v->bad)
		return;
	v->bad = -EPROTO;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(v->msg, v->len, fmt, ap);
	va_end(ap);
}

/* Finish what a dead client left: cas moves, rtx splits that froze a
 * subtable, tentative slots. One round; *LEFT: something was found. */
static int settle_round(struct verify *v, bool *left)
{
	struct loco_race_client *c = v->c;
	const struct loco_race *r = c->r;
	int rc = peek_all(c, v->d, NULL);
	*left = false;
	for (uint32_t s = 0; !rc && s < r->ndesc; s++) {
		struct race_st st;
		if (!desc_valid(&v->d[s]))
			continue;
		st_from(r, &v->d[s], s, &st);
		if (st.state == RACE_SPLITTING) {
			*left = true;
			v->a.repaired++;
			rc = race_move_finish(c, s, true);
			break;   /* descriptors changed */
		}
		rc = loco_read(c->thr, &st.rr, 0, c->big, r->st_bytes);
		const uint64_t *w = (const uint64_t *)c->big;
		bool frozen = false;
		for (uint32_t b = 0; !rc && b < 3 * r->groups; b++) {
			for (unsigned j = 0; j < RACE_SLOTS; j++) {
				uint64_t x = w[b * 8 + 1 + j], old = 0;
				frozen |= race_slot_frozen(x);
				if (!race_slot_tent(x) || race_slot_frozen(x))
					continue;
				rc = loco_cas(c->thr, &st.rr,
					      (uint64_t)(b * 8 + 1 + j) * 8, x, 0,
					      &old);
				v->a.repaired += !rc && old == x;
				if (rc)
					break;
			}
		}
		if (!rc && frozen && st.state == RACE_LIVE) {
			*left = true;
			v->a.repaired++;
			rc = race_split(c, &st);
			break;
		}
	}
	return rc == -EAGAIN ? 0 : rc;
}

static int settle(struct verify *v)
{
	struct loco_race_client *c = v->c;
	int timeout = loco_mgr_timeout_ms(c->r->base.mgr);
	uint64_t held = 0;
	int rc = loco_rtx_repair_all(c->w, timeout, &held);
	for (unsigned i = 0; !rc; i++) {
		bool left = false;
		if (i == SETTLE_ROUNDS) {
			bad(v, "resizes left by dead clients still unfinished after "
			    "%u rounds", SETTLE_ROUNDS);
			break;
		}
		rc = settle_round(v, &left);
		if (!left)
			break;
	}
	if (!rc)
		rc = loco_rtx_repair_all(c->w, timeout, &held);
	v->a.locks_held = held;
	if (!rc && held)
		bad(v, "%llu descriptor locks still held", (unsigned long long)held);
	if (!rc)
		rc = loco_rtx_settle_logs(c->w, &v->a.logs_pending);
	if (!rc && v->a.logs_pending)
		bad(v, "%llu rTX logs still pending",
		    (unsigned long long)v->a.logs_pending);
	return rc;
}

/* ---- verify: the walk ------------------------------------------------------------------ */

struct vkey {
	uint64_t h1;
	uint32_t klen;
	uint32_t at;             /* suffix of its subtable */
	uint8_t key[];
};

struct vkeys {
	struct vkey **k;
	size_t n, cap;
};

static int vkeys_add(struct vkeys *ks, uint64_t h1, const uint8_t *key,
		     uint32_t klen, uint32_t at)
{
	if (ks->n == ks->cap) {
		size_t cap = ks->cap ? 2 * ks->cap : 1024;
		struct vkey **k = realloc(ks->k, cap * sizeof(*k));
		if (!k)
			return -ENOMEM;
		ks->k = k;
		ks->cap = cap;
	}
	struct vkey *e = malloc(sizeof(*e) + klen);
	if (!e)
		return -ENOMEM;
	e->h1 = h1;
	e->klen = klen;
	e->at = at;
	memcpy(e->key, key, klen);
	ks->k[ks->n++] = e;
	return 0;
}

static int vkey_cmp(const void *a, const void *b)
{
	const struct vkey *x = *(const struct vkey *const *)a;
	const struct vkey *y = *(const struct vkey *const *)b;
	if (x->h1 != y->h1)
		return x->h1 < y->h1 ? -1 : 1;
	if (x->klen != y->klen)
		return x->klen < y->klen ? -1 : 1;
	return memcmp(x->key, y->key, x->klen);
}

static void vkeys_free(struct vkeys *ks)
{
	for (size_t i = 0; i < ks->n; i++)
		free(ks->k[i]);
	free(ks->k);
}

/* Is bucket B one of the buckets K's two combined buckets cover? */
static bool bucket_ok(uint32_t b, const struct race_key *k)
{
	uint32_t m[2] = { k->m1, k->m2 };
	for (unsigned i = 0; i < 2; i++) {
		uint32_t main = (m[i] / 2) * 3 + (m[i] % 2) * 2;
		uint32_t ovf = (m[i] / 2) * 3 + 1;
		if (b == main || b == ovf)
			return true;
	}
	return false;
}

/* Slot X (bucket B, index J) of subtable ST: a committed item whose block
 * is whole and in use and whose key belongs there; the key joins KS. */
static int check_item(struct verify *v, const struct race_st *st, uint32_t b,
		      unsigned j, uint64_t x, struct vkeys *ks)
{
	const struct loco_race *r = v->c->r;
	uint32_t s = st->suffix;
	uint8_t *blk = v->c->kvr;
	uint64_t w0 = 0;
	if (race_slot_tent(x) || race_slot_frozen(x) || !race_slot_item(x)) {
		bad(v, "subtable %u bucket %u slot %u: %s slot %016llx left", s, b,
		    j, race_slot_tent(x) ? "tentative" : "frozen",
		    (unsigned long long)x);
		return 0;
	}
	if (race_slot_bad(r, x)) {
		bad(v, "subtable %u bucket %u slot %u: pointer %016llx out of the "
		    "pool", s, b, j, (unsigned long long)x);
		return 0;
	}
	int rc = loco_read(v->c->thr, race_kv(r, race_slot_ni(x)),
			   (uint64_t)race_slot_block(x) * r->block_len, blk,
			   race_slot_len(x) * RACE_LEN_UNIT);
	if (rc)
		return rc;
	if (!race_kv_whole(r, blk, x, &w0) || !race_kv_live(w0)) {
		bad(v, "subtable %u bucket %u slot %u: its KV block (node %u, block "
		    "%u) is %s", s, b, j, r->mn[race_slot_ni(x)].id,
		    race_slot_block(x), w0 ? "free" : "not whole");
		return 0;
	}
	struct race_key k;
	race_key_init(r, &k, blk + RACE_KV_HDR, race_kv_klen(w0));
	uint64_t mask = (UINT64_C(1) << st->ld) - 1;
	if ((k.h1 & mask) != s || !bucket_ok(b, &k) || race_slot_fp(x) != k.fp)
		bad(v, "subtable %u bucket %u slot %u: key of hash %016llx does "
		    "not belong there", s, b, j, (unsigned long long)k.h1);
	v->a.items++;
	return vkeys_add(ks, k.h1, blk + RACE_KV_HDR, k.klen, s);
}

/* The items of subtable ST (its words W). */
static int check_items(struct verify *v, const struct race_st *st,
		       const uint64_t *w, struct vkeys *ks)
{
	int rc = 0;
	for (uint32_t b = 0; !rc && b < 3 * v->c->r->groups; b++)
		for (unsigned j = 0; !rc && j < RACE_SLOTS; j++)
			if (w[b * 8 + 1 + j])
				rc = check_item(v, st, b, j, w[b * 8 + 1 + j], ks);
	return rc;
}

static int check_subtable(struct verify *v, uint32_t s, struct vkeys *ks,
			  uint64_t *cover)
{
	struct loco_race_client *c = v->c;
	const struct loco_race *r = c->r;
	struct race_st st;
	st_from(r, &v->d[s], s, &st);
	if (st.state != RACE_LIVE)
		bad(v, "subtable %u: state %u, not live", s, st.state);
	if (st.ld > r->o.max_depth || (st.ld < 32 && s >> st.ld))
		bad(v, "subtable %u: local depth %u", s, st.ld);
	*cover += UINT64_C(1) << (r->o.max_depth - st.ld);
	if (st.ld > v->a.depth)
		v->a.depth = st.ld;
	v->a.subtables++;
	int rc = loco_read(c->thr, &st.rr, 0, c->big, r->st_bytes);
	const uint64_t *w = (const uint64_t *)c->big;
	for (uint32_t b = 0; !rc && b < 3 * r->groups; b++)
		if (w[b * 8] != race_hdr(st.ld, s, false))
			bad(v, "subtable %u bucket %u: header %016llx, expected "
			    "depth %u suffix %u", s, b, (unsigned long long)w[b * 8],
			    st.ld, s);
	return rc ? rc : check_items(v, &st, w, ks);
}

static void check_keys(struct verify *v, struct vkeys *ks)
{
	if (ks->n > 1)   /* an empty table has no array (qsort wants one) */
		qsort(ks->k, ks->n, sizeof(*ks->k), vkey_cmp);
	for (size_t i = 1; i < ks->n; i++)
		if (!vkey_cmp(&ks->k[i - 1], &ks->k[i]))
			bad(v, "key of hash %016llx twice (subtables %u and %u)",
			    (unsigned long long)ks->k[i]->h1, ks->k[i - 1]->at,
			    ks->k[i]->at);
}

static int walk(struct verify *v)
{
	struct loco_race_client *c = v->c;
	const struct loco_race *r = c->r;
	struct vkeys ks = { 0 };
	uint64_t cover = 0;
	int rc = peek_all(c, v->d, NULL);
	for (uint32_t s = 0; !rc && s < r->ndesc; s++)
		if (desc_valid(&v->d[s]))
			rc = check_subtable(v, s, &ks, &cover);
	if (!rc && cover != UINT64_C(1) << r->o.max_depth)
		bad(v, "the subtables cover %llu of %llu directory entries",
		    (unsigned long long)cover,
		    (unsigned long long)(UINT64_C(1) << r->o.max_depth));
	if (!rc)
		check_keys(v, &ks);
	vkeys_free(&ks);
	return rc;
}

/* Blocks: after garbage is reclaimed, LIVE = referenced exactly. */
static int audit_blocks(struct verify *v)
{
	struct loco_race_client *c = v->c;
	const struct loco_race *r = c->r;
	uint64_t **refs = NULL, **live = refs_alloc(r);
	int rc = live ? race_scan_refs(c, &refs) : -ENOMEM;
	if (!rc)
		rc = race_reclaim_garbage(c, refs, &v->a.reclaimed, live);
	for (unsigned ni = 0; !rc && ni < r->nmn; ni++) {
		for (uint32_t k = 0; k < r->nchunks; k++) {
			uint64_t rf = refs[ni][k], al = live[ni][k];
			v->a.referenced += (uint64_t)__builtin_popcountll(rf);
			v->a.allocated += (uint64_t)__builtin_popcountll(al);
			v->a.leaked += (uint64_t)__builtin_popcountll(al & ~rf);
			v->a.lost += (uint64_t)__builtin_popcountll(rf & ~al);
		}
	}
	if (!rc && (v->a.leaked || v->a.lost))
		bad(v, "KV blocks: %llu leaked, %llu lost",
		    (unsigned long long)v->a.leaked, (unsigned long long)v->a.lost);
	race_refs_free(r, refs);
	race_refs_free(r, live);
	return rc;
}

int loco_race_verify(struct loco_race_client *c, struct loco_race_audit *out,
		     char *msg, size_t len)
{
	struct verify v = { .c = c, .msg = msg, .len = len };
	if (len)
		msg[0] = 0;
	v.d = malloc((size_t)c->r->ndesc * sizeof(*v.d));
	int rc = v.d ? race_pend_wait(c) : -ENOMEM;
	if (!rc)
		rc = settle(&v);
	if (!rc)
		rc = audit_blocks(&v);
	if (!rc)
		rc = walk(&v);
	free(v.d);
	if (rc)
		return rc;
	*out = v.a;
	return v.bad;
}
