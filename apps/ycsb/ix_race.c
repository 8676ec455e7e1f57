/* SPDX-License-Identifier: MIT */
/* loco-ycsb's `race` index: RACE hashing (channels/race, docs/race.md),
 * a table on the memory nodes (every one of them, or the lowest compute
 * node without any) shared by every client; one client per thread. No
 * scans. --resize rtx (default) or cas.
 *
 * Options (--ix-opt):
 *   groups=N         bucket groups per subtable (default 64; 1 is a tiny
 *                    table of 21 slots that splits at once)
 *   initial-depth=D  subtables at creation: 2^D (0..4, default 0)
 *   max-depth=D      largest local depth (default: room for 4 x the
 *                    loaded and fresh keys)
 *   kv-blocks=N      KV blocks per memory node (default 3 x --keys plus
 *                    5/4 x the fresh keys the run may insert, over the
 *                    memory nodes, the fresh keys' share capped at half
 *                    a memory node's arena; at least 65536)
 *   broken=none|no-dup-check|no-stale-check|no-persist|no-fence|
 *          no-move-epoch  tests only:
 *                    inserts commit without the duplicate re-read / bucket
 *                    headers and frozen slots are not checked (a stale
 *                    cache is used) / on durable memory nodes operations
 *                    return before what they wrote is persisted (a power
 *                    cut loses acknowledged writes) / resizes taken
 *                    over without fencing the holder (the move epochs
 *                    alone) / neither fence nor epochs (a stale mover's
 *                    CASes hit)
 * Counters: resizes are the splits this node finished, retries restarted
 * attempts, cache_misses directory cache refreshes, repairs resizes taken
 * over from a dead client plus rTX repairs. --verify runs
 * loco_race_verify: settle what dead clients left, then check every
 * subtable, key and KV block. After a memory node's outage a thread's
 * client starts over as a new incarnation (loco_race_client_reset). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loco/channels/race/race.h>
#include "apps/ycsb/ix_opts.h"

#define RX_MIN_BLOCKS 65536u
#define RX_SLOTS_PER_GROUP 21u
#define RX_GROUP_BYTES 192u     /* three 64-byte buckets */

struct ycsb_index {
	struct loco_race *r;
	struct loco_race_opts o;        /* as created, defaults filled in */
	unsigned nmem;                  /* memory nodes holding the table */
	/* The last --verify's memory (rx_memory), 0 before one ran. */
	uint64_t mem_used, mem_reserved, mem_keys;
};

struct ycsb_ixthr {
	struct ycsb_index *ix;
	struct loco_race_client *c;
};

static const char *const rx_known[] = {
	"groups", "initial-depth", "max-depth", "kv-blocks", "broken", NULL,
};

static int rx_opt(const struct ycsb_index_cfg *cfg, unsigned i,
		  struct loco_race_opts *o)
{
	static const char *const broken[] = { "none", "no-dup-check",
					      "no-stale-check", "no-persist",
					      "no-fence", "no-move-epoch", NULL };
	static const unsigned flags[] = { 0, LOCO_RACE_BROKEN_NO_DUP_CHECK,
					  LOCO_RACE_BROKEN_NO_STALE_CHECK,
					  LOCO_RACE_BROKEN_NO_PERSIST,
					  LOCO_RACE_BROKEN_NO_FENCE,
					  LOCO_RACE_BROKEN_NO_FENCE |
					  LOCO_RACE_BROKEN_NO_EPOCH };
	const char *key = cfg->opt_key[i];
	uint64_t v = 0;
	unsigned b = 0;
	int rc;
	if (!strcmp(key, "broken")) {
		rc = ix_opt_word(cfg, i, "race", broken, &b);
		o->broken = flags[b];
		return rc;
	}
	if (!strcmp(key, "groups")) {
		rc = ix_opt_u64(cfg, i, "race", 1, 65536, &v);
		o->groups = (uint32_t)v;
	} else if (!strcmp(key, "initial-depth")) {
		rc = ix_opt_u64(cfg, i, "race", 0, LOCO_RACE_INITIAL_MAX, &v);
		o->initial_depth = (uint32_t)v;
	} else if (!strcmp(key, "max-depth")) {
		rc = ix_opt_u64(cfg, i, "race", 1, LOCO_RACE_DEPTH_MAX, &v);
		o->max_depth = (uint32_t)v;
	} else {
		rc = ix_opt_u64(cfg, i, "race", 64, LOCO_RACE_KV_BLOCKS_MAX, &v);
		o->kv_blocks = (uint32_t)v;
	}
	return rc;
}

