/* SPDX-License-Identifier: MIT */
/* Internals of the kvstore shared by kv.c, kv_index.c and kv_monitor.c. */
#ifndef LOCO_APPS_KV_INTERNAL_H
#define LOCO_APPS_KV_INTERNAL_H

#include "apps/kvstore/kv.h"

/* kv_index.c: the local index (RCU readers: registered threads). */
struct kv_loc {
	uint32_t host;
	uint64_t slot, counter;
};
int kv_index_create(struct kv_store *kv);
void kv_index_destroy(struct kv_store *kv);
bool kv_index_find(struct kv_store *kv, uint64_t key, struct kv_loc *out);
int kv_index_put(struct kv_store *kv, uint64_t key, const struct kv_loc *loc);
/* Drop KEY's entry if it is LOC. */
void kv_index_del(struct kv_store *kv, uint64_t key, const struct kv_loc *loc);
void kv_rcu_online(void);
void kv_rcu_offline(void);

/* kv_monitor.c: tracker requests and the monitor thread. */
/* Broadcast N messages on this node's tracker (through the monitor) and
 * wait until every other node applied and acknowledged them. Returns 0,
 * -ETIMEDOUT (default timeout; the messages may still be applied later)
 * or the monitor's error.
 * Ordering: every node applies the messages in request order, and
 *   before acknowledging them, so on return every index holds their
 *   effect. What they point to is not fenced here: fence it first if
 *   readers must find it placed.
 * Completion: synchronous.
 * Caller: any thread; several at once (requests queue in order). */
int kv_broadcast(struct kv_store *kv, const struct kv_msg *msgs, unsigned n);
void *kv_monitor_main(void *arg);

/* kv.c, for the monitor: return own slot SLOT to the free list. */
void kv_slot_free(struct kv_store *kv, uint64_t slot);

#endif
