/* SPDX-License-Identifier: MIT */
/* The front-end cache (fcache: replacement, pins) and the AsymNVM log
 * (oplog) against a real loco-memnode child with --durable and
 * --power-cut that the tests kill and restart: committed operations
 * survive a power cut of the back end and a crash of the front end and
 * are replayed exactly once (the operation is a non-idempotent add),
 * staged ones are not; applied batches are redone; a torn commit's
 * records never come back; the back end's death is an error the writer
 * recovers from in place; the log without its persist points loses
 * acknowledged operations. Runs on the transport LOCO_TRANSPORT names. */
#include <check.h>
#include <errno.h>

#include <loco/channels/fcache.h>
#include <loco/channels/oplog.h>
#include "test/common/memnode.h"

/* ---- fcache ------------------------------------------------------------- */

/* SAMPLE >= frames is exact LRU: the least recently used page goes. */
START_TEST(fcache_lru)
{
	struct loco_fcache c;
	ck_assert_int_eq(loco_fcache_init(&c, 64, 4, 64, 1), 0);
	for (uint64_t p = 0; p < 4; p++)
		ck_assert_ptr_nonnull(loco_fcache_add(&c, p));
	ck_assert_ptr_nonnull(loco_fcache_get(&c, 0));
	ck_assert_ptr_nonnull(loco_fcache_add(&c, 4));
	ck_assert_ptr_null(loco_fcache_get(&c, 1));
	ck_assert_ptr_nonnull(loco_fcache_get(&c, 0));
	ck_assert_ptr_nonnull(loco_fcache_get(&c, 2));
	ck_assert_uint_eq(c.stats.hits, 3);
	ck_assert_uint_eq(c.stats.misses, 1);
	ck_assert_uint_eq(c.stats.evictions, 1);
	ck_assert_uint_eq(loco_fcache_used(&c), 4);
	loco_fcache_fini(&c);
}
END_TEST

/* Pinned pages are never replaced; with every frame pinned nothing can
 * be added; unpinned, dropped and cleared pages go. */
START_TEST(fcache_pins)
{
	struct loco_fcache c;
	ck_assert_int_eq(loco_fcache_init(&c, 64, 4, 1, 7), 0);
	for (uint64_t p = 0; p < 4; p++)
		ck_assert_ptr_nonnull(loco_fcache_add(&c, p));
	ck_assert(loco_fcache_pin(&c, 0));
	ck_assert(!loco_fcache_pin(&c, 0));
	ck_assert(loco_fcache_pin(&c, 1));
	ck_assert(loco_fcache_pin(&c, 2));
	ck_assert(loco_fcache_pinned_page(&c, 2));
	for (uint64_t p = 10; p < 50; p++)
		ck_assert_ptr_nonnull(loco_fcache_add(&c, p));
	for (uint64_t p = 0; p < 3; p++)
		ck_assert_ptr_nonnull(loco_fcache_get(&c, p));
	ck_assert_uint_eq(loco_fcache_pinned(&c), 3);
	ck_assert(loco_fcache_pin(&c, 49));
	ck_assert_ptr_null(loco_fcache_add(&c, 99));
	loco_fcache_unpin(&c, 1);
	ck_assert_ptr_nonnull(loco_fcache_add(&c, 99));
	ck_assert_ptr_null(loco_fcache_get(&c, 1));
	loco_fcache_drop(&c, 99);
	ck_assert_uint_eq(loco_fcache_used(&c), 3);
	ck_assert_ptr_nonnull(loco_fcache_add(&c, 5));
	loco_fcache_clear(&c);
	ck_assert_uint_eq(loco_fcache_used(&c), 0);
	ck_assert_ptr_null(loco_fcache_get(&c, 0));
	loco_fcache_fini(&c);
}
END_TEST

/* Misses of a skewed trace (90% of uses on 50 hot pages, the rest on
 * 2000 cold ones) over a cache of 100 pages. */
static uint64_t skewed_misses(uint32_t sample)
{
	struct loco_fcache c;
	uint64_t s = 12345;
	ck_assert_int_eq(loco_fcache_init(&c, 64, 100, sample, 3), 0);
	for (int i = 0; i < 200000; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		uint64_t r = s >> 33;
		uint64_t page = r % 10 ? (r >> 8) % 50 : 50 + (r >> 8) % 2000;
		if (!loco_fcache_get(&c, page))
			ck_assert_ptr_nonnull(loco_fcache_add(&c, page));
	}
	uint64_t m = c.stats.misses;
	loco_fcache_fini(&c);
	return m;
}

