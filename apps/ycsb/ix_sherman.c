/* SPDX-License-Identifier: MIT */
/* loco-ycsb's `sherman` index: the Sherman B+tree channel
 * (channels/sherman, docs/sherman.md) on every memory node of the
 * cluster (or the lowest compute node when there is none), values of
 * --value-size bytes (at most 256) inline in the leaves. Ordered: it
 * runs workload E. --resize plain|rtx picks the split mode (default
 * plain: B-link half splits; rtx: every write an rTX, a split one).
 *
 * Options (--ix-opt):
 *   node=BYTES      node size, a multiple of 64 in 128..4096 (1024)
 *   nodes=N         node pool per hosting node (default: room for the
 *                   keys four times over and for the run's fresh keys,
 *                   shared by the hosting nodes)
 *   cache-mib=N     index cache per process, 0: none (16)
 *   locks=N         global lock words per hosting node (16384)
 *   hocl=0|1        the local lock table with handover (1)
 *   combine=0|1     write-back and release in one batch (1)
 *   handover=N      consecutive local handovers, 0: none (4)
 *   lease-ms=N      plain mode lock lease (100)
 *   broken=none|no-check|no-scan-check|no-persist|no-fence  tests only:
 *                   node reads not checked (torn values returned) / scans
 *                   not validated / on durable memory nodes plain mode
 *                   write-backs released unpersisted (a power cut loses
 *                   acknowledged writes) / plain mode steals an expired
 *                   lock without fencing its holder (a paused holder's
 *                   late write-back lands over the thief's)
 * Counters: resizes = splits, retries = torn reads read again + scans
 * and rTX attempts tried again, cache_misses = stale cache entries,
 * repairs = expired locks taken over (plain) or rTX repairs, lock_fails
 * = global lock CASes that found the lock held (plain; one round trip
 * each).
 * --verify: repairs the locks of dead clients (none may stay held),
 * then walks every level (loco_sherman_verify) and links nodes whose
 * parent entry a dead splitter left missing. After a memory node's
 * outage a thread's worker starts over (loco_sherman_worker_reset). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loco/channels/sherman/sherman.h>
#include "apps/ycsb/ix_opts.h"

struct ycsb_index {
	struct loco_sherman *t;
	uint32_t value_len;
	struct loco_sherman_opts o;     /* as created, defaults filled in */
	unsigned nhost;                 /* hosting nodes */
	/* The last --verify's memory (sx_memory), 0 before one ran. */
	uint64_t mem_used, mem_reserved, mem_keys;
};

struct ycsb_ixthr {
	struct ycsb_index *ix;
	struct loco_sherman_worker *w;
	uint64_t *keys;                 /* scan results */
	uint8_t *vals;
	unsigned cap;
};

static const char *const sx_known[] = {
	"node", "nodes", "cache-mib", "locks", "hocl", "combine", "handover",
	"lease-ms", "broken", NULL,
};

static int sx_flag(const struct ycsb_index_cfg *cfg, unsigned i, bool *on)
{
	static const char *const flag[] = { "0", "1", NULL };
	unsigned b = 0;
	int rc = ix_opt_word(cfg, i, "sherman", flag, &b);
	*on = b;
	return rc;
}

/* Option I of CFG into O. */
static int sx_opt(const struct ycsb_index_cfg *cfg, unsigned i,
		  struct loco_sherman_opts *o)
{
	static const char *const broken[] = { "none", "no-check",
					      "no-scan-check", "no-persist",
					      "no-fence", NULL };
	static const unsigned flags[] = { 0, LOCO_SHERMAN_UNSAFE_NO_CHECK,
					  LOCO_SHERMAN_UNSAFE_NO_SCAN_CHECK,
					  LOCO_SHERMAN_UNSAFE_NO_PERSIST,
					  LOCO_SHERMAN_UNSAFE_NO_FENCE };
	const char *key = cfg->opt_key[i];
	uint64_t v = 0;
	unsigned b = 0;
	bool on = false;
	int rc;
	if (!strcmp(key, "node")) {
		rc = ix_opt_u64(cfg, i, "sherman", LOCO_SHERMAN_NODE_MIN,
				LOCO_SHERMAN_NODE_MAX, &v);
		o->node_size = (uint32_t)v;
	} else if (!strcmp(key, "nodes")) {
		rc = ix_opt_u64(cfg, i, "sherman", 64, UINT32_MAX, &v);
		o->nodes = (uint32_t)v;
	} else if (!strcmp(key, "cache-mib")) {
		rc = ix_opt_u64(cfg, i, "sherman", 0, 65536, &v);
		o->cache_mib = v ? (uint32_t)v : ~0u;
	} else if (!strcmp(key, "locks")) {
		rc = ix_opt_u64(cfg, i, "sherman", 1, UINT64_C(1) << 24, &v);
		o->locks = (uint32_t)v;
	} else if (!strcmp(key, "hocl")) {
		rc = sx_flag(cfg, i, &on);
		o->no_hocl = !on;
	} else if (!strcmp(key, "combine")) {
		rc = sx_flag(cfg, i, &on);
		o->no_combine = !on;
	} else if (!strcmp(key, "handover")) {
		rc = ix_opt_u64(cfg, i, "sherman", 0, 1024, &v);
		o->handover_max = v ? (uint32_t)v : ~0u;
	} else if (!strcmp(key, "lease-ms")) {
		rc = ix_opt_u64(cfg, i, "sherman", 2, 60000, &v);
		o->lease_ms = (uint32_t)v;
	} else {
		rc = ix_opt_word(cfg, i, "sherman", broken, &b);
		o->unsafe = flags[b];
	}
	return rc;
}

