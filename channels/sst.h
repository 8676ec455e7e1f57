/* SPDX-License-Identifier: MIT */
/* SST, the shared state table (LOCO §5.1.2, after Derecho): one row per
 * participant, each an owned_var that its node writes and every other
 * node reads. A node stores its row and pushes it to all; it reads every
 * row locally, from its copies.
 *
 * The table does not know its participants' rows in advance: it creates
 * its own row at init and one row per peer from its join op, when
 * that peer joins the table. Names: "<sst>/ov<ID>", e.g. "bar/sst/ov2".
 *
 *	struct loco_sst sst;
 *	loco_sst_init(&sst, mgr, parent, "sst", sizeof(uint64_t), 0);
 *	loco_mgr_wait_ready(mgr, -1);
 *	loco_sst_store_mine(&sst, &v);
 *	loco_sst_push_broadcast(&sst, thr, 0, &ack);
 *	loco_sst_load(&sst, peer, &w); */
#ifndef LOCO_CHANNELS_SST_H
#define LOCO_CHANNELS_SST_H

#include <assert.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channels/owned_var.h>
#include <loco/channel.h>

struct loco_sst {
	struct loco_channel base;
	uint32_t len;                                /* bytes per row */
	/* rows[id]: node id's row once created (then never changes until
	 * fini); written by the join op on the control-plane thread. */
	struct loco_owned_var *_Atomic rows[LOCO_MAX_NODES];
};
static_assert(offsetof(struct loco_sst, base) == 0, "base first");

/* Create endpoint NAME (under PARENT, may be NULL) with rows of LEN bytes
 * (1..LOCO_OV_MAX_LEN, all zero at first) for this node and PARTICIPANTS
 * (0: every compute node), and start joining. A row that cannot be
 * created later fails the channel (loco_mgr_wait_ready reports it).
 * Returns 0, -EINVAL, -ENOMEM or -EEXIST; on failure nothing is left. */
int loco_sst_init(struct loco_sst *sst, struct loco_mgr *mgr,
		  struct loco_channel *parent, const char *name, uint32_t len,
		  uint64_t participants);

/* Finish the table and every row. Pushes must be complete. */
void loco_sst_fini(struct loco_sst *sst);

/* Bit mask of the table's nodes, this one included. */
static inline uint64_t loco_sst_members(const struct loco_sst *sst)
{
	return sst->base.participants |
	       UINT64_C(1) << loco_channel_self(&sst->base);
}

/* True once every member's row exists and has joined all members. */
bool loco_sst_ready(struct loco_sst *sst);

/* Node NODE's row, or NULL if not created yet (or not a member). */
struct loco_owned_var *loco_sst_row(struct loco_sst *sst, uint32_t node);

/* Make VAL (len bytes) this node's row; local until pushed. 0 always.
 * Ordering: as loco_owned_var_store (release).
 * Completion: synchronous.
 * Caller: one storing thread at a time. */
int loco_sst_store_mine(struct loco_sst *sst, const void *val);

/* Push this node's row to every other member: one WRITE each (plus one
 * zero-length READ each with LOCO_PUSH_PLACE). Returns 0, -ENOTCONN if a
 * member has not joined the row yet (nothing posted), or a post error.
 * Ordering: as loco_owned_var_push: placed in push order per member;
 *   visible once placed (ack with LOCO_PUSH_PLACE, else a later fence).
 * Completion: ACK (unioned, may be NULL) covers every member.
 * Caller: the same thread for every push of this table. */
int loco_sst_push_broadcast(struct loco_sst *sst, struct loco_thread *thr,
			    unsigned flags, struct loco_ack *ack);

/* Read NODE's row from the local copy into DST (len bytes). Returns 0,
 * -EINVAL (not a member), -ENOENT (row not created yet) or -LOCO_ETORN
 * (see loco_owned_var_load).
 * Ordering: acquire (loco_owned_var_load): a row value carries what its
 *   node fenced before pushing it.
 * Completion: synchronous (local).
 * Caller: any thread. */
int loco_sst_load(struct loco_sst *sst, uint32_t node, void *dst);

#endif