/* AsymNVM's hybrid (a random sample, its least recently used goes)
 * misses less than random replacement on a skewed trace. */
START_TEST(fcache_hybrid_beats_random)
{
	uint64_t rr = skewed_misses(1), hybrid = skewed_misses(8);
	ck_assert_msg(hybrid < rr, "hybrid %llu misses, random %llu",
		      (unsigned long long)hybrid, (unsigned long long)rr);
}
END_TEST

START_TEST(fcache_bad_geometry)
{
	struct loco_fcache c;
	ck_assert_int_eq(loco_fcache_init(&c, 63, 4, 1, 0), -EINVAL);
	ck_assert_int_eq(loco_fcache_init(&c, 64, 0, 1, 0), -EINVAL);
	ck_assert_int_eq(loco_fcache_init(&c, 64, 4, 0, 0), -EINVAL);
}
END_TEST

/* ---- oplog ---------------------------------------------------------------- */

#define SLOTS 64          /* counters: 8 bytes each, in the data area */
#define OP_ADD 1

static const char *const power_cut[] = { "LOCO_POWER_CUT=1", NULL };

static struct mcluster mc;
static struct loco_thread *thr;
static struct loco_oplog lg;
static uint64_t want[SLOTS];   /* the counters committed operations make */

static struct loco_oplog_cfg cfg_default(void)
{
	return (struct loco_oplog_cfg){
		.data_len = 4096, .rec_size = 48, .nrec = 64, .mlog_len = 4096,
		.page = 128, .cache_pages = 64, .sample = 4,
	};
}

static void setup(void)
{
	mc_init(&mc);
	memset(want, 0, sizeof(want));
	memset(&lg, 0, sizeof(lg));
}

static void teardown(void)
{
	/* The thread first: it waits out the WRITEs it posted from the
	 * log's buffers, which the fini frees. */
	if (thr)
		loco_thread_destroy(thr);
	if (lg.base.mgr)
		loco_oplog_fini(&lg, NULL);
	thr = NULL;
	mc_fini(&mc);
}

struct add {
	uint32_t slot, zero;
	uint64_t x;
};

/* Counter SLOT sits at SLOT * 56 (spread over the pages). */
static uint64_t slot_off(uint32_t slot)
{
	return (uint64_t)slot * 56 % 4096 / 8 * 8;
}

/* Execute add (SLOT, X): read the counter, write it back plus X. */
static int exec_add(struct loco_oplog *l, struct loco_thread *t,
		    uint32_t slot, uint64_t x)
{
	uint64_t v;
	int rc = loco_oplog_read(l, t, slot_off(slot), &v, 8);
	v += x;
	return rc ? rc : loco_oplog_write(l, t, slot_off(slot), &v, 8);
}

static int replay(void *arg, struct loco_oplog *l, struct loco_thread *t,
		  uint64_t seq, uint16_t type, const void *params, uint16_t len)
{
	struct add a;
	(void)seq;
	unsigned *n = arg;
	ck_assert_uint_eq(type, OP_ADD);
	ck_assert_uint_eq(len, sizeof(a));
	memcpy(&a, params, sizeof(a));
	if (n)
		(*n)++;
	return exec_add(l, t, a.slot, a.x);
}

/* Append and execute add number I (slot and amount follow from I). */
static void add(uint64_t i, bool count)
{
	struct add a = { .slot = (uint32_t)(i * 7 % SLOTS), .x = i + 1 };
	ck_assert_int_eq(loco_oplog_append(&lg, thr, OP_ADD, &a, sizeof(a), NULL), 0);
	ck_assert_int_eq(exec_add(&lg, thr, a.slot, a.x), 0);
	if (count)
		want[a.slot] += a.x;
}

/* Adds [FROM, TO), committed every EVERY (0: not committed, not
 * expected to survive). */
static void adds(uint64_t from, uint64_t to, unsigned every)
{
	for (uint64_t i = from; i < to; i++) {
		add(i, every > 0);
		if (every && (i + 1 - from) % every == 0)
			ck_assert_int_eq(loco_oplog_commit(&lg, thr), 0);
	}
	if (every)
		ck_assert_int_eq(loco_oplog_commit(&lg, thr), 0);
}

