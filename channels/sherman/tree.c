/* SPDX-License-Identifier: MIT */
/* The tree handle: options, the channel tree and its regions on the
 * hosting nodes, the superblock, the root, workers (thread slots), node
 * allocation, statistics; the public operations dispatch from here. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include <loco/rtx/crash.h>
#include "channels/sherman/internal.h"

#define CFG_VERSION 1
#define EPOCH_SLACK_MS (3600u * 1000u)  /* clients with slower clocks */

/* Crash points of this layer (docs/sherman.md), registered with rtx's. */
static const char *const sherman_crash_points[] = {
	"sherman.split_locked",   /* node to split locked, nothing written */
	"sherman.split_sibling",  /* new sibling written, the split node not */
	"sherman.split_half",     /* plain: half split published, parent not */
	"sherman.split_parent_locked", /* the parent locked, not written */
	"sherman.split_root",     /* root split: children written, root not */
	"sherman.write_back",     /* plain: lock checked as kept, nothing written */
	NULL,
};

__attribute__((constructor)) static void sherman_register_points(void)
{
	loco_crash_register(sherman_crash_points);
}

/* ---- options ------------------------------------------------------------- */

static void opts_defaults(struct loco_sherman_opts *o)
{
	if (!o->name)
		o->name = "sherman";
	if (!o->node_size)
		o->node_size = 1024;
	if (!o->value_len)
		o->value_len = 8;
	if (!o->nodes)
		o->nodes = 32768;
	if (!o->locks)
		o->locks = 16384;
	if (!o->cache_mib)
		o->cache_mib = 16;
	if (!o->threads_per_node)
		o->threads_per_node = 8;
	if (!o->lease_ms)
		o->lease_ms = 1000;
	if (!o->handover_max)
		o->handover_max = 4;
}

static int opts_check(const struct loco_sherman_opts *o)
{
	const char *bad = NULL;
	if (o->node_size < LOCO_SHERMAN_NODE_MIN ||
	    o->node_size > LOCO_SHERMAN_NODE_MAX || o->node_size % 64)
		bad = "node_size (a multiple of 64 in [128, 4096])";
	else if (o->value_len % 8 || o->value_len > LOCO_SHERMAN_VALUE_MAX)
		bad = "value_len (a multiple of 8 in [8, 256])";
	else if ((o->node_size - SH_HDR) / (16 + o->value_len) < 2)
		bad = "value_len (a leaf must hold two entries)";
	else if (o->nodes < 2 || o->locks < 1)
		bad = "nodes or locks";
	else if (o->threads_per_node > 64)
		bad = "threads_per_node (at most 64)";
	else if (o->lease_ms < 2 || o->lease_ms > 60000)
		bad = "lease_ms (2..60000)";
	else if (o->unsafe & ~(LOCO_SHERMAN_UNSAFE_NO_CHECK |
			       LOCO_SHERMAN_UNSAFE_NO_SCAN_CHECK |
			       LOCO_SHERMAN_UNSAFE_NO_PERSIST |
			       LOCO_SHERMAN_UNSAFE_NO_FENCE))
		bad = "unsafe";
	if (bad)
		loco_err("sherman", "bad option: %s", bad);
	return bad ? -EINVAL : 0;
}

/* Hosting nodes: as given, else every memory node, else the lowest
 * compute node. */
