/* SPDX-License-Identifier: MIT */
/* Data block allocation (rTX §4.4).
 *
 * Each hosting node's data pool is cut into chunks of 64 blocks. A chunk
 * belongs to one thread slot (chunk owner word: incarnation << 16 |
 * slot + 1, set by CAS) and only that slot's worker allocates from it or
 * frees into it. The allocation bitmap (one word per chunk) records which
 * blocks are in use; the owner updates it in batches (a WRITE every
 * RTX_FLUSH_EVERY allocations and at scans), so after a crash it may be
 * stale. A commit whose write set is on one node asks for its blocks in
 * a row (rtx_alloc_run), so that one data WRITE fills them; it takes
 * them one at a time when no owned chunk has such a run free.
 *
 * Freeing is by reference scan, never by a message from another client:
 * a block is in use while a TXObj points to it, while a log that is not
 * DONE names it (old or new pointer: "data pointers reused only after
 * DONE"), or while the owner's open transaction holds it. New references
 * to a chunk's blocks are created only by its owner (a transaction
 * installs blocks of its own worker; a steal installs the stealer's), so
 * while the owner scans, references into its chunks can only go away:
 * the scan reads the meta pool, then the logs (a block replaced before
 * the meta read is either named by a log still not DONE, or its
 * transaction is DONE), and frees every owned block it did not see.
 *
 * Giving chunks back: right after a scan has flushed a chunk's bitmap
 * word (the blocks that may still be referenced), a worker may give the
 * chunk back (owner word 0); the next owner starts from that word and its
 * own scans free the rest. A scan gives entirely free chunks back while
 * more than two thirds of the owned blocks are free and half of the rest
 * stays free (pool_keep); after a worker found no free block and FAA'd
 * the node's want word, the next scan of every worker also gives back
 * partly used chunks (at least half free, none holding a block of the
 * open transaction) while a third of the rest stays free, and claims
 * again only below a third. A worker scans at least once per
 * owned-blocks allocations, and a destroyed worker gives everything
 * back: no allocating worker sits on free blocks that another one lacks
 * (an idle one keeps its chunks until it allocates again or is
 * destroyed). Only a crashed client's chunks wait for its slot's next
 * incarnation or an adoption.
 *
 * Incarnations: a worker that takes a slot bumps the slot's incarnation
 * and adopts the chunks that carry an older one, rebuilding their bitmap
 * words by a scan. loco_rtx_adopt_slot does the same for a slot of a
 * client that is gone, so its garbage is reclaimed and nothing leaks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rtx/internal.h"

#define CHUNK_WORDS_PER_READ (RTX_SCAN_BYTES / 8)
#define TABLE_WORDS (CHUNK_WORDS_PER_READ / 2)   /* owner + bitmap words */

static uint64_t owner_word(const struct loco_rtx_worker *w)
{
	return w->inc << 16 | (w->slot + 1);
}

static uint32_t owner_slot(uint64_t word)
{
	return (uint32_t)(word & 0xffff) - 1;
}

/* Blocks of chunk C that may be allocated (block 0 is null). */
static uint64_t chunk_valid(uint32_t c)
{
	return c ? ~UINT64_C(0) : ~UINT64_C(1);
}

int rtx_pools_init(struct loco_rtx_worker *w)
{
	const struct loco_rtx *x = w->x;
	w->pool = calloc(x->nnodes, sizeof(*w->pool));
	if (!w->pool)
		return -ENOMEM;
	for (unsigned i = 0; i < x->nnodes; i++) {
		struct rtx_pool *p = &w->pool[i];
		p->pos = malloc(x->nchunks * sizeof(*p->pos));
		p->seen = calloc(x->nchunks, sizeof(*p->seen));
		if (!p->pos || !p->seen)
			return -ENOMEM;
		memset(p->pos, -1, x->nchunks * sizeof(*p->pos));
		p->claim_cursor = (w->slot * 7919u) % x->nchunks;
	}
	return 0;
}

void rtx_pools_fini(struct loco_rtx_worker *w)
{
	if (!w->pool)
		return;
	for (unsigned i = 0; i < w->x->nnodes; i++) {
		free(w->pool[i].pos);
		free(w->pool[i].seen);
		free(w->pool[i].ch);
	}
	free(w->pool);
	w->pool = NULL;
}

