/* SPDX-License-Identifier: MIT */
/* rtx on a memory node that dies (a real loco-memnode child, durable,
 * killed with a power cut; test/common/memnode.h): once the node is
 * down, every operation that reaches it fails with -LOCO_EDOWN, and none
 * hands out bytes it did not read. A batch whose ops all failed at their
 * add (the node found down in the bounds check) posts nothing: its error
 * must still reach the caller, or read_many reads TXObj words that were
 * never written (a garbage data pointer, -EIO), renew judges pre-locks by
 * CAS results that never came, and a read-only commit validates against
 * READs that never ran. W's commit is a logged one (two writes). Runs
 * on the transport LOCO_TRANSPORT names. */
#include <check.h>
#include <errno.h>
#include <time.h>

#include "rtx/internal.h"
#include "test/common/memnode.h"

static const char *const power_cut[] = { "LOCO_POWER_CUT=1", NULL };

static struct mcluster mc;
static struct loco_rtx *x;
static struct loco_thread *thr, *thr2;
static struct loco_rtx_worker *w, *w2;

static void setup(void)
{
	struct loco_rtx_opts o = { .objects = 16, .data_len = 8 };
	mc_init(&mc);
	mc_start_mem(&mc, true, power_cut);
	mc_start_self(&mc, 5000);
	ck_assert_int_eq(loco_rtx_create(mc.mgr, &o, &x), 0);
	ck_assert_uint_eq(x->home, 0);
	ck_assert_int_eq(loco_thread_create(mc.mgr, &thr), 0);
	ck_assert_int_eq(loco_thread_create(mc.mgr, &thr2), 0);
	ck_assert_int_eq(loco_rtx_worker_create(x, thr, &w), 0);
	ck_assert_int_eq(loco_rtx_worker_create(x, thr2, &w2), 0);
}

/* The node is dead: giving chunks back fails, which is not under test. */
static void teardown(void)
{
	loco_rtx_worker_destroy(w2);
	loco_rtx_worker_destroy(w);
	loco_thread_destroy(thr2);
	loco_thread_destroy(thr);
	loco_rtx_destroy(x);
	mc_fini(&mc);
}

static loco_raddr_t obj(uint32_t i)
{
	return loco_rtx_obj(x, 0, i);
}

static void put(uint32_t i, uint64_t v)
{
	int rc;
	LOCO_RTX_BLOCK(w, rc) {
		rc = loco_rtx_write(w, obj(i), &v);
	}
	ck_assert_int_eq(rc, 0);
}

/* By WK, one read-for-update transaction adding 100 to objects 0 and 1,
 * which must have held 100 and 101: afterwards they hold 200 and 201. */
static void add_100_to_pair(struct loco_rtx_worker *wk)
{
	const void *vals[2];
	loco_raddr_t pair[2] = { obj(0), obj(1) };
	uint64_t seen[2] = { 0, 0 }, now[2];
	int rc;
	LOCO_RTX_BLOCK(wk, rc) {
		if ((rc = loco_rtx_read_for_update(wk, 2, pair, vals)))
			continue;
		seen[0] = *(const uint64_t *)vals[0];
		seen[1] = *(const uint64_t *)vals[1];
		uint64_t a = seen[0] + 100, b = seen[1] + 100;
		if (!(rc = loco_rtx_write(wk, obj(0), &a)))
			rc = loco_rtx_write(wk, obj(1), &b);
	}
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(seen[0], 100);
	ck_assert_uint_eq(seen[1], 101);
	ck_assert_int_eq(loco_rtx_peek(wk, pair, 2, now, NULL), 0);
	ck_assert_uint_eq(now[0], 200);
	ck_assert_uint_eq(now[1], 201);
}

/* Kill the memory node and wait (2 s at most) until this node has found
 * it down: a READ of a TXObj fails with -LOCO_EDOWN. */
