/* SPDX-License-Identifier: MIT */
/* kvstore: set-up, slots and the operations (see kv.h for the protocol
 * and the linearization points). Every slot access goes through the
 * transport, this node's own slots included (on RDMA the CPU and the NIC
 * do not order their accesses to the same memory). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "apps/kvstore/kv_internal.h"

#define HDR_WORDS (sizeof(struct kv_slot_hdr) / 8)

static uint32_t round8(uint32_t n)
{
	return (n + 7) & ~7u;
}

/* ---- set-up ----------------------------------------------------------- */

static int config_check(const struct kv_config *c)
{
	if (!c->capacity || c->value_size < 8 || c->value_size > KV_VALUE_MAX ||
	    !c->nlocks || (c->ring_size && c->ring_size < LOCO_RB_MIN_SIZE) ||
	    (c->remote_data && c->data_node >= LOCO_MAX_NODES))
		return -EINVAL;
	uint64_t slot = sizeof(struct kv_slot_hdr) + round8(c->value_size);
	return c->capacity > UINT64_MAX / slot ? -EINVAL : 0;
}

static int alloc_init(struct kv_store *kv)
{
	uint64_t n = kv->cfg.capacity;
	kv->free_slot = malloc(n * sizeof(*kv->free_slot));
	kv->counter = calloc(n, sizeof(*kv->counter));
	if (!kv->free_slot || !kv->counter)
		return -ENOMEM;
	/* A stack: slot 0 is handed out first. */
	for (uint64_t i = 0; i < n; i++)
		kv->free_slot[i] = n - 1 - i;
	kv->nfree = n;
	return 0;
}

static void members_init(struct kv_store *kv)
{
	uint64_t m = kv->base.participants | UINT64_C(1) << kv->self;
	kv->nmembers = 0;
	for (; m; m &= m - 1) {
		uint32_t id = (uint32_t)__builtin_ctzll(m);
		kv->member_of[id] = kv->nmembers;
		kv->node[kv->nmembers++] = id;
	}
}

static int trackers_init(struct kv_store *kv)
{
	uint64_t size = kv->cfg.ring_size ? kv->cfg.ring_size : KV_RING_DEFAULT;
	kv->tr = calloc(kv->nmembers, sizeof(*kv->tr));
	if (!kv->tr)
		return -ENOMEM;
	for (unsigned i = 0; i < kv->nmembers; i++) {
		char name[16];
		snprintf(name, sizeof(name), "tr%u", kv->node[i]);
		int rc = loco_ringbuffer_init(&kv->tr[i], kv->base.mgr, &kv->base,
					      name, kv->node[i], size, 0);
		if (rc)
			return rc;
	}
	return 0;
}

/* The sub-channels; loco_channel_fini of the store finishes those made. */
static int subs_init(struct kv_store *kv)
{
	struct loco_mgr *mgr = kv->base.mgr;
	uint64_t area = kv->cfg.capacity * kv->slot_len;
	/* Slots are read and written, nothing else. */
	const unsigned access = LOCO_REGION_REMOTE_READ | LOCO_REGION_REMOTE_WRITE;
	int rc = kv->cfg.remote_data ?
		 loco_channel_open_hosted_ex(&kv->base, kv->cfg.data_node,
					     "slots", area * kv->nmembers, access,
					     &kv->slots) :
		 loco_shared_region_init_ex(&kv->data, mgr, &kv->base, "data",
					    area, 0, access);
	if (!rc)
		rc = loco_lock_array_init_ex(&kv->locks, mgr, &kv->base, "locks",
					     kv->cfg.nlocks, 0,
					     kv->cfg.hot_locks ? LOCO_REGION_HOT
							       : 0);
	return rc ? rc : trackers_init(kv);
}

/* The store's own memory (ops->fini: the sub-channels are finished). */
static void kv_release(struct loco_channel *ch)
{
	struct kv_store *kv = (struct kv_store *)ch;
	free(kv->tr);
	kv->tr = NULL;
	kv_index_destroy(kv);
	free(kv->free_slot);
	free(kv->counter);
	pthread_mutex_destroy(&kv->alloc_mu);
	pthread_mutex_destroy(&kv->req_mu);
}

static const struct loco_channel_ops kv_ops = {
	.fini = kv_release,
};

