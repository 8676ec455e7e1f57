/* SPDX-License-Identifier: MIT */
/* barrier: LOCO Fig. 1(a) in C. The push is sent with LOCO_PUSH_PLACE:
 * the memory model puts no bound on when a completed WRITE is placed
 * unless a later READ, atomic or fence follows on its QP, and nothing else
 * would follow before the peers see our count, so the barrier's progress
 * would rest on the transport's goodwill. The placing READs share the
 * WRITEs' doorbells and land the count within a round trip, and the next
 * round's global fence then finds nothing unplaced on this thread's QPs. */
#include <errno.h>

#include <loco/channels/barrier.h>
#include <loco/wait.h>

int loco_barrier_init(struct loco_barrier *b, struct loco_mgr *mgr,
		      struct loco_channel *parent, const char *name,
		      uint64_t participants)
{
	int rc = loco_channel_init(&b->base, mgr, parent, name, participants,
				   NULL);
	if (rc)
		return rc;
	b->count = 0;
	b->pending = false;
	b->ready = false;
	loco_ack_clear(&b->ack);
	/* Self included: a mask of 0 would mean every compute node. */
	rc = loco_sst_init(&b->sst, mgr, &b->base, "sst", sizeof(uint64_t),
			   b->base.participants |
			   UINT64_C(1) << loco_channel_self(&b->base));
	if (!rc)
		rc = loco_channel_join(&b->base);
	if (rc)
		loco_channel_fini(&b->base);  /* and the sst */
	return rc;
}

void loco_barrier_fini(struct loco_barrier *b)
{
	loco_channel_fini(&b->base);
}

/* Fence, count, store, push: this node arrives. */
static int arrive(struct loco_barrier *b, struct loco_thread *thr)
{
	/* Release side: everything this node issued before the barrier is
	 * placed before the count that announces it (pairs with the
	 * acquire loads of the rows in all_arrived at the other nodes). */
	int rc = loco_fence(thr, LOCO_FENCE_GLOBAL, 0);
	if (rc)
		return rc;
	uint64_t next = b->count + 1;
	loco_sst_store_mine(&b->sst, &next);
	loco_ack_clear(&b->ack);
	rc = loco_sst_push_broadcast(&b->sst, thr, LOCO_PUSH_PLACE, &b->ack);
	if (rc)
		return rc;
	b->count = next;
	b->pending = true;
	return 0;
}

/* True when every other member's row has reached this node's count. */
static bool all_arrived(struct loco_barrier *b)
{
	for (uint64_t m = b->base.participants; m; m &= m - 1) {
		uint64_t c = 0;
		/* 8-byte rows never tear, so the load cannot fail once ready.
		 * Acquire: pairs with the peer's fence before its push. */
		if (loco_sst_load(&b->sst, (uint32_t)__builtin_ctzll(m), &c) ||
		    c < b->count)
			return false;
	}
	return true;
}

/* The push failed: its error to a member whose count has not reached us
 * (gone or cut off mid-round); 0 if every member it failed to has
 * arrived: one that saw every count may have left already (exited, on a
 * transport whose memory goes with its process). */
static int push_failed(struct loco_barrier *b, struct loco_thread *thr)
{
	for (uint64_t m = b->ack.peers; m; m &= m - 1) {
		uint32_t p = (uint32_t)__builtin_ctzll(m);
		struct loco_ack one = { UINT64_C(1) << p, b->ack.ticket };
		uint64_t c = 0;
		int rc = loco_ack_test(thr, &one);
		/* Acquire (in loco_sst_load): pairs with P's fence before
		 * its push, as in all_arrived. */
		if (rc < 0 && (loco_sst_load(&b->sst, p, &c) || c < b->count))
			return rc;
	}
	return 0;
}

int loco_barrier_wait(struct loco_barrier *b, struct loco_thread *thr,
		      int timeout_ms)
{
	if (!b->ready && !(b->ready = loco_sst_ready(&b->sst)))
		return -ENOTCONN;
	if (!b->pending) {
		int rc = arrive(b, thr);
		if (rc)
			return rc;
	}
	struct loco_wait w;
	loco_wait_init(&w, b->base.mgr, timeout_ms);
	bool pushed = false;
	for (;;) {
		if (!pushed) {
			/* Polls the push: an error (a failed peer that has
			 * not arrived) ends the wait, and a retired placing
			 * READ spares the next global fence its own READ. */
			int rc = loco_ack_test(thr, &b->ack);
			if (rc < 0) {
				int err = push_failed(b, thr);
				if (err)
					return err;
				rc = 1; /* failed only to members that arrived */
			}
			pushed = rc == 1;
		}
		/* Our count placed at every member still there before we
		 * leave: one that left right after would otherwise take
		 * the push with it, and those still waiting would wait on. */
		if (pushed && all_arrived(b))
			break;
		int rc = loco_wait_step(&w);
		if (rc)
			return rc;
	}
	b->pending = false;
	return 0;
}
