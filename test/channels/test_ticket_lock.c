/* SPDX-License-Identifier: MIT */
/* ticket_lock and lock_array on in-process clusters (every manager in this
 * process, so a process-wide flag sees two holders at once): lock, trylock
 * and unlock across nodes; a stale hint costs one READ and no wait;
 * mutual exclusion and an exact remote counter
 * with two threads per node; local handovers (and none with a bound of
 * 0); the exact remote ops of a lock and unlock, global and by local
 * handover, and of the split forms batched with the caller's ops; a
 * timed-out last ticket given back; an abandoned ticket passed by the
 * waiter behind it; timeouts that never wait for a
 * skip slot (one ticket per node at most); a storm of short timeouts that
 * never breaks exclusion nor wedges the lock; the lock array's striping;
 * hot locks (words in device memory, or the arena where there is none). */
#include <check.h>
#include <errno.h>
#include <pthread.h>

#include <loco/channels/lock_array.h>
#include <loco/channels/shared_region.h>
#include <loco/channels/ticket_lock.h>
#include "test/common/cluster.h"
#include "test/common/skip.h"

#define LONG_MS 60000

static struct cluster cl;
static struct loco_ticket_lock lk[CL_MAX];
static unsigned lock_flags;   /* of locks_init: 0 or LOCO_REGION_HOT */

static void setup2(void)
{
	ck_assert_int_eq(cluster_start(&cl, 2, 0, 10000), 0);
}

static void setup3(void)
{
	ck_assert_int_eq(cluster_start(&cl, 3, 0, 10000), 0);
}

static void teardown(void)
{
	cluster_stop(&cl);
}

/* Lock "lk" hosted at node 0 on every node of the cluster. */
static void locks_init(void)
{
	for (unsigned i = 0; i < cl.n; i++)
		ck_assert_int_eq(loco_ticket_lock_init_ex(&lk[i], cl.mgr[i], NULL,
							  "lk", 0, 0, lock_flags), 0);
	ck_assert_int_eq(cluster_ready(&cl, 5000), 0);
}

static void lock_unlock(unsigned node);
static void next_wait(uint64_t want);
static void regions_init(struct loco_shared_region *sr);
static void regions_fini(struct loco_shared_region *sr);
static int batch_run(struct loco_batch *b, struct loco_thread *thr);

static void locks_fini(void)
{
	for (unsigned i = 0; i < cl.n; i++)
		loco_ticket_lock_fini(&lk[i]);
}

START_TEST(init_errors)
{
	struct loco_ticket_lock l;
	ck_assert_int_eq(loco_ticket_lock_init(&l, cl.mgr[0], NULL, "l", 3, 0),
			 -EINVAL);
	ck_assert_int_eq(loco_ticket_lock_init(&l, cl.mgr[0], NULL, "l",
					       LOCO_MAX_NODES, 0), -EINVAL);
	ck_assert_int_eq(loco_ticket_lock_init(&l, cl.mgr[0], NULL, "a.b", 0, 0),
			 -EINVAL);
	/* node 1 hosts, but only node 0 takes part */
	ck_assert_int_eq(loco_ticket_lock_init(&l, cl.mgr[0], NULL, "l", 1,
					       UINT64_C(1) << 0), -EINVAL);
	/* a failed init leaves nothing behind: the name is free again */
	ck_assert_int_eq(loco_ticket_lock_init(&l, cl.mgr[0], NULL, "l", 0, 0), 0);
	loco_ticket_lock_fini(&l);
}
END_TEST

START_TEST(lock_trylock_unlock)
{
	struct loco_ticket_lock_stats s;
	locks_init();
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[1], cl.thr[1], 1000), 0);
	ck_assert_int_eq(loco_ticket_lock_trylock(&lk[0], cl.thr[0]), -EBUSY);
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[0], cl.thr[0], 50), -ETIMEDOUT);
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[1], cl.thr[1],
						 LOCO_FENCE_THREAD, 0), 0);
	ck_assert_int_eq(loco_ticket_lock_trylock(&lk[0], cl.thr[0]), 0);
	ck_assert_int_eq(loco_ticket_lock_trylock(&lk[1], cl.thr[1]), -EBUSY);
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[0], cl.thr[0],
						 LOCO_FENCE_GLOBAL, 0), 0);
	/* the node that released last acquires without reading serving */
	struct loco_stats a, b;
	loco_thread_stats(cl.thr[0], &a);
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[0], cl.thr[0], 1000), 0);
	loco_thread_stats(cl.thr[0], &b);
	ck_assert_uint_eq(b.faa - a.faa, 1);
	ck_assert_uint_eq(b.reads - a.reads, 0);
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[0], cl.thr[0],
						 LOCO_FENCE_PAIR, 1), 0);
	loco_ticket_lock_stats(&lk[0], &s);
	ck_assert_uint_eq(s.acquires, 2);
	ck_assert_uint_eq(s.timeouts, 1);
	ck_assert_uint_eq(s.returned, 1);
	loco_ticket_lock_stats(&lk[1], &s);
	ck_assert_uint_eq(s.acquires, 1);
	locks_fini();
}
END_TEST

/* A node whose hint is stale (it released the lock last, then the other
 * node took it twice) guesses the lock free, and its ticket comes two
 * ahead of the hint: it READs serving once, finds the ticket served and
 * holds the lock, without a wait, a yield or a nap (a distance from the
 * stale hint made its first step a sched_yield). */