static int pick_parts(struct loco_sherman *t)
{
	const struct loco_hosts *h = loco_mgr_hosts(t->base.mgr);
	uint64_t mask = t->o.mem_nodes;
	for (uint32_t id = 0; !mask && id <= h->max_id; id++)
		if (h->node[id].present && h->node[id].role == LOCO_ROLE_MEMORY)
			mask |= UINT64_C(1) << id;
	for (uint32_t id = 0; !mask && id <= h->max_id; id++)
		if (h->node[id].present)
			mask = UINT64_C(1) << id;
	for (uint64_t m = mask; m; m &= m - 1)
		if (!h->node[__builtin_ctzll(m)].present)
			return -EINVAL;
	if (!mask)
		return -EINVAL;
	t->part = calloc((size_t)__builtin_popcountll(mask), sizeof(*t->part));
	if (!t->part)
		return -ENOMEM;
	t->part_mask = mask;
	t->home = (uint32_t)__builtin_ctzll(mask);
	memset(t->part_idx, -1, sizeof(t->part_idx));
	for (uint64_t m = mask; m; m &= m - 1) {
		uint32_t id = (uint32_t)__builtin_ctzll(m);
		t->part_idx[id] = (int8_t)t->nparts;
		t->part[t->nparts++].id = id;
	}
	return 0;
}

static void layout(struct loco_sherman *t)
{
	t->entry_len = 16 + t->o.value_len;
	t->leaf_slots = (t->o.node_size - SH_HDR) / t->entry_len;
	t->int_cap = (t->o.node_size - SH_HDR - 8) / 16;
	t->redo_len = (uint32_t)sizeof(struct sh_redo) + t->o.node_size;
	t->nslots = LOCO_MAX_NODES * t->o.threads_per_node;
}

/* ---- channels, regions and superblock -------------------------------------
 * "<name>" has one sub-channel "<name>/m<id>" per hosting node holding
 * that node's regions "<name>/m<id>.<part>" (create-or-open there); in
 * rtx mode the nodes are the objects of the rtx "<name>/rtx". None has
 * peers to join: the hosted memory is where clients meet. */

static int open_part(struct loco_sherman *t, struct sh_part *p)
{
	char name[16];
	snprintf(name, sizeof(name), "m%u", p->id);
	int rc = loco_channel_init(&p->base, t->base.mgr, &t->base, name,
				   UINT64_C(1) << loco_channel_self(&t->base),
				   NULL);
	if (rc)
		return rc;
	/* Least access: the superblock is CAS'd (set once), the allocator
	 * FAA'd, nodes and redo records read and written, lock words read,
	 * CAS'd and written (a release). */
	if (p->id == t->home)
		rc = loco_channel_open_hosted_ex(&p->base, p->id, "super",
			sizeof(struct sh_super), LOCO_REGION_REMOTE_ATOMIC,
			&t->super);
	if (!rc)
		rc = loco_channel_open_hosted_ex(&p->base, p->id, "alloc", 64,
			LOCO_REGION_REMOTE_ATOMIC, &p->alloc);
	if (!rc && !t->o.rtx)
		rc = loco_channel_open_hosted_ex(&p->base, p->id, "nodes",
			(uint64_t)t->o.nodes * t->o.node_size,
			LOCO_REGION_REMOTE_READ | LOCO_REGION_REMOTE_WRITE,
			&p->nodes);
	if (!rc && !t->o.rtx)
		rc = loco_channel_open_hosted_ex(&p->base, p->id, "locks",
			(uint64_t)t->o.locks * 8,
			LOCO_REGION_HOT | LOCO_REGION_REMOTE_ALL, &p->locks);
	if (!rc && !t->o.rtx)
		rc = loco_channel_open_hosted_ex(&p->base, p->id, "redo",
			(uint64_t)t->nslots * t->redo_len,
			LOCO_REGION_REMOTE_READ | LOCO_REGION_REMOTE_WRITE,
			&p->redo);
	return rc ? rc : loco_channel_join(&p->base);
}

static int open_rtx(struct loco_sherman *t)
{
	uint32_t objects = t->o.nodes;
	struct loco_rtx_opts xo = {
		.name = "rtx", .parent = &t->base, .mem_nodes = t->part_mask,
		.objects = objects, .data_len = t->o.node_size,
		.blocks = objects < 4096 ? 8192 : 2 * objects,
		.max_writes = 2 * SH_LEVELS, .max_reads = LOCO_RTX_WRITES_MAX,
		.threads_per_node = t->o.threads_per_node,
	};
	return loco_rtx_create(t->base.mgr, &xo, &t->rtx);
}

