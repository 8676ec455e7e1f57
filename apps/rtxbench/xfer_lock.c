/* SPDX-License-Identifier: MIT */
/* The lock-based baseline of loco-rtx-transfer: each account is {lock,
 * balance} on the home memory node; a transfer CAS-locks both accounts
 * in index order, READs both balances, WRITEs both, and releases both by
 * CAS. No log, no lease: a client that dies holding a lock wedges the
 * account forever (which is what rTX repairs). Not for crash runs. */
#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "apps/rtxbench/xfer.h"

#define ACCT_LEN 16
#define LK_NONE 0          /* account not initialised */
#define LK_FREE 1

static uint64_t lock_word(const struct xfer *xf, unsigned idx)
{
	return 2 + ((uint64_t)xf->self << 8 | idx);
}

int xfer_lock_open(struct xfer *xf)
{
	/* Lock words CAS'd, balances read and written. */
	return xfer_open_shared(xf, "lk", (uint64_t)xf->o.accounts * ACCT_LEN,
				LOCO_REGION_REMOTE_ALL, &xf->lk);
}

static void nap(unsigned *spins)
{
	if (++*spins > 64) {
		struct timespec ts = { 0, 2000 };
		nanosleep(&ts, NULL);
	}
}

/* Initialise account I if nobody did: lock it from NONE, write, free. */
static int init_one(struct xfer *xf, struct loco_thread *thr, uint32_t i)
{
	uint64_t off = (uint64_t)i * ACCT_LEN, mine = lock_word(xf, 63), old;
	unsigned spins = 0;
	int rc = loco_cas(thr, &xf->lk, off, LK_NONE, mine, &old);
	if (!rc && old == LK_NONE) {
		rc = loco_write(thr, &xf->lk, off + 8, &xf->o.balance, 8);
		/* Same QP: the balance is placed before the lock frees it. */
		if (!rc)
			rc = loco_cas(thr, &xf->lk, off, mine, LK_FREE, &old);
		return rc;
	}
	while (!rc && old != LK_FREE) {
		nap(&spins);
		rc = loco_read(thr, &xf->lk, off, &old, 8);
	}
	return rc;
}

int xfer_lock_init(struct xfer *xf)
{
	int rc = 0;
	for (uint32_t i = 0; !rc && i < xf->o.accounts; i++)
		rc = init_one(xf, xf->thr, i);
	return rc;
}

static int lock_acct(struct xfer *xf, struct loco_thread *thr, uint32_t i,
		     uint64_t mine, struct xfer_wstats *ws)
{
	uint64_t old = 0;
	unsigned spins = 0;
	for (;;) {
		int rc = loco_cas(thr, &xf->lk, (uint64_t)i * ACCT_LEN, LK_FREE,
				  mine, &old);
		if (rc || old == LK_FREE)
			return rc;
		ws->lock_waits++;
		nap(&spins);
	}
}

static int move(struct xfer *xf, struct loco_thread *thr, uint32_t a,
		uint32_t b, uint64_t amount, uint64_t mine)
{
	uint64_t bal[2], oa = (uint64_t)a * ACCT_LEN, ob = (uint64_t)b * ACCT_LEN;
	uint64_t old[2];
	struct loco_batch bt;
	struct loco_ack ack = { 0, 0 };
	loco_batch_init(&bt, thr);
	loco_batch_read(&bt, &xf->lk, oa + 8, &bal[0], 8);
	loco_batch_read(&bt, &xf->lk, ob + 8, &bal[1], 8);
	int rc = loco_batch_post(&bt, &ack);
	if (!rc)
		rc = loco_ack_wait(thr, &ack, -1);
	if (rc)
		return rc;
	uint64_t m = amount < bal[0] ? amount : bal[0];
	bal[0] -= m;
	bal[1] += m;
	/* One QP: the balances are placed before the unlocking CASes. */
	loco_batch_write(&bt, &xf->lk, oa + 8, &bal[0], 8);
	loco_batch_write(&bt, &xf->lk, ob + 8, &bal[1], 8);
	loco_batch_cas(&bt, &xf->lk, oa, mine, LK_FREE, &old[0]);
	loco_batch_cas(&bt, &xf->lk, ob, mine, LK_FREE, &old[1]);
	loco_ack_clear(&ack);
	rc = loco_batch_post(&bt, &ack);
	return rc ? rc : loco_ack_wait(thr, &ack, -1);
}

static int one_op(struct xfer *xf, struct loco_thread *thr, unsigned idx,
		  struct xfer_wstats *ws, uint64_t *rng)
{
	uint32_t n = xf->o.accounts, a = (uint32_t)(xfer_rng(rng) % n);
	uint32_t b = (uint32_t)(xfer_rng(rng) % (n - 1));
	b += b >= a;
	uint64_t amount = 1 + xfer_rng(rng) % xf->o.max_amount;
	uint64_t mine = lock_word(xf, idx), lw0 = ws->lock_waits;
	uint64_t t0 = loco_now_ns();
	int rc = lock_acct(xf, thr, a < b ? a : b, mine, ws);
	if (!rc)
		rc = lock_acct(xf, thr, a < b ? b : a, mine, ws);
	if (!rc)
		rc = move(xf, thr, a, b, amount, mine);
	if (rc)
		return rc;
	uint64_t t1 = loco_now_ns();
	ws->ops++;
	bench_lat_add(&ws->lat, t1 - t0);
	if (ws->lock_waits != lw0) {
		ws->blocked++;
		bench_lat_add(&ws->blocked_lat, t1 - t0);
	}
	xfer_tick(xf, xfer_realtime_ms());
	return 0;
}

void *xfer_lock_worker(void *arg)
{
	struct xfer_warg *wa = arg;
	struct xfer *xf = wa->xf;
	struct loco_thread *thr = NULL;
	uint64_t rng = xf->o.seed ^ ((uint64_t)xf->self << 32) ^ (wa->idx + 1) *
		       UINT64_C(0x9e3779b97f4a7c15);
	wa->rc = loco_thread_create(xf->mgr, &thr);
	/* Relaxed: a stop flag; nothing is published with it. */
	while (!wa->rc && !atomic_load_explicit(&xf->stop, memory_order_relaxed))
		wa->rc = one_op(xf, thr, wa->idx, &xf->ws[wa->idx], &rng);
	int drc = loco_thread_destroy(thr);
	if (!wa->rc)
		wa->rc = drc;
	return NULL;
}

int xfer_lock_final(struct xfer *xf, struct xfer_result *res)
{
	uint64_t acct[2];
	int rc = 0;
	for (uint32_t i = 0; !rc && i < xf->o.accounts; i++) {
		rc = loco_read(xf->thr, &xf->lk, (uint64_t)i * ACCT_LEN, acct, 16);
		res->locks_held += !rc && acct[0] != LK_FREE;
		res->total += rc ? 0 : acct[1];
	}
	return rc;
}
