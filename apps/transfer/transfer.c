/* SPDX-License-Identifier: MIT */
/* loco-transfer: the transactional locking benchmark of LOCO §7.1 (Fig. 4).
 *
 * Accounts are 8-byte words of one array channel, the shared_region
 * "xfer/accts", each starting at --balance (8 bytes of memory per
 * account). Locks are a lock_array "xfer/locks": account I is guarded by
 * lock I mod --locks, and lives where that lock does, in a block of its
 * lock's accounts (see "accounts" below). A transfer takes the locks of two distinct random
 * accounts in lock-index order (once if they share it), READs both
 * balances, moves a random amount of at least 1 (at most the source's
 * balance) by WRITEs of the two new balances (--cas-balances: a CAS on
 * each account from the balance it read), and releases the locks, the
 * lock atomics batched with the account ops (see "transfers" below).
 * --single-lock is --locks 1: every transfer takes the same lock (Fig. 4,
 * left: a contended lock-protected read-modify-write).
 *
 * Every node runs the same program: its hosts initialise their accounts,
 * the nodes pass a barrier and read the initial total, run --duration
 * seconds (a progress line a second on stderr), pass a barrier and read
 * the final total. The total is conserved iff the locks exclude each
 * other: a lost update (two holders of one account) changes it by the lost
 * amount, never 0. With --cas-balances, a CAS that finds another balance
 * than the one read under the lock is also counted as a conflict (a lost
 * update seen online). Exit status 1 if the total moved or any CAS
 * conflicted. --unlocked takes no lock (a broken variant: the tests show
 * that both checks catch it). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/common/bench.h"
#include "apps/common/cluster.h"
#include "apps/common/local.h"
#include "apps/common/opts.h"
#include "apps/common/zipf.h"
#include "apps/rtxbench/xfer.h"
#include <loco/channels/lock_array.h>
#include <loco/channels/shared_region.h>

#define MAX_THREADS 64
#define MAX_ACCOUNTS 1000000000u    /* 8 bytes each, in the arena */
#define MAX_LOCKS 4096
#define ACCT_BYTES 8
#define CHUNK 512                   /* accounts per fill/total WRITE or READ */
#define LAT_CAP (1u << 20)
#define SYNC_MS 120000              /* barriers before the run */
#define FINAL_MS 60000              /* the one after: nodes stop together */
#define READY_MS 120000

enum { X_CONFLICTS, X_SAME_LOCK, X_MOVED, X_ACQUIRES, X_HANDOVERS, X_WAITS,
       X_POLLS, X_SPUN_OUT, X_YIELDS, X_NAPS, X_N };

struct xo {
	uint32_t accounts;
	unsigned threads, locks;
	bool hot_locks;
	bool cas_balances;   /* CAS each balance from the one read */
	bool unlocked;       /* no lock at all: lost updates (tests) */
	double duration;
	uint64_t balance, max_amount, seed;
};

struct xf;

/* What a transfer needs of lock L_, looked up once (set-up): the copy
 * holding its accounts, the word of that copy where their block starts,
 * and the lock. */
struct xf_lock {
	const struct loco_rregion *rr;
	uint64_t block;
	struct loco_ticket_lock *lock;
};

struct xf_worker {
	struct xf *x;
	unsigned idx;
	pthread_t tid;
	uint64_t rng;
	uint64_t ops, n[X_N];
	_Atomic uint64_t live_ops;
	struct bench_lat lat;
	int rc;
};

struct xf {
	struct xo o;
	struct loco_mgr *mgr;
	struct loco_channel base;
	struct loco_shared_region acct;   /* the accounts, an array channel */
	const struct loco_rregion *acct_rr[LOCO_MAX_NODES]; /* each copy */
	uint64_t per_lock;                /* words of a lock's block */
	uint64_t per_node;                /* words of a node's copy */
	uint64_t locks_inv;               /* 2^64 / --locks rounded up (0 for 1) */
	struct xf_lock lk[MAX_LOCKS];        /* each lock's, see acct_at */
	struct loco_lock_array locks;
	struct cl_run run;
	uint32_t self;
	unsigned nmembers;
	uint32_t node[LOCO_MAX_NODES];  /* members in id order */
	pthread_barrier_t phase;
	uint64_t end_ns;
	_Atomic unsigned done;
	struct xf_worker w[MAX_THREADS];
};