int kv_init(struct kv_store *kv, struct loco_mgr *mgr,
	    struct loco_channel *parent, const char *name,
	    const struct kv_config *cfg)
{
	int rc = config_check(cfg);
	if (rc)
		return rc;
	memset(kv, 0, sizeof(*kv));
	rc = loco_channel_init(&kv->base, mgr, parent, name, 0, &kv_ops);
	if (rc)
		return rc;
	kv->cfg = *cfg;
	kv->self = loco_channel_self(&kv->base);
	kv->slot_len = (uint32_t)sizeof(struct kv_slot_hdr) +
		       round8(cfg->value_size);
	members_init(kv);
	pthread_mutex_init(&kv->alloc_mu, NULL);
	pthread_mutex_init(&kv->req_mu, NULL);
	atomic_init(&kv->stop, false);
	atomic_init(&kv->error, 0);
	atomic_init(&kv->applied, 0);
	rc = alloc_init(kv);
	if (!rc)
		rc = kv_index_create(kv);
	if (!rc)
		rc = subs_init(kv);
	if (!rc)
		rc = loco_channel_join(&kv->base);
	if (rc)
		loco_channel_fini(&kv->base);
	return rc;
}

int kv_start(struct kv_store *kv)
{
	int rc = pthread_create(&kv->monitor, NULL, kv_monitor_main, kv);
	kv->running = !rc;
	return -rc;
}

void kv_stop(struct kv_store *kv)
{
	if (!kv->running)
		return;
	/* Relaxed: a stop flag; the join orders everything after it. */
	atomic_store_explicit(&kv->stop, true, memory_order_relaxed);
	pthread_join(kv->monitor, NULL);
	kv->running = false;
}

void kv_fini(struct kv_store *kv)
{
	loco_channel_fini(&kv->base);
}

void kv_store_stats(struct kv_store *kv, struct kv_stats *out)
{
	/* Relaxed: a statistic. */
	out->applied += atomic_load_explicit(&kv->applied, memory_order_relaxed);
}

/* ---- threads and get buffers ------------------------------------------- */

int kv_thread_init(struct kv_thread *t, struct kv_store *kv,
		   struct loco_thread *thr)
{
	memset(t, 0, sizeof(*t));
	t->kv = kv;
	t->thr = thr;
	t->wbuf = aligned_alloc(8, kv->slot_len);
	if (!t->wbuf)
		return -ENOMEM;
	kv_rcu_online();
	return 0;
}

void kv_thread_fini(struct kv_thread *t)
{
	kv_rcu_offline();
	free(t->wbuf);
	t->wbuf = NULL;
}

int kv_get_init(struct kv_get *g, const struct kv_store *kv)
{
	memset(g, 0, sizeof(*g));
	g->buf = aligned_alloc(8, kv->slot_len);
	return g->buf ? 0 : -ENOMEM;
}

void kv_get_fini(struct kv_get *g)
{
	free(g->buf);
	g->buf = NULL;
}

/* ---- slots -------------------------------------------------------------- */

/* Take a free slot of this node; *COUNTER gets its new insertion count. */
static int slot_alloc(struct kv_store *kv, uint64_t *slot, uint64_t *counter)
{
	int rc = -ENOSPC;
	pthread_mutex_lock(&kv->alloc_mu);
	if (kv->nfree) {
		*slot = kv->free_slot[--kv->nfree];
		*counter = ++kv->counter[*slot];
		rc = 0;
	}
	pthread_mutex_unlock(&kv->alloc_mu);
	return rc;
}

void kv_slot_free(struct kv_store *kv, uint64_t slot)
{
	pthread_mutex_lock(&kv->alloc_mu);
	bool ok = kv->nfree < kv->cfg.capacity;
	if (ok)
		kv->free_slot[kv->nfree++] = slot;
	pthread_mutex_unlock(&kv->alloc_mu);
	if (!ok)
		loco_err(kv->base.name, "slot %llu freed twice",
			 (unsigned long long)slot);
}

/* Checksum of a slot image W holding LEN value bytes. */
static uint64_t slot_sum(const uint64_t *w, uint32_t len)
{
	return XXH3_64bits(&w[1], 3 * 8 + len);
}

/* Build a slot image in W; returns its bytes (header + value). */
static uint32_t slot_image(uint64_t *w, uint64_t key, uint64_t counter,
			   bool valid, const void *val, uint32_t len)
{
	w[1] = key;
	w[2] = counter;
	w[3] = (uint64_t)len << 32 | (valid ? KV_META_VALID : 0);
	if (len) {
		w[HDR_WORDS + round8(len) / 8 - 1] = 0;
		memcpy(&w[HDR_WORDS], val, len);
	}
	w[0] = slot_sum(w, len);
	return (uint32_t)sizeof(struct kv_slot_hdr) + round8(len);
}

