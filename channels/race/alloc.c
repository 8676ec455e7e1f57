/* SPDX-License-Identifier: MIT */
/* KV block allocation.
 *
 * Each memory node's KV pool is cut into chunks of 64 fixed-size blocks.
 * A chunk belongs to one client slot (owner word: incarnation << 16 |
 * slot + 1, set by CAS) and only its owner hands its blocks out, choosing
 * blocks whose word 0 it knows DEAD or zero (never used): local, no round
 * trip. The new block's word 0 (a new generation, not DEAD) is written
 * with the KV in the insert's or update's first batch.
 *
 * Freeing is a CAS of word 0 to DEAD by whoever unlinked the block (the
 * CAS that removed it from its slot), posted asynchronously. Nobody else
 * writes another's block, so the owner learns of frees only by reading
 * word 0 of the blocks it handed out ("reclaim", when it runs short), and
 * frees never race with allocation: a late DEAD CAS aimed at an older
 * generation fails.
 *
 * A client that dies leaves at most its in-flight blocks LIVE and
 * unreferenced (an insert or update not committed, a delete that unlinked
 * but had not freed yet): the next incarnation of its slot adopts its
 * chunks and marks those DEAD after a reference scan of the table
 * (race_adopt_own), and loco_race_verify does the same for every chunk
 * at quiescence (race_reclaim_garbage). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "channels/race/internal.h"

#define OWNERS_PER_READ 512
#define RECLAIM_CHUNKS 16    /* chunks a reclaim reads (one round trip) */
#define RECLAIM_READS 64     /* READs it posts at most, beyond a chunk */
#define CLAIM_BACKOFF 64     /* reclaims without a claim after one failed */
#define AHEAD_BELOW 16       /* READ ahead when fewer blocks are free */
#define CHUNK_READ_MAX (16u * 1024)  /* one READ of a chunk up to this */

static uint64_t owner_word(const struct loco_race_client *c)
{
	return c->inc << 16 | (c->slot + 1);
}

static uint32_t owner_slot(uint64_t w)
{
	return (uint32_t)(w & 0xffff) - 1;
}

const struct loco_rregion *race_kv(const struct loco_race *r, unsigned ni)
{
	return &r->mn[ni].kv;
}

static uint64_t block_off(const struct loco_race *r, uint32_t block)
{
	return (uint64_t)block * r->block_len;
}

static size_t chunk_bytes(const struct loco_race *r)
{
	return (size_t)RACE_CHUNK_BLOCKS * r->block_len;
}

/* Bytes a READ of a chunk's words fills (post_words). */
static size_t words_bytes(const struct loco_race *r)
{
	return chunk_bytes(r) <= CHUNK_READ_MAX ? chunk_bytes(r) :
	       RACE_CHUNK_BLOCKS * 8;
}

int race_pools_init(struct loco_race_client *c)
{
	const struct loco_race *r = c->r;
	size_t blen = words_bytes(r);
	c->pool = calloc(r->nmn, sizeof(*c->pool));
	if (!c->pool)
		return -ENOMEM;
	for (unsigned i = 0; i < r->nmn; i++) {
		c->pool[i].cursor = (c->slot * 7919u) % r->nchunks;
		c->pool[i].ahead = -1;
		c->pool[i].abuf = aligned_alloc(64, (blen + 63) / 64 * 64);
		if (!c->pool[i].abuf)
			return -ENOMEM;
	}
	return 0;
}

void race_pools_fini(struct loco_race_client *c)
{
	if (!c->pool)
		return;
	for (unsigned i = 0; i < c->r->nmn; i++) {
		free(c->pool[i].ch);
		free(c->pool[i].abuf);
	}
	free(c->pool);
	c->pool = NULL;
}

void race_pools_forget(struct loco_race_client *c)
{
	for (unsigned i = 0; c->pool && i < c->r->nmn; i++) {
		struct race_pool *p = &c->pool[i];
		free(p->ch);
		p->ch = NULL;
		p->n = p->cap = 0;
		p->nfree = 0;
		p->first_free = 0;
		p->ahead = -1;
		p->claim_skip = 0;
	}
}