static const char usage[] =
"usage: loco-transfer [options] (plus node options: --id/--hosts/--transport/..., or none for\n"
"                     a private one-node cluster)\n"
"  --rtx             run the rTX transfer instead (loco-rtx-transfer; its\n"
"                    options follow, see loco-transfer --rtx --help)\n"
"  --accounts N      accounts (8-byte words of an array channel),\n"
"                    2..1000000000 (default 1024); a node's arena needs\n"
"                    8 x N / nodes bytes (raise --arena-mb)\n"
"  --locks L         locks, account I guarded by lock I mod L (default 64)\n"
"  --single-lock     one lock for every transfer (same as --locks 1)\n"
"  --hot-locks       lock words in the NIC's device memory (verbs; falls back\n"
"                    to host memory with a warning, always on shm)\n"
"  --threads T       worker threads per node (default 1)\n"
"  --duration S      seconds of the measured phase (default 5)\n"
"  --balance B       initial balance of each account (default 1000000)\n"
"  --max-amount A    largest amount of a transfer (default 100; each is\n"
"                    1..A, at most the source's balance)\n"
"  --cas-balances    CAS each balance from the one read (a lost update is\n"
"                    then also seen at once, as a conflict) instead of\n"
"                    WRITEing the new balances\n"
"  --unlocked        take no lock (broken on purpose: updates get lost and\n"
"                    the checks fail; for the tests)\n"
"  --seed S          seed of the choices (default 1)\n"
"Prints a JSON line per node and, on the lowest id, the cluster's, with\n"
"initial_total, final_total and conserved; exit 1 unless conserved.\n";

/* ---- options ----------------------------------------------------------- */

static int parse_one(void *opts, int c, const char *arg, char *expect)
{
	struct xo *o = opts;
	switch (c) {
	case 'a': return bench_parse_uint(arg, 2, MAX_ACCOUNTS, &o->accounts, expect);
	case 'l': return bench_parse_uint(arg, 1, MAX_LOCKS, &o->locks, expect);
	case '1': o->locks = 1; return 0;
	case 'H': o->hot_locks = true; return 0;
	case 'c': o->cas_balances = true; return 0;
	case 'U': o->unlocked = true; return 0;
	case 't': return bench_parse_uint(arg, 1, MAX_THREADS, &o->threads, expect);
	case 'd': return bench_parse_duration(arg, &o->duration, expect);
	case 'b': return bench_parse_u64(arg, 1, UINT64_C(1) << 40, &o->balance,
					 expect);
	case 'm': return bench_parse_u64(arg, 1, UINT64_C(1) << 40,
					 &o->max_amount, expect);
	case 's': return bench_parse_u64(arg, 0, UINT64_MAX, &o->seed, expect);
	default: return -1;
	}
}

static int parse(struct xo *o, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "accounts", required_argument, NULL, 'a' },
		{ "locks", required_argument, NULL, 'l' },
		{ "single-lock", no_argument, NULL, '1' },
		{ "hot-locks", no_argument, NULL, 'H' },
		{ "cas-balances", no_argument, NULL, 'c' },
		{ "unlocked", no_argument, NULL, 'U' },
		{ "threads", required_argument, NULL, 't' },
		{ "duration", required_argument, NULL, 'd' },
		{ "balance", required_argument, NULL, 'b' },
		{ "max-amount", required_argument, NULL, 'm' },
		{ "seed", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 },
	};
	return bench_getopt(argc, argv, "", opts, parse_one, o, "loco-transfer") ?
	       2 : 0;
}

/* ---- accounts ------------------------------------------------------------
 *
 * Accounts are grouped by lock: lock L_ (account I's is I mod --locks)
 * lives at member L_ mod P (lock_array), and so do its accounts, in a
 * block of per_lock words (ceil(accounts / locks), rounded up to a cache
 * line) at block L_ / P of that member's copy, account I at word I / locks
 * of its block. So an account always lives where its lock does (the
 * lock's release follows the account's CAS on one QP), and a cache line
 * of accounts is only ever written under one lock: two nodes holding two
 * different locks never write one line (a line shared by accounts of
 * several locks would bounce between them). The words of a block past the
 * last account, and of a block past the last lock, hold 0. */

#define LINE_WORDS 8

static uint64_t per_lock_words(const struct xf *x)
{
	uint64_t n = (x->o.accounts + x->o.locks - 1) / x->o.locks;
	return (n + LINE_WORDS - 1) / LINE_WORDS * LINE_WORDS;
}

/* I / --locks as a multiply by 2^64 / --locks rounded up, exact for
 * every 32-bit I (Lemire, Kaser and Kurz, "Faster remainder by direct
 * computation", 2019): a transfer divides twice, and a divide takes
 * tens of cycles. */
static uint32_t per_locks(const struct xf *x, uint32_t i)
{
	if (x->o.locks == 1)
		return i;
	return (uint32_t)((unsigned __int128)x->locks_inv * i >> 64);
}

/* Account I: its lock's entry (lock I mod --locks), its index LK and its
 * offset in the copy that entry names. */
static const struct xf_lock *acct_at(const struct xf *x, uint32_t i,
				     uint32_t *lk, uint64_t *off)
{
	uint32_t q = per_locks(x, i);
	*lk = i - q * x->o.locks;
	*off = (x->lk[*lk].block + q) * ACCT_BYTES;
	return &x->lk[*lk];
}