/* The rtx first (its owner destroys it before the parent), then the
 * tree: the base's fini finishes the parts (finished or zeroed channels
 * are no-ops). */
static void channels_fini(struct loco_sherman *t)
{
	if (t->rtx)
		loco_rtx_destroy(t->rtx);
	t->rtx = NULL;
	loco_channel_fini(&t->base);
	free(t->part);
	t->part = NULL;
}

static uint64_t cfg_hash(const struct loco_sherman *t)
{
	uint64_t v[] = { CFG_VERSION, t->o.node_size, t->o.value_len,
			 t->o.nodes, t->o.locks, t->o.threads_per_node,
			 t->o.rtx, t->part_mask };
	uint64_t h = XXH3_64bits(v, sizeof(v));
	return h ? h : 1;
}

static uint64_t realtime_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* This process's lease clock skew in whole milliseconds (LOCO_CLOCK_SKEW_MS,
 * loco-run --clock-skew): loco_lease_now_ns's offset from CLOCK_MONOTONIC,
 * constant for the process. Taken once, between two reads of the
 * monotonic clock close enough together that the rounding is exact
 * (taken on every sh_now_ms from two clock reads, a thread preempted
 * between them moved its lease clock back by the preemption: a lease
 * taken then was as much shorter, a renewal due then was skipped). */
static int64_t lease_skew_ms(void)
{
	int64_t d = 0;
	for (unsigned i = 0; i < 16; i++) {
		int64_t m0 = (int64_t)loco_now_ns();
		int64_t l = (int64_t)loco_lease_now_ns();
		int64_t m1 = (int64_t)loco_now_ns();
		d = l - (m0 + (m1 - m0) / 2);
		if (m1 - m0 < 100000)
			break;
	}
	return (d >= 0 ? d + 500000 : d - 500000) / 1000000;
}

/* The lease clock: CLOCK_REALTIME (comparable across hosts up to their
 * drift, which lease_ms must exceed) moved by this node's lease clock
 * skew (lease_skew_ms). */
uint64_t sh_now_ms(const struct loco_sherman *t)
{
	return (uint64_t)((int64_t)realtime_ms() + t->skew_ms) - t->epoch_ms;
}

/* First creator: CAS the configuration hash and the epoch in; everyone
 * else finds them there. */
static int super_init(struct loco_sherman *t, struct loco_thread *thr)
{
	uint64_t want = cfg_hash(t), old = 0;
	int rc = loco_cas(thr, &t->super, offsetof(struct sh_super, cfg), 0,
			  want, &old);
	if (!rc && old && old != want) {
		loco_err(t->base.name, "tree exists with other options (layout "
			 "hash %016llx, ours %016llx)", (unsigned long long)old,
			 (unsigned long long)want);
		return -LOCO_EMISMATCH;
	}
	t->skew_ms = lease_skew_ms();
	uint64_t epoch = realtime_ms() - EPOCH_SLACK_MS;
	if (!rc)
		rc = loco_cas(thr, &t->super, offsetof(struct sh_super, epoch_ms),
			      0, epoch, &old);
	/* Durable before the tree is used: a power cut must not let
	 * another layout, or another epoch for the leases, in. */
	if (!rc && sh_durable(t, t->super.node))
		rc = loco_persist(thr, t->super.node);
	if (!rc)
		t->epoch_ms = old ? old : epoch;
	return rc;
}

/* The root is node 0 of the home part, for good: a root split moves its
 * entries into two new children and makes it their parent. Whoever
 * finds it never written writes the empty root leaf. */
static int root_init(struct loco_sherman *t, struct loco_thread *thr)
{
	struct loco_sherman_worker *w;
	int rc = loco_sherman_worker_create(t, thr, &w);
	if (rc)
		return rc;
	rc = t->o.rtx ? sh_rtx_init_root(w) : sh_plain_init_root(w);
	loco_sherman_worker_destroy(w);
	return rc;
}