START_TEST(stale_hint_reads_once)
{
	struct loco_ticket_lock_stats s0, s1;
	struct loco_stats a, b;
	locks_init();
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[0], cl.thr[0], LONG_MS), 0);
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[0], cl.thr[0],
						 LOCO_FENCE_THREAD, 0), 0);
	for (unsigned i = 0; i < 2; i++) {
		ck_assert_int_eq(loco_ticket_lock_lock(&lk[1], cl.thr[1], LONG_MS), 0);
		ck_assert_int_eq(loco_ticket_lock_unlock(&lk[1], cl.thr[1],
							 LOCO_FENCE_THREAD, 0), 0);
	}
	loco_ticket_lock_stats(&lk[0], &s0);
	loco_thread_stats(cl.thr[0], &a);
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[0], cl.thr[0], LONG_MS), 0);
	loco_thread_stats(cl.thr[0], &b);
	loco_ticket_lock_stats(&lk[0], &s1);
	ck_assert_uint_eq(b.faa - a.faa, 1);
	ck_assert_uint_eq(b.reads - a.reads, 1);
	ck_assert_uint_eq(s1.acquires - s0.acquires, 1);
	ck_assert_uint_eq(s1.polls - s0.polls, 1);
	ck_assert_uint_eq(s1.waits - s0.waits, 0);
	ck_assert_uint_eq(s1.yields - s0.yields, 0);
	ck_assert_uint_eq(s1.naps - s0.naps, 0);
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[0], cl.thr[0],
						 LOCO_FENCE_THREAD, 0), 0);
	locks_fini();
}
END_TEST

/* ---- remote operations ------------------------------------------------- */

/* THR's counters since *BASE, then *BASE = now. */
static struct loco_stats stats_step(struct loco_thread *thr,
				    struct loco_stats *base)
{
	struct loco_stats now, d;
	loco_thread_stats(thr, &now);
	d = (struct loco_stats){
		.reads = now.reads - base->reads, .writes = now.writes - base->writes,
		.cas = now.cas - base->cas, .faa = now.faa - base->faa,
		.doorbells = now.doorbells - base->doorbells,
		.rtts = now.rtts - base->rtts,
	};
	*base = now;
	return d;
}

/* Exactly READ, WRITE, CAS, FAA verbs, doorbells and round trips. */
static void ops_eq(const struct loco_stats *d, uint64_t r, uint64_t w,
		   uint64_t cas, uint64_t faa, uint64_t db, uint64_t rtts,
		   const char *what)
{
	ck_assert_msg(d->reads == r && d->writes == w && d->cas == cas &&
		      d->faa == faa && d->doorbells == db && d->rtts == rtts,
		      "%s: %llu READ %llu WRITE %llu CAS %llu FAA, %llu doorbells, "
		      "%llu round trips; expected %llu %llu %llu %llu, %llu, %llu",
		      what, (unsigned long long)d->reads,
		      (unsigned long long)d->writes, (unsigned long long)d->cas,
		      (unsigned long long)d->faa, (unsigned long long)d->doorbells,
		      (unsigned long long)d->rtts, (unsigned long long)r,
		      (unsigned long long)w, (unsigned long long)cas,
		      (unsigned long long)faa, (unsigned long long)db,
		      (unsigned long long)rtts);
}

/* A second thread of node 1 that locks while the main thread holds, so it
 * is handed the lock, and counts its own remote ops. */
struct handed {
	pthread_t tid;
	struct loco_stats lock, unlock;
	int rc;
};

static void *handed_main(void *arg)
{
	struct handed *h = arg;
	struct loco_thread *thr;
	struct loco_stats base;
	h->rc = loco_thread_create(cl.mgr[1], &thr);
	if (h->rc)
		return NULL;
	loco_thread_stats(thr, &base);
	h->rc = loco_ticket_lock_lock(&lk[1], thr, 5000);
	h->lock = stats_step(thr, &base);
	if (!h->rc)
		h->rc = loco_ticket_lock_unlock(&lk[1], thr, LOCO_FENCE_THREAD, 0);
	h->unlock = stats_step(thr, &base);
	loco_thread_destroy(thr);
	return NULL;
}

/* Wait until a thread waits in node 1's local queue. */
static void local_waiter_wait(void)
{
	bool queued = false;
	for (int i = 0; i < 5000 && !queued; i++) {
		pthread_mutex_lock(&lk[1].mu);
		queued = lk[1].head != NULL;
		pthread_mutex_unlock(&lk[1].mu);
		if (!queued)
			usleep(1000);
	}
	ck_assert_msg(queued, "no local waiter after 5 s");
}

/* Uncontended sections with nothing written under the lock (so a fence
 * posts nothing). Global path: FAA next, a READ of serving unless this
 * node released last, then FAA serving: 3 verbs, or 2. A local handover:
 * 0 for the releaser and 0 for the thread handed the lock, whose unlock
 * then costs the global 1. */
START_TEST(remote_op_costs)
{
	struct loco_stats b1, d;
	struct loco_ticket_lock_stats s;
	struct handed h = { .rc = -1 };
	locks_init();
	lock_unlock(0);
	loco_thread_stats(cl.thr[1], &b1);
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[1], cl.thr[1], 1000), 0);
	d = stats_step(cl.thr[1], &b1);
	ops_eq(&d, 1, 0, 0, 1, 2, 2, "lock after another node's release");
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[1], cl.thr[1],
						 LOCO_FENCE_THREAD, 0), 0);
	d = stats_step(cl.thr[1], &b1);
	ops_eq(&d, 0, 0, 0, 1, 1, 1, "unlock");
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[1], cl.thr[1], 1000), 0);
	d = stats_step(cl.thr[1], &b1);
	ops_eq(&d, 0, 0, 0, 1, 1, 1, "lock after this node's release");
	ck_assert_int_eq(pthread_create(&h.tid, NULL, handed_main, &h), 0);
	local_waiter_wait();
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[1], cl.thr[1],
						 LOCO_FENCE_THREAD, 0), 0);
	d = stats_step(cl.thr[1], &b1);
	ops_eq(&d, 0, 0, 0, 0, 0, 0, "unlock handing over");
	pthread_join(h.tid, NULL);
	ck_assert_int_eq(h.rc, 0);
	ops_eq(&h.lock, 0, 0, 0, 0, 0, 0, "lock by handover");
	ops_eq(&h.unlock, 0, 0, 0, 1, 1, 1, "unlock after a handover");
	loco_ticket_lock_stats(&lk[1], &s);
	ck_assert_uint_eq(s.handovers, 1);
	ck_assert_uint_eq(s.acquires, 2);
	locks_fini();
}
END_TEST

