/* SPDX-License-Identifier: MIT */
/* loco-ycsb's `local-ordered` index: a skip list under one reader-writer
 * lock in this process, no network memory: the local reference of the
 * ordered indexes (workload E), as `local` is of the hash tables. Gets and
 * scans share the lock, inserts, updates and deletes take it alone
 * (writers preferred, so 95% scans do not starve the inserts); every
 * operation is linearizable at its critical section. Values live in the
 * nodes and are updated in place under the write lock.
 *
 * It is a simple baseline, not a fast concurrent ordered map: the lock
 * serializes writers and its word is shared by every reader.
 *
 * --verify walks every level: keys strictly ascending, and each level a
 * subsequence of the one below it, of nodes tall enough.
 *
 * --ix-opt broken=... (tests only):
 *   short-scans  a scan that finds two pairs or more leaves out the last
 *                one, which the recorded history must show (lincheck's
 *                ordered-map: a scan returns every pair of its range);
 *   skip-level0  an insert of a node taller than one level leaves it out
 *                of level 0: the key is lost to gets and scans (the end
 *                check) and --verify finds it above a level that lacks
 *                it. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/common/zipf.h"
#include "apps/ycsb/ix_opts.h"

#define SL_LEVELS 24

struct sl_node {
	uint64_t key;
	uint32_t len;
	unsigned height;
	unsigned char *val;             /* value_size bytes, after next[] */
	struct sl_node *next[];
};

struct ycsb_index {
	pthread_rwlock_t lock;
	struct sl_node *head;           /* SL_LEVELS high, no key */
	uint32_t value_size;
	bool short_scans, skip_level0;
	uint64_t rng;                   /* node heights, under the write lock */
};

struct ycsb_ixthr {
	struct ycsb_index *ix;
	unsigned char *buf;             /* scan values */
	unsigned cap;                   /* values BUF holds */
};

static struct sl_node *node_new(const struct ycsb_index *ix, unsigned height)
{
	size_t links = sizeof(struct sl_node) + height * sizeof(struct sl_node *);
	struct sl_node *n = calloc(1, links + ix->value_size);
	if (!n)
		return NULL;
	n->height = height;
	n->val = (unsigned char *)n + links;
	return n;
}

/* 1 + the number of trailing one bits of a random word: height h with
 * probability 2^-h. */
static unsigned random_height(struct ycsb_index *ix)
{
	unsigned h = 1 + (unsigned)__builtin_ctzll(~rng_next(&ix->rng));
	return h < SL_LEVELS ? h : SL_LEVELS;
}

/* The last node before KEY at every level into PRED; the node of KEY,
 * or NULL. Caller holds the lock. */
static struct sl_node *find(struct ycsb_index *ix, uint64_t key,
			    struct sl_node **pred)
{
	struct sl_node *p = ix->head;
	for (int l = SL_LEVELS - 1; l >= 0; l--) {
		while (p->next[l] && p->next[l]->key < key)
			p = p->next[l];
		if (pred)
			pred[l] = p;
	}
	struct sl_node *n = p->next[0];
	return n && n->key == key ? n : NULL;
}

static int or_open(struct loco_mgr *mgr, const struct ycsb_index_cfg *cfg,
		   struct ycsb_index **out)
{
	static const char *const known[] = { "broken", NULL };
	static const char *const broken[] = { "none", "short-scans", "skip-level0",
					      NULL };
	pthread_rwlockattr_t attr;
	(void)mgr;
	unsigned mode = 0;
	int rc = ix_opts_known(cfg, "local-ordered", known);
	for (unsigned i = 0; !rc && i < cfg->nopts; i++)
		rc = ix_opt_word(cfg, i, "local-ordered", broken, &mode);
	if (!rc && cfg->resize)
		rc = ix_opt_error("--resize %s: index local-ordered has no resize "
				  "modes", cfg->resize);
	if (rc)
		return rc;
	struct ycsb_index *ix = calloc(1, sizeof(*ix));
	if (!ix)
		return -ENOMEM;
	ix->value_size = cfg->value_size;
	ix->short_scans = mode == 1;
	ix->skip_level0 = mode == 2;
	ix->rng = rng_mix(cfg->seed);
	ix->head = node_new(ix, SL_LEVELS);
	if (!ix->head) {
		free(ix);
		return -ENOMEM;
	}
	pthread_rwlockattr_init(&attr);
	pthread_rwlockattr_setkind_np(&attr,
				      PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&ix->lock, &attr);
	pthread_rwlockattr_destroy(&attr);
	*out = ix;
	return 0;
}

static int or_close(struct ycsb_index *ix)
{
	struct sl_node *n = ix->head;
	while (n) {
		struct sl_node *next = n->next[0];
		free(n);
		n = next;
	}
	pthread_rwlock_destroy(&ix->lock);
	free(ix);
	return 0;
}

static int or_thread_open(struct ycsb_index *ix, struct loco_thread *thr,
			  struct ycsb_ixthr **out)
{
	(void)thr;
	struct ycsb_ixthr *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->ix = ix;
	*out = t;
	return 0;
}

static void or_thread_close(struct ycsb_ixthr *t)
{
	free(t->buf);
	free(t);
}

