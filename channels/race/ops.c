/* SPDX-License-Identifier: MIT */
/* RACE operations (RACE §3.3, Algorithms 1-4), lock-free:
 *
 *   get     1: READ both combined buckets (one batch)
 *           2: READ the KV blocks whose fingerprint matches
 *   insert  1: WRITE the new KV block, READ both combined buckets
 *           2: CAS an empty slot to the tentative pointer, re-READ both
 *              combined buckets behind it on the same QP
 *           3: CAS tentative -> committed (the linearization point)
 *   update  1: WRITE the new block, READ buckets; 2: READ KV; 3: CAS slot
 *   delete  1: READ buckets; 2: READ KV; 3: CAS slot to empty
 *
 * A fingerprint match among other slots costs one more READ of their KV
 * blocks (insert: to tell a duplicate from a collision).
 *
 * Cache checks (RACE §3.4.1): every combined bucket's header (local depth,
 * suffix) is compared with the key (Algorithm 5). In cas mode the header
 * is READ again after the bucket, on the same QP: a move changes a
 * group's headers before it clears any of its slots, so a header still
 * old when READ after the slots means none of them was cleared yet, even
 * if the bucket READ itself tore. In rtx mode headers never change; a
 * frozen slot says a split froze the subtable, and the descriptor is read
 * to learn whether it is still the current one.
 *
 * Duplicate check: the tentative bit (T) keeps an insert invisible to
 * readers until its re-READ, which executes after its CAS, saw no other
 * copy of the key. Of two concurrent inserts of one key, the second CAS
 * is placed before the second re-READ, after the first CAS, so at least
 * one of them sees the other: a committed or frozen copy means -EEXIST, a
 * tentative one that both back off and retry. Never two committed copies. */
#include <errno.h>
#include <string.h>
#include <xxhash.h>

#include "channels/race/internal.h"

#define TENT_STALE_NS (20u * 1000000u)  /* a tentative slot this old is a
					 * dead insert's: clear it */

uint64_t race_kv_sum(uint8_t *blk, uint32_t len)
{
	uint64_t w0, w2, clear = 0;
	memcpy(&w0, blk, 8);
	memcpy(&w2, blk + 16, 8);
	uint64_t w0c = w0 & ~RACE_KV_DEAD;
	memcpy(blk, &w0c, 8);
	memcpy(blk + 16, &clear, 8);
	uint64_t sum = XXH3_64bits(blk, len);
	memcpy(blk, &w0, 8);
	memcpy(blk + 16, &w2, 8);
	return sum;
}

/* ---- reading buckets ---------------------------------------------------------- */

/* One combined bucket: main bucket M's and the overflow bucket of its
 * group, 128 contiguous bytes. */
struct race_cb {
	uint32_t m;
	uint32_t b0;             /* subtable bucket index of w[0..7] */
	uint64_t w[16];
	uint64_t hdr2;           /* main header READ after it (cas mode) */
	bool dup;                /* same bytes as the other combined bucket */
};

/* The buckets of one operation: in the key's subtable, and for a cas-mode
 * child still being filled (MOVING) also in its parent. */
struct race_look {
	struct race_st st[2];
	unsigned nst;
	struct race_cb cb[2][2];
};

static uint64_t cb_off(uint32_t m)
{
	return (uint64_t)(m / 2) * RACE_GROUP_BYTES + (m % 2) * RACE_BUCKET_BYTES;
}

/* Word index of main bucket M's header in its combined bucket. */
static unsigned cb_main(uint32_t m)
{
	return (m % 2) ? 8 : 0;
}

static uint64_t slot_off(uint32_t bucket, unsigned j)
{
	return (uint64_t)bucket * RACE_BUCKET_BYTES + 8 + 8 * (uint64_t)j;
}

static bool cas_mode(const struct loco_race *r)
{
	return r->o.resize == LOCO_RACE_RESIZE_CAS;
}

static void look_init(struct loco_race_client *c, struct race_look *l,
		      const struct race_st *st, const struct race_key *k,
		      bool with_parent)
{
	l->st[0] = *st;
	l->nst = 1;
	if (with_parent && st->state == RACE_MOVING) {
		uint32_t ps = st->suffix & ~(UINT32_C(1) << (st->ld - 1));
		const struct race_cdesc *e = &c->cache[ps];
		if (e->valid) {
			race_st_of(c->r, e, ps, &l->st[1]);
			l->nst = 2;
		}
	}
	for (unsigned t = 0; t < l->nst; t++) {
		uint32_t m[2] = { k->m1, k->m2 };
		for (unsigned i = 0; i < 2; i++) {
			struct race_cb *cb = &l->cb[t][i];
			cb->m = m[i];
			cb->b0 = (m[i] / 2) * 3 + (m[i] % 2);
			cb->dup = i == 1 && m[1] == m[0];
		}
	}
}