/* The node that holds HOST's slots. */
static uint32_t slot_node(const struct kv_store *kv, uint32_t host)
{
	return kv->cfg.remote_data ? kv->cfg.data_node : host;
}

/* The region holding SLOT of HOST, and its offset there (*OFF). */
static const struct loco_rregion *slot_rr(struct kv_store *kv, uint32_t host,
					  uint64_t slot, uint64_t *off)
{
	if (kv->cfg.remote_data) {
		*off = ((uint64_t)kv->member_of[host] * kv->cfg.capacity + slot) *
		       kv->slot_len;
		return &kv->slots;
	}
	*off = slot * kv->slot_len;
	return loco_shared_region_at(&kv->data, host);
}

static int slot_post_write(struct kv_thread *t, uint32_t host, uint64_t slot,
			   const void *img, uint32_t bytes, struct loco_ack *ack)
{
	uint64_t off;
	const struct loco_rregion *rr = slot_rr(t->kv, host, slot, &off);
	return rr ? loco_post_write(t->thr, rr, off, img, bytes, ack) : -EINVAL;
}

/* WRITE the first BYTES of t->wbuf to SLOT of HOST; complete (acked,
 * not necessarily placed) on return. FULL: the image's whole length
 * (remote data: what is written again after the data node's death). */
static int slot_write(struct kv_thread *t, uint32_t host, uint64_t slot,
		      uint32_t bytes, uint32_t full)
{
	struct loco_ack ack = { 0, 0 };
	int rc = slot_post_write(t, host, slot, t->wbuf, bytes, &ack);
	if (!rc)
		rc = loco_ack_wait(t->thr, &ack, -1);
	t->redo = t->kv->cfg.remote_data;
	t->redo_host = host;
	t->redo_slot = slot;
	t->redo_full = full;
	return rc;
}

/* Remote data whose node died under the open operation: wait for it,
 * write the operation's slot image again (the restart may have lost it),
 * and persist. -LOCO_EDOWN again is waited out again. */
static int slot_redo(struct kv_thread *t, int rc)
{
	struct kv_store *kv = t->kv;
	while (rc == -LOCO_EDOWN && kv->cfg.remote_data) {
		t->outages++;
		rc = loco_peer_wait(kv->base.mgr, kv->cfg.data_node, KV_BACK_MS);
		if (!rc && t->redo)
			rc = slot_write(t, t->redo_host, t->redo_slot,
					t->redo_full, t->redo_full);
		if (!rc)
			rc = loco_persist(t->thr, kv->cfg.data_node);
	}
	return rc;
}

/* Make the open operation's writes to HOST's slots durable (remote data
 * on a durable node), else place them: loco_persist is a pair fence on a
 * node without a durable image. */
static int slot_persist(struct kv_thread *t, uint32_t host)
{
	uint32_t node = slot_node(t->kv, host);
	int rc = t->kv->cfg.remote_data && !t->kv->cfg.broken_persist ?
		 loco_persist(t->thr, node) :
		 loco_fence(t->thr, LOCO_FENCE_PAIR, node);
	return slot_redo(t, rc);
}

int kv_probe_slots(struct kv_thread *t)
{
	uint64_t off, word;
	const struct loco_rregion *rr = slot_rr(t->kv, t->kv->self, 0, &off);
	return rr ? loco_read(t->thr, rr, off, &word, sizeof(word)) : -EINVAL;
}

/* ---- get ---------------------------------------------------------------- */

/* Whether an answer read from this node's own memory or index alone
 * needs the membership probe: with other members, unless the slots are
 * all on the data node (every slot READ is remote then). */
static bool probe_needed(const struct kv_store *kv, uint32_t host)
{
	return kv->nmembers > 1 && slot_node(kv, host) == kv->self;
}

/* The membership probe: post an 8-byte READ of another node's memory
 * (the next member's slot 0) into DST on ACK. This node's own index and
 * memory are not fenced: once the others fenced it and went on without
 * it (kv_monitor.c), its index misses their inserts and deletes, and a
 * lock or slot in its own memory is no proof. A READ of another node is
 * refused then (-LOCO_EFENCED); one that is not executed before the
 * fence was complete, so before any broadcast completed without this
 * node: what it looked up before the READ was up to date. */