static int chunk_add(struct rtx_pool *p, uint32_t idx, uint64_t free_mask,
		     bool stale)
{
	if (p->n == p->cap) {
		unsigned cap = p->cap ? 2 * p->cap : 8;
		struct rtx_chunk *ch = realloc(p->ch, cap * sizeof(*ch));
		if (!ch)
			return -ENOMEM;
		p->ch = ch;
		p->cap = cap;
	}
	/* A claimed chunk's remote word is what its last owner gave back
	 * (FREE_MASK is its complement); an adopted one's is whatever its
	 * last owner flushed: rewrite it after the scan. */
	uint64_t alloc = chunk_valid(idx) & ~free_mask;
	p->ch[p->n] = (struct rtx_chunk){ .idx = idx, .free = free_mask,
					  .alloc = alloc, .stage = alloc,
					  .stale = stale };
	p->pos[idx] = (int32_t)p->n++;
	p->run_none = 0;
	return 0;
}

/* ---- bitmap flush -------------------------------------------------------- */

static int pool_flush(struct loco_rtx_worker *w, uint32_t ni)
{
	struct rtx_pool *p = &w->pool[ni];
	const struct loco_rregion *bm = &w->x->node[ni].bitmap;
	/* The previous flush's sources are ours again once it completed. */
	int rc = rtx_wait(w, &w->flush_ack);
	for (unsigned i = 0; !rc && i < p->n; i++) {
		struct rtx_chunk *c = &p->ch[i];
		if (c->stage == c->alloc && !c->stale)
			continue;
		c->stage = c->alloc;
		c->stale = false;
		rc = loco_post_write(w->thr, bm, (uint64_t)c->idx * 8, &c->stage,
				     8, &w->flush_ack);
	}
	p->unflushed = 0;
	return rc;
}

/* ---- reference scan ------------------------------------------------------ */

/* Mark BLOCK kept if one of ours; OPEN: it belongs to the open
 * transaction (its chunk must not be given back). */
static void mark_block(struct rtx_pool *p, uint64_t block, uint32_t nblocks,
		       bool open)
{
	if (!block || block >= nblocks)
		return;
	int32_t pos = p->pos[block / LOCO_RTX_CHUNK_BLOCKS];
	if (pos < 0)
		return;
	p->ch[pos].keep |= UINT64_C(1) << (block % LOCO_RTX_CHUNK_BLOCKS);
	p->ch[pos].open |= open;
}

/* Note BLOCK as named by a pointer: a bit in the node-wide scratch word
 * of its chunk, whoever owns it (only owned chunks' words are read:
 * pool_scan clears them first and collects them after), so the scan's
 * loops over every TXObj and log entry need no lookup of the owner. */
static void keep_block(struct rtx_pool *p, uint64_t block, uint32_t nblocks)
{
	if (block - 1 < (uint64_t)nblocks - 1)
		p->seen[block / LOCO_RTX_CHUNK_BLOCKS] |=
			UINT64_C(1) << (block % LOCO_RTX_CHUNK_BLOCKS);
}

static int scan_meta(struct loco_rtx_worker *w, uint32_t ni)
{
	const struct loco_rtx *x = w->x;
	const uint32_t per = RTX_SCAN_BYTES / RTX_META_LEN;
	uint64_t *meta = (uint64_t *)w->scan;
	int rc = 0;
	for (uint32_t f = 0; !rc && f < x->o.objects; f += per) {
		uint32_t n = x->o.objects - f < per ? x->o.objects - f : per;
		rc = loco_read(w->thr, rtx_meta(x, ni), (uint64_t)f * RTX_META_LEN,
			       meta, n * RTX_META_LEN);
		for (uint32_t i = 0; !rc && i < n; i++)
			keep_block(&w->pool[ni],
				   loco_rtx_dptr_block(meta[2 * i + 1]),
				   x->nblocks);
	}
	return rc;
}

/* Blocks named by log BUF if it is open (loco_rtx_log_open: whole, its
 * state word its own, not DONE). */
static void keep_logged(struct loco_rtx_worker *w, uint32_t ni,
			const uint8_t *buf)
{
	const struct loco_rtx_log_hdr *h = (const void *)buf;
	const struct loco_rtx_log_ent *e = (const void *)(buf + sizeof(*h));
	if (!loco_rtx_log_open(buf, w->x->o.max_writes))
		return;
	for (unsigned i = 0; i < loco_rtx_log_nent(h); i++) {
		if (loco_raddr_node(e[i].mptr) != w->x->node[ni].id)
			continue;
		keep_block(&w->pool[ni], loco_rtx_dptr_block(e[i].old_dptr),
			   w->x->nblocks);
		keep_block(&w->pool[ni], loco_rtx_dptr_block(e[i].new_dptr),
			   w->x->nblocks);
	}
}

