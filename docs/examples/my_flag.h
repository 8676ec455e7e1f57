/* SPDX-License-Identifier: MIT */
/* my_flag: see my_flag.c and docs/write-your-own-channel.md. */
#ifndef MY_FLAG_H
#define MY_FLAG_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channel.h>

struct my_flag {
	struct loco_channel base;   /* first: the core hands back &base */
	struct loco_region *word;   /* this node's copy */
	unsigned idx;               /* expectation index of "word" */
	uint64_t src;               /* the WRITEs' source, busy until placed */
};
static_assert(offsetof(struct my_flag, base) == 0, "base first");

/* Endpoint NAME under PARENT (may be NULL) for PARTICIPANTS (0: every
 * compute node); starts joining. 0, -EINVAL, -ENOMEM or -EEXIST; on
 * failure nothing is left to finish. */
int my_flag_init(struct my_flag *f, struct loco_mgr *mgr,
		 struct loco_channel *parent, const char *name,
		 uint64_t participants);

/* Raise the flag to V at every participant. Returns 0, -ENOTCONN (a
 * participant has not joined yet), -ETIMEDOUT or an op error.
 * Ordering: a release: this thread's remote writes before the call are
 *   placed before any participant sees V.
 * Completion: synchronous; V is placed (visible) at every participant.
 * Caller: one setting thread at a time, cluster-wide, with V growing. */
int my_flag_set(struct my_flag *f, struct loco_thread *thr, uint64_t v);

/* Wait until this node's copy is at least V: 0 or -ETIMEDOUT after
 * TIMEOUT_MS (< 0: the manager's default).
 * Ordering: an acquire: after the return this node sees what the setter
 *   placed before raising the flag to V.
 * Completion: synchronous, local (no remote op).
 * Caller: any thread. */
int my_flag_wait(struct my_flag *f, uint64_t v, int timeout_ms);

/* Unregister and free the copy. The setter's my_flag_set has returned. */
void my_flag_fini(struct my_flag *f);

#endif
