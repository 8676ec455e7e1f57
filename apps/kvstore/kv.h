/* SPDX-License-Identifier: MIT */
/* kvstore (LOCO §6, proof in Appendix C): a linearizable map from 64-bit
 * keys to values of up to value_size bytes, composed of channels:
 *
 *  - "<kv>/data", a shared_region: every node's slots, each a struct
 *    kv_slot_hdr {sum, key, counter, meta} followed by the value. The
 *    counter counts the insertions into the slot (it tells a reused slot
 *    from the one an index entry meant), meta holds the valid bit and the
 *    value length, sum is XXH3-64 of everything after it, so a READ torn
 *    by a concurrent WRITE fails the check;
 *  - "<kv>/locks", a lock_array: key K is guarded by lock K mod nlocks;
 *  - "<kv>/tr<ID>", one tracker ringbuffer per node (its writer), on which
 *    that node broadcasts the location of every key it inserts or deletes;
 *  - a local index per node (liburcu's lock-free hash table) from each key
 *    to (host node, slot, counter). A monitor thread per node applies the
 *    other nodes' tracker messages to it, then acknowledges them.
 *
 * Operations:
 *  - get takes no lock: look the key up locally, READ the slot from its
 *    host, retry the whole get if the checksum fails, return EMPTY if the
 *    key is not indexed, the slot is not valid or its counter is not the
 *    indexed one (Appendix C, cases 1-4);
 *  - insert (under the key's lock): write the slot with the valid bit
 *    clear into a free slot of this node, index it, broadcast, wait until
 *    every node acknowledged (indexed it), set the valid bit (the
 *    linearization point), fence, unlock;
 *  - delete (under the lock): clear the valid bit (the linearization
 *    point) and fence, broadcast, wait for every acknowledgement, drop the
 *    index entry; the slot's host frees the slot;
 *  - update (under the lock): rewrite the slot in place, fence, unlock; put
 *    is update, or insert when the key is absent.
 *
 * Writes, inserts and deletes of one key are ordered by its lock (Lemma
 * C.1); a get's outcome is fixed by the READ it checks (Lemma C.2).
 *
 * Remote data (kv_config.remote_data): every node's slots live in one
 * hosted region "<kv>.slots" on memory node data_node instead of in the
 * nodes' own arenas (AsymNVM's split: data on a passive back end, the
 * logic, index and locks on the front ends). With a durable data node
 * every write is persisted before its key's lock is released, so an
 * acknowledged write survives the node's death (docs/durability.md); a
 * write whose data node dies meanwhile waits for it (loco_peer_wait) and
 * writes its whole slot image again, holding the lock, so it completes.
 * A get may return a value not yet persisted, which a power cut can take
 * back until the writer's persist (as in AsymNVM §4.1).
 *
 *	struct kv_store kv;
 *	kv_init(&kv, mgr, NULL, "kv", &cfg);
 *	loco_mgr_wait_ready(mgr, -1);
 *	kv_start(&kv);                      (the monitor thread)
 *	per thread: kv_thread_init(&t, &kv, thr); kv_put(&t, k, v, len); ...
 *	after every node's last operation: kv_stop(&kv); kv_fini(&kv);
 */
#ifndef LOCO_APPS_KV_H
#define LOCO_APPS_KV_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channels/lock_array.h>
#include <loco/channels/ringbuffer.h>
#include <loco/channels/shared_region.h>
#include <loco/channel.h>

#define KV_VALUE_MAX 4096         /* largest value_size */
#define KV_RING_DEFAULT (64u << 10)
#define KV_LOAD_MAX 256           /* keys per kv_load */
#define KV_BACK_MS 30000          /* wait for a dead data node's return */

/* Remote layout of a slot header; the value follows, padded to 8 bytes. */
struct kv_slot_hdr {
	uint64_t sum;       /* XXH3-64 of key, counter, meta and len value bytes */
	uint64_t key;
	uint64_t counter;   /* insertions into this slot so far (1, 2, ...) */
	uint64_t meta;      /* KV_META_VALID | len << 32 */
};
static_assert(sizeof(struct kv_slot_hdr) == 32, "remote layout");

#define KV_META_VALID UINT64_C(1)

/* Remote layout of a tracker message (a ringbuffer payload). */
struct kv_msg {
	uint64_t op;        /* KV_MSG_INSERT or KV_MSG_DELETE */
	uint64_t key;
	uint64_t node;      /* host of the slot */
	uint64_t slot;
	uint64_t counter;
};
static_assert(sizeof(struct kv_msg) == 40, "remote layout");

enum { KV_MSG_INSERT = 1, KV_MSG_DELETE = 2 };