/* Fill x->lk once the copies are known: lock L_'s accounts are in block
 * L_ / P of member L_ mod P's copy. */
static void locks_table(struct xf *x)
{
	x->locks_inv = x->o.locks == 1 ? 0 : UINT64_MAX / x->o.locks + 1;
	for (uint32_t i = 0; i < x->o.locks; i++)
		x->lk[i] = (struct xf_lock){
			.rr = x->acct_rr[x->node[i % x->nmembers]],
			.block = i / x->nmembers * x->per_lock,
			.lock = loco_lock_array_at(&x->locks, i),
		};
}

/* Whether word W of the copy of member M holds an account. */
static bool acct_word(const struct xf *x, unsigned m, uint64_t w)
{
	uint64_t lk = w / x->per_lock * x->nmembers + m;
	return lk < x->o.locks &&
	       w % x->per_lock * x->o.locks + lk < x->o.accounts;
}

static int accounts_init(struct xf *x)
{
	x->per_lock = per_lock_words(x);
	x->per_node = (x->o.locks + x->nmembers - 1) / x->nmembers * x->per_lock;
	/* Balances are read and written, each account's version CAS'd. */
	int rc = loco_shared_region_init_ex(&x->acct, x->mgr, &x->base, "accts",
					    x->per_node * ACCT_BYTES, 0,
					    LOCO_REGION_REMOTE_ALL);
	if (rc == -ENOMEM)
		fprintf(stderr, "loco-transfer: %u accounts need %llu MiB of "
			"arena per node: raise --arena-mb\n", x->o.accounts,
			(unsigned long long)((x->per_node * ACCT_BYTES >> 20) + 1));
	return rc;
}

static void accounts_fini(struct xf *x)
{
	loco_shared_region_fini(&x->acct);
}

/* Hosts set their accounts to the initial balance and the rest of their
 * copy to 0 (before the barrier that starts the run), CHUNK words a
 * WRITE. */
static int accounts_fill(struct xf *x, struct loco_thread *thr)
{
	uint64_t buf[CHUNK];
	unsigned self_idx = 0;
	const struct loco_rregion *rr = loco_shared_region_at(&x->acct, x->self);
	if (!rr)
		return -ENOTCONN;
	while (x->node[self_idx] != x->self)
		self_idx++;
	for (uint64_t j = 0; j < x->per_node; j += CHUNK) {
		uint64_t n = x->per_node - j < CHUNK ? x->per_node - j : CHUNK;
		for (uint64_t k = 0; k < n; k++)
			buf[k] = acct_word(x, self_idx, j + k) ? x->o.balance : 0;
		int rc = loco_write(thr, rr, j * ACCT_BYTES, buf,
				    (uint32_t)(n * ACCT_BYTES));
		if (rc)
			return rc;
	}
	return 0;
}

/* Sum of every balance, a CHUNK-word READ of each node's copy at a time
 * (the run is quiescent: no transfer runs between the barriers). */
static int accounts_total(struct xf *x, struct loco_thread *thr,
			  uint64_t *total)
{
	static _Thread_local uint64_t bal[LOCO_MAX_NODES][CHUNK];
	uint64_t sum = 0;
	for (uint64_t j = 0; j < x->per_node; j += CHUNK) {
		uint64_t n = x->per_node - j < CHUNK ? x->per_node - j : CHUNK;
		struct loco_ack ack = { 0, 0 };
		int rc = 0;
		for (unsigned m = 0; !rc && m < x->nmembers; m++) {
			const struct loco_rregion *rr =
				loco_shared_region_at(&x->acct, x->node[m]);
			rc = rr ? loco_post_read(thr, rr, j * ACCT_BYTES, bal[m],
						 (uint32_t)(n * ACCT_BYTES), &ack) :
				  -ENOTCONN;
		}
		int wrc = loco_ack_wait(thr, &ack, -1);
		if (rc || wrc)
			return rc ? rc : wrc;
		for (unsigned m = 0; m < x->nmembers; m++)
			for (uint64_t k = 0; k < n; k++)
				if (acct_word(x, m, j + k))
					sum += bal[m][k];
	}
	*total = sum;
	return 0;
}

/* ---- set-up -------------------------------------------------------------- */

static void members_init(struct xf *x)
{
	uint64_t m = bench_members(x->mgr);
	x->nmembers = 0;
	for (; m; m &= m - 1)
		x->node[x->nmembers++] = (uint32_t)__builtin_ctzll(m);
}

/* Each lock lives where acct_at puts its accounts (a release's FAA
 * follows the CASes it publishes on one QP only then): -EINVAL if not. */
static int locks_check(struct xf *x)
{
	for (unsigned i = 0; i < x->o.locks; i++)
		if (loco_ticket_lock_host(loco_lock_array_at(&x->locks, i)) !=
		    x->node[i % x->nmembers]) {
			fprintf(stderr, "loco-transfer: lock %u is not hosted with "
				"its accounts\n", i);
			return -EINVAL;
		}
	return 0;
}