/* The split forms, uncontended, on node 0 (the host) after its own
 * release: the ticket FAA and a speculative READ in one doorbell, the
 * lock held before the READ ran (finish returns 1); a WRITE and the
 * release FAA in one doorbell. Node 1, which saw serving move (a failed
 * trylock READ it) but never released, is told not to speculate and gets
 * a READ of serving behind its FAA, one doorbell too; it holds the lock
 * only after the batch (finish returns 0), yet before a READ it added
 * behind them to the lock's host (host_early). */
START_TEST(split_costs)
{
	struct loco_shared_region sr[CL_MAX];
	struct loco_stats b0, b1, d;
	struct loco_tl_acquire a;
	struct loco_tl_release r;
	struct loco_batch b;
	uint64_t v = 0;
	regions_init(sr);
	const struct loco_rregion *rr = loco_shared_region_at(&sr[0], 0);
	lock_unlock(0);
	loco_thread_stats(cl.thr[0], &b0);
	loco_batch_init(&b, cl.thr[0]);
	ck_assert_int_eq(loco_ticket_lock_lock_post(&lk[0], cl.thr[0], &b, &a,
						    1000), 0);
	ck_assert(a.speculate && !a.held);
	loco_batch_read(&b, rr, 0, &v, 8);
	ck_assert_int_eq(loco_ticket_lock_lock_finish(&lk[0], cl.thr[0], &a,
						      batch_run(&b, cl.thr[0])), 1);
	d = stats_step(cl.thr[0], &b0);
	ops_eq(&d, 1, 0, 0, 1, 1, 1, "split lock with a READ");
	v = 7;
	loco_batch_write(&b, rr, 0, &v, 8);
	ck_assert_int_eq(loco_ticket_lock_unlock_post(&lk[0], cl.thr[0], &b, &r),
			 0);
	ck_assert_int_eq(loco_ticket_lock_unlock_finish(&lk[0], cl.thr[0], &r,
							batch_run(&b, cl.thr[0]),
							LOCO_FENCE_THREAD, 0), 0);
	d = stats_step(cl.thr[0], &b0);
	ops_eq(&d, 0, 1, 0, 1, 1, 1, "split unlock with a WRITE");
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[0], cl.thr[0], 1000), 0);
	ck_assert_int_eq(loco_ticket_lock_trylock(&lk[1], cl.thr[1]), -EBUSY);
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[0], cl.thr[0],
						 LOCO_FENCE_THREAD, 0), 0);
	loco_thread_stats(cl.thr[1], &b1);
	loco_batch_init(&b, cl.thr[1]);
	ck_assert_int_eq(loco_ticket_lock_lock_post(&lk[1], cl.thr[1], &b, &a,
						    1000), 0);
	ck_assert(!a.speculate && !a.held && a.read);
	v = 0;
	loco_batch_read(&b, loco_shared_region_at(&sr[1], 0), 0, &v, 8);
	ck_assert_int_eq(loco_ticket_lock_lock_finish(&lk[1], cl.thr[1], &a,
						      batch_run(&b, cl.thr[1])), 0);
	/* The counter lives at the lock's host: its READ ran behind the READ
	 * of serving, which found the ticket served. */
	ck_assert(a.host_early);
	ck_assert_uint_eq(v, 7);
	d = stats_step(cl.thr[1], &b1);
	ops_eq(&d, 2, 0, 0, 1, 1, 1, "split lock after another node");
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[1], cl.thr[1],
						 LOCO_FENCE_THREAD, 0), 0);
	regions_fini(sr);
}
END_TEST

/* Node 1 released last, so it speculates; but node 0 took the lock
 * since: its finish waits for node 0's release and returns 0 (its
 * speculative READ ran before it held the lock). */
struct split_attempt {
	pthread_t tid;
	int rc;
};

static void *split_attempt_main(void *arg)
{
	struct split_attempt *sa = arg;
	struct loco_thread *thr;
	struct loco_tl_acquire a;
	struct loco_batch b;
	uint64_t v;
	sa->rc = loco_thread_create(cl.mgr[1], &thr);
	if (sa->rc)
		return NULL;
	loco_batch_init(&b, thr);
	sa->rc = loco_ticket_lock_lock_post(&lk[1], thr, &b, &a, 5000);
	if (!sa->rc && !a.speculate)
		sa->rc = -EPROTO;
	if (!sa->rc) {
		loco_batch_read(&b, lk[1].words_rr, LOCO_TL_SERVING, &v, 8);
		sa->rc = loco_ticket_lock_lock_finish(&lk[1], thr, &a,
						      batch_run(&b, thr));
		if (sa->rc == 0 && a.host_early)
			sa->rc = -EPROTO;
	}
	if (sa->rc >= 0)
		loco_ticket_lock_unlock(&lk[1], thr, LOCO_FENCE_THREAD, 0);
	loco_thread_destroy(thr);
	return NULL;
}

START_TEST(split_later)
{
	struct split_attempt sa;
	locks_init();
	lock_unlock(1);
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[0], cl.thr[0], 1000), 0);
	ck_assert_int_eq(pthread_create(&sa.tid, NULL, split_attempt_main, &sa), 0);
	next_wait(3);
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[0], cl.thr[0],
						 LOCO_FENCE_THREAD, 0), 0);
	pthread_join(sa.tid, NULL);
	ck_assert_int_eq(sa.rc, 0);
	locks_fini();
}
END_TEST