static int scan_logs(struct loco_rtx_worker *w, uint32_t ni)
{
	const struct loco_rtx *x = w->x;
	uint32_t per = RTX_SCAN_BYTES / x->log_len;
	int rc = 0;
	if (!per)
		per = 1;
	for (uint32_t f = 0; !rc && f < x->scan_slots; f += per) {
		uint32_t n = x->scan_slots - f < per ? x->scan_slots - f : per;
		rc = loco_read(w->thr, &x->logs, rtx_log_off(x, f), w->scan,
			       n * x->log_len);
		for (uint32_t i = 0; !rc && i < n; i++)
			keep_logged(w, ni, w->scan + (size_t)i * x->log_len);
	}
	return rc;
}

static void keep_open_tx(struct loco_rtx_worker *w, uint32_t ni)
{
	if (!w->active)
		return;
	for (unsigned i = 0; i < w->nw; i++)
		if (w->rs[w->ws[i].ri].ni == ni)
			mark_block(&w->pool[ni], w->ws[i].block, w->x->nblocks,
				   true);
}

/* Drop chunk at position POS (its flush must be complete). */
static void chunk_remove(struct rtx_pool *p, unsigned pos)
{
	p->pos[p->ch[pos].idx] = -1;
	p->ch[pos] = p->ch[--p->n];
	if (pos < p->n)
		p->pos[p->ch[pos].idx] = (int32_t)pos;
}

/* Give the chunk at POS back, right after a scan's flush: its bitmap
 * word (what the scan kept) is written, so the next owner starts from it. */
static int chunk_release(struct loco_rtx_worker *w, uint32_t ni, unsigned pos)
{
	struct rtx_pool *p = &w->pool[ni];
	const struct rtx_node *n = &w->x->node[ni];
	uint64_t idx = p->ch[pos].idx, old = 0;
	assert(p->ch[pos].stage == p->ch[pos].alloc && !p->ch[pos].stale);
	/* Ordering: after pool_flush's WRITE of the bitmap word, complete
	 * (flush_ack waited) and on the same QP; durable before the chunk is
	 * anyone else's to claim. */
	int rc = rtx_persist(w);
	if (!rc)
		rc = loco_cas(w->thr, &n->chunks, idx * 8, owner_word(w), 0,
			      &old);
	if (!rc) {
		RTX_INC(w, chunk_returns);
		chunk_remove(p, pos);
	}
	return rc;
}

static unsigned nfree_of(const struct rtx_chunk *c)
{
	return (unsigned)__builtin_popcountll(c->free);
}

/* Worth handing over on its own: at least half the chunk is free. */
static bool half_free(unsigned nfree)
{
	return nfree >= LOCO_RTX_CHUNK_BLOCKS / 2;
}

/* May chunk C go to another worker: entirely free, or (SQUEEZE) at
 * least half free without a block of the open transaction (that block
 * stays with its allocator until installed or freed). */
static bool chunk_givable(const struct rtx_chunk *c, bool squeeze)
{
	return c->free == chunk_valid(c->idx) ||
	       (squeeze && !c->open && half_free(nfree_of(c)));
}

/* The share of its owned blocks a worker keeps free: it claims a chunk
 * when fewer than 1/KEEP are free after a scan, and gives one back only
 * if 1/KEEP stays free. Half (2 times the live blocks held, a scan
 * about once per live-block count of allocations) unless a worker asked
 * for blocks since the last scan; then a third, so that what a squeeze
 * gives back is not claimed again at once. Half the scans of a third,
 * and the more free blocks a scan finds, the more of them lie in pairs
 * (one data WRITE for a transfer's two new blocks, rtx_alloc_run). */
static unsigned pool_keep(const struct rtx_pool *p)
{
	return p->lean ? 3 : 2;
}

/* Position of the chunk to give back next, or -1: the freest givable
 * one while more than two thirds of the owned blocks are free; when a
 * worker lacks blocks (SQUEEZE) also partly used ones; either only as
 * long as 1/pool_keep stays free (below that this worker would claim
 * again). A last chunk goes only when entirely free. */
static int trim_pick(const struct rtx_pool *p, uint64_t nfree, bool squeeze)
{
	uint64_t owned = (uint64_t)p->n * LOCO_RTX_CHUNK_BLOCKS;
	unsigned best_free = 0;
	int best = -1;
	if (nfree * 3 <= owned * 2 && !squeeze)
		return -1;
	for (unsigned i = 0; i < p->n; i++) {
		const struct rtx_chunk *c = &p->ch[i];
		if (chunk_givable(c, squeeze && p->n > 1) &&
		    nfree_of(c) > best_free) {
			best = (int)i;
			best_free = nfree_of(c);
		}
	}
	if (best >= 0 &&
	    (nfree - best_free) * pool_keep(p) < owned - LOCO_RTX_CHUNK_BLOCKS)
		return -1;
	return best;
}