static void kill_node(void)
{
	uint64_t v[2], t0 = loco_now_ns();
	int rc;
	mc_stop_mem(&mc, SIGKILL);
	while (!(rc = loco_read(thr, rtx_meta(x, 0), 0, v, sizeof(v))) &&
	       loco_now_ns() - t0 < 2000000000ull) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	ck_assert_int_eq(rc, -LOCO_EDOWN);
}

START_TEST(ops_on_a_dead_node_fail_down)
{
	const void *vals[2], *v;
	const uint64_t one = 1;
	loco_raddr_t pair[2] = { obj(0), obj(1) }, later[2] = { obj(4), obj(5) };
	for (uint32_t i = 0; i < 6; i++)
		put(i, 100 + i);
	/* While the node is up: W reads and pre-locks (a renew to come), W2
	 * reads two objects (a read-only commit to validate). Each read_many
	 * also leaves real TXObj words where a later one's buffers lie. */
	ck_assert_int_eq(loco_rtx_begin(w), 0);
	ck_assert_int_eq(loco_rtx_read_many(w, 2, pair, vals), 0);
	ck_assert_uint_eq(*(const uint64_t *)vals[1], 101);
	ck_assert_int_eq(loco_rtx_lock(w, obj(2)), 0);
	ck_assert_int_eq(loco_rtx_begin(w2), 0);
	ck_assert_int_eq(loco_rtx_read(w2, obj(0), &v), 0);
	ck_assert_int_eq(loco_rtx_read(w2, obj(3), &v), 0);
	ck_assert_uint_eq(*(const uint64_t *)v, 103);

	kill_node();
	ck_assert_int_eq(loco_rtx_renew(w), -LOCO_EDOWN);
	ck_assert_int_eq(loco_rtx_write(w, obj(0), &one), 0);
	ck_assert_int_eq(loco_rtx_write(w, obj(1), &one), 0);
	ck_assert_int_eq(loco_rtx_commit(w), -LOCO_EDOWN);
	ck_assert_int_eq(loco_rtx_commit(w2), -LOCO_EDOWN);

	ck_assert_int_eq(loco_rtx_begin(w), 0);
	vals[0] = vals[1] = NULL;
	ck_assert_int_eq(loco_rtx_read_many(w, 2, later, vals), -LOCO_EDOWN);
	ck_assert_ptr_null(vals[0]);
	ck_assert_ptr_null(vals[1]);
	ck_assert_int_eq(loco_rtx_read(w, obj(6), &v), -LOCO_EDOWN);
	ck_assert_int_eq(loco_rtx_lock(w, obj(7)), -LOCO_EDOWN);
	loco_rtx_abort(w);
	uint64_t peeked[2];
	ck_assert_int_eq(loco_rtx_peek(w, later, 2, peeked, NULL), -LOCO_EDOWN);
}
END_TEST

/* A read for update holds its logged locks while the application
 * computes; on a durable node they are persisted with the commit's data,
 * before the commit point (rtx/commit.c), so a power cut meanwhile takes
 * them back with nothing but the durable INIT log to show for them. The
 * commit then fails with -LOCO_EDOWN (even after another operation of
 * its thread took the loss report), the worker's next incarnation
 * settles the log, the values are the old ones, and the same objects
 * lock and commit again. */
START_TEST(update_locks_lost_to_power_cut)
{
	const void *vals[2];
	const uint64_t one = 1, two = 2;
	loco_raddr_t pair[2] = { obj(0), obj(1) };
	uint64_t meta[2];
	put(0, 100);
	put(1, 101);
	ck_assert_int_eq(loco_rtx_begin(w), 0);
	ck_assert_int_eq(loco_rtx_read_for_update(w, 2, pair, vals), 0);
	ck_assert_uint_eq(*(const uint64_t *)vals[1], 101);
	ck_assert_int_eq(loco_read(thr2, rtx_meta(x, 0), 0, meta, 8), 0);
	ck_assert(loco_lllock_is_locked(meta[0]));
	ck_assert_int_eq(loco_rtx_write(w, obj(0), &one), 0);
	ck_assert_int_eq(loco_rtx_write(w, obj(1), &two), 0);

	kill_node();
	mc_start_mem(&mc, true, power_cut);
	ck_assert_int_eq(loco_peer_wait(mc.mgr, 0, 10000), 0);
	/* The locks were never persisted: the power cut took them. */
	ck_assert_int_eq(loco_read(thr2, rtx_meta(x, 0), 0, meta, 16), 0);
	ck_assert(!loco_lllock_is_locked(meta[0]));
	/* Another operation of W's thread takes the loss report (once): the
	 * commit must still not reach its commit point. */
	ck_assert_int_eq(loco_persist(thr, 0), -LOCO_EDOWN);
	ck_assert_int_eq(loco_rtx_commit(w), -LOCO_EDOWN);
	loco_rtx_worker_destroy(w);
	ck_assert_int_eq(loco_rtx_worker_create(x, thr, &w), 0);

	add_100_to_pair(w);
}
END_TEST