/* ---- threads ---------------------------------------------------------- */

static _Atomic int inside;              /* holders right now, all nodes */
static _Atomic unsigned long overlaps;
static pthread_barrier_t start;         /* all workers begin together */

static void enter(void)
{
	/* Relaxed: a witness of overlap; the lock orders the sections. */
	if (atomic_fetch_add_explicit(&inside, 1, memory_order_relaxed))
		atomic_fetch_add_explicit(&overlaps, 1, memory_order_relaxed);
}

static void leave(void)
{
	/* Relaxed: as in enter. */
	atomic_fetch_sub_explicit(&inside, 1, memory_order_relaxed);
}

struct worker {
	pthread_t tid;
	unsigned node;
	struct loco_shared_region *sr;  /* counter at node 0, offset 0 */
	long iters;
	int timeout_ms;                 /* < LONG_MS: timeouts expected */
	long hold_us;                   /* sleep inside the section */
	long done, timeouts;
	int err;
};

/* One increment under the lock: READ, WRITE, fenced by the release. */
static int increment(struct worker *w, struct loco_thread *thr)
{
	uint64_t v;
	int rc = loco_shared_region_read(w->sr, thr, 0, 0, &v, 8);
	v++;
	if (!rc)
		rc = loco_shared_region_write(w->sr, thr, 0, 0, &v, 8);
	return rc;
}

/* Post batch B and wait for it: 0 or the first error. */
static int batch_run(struct loco_batch *b, struct loco_thread *thr)
{
	struct loco_ack ack = { 0, 0 };
	int rc = loco_batch_post(b, &ack);
	return rc ? rc : loco_ack_wait(thr, &ack, -1);
}

/* The split trylock: a node that released the lock last takes it with
 * one CAS in its batch, a READ behind it running under the lock; another
 * node's attempt meanwhile fails at its finish (its CAS finds next moved)
 * and, its guess missed, its next attempt adds nothing; a failed attempt
 * takes no ticket (the lock stays free to the next lock). */
START_TEST(split_trylock)
{
	struct loco_shared_region sr[CL_MAX];
	struct loco_stats b0, d;
	struct loco_tl_try t;
	struct loco_batch b;
	uint64_t v = 0;
	regions_init(sr);
	const struct loco_rregion *rr = loco_shared_region_at(&sr[0], 0);
	lock_unlock(0);
	loco_thread_stats(cl.thr[0], &b0);
	loco_batch_init(&b, cl.thr[0]);
	ck_assert_int_eq(loco_ticket_lock_trylock_post(&lk[0], cl.thr[0], &b, &t),
			 0);
	loco_batch_read(&b, rr, 0, &v, 8);
	ck_assert_int_eq(loco_ticket_lock_trylock_finish(&lk[0], cl.thr[0], &t,
							 batch_run(&b, cl.thr[0])),
			 0);
	d = stats_step(cl.thr[0], &b0);
	ops_eq(&d, 1, 0, 1, 0, 1, 1, "split trylock with a READ");
	/* held by node 0: node 1 (never held it: its first guess is "free")
	 * sends the CAS, which fails; its next attempt adds nothing */
	loco_batch_init(&b, cl.thr[1]);
	ck_assert_int_eq(loco_ticket_lock_trylock_post(&lk[1], cl.thr[1], &b, &t),
			 0);
	ck_assert_uint_eq(b.n, 1);
	ck_assert_int_eq(loco_ticket_lock_trylock_finish(&lk[1], cl.thr[1], &t,
							 batch_run(&b, cl.thr[1])),
			 -EBUSY);
	loco_batch_init(&b, cl.thr[1]);
	ck_assert_int_eq(loco_ticket_lock_trylock_post(&lk[1], cl.thr[1], &b, &t),
			 -EBUSY);
	ck_assert_uint_eq(b.n, 0);
	ck_assert_int_eq(loco_ticket_lock_trylock(&lk[1], cl.thr[1]), -EBUSY);
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[0], cl.thr[0],
						 LOCO_FENCE_THREAD, 0), 0);
	/* node 1 takes it; node 0, which released last before that, sends
	 * its CAS, which fails */
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[1], cl.thr[1], 1000), 0);
	loco_batch_init(&b, cl.thr[0]);
	ck_assert_int_eq(loco_ticket_lock_trylock_post(&lk[0], cl.thr[0], &b, &t),
			 0);
	ck_assert_int_eq(loco_ticket_lock_trylock_finish(&lk[0], cl.thr[0], &t,
							 batch_run(&b, cl.thr[0])),
			 -EBUSY);
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[1], cl.thr[1],
						 LOCO_FENCE_THREAD, 0), 0);
	/* the failed attempts took no ticket: node 0 locks at once */
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[0], cl.thr[0], 1000), 0);
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[0], cl.thr[0],
						 LOCO_FENCE_THREAD, 0), 0);
	regions_fini(sr);
}
END_TEST

/* One section in the split form: the counter READ rides with the
 * ticket FAA when the lock will probably be ours (and is READ again if
 * it was not yet), the WRITE with the release FAA (both to node 0, the
 * lock's host: one QP). -ETIMEDOUT: not entered. */
