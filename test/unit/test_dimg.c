/* SPDX-License-Identifier: MIT */
/* The durable image itself (loco/transport/durable.c), without a cluster:
 * group commit (FLUSHes that arrive while a sync that began after them
 * runs are covered by it; those that arrive while an earlier one runs
 * wait for it, and the next sync covers them all; a waiter whose syncer
 * does not finish syncs by itself), and a
 * direct image's restart (the new incarnation keeps every byte written
 * to the old one, a writer still holding the old mapping can neither
 * reach it nor persist). Each handle opens the image on its own, as the
 * processes of a cluster do: the file locks tell them apart. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <loco/error.h>
#include "loco/transport/durable.h"

#define LEN (1u << 20)
#define ID UINT64_C(0x1234)
#define FLUSHERS 4
#define FOREVER_NS UINT64_C(60000000000)

static char base[64];  /* this run's directory (unchecked fixture) */
static char dir[96];   /* this test's, inside it */
static char path[128];

static int remove_one(const char *p, const struct stat *st, int flag,
		      struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

/* Removed in the parent, so a failed test (its child exits at the
 * failed check, before any checked teardown) leaves nothing behind. */
static void base_setup(void)
{
	snprintf(base, sizeof(base), "/tmp/loco-test-dimg-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(base));
}

static void base_teardown(void)
{
	nftw(base, remove_one, 8, FTW_DEPTH | FTW_PHYS);
}

static void setup(void)
{
	snprintf(dir, sizeof(dir), "%s/XXXXXX", base);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/%s", dir, LOCO_DIMG_NAME);
}

/* Start as the owner of the image with sync mode SYNC and HOW. */
static void own(struct loco_dimg *d, int sync, unsigned how)
{
	ck_assert_int_eq(loco_dimg_own(dir, LEN, sync, how, ID, d), 0);
	ck_assert_int_eq(loco_dimg_ready(d), 0);
}

/* Another process's view of OWNER's image (its own open file). */
static void attach(const struct loco_dimg *owner, struct loco_dimg *d)
{
	ck_assert_int_eq(loco_dimg_attach(path, LEN, ID, owner->epoch, d), 0);
}

/* The group-commit state of the image's current incarnation, mapped. */
static struct loco_dimg_gc *gc_map(void)
{
	char p[160];
	snprintf(p, sizeof(p), "%s.sync", path);
	int fd = open(p, O_RDWR);
	ck_assert_int_ge(fd, 0);
	void *m = mmap(NULL, sizeof(struct loco_dimg_gc), PROT_READ | PROT_WRITE,
		       MAP_SHARED, fd, 0);
	close(fd);
	ck_assert_ptr_ne(m, MAP_FAILED);
	return m;
}

/* Play a sync that began after every ticket up to UPTO and has not ended. */
static void sync_in_flight(struct loco_dimg_gc *g, uint64_t upto)
{
	atomic_store(&g->started, upto);
}

/* ... and its end: OWNER's image synced, UPTO published as done. */
static void sync_ends(struct loco_dimg_gc *g, const struct loco_dimg *owner,
		      uint64_t upto)
{
	ck_assert_int_eq(fdatasync(owner->fd), 0);
	atomic_store(&g->done, upto);
	atomic_fetch_add(&g->wake, 1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Play every sync slot held by a sync that began at START (0: free;
 * in the future: never stale). */
static void slots_held(struct loco_dimg_gc *g, uint64_t start)
{
	for (unsigned i = 0; i < LOCO_DIMG_GC_SLOTS; i++)
		atomic_store(&g->slot[i], start);
}

#define HOUR_NS UINT64_C(3600000000000)

static uint64_t tickets_of(const struct loco_dimg *d, uint64_t *syncs)
{
	uint64_t t, s;
	ck_assert_int_eq(loco_dimg_group_counts(d, &t, &s), 0);
	if (syncs)
		*syncs = s;
	return t;
}

/* Wait (10 s at most) until D's incarnation has handed out N tickets. */
static void wait_tickets(const struct loco_dimg *d, uint64_t n)
{
	struct timespec nap = { 0, 1000000 };
	for (int i = 0; i < 10000 && tickets_of(d, NULL) < n; i++)
		nanosleep(&nap, NULL);
	ck_assert_uint_eq(tickets_of(d, NULL), n);
}

struct flusher {
	struct loco_dimg img;
	uint64_t off;
	int rc;
	atomic_bool returned;
};

/* Write a word through the flusher's own mapping and FLUSH it. */
static void *flush_one(void *arg)
{
	struct flusher *f = arg;
	uint64_t v = f->off;
	memcpy(f->img.map + f->off, &v, 8);
	struct loco_drange r = { f->off, 8 };
	f->rc = loco_dimg_flush(&f->img, f->img.map, &r, 1);
	atomic_store(&f->returned, true);
	return NULL;
}

/* FLUSHERS threads flushing a word each, half through handles of their
 * own (other processes), half through SHARED (threads of one process);
 * none syncs by itself however long it waits. */
static void start_flushers(const struct loco_dimg *o, struct loco_dimg *shared,
			   struct flusher *f, pthread_t *th)
{
	attach(o, shared);
	shared->group_wait_ns = FOREVER_NS;
	for (unsigned i = 0; i < FLUSHERS; i++) {
		if (i < FLUSHERS / 2) {
			attach(o, &f[i].img);
			f[i].img.group_wait_ns = FOREVER_NS;
		} else {
			f[i].img = *shared;
		}
		f[i].off = 4096 * (i + 1);
		f[i].returned = false;
		ck_assert_int_eq(pthread_create(&th[i], NULL, flush_one, &f[i]), 0);
	}
}

static void assert_none_returned(const struct flusher *f)
{
	for (unsigned i = 0; i < FLUSHERS; i++)
		ck_assert_msg(!atomic_load(&f[i].returned),
			      "flusher %u returned before the sync ended", i);
}

/* Join the flushers: each succeeded, its word is in O's image. */
static void join_flushers(const struct loco_dimg *o, struct loco_dimg *shared,
			  struct flusher *f, pthread_t *th)
{
	for (unsigned i = 0; i < FLUSHERS; i++) {
		pthread_join(th[i], NULL);
		ck_assert_int_eq(f[i].rc, 0);
		ck_assert_mem_eq(o->map + f[i].off, &f[i].off, 8);
		if (i < FLUSHERS / 2)
			loco_dimg_close(&f[i].img);
	}
	loco_dimg_close(shared);
}

/* FLUSHes (of other processes' handles, and of threads sharing one) that
 * arrive while a sync that began after them is in flight run no sync of
 * their own: they wait for it, and return when it ends. */
START_TEST(group_commit_covered_by_sync_in_flight)
{
	struct loco_dimg o, shared;
	struct flusher f[FLUSHERS];
	pthread_t th[FLUSHERS];
	own(&o, LOCO_DSYNC_FDATASYNC, LOCO_DIMG_DIRECT);
	struct loco_dimg_gc *g = gc_map();
	sync_in_flight(g, 1000);
	start_flushers(&o, &shared, f, th);
	wait_tickets(&o, FLUSHERS);
	assert_none_returned(f);
	sync_ends(g, &o, 1000);
	join_flushers(&o, &shared, f, th);
	uint64_t syncs;
	ck_assert_uint_eq(tickets_of(&o, &syncs), FLUSHERS);
	ck_assert_uint_eq(syncs, 0);
	munmap(g, sizeof(*g));
	loco_dimg_close(&o);
}
END_TEST

/* With a sync of tickets up to 5 in flight (and slot 0 held by it),
 * FLUSHERS flushers take tickets and none returns, and no sync starts;
 * once it ends and frees its slot, one sync covers them all (*ST). */
static void waiters_then_one_sync(struct loco_dimg *o, struct loco_dimg_gc *g,
				  struct loco_dimg_gc_stats *st)
{
	struct loco_dimg shared;
	struct flusher f[FLUSHERS];
	pthread_t th[FLUSHERS];
	start_flushers(o, &shared, f, th);
	wait_tickets(o, 5 + FLUSHERS);
	assert_none_returned(f);
	ck_assert_int_eq(loco_dimg_group_stats(o, st), 0);
	ck_assert_uint_eq(st->syncs, 0);
	sync_ends(g, o, 5);
	atomic_store(&g->slot[0], 0);
	join_flushers(o, &shared, f, th);
	ck_assert_int_eq(loco_dimg_group_stats(o, st), 0);
	ck_assert_uint_eq(st->syncs, 1);
}

/* FLUSHes that arrive while every sync slot holds a sync that began
 * before them start no sync beside those: they wait for a slot, and the
 * one sync that takes it covers them all. */
START_TEST(group_commit_next_sync_covers_waiters)
{
	struct loco_dimg o;
	struct loco_dimg_gc_stats st;
	own(&o, LOCO_DSYNC_FDATASYNC, LOCO_DIMG_DIRECT);
	struct loco_dimg_gc *g = gc_map();
	atomic_store(&g->req, 5);
	sync_in_flight(g, 5);
	slots_held(g, now_ns() + HOUR_NS);
	waiters_then_one_sync(&o, g, &st);
	ck_assert_uint_eq(st.covered_max, FLUSHERS);
	ck_assert_uint_eq(atomic_load(&g->done), 5 + FLUSHERS);
	ck_assert(st.sync_p50_us > 0 && st.sync_p99_us >= st.sync_p50_us);
	munmap(g, sizeof(*g));
	loco_dimg_close(&o);
}
END_TEST

/* LOCO_DURABLE_SYNCS=1 (the owner's choice): while one sync that began
 * before them is in flight, FLUSHes start none beside it though slots
 * are free; when it ends, one sync covers them all. */
START_TEST(group_commit_syncs_max_one)
{
	struct loco_dimg o;
	struct loco_dimg_gc_stats st;
	ck_assert_int_eq(setenv("LOCO_DURABLE_SYNCS", "1", 1), 0);
	own(&o, LOCO_DSYNC_FDATASYNC, LOCO_DIMG_DIRECT);
	ck_assert_int_eq(unsetenv("LOCO_DURABLE_SYNCS"), 0);
	struct loco_dimg_gc *g = gc_map();
	ck_assert_uint_eq(g->syncs_max, 1);
	atomic_store(&g->req, 5);
	sync_in_flight(g, 5);
	atomic_store(&g->slot[0], now_ns() + HOUR_NS);
	waiters_then_one_sync(&o, g, &st);
	ck_assert_uint_eq(atomic_load(&g->done), 5 + FLUSHERS);
	munmap(g, sizeof(*g));
	loco_dimg_close(&o);
}
END_TEST

/* With no sync in flight a FLUSH syncs at once, and what it read covers
 * itself: a later FLUSH finds its ticket not covered and syncs again. */
START_TEST(group_commit_syncs_when_none_in_flight)
{
	struct loco_dimg o, a;
	own(&o, LOCO_DSYNC_FDATASYNC, LOCO_DIMG_DIRECT);
	attach(&o, &a);
	struct flusher f = { .img = a, .off = 4096 };
	uint64_t syncs;
	for (unsigned i = 1; i <= 2; i++) {
		flush_one(&f);
		ck_assert_int_eq(f.rc, 0);
		ck_assert_uint_eq(tickets_of(&o, &syncs), i);
		ck_assert_uint_eq(syncs, i);
	}
	struct loco_dimg_gc *g = gc_map();
	ck_assert_uint_eq(atomic_load(&g->done), 2);
	munmap(g, sizeof(*g));
	loco_dimg_close(&a);
	loco_dimg_close(&o);
}
END_TEST

/* A sync in flight that never ends (its process paused) holds nobody for
 * long: the waiter syncs by itself after its wait and succeeds. */
START_TEST(group_commit_syncer_stuck)
{
	struct loco_dimg o, a;
	own(&o, LOCO_DSYNC_FDATASYNC, LOCO_DIMG_DIRECT);
	attach(&o, &a);
	a.group_wait_ns = 20000000;
	struct loco_dimg_gc *g = gc_map();
	sync_in_flight(g, 1000);
	struct flusher f = { .img = a, .off = 4096 };
	flush_one(&f);
	ck_assert_int_eq(f.rc, 0);
	uint64_t syncs;
	ck_assert_uint_eq(tickets_of(&o, &syncs), 1);
	ck_assert_uint_eq(syncs, 1);
	ck_assert_uint_ge(atomic_load(&g->done), 1);
	munmap(g, sizeof(*g));
	loco_dimg_close(&a);
	loco_dimg_close(&o);
}
END_TEST

/* Sync slots held by syncers that died (or stopped) 50 ms ago (more than
 * GC_STALE_NS, 20 ms) hold nobody: a FLUSH not covered reclaims one and
 * syncs, though it would wait for ever for a sync to end. */
START_TEST(group_commit_stale_slots_reclaimed)
{
	struct loco_dimg o, a;
	own(&o, LOCO_DSYNC_FDATASYNC, LOCO_DIMG_DIRECT);
	attach(&o, &a);
	a.group_wait_ns = FOREVER_NS;
	struct loco_dimg_gc *g = gc_map();
	atomic_store(&g->req, 5);
	sync_in_flight(g, 5);
	slots_held(g, now_ns() - 50000000u);
	struct flusher f = { .img = a, .off = 4096 };
	uint64_t syncs;
	flush_one(&f);
	ck_assert_int_eq(f.rc, 0);
	ck_assert_uint_eq(tickets_of(&o, &syncs), 6);
	ck_assert_uint_eq(syncs, 1);
	ck_assert_uint_eq(atomic_load(&g->done), 6);
	munmap(g, sizeof(*g));
	loco_dimg_close(&a);
	loco_dimg_close(&o);
}
END_TEST

/* `none` and `msync` take no ticket: nothing to group. */
START_TEST(no_group_without_fdatasync)
{
	static const int modes[] = { LOCO_DSYNC_NONE, LOCO_DSYNC_MSYNC };
	for (unsigned m = 0; m < 2; m++) {
		struct loco_dimg o;
		own(&o, modes[m], LOCO_DIMG_DIRECT);
		struct flusher f = { .img = o, .off = 4096 };
		flush_one(&f);
		ck_assert_int_eq(f.rc, 0);
		ck_assert_uint_eq(tickets_of(&o, NULL), 0);
		loco_dimg_close(&o);
	}
}
END_TEST

/* A direct image's restart (LOCO_DIMG_RENEW): everything the dead
 * incarnation's writers placed is kept (no power cut), including what
 * they never flushed; a writer still holding the old mapping writes into
 * the old file only, and its FLUSH fails -LOCO_EDOWN. */
START_TEST(renew_keeps_all_and_shuts_old)
{
	const unsigned how = LOCO_DIMG_DIRECT | LOCO_DIMG_RENEW;
	struct loco_dimg o, peer, o2;
	uint64_t flushed = 0x1111, placed = 0x2222, stale = 0x3333, got;
	own(&o, LOCO_DSYNC_NONE, how);
	attach(&o, &peer);
	memcpy(peer.map + 4096, &flushed, 8);
	struct loco_drange r = { 4096, 8 };
	ck_assert_int_eq(loco_dimg_flush(&peer, peer.map, &r, 1), 0);
	memcpy(peer.map + 8192, &placed, 8);
	loco_dimg_close(&o);                 /* the owner dies */
	own(&o2, LOCO_DSYNC_NONE, how);      /* and starts again */
	ck_assert_uint_gt(o2.epoch, peer.epoch);
	memcpy(&got, o2.map + 4096, 8);
	ck_assert_uint_eq(got, flushed);
	memcpy(&got, o2.map + 8192, 8);
	ck_assert_uint_eq(got, placed);
	memcpy(peer.map + 12288, &stale, 8);
	memcpy(&got, o2.map + 12288, 8);
	ck_assert_uint_eq(got, 0);
	r.off = 12288;
	ck_assert_int_eq(loco_dimg_flush(&peer, peer.map, &r, 1), -LOCO_EDOWN);
	struct loco_dimg late;
	ck_assert_int_eq(loco_dimg_attach(path, LEN, ID, peer.epoch, &late),
			 -ESTALE);
	loco_dimg_close(&peer);
	loco_dimg_close(&o2);
}
END_TEST

/* Without RENEW (the power-cut emulation's image, which a volatile layer
 * fronts) a start keeps the file: a FLUSH of the old epoch fails. */
START_TEST(restart_in_place_fails_old_flush)
{
	struct loco_dimg o, peer, o2;
	own(&o, LOCO_DSYNC_NONE, 0);
	attach(&o, &peer);
	loco_dimg_close(&o);
	own(&o2, LOCO_DSYNC_NONE, 0);
	struct loco_drange r = { 4096, 8 };
	ck_assert_int_eq(loco_dimg_flush(&peer, o2.map, &r, 1), -LOCO_EDOWN);
	loco_dimg_close(&peer);
	loco_dimg_close(&o2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dimg");
	TCase *tc = tcase_create("core");
	tcase_add_unchecked_fixture(tc, base_setup, base_teardown);
	tcase_add_checked_fixture(tc, setup, NULL);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, group_commit_covered_by_sync_in_flight);
	tcase_add_test(tc, group_commit_next_sync_covers_waiters);
	tcase_add_test(tc, group_commit_syncs_max_one);
	tcase_add_test(tc, group_commit_syncs_when_none_in_flight);
	tcase_add_test(tc, group_commit_syncer_stuck);
	tcase_add_test(tc, group_commit_stale_slots_reclaimed);
	tcase_add_test(tc, no_group_without_fdatasync);
	tcase_add_test(tc, renew_keeps_all_and_shuts_old);
	tcase_add_test(tc, restart_in_place_fails_old_flush);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
