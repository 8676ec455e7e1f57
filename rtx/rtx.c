/* SPDX-License-Identifier: MIT */
/* rtx object: options, the channel tree and its regions on the hosting
 * memory nodes, superblock, time base and tags, workers (thread slots,
 * incarnations), statistics. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "rtx/internal.h"

#define CFG_VERSION 2
#define EPOCH_SLACK_MS (3600u * 1000u)  /* clients with slower clocks */
#define HWM_AHEAD_MS 1000u             /* persisted lease headroom */
#define CLOCK_REFRESH_NS (10u * 1000000u) /* worker_now's offset re-read */
#define DEFAULT_MIN_CHUNKS 64u

/* ---- options ------------------------------------------------------------- */

static uint32_t round_up(uint32_t v, uint32_t a)
{
	return (v + a - 1) / a * a;
}

static void opts_defaults(struct loco_rtx_opts *o)
{
	if (!o->name)
		o->name = "rtx";
	if (!o->max_writes)
		o->max_writes = 16;
	if (!o->max_reads)
		o->max_reads = 64;
	if (!o->threads_per_node)
		o->threads_per_node = 8;
	if (!o->drift_ms)
		o->drift_ms = 8;
	if (!o->per_obj_us)
		o->per_obj_us = 100;
	if (!o->guard_us)
		o->guard_us = 500;
	if (!o->blocks) {
		uint64_t b = (uint64_t)o->objects * 8;
		uint64_t min = DEFAULT_MIN_CHUNKS * LOCO_RTX_CHUNK_BLOCKS;
		o->blocks = (uint32_t)(b < min ? min : b > UINT32_MAX / 2 ?
				       UINT32_MAX / 2 : b);
	}
}

static int opts_check(const struct loco_rtx_opts *o)
{
	if (!o->objects || !o->data_len || o->data_len > LOCO_RTX_DATA_MAX ||
	    o->max_writes > LOCO_RTX_WRITES_MAX || o->max_reads < o->max_writes ||
	    o->threads_per_node > 64 || o->blocks < 2 * LOCO_RTX_CHUNK_BLOCKS)
		return -EINVAL;
	return 0;
}

/* Hosting nodes: as given, else the first memory node, else the lowest
 * compute node. */
static int pick_nodes(struct loco_rtx *x)
{
	const struct loco_hosts *h = loco_mgr_hosts(x->base.mgr);
	uint64_t mask = x->o.mem_nodes;
	if (!mask) {
		int m = loco_mgr_first_memnode(x->base.mgr);
		for (uint32_t id = 0; m < 0 && id <= h->max_id; id++)
			if (h->node[id].present)
				m = (int)id;
		mask = m >= 0 ? UINT64_C(1) << m : 0;
	}
	for (uint64_t m = mask; m; m &= m - 1)
		if (!h->node[__builtin_ctzll(m)].present)
			return -EINVAL;
	if (!mask)
		return -EINVAL;
	x->node = calloc((size_t)__builtin_popcountll(mask), sizeof(*x->node));
	if (!x->node)
		return -ENOMEM;
	x->node_mask = mask;
	x->home = (uint32_t)__builtin_ctzll(mask);
	memset(x->node_idx, -1, sizeof(x->node_idx));
	for (uint64_t m = mask; m; m &= m - 1) {
		uint32_t id = (uint32_t)__builtin_ctzll(m);
		x->node_idx[id] = (int8_t)x->nnodes;
		x->node[x->nnodes++].id = id;
	}
	return 0;
}

static void layout(struct loco_rtx *x)
{
	const struct loco_hosts *h = loco_mgr_hosts(x->base.mgr);
	x->block_len = round_up(x->o.data_len, 8);
	x->nblocks = round_up(x->o.blocks, LOCO_RTX_CHUNK_BLOCKS);
	x->nchunks = x->nblocks / LOCO_RTX_CHUNK_BLOCKS;
	x->log_len = round_up((uint32_t)loco_rtx_log_bytes(x->o.max_writes), 64);
	x->nslots = LOCO_MAX_NODES * x->o.threads_per_node;
	x->scan_slots = (h->max_id + 1) * x->o.threads_per_node;
}