/* This node (again) and the log, recovered; *REPLAYED the count. */
static void open_log(const struct loco_oplog_cfg *cfg, uint64_t *replayed)
{
	unsigned calls = 0;
	uint64_t n = 0;
	if (!mc.mgr) {
		mc_start_self(&mc, 5000);
		ck_assert_int_eq(loco_thread_create(mc.mgr, &thr), 0);
	}
	ck_assert_int_eq(loco_oplog_init(&lg, mc.mgr, NULL, "ol", 0, cfg), 0);
	ck_assert_int_eq(loco_oplog_recover(&lg, thr, replay, &calls, &n), 0);
	ck_assert_uint_eq(n, calls);
	if (replayed)
		*replayed = n;
}

/* The front end crashes: the log is abandoned (nothing applied or
 * synced), the manager goes. */
static void front_crash(void)
{
	loco_thread_destroy(thr);
	thr = NULL;
	loco_oplog_fini(&lg, NULL);
	mc_stop_self(&mc);
}

/* The back end is killed (a power cut with ENV) and started again. */
static void back_crash(const char *const *env)
{
	mc_stop_mem(&mc, SIGKILL);
	mc_start_mem(&mc, true, env);
}

/* Every counter as the log shows it equals WANT. */
static void check_counters(void)
{
	for (uint32_t s = 0; s < SLOTS; s++) {
		uint64_t v;
		ck_assert_int_eq(loco_oplog_read(&lg, thr, slot_off(s), &v, 8), 0);
		ck_assert_msg(v == want[s], "slot %u: %llu, want %llu", s,
			      (unsigned long long)v, (unsigned long long)want[s]);
	}
}

/* Committed adds survive a power cut of the back end and a restart of
 * the front end, replayed once each; the staged ones are gone. One
 * persist per commit. */
START_TEST(commit_survives_power_cut)
{
	struct loco_oplog_cfg cfg = cfg_default();
	uint64_t n;
	mc_start_mem(&mc, true, power_cut);
	open_log(&cfg, &n);
	ck_assert_uint_eq(n, 0);
	uint64_t p0 = lg.stats.persists;
	adds(0, 50, 5);
	ck_assert_uint_eq(lg.stats.commits, 10);
	ck_assert_uint_eq(lg.stats.committed, 50);
	ck_assert_uint_eq(lg.stats.persists - p0, 10);
	adds(50, 53, 0);
	front_crash();
	back_crash(power_cut);
	open_log(&cfg, &n);
	ck_assert_uint_eq(n, 50);
	check_counters();
}
END_TEST

/* An applied batch whose in-place writes were not persisted yet is redone
 * after a power cut: nothing is replayed, the data area is whole. */
START_TEST(apply_redone_after_power_cut)
{
	struct loco_oplog_cfg cfg = cfg_default();
	uint64_t n, v;
	mc_start_mem(&mc, true, power_cut);
	open_log(&cfg, NULL);
	adds(0, 20, 20);
	ck_assert_int_eq(loco_oplog_apply(&lg, thr), 0);
	ck_assert_uint_eq(lg.stats.applies, 1);
	const struct loco_rregion data = *loco_oplog_data(&lg);
	front_crash();
	back_crash(power_cut);
	mc_start_self(&mc, 5000);
	ck_assert_int_eq(loco_thread_create(mc.mgr, &thr), 0);
	ck_assert_int_eq(loco_peer_wait(mc.mgr, 0, 5000), 0);
	ck_assert_int_eq(loco_read(thr, &data, slot_off(7), &v, 8), 0);
	ck_assert_uint_eq(v, 0);   /* the in-place write was lost... */
	open_log(&cfg, &n);
	ck_assert_uint_eq(n, 0);
	ck_assert_uint_ge(lg.stats.redone, 1);
	ck_assert_int_eq(loco_read(thr, &data, slot_off(7), &v, 8), 0);
	ck_assert_uint_eq(v, want[7]);   /* ...and redone */
	check_counters();
}
END_TEST

/* Front-end crashes with the back end up: applied adds stay applied,
 * committed ones are replayed once, again after a second crash right
 * after the recovery (the replayed writes were only staged). */
START_TEST(front_crash_replays_once)
{
	struct loco_oplog_cfg cfg = cfg_default();
	uint64_t n;
	mc_start_mem(&mc, true, NULL);
	open_log(&cfg, NULL);
	adds(0, 30, 4);
	ck_assert_int_eq(loco_oplog_apply(&lg, thr), 0);
	adds(30, 50, 6);
	adds(50, 55, 0);
	front_crash();
	open_log(&cfg, &n);
	ck_assert_uint_eq(n, 20);
	check_counters();
	front_crash();
	open_log(&cfg, &n);
	ck_assert_uint_eq(n, 20);
	check_counters();
	adds(55, 60, 1);
	ck_assert_int_eq(loco_oplog_sync(&lg, thr), 0);
	front_crash();
	open_log(&cfg, &n);
	ck_assert_uint_eq(n, 0);
	check_counters();
}
END_TEST

