/* SPDX-License-Identifier: MIT */
/* History recorder: event lines, ids, times, growth across chunks, and a
 * valid file after SIGKILL. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

#include <loco/history.h>
#include "test/common/cluster1.h"

static struct cluster1 cl;
static char dir[64];
static char file[128];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/loco-hist-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(file, sizeof(file), "%s/node0.jsonl", dir);
	ck_assert_int_eq(cluster1_start(&cl, "", 2000), 0);
}

static void teardown(void)
{
	if (cl.mgr)
		cluster1_stop(&cl);
	unlink(file);
	rmdir(dir);
}

/* Count lines containing NEEDLE; check every non-blank line is an
 * object and the "t" values of event lines never go down. */
static long count(const char *needle, long *blank)
{
	FILE *f = fopen(file, "r");
	char line[2048];
	long n = 0;
	unsigned long long last = 0;
	*blank = 0;
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f)) {
		if (line[0] == '\n') {
			(*blank)++;
			continue;
		}
		unsigned long long t;
		ck_assert_int_eq(sscanf(line, "{\"t\":%llu,", &t), 1);
		ck_assert_uint_ge(t, last);
		last = t;
		if (strstr(line, needle))
			n++;
	}
	fclose(f);
	return n;
}

START_TEST(events_and_chunks)
{
	struct loco_thread *thr;
	long blank;
	ck_assert(!loco_history_enabled(cl.mgr));
	ck_assert_int_eq(loco_history_open(cl.mgr, dir), 0);
	ck_assert_int_eq(loco_history_open(cl.mgr, dir), -EBUSY);
	ck_assert(loco_history_enabled(cl.mgr));
	ck_assert_int_eq(loco_thread_create(cl.mgr, &thr), 0);
	for (uint64_t i = 1; i <= 20000; i++) {
		uint64_t id = loco_hist_inv_u64(thr, "faa", 7, "[1]");
		ck_assert_uint_eq(id, i);
		char res[32];
		snprintf(res, sizeof(res), "[%llu]", (unsigned long long)(i - 1));
		loco_hist_ret(thr, id, res);
	}
	uint64_t id = loco_hist_inv(thr, "get", "\"k\"", NULL);
	loco_hist_info(thr, id);
	loco_thread_destroy(thr);
	ck_assert_int_eq(count("\"ev\":\"inv\"", &blank), 20001);
	ck_assert_int_eq(count("\"ev\":\"ret\"", &blank), 20000);
	ck_assert_int_eq(count("\"ev\":\"info\"", &blank), 1);
	ck_assert_int_eq(count("\"key\":\"k\",\"args\":[]", &blank), 1);
	ck_assert_int_eq(count("\"id\":20000,\"res\":[19999]", &blank), 1);
	ck_assert_int_gt(blank, 0);  /* newline padding of the last chunk */
}
END_TEST

START_TEST(survives_sigkill)
{
	pid_t pid = fork();
	if (pid == 0) {
		struct loco_thread *thr;
		if (loco_history_open(cl.mgr, file) || loco_thread_create(cl.mgr, &thr))
			_exit(1);
		for (int i = 0; i < 1000; i++)
			loco_hist_ret(thr, loco_hist_inv(thr, "read", NULL, NULL), "[0]");
		loco_hist_inv(thr, "write", NULL, "[5]");  /* never returns */
		raise(SIGKILL);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFSIGNALED(st));
	long blank;
	ck_assert_int_eq(count("\"ev\":\"inv\"", &blank), 1001);
	ck_assert_int_eq(count("\"ev\":\"ret\"", &blank), 1000);
}
END_TEST

START_TEST(off_by_default)
{
	struct loco_thread *thr;
	ck_assert_int_eq(loco_thread_create(cl.mgr, &thr), 0);
	ck_assert_uint_eq(loco_hist_inv(thr, "read", NULL, NULL), 0);
	loco_hist_ret(thr, 0, "[1]");
	loco_thread_destroy(thr);
	ck_assert_int_ne(access(file, F_OK), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("history");
	TCase *tc = tcase_create("recorder");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, events_and_chunks);
	tcase_add_test(tc, survives_sigkill);
	tcase_add_test(tc, off_by_default);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