/* Read node NI's want word: has a worker lacked blocks since our last
 * look? */
static int pool_want(struct loco_rtx_worker *w, uint32_t ni, bool *squeeze)
{
	struct rtx_pool *p = &w->pool[ni];
	uint64_t v = 0;
	/* A hint, ordered with nothing: a missed ask is seen next scan. */
	int rc = loco_read(w->thr, &w->x->node[ni].chunks, rtx_want_off(w->x),
			   &v, 8);
	*squeeze = !rc && v != p->want_seen;
	if (!rc)
		p->want_seen = v;
	return rc;
}

/* Give chunks back while trim_pick finds one (after a scan and its flush,
 * with chunks: the free masks, open marks and bitmap words are current). */
static int pool_trim(struct loco_rtx_worker *w, uint32_t ni, uint64_t *nfree)
{
	struct rtx_pool *p = &w->pool[ni];
	bool squeeze = false;
	int rc = rtx_wait(w, &w->flush_ack), pos;
	if (!rc)
		rc = pool_want(w, ni, &squeeze);
	p->lean = squeeze;
	while (!rc && (pos = trim_pick(p, *nfree, squeeze)) >= 0) {
		*nfree -= nfree_of(&p->ch[pos]);
		rc = chunk_release(w, ni, (unsigned)pos);
	}
	return rc;
}

/* Recompute which owned blocks of node NI are free, flush the bitmap and
 * give chunks back (pool_trim); *NFREE: the free blocks left. */
static int pool_scan(struct loco_rtx_worker *w, uint32_t ni, uint64_t *nfree)
{
	struct rtx_pool *p = &w->pool[ni];
	*nfree = 0;
	if (!p->n)
		return 0;
	for (unsigned i = 0; i < p->n; i++) {
		p->ch[i].keep = 0;
		p->ch[i].open = false;
		p->seen[p->ch[i].idx] = 0;
	}
	int rc = scan_meta(w, ni);
	/* A block is freed because no pointer the scan read names it: those
	 * pointers durable first, so a power cut cannot bring back one that
	 * names a block reused meanwhile. */
	if (!rc)
		rc = rtx_persist_seen(w, rtx_meta(w->x, ni), 0,
				      (uint64_t)w->x->o.objects * RTX_META_LEN);
	if (!rc)
		rc = scan_logs(w, ni);
	if (rc)
		return rc;
	for (unsigned i = 0; i < p->n; i++)
		p->ch[i].keep = p->seen[p->ch[i].idx];
	keep_open_tx(w, ni);
	uint64_t gained = 0;
	for (unsigned i = 0; i < p->n; i++) {
		struct rtx_chunk *c = &p->ch[i];
		uint64_t nf = chunk_valid(c->idx) & ~c->keep;
		gained += (uint64_t)__builtin_popcountll(nf & ~c->free);
		c->free = nf;
		c->alloc = chunk_valid(c->idx) & ~nf;
		*nfree += (uint64_t)__builtin_popcountll(nf);
	}
	p->run_none = 0;
	p->since_scan = 0;
	RTX_INC(w, scans);
	rtx_count(w, RTX_STAT(reclaimed), gained);
	rc = pool_flush(w, ni);
	return rc ? rc : pool_trim(w, ni, nfree);
}

/* ---- chunks -------------------------------------------------------------- */

/* Owner words and (BM not NULL) bitmap words of chunks F..F+N of node
 * NI. Ordering: none, a snapshot to choose from; a claim or adoption
 * takes a chunk by CAS on its owner word, and a claim reads the bitmap
 * word again after it (claim_add). */
static int read_table(struct loco_rtx_worker *w, uint32_t ni, uint32_t f,
		      uint32_t n, uint64_t *own, uint64_t *bm)
{
	const struct rtx_node *nd = &w->x->node[ni];
	int rc = loco_read(w->thr, &nd->chunks, (uint64_t)f * 8, own, n * 8);
	if (rc || !bm)
		return rc;
	return loco_read(w->thr, &nd->bitmap, (uint64_t)f * 8, bm, n * 8);
}

/* Add chunk IDX just claimed: the blocks its bitmap word marks (left by
 * the worker that gave it back) stay in use until a scan of ours frees
 * them. */
static int claim_add(struct loco_rtx_worker *w, uint32_t ni, uint32_t idx)
{
	uint64_t word = 0;
	/* Ordering: after our owner CAS completed, which saw the giver's
	 * freeing CAS, placed after its bitmap WRITE (same QP). */
	int rc = loco_read(w->thr, &w->x->node[ni].bitmap, (uint64_t)idx * 8,
			   &word, 8);
	return rc ? rc : chunk_add(&w->pool[ni], idx, chunk_valid(idx) & ~word,
				   false);
}