static int probe_post(struct kv_thread *t, uint64_t *dst, struct loco_ack *ack)
{
	struct kv_store *kv = t->kv;
	uint32_t peer = kv->node[(kv->member_of[kv->self] + 1) % kv->nmembers];
	uint64_t off;
	const struct loco_rregion *rr = slot_rr(kv, peer, 0, &off);
	return rr ? loco_post_read(t->thr, rr, off, dst, 8, ack) : -EINVAL;
}

/* Look G's key up and post the READ of its slot (and the membership
 * probe when the answer would come from this node alone): 1 if done
 * (not indexed, one member: -ENOENT), 0 if posted, or a post error. */
static int get_post(struct kv_thread *t, struct kv_get *g)
{
	struct kv_loc loc;
	loco_ack_clear(&g->ack);
	g->absent = !kv_index_find(t->kv, g->key, &loc);
	if (g->absent) {
		g->rc = -ENOENT;
		if (!probe_needed(t->kv, t->kv->self))
			return 1;
		int rc = probe_post(t, &g->probe, &g->ack);
		g->busy = !rc;
		return rc;
	}
	g->host = loc.host;
	g->slot = loc.slot;
	g->counter = loc.counter;
	uint64_t off;
	const struct loco_rregion *rr = slot_rr(t->kv, loc.host, loc.slot, &off);
	int rc = rr ? loco_post_read(t->thr, rr, off, g->buf, t->kv->slot_len,
				     &g->ack) : -EINVAL;
	if (!rc && probe_needed(t->kv, loc.host))
		rc = probe_post(t, &g->probe, &g->ack);
	g->busy = !rc;
	return rc;
}

/* Judge the slot image G read: 0 (valid, the indexed insertion), -ENOENT
 * (another insertion or not valid) or -EAGAIN (torn: retry). */
static int get_check(struct kv_thread *t, struct kv_get *g)
{
	const struct kv_slot_hdr *h = (const void *)g->buf;
	uint32_t len = (uint32_t)(h->meta >> 32);
	if (len > t->kv->cfg.value_size || h->sum != slot_sum(g->buf, len)) {
		t->st.torn++;
		return -EAGAIN;
	}
	if (h->counter != g->counter || h->key != g->key) {
		t->st.stale++;
		return -ENOENT;
	}
	if (!(h->meta & KV_META_VALID)) {
		t->st.invalid++;
		return -ENOENT;
	}
	g->len = len;
	return 0;
}

int kv_get_start(struct kv_thread *t, struct kv_get *g, uint64_t key)
{
	g->key = key;
	g->busy = false;
	g->deadline = loco_now_ns() +
		      (uint64_t)loco_mgr_timeout_ms(t->kv->base.mgr) * 1000000u;
	return get_post(t, g);
}

int kv_get_poll(struct kv_thread *t, struct kv_get *g)
{
	if (!g->busy)
		return 1;
	int rc = loco_ack_test(t->thr, &g->ack);
	if (rc <= 0) {
		g->busy = rc == 0;
		return rc;
	}
	g->busy = false;
	if (g->absent)
		return 1;   /* g->rc: -ENOENT */
	rc = get_check(t, g);
	if (rc != -EAGAIN) {
		g->rc = rc;
		return 1;
	}
	/* Torn by a concurrent update or reuse: the whole get again (the
	 * index may have changed too), until the default timeout. */
	if (loco_now_ns() > g->deadline)
		return -LOCO_ETORN;
	return get_post(t, g);
}

int kv_get(struct kv_thread *t, struct kv_get *g, uint64_t key, void *val,
	   uint32_t *len)
{
	int rc = kv_get_start(t, g, key);
	while (rc == 0) {
		rc = loco_ack_wait(t->thr, &g->ack, -1);
		if (!rc)
			rc = kv_get_poll(t, g);
	}
	if (rc < 0)
		return rc;
	if (!g->rc) {
		memcpy(val, kv_get_value(g), g->len);
		*len = g->len;
	}
	return g->rc;
}

/* ---- locked operations -------------------------------------------------- */

/* Take KEY's lock. A lock in this node's own memory proves nothing of
 * its membership (see probe_post): the probe then follows the FAA. */
