/* SPDX-License-Identifier: MIT */
/* Durable memory nodes (--durable, --power-cut) and loco_persist, with a
 * real loco-memnode child that is killed and restarted: regions keep
 * their names and offsets, persisted bytes survive a power cut and
 * unpersisted ones do not (the test that skips its persist point loses
 * its data), a crash without power cut or a clean stop loses nothing,
 * concurrent persists of the same bytes leave the last value in the
 * image, and bad restarts are refused with a clear error. Runs on the
 * transport LOCO_TRANSPORT names (shm, shm-weak). */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <loco/loco.h>
#include "test/common/memnode.h"

#define LEN 65536
#define FAR 32768     /* an offset no persisted range of a test reaches */

static const char *const power_cut[] = { "LOCO_POWER_CUT=1", NULL };

static struct mcluster mc;
static struct loco_thread *thr;

static void setup(void)
{
	mc_init(&mc);
}

static void teardown(void)
{
	if (thr)
		loco_thread_destroy(thr);
	thr = NULL;
	mc_fini(&mc);
}

/* (Re)start this node and a thread context; open NAME on the memory node. */
static void attach(const char *name, struct loco_rregion *rr)
{
	if (!mc.mgr) {
		mc_start_self(&mc, 5000);
		ck_assert_int_eq(loco_thread_create(mc.mgr, &thr), 0);
	}
	ck_assert_int_eq(loco_region_open(mc.mgr, 0, name, LEN, rr), 0);
}

static void detach(void)
{
	loco_thread_destroy(thr);
	thr = NULL;
	mc_stop_self(&mc);
}

/* The memory node's power cut (SIGKILL) and restart, region t.a opened
 * again into A. */
static void power_cycle(struct loco_rregion *a)
{
	detach();
	mc_stop_mem(&mc, SIGKILL);
	mc_start_mem(&mc, true, power_cut);
	attach("t.a", a);
}

static void fill(uint64_t *buf, unsigned n, uint64_t seed)
{
	for (unsigned i = 0; i < n; i++)
		buf[i] = seed * 1000003 + i;
}

/* Whether the N words at OFF of RR are the pattern SEED (or all zero). */
static bool holds(const struct loco_rregion *rr, uint64_t off, unsigned n,
		  uint64_t seed)
{
	uint64_t got[64], want[64] = { 0 };
	ck_assert_uint_le(n, 64);
	ck_assert_int_eq(loco_read(thr, rr, off, got, n * 8), 0);
	if (seed)
		fill(want, n, seed);
	return memcmp(got, want, n * 8) == 0;
}

/* Write the pattern at 0 and persist it, then a second pattern at FAR
 * without a persist point (the deliberate omission). */
static void write_both(const struct loco_rregion *rr)
{
	uint64_t a[64], b[64];
	fill(a, 64, 1);
	fill(b, 64, 2);
	ck_assert_int_eq(loco_write(thr, rr, 0, a, sizeof(a)), 0);
	ck_assert_int_eq(loco_persist(thr, rr->node), 0);
	ck_assert_int_eq(loco_write(thr, rr, FAR, b, sizeof(b)), 0);
	ck_assert_int_eq(loco_fence(thr, LOCO_FENCE_PAIR, rr->node), 0);
	ck_assert(holds(rr, FAR, 64, 2));
}

/* Write both patterns to region t.a (and open t.idle), stop the node with
 * SIG, start it again with ENV: the regions are at the same offsets, the
 * persisted pattern is intact and the unpersisted one is FAR_SEED's (0:
 * lost). */
