/* SPDX-License-Identifier: MIT */
/* Channel base (LOCO §4): a named endpoint that owns local regions,
 * expects regions from its peers, and joins them through the control plane.
 * Concrete channels embed struct loco_channel first and describe what they
 * share with the core in an ops table:
 *
 *	struct my_chan { struct loco_channel base; ... };
 *	static_assert(offsetof(struct my_chan, base) == 0, "base first");
 *	static const struct loco_channel_ops my_chan_ops = {
 *		.join = my_chan_join,        (optional)
 *		.fini = my_chan_release,     (optional)
 *	};
 *
 * Names use '/' for sub-channels ("bar/sst/ov2") and '.' for regions
 * ("bar/sst/ov2.val"). Life cycle: loco_channel_init, add regions,
 * expectations and sub-channels, loco_channel_join (returns at once; the
 * control plane pairs the endpoint with each participant as they appear),
 * loco_mgr_wait_ready or loco_channel_wait, use, loco_channel_fini.
 *
 * Tree: a channel initialised with a PARENT is that parent's child, and
 * loco_channel_fini of a channel finishes its whole subtree in one order
 * (see there), so a channel's _init undoes a failure with one
 * loco_channel_fini of its base, and its _fini is that one call.
 *
 * Hosted regions: a channel may also keep regions on another node, usually
 * a memory node, which runs no channel code and serves create-or-open of
 * named regions (loco_channel_open_hosted). They take no part in joins:
 * every node that opens the same channel's region gets the same memory, and
 * a channel whose regions are all hosted has nobody to join. Such a channel
 * is initialised with only this node's bit as PARTICIPANTS; it is then
 * ready at once and never waits for compute peers, which may come later,
 * leave or die. */
#ifndef LOCO_CHANNEL_H
#define LOCO_CHANNEL_H

#include <stdbool.h>
#include <stdint.h>

#include <loco/loco.h>

#define LOCO_CHAN_REGIONS 4
#define LOCO_CHAN_HOSTED 8
#define LOCO_REGION_NAME_MAX 32

struct loco_channel;

/* What a concrete channel adds to the base. Both members may be NULL; a
 * channel without either passes no table (NULL). */
struct loco_channel_ops {
	/* PEER has joined this endpoint (regions known both ways); runs once
	 * per peer, on a control-plane thread, with the registry lock held,
	 * before the peer counts as joined (so a ready channel has run it
	 * for every participant). It may create and join sub-channels; it
	 * must not wait on the network. It cannot return an error: it calls
	 * loco_channel_fail. */
	void (*join)(struct loco_channel *ch, uint32_t peer);
	/* Release what the channel allocated itself (memory, mutexes), in
	 * loco_channel_fini, after the channel is unregistered and its
	 * sub-channels are finished, before its regions are freed. Also runs
	 * when _init fails part way, so it must accept a channel that is
	 * only partly set up (NULL pointers, zero counts). */
	void (*fini)(struct loco_channel *ch);
};

/* The core's part of a channel (join state, regions, the tree): private,
 * allocated by loco_channel_init, freed by loco_channel_fini. */
struct loco_chan_core;

/* What a user and a channel author see: set by loco_channel_init and then
 * read-only until loco_channel_fini. */
struct loco_channel {
	char name[LOCO_NAME_MAX];            /* full name */
	struct loco_mgr *mgr;                /* NULL when not (or no more) a channel */
	struct loco_channel *parent;
	uint64_t participants;               /* peers (not self) to join */
	struct loco_chan_core *core;         /* the core's; use the functions below */
};

/* NAME is the component name; the full name is PARENT's name + "/" + NAME
 * (PARENT may be NULL: a root channel). A channel with a parent becomes
 * its child: the parent's loco_channel_fini finishes it. PARTICIPANTS:
 * peers to join (a bit per node id, self ignored); 0 means every compute
 * node; only this node's bit means nobody: the channel is ready at once
 * (what a channel with only hosted regions uses). OPS: the channel's ops
 * table (static, may be NULL). Returns -EINVAL for a bad or too long name
 * or -ENOMEM; then CH is not a channel and needs no loco_channel_fini.
 * Caller: the thread setting the channel up, or the parent's join op. */
int loco_channel_init(struct loco_channel *ch, struct loco_mgr *mgr,
		      struct loco_channel *parent, const char *name,
		      uint64_t participants, const struct loco_channel_ops *ops);

/* Allocate a zeroed local region NAME of LEN bytes offered to peers, who
 * may read, write and CAS/FAA it (loco_channel_add_region_ex to give them
 * less). Before join only. *OUT points into the channel. */
int loco_channel_add_region(struct loco_channel *ch, const char *name,
			    uint64_t len, struct loco_region **out);