/* ---- channels, regions and superblock -------------------------------------
 * The rtx channel "<name>" has one sub-channel "<name>/m<id>" per hosting
 * node, which opens that node's regions "<name>/m<id>.<part>" there by
 * create-or-open (loco_channel_open_hosted). None of them has peers to
 * join: the memory is the meeting point, and clients come and go. */

static const char *const node_parts[] = { "meta", "data", "bitmap", "chunks" };
/* Least access of each part: TXObjs are read and CAS'd (locks, installs),
 * data blocks and the bitmap read and written, chunk owner words read
 * and CAS/FAA'd. At the home node: the superblock is CAS'd (set once),
 * the slot table read, written and FAA'd, the logs read, written and
 * CAS'd (a repairer's claim). */
static const unsigned node_access[] = {
	LOCO_REGION_REMOTE_READ | LOCO_REGION_REMOTE_ATOMIC,
	LOCO_REGION_REMOTE_READ | LOCO_REGION_REMOTE_WRITE,
	LOCO_REGION_REMOTE_READ | LOCO_REGION_REMOTE_WRITE,
	LOCO_REGION_REMOTE_READ | LOCO_REGION_REMOTE_ATOMIC,
};

static int open_node(struct loco_rtx *x, struct rtx_node *n)
{
	char name[16];
	snprintf(name, sizeof(name), "m%u", n->id);
	int rc = loco_channel_init(&n->base, x->base.mgr, &x->base, name,
				   UINT64_C(1) << loco_channel_self(&x->base), NULL);
	if (rc) {
		loco_err(x->base.name, "sub-channel name too long");
		return rc;
	}
	if (n->id == x->home) {
		rc = loco_channel_open_hosted_ex(&n->base, n->id, "super",
			sizeof(struct rtx_super), LOCO_REGION_REMOTE_ATOMIC,
			&x->super);
		if (!rc)
			rc = loco_channel_open_hosted(&n->base, n->id, "slots",
				(uint64_t)x->nslots * sizeof(struct rtx_slot_rec),
				&x->slots);
		if (!rc)
			rc = loco_channel_open_hosted(&n->base, n->id, "logs",
				(uint64_t)x->nslots * x->log_len, &x->logs);
	}
	uint64_t len[4] = {
		(uint64_t)x->o.objects * RTX_META_LEN,
		(uint64_t)x->nblocks * x->block_len,
		(uint64_t)x->nchunks * 8,
		rtx_want_off(x) + 8,   /* owner words, want word */
	};
	struct loco_rregion *out[4] = { &n->meta, &n->data, &n->bitmap,
					&n->chunks };
	for (unsigned i = 0; i < 4 && !rc; i++)
		rc = loco_channel_open_hosted_ex(&n->base, n->id, node_parts[i],
						 len[i], node_access[i], out[i]);
	return rc ? rc : loco_channel_join(&n->base);
}

/* The rtx channel and its m<id> sub-channels (its children), then the
 * array that holds them. */
static void channels_fini(struct loco_rtx *x)
{
	loco_channel_fini(&x->base);
	free(x->node);
	x->node = NULL;
}