static struct race_own *own_find(struct race_pool *p, uint32_t idx)
{
	for (unsigned i = 0; i < p->n; i++)
		if (p->ch[i].idx == idx)
			return &p->ch[i];
	return NULL;
}

/* Chunk O of P has a free block (again). */
static void own_freed(struct race_pool *p, const struct race_own *o)
{
	unsigned k = (unsigned)(o - p->ch);
	if (k < p->first_free)
		p->first_free = k;
}

static struct race_own *own_add(struct race_pool *p, uint32_t idx)
{
	if (p->n == p->cap) {
		unsigned cap = p->cap ? 2 * p->cap : 8;
		struct race_own *ch = realloc(p->ch, cap * sizeof(*ch));
		if (!ch)
			return NULL;
		p->ch = ch;
		p->cap = cap;
	}
	struct race_own *o = &p->ch[p->n++];
	memset(o, 0, sizeof(*o));
	o->idx = idx;
	return o;
}

/* READs post_words posts for the blocks WANT of a chunk. */
static unsigned words_reads(const struct loco_race *r, uint64_t want)
{
	return chunk_bytes(r) <= CHUNK_READ_MAX ? 1 :
	       (unsigned)__builtin_popcountll(want);
}

/* Add READs of word 0 of the blocks WANT of chunk IDX into BUF
 * (words_bytes) to L: the whole chunk in one READ when it is small (BUF
 * then holds the blocks), else a READ per block (BUF holds 64 words). */
static unsigned post_words(struct race_ops *l, unsigned ni, uint32_t idx,
			   uint64_t want, uint8_t *buf)
{
	const struct loco_race *r = l->c->r;
	uint64_t base = block_off(r, idx * RACE_CHUNK_BLOCKS);
	if (chunk_bytes(r) <= CHUNK_READ_MAX) {
		race_ops_read(l, race_kv(r, ni), base, buf,
			      (uint32_t)chunk_bytes(r));
		return 1;
	}
	for (unsigned i = 0; i < RACE_CHUNK_BLOCKS; i++)
		if (want & UINT64_C(1) << i)
			race_ops_read(l, race_kv(r, ni),
				      base + (uint64_t)i * r->block_len,
				      buf + 8 * i, 8);
	return words_reads(r, want);
}

/* Word 0 of block I from a buffer post_words filled. */
static uint64_t word_at(const struct loco_race *r, const uint8_t *buf,
			unsigned i)
{
	uint64_t w;
	memcpy(&w, buf + (chunk_bytes(r) <= CHUNK_READ_MAX ?
			  (size_t)i * r->block_len : 8 * (size_t)i), 8);
	return w;
}

/* Read word 0 of every block of chunk IDX into W0[64] (through c->big). */
static int read_words(struct loco_race_client *c, unsigned ni, uint32_t idx,
		      uint64_t *w0)
{
	struct race_ops l;
	race_ops_init(&l, c);
	post_words(&l, ni, idx, ~UINT64_C(0), c->big);
	int rc = race_ops_run(&l);
	for (unsigned i = 0; !rc && i < RACE_CHUNK_BLOCKS; i++)
		w0[i] = word_at(c->r, c->big, i);
	return rc;
}

/* Learn chunk O's blocks from their word 0: DEAD or never used are free,
 * the rest in use; remember every generation. */
static int own_learn(struct loco_race_client *c, unsigned ni,
		     struct race_own *o)
{
	uint64_t w0[RACE_CHUNK_BLOCKS];
	int rc = read_words(c, ni, o->idx, w0);
	if (rc)
		return rc;
	c->pool[ni].nfree -= (unsigned)__builtin_popcountll(o->free);
	o->free = o->used = 0;
	for (unsigned i = 0; i < RACE_CHUNK_BLOCKS; i++) {
		o->gen[i] = (uint16_t)race_kv_gen(w0[i]);
		if (race_kv_live(w0[i]))
			o->used |= UINT64_C(1) << i;
		else
			o->free |= UINT64_C(1) << i;
	}
	c->pool[ni].nfree += (unsigned)__builtin_popcountll(o->free);
	if (o->free)
		own_freed(&c->pool[ni], o);
	return 0;
}

