/* SPDX-License-Identifier: MIT */
/* The whole-tree check (loco_sherman_verify): every level walked along
 * its sibling chain from its leftmost node, every node checked, and each
 * level's chain matched against the children its parent level names. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channels/sherman/internal.h"

/* A node a level's chain passes, or a child its parent level names. */
struct vnode {
	loco_raddr_t a;
	uint64_t low;
};

struct vlist {
	struct vnode *v;
	size_t n, cap;
};

struct vctx {
	struct loco_sherman_worker *w;
	struct loco_sherman_verify *out;
	bool fix;
	uint64_t limit;          /* nodes that can exist: a chain longer loops */
};

static int vpush(struct vlist *l, loco_raddr_t a, uint64_t low)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 256;
		void *v = realloc(l->v, cap * sizeof(*l->v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = (struct vnode){ a, low };
	return 0;
}

static void fail(struct vctx *c, const char *fmt, ...)
{
	if (!c->out->errors++) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(c->out->first_error, sizeof(c->out->first_error), fmt, ap);
		va_end(ap);
	}
}

/* The node's own invariants: level, keys inside its fences, sorted
 * separators, unique leaf keys. */
static void check_node(struct vctx *c, const void *img, unsigned level)
{
	const struct loco_sherman *t = c->w->t;
	const struct sh_hdr *h = img;
	unsigned long long a = h->self;
	if (sh_level(h) != level) {
		fail(c, "node %#llx: level %u on level %u", a, sh_level(h), level);
		return;
	}
	if (h->low >= h->high)
		fail(c, "node %#llx: fences [%llu, %llu)", a,
		     (unsigned long long)h->low, (unsigned long long)h->high);
	if (!t->o.rtx && (h->seq & 1))
		fail(c, "node %#llx: seq %llu odd (a write-back in progress)", a,
		     (unsigned long long)h->seq);
	if (level) {
		uint64_t prev = h->low;
		for (unsigned i = 1; i <= sh_count(h); i++) {
			uint64_t k = sh_int_key(img, i);
			if (k <= prev || k >= h->high)
				fail(c, "node %#llx [%llu, %llu): separator %u (%llu) "
				     "out of order or fences", a,
				     (unsigned long long)h->low,
				     (unsigned long long)h->high, i,
				     (unsigned long long)k);
			prev = k;
		}
		return;
	}
	for (unsigned i = 0; i < t->leaf_slots; i++) {
		if (!sh_slot_used(t, img, i))
			continue;
		uint64_t k;
		memcpy(&k, sh_slot(t, (void *)img, i), 8);
		c->out->keys++;
		if (k < h->low || k >= h->high)
			fail(c, "node %#llx: key %llu outside [%llu, %llu)", a,
			     (unsigned long long)k, (unsigned long long)h->low,
			     (unsigned long long)h->high);
		for (unsigned j = i + 1; j < t->leaf_slots; j++) {
			uint64_t k2;
			memcpy(&k2, sh_slot(t, (void *)img, j), 8);
			if (sh_slot_used(t, img, j) && k2 == k)
				fail(c, "node %#llx: key %llu twice", a,
				     (unsigned long long)k);
		}
	}
}

/* Walk LEVEL from FIRST along the siblings into CHAIN, checking fences
 * contiguous from 0 to infinity; the children it names into KIDS. */
