/* SPDX-License-Identifier: MIT */
/* Coordination of loco-rtx-transfer through the home memory node: node
 * records with heartbeats, DONE marks, dead-node detection, and the
 * per-millisecond timeline. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/rtxbench/xfer.h"

#define WAIT_POLL_US 10000
#define FENCE_MS 2000               /* one fence attempt, at most */

uint64_t xfer_realtime_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t xfer_realtime_ms(void)
{
	return xfer_realtime_us() / 1000u;
}

uint64_t xfer_rng(uint64_t *s)
{
	uint64_t x = *s;  /* xorshift64* */
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * UINT64_C(2685821657736338717);
}

void xfer_tick(struct xfer *xf, uint64_t now_ms)
{
	/* Relaxed: counters, published by the heartbeat's WRITE. */
	atomic_fetch_add_explicit(&xf->live_ops, 1, memory_order_relaxed);
	if (!xf->tl)
		return;
	uint64_t i = now_ms > xf->t0_ms ? now_ms - xf->t0_ms : 0;
	if (i < xf->tl_len)
		atomic_fetch_add_explicit(&xf->tl[i], 1, memory_order_relaxed);
}

int xfer_open_shared(struct xfer *xf, const char *name, uint64_t len,
		     unsigned access, struct loco_rregion *out)
{
	return loco_channel_open_hosted_ex(&xf->run, xf->home, name, len,
					   access, out);
}

static uint64_t rec_off(uint32_t id)
{
	return sizeof(struct xfer_hdr) + (uint64_t)id * sizeof(struct xfer_rec);
}

/* Timeline origin: the first node's start, set once by CAS. */
static int timeline_origin(struct xfer *xf)
{
	uint64_t now = xfer_realtime_ms(), old = 0;
	int rc = loco_cas(xf->thr, &xf->ctl, 0, 0, now, &old);
	xf->t0_ms = old ? old : now;
	return rc;
}

static int timeline_open(struct xfer *xf)
{
	const struct loco_hosts *h = loco_mgr_hosts(xf->mgr);
	xf->tl_len = (uint32_t)(xf->o.duration * 1000) + XFER_TL_SLACK_MS;
	xf->tl = calloc(xf->tl_len, sizeof(*xf->tl));
	xf->tl_stage = calloc(xf->tl_len, sizeof(*xf->tl_stage));
	if (!xf->tl || !xf->tl_stage)
		return -ENOMEM;
	return xfer_open_shared(xf, "tl",
				(uint64_t)(h->max_id + 1) * xf->tl_len * 4,
				LOCO_REGION_REMOTE_READ | LOCO_REGION_REMOTE_WRITE,
				&xf->tlr);
}

/* The run's channel has hosted regions only: no peers to join (compute
 * nodes come, go and die during a crash run). */
int xfer_ctl_open(struct xfer *xf)
{
	int rc = loco_channel_init(&xf->run, xf->mgr, NULL, "xfer-run",
				   UINT64_C(1) << xf->self, NULL);
	if (!rc)
		rc = loco_channel_join(&xf->run);
	if (!rc)
		rc = xfer_open_shared(xf, "ctl", rec_off(LOCO_MAX_NODES),
				      LOCO_REGION_REMOTE_ALL, &xf->ctl);
	if (!rc)
		rc = timeline_origin(xf);
	if (!rc && xf->o.timeline)
		rc = timeline_open(xf);
	return rc;
}

void xfer_ctl_meet(struct xfer *xf)
{
	uint64_t others = xf->compute & ~(UINT64_C(1) << xf->self);
	for (uint64_t m = others; m; m &= m - 1)
		loco_peer_wait(xf->mgr, (uint32_t)__builtin_ctzll(m),
			       (int)xf->o.dead_ms);
}

void xfer_ctl_close(struct xfer *xf)
{
	loco_channel_fini(&xf->run);
	free(xf->tl);
	free(xf->tl_stage);
	xf->tl = NULL;
	xf->tl_stage = NULL;
}