/* Blocks we handed out whose word 0 (from BUF, where post_words READ the
 * blocks WANT) an unlinker marked DEAD: free again. Only the generation
 * we wrote counts, so a word read before we handed the block out anew is
 * ignored; a block handed out after the READ was posted is not in WANT:
 * BUF holds no word of it (one READ per block: another chunk's, from an
 * earlier READ ahead into the same buffer). */
static void absorb(struct race_pool *p, struct race_own *o,
		   const struct loco_race *r, const uint8_t *buf, uint64_t want)
{
	for (unsigned i = 0; i < RACE_CHUNK_BLOCKS; i++) {
		uint64_t bit = UINT64_C(1) << i, w;
		if (!(o->used & want & bit))
			continue;
		w = word_at(r, buf, i);
		if (race_kv_live(w) || race_kv_gen(w) != o->gen[i])
			continue;
		o->used &= ~bit;
		o->free |= bit;
		p->nfree++;
		own_freed(p, o);
	}
}

/* Find the blocks we handed out that an unlinker marked DEAD since, in
 * one pipelined round trip: the words of the owned chunks with blocks out
 * from the round-robin position on: up to MAX_CHUNKS chunks and
 * MAX_READS READs (at least one chunk). *CHUNKS and *READS get the chunks
 * read and the READs posted. */
static int reclaim(struct loco_race_client *c, unsigned ni, unsigned max_chunks,
		   unsigned max_reads, unsigned *chunks, unsigned *reads)
{
	struct race_pool *p = &c->pool[ni];
	size_t per = words_bytes(c->r);
	unsigned n = max_chunks < p->n ? max_chunks : p->n;
	uint8_t *buf = malloc(per * (n ? n : 1));
	struct race_own **o = malloc(sizeof(*o) * (n ? n : 1));
	uint64_t *want = malloc(sizeof(*want) * (n ? n : 1));
	uint64_t f0 = p->nfree;
	unsigned k = 0, seen = 0;
	int rc = buf && o && want ? 0 : -ENOMEM;
	struct race_ops l;
	race_ops_init(&l, c);
	*reads = 0;
	for (; !rc && k < n && seen < p->n; seen++) {
		struct race_own *x = &p->ch[(p->ahead_next + seen) % p->n];
		if (!x->used)
			continue;
		if (k && *reads + words_reads(c->r, x->used) > max_reads)
			break;
		o[k] = x;
		want[k] = x->used;
		*reads += post_words(&l, ni, x->idx, x->used, buf + k * per);
		k++;
	}
	if (p->n)
		p->ahead_next = (p->ahead_next + seen) % p->n;
	*chunks = k;
	if (!rc && k)
		rc = race_ops_run(&l);
	for (unsigned j = 0; !rc && j < k; j++)
		absorb(p, o[j], c->r, buf + j * per, want[j]);
	RACE_INC(c, reclaims);
	race_count(c, RACE_STAT(reclaim_reads), *reads);
	race_count(c, RACE_STAT(reclaim_found), p->nfree - f0);
	free(buf);
	free(o);
	free(want);
	return rc;
}

/* READ ahead: the words of the next chunk (round robin) with blocks out,
 * posted with the client's async ops (the next operation's first wait
 * covers it, no round trip of its own); absorbed at a later allocation. */
