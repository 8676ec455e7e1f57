/* SPDX-License-Identifier: MIT */
/* loco-ycsb's `local` index: liburcu's lock-free resizable hash table
 * (cds_lfht, memb flavour) in this process, no network memory at all:
 * the no-disaggregation limit the other indexes are measured against.
 *
 * Entries are immutable: an update replaces the node (cds_lfht_replace),
 * and replaced or removed nodes are freed after a grace period
 * (call_rcu), so a get copies the value under rcu_read_lock without any
 * other lock. Every operation is linearizable: lookups see a node or its
 * replacement; add_unique, replace and del commit atomically and fail if
 * the node they act on was removed meanwhile, in which case we look the
 * key up again (counted as a retry).
 *
 * --ix-opt broken=drop-updates (tests only): an update of a present key
 * is acknowledged and dropped, which the end-of-run check and the
 * recorded history must catch. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <urcu.h>
#include <urcu/rculfhash.h>

#include "apps/common/rcu_tsan.h"
#include "apps/common/zipf.h"
#include "apps/ycsb/ix_opts.h"

#define LX_MIN_BUCKETS 1024
#define LX_MAX_INIT_BUCKETS (1ul << 22)

struct lx_entry {
	struct cds_lfht_node node;
	struct rcu_head rcu;
	uint64_t key;
	uint32_t len;
	unsigned char val[];
};

struct ycsb_index {
	struct cds_lfht *ht;
	bool drop_updates;
	_Atomic uint64_t retries;     /* of closed thread handles */
};

struct ycsb_ixthr {
	struct ycsb_index *ix;
	uint64_t retries;
};

/* The keys are small consecutive integers: scramble them. */
static unsigned long key_hash(uint64_t key)
{
	return (unsigned long)rng_mix(key);
}

/* The tsan_* calls state cds_lfht's publication and grace periods
 * (apps/common/rcu_tsan.h). */
static int key_match(struct cds_lfht_node *node, const void *key)
{
	struct lx_entry *e = caa_container_of(node, struct lx_entry, node);
	tsan_acquire(e);
	bool match = e->key == *(const uint64_t *)key;
	tsan_release(e);
	return match;
}

static void entry_free_rcu(struct rcu_head *head)
{
	struct lx_entry *e = caa_container_of(head, struct lx_entry, rcu);
	tsan_acquire(e);
	free(e);
}

static struct lx_entry *entry_new(uint64_t key, const void *val, uint32_t len)
{
	struct lx_entry *e = malloc(sizeof(*e) + len);
	if (!e)
		return NULL;
	cds_lfht_node_init(&e->node);
	e->key = key;
	e->len = len;
	memcpy(e->val, val, len);
	tsan_release(e);
	return e;
}

static int lx_open(struct loco_mgr *mgr, const struct ycsb_index_cfg *cfg,
		   struct ycsb_index **out)
{
	static const char *const known[] = { "broken", NULL };
	static const char *const broken[] = { "none", "drop-updates", NULL };
	(void)mgr;
	unsigned mode = 0;
	int rc = ix_opts_known(cfg, "local", known);
	for (unsigned i = 0; !rc && i < cfg->nopts; i++)
		rc = ix_opt_word(cfg, i, "local", broken, &mode);
	bool drop = mode == 1;
	if (!rc && cfg->resize)
		rc = ix_opt_error("--resize %s: index local has no resize modes",
				  cfg->resize);
	if (rc)
		return rc;
	unsigned long buckets = LX_MIN_BUCKETS;
	while (buckets < cfg->keys && buckets < LX_MAX_INIT_BUCKETS)
		buckets <<= 1;
	struct ycsb_index *ix = calloc(1, sizeof(*ix));
	if (!ix)
		return -ENOMEM;
	ix->drop_updates = drop;
	ix->ht = cds_lfht_new(buckets, LX_MIN_BUCKETS, 0,
			      CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING, NULL);
	if (!ix->ht) {
		free(ix);
		return -ENOMEM;
	}
	*out = ix;
	return 0;
}

/* Free every entry; no thread handle is left. The calling thread
 * registers with RCU for the walk. */