/* READ the combined buckets (and, in cas mode, their main headers
 * after them on the same QP) into B. */
static void look_post(struct loco_race_client *c, struct race_look *l,
		      unsigned from, struct loco_batch *b)
{
	for (unsigned t = from; t < l->nst; t++) {
		for (unsigned i = 0; i < 2; i++) {
			struct race_cb *cb = &l->cb[t][i];
			if (cb->dup)
				continue;
			loco_batch_read(b, &l->st[t].rr, cb_off(cb->m), cb->w,
					RACE_CBUCKET_BYTES);
			if (cas_mode(c->r))
				loco_batch_read(b, &l->st[t].rr,
						cb_off(cb->m) + 8 * cb_main(cb->m),
						&cb->hdr2, 8);
		}
	}
}

/* On durable memory nodes: post the FLUSHes of the combined buckets of L
 * (whoever wrote them), behind their READs on the same QPs. What an
 * operation returns on the strength of a READ (a value, an absence, a
 * copy that makes an insert fail) is then durable when the round's wait
 * returns: a power cut cannot take back what a caller was told. */
static int look_persist(struct loco_race_client *c, const struct race_look *l)
{
	int rc = 0;
	for (unsigned t = 0; t < l->nst && !rc; t++) {
		if (!race_op_durable(c->r, l->st[t].rr.node))
			continue;
		for (unsigned i = 0; i < 2 && !rc; i++)
			if (!l->cb[t][i].dup)
				rc = race_persist_seen(c, &l->st[t].rr,
						       cb_off(l->cb[t][i].m),
						       RACE_CBUCKET_BYTES);
	}
	return rc;
}

/* Post batch B (the view L's READs, a WRITE of a new block on BNODE
 * first, or BNODE ~0u: none), then the persists of durable nodes: the
 * block (ours, durable before a slot names it) and, with SEEN, the view;
 * and wait: one round trip. */
static int look_run(struct loco_race_client *c, const struct race_look *l,
		    struct loco_batch *b, uint32_t bnode, bool seen)
{
	int rc = loco_batch_post(b, &c->pend);
	if (!rc && bnode != ~0u && race_op_durable(c->r, bnode))
		rc = race_persist_post(c, bnode);
	if (!rc && seen)
		rc = look_persist(c, l);
	return rc ? rc : race_pend_wait(c);
}

/* A view that did not persist with its READs (the common outcome needs
 * none): persist it now, before the operation returns what it saw. */
static int look_seen(struct loco_race_client *c, const struct race_look *l)
{
	int rc = look_persist(c, l);
	return rc ? rc : race_pend_wait(c);
}

enum look_verdict { LOOK_OK, LOOK_STALE, LOOK_CLOSED };

/* Algorithm 5 on the key's subtable (not on a MOVING child's parent,
 * which is read for items not moved yet whatever its headers say). */
static enum look_verdict look_check(const struct loco_race_client *c,
				    const struct race_look *l,
				    const struct race_key *k)
{
	const struct race_st *st = &l->st[0];
	enum look_verdict v = LOOK_OK;
	for (unsigned i = 0; i < 2; i++) {
		const struct race_cb *cb = &l->cb[0][i];
		if (cb->dup)
			continue;
		uint64_t h = cas_mode(c->r) ? cb->hdr2 : cb->w[cb_main(cb->m)];
		unsigned ld = race_hdr_ld(h);
		uint64_t mask = (UINT64_C(1) << ld) - 1;
		if (c->r->o.broken & LOCO_RACE_BROKEN_NO_STALE_CHECK)
			return LOOK_OK;
		if (!(h & RACE_HDR_VALID))
			return LOOK_STALE;
		if (ld == st->ld ? race_hdr_suffix(h) != st->suffix :
		    (k->h1 & mask) != race_hdr_suffix(h) || ld < st->ld)
			return LOOK_STALE;
		if (h & RACE_HDR_CLOSED)
			v = LOOK_CLOSED;
	}
	return v;
}

/* A slot of the view: its subtable, bucket, index and value. */
struct race_pos {
	uint8_t t;               /* subtable of the view */
	uint32_t bucket;
	uint8_t j;
	uint64_t v;
};

/* Slot j (0..13) of combined bucket CB: bucket and value. */
static void cb_slot(const struct race_cb *cb, unsigned j, uint32_t *bucket,
		    uint64_t *v)
{
	unsigned half = j / RACE_SLOTS;
	*bucket = cb->b0 + half;
	*v = cb->w[half * 8 + 1 + j % RACE_SLOTS];
}

/* Bucket B of combined bucket I of subtable T is read twice (the
 * overflow bucket both combined buckets of one group share): skip it in
 * the second. */
