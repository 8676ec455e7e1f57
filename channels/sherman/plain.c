/* SPDX-License-Identifier: MIT */
/* Plain mode writes (Sherman's own): insert, update and delete under the
 * leaf's HOCL lock, entry-sized write-backs, and B-link splits: the new
 * sibling is written first (unreachable), then the half-split node and
 * its release in one batch, then the separator goes into the parent
 * under the parent's lock (splitting it in turn). Every separator insert
 * is idempotent (a separator is the low fence of the node it leads to,
 * and a node's low fence never changes), so a writer that walks past a
 * node whose parent entry a dead (or slow) splitter never added adds it
 * itself. The root stays at its address for good: a root split writes
 * two new children and turns the root into their parent. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <loco/rtx/crash.h>
#include "channels/sherman/internal.h"

#define WRITE_TRIES 64

/* Write N (at most 2) new, not yet reachable nodes and place them; on
 * durable nodes persist them, in the same round trip. */
static int write_new(struct loco_sherman_worker *w, unsigned n,
		     const loco_raddr_t *a, void *const *img)
{
	struct loco_ack ack = { 0, 0 };
	bool fence = false;
	int rc = 0;
	for (unsigned i = 0; i < n && !rc; i++)
		rc = loco_post_write_raddr(w->thr, a[i], img[i],
					   w->t->o.node_size, &ack);
	/* Ordering: a FLUSH executes after the WRITEs before it on its QP
	 * (docs/ordering.md rule 7): they are durable, and placed, when it
	 * completes. One per node: a[1] on a[0]'s node is covered. */
	for (unsigned i = 0; i < n && !rc; i++) {
		uint32_t node = loco_raddr_node(a[i]);
		if (!sh_op_durable(w->t, node))
			fence = true;
		else if (!i || node != loco_raddr_node(a[0]))
			rc = loco_post_persist(w->thr, node, &ack);
	}
	if (!rc)
		rc = sh_wait(w, &ack);
	/* Ordering: placed before a write on another QP (the node that will
	 * point to them) publishes them. */
	if (!rc && fence)
		rc = loco_fence(w->thr, LOCO_FENCE_THREAD, 0);
	return rc;
}

/* Lock the node of LEVEL that holds KEY, from *A moving right: IMG gets
 * it, *A its address. -ESTALE if *A is of another level or above KEY. */
static int lock_covering(struct loco_sherman_worker *w, unsigned level,
			 uint64_t key, loco_raddr_t *a, void *img,
			 struct sh_held *h)
{
	for (;;) {
		int rc = sh_lock_node(w, *a, img, h);
		if (rc)
			return rc;
		const struct sh_hdr *hd = img;
		if (sh_level(hd) != level || key < hd->low) {
			sh_unlock(w, h);
			return -ESTALE;
		}
		if (key < hd->high)
			return 0;
		loco_raddr_t sib = hd->sibling;
		sh_unlock(w, h);
		if (!sib)
			return -EIO;
		SH_INC(w, sibling_moves);
		*a = sib;
	}
}

/* ---- splits --------------------------------------------------------------------- */

/* Split the root R (locked by H, image IMG) whose entries (sorted, N of
 * them) are E, LEFT its leftmost child if internal: two new children
 * take the halves, R becomes their parent. */
static int split_root(struct loco_sherman_worker *w, struct sh_held *h,
		      const void *img, const struct sh_kv *e, unsigned n,
		      loco_raddr_t left)
{
	struct loco_sherman *t = w->t;
	const struct sh_hdr *r = img;
	loco_raddr_t ab[2];
	int rc = sh_alloc(w, &ab[0]);
	if (!rc)
		rc = sh_alloc(w, &ab[1]);
	if (rc) {
		sh_unlock(w, h);
		return rc;
	}
	void *im[2] = { w->nb[2], w->nb[3] };
	uint64_t sep = sh_split_halves(t, img, e, n, left, ab[0], 1, im[0],
				       ab[1], im[1]);
	uint8_t *nr = w->nb[6];
	sh_root_image(t, img, sep, ab[0], ab[1], nr);
	rc = write_new(w, 2, ab, im);
	if (rc) {
		sh_unlock(w, h);
		return rc;
	}
	loco_crash_point("sherman.split_root");
	rc = sh_write_release(w, h, r->self, r->seq, 8, nr + 8,
			      t->o.node_size - 8);
	if (!rc) {
		SH_INC(w, splits);
		SH_INC(w, root_splits);
	}
	return rc;
}

/* Publish the half split of node A (image NEW_A) whose new right sibling
 * S (image SIMG) is written first: in one batch when S is on A's hosting
 * node (and no crash point sits in between), else placed before. */
