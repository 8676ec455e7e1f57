/* SPDX-License-Identifier: MIT */
/* Pure parts of rtx: LLLock word and data pointer encoding, log checksum,
 * repair decisions, crash point table. */
#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <loco/rtx/crash.h>
#include <loco/rtx/lllock.h>
#include <loco/rtx/log.h>

START_TEST(lllock_roundtrip)
{
	uint64_t tag = loco_lllock_tag_of(123456789, 77);
	uint64_t w = loco_lllock_make(tag, 4095, false);
	ck_assert(loco_lllock_is_locked(w));
	ck_assert(!loco_lllock_nolog(w));
	ck_assert_uint_eq(loco_lllock_owner(w), 4095);
	ck_assert_uint_eq(loco_lllock_tag(w), tag);
	ck_assert_uint_eq(loco_lllock_lease(w), 123456789);
	uint64_t n = loco_lllock_make(tag, 3, true);
	ck_assert(loco_lllock_nolog(n) && loco_lllock_is_locked(n));
	ck_assert_uint_eq(loco_lllock_owner(n), 3);
	ck_assert_uint_eq(loco_lllock_lease(n), 123456789);
	ck_assert_uint_ne(n, loco_lllock_make(tag + 1, 3, true));
}
END_TEST

START_TEST(lllock_fields_do_not_overlap)
{
	uint64_t maxtag = LOCO_LLLOCK_TAG_MASK;
	uint64_t w = loco_lllock_make(maxtag, 0, false);
	ck_assert_uint_eq(loco_lllock_owner(w), 0);
	ck_assert(!loco_lllock_nolog(w));
	ck_assert_uint_eq(loco_lllock_tag(w), maxtag);
	w = loco_lllock_make(0, LOCO_LLLOCK_MAX_OWNERS - 1, true);
	ck_assert_uint_eq(loco_lllock_tag(w), 0);
	ck_assert_uint_eq(loco_lllock_lease(w), 0);
	/* Owner ids wider than 12 bits do not leak into the tag. */
	ck_assert_uint_eq(loco_lllock_tag(loco_lllock_make(5, 0xffff, false)), 5);
}
END_TEST

START_TEST(lllock_versions_and_expiry)
{
	ck_assert(!loco_lllock_is_locked(0));
	ck_assert(!loco_lllock_is_locked(12345));
	ck_assert_uint_eq(loco_lllock_version(12345), 12345);
	uint64_t w = loco_lllock_make(loco_lllock_tag_of(1000, 0), 1, false);
	ck_assert(!loco_lllock_expired(w, 998));
	ck_assert(!loco_lllock_expired(w, 999));
	ck_assert(loco_lllock_expired(w, 1000));   /* the lease's own ms */
	ck_assert(loco_lllock_expired(w, 1001));
	ck_assert(!loco_lllock_expired(77, 1u << 30));   /* unlocked */
	uint64_t f = loco_lllock_fresh(5000, 9, 3);
	ck_assert(!loco_lllock_is_locked(f));
	ck_assert(f & LOCO_LLLOCK_FRESH);
	ck_assert_uint_ne(f, loco_lllock_fresh(5000, 9, 4));
	ck_assert_uint_ne(f, loco_lllock_fresh(5000, 10, 3));
	ck_assert_uint_gt(loco_lllock_fresh(5001, 0, 0), f + 1000);
	/* Counting up from a fresh version stays unlocked. */
	ck_assert(!loco_lllock_is_locked(loco_lllock_fresh(UINT64_C(1) << 39,
							  4095, 1023) + 1000000));
}
END_TEST

START_TEST(dptr_encoding)
{
	uint64_t d = loco_rtx_dptr(7, 123);
	ck_assert_uint_eq(loco_rtx_dptr_ver(d), 7);
	ck_assert_uint_eq(loco_rtx_dptr_block(d), 123);
	uint64_t n = loco_rtx_dptr_next(d, 55);
	ck_assert_uint_eq(loco_rtx_dptr_ver(n), 8);
	ck_assert_uint_eq(loco_rtx_dptr_block(n), 55);
	uint64_t wrap = loco_rtx_dptr_next(loco_rtx_dptr(0xffff, 1), 0);
	ck_assert_uint_eq(loco_rtx_dptr_ver(wrap), 0);
	ck_assert_uint_eq(loco_rtx_dptr_block(wrap), 0);
	ck_assert_uint_eq(loco_rtx_dptr(0, 0), 0);   /* null, version 0 */
}
END_TEST