static int publish_timeline(struct xfer *xf)
{
	uint64_t now = xfer_realtime_ms();
	uint64_t n = now > xf->t0_ms ? now - xf->t0_ms + 1 : 1;
	if (n > xf->tl_len)
		n = xf->tl_len;
	for (uint64_t i = 0; i < n; i++)
		/* Relaxed: counters; the WRITE below publishes the copy. */
		xf->tl_stage[i] = atomic_load_explicit(&xf->tl[i],
						       memory_order_relaxed);
	return loco_write(xf->thr, &xf->tlr, (uint64_t)xf->self * xf->tl_len * 4,
			  xf->tl_stage, (uint32_t)(n * 4));
}

void xfer_rec_stats(struct xfer *xf, const struct loco_stats *now)
{
	struct xfer_rec *r = &xf->rec;
	r->reads = now->reads - xf->st0.reads;
	r->writes = now->writes - xf->st0.writes;
	r->cas = now->cas - xf->st0.cas;
	r->faa = now->faa - xf->st0.faa;
	r->bytes_read = now->bytes_read - xf->st0.bytes_read;
	r->bytes_written = now->bytes_written - xf->st0.bytes_written;
	r->rtts = now->rtts - xf->st0.rtts;
	r->flushes = now->flushes - xf->st0.flushes;
}

/* The record with the current counters (all but the state word), so a
 * node that dies leaves its counts so far. */
static void fill_rec(struct xfer *xf)
{
	struct xfer_rec *r = &xf->rec;
	struct loco_stats now;
	r->hb_ms = xfer_realtime_ms();
	/* Relaxed: counters. */
	r->ops = atomic_load_explicit(&xf->live_ops, memory_order_relaxed);
	r->repairs = atomic_load_explicit(&xf->live_repairs,
					  memory_order_relaxed);
	r->acked = atomic_load_explicit(&xf->live_acked, memory_order_relaxed);
	r->unknown = atomic_load_explicit(&xf->live_unknown,
					  memory_order_relaxed);
	r->outages = atomic_load_explicit(&xf->live_outages,
					  memory_order_relaxed);
	for (uint32_t id = 0; id < LOCO_MAX_NODES; id++)
		r->repairs_of[id] = atomic_load_explicit(&xf->live_repairs_of[id],
							 memory_order_relaxed);
	r->reclaimed = atomic_load_explicit(&xf->live_reclaimed,
					    memory_order_relaxed);
	loco_mgr_stats(xf->mgr, &now);
	xfer_rec_stats(xf, &now);
}

/* Beat (RUNNING) or final record (DONE). The DONE mark is its own 8-byte
 * WRITE after a fence: a reader that sees it sees the final record. */
int xfer_publish(struct xfer *xf, enum xfer_state st)
{
	if (st == XFER_RUNNING)
		fill_rec(xf);
	xf->rec.state = XFER_RUNNING;
	int rc = loco_write(xf->thr, &xf->ctl, rec_off(xf->self), &xf->rec,
			    sizeof(xf->rec));
	if (!rc && xf->tl)
		rc = publish_timeline(xf);
	if (rc || st != XFER_DONE)
		return rc;
	/* Record and timeline placed (durable on a durable home node)
	 * before the DONE mark. */
	rc = loco_persist(xf->thr, xf->home);
	xf->rec.state = XFER_DONE;
	if (!rc)
		rc = loco_write(xf->thr, &xf->ctl,
				rec_off(xf->self) + offsetof(struct xfer_rec, state),
				&xf->rec.state, 8);
	return rc ? rc : loco_persist(xf->thr, xf->home);
}

/* ---- waiting for the others ---------------------------------------------- */