static int setup(struct xf *x)
{
	x->self = loco_mgr_id(x->mgr);
	members_init(x);
	int rc = loco_channel_init(&x->base, x->mgr, NULL, "xfer", 0, NULL);
	if (rc)
		return rc;
	rc = accounts_init(x);
	if (rc)
		goto fini_base;
	/* One worker a node: its locks need no local queue. */
	rc = loco_lock_array_init_ex(&x->locks, x->mgr, &x->base, "locks",
				     x->o.locks, 0,
				     (x->o.hot_locks ? LOCO_REGION_HOT : 0) |
				     (x->o.threads == 1 ? LOCO_TICKET_LOCK_SOLO :
				      0));
	if (rc)
		goto fini_accounts;
	rc = locks_check(x);
	if (!rc)
		rc = cl_run_init(&x->run, x->mgr, "xferrun");
	if (rc)
		goto fini_locks;
	rc = loco_channel_join(&x->base);
	if (!rc)
		rc = loco_mgr_wait_ready(x->mgr, READY_MS);
	for (unsigned m = 0; !rc && m < x->nmembers; m++)
		x->acct_rr[x->node[m]] = loco_shared_region_at(&x->acct,
							       x->node[m]);
	if (!rc) {
		locks_table(x);
		return 0;
	}
	cl_run_fini(&x->run);
fini_locks:
	loco_lock_array_fini(&x->locks);
fini_accounts:
	accounts_fini(x);
fini_base:
	loco_channel_fini(&x->base);
	return rc;
}

static void teardown(struct xf *x)
{
	cl_run_fini(&x->run);
	loco_lock_array_fini(&x->locks);
	accounts_fini(x);
	loco_channel_fini(&x->base);
}

/* ---- transfers -----------------------------------------------------------
 *
 * A transfer in two or three doorbell rounds (one round trip each),
 * batching the locks' atomics with the accounts' ops:
 *   1  FAA next of the lower lock (the ticket), plus a READ of serving
 *      when another node released it last, and the READs of the balances
 *      it guards: they run under the lock if this node released it last,
 *      or if that READ of serving, ahead of them on the same QP (a lock
 *      lives where its accounts do, below), finds the ticket served.
 *      With two locks, when this node released the higher one last (and
 *      its last such guess held), the CAS of its next that takes it if
 *      free (a trylock) and the READ of its balance ride along; it is
 *      kept only if the lower lock is ours without a wait (else given
 *      back first: nobody waits while holding a lock out of order);
 *   2  (two locks, the trylock not taken) the same for the higher lock
 *      and its balance; any READ that ran before its lock was ours is
 *      repeated;
 *   3  the two balance WRITEs (--cas-balances: CASes from the balances
 *      read) and the two release FAAs: a lock and the accounts it guards
 *      live on one node, so each release follows its account's WRITE on
 *      one QP, which places the WRITE first (docs/ordering.md, rule 1).
 * Verbs on one node: FAA + CAS + 2 READ + 2 WRITE + 2 FAA = 8 in 2 rounds
 * (one lock: 6 in 2); between nodes, uncontended, a READ of serving more
 * per lock taken by FAA. */

/* A transfer's accounts (A from, B to) and the locks that guard them. */
struct xfer_op {
	uint32_t acct[2];
	uint64_t off[2];
	const struct loco_rregion *rr[2];
	struct loco_ticket_lock *lock[2];   /* guarding acct[0], acct[1] */
	struct loco_ticket_lock *lo, *hi;   /* in lock-index order */
	uint64_t bal[2];                    /* as READ under the locks */
	uint64_t nbal[2];                   /* the new balances (WRITE sources) */
};

/* Add the READ of the balances guarded by L (both, if L guards both).
 * Inlined, as the helpers below: a transfer is a few dozen instructions
 * of its own between its ops, and a call costs several. */
__attribute__((always_inline))
static inline void read_guarded(struct xfer_op *op, struct loco_batch *b,
				const struct loco_ticket_lock *l)
{
	for (unsigned i = 0; i < 2; i++)
		if (op->lock[i] == l)
			loco_batch_read(b, op->rr[i], op->off[i], &op->bal[i], 8);
}

/* Release L, held with nothing written under it. */
static void unlock_unused(struct loco_ticket_lock *l, struct loco_thread *thr)
{
	loco_ticket_lock_unlock(l, thr, LOCO_FENCE_PAIR, loco_ticket_lock_host(l));
}

/* Try ALSO (not NULL: the higher lock) in L's round, with the READs of its
 * accounts behind the CAS (its host holds them): *GOT says whether it is
 * held, those READs run under it. It is kept only if L is ours without a
 * wait: a trylock takes no place in ALSO's queue and is given back before
 * any wait for L, so no node waits for a lock while it holds a higher
 * one (the lock order still rules out deadlock). */