/* ---- log ------------------------------------------------------------------ */

struct test_log {
	struct loco_rtx_log_hdr h;
	struct loco_rtx_log_ent e[4];
};

static void make_log(struct test_log *l, uint64_t lockv, uint32_t seq,
		     unsigned n, uint64_t salt)
{
	memset(l, 0, sizeof(*l));
	for (unsigned i = 0; i < n; i++)
		l->e[i] = (struct loco_rtx_log_ent){ .mptr = 0x100 + i * 16,
			.old_dptr = salt + i, .new_dptr = salt + 100 + i };
	loco_rtx_log_seal(&l->h, l->e, n, lockv, seq, 4242);
}

START_TEST(log_seal_and_match)
{
	struct test_log l;
	uint64_t lockv = loco_lllock_make(loco_lllock_tag_of(4242, 1), 7, false);
	make_log(&l, lockv, 9, 3, 1000);
	ck_assert(loco_rtx_log_matches(&l, lockv, 16));
	ck_assert_int_eq(loco_rtx_state_of(l.h.state), LOCO_RTX_LOG_INIT);
	ck_assert_uint_eq(loco_rtx_state_seq(l.h.state), 9);
	ck_assert_uint_eq(loco_rtx_state_ms(l.h.state), 4242);
	ck_assert_uint_eq(loco_rtx_log_nent(&l.h), 3);
	ck_assert_uint_eq(loco_rtx_log_seq(&l.h), 9);
	/* The state word is not covered: it changes by CAS. */
	l.h.state = loco_rtx_state_word(LOCO_RTX_LOG_DOING, 9, 99999);
	ck_assert(loco_rtx_log_matches(&l, lockv, 16));
	/* Another lock word: a reused log. */
	ck_assert(!loco_rtx_log_matches(&l, lockv + 1, 16));
	/* Too many entries for this rtx. */
	ck_assert(!loco_rtx_log_matches(&l, lockv, 2));
}
END_TEST

START_TEST(log_detects_corruption)
{
	struct test_log l;
	uint64_t lockv = loco_lllock_make(loco_lllock_tag_of(4242, 1), 7, false);
	make_log(&l, lockv, 9, 3, 1000);
	l.e[2].new_dptr ^= 1;
	ck_assert(!loco_rtx_log_matches(&l, lockv, 16));
	make_log(&l, lockv, 9, 3, 1000);
	l.h.meta = loco_rtx_log_meta(9, 2);  /* truncated */
	ck_assert(!loco_rtx_log_matches(&l, lockv, 16));
	/* An unlocked word never matches (a zeroed log included). */
	memset(&l, 0, sizeof(l));
	ck_assert(!loco_rtx_log_matches(&l, 0, 16));
}
END_TEST

/* A log being rewritten by the slot's next transaction, read torn at
 * 8-byte granularity: any mix of the two fails the check (but the one
 * that differs from a only in the state word, which the seal does not
 * cover: log_open_needs_own_state). */
START_TEST(log_torn_mix_rejected)
{
	struct test_log a, b, mix;
	uint64_t la = loco_lllock_make(loco_lllock_tag_of(4242, 1), 7, false);
	uint64_t lb = loco_lllock_make(loco_lllock_tag_of(4243, 0), 7, false);
	make_log(&a, la, 9, 3, 1000);
	make_log(&b, lb, 10, 3, 5000);
	const uint64_t *wa = (const uint64_t *)&a, *wb = (const uint64_t *)&b;
	uint64_t *wm = (uint64_t *)&mix;
	size_t words = sizeof(mix) / 8;
	srand(7);
	for (unsigned trial = 0; trial < 2000; trial++) {
		for (size_t i = 0; i < words; i++)
			wm[i] = rand() & 1 ? wa[i] : wb[i];
		bool pure_a = !memcmp(&mix.h.lockv, &a.h.lockv,
				      sizeof(mix) - 8);
		bool pure_b = !memcmp(&mix.h.lockv, &b.h.lockv,
				      sizeof(mix) - 8);
		if (!pure_a)
			ck_assert(!loco_rtx_log_matches(&mix, la, 16));
		if (!pure_b)
			ck_assert(!loco_rtx_log_matches(&mix, lb, 16));
	}
}
END_TEST