static void survive(const char *const *env, int sig, uint64_t far_seed)
{
	struct loco_rregion a, a2, idle, idle2;
	mc_start_mem(&mc, true, env);
	attach("t.a", &a);
	ck_assert(loco_peer_durable(mc.mgr, 0));
	attach("t.idle", &idle);
	write_both(&a);
	detach();
	mc_stop_mem(&mc, sig);
	mc_start_mem(&mc, true, env);
	attach("t.idle", &idle2);
	attach("t.a", &a2);
	ck_assert_uint_eq(a2.off, a.off);
	ck_assert_uint_eq(idle2.off, idle.off);
	ck_assert(holds(&a2, 0, 64, 1));
	ck_assert_msg(holds(&a2, FAR, 64, far_seed), "unpersisted bytes %s",
		      far_seed ? "lost" : "survived a power cut");
}

/* A power cut keeps the names, offsets and persisted bytes, and loses the
 * bytes whose persist point was skipped. */
START_TEST(power_cut_loses_unpersisted)
{
	survive(power_cut, SIGKILL, 0);
}
END_TEST

/* Without --power-cut, a killed node's memory is as it left it (a process
 * crash does not lose DRAM). */
START_TEST(crash_without_power_cut_keeps_all)
{
	survive(NULL, SIGKILL, 2);
}
END_TEST

/* A clean stop writes everything back, even with --power-cut. */
START_TEST(clean_stop_writes_back)
{
	survive(power_cut, SIGTERM, 2);
}
END_TEST

/* More scattered writes than a QP tracks: the oldest ranges are flushed
 * early, and one persist makes all of them durable. */
START_TEST(many_ranges_one_persist)
{
	struct loco_rregion a;
	struct loco_stats st;
	mc_start_mem(&mc, true, power_cut);
	attach("t.a", &a);
	for (uint64_t i = 0; i < 40; i++) {
		uint64_t v = i + 1;
		ck_assert_int_eq(loco_write(thr, &a, i * 1024, &v, 8), 0);
	}
	ck_assert_int_eq(loco_persist(thr, 0), 0);
	loco_thread_stats(thr, &st);
	ck_assert_uint_ge(st.flushes, 40);
	power_cycle(&a);
	for (uint64_t i = 0; i < 40; i++) {
		uint64_t v;
		ck_assert_int_eq(loco_read(thr, &a, i * 1024, &v, 8), 0);
		ck_assert_uint_eq(v, i + 1);
	}
}
END_TEST

/* Atomics dirty their word too: a persisted FAA survives, and a later
 * one that was not persisted does not. */
START_TEST(atomics_persist)
{
	struct loco_rregion a;
	uint64_t old;
	mc_start_mem(&mc, true, power_cut);
	attach("t.a", &a);
	ck_assert_int_eq(loco_faa(thr, &a, 8, 5, &old), 0);
	ck_assert_int_eq(loco_cas(thr, &a, 16, 0, 7, &old), 0);
	ck_assert_int_eq(loco_persist(thr, 0), 0);
	ck_assert_int_eq(loco_faa(thr, &a, FAR, 9, &old), 0);
	power_cycle(&a);
	uint64_t v[2];
	ck_assert_int_eq(loco_read(thr, &a, 8, v, 16), 0);
	ck_assert_uint_eq(v[0], 5);
	ck_assert_uint_eq(v[1], 7);
	ck_assert_int_eq(loco_read(thr, &a, FAR, v, 8), 0);
	ck_assert_uint_eq(v[0], 0);
}
END_TEST

/* 8-byte ops of THR's batches that ran inline (shm's direct path). */
static uint64_t inline_batched(void)
{
	const struct loco_thread_hot *h = loco_thread_hot(thr);
	uint64_t n = 0;
	for (unsigned i = 0; i < 4; i++)
		n += atomic_load_explicit(&h->batched_ops[i], memory_order_relaxed);
	return n;
}

/* Batches of WRITEs and atomics to a durable node, on shm through the
 * inline path, note their ranges as single ops do: a persist after them
 * makes all of them durable (40 scattered ones, more than a QP tracks:
 * the oldest flushed early), and a batch after the persist is lost in a
 * power cut. */