static bool cb_skip(const struct race_look *l, unsigned t, unsigned i,
		    uint32_t b)
{
	return i == 1 && (b == l->cb[t][0].b0 || b == l->cb[t][0].b0 + 1);
}

/* Any frozen slot in subtable T of the view (a word read twice counts
 * once or twice: it does not matter here). */
static bool look_has_frozen(const struct race_look *l, unsigned t)
{
	for (unsigned i = 0; i < 2; i++) {
		const struct race_cb *cb = &l->cb[t][i];
		for (unsigned w = 0; !cb->dup && w < 16; w++)
			if (w % 8 && race_slot_frozen(cb->w[w]))
				return true;
	}
	return false;
}

/* ---- KV blocks ------------------------------------------------------------------ */

enum kv_verdict { KV_MATCH, KV_OTHER, KV_CHANGED };

bool race_kv_whole(const struct loco_race *r, uint8_t *blk, uint64_t v,
		   uint64_t *w0)
{
	uint64_t w, sum;
	memcpy(&w, blk, 8);
	memcpy(&sum, blk + 16, 8);
	uint64_t len = (uint64_t)RACE_KV_HDR + race_kv_klen(w) + race_kv_vlen(w);
	if (!w || (race_kv_gen(w) & ((1u << RACE_GEN_BITS) - 1)) !=
	    race_slot_gen(v) || len > (uint64_t)race_slot_len(v) * RACE_LEN_UNIT ||
	    len > r->block_len || race_kv_sum(blk, (uint32_t)len) != sum)
		return false;
	*w0 = w;
	return true;
}

/* Check block BLK read for slot V against key K. */
static enum kv_verdict kv_check(const struct loco_race *r, uint8_t *blk,
				uint64_t v, const struct race_key *k,
				uint64_t *w0_out)
{
	uint64_t w0;
	if (!race_kv_whole(r, blk, v, &w0))
		return KV_CHANGED;
	*w0_out = w0;
	uint32_t klen = race_kv_klen(w0);
	if (klen != k->klen || memcmp(blk + RACE_KV_HDR, k->key, klen))
		return KV_OTHER;
	return KV_MATCH;
}

/* READ the KV blocks of the N slots in P into c->kvr: one round trip (a
 * view of a MOVING child and its parent may have more matches than one
 * batch holds). */
static int kv_read(struct loco_race_client *c, const struct race_pos *p,
		   unsigned n)
{
	struct race_ops l;
	race_ops_init(&l, c);
	for (unsigned i = 0; i < n; i++) {
		uint64_t v = p[i].v;
		race_ops_read(&l, race_kv(c->r, race_slot_ni(v)),
			      (uint64_t)race_slot_block(v) * c->r->block_len,
			      c->kvr + (size_t)i * c->r->block_len,
			      race_slot_len(v) * RACE_LEN_UNIT);
	}
	return race_ops_run(&l);
}

bool race_slot_bad(const struct loco_race *r, uint64_t v)
{
	return race_slot_ni(v) >= r->nmn || race_slot_block(v) >= r->nblocks ||
	       race_slot_len(v) * RACE_LEN_UNIT > r->block_len;
}

/* Slots of the view that may hold K: items whose fingerprint matches;
 * with TENT, tentative ones too (but never OURS). */
static unsigned fp_matches(const struct loco_race *r, const struct race_look *l,
			   const struct race_key *k, bool tent, uint64_t ours,
			   struct race_pos *out)
{
	unsigned n = 0;
	for (unsigned t = 0; t < l->nst; t++) {
		for (unsigned i = 0; i < 2; i++) {
			const struct race_cb *cb = &l->cb[t][i];
			for (unsigned w = 1; !cb->dup && w < 16; w++) {
				uint64_t v = cb->w[w];
				uint32_t b = cb->b0 + w / 8;
				if ((race_slot_fp(v) != k->fp &&
				     !(cas_mode(r) && race_slot_frozen(v))) ||
				    !race_slot_item(v) ||
				    w == 8 || cb_skip(l, t, i, b) ||
				    race_slot_bad(r, v) || (ours && v == ours) ||
				    (race_slot_tent(v) && !tent))
					continue;
				out[n++] = (struct race_pos){ .t = (uint8_t)t,
					.bucket = b, .j = (uint8_t)(w % 8 - 1), .v = v };
			}
		}
	}
	return n;
}

/* The outcome of looking K up in the view. */
struct race_hit {
	int found;               /* index into the candidates, -1: none */
	bool changed;            /* a block changed under us: retry */
	bool tent;               /* a tentative copy of K (foreign) */
	bool present;            /* a committed or frozen copy of K */
	uint64_t w0;
	uint64_t other;          /* bit i: candidate i holds another key */
};