/* The hosting nodes a tree of MGR's cluster spreads over: every memory
 * node, or the lowest compute node when there is none (tree.c). */
static unsigned hosting_nodes(struct loco_mgr *mgr)
{
	const struct loco_hosts *h = loco_mgr_hosts(mgr);
	unsigned n = 0;
	for (uint32_t id = 0; id <= h->max_id; id++)
		n += h->node[id].present && h->node[id].role == LOCO_ROLE_MEMORY;
	return n ? n : 1;
}

/* Room per hosting node, leaves half full: the loaded keys four times
 * over, and the fresh keys the run may insert (cfg->fresh, sized at
 * YCSB_RATE_MAX, well above what a run inserts), shared by the NHOST
 * hosting nodes (a worker takes its chunks from each in turn, and from
 * the next when one is full), plus slack. The fresh keys' share is capped
 * so the pool takes at most three quarters of a hosting node's arena
 * (cfg->arena_bytes; an rtx node is an object with two data blocks): a
 * run that inserts past that finds the pool full (-ENOSPC, "node pool
 * full"), which a larger arena or nodes=N mends. */
static uint32_t default_nodes(const struct ycsb_index_cfg *cfg,
			      uint32_t node_size, bool rtx, unsigned nhost)
{
	uint64_t per_leaf = (node_size - 64) / (16 + cfg->value_size) / 2 + 1;
	uint64_t loaded = (4 * (cfg->keys + 1) / per_leaf + nhost - 1) / nhost +
			  4096;
	uint64_t fresh = (cfg->fresh / per_leaf + nhost - 1) / nhost;
	uint64_t each = rtx ? 2 * (uint64_t)node_size + 64 : node_size;
	uint64_t fits = cfg->arena_bytes / 4 * 3 / each;
	if (cfg->arena_bytes && loaded + fresh > fits)
		fresh = fits > loaded ? fits - loaded : 0;
	uint64_t n = loaded + fresh;
	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

static int sx_open(struct loco_mgr *mgr, const struct ycsb_index_cfg *cfg,
		   struct ycsb_index **out)
{
	struct loco_sherman_opts o = { .name = cfg->name };
	int rc = ix_opts_known(cfg, "sherman", sx_known);
	for (unsigned i = 0; !rc && i < cfg->nopts; i++)
		rc = sx_opt(cfg, i, &o);
	if (!rc && cfg->resize && strcmp(cfg->resize, "plain") &&
	    strcmp(cfg->resize, "rtx"))
		rc = ix_opt_error("--resize %s: index sherman splits plain or "
				  "rtx", cfg->resize);
	if (!rc && cfg->value_size > LOCO_SHERMAN_VALUE_MAX)
		rc = ix_opt_error("--value-size %u: index sherman holds values "
				  "of at most %u bytes", cfg->value_size,
				  LOCO_SHERMAN_VALUE_MAX);
	if (rc)
		return rc;
	o.rtx = cfg->resize && !strcmp(cfg->resize, "rtx");
	o.value_len = cfg->value_size;
	/* A slot per worker thread (--threads is at most 64, as slots). */
	o.threads_per_node = cfg->threads < 8 ? 8 : cfg->threads;
	if (!o.nodes)
		o.nodes = default_nodes(cfg, o.node_size ? o.node_size : 1024,
					o.rtx, hosting_nodes(mgr));
	struct ycsb_index *ix = calloc(1, sizeof(*ix));
	if (!ix)
		return -ENOMEM;
	ix->value_len = cfg->value_size;
	ix->o = o;
	ix->nhost = hosting_nodes(mgr);
	rc = loco_sherman_create(mgr, &o, &ix->t);
	if (rc) {
		free(ix);
		return rc;
	}
	*out = ix;
	return 0;
}

static int sx_close(struct ycsb_index *ix)
{
	loco_sherman_destroy(ix->t);
	free(ix);
	return 0;
}

static int sx_thread_open(struct ycsb_index *ix, struct loco_thread *thr,
			  struct ycsb_ixthr **out)
{
	struct ycsb_ixthr *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->ix = ix;
	int rc = loco_sherman_worker_create(ix->t, thr, &t->w);
	if (rc) {
		free(t);
		return rc;
	}
	*out = t;
	return 0;
}

static void sx_thread_close(struct ycsb_ixthr *t)
{
	loco_sherman_worker_destroy(t->w);
	free(t->keys);
	free(t->vals);
	free(t);
}

static int sx_get(struct ycsb_ixthr *t, uint64_t key, void *val, uint32_t *len)
{
	int rc = loco_sherman_lookup(t->w, key, val);
	if (!rc)
		*len = t->ix->value_len;
	return rc;
}

static int sx_insert(struct ycsb_ixthr *t, uint64_t key, const void *val,
		     uint32_t len)
{
	(void)len;   /* every value is value_size bytes */
	return loco_sherman_insert(t->w, key, val);
}

static int sx_update(struct ycsb_ixthr *t, uint64_t key, const void *val,
		     uint32_t len)
{
	(void)len;
	return loco_sherman_update(t->w, key, val);
}

static int sx_remove(struct ycsb_ixthr *t, uint64_t key)
{
	return loco_sherman_delete(t->w, key);
}

static int sx_recover(struct ycsb_ixthr *t)
{
	return loco_sherman_worker_reset(t->w);
}

static int sx_scan(struct ycsb_ixthr *t, uint64_t lo, uint64_t hi,
		   unsigned max, struct ycsb_pair *out, unsigned *count)
{
	uint32_t vl = t->ix->value_len;
	if (max > t->cap) {
		uint64_t *k = realloc(t->keys, (size_t)max * sizeof(*k));
		if (k)
			t->keys = k;
		uint8_t *v = realloc(t->vals, (size_t)max * vl);
		if (v)
			t->vals = v;
		if (!k || !v)
			return -ENOMEM;
		t->cap = max;
	}
	unsigned n = 0;
	int rc = loco_sherman_scan(t->w, lo, hi, max, t->keys, t->vals, &n);
	if (rc)
		return rc;
	for (unsigned i = 0; i < n; i++)
		out[i] = (struct ycsb_pair){ .key = t->keys[i], .len = vl,
					     .val = t->vals + (size_t)i * vl };
	*count = n;
	return 0;
}

static void sx_counters(struct ycsb_index *ix, struct ycsb_index_counters *c)
{
	struct loco_sherman_stats s;
	loco_sherman_stats(ix->t, &s);
	c->resizes = s.splits;
	c->retries = s.torn_retries + s.scan_retries + s.rtx_retries;
	c->cache_misses = s.cache_stale;
	c->repairs = s.steals + s.rtx_repairs;
	c->lock_fails = s.lock_fails;
	c->mem_used = ix->mem_used;
	c->mem_reserved = ix->mem_reserved;
	c->mem_keys = ix->mem_keys;
}

/* The tree's memory from a verify's counts (docs/sherman.md, Memory
 * layout): used = the nodes reachable along the levels; reserved, plain
 * mode, = each hosting node's regions: the node pool at its full size,
 * the lock words, a redo record per thread slot (64 nodes' worth), the
 * superblock and the allocator. rtx mode's objects are the rtx's: its
 * reserved is left 0. */
static void sx_memory(struct ycsb_index *ix, const struct loco_sherman_verify *v)
{
	uint64_t node = ix->o.node_size ? ix->o.node_size : 1024;
	uint64_t locks = ix->o.locks ? ix->o.locks : 16384;
	uint64_t redo = (uint64_t)LOCO_MAX_NODES * ix->o.threads_per_node *
			(32 + node);
	ix->mem_used = v->nodes * node;
	ix->mem_reserved = ix->o.rtx ? 0 : ix->nhost *
			   (ix->o.nodes * node + locks * 8 + redo + 128);
	ix->mem_keys = v->keys;
}

static int sx_verify(struct ycsb_ixthr *t, char *msg, size_t len)
{
	uint64_t held = 0;
	int rc = loco_sherman_repair_locks(t->w, -1, &held);
	if (rc) {
		snprintf(msg, len, "repairing the locks: %s", loco_strerror(rc));
		return rc;
	}
	if (held) {
		snprintf(msg, len, "%llu locks still held", (unsigned long long)held);
		return -EBUSY;
	}
	struct loco_sherman_verify v;
	rc = loco_sherman_verify(t->w, true, &v);
	if (rc) {
		snprintf(msg, len, "walking the tree: %s", loco_strerror(rc));
		return rc;
	}
	fprintf(stderr, "loco-ycsb: sherman --verify: %u levels, %llu nodes, "
		"%llu leaves, %llu keys, %llu unlinked (%llu linked), %llu "
		"errors\n", v.levels, (unsigned long long)v.nodes,
		(unsigned long long)v.leaves, (unsigned long long)v.keys,
		(unsigned long long)v.unlinked, (unsigned long long)v.linked,
		(unsigned long long)v.errors);
	sx_memory(t->ix, &v);
	if (!v.errors)
		return 0;
	snprintf(msg, len, "%llu broken invariants, the first: %s",
		 (unsigned long long)v.errors, v.first_error);
	return -EUCLEAN;
}

const struct ycsb_index_ops ycsb_ix_sherman = {
	.name = "sherman",
	.ordered = true,
	.distributed = true,
	.open = sx_open,
	.thread_open = sx_thread_open,
	.thread_close = sx_thread_close,
	.close = sx_close,
	.get = sx_get,
	.insert = sx_insert,
	.update = sx_update,
	.remove = sx_remove,
	.recover = sx_recover,
	.scan = sx_scan,
	.counters = sx_counters,
	.verify = sx_verify,
};