static void ahead_post(struct loco_race_client *c, unsigned ni)
{
	struct race_pool *p = &c->pool[ni];
	struct race_own *best = NULL;
	for (unsigned k = 0; !best && k < p->n; k++) {
		struct race_own *o = &p->ch[(p->ahead_next + k) % p->n];
		if (o->used)
			best = o;
	}
	if (!best)
		return;
	p->ahead_next = (unsigned)(best - p->ch) + 1;
	struct race_ops l;
	race_ops_init(&l, c);
	race_count(c, RACE_STAT(ahead_reads),
		   post_words(&l, ni, best->idx, best->used, p->abuf));
	if (!race_ops_post(&l)) {
		p->ahead = best->idx;
		p->ahead_pos = (unsigned)(best - p->ch);
		p->ahead_want = best->used;
	}
}

static void ahead_take(struct loco_race_client *c, unsigned ni)
{
	struct race_pool *p = &c->pool[ni];
	if (p->ahead < 0 || c->pend.peers)
		return;   /* none, or not known complete yet */
	/* Where the READ ahead's chunk was (no scan of every owned chunk an
	 * allocation: a load of N keys cost N^2 / 64 compares), unless a
	 * release or a reset emptied the list since. */
	struct race_own *o = p->ahead_pos < p->n &&
			     p->ch[p->ahead_pos].idx == (uint32_t)p->ahead ?
			     &p->ch[p->ahead_pos] : own_find(p, (uint32_t)p->ahead);
	p->ahead = -1;
	uint64_t f0 = p->nfree;
	if (o)
		absorb(p, o, c->r, p->abuf, p->ahead_want);
	race_count(c, RACE_STAT(ahead_found), p->nfree - f0);
}

/* Claim a chunk nobody owns (from our cursor) and learn its blocks. */
static int claim(struct loco_race_client *c, unsigned ni, bool *got)
{
	const struct loco_race *r = c->r;
	struct race_pool *p = &c->pool[ni];
	uint64_t *own = (uint64_t *)c->big;
	*got = false;
	for (uint32_t done = 0, n; done < r->nchunks; done += n) {
		uint32_t f = (p->cursor + done) % r->nchunks;
		n = r->nchunks - f < OWNERS_PER_READ ? r->nchunks - f :
		    OWNERS_PER_READ;
		/* A snapshot to choose from; the CAS below takes the chunk. */
		int rc = loco_read(c->thr, &r->mn[ni].kvc, (uint64_t)f * 8, own,
				   n * 8);
		for (uint32_t i = 0; !rc && i < n; i++) {
			uint64_t old = 0;
			if (own[i])
				continue;
			/* Durable before we hand its blocks out: after a
			 * power cut nobody may claim it again. */
			rc = race_cas_sync(c, &r->mn[ni].kvc, (uint64_t)(f + i) * 8,
					   0, owner_word(c), &old, true);
			if (rc || old)
				continue;
			race_point("race.alloc_claimed");
			RACE_INC(c, claims);
			p->cursor = (f + i + 1) % r->nchunks;
			struct race_own *o = own_add(p, f + i);
			*got = true;
			return o ? own_learn(c, ni, o) : -ENOMEM;
		}
		if (rc)
			return rc;
	}
	return 0;
}

/* No block known free: read the next few owned chunks' words; if they
 * held few freed blocks, claim a fresh chunk rather than read the rest
 * (the blocks freed meanwhile accumulate, so the next READs find more);
 * only when that gives nothing either, read every owned chunk, and claim
 * again (the pool may have freed a chunk meanwhile) before -ENOMEM. */