/* CAS chunk IDX's owner word from 0 to ours and add the chunk; *GOT:
 * it is ours. */
static int claim_one(struct loco_rtx_worker *w, uint32_t ni, uint32_t idx,
		     bool *got)
{
	uint64_t old = 0;
	/* Ordering: the chunk is ours once this completes; nothing of ours
	 * needs placing before it. */
	int rc = loco_cas(w->thr, &w->x->node[ni].chunks, (uint64_t)idx * 8, 0,
			  owner_word(w), &old);
	if (rc || old)
		return rc;
	/* Ours, durably, before we allocate from it. */
	rc = rtx_persist(w);
	if (rc)
		return rc;
	rtx_crash_point("rtx.alloc_after_claim");
	RTX_INC(w, chunk_claims);
	*got = true;
	return claim_add(w, ni, idx);
}

/* Claim an unowned chunk: the first from the cursor that its bitmap word
 * shows at least half free, else the freest one seen. A chunk given back
 * with blocks in use may have turned to garbage since: the caller scans
 * when the claim brought no free block. */
static int pool_claim(struct loco_rtx_worker *w, uint32_t ni, bool *got)
{
	const struct loco_rtx *x = w->x;
	struct rtx_pool *p = &w->pool[ni];
	uint64_t *own = (uint64_t *)w->scan, *bm = own + TABLE_WORDS;
	int best_free = -1;
	uint32_t best = 0;
	*got = false;
	/* chunk_add may move the flush sources: let the flush finish. */
	int rc = rtx_wait(w, &w->flush_ack);
	for (uint32_t done = 0, n; !rc && !*got && done < x->nchunks;
	     done += n) {
		uint32_t f = (p->claim_cursor + done) % x->nchunks;
		n = x->nchunks - f < TABLE_WORDS ? x->nchunks - f : TABLE_WORDS;
		rc = read_table(w, ni, f, n, own, bm);
		for (uint32_t i = 0; !rc && !*got && i < n; i++) {
			if (own[i])
				continue;
			uint64_t fm = chunk_valid(f + i) & ~bm[i];
			int nf = __builtin_popcountll(fm);
			if (half_free((unsigned)nf)) {
				rc = claim_one(w, ni, f + i, got);
				p->claim_cursor = (f + i + 1) % x->nchunks;
			} else if (nf > best_free) {
				best = f + i;
				best_free = nf;
			}
		}
	}
	if (!rc && !*got && best_free >= 0)
		rc = claim_one(w, ni, best, got);
	return rc;
}

static bool pool_has_free(const struct rtx_pool *p)
{
	for (unsigned i = 0; i < p->n; i++)
		if (p->ch[i].free)
			return true;
	return false;
}

/* Find more free blocks: scan (when some allocations happened since the
 * last scan), and claim a chunk while less than 1/pool_keep of the owned
 * blocks are free, so a worker keeps at least 2 (1.5 when lean) times its
 * live blocks and scans about once per (half) its live-block count of
 * allocations. When no chunk is left, whatever the scan found is
 * enough. -ENOMEM: still no
 * free block, also when a chunk was claimed (one given back full whose
 * blocks are still in use): refill_wait asks and tries again. */
static int refill(struct loco_rtx_worker *w, uint32_t ni)
{
	struct rtx_pool *p = &w->pool[ni];
	uint64_t nfree = 0;
	bool got = false;
	int rc = 0;
	if (p->n && p->since_scan >= RTX_SCAN_MIN_ALLOCS) {
		rc = pool_scan(w, ni, &nfree);
		if (rc || nfree * pool_keep(p) >=
			  (uint64_t)p->n * LOCO_RTX_CHUNK_BLOCKS)
			return rc;
	}
	rc = pool_claim(w, ni, &got);
	if (rc || (got && pool_has_free(p)))
		return rc;
	if (p->n && (got || !nfree))
		rc = pool_scan(w, ni, &nfree);
	return rc ? rc : nfree ? 0 : -ENOMEM;
}

/* Tell node NI's workers that one lacks blocks: they give partly used
 * chunks back at their next scan (pool_want). */
static int pool_ask(struct loco_rtx_worker *w, uint32_t ni)
{
	uint64_t old;
	RTX_INC(w, pool_asks);
	/* A hint, ordered with nothing (chunks change hands by the owner
	 * word's CAS). */
	return loco_faa(w->thr, &w->x->node[ni].chunks,
			rtx_want_off(w->x), 1, &old);
}