static int publish_half(struct loco_sherman_worker *w, struct sh_held *h,
			const void *old, void *new_a, loco_raddr_t s, void *simg)
{
	struct loco_sherman *t = w->t;
	const struct sh_hdr *o = old;
	bool same = loco_raddr_node(s) == loco_raddr_node(o->self) &&
		    !loco_crash_armed("sherman.split_sibling");
	int rc = 0;
	if (!same) {
		rc = write_new(w, 1, &s, &simg);
		if (rc) {
			sh_unlock(w, h);
			return rc;
		}
	}
	loco_crash_point("sherman.split_sibling");
	rc = sh_write_release_pre(w, h, o->self, o->seq, 8,
				  (uint8_t *)new_a + 8, t->o.node_size - 8,
				  same ? s : 0, same ? simg : NULL);
	if (!rc)
		SH_INC(w, splits);
	return rc;
}

/* After a published half split: separator SEP of new node S into LEVEL
 * (HINT: the node there the descent saw). The split, and the write that
 * made it, are done whatever comes of this: a missing parent entry is a
 * valid B-link state (readers and writers reach S from its left
 * sibling) that the next writer walking to a leaf adds, or verify with
 * fix for any level. So a failure is warned about, not returned (the
 * write's caller would take it for the write's, and a write run again
 * would find its own key). */
static void link_split(struct loco_sherman_worker *w, unsigned level,
		       uint64_t sep, loco_raddr_t s, loco_raddr_t hint)
{
	int rc = sh_plain_link(w, level, sep, s, hint);
	if (rc)
		loco_warn(w->t->base.name, "node %#llx (level %u, low %llu) "
			  "split off, its parent entry not added: %s",
			  (unsigned long long)s, level - 1,
			  (unsigned long long)sep, loco_strerror(rc));
}

/* Split full node IMG (locked by H) whose entries, with the new one,
 * are E[0..N) (internal: LEFT its leftmost child): the root in place,
 * any other node B-link style, then its separator into the level above
 * (HINT: the node there the descent saw). */
static int split_node(struct loco_sherman_worker *w, struct sh_held *h,
		      const void *img, const struct sh_kv *e, unsigned n,
		      loco_raddr_t left, loco_raddr_t hint)
{
	struct loco_sherman *t = w->t;
	const struct sh_hdr *o = img;
	if (o->self == t->root)
		return split_root(w, h, img, e, n, left);
	loco_raddr_t s;
	int rc = sh_alloc(w, &s);
	if (rc) {
		sh_unlock(w, h);
		return rc;
	}
	uint64_t sep = sh_split_halves(t, img, e, n, left, o->self, o->nv + 1,
				       w->nb[3], s, w->nb[2]);
	rc = publish_half(w, h, img, w->nb[3], s, w->nb[2]);
	if (rc)
		return rc;
	loco_crash_point("sherman.split_half");
	link_split(w, sh_level(o) + 1, sep, s, hint);
	return 0;
}

/* Split full leaf IMG (locked by H) adding {KEY, VAL}. */
static int split_leaf(struct loco_sherman_worker *w, struct sh_held *h,
		      void *img, uint64_t key, const void *val,
		      loco_raddr_t hint)
{
	loco_crash_point("sherman.split_locked");
	unsigned n = sh_leaf_entries(w->t, img, key, val, w->kv);
	return split_node(w, h, img, w->kv, n, 0, hint);
}

/* ---- separators into internal nodes ------------------------------------------ */

/* Split full internal node IMG (locked by H) adding {KEY, CHILD}. */
static int split_internal(struct loco_sherman_worker *w, struct sh_held *h,
			  void *img, uint64_t key, loco_raddr_t child,
			  loco_raddr_t hint)
{
	uint8_t *all = w->nb[4];
	unsigned n = sh_int_entries(w->t, img, key, child, all, w->kv);
	loco_crash_point("sherman.split_locked");
	return split_node(w, h, img, w->kv, n, sh_int_child(all, 0), hint);
}

/* One attempt at the separator insert at LEVEL, starting from *A. */
static int link_once(struct loco_sherman_worker *w, unsigned level,
		     uint64_t key, loco_raddr_t child, loco_raddr_t a,
		     loco_raddr_t up)
{
	struct loco_sherman *t = w->t;
	uint8_t *img = w->nb[1];
	struct sh_held h = { 0 };
	int rc = lock_covering(w, level, key, &a, img, &h);
	if (rc)
		return rc;
	loco_crash_point("sherman.split_parent_locked");
	if (sh_int_linked(img, key)) {
		sh_unlock(w, &h);
		return 0;
	}
	const struct sh_hdr *p = (const void *)img;
	if (sh_count(p) >= t->int_cap)
		return split_internal(w, &h, img, key, child, up);
	uint8_t *np = w->nb[3];
	memcpy(np, img, t->o.node_size);
	sh_int_insert(np, key, child);
	((struct sh_hdr *)np)->nv++;
	sh_seal(t, np);
	return sh_write_release(w, &h, a, p->seq, 8, np + 8, t->o.node_size - 8);
}

