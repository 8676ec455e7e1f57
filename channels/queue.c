/* SPDX-License-Identifier: MIT */
/* queue: CRQ (Morrison & Afek, PPoPP'13, Fig. 5) over remote memory; see
 * queue.h. CRQ's 128-bit cell (safe, idx, val) becomes one 8-byte word:
 * idx is stored as its cycle idx / R (the cell number is implied), val
 * is 32 bits plus a full bit, and the safe bit is inverted (unsafe) so
 * that an all-zero cell is cycle 0, empty and safe. CAS2 becomes one
 * remote CAS, so every decision CRQ makes on a cell is atomic here too.
 *
 * Positions: head and tail only grow (FAA; fixState moves tail up with a
 * CAS). A push that gives up its position leaves a hole the pop of that
 * position closes (the cell moves to the next cycle), exactly as in CRQ. */
#include <errno.h>

#include <loco/channels/queue.h>
#include <loco/wait.h>

/* Re-reads of an empty cell while tail says its push is under way, before
 * the pop closes the cell (each closed cell costs that push a retry). */
#define PENDING_READS 4

static void bump(_Atomic uint64_t *ctr)
{
	/* Relaxed: a statistic; it orders nothing. */
	atomic_fetch_add_explicit(ctr, 1, memory_order_relaxed);
}

/* ---- set-up ----------------------------------------------------------- */

static void members_set(struct loco_queue *q, uint64_t members)
{
	q->nmembers = 0;
	for (uint64_t m = members; m; m &= m - 1)
		q->member[q->nmembers++] = (uint32_t)__builtin_ctzll(m);
}

/* Cells and counters are read and CAS/FAA'd, never written. */
#define Q_ACCESS (LOCO_REGION_REMOTE_READ | LOCO_REGION_REMOTE_ATOMIC)

static int parts_init(struct loco_queue *q, struct loco_mgr *mgr,
		      uint64_t members)
{
	uint64_t len = (uint64_t)q->per_node * 8;
	int rc = loco_channel_add_region_ex(&q->base, "cells", len, Q_ACCESS,
					    NULL);
	int idx = rc ? rc : loco_channel_expect(&q->base, "cells", len, 0);
	if (idx < 0)
		return idx;
	q->idx = (unsigned)idx;
	rc = loco_atomic_var_init_ex(&q->head, mgr, &q->base, "head",
				     q->member[0], members, Q_ACCESS);
	return rc ? rc : loco_atomic_var_init_ex(&q->tail, mgr, &q->base, "tail",
						 q->member[q->nmembers > 1],
						 members, Q_ACCESS);
}

int loco_queue_init(struct loco_queue *q, struct loco_mgr *mgr,
		    struct loco_channel *parent, const char *name,
		    uint32_t slots_per_node, uint64_t participants)
{
	if (!slots_per_node)
		return -EINVAL;
	int rc = loco_channel_init(&q->base, mgr, parent, name, participants,
				   NULL);
	if (rc)
		return rc;
	/* Self included: a mask of 0 would mean every compute node. */
	members_set(q, q->base.participants |
		       UINT64_C(1) << loco_channel_self(&q->base));
	q->per_node = slots_per_node;
	q->ring = (uint64_t)slots_per_node * q->nmembers;
	q->ctr.pushes = q->ctr.pops = q->ctr.empty = 0;
	q->ctr.full = q->ctr.retries = q->ctr.fixes = 0;
	rc = parts_init(q, mgr, q->base.participants |
				UINT64_C(1) << loco_channel_self(&q->base));
	if (!rc)
		rc = loco_channel_join(&q->base);
	if (rc)
		loco_channel_fini(&q->base);  /* and head, tail */
	return rc;
}

void loco_queue_fini(struct loco_queue *q)
{
	loco_channel_fini(&q->base);
}

void loco_queue_stats(struct loco_queue *q, struct loco_queue_stats *out)
{
	/* Relaxed: statistics. */
	out->pushes = atomic_load_explicit(&q->ctr.pushes, memory_order_relaxed);
	out->pops = atomic_load_explicit(&q->ctr.pops, memory_order_relaxed);
	out->empty = atomic_load_explicit(&q->ctr.empty, memory_order_relaxed);
	out->full = atomic_load_explicit(&q->ctr.full, memory_order_relaxed);
	out->retries = atomic_load_explicit(&q->ctr.retries,
					    memory_order_relaxed);
	out->fixes = atomic_load_explicit(&q->ctr.fixes, memory_order_relaxed);
}

/* ---- cells ---------------------------------------------------------------- */

static const struct loco_rregion *cell_rr(struct loco_queue *q, uint64_t i)
{
	return loco_channel_remote(&q->base, q->idx, loco_queue_cell_node(q, i));
}

