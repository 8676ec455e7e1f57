/* SPDX-License-Identifier: MIT */
/* Linearizable range scans.
 *
 * Collect: from the leaf holding LO along the sibling chain, each leaf
 * is read as a snapshot with a version V: plain mode, one batch on the
 * leaf's QP of READ seq, READ node, READ seq, kept only if both seq
 * words are equal and even (every plain write-back makes the seq odd
 * before its bytes and even after, on one QP, and the QP executes the
 * three READs in order: no write-back overlapped the node READ); rtx
 * mode, the installed value and the object's lock word read after it
 * (loco_rtx_peek), kept only if the lock is free: an install needs the
 * lock and its release moves the word, so while the word stays that
 * free version the value stays installed (a leaf locked by a writer is
 * read again; an expired lock is repaired first). The chain must be
 * contiguous (each leaf's low fence the previous one's
 * high fence), else the attempt starts over.
 *
 * Validate: after the last leaf, one batch re-reads every leaf's V. If
 * none moved, every leaf held what was collected from its read until
 * the re-read, and all re-reads come after all reads: at the instant
 * between the last read and the first re-read every collected leaf held
 * its collected content, and together (fences contiguous from below LO
 * to above HI or to the MAX-th key) they covered the range. The result
 * is the tree's content in the range at that instant. A moved V means a
 * writer got in: the attempt is made again (scan_retries). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <loco/wait.h>

#include "channels/sherman/internal.h"

#define SCAN_TRIES_MIN 4

static int grow(struct loco_sherman_worker *w, unsigned leaves, unsigned pairs)
{
	struct loco_sherman *t = w->t;
	if (leaves >= w->scan_cap) {
		unsigned cap = w->scan_cap ? 2 * w->scan_cap : 64;
		void *a = realloc(w->scan_addr, cap * sizeof(*w->scan_addr));
		if (a)
			w->scan_addr = a;
		void *b = realloc(w->scan_seq, cap * sizeof(*w->scan_seq));
		if (b)
			w->scan_seq = b;
		void *c = realloc(w->scan_seq2, cap * sizeof(*w->scan_seq2));
		if (c)
			w->scan_seq2 = c;
		if (!a || !b || !c)
			return -ENOMEM;
		w->scan_cap = cap;
	}
	if (pairs + t->leaf_slots > w->pcap) {
		unsigned cap = (pairs + t->leaf_slots) * 2;
		void *a = realloc(w->pk, cap * sizeof(*w->pk));
		if (a)
			w->pk = a;
		void *b = realloc(w->pv, (size_t)cap * t->o.value_len);
		if (b)
			w->pv = b;
		void *c = realloc(w->po, cap * sizeof(*w->po));
		if (c)
			w->po = c;
		if (!a || !b || !c)
			return -ENOMEM;
		w->pcap = cap;
	}
	return 0;
}

/* Plain mode: leaf A as a snapshot into IMG, *SEQ its version. */
static int plain_snapshot(struct loco_sherman_worker *w, loco_raddr_t a,
			  void *img, uint64_t *seq)
{
	struct loco_sherman *t = w->t;
	if (t->o.unsafe & LOCO_SHERMAN_UNSAFE_NO_SCAN_CHECK)
		return sh_read_node(w, a, img);
	uint32_t pi;
	uint64_t noff, s2 = 0;
	struct loco_wait wait;
	unsigned tries = 0;
	loco_wait_init(&wait, t->base.mgr, -1);
	for (;;) {
		struct loco_batch b;
		int rc = sh_node_batch(w, a, &b, &pi, &noff);
		if (rc)
			return rc;
		/* Ordering: one QP executes the three READs in order. */
		loco_batch_read(&b, &t->part[pi].nodes, noff + SH_SEQ_OFF, seq, 8);
		loco_batch_read(&b, &t->part[pi].nodes, noff, img, t->o.node_size);
		loco_batch_read(&b, &t->part[pi].nodes, noff + SH_SEQ_OFF, &s2, 8);
		if ((rc = sh_batch_wait(w, &b)))
			return rc;
		if (*seq == s2 && !(s2 & 1) && sh_node_ok(t, img, a))
			return 0;
		if ((rc = sh_torn_step(w, a, &tries, &wait)))
			return rc;
	}
}

/* ---- prefetch (plain mode): the leaves the descent's level-1 node
 * names for the range, read in one round; each is used if it is the
 * next leaf of the chain and its snapshot is whole, else read again. */

/* Read the children of level-1 node P (image) from the one holding LO
 * through the last whose range starts at or below HI, at most enough
 * for MAX pairs in half-full leaves and SH_PREFETCH. */