__attribute__((always_inline))
static inline void try_also(struct xfer_op *op, struct loco_thread *thr,
			    struct loco_ticket_lock *also, struct loco_tl_try *t,
			    struct loco_batch *b, bool *posted)
{
	*posted = also && !loco_ticket_lock_trylock_post(also, thr, b, t);
	if (*posted)
		read_guarded(op, b, also);
}

/* Acquire L in one round with the READs of its accounts when they will
 * probably run under it: this node released L last, or a READ of serving
 * rides ahead of them on the same QP (the lock's host holds them), which
 * tells whether they ran after L was ours. Else READ them once L is held.
 * ALSO (or NULL): the higher lock, tried in the same round (try_also);
 * *GOT: whether it is held, its balances READ. Inlined: each call site
 * passes ALSO or NULL, and a NULL drops the trylock's code. */
__attribute__((always_inline))
static inline int acquire(struct xfer_op *op, struct loco_thread *thr,
		   struct loco_ticket_lock *l, struct loco_ticket_lock *also,
		   bool *got)
{
	struct loco_tl_acquire a;
	struct loco_tl_try t;
	struct loco_batch b;
	bool tried;
	loco_batch_init(&b, thr);
	int rc = loco_ticket_lock_lock_post(l, thr, &b, &a, -1);
	if (rc)
		return rc;
	bool spec = a.speculate || a.read;
	if (spec)
		read_guarded(op, &b, l);
	try_also(op, thr, also, &t, &b, &tried);
	int brc = loco_batch_run(&b, -1);
	*got = also && tried &&
	       !loco_ticket_lock_trylock_finish(also, thr, &t, brc);
	if (*got && !loco_ticket_lock_lock_served(&a)) {
		unlock_unused(also, thr);   /* before L's wait */
		*got = false;
	}
	rc = loco_ticket_lock_lock_finish(l, thr, &a, brc);
	if (rc >= 0 && !(spec && (rc == 1 || a.host_early))) {
		loco_batch_init(&b, thr);
		read_guarded(op, &b, l);
		rc = loco_batch_run(&b, -1);
		if (rc)
			loco_ticket_lock_unlock(l, thr, LOCO_FENCE_THREAD, 0);
	}
	if (rc < 0 && *got)
		unlock_unused(also, thr);
	return rc < 0 ? rc : 0;
}

/* Both locks (in index order), both balances READ under them. Inlined
 * into move, as the helpers above. */
__attribute__((always_inline))
static inline int lock_read(struct xfer_op *op, struct loco_thread *thr)
{
	bool got;
	if (op->hi == op->lo)
		return acquire(op, thr, op->lo, NULL, &got);
	int rc = acquire(op, thr, op->lo, op->hi, &got);
	if (rc || got)
		return rc;
	rc = acquire(op, thr, op->hi, NULL, &got);
	if (rc)
		loco_ticket_lock_unlock(op->lo, thr, LOCO_FENCE_THREAD, 0);
	return rc;
}

/* --unlocked: both balances READ, no lock. */
static int read_unlocked(struct xfer_op *op, struct loco_thread *thr)
{
	struct loco_batch b;
	loco_batch_init(&b, thr);
	for (unsigned i = 0; i < 2; i++)
		loco_batch_read(&b, op->rr[i], op->off[i], &op->bal[i], 8);
	return loco_batch_run(&b, -1);
}

/* The new balances of a transfer of up to AMOUNT (>= 1) from account 0
 * to 1, or from 1 to 0 when account 0 has less than AMOUNT and account 1
 * more than account 0: at least 1 moves unless both are empty, so a lost
 * update always moves the total. Returns the amount moved. */
static uint64_t settle(struct xfer_op *op, uint64_t amount)
{
	if (__builtin_expect(op->bal[0] >= amount, 1)) {
		op->nbal[0] = op->bal[0] - amount;
		op->nbal[1] = op->bal[1] + amount;
		return amount;
	}
	unsigned from = op->bal[1] > op->bal[0];
	if (amount > op->bal[from])
		amount = op->bal[from];
	op->nbal[from] = op->bal[from] - amount;
	op->nbal[!from] = op->bal[!from] + amount;
	return amount;
}

/* The new balances' WRITEs (CAS: CASes from the balances read, OLD gets
 * what they found) and the releases, higher lock first, in one round:
 * each lock lives where its accounts do. LOCKED: false for --unlocked.
 * Release: the FAAs follow the WRITEs or CASes they publish on one QP.
 * Inlined: each call site passes CAS as a constant. */
