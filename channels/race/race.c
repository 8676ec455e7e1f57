/* SPDX-License-Identifier: MIT */
/* RACE table object: options and layout check, the channel tree and its
 * regions on the memory nodes, the root subtables, clients (slots,
 * incarnations), the client directory cache and its refresh, statistics. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include <loco/rtx/crash.h>
#include "channels/race/internal.h"

#define CFG_VERSION 2   /* 2: cas moves' epochs (frozen words, closed-empty) */
#define HASH_SEED1 UINT64_C(0x52414345)      /* "RACE" */
#define HASH_SEED2 UINT64_C(0x9e3779b97f4a7c15)
#define BACKOFF_MAX_US 200u

/* Crash points of this layer (docs/race.md), registered with rtx's. */
static const char *const race_crash_points[] = {
	"race.split_locked",      /* split: descriptor pre-locked, nothing done */
	"race.split_mid_freeze",  /* rtx split: part of the subtable frozen */
	"race.split_frozen",      /* rtx split: all frozen, nothing written */
	"race.split_written",     /* rtx split: new subtables written, not
				   * committed */
	"race.split_done",        /* split committed, before the client goes on */
	"race.cas_published",     /* cas split: child published, no item moved */
	"race.after_group_freeze", /* cas move: a group's items frozen, not
				   * copied */
	"race.cas_mid_group",     /* cas move: a group's items frozen and copied,
				   * not yet cleared from the parent */
	"race.cas_mid_move",      /* cas move: half the groups moved */
	"race.cas_moved",         /* cas move: every group moved, not committed */
	"race.insert_tentative",  /* insert: tentative slot, not committed */
	"race.update_written",    /* update: new block written, slot not CASed */
	"race.delete_unlinked",   /* delete: slot emptied, block not freed */
	"race.alloc_claimed",     /* KV chunk claimed, its words not read */
	"race.create_peeked",     /* create: roots found missing, nothing
				   * written */
	NULL,
};

__attribute__((constructor)) static void race_register_points(void)
{
	loco_crash_register(race_crash_points);
}

/* Stop points, for the pause tests: LOCO_RACE_STOP_AT=POINT[@NODES][:N]
 * makes the Nth arrival (default 1) of this process (on one of NODES, a
 * comma-separated list of LOCO_NODE_ID values; any node without @) at
 * race point POINT log "stopped at POINT" and SIGSTOP itself: a pause at
 * an exact place, which the test ends with SIGCONT
 * (test/ycsb/cont-stopped.sh). Read once. */
static struct {
	pthread_once_t once;
	char point[64];
	long after;
	_Atomic long hits;
} stop_at = { .once = PTHREAD_ONCE_INIT };

/* Whether node SELF (a LOCO_NODE_ID, may be NULL) is in LIST ("2,3"). */
static bool stop_node_listed(const char *list, const char *self)
{
	if (!self)
		return false;
	long me = strtol(self, NULL, 10);
	for (const char *p = list; *p && *p != ':';) {
		char *end;
		long n = strtol(p, &end, 10);
		if (end == p)
			return false;
		if (n == me)
			return true;
		p = *end == ',' ? end + 1 : end;
	}
	return false;
}

static void stop_init(void)
{
	const char *spec = getenv("LOCO_RACE_STOP_AT"), *self = getenv("LOCO_NODE_ID");
	if (!spec || !*spec)
		return;
	size_t len = strcspn(spec, "@:");
	const char *at = strchr(spec, '@'), *colon = strchr(spec, ':');
	if (len >= sizeof(stop_at.point) ||
	    (at && !stop_node_listed(at + 1, self)))
		return;
	memcpy(stop_at.point, spec, len);
	stop_at.after = colon ? strtol(colon + 1, NULL, 10) : 1;
}

void race_point(const char *name)
{
	loco_crash_point(name);
	pthread_once(&stop_at.once, stop_init);
	if (!stop_at.point[0] || strcmp(name, stop_at.point))
		return;
	/* Relaxed: a counter; the stop orders nothing. */
	if (atomic_fetch_add_explicit(&stop_at.hits, 1, memory_order_relaxed) + 1 !=
	    stop_at.after)
		return;
	loco_warn("race", "stopped at %s (pid %d)", name, (int)getpid());
	raise(SIGSTOP);
}

/* ---- options ---------------------------------------------------------------- */

static uint32_t round_up(uint32_t v, uint32_t a)
{
	return (v + a - 1) / a * a;
}

static void opts_defaults(struct loco_race_opts *o)
{
	if (!o->name)
		o->name = "race";
	if (!o->groups)
		o->groups = 64;
	if (!o->max_depth)
		o->max_depth = 12;
	if (!o->key_max)
		o->key_max = 16;
	if (!o->value_max)
		o->value_max = 64;
	if (!o->kv_blocks)
		o->kv_blocks = 65536;
	if (!o->threads_per_node)
		o->threads_per_node = 8;
}