/* What node NI's chunk table shows, for the pool-full warning: chunks
 * with no owner, and blocks the bitmap words mark in use (as their
 * owners last flushed them: garbage not yet scanned counts as in use). */
static void pool_census(struct loco_rtx_worker *w, uint32_t ni,
			uint32_t *unowned, uint64_t *marked)
{
	const struct loco_rtx *x = w->x;
	uint64_t *own = (uint64_t *)w->scan, *bm = own + TABLE_WORDS;
	*unowned = 0;
	*marked = 0;
	for (uint32_t f = 0, n; f < x->nchunks; f += n) {
		n = x->nchunks - f < TABLE_WORDS ? x->nchunks - f : TABLE_WORDS;
		if (read_table(w, ni, f, n, own, bm))
			return;
		for (uint32_t i = 0; i < n; i++) {
			*unowned += !own[i];
			*marked += (uint64_t)__builtin_popcountll(
				bm[i] & chunk_valid(f + i));
		}
	}
}

static void warn_full(struct loco_rtx_worker *w, uint32_t ni)
{
	uint32_t unowned;
	uint64_t marked;
	pool_census(w, ni, &unowned, &marked);
	loco_warn(w->x->base.name, "node %u: data pool full (%u of its %u "
		  "chunks held by slot %u, all blocks in use; %u chunks "
		  "unowned, %llu of %llu blocks marked in use)",
		  w->x->node[ni].id, w->pool[ni].n, w->x->nchunks, w->slot,
		  unowned, (unsigned long long)marked,
		  (unsigned long long)w->x->nchunks * LOCO_RTX_CHUNK_BLOCKS);
}

/* refill, asking the other workers to give chunks back and waiting a
 * little for them to do it. */
static int refill_wait(struct loco_rtx_worker *w, uint32_t ni)
{
	for (unsigned t = 0;; t++) {
		int rc = refill(w, ni);
		if (rc != -ENOMEM)
			return rc;
		int arc = t % RTX_ASK_EVERY == 0 ? pool_ask(w, ni) : 0;
		if (arc)
			return arc;
		if (t == RTX_FULL_WAITS) {
			warn_full(w, ni);
			return rc;
		}
		w->pool[ni].since_scan = RTX_SCAN_MIN_ALLOCS;
		rtx_sleep_us(1000);
	}
}

/* The first free block from the chunk the last one came from: most
 * owned chunks are full between scans, so the search starts where the
 * free blocks are. */
static bool take_block(struct rtx_pool *p, uint64_t *block)
{
	for (unsigned k = 0, i = p->cur; k < p->n; k++, i++) {
		if (i >= p->n)
			i = 0;
		struct rtx_chunk *c = &p->ch[i];
		if (!c->free)
			continue;
		unsigned b = (unsigned)__builtin_ctzll(c->free);
		c->free &= c->free - 1;
		c->alloc |= UINT64_C(1) << b;
		*block = (uint64_t)c->idx * LOCO_RTX_CHUNK_BLOCKS + b;
		p->cur = i;
		return true;
	}
	return false;
}

/* A worker that never runs short still scans once per owned-blocks
 * allocations: its garbage is found and its surplus chunks go back. Runs
 * before a block is taken, so none is in flight outside the open
 * transaction. */
static int scan_if_due(struct loco_rtx_worker *w, uint32_t ni)
{
	struct rtx_pool *p = &w->pool[ni];
	uint64_t nfree;
	if (!p->n || p->since_scan < (uint64_t)p->n * LOCO_RTX_CHUNK_BLOCKS)
		return 0;
	return pool_scan(w, ni, &nfree);
}

/* N allocations were taken from node NI's pool: count them, and flush
 * the bitmap words every RTX_FLUSH_EVERY. */
static int took(struct loco_rtx_worker *w, uint32_t ni, unsigned n)
{
	struct rtx_pool *p = &w->pool[ni];
	rtx_count(w, RTX_STAT(allocs), n);
	p->since_scan += n;
	p->unflushed += n;
	return p->unflushed >= RTX_FLUSH_EVERY ? pool_flush(w, ni) : 0;
}

int rtx_alloc(struct loco_rtx_worker *w, uint32_t ni, uint64_t *block)
{
	struct rtx_pool *p = &w->pool[ni];
	int rc0 = scan_if_due(w, ni);
	if (rc0)
		return rc0;
	for (unsigned round = 0; round < 3; round++) {
		if (take_block(p, block))
			return took(w, ni, 1);
		int rc = refill_wait(w, ni);
		if (rc)
			return rc;
	}
	return -ENOMEM;
}