static int refill(struct loco_race_client *c, unsigned ni)
{
	struct race_pool *p = &c->pool[ni];
	unsigned chunks = 0, reads = 0;
	bool got = false;
	int rc = reclaim(c, ni, RECLAIM_CHUNKS, RECLAIM_READS, &chunks, &reads);
	/* Enough: at most 4 READs per block found, and 2 blocks per chunk
	 * read (the slack this keeps is about 2 of a chunk's 64 blocks). */
	uint64_t want = reads / 4 > 2 * chunks ? reads / 4 : 2 * chunks;
	want = want ? want : 1;   /* no chunk yet */
	if (!rc && p->nfree < want && p->claim_skip) {
		p->claim_skip--;
	} else if (!rc && p->nfree < want) {
		rc = claim(c, ni, &got);
		if (!rc && !got)
			p->claim_skip = CLAIM_BACKOFF;
	}
	if (!rc && !p->nfree)
		rc = reclaim(c, ni, p->n, UINT32_MAX, &chunks, &reads);
	if (!rc && !p->nfree) {
		rc = claim(c, ni, &got);
		if (!rc && !got) {
			loco_warn(c->r->base.name, "node %u: KV pool exhausted "
				  "(%u blocks, %u chunks held by slot %u)",
				  c->r->mn[ni].id, c->r->nblocks, p->n, c->slot);
			rc = -ENOMEM;
		}
	}
	return rc;
}

static bool take(struct race_pool *p, uint32_t *block, unsigned *gen)
{
	for (unsigned k = p->first_free; k < p->n; k++) {
		struct race_own *o = &p->ch[k];
		p->first_free = k;
		if (!o->free)
			continue;
		unsigned i = (unsigned)__builtin_ctzll(o->free);
		o->free &= o->free - 1;
		p->nfree--;
		o->used |= UINT64_C(1) << i;
		uint16_t g = (uint16_t)(o->gen[i] + 1);
		o->gen[i] = g ? g : 1;   /* 0 means never used */
		*gen = o->gen[i];
		*block = o->idx * RACE_CHUNK_BLOCKS + i;
		return true;
	}
	p->first_free = p->n;
	return false;
}

int race_alloc(struct loco_race_client *c, unsigned ni, uint32_t *block,
	       unsigned *gen)
{
	struct race_pool *p = &c->pool[ni];
	ahead_take(c, ni);
	if (take(p, block, gen)) {
		if (p->nfree < AHEAD_BELOW && p->ahead < 0)
			ahead_post(c, ni);
		return 0;
	}
	int rc = refill(c, ni);
	if (rc)
		return rc;
	return take(p, block, gen) ? 0 : -ENOMEM;
}

/* Post a DEAD CAS on word 0 of BLOCK into the async set. */
static int post_dead(struct loco_race_client *c, unsigned ni, uint32_t block,
		     uint64_t w0)
{
	int rc = 0;
	if (c->npend == RACE_PEND_MAX)
		rc = race_pend_wait(c);
	if (rc)
		return rc;
	/* Ordering: none needed; the owner reads the word when it reclaims,
	 * and the next wait of this client covers the CAS. */
	return loco_post_cas(c->thr, race_kv(c->r, ni), block_off(c->r, block),
			     w0, w0 | RACE_KV_DEAD, &c->pend_old[c->npend++],
			     &c->pend);
}

int race_free_local(struct loco_race_client *c, unsigned ni, uint32_t block,
		    uint64_t w0)
{
	struct race_own *o = own_find(&c->pool[ni], block / RACE_CHUNK_BLOCKS);
	if (!o)
		return -EINVAL;
	/* Mark it DEAD too: a block no slot names is garbage to an audit
	 * otherwise. We may hand it out again at once: our next WRITE of it
	 * follows the CAS on the same QP. */
	int rc = post_dead(c, ni, block, w0);
	if (rc)
		return rc;
	uint64_t bit = UINT64_C(1) << (block % RACE_CHUNK_BLOCKS);
	o->used &= ~bit;
	o->free |= bit;
	c->pool[ni].nfree++;
	own_freed(&c->pool[ni], o);
	return 0;
}

int race_free_remote(struct loco_race_client *c, uint64_t slot, uint64_t w0)
{
	unsigned ni = race_slot_ni(slot);
	int rc = post_dead(c, ni, race_slot_block(slot), w0);
	/* Durable too (the unlink before it was persisted already): else a
	 * power cut leaves the block LIVE and its owner never reuses it. */
	if (!rc && race_op_durable(c->r, c->r->mn[ni].id))
		rc = race_persist_post(c, c->r->mn[ni].id);
	return rc;
}