static int section_split(struct worker *w, struct loco_thread *thr)
{
	struct loco_ticket_lock *l = &lk[w->node];
	const struct loco_rregion *rr = loco_shared_region_at(w->sr, 0);
	struct loco_tl_acquire a;
	struct loco_tl_release r;
	struct loco_batch b;
	uint64_t v = 0;
	loco_batch_init(&b, thr);
	int rc = loco_ticket_lock_lock_post(l, thr, &b, &a, w->timeout_ms);
	if (rc)
		return rc;
	if (a.speculate)
		loco_batch_read(&b, rr, 0, &v, 8);
	rc = loco_ticket_lock_lock_finish(l, thr, &a, batch_run(&b, thr));
	if (rc < 0)
		return rc;
	enter();
	if (!a.speculate || rc == 0)
		rc = loco_read(thr, rr, 0, &v, 8);
	else
		rc = 0;
	if (w->hold_us)
		usleep((useconds_t)w->hold_us);
	leave();
	v++;
	if (!rc)
		loco_batch_write(&b, rr, 0, &v, 8);
	int prc = loco_ticket_lock_unlock_post(l, thr, &b, &r);
	int urc = loco_ticket_lock_unlock_finish(l, thr, &r, batch_run(&b, thr),
						 LOCO_FENCE_PAIR, 0);
	return rc ? rc : prc ? prc : urc;
}

/* One section with lock and unlock. -ETIMEDOUT: not entered. */
static int section_sync(struct worker *w, struct loco_thread *thr)
{
	int rc = loco_ticket_lock_lock(&lk[w->node], thr, w->timeout_ms);
	if (rc)
		return rc;
	enter();
	rc = increment(w, thr);
	if (w->hold_us)
		usleep((useconds_t)w->hold_us);
	leave();
	int urc = loco_ticket_lock_unlock(&lk[w->node], thr, LOCO_FENCE_PAIR, 0);
	return rc ? rc : urc;
}

/* Every other section in the split form. */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct loco_thread *thr;
	w->err = loco_thread_create(cl.mgr[w->node], &thr);
	pthread_barrier_wait(&start);
	for (long i = 0; !w->err && i < w->iters; i++) {
		int rc = i & 1 ? section_split(w, thr) : section_sync(w, thr);
		if (rc == -ETIMEDOUT)
			w->timeouts++;
		else if (rc)
			w->err = rc;
		else
			w->done++;
	}
	if (!w->err)
		loco_thread_destroy(thr);
	return NULL;
}

/* PER threads on every node, ITERS sections each; returns sections done. */
static long run_workers(struct loco_shared_region *sr, unsigned per, long iters,
			int timeout_ms, long hold_us)
{
	struct worker w[CL_MAX * 2];
	unsigned n = cl.n * per;
	long done = 0;
	pthread_barrier_init(&start, NULL, n);
	for (unsigned i = 0; i < n; i++) {
		w[i] = (struct worker){ .node = i % cl.n, .sr = sr, .iters = iters,
					.timeout_ms = timeout_ms,
					.hold_us = hold_us };
		ck_assert_int_eq(pthread_create(&w[i].tid, NULL, worker_main, &w[i]),
				 0);
	}
	for (unsigned i = 0; i < n; i++) {
		pthread_join(w[i].tid, NULL);
		ck_assert_msg(w[i].err == 0, "worker %u: %s", i,
			      loco_strerror(w[i].err));
		ck_assert_int_eq(w[i].done + w[i].timeouts, iters);
		done += w[i].done;
	}
	pthread_barrier_destroy(&start);
	return done;
}

static uint64_t counter(struct loco_shared_region *sr)
{
	uint64_t v;
	ck_assert_int_eq(loco_shared_region_read(sr, cl.thr[1], 0, 0, &v, 8), 0);
	return v;
}

static void regions_init(struct loco_shared_region *sr)
{
	for (unsigned i = 0; i < cl.n; i++)
		ck_assert_int_eq(loco_shared_region_init(&sr[i], cl.mgr[i], NULL,
							 "ctr", 64, 0), 0);
	locks_init();
}

static void regions_fini(struct loco_shared_region *sr)
{
	locks_fini();
	for (unsigned i = 0; i < cl.n; i++)
		loco_shared_region_fini(&sr[i]);
}

START_TEST(threads_exclusive_with_handovers)
{
	struct loco_shared_region sr[CL_MAX];
	struct loco_ticket_lock_stats s;
	uint64_t handovers = 0, acquires = 0;
	regions_init(sr);
	long done = run_workers(sr, 2, 1000, LONG_MS, 20);
	ck_assert_int_eq(done, 2 * 2 * 1000);
	ck_assert_uint_eq(counter(sr), 4000);
	ck_assert_uint_eq(overlaps, 0);
	for (unsigned i = 0; i < cl.n; i++) {
		loco_ticket_lock_stats(&lk[i], &s);
		handovers += s.handovers;
		acquires += s.acquires;
		/* The next in line's learned spin budget (the workers are
		 * joined: no race) stays within its floor and today's fixed
		 * LOCO_WAIT_SPINS, on every transport: where a poll is a
		 * round trip it never spins longer than before. */
		ck_assert_uint_eq(lk[i].spin.cap, LOCO_WAIT_SPINS);
		ck_assert_uint_le(lk[i].spin.budget, LOCO_WAIT_SPINS);
		ck_assert_uint_ge(lk[i].spin.budget, LOCO_SPIN_MIN);
		ck_assert_uint_le(s.spun_out, s.waits);
	}
	ck_assert_uint_eq(handovers + acquires, 4000);
	ck_assert_uint_gt(handovers, 0);
	regions_fini(sr);
}
END_TEST

/* LOCO_TICKET_LOCK_SOLO: one worker per node (every other section in
 * the split form) excludes the others and counts exactly, with no local
 * queue (no handover); then another thread context of a node gets -EPERM
 * from every acquire, and the lock is still free for the worker's kind. */