static int lock_key(struct kv_thread *t, uint64_t key)
{
	struct loco_ticket_lock *l = loco_lock_array_for_key(&t->kv->locks, key);
	int rc = loco_ticket_lock_lock(l, t->thr, -1);
	if (rc || t->kv->nmembers == 1 ||
	    loco_ticket_lock_host(l) != t->kv->self)
		return rc;
	struct loco_ack ack = { 0, 0 };
	rc = probe_post(t, &t->probe, &ack);
	if (!rc)
		rc = loco_ack_wait(t->thr, &ack, -1);
	if (rc)
		loco_ticket_lock_unlock(l, t->thr, LOCO_FENCE_PAIR,
					loco_ticket_lock_host(l));
	return rc;
}

/* An operation that failed with RC may have written part of its change,
 * and those writes may still execute: a peer that did not answer in time
 * (paused, not dead) runs the requests already sent to it when it wakes,
 * after the poster gave up. Released, the lock would let others act on a
 * half-deleted key (cleared valid bit, no broadcast) or under a late
 * slot WRITE; a pause test on ucx-tcp recorded such a history (a delete
 * timed out, node 2 later found the key absent, then deleted it). Such
 * a lock stays held, as a killed node's does. The test-only broken
 * broadcast gives up and releases on purpose. */
static bool maybe_in_flight(const struct kv_store *kv, int rc)
{
	return (rc == -ETIMEDOUT || rc == -ECONNRESET) &&
	       !kv->cfg.broken_broadcast;
}

/* Release KEY's lock after fencing this thread's writes to HOST (all the
 * protected writes go there). RC: the operation's result; an unlock error
 * replaces a result (0, -EEXIST, -ENOENT): its writes may not be placed. */
static int unlock_key(struct kv_thread *t, uint64_t key, uint32_t host, int rc)
{
	/* A fenced node releases nothing: its operation may be half done
	 * (its broadcast cut short), and a lock in its own memory is not
	 * fenced. The lock stays held, as a killed node's would. */
	if (loco_self_fenced(t->kv->base.mgr))
		return rc ? rc : -LOCO_EFENCED;
	if (maybe_in_flight(t->kv, rc)) {
		loco_warn("kv", "node %u: key %llu: %s: the operation may be "
			  "half done and its writes may still land; the key's "
			  "lock stays held", t->kv->self,
			  (unsigned long long)key, loco_strerror(rc));
		return rc;
	}
	bool result = !rc || rc == -EEXIST || rc == -ENOENT;
	/* Remote data: the writes durable (a durable data node) before the
	 * lock goes, so an acknowledged write survives the node's death. */
	if (result && t->redo)
		rc = slot_persist(t, host);
	t->redo = false;
	/* The test-only broken variant fences the wrong pair (this node):
	 * a write to another host may still be unplaced after the unlock. */
	host = t->kv->cfg.broken_fence ? t->kv->self : slot_node(t->kv, host);
	/* Release: the unlock's fence places the writes before the next
	 * holder's acquire (see loco_ticket_lock_unlock). */
	int urc = loco_ticket_lock_unlock(
		loco_lock_array_for_key(&t->kv->locks, key), t->thr,
		LOCO_FENCE_PAIR, host);
	result = !rc || rc == -EEXIST || rc == -ENOENT;
	return urc && result ? urc : rc;
}

/* Insert KEY (absent, lock held) into a free slot of this node. */
static int insert_locked(struct kv_thread *t, uint64_t key, const void *val,
			 uint32_t len)
{
	struct kv_store *kv = t->kv;
	struct kv_loc loc = { .host = kv->self };
	int rc = slot_alloc(kv, &loc.slot, &loc.counter);
	if (rc)
		return rc;
	uint32_t bytes = slot_image(t->wbuf, key, loc.counter, false, val, len);
	rc = slot_redo(t, slot_write(t, kv->self, loc.slot, bytes, bytes));
	if (!rc)
		rc = kv_index_put(kv, key, &loc);
	if (rc) {
		kv_slot_free(kv, loc.slot);
		return rc;
	}
	struct kv_msg m = { KV_MSG_INSERT, key, kv->self, loc.slot, loc.counter };
	rc = kv_broadcast(kv, &m, 1);
	if (rc)
		return rc;
	/* Every node indexed the key: set the valid bit (same QP as the
	 * slot WRITE, so placed after it); the unlock fences it. */
	t->wbuf[3] |= KV_META_VALID;
	t->wbuf[0] = slot_sum(t->wbuf, len);
	return slot_redo(t, slot_write(t, kv->self, loc.slot,
				       sizeof(struct kv_slot_hdr), bytes));
}