static uint64_t cfg_hash(const struct loco_rtx *x)
{
	uint64_t v[] = { CFG_VERSION, x->o.objects, x->o.data_len, x->nblocks,
			 x->o.max_writes, x->o.threads_per_node, x->node_mask };
	uint64_t h = XXH3_64bits(v, sizeof(v));
	return h ? h : 1;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t realtime_ms(void)
{
	return realtime_ns() / 1000000u;
}

/* First creator: CAS the configuration hash and the epoch in; everyone
 * else finds them there. */
static int super_init(struct loco_rtx *x, struct loco_thread *thr)
{
	uint64_t want = cfg_hash(x), old = 0;
	int rc = loco_cas(thr, &x->super, offsetof(struct rtx_super, cfg), 0,
			  want, &old);
	if (!rc && old && old != want) {
		loco_err(x->base.name, "rtx exists with other options (layout "
			 "hash %016llx, ours %016llx)", (unsigned long long)old,
			 (unsigned long long)want);
		return -LOCO_EMISMATCH;
	}
	uint64_t epoch = realtime_ms() - EPOCH_SLACK_MS;
	if (!rc)
		rc = loco_cas(thr, &x->super, offsetof(struct rtx_super, epoch_ms),
			      0, epoch, &old);
	if (!rc)
		x->epoch_ms = old ? old : epoch;
	/* Every lease counts from the epoch: durable before any is taken. */
	if (!rc && (x->durable >> x->home & 1) && !x->o.no_persist)
		rc = loco_persist(thr, x->home);
	return rc;
}

static int rtx_setup(struct loco_rtx *x)
{
	struct loco_thread *thr;
	int rc = pick_nodes(x);
	if (rc == -EINVAL)
		loco_err(x->base.name, "no hosting node for the rtx");
	if (rc)
		return rc;
	layout(x);
	rc = loco_channel_join(&x->base);
	for (unsigned i = 0; i < x->nnodes && !rc; i++)
		rc = open_node(x, &x->node[i]);
	if (rc)
		return rc;
	for (unsigned i = 0; i < x->nnodes; i++)
		if (loco_peer_durable(x->base.mgr, x->node[i].id))
			x->durable |= UINT64_C(1) << x->node[i].id;
	rc = loco_thread_create(x->base.mgr, &thr);
	if (!rc) {
		rc = super_init(x, thr);
		loco_thread_destroy(thr);
	}
	return rc;
}

int loco_rtx_create(struct loco_mgr *mgr, const struct loco_rtx_opts *opts,
		    struct loco_rtx **out)
{
	struct loco_rtx *x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->o = *opts;
	opts_defaults(&x->o);
	int rc = opts_check(&x->o);
	if (!rc) {
		/* Only this node's bit: no peers to join (channel.h). */
		rc = loco_channel_init(&x->base, mgr, x->o.parent, x->o.name,
				       UINT64_C(1) << loco_mgr_id(mgr), NULL);
		if (rc)
			loco_err("rtx", "bad rtx name '%s'", x->o.name);
	}
	if (!rc) {
		x->o.name = x->base.name;
		pthread_mutex_init(&x->lock, NULL);
		rc = rtx_setup(x);
		if (rc) {
			channels_fini(x);
			pthread_mutex_destroy(&x->lock);
		}
	}
	if (rc) {
		free(x);
		return rc;
	}
	*out = x;
	return 0;
}

void loco_rtx_destroy(struct loco_rtx *x)
{
	if (!x)
		return;
	if (x->workers)
		loco_warn(x->base.name, "rtx destroyed with live workers");
	channels_fini(x);
	pthread_mutex_destroy(&x->lock);
	free(x);
}

/* ---- accessors ----------------------------------------------------------- */

loco_raddr_t loco_rtx_obj(const struct loco_rtx *x, uint32_t node,
			  uint32_t index)
{
	if (node >= LOCO_MAX_NODES || x->node_idx[node] < 0 ||
	    index >= x->o.objects)
		return LOCO_RADDR_NULL;
	const struct loco_rregion *m = &x->node[x->node_idx[node]].meta;
	return loco_raddr(node, m->off + (uint64_t)index * RTX_META_LEN);
}

uint32_t loco_rtx_data_len(const struct loco_rtx *x)
{
	return x->o.data_len;
}

uint64_t loco_rtx_nodes(const struct loco_rtx *x)
{
	return x->node_mask;
}

uint32_t loco_rtx_threads_per_node(const struct loco_rtx *x)
{
	return x->o.threads_per_node;
}

uint64_t rtx_clock_ns(void)
{
	uint64_t rt = realtime_ns();
	/* The skew at time 0 is the configured one: without any (the usual
	 * case) no CLOCK_MONOTONIC read is added. */
	int64_t d = loco_lease_skew_ns(0);
	if (d)
		d = loco_lease_skew_ns(loco_now_ns());
	return rt + (uint64_t)d;
}

uint64_t rtx_now_ms(const struct loco_rtx *x)
{
	uint64_t now = rtx_clock_ns() / 1000000u;
	return now > x->epoch_ms ? now - x->epoch_ms : 0;
}

uint64_t loco_rtx_now_ms(const struct loco_rtx *x)
{
	return rtx_now_ms(x);
}

uint64_t loco_rtx_lease_ms(const struct loco_rtx *x, unsigned nobj)
{
	return rtx_lease_ms(x, nobj);
}

int rtx_persist_post_slow(struct loco_rtx_worker *w, struct loco_ack *ack)
{
	int rc = 0;
	for (uint64_t m = w->x->durable; m && !rc; m &= m - 1)
		rc = loco_post_persist(w->thr, (uint32_t)__builtin_ctzll(m), ack);
	return rc;
}

int rtx_persist(struct loco_rtx_worker *w)
{
	struct loco_ack ack = { 0, 0 };
	int rc = rtx_persist_post(w, &ack);
	return rc ? rc : rtx_wait(w, &ack);
}

int rtx_persist_seen(struct loco_rtx_worker *w, const struct loco_rregion *rr,
		     uint64_t off, uint64_t len)
{
	if (w->x->o.no_persist || !(w->x->durable >> rr->node & 1))
		return 0;
	return loco_persist_range(w->thr, rr, off, len);
}

void rtx_sleep_us(unsigned us)
{
	struct timespec ts = { us / 1000000u, (long)(us % 1000000u) * 1000L };
	nanosleep(&ts, NULL);
}

/* ---- tags ---------------------------------------------------------------- */

/* CLOCK_MONOTONIC now, and in *MS the rtx time (rtx_clock_ns ms since
 * the epoch) from the same read: through the worker's offset between
 * CLOCK_REALTIME and CLOCK_MONOTONIC, read again every CLOCK_REFRESH_NS,
 * plus the lease clock's skew at that read. The offset changes only when
 * the realtime clock is stepped (NTP slews both clocks alike), and it is
 * read realtime first, so it errs low: a lease taken from it ends no
 * later than one from CLOCK_REALTIME itself (docs/rtx.md, "Clock
 * reads"). */
static uint64_t worker_now(struct loco_rtx_worker *w, uint64_t *ms)
{
	uint64_t mono = loco_now_ns();
	if (!w->clk_at || mono - w->clk_at >= CLOCK_REFRESH_NS) {
		uint64_t rt = realtime_ns();
		mono = loco_now_ns();
		w->clk_off = rt - mono;
		w->clk_at = mono;
	}
	int64_t skew = w->skewed ? loco_lease_skew_ns(mono) : 0;
	uint64_t now = (mono + w->clk_off + (uint64_t)skew) / 1000000u;
	*ms = now > w->x->epoch_ms ? now - w->x->epoch_ms : 0;
	return mono;
}

/* Persist a new lease high-water mark before any lease above the old one
 * is published, so a later incarnation of the slot starts above it. */
static int hwm_raise(struct loco_rtx_worker *w, uint64_t hwm)
{
	struct loco_rtx *x = w->x;
	uint64_t off = (uint64_t)w->slot * sizeof(struct rtx_slot_rec) +
		       offsetof(struct rtx_slot_rec, hwm_ms);
	w->hwm_ms = hwm;
	int rc = loco_write(w->thr, &x->slots, off, &w->hwm_ms, 8);
	/* Placed (and durable, on a durable home) before the lock words
	 * that carry the higher leases. */
	if (!rc)
		rc = loco_fence(w->thr, LOCO_FENCE_PAIR, x->home);
	return rc ? rc : rtx_persist(w);
}

int rtx_next_tag(struct loco_rtx_worker *w, unsigned nobj, uint64_t *tag)
{
	uint64_t ms;
	w->tag_ns = worker_now(w, &ms);
	uint64_t t = loco_lllock_tag_of(ms + rtx_lease_ms(w->x, nobj), 0);
	if (t <= w->tag)
		t = w->tag + 1;
	if ((t >> LOCO_LLLOCK_SEQ_BITS) >= w->hwm_ms) {
		int rc = hwm_raise(w, (t >> LOCO_LLLOCK_SEQ_BITS) + HWM_AHEAD_MS);
		if (rc)
			return rc;
	}
	w->tag = t;
	*tag = t;
	return 0;
}

uint64_t rtx_fresh_version(struct loco_rtx_worker *w)
{
	return loco_lllock_fresh(rtx_now_ms(w->x), w->slot, w->fresh_ctr++);
}

/* ---- statistics ---------------------------------------------------------- */

static_assert(sizeof(struct loco_rtx_stats) == RTX_NSTATS * sizeof(uint64_t),
	      "loco_rtx_stats: uint64_t fields only, one counter each");

static void stats_out(const uint64_t *v, struct loco_rtx_stats *out)
{
	memcpy(out, v, sizeof(*out));
}

static void counters_load(const struct rtx_counters *c, uint64_t *v)
{
	/* Unrolled: two instructions a counter instead of five. */
#pragma GCC unroll 32
	for (size_t i = 0; i < RTX_NSTATS; i++)
		/* Relaxed: statistics only. */
		v[i] = atomic_load_explicit(&c->v[i], memory_order_relaxed);
}

void loco_rtx_worker_stats(const struct loco_rtx_worker *w,
			   struct loco_rtx_stats *out)
{
	/* Straight into OUT (RTX_NSTATS uint64_t fields in counter order):
	 * benchmarks call this after every transaction. */
	counters_load(&w->st, (uint64_t *)(void *)out);
}

void loco_rtx_stats(struct loco_rtx *x, struct loco_rtx_stats *out)
{
	uint64_t sum[RTX_NSTATS], v[RTX_NSTATS];
	pthread_mutex_lock(&x->lock);
	memcpy(sum, x->retired, sizeof(sum));
	for (struct loco_rtx_worker *w = x->workers; w; w = w->next) {
		counters_load(&w->st, v);
		for (size_t i = 0; i < RTX_NSTATS; i++)
			sum[i] += v[i];
	}
	pthread_mutex_unlock(&x->lock);
	stats_out(sum, out);
}

/* ---- workers ------------------------------------------------------------- */

static int tidx_take(struct loco_rtx *x, uint32_t *tidx)
{
	int rc = -EBUSY;
	pthread_mutex_lock(&x->lock);
	for (uint32_t i = 0; i < x->o.threads_per_node; i++) {
		if (!(x->tidx_used & UINT64_C(1) << i)) {
			x->tidx_used |= UINT64_C(1) << i;
			*tidx = i;
			rc = 0;
			break;
		}
	}
	pthread_mutex_unlock(&x->lock);
	return rc;
}

static void tidx_put(struct loco_rtx *x, uint32_t tidx)
{
	pthread_mutex_lock(&x->lock);
	x->tidx_used &= ~(UINT64_C(1) << tidx);
	pthread_mutex_unlock(&x->lock);
}

static void worker_free(struct loco_rtx_worker *w)
{
	rtx_pools_fini(w);
	free(w->rs);
	free(w->ws);
	free(w->logbuf);
	free(w->rlog);
	free(w->copy);
	free(w->scan);
	free(w);
}

static int worker_alloc(struct loco_rtx *x, struct loco_rtx_worker **out)
{
	struct loco_rtx_worker *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->x = x;
	size_t dl = x->block_len, nr = x->o.max_reads, nw = x->o.max_writes;
	w->rs = calloc(nr, sizeof(*w->rs) + dl);
	w->ws = calloc(nw, sizeof(*w->ws) + dl);
	w->logbuf = aligned_alloc(64, x->log_len);
	w->rlog = aligned_alloc(64, x->log_len);
	w->copy = aligned_alloc(64, round_up(x->block_len, 64));
	w->scan = aligned_alloc(64, RTX_SCAN_BYTES);
	if (!w->rs || !w->ws || !w->logbuf || !w->rlog || !w->copy || !w->scan ||
	    rtx_pools_init(w)) {
		worker_free(w);
		return -ENOMEM;
	}
	/* Block-length strides: post_data WRITEs the values of new blocks in
	 * a row from their write-set buffers in one range. */
	uint8_t *rd = (uint8_t *)(w->rs + nr), *wd = (uint8_t *)(w->ws + nw);
	for (size_t i = 0; i < nr; i++)
		w->rs[i].data = rd + i * dl;
	for (size_t i = 0; i < nw; i++)
		w->ws[i].data = wd + i * dl;
	*out = w;
	return 0;
}

/* Take the slot: new incarnation, lease high-water mark, then settle what
 * the previous incarnation left (log, allocation chunks). */
static int slot_attach(struct loco_rtx_worker *w)
{
	struct loco_rtx *x = w->x;
	uint64_t rec = (uint64_t)w->slot * sizeof(struct rtx_slot_rec), old = 0;
	int rc = loco_faa(w->thr, &x->slots,
			  rec + offsetof(struct rtx_slot_rec, incarnation), 1, &old);
	/* The incarnation is in chunk owner words soon: durable first, or a
	 * power cut would hand it out again. */
	if (!rc)
		rc = rtx_persist(w);
	if (!rc)
		rc = loco_read(w->thr, &x->slots,
			       rec + offsetof(struct rtx_slot_rec, hwm_ms),
			       &w->hwm_ms, 8);
	if (rc)
		return rc;
	w->inc = old + 1;
	uint64_t start = rtx_now_ms(x);
	if (w->hwm_ms > start)
		start = w->hwm_ms;
	w->tag = loco_lllock_tag_of(start, 0);
	rc = rtx_recover_log(w, w->slot, &w->seq);
	return rc ? rc : rtx_adopt_chunks(w, w->slot, true);
}

int loco_rtx_worker_create(struct loco_rtx *x, struct loco_thread *thr,
			   struct loco_rtx_worker **out)
{
	struct loco_rtx_worker *w;
	uint32_t tidx;
	int rc = tidx_take(x, &tidx);
	if (rc)
		return rc;
	rc = worker_alloc(x, &w);
	if (rc) {
		tidx_put(x, tidx);
		return rc;
	}
	w->thr = thr;
	w->tidx = tidx;
	w->slot = loco_mgr_id(x->base.mgr) * x->o.threads_per_node + tidx;
	w->rng = (uint64_t)w->slot * 0x9e3779b97f4a7c15ull ^ loco_now_ns();
	/* No skew at time 0 means none at all (rtx_clock_ns relies on it
	 * too): worker_now then skips the call. */
	w->skewed = loco_lease_skew_ns(0) != 0;
	rc = slot_attach(w);
	if (rc) {
		loco_err(x->base.name, "slot %u: attach failed: %s", w->slot,
			 loco_strerror(rc));
		worker_free(w);
		tidx_put(x, tidx);
		return rc;
	}
	pthread_mutex_lock(&x->lock);
	w->next = x->workers;
	x->workers = w;
	pthread_mutex_unlock(&x->lock);
	*out = w;
	return 0;
}

static void worker_unlink(struct loco_rtx_worker *w)
{
	struct loco_rtx *x = w->x;
	uint64_t v[RTX_NSTATS];
	pthread_mutex_lock(&x->lock);
	for (struct loco_rtx_worker **pp = &x->workers; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	}
	counters_load(&w->st, v);
	for (size_t i = 0; i < RTX_NSTATS; i++)
		x->retired[i] += v[i];
	x->tidx_used &= ~(UINT64_C(1) << w->tidx);
	pthread_mutex_unlock(&x->lock);
}

int loco_rtx_worker_destroy(struct loco_rtx_worker *w)
{
	if (!w)
		return 0;
	if (w->active)
		loco_rtx_abort(w);
	int rc = rtx_pools_release(w);
	if (rc)
		loco_warn(w->x->base.name, "slot %u: giving chunks back: %s",
			  w->slot, loco_strerror(rc));
	rtx_worker_drop(w);
	return rc;
}

void rtx_worker_drop(struct loco_rtx_worker *w)
{
	worker_unlink(w);
	worker_free(w);
}

uint32_t loco_rtx_worker_slot(const struct loco_rtx_worker *w)
{
	return w->slot;
}

struct loco_thread *loco_rtx_worker_thread(const struct loco_rtx_worker *w)
{
	return w->thr;
}

void loco_rtx_set_hooks(struct loco_rtx_worker *w,
			const struct loco_rtx_hooks *hooks, void *arg)
{
	w->hooks = hooks;
	w->hook_arg = arg;
}