static unsigned memory_nodes(struct loco_mgr *mgr)
{
	const struct loco_hosts *h = loco_mgr_hosts(mgr);
	unsigned n = 0;
	for (uint32_t id = 0; id <= h->max_id; id++)
		n += h->node[id].present && h->node[id].role == LOCO_ROLE_MEMORY;
	return n ? n : 1;
}

/* Bytes of a KV block of an 8-byte key and VALUE bytes (race.c's
 * layout: a 24-byte header, rounded up to 64). */
static uint64_t rx_block_bytes(uint32_t value)
{
	return (24 + 8 + (uint64_t)value + 63) / 64 * 64;
}

/* Sizes from --keys and the run's fresh keys where no option gave them.
 * The pool holds every key the run may hold, with room for the blocks
 * owners keep (freed blocks not read yet, a chunk part used per client)
 * and for the insert count's spread about its expected share. */
static void rx_defaults(struct loco_mgr *mgr, const struct ycsb_index_cfg *cfg,
			struct loco_race_opts *o)
{
	uint32_t groups = o->groups ? o->groups : 64;
	uint64_t keys = cfg->keys + cfg->fresh;
	if (!o->max_depth) {
		/* Subtables split about half full: room for 4 x the keys. */
		uint64_t per = (uint64_t)groups * RX_SLOTS_PER_GROUP / 2;
		unsigned d = 1;
		while (d < LOCO_RACE_DEPTH_MAX &&
		       (per << d) < 4 * (keys ? keys : 1))
			d++;
		o->max_depth = d < 12 ? 12 : d;
	}
	if (!o->kv_blocks) {
		unsigned nmem = memory_nodes(mgr);
		uint64_t loaded = 3 * cfg->keys / nmem;
		uint64_t fresh = (cfg->fresh + cfg->fresh / 4) / nmem;
		/* The fresh keys' share capped at half a memory node's arena
		 * (cfg->arena_bytes): the subtables it grows take the rest. */
		uint64_t fits = cfg->arena_bytes / 2 /
				rx_block_bytes(cfg->value_size);
		if (cfg->arena_bytes && loaded + fresh > fits)
			fresh = fits > loaded ? fits - loaded : 0;
		uint64_t b = loaded + fresh;
		o->kv_blocks = (uint32_t)(b < RX_MIN_BLOCKS ? RX_MIN_BLOCKS :
					  b > (UINT32_C(1) << 29) ?
					  UINT32_C(1) << 29 : b);
	}
}

static int rx_open(struct loco_mgr *mgr, const struct ycsb_index_cfg *cfg,
		   struct ycsb_index **out)
{
	static const char *const modes[] = { "rtx", "cas", NULL };
	struct loco_race_opts o = { .name = cfg->name, .key_max = 8,
				    .value_max = cfg->value_size,
				    .threads_per_node = cfg->threads };
	int rc = ix_opts_known(cfg, "race", rx_known);
	for (unsigned i = 0; !rc && i < cfg->nopts; i++)
		rc = rx_opt(cfg, i, &o);
	if (!rc && cfg->resize) {
		unsigned m = 0;
		for (; modes[m] && strcmp(modes[m], cfg->resize); m++)
			;
		if (modes[m])
			o.resize = m ? LOCO_RACE_RESIZE_CAS : LOCO_RACE_RESIZE_RTX;
		else
			rc = ix_opt_error("--resize %s: index race resizes rtx "
					  "or cas", cfg->resize);
	}
	if (rc)
		return rc;
	rx_defaults(mgr, cfg, &o);
	/* The default max-depth is at least 12: both were given. */
	if (o.initial_depth > o.max_depth)
		return ix_opt_error("--ix-opt max-depth=%u: below initial-depth=%u "
				    "(index race)", o.max_depth, o.initial_depth);
	struct ycsb_index *ix = calloc(1, sizeof(*ix));
	if (!ix)
		return -ENOMEM;
	ix->o = o;
	ix->nmem = memory_nodes(mgr);
	rc = loco_race_create(mgr, &o, &ix->r);
	if (rc) {
		free(ix);
		return rc;
	}
	*out = ix;
	return 0;
}

static int rx_close(struct ycsb_index *ix)
{
	loco_race_destroy(ix->r);
	free(ix);
	return 0;
}

static int rx_thread_open(struct ycsb_index *ix, struct loco_thread *thr,
			  struct ycsb_ixthr **out)
{
	struct ycsb_ixthr *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->ix = ix;
	int rc = loco_race_client_create(ix->r, thr, &t->c);
	if (rc) {
		free(t);
		return rc;
	}
	*out = t;
	return 0;
}