/* A read for update places its log and its locks in one doorbell and
 * persists neither: C1's persist covers both, before the commit point.
 * A page cache may write a lock back early, so a power cut can leave a
 * lock durable whose log is not (the slot's durable log is an older
 * one). The next transaction on the object must find the log not
 * matching the lock and steal it (the object keeps its committed value,
 * never a half of the lost transaction), as it does a lock whose log was
 * reused. Here the early write-back is a persist of the TXObjs alone. */
START_TEST(update_lock_durable_without_its_log)
{
	const void *vals[2];
	const uint64_t one = 1, two = 2;
	loco_raddr_t pair[2] = { obj(0), obj(1) };
	uint64_t meta[2], lockv;
	uint8_t log[4096];
	put(0, 100);
	put(1, 101);
	ck_assert_int_eq(loco_rtx_begin(w), 0);
	ck_assert_int_eq(loco_rtx_read_for_update(w, 2, pair, vals), 0);
	ck_assert_int_eq(loco_rtx_write(w, obj(0), &one), 0);
	ck_assert_int_eq(loco_rtx_write(w, obj(1), &two), 0);
	ck_assert_int_eq(loco_persist_range(thr2, rtx_meta(x, 0), 0,
					    2 * RTX_META_LEN), 0);
	ck_assert_int_eq(loco_read(thr2, rtx_meta(x, 0), 0, &lockv, 8), 0);
	ck_assert(loco_lllock_is_locked(lockv));
	ck_assert_uint_le(x->log_len, sizeof(log));

	kill_node();
	mc_start_mem(&mc, true, power_cut);
	ck_assert_int_eq(loco_peer_wait(mc.mgr, 0, 10000), 0);
	/* The locks came back; their log did not. */
	for (unsigned i = 0; i < 2; i++) {
		ck_assert_int_eq(loco_read(thr2, rtx_meta(x, 0),
					   i * RTX_META_LEN, meta, 16), 0);
		ck_assert_uint_eq(meta[0], lockv);
	}
	ck_assert_int_eq(loco_read(thr2, &x->logs, rtx_log_off(x, w->slot),
				   log, x->log_len), 0);
	ck_assert(!loco_rtx_log_matches(log, lockv, x->o.max_writes));

	/* Another worker meets the locks while W's transaction is still open
	 * (W's own abort, or its next incarnation, would release them). */
	add_100_to_pair(w2);
	struct loco_rtx_stats st;
	loco_rtx_worker_stats(w2, &st);
	ck_assert_uint_eq(st.steals, 2);
	uint64_t now[2];
	/* W's commit finds the node restarted under it and changes nothing. */
	ck_assert_int_eq(loco_rtx_commit(w), -LOCO_EDOWN);
	ck_assert_int_eq(loco_rtx_peek(w2, pair, 2, now, NULL), 0);
	ck_assert_uint_eq(now[0], 200);
	ck_assert_uint_eq(now[1], 201);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("rtx_down");
	TCase *t = tcase_create("down");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, ops_on_a_dead_node_fail_down);
	tcase_add_test(t, update_locks_lost_to_power_cut);
	tcase_add_test(t, update_lock_durable_without_its_log);
	suite_add_tcase(s, t);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