/* A torn commit (its first record damaged) is cut at the damage; the
 * records after it are not replayed then, nor after the next operations
 * overwrote part of them (the generation keeps them out). */
START_TEST(torn_commit_never_returns)
{
	struct loco_oplog_cfg cfg = cfg_default();
	uint64_t n, junk = 0xdeadbeef;
	mc_start_mem(&mc, true, NULL);
	open_log(&cfg, NULL);
	adds(0, 5, 5);
	uint64_t keep[SLOTS];
	memcpy(keep, want, sizeof(keep));
	adds(5, 10, 5);
	/* Record 5's sum (ring at 128 + 2 * mlog_len) damaged. */
	uint64_t rec5 = 128 + 2 * (uint64_t)cfg.mlog_len + 5 * cfg.rec_size;
	ck_assert_int_eq(loco_write(thr, &lg.log, rec5 + 16, &junk, 8), 0);
	memcpy(want, keep, sizeof(keep));
	front_crash();
	open_log(&cfg, &n);
	ck_assert_uint_eq(n, 5);
	check_counters();
	adds(100, 102, 2);   /* seqs 5 and 6 again; 7..9 stay in the ring */
	front_crash();
	open_log(&cfg, &n);
	ck_assert_uint_eq(n, 7);
	check_counters();
}
END_TEST

/* A small ring, batch and cache: appends apply by themselves (the ring
 * wraps many times) and every committed add survives both crashes. */
START_TEST(small_log_wraps)
{
	struct loco_oplog_cfg cfg = cfg_default();
	cfg.nrec = 8;
	cfg.mlog_len = 256;
	cfg.cache_pages = 4;
	uint64_t n;
	mc_start_mem(&mc, true, power_cut);
	open_log(&cfg, NULL);
	adds(0, 300, 3);
	ck_assert_uint_ge(lg.stats.applies, 300 / 8);
	ck_assert_uint_gt(lg.cache.stats.evictions, 0);
	front_crash();
	back_crash(power_cut);
	open_log(&cfg, &n);
	ck_assert_uint_lt(n, 8);
	check_counters();
}
END_TEST

/* The back end dies under a running writer: its next operation fails
 * with -LOCO_EDOWN (no hang), the log answers -ENOTCONN until it is
 * recovered in place, which keeps every committed add. */
START_TEST(back_end_dies_writer_recovers)
{
	struct loco_oplog_cfg cfg = cfg_default();
	uint64_t n = 0, v;
	int rc = 0;
	mc_start_mem(&mc, true, power_cut);
	open_log(&cfg, NULL);
	adds(0, 40, 4);
	ck_assert_int_eq(loco_oplog_apply(&lg, thr), 0);
	adds(40, 50, 5);
	mc_stop_mem(&mc, SIGKILL);
	uint64_t t0 = loco_now_ns();
	for (uint64_t i = 50; !rc && loco_now_ns() - t0 < 2000000000ull; i++) {
		struct add a = { .slot = 1, .x = 1 };
		rc = loco_oplog_append(&lg, thr, OP_ADD, &a, sizeof(a), NULL);
		if (!rc)
			rc = loco_oplog_read(&lg, thr, slot_off(i % SLOTS), &v, 8);
		if (!rc)
			rc = loco_oplog_commit(&lg, thr);
	}
	ck_assert_int_eq(rc, -LOCO_EDOWN);
	ck_assert_int_eq(loco_oplog_commit(&lg, thr), -ENOTCONN);
	mc_start_mem(&mc, true, power_cut);
	ck_assert_int_eq(loco_peer_wait(mc.mgr, 0, 10000), 0);
	unsigned calls = 0;
	ck_assert_int_eq(loco_oplog_recover(&lg, thr, replay, &calls, &n), 0);
	ck_assert_uint_eq(n, 10);
	check_counters();
	adds(60, 70, 2);
	check_counters();
}
END_TEST

/* The deliberate bug: a log without its persist points acknowledges
 * commits that a power cut then loses. */
START_TEST(no_persist_loses_acknowledged)
{
	struct loco_oplog_cfg cfg = cfg_default();
	cfg.no_persist = true;
	uint64_t n;
	mc_start_mem(&mc, true, power_cut);
	open_log(&cfg, NULL);
	adds(0, 20, 2);
	ck_assert_uint_eq(lg.stats.persists, 0);
	front_crash();
	back_crash(power_cut);
	open_log(&cfg, &n);
	ck_assert_uint_lt(n, 20);
	uint64_t v;
	ck_assert_int_eq(loco_oplog_read(&lg, thr, slot_off(7), &v, 8), 0);
	ck_assert_uint_ne(v, want[7]);
}
END_TEST