START_TEST(solo_excludes_and_refuses_others)
{
	struct loco_shared_region sr[CL_MAX];
	struct loco_ticket_lock_stats s;
	struct loco_tl_acquire a;
	struct loco_batch b;
	lock_flags = LOCO_TICKET_LOCK_SOLO;
	regions_init(sr);
	ck_assert_int_eq(run_workers(sr, 1, 500, LONG_MS, 0), 2 * 500);
	ck_assert_uint_eq(counter(sr), 1000);
	ck_assert_uint_eq(overlaps, 0);
	loco_ticket_lock_stats(&lk[0], &s);
	ck_assert_uint_eq(s.handovers, 0);
	ck_assert_uint_eq(s.acquires, 500);
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[0], cl.thr[0], 100), -EPERM);
	ck_assert_int_eq(loco_ticket_lock_trylock(&lk[0], cl.thr[0]), -EPERM);
	loco_batch_init(&b, cl.thr[0]);
	ck_assert_int_eq(loco_ticket_lock_lock_post(&lk[0], cl.thr[0], &b, &a,
						    100), -EPERM);
	ck_assert_uint_eq(b.n, 0);
	regions_fini(sr);
	lock_flags = 0;
}
END_TEST

/* Where a hot lock's words went, seen from the host HOST_LK and from
 * another member OTHER: device memory if the host's transport has some,
 * else the arena (shm, shm-weak). */
static void check_hot_words(struct loco_ticket_lock *host_lk,
			    struct loco_ticket_lock *other)
{
	uint64_t total, used;
	loco_mgr_dm_usage(host_lk->base.mgr, &total, &used);
	uint32_t want = total ? LOCO_SPACE_DM : LOCO_SPACE_ARENA;
	/* next and serving: one region, so one cache line (arena regions
	 * are 64-byte aligned). */
	const struct loco_region *words = loco_channel_local(&host_lk->base, "words");
	ck_assert_ptr_nonnull(words);
	ck_assert_uint_eq(words->len, LOCO_TL_WORDS_BYTES);
	ck_assert_uint_eq(words->space, want);
	ck_assert(total ? !words->base : words->base != NULL);
	ck_assert(total || (uintptr_t)words->base % 64 == 0);
	const struct loco_rregion *rr =
		loco_channel_remote(&other->base, other->words_idx, host_lk->host);
	ck_assert_ptr_nonnull(rr);
	ck_assert_uint_eq(rr->space, want);
	/* The skip table stays in the arena. */
	const struct loco_rregion *skip =
		loco_channel_remote(&other->base, other->skip_idx, host_lk->host);
	ck_assert_uint_eq(skip->space, LOCO_SPACE_ARENA);
}

/* A lock whose words are hot (device memory, or the arena on shm)
 * excludes and counts exactly like any other. */
START_TEST(hot_words_exclusive)
{
	struct loco_shared_region sr[CL_MAX];
	struct loco_ticket_lock l;
	ck_assert_int_eq(loco_ticket_lock_init_ex(&l, cl.mgr[0], NULL, "l", 0, 0, 0x10),
			 -EINVAL);
	lock_flags = LOCO_REGION_HOT;
	regions_init(sr);
	check_hot_words(&lk[0], &lk[1]);
	long done = run_workers(sr, 2, 300, LONG_MS, 0);
	ck_assert_int_eq(done, 2 * 2 * 300);
	ck_assert_uint_eq(counter(sr), 1200);
	ck_assert_uint_eq(overlaps, 0);
	regions_fini(sr);
	lock_flags = 0;
}
END_TEST

START_TEST(no_handover_when_bound_is_zero)
{
	struct loco_shared_region sr[CL_MAX];
	struct loco_ticket_lock_stats s;
	regions_init(sr);
	for (unsigned i = 0; i < cl.n; i++)
		loco_ticket_lock_set_handover_max(&lk[i], 0);
	ck_assert_int_eq(run_workers(sr, 2, 300, LONG_MS, 20), 1200);
	ck_assert_uint_eq(counter(sr), 1200);
	for (unsigned i = 0; i < cl.n; i++) {
		loco_ticket_lock_stats(&lk[i], &s);
		ck_assert_uint_eq(s.handovers, 0);
		ck_assert_uint_eq(s.acquires, 600);
	}
	regions_fini(sr);
}
END_TEST

/* A lock attempt in its own thread (its own QPs), unlocking at once. */
struct attempt {
	pthread_t tid;
	unsigned node;
	int timeout_ms;
	int rc;
};

static void *attempt_main(void *arg)
{
	struct attempt *a = arg;
	struct loco_thread *thr;
	a->rc = loco_thread_create(cl.mgr[a->node], &thr);
	if (a->rc)
		return NULL;
	a->rc = loco_ticket_lock_lock(&lk[a->node], thr, a->timeout_ms);
	if (!a->rc)
		a->rc = loco_ticket_lock_unlock(&lk[a->node], thr,
						LOCO_FENCE_THREAD, 0);
	loco_thread_destroy(thr);
	return NULL;
}

/* Word OFF (LOCO_TL_NEXT or LOCO_TL_SERVING) of lk[0], read by node 0. */
static uint64_t word_read(uint64_t off)
{
	uint64_t v;
	const struct loco_rregion *rr =
		loco_channel_remote(&lk[0].base, lk[0].words_idx, lk[0].host);
	ck_assert_ptr_nonnull(rr);
	ck_assert_int_eq(loco_read(cl.thr[0], rr, off, &v, 8), 0);
	return v;
}

/* Wait until next_ticket reaches WANT. */
static void next_wait(uint64_t want)
{
	uint64_t v = 0;
	for (int i = 0; i < 5000 && v < want; i++) {
		v = word_read(LOCO_TL_NEXT);
		usleep(1000);
	}
	ck_assert_uint_eq(v, want);
}

static void lock_unlock(unsigned node)
{
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[node], cl.thr[node], 5000), 0);
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[node], cl.thr[node],
						 LOCO_FENCE_THREAD, 0), 0);
}