static int kv_lookup(struct loco_race_client *c, const struct race_key *k,
		     const struct race_pos *p, unsigned n, struct race_hit *h)
{
	*h = (struct race_hit){ .found = -1 };
	if (!n)
		return 0;
	int rc = kv_read(c, p, n);
	for (unsigned i = 0; !rc && i < n; i++) {
		uint64_t w0 = 0;
		enum kv_verdict kv = kv_check(c->r, c->kvr + (size_t)i * c->r->block_len,
					      p[i].v, k, &w0);
		if (kv == KV_CHANGED) {
			/* A tentative block may be reused by its owner. */
			h->changed |= !race_slot_tent(p[i].v);
			continue;
		}
		if (kv != KV_MATCH) {
			h->other |= UINT64_C(1) << i;
			continue;
		}
		if (race_slot_tent(p[i].v)) {
			h->tent = true;
			continue;
		}
		h->present = true;
		if (h->found < 0) {
			h->found = (int)i;
			h->w0 = w0;
		}
	}
	return rc;
}

/* ---- op scaffolding ------------------------------------------------------------- */

struct race_op {
	struct loco_race_client *c;
	struct race_key k;
	uint64_t deadline;
	unsigned tries, waits;
	/* the new block (insert, update) */
	bool has_block;
	unsigned bni;
	uint32_t block;
	uint64_t bw0;
	uint64_t item;           /* its committed slot value */
	const void *val;
	uint32_t vlen;
	/* a foreign tentative copy seen: where and since when */
	uint64_t tent_v, tent_since;
	/* slot values whose block holds another key (a fingerprint
	 * collision already read: a slot that still holds one needs no
	 * second READ) */
	uint64_t other[8];
	unsigned nother;
};

/* VAL: the new value of an insert or update, NULL for get and delete. */
static int op_start(struct race_op *op, struct loco_race_client *c,
		    const void *key, uint32_t klen, const void *val,
		    uint32_t vlen)
{
	if (klen > c->r->o.key_max || (val && vlen > c->r->o.value_max))
		return -E2BIG;
	if (!c->w)
		return -ENOTCONN;   /* a reset failed: reset again first */
	/* The deadline is taken at the first retry: most operations have
	 * none, and a clock read per operation shows. */
	*op = (struct race_op){ .c = c, .val = val, .vlen = vlen };
	race_key_init(c->r, &op->k, key, klen);
	return 0;
}

/* A retry: count it, back off, and give up at the deadline. */
static int op_retry(struct race_op *op)
{
	RACE_INC(op->c, retries);
	if (!op->deadline)
		op->deadline = race_deadline(op->c);
	else if (loco_now_ns() > op->deadline)
		return -ETIMEDOUT;
	race_backoff(op->c, &op->tries);
	return 0;
}

static int op_refresh(struct race_op *op)
{
	int rc = race_refresh(op->c, op->k.h1);
	return rc ? rc : op_retry(op);
}

/* Wait for a resize of ST (frozen slots, closed group). */
static int op_wait(struct race_op *op, const struct race_st *st)
{
	if (!op->waits++)
		RACE_INC(op->c, resize_waits);
	uint64_t t0 = loco_now_ns();
	if (!op->deadline)
		op->deadline = race_deadline(op->c);
	else if (t0 > op->deadline)
		return -ETIMEDOUT;
	int rc = race_wait_resize(op->c, st, &op->tries);
	race_count(op->c, RACE_STAT(resize_wait_ns), loco_now_ns() - t0);
	return rc;
}

/* rtx mode: frozen slots in the key's subtable. Still the current one
 * (the split is running, or died before its commit)? *CUR false: the
 * cache moved on (refreshed): retry. */
static int rtx_frozen_current(struct race_op *op, const struct race_st *st,
			      bool *cur)
{
	struct race_cdesc before = op->c->cache[st->suffix];
	int rc = race_refresh_one(op->c, st->suffix, NULL);
	const struct race_cdesc *e = &op->c->cache[st->suffix];
	*cur = !rc && e->valid && e->off == before.off && e->ld == before.ld &&
	       e->ni == before.ni;
	return rc;
}

/* Is the view's subtable still the key's? Algorithm 5 on its headers;
 * in rtx mode, frozen slots also send us to the descriptor: a split froze
 * the subtable, and once it committed the subtable is dead (its frozen
 * values may be stale). 0: current; 1: retry (the cache was refreshed);
 * or an error. */
static int look_current(struct race_op *op, const struct race_look *l)
{
	struct loco_race_client *c = op->c;
	bool cur = false;
	int rc;
	if (look_check(c, l, &op->k) == LOOK_STALE) {
		rc = op_refresh(op);
		return rc ? rc : 1;
	}
	if (cas_mode(c->r) || !look_has_frozen(l, 0) ||
	    (c->r->o.broken & LOCO_RACE_BROKEN_NO_STALE_CHECK))
		return 0;
	rc = rtx_frozen_current(op, &l->st[0], &cur);
	if (rc || cur)
		return rc;
	rc = op_retry(op);
	return rc ? rc : 1;
}