static int opts_check(const struct loco_race_opts *o, char *why, size_t len)
{
	uint64_t blk = (uint64_t)RACE_KV_HDR + o->key_max + o->value_max;
	if (o->max_depth > LOCO_RACE_DEPTH_MAX)
		snprintf(why, len, "max_depth %u > %u", o->max_depth,
			 LOCO_RACE_DEPTH_MAX);
	else if (o->initial_depth > LOCO_RACE_INITIAL_MAX ||
		 o->initial_depth > o->max_depth)
		snprintf(why, len, "initial_depth %u (at most %u and max_depth)",
			 o->initial_depth, LOCO_RACE_INITIAL_MAX);
	else if ((uint64_t)o->groups * RACE_GROUP_BYTES > RACE_ST_BYTES_MAX)
		snprintf(why, len, "groups %u: subtable over %u MiB", o->groups,
			 RACE_ST_BYTES_MAX >> 20);
	else if (o->key_max > LOCO_RACE_KEY_MAX)
		snprintf(why, len, "key_max %u > %u", o->key_max,
			 LOCO_RACE_KEY_MAX);
	else if (blk > LOCO_RACE_BLOCK_MAX)
		snprintf(why, len, "key_max + value_max + %u = %llu bytes: a KV "
			 "block holds at most %u", RACE_KV_HDR,
			 (unsigned long long)blk, LOCO_RACE_BLOCK_MAX);
	else if (o->kv_blocks > LOCO_RACE_KV_BLOCKS_MAX)
		snprintf(why, len, "kv_blocks %u > %u", o->kv_blocks,
			 LOCO_RACE_KV_BLOCKS_MAX);
	else if (o->threads_per_node > 64)
		snprintf(why, len, "threads_per_node %u > 64",
			 o->threads_per_node);
	else if (o->resize != LOCO_RACE_RESIZE_RTX &&
		 o->resize != LOCO_RACE_RESIZE_CAS)
		snprintf(why, len, "resize %d: neither rtx nor cas", o->resize);
	else
		return 0;
	return -EINVAL;
}

/* Hosting nodes: as given, else every memory node, else the lowest
 * compute node. */
static int pick_nodes(struct loco_race *r)
{
	const struct loco_hosts *h = loco_mgr_hosts(r->base.mgr);
	uint64_t mask = r->o.mem_nodes;
	if (!mask) {
		for (uint32_t id = 0; id <= h->max_id; id++)
			if (h->node[id].present &&
			    h->node[id].role == LOCO_ROLE_MEMORY)
				mask |= UINT64_C(1) << id;
		for (uint32_t id = 0; !mask && id <= h->max_id; id++)
			if (h->node[id].present)
				mask = UINT64_C(1) << id;
	}
	for (uint64_t m = mask; m; m &= m - 1)
		if (!h->node[__builtin_ctzll(m)].present)
			return -EINVAL;
	if (!mask)
		return -EINVAL;
	r->mn = calloc((size_t)__builtin_popcountll(mask), sizeof(*r->mn));
	if (!r->mn)
		return -ENOMEM;
	r->o.mem_nodes = mask;
	memset(r->mn_idx, -1, sizeof(r->mn_idx));
	for (uint64_t m = mask; m; m &= m - 1) {
		uint32_t id = (uint32_t)__builtin_ctzll(m);
		r->mn_idx[id] = (int8_t)r->nmn;
		r->mn[r->nmn++].id = id;
	}
	r->home = r->mn[0].id;
	return 0;
}

static void layout(struct loco_race *r)
{
	r->groups = r->o.groups;
	r->st_bytes = r->groups * RACE_GROUP_BYTES;
	r->block_len = round_up(RACE_KV_HDR + r->o.key_max + r->o.value_max,
				RACE_LEN_UNIT);
	r->nblocks = round_up(r->o.kv_blocks, RACE_CHUNK_BLOCKS);
	r->nchunks = r->nblocks / RACE_CHUNK_BLOCKS;
	r->ndesc = UINT32_C(1) << r->o.max_depth;
	r->nslots = LOCO_MAX_NODES * r->o.threads_per_node;
}

static uint64_t cfg_hash(const struct loco_race *r)
{
	uint64_t v[] = { CFG_VERSION, r->o.groups, r->o.initial_depth,
			 r->o.max_depth, r->o.key_max, r->o.value_max, r->nblocks,
			 (uint64_t)r->o.resize, r->o.threads_per_node,
			 r->o.mem_nodes };
	uint64_t h = XXH3_64bits(v, sizeof(v));
	return h ? h : 1;
}

/* ---- channels and regions --------------------------------------------------- */

static int open_mnode(struct loco_race *r, struct race_mnode *n)
{
	char name[16];
	snprintf(name, sizeof(name), "m%u", n->id);
	int rc = loco_channel_init(&n->base, r->base.mgr, &r->base, name,
				   UINT64_C(1) << loco_channel_self(&r->base), NULL);
	if (rc)
		return rc;
	/* KV blocks are read, written and CAS'd; chunk owner words read and
	 * CAS'd. */
	rc = loco_channel_open_hosted_ex(&n->base, n->id, "kv",
		(uint64_t)r->nblocks * r->block_len, LOCO_REGION_REMOTE_ALL,
		&n->kv);
	if (!rc)
		rc = loco_channel_open_hosted_ex(&n->base, n->id, "kvc",
			(uint64_t)r->nchunks * 8,
			LOCO_REGION_REMOTE_READ | LOCO_REGION_REMOTE_ATOMIC,
			&n->kvc);
	return rc ? rc : loco_channel_join(&n->base);
}

/* The rtx first (its owner destroys it before the parent), then the
 * table's channel with its m<id> children, then the array that holds
 * them. */
static void channels_fini(struct loco_race *r)
{
	if (r->rtx)
		loco_rtx_destroy(r->rtx);
	r->rtx = NULL;
	loco_channel_fini(&r->base);
	free(r->mn);
	r->mn = NULL;
}

/* The lease drift of the descriptors' locks: a resize holds its lock
 * through many round trips and renews it every 2 ms; a resizer stalled
 * past its lease (taken for dead while alive) may still post a step after
 * another client took the resize over, which cas mode's moves do not
 * survive (docs/race.md). So the lease is long: a dead resizer's subtable
 * waits that long, rare enough, for a stall of that length on a busy host
 * to be rarer still. */
#define LEASE_DRIFT_MS 250