/* Open: whole, the state word its own, not DONE. The slot's next log
 * WRITE placed up to its first word (the state: INIT of sequence 10)
 * over a DONE log of sequence 9: the old log still matches, but it is
 * not open (the scans keep nothing for it, no repair settles it). */
START_TEST(log_open_needs_own_state)
{
	struct test_log a, b;
	uint64_t la = loco_lllock_make(loco_lllock_tag_of(4242, 1), 7, false);
	uint64_t lb = loco_lllock_make(loco_lllock_tag_of(4243, 0), 7, false);
	make_log(&a, la, 9, 3, 1000);
	make_log(&b, lb, 10, 3, 5000);
	ck_assert(loco_rtx_log_open(&a, 16));
	ck_assert(!loco_rtx_log_open(&a, 2));
	a.h.state = loco_rtx_state_word(LOCO_RTX_LOG_DOING, 9, 99999);
	ck_assert(loco_rtx_log_open(&a, 16));
	a.h.state = loco_rtx_state_word(LOCO_RTX_LOG_DONE, 9, 4242);
	ck_assert(!loco_rtx_log_open(&a, 16));
	a.h.state = b.h.state;   /* the torn WRITE's first word */
	ck_assert(loco_rtx_log_matches(&a, la, 16));
	ck_assert(!loco_rtx_log_open(&a, 16));
	memset(&a, 0, sizeof(a));   /* never used */
	ck_assert(!loco_rtx_log_open(&a, 16));
}
END_TEST

/* ---- repair decisions -------------------------------------------------------- */

#define NOW 10000u

static uint64_t lockv_at(uint64_t lease, bool nolog)
{
	return loco_lllock_make(loco_lllock_tag_of(lease, 0), 5, nolog);
}

START_TEST(decide_table)
{
	uint64_t live = lockv_at(NOW + 5, false), dead = lockv_at(NOW - 1, false);
	uint64_t st_init = loco_rtx_state_word(LOCO_RTX_LOG_INIT, 3, NOW - 1);
	uint64_t st_abort = loco_rtx_state_word(LOCO_RTX_LOG_ABORT, 3, NOW - 1);
	uint64_t st_done = loco_rtx_state_word(LOCO_RTX_LOG_DONE, 3, NOW - 1);
	uint64_t st_doing_old = loco_rtx_state_word(LOCO_RTX_LOG_DOING, 3, NOW - 1);
	uint64_t st_doing_live = loco_rtx_state_word(LOCO_RTX_LOG_DOING, 3, NOW + 3);
	struct { uint64_t lockv; bool match; uint64_t st; int want; } c[] = {
		{ 42, true, st_init, LOCO_RTX_REPAIR_NONE },     /* unlocked */
		{ live, true, st_init, LOCO_RTX_REPAIR_WAIT },   /* lease runs */
		{ lockv_at(NOW + 1, false), true, st_init, LOCO_RTX_REPAIR_WAIT },
		{ lockv_at(NOW, false), true, st_init, LOCO_RTX_REPAIR_ABORT },
		{ dead, true, loco_rtx_state_word(LOCO_RTX_LOG_DOING, 3, NOW + 1),
		  LOCO_RTX_REPAIR_WAIT },                        /* repair lease runs */
		{ dead, true, loco_rtx_state_word(LOCO_RTX_LOG_DOING, 3, NOW),
		  LOCO_RTX_REPAIR_RECOMMIT },                    /* ends at NOW */
		{ dead, true, st_init, LOCO_RTX_REPAIR_ABORT },
		{ dead, true, st_abort, LOCO_RTX_REPAIR_RELEASE },
		{ dead, true, st_doing_old, LOCO_RTX_REPAIR_RECOMMIT },
		{ dead, true, st_doing_live, LOCO_RTX_REPAIR_WAIT },
		{ dead, true, st_done, LOCO_RTX_REPAIR_LATE_LOCK },
		{ dead, false, st_init, LOCO_RTX_REPAIR_STEAL },  /* reused log */
		{ dead, false, st_doing_old, LOCO_RTX_REPAIR_STEAL },
		{ lockv_at(NOW - 1, true), true, st_init, LOCO_RTX_REPAIR_STEAL },
		{ lockv_at(NOW + 1, true), false, 0, LOCO_RTX_REPAIR_WAIT },
	};
	for (unsigned i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		int got = loco_rtx_repair_decide(c[i].lockv, c[i].match,
						 c[i].st, NOW);
		ck_assert_msg(got == c[i].want, "case %u: %s, want %s", i,
			      loco_rtx_repair_name(got),
			      loco_rtx_repair_name(c[i].want));
	}
}
END_TEST