__attribute__((always_inline))
static inline int update_unlock(struct xfer_op *op, struct loco_thread *thr,
			 bool cas, bool locked, uint64_t *old)
{
	/* The locks to release, higher first: the first N of REL. */
	struct loco_ticket_lock *rel[2] = { op->hi, op->lo };
	unsigned n = !locked ? 0 : op->hi == op->lo ? 1 : 2;
	struct loco_tl_release r[2];
	struct loco_batch b;
	int rc = 0;
	loco_batch_init(&b, thr);
	for (unsigned i = 0; i < 2; i++) {
		if (cas)
			loco_batch_cas(&b, op->rr[i], op->off[i], op->bal[i],
				       op->nbal[i], &old[i]);
		else
			loco_batch_write(&b, op->rr[i], op->off[i], &op->nbal[i], 8);
	}
	/* Unrolled: N is 0, 1 or 2, and a loop's control costs as much as
	 * a release's inline path. */
	if (n)
		rc = loco_ticket_lock_unlock_post(rel[0], thr, &b, &r[0]);
	if (n == 2) {
		int prc = loco_ticket_lock_unlock_post(rel[1], thr, &b, &r[1]);
		rc = rc ? rc : prc;
	}
	int brc = loco_batch_run(&b, -1);
	if (n) {
		int urc = loco_ticket_lock_unlock_finish(rel[0], thr, &r[0], brc,
							 LOCO_FENCE_THREAD, 0);
		rc = rc ? rc : urc;
	}
	if (n == 2) {
		int urc = loco_ticket_lock_unlock_finish(rel[1], thr, &r[1], brc,
							 LOCO_FENCE_THREAD, 0);
		rc = rc ? rc : urc;
	}
	return rc ? rc : brc;
}

/* Move up to AMOUNT (>= 1) between accounts A and B under their locks
 * (see settle). */
static int move(struct xf_worker *w, struct loco_thread *thr, uint32_t a,
		uint32_t b, uint64_t amount)
{
	struct xf *x = w->x;
	struct xfer_op op;   /* every field is set before it is read */
	op.acct[0] = a;
	op.acct[1] = b;
	uint32_t lk[2];
	for (unsigned i = 0; i < 2; i++) {
		const struct xf_lock *e = acct_at(x, op.acct[i], &lk[i], &op.off[i]);
		op.rr[i] = e->rr;
		if (!op.rr[i])
			return -ENOTCONN;
		op.lock[i] = e->lock;
	}
	bool swap = lk[0] > lk[1];
	op.lo = op.lock[swap];
	op.hi = op.lock[!swap];
	bool cas = x->o.cas_balances, locked = !x->o.unlocked;
	int rc = locked ? lock_read(&op, thr) : read_unlocked(&op, thr);
	if (rc)
		return rc;
	amount = settle(&op, amount);
	uint64_t old[2];
	rc = cas ? update_unlock(&op, thr, true, locked, old) :
		   update_unlock(&op, thr, false, locked, old);
	if (rc)
		return rc;
	if (cas)
		w->n[X_CONFLICTS] += (old[0] != op.bal[0]) + (old[1] != op.bal[1]);
	w->n[X_MOVED] += amount;
	w->n[X_SAME_LOCK] += op.lo == op.hi;
	return 0;
}

/* A uniform draw below N (N >= 1) from W's generator: the high half of
 * a 64 x 64-bit product, no division (a 64-bit divide costs more than
 * the rest of the draw). */
static uint64_t below(struct xf_worker *w, uint64_t n)
{
	return (uint64_t)((unsigned __int128)rng_next(&w->rng) * n >> 64);
}

/* One transfer that started at *T0 (the end of the previous one: the
 * workers run back to back, so one clock read per transfer times it);
 * *T0 becomes its end. */
static int transfer(struct xf_worker *w, struct loco_thread *thr, uint64_t *t0)
{
	struct xf *x = w->x;
	uint32_t n = x->o.accounts, a = (uint32_t)below(w, n);
	uint32_t b = (uint32_t)below(w, n - 1);
	b += b >= a;
	uint64_t amount = below(w, x->o.max_amount) + 1;
	int rc = move(w, thr, a, b, amount);
	if (rc)
		return rc;
	uint64_t t1 = loco_now_ns();
	bench_lat_add(&w->lat, t1 - *t0);
	*t0 = t1;
	w->ops++;
	/* Relaxed: a progress counter. */
	atomic_store_explicit(&w->live_ops, w->ops, memory_order_relaxed);
	return 0;
}

static void *worker_main(void *arg)
{
	struct xf_worker *w = arg;
	struct xf *x = w->x;
	struct loco_thread *thr = NULL;
	w->rng = rng_mix(x->o.seed ^ (uint64_t)x->self << 32 ^ w->idx);
	w->rc = bench_lat_init(&w->lat, LAT_CAP);
	if (!w->rc)
		w->rc = loco_thread_create(x->mgr, &thr);
	pthread_barrier_wait(&x->phase);   /* every worker is set up */
	pthread_barrier_wait(&x->phase);   /* the run starts: end_ns is set */
	uint64_t t = loco_now_ns();
	while (!w->rc && t < x->end_ns)
		w->rc = transfer(w, thr, &t);
	if (thr) {
		int drc = loco_thread_destroy(thr);
		w->rc = w->rc ? w->rc : drc;
	}
	if (w->rc)
		fprintf(stderr, "transfer: node %u worker %u: %s\n", x->self,
			w->idx, loco_strerror(w->rc));
	/* Release: pairs with the acquire load in cl_progress_run (from
	 * progress()); the worker's counters are final. */
	atomic_fetch_add_explicit(&x->done, 1, memory_order_release);
	return NULL;
}