/* N (2..RTX_RUN_MAX) free blocks in a row from one chunk, the lowest
 * such run of the first chunk (from the last one used) that has one.
 * Free masks only shrink between the events that reset p->run_none, so a
 * search that found no run of N answers every later one of N or more
 * until then. */
static bool take_run(struct rtx_pool *p, unsigned n, uint64_t *first)
{
	if (p->run_none && n >= p->run_none)
		return false;
	for (unsigned k = 0, i = p->cur; k < p->n; k++, i++) {
		if (i >= p->n)
			i = 0;
		struct rtx_chunk *c = &p->ch[i];
		uint64_t m = c->free;
		for (unsigned j = 1; j < n && m; j++)
			m &= c->free >> j;
		if (!m)
			continue;
		unsigned b = (unsigned)__builtin_ctzll(m);
		uint64_t bits = ((UINT64_C(1) << n) - 1) << b;
		c->free &= ~bits;
		c->alloc |= bits;
		*first = (uint64_t)c->idx * LOCO_RTX_CHUNK_BLOCKS + b;
		p->cur = i;
		return true;
	}
	p->run_none = n;
	return false;
}

int rtx_alloc_run(struct loco_rtx_worker *w, uint32_t ni, unsigned n,
		  uint64_t *first)
{
	if (n < 2 || n > RTX_RUN_MAX)
		return -ENOSPC;
	int rc = scan_if_due(w, ni);
	if (rc)
		return rc;
	if (!take_run(&w->pool[ni], n, first))
		return -ENOSPC;
	return took(w, ni, n);
}

void rtx_free_local(struct loco_rtx_worker *w, uint32_t ni, uint64_t block)
{
	struct rtx_pool *p = &w->pool[ni];
	int32_t pos = p->pos[block / LOCO_RTX_CHUNK_BLOCKS];
	if (pos < 0)
		return;
	uint64_t bit = UINT64_C(1) << (block % LOCO_RTX_CHUNK_BLOCKS);
	p->ch[pos].free |= bit;
	p->ch[pos].alloc &= ~bit;
	p->run_none = 0;
}

/* ---- adoption and settling ----------------------------------------------- */

#define ADOPT_ORPHANS UINT32_MAX

/* Does adopt_on take chunk with owner word OWNER and bitmap word BM:
 * slot SLOT's (all, or only another incarnation's), or for ADOPT_ORPHANS
 * an unowned one whose bitmap word still marks blocks. */
static bool adopt_wanted(const struct loco_rtx_worker *w, uint32_t slot,
			 bool stale_only, uint64_t owner, uint64_t bm)
{
	if (slot == ADOPT_ORPHANS)
		return !owner && bm;
	return owner && owner != owner_word(w) && owner_slot(owner) == slot &&
	       !(stale_only && owner >> 16 == w->inc);
}

/* CAS every wanted chunk of node NI to ours; they join the pool with no
 * known free block (stale) until the scan that follows. */
static int adopt_on(struct loco_rtx_worker *w, uint32_t ni, uint32_t slot,
		    bool stale_only, unsigned *adopted)
{
	const struct loco_rtx *x = w->x;
	uint64_t *words = (uint64_t *)w->scan;
	uint64_t *bm = slot == ADOPT_ORPHANS ? words + TABLE_WORDS : NULL;
	uint64_t mine = owner_word(w), old = 0;
	/* chunk_add may move the flush sources: let the flush finish. */
	int rc = rtx_wait(w, &w->flush_ack);
	for (uint32_t f = 0; !rc && f < x->nchunks; f += TABLE_WORDS) {
		uint32_t n = x->nchunks - f < TABLE_WORDS ? x->nchunks - f :
			     TABLE_WORDS;
		rc = read_table(w, ni, f, n, words, bm);
		for (uint32_t i = 0; !rc && i < n; i++) {
			uint64_t v = words[i];
			uint64_t b = bm ? bm[i] : 0;
			if (!adopt_wanted(w, slot, stale_only, v, b))
				continue;
			rc = loco_cas(w->thr, &x->node[ni].chunks,
				      (uint64_t)(f + i) * 8, v, mine, &old);
			if (!rc && old == v && w->pool[ni].pos[f + i] < 0) {
				rc = chunk_add(&w->pool[ni], f + i, 0, true);
				(*adopted)++;
			}
		}
	}
	return rc;
}