static int cell_read(struct loco_queue *q, struct loco_thread *thr, uint64_t i,
		     uint64_t *w)
{
	const struct loco_rregion *rr = cell_rr(q, i);
	return rr ? loco_read(thr, rr, loco_queue_cell_off(q, i), w, 8) :
		    -ENOTCONN;
}

static int cell_cas(struct loco_queue *q, struct loco_thread *thr, uint64_t i,
		    uint64_t expect, uint64_t desired, uint64_t *old)
{
	const struct loco_rregion *rr = cell_rr(q, i);
	return rr ? loco_cas(thr, rr, loco_queue_cell_off(q, i), expect,
			     desired, old) : -ENOTCONN;
}

/* ---- push ------------------------------------------------------------------ */

/* CRQ's test for a push at position T (cycle C) on cell state W: the cell
 * is empty, not past T, and safe or not yet reached by head. 1, 0 or an
 * error (reading head). */
static int push_allowed(struct loco_queue *q, struct loco_thread *thr,
			uint64_t w, uint64_t t, uint64_t c)
{
	if ((w & LOCO_QUEUE_FULL) || loco_queue_cell_cycle(w) > c)
		return 0;
	if (!(w & LOCO_QUEUE_UNSAFE))
		return 1;
	uint64_t h;
	int rc = loco_atomic_var_read(&q->head, thr, &h);
	return rc ? rc : h <= t;
}

/* Store V at position T: 1 if stored, 0 if the position is lost, or an
 * error. The first CAS guesses the usual state {cycle, empty, safe}. */
static int push_at(struct loco_queue *q, struct loco_thread *thr, uint64_t t,
		   uint32_t v)
{
	uint64_t i = t % q->ring, c = t / q->ring;
	if (c >= LOCO_QUEUE_CYCLES)
		return -EOVERFLOW;
	uint64_t w = loco_queue_cell(c, 0, 0), full = loco_queue_cell(
		c, LOCO_QUEUE_FULL, v);
	for (;;) {
		uint64_t old;
		int rc = cell_cas(q, thr, i, w, full, &old);
		if (rc)
			return rc;
		if (old == w)
			return 1;
		w = old;
		rc = push_allowed(q, thr, w, t, c);
		if (rc <= 0)
			return rc;
	}
}

/* Full at position T: give T back if no push took a later one (tail is
 * still T + 1), so a full queue leaves no hole for the pops to close.
 * This makes tail move down by one, to a position no push holds: as if
 * the FAA never happened (pops that went past it meanwhile are handled
 * like any pops past tail, by fixState). Only a full push gives its
 * position back; a push that failed for any other reason would take the
 * same position again. */
static int give_back(struct loco_queue *q, struct loco_thread *thr, uint64_t t)
{
	uint64_t old;
	return loco_atomic_var_cas(&q->tail, thr, t + 1, t, &old);
}

int loco_queue_try_push(struct loco_queue *q, struct loco_thread *thr,
			uint32_t v)
{
	for (;;) {
		uint64_t t, h;
		int rc = loco_atomic_var_faa(&q->tail, thr, 1, &t);
		if (!rc)
			rc = push_at(q, thr, t, v);
		if (rc == 1) {
			bump(&q->ctr.pushes);
			return 0;
		}
		if (!rc)
			rc = loco_atomic_var_read(&q->head, thr, &h);
		if (rc)
			return rc;
		if (t >= h + q->ring) {
			bump(&q->ctr.full);
			rc = give_back(q, thr, t);
			return rc ? rc : -EAGAIN;
		}
		bump(&q->ctr.retries);
	}
}

/* Read tail and head with one round trip. */
static int ends_read(struct loco_queue *q, struct loco_thread *thr,
		     uint64_t *t, uint64_t *h)
{
	struct loco_ack ack = { 0, 0 };
	int rc = loco_atomic_var_post_read(&q->tail, thr, t, &ack);
	int rc2 = rc ? rc : loco_atomic_var_post_read(&q->head, thr, h, &ack);
	/* Wait even after a failed post: the first READ targets *T. */
	rc = ack.peers ? loco_ack_wait(thr, &ack, -1) : 0;
	return rc2 ? rc2 : rc;
}

/* While full, watch head and tail instead of pushing: every failed push
 * gives up a position that some pop must then close. */
