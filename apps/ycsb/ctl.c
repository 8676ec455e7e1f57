/* SPDX-License-Identifier: MIT */
/* loco-ycsb's phases when nodes may die (--dead-ms MS, the crash tests):
 * instead of the cluster barrier, every node has a record in a region
 * "ycsb-ctl.rec" on the first memory node, which survives the compute
 * nodes: a heartbeat counter (a thread WRITEs it every HB_MS), the last
 * phase the node reached, and at the end its result row. A node waits
 * for every other to reach the phase or to be dead: its heartbeat did not
 * move for --dead-ms (then it is fenced), or it is fenced already. The
 * survivors finish; the lowest of them prints
 * the cluster line (rows of the nodes that finished, "dead": the others)
 * and runs --verify. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/ycsb/ycsb.h"
#include <loco/rtx/crash.h>

#define HB_MS 10
#define FENCE_MS 2000               /* one fence attempt, at most */
#define POLL_US 1000
#define REC_BYTES 512

/* Remote layout of one node's record. */
struct ctl_rec {
	uint64_t phase;            /* last phase reached (YCSB_PHASE_*) */
	uint64_t beat;             /* heartbeat counter */
	uint64_t pad[6];
	struct cl_row row;         /* final with YCSB_PHASE_DONE */
	uint64_t pad2[(REC_BYTES - 64 - sizeof(struct cl_row)) / 8];
};
static_assert(sizeof(struct ctl_rec) == REC_BYTES, "remote layout");

struct ycsb_ctl {
	struct loco_rregion rr;
	pthread_t hb;
	_Atomic bool stop;
	bool hb_started;
	struct ctl_rec *recs;      /* READ destination: every record */
	uint64_t seen_beat[LOCO_MAX_NODES];
	uint64_t seen_ns[LOCO_MAX_NODES];
	uint64_t unfenced;          /* suspects a fence failed for (said once) */
	uint64_t src;              /* WRITE source of phase words */
	struct ctl_rec mine;       /* WRITE source of the row */
};

/* Crash points of loco-ycsb (LOCO_CRASH_AT, rtx/crash.h), for deaths
 * before the measured phase: after the index is open and the records
 * too, before anything waits for the others; and at each key loaded. */
static const char *const ycsb_crash_points[] = {
	"ycsb.setup",
	"ycsb.load",
	NULL,
};

__attribute__((constructor)) static void ycsb_register_points(void)
{
	loco_crash_register(ycsb_crash_points);
}

static uint64_t rec_off(uint32_t id)
{
	return (uint64_t)id * REC_BYTES;
}

static void *heartbeat(void *arg)
{
	struct ycsb *y = arg;
	struct ycsb_ctl *c = y->ctl;
	struct loco_thread *thr;
	uint64_t beat = 0;
	if (loco_thread_create(y->mgr, &thr)) {
		fprintf(stderr, "loco-ycsb: node %u: no heartbeat thread\n", y->self);
		return NULL;
	}
	/* Relaxed: a stop flag; the WRITEs order nothing. */
	while (!atomic_load_explicit(&c->stop, memory_order_relaxed)) {
		beat++;
		int rc = loco_write(thr, &c->rr, rec_off(y->self) +
				    offsetof(struct ctl_rec, beat), &beat, 8);
		if (rc) {
			/* The others will take this node for dead. */
			fprintf(stderr, "loco-ycsb: node %u: heartbeat stopped: "
				"%s\n", y->self, loco_strerror(rc));
			break;
		}
		struct timespec ts = { 0, HB_MS * 1000000L };
		nanosleep(&ts, NULL);
	}
	loco_thread_destroy(thr);
	return NULL;
}

