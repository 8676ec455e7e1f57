/* SPDX-License-Identifier: MIT */
/* The kvstore's local index: liburcu's lock-free resizable hash table
 * (cds_lfht, memb flavour) from key to location. Entries are immutable:
 * a change replaces the node, and replaced or removed nodes are freed
 * after a grace period (call_rcu), so a reader copies an entry under
 * rcu_read_lock without further locking.
 *
 * Writers of one key are serialized by the key's lock (the application
 * thread that holds it, or the monitor applying the message of the node
 * that holds it, which waits for our acknowledgement before it unlocks).
 *
 * Ordering: cds_lfht's add/replace/del issue full barriers around their
 * commit, and lookups are rcu_dereference (dependency-ordered) loads, so
 * an entry applied before the monitor's acknowledgement push (a release,
 * in the ringbuffer) is seen by every lookup that starts after a node
 * learned of that acknowledgement. */
#include <errno.h>
#include <stdlib.h>

#include <urcu.h>
#include <urcu/rculfhash.h>

#include "apps/common/rcu_tsan.h"
#include "apps/kvstore/kv_internal.h"

#define INDEX_INIT_BUCKETS 1024

struct kv_entry {
	struct cds_lfht_node node;
	uint64_t key;
	struct kv_loc loc;
	struct rcu_head rcu;
};

/* Registrations of the calling OS thread (several kv_threads may share
 * one; RCU wants one registration per thread). */
static _Thread_local unsigned rcu_refs;

void kv_rcu_online(void)
{
	if (rcu_refs++ == 0)
		rcu_register_thread();
}

void kv_rcu_offline(void)
{
	if (--rcu_refs == 0)
		rcu_unregister_thread();
}

/* splitmix64's finalizer: keys are often small consecutive integers. */
static unsigned long key_hash(uint64_t key)
{
	key ^= key >> 30;
	key *= UINT64_C(0xbf58476d1ce4e5b9);
	key ^= key >> 27;
	key *= UINT64_C(0x94d049bb133111eb);
	key ^= key >> 31;
	return (unsigned long)key;
}

static int key_match(struct cds_lfht_node *node, const void *key)
{
	struct kv_entry *e = caa_container_of(node, struct kv_entry, node);
	tsan_acquire(e);
	bool match = e->key == *(const uint64_t *)key;
	tsan_release(e);
	return match;
}

static void entry_free_rcu(struct rcu_head *head)
{
	struct kv_entry *e = caa_container_of(head, struct kv_entry, rcu);
	tsan_acquire(e);
	free(e);
}

/* Copy E's location (E found by a lookup under rcu_read_lock). */
static void entry_loc(struct kv_entry *e, struct kv_loc *out)
{
	tsan_acquire(e);
	*out = e->loc;
	tsan_release(e);
}

int kv_index_create(struct kv_store *kv)
{
	kv->index = cds_lfht_new(INDEX_INIT_BUCKETS, INDEX_INIT_BUCKETS, 0,
				 CDS_LFHT_AUTO_RESIZE | CDS_LFHT_ACCOUNTING,
				 NULL);
	return kv->index ? 0 : -ENOMEM;
}

/* No reader or writer may be left; the calling thread need not be
 * registered. */
void kv_index_destroy(struct kv_store *kv)
{
	struct cds_lfht_iter it;
	struct kv_entry *e;
	if (!kv->index)
		return;
	kv_rcu_online();
	rcu_read_lock();
	cds_lfht_for_each_entry(kv->index, &it, e, node) {
		if (!cds_lfht_del(kv->index, &e->node))
			call_rcu(&e->rcu, entry_free_rcu);
	}
	rcu_read_unlock();
	/* Every callback queued by any thread has run: the nodes are free. */
	rcu_barrier();
	kv_rcu_offline();
	cds_lfht_destroy(kv->index, NULL);
	kv->index = NULL;
}

bool kv_index_find(struct kv_store *kv, uint64_t key, struct kv_loc *out)
{
	struct cds_lfht_iter it;
	rcu_read_lock();
	cds_lfht_lookup(kv->index, key_hash(key), key_match, &key, &it);
	struct cds_lfht_node *n = cds_lfht_iter_get_node(&it);
	if (n)
		entry_loc(caa_container_of(n, struct kv_entry, node), out);
	rcu_read_unlock();
	return n != NULL;
}

int kv_index_put(struct kv_store *kv, uint64_t key, const struct kv_loc *loc)
{
	struct kv_entry *e = malloc(sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->key = key;
	e->loc = *loc;
	cds_lfht_node_init(&e->node);
	tsan_release(e);
	rcu_read_lock();
	struct cds_lfht_node *old = cds_lfht_add_replace(
		kv->index, key_hash(key), key_match, &key, &e->node);
	rcu_read_unlock();
	if (old)
		call_rcu(&caa_container_of(old, struct kv_entry, node)->rcu,
			 entry_free_rcu);
	return 0;
}

void kv_index_del(struct kv_store *kv, uint64_t key, const struct kv_loc *loc)
{
	struct cds_lfht_iter it;
	rcu_read_lock();
	cds_lfht_lookup(kv->index, key_hash(key), key_match, &key, &it);
	struct cds_lfht_node *n = cds_lfht_iter_get_node(&it);
	struct kv_entry *e = n ? caa_container_of(n, struct kv_entry, node) : NULL;
	struct kv_loc at = { 0 };
	if (e)
		entry_loc(e, &at);
	if (e && at.host == loc->host && at.slot == loc->slot &&
	    at.counter == loc->counter && !cds_lfht_del(kv->index, n))
		call_rcu(&e->rcu, entry_free_rcu);
	rcu_read_unlock();
}