static int tree_setup(struct loco_sherman *t)
{
	struct loco_thread *thr;
	int rc = pick_parts(t);
	if (rc == -EINVAL)
		loco_err(t->base.name, "no hosting node for the tree");
	if (rc)
		return rc;
	layout(t);
	if (!t->o.rtx && !t->o.no_hocl && (rc = sh_llt_init(t)))
		return rc;
	rc = loco_channel_join(&t->base);
	for (unsigned i = 0; i < t->nparts && !rc; i++)
		rc = open_part(t, &t->part[i]);
	for (unsigned i = 0; i < t->nparts && !rc; i++)
		if (loco_peer_durable(t->base.mgr, t->part[i].id))
			t->durable |= UINT64_C(1) << t->part[i].id;
	if (!rc && t->o.rtx)
		rc = open_rtx(t);
	if (rc)
		return rc;
	t->root = t->o.rtx ? loco_rtx_obj(t->rtx, t->home, 0) :
			     loco_raddr(t->home, t->part[0].nodes.off);
	rc = loco_thread_create(t->base.mgr, &thr);
	if (rc)
		return rc;
	rc = super_init(t, thr);
	if (!rc)
		rc = root_init(t, thr);
	loco_thread_destroy(thr);
	return rc;
}

static int local_init(struct loco_sherman *t)
{
	pthread_mutex_init(&t->lock, NULL);
	uint64_t bytes = t->o.cache_mib == ~0u ? 0 :
			 (uint64_t)t->o.cache_mib << 20;
	t->cached = bytes != 0;
	return t->cached ? sh_cache_init(&t->cache, t->o.node_size, bytes) : 0;
}

static void local_fini(struct loco_sherman *t)
{
	if (t->cached)
		sh_cache_fini(&t->cache);
	sh_llt_fini(t);
	pthread_mutex_destroy(&t->lock);
}

int loco_sherman_create(struct loco_mgr *mgr,
			const struct loco_sherman_opts *opts,
			struct loco_sherman **out)
{
	struct loco_sherman *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->o = *opts;
	opts_defaults(&t->o);
	int rc = opts_check(&t->o);
	if (!rc) {
		/* Only this node's bit: no peers to join (channel.h). */
		rc = loco_channel_init(&t->base, mgr, t->o.parent, t->o.name,
				       UINT64_C(1) << loco_mgr_id(mgr), NULL);
		if (rc)
			loco_err("sherman", "bad tree name '%s'", t->o.name);
	}
	if (rc) {
		free(t);
		return rc;
	}
	t->o.name = t->base.name;
	rc = local_init(t);
	if (!rc)
		rc = tree_setup(t);
	if (rc) {
		loco_sherman_destroy(t);
		return rc;
	}
	*out = t;
	return 0;
}

void loco_sherman_destroy(struct loco_sherman *t)
{
	if (!t)
		return;
	if (t->workers)
		loco_warn(t->base.name, "tree destroyed with live workers");
	channels_fini(t);
	local_fini(t);
	free(t);
}

uint32_t loco_sherman_value_len(const struct loco_sherman *t)
{
	return t->o.value_len;
}

/* ---- addresses and allocation ------------------------------------------ */

int sh_locate(const struct loco_sherman *t, loco_raddr_t a, uint32_t *pi,
	      uint64_t *off)
{
	uint32_t id = loco_raddr_node(a);
	if (id >= LOCO_MAX_NODES || t->part_idx[id] < 0)
		return -EINVAL;
	const struct loco_rregion *r = &t->part[t->part_idx[id]].nodes;
	uint64_t o = loco_raddr_off(a);
	if (o < r->off || o - r->off >= r->len)
		return -EINVAL;
	*pi = (uint32_t)t->part_idx[id];
	*off = o - r->off;
	return 0;
}