int rtx_adopt_chunks(struct loco_rtx_worker *w, uint32_t slot, bool stale_only)
{
	for (uint32_t ni = 0; ni < w->x->nnodes; ni++) {
		unsigned adopted = 0;
		uint64_t nfree;
		int rc = adopt_on(w, ni, slot, stale_only, &adopted);
		/* Ours, durably, before the scan hands blocks out. */
		if (!rc && adopted)
			rc = rtx_persist(w);
		if (!rc && adopted)
			rc = pool_scan(w, ni, &nfree);
		if (rc)
			return rc;
	}
	return 0;
}

int rtx_pools_settle(struct loco_rtx_worker *w)
{
	int rc = 0;
	for (uint32_t ni = 0; ni < w->x->nnodes && !rc; ni++) {
		uint64_t nfree;
		rc = pool_scan(w, ni, &nfree);
	}
	int rc2 = rtx_wait(w, &w->flush_ack);
	return rc ? rc : rc2;
}

int rtx_pools_release(struct loco_rtx_worker *w)
{
	int rc = rtx_pools_settle(w);
	for (uint32_t ni = 0; !rc && ni < w->x->nnodes; ni++)
		while (!rc && w->pool[ni].n)
			rc = chunk_release(w, ni, w->pool[ni].n - 1);
	return rc;
}

/* ---- audit --------------------------------------------------------------- */

static int audit_meta(struct loco_rtx_worker *w, uint32_t ni, uint64_t *ref,
		      struct loco_rtx_audit *a)
{
	const struct loco_rtx *x = w->x;
	const uint32_t per = RTX_SCAN_BYTES / RTX_META_LEN;
	uint64_t *meta = (uint64_t *)w->scan;
	int rc = 0;
	for (uint32_t f = 0; !rc && f < x->o.objects; f += per) {
		uint32_t n = x->o.objects - f < per ? x->o.objects - f : per;
		rc = loco_read(w->thr, rtx_meta(x, ni), (uint64_t)f * RTX_META_LEN,
			       meta, n * RTX_META_LEN);
		for (uint32_t i = 0; !rc && i < n; i++) {
			uint64_t b = loco_rtx_dptr_block(meta[2 * i + 1]);
			a->locked += loco_lllock_is_locked(meta[2 * i]);
			if (!b || b >= x->nblocks)
				continue;
			a->objects++;
			ref[b / 64] |= UINT64_C(1) << (b % 64);
		}
	}
	return rc;
}

static int audit_bitmap(struct loco_rtx_worker *w, uint32_t ni,
			const uint64_t *ref, struct loco_rtx_audit *a)
{
	const struct loco_rtx *x = w->x;
	uint64_t *words = (uint64_t *)w->scan;
	int rc = 0;
	for (uint32_t f = 0; !rc && f < x->nchunks; f += CHUNK_WORDS_PER_READ) {
		uint32_t n = x->nchunks - f < CHUNK_WORDS_PER_READ ?
			     x->nchunks - f : CHUNK_WORDS_PER_READ;
		rc = loco_read(w->thr, &x->node[ni].bitmap, (uint64_t)f * 8,
			       words, n * 8);
		for (uint32_t i = 0; !rc && i < n; i++) {
			uint64_t al = words[i], rf = ref[f + i];
			a->referenced += (uint64_t)__builtin_popcountll(rf);
			a->allocated += (uint64_t)__builtin_popcountll(al);
			a->leaked += (uint64_t)__builtin_popcountll(al & ~rf);
			a->lost += (uint64_t)__builtin_popcountll(rf & ~al);
		}
	}
	return rc;
}

/* Claim the unowned chunks whose bitmap word still marks blocks (given
 * back with blocks in use); the settling scan rebuilds them. */
static int adopt_orphans(struct loco_rtx_worker *w)
{
	int rc = 0;
	for (uint32_t ni = 0; !rc && ni < w->x->nnodes; ni++) {
		unsigned adopted = 0;
		rc = adopt_on(w, ni, ADOPT_ORPHANS, false, &adopted);
	}
	return rc;
}

int loco_rtx_audit(struct loco_rtx_worker *w, struct loco_rtx_audit *out)
{
	struct loco_rtx_audit a = { 0 };
	uint64_t *ref = malloc(w->x->nchunks * sizeof(*ref));
	/* Chunks given back with blocks marked, then this worker's own
	 * (flushed lazily): every bitmap word exact. */
	int rc = ref ? adopt_orphans(w) : -ENOMEM;
	if (!rc)
		rc = rtx_pools_settle(w);
	for (uint32_t ni = 0; !rc && ni < w->x->nnodes; ni++) {
		memset(ref, 0, w->x->nchunks * sizeof(*ref));
		rc = audit_meta(w, ni, ref, &a);
		if (!rc)
			rc = audit_bitmap(w, ni, ref, &a);
	}
	free(ref);
	if (!rc)
		*out = a;
	return rc;
}