int race_pools_release(struct loco_race_client *c)
{
	int rc = 0;
	for (unsigned ni = 0; ni < c->r->nmn; ni++) {
		struct race_pool *p = &c->pool[ni];
		while (!rc && p->n) {
			uint64_t old = 0;
			const struct race_own *o = &p->ch[p->n - 1];
			rc = loco_cas(c->thr, &c->r->mn[ni].kvc, (uint64_t)o->idx * 8,
				      owner_word(c), 0, &old);
			p->n--;
		}
		p->nfree = 0;
		p->first_free = 0;
		p->ahead = -1;
		/* Durable, or a power cut leaves them with our incarnation,
		 * which nobody adopts. */
		if (!rc)
			rc = race_persist(c, c->r->mn[ni].id);
	}
	return rc;
}

/* ---- adoption and garbage -------------------------------------------------------- */

/* Take chunks whose owner word names SLOT with another incarnation. */
static int take_stale(struct loco_race_client *c, unsigned ni, unsigned *n)
{
	const struct loco_race *r = c->r;
	uint64_t *own = (uint64_t *)c->big;
	int rc = 0;
	for (uint32_t f = 0; !rc && f < r->nchunks; f += OWNERS_PER_READ) {
		uint32_t k = r->nchunks - f < OWNERS_PER_READ ? r->nchunks - f :
			     OWNERS_PER_READ;
		rc = loco_read(c->thr, &r->mn[ni].kvc, (uint64_t)f * 8, own, k * 8);
		for (uint32_t i = 0; !rc && i < k; i++) {
			uint64_t v = own[i], old = 0;
			if (!v || owner_slot(v) != c->slot || v == owner_word(c))
				continue;
			rc = race_cas_sync(c, &r->mn[ni].kvc, (uint64_t)(f + i) * 8,
					   v, owner_word(c), &old, true);
			if (rc || old != v)
				continue;
			struct race_own *o = own_add(&c->pool[ni], f + i);
			if (!o)
				return -ENOMEM;
			(*n)++;
		}
	}
	return rc;
}

/* Mark DEAD the LIVE blocks of our chunk O that REF does not name; then
 * learn the chunk. */
static int adopt_chunk(struct loco_race_client *c, unsigned ni,
		       struct race_own *o, const uint64_t *ref, uint64_t *n)
{
	uint64_t w0[RACE_CHUNK_BLOCKS];
	int rc = read_words(c, ni, o->idx, w0);
	uint64_t refs = ref[o->idx];   /* 64 blocks: one word of the bitmap */
	for (unsigned i = 0; !rc && i < RACE_CHUNK_BLOCKS; i++) {
		uint64_t old = 0;
		if (!race_kv_live(w0[i]) || (refs & UINT64_C(1) << i))
			continue;
		rc = loco_cas(c->thr, race_kv(c->r, ni),
			      block_off(c->r, o->idx * RACE_CHUNK_BLOCKS + i),
			      w0[i], w0[i] | RACE_KV_DEAD, &old);
		*n += !rc && old == w0[i];
	}
	if (!rc)
		rc = own_learn(c, ni, o);
	/* A free block skips a generation: the old incarnation may have
	 * written it with the next one, which a power cut took back, and a
	 * reader still holding a slot value naming that write must not match
	 * ours. (A block in use keeps its word's: its free is by that.) */
	for (unsigned i = 0; !rc && i < RACE_CHUNK_BLOCKS; i++) {
		uint16_t g = (uint16_t)(o->gen[i] + 1);
		if (o->free & UINT64_C(1) << i)
			o->gen[i] = g ? g : 1;
	}
	return rc;
}