/* Delete KEY at LOC (lock held). */
static int delete_locked(struct kv_thread *t, uint64_t key,
			 const struct kv_loc *loc)
{
	struct kv_store *kv = t->kv;
	uint32_t bytes = slot_image(t->wbuf, key, loc->counter, false, NULL, 0);
	int rc = slot_redo(t, slot_write(t, loc->host, loc->slot, bytes, bytes));
	/* Release: the cleared valid bit (the linearization point) is placed
	 * (durable, remote data) before any node learns of the delete from
	 * the tracker. */
	if (!rc)
		rc = slot_persist(t, loc->host);
	if (rc)
		return rc;
	struct kv_msg m = { KV_MSG_DELETE, key, loc->host, loc->slot,
			    loc->counter };
	rc = kv_broadcast(kv, &m, 1);
	if (rc)
		return rc;
	kv_index_del(kv, key, loc);
	/* Another host frees its slot when it applies the message. */
	if (loc->host == kv->self)
		kv_slot_free(kv, loc->slot);
	return 0;
}

/* Rewrite KEY's slot at LOC in place (lock held); the unlock fences it. */
static int update_locked(struct kv_thread *t, uint64_t key,
			 const struct kv_loc *loc, const void *val, uint32_t len)
{
	uint32_t bytes = slot_image(t->wbuf, key, loc->counter, true, val, len);
	return slot_redo(t, slot_write(t, loc->host, loc->slot, bytes, bytes));
}

/* Update KEY at LOC and release its lock. When the lock lives at the
 * slot's host (the drivers' default: keys prefilled where their locks
 * are; slots in the compute nodes, which need no persist), the slot WRITE
 * and the release FAA go in one doorbell: one QP places the WRITE (the
 * update's linearization point) before serving moves, so no fence READ
 * and one round trip fewer. Else as update_locked then unlock_key. */
static int update_unlock(struct kv_thread *t, uint64_t key,
			 const struct kv_loc *loc, const void *val, uint32_t len)
{
	struct kv_store *kv = t->kv;
	struct loco_ticket_lock *l = loco_lock_array_for_key(&kv->locks, key);
	uint64_t off;
	const struct loco_rregion *rr = slot_rr(kv, loc->host, loc->slot, &off);
	if (loco_ticket_lock_host(l) != slot_node(kv, loc->host) ||
	    kv->cfg.remote_data || kv->cfg.broken_fence || !rr)
		return unlock_key(t, key, loc->host,
				  update_locked(t, key, loc, val, len));
	struct loco_tl_release r;
	struct loco_batch b;
	struct loco_ack ack = { 0, 0 };
	uint32_t bytes = slot_image(t->wbuf, key, loc->counter, true, val, len);
	loco_batch_init(&b, t->thr);
	loco_batch_write(&b, rr, off, t->wbuf, bytes);
	int prc = loco_ticket_lock_unlock_post(l, t->thr, &b, &r);
	int brc = loco_batch_post(&b, &ack);
	if (!brc)
		brc = loco_ack_wait(t->thr, &ack, -1);
	/* Release: the FAA follows the WRITE on one QP (or, handing over,
	 * the pair fence places it). */
	int urc = loco_ticket_lock_unlock_finish(l, t->thr, &r, brc,
						 LOCO_FENCE_PAIR, loc->host);
	return prc ? prc : urc;
}

static bool len_ok(const struct kv_thread *t, uint32_t len)
{
	return len && len <= t->kv->cfg.value_size;
}

int kv_insert(struct kv_thread *t, uint64_t key, const void *val, uint32_t len)
{
	if (!len_ok(t, len))
		return -EINVAL;
	int rc = lock_key(t, key);
	if (rc)
		return rc;
	struct kv_loc loc;
	rc = kv_index_find(t->kv, key, &loc) ? -EEXIST :
	     insert_locked(t, key, val, len);
	return unlock_key(t, key, t->kv->self, rc);
}

int kv_update(struct kv_thread *t, uint64_t key, const void *val, uint32_t len)
{
	if (!len_ok(t, len))
		return -EINVAL;
	int rc = lock_key(t, key);
	if (rc)
		return rc;
	struct kv_loc loc = { .host = t->kv->self };
	if (kv_index_find(t->kv, key, &loc))
		return update_unlock(t, key, &loc, val, len);
	return unlock_key(t, key, loc.host, -ENOENT);
}