struct kv_config {
	uint64_t capacity;      /* slots per node */
	uint32_t value_size;    /* largest value, 8..KV_VALUE_MAX */
	unsigned nlocks;        /* index locks */
	uint64_t ring_size;     /* bytes of each tracker (0: KV_RING_DEFAULT) */
	bool hot_locks;         /* lock words in device memory (LOCO_REGION_HOT) */
	bool remote_data;       /* slots on memory node data_node (above) */
	uint32_t data_node;
	/* Tests only: release the key locks without placing the protected
	 * writes to other hosts (a missing fence, which shm-weak exposes). */
	bool broken_fence;
	/* Tests only: remote data placed but not persisted before the
	 * unlock (a missing persist point, which a power cut exposes). */
	bool broken_persist;
	/* Tests only: a broadcast that timed out returns -ETIMEDOUT at once,
	 * without fencing the silent member (the key half indexed or half
	 * deleted, which a recorded run's check exposes). */
	bool broken_broadcast;
};

/* Counters of one node (the monitor's) or one kv_thread (the rest). */
struct kv_stats {
	uint64_t torn;          /* gets retried on a checksum mismatch */
	uint64_t stale;         /* gets that found another counter (EMPTY) */
	uint64_t invalid;       /* gets that found the valid bit clear (EMPTY) */
	uint64_t applied;       /* tracker messages applied (monitor) */
};

struct kv_req;

struct kv_store {
	struct loco_channel base;
	struct loco_shared_region data;  /* the nodes' own slots, or */
	struct loco_rregion slots;       /* remote_data: all of them */
	unsigned member_of[LOCO_MAX_NODES]; /* node id -> index in node[] */
	struct loco_lock_array locks;
	struct loco_ringbuffer *tr;     /* tr[i]: tracker written by node[i] */
	uint32_t node[LOCO_MAX_NODES];  /* members in id order */
	unsigned nmembers;
	uint32_t self;
	struct kv_config cfg;
	uint32_t slot_len;              /* header + value, padded */
	struct cds_lfht *index;
	/* Slot allocator of this node's slots (app threads and monitor). */
	pthread_mutex_t alloc_mu;
	uint64_t *free_slot, nfree;
	uint64_t *counter;              /* insertions into each own slot */
	/* Tracker requests (FIFO), under req_mu; see kv_monitor.c. */
	pthread_mutex_t req_mu;
	struct kv_req *req_head, *req_tail;
	/* Monitor thread. */
	pthread_t monitor;
	bool running;
	_Atomic bool stop;
	_Atomic int error;              /* the monitor's fatal error, sticky */
	_Atomic uint64_t applied;
	/* Members fenced for a broadcast they did not answer (a bit per node
	 * id), under req_mu; this node's tracker no longer waits for them. */
	uint64_t fenced;
	uint64_t sent_pos;              /* stream end of the last message sent
					 * (monitor, under req_mu) */
};
static_assert(offsetof(struct kv_store, base) == 0, "base first");

/* Per application thread: its loco context and WRITE source buffer. */
struct kv_thread {
	struct kv_store *kv;
	struct loco_thread *thr;
	uint64_t *wbuf;                 /* one slot image */
	struct kv_stats st;
	/* remote_data: the slot the open operation wrote (t->wbuf holds its
	 * whole image, FULL bytes): written again if the data node dies
	 * before the persist. */
	bool redo;
	uint32_t redo_host, redo_full;
	uint64_t redo_slot;
	uint64_t outages;               /* data node deaths waited out */
	uint64_t probe;                 /* the membership probe's READ */
};

/* An asynchronous get (a caller-owned slot of a window). */
struct kv_get {
	uint64_t key;
	uint32_t host;
	uint32_t len;                   /* value bytes, when found */
	uint64_t slot, counter;
	uint64_t *buf;                  /* READ destination: one slot */
	struct loco_ack ack;
	uint64_t deadline;
	bool busy;                      /* a READ is in flight */
	bool absent;                    /* not indexed: only the probe READ */
	int rc;                         /* 0 found, -ENOENT, or an error */
	uint64_t probe;                 /* the membership probe's READ */
};

/* Create endpoint NAME (under PARENT, may be NULL) on every compute node
 * with CFG (every node must pass the same), and start joining. Returns 0,
 * -EINVAL (bad config), -ENOMEM or a channel error; on failure nothing is
 * left to finish. */
int kv_init(struct kv_store *kv, struct loco_mgr *mgr,
	    struct loco_channel *parent, const char *name,
	    const struct kv_config *cfg);

/* Start the monitor thread; call after loco_mgr_wait_ready. */
int kv_start(struct kv_store *kv);

/* Stop the monitor. Every node must be done with its operations (the
 * others' inserts and deletes wait for this node's acknowledgements). */
void kv_stop(struct kv_store *kv);

/* Finish everything. The monitor stopped, every kv_thread finished. */
void kv_fini(struct kv_store *kv);

/* Node counters of the monitor (applied) into *OUT (added). */
void kv_store_stats(struct kv_store *kv, struct kv_stats *out);