/* Build the new KV block in c->kvw for the op's key and value, on memory
 * node NI (allocating there; a block on another node is returned). */
static int op_block(struct race_op *op, unsigned ni)
{
	struct loco_race_client *c = op->c;
	unsigned gen;
	if (op->has_block && op->bni == ni)
		return 0;
	if (op->has_block) {
		int rc = race_free_local(c, op->bni, op->block, op->bw0);
		op->has_block = false;
		if (rc)
			return rc;
	}
	int rc = race_alloc(c, ni, &op->block, &gen);
	if (rc)
		return rc;
	uint32_t len = RACE_KV_HDR + op->k.klen + op->vlen;
	uint32_t units = (len + RACE_LEN_UNIT - 1) / RACE_LEN_UNIT;
	uint64_t w[3] = { race_kv_w0(gen, op->k.klen, op->vlen), op->k.h1, 0 };
	memset(c->kvw, 0, (size_t)units * RACE_LEN_UNIT);
	memcpy(c->kvw, w, sizeof(w));
	memcpy(c->kvw + RACE_KV_HDR, op->k.key, op->k.klen);
	memcpy(c->kvw + RACE_KV_HDR + op->k.klen, op->val, op->vlen);
	w[2] = race_kv_sum(c->kvw, len);
	memcpy(c->kvw + 16, &w[2], 8);
	op->has_block = true;
	op->bni = ni;
	op->bw0 = w[0];
	op->item = race_slot(op->k.fp, units, ni, gen, op->block);
	return 0;
}

/* WRITE the new block into batch B (the buckets' node: the same QP as
 * the CAS that publishes it, so it is placed first). */
static void op_post_block(struct race_op *op, struct loco_batch *b)
{
	struct loco_race_client *c = op->c;
	loco_batch_write(b, race_kv(c->r, op->bni),
			 (uint64_t)op->block * c->r->block_len, c->kvw,
			 race_slot_len(op->item) * RACE_LEN_UNIT);
}

/* The node id of the op's new block, ~0u if none. */
static uint32_t op_bnode(const struct race_op *op)
{
	return op->has_block ? op->c->r->mn[op->bni].id : ~0u;
}

/* The op ended with RC and its block was never committed: ours again,
 * unless RC leaves its fate unknown (a node died under the op: a slot
 * may name it after the restart), then it stays in use until a reset
 * adopts it (reference scan) or the audit frees it. */
static void op_drop_block(struct race_op *op, int rc)
{
	if (!op->has_block || (rc && rc != -EEXIST && rc != -ENOENT &&
			       rc != -ENOSPC && rc != -ENOMEM && rc != -E2BIG))
		return;
	int frc = race_free_local(op->c, op->bni, op->block, op->bw0);
	if (frc)
		loco_warn(op->c->r->base.name, "freeing an unused block: %s",
			  loco_strerror(frc));
	op->has_block = false;
}

/* ---- get ------------------------------------------------------------------------- */

static int check_value(struct loco_race_client *c, const struct race_hit *h,
		       void *val, uint32_t cap, uint32_t *vlen)
{
	const uint8_t *blk = c->kvr + (size_t)h->found * c->r->block_len;
	uint32_t n = race_kv_vlen(h->w0);
	*vlen = n;
	if (n > cap)
		return -ENOBUFS;
	memcpy(val, blk + RACE_KV_HDR + race_kv_klen(h->w0), n);
	return 0;
}

/* One look at subtable ST (and its parent while MOVING, unless ONLY_ST):
 * the buckets, then the fingerprint matches' blocks. 1: retry. */
static int get_once(struct race_op *op, const struct race_st *st, bool only_st,
		    struct race_hit *h, int *again)
{
	struct loco_race_client *c = op->c;
	struct race_look l;
	struct race_pos p[4 * RACE_CSLOTS];
	struct loco_batch b;
	*again = 0;
	look_init(c, &l, st, &op->k, !only_st);
	loco_batch_init(&b, c->thr);
	look_post(c, &l, 0, &b);
	int rc = look_run(c, &l, &b, ~0u, true);
	if (rc)
		return rc;
	rc = look_current(op, &l);
	if (rc) {
		*again = rc > 0;
		return rc > 0 ? 0 : rc;
	}
	rc = kv_lookup(c, &op->k, p, fp_matches(c->r, &l, &op->k, false, 0, p), h);
	if (!rc && h->changed && h->found < 0) {
		*again = 1;
		return op_retry(op);
	}
	return rc;
}