static int prefetch(struct loco_sherman_worker *w, const void *p, uint64_t lo,
		    uint64_t hi, unsigned max)
{
	struct loco_sherman *t = w->t;
	unsigned r = sh_int_rank(p, lo), cap = max / (t->leaf_slots / 2 + 1) + 2;
	w->pf_n = w->pf_next = 0;
	if (cap > SH_PREFETCH)
		cap = SH_PREFETCH;
	for (unsigned i = r; i <= sh_count(p) && w->pf_n < cap &&
	     (i == r || sh_int_key(p, i) <= hi); i++)
		w->pf_addr[w->pf_n++] = sh_int_child(p, i);
	if (w->pf_n < 2)
		return w->pf_n = 0;
	struct loco_batch b;
	loco_batch_init(&b, w->thr);
	for (unsigned i = 0; i < w->pf_n; i++) {
		uint32_t pi;
		uint64_t noff;
		int rc = sh_locate(t, w->pf_addr[i], &pi, &noff);
		if (rc)
			return rc;
		/* Ordering: one QP executes each leaf's three READs in order. */
		loco_batch_read(&b, &t->part[pi].nodes, noff + SH_SEQ_OFF,
				&w->pf_s1[i], 8);
		loco_batch_read(&b, &t->part[pi].nodes, noff,
				w->pf_img + (size_t)i * t->o.node_size,
				t->o.node_size);
		loco_batch_read(&b, &t->part[pi].nodes, noff + SH_SEQ_OFF,
				&w->pf_s2[i], 8);
	}
	return sh_batch_wait(w, &b);
}

/* The prefetched snapshot of leaf A into IMG if it is the next one and
 * whole: true. */
static bool prefetched(struct loco_sherman_worker *w, loco_raddr_t a,
		       void *img, uint64_t *seq)
{
	struct loco_sherman *t = w->t;
	unsigned i = w->pf_next;
	if (i >= w->pf_n || w->pf_addr[i] != a)
		return false;
	w->pf_next++;
	const uint8_t *pimg = w->pf_img + (size_t)i * t->o.node_size;
	if (w->pf_s1[i] != w->pf_s2[i] || (w->pf_s1[i] & 1) ||
	    !sh_node_ok(t, pimg, a))
		return false;
	memcpy(img, pimg, t->o.node_size);
	*seq = w->pf_s1[i];
	return true;
}

/* rtx mode: leaf A's installed value into IMG with its lock word *LOCK,
 * read again while the lock is held; an expired one is repaired (a
 * transaction's read of A does that) and A read again. */
static int rtx_snapshot(struct loco_sherman_worker *w, loco_raddr_t a,
			void *img, uint64_t *lock)
{
	struct loco_sherman *t = w->t;
	struct loco_wait wait;
	loco_wait_init(&wait, t->base.mgr, -1);
	for (;;) {
		int rc = sh_read_node_stamp(w, a, img, lock);
		if (rc || !loco_lllock_is_locked(*lock))
			return rc;
		SH_INC(w, torn_retries);
		if (loco_lllock_expired(*lock, loco_rtx_now_ms(t->rtx))) {
			const void *p;
			if (!(rc = loco_rtx_begin(w->xw)))
				rc = loco_rtx_read(w->xw, a, &p);
			loco_rtx_abort(w->xw);
			if (rc && rc != -EAGAIN && rc != -EBUSY)
				return rc;
		}
		if (loco_wait_step(&wait))
			return -ETIMEDOUT;
	}
}

static int snapshot(struct loco_sherman_worker *w, loco_raddr_t a, void *img,
		    uint64_t *v)
{
	*v = 0;
	if (prefetched(w, a, img, v))
		return 0;
	if (w->t->o.rtx)
		return rtx_snapshot(w, a, img, v);
	return plain_snapshot(w, a, img, v);
}

/* Re-read the versions of leaves [0, N) into scan_seq2, all posted
 * before one wait: batches of at most LOCO_BATCH_MAX READs (rtx mode:
 * single READs of the objects' lock words). */
static int reread(struct loco_sherman_worker *w, unsigned n)
{
	struct loco_sherman *t = w->t;
	struct loco_ack ack = { 0, 0 };
	int rc = 0;
	for (unsigned i = 0; i < n && !rc; i += LOCO_BATCH_MAX) {
		struct loco_batch b;
		loco_batch_init(&b, w->thr);
		for (unsigned k = i; k < n && k < i + LOCO_BATCH_MAX; k++) {
			loco_raddr_t a = w->scan_addr[k];
			uint32_t pi;
			uint64_t noff;
			if (t->o.rtx) {
				rc = loco_post_read_raddr(w->thr,
							  a + SH_RTX_LOCK_OFF,
							  &w->scan_seq2[k], 8, &ack);
				if (rc)
					break;
				continue;
			}
			if ((rc = sh_locate(t, a, &pi, &noff)))
				break;
			loco_batch_read(&b, &t->part[pi].nodes, noff + SH_SEQ_OFF,
					&w->scan_seq2[k], 8);
		}
		if (!rc)
			rc = loco_batch_post(&b, &ack);
	}
	return rc ? rc : sh_wait(w, &ack);
}