static void rx_thread_close(struct ycsb_ixthr *t)
{
	loco_race_client_destroy(t->c);
	free(t);
}

static int rx_get(struct ycsb_ixthr *t, uint64_t key, void *val, uint32_t *len)
{
	return loco_race_get(t->c, &key, sizeof(key), val, YCSB_VALUE_MAX, len);
}

static int rx_insert(struct ycsb_ixthr *t, uint64_t key, const void *val,
		     uint32_t len)
{
	return loco_race_insert(t->c, &key, sizeof(key), val, len);
}

static int rx_update(struct ycsb_ixthr *t, uint64_t key, const void *val,
		     uint32_t len)
{
	return loco_race_update(t->c, &key, sizeof(key), val, len);
}

static int rx_remove(struct ycsb_ixthr *t, uint64_t key)
{
	return loco_race_delete(t->c, &key, sizeof(key));
}

static int rx_recover(struct ycsb_ixthr *t)
{
	return loco_race_client_reset(t->c);
}

static void rx_counters(struct ycsb_index *ix, struct ycsb_index_counters *c)
{
	struct loco_race_stats s;
	loco_race_stats(ix->r, &s);
	c->resizes = s.splits;
	c->retries = s.retries;
	c->cache_misses = s.refreshes;
	c->repairs = s.takeovers + s.rtx_repairs;
	c->mem_used = ix->mem_used;
	c->mem_reserved = ix->mem_reserved;
	c->mem_keys = ix->mem_keys;
}

/* The table's memory from a verify's counts (docs/race.md, Layout):
 * used = the live subtables (groups of three 64-byte buckets) and the KV
 * blocks in use; reserved = every subtable region (a split leaves its
 * parent's region behind: rtx mode creates two subtables a split, cas mode
 * one) and each memory node's KV pool with its chunk owner table (8 bytes
 * a chunk of 64 blocks). The directory's rTX objects are left out. */
static void rx_memory(struct ycsb_index *ix, const struct loco_race_audit *a)
{
	uint32_t groups = ix->o.groups ? ix->o.groups : 64;
	uint64_t st = (uint64_t)groups * RX_GROUP_BYTES;
	uint64_t block = rx_block_bytes(ix->o.value_max);
	uint64_t roots = UINT64_C(1) << ix->o.initial_depth;
	uint64_t splits = a->subtables > roots ? a->subtables - roots : 0;
	bool cas = ix->o.resize == LOCO_RACE_RESIZE_CAS;
	uint64_t pool = (uint64_t)ix->o.kv_blocks * block +
			((uint64_t)ix->o.kv_blocks + 63) / 64 * 8;
	ix->mem_used = a->subtables * st + a->allocated * block;
	ix->mem_reserved = (roots + (cas ? 1 : 2) * splits) * st +
			   ix->nmem * pool;
	ix->mem_keys = a->items;
}

static int rx_verify(struct ycsb_ixthr *t, char *msg, size_t len)
{
	struct loco_race_audit a = { 0 };
	int rc = loco_race_verify(t->c, &a, msg, len);
	if (rc == -EPROTO)
		return rc;
	if (rc) {
		snprintf(msg, len, "race: verify: %s", loco_strerror(rc));
		return rc;
	}
	rx_memory(t->ix, &a);
	fprintf(stderr, "loco-ycsb: race: verify: %llu subtables (depth %u), "
		"%llu items, %llu KV blocks in use, %llu referenced, %llu "
		"leaked, %llu lost, %llu reclaimed, %llu repaired, %llu locks "
		"held, %llu logs pending\n", (unsigned long long)a.subtables, a.depth,
		(unsigned long long)a.items, (unsigned long long)a.allocated,
		(unsigned long long)a.referenced, (unsigned long long)a.leaked,
		(unsigned long long)a.lost, (unsigned long long)a.reclaimed,
		(unsigned long long)a.repaired, (unsigned long long)a.locks_held,
		(unsigned long long)a.logs_pending);
	return 0;
}

const struct ycsb_index_ops ycsb_ix_race = {
	.name = "race",
	.ordered = false,
	.distributed = true,
	.open = rx_open,
	.thread_open = rx_thread_open,
	.thread_close = rx_thread_close,
	.close = rx_close,
	.get = rx_get,
	.insert = rx_insert,
	.update = rx_update,
	.remove = rx_remove,
	.recover = rx_recover,
	.counters = rx_counters,
	.verify = rx_verify,
};