/* ---- the run ------------------------------------------------------------- */

/* Print a progress line a second until every worker is done. */
static void progress(struct xf *x, uint64_t t0)
{
	struct cl_progress p = {
		.name = "transfer", .unit = "transfers", .node = x->self,
		.threads = x->o.threads, .done = &x->done,
		.ops = &x->w[0].live_ops, .stride = sizeof(x->w[0]),
	};
	cl_progress_run(&p, t0);
}

/* Sum the workers and this node's lock counters into ROW. */
static int row_fill(struct xf *x, struct cl_row *row)
{
	struct bench_lat lat;
	size_t n = 0;
	int rc = 0;
	for (unsigned i = 0; i < x->o.threads; i++) {
		row->ops += x->w[i].ops;
		for (unsigned k = 0; k < X_N; k++)
			row->extra[k] += x->w[i].n[k];
		n += x->w[i].lat.n;
		rc = rc ? rc : x->w[i].rc;
	}
	for (unsigned i = 0; i < x->o.locks; i++) {
		struct loco_ticket_lock_stats st;
		loco_ticket_lock_stats(loco_lock_array_at(&x->locks, i), &st);
		row->extra[X_ACQUIRES] += st.acquires;
		row->extra[X_HANDOVERS] += st.handovers;
		row->extra[X_WAITS] += st.waits;
		row->extra[X_POLLS] += st.polls;
		row->extra[X_SPUN_OUT] += st.spun_out;
		row->extra[X_YIELDS] += st.yields;
		row->extra[X_NAPS] += st.naps;
	}
	if (bench_lat_init(&lat, n ? n : 1))
		return -ENOMEM;
	for (unsigned i = 0; i < x->o.threads; i++) {
		bench_lat_append(&lat, &x->w[i].lat);
		bench_lat_fini(&x->w[i].lat);
	}
	cl_row_lat(row, &lat);
	bench_lat_fini(&lat);
	return rc;
}

/* CLUSTER: the fewest and most transfers of a node for the cluster line,
 * or NULL for this node's line. */
static void report(struct xf *x, const struct cl_row *row,
		   const uint64_t *cluster, uint64_t initial, uint64_t final)
{
	const uint64_t *e = row->extra;
	uint64_t expected = (uint64_t)x->o.accounts * x->o.balance;
	struct bench_result r = {
		.app = "transfer", .transport = loco_mgr_transport(x->mgr),
		.nodes = x->nmembers, .threads = x->o.threads,
	};
	cl_json_begin(stdout, &r, row, cluster, x->self);
	printf(",\"mode\":\"%s\",\"balances\":\"%s\",\"locked\":%s,\"accounts\":%u,\"locks\":%u,\"initial_total\":%"
	       PRIu64 ",\"final_total\":%" PRIu64 ",\"expected_total\":%" PRIu64
	       ",\"conserved\":%s,\"conflicts\":%" PRIu64 ",\"same_lock\":%" PRIu64
	       ",\"moved\":%" PRIu64 ",\"acquires\":%" PRIu64 ",\"handovers\":%"
	       PRIu64 ",\"lock_waits\":%" PRIu64 ",\"lock_polls\":%" PRIu64
	       ",\"lock_spun_out\":%" PRIu64 ",\"lock_yields\":%" PRIu64 ",\"lock_naps\":%" PRIu64,
	       x->o.locks == 1 ? "single-lock" : "two-lock",
	       x->o.cas_balances ? "cas" : "write",
	       x->o.unlocked ? "false" : "true", x->o.accounts,
	       x->o.locks, initial, final, expected,
	       initial == expected && final == expected ? "true" : "false",
	       e[X_CONFLICTS], e[X_SAME_LOCK], e[X_MOVED], e[X_ACQUIRES],
	       e[X_HANDOVERS], e[X_WAITS], e[X_POLLS], e[X_SPUN_OUT], e[X_YIELDS],
	       e[X_NAPS]);
	bench_json_dm(stdout, x->mgr, x->o.hot_locks);
	bench_json_end(stdout);
}

/* After the run: publish, read the final total, print. 0 if conserved
 * and conflict-free. */