/* Node 0 holds; node 1 times out with node 2 queued behind it, so it
 * cannot give its ticket back: it marks it abandoned; node 0's release
 * serves it, and node 2, finding serving stuck there, passes it. */
START_TEST(abandoned_ticket_is_skipped)
{
	struct loco_ticket_lock_stats s;
	struct attempt a1 = { .node = 1, .timeout_ms = 500 };
	struct attempt a2 = { .node = 2, .timeout_ms = LONG_MS };
	locks_init();
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[0], cl.thr[0], 1000), 0);
	ck_assert_int_eq(pthread_create(&a1.tid, NULL, attempt_main, &a1), 0);
	next_wait(2);
	ck_assert_int_eq(pthread_create(&a2.tid, NULL, attempt_main, &a2), 0);
	next_wait(3);
	pthread_join(a1.tid, NULL);
	ck_assert_int_eq(a1.rc, -ETIMEDOUT);
	loco_ticket_lock_stats(&lk[1], &s);
	ck_assert_uint_eq(s.abandoned, 1);
	ck_assert_uint_eq(s.returned, 0);
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[0], cl.thr[0],
						 LOCO_FENCE_THREAD, 0), 0);
	pthread_join(a2.tid, NULL);
	ck_assert_int_eq(a2.rc, 0);
	loco_ticket_lock_stats(&lk[2], &s);
	ck_assert_uint_eq(s.skipped, 1);
	for (unsigned i = 0; i < cl.n; i++)
		lock_unlock(i);
	locks_fini();
}
END_TEST

/* Node 0 holds the lock while nodes 1 and 2 each make 300 attempts of
 * 1 ms, queued behind each other so that many tickets are abandoned, not
 * given back (without reclaim they would pile up past the
 * LOCO_TICKET_LOCK_SLOTS skip slots, and an attempt would wait for a slot
 * for good). Every attempt times out promptly: each node's next attempt
 * takes its abandoned ticket back, so at most one ticket per node is
 * outstanding. After the release both get the lock and no ticket is
 * left. */
struct storm {
	pthread_t tid;
	unsigned node;
	long timeouts;
	uint64_t worst_ns;
	int err;
};

static void *storm_main(void *arg)
{
	struct storm *a = arg;
	struct loco_thread *thr;
	a->err = loco_thread_create(cl.mgr[a->node], &thr);
	for (int i = 0; !a->err && i < 300; i++) {
		uint64_t t0 = loco_now_ns();
		int rc = loco_ticket_lock_lock(&lk[a->node], thr, 1);
		uint64_t ns = loco_now_ns() - t0;
		a->worst_ns = ns > a->worst_ns ? ns : a->worst_ns;
		if (rc == -ETIMEDOUT)
			a->timeouts++;
		else
			a->err = rc ? rc : -EPROTO;  /* node 0 holds it */
	}
	if (!a->err)
		loco_thread_destroy(thr);
	return NULL;
}

/* next - serving at the host. */
static uint64_t outstanding(void)
{
	uint64_t next = word_read(LOCO_TL_NEXT);
	uint64_t serving = word_read(LOCO_TL_SERVING);
	return next - serving;
}

START_TEST(timeouts_never_wait_for_a_slot)
{
	struct storm a[2] = { { .node = 1 }, { .node = 2 } };
	struct loco_ticket_lock_stats s;
	uint64_t abandoned = 0, reclaimed = 0, skipped = 0;
	locks_init();
	ck_assert_int_eq(loco_ticket_lock_lock(&lk[0], cl.thr[0], 1000), 0);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&a[i].tid, NULL, storm_main,
						&a[i]), 0);
	for (int i = 0; i < 2; i++) {
		pthread_join(a[i].tid, NULL);
		ck_assert_msg(a[i].err == 0, "node %u: %s", a[i].node,
			      loco_strerror(a[i].err));
		ck_assert_int_eq(a[i].timeouts, 300);
		/* 1 ms plus a few remote ops (and whatever a busy host adds):
		 * below the manager's timeout (10 s), which each wait for a
		 * busy slot took before. */
		ck_assert_msg(a[i].worst_ns < 5000000000u, "node %u: an "
			      "attempt took %.3f s", a[i].node,
			      (double)a[i].worst_ns / 1e9);
	}
	ck_assert_uint_le(outstanding(), 3);
	ck_assert_int_eq(loco_ticket_lock_unlock(&lk[0], cl.thr[0],
						 LOCO_FENCE_THREAD, 0), 0);
	lock_unlock(1);
	lock_unlock(2);
	ck_assert_uint_eq(outstanding(), 0);
	for (unsigned i = 0; i < cl.n; i++) {
		loco_ticket_lock_stats(&lk[i], &s);
		abandoned += s.abandoned;
		reclaimed += s.reclaimed;
		skipped += s.skipped;
	}
	ck_assert_uint_eq(abandoned, reclaimed + skipped);
	printf("slot storm: %llu tickets abandoned, %llu reclaimed, %llu "
	       "skipped; slowest attempt %.2f ms\n",
	       (unsigned long long)abandoned, (unsigned long long)reclaimed,
	       (unsigned long long)skipped,
	       (double)(a[0].worst_ns > a[1].worst_ns ? a[0].worst_ns :
			a[1].worst_ns) / 1e6);
	locks_fini();
}
END_TEST

/* Timeouts of 1 ms under contention: tickets given back, abandoned,
 * skipped, reclaimed (and taken back when served meanwhile) at random. Exclusion
 * holds, the counter counts exactly the sections entered, and afterwards
 * every node still gets the lock and every abandoned ticket was skipped. */