static int or_get(struct ycsb_ixthr *t, uint64_t key, void *val, uint32_t *len)
{
	pthread_rwlock_rdlock(&t->ix->lock);
	struct sl_node *n = find(t->ix, key, NULL);
	if (n) {
		memcpy(val, n->val, n->len);
		*len = n->len;
	}
	pthread_rwlock_unlock(&t->ix->lock);
	return n ? 0 : -ENOENT;
}

static int or_insert(struct ycsb_ixthr *t, uint64_t key, const void *val,
		     uint32_t len)
{
	struct ycsb_index *ix = t->ix;
	struct sl_node *pred[SL_LEVELS];
	int rc = 0;
	pthread_rwlock_wrlock(&ix->lock);
	struct sl_node *n = find(ix, key, pred);
	if (n) {
		rc = -EEXIST;
	} else if (!(n = node_new(ix, random_height(ix)))) {
		rc = -ENOMEM;
	} else {
		n->key = key;
		n->len = len;
		memcpy(n->val, val, len);
		unsigned l0 = ix->skip_level0 && n->height > 1;
		for (unsigned l = l0; l < n->height; l++) {
			n->next[l] = pred[l]->next[l];
			pred[l]->next[l] = n;
		}
	}
	pthread_rwlock_unlock(&ix->lock);
	return rc;
}

static int or_update(struct ycsb_ixthr *t, uint64_t key, const void *val,
		     uint32_t len)
{
	pthread_rwlock_wrlock(&t->ix->lock);
	struct sl_node *n = find(t->ix, key, NULL);
	if (n) {
		memcpy(n->val, val, len);
		n->len = len;
	}
	pthread_rwlock_unlock(&t->ix->lock);
	return n ? 0 : -ENOENT;
}

static int or_remove(struct ycsb_ixthr *t, uint64_t key)
{
	struct sl_node *pred[SL_LEVELS];
	pthread_rwlock_wrlock(&t->ix->lock);
	struct sl_node *n = find(t->ix, key, pred);
	for (unsigned l = 0; n && l < n->height; l++)
		pred[l]->next[l] = n->next[l];
	pthread_rwlock_unlock(&t->ix->lock);
	int rc = n ? 0 : -ENOENT;
	free(n);
	return rc;
}

static int or_scan(struct ycsb_ixthr *t, uint64_t lo, uint64_t hi,
		   unsigned max, struct ycsb_pair *out, unsigned *count)
{
	struct ycsb_index *ix = t->ix;
	if (max > t->cap) {
		unsigned char *b = realloc(t->buf, (size_t)max * ix->value_size);
		if (!b)
			return -ENOMEM;
		t->buf = b;
		t->cap = max;
	}
	unsigned k = 0;
	pthread_rwlock_rdlock(&ix->lock);
	struct sl_node *pred[SL_LEVELS];
	find(ix, lo, pred);
	for (struct sl_node *n = pred[0]->next[0]; n && n->key <= hi && k < max;
	     n = n->next[0], k++) {
		unsigned char *v = t->buf + (size_t)k * ix->value_size;
		memcpy(v, n->val, n->len);
		out[k] = (struct ycsb_pair){ .key = n->key, .len = n->len, .val = v };
	}
	pthread_rwlock_unlock(&ix->lock);
	*count = ix->short_scans && k >= 2 ? k - 1 : k;
	return 0;
}

/* Level L: keys ascending, nodes at least L + 1 high, each one also on
 * level L - 1. */
static int verify_level(struct ycsb_index *ix, unsigned l, char *msg,
			size_t len)
{
	struct sl_node *below = ix->head;
	for (struct sl_node *n = ix->head->next[l]; n; n = n->next[l]) {
		struct sl_node *next = n->next[l];
		if (n->height <= l || (next && next->key <= n->key)) {
			snprintf(msg, len, "level %u: key %llu %s", l,
				 (unsigned long long)n->key, n->height <= l ?
				 "is on a level above its height" :
				 "is not below the next key");
			return -EUCLEAN;
		}
		while (l && below && below != n && (below == ix->head ||
						     below->key <= n->key))
			below = below->next[l - 1];
		if (l && below != n) {
			snprintf(msg, len, "key %llu is on level %u but not on "
				 "level %u", (unsigned long long)n->key, l, l - 1);
			return -EUCLEAN;
		}
	}
	return 0;
}

static int or_verify(struct ycsb_ixthr *t, char *msg, size_t len)
{
	int rc = 0;
	pthread_rwlock_rdlock(&t->ix->lock);
	for (unsigned l = 0; !rc && l < SL_LEVELS; l++)
		rc = verify_level(t->ix, l, msg, len);
	pthread_rwlock_unlock(&t->ix->lock);
	return rc;
}

const struct ycsb_index_ops ycsb_ix_local_ordered = {
	.name = "local-ordered",
	.ordered = true,
	.distributed = false,
	.open = or_open,
	.thread_open = or_thread_open,
	.thread_close = or_thread_close,
	.close = or_close,
	.get = or_get,
	.insert = or_insert,
	.update = or_update,
	.remove = or_remove,
	.scan = or_scan,
	.verify = or_verify,
};