static loco_raddr_t node_addr(const struct loco_sherman *t, uint32_t pi,
			      uint32_t idx)
{
	const struct sh_part *p = &t->part[pi];
	if (t->o.rtx)
		return loco_rtx_obj(t->rtx, p->id, idx);
	return loco_raddr(p->id, p->nodes.off + (uint64_t)idx * t->o.node_size);
}

/* Indices come SH_CHUNK at a time from the part's counter (one FAA);
 * index 0 is never handed out (the home part's is the root). A chunk a
 * client dies with is lost: nodes are never freed (no merge). */
static int part_take(struct loco_sherman_worker *w, uint32_t pi,
		     loco_raddr_t *out)
{
	struct loco_sherman *t = w->t;
	if (w->chunk_next[pi] == w->chunk_end[pi]) {
		uint64_t old = 0;
		int rc = loco_faa(w->thr, &t->part[pi].alloc, 0, SH_CHUNK, &old);
		/* Durable before a node of the chunk is written: after a power
		 * cut nobody may take the same chunk again. */
		if (!rc && sh_durable(t, t->part[pi].id))
			rc = loco_persist(w->thr, t->part[pi].id);
		if (rc)
			return rc;
		if (old + 1 + SH_CHUNK > t->o.nodes)
			return -ENOSPC;
		w->chunk_next[pi] = (uint32_t)old + 1;
		w->chunk_end[pi] = (uint32_t)old + 1 + SH_CHUNK;
	}
	*out = node_addr(t, pi, w->chunk_next[pi]++);
	return 0;
}

int sh_alloc(struct loco_sherman_worker *w, loco_raddr_t *out)
{
	struct loco_sherman *t = w->t;
	int rc = -ENOSPC;
	for (unsigned k = 0; k < t->nparts && rc == -ENOSPC; k++)
		rc = part_take(w, w->rr++ % t->nparts, out);
	if (rc == -ENOSPC)
		loco_err(t->base.name, "node pool full (%u nodes per hosting "
			 "node)", t->o.nodes);
	return rc;
}

/* ---- waiting ------------------------------------------------------------- */

int sh_wait(struct loco_sherman_worker *w, struct loco_ack *ack)
{
	int rc = loco_ack_wait(w->thr, ack, -1);
	loco_ack_clear(ack);
	return rc;
}

int sh_node_batch(struct loco_sherman_worker *w, loco_raddr_t a,
		  struct loco_batch *b, uint32_t *pi, uint64_t *noff)
{
	int rc = sh_locate(w->t, a, pi, noff);
	if (!rc)
		loco_batch_init(b, w->thr);
	return rc;
}

int sh_batch_wait(struct loco_sherman_worker *w, struct loco_batch *b)
{
	struct loco_ack ack = { 0, 0 };
	int rc = loco_batch_post(b, &ack);
	return rc ? rc : sh_wait(w, &ack);
}

/* ---- workers ------------------------------------------------------------- */

static void worker_free(struct loco_sherman_worker *w)
{
	for (unsigned i = 0; i < 7; i++)
		free(w->nb[i]);
	free(w->redo);
	free(w->kv);
	free(w->chunk_next);
	free(w->chunk_end);
	free(w->scan_addr);
	free(w->scan_seq);
	free(w->scan_seq2);
	free(w->pf_img);
	free(w->pk);
	free(w->pv);
	free(w->po);
	free(w);
}

static int worker_alloc(struct loco_sherman *t, struct loco_sherman_worker **out)
{
	struct loco_sherman_worker *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	/* Room for one more entry or pair than a node holds: a node being
	 * split gets the new one before it is cut in two. */
	size_t nb = ((size_t)t->o.node_size + 128 + 63) / 64 * 64;
	bool ok = true;
	for (unsigned i = 0; i < 7; i++)
		ok &= (w->nb[i] = aligned_alloc(64, nb)) != NULL;
	w->redo = aligned_alloc(64, (t->redo_len + 63) / 64 * 64);
	unsigned most = t->leaf_slots > t->int_cap ? t->leaf_slots : t->int_cap;
	w->kv = calloc(most + 2, sizeof(*w->kv));
	w->pf_img = aligned_alloc(64, (size_t)SH_PREFETCH * t->o.node_size);
	w->chunk_next = calloc(t->nparts, sizeof(uint32_t));
	w->chunk_end = calloc(t->nparts, sizeof(uint32_t));
	if (!ok || !w->redo || !w->kv || !w->pf_img || !w->chunk_next ||
	    !w->chunk_end) {
		worker_free(w);
		return -ENOMEM;
	}
	w->t = t;
	*out = w;
	return 0;
}