START_TEST(crash_points_listed)
{
	unsigned n = 0;
	for (; loco_crash_points[n]; n++)
		ck_assert(!strncmp(loco_crash_points[n], "rtx.", 4));
	ck_assert_uint_ge(n, 10);
	ck_assert(!loco_crash_armed("rtx.after_log"));  /* env unset */
	loco_crash_point("rtx.after_log");              /* and survives */
}
END_TEST

/* Runs in Check's forked child: the spec is read at the first call. */
START_TEST(crash_spec_entries)
{
	setenv("LOCO_NODE_ID", "3", 1);
	setenv("LOCO_CRASH_NODES", "1", 1);
	setenv("LOCO_CRASH_AT", "rtx.after_doing@2:2000,rtx.repair_after_take@4+3,"
	       "rtx.bogus@3,rtx.mid_abort,rtx.before_done@3:2", 1);
	ck_assert(!loco_crash_armed("rtx.after_doing"));     /* node 2 only */
	ck_assert(loco_crash_armed("rtx.repair_after_take")); /* 4+3 */
	ck_assert(!loco_crash_armed("rtx.mid_abort"));       /* LOCO_CRASH_NODES */
	ck_assert(loco_crash_armed("rtx.before_done"));
	ck_assert(!loco_crash_armed("rtx.after_log"));
	loco_crash_point("rtx.before_done");                 /* 1 of 2: lives */
}
END_TEST

/* A layer above rtx registers its own points; LOCO_CRASH_AT arms them
 * like rtx's, and an unregistered name stays unknown. */
static const char *const test_points[] = { "test.one", "test.two", NULL };

/* LOCO_CRASH_SIGNAL=STOP: the armed point stops the process (SIGSTOP,
 * nothing after the point runs) and SIGCONT resumes it right there. */