/* Bind calling thread context THR to KV (registers the calling thread as
 * an RCU reader of the index; several kv_threads may share an OS thread).
 * Returns 0 or -ENOMEM. */
int kv_thread_init(struct kv_thread *t, struct kv_store *kv,
		   struct loco_thread *thr);
void kv_thread_fini(struct kv_thread *t);

/* Get buffers for G. Returns 0 or -ENOMEM. */
int kv_get_init(struct kv_get *g, const struct kv_store *kv);
void kv_get_fini(struct kv_get *g);

/* Start getting KEY into G: look it up in the local index and post the
 * READ of its slot. Returns 1 if G is already done (key not indexed:
 * g->rc = -ENOENT), 0 if the READ is in flight, or a post error.
 * Ordering: none; the outcome is fixed by the READ (kv_get_poll).
 * Completion: kv_get_poll returns 1.
 * Caller: T's thread; G not busy. */
int kv_get_start(struct kv_thread *t, struct kv_get *g, uint64_t key);

/* Progress G: 1 when done (g->rc 0 with the value at kv_get_value, or
 * -ENOENT), 0 while in flight (a torn READ is retried from the lookup),
 * or an error (-ETIMEDOUT past the default timeout of retries).
 * Ordering: a found value was the slot's whole content at the READ,
 *   whose counter matched the index and whose valid bit was set: the
 *   value of the last update placed before it (Appendix C, case 1).
 * Completion: polls T's completions, never waits.
 * Caller: T's thread. */
int kv_get_poll(struct kv_thread *t, struct kv_get *g);

static inline const void *kv_get_value(const struct kv_get *g)
{
	return (const struct kv_slot_hdr *)(const void *)g->buf + 1;
}

/* Synchronous get of KEY into VAL (value_size bytes); *LEN gets the
 * length. Returns 0, -ENOENT (absent) or an error.
 * Ordering: as kv_get_poll.
 * Completion: synchronous.
 * Caller: T's thread. */
int kv_get(struct kv_thread *t, struct kv_get *g, uint64_t key, void *val,
	   uint32_t *len);

/* READ one word of this node's first slot where the slots live (the
 * data node with remote data): 0, or -LOCO_EDOWN while that node is down
 * (tests wait for a memory node's death with it; nothing is written).
 * Ordering: none. Completion: synchronous. Caller: T's thread. */
int kv_probe_slots(struct kv_thread *t);

/* Insert KEY -> VAL (LEN bytes, 1..value_size) if KEY is absent.
 * Returns 0, -EEXIST (present, nothing changed), -ENOSPC (no free slot on
 * this node), -EINVAL, or an error (the outcome is then unknown).
 * Ordering: linearizes when the valid bit is placed, after every node
 *   indexed the key; the unlock's pair fence places it before return.
 * Completion: synchronous (a tracker round trip through every node).
 * Caller: T's thread. */
int kv_insert(struct kv_thread *t, uint64_t key, const void *val,
	      uint32_t len);

/* Replace the value of KEY if present. Returns 0, -ENOENT, -EINVAL or an
 * error (outcome unknown).
 * Ordering: linearizes when the slot WRITE is placed: the unlock's pair
 *   fence to the host places it before the lock is released.
 * Completion: synchronous.
 * Caller: T's thread. */
int kv_update(struct kv_thread *t, uint64_t key, const void *val,
	      uint32_t len);

/* KEY := VAL: kv_update if present, else kv_insert, under one lock hold.
 * Returns 0, -ENOSPC, -EINVAL or an error (outcome unknown).
 * Ordering: as kv_update or kv_insert.
 * Completion: synchronous.
 * Caller: T's thread. */
int kv_put(struct kv_thread *t, uint64_t key, const void *val, uint32_t len);

/* Remove KEY if present. Returns 0, -ENOENT or an error (outcome unknown).
 * Ordering: linearizes when the cleared valid bit is placed (a pair fence
 *   to the host, before the broadcast).
 * Completion: synchronous (a tracker round trip).
 * Caller: T's thread. */
int kv_delete(struct kv_thread *t, uint64_t key);

/* Bulk insert for a prefill: N (1..KV_LOAD_MAX) keys with values VALS
 * (N x LEN bytes). The keys must be absent, and no node may operate on
 * them until this returns: the slots are written valid at once, without
 * the keys' locks, and their locations go out in one tracker request.
 * Returns 0, -ENOSPC, -EINVAL or an error.
 * Ordering: on return every node indexes the keys and their slots are
 *   placed (a pair fence before the broadcast).
 * Completion: synchronous (one tracker round trip for all N).
 * Caller: T's thread. */
int kv_load(struct kv_thread *t, const uint64_t *keys, const void *vals,
	    uint32_t len, unsigned n);

#endif