START_TEST(batches_persist)
{
	struct loco_rregion a;
	struct loco_batch b;
	uint64_t v[40], old[2], lost = 99;
	bool shm = !strcmp(getenv("LOCO_TRANSPORT") ? getenv("LOCO_TRANSPORT") :
			   "shm", "shm");
	mc_start_mem(&mc, true, power_cut);
	attach("t.a", &a);
	ck_assert(holds(&a, 0, 1, 0));   /* opens the QP (out of line) */
	uint64_t before = inline_batched();
	loco_batch_init(&b, thr);
	for (uint64_t i = 0; i < 40; i++) {
		v[i] = i + 1;
		loco_batch_write(&b, &a, i * 512, &v[i], 8);
		if (i % 10 == 9)
			ck_assert_int_eq(loco_batch_post(&b, NULL), 0);
	}
	loco_batch_faa(&b, &a, 40 * 512, 5, &old[0]);
	loco_batch_cas(&b, &a, 41 * 512, 0, 7, &old[1]);
	ck_assert_int_eq(loco_batch_post(&b, NULL), 0);
	if (shm)
		ck_assert_uint_eq(inline_batched() - before, 42);
	ck_assert_int_eq(loco_persist(thr, 0), 0);
	loco_batch_write(&b, &a, FAR, &lost, 8);
	ck_assert_int_eq(loco_batch_post(&b, NULL), 0);
	power_cycle(&a);
	for (uint64_t i = 0; i < 42; i++) {
		uint64_t got;
		ck_assert_int_eq(loco_read(thr, &a, i * 512, &got, 8), 0);
		ck_assert_uint_eq(got, i < 40 ? i + 1 : i == 40 ? 5 : 7);
	}
	ck_assert(holds(&a, FAR, 1, 0));
}
END_TEST

/* The node died and came back: a persist of writes that went to the dead
 * incarnation fails (they are gone) instead of claiming them durable. */
START_TEST(persist_after_restart_fails)
{
	struct loco_rregion a;
	uint64_t v = 42;
	mc_start_mem(&mc, true, power_cut);
	attach("t.a", &a);
	ck_assert_int_eq(loco_write(thr, &a, 0, &v, 8), 0);
	mc_stop_mem(&mc, SIGKILL);
	ck_assert_int_eq(loco_persist(thr, 0), -LOCO_EDOWN);
	mc_start_mem(&mc, true, power_cut);
	detach();
	attach("t.a", &a);
	ck_assert(holds(&a, 0, 1, 0));
}
END_TEST

/* A drop forgets the name for good: after a restart the region is new. */
START_TEST(drop_survives_restart)
{
	struct loco_rregion a;
	unsigned n = 0;
	mc_start_mem(&mc, true, power_cut);
	attach("t.a", &a);
	write_both(&a);
	ck_assert_int_eq(loco_region_drop(mc.mgr, 0, "t.a", 0, &n), 0);
	ck_assert_uint_eq(n, 1);
	power_cycle(&a);
	ck_assert(holds(&a, 0, 64, 0));
}
END_TEST

/* On a memory node without --durable a persist is a pair fence. */
START_TEST(volatile_node_persist_is_fence)
{
	struct loco_rregion a;
	struct loco_stats st;
	uint64_t v = 3;
	mc_start_mem(&mc, false, NULL);
	attach("t.a", &a);
	ck_assert(!loco_peer_durable(mc.mgr, 0));
	ck_assert_int_eq(loco_write(thr, &a, 0, &v, 8), 0);
	ck_assert_int_eq(loco_persist(thr, 0), 0);
	loco_thread_stats(thr, &st);
	ck_assert_uint_eq(st.flushes, 0);
	ck_assert_uint_eq(st.reads, 1);   /* the fence READ */
}
END_TEST

/* An 8-byte READ of OFF of RR that fails (the node died): its error,
 * within 2 s (the keeper marks the node down when its connection ends). */
