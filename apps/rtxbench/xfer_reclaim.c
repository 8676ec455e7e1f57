/* SPDX-License-Identifier: MIT */
/* --reclaim-dead: during the measured phase a thread of every compute
 * node watches the others' records (the heartbeats of xfer_ctl.c). A
 * node silent for --dead-ms is only suspected; the node that reclaims for
 * the others (the lowest compute node this one sees running) fences it
 * and, once the fence completed, adopts its thread slots, whose
 * allocation chunks a dead client keeps out of the pool otherwise until
 * the end of the run (docs/rtx.md, "Reclaiming a dead client's slots
 * during the run"). A thread of its own, not the heartbeat's: a fence may
 * wait 2 s for a paused target and an adoption waits out a lease, and
 * this node's heartbeat must not stop meanwhile. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "apps/rtxbench/xfer.h"

/* One node's view of the others during the run. */
struct reclaim_view {
	struct xfer_peer pw[LOCO_MAX_NODES];
	uint64_t gone;      /* at the last look: not running (not started,
			     * DONE, suspected) or reclaimed */
	uint64_t suspect;   /* at the last look: suspected, not reclaimed */
	uint64_t reclaimed; /* reclaimed by this node, or by another one as
			     * its record says */
};

/* One look at every other compute node not reclaimed yet; what another
 * node's record says it reclaimed is not reclaimed again (the node that
 * did it may have finished since, and the next lowest takes over). A node
 * that has not begun its measured phase (no record yet: it may still be
 * initialising the accounts, which sends no heartbeat) is not suspected
 * during the run: the end's watch judges it. */
static int look_all(struct xfer *xf, struct loco_thread *thr,
		    struct reclaim_view *v)
{
	uint64_t others = xf->compute & ~(UINT64_C(1) << xf->self) &
			  ~v->reclaimed;
	v->gone = v->reclaimed;
	v->suspect = 0;
	for (uint64_t m = others; m; m &= m - 1) {
		uint32_t id = (uint32_t)__builtin_ctzll(m);
		struct xfer_rec r;
		enum xfer_seen seen;
		int rc = xfer_look(xf, thr, id, &v->pw[id], &r, &seen);
		if (rc)
			return rc;
		v->reclaimed |= r.reclaimed & ~(UINT64_C(1) << xf->self);
		bool running = r.state == XFER_RUNNING;
		if (!running || seen != XFER_SEEN_ALIVE)
			v->gone |= UINT64_C(1) << id;
		if (running && seen == XFER_SEEN_SUSPECT)
			v->suspect |= UINT64_C(1) << id;
	}
	v->gone |= v->reclaimed;
	v->suspect &= ~v->reclaimed;
	return 0;
}

/* The node that reclaims for the others in view GONE: the lowest compute
 * node it sees running (this node is never gone in its own view). One
 * adopter keeps the others from adopting the same slots at once, which
 * would be safe (each chunk changes owner by CAS) but wasted; views
 * differ for a moment (a node finishing, a beat late), and two nodes
 * that both take themselves for it only repeat each other's work. */
static uint32_t adopter_of(const struct xfer *xf, uint64_t gone)
{
	return (uint32_t)__builtin_ctzll(xf->compute & ~gone);
}

/* Suspect ID: fence it, then adopt its slots; 0 with nothing done if the
 * fence did not complete (asked again at the next look). */
static int reclaim_one(struct xfer *xf, struct loco_thread *thr,
		       struct reclaim_view *v, uint32_t id)
{
	if (!xfer_fence_suspect(xf, id, &v->pw[id]))
		return 0;
	fprintf(stderr, "loco-rtx-transfer: node %u: node %u is dead (no "
		"heartbeat for %u ms; fenced): reclaiming its slots\n",
		xf->self, id, xf->o.dead_ms);
	uint64_t r0 = xf->reclaim_repairs;
	int rc = xfer_rtx_reclaim(xf, thr, id);
	if (rc)
		return rc;
	v->reclaimed |= UINT64_C(1) << id;
	/* Relaxed: a set for the heartbeats, published by their WRITE. */
	atomic_fetch_or_explicit(&xf->live_reclaimed, UINT64_C(1) << id,
				 memory_order_relaxed);
	fprintf(stderr, "loco-rtx-transfer: node %u: node %u reclaimed during "
		"the run: its slots adopted, their chunks back in the pool "
		"(%llu repairs)\n", xf->self, id,
		(unsigned long long)(xf->reclaim_repairs - r0));
	return 0;
}

static int reclaim_round(struct xfer *xf, struct loco_thread *thr,
			 struct reclaim_view *v)
{
	int rc = look_all(xf, thr, v);
	if (rc || adopter_of(xf, v->gone) != xf->self)
		return rc;
	for (uint64_t m = v->suspect; m && !rc; m &= m - 1)
		rc = reclaim_one(xf, thr, v, (uint32_t)__builtin_ctzll(m));
	return rc;
}

void *xfer_reclaimer(void *arg)
{
	struct xfer_warg *wa = arg;
	struct xfer *xf = wa->xf;
	struct reclaim_view v;
	struct loco_thread *thr;
	struct timespec ts = { xf->o.hb_ms / 1000,
			       (long)(xf->o.hb_ms % 1000) * 1000000L };
	memset(&v, 0, sizeof(v));
	wa->rc = loco_thread_create(xf->mgr, &thr);
	if (wa->rc)
		return NULL;
	/* Relaxed: a stop flag; nothing is published with it. */
	while (!wa->rc && !atomic_load_explicit(&xf->stop, memory_order_relaxed)) {
		nanosleep(&ts, NULL);
		wa->rc = reclaim_round(xf, thr, &v);
		/* The home node died: nobody could beat meanwhile. */
		if (wa->rc == -LOCO_EDOWN && !(wa->rc = xfer_wait_memory(xf)))
			memset(v.pw, 0, sizeof(v.pw));
	}
	if (wa->rc)
		fprintf(stderr, "loco-rtx-transfer: node %u reclaimer: %s\n",
			xf->self, loco_strerror(wa->rc));
	int trc = loco_thread_destroy(thr);
	if (!wa->rc)
		wa->rc = trc;
	return NULL;
}