static int open_rtx(struct loco_race *r)
{
	struct loco_rtx_opts x = {
		.name = "rtx", .parent = &r->base,
		.mem_nodes = UINT64_C(1) << r->home,
		.objects = r->ndesc, .data_len = sizeof(struct race_desc),
		.threads_per_node = r->o.threads_per_node,
		.drift_ms = LEASE_DRIFT_MS,
	};
	return loco_rtx_create(r->base.mgr, &x, &r->rtx);
}

/* The region of the descriptors' TXObjs, whose values a client persists
 * after reading them (race_desc_persist). */
static int open_meta(struct loco_race *r)
{
	loco_raddr_t a = race_desc_obj(r, 0);
	return loco_region_at(r->base.mgr, loco_raddr_node(a), LOCO_SPACE_ARENA,
			      loco_raddr_off(a), (uint64_t)r->ndesc * 16, &r->meta);
}

/* First creator CASes the layout hash in; everyone else must find it. */
static int super_check(struct loco_race *r, struct loco_thread *thr)
{
	uint64_t old = 0;
	int rc = loco_cas(thr, &r->super, offsetof(struct race_super, cfg), 0,
			  r->cfg, &old);
	if (!rc && old && old != r->cfg) {
		loco_err(r->base.name, "table exists with another geometry "
			 "(layout hash %016llx, ours %016llx: groups, depths, "
			 "key/value sizes, kv_blocks, resize mode, threads or "
			 "memory nodes differ)", (unsigned long long)old,
			 (unsigned long long)r->cfg);
		return -LOCO_EMISMATCH;
	}
	/* Durable before a client relies on it (a power cut must not let
	 * another geometry in). */
	if (!rc && race_durable(r, r->home))
		rc = loco_persist(thr, r->home);
	return rc;
}

uint32_t race_node_for(const struct loco_race *r, uint32_t suffix)
{
	return suffix % r->nmn;
}

loco_raddr_t race_desc_obj(const struct loco_race *r, uint32_t s)
{
	return loco_rtx_obj(r->rtx, r->home, s);
}

/* Root subtable S: its region (one name, every creator opens the same)
 * with every bucket header set, then its descriptor by transaction. */
static int root_region(struct loco_race *r, uint32_t s,
		       struct loco_rregion *rr)
{
	char name[LOCO_NAME_MAX];
	snprintf(name, sizeof(name), "%s.root%u", r->base.name, s);
	return loco_region_open_ex(r->base.mgr, r->mn[race_node_for(r, s)].id,
				   name, r->st_bytes, RACE_ST_ACCESS, rr);
}

#define HDR_CAS_WAIT (8 * LOCO_BATCH_MAX)   /* header CASes per wait */

/* Every bucket header of root S by CAS from 0 (the region is zeroed when
 * created): a creator that found the roots missing, stalled, and came
 * back after another one created the table and a cas-mode move changed a
 * header must not set it back (readers would take the group for one not
 * moved yet). */
static int root_headers(struct loco_race *r, struct loco_thread *thr,
			uint32_t s, const struct loco_rregion *rr)
{
	uint64_t hdr = race_hdr(r->o.initial_depth, s, false);
	uint64_t old[HDR_CAS_WAIT];
	uint32_t n = 3 * r->groups;
	int rc = 0;
	for (uint32_t k0 = 0; !rc && k0 < n; k0 += HDR_CAS_WAIT) {
		uint32_t end = n - k0 < HDR_CAS_WAIT ? n : k0 + HDR_CAS_WAIT;
		struct loco_batch b;
		struct loco_ack ack = { 0, 0 };
		loco_batch_init(&b, thr);
		for (uint32_t k = k0; !rc && k < end; k++) {
			if (b.n == LOCO_BATCH_MAX)
				rc = loco_batch_post(&b, &ack);
			loco_batch_cas(&b, rr, (uint64_t)k * RACE_BUCKET_BYTES, 0,
				       hdr, &old[k - k0]);
		}
		if (!rc)
			rc = loco_batch_post(&b, &ack);
		if (!rc)
			rc = loco_ack_wait(thr, &ack, -1);
	}
	/* Durable before the descriptor's commit names the subtable. */
	if (!rc && race_durable(r, rr->node))
		rc = loco_persist(thr, rr->node);
	return rc;
}

static int roots_commit(struct loco_race *r, struct loco_rtx_worker *w,
			const struct race_desc *d)
{
	uint32_t n = UINT32_C(1) << r->o.initial_depth;
	int rc;
	LOCO_RTX_BLOCK(w, rc) {
		for (uint32_t s = 0; !rc && s < n; s++) {
			const struct race_desc *cur;
			rc = loco_rtx_read(w, race_desc_obj(r, s),
					   (const void **)&cur);
			if (!rc && !(cur && (cur->w0 & RACE_DESC_VALID)))
				rc = loco_rtx_write(w, race_desc_obj(r, s), &d[s]);
		}
	}
	return rc;
}

static int roots_init(struct loco_race *r, struct loco_thread *thr,
		      struct loco_rtx_worker *w)
{
	uint32_t n = UINT32_C(1) << r->o.initial_depth;
	loco_raddr_t objs[1u << LOCO_RACE_INITIAL_MAX];
	struct race_desc d[1u << LOCO_RACE_INITIAL_MAX];
	bool all = true;
	for (uint32_t s = 0; s < n; s++)
		objs[s] = race_desc_obj(r, s);
	int rc = loco_rtx_peek(w, objs, n, d, NULL);
	for (uint32_t s = 0; !rc && s < n; s++)
		all &= (d[s].w0 & RACE_DESC_VALID) != 0;
	if (rc || all)
		return rc;
	race_point("race.create_peeked");
	for (uint32_t s = 0; !rc && s < n; s++) {
		struct loco_rregion rr;
		rc = root_region(r, s, &rr);
		if (rc)
			break;
		rc = root_headers(r, thr, s, &rr);
		d[s] = (struct race_desc){
			race_desc_w0(RACE_LIVE, r->o.initial_depth, rr.node),
			rr.off };
	}
	/* The headers are placed before a descriptor names their subtable. */
	if (!rc)
		rc = loco_fence(thr, LOCO_FENCE_THREAD, 0);
	return rc ? rc : roots_commit(r, w, d);
}