/* As loco_channel_add_region with region FLAGS: LOCO_REGION_HOT asks for
 * device memory, falling back to the arena (loco/loco.h). Peers learn
 * where it went in the join; a hot region's base is NULL when it is in
 * device memory, so the channel must reach it, at this node too, only
 * through remote operations on loco_channel_remote(ch, idx, self).
 * LOCO_REGION_REMOTE_READ, _WRITE, _ATOMIC say what peers (and this node,
 * through the transport) may do to it, LOCO_REGION_REMOTE_NONE nothing
 * (loco/raddr.h); anything else fails with -EACCES. Give each region the
 * least its protocol needs: it is all a compromised peer can do there. */
int loco_channel_add_region_ex(struct loco_channel *ch, const char *name,
			       uint64_t len, unsigned flags,
			       struct loco_region **out);

/* Expect region NAME of LEN bytes from each peer in FROM (0: every
 * participant). Returns its index for loco_channel_remote. Before join. */
int loco_channel_expect(struct loco_channel *ch, const char *name,
			uint64_t len, uint64_t from);

/* Create-or-open region NAME of LEN bytes of this channel on NODE, named
 * "<channel full name>.NAME": the first opener, from any node, gets zeroed
 * memory, later openers the same region; *OUT gets its descriptor.
 * Another NODE serves it with loco_region_open (a memory node keeps it
 * until loco_region_drop). NODE may be this node (no memory node in the
 * cluster): the region is then in this node's arena, peers open it there,
 * and it is freed when the last channel of this process holding it is
 * finished, so a later channel of the same name starts from zeroed
 * memory. Released by loco_channel_fini. Hosted regions take no part in
 * joins (see the top).
 * Returns -EINVAL (bad name, LOCO_CHAN_HOSTED reached, NODE not in the
 * hosts file), -EEXIST (the channel has a region NAME already),
 * -LOCO_EMISMATCH (it exists with another size or access) or -ETIMEDOUT
 * (NODE does not answer); the reason is logged.
 * Caller: the thread setting the channel up, before or after join. */
int loco_channel_open_hosted(struct loco_channel *ch, uint32_t node,
			     const char *name, uint64_t len,
			     struct loco_rregion *out);

/* As loco_channel_open_hosted with region FLAGS. LOCO_REGION_HOT puts a
 * region that does not exist yet in NODE's device memory while it has
 * room (lock tables, counters), else in its arena with one warning on
 * NODE; OUT->space says where it is. An existing region is opened
 * wherever it is, whatever LOCO_REGION_HOT says. A region in device
 * memory is reached only through remote operations, on NODE too, and
 * does not outlive a restart of NODE (a durable node keeps arena regions
 * only). LOCO_REGION_REMOTE_READ, _WRITE, _ATOMIC: the remote access the
 * region allows (none of them: all three), which every opener must
 * declare alike (-LOCO_EMISMATCH otherwise). */
int loco_channel_open_hosted_ex(struct loco_channel *ch, uint32_t node,
				const char *name, uint64_t len, unsigned flags,
				struct loco_rregion *out);

/* Register the endpoint and start joining. Returns 0, -EEXIST (a channel
 * of this full name is registered on this node already) or -ENOMEM; after
 * a failure CH is still a channel: loco_channel_fini it. */
int loco_channel_join(struct loco_channel *ch);

/* This node's local region NAME (as given to loco_channel_add_region), or
 * NULL if the channel has none of that name. Valid until fini. */
const struct loco_region *loco_channel_local(const struct loco_channel *ch,
					     const char *name);

/* Descriptor of expected region IDX at PEER (valid once PEER joined);
 * for PEER == self, the matching local region. NULL if not available. */
const struct loco_rregion *loco_channel_remote(struct loco_channel *ch,
					       unsigned idx, uint32_t peer);

/* True when every participant joined (always, without participants);
 * *ERR (if not NULL) gets a join error. */
bool loco_channel_ready(struct loco_channel *ch, int *err);
/* Wait for loco_channel_ready: 0, -ETIMEDOUT or the join error. */
int loco_channel_wait(struct loco_channel *ch, int timeout_ms);

/* Fail the channel with ERR (a negative code; the first one sticks) and log
 * MSG once. For join ops that cannot complete their part of a join;
 * loco_channel_ready and loco_mgr_wait_ready then report ERR. */
void loco_channel_fail(struct loco_channel *ch, int err, const char *msg);

/* Finish CH and its subtree, in this order: take CH out of its parent's
 * children, unregister it (no join op runs for it after this, so none can
 * add a sub-channel), finish each child the same way (newest first), run
 * ops->fini, then free CH's local regions and release its hosted ones. A
 * finished (or zeroed) channel is a no-op. Operations posted on the
 * tree's regions must be complete (fenced, or their acks waited).
 * Caller: one thread, while no other thread uses the tree. */
void loco_channel_fini(struct loco_channel *ch);

static inline uint32_t loco_channel_self(const struct loco_channel *ch)
{
	return loco_mgr_id(ch->mgr);
}

#endif