int kv_put(struct kv_thread *t, uint64_t key, const void *val, uint32_t len)
{
	if (!len_ok(t, len))
		return -EINVAL;
	int rc = lock_key(t, key);
	if (rc)
		return rc;
	struct kv_loc loc = { .host = t->kv->self };
	if (kv_index_find(t->kv, key, &loc))
		return update_unlock(t, key, &loc, val, len);
	return unlock_key(t, key, loc.host, insert_locked(t, key, val, len));
}

int kv_delete(struct kv_thread *t, uint64_t key)
{
	int rc = lock_key(t, key);
	if (rc)
		return rc;
	struct kv_loc loc = { .host = t->kv->self };
	rc = kv_index_find(t->kv, key, &loc) ? delete_locked(t, key, &loc) :
	     -ENOENT;
	return unlock_key(t, key, loc.host, rc);
}

/* ---- bulk load ------------------------------------------------------------ */

/* WRITE the N images of IMG (BYTES each) to this node's slots that MSGS
 * name, then place them (durable with remote data), waiting out the data
 * node's death (every image written again). */
static int load_put(struct kv_thread *t, const uint64_t *img, uint32_t bytes,
		    const struct kv_msg *msgs, unsigned n)
{
	struct kv_store *kv = t->kv;
	int rc;
	do {
		struct loco_ack ack = { 0, 0 };
		rc = 0;
		for (unsigned i = 0; !rc && i < n; i++)
			rc = slot_post_write(t, kv->self, msgs[i].slot,
					     img + (size_t)i * kv->slot_len / 8,
					     bytes, &ack);
		int wrc = loco_ack_wait(t->thr, &ack, -1);
		rc = rc ? rc : wrc;
		/* Release: the slots are placed before any node can index
		 * them. */
		if (!rc)
			rc = kv->cfg.remote_data ?
			     loco_persist(t->thr, kv->cfg.data_node) :
			     loco_fence(t->thr, LOCO_FENCE_PAIR, kv->self);
		if (rc == -LOCO_EDOWN && kv->cfg.remote_data) {
			t->outages++;
			rc = loco_peer_wait(kv->base.mgr, kv->cfg.data_node,
					    KV_BACK_MS);
			if (!rc)
				rc = -LOCO_EDOWN;
		}
	} while (rc == -LOCO_EDOWN && kv->cfg.remote_data);
	return rc;
}

/* Fill N slot images for KEYS into fresh slots of this node (valid at
 * once), index them here and write them; *MSGS gets the tracker
 * messages. */
static int load_slots(struct kv_thread *t, const uint64_t *keys,
		      const uint8_t *vals, uint32_t len, unsigned n,
		      uint64_t *img, struct kv_msg *msgs)
{
	struct kv_store *kv = t->kv;
	uint32_t bytes = 0;
	int rc = 0;
	for (unsigned i = 0; !rc && i < n; i++) {
		struct kv_loc loc = { .host = kv->self };
		uint64_t *w = img + (size_t)i * kv->slot_len / 8;
		rc = slot_alloc(kv, &loc.slot, &loc.counter);
		if (rc)
			break;
		bytes = slot_image(w, keys[i], loc.counter, true,
				   vals + (size_t)i * len, len);
		rc = kv_index_put(kv, keys[i], &loc);
		msgs[i] = (struct kv_msg){ KV_MSG_INSERT, keys[i], kv->self,
					   loc.slot, loc.counter };
	}
	return rc ? rc : load_put(t, img, bytes, msgs, n);
}

int kv_load(struct kv_thread *t, const uint64_t *keys, const void *vals,
	    uint32_t len, unsigned n)
{
	struct kv_store *kv = t->kv;
	if (!len_ok(t, len) || !n || n > KV_LOAD_MAX)
		return -EINVAL;
	uint64_t *img = malloc((size_t)n * kv->slot_len);
	struct kv_msg *msgs = malloc((size_t)n * sizeof(*msgs));
	int rc = img && msgs ? 0 : -ENOMEM;
	if (!rc)
		rc = load_slots(t, keys, vals, len, n, img, msgs);
	if (!rc) {
			rc = kv_broadcast(kv, msgs, n);
	}
	free(img);
	free(msgs);
	return rc;
}