int ycsb_ctl_open(struct ycsb *y)
{
	int mem = loco_mgr_first_memnode(y->mgr);
	if (mem < 0) {
		fprintf(stderr, "loco-ycsb: --dead-ms needs a memory node (the "
			"records must outlive the compute nodes)\n");
		return 2;
	}
	struct ycsb_ctl *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->recs = aligned_alloc(64, (size_t)LOCO_MAX_NODES * REC_BYTES);
	int rc = c->recs ? 0 : -ENOMEM;
	if (!rc)
		rc = loco_region_open_ex(y->mgr, (uint32_t)mem, "ycsb-ctl.rec",
					 (uint64_t)LOCO_MAX_NODES * REC_BYTES,
					 LOCO_REGION_REMOTE_READ |
					 LOCO_REGION_REMOTE_WRITE, &c->rr);
	y->ctl = c;
	if (!rc && pthread_create(&c->hb, NULL, heartbeat, y))
		rc = -EAGAIN;
	c->hb_started = !rc;
	if (rc) {
		fprintf(stderr, "loco-ycsb: node records: %s\n", loco_strerror(rc));
		ycsb_ctl_close(y);
	}
	return rc;
}

void ycsb_ctl_meet(struct ycsb *y)
{
	uint64_t others = bench_members(y->mgr) & ~(UINT64_C(1) << y->self);
	for (uint64_t m = others; m; m &= m - 1)
		loco_peer_wait(y->mgr, (uint32_t)__builtin_ctzll(m),
			       (int)y->o.dead_ms);
}

void ycsb_ctl_close(struct ycsb *y)
{
	struct ycsb_ctl *c = y->ctl;
	if (!c)
		return;
	/* Relaxed: the join orders the rest. */
	atomic_store_explicit(&c->stop, true, memory_order_relaxed);
	if (c->hb_started)
		pthread_join(c->hb, NULL);
	free(c->recs);
	free(c);
	y->ctl = NULL;
}

/* Publish PHASE: everything any thread of this node did before is
 * placed first (a global fence, as a barrier arrival does). */
static int publish(struct ycsb *y, struct loco_thread *thr, uint64_t phase)
{
	struct ycsb_ctl *c = y->ctl;
	int rc = loco_fence(thr, LOCO_FENCE_GLOBAL, 0);
	c->src = phase;
	if (!rc)
		rc = loco_write(thr, &c->rr, rec_off(y->self), &c->src, 8);
	/* Placed: the others poll for it. */
	return rc ? rc : loco_fence(thr, LOCO_FENCE_PAIR, c->rr.node);
}

/* Member ID sent no heartbeat for --dead-ms: it is only suspected (it
 * may be paused). Fence it before anyone acts for it (--verify settles
 * what dead clients left). True once fenced; false if the fence did not
 * complete: ID is waited for and fenced at a later look. */
static bool fence_suspect(struct ycsb *y, uint32_t id)
{
	int rc = loco_fence_node(y->mgr, id, FENCE_MS);
	if (!rc)
		return true;
	/* -EOPNOTSUPP too: a transport that cannot fence gets no takeover
	 * on the timer alone (docs/ordering.md, "Fencing"). */
	if (!(y->ctl->unfenced & UINT64_C(1) << id))
		fprintf(stderr, "loco-ycsb: node %u: node %u is silent but not "
			"fenced (%s): waiting for it%s\n", y->self, id,
			loco_strerror(rc), rc == -EOPNOTSUPP ?
			" (this transport cannot fence: it is never taken for dead)" : "");
	y->ctl->unfenced |= UINT64_C(1) << id;
	return false;
}

/* One look at every other member: *LEFT gets those neither at PHASE nor
 * dead; members found dead (silent for --dead-ms, then fenced) join
 * y->dead. */