int loco_race_get(struct loco_race_client *c, const void *key, uint32_t klen,
		  void *val, uint32_t cap, uint32_t *vlen)
{
	struct race_op op;
	int rc = op_start(&op, c, key, klen, NULL, 0);
	if (rc)
		return rc;
	RACE_INC(c, gets);
	for (;;) {
		struct race_st st;
		struct race_hit h;
		int again;
		rc = race_locate(c, op.k.h1, &st);
		if (!rc)
			rc = get_once(&op, &st, false, &h, &again);
		if (rc)
			return rc;
		if (again)
			continue;
		/* A MOVING child and its parent read in parallel both missed
		 * the key: it may have moved between; the child again. */
		if (h.found < 0 && st.state == RACE_MOVING) {
			rc = get_once(&op, &st, true, &h, &again);
			if (rc)
				return rc;
			if (again)
				continue;
		}
		return h.found < 0 ? -ENOENT : check_value(c, &h, val, cap, vlen);
	}
}

/* ---- insert -------------------------------------------------------------------- */

/* The empty slot an insert takes: in the less loaded combined bucket,
 * main bucket first (RACE §3.3); with SKIP, the SKIP-th empty one after
 * that (mod their number). false: both full. */
static bool pick_slot(const struct race_look *l, unsigned skip,
		      uint32_t *bucket, unsigned *j)
{
	unsigned load[2] = { 0, 0 };
	for (unsigned i = 0; i < 2; i++) {
		const struct race_cb *cb = &l->cb[0][i];
		if (cb->dup) {
			load[i] = RACE_CSLOTS + 1;   /* the same bytes: skip */
			continue;
		}
		for (unsigned s = 0; s < RACE_CSLOTS; s++) {
			uint32_t bk;
			uint64_t v;
			cb_slot(cb, s, &bk, &v);
			load[i] += v != 0;
		}
	}
	unsigned first = load[1] < load[0] ? 1 : 0, n = 0;
	uint32_t eb[2 * RACE_CSLOTS];
	unsigned ej[2 * RACE_CSLOTS];
	for (unsigned pass = 0; pass < 2; pass++) {
		const struct race_cb *cb = &l->cb[0][pass ? 1 - first : first];
		if (cb->dup)
			continue;
		unsigned mainj = cb_main(cb->m) ? RACE_SLOTS : 0;
		for (unsigned s = 0; s < RACE_CSLOTS; s++) {
			unsigned q = (mainj + s) % RACE_CSLOTS;  /* main first */
			uint64_t v;
			cb_slot(cb, q, &eb[n], &v);
			if (!v)
				ej[n++] = q % RACE_SLOTS;
		}
	}
	if (!n)
		return false;
	*bucket = eb[skip % n];
	*j = ej[skip % n];
	return true;
}

static uint64_t tentative(uint64_t item)
{
	return item | RACE_SLOT_T;
}

/* Remove our tentative slot (an aborted attempt). */
static int untent(struct race_op *op, const struct race_st *st, uint64_t off)
{
	uint64_t old = 0;
	return loco_cas(op->c->thr, &st->rr, off, tentative(op->item), 0, &old);
}

/* A foreign tentative copy of our key: wait for its owner to commit or
 * back off; one that stays for TENT_STALE_NS belongs to a dead insert
 * and is cleared (invisible to everyone: always safe). */
static int foreign_tent(struct race_op *op, const struct race_look *l,
			const struct race_pos *p, unsigned n)
{
	uint64_t now = loco_now_ns();
	for (unsigned i = 0; i < n; i++) {
		if (!race_slot_tent(p[i].v))
			continue;
		if (op->tent_v != p[i].v) {
			op->tent_v = p[i].v;
			op->tent_since = now;
		} else if (now - op->tent_since > TENT_STALE_NS) {
			uint64_t old = 0;
			const struct race_st *st = &l->st[p[i].t];
			int rc = loco_cas(op->c->thr, &st->rr,
					  slot_off(p[i].bucket, p[i].j), p[i].v, 0,
					  &old);
			if (rc)
				return rc;
			if (old == p[i].v)
				RACE_INC(op->c, tent_steals);
		}
	}
	return 0;
}

/* Is there a copy of K among the fingerprint matches of L (other than
 * OURS)? Sets *PRESENT (committed or frozen copy) and *TENT (a foreign
 * tentative one). One KV READ round trip when there is a match. */
static int dup_check(struct race_op *op, const struct race_look *l,
		     uint64_t ours, bool *present, bool *tent, bool *changed)
{
	struct race_pos p[4 * RACE_CSLOTS];
	struct race_hit h;
	unsigned m = fp_matches(op->c->r, l, &op->k, true, ours, p), n = 0;
	for (unsigned i = 0; i < m; i++) {
		bool known = false;
		for (unsigned j = 0; j < op->nother; j++)
			known |= op->other[j] == p[i].v;
		if (!known)
			p[n++] = p[i];
	}
	if (n)
		RACE_INC(op->c, fp_reads);
	int rc = kv_lookup(op->c, &op->k, p, n, &h);
	for (unsigned i = 0; !rc && i < n && op->nother < 8; i++)
		if (h.other & UINT64_C(1) << i)
			op->other[op->nother++] = p[i].v;
	*present = h.present;
	*tent = h.tent;
	*changed = h.changed;
	if (!rc && h.tent && !h.present)
		rc = foreign_tent(op, l, p, n);
	return rc;
}

