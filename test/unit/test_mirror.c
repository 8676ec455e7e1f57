/* SPDX-License-Identifier: MIT */
/* Mirrors (loco-memnode --mirror-of): a real primary (node 0) and its
 * mirror (node 1) as loco-memnode children, this process as compute node
 * 2. What was persisted to the primary, in regions opened before or after
 * the mirror joined, is there after the primary's death and the fail-over
 * (the same descriptors go on); what was not persisted is not; the
 * primary may not come back after it was taken over; a mirror that missed
 * a persist (it was dead) is dropped and never takes over, and one that
 * restarts joins again with everything; a mirror serves no region before
 * a fail-over. Runs on the transport LOCO_TRANSPORT names. */
#include <check.h>
#include <errno.h>

#include <loco/loco.h>
#include "test/common/memnode.h"

#define LEN 65536
#define FAR 32768

static const char *const power_cut[] = { "LOCO_POWER_CUT=1", NULL };

static struct mcluster mc;
static struct loco_thread *thr;

static void setup(void)
{
	mc_init_nodes(&mc, true);
}

static void teardown(void)
{
	if (thr)
		loco_thread_destroy(thr);
	thr = NULL;
	mc_fini(&mc);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, ms % 1000 * 1000000L };
	nanosleep(&ts, NULL);
}

/* The mirror the primary's image header names (node id + 1, 0: none). */
static uint32_t header_mirror(void)
{
	char path[128];
	uint32_t m = 0;
	snprintf(path, sizeof(path), "%s/arena.img", mc.dir);
	int fd = open(path, O_RDONLY);
	if (fd >= 0) {
		if (pread(fd, &m, 4, 40) != 4)
			m = 0;
		close(fd);
	}
	return m;
}

/* Until the primary names node 1 as its mirror (the join is done). */
static void wait_joined(void)
{
	for (int i = 0; i < 500 && header_mirror() != 2; i++)
		sleep_ms(10);
	ck_assert_uint_eq(header_mirror(), 2);
}

/* Primary and mirror up and joined, this node up with a thread. */
static void start_all(void)
{
	mc_start_mem(&mc, true, power_cut);
	mc_start_mirror(&mc, power_cut);
	wait_joined();
	mc_start_self(&mc, 5000);
	ck_assert_int_eq(loco_thread_create(mc.mgr, &thr), 0);
}

static void put(const struct loco_rregion *rr, uint64_t off, uint64_t v,
		bool persist)
{
	ck_assert_int_eq(loco_write(thr, rr, off, &v, 8), 0);
	int rc = persist ? loco_persist(thr, rr->node) :
			   loco_fence(thr, LOCO_FENCE_PAIR, rr->node);
	ck_assert_int_eq(rc, 0);
}

static uint64_t get(const struct loco_rregion *rr, uint64_t off)
{
	uint64_t v = 0;
	ck_assert_int_eq(loco_read(thr, rr, off, &v, 8), 0);
	return v;
}

/* Until an 8-byte READ of RR fails (the keeper saw its node die), at
 * most 2 s. */
static void until_down(const struct loco_rregion *rr)
{
	uint64_t v;
	for (int i = 0; i < 200 && !loco_read(thr, rr, 0, &v, 8); i++)
		sleep_ms(10);
}

/* Kill the primary (a power cut), wait until RR's operations fail, then
 * for loco_peer_wait's answer. */
static int primary_dies(const struct loco_rregion *rr, int wait_ms)
{
	mc_stop_mem(&mc, SIGKILL);
	until_down(rr);
	return loco_peer_wait(mc.mgr, 0, wait_ms);
}

/* Regions opened after the join, the second after the first was
 * written: after the fail-over both are where they were with their
 * persisted words, the unpersisted one is gone, and new persists go on,
 * surviving the mirror's own power cut. */