START_TEST(crash_signal_stop)
{
	int fd[2];
	ck_assert_int_eq(pipe(fd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		setenv("LOCO_CRASH_AT", "rtx.after_lock", 1);
		setenv("LOCO_CRASH_SIGNAL", "STOP", 1);
		unsetenv("LOCO_CRASH_NODES");
		loco_crash_point("rtx.after_lock");
		_exit(write(fd[1], "r", 1) == 1 ? 0 : 1);
	}
	close(fd[1]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
	ck_assert(WIFSTOPPED(st));
	ck_assert_int_eq(WSTOPSIG(st), SIGSTOP);
	struct pollfd p = { .fd = fd[0], .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, 100), 0);   /* stopped: nothing after */
	ck_assert_int_eq(kill(pid, SIGCONT), 0);
	char c = 0;
	ck_assert_int_eq(read(fd[0], &c, 1), 1);
	ck_assert_int_eq(c, 'r');
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(fd[0]);
}
END_TEST

/* A point hit by another thread than the main one stops that thread at
 * the point too: it runs nothing after it until SIGCONT (a transaction
 * stopped at rtx.after_lock still holds its locks). A SIGSTOP sent to
 * the process would wake the (blocked) main thread to start the stop and
 * let the caller run on meanwhile. */
#define AFTER_STEPS 100000

static void *stop_in_thread(void *arg)
{
	_Atomic long *after = arg;
	loco_crash_point("rtx.after_lock");
	for (long i = 0; i < AFTER_STEPS; i++)
		/* Relaxed: a count the parent reads once the child stopped. */
		atomic_fetch_add_explicit(after, 1, memory_order_relaxed);
	return NULL;
}

START_TEST(crash_signal_stop_thread)
{
	_Atomic long *after = mmap(NULL, sizeof(*after), PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ck_assert(after != MAP_FAILED);
	atomic_init(after, 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		pthread_t t;
		setenv("LOCO_CRASH_AT", "rtx.after_lock", 1);
		setenv("LOCO_CRASH_SIGNAL", "STOP", 1);
		unsetenv("LOCO_CRASH_NODES");
		if (pthread_create(&t, NULL, stop_in_thread, after))
			_exit(2);
		_exit(pthread_join(t, NULL) ? 1 : 0);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
	ck_assert(WIFSTOPPED(st));
	/* Relaxed: the child is stopped; waitpid ordered its stores. */
	long ran = atomic_load_explicit(after, memory_order_relaxed);
	ck_assert_int_eq(ran, 0);
	ck_assert_int_eq(kill(pid, SIGCONT), 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ran = atomic_load_explicit(after, memory_order_relaxed);
	ck_assert_int_eq(ran, AFTER_STEPS);
	munmap((void *)after, sizeof(*after));
}
END_TEST

START_TEST(crash_register_table)
{
	setenv("LOCO_CRASH_AT", "test.one:3,test.three,rtx.after_lock@5", 1);
	setenv("LOCO_NODE_ID", "5", 1);
	ck_assert_int_eq(loco_crash_register(test_points), 0);
	ck_assert_int_eq(loco_crash_register(test_points), 0);  /* again: no-op */
	ck_assert(loco_crash_armed("test.one"));
	ck_assert(!loco_crash_armed("test.two"));
	ck_assert(!loco_crash_armed("test.three"));          /* not registered */
	ck_assert(loco_crash_armed("rtx.after_lock"));
	loco_crash_point("test.one");                         /* 1 of 3: lives */
	loco_crash_point("test.one");                         /* 2 of 3 */
}
END_TEST

/* The Nth hit of a point kills the process with SIGKILL, not before. */
START_TEST(crash_kills_on_nth_hit)
{
	int fds[2];
	ck_assert_int_eq(pipe(fds), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		setenv("LOCO_CRASH_AT", "rtx.mid_install:3", 1);
		for (int i = 0; i < 5; i++) {
			loco_crash_point("rtx.mid_install");
			loco_crash_point("rtx.before_done");
			if (write(fds[1], "x", 1) != 1)
				_exit(3);
		}
		_exit(0);
	}
	close(fds[1]);
	int status = 0, n = 0;
	char b;
	while (read(fds[0], &b, 1) == 1)
		n++;
	close(fds[0]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	ck_assert_int_eq(n, 2);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("rtx-unit");
	TCase *t = tcase_create("lllock");
	tcase_add_test(t, lllock_roundtrip);
	tcase_add_test(t, lllock_fields_do_not_overlap);
	tcase_add_test(t, lllock_versions_and_expiry);
	tcase_add_test(t, dptr_encoding);
	suite_add_tcase(s, t);
	t = tcase_create("log");
	tcase_add_test(t, log_seal_and_match);
	tcase_add_test(t, log_detects_corruption);
	tcase_add_test(t, log_torn_mix_rejected);
	tcase_add_test(t, log_open_needs_own_state);
	suite_add_tcase(s, t);
	t = tcase_create("repair");
	tcase_add_test(t, decide_table);
	tcase_add_test(t, crash_points_listed);
	tcase_add_test(t, crash_spec_entries);
	tcase_add_test(t, crash_kills_on_nth_hit);
	tcase_add_test(t, crash_register_table);
	tcase_add_test(t, crash_signal_stop);
	tcase_add_test(t, crash_signal_stop_thread);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