static int read_until_error(const struct loco_rregion *rr, uint64_t off)
{
	uint64_t v, t0 = loco_now_ns();
	int rc;
	while (!(rc = loco_read(thr, rr, off, &v, 8)) &&
	       loco_now_ns() - t0 < 2000000000ull) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	return rc;
}

/* A memory node dies: operations on it fail at once with -LOCO_EDOWN (no
 * hang); it comes back: the same manager and the same descriptors go on,
 * with the persisted data. */
START_TEST(down_fails_fast_then_continues)
{
	struct loco_rregion a, b;
	uint64_t v = 11, got = 0;
	mc_start_mem(&mc, true, power_cut);
	attach("t.a", &a);
	ck_assert_int_eq(loco_write(thr, &a, 0, &v, 8), 0);
	ck_assert_int_eq(loco_persist(thr, 0), 0);
	mc_stop_mem(&mc, SIGKILL);
	ck_assert_int_eq(read_until_error(&a, 0), -LOCO_EDOWN);
	uint64_t t0 = loco_now_ns();
	ck_assert_int_eq(loco_write(thr, &a, 8, &v, 8), -LOCO_EDOWN);
	ck_assert_int_eq(loco_region_open(mc.mgr, 0, "t.b", LEN, &b), -LOCO_EDOWN);
	ck_assert_uint_lt(loco_now_ns() - t0, 100000000ull);
	/* Found up at its first hello, and again at or after its return. */
	uint64_t up0 = loco_peer_up_ns(mc.mgr, 0);
	ck_assert_uint_gt(up0, 0);
	uint64_t back = loco_lease_now_ns();
	mc_start_mem(&mc, true, power_cut);
	ck_assert_int_eq(loco_peer_wait(mc.mgr, 0, 10000), 0);
	ck_assert_uint_ge(loco_peer_up_ns(mc.mgr, 0), back);
	ck_assert_uint_le(loco_peer_up_ns(mc.mgr, 0), loco_lease_now_ns());
	ck_assert_uint_eq(loco_peer_up_ns(mc.mgr, LOCO_MAX_NODES), 0);
	ck_assert_int_eq(loco_read(thr, &a, 0, &got, 8), 0);
	ck_assert_uint_eq(got, 11);
	v = 12;
	ck_assert_int_eq(loco_write(thr, &a, 0, &v, 8), 0);
	ck_assert_int_eq(loco_persist(thr, 0), 0);
	ck_assert_int_eq(loco_region_open(mc.mgr, 0, "t.a", LEN, &b), 0);
	ck_assert_uint_eq(b.off, a.off);
}
END_TEST

/* A region's access outlives restarts: the table keeps it, the keeper's
 * reopen declares it again (the same descriptor refuses a WRITE before
 * and after), and a client restarted with other flags is refused. */
START_TEST(access_survives_restart)
{
	const unsigned ra = LOCO_REGION_REMOTE_READ | LOCO_REGION_REMOTE_ATOMIC;
	struct loco_rregion a, b;
	uint64_t v = 5, old = 0;
	mc_start_mem(&mc, true, power_cut);
	mc_start_self(&mc, 5000);
	ck_assert_int_eq(loco_thread_create(mc.mgr, &thr), 0);
	ck_assert_int_eq(loco_region_open_ex(mc.mgr, 0, "t.ra", LEN, ra, &a), 0);
	ck_assert_int_eq(loco_faa(thr, &a, 0, 2, &old), 0);
	ck_assert_int_eq(loco_persist(thr, 0), 0);
	ck_assert_int_eq(loco_write(thr, &a, 8, &v, 8), -EACCES);
	mc_stop_mem(&mc, SIGKILL);
	ck_assert_int_eq(read_until_error(&a, 0), -LOCO_EDOWN);
	mc_start_mem(&mc, true, power_cut);
	ck_assert_int_eq(loco_peer_wait(mc.mgr, 0, 10000), 0);
	ck_assert_int_eq(loco_faa(thr, &a, 0, 1, &old), 0);
	ck_assert_uint_eq(old, 2);
	ck_assert_int_eq(loco_write(thr, &a, 8, &v, 8), -EACCES);
	detach();
	mc_stop_mem(&mc, SIGKILL);
	mc_start_mem(&mc, true, power_cut);
	mc_start_self(&mc, 5000);
	ck_assert_int_eq(loco_thread_create(mc.mgr, &thr), 0);
	ck_assert_int_eq(loco_region_open(mc.mgr, 0, "t.ra", LEN, &b),
			 -LOCO_EMISMATCH);
	ck_assert_int_eq(loco_region_open_ex(mc.mgr, 0, "t.ra", LEN, ra, &b), 0);
	ck_assert_uint_eq(b.off, a.off);
	ck_assert_uint_eq(b.access, ra);
}
END_TEST