START_TEST(fail_over_keeps_persisted)
{
	struct loco_rregion a, b, a2, b2;
	start_all();
	ck_assert_int_eq(loco_region_open(mc.mgr, 0, "t.a", LEN, &a), 0);
	put(&a, 0, 11, true);
	ck_assert_int_eq(loco_region_open(mc.mgr, 0, "t.b", LEN, &b), 0);
	put(&b, 8, 13, true);
	put(&a, FAR, 12, false);   /* the last write: no persist covers it */
	ck_assert_int_eq(primary_dies(&a, 10000), 0);
	ck_assert_uint_eq(get(&a, 0), 11);
	ck_assert_uint_eq(get(&a, FAR), 0);
	ck_assert_uint_eq(get(&b, 8), 13);
	ck_assert_int_eq(loco_region_open(mc.mgr, 0, "t.a", LEN, &a2), 0);
	ck_assert_int_eq(loco_region_open(mc.mgr, 0, "t.b", LEN, &b2), 0);
	ck_assert_uint_eq(a2.off, a.off);
	ck_assert_uint_eq(b2.off, b.off);
	/* The write the dead primary never persisted is reported lost, once. */
	ck_assert_int_eq(loco_persist(thr, 0), -LOCO_EDOWN);
	put(&a, 16, 14, true);
	mc_stop_mirror(&mc, SIGKILL);
	until_down(&a);
	mc_start_mirror(&mc, power_cut);
	ck_assert_int_eq(loco_peer_wait(mc.mgr, 0, 10000), 0);
	ck_assert_uint_eq(get(&a, 16), 14);
	ck_assert_uint_eq(get(&a, 0), 11);
}
END_TEST

/* A primary taken over refuses to start again (exit 1). */
START_TEST(taken_primary_refuses_restart)
{
	struct loco_rregion a;
	start_all();
	ck_assert_int_eq(loco_region_open(mc.mgr, 0, "t.a", LEN, &a), 0);
	ck_assert_int_eq(primary_dies(&a, 10000), 0);
	int st;
	pid_t p = mc_spawn(&mc, true, power_cut);
	waitpid(p, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
}
END_TEST

/* The mirror dies; a persist to the primary drops it (it missed that
 * FLUSH); the primary dies: no fail-over (the restarted mirror cannot
 * join a dead primary), operations wait for the primary, which comes
 * back with everything persisted. */
START_TEST(dropped_mirror_never_takes_over)
{
	struct loco_rregion a;
	start_all();
	ck_assert_int_eq(loco_region_open(mc.mgr, 0, "t.a", LEN, &a), 0);
	put(&a, 0, 21, true);
	mc_stop_mirror(&mc, SIGKILL);
	put(&a, 8, 22, true);
	ck_assert_uint_eq(header_mirror(), 0);
	mc_stop_mem(&mc, SIGKILL);
	until_down(&a);
	mc_start_mirror(&mc, power_cut);
	ck_assert_int_eq(loco_peer_wait(mc.mgr, 0, 1000), -ETIMEDOUT);
	mc_start_mem(&mc, true, power_cut);
	ck_assert_int_eq(loco_peer_wait(mc.mgr, 0, 10000), 0);
	ck_assert_uint_eq(get(&a, 0), 21);
	ck_assert_uint_eq(get(&a, 8), 22);
}
END_TEST

/* A mirror that restarts joins again (a whole copy): what was persisted
 * while it was dead is there after a fail-over. */
START_TEST(restarted_mirror_joins_again)
{
	struct loco_rregion a;
	start_all();
	ck_assert_int_eq(loco_region_open(mc.mgr, 0, "t.a", LEN, &a), 0);
	mc_stop_mirror(&mc, SIGKILL);
	put(&a, 0, 31, true);
	mc_start_mirror(&mc, power_cut);
	wait_joined();
	put(&a, 8, 32, true);
	ck_assert_int_eq(primary_dies(&a, 10000), 0);
	ck_assert_uint_eq(get(&a, 0), 31);
	ck_assert_uint_eq(get(&a, 8), 32);
}
END_TEST

/* Before a fail-over a mirror serves no region request. */
START_TEST(mirror_serves_nothing_before)
{
	struct loco_rregion m;
	start_all();
	ck_assert_int_eq(loco_region_open(mc.mgr, 1, "t.m", LEN, &m), -EPERM);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mirror");
	TCase *t = tcase_create("mirror");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, fail_over_keeps_persisted);
	tcase_add_test(t, taken_primary_refuses_restart);
	tcase_add_test(t, dropped_mirror_never_takes_over);
	tcase_add_test(t, restarted_mirror_joins_again);
	tcase_add_test(t, mirror_serves_nothing_before);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
