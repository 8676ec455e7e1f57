/* SPDX-License-Identifier: MIT */
/* Reading nodes and walking down the tree: checked node reads (read again
 * while torn), the descent from the index cache or the root, moves to
 * the right along sibling pointers (B-link), and lookups. */
#include <errno.h>
#include <string.h>

#include <loco/wait.h>

#include "channels/sherman/internal.h"

/* One READ of node A into IMG (rtx mode: its installed value, *STAMP
 * the object's lock word read after it, NULL: not wanted). */
static int read_once(struct loco_sherman_worker *w, loco_raddr_t a, void *img,
		     uint64_t *stamp)
{
	struct loco_sherman *t = w->t;
	if (!t->o.rtx) {
		struct loco_ack ack = { 0, 0 };
		int rc = loco_post_read_raddr(w->thr, a, img, t->o.node_size, &ack);
		return rc ? rc : sh_wait(w, &ack);
	}
	/* A never-written object (a split's new sibling whose install is
	 * still on its way) reads as zeros, which fail the checks; one that
	 * kept being replaced is -EAGAIN: like a torn read, read again. */
	return loco_rtx_peek(w->xw, &a, 1, img, stamp);
}

int sh_read_node(struct loco_sherman_worker *w, loco_raddr_t a, void *img)
{
	return sh_read_node_stamp(w, a, img, NULL);
}

int sh_torn_step(struct loco_sherman_worker *w, loco_raddr_t a,
		 unsigned *tries, struct loco_wait *wait)
{
	struct loco_sherman *t = w->t;
	int rc = 0;
	SH_INC(w, torn_retries);
	if (!t->o.rtx && ++*tries % SH_REPAIR_EVERY == 0 &&
	    (rc = sh_lock_repair(w, a)))
		return rc;
	if (loco_wait_step(wait)) {
		loco_err(t->base.name, "node %#llx stays torn or unwritten",
			 (unsigned long long)a);
		return -ETIMEDOUT;
	}
	return 0;
}

int sh_read_node_stamp(struct loco_sherman_worker *w, loco_raddr_t a,
		       void *img, uint64_t *stamp)
{
	struct loco_sherman *t = w->t;
	struct loco_wait wait;
	unsigned tries = 0;
	loco_wait_init(&wait, t->base.mgr, -1);
	for (;;) {
		int rc = read_once(w, a, img, stamp);
		if (rc && rc != -EAGAIN)
			return rc;
		if (!rc && sh_node_ok(t, img, a))
			return 0;
		if (!rc && (t->o.unsafe & LOCO_SHERMAN_UNSAFE_NO_CHECK)) {
			SH_INC(w, torn_returned);
			return 0;
		}
		if ((rc = sh_torn_step(w, a, &tries, &wait)))
			return rc;
	}
}

int sh_read_covering(struct loco_sherman_worker *w, uint64_t key,
		     loco_raddr_t *a, void *img)
{
	int rc = sh_read_node(w, *a, img);
	while (!rc) {
		const struct sh_hdr *h = img;
		if (key < h->low)
			return -ESTALE;
		if (key < h->high)
			return 0;
		if (!h->sibling)
			return -EIO;  /* a rightmost node with a finite fence */
		SH_INC(w, sibling_moves);
		*a = h->sibling;
		rc = sh_read_node(w, *a, img);
	}
	return rc;
}

/* Start of a descent: the lowest cached node above LEVEL that holds KEY,
 * else the root, read. *FROM_CACHE says which. */
static int descent_start(struct loco_sherman_worker *w, uint64_t key,
			 unsigned level, bool nocache, void *img,
			 bool *from_cache)
{
	struct loco_sherman *t = w->t;
	*from_cache = !nocache && t->cached &&
		      sh_cache_find(&t->cache, key, level + 1, img);
	if (*from_cache) {
		SH_INC(w, cache_hits);
		return 0;
	}
	loco_raddr_t a = t->root;
	return sh_read_covering(w, key, &a, img);
}

int sh_descend(struct loco_sherman_worker *w, uint64_t key, unsigned level,
	       bool nocache, loco_raddr_t *out, struct sh_path *path)
{
	struct loco_sherman *t = w->t;
	uint8_t *img = w->nb[0];
	bool cached;
	memset(path, 0, sizeof(*path));
	int rc = descent_start(w, key, level, nocache, img, &cached);
	for (unsigned depth = 0; !rc; depth++) {
		const struct sh_hdr *h = (const void *)img;
		unsigned lv = sh_level(h);
		if (lv < level || depth > 2 * SH_LEVELS)
			return -ESTALE;   /* the root is below LEVEL, or a loop */
		path->at[lv] = h->self;
		path->fresh[lv] = !cached;
		if (!cached && lv && t->cached)
			sh_cache_put(&t->cache, img);
		if (lv == level) {
			*out = h->self;
			return 0;
		}
		loco_raddr_t child = sh_int_pick(img, key);
		if (lv == level + 1) {
			*out = child;
			return 0;
		}
		uint64_t low = h->low;   /* IMG gets the child */
		loco_raddr_t pick = child;
		rc = sh_read_covering(w, key, &child, img);
		if ((rc == -ESTALE || (!rc && child != pick)) && cached) {
			/* The cached parent led below the key, or left of the
			 * node that holds it (it lacks a split's separator):
			 * stale. Kept, it would send every descent it starts
			 * along the same sibling chain. */
			SH_INC(w, cache_stale);
			sh_cache_drop(&t->cache, lv, low);
		}
		cached = false;
	}
	return rc;
}

/* The leaf that holds KEY read into IMG; *A its address. A stale cache
 * entry met on the way is dropped and the descent made again from the
 * root. */
static int leaf_for(struct loco_sherman_worker *w, uint64_t key,
		    loco_raddr_t *a, void *img)
{
	struct loco_sherman *t = w->t;
	struct sh_path path;
	for (unsigned k = 0;; k++) {
		int rc = sh_descend(w, key, 0, k > 0, a, &path);
		loco_raddr_t first = *a;
		if (!rc)
			rc = sh_read_covering(w, key, a, img);
		/* A cached parent that led left of the leaf (it lacks a split's
		 * new sibling) or below the key is stale: drop it. */
		bool stale = rc == -ESTALE || (!rc && *a != first);
		if (stale && t->cached && path.at[1] && !path.fresh[1]) {
			SH_INC(w, cache_stale);
			sh_cache_drop(&t->cache, 1, ((struct sh_hdr *)w->nb[0])->low);
		}
		if (rc != -ESTALE || k == 2)
			return rc;
	}
}

int loco_sherman_lookup(struct loco_sherman_worker *w, uint64_t key, void *val)
{
	struct loco_sherman *t = w->t;
	if (key > LOCO_SHERMAN_KEY_MAX || !val)
		return -EINVAL;
	int rc = sh_ready(w);
	if (rc)
		return rc;
	SH_INC(w, lookups);
	uint8_t *img = w->nb[1];
	loco_raddr_t a;
	rc = leaf_for(w, key, &a, img);
	if (rc)
		return rc;
	int i = sh_leaf_find(t, img, key, NULL);
	if (i < 0)
		return -ENOENT;
	memcpy(val, sh_slot(t, img, (unsigned)i) + 8, t->o.value_len);
	return 0;
}