int loco_queue_push(struct loco_queue *q, struct loco_thread *thr, uint32_t v,
		    int timeout_ms)
{
	struct loco_wait w;
	loco_wait_init(&w, q->base.mgr, timeout_ms);
	int rc = loco_queue_try_push(q, thr, v);
	while (rc == -EAGAIN && !(rc = loco_wait_step(&w))) {
		uint64_t t, h;
		rc = ends_read(q, thr, &t, &h);
		if (!rc && t < h + q->ring)
			rc = loco_queue_try_push(q, thr, v);
		else if (!rc)
			rc = -EAGAIN;
	}
	return rc;
}

/* ---- pop ------------------------------------------------------------------- */

/* Empty cell W of position H (cycle C): if tail says its push is under
 * way, read the cell again a few times before closing it. *W is updated. */
static int pending_wait(struct loco_queue *q, struct loco_thread *thr,
			uint64_t h, uint64_t c, uint64_t *w)
{
	uint64_t t;
	int rc = loco_atomic_var_read(&q->tail, thr, &t);
	unsigned spins = 0;
	for (unsigned k = 0; !rc && t > h && k < PENDING_READS; k++) {
		if ((*w & LOCO_QUEUE_FULL) || loco_queue_cell_cycle(*w) != c)
			break;
		loco_backoff(&spins);
		rc = cell_read(q, thr, h % q->ring, w);
	}
	return rc;
}

/* The state CRQ moves cell W to for a pop of position H (cycle C): taken
 * or closed, {C + 1, empty}; or, holding an older lap's item, unsafe. */
static uint64_t pop_next(uint64_t w, uint64_t c)
{
	bool older_item = (w & LOCO_QUEUE_FULL) && loco_queue_cell_cycle(w) < c;
	return older_item ? w | LOCO_QUEUE_UNSAFE :
			    loco_queue_cell(c + 1, w & LOCO_QUEUE_UNSAFE, 0);
}

/* Pop at position H: 1 with *V taken, 0 if H holds nothing for us (the
 * cell is closed or marked), or an error. */
static int pop_at(struct loco_queue *q, struct loco_thread *thr, uint64_t h,
		  uint32_t *v)
{
	uint64_t i = h % q->ring, c = h / q->ring, w;
	if (c + 1 >= LOCO_QUEUE_CYCLES)
		return -EOVERFLOW;
	int rc = cell_read(q, thr, i, &w);
	if (!rc && !(w & LOCO_QUEUE_FULL) && loco_queue_cell_cycle(w) == c)
		rc = pending_wait(q, thr, h, c, &w);
	while (!rc) {
		uint64_t old;
		if (loco_queue_cell_cycle(w) > c)
			return 0;
		rc = cell_cas(q, thr, i, w, pop_next(w, c), &old);
		if (rc)
			break;
		if (old == w) {
			bool mine = (w & LOCO_QUEUE_FULL) &&
				    loco_queue_cell_cycle(w) == c;
			if (mine)
				*v = (uint32_t)w;
			return mine;
		}
		w = old;
	}
	return rc;
}

/* CRQ's fixState: move tail up to head if pops went past it, so later
 * pushes do not take positions the pops have already closed. */
static int fix_state(struct loco_queue *q, struct loco_thread *thr)
{
	for (;;) {
		uint64_t t, h, old;
		int rc = ends_read(q, thr, &t, &h);
		if (rc || h <= t)
			return rc;
		rc = loco_atomic_var_cas(&q->tail, thr, t, h, &old);
		if (rc || old == t) {
			if (!rc)
				bump(&q->ctr.fixes);
			return rc;
		}
	}
}

int loco_queue_try_pop(struct loco_queue *q, struct loco_thread *thr,
		       uint32_t *v)
{
	for (;;) {
		uint64_t h, t;
		int rc = loco_atomic_var_faa(&q->head, thr, 1, &h);
		if (!rc)
			rc = pop_at(q, thr, h, v);
		if (rc == 1) {
			bump(&q->ctr.pops);
			return 0;
		}
		if (!rc)
			rc = loco_atomic_var_read(&q->tail, thr, &t);
		if (rc)
			return rc;
		bump(&q->ctr.retries);
		if (t <= h + 1) {
			bump(&q->ctr.empty);
			rc = fix_state(q, thr);
			return rc ? rc : -ENODATA;
		}
	}
}

int loco_queue_pop(struct loco_queue *q, struct loco_thread *thr, uint32_t *v,
		   int timeout_ms)
{
	struct loco_wait w;
	loco_wait_init(&w, q->base.mgr, timeout_ms);
	for (;;) {
		uint64_t t, h;
		int rc = ends_read(q, thr, &t, &h);
		if (!rc && t > h)
			rc = loco_queue_try_pop(q, thr, v);
		if (rc != -ENODATA && (rc || t > h))
			return rc;
		rc = loco_wait_step(&w);
		if (rc)
			return rc;
	}
}