static void sum_rec(struct xfer_result *res, const struct xfer_rec *r)
{
	res->ops += r->ops;
	res->aborts += r->aborts;
	res->repairs += r->repairs;
	res->blocked += r->blocked;
	res->st.reads += r->reads;
	res->st.writes += r->writes;
	res->st.cas += r->cas;
	res->st.faa += r->faa;
	res->st.bytes_read += r->bytes_read;
	res->st.bytes_written += r->bytes_written;
	res->st.rtts += r->rtts;
	res->st.flushes += r->flushes;
	if (r->blocked_p99_us > res->blocked_p99_us)
		res->blocked_p99_us = r->blocked_p99_us;
	if (r->blocked_max_us > res->blocked_max_us)
		res->blocked_max_us = r->blocked_max_us;
	res->stalls += r->stalls;
	res->acked += r->acked;
	res->unknown += r->unknown;
	res->outages += r->outages;
	res->reclaimed |= r->reclaimed;
	res->repair_end_us = xfer_min_set(res->repair_end_us, r->repair_end_us);
	if (r->stall_p50_us > res->stall_p50_us)
		res->stall_p50_us = r->stall_p50_us;
	if (r->stall_p99_us > res->stall_p99_us)
		res->stall_p99_us = r->stall_p99_us;
	if (r->stall_max_us > res->stall_max_us)
		res->stall_max_us = r->stall_max_us;
}

/* A node sent no heartbeat for --dead-ms: it is only suspected (it may
 * be paused, not dead). It is fenced before anyone acts for it (its
 * slots are adopted, which its late WRITEs would corrupt: docs/rtx.md, "A
 * paused owner"); a fence that did not complete leaves it waited for and
 * fenced at a later look. */
bool xfer_fence_suspect(struct xfer *xf, uint32_t id, struct xfer_peer *pw)
{
	int rc = loco_fence_node(xf->mgr, id, FENCE_MS);
	if (!rc)
		return true;
	/* -EOPNOTSUPP too: a transport that cannot fence gets no takeover
	 * on the timer alone (docs/ordering.md, "Fencing"). */
	if (!pw->unfenced)
		fprintf(stderr, "loco-rtx-transfer: node %u: node %u is silent but "
			"not fenced (%s): waiting for it%s\n", xf->self, id,
			loco_strerror(rc), rc == -EOPNOTSUPP ?
			" (this transport cannot fence: it is never adopted)" : "");
	pw->unfenced = true;
	return false;
}

int xfer_look(struct xfer *xf, struct loco_thread *thr, uint32_t id,
	      struct xfer_peer *pw, struct xfer_rec *r, enum xfer_seen *seen)
{
	int rc = loco_read(thr, &xf->ctl, rec_off(id), r, sizeof(*r));
	if (rc)
		return rc;
	uint64_t now = loco_lease_now_ns();
	*seen = XFER_SEEN_ALIVE;
	if (r->state == XFER_DONE) {
		*seen = XFER_SEEN_DONE;
	} else if (r->hb_ms != pw->hb || !pw->since_ns) {
		pw->hb = r->hb_ms;
		pw->since_ns = now;
	} else if (now >= pw->since_ns &&  /* else the lease clock stepped back */
		   now - pw->since_ns >= (uint64_t)xf->o.dead_ms * 1000000u) {
		*seen = XFER_SEEN_SUSPECT;
	}
	return 0;
}

/* Look at node ID once: DONE, dead (no beat for dead_ms, then fenced), or
 * neither. */
static int watch(struct xfer *xf, uint32_t id, struct xfer_peer *pw,
		 struct xfer_result *res)
{
	struct xfer_rec r;
	enum xfer_seen seen;
	int rc = xfer_look(xf, xf->thr, id, pw, &r, &seen);
	if (rc || seen == XFER_SEEN_ALIVE ||
	    (seen == XFER_SEEN_SUSPECT && !xfer_fence_suspect(xf, id, pw)))
		return rc;
	if (seen == XFER_SEEN_DONE) {
		res->done |= UINT64_C(1) << id;
	} else {
		res->dead |= UINT64_C(1) << id;
		fprintf(stderr, "loco-rtx-transfer: node %u: node %u is dead (no "
			"heartbeat for %u ms; fenced)\n", xf->self, id,
			xf->o.dead_ms);
	}
	pw->settled = true;
	sum_rec(res, &r);
	for (uint32_t i = 0; i < LOCO_MAX_NODES; i++)
		res->repairs_of[i] += r.repairs_of[i];
	return 0;
}