START_TEST(timeout_storm)
{
	struct loco_shared_region sr[CL_MAX];
	struct loco_ticket_lock_stats s;
	uint64_t abandoned = 0, skipped = 0, reclaimed = 0, timeouts = 0;
	regions_init(sr);
	long done = run_workers(sr, 2, 400, 1, 100);
	ck_assert_uint_eq(counter(sr), (uint64_t)done);
	ck_assert_uint_eq(overlaps, 0);
	for (unsigned i = 0; i < cl.n; i++)
		lock_unlock(i);
	for (unsigned i = 0; i < cl.n; i++) {
		loco_ticket_lock_stats(&lk[i], &s);
		abandoned += s.abandoned;
		skipped += s.skipped;
		reclaimed += s.reclaimed;
		timeouts += s.timeouts;
	}
	ck_assert_uint_eq(abandoned, skipped + reclaimed);
	ck_assert_uint_eq(done + timeouts, 3 * 2 * 400);
	printf("timeout storm: %ld sections, %llu timeouts, %llu abandoned "
	       "(%llu reclaimed, %llu skipped)\n", done,
	       (unsigned long long)timeouts, (unsigned long long)abandoned,
	       (unsigned long long)reclaimed, (unsigned long long)skipped);
	regions_fini(sr);
}
END_TEST

/* Lock i of an array of 5 over 3 nodes is hosted at node i mod 3, and
 * every lock works from every node. */
START_TEST(lock_array_striped)
{
	struct loco_lock_array a[CL_MAX];
	for (unsigned i = 0; i < cl.n; i++)
		ck_assert_int_eq(loco_lock_array_init(&a[i], cl.mgr[i], NULL,
						      "locks", 5, 0), 0);
	ck_assert_int_eq(cluster_ready(&cl, 5000), 0);
	ck_assert_int_eq(loco_lock_array_init(&a[3], cl.mgr[0], NULL, "x", 0, 0),
			 -EINVAL);
	for (unsigned k = 0; k < 5; k++) {
		ck_assert_uint_eq(loco_lock_array_at(&a[0], k)->host, k % 3);
		ck_assert_ptr_eq(loco_lock_array_for_key(&a[1], k + 10),
				 loco_lock_array_at(&a[1], k));
		for (unsigned i = 0; i < cl.n; i++) {
			struct loco_ticket_lock *l = loco_lock_array_at(&a[i], k);
			ck_assert_int_eq(loco_ticket_lock_lock(l, cl.thr[i], 1000), 0);
			ck_assert_int_eq(loco_ticket_lock_trylock(
				loco_lock_array_at(&a[(i + 1) % 3], k),
				cl.thr[(i + 1) % 3]), -EBUSY);
			ck_assert_int_eq(loco_ticket_lock_unlock(l, cl.thr[i],
						LOCO_FENCE_THREAD, 0), 0);
		}
	}
	ck_assert_str_eq(loco_lock_array_at(&a[2], 4)->base.name, "locks/4");
	for (unsigned i = 0; i < cl.n; i++)
		loco_lock_array_fini(&a[i]);
}
END_TEST

/* A hot lock array: every lock's words at its host in device memory or,
 * on shm, the arena; every lock works from every node. */
START_TEST(lock_array_hot)
{
	struct loco_lock_array a[CL_MAX];
	for (unsigned i = 0; i < cl.n; i++)
		ck_assert_int_eq(loco_lock_array_init_ex(&a[i], cl.mgr[i], NULL, "hot", 4,
							 0, LOCO_REGION_HOT), 0);
	ck_assert_int_eq(cluster_ready(&cl, 5000), 0);
	ck_assert_int_eq(loco_lock_array_init_ex(&a[3], cl.mgr[0], NULL, "x", 2, 0, 0x4),
			 -EINVAL);
	for (unsigned k = 0; k < 4; k++) {
		unsigned host = k % 3;
		check_hot_words(loco_lock_array_at(&a[host], k),
				loco_lock_array_at(&a[(host + 1) % 3], k));
		for (unsigned i = 0; i < cl.n; i++) {
			struct loco_ticket_lock *l = loco_lock_array_at(&a[i], k);
			ck_assert_int_eq(loco_ticket_lock_lock(l, cl.thr[i], 1000), 0);
			ck_assert_int_eq(loco_ticket_lock_unlock(l, cl.thr[i],
						LOCO_FENCE_THREAD, 0), 0);
		}
	}
	for (unsigned i = 0; i < cl.n; i++)
		loco_lock_array_fini(&a[i]);
}
END_TEST

int main(void)
{
	if (test_transport_skip())
		return TEST_SKIP;
	Suite *s = suite_create("ticket_lock");
	TCase *tc = tcase_create("two_nodes");
	tcase_add_checked_fixture(tc, setup2, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, init_errors);
	tcase_add_test(tc, lock_trylock_unlock);
	tcase_add_test(tc, stale_hint_reads_once);
	tcase_add_test(tc, remote_op_costs);
	tcase_add_test(tc, split_costs);
	tcase_add_test(tc, split_trylock);
	tcase_add_test(tc, split_later);
	tcase_add_test(tc, threads_exclusive_with_handovers);
	tcase_add_test(tc, no_handover_when_bound_is_zero);
	tcase_add_test(tc, hot_words_exclusive);
	tcase_add_test(tc, solo_excludes_and_refuses_others);
	suite_add_tcase(s, tc);
	TCase *t3 = tcase_create("three_nodes");
	tcase_add_checked_fixture(t3, setup3, teardown);
	tcase_set_timeout(t3, 120);
	tcase_add_test(t3, abandoned_ticket_is_skipped);
	tcase_add_test(t3, timeouts_never_wait_for_a_slot);
	tcase_add_test(t3, timeout_storm);
	tcase_add_test(t3, lock_array_striped);
	tcase_add_test(t3, lock_array_hot);
	suite_add_tcase(s, t3);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