/* A write the dead incarnation never persisted: after the node is back
 * the next persist reports the loss once, and the bytes are indeed gone. */
START_TEST(unpersisted_loss_reported_once)
{
	struct loco_rregion a;
	uint64_t v = 13, got = 1;
	mc_start_mem(&mc, true, power_cut);
	attach("t.a", &a);
	ck_assert_int_eq(loco_write(thr, &a, 0, &v, 8), 0);
	mc_stop_mem(&mc, SIGKILL);
	read_until_error(&a, 8);
	mc_start_mem(&mc, true, power_cut);
	ck_assert_int_eq(loco_peer_wait(mc.mgr, 0, 10000), 0);
	ck_assert_int_eq(loco_persist(thr, 0), -LOCO_EDOWN);
	ck_assert_int_eq(loco_persist(thr, 0), 0);
	ck_assert_int_eq(loco_read(thr, &a, 0, &got, 8), 0);
	ck_assert_uint_eq(got, 0);
}
END_TEST

/* A memory node without --durable comes back empty: its regions are
 * gone, which loco_peer_wait and operations say (-LOCO_ELOST). A region
 * opened there again starts afresh, and a thread that kept its QP (the
 * inline 8-byte path on shm) reaches the new incarnation, not the dead
 * one's mapping, as a second thread sees. */
START_TEST(volatile_node_lost_then_fresh)
{
	struct loco_rregion a, b;
	struct loco_thread *t2;
	uint64_t v = 5, got = 1;
	int rc;
	mc_start_mem(&mc, false, NULL);
	attach("t.a", &a);
	ck_assert_int_eq(loco_write(thr, &a, 0, &v, 8), 0);
	ck_assert_int_eq(loco_write(thr, &a, 8, &v, 8), 0);
	mc_stop_mem(&mc, SIGKILL);
	/* The first request may find the dead node's connection reset. */
	while ((rc = loco_region_open(mc.mgr, 0, "t.b", LEN, &b)) == -ECONNRESET)
		;
	ck_assert_int_eq(rc, -LOCO_EDOWN);
	mc_start_mem(&mc, false, NULL);
	ck_assert_int_eq(loco_peer_wait(mc.mgr, 0, 10000), -LOCO_ELOST);
	ck_assert_int_eq(loco_read(thr, &a, 0, &got, 8), -LOCO_ELOST);
	ck_assert_int_eq(loco_region_open(mc.mgr, 0, "t.a", LEN, &a), 0);
	v = 6;
	ck_assert_int_eq(loco_write(thr, &a, 0, &v, 8), 0);
	/* The fence reports, once, the unplaced WRITEs the dead node took
	 * along; the next one places the new WRITE. */
	ck_assert_int_eq(loco_fence(thr, LOCO_FENCE_PAIR, 0), -LOCO_EDOWN);
	ck_assert_int_eq(loco_fence(thr, LOCO_FENCE_PAIR, 0), 0);
	ck_assert_int_eq(loco_thread_create(mc.mgr, &t2), 0);
	ck_assert_int_eq(loco_read(t2, &a, 0, &got, 8), 0);
	ck_assert_uint_eq(got, 6);
	ck_assert_int_eq(loco_read(t2, &a, 8, &got, 8), 0);
	ck_assert_uint_eq(got, 0);
	loco_thread_destroy(t2);
}
END_TEST