int sh_plain_link(struct loco_sherman_worker *w, unsigned level, uint64_t key,
		  loco_raddr_t child, loco_raddr_t hint)
{
	struct sh_path path = { 0 };
	int rc = -ESTALE;
	for (unsigned k = 0; k < WRITE_TRIES && (rc == -ESTALE || rc == -EAGAIN);
	     k++) {
		loco_raddr_t a = hint;
		if (k || !a)
			rc = sh_descend(w, key, level, k > 1, &a, &path);
		else
			rc = 0;
		if (!rc)
			rc = link_once(w, level, key, child, a,
				       level + 1 < SH_LEVELS ? path.at[level + 1] : 0);
	}
	return rc;
}

/* ---- insert, update, delete ---------------------------------------------------- */

/* Apply OP to leaf IMG (locked by H). */
static int leaf_apply(struct loco_sherman_worker *w, struct sh_held *h,
		      void *img, enum sh_op op, uint64_t key, const void *val,
		      loco_raddr_t parent)
{
	struct loco_sherman *t = w->t;
	const struct sh_hdr *l = img;
	int fs, i = sh_leaf_find(t, img, key, &fs);
	if ((op == SH_INSERT && i >= 0) || (op != SH_INSERT && i < 0)) {
		sh_unlock(w, h);
		return op == SH_INSERT ? -EEXIST : -ENOENT;
	}
	if (op == SH_INSERT && fs < 0)
		return split_leaf(w, h, img, key, val, parent);
	unsigned slot = (unsigned)(op == SH_INSERT ? fs : i);
	sh_leaf_set(t, img, slot, key, op == SH_DELETE ? NULL : val);
	uint32_t off = SH_HDR + slot * t->entry_len;
	return sh_write_release(w, h, l->self, l->seq, off,
				(uint8_t *)img + off, t->entry_len);
}

/* A write reached leaf A (low fence LOW) by moving right from where its
 * level-1 node P led: if P, read now, holds LOW in its range but has no
 * entry for it, A's split has no parent entry yet (its splitter died, or
 * is slow): this writer adds it (idempotent, as the splitter's own). */
static void link_if_missing(struct loco_sherman_worker *w, loco_raddr_t p,
			    uint64_t low, loco_raddr_t a)
{
	uint8_t *img = w->nb[0];
	const struct sh_hdr *h = (const void *)img;
	if (sh_read_covering(w, low, &p, img) || sh_level(h) != 1 ||
	    sh_int_linked(img, low))
		return;
	if (!sh_plain_link(w, 1, low, a, p))
		SH_INC(w, links);
}

int sh_plain_write(struct loco_sherman_worker *w, enum sh_op op, uint64_t key,
		   const void *val)
{
	struct loco_sherman *t = w->t;
	int rc = -ESTALE;
	for (unsigned k = 0; k < WRITE_TRIES && (rc == -ESTALE || rc == -EAGAIN);
	     k++) {
		struct sh_path path;
		loco_raddr_t a;
		struct sh_held h = { 0 };
		rc = sh_descend(w, key, 0, k > 0, &a, &path);
		loco_raddr_t first = a;
		if (!rc)
			rc = lock_covering(w, 0, key, &a, w->nb[1], &h);
		bool cached_parent = t->cached && path.at[1] && !path.fresh[1];
		if ((rc == -ESTALE || (!rc && a != first)) && cached_parent) {
			SH_INC(w, cache_stale);
			sh_cache_drop(&t->cache, 1, ((struct sh_hdr *)w->nb[0])->low);
		}
		if (rc)
			continue;
		uint64_t low = ((struct sh_hdr *)w->nb[1])->low;
		loco_raddr_t parent = path.at[1];
		rc = leaf_apply(w, &h, w->nb[1], op, key, val, parent);
		if (a != first && parent &&
		    (!rc || rc == -EEXIST || rc == -ENOENT))
			link_if_missing(w, parent, low, a);
	}
	return rc;
}

/* ---- the root ---------------------------------------------------------------------- */

int sh_plain_init_root(struct loco_sherman_worker *w)
{
	struct loco_sherman *t = w->t;
	uint8_t *img = w->nb[1];
	struct sh_held h = { .raw = true };
	int rc = sh_lock_node(w, t->root, img, &h);
	if (rc)
		return rc;
	const struct sh_hdr *r = (const void *)img;
	if (r->self) {
		sh_unlock(w, &h);
		return sh_node_ok(t, img, t->root) ? 0 : -EIO;
	}
	uint8_t *nr = w->nb[2];
	sh_leaf_init(t, nr, t->root, 0, SH_INF, 0, 1);
	return sh_write_release(w, &h, t->root, r->seq, 8, nr + 8,
				t->o.node_size - 8);
}