static int walk(struct vctx *c, unsigned level, loco_raddr_t first,
		struct vlist *chain, struct vlist *kids)
{
	struct loco_sherman_worker *w = c->w;
	uint8_t *img = w->nb[1];
	uint64_t expect = 0;
	int rc = 0;
	for (loco_raddr_t a = first; a && !rc; a = ((struct sh_hdr *)img)->sibling) {
		if (chain->n > c->limit) {
			fail(c, "level %u: the sibling chain loops", level);
			return 0;
		}
		if ((rc = sh_read_node(w, a, img)))
			return rc;
		const struct sh_hdr *h = (const void *)img;
		check_node(c, img, level);
		if (h->low != expect)
			fail(c, "level %u, node %#llx: low %llu, the left "
			     "neighbour's high %llu", level, (unsigned long long)a,
			     (unsigned long long)h->low, (unsigned long long)expect);
		expect = h->high;
		c->out->nodes++;
		c->out->leaves += !level;
		rc = vpush(chain, a, h->low);
		for (unsigned i = 0; level && i <= sh_count(h) && !rc; i++)
			rc = vpush(kids, sh_int_child(img, i),
				   i ? sh_int_key(img, i) : h->low);
	}
	if (!rc && expect != SH_INF)
		fail(c, "level %u ends at %llu, not infinity", level,
		     (unsigned long long)expect);
	return rc;
}

static int link_unlinked(struct vctx *c, unsigned level, const struct vnode *v)
{
	struct loco_sherman_worker *w = c->w;
	if (w->t->o.rtx) {
		fail(c, "level %u: node %#llx has no parent entry (rtx mode "
		     "splits are atomic)", level, (unsigned long long)v->a);
		return 0;
	}
	int rc = sh_plain_link(w, level + 1, v->low, v->a, 0);
	if (!rc)
		c->out->linked++;
	return rc;
}

/* The children the level above names (KIDS, in order) must appear in
 * CHAIN in that order with those low fences; the chain's other nodes
 * are unlinked (a split whose parent entry is missing). */
static int match(struct vctx *c, unsigned level, const struct vlist *chain,
		 const struct vlist *kids)
{
	size_t i = 0;
	int rc = 0;
	for (size_t k = 0; k < kids->n && !rc; k++) {
		while (i < chain->n && chain->v[i].a != kids->v[k].a && !rc) {
			c->out->unlinked++;
			if (c->fix)
				rc = link_unlinked(c, level, &chain->v[i]);
			i++;
		}
		if (i == chain->n) {
			fail(c, "level %u: child %#llx (separator %llu) not on "
			     "the level's chain, or out of order", level,
			     (unsigned long long)kids->v[k].a,
			     (unsigned long long)kids->v[k].low);
			return rc;
		}
		if (chain->v[i].low != kids->v[k].low)
			fail(c, "level %u: child %#llx has low %llu, its "
			     "separator is %llu", level,
			     (unsigned long long)kids->v[k].a,
			     (unsigned long long)chain->v[i].low,
			     (unsigned long long)kids->v[k].low);
		i++;
	}
	for (; i < chain->n && !rc; i++) {
		c->out->unlinked++;
		if (c->fix)
			rc = link_unlinked(c, level, &chain->v[i]);
	}
	return rc;
}

int loco_sherman_verify(struct loco_sherman_worker *w, bool fix,
			struct loco_sherman_verify *out)
{
	struct loco_sherman *t = w->t;
	struct loco_sherman_verify v = { 0 };
	struct vctx c = { .w = w, .out = &v, .fix = fix,
			  .limit = (uint64_t)t->nparts * t->o.nodes };
	struct vlist chain = { 0 }, kids = { 0 }, next = { 0 };
	uint8_t *img = w->nb[1];
	int rc = sh_read_node(w, t->root, img);
	unsigned top = rc ? 0 : sh_level((struct sh_hdr *)img);
	v.levels = top + 1;
	loco_raddr_t first = t->root;
	for (int level = (int)top; level >= 0 && !rc; level--) {
		chain.n = next.n = 0;
		rc = walk(&c, (unsigned)level, first, &chain, &next);
		if (!rc && level < (int)top)
			rc = match(&c, (unsigned)level, &chain, &kids);
		struct vlist tmp = kids;
		kids = next;
		next = tmp;
		first = kids.n ? kids.v[0].a : 0;
		if (!rc && level && !first) {
			fail(&c, "level %d names no children", level);
			break;
		}
	}
	free(chain.v);
	free(kids.v);
	free(next.v);
	if (!rc)
		*out = v;
	return rc;
}