struct racer {
	const struct loco_rregion *rr;
	uint64_t *counter;
	int rc;
};

/* Write a globally increasing value (FAA) to one shared word, persist. */
static void *race(void *arg)
{
	struct racer *r = arg;
	struct loco_thread *t;
	r->rc = loco_thread_create(mc.mgr, &t);
	for (int i = 0; !r->rc && i < 300; i++) {
		uint64_t v;
		r->rc = loco_faa(t, r->rr, 8, 1, &v);
		v++;
		if (!r->rc)
			r->rc = loco_write(t, r->rr, 64, &v, 8);
		if (!r->rc)
			r->rc = loco_persist(t, r->rr->node);
	}
	loco_thread_destroy(t);
	return NULL;
}

#define GROUP_THREADS 4
#define GROUP_ROUNDS 20

struct grouper {
	const struct loco_rregion *rr;
	unsigned id;
	int rc;
};

/* Thread ID persists GROUP_ROUNDS patterns into its own 64 words (the
 * last one, seed 10 + ID, stays), then writes seed 20 + ID at FAR + its
 * offset without a persist point. */
static void *group_persist(void *arg)
{
	struct grouper *g = arg;
	struct loco_thread *t;
	uint64_t buf[64], at = (uint64_t)g->id * 1024;
	g->rc = loco_thread_create(mc.mgr, &t);
	for (unsigned i = 0; !g->rc && i < GROUP_ROUNDS; i++) {
		fill(buf, 64, i + 1 == GROUP_ROUNDS ? 10 + g->id : 100 + i);
		g->rc = loco_write(t, g->rr, at, buf, sizeof(buf));
		if (!g->rc)
			g->rc = loco_persist(t, g->rr->node);
	}
	fill(buf, 64, 20 + g->id);
	if (!g->rc)
		g->rc = loco_write(t, g->rr, FAR + at, buf, sizeof(buf));
	if (!g->rc)
		g->rc = loco_fence(t, LOCO_FENCE_PAIR, g->rr->node);
	loco_thread_destroy(t);
	return NULL;
}

/* Threads persist at once (fdatasync: group commit, FLUSHes of several
 * threads covered by one sync), then leave writes unpersisted; the node
 * is killed and started again with ENV: every thread's last persisted
 * pattern is there, and its unpersisted one is there exactly when KEPT. */
static void group_survive(const char *const *env, bool kept)
{
	struct loco_rregion a, a2;
	pthread_t th[GROUP_THREADS];
	struct grouper g[GROUP_THREADS];
	mc_start_mem(&mc, true, env);
	attach("t.g", &a);
	for (unsigned i = 0; i < GROUP_THREADS; i++) {
		g[i] = (struct grouper){ .rr = &a, .id = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, group_persist,
						&g[i]), 0);
	}
	for (unsigned i = 0; i < GROUP_THREADS; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_eq(g[i].rc, 0);
	}
	detach();
	mc_stop_mem(&mc, SIGKILL);
	mc_start_mem(&mc, true, env);
	attach("t.g", &a2);
	ck_assert_uint_eq(a2.off, a.off);
	for (unsigned i = 0; i < GROUP_THREADS; i++) {
		ck_assert_msg(holds(&a2, i * 1024, 64, 10 + i),
			      "thread %u's persisted pattern lost", i);
		ck_assert_msg(holds(&a2, FAR + i * 1024, 64, kept ? 20 + i : 0),
			      "thread %u's unpersisted pattern %s", i,
			      kept ? "lost" : "survived a power cut");
	}
}

