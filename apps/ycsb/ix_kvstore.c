/* SPDX-License-Identifier: MIT */
/* loco-ycsb's `kvstore` index: the kvstore channel of apps/kvstore (LOCO
 * §6: slots in every node's memory, a lock per key group, a local index
 * per node kept up to date by tracker broadcasts). No scans.
 *
 * Options (--ix-opt):
 *   capacity=N     slots per node (default 2 x --keys, at least 1024): a
 *                  node holds the keys it inserted, so the loaded share and
 *                  the inserts of the run must fit (-ENOSPC otherwise)
 *   locks=N        key locks (default 1024)
 *   ring=BYTES     tracker ring bytes per node (default the kvstore's)
 *   hot-locks=0|1  lock words in NIC device memory (verbs)
 *   broken-fence=0|1  tests only: unlock without placing the writes to
 *                  other hosts (kv_config), which shm-weak histories and
 *                  the end check must catch
 * Counters: retries are gets retried on a torn READ, cache_misses gets
 * whose local index entry named a slot that had been reused. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/kvstore/kv.h"
#include "apps/ycsb/ix_opts.h"

#define KX_MIN_CAPACITY 1024
#define KX_DEFAULT_LOCKS 1024

struct ycsb_index {
	struct kv_store kv;
	_Atomic uint64_t torn, stale;   /* of closed thread handles */
	atomic_flag full_said;
};

struct ycsb_ixthr {
	struct ycsb_index *ix;
	struct kv_thread t;
	struct kv_get g;
};

static const char *const kx_known[] = {
	"capacity", "locks", "ring", "hot-locks", "broken-fence", NULL,
};

/* Option I of CFG into KC. */
static int kx_opt(const struct ycsb_index_cfg *cfg, unsigned i,
		  struct kv_config *kc)
{
	static const char *const flag[] = { "0", "1", NULL };
	const char *key = cfg->opt_key[i];
	uint64_t v;
	unsigned b;
	int rc;
	if (!strcmp(key, "capacity")) {
		rc = ix_opt_u64(cfg, i, "kvstore", 1, UINT64_C(1) << 32, &v);
		kc->capacity = v;
	} else if (!strcmp(key, "locks")) {
		rc = ix_opt_u64(cfg, i, "kvstore", 1, 4096, &v);
		kc->nlocks = (unsigned)v;
	} else if (!strcmp(key, "ring")) {
		rc = ix_opt_u64(cfg, i, "kvstore", 4096, UINT64_C(1) << 30, &v);
		kc->ring_size = v;
	} else {
		rc = ix_opt_word(cfg, i, "kvstore", flag, &b);
		if (!strcmp(key, "hot-locks"))
			kc->hot_locks = b;
		else
			kc->broken_fence = b;
	}
	return rc;
}

static int kx_open(struct loco_mgr *mgr, const struct ycsb_index_cfg *cfg,
		   struct ycsb_index **out)
{
	struct kv_config kc = {
		.capacity = cfg->keys * 2 > KX_MIN_CAPACITY ? cfg->keys * 2 :
			    KX_MIN_CAPACITY,
		.value_size = cfg->value_size, .nlocks = KX_DEFAULT_LOCKS,
	};
	int rc = ix_opts_known(cfg, "kvstore", kx_known);
	for (unsigned i = 0; !rc && i < cfg->nopts; i++)
		rc = kx_opt(cfg, i, &kc);
	if (!rc && cfg->resize)
		rc = ix_opt_error("--resize %s: index kvstore has no resize modes",
				  cfg->resize);
	if (rc)
		return rc;
	struct ycsb_index *ix = calloc(1, sizeof(*ix));
	if (!ix)
		return -ENOMEM;
	atomic_flag_clear_explicit(&ix->full_said, memory_order_relaxed);
	rc = kv_init(&ix->kv, mgr, NULL, cfg->name, &kc);
	if (rc) {
		free(ix);
		return rc;
	}
	*out = ix;
	return 0;
}

static int kx_start(struct ycsb_index *ix)
{
	return kv_start(&ix->kv);
}

/* Every node is done with its operations (the driver's last barrier). */
static int kx_close(struct ycsb_index *ix)
{
	kv_stop(&ix->kv);
	kv_fini(&ix->kv);
	free(ix);
	return 0;
}

static int kx_thread_open(struct ycsb_index *ix, struct loco_thread *thr,
			  struct ycsb_ixthr **out)
{
	struct ycsb_ixthr *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->ix = ix;
	int rc = kv_thread_init(&t->t, &ix->kv, thr);
	if (rc) {
		free(t);
		return rc;
	}
	rc = kv_get_init(&t->g, &ix->kv);
	if (rc) {
		kv_thread_fini(&t->t);
		free(t);
		return rc;
	}
	*out = t;
	return 0;
}

static void kx_thread_close(struct ycsb_ixthr *t)
{
	/* Relaxed: statistics, read after the workers are joined. */
	atomic_fetch_add_explicit(&t->ix->torn, t->t.st.torn, memory_order_relaxed);
	atomic_fetch_add_explicit(&t->ix->stale, t->t.st.stale,
				  memory_order_relaxed);
	kv_get_fini(&t->g);
	kv_thread_fini(&t->t);
	free(t);
}

static int kx_get(struct ycsb_ixthr *t, uint64_t key, void *val, uint32_t *len)
{
	return kv_get(&t->t, &t->g, key, val, len);
}

static int kx_insert(struct ycsb_ixthr *t, uint64_t key, const void *val,
		     uint32_t len)
{
	int rc = kv_insert(&t->t, key, val, len);
	/* Relaxed: only says it once. */
	if (rc == -ENOSPC &&
	    !atomic_flag_test_and_set_explicit(&t->ix->full_said,
					       memory_order_relaxed))
		fprintf(stderr, "loco-ycsb: kvstore: this node's %llu slots are "
			"taken (raise --ix-opt capacity)\n",
			(unsigned long long)t->ix->kv.cfg.capacity);
	return rc;
}

static int kx_update(struct ycsb_ixthr *t, uint64_t key, const void *val,
		     uint32_t len)
{
	return kv_update(&t->t, key, val, len);
}

static int kx_remove(struct ycsb_ixthr *t, uint64_t key)
{
	return kv_delete(&t->t, key);
}

static void kx_counters(struct ycsb_index *ix, struct ycsb_index_counters *c)
{
	/* Relaxed: the handles were closed before (thread joins order it). */
	c->retries = atomic_load_explicit(&ix->torn, memory_order_relaxed);
	c->cache_misses = atomic_load_explicit(&ix->stale, memory_order_relaxed);
	/* This node's slots: every node hosts the keys it inserted. */
	pthread_mutex_lock(&ix->kv.alloc_mu);
	uint64_t held = ix->kv.cfg.capacity - ix->kv.nfree;
	pthread_mutex_unlock(&ix->kv.alloc_mu);
	c->mem_used = held * ix->kv.slot_len;
	c->mem_reserved = ix->kv.cfg.capacity * ix->kv.slot_len;
	c->mem_keys = held;
}

const struct ycsb_index_ops ycsb_ix_kvstore = {
	.name = "kvstore",
	.ordered = false,
	.distributed = true,
	.open = kx_open,
	.start = kx_start,
	.thread_open = kx_thread_open,
	.thread_close = kx_thread_close,
	.close = kx_close,
	.get = kx_get,
	.insert = kx_insert,
	.update = kx_update,
	.remove = kx_remove,
	.counters = kx_counters,
};