/* Lowest free thread index of this process, or -EBUSY. */
static int take_tidx(struct loco_sherman *t, uint32_t *tidx)
{
	pthread_mutex_lock(&t->lock);
	int rc = -EBUSY;
	for (uint32_t i = 0; i < t->o.threads_per_node; i++)
		if (!(t->tidx_used & UINT64_C(1) << i)) {
			t->tidx_used |= UINT64_C(1) << i;
			*tidx = i;
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&t->lock);
	return rc;
}

static void put_tidx(struct loco_sherman *t, uint32_t tidx)
{
	pthread_mutex_lock(&t->lock);
	t->tidx_used &= ~(UINT64_C(1) << tidx);
	pthread_mutex_unlock(&t->lock);
}

int loco_sherman_worker_create(struct loco_sherman *t, struct loco_thread *thr,
			       struct loco_sherman_worker **out)
{
	struct loco_sherman_worker *w;
	int rc = worker_alloc(t, &w);
	if (rc)
		return rc;
	w->thr = thr;
	if ((rc = take_tidx(t, &w->tidx))) {
		loco_err(t->base.name, "no free thread slot (%u per node)",
			 t->o.threads_per_node);
		worker_free(w);
		return rc;
	}
	w->slot = loco_mgr_id(t->base.mgr) * t->o.threads_per_node + w->tidx;
	pthread_mutex_lock(&t->lock);
	w->tag = t->slot_tag[w->tidx];
	pthread_mutex_unlock(&t->lock);
	w->rr = w->slot % t->nparts;   /* workers start on different parts */
	w->tag_floor = UINT64_MAX;   /* nothing is its own yet */
	rc = t->o.rtx ? loco_rtx_worker_create(t->rtx, thr, &w->xw) :
			sh_settle_locks(w, w->slot, false, -1, NULL);
	if (rc) {
		put_tidx(t, w->tidx);
		worker_free(w);
		return rc;
	}
	sh_tag_floor(w);
	pthread_mutex_lock(&t->lock);
	w->next = t->workers;
	t->workers = w;
	pthread_mutex_unlock(&t->lock);
	*out = w;
	return 0;
}