/* Collect the leaves from the one holding LO: *NL leaves, *NP pairs in
 * [LO, HI] (unsorted). -ESTALE: the chain changed under us, start over. */
static int collect(struct loco_sherman_worker *w, uint64_t lo, uint64_t hi,
		   unsigned max, bool nocache, unsigned *nl, unsigned *np)
{
	struct loco_sherman *t = w->t;
	struct sh_path path;
	loco_raddr_t a;
	uint8_t *img = w->nb[1];
	uint64_t prev_high = 0;
	unsigned leaves = 0, pairs = 0;
	int rc = sh_descend(w, lo, 0, nocache, &a, &path);
	w->pf_n = 0;
	if (!rc && !t->o.rtx && path.at[1] &&
	    !(t->o.unsafe & LOCO_SHERMAN_UNSAFE_NO_SCAN_CHECK))
		rc = prefetch(w, w->nb[0], lo, hi, max);
	while (!rc) {
		if ((rc = grow(w, leaves, pairs)) ||
		    (rc = snapshot(w, a, img, &w->scan_seq[leaves])))
			break;
		const struct sh_hdr *h = (const void *)img;
		if (sh_level(h) || (leaves ? h->low != prev_high : lo < h->low))
			return -ESTALE;
		if (!leaves && lo >= h->high) {
			a = h->sibling;     /* the descent's leaf has split */
			SH_INC(w, sibling_moves);
			if (!a)
				return -EIO;
			continue;
		}
		w->scan_addr[leaves++] = a;
		for (unsigned i = 0; i < t->leaf_slots; i++) {
			const uint8_t *e = sh_slot(t, img, i);
			uint64_t k;
			memcpy(&k, e, 8);
			if (!sh_slot_used(t, img, i) || k < lo || k > hi)
				continue;
			w->pk[pairs] = k;
			memcpy(w->pv + (size_t)pairs * t->o.value_len, e + 8,
			       t->o.value_len);
			pairs++;
		}
		prev_high = h->high;
		if (h->high > hi || pairs >= max)
			break;
		if (!(a = h->sibling))
			return -EIO;
	}
	*nl = leaves;
	*np = pairs;
	return rc;
}

static _Thread_local const uint64_t *sort_keys;

static int by_key(const void *x, const void *y)
{
	uint64_t a = sort_keys[*(const uint32_t *)x];
	uint64_t b = sort_keys[*(const uint32_t *)y];
	return a < b ? -1 : a > b;
}

static void emit(struct loco_sherman_worker *w, unsigned np, unsigned max,
		 uint64_t *keys, void *vals, unsigned *n)
{
	uint32_t vl = w->t->o.value_len;
	for (unsigned i = 0; i < np; i++)
		w->po[i] = i;
	/* Keys are unique within a snapshot; C11's qsort takes no context,
	 * so the keys go through a thread-local pointer. */
	sort_keys = w->pk;
	qsort(w->po, np, sizeof(*w->po), by_key);
	unsigned m = np < max ? np : max;
	for (unsigned i = 0; i < m; i++) {
		keys[i] = w->pk[w->po[i]];
		memcpy((uint8_t *)vals + (size_t)i * vl,
		       w->pv + (size_t)w->po[i] * vl, vl);
	}
	*n = m;
}

int sh_scan(struct loco_sherman_worker *w, uint64_t lo, uint64_t hi,
	    unsigned max, uint64_t *keys, void *vals, unsigned *n)
{
	struct loco_sherman *t = w->t;
	struct loco_wait wait;
	loco_wait_init(&wait, t->base.mgr, -1);
	for (unsigned k = 0;; k++) {
		unsigned nl = 0, np = 0;
		int rc = collect(w, lo, hi, max, k > 0, &nl, &np);
		bool valid = true;
		if (!rc && !(t->o.unsafe & LOCO_SHERMAN_UNSAFE_NO_SCAN_CHECK)) {
			rc = reread(w, nl);
			for (unsigned i = 0; i < nl && !rc && valid; i++)
				valid = w->scan_seq2[i] == w->scan_seq[i];
		}
		if (!rc && valid) {
			emit(w, np, max, keys, vals, n);
			return 0;
		}
		if (rc && rc != -ESTALE)
			return rc;
		SH_INC(w, scan_retries);
		if (loco_wait_step(&wait) && k >= SCAN_TRIES_MIN)
			return -ETIMEDOUT;
	}
}