void xfer_dead_repairs(struct xfer *xf, struct xfer_result *res)
{
	res->dead_repairs = 0;
	for (uint64_t m = res->dead; m; m &= m - 1) {
		uint32_t id = (uint32_t)__builtin_ctzll(m);
		/* Relaxed: a counter; this node's workers are done. */
		res->dead_repairs += res->repairs_of[id] +
			atomic_load_explicit(&xf->live_repairs_of[id],
					     memory_order_relaxed);
	}
}

int xfer_wait_others(struct xfer *xf, struct xfer_result *res)
{
	struct xfer_peer pw[LOCO_MAX_NODES];
	memset(pw, 0, sizeof(pw));
	uint64_t left = xf->compute & ~(UINT64_C(1) << xf->self);
	while (left) {
		for (uint64_t m = left; m; m &= m - 1) {
			uint32_t id = (uint32_t)__builtin_ctzll(m);
			int rc = watch(xf, id, &pw[id], res);
			/* The home node died: nobody could beat meanwhile. */
			if (rc == -LOCO_EDOWN && !(rc = xfer_wait_memory(xf)))
				memset(pw, 0, sizeof(pw));
			if (rc)
				return rc;
			if (pw[id].settled)
				left &= ~(UINT64_C(1) << id);
		}
		if (left) {
			struct timespec ts = { 0, WAIT_POLL_US * 1000L };
			nanosleep(&ts, NULL);
		}
	}
	res->done |= UINT64_C(1) << xf->self;
	sum_rec(res, &xf->rec);
	return 0;
}

/* ---- timeline CSV -------------------------------------------------------- */

static int read_timelines(struct xfer *xf, uint32_t *all, unsigned nn)
{
	int rc = 0;
	const uint32_t piece = 8192;
	for (unsigned id = 0; id < nn && !rc; id++) {
		if (!(xf->compute & UINT64_C(1) << id))
			continue;
		for (uint32_t f = 0; f < xf->tl_len && !rc; f += piece) {
			uint32_t n = xf->tl_len - f < piece ? xf->tl_len - f : piece;
			rc = loco_read(xf->thr, &xf->tlr,
				       ((uint64_t)id * xf->tl_len + f) * 4,
				       all + (size_t)id * xf->tl_len + f, n * 4);
		}
	}
	return rc;
}

static uint32_t last_nonzero(const uint32_t *all, unsigned nn, uint32_t len)
{
	uint32_t last = 0;
	for (unsigned id = 0; id < nn; id++)
		for (uint32_t i = 0; i < len; i++)
			if (all[(size_t)id * len + i] && i > last)
				last = i;
	return last;
}

static void write_csv(FILE *f, const struct xfer *xf, const uint32_t *all,
		      unsigned nn, uint32_t end, const struct xfer_result *res)
{
	fprintf(f, "ms,total");
	for (unsigned id = 0; id < nn; id++)
		if (xf->compute & UINT64_C(1) << id)
			fprintf(f, ",n%u%s", id,
				res->dead & UINT64_C(1) << id ? "_dead" : "");
	fputc('\n', f);
	for (uint32_t i = 0; i <= end; i++) {
		uint64_t total = 0;
		for (unsigned id = 0; id < nn; id++)
			total += all[(size_t)id * xf->tl_len + i];
		fprintf(f, "%u,%llu", i, (unsigned long long)total);
		for (unsigned id = 0; id < nn; id++)
			if (xf->compute & UINT64_C(1) << id)
				fprintf(f, ",%u", all[(size_t)id * xf->tl_len + i]);
		fputc('\n', f);
	}
}

int xfer_write_timeline(struct xfer *xf, const struct xfer_result *res)
{
	unsigned nn = loco_mgr_hosts(xf->mgr)->max_id + 1;
	uint32_t *all = calloc((size_t)nn * xf->tl_len, sizeof(*all));
	int rc = all ? read_timelines(xf, all, nn) : -ENOMEM;
	FILE *f = rc ? NULL : fopen(xf->o.timeline, "w");
	if (!rc && !f)
		rc = -errno;
	if (f) {
		write_csv(f, xf, all, nn, last_nonzero(all, nn, xf->tl_len), res);
		if (fclose(f))
			rc = -errno;
	}
	free(all);
	return rc;
}