/* Staged writes: the writer reads them at once, the data area shows them
 * after the apply placed them. */
START_TEST(read_your_writes)
{
	struct loco_oplog_cfg cfg = cfg_default();
	uint64_t v = 0;
	mc_start_mem(&mc, true, NULL);
	open_log(&cfg, NULL);
	add(3, true);
	ck_assert_int_eq(loco_oplog_read(&lg, thr, slot_off(21), &v, 8), 0);
	ck_assert_uint_eq(v, 4);
	ck_assert_int_eq(loco_read(thr, &lg.data, slot_off(21), &v, 8), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(loco_oplog_sync(&lg, thr), 0);
	ck_assert_int_eq(loco_read(thr, &lg.data, slot_off(21), &v, 8), 0);
	ck_assert_uint_eq(v, 4);
}
END_TEST

/* Bad geometry, too long parameters, use before recovery, a log opened
 * with another geometry of the same size, a write over the batch. */
START_TEST(errors)
{
	struct loco_oplog_cfg cfg = cfg_default(), bad = cfg;
	uint8_t big[4096] = { 0 };
	mc_start_mem(&mc, true, NULL);
	mc_start_self(&mc, 5000);
	ck_assert_int_eq(loco_thread_create(mc.mgr, &thr), 0);
	bad.page = 100;
	ck_assert_int_eq(loco_oplog_init(&lg, mc.mgr, NULL, "ol", 0, &bad), -EINVAL);
	ck_assert_int_eq(loco_oplog_init(&lg, mc.mgr, NULL, "ol", 0, &cfg), 0);
	ck_assert_int_eq(loco_oplog_append(&lg, thr, 1, big, 25, NULL), -EINVAL);
	ck_assert_int_eq(loco_oplog_append(&lg, thr, 1, big, 24, NULL), -ENOTCONN);
	ck_assert_int_eq(loco_oplog_recover(&lg, thr, NULL, NULL, NULL), 0);
	ck_assert_int_eq(loco_oplog_append(&lg, thr, 1, big, 24, NULL), 0);
	ck_assert_int_eq(loco_oplog_write(&lg, thr, 0, big, 4096 - 40), -ENOSPC);
	ck_assert_int_eq(loco_oplog_write(&lg, thr, 4090, big, 8), -EINVAL);
	ck_assert_int_eq(loco_oplog_commit(&lg, thr), 0);
	loco_oplog_fini(&lg, thr);
	/* Nothing to replay it with. */
	ck_assert_int_eq(loco_oplog_init(&lg, mc.mgr, NULL, "ol", 0, &cfg), 0);
	ck_assert_int_eq(loco_oplog_recover(&lg, thr, NULL, NULL, NULL), -EINVAL);
	loco_oplog_fini(&lg, thr);
	bad = cfg;
	bad.rec_size = 96;
	bad.nrec = 32;
	ck_assert_int_eq(loco_oplog_init(&lg, mc.mgr, NULL, "ol", 0, &bad), 0);
	ck_assert_int_eq(loco_oplog_recover(&lg, thr, NULL, NULL, NULL),
			 -LOCO_EMISMATCH);
	loco_oplog_fini(&lg, thr);
	bad.nrec = 64;
	ck_assert_int_eq(loco_oplog_init(&lg, mc.mgr, NULL, "ol", 0, &bad),
			 -LOCO_EMISMATCH);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("oplog");
	TCase *c = tcase_create("fcache");
	tcase_add_test(c, fcache_lru);
	tcase_add_test(c, fcache_pins);
	tcase_add_test(c, fcache_hybrid_beats_random);
	tcase_add_test(c, fcache_bad_geometry);
	suite_add_tcase(s, c);
	TCase *t = tcase_create("oplog");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, commit_survives_power_cut);
	tcase_add_test(t, apply_redone_after_power_cut);
	tcase_add_test(t, front_crash_replays_once);
	tcase_add_test(t, torn_commit_never_returns);
	tcase_add_test(t, small_log_wraps);
	tcase_add_test(t, back_end_dies_writer_recovers);
	tcase_add_test(t, no_persist_loses_acknowledged);
	tcase_add_test(t, read_your_writes);
	tcase_add_test(t, errors);
	suite_add_tcase(s, t);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? 1 : 0;
}
