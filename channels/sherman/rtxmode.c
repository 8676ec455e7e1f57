/* SPDX-License-Identifier: MIT */
/* rtx mode (opts.rtx, after the rTX paper's transactional Sherman): every
 * tree node is an rTX object and every write is one rTX, so a client
 * killed anywhere leaves nothing half done: its locks expire and the next
 * client to meet one repairs the transaction (rolls it back, or finishes
 * its commit from the log).
 *
 * An insert, update or delete pre-locks its leaf (OPT2: the lock CAS and
 * the TXObj READ in one batch, so the copy it changes is current) and
 * writes the whole changed leaf (OPT1: one object, no log). A split is one
 * logged transaction over the leaf, its new sibling and the parent (and,
 * when the parent is full, the nodes above it that split in turn, up to
 * the root): all installed, or none. Reads outside transactions (descents,
 * lookups, scans) take each node's installed value (loco_rtx_peek), which
 * is always a whole committed node. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <loco/rtx/crash.h>
#include "channels/sherman/internal.h"

/* A node address for this transaction: one left by an aborted attempt of
 * this operation, else a fresh one. Remembered as pending until the
 * operation ends (a commit uses them; an abort gives them back). */
static int tx_alloc(struct loco_sherman_worker *w, loco_raddr_t *out)
{
	int rc = 0;
	if (w->nspare)
		*out = w->spare[--w->nspare];
	else
		rc = sh_alloc(w, out);
	if (!rc && w->npending < SH_PENDING)
		w->pending[w->npending++] = *out;
	return rc;
}

static void pending_back(struct loco_sherman_worker *w)
{
	while (w->npending && w->nspare < SH_PENDING)
		w->spare[w->nspare++] = w->pending[--w->npending];
	w->npending = 0;
}

/* Pre-lock node A in the transaction and copy its value into IMG. */
static int tx_node(struct loco_sherman_worker *w, loco_raddr_t a, void *img)
{
	const void *p = NULL;
	int rc = loco_rtx_lock(w->xw, a);
	if (!rc)
		rc = loco_rtx_read(w->xw, a, &p);
	if (rc)
		return rc;
	if (!p || !sh_node_ok(w->t, p, a))
		return -EAGAIN;   /* a sibling whose split is not installed */
	memcpy(img, p, w->t->o.node_size);
	return 0;
}

/* Pre-lock the node of LEVEL holding KEY from *A, moving right (the
 * nodes passed stay locked until the end: harmless). */
static int tx_covering(struct loco_sherman_worker *w, unsigned level,
		       uint64_t key, loco_raddr_t *a, void *img)
{
	for (unsigned n = 0; n < 2 * SH_LEVELS; n++) {
		int rc = tx_node(w, *a, img);
		if (rc)
			return rc;
		const struct sh_hdr *h = img;
		if (sh_level(h) != level || key < h->low)
			return -ESTALE;
		if (key < h->high)
			return 0;
		if (!h->sibling)
			return -EIO;
		SH_INC(w, sibling_moves);
		*a = h->sibling;
	}
	return -EAGAIN;
}

/* Root split in the transaction: the halves of the root IMG (entries E,
 * LEFT its leftmost child if internal) into two new nodes; the root
 * becomes their parent. */
static int tx_split_root(struct loco_sherman_worker *w, const void *img,
			 const struct sh_kv *e, unsigned n, loco_raddr_t left)
{
	struct loco_sherman *t = w->t;
	const struct sh_hdr *r = img;
	loco_raddr_t a, b;
	int rc = tx_alloc(w, &a);
	if (!rc)
		rc = tx_alloc(w, &b);
	if (rc)
		return rc;
	uint8_t *ia = w->nb[2], *ib = w->nb[3], *nr = w->nb[6];
	uint64_t sep = sh_split_halves(t, img, e, n, left, a, 1, ia, b, ib);
	sh_root_image(t, img, sep, a, b, nr);
	if ((rc = loco_rtx_write(w->xw, a, ia)) || (rc = loco_rtx_write(w->xw, b, ib)))
		return rc;
	loco_crash_point("sherman.split_root");
	rc = loco_rtx_write(w->xw, r->self, nr);
	if (!rc)
		w->tx_root_splits++;
	return rc;
}

static int tx_link(struct loco_sherman_worker *w, unsigned level, uint64_t key,
		   loco_raddr_t child, const struct sh_path *path);

/* Split full node IMG (pre-locked) whose entries, with the new one, are
 * E[0..N) (internal: LEFT its leftmost child), in the transaction: the
 * root in place, any other node into itself and a new sibling, whose
 * separator goes into the level above. */
static int tx_split_node(struct loco_sherman_worker *w, const void *img,
			 const struct sh_kv *e, unsigned n, loco_raddr_t left,
			 const struct sh_path *path)
{
	struct loco_sherman *t = w->t;
	const struct sh_hdr *o = img;
	w->tx_splits++;
	if (o->self == t->root)
		return tx_split_root(w, img, e, n, left);
	loco_raddr_t s;
	int rc = tx_alloc(w, &s);
	if (rc)
		return rc;
	uint64_t sep = sh_split_halves(t, img, e, n, left, o->self, o->nv + 1,
				       w->nb[3], s, w->nb[2]);
	if ((rc = loco_rtx_write(w->xw, s, w->nb[2])))
		return rc;
	loco_crash_point("sherman.split_sibling");
	if ((rc = loco_rtx_write(w->xw, o->self, w->nb[3])))
		return rc;
	return tx_link(w, sh_level(o) + 1, sep, s, path);
}