static int race_setup(struct loco_race *r)
{
	int rc = pick_nodes(r);
	if (rc) {
		loco_err(r->base.name, "no hosting node for the table");
		return rc;
	}
	layout(r);
	r->cfg = cfg_hash(r);
	/* The superblock is CAS'd (set once), client slots FAA'd. */
	rc = loco_channel_open_hosted_ex(&r->base, r->home, "super",
		sizeof(struct race_super), LOCO_REGION_REMOTE_ATOMIC, &r->super);
	if (!rc)
		rc = loco_channel_open_hosted_ex(&r->base, r->home, "slots",
			(uint64_t)r->nslots * 8, LOCO_REGION_REMOTE_ATOMIC,
			&r->slots);
	if (!rc)
		rc = loco_channel_join(&r->base);
	for (unsigned i = 0; !rc && i < r->nmn; i++)
		rc = open_mnode(r, &r->mn[i]);
	for (unsigned i = 0; !rc && i < r->nmn; i++)
		if (loco_peer_durable(r->base.mgr, r->mn[i].id))
			r->durable |= UINT64_C(1) << r->mn[i].id;
	struct loco_thread *thr = NULL;
	if (!rc)
		rc = loco_thread_create(r->base.mgr, &thr);
	if (!rc)
		rc = super_check(r, thr);
	if (!rc)
		rc = open_rtx(r);
	if (!rc)
		rc = open_meta(r);
	struct loco_rtx_worker *w = NULL;
	if (!rc)
		rc = loco_rtx_worker_create(r->rtx, thr, &w);
	if (!rc)
		rc = roots_init(r, thr, w);
	if (w)
		loco_rtx_worker_destroy(w);
	if (thr)
		loco_thread_destroy(thr);
	if (rc && rc != -LOCO_EMISMATCH)
		loco_err(r->base.name, "opening the table: %s", loco_strerror(rc));
	return rc;
}

int loco_race_create(struct loco_mgr *mgr, const struct loco_race_opts *opts,
		     struct loco_race **out)
{
	char why[160];
	struct loco_race *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->o = *opts;
	opts_defaults(&r->o);
	int rc = opts_check(&r->o, why, sizeof(why));
	if (rc) {
		loco_err("race", "%s: %s", r->o.name, why);
		free(r);
		return rc;
	}
	/* Only this node's bit: no peers to join (hosted regions only). */
	rc = loco_channel_init(&r->base, mgr, NULL, r->o.name,
			       UINT64_C(1) << loco_mgr_id(mgr), NULL);
	if (rc) {
		loco_err("race", "bad table name '%s'", r->o.name);
		free(r);
		return rc;
	}
	r->o.name = r->base.name;
	pthread_mutex_init(&r->lock, NULL);
	rc = race_setup(r);
	if (rc) {
		loco_race_destroy(r);
		return rc;
	}
	*out = r;
	return 0;
}