static int finish(struct xf *x, struct loco_thread *thr, struct cl_row *row,
		  uint64_t initial)
{
	uint64_t final = 0, expected = (uint64_t)x->o.accounts * x->o.balance;
	struct cl_row sum;
	int rc = cl_run_publish(&x->run, thr, row, FINAL_MS);
	if (!rc)
		rc = accounts_total(x, thr, &final);
	/* No node leaves before every node read the accounts: on a transport
	 * whose memory leaves with its process the last reads would fail. */
	if (!rc)
		rc = cl_run_sync(&x->run, thr, FINAL_MS);
	if (rc)
		return rc;
	uint64_t spread[2];
	report(x, row, NULL, initial, final);
	if (cl_run_leader(&x->run) &&
	    !(rc = cl_run_sum(&x->run, &sum, &spread[0], &spread[1])))
		report(x, &sum, spread, initial, final);
	if (rc)
		return rc;
	if (initial != expected || final != expected || row->extra[X_CONFLICTS]) {
		fprintf(stderr, "transfer: node %u: total %" PRIu64 " -> %" PRIu64
			", expected %" PRIu64 ", %" PRIu64 " conflicts\n", x->self,
			initial, final, expected, row->extra[X_CONFLICTS]);
		return -EIO;
	}
	return 0;
}

/* Initialise, read the initial total, run the workers. */
static int run_all(struct xf *x, struct loco_thread *thr)
{
	uint64_t initial = 0;
	int rc = accounts_fill(x, thr);
	if (!rc)
		rc = cl_run_sync(&x->run, thr, SYNC_MS);
	if (!rc)
		rc = accounts_total(x, thr, &initial);
	/* Every node read its initial total before any transfer starts. */
	if (!rc)
		rc = cl_run_sync(&x->run, thr, SYNC_MS);
	pthread_barrier_init(&x->phase, NULL, x->o.threads + 1);
	for (unsigned i = 0; i < x->o.threads; i++) {
		x->w[i].x = x;
		x->w[i].idx = i;
		if (pthread_create(&x->w[i].tid, NULL, worker_main, &x->w[i])) {
			fprintf(stderr, "loco-transfer: cannot start a thread\n");
			exit(1);
		}
	}
	/* The run starts once every worker has its thread (on ucx a thread's
	 * set-up connects to every peer: a busy host once took longer than
	 * the whole --duration, and no transfer ran). */
	pthread_barrier_wait(&x->phase);
	struct loco_stats s0, s1;
	loco_mgr_stats(x->mgr, &s0);
	uint64_t t0 = loco_now_ns();
	x->end_ns = rc ? t0 : t0 + (uint64_t)(x->o.duration * 1e9);
	pthread_barrier_wait(&x->phase);
	progress(x, t0);
	for (unsigned i = 0; i < x->o.threads; i++)
		pthread_join(x->w[i].tid, NULL);
	pthread_barrier_destroy(&x->phase);
	struct cl_row row = { .dur_ns = loco_now_ns() - t0 };
	loco_mgr_stats(x->mgr, &s1);
	cl_row_verbs(&row, &s0, &s1);
	int wrc = row_fill(x, &row);
	if (!rc)
		rc = finish(x, thr, &row, initial);
	return rc ? rc : wrc;
}

/* --rtx: the transfer as one repairable transaction over two TXObj
 * accounts on a memory node (apps/rtxbench, docs/rtx.md); the remaining
 * options are that program's. */
static bool take_rtx(int *argc, char **argv)
{
	for (int i = 1; i < *argc && strcmp(argv[i], "--"); i++) {
		if (strcmp(argv[i], "--rtx"))
			continue;
		memmove(&argv[i], &argv[i + 1], (size_t)(*argc - i) * sizeof(*argv));
		(*argc)--;
		return true;
	}
	return false;
}

int main(int argc, char **argv)
{
	if (take_rtx(&argc, argv))
		return rtx_transfer_main(argc, argv);
	if (bench_wants_help(argc, argv)) {
		fputs(usage, stdout);
		return 0;
	}
	struct xf *x = calloc(1, sizeof(*x));
	struct local_node ln;
	struct loco_thread *thr;
	if (!x)
		return 1;
	x->o = (struct xo){ .accounts = 1024, .threads = 1, .locks = 64,
			    .duration = 5, .balance = 1000000, .max_amount = 100,
			    .seed = 1 };
	int rc = local_node_start(&ln, &argc, argv, "loco-transfer", "shm");
	if (rc) {
		free(x);
		return rc;
	}
	x->mgr = ln.mgr;
	rc = parse(&x->o, argc, argv);
	if (!rc && (rc = setup(x))) {
		fprintf(stderr, "loco-transfer: set-up: %s\n", loco_strerror(rc));
	} else if (!rc) {
		rc = loco_thread_create(x->mgr, &thr);
		if (!rc) {
			rc = run_all(x, thr);
			int drc = loco_thread_destroy(thr);
			rc = rc ? rc : drc;
		}
		if (rc)
			fprintf(stderr, "loco-transfer: node %u: %s\n", x->self,
				loco_strerror(rc));
		teardown(x);
	}
	local_node_stop(&ln);
	free(x);
	return rc == 2 ? 2 : rc ? 1 : 0;
}