static int look(struct ycsb *y, struct loco_thread *thr, uint64_t phase,
		uint64_t *left)
{
	struct ycsb_ctl *c = y->ctl;
	uint64_t now = loco_lease_now_ns();
	int rc = loco_read(thr, &c->rr, 0, c->recs,
			   (uint32_t)(LOCO_MAX_NODES * REC_BYTES));
	*left = 0;
	for (uint64_t m = bench_members(y->mgr); !rc && m; m &= m - 1) {
		uint32_t id = (uint32_t)__builtin_ctzll(m);
		const struct ctl_rec *r = &c->recs[id];
		if (id == y->self || (y->dead & UINT64_C(1) << id) ||
		    r->phase >= phase)
			continue;
		if (loco_peer_fenced(y->mgr, id)) {
			/* Fenced already (a lock or a resize taken over from
			 * it, by this node or another): that incarnation never
			 * reaches PHASE, and nothing waits for its heartbeat
			 * to stop. */
			y->dead |= UINT64_C(1) << id;
			fprintf(stderr, "loco-ycsb: node %u: node %u is dead "
				"(fenced by the cluster)\n", y->self, id);
			continue;
		}
		if (r->beat != c->seen_beat[id] || !c->seen_ns[id]) {
			c->seen_beat[id] = r->beat;
			c->seen_ns[id] = now;
		} else if (now > c->seen_ns[id] &&  /* not stepped back */
			   now - c->seen_ns[id] >=
			   (uint64_t)y->o.dead_ms * 1000000u &&
			   fence_suspect(y, id)) {
			y->dead |= UINT64_C(1) << id;
			fprintf(stderr, "loco-ycsb: node %u: node %u is dead (no "
				"heartbeat for %u ms; fenced)\n", y->self, id,
				y->o.dead_ms);
			continue;
		}
		*left |= UINT64_C(1) << id;
	}
	return rc;
}

int ycsb_ctl_sync(struct ycsb *y, struct loco_thread *thr, uint64_t phase,
		  int timeout_ms)
{
	uint64_t deadline = loco_lease_now_ns() +
			    (uint64_t)timeout_ms * 1000000u;
	int rc = publish(y, thr, phase);
	for (uint64_t left = 1; !rc && left;) {
		rc = look(y, thr, phase, &left);
		if (!rc && left && loco_lease_now_ns() > deadline)
			rc = -ETIMEDOUT;
		if (!rc && left) {
			struct timespec ts = { 0, POLL_US * 1000L };
			nanosleep(&ts, NULL);
		}
	}
	return rc;
}

bool ycsb_ctl_leader(const struct ycsb *y)
{
	uint64_t alive = bench_members(y->mgr) & ~y->dead;
	return alive && (uint32_t)__builtin_ctzll(alive) == y->self;
}

static void row_sum(struct ycsb *y, struct cl_row *sum, uint64_t *spread)
{
	uint64_t lo = UINT64_MAX, hi = 0;
	memset(sum, 0, sizeof(*sum));
	for (uint64_t m = bench_members(y->mgr) & ~y->dead; m; m &= m - 1) {
		const struct cl_row *x = &y->ctl->recs[__builtin_ctzll(m)].row;
		cl_row_add(sum, x);
		lo = x->ops < lo ? x->ops : lo;
		hi = x->ops > hi ? x->ops : hi;
	}
	spread[0] = lo;
	spread[1] = hi;
}

int ycsb_ctl_finish(struct ycsb *y, struct loco_thread *thr,
		    const struct cl_row *mine, int timeout_ms,
		    cl_report_fn *report, void *arg)
{
	struct ycsb_ctl *c = y->ctl;
	c->mine.row = *mine;
	int rc = loco_write(thr, &c->rr, rec_off(y->self) +
			    offsetof(struct ctl_rec, row), &c->mine.row,
			    sizeof(c->mine.row));
	/* Same QP: the row is placed before the DONE phase word. */
	if (!rc)
		rc = ycsb_ctl_sync(y, thr, YCSB_PHASE_DONE, timeout_ms);
	report(arg, mine, NULL);
	if (rc || !ycsb_ctl_leader(y))
		return rc;
	/* The last look read every record; read them again whole. */
	uint64_t left = 0, spread[2];
	struct cl_row sum;
	rc = look(y, thr, YCSB_PHASE_DONE, &left);
	if (!rc) {
		row_sum(y, &sum, spread);
		report(arg, &sum, spread);
	}
	return rc;
}
