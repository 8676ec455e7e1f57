/* SPDX-License-Identifier: MIT */
/* lock_array: N ticket locks striped across the participants, for
 * structures that lock by key (the kvstore's index locks). Lock i is the
 * sub-channel "<array>/<i>" hosted at the (i mod P)-th member in id order,
 * P the number of members (participants and this node), so hosting and
 * its remote atomics spread evenly.
 *
 *	struct loco_lock_array locks;
 *	loco_lock_array_init(&locks, mgr, NULL, "locks", 64, 0);
 *	loco_mgr_wait_ready(mgr, -1);
 *	struct loco_ticket_lock *l = loco_lock_array_for_key(&locks, key);
 *	loco_ticket_lock_lock(l, thr, -1);
 *	...
 *	loco_ticket_lock_unlock(l, thr, LOCO_FENCE_THREAD, 0); */
#ifndef LOCO_CHANNELS_LOCK_ARRAY_H
#define LOCO_CHANNELS_LOCK_ARRAY_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channels/ticket_lock.h>
#include <loco/channel.h>

struct loco_lock_array {
	struct loco_channel base;
	unsigned n;
	struct loco_ticket_lock *locks;  /* n locks */
};
static_assert(offsetof(struct loco_lock_array, base) == 0, "base first");

/* Create endpoint NAME (under PARENT, may be NULL) of N >= 1 locks for
 * this node and PARTICIPANTS (0: every compute node), and start joining.
 * Every member must use the same N and PARTICIPANTS. Returns 0, -EINVAL,
 * -ENOMEM or -EEXIST; on failure nothing is left to finish. */
int loco_lock_array_init(struct loco_lock_array *a, struct loco_mgr *mgr,
			 struct loco_channel *parent, const char *name,
			 unsigned n, uint64_t participants);

/* As loco_lock_array_init with FLAGS: LOCO_REGION_HOT, each lock's two
 * words in its host's device memory while there is room (the lock table
 * of a kvstore is the classic use), the rest in the arena with one
 * warning per node; LOCO_TICKET_LOCK_SOLO, every lock used by one thread
 * context of this node (ticket_lock.h); or 0. Every member should pass
 * the same LOCO_REGION_HOT. */
int loco_lock_array_init_ex(struct loco_lock_array *a, struct loco_mgr *mgr,
			    struct loco_channel *parent, const char *name,
			    unsigned n, uint64_t participants, unsigned flags);

/* Finish every lock (see loco_ticket_lock_fini) and the array. */
void loco_lock_array_fini(struct loco_lock_array *a);

static inline unsigned loco_lock_array_size(const struct loco_lock_array *a)
{
	return a->n;
}

/* Lock I (< size). */
static inline struct loco_ticket_lock *
loco_lock_array_at(struct loco_lock_array *a, unsigned i)
{
	return &a->locks[i];
}

/* The lock of KEY: lock KEY mod size. */
static inline struct loco_ticket_lock *
loco_lock_array_for_key(struct loco_lock_array *a, uint64_t key)
{
	return &a->locks[key % a->n];
}

#endif