int loco_sherman_worker_destroy(struct loco_sherman_worker *w)
{
	if (!w)
		return 0;
	struct loco_sherman *t = w->t;
	int rc = 0;
	if (w->xw) {
		struct loco_rtx_stats x;
		loco_rtx_worker_stats(w->xw, &x);
		SH_INC_BY(w, rtx_repairs, x.repairs);
		rc = loco_rtx_worker_destroy(w->xw);
	}
	pthread_mutex_lock(&t->lock);
	for (struct loco_sherman_worker **pp = &t->workers; *pp;
	     pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	for (size_t i = 0; i < SH_NSTATS; i++)
		/* Relaxed: statistics (the worker's thread is done with it). */
		t->retired[i] += atomic_load_explicit(&w->st.v[i],
						      memory_order_relaxed);
	t->tidx_used &= ~(UINT64_C(1) << w->tidx);
	t->slot_tag[w->tidx] = w->tag;
	pthread_mutex_unlock(&t->lock);
	worker_free(w);
	return rc;
}

int loco_sherman_worker_reset(struct loco_sherman_worker *w)
{
	struct loco_sherman *t = w->t;
	if (!t->o.rtx)
		return sh_settle_locks(w, w->slot, true, -1, NULL);
	if (w->xw) {
		struct loco_rtx_stats x;
		loco_rtx_worker_stats(w->xw, &x);
		SH_INC_BY(w, rtx_repairs, x.repairs);
		int rc = loco_rtx_worker_destroy(w->xw);
		w->xw = NULL;
		if (rc == -LOCO_EDOWN)
			return rc;
	}
	return loco_rtx_worker_create(t->rtx, w->thr, &w->xw);
}

/* ---- statistics ---------------------------------------------------------- */

static void stats_add(uint64_t *dst, const struct sh_counters *c)
{
	for (size_t i = 0; i < SH_NSTATS; i++)
		/* Relaxed: statistics, single writer per counter. */
		dst[i] += atomic_load_explicit(&c->v[i], memory_order_relaxed);
}

void loco_sherman_worker_stats(const struct loco_sherman_worker *w,
			       struct loco_sherman_stats *out)
{
	uint64_t v[SH_NSTATS] = { 0 };
	stats_add(v, &w->st);
	memcpy(out, v, sizeof(*out));
	if (w->xw) {
		struct loco_rtx_stats x;
		loco_rtx_worker_stats(w->xw, &x);
		out->rtx_repairs += x.repairs;
	}
}

void loco_sherman_stats(struct loco_sherman *t, struct loco_sherman_stats *out)
{
	uint64_t v[SH_NSTATS];
	pthread_mutex_lock(&t->lock);
	memcpy(v, t->retired, sizeof(v));
	for (struct loco_sherman_worker *w = t->workers; w; w = w->next) {
		stats_add(v, &w->st);
		if (w->xw) {
			struct loco_rtx_stats x;
			loco_rtx_worker_stats(w->xw, &x);
			v[SH_STAT(rtx_repairs)] += x.repairs;
		}
	}
	pthread_mutex_unlock(&t->lock);
	memcpy(out, v, sizeof(*out));
}

/* ---- operations ------------------------------------------------------------- */

static bool key_ok(uint64_t key)
{
	return key <= LOCO_SHERMAN_KEY_MAX;
}

static int write_op(struct loco_sherman_worker *w, enum sh_op op, uint64_t key,
		    const void *val)
{
	if (!key_ok(key) || (op != SH_DELETE && !val))
		return -EINVAL;
	int rc = sh_ready(w);
	if (rc)
		return rc;
	return w->t->o.rtx ? sh_rtx_write(w, op, key, val) :
			     sh_plain_write(w, op, key, val);
}

int loco_sherman_insert(struct loco_sherman_worker *w, uint64_t key,
			const void *val)
{
	SH_INC(w, inserts);
	return write_op(w, SH_INSERT, key, val);
}

int loco_sherman_update(struct loco_sherman_worker *w, uint64_t key,
			const void *val)
{
	SH_INC(w, updates);
	return write_op(w, SH_UPDATE, key, val);
}

int loco_sherman_delete(struct loco_sherman_worker *w, uint64_t key)
{
	SH_INC(w, deletes);
	return write_op(w, SH_DELETE, key, NULL);
}

int loco_sherman_scan(struct loco_sherman_worker *w, uint64_t lo, uint64_t hi,
		      unsigned max, uint64_t *keys, void *vals, unsigned *n)
{
	if (lo > hi || !max || !key_ok(hi) || !keys || !vals || !n)
		return -EINVAL;
	int rc = sh_ready(w);
	if (rc)
		return rc;
	SH_INC(w, scans);
	return sh_scan(w, lo, hi, max, keys, vals, n);
}

int loco_sherman_repair_locks(struct loco_sherman_worker *w, int timeout_ms,
			      uint64_t *held)
{
	int rc = sh_ready(w);
	if (rc)
		return rc;
	if (w->t->o.rtx)
		return loco_rtx_repair_all(w->xw, timeout_ms, held);
	return sh_settle_locks(w, ~0u, false, timeout_ms, held);
}