int race_adopt_own(struct loco_race_client *c)
{
	unsigned n = 0;
	int rc = 0;
	for (unsigned ni = 0; !rc && ni < c->r->nmn; ni++)
		rc = take_stale(c, ni, &n);
	if (rc || !n)
		return rc;
	/* Our previous incarnation's in-flight blocks are LIVE and named by
	 * no slot; nobody else creates references into our chunks. */
	uint64_t **refs = NULL, reclaimed = 0;
	rc = race_scan_refs(c, &refs);
	if (rc == -EAGAIN) {
		/* Splits all through the scan: take the chunks as they are;
		 * their garbage waits for loco_race_verify. */
		loco_info(c->r->base.name, "slot %u: the table kept splitting "
			  "during the scan; adopted chunks not swept", c->slot);
		rc = 0;
		for (unsigned ni = 0; ni < c->r->nmn; ni++)
			for (unsigned k = 0; !rc && k < c->pool[ni].n; k++)
				rc = own_learn(c, ni, &c->pool[ni].ch[k]);
		return rc;
	}
	for (unsigned ni = 0; !rc && ni < c->r->nmn; ni++)
		for (unsigned k = 0; !rc && k < c->pool[ni].n; k++)
			rc = adopt_chunk(c, ni, &c->pool[ni].ch[k], refs[ni],
					 &reclaimed);
	race_refs_free(c->r, refs);
	if (!rc && reclaimed)
		loco_info(c->r->base.name, "slot %u: %llu blocks a previous "
			  "incarnation left in flight reclaimed", c->slot,
			  (unsigned long long)reclaimed);
	return rc;
}

#define WORDS_READ_BYTES (1u << 20)

/* Word 0 of every block of node NI, read in large pieces. */
static int read_all_words(struct loco_race_client *c, unsigned ni,
			  uint64_t *w0)
{
	const struct loco_race *r = c->r;
	uint32_t per = WORDS_READ_BYTES / r->block_len;
	uint8_t *buf = malloc(WORDS_READ_BYTES);
	int rc = buf ? 0 : -ENOMEM;
	for (uint32_t f = 0; !rc && f < r->nblocks; f += per) {
		uint32_t k = r->nblocks - f < per ? r->nblocks - f : per;
		rc = loco_read(c->thr, race_kv(r, ni), block_off(r, f), buf,
			       k * r->block_len);
		for (uint32_t i = 0; !rc && i < k; i++)
			memcpy(&w0[f + i], buf + (size_t)i * r->block_len, 8);
	}
	free(buf);
	return rc;
}

static int mark_dead(struct loco_race_client *c, unsigned ni,
		     const uint64_t *w0, const uint64_t *ref, uint64_t *n,
		     uint64_t *live)
{
	const struct loco_race *r = c->r;
	int rc = 0;
	for (uint32_t b = 0; !rc && b < r->nblocks; b++) {
		bool referenced = ref[b / 64] & UINT64_C(1) << (b % 64);
		bool in_use = race_kv_live(w0[b]);
		if (in_use && !referenced) {
			uint64_t old = 0;
			rc = loco_cas(c->thr, race_kv(r, ni), block_off(r, b),
				      w0[b], w0[b] | RACE_KV_DEAD, &old);
			if (!rc && old == w0[b])
				(*n)++;
			in_use = !rc && old != w0[b] && race_kv_live(old);
		}
		if (live && in_use)
			live[b / 64] |= UINT64_C(1) << (b % 64);
	}
	return rc;
}

int race_reclaim_garbage(struct loco_race_client *c, uint64_t *const *refs,
			 uint64_t *n, uint64_t **live_out)
{
	const struct loco_race *r = c->r;
	uint64_t *w0 = malloc((size_t)r->nblocks * 8);
	int rc = w0 ? 0 : -ENOMEM;
	*n = 0;
	for (unsigned ni = 0; !rc && ni < r->nmn; ni++) {
		rc = read_all_words(c, ni, w0);
		if (!rc)
			rc = mark_dead(c, ni, w0, refs[ni], n,
				       live_out ? live_out[ni] : NULL);
	}
	free(w0);
	return rc;
}