/* Group-committed persists survive a power cut; what was not persisted is
 * lost, exactly that. */
START_TEST(group_persists_power_cut)
{
	group_survive(power_cut, false);
}
END_TEST

/* Without --power-cut (the arena is the image) a restart keeps what was
 * persisted and, as after any process crash, the rest. */
START_TEST(group_persists_restart_keeps_all)
{
	group_survive(NULL, true);
}
END_TEST

/* Concurrent persists of the same word never let an older copy land over
 * a newer one: the image ends with the word's last value. */
START_TEST(concurrent_persists_keep_last)
{
	struct loco_rregion a;
	pthread_t th[3];
	struct racer r[3];
	mc_start_mem(&mc, true, power_cut);
	attach("t.a", &a);
	for (int i = 0; i < 3; i++) {
		r[i] = (struct racer){ .rr = &a };
		ck_assert_int_eq(pthread_create(&th[i], NULL, race, &r[i]), 0);
	}
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_eq(r[i].rc, 0);
	}
	uint64_t last;
	ck_assert_int_eq(loco_read(thr, &a, 64, &last, 8), 0);
	power_cycle(&a);
	uint64_t got;
	ck_assert_int_eq(loco_read(thr, &a, 64, &got, 8), 0);
	ck_assert_uint_eq(got, last);
}
END_TEST

/* Two processes cannot serve one directory, and the arena size may not
 * change across restarts: both refuse to start (exit 1). */
START_TEST(bad_restarts_refused)
{
	mc_start_mem(&mc, true, NULL);
	struct loco_rregion a;
	attach("t.a", &a);
	pid_t second = mc_spawn(&mc, true, NULL);
	int st;
	waitpid(second, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
	detach();
	ck_assert_int_eq(mc_stop_mem(&mc, SIGTERM), 0);
	static const char *const bigger[] = { "LOCO_ARENA_MB=32", NULL };
	pid_t p = mc_spawn(&mc, true, bigger);
	waitpid(p, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}
END_TEST

/* A damaged region table is named and refused, not served. */
START_TEST(damaged_table_refused)
{
	mc_start_mem(&mc, true, NULL);
	struct loco_rregion a;
	attach("t.a", &a);
	detach();
	ck_assert_int_eq(mc_stop_mem(&mc, SIGTERM), 0);
	char path[128];
	snprintf(path, sizeof(path), "%s/regions", mc.dir);
	FILE *f = fopen(path, "r+");
	ck_assert_ptr_nonnull(f);
	fseek(f, 30, SEEK_SET);
	fputc('X', f);
	fclose(f);
	pid_t p = mc_spawn(&mc, true, NULL);
	int st;
	waitpid(p, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("durable");
	TCase *tc = tcase_create("durable");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, power_cut_loses_unpersisted);
	tcase_add_test(tc, crash_without_power_cut_keeps_all);
	tcase_add_test(tc, clean_stop_writes_back);
	tcase_add_test(tc, many_ranges_one_persist);
	tcase_add_test(tc, atomics_persist);
	tcase_add_test(tc, batches_persist);
	tcase_add_test(tc, persist_after_restart_fails);
	tcase_add_test(tc, down_fails_fast_then_continues);
	tcase_add_test(tc, unpersisted_loss_reported_once);
	tcase_add_test(tc, volatile_node_lost_then_fresh);
	tcase_add_test(tc, drop_survives_restart);
	tcase_add_test(tc, access_survives_restart);
	tcase_add_test(tc, volatile_node_persist_is_fence);
	tcase_add_test(tc, concurrent_persists_keep_last);
	tcase_add_test(tc, group_persists_power_cut);
	tcase_add_test(tc, group_persists_restart_keeps_all);
	tcase_add_test(tc, bad_restarts_refused);
	tcase_add_test(tc, damaged_table_refused);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