void loco_race_destroy(struct loco_race *r)
{
	if (!r)
		return;
	if (r->clients)
		loco_warn(r->base.name, "table handle destroyed with live clients");
	channels_fini(r);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

void loco_race_limits(const struct loco_race *r, uint32_t *key_max,
		      uint32_t *value_max)
{
	*key_max = r->o.key_max;
	*value_max = r->o.value_max;
}

const char *loco_race_phase_name(unsigned ph)
{
	static const char *const names[LOCO_RACE_PHASES] = {
		[LOCO_RACE_PH_LOCK] = "lock", [LOCO_RACE_PH_HEADERS] = "headers",
		[LOCO_RACE_PH_FREEZE] = "freeze", [LOCO_RACE_PH_BUILD] = "build",
		[LOCO_RACE_PH_REGION] = "region", [LOCO_RACE_PH_WRITE] = "write",
		[LOCO_RACE_PH_COPY] = "copy", [LOCO_RACE_PH_CLEAR] = "clear",
		[LOCO_RACE_PH_OPEN] = "open", [LOCO_RACE_PH_COMMIT] = "commit",
		[LOCO_RACE_PH_RENEW] = "renew",
	};
	return ph < LOCO_RACE_PHASES ? names[ph] : NULL;
}

/* ---- keys ------------------------------------------------------------------- */

void race_key_init(const struct loco_race *r, struct race_key *k,
		   const void *key, uint32_t klen)
{
	uint32_t nmain = 2 * r->groups;
	k->key = key;
	k->klen = klen;
	k->h1 = XXH3_64bits_withSeed(key, klen, HASH_SEED1);
	k->h2 = XXH3_64bits_withSeed(key, klen, HASH_SEED2);
	k->fp = (uint8_t)(k->h1 >> 56);
	k->m1 = (uint32_t)((k->h1 >> 24) % nmain);
	k->m2 = (uint32_t)(k->h2 % nmain);
	/* Two choices in two groups (RACE D2), where there are two. */
	if (r->groups > 1 && k->m2 / 2 == k->m1 / 2)
		k->m2 = (k->m2 + 2) % nmain;
}

/* ---- directory cache ---------------------------------------------------------- */

void race_cdesc_set(const struct loco_race *r, struct race_cdesc *e,
		    const struct race_desc *d)
{
	uint32_t node = (uint32_t)(d->w0 & 0xffff);
	if (!(d->w0 & RACE_DESC_VALID) || node >= LOCO_MAX_NODES ||
	    r->mn_idx[node] < 0) {
		e->valid = 0;
		return;
	}
	struct loco_rregion rr;
	bool known = e->valid && e->ni == (uint8_t)r->mn_idx[node] &&
		     e->off == d->off;
	e->valid = 1;
	e->state = (uint8_t)(d->w0 >> 48);
	e->ld = (uint8_t)(d->w0 >> 40);
	e->ni = (uint8_t)r->mn_idx[node];
	e->off = d->off;
	/* A block another client made: its region's access, from the
	 * node if this one has not opened it (once per block). */
	if (!known)
		e->access = loco_region_at(r->base.mgr, node, LOCO_SPACE_ARENA,
					   d->off, r->st_bytes, &rr) ? 0 :
			    (uint8_t)rr.access;
}

void race_st_of(const struct loco_race *r, const struct race_cdesc *e,
		uint32_t s, struct race_st *st)
{
	st->suffix = s;
	st->ld = e->ld;
	st->state = (enum race_state)e->state;
	st->ni = e->ni;
	st->rr = (struct loco_rregion){ .node = r->mn[e->ni].id,
					.space = LOCO_SPACE_ARENA,
					.off = e->off, .len = r->st_bytes,
					.access = e->access };
}

static void cache_note(struct loco_race_client *c, uint32_t s,
		       const struct race_desc *d)
{
	struct race_cdesc *e = &c->cache[s];
	race_cdesc_set(c->r, e, d);
	if (e->valid && e->ld > c->gd)
		c->gd = e->ld;
}

int race_refresh(struct loco_race_client *c, uint64_t h1)
{
	const struct loco_race *r = c->r;
	loco_raddr_t objs[LOCO_RACE_DEPTH_MAX + 1];
	uint32_t sfx[LOCO_RACE_DEPTH_MAX + 1];
	struct race_desc d[LOCO_RACE_DEPTH_MAX + 1];
	unsigned n = 0;
	for (unsigned ld = 0; ld <= r->o.max_depth; ld++) {
		uint32_t s = (uint32_t)(h1 & ((UINT64_C(1) << ld) - 1));
		if (n && sfx[n - 1] == s)
			continue;   /* a zero bit: same slot as one depth down */
		sfx[n] = s;
		objs[n++] = race_desc_obj(r, s);
	}
	RACE_INC(c, refreshes);
	int rc = loco_rtx_peek(c->w, objs, n, d, NULL);
	if (!rc)
		rc = race_desc_persist(c, sfx, n);
	for (unsigned i = 0; !rc && i < n; i++)
		cache_note(c, sfx[i], &d[i]);
	return rc;
}

int race_refresh_one(struct loco_race_client *c, uint32_t s, uint64_t *lock)
{
	loco_raddr_t obj = race_desc_obj(c->r, s);
	struct race_desc d;
	int rc = loco_rtx_peek(c->w, &obj, 1, &d, lock);
	if (!rc)
		rc = race_desc_persist(c, &s, 1);
	if (!rc)
		cache_note(c, s, &d);
	return rc;
}

/* Cache slot of H1's subtable: the deepest cached descriptor whose suffix
 * H1 has at its own depth, or -1. */
static int cache_find(const struct loco_race_client *c, uint64_t h1)
{
	for (int ld = (int)c->gd; ld >= 0; ld--) {
		uint32_t s = (uint32_t)(h1 & ((UINT64_C(1) << ld) - 1));
		const struct race_cdesc *e = &c->cache[s];
		if (e->valid && e->ld == (unsigned)ld)
			return (int)s;
	}
	return -1;
}

/* The slot on H1's chain that a split's commit has not installed yet:
 * below the deepest cached ancestor's depth L, whose subtable is no
 * longer H1's, the slot H1 mod 2^L. */
static uint32_t hole_slot(const struct loco_race_client *c, uint64_t h1)
{
	unsigned deep = 0;
	for (unsigned ld = 0; ld <= c->gd; ld++) {
		const struct race_cdesc *e =
			&c->cache[h1 & ((UINT64_C(1) << ld) - 1)];
		if (e->valid && e->ld > deep)
			deep = e->ld;
	}
	return (uint32_t)(h1 & ((UINT64_C(1) << deep) - 1));
}

/* Read descriptor S in a transaction of its own and drop it: an expired
 * lock on it (a committer that stalled or died between its installs) is
 * repaired on the way (rTX finishes the commit from its log). */
static int repair_desc(struct loco_race_client *c, uint32_t s)
{
	const void *v;
	int rc = loco_rtx_begin(c->w);
	if (rc)
		return rc;
	rc = loco_rtx_read(c->w, race_desc_obj(c->r, s), &v);
	loco_rtx_abort(c->w);
	return rc == -EAGAIN || rc == -EBUSY ? 0 : rc;
}

#define HOLE_REPAIR_EVERY 8    /* refreshes between repair attempts */

/* A refresh can find no subtable for H1: the peek reads one descriptor
 * after another, and an rtx split's commit installs the parent's new
 * depth before the child's descriptor (issue 27). That hole closes when
 * the commit's next install lands, or, if the committer stalled or died
 * in between, when its lease ran out and rTX's repair finishes the
 * commit. So read again, and repair from time to time, until the
 * manager's timeout. */
static int hole_wait(struct loco_race_client *c, uint64_t h1, int *s)
{
	uint64_t deadline = race_deadline(c);
	unsigned tries = 0;
	RACE_INC(c, hole_waits);
	while (*s < 0) {
		if (loco_now_ns() > deadline) {
			loco_err(c->r->base.name, "no subtable for hash %016llx "
				 "within the timeout: the directory has a hole "
				 "that no commit closes",
				 (unsigned long long)h1);
			return -ETIMEDOUT;
		}
		race_backoff(c, &tries);
		int rc = tries % HOLE_REPAIR_EVERY ? 0 :
			 repair_desc(c, hole_slot(c, h1));
		if (!rc)
			rc = race_refresh(c, h1);
		if (rc)
			return rc;
		*s = cache_find(c, h1);
	}
	return 0;
}

int race_locate(struct loco_race_client *c, uint64_t h1, struct race_st *st)
{
	int s = cache_find(c, h1);
	if (s < 0) {
		int rc = race_refresh(c, h1);
		if (rc)
			return rc;
		s = cache_find(c, h1);
	}
	if (s < 0) {
		int rc = hole_wait(c, h1, &s);
		if (rc)
			return rc;
	}
	race_st_of(c->r, &c->cache[s], (uint32_t)s, st);
	return 0;
}

/* ---- fencing -------------------------------------------------------------------- */

#define FENCE_TIMEOUT_MS 2000

/* rTX repaired a lock or log of thread slot OWNER (its lease ran out):
 * its node owes a fence before we act on what the lock guarded. */
static void on_repaired(void *arg, uint32_t owner)
{
	struct loco_race_client *c = arg;
	uint32_t node = owner / c->r->o.threads_per_node;
	if (node == loco_mgr_id(c->r->base.mgr))
		return;   /* a thread of ours: alive, nothing to fence */
	if (loco_peer_fenced(c->r->base.mgr, node))
		return;   /* fenced already (before a steal: on_taking) */
	for (unsigned i = 0; i < c->nowe; i++)
		if (c->owe[i] == node)
			return;
	if (c->nowe == RACE_OWE_MAX)
		c->owe_lost = true;
	else
		c->owe[c->nowe++] = node;
}

/* Fence NODE (the holder of a lock whose lease ran out) with a wait of at
 * most MS: 0 (fenced, or the transport cannot fence: the move epochs and
 * private regions then stand alone), -LOCO_EFENCED (we were fenced
 * ourselves: stop), or -EAGAIN (not fenced: do not act for it, wait). */
static int fence_one(struct loco_race_client *c, uint32_t node, int ms)
{
	int rc = loco_fence_node(c->r->base.mgr, node, ms);
	if (rc == -EOPNOTSUPP) {
		static _Atomic bool said;
		/* Relaxed: a log-once flag. */
		if (!atomic_exchange_explicit(&said, true, memory_order_relaxed))
			loco_info(c->r->base.name, "the transport cannot fence "
				  "node %u: resizes taken over rest on the move "
				  "epochs and private regions alone", node);
		return 0;
	}
	if (rc == -LOCO_EFENCED)
		return rc;
	if (rc) {
		loco_warn(c->r->base.name, "fence of node %u (its resize lease "
			  "ran out): %s; waiting", node, loco_strerror(rc));
		return -EAGAIN;
	}
	RACE_INC(c, fences);
	return 0;
}

/* rTX is about to steal a lock of thread slot OWNER (a descriptor's
 * pre-lock whose lease ran out): its node is fenced first; until that
 * completes the lock stays its owner's (-EBUSY: wait as for a live one).
 * HOLDING (our transaction holds pre-locks): the fence waits at most half
 * a lease, so that ours do not run out meanwhile. Else (lock_desc's
 * first access: the usual case) it waits the fence's full timeout: a
 * waiter holding nothing is bounded by no lease, and one try then
 * outlasts a target stalled by a loaded host, or stopped a while (a
 * fence that failed would only be tried again). */
static int on_taking(void *arg, uint32_t owner, bool holding)
{
	struct loco_race_client *c = arg;
	uint32_t node = owner / c->r->o.threads_per_node;
	if (node == loco_mgr_id(c->r->base.mgr) ||
	    (c->r->o.broken & LOCO_RACE_BROKEN_NO_FENCE))
		return 0;
	int rc = fence_one(c, node, holding ? LEASE_DRIFT_MS / 2 :
			   FENCE_TIMEOUT_MS);
	return rc == -EAGAIN ? -EBUSY : rc;
}

void race_worker_hooks(struct loco_race_client *c)
{
	static const struct loco_rtx_hooks hooks = {
		.repaired = on_repaired, .taking = on_taking,
	};
	loco_rtx_set_hooks(c->w, &hooks, c);
}

bool race_fence_pending(const struct loco_race_client *c)
{
	return c->nowe || c->owe_lost;
}

int race_fence_owed(struct loco_race_client *c)
{
	if (c->r->o.broken & LOCO_RACE_BROKEN_NO_FENCE) {
		c->nowe = 0;
		c->owe_lost = false;
		return 0;
	}
	if (c->owe_lost) {
		loco_warn(c->r->base.name, "more than %d nodes' locks repaired "
			  "at once: waiting", RACE_OWE_MAX);
		c->owe_lost = false;
		c->nowe = 0;
		return -EAGAIN;
	}
	while (c->nowe) {
		int rc = fence_one(c, c->owe[c->nowe - 1], FENCE_TIMEOUT_MS);
		if (rc)
			return rc;
		c->nowe--;
	}
	return 0;
}

/* ---- waiting ---------------------------------------------------------------------- */

uint64_t race_rand(struct loco_race_client *c)
{
	uint64_t x = c->rng;  /* xorshift64* */
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	c->rng = x;
	return x * UINT64_C(2685821657736338717);
}

void race_backoff(struct loco_race_client *c, unsigned *tries)
{
	unsigned t = (*tries)++;
	if (t < 2)
		return;
	unsigned cap = t < 10 ? 1u << (t - 2) : BACKOFF_MAX_US;
	if (cap > BACKOFF_MAX_US)
		cap = BACKOFF_MAX_US;
	unsigned us = 1 + (unsigned)(race_rand(c) % cap);
	struct timespec ts = { 0, (long)us * 1000L };
	nanosleep(&ts, NULL);
}

uint64_t race_deadline(const struct loco_race_client *c)
{
	return loco_now_ns() +
	       (uint64_t)loco_mgr_timeout_ms(c->r->base.mgr) * 1000000u;
}

int race_pend_wait(struct loco_race_client *c)
{
	if (!c->pend.peers)
		return 0;
	int rc = loco_ack_wait(c->thr, &c->pend, -1);
	/* After a failed wait the ops may still complete: they stay in the
	 * set, their buffers reserved, until a wait returns 0. */
	if (!rc) {
		loco_ack_clear(&c->pend);
		c->npend = 0;
	}
	return rc;
}

int race_run(struct loco_race_client *c, struct loco_batch *b)
{
	int rc = loco_batch_post(b, &c->pend);
	return rc ? rc : race_pend_wait(c);
}

/* ---- persistence points --------------------------------------------------------- */

int race_persist_post(struct loco_race_client *c, uint32_t node)
{
	return race_durable(c->r, node) ?
	       loco_post_persist(c->thr, node, &c->pend) : 0;
}

int race_persist(struct loco_race_client *c, uint32_t node)
{
	int rc = race_persist_post(c, node);
	return rc ? rc : race_pend_wait(c);
}

int race_persist_seen(struct loco_race_client *c, const struct loco_rregion *rr,
		      uint64_t off, uint64_t len)
{
	return race_durable(c->r, rr->node) ?
	       loco_post_persist_range(c->thr, rr, off, len, &c->pend) : 0;
}

int race_cas_sync(struct loco_race_client *c, const struct loco_rregion *rr,
		  uint64_t off, uint64_t expect, uint64_t desired,
		  uint64_t *old, bool persist)
{
	if (!persist || !race_durable(c->r, rr->node))
		return loco_cas(c->thr, rr, off, expect, desired, old);
	struct loco_batch b;
	loco_batch_init(&b, c->thr);
	loco_batch_cas(&b, rr, off, expect, desired, old);
	int rc = loco_batch_post(&b, &c->pend);
	/* Ordering: the FLUSH executes after the CAS on their QP. */
	if (!rc)
		rc = race_persist_post(c, rr->node);
	return rc ? rc : race_pend_wait(c);
}

int race_read_seen(struct loco_race_client *c, const struct loco_rregion *rr,
		   uint64_t off, void *dst, uint32_t len)
{
	if (!race_durable(c->r, rr->node))
		return loco_read(c->thr, rr, off, dst, len);
	struct loco_batch b;
	loco_batch_init(&b, c->thr);
	loco_batch_read(&b, rr, off, dst, len);
	int rc = loco_batch_post(&b, &c->pend);
	/* Ordering: the FLUSH executes after the READ on their QP, so the
	 * bytes the READ saw (or later ones) are what it makes durable. */
	if (!rc)
		rc = race_persist_seen(c, rr, off, len);
	return rc ? rc : race_pend_wait(c);
}

int race_desc_persist(struct loco_race_client *c, const uint32_t *s,
		      unsigned n)
{
	const struct loco_race *r = c->r;
	if (!race_durable(r, r->meta.node))
		return 0;
	int rc = 0;
	for (unsigned i = 0; i < n && !rc; i++) {
		loco_raddr_t a = race_desc_obj(r, s[i]);
		rc = race_persist_seen(c, &r->meta,
				       loco_raddr_off(a) - r->meta.off, 16);
	}
	return rc ? rc : race_pend_wait(c);
}

void race_ops_init(struct race_ops *l, struct loco_race_client *c)
{
	l->c = c;
	l->rc = 0;
	loco_batch_init(&l->b, c->thr);
}

/* A full batch goes out before the next op is added. */
static void ops_room(struct race_ops *l)
{
	if (l->b.n == LOCO_BATCH_MAX && !l->rc)
		l->rc = loco_batch_post(&l->b, &l->c->pend);
}

void race_ops_read(struct race_ops *l, const struct loco_rregion *rr,
		   uint64_t off, void *dst, uint32_t len)
{
	ops_room(l);
	loco_batch_read(&l->b, rr, off, dst, len);
}

void race_ops_cas(struct race_ops *l, const struct loco_rregion *rr,
		  uint64_t off, uint64_t expect, uint64_t desired, uint64_t *old)
{
	ops_room(l);
	loco_batch_cas(&l->b, rr, off, expect, desired, old);
}

int race_ops_post(struct race_ops *l)
{
	int rc = l->rc ? l->rc : loco_batch_post(&l->b, &l->c->pend);
	race_ops_init(l, l->c);
	return rc;
}

int race_ops_run(struct race_ops *l)
{
	int rc = race_ops_post(l);
	return rc ? rc : race_pend_wait(l->c);
}

int race_ops_run_durable(struct race_ops *l, uint32_t node)
{
	struct loco_race_client *c = l->c;
	int rc = race_ops_post(l);
	if (!rc)
		rc = race_persist_post(c, node);
	return rc ? rc : race_pend_wait(c);
}

/* ---- clients ------------------------------------------------------------------ */

static void client_free(struct loco_race_client *c)
{
	race_pools_fini(c);
	free(c->cache);
	free(c->kvw);
	free(c->kvr);
	free(c->big);
	free(c);
}

static int client_alloc(struct loco_race *r, struct loco_race_client **out)
{
	struct loco_race_client *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->r = r;
	c->cache = calloc(r->ndesc, sizeof(*c->cache));
	c->kvw = aligned_alloc(64, r->block_len);
	/* Fingerprint matches: both combined buckets of a MOVING child and
	 * of its parent, 4 x 14 slots. */
	c->kvr = aligned_alloc(64, (size_t)4 * RACE_CSLOTS * r->block_len);
	c->big_len = 4 * (size_t)r->st_bytes;
	if (c->big_len < 65536)
		c->big_len = 65536;
	c->big = aligned_alloc(64, c->big_len);
	if (!c->cache || !c->kvw || !c->kvr || !c->big || race_pools_init(c)) {
		client_free(c);
		return -ENOMEM;
	}
	*out = c;
	return 0;
}

/* A new incarnation of the slot: FAA its word; then adopt the chunks an
 * older incarnation (a crashed process of this node id) left. */
static int slot_attach(struct loco_race_client *c)
{
	uint64_t old = 0;
	int rc = loco_faa(c->thr, &c->r->slots, (uint64_t)c->slot * 8, 1, &old);
	/* Durable before it names chunks: a power cut must not hand the
	 * same incarnation out again. */
	if (!rc)
		rc = race_persist(c, c->r->home);
	if (rc)
		return rc;
	c->inc = (old + 1) & 0xffffffffffffu;
	return race_adopt_own(c);
}

int loco_race_client_create(struct loco_race *r, struct loco_thread *thr,
			    struct loco_race_client **out)
{
	struct loco_race_client *c;
	int rc = client_alloc(r, &c);
	if (rc)
		return rc;
	c->thr = thr;
	rc = loco_rtx_worker_create(r->rtx, thr, &c->w);
	if (rc) {
		client_free(c);
		return rc;
	}
	race_worker_hooks(c);
	c->slot = loco_rtx_worker_slot(c->w);
	c->rng = (uint64_t)(c->slot + 1) * UINT64_C(0x9e3779b97f4a7c15) ^
		 loco_now_ns();
	rc = slot_attach(c);
	if (rc) {
		loco_err(r->base.name, "client slot %u: attach: %s", c->slot,
			 loco_strerror(rc));
		loco_rtx_worker_destroy(c->w);
		client_free(c);
		return rc;
	}
	pthread_mutex_lock(&r->lock);
	c->next = r->clients;
	r->clients = c;
	pthread_mutex_unlock(&r->lock);
	*out = c;
	return 0;
}

int loco_race_client_reset(struct loco_race_client *c)
{
	struct loco_race *r = c->r;
	/* The dead incarnation's ops keep their error in the set; its QPs
	 * are drained when renewed, before anything new is posted there. */
	loco_ack_clear(&c->pend);
	c->npend = 0;
	race_pools_forget(c);
	memset(c->cache, 0, (size_t)r->ndesc * sizeof(*c->cache));
	c->gd = 0;
	int rc = loco_rtx_worker_destroy(c->w);
	c->w = NULL;
	if (rc == -LOCO_EDOWN)
		return rc;
	rc = loco_rtx_worker_create(r->rtx, c->thr, &c->w);
	if (rc)
		return rc;
	race_worker_hooks(c);
	c->slot = loco_rtx_worker_slot(c->w);
	rc = slot_attach(c);
	if (rc)
		loco_warn(r->base.name, "client slot %u: reset: %s", c->slot,
			  loco_strerror(rc));
	return rc;
}

static void client_unlink(struct loco_race_client *c)
{
	struct loco_race *r = c->r;
	pthread_mutex_lock(&r->lock);
	for (struct loco_race_client **pp = &r->clients; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	for (size_t i = 0; i < RACE_NSTATS; i++)
		/* Relaxed: statistics. */
		r->retired[i] += atomic_load_explicit(&c->st[i],
						      memory_order_relaxed);
	pthread_mutex_unlock(&r->lock);
}

void race_client_forget(struct loco_race_client *c)
{
	client_unlink(c);
	client_free(c);
}

int loco_race_client_destroy(struct loco_race_client *c)
{
	if (!c)
		return 0;
	int rc = race_pend_wait(c);
	if (!rc)
		rc = race_pools_release(c);
	if (rc)
		loco_warn(c->r->base.name, "client slot %u: giving chunks back: "
			  "%s", c->slot, loco_strerror(rc));
	int wrc = loco_rtx_worker_destroy(c->w);
	client_unlink(c);
	client_free(c);
	return rc ? rc : wrc;
}

/* ---- statistics ---------------------------------------------------------------- */

void loco_race_client_stats(const struct loco_race_client *c,
			    struct loco_race_stats *out)
{
	uint64_t v[RACE_NSTATS];
	for (size_t i = 0; i < RACE_NSTATS; i++)
		/* Relaxed: statistics. */
		v[i] = atomic_load_explicit(&c->st[i], memory_order_relaxed);
	memcpy(out, v, sizeof(*out));
	struct loco_rtx_stats x = { 0 };
	if (c->w)   /* none after a reset that failed */
		loco_rtx_worker_stats(c->w, &x);
	out->rtx_repairs = x.repairs;
}

void loco_race_stats(struct loco_race *r, struct loco_race_stats *out)
{
	uint64_t sum[RACE_NSTATS];
	pthread_mutex_lock(&r->lock);
	memcpy(sum, r->retired, sizeof(sum));
	for (struct loco_race_client *c = r->clients; c; c = c->next)
		for (size_t i = 0; i < RACE_NSTATS; i++)
			/* Relaxed: statistics. */
			sum[i] += atomic_load_explicit(&c->st[i],
						       memory_order_relaxed);
	pthread_mutex_unlock(&r->lock);
	memcpy(out, sum, sizeof(*out));
	struct loco_rtx_stats x;
	loco_rtx_stats(r->rtx, &x);
	out->rtx_repairs = x.repairs;
}