/* Separator KEY -> CHILD into LEVEL, in the transaction. */
static int tx_link(struct loco_sherman_worker *w, unsigned level, uint64_t key,
		   loco_raddr_t child, const struct sh_path *path)
{
	struct loco_sherman *t = w->t;
	struct sh_path mine;
	loco_raddr_t a = level < SH_LEVELS ? path->at[level] : 0;
	int rc = 0;
	if (!a) {
		rc = sh_descend(w, key, level, false, &a, &mine);
		path = &mine;
	}
	uint8_t *img = w->nb[1];
	if (!rc)
		rc = tx_covering(w, level, key, &a, img);
	if (rc)
		return rc;
	loco_crash_point("sherman.split_parent_locked");
	if (sh_int_linked(img, key))
		return 0;
	if (sh_count((const struct sh_hdr *)img) >= t->int_cap) {
		/* Split it with the new pair. */
		uint8_t *all = w->nb[4];
		unsigned n = sh_int_entries(t, img, key, child, all, w->kv);
		loco_crash_point("sherman.split_locked");
		return tx_split_node(w, img, w->kv, n, sh_int_child(all, 0),
				     path);
	}
	sh_int_insert(img, key, child);
	((struct sh_hdr *)img)->nv++;
	sh_seal(t, img);
	return loco_rtx_write(w->xw, a, img);
}

/* The leaf the attempt locked does not hold KEY: a split moved KEY right
 * (find, without locks, the leaf that holds it now: the next attempt
 * starts there) or the descent was wrong; the cached parent that led
 * there, if any, is stale. -EAGAIN, or an error. */
static int leaf_missed(struct loco_sherman_worker *w, uint64_t key,
		       const struct sh_hdr *l, const struct sh_path *path)
{
	struct loco_sherman *t = w->t;
	if (t->cached && path->at[1] && !path->fresh[1]) {
		SH_INC(w, cache_stale);
		sh_cache_drop(&t->cache, 1, ((struct sh_hdr *)w->nb[0])->low);
	}
	if (sh_level(l) || key < l->low || !l->sibling)
		return sh_level(l) || key < l->low ? -EAGAIN : -EIO;
	SH_INC(w, sibling_moves);
	loco_raddr_t b = l->sibling;
	int rc = sh_read_covering(w, key, &b, w->nb[2]);
	if (!rc)
		w->hint = b;
	return rc && rc != -ESTALE ? rc : -EAGAIN;
}

/* One attempt: -EAGAIN makes LOCO_RTX_BLOCK abort and try again. */
static int attempt(struct loco_sherman_worker *w, enum sh_op op, uint64_t key,
		   const void *val)
{
	struct loco_sherman *t = w->t;
	struct sh_path path = { 0 };
	loco_raddr_t a = w->hint;
	pending_back(w);
	w->tx_splits = w->tx_root_splits = 0;
	if (w->tries++)
		SH_INC(w, rtx_retries);
	int rc = a ? 0 : sh_descend(w, key, 0, w->tries > 1, &a, &path);
	uint8_t *img = w->nb[5];
	w->hint = 0;
	if (!rc)
		rc = tx_node(w, a, img);
	if (rc)
		return rc == -ESTALE ? -EAGAIN : rc;
	const struct sh_hdr *l = (const void *)img;
	if (sh_level(l) || key < l->low || key >= l->high)
		return leaf_missed(w, key, l, &path);
	int fs, i = sh_leaf_find(t, img, key, &fs);
	if (op == SH_INSERT && i >= 0)
		return -EEXIST;
	if (op != SH_INSERT && i < 0)
		return -ENOENT;
	if (op == SH_INSERT && fs < 0) {
		unsigned n = sh_leaf_entries(t, img, key, val, w->kv);
		loco_crash_point("sherman.split_locked");
		rc = tx_split_node(w, img, w->kv, n, 0, &path);
		return rc == -ESTALE ? -EAGAIN : rc;
	}
	sh_leaf_set(t, img, (unsigned)(op == SH_INSERT ? fs : i), key,
		    op == SH_DELETE ? NULL : val);
	return loco_rtx_write(w->xw, a, img);
}

int sh_rtx_write(struct loco_sherman_worker *w, enum sh_op op, uint64_t key,
		 const void *val)
{
	int rc;
	w->hint = 0;
	w->tries = 0;
	LOCO_RTX_BLOCK(w->xw, rc) {
		rc = attempt(w, op, key, val);
	}
	if (rc) {
		pending_back(w);
		return rc;
	}
	w->npending = 0;
	SH_INC_BY(w, splits, w->tx_splits);
	SH_INC_BY(w, root_splits, w->tx_root_splits);
	return 0;
}

int sh_rtx_init_root(struct loco_sherman_worker *w)
{
	struct loco_sherman *t = w->t;
	int rc;
	LOCO_RTX_BLOCK(w->xw, rc) {
		const void *p = NULL;
		if ((rc = loco_rtx_read(w->xw, t->root, &p)) || p)
			continue;
		sh_leaf_init(t, w->nb[2], t->root, 0, SH_INF, 0, 1);
		rc = loco_rtx_write(w->xw, t->root, w->nb[2]);
	}
	return rc;
}