enum { INS_DONE = 0, INS_AGAIN = 1 };

/* RC if it is an error, else "try again". */
static int again(int rc)
{
	return rc ? rc : INS_AGAIN;
}

/* Round trip 1: block WRITE + bucket READ; the checks; the slot to take. */
static int insert_look(struct race_op *op, const struct race_st *st,
		       struct race_look *l, uint32_t *bucket, unsigned *j)
{
	struct loco_race_client *c = op->c;
	struct loco_batch b;
	int rc = op_block(op, st->ni);
	if (rc)
		return rc;
	look_init(c, l, st, &op->k, false);
	loco_batch_init(&b, c->thr);
	op_post_block(op, &b);
	look_post(c, l, 0, &b);
	rc = look_run(c, l, &b, op_bnode(op), false);
	if (rc)
		return rc;
	enum look_verdict v = look_check(c, l, &op->k);
	if (v == LOOK_STALE)
		return again(op_refresh(op));
	if (v == LOOK_CLOSED || look_has_frozen(l, 0))
		return again(op_wait(op, st));
	bool present, tent, changed;
	rc = dup_check(op, l, 0, &present, &tent, &changed);
	if (rc)
		return rc;
	if (present)
		return (rc = look_seen(c, l)) ? rc : -EEXIST;
	if (tent || changed)
		return again(op_retry(op));
	/* The broken variant without the duplicate re-read also spreads
	 * concurrent inserters over the free slots, as inserters whose
	 * views of the bucket differ are: else most of its duplicates would
	 * collide on one slot and a short test would rarely see one. */
	unsigned skip = c->r->o.broken & LOCO_RACE_BROKEN_NO_DUP_CHECK ?
			(unsigned)(race_rand(c) >> 33) : 0;
	if (pick_slot(l, skip, bucket, j))
		return 0;
	rc = race_split(c, st);
	if (rc == -EAGAIN)
		return again(op_wait(op, st));
	return rc ? rc : again(op_refresh(op));
}

/* Round trip 2: CAS the slot to our tentative pointer, re-READ behind it;
 * the re-read's checks. 0: go commit. */
static int insert_claim(struct race_op *op, const struct race_st *st,
			struct race_look *l, uint64_t off)
{
	struct loco_race_client *c = op->c;
	struct loco_batch b;
	uint64_t old = 0, mine = tentative(op->item);
	loco_batch_init(&b, c->thr);
	loco_batch_cas(&b, &st->rr, off, 0, mine, &old);
	look_post(c, l, 0, &b);
	/* The view decides: no other copy (commit) or one (-EEXIST). */
	int rc = look_run(c, l, &b, ~0u, true);
	if (rc)
		return rc;
	if (old != 0)
		return again(op_retry(op));
	enum look_verdict v = look_check(c, l, &op->k);
	bool present = false, tent = false, changed = false;
	if (v == LOOK_OK && !(c->r->o.broken & LOCO_RACE_BROKEN_NO_DUP_CHECK))
		rc = dup_check(op, l, mine, &present, &tent, &changed);
	if (!rc && v == LOOK_OK && !present && !tent && !changed)
		return 0;
	int rc2 = untent(op, st, off);
	if (rc || rc2)
		return rc ? rc : rc2;
	if (present)
		return -EEXIST;
	if (v == LOOK_STALE)
		return again(op_refresh(op));
	if (v == LOOK_CLOSED)
		return again(op_wait(op, st));
	return again(op_retry(op));
}

static int insert_try(struct race_op *op)
{
	struct race_st st;
	struct race_look l;
	uint32_t bucket = 0;
	unsigned j = 0;
	int rc = race_locate(op->c, op->k.h1, &st);
	if (!rc)
		rc = insert_look(op, &st, &l, &bucket, &j);
	if (rc)
		return rc;
	uint64_t off = slot_off(bucket, j), old = 0;
	rc = insert_claim(op, &st, &l, off);
	if (rc)
		return rc;
	race_point("race.insert_tentative");
	/* The linearization point: visible from here; durable before the
	 * insert returns. */
	rc = race_cas_sync(op->c, &st.rr, off, tentative(op->item), op->item,
			   &old, race_op_durable(op->c->r, st.rr.node));
	if (rc)
		return rc;
	if (old != tentative(op->item))
		return again(op_retry(op));  /* cleared by a resize */
	op->has_block = false;
	return INS_DONE;
}