static int lx_close(struct ycsb_index *ix)
{
	struct cds_lfht_iter it;
	struct lx_entry *e;
	rcu_register_thread();
	rcu_read_lock();
	cds_lfht_for_each_entry(ix->ht, &it, e, node) {
		if (!cds_lfht_del(ix->ht, &e->node))
			call_rcu(&e->rcu, entry_free_rcu);
	}
	rcu_read_unlock();
	/* Every callback queued by any thread has run: the entries are free. */
	rcu_barrier();
	rcu_unregister_thread();
	int rc = cds_lfht_destroy(ix->ht, NULL);
	free(ix);
	return rc ? -EBUSY : 0;
}

static int lx_thread_open(struct ycsb_index *ix, struct loco_thread *thr,
			  struct ycsb_ixthr **out)
{
	(void)thr;
	struct ycsb_ixthr *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->ix = ix;
	rcu_register_thread();
	*out = t;
	return 0;
}

static void lx_thread_close(struct ycsb_ixthr *t)
{
	rcu_unregister_thread();
	/* Relaxed: a statistic, read after the workers are joined. */
	atomic_fetch_add_explicit(&t->ix->retries, t->retries,
				  memory_order_relaxed);
	free(t);
}

/* The entry of KEY into IT, under rcu_read_lock; NULL if absent. */
static struct lx_entry *lookup(struct ycsb_index *ix, uint64_t key,
			       struct cds_lfht_iter *it)
{
	cds_lfht_lookup(ix->ht, key_hash(key), key_match, &key, it);
	struct cds_lfht_node *n = cds_lfht_iter_get_node(it);
	return n ? caa_container_of(n, struct lx_entry, node) : NULL;
}

static int lx_get(struct ycsb_ixthr *t, uint64_t key, void *val, uint32_t *len)
{
	struct cds_lfht_iter it;
	rcu_read_lock();
	struct lx_entry *e = lookup(t->ix, key, &it);
	if (e) {
		tsan_acquire(e);
		memcpy(val, e->val, e->len);
		*len = e->len;
		tsan_release(e);
	}
	rcu_read_unlock();
	return e ? 0 : -ENOENT;
}

static int lx_insert(struct ycsb_ixthr *t, uint64_t key, const void *val,
		     uint32_t len)
{
	struct lx_entry *e = entry_new(key, val, len);
	if (!e)
		return -ENOMEM;
	rcu_read_lock();
	struct cds_lfht_node *n = cds_lfht_add_unique(t->ix->ht, key_hash(key),
						      key_match, &key, &e->node);
	rcu_read_unlock();
	if (n == &e->node)
		return 0;
	free(e);
	return -EEXIST;
}

static int lx_update(struct ycsb_ixthr *t, uint64_t key, const void *val,
		     uint32_t len)
{
	struct lx_entry *e = entry_new(key, val, len);
	struct cds_lfht_iter it;
	if (!e)
		return -ENOMEM;
	for (;; t->retries++) {
		rcu_read_lock();
		struct lx_entry *old = lookup(t->ix, key, &it);
		cds_lfht_node_init(&e->node);
		int rc = !old ? -ENOENT : t->ix->drop_updates ? 0 :
			 cds_lfht_replace(t->ix->ht, &it, key_hash(key), key_match,
					  &key, &e->node);
		rcu_read_unlock();
		if (!old || (!rc && t->ix->drop_updates)) {
			free(e);
			return rc;
		}
		if (!rc) {
			call_rcu(&old->rcu, entry_free_rcu);
			return 0;
		}
	}
}

static int lx_remove(struct ycsb_ixthr *t, uint64_t key)
{
	struct cds_lfht_iter it;
	for (;; t->retries++) {
		rcu_read_lock();
		struct lx_entry *e = lookup(t->ix, key, &it);
		int rc = e ? cds_lfht_del(t->ix->ht, &e->node) : -ENOENT;
		rcu_read_unlock();
		if (!e)
			return -ENOENT;
		if (!rc) {
			call_rcu(&e->rcu, entry_free_rcu);
			return 0;
		}
	}
}

static void lx_counters(struct ycsb_index *ix, struct ycsb_index_counters *c)
{
	/* Relaxed: the handles were closed before (thread joins order it). */
	c->retries = atomic_load_explicit(&ix->retries, memory_order_relaxed);
}

const struct ycsb_index_ops ycsb_ix_local = {
	.name = "local",
	.ordered = false,
	.distributed = false,
	.open = lx_open,
	.thread_open = lx_thread_open,
	.thread_close = lx_thread_close,
	.close = lx_close,
	.get = lx_get,
	.insert = lx_insert,
	.update = lx_update,
	.remove = lx_remove,
	.counters = lx_counters,
};