int loco_race_insert(struct loco_race_client *c, const void *key,
		     uint32_t klen, const void *val, uint32_t vlen)
{
	struct race_op op;
	int rc = op_start(&op, c, key, klen, val, vlen);
	if (rc)
		return rc;
	RACE_INC(c, inserts);
	do
		rc = insert_try(&op);
	while (rc == INS_AGAIN);
	op_drop_block(&op, rc);
	return rc;
}

/* ---- update and delete ------------------------------------------------------------ */

/* Find K's committed slot for a CAS: *POS, its subtable *ST and its block
 * word *W0. With a new block (update), its WRITE rides in the first
 * batch. 1: retry; -ENOENT: absent. */
static int find_once(struct race_op *op, const struct race_st *st, bool only_st,
		     struct race_look *l, struct race_pos *pos, uint64_t *w0)
{
	struct loco_race_client *c = op->c;
	struct race_pos p[4 * RACE_CSLOTS];
	struct race_hit h;
	struct loco_batch b;
	look_init(c, l, st, &op->k, !only_st);
	loco_batch_init(&b, c->thr);
	if (op->has_block)
		op_post_block(op, &b);
	look_post(c, l, 0, &b);
	int rc = look_run(c, l, &b, op_bnode(op), false);
	if (!rc)
		rc = look_current(op, l);
	if (rc)
		return rc;
	unsigned n = fp_matches(c->r, l, &op->k, false, 0, p);
	rc = kv_lookup(c, &op->k, p, n, &h);
	if (rc)
		return rc;
	if (h.found < 0 && h.changed)
		return again(op_retry(op));
	if (h.found < 0)
		return (rc = look_seen(c, l)) ? rc : -ENOENT;
	*pos = p[h.found];
	*w0 = h.w0;
	if (race_slot_frozen(pos->v))
		return again(op_wait(op, &l->st[pos->t]));
	return 0;
}

static int find_slot(struct race_op *op, struct race_look *l,
		     struct race_pos *pos, uint64_t *w0)
{
	for (;;) {
		struct race_st st;
		int rc = race_locate(op->c, op->k.h1, &st);
		if (!rc && op->val)
			rc = op_block(op, st.ni);
		if (!rc)
			rc = find_once(op, &st, false, l, pos, w0);
		if (rc == -ENOENT && st.state == RACE_MOVING)
			rc = find_once(op, &st, true, l, pos, w0);
		if (rc != INS_AGAIN)
			return rc;
	}
}

/* CAS K's slot from what we read to NEW; free the old block after. */
static int replace(struct race_op *op, uint64_t nv, const char *point)
{
	for (;;) {
		struct race_look l;
		struct race_pos pos;
		uint64_t w0 = 0, old = 0;
		int rc = find_slot(op, &l, &pos, &w0);
		if (rc)
			return rc;
		const struct race_st *st = &l.st[pos.t];
		if (op->val) {
			nv = op->item;
			/* The block went to the key's subtable's node; the slot
			 * is in a MOVING child's parent elsewhere: place it
			 * before the CAS publishes it. */
			uint32_t bnode = op->c->r->mn[op->bni].id;
			if (st->rr.node != bnode)
				rc = loco_fence(op->c->thr, LOCO_FENCE_PAIR, bnode);
			if (rc)
				return rc;
		}
		if (point)
			race_point(point);
		/* The linearization point, durable before the op returns (and
		 * before the old block is freed). */
		rc = race_cas_sync(op->c, &st->rr, slot_off(pos.bucket, pos.j),
				   pos.v, nv, &old,
				   race_op_durable(op->c->r, st->rr.node));
		if (rc)
			return rc;
		if (old == pos.v) {
			op->has_block = false;
			if (!op->val)
				race_point("race.delete_unlinked");
			return race_free_remote(op->c, pos.v, w0);
		}
		rc = op_retry(op);
		if (rc)
			return rc;
	}
}

int loco_race_update(struct loco_race_client *c, const void *key,
		     uint32_t klen, const void *val, uint32_t vlen)
{
	static const uint8_t empty;
	struct race_op op;
	if (!val)
		val = &empty;   /* an empty value: still an update, not a delete */
	int rc = op_start(&op, c, key, klen, val, vlen);
	if (rc)
		return rc;
	RACE_INC(c, updates);
	rc = replace(&op, 0, "race.update_written");
	op_drop_block(&op, rc);
	return rc;
}

int loco_race_delete(struct loco_race_client *c, const void *key,
		     uint32_t klen)
{
	struct race_op op;
	int rc = op_start(&op, c, key, klen, NULL, 0);
	if (rc)
		return rc;
	RACE_INC(c, deletes);
	return replace(&op, 0, NULL);
}
