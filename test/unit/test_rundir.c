/* SPDX-License-Identifier: MIT */
/* Tests' run directories (test/common/rundir.h) are removed when a test
 * program is ended from outside: its case killed by Check's per-test
 * timeout (SIGKILL), or the program sent SIGTERM (meson's timeout) or
 * SIGINT mid-case, in fork mode and with CK_FORK=no.
 *
 * The program under test is this one, run as "victim MODE": a Check
 * case that makes its run directory as the test helpers do, says
 * "dir PATH" on stdout, and then hangs. */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test/common/rundir.h"

static const char *self_exe;

START_TEST(victim_case)
{
	char dir[64], file[96], line[128];
	rundir_name(dir, sizeof(dir), "test");
	ck_assert_int_eq(mkdir(dir, 0700), 0);
	rundir_at_exit(dir);
	/* A file in it, as a manager's arena. */
	snprintf(file, sizeof(file), "%s/arena", dir);
	FILE *f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	int n = snprintf(line, sizeof(line), "dir %s\n", dir);
	ck_assert_int_eq(write(STDOUT_FILENO, line, (size_t)n), n);
	/* Upper bound: the driver ends this program long before. */
	sleep(30);
	ck_abort_msg("the victim was not ended");
}
END_TEST

/* MODE "timeout": a 1 s Check timeout ends the case; otherwise the
 * driver signals the program. */
static int victim(const char *mode)
{
	Suite *s = suite_create("victim");
	TCase *t = tcase_create("victim");
	tcase_set_timeout(t, strcmp(mode, "timeout") ? 60 : 1);
	tcase_add_test(t, victim_case);
	suite_add_tcase(s, t);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_SILENT);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

struct run {
	pid_t pid;
	int out;                /* its stdout */
	char dir[64];           /* the run directory it named */
};

/* Start "victim MODE" with CK_FORK=FORK and wait for its "dir" line. */
static void run_start(struct run *r, const char *mode, const char *fork_mode)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	r->pid = fork();
	ck_assert_int_ge(r->pid, 0);
	if (!r->pid) {
		dup2(p[1], STDOUT_FILENO);
		close(p[0]);
		close(p[1]);
		/* Its own process group, as meson runs a test: Check's
		 * runner, signalled, signals its whole group again. */
		setsid();
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		setenv("CK_FORK", fork_mode, 1);
		setenv("CK_TIMEOUT_MULTIPLIER", "1", 1);
		unsetenv("CK_DEFAULT_TIMEOUT");
		execl(self_exe, self_exe, "victim", mode, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	r->out = p[0];
	char buf[256];
	size_t len = 0;
	char *nl = NULL;
	while (!nl) {
		struct pollfd pfd = { .fd = r->out, .events = POLLIN };
		ck_assert_msg(poll(&pfd, 1, 10000) == 1, "no dir line in 10 s");
		ssize_t got = read(r->out, buf + len, sizeof(buf) - 1 - len);
		ck_assert_msg(got > 0, "the victim ended before its dir line");
		len += (size_t)got;
		buf[len] = 0;
		char *d = strstr(buf, "dir ");
		nl = d ? strchr(d, '\n') : NULL;
		if (nl) {
			*nl = 0;
			snprintf(r->dir, sizeof(r->dir), "%s", d + 4);
		}
	}
	struct stat st;
	ck_assert_msg(!stat(r->dir, &st) && S_ISDIR(st.st_mode),
		      "%s does not exist while the victim runs", r->dir);
}

/* Wait (at most 20 s) for the victim to end; its wait status. */
static int run_wait(struct run *r)
{
	int st;
	for (int i = 0; i < 2000; i++) {
		pid_t w = waitpid(r->pid, &st, WNOHANG);
		ck_assert_int_ge(w, 0);
		if (w == r->pid) {
			close(r->out);
			return st;
		}
		usleep(10000);
	}
	kill(r->pid, SIGKILL);
	waitpid(r->pid, &st, 0);
	close(r->out);
	ck_abort_msg("the victim did not end in 20 s");
	return -1;
}

struct leftovers {
	pid_t top;              /* the victim */
	unsigned n;
	char first[64];
};

/* A directory of the victim's: counted, and removed so that a failing
 * run leaves nothing either. */
static void leftovers_cb(int shm, const char *name, void *arg)
{
	struct leftovers *l = arg;
	long top, pid;
	if (!rundir_parse(name, &top, &pid) || top != l->top)
		return;
	if (!l->n++)
		snprintf(l->first, sizeof(l->first), "%s", name);
	rundir_remove_at(shm, name);
}

/* No directory of the victim's is left in /dev/shm. */
static void assert_no_leftovers(struct run *r)
{
	struct leftovers l = { .top = r->pid };
	int shm = open(RUNDIR_SHM, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(shm, 0);
	rundir_each(shm, leftovers_cb, &l);
	close(shm);
	ck_assert_msg(!l.n, "%u directories of the victim left, /dev/shm/%s",
		      l.n, l.first);
	ck_assert_msg(access(r->dir, F_OK) && errno == ENOENT, "%s is left",
		      r->dir);
}

/* The directory names the top (the victim itself) and its owner:
 * Check's forked test in fork mode, the victim with CK_FORK=no. */
static void assert_named(struct run *r, bool forked)
{
	long top, pid;
	const char *base = strrchr(r->dir, '/') + 1;
	ck_assert_msg(rundir_parse(base, &top, &pid), "name %s", r->dir);
	ck_assert_int_eq(top, r->pid);
	if (forked)
		ck_assert_int_ne(pid, r->pid);
	else
		ck_assert_int_eq(pid, r->pid);
}

START_TEST(check_timeout)
{
	struct run r;
	run_start(&r, "timeout", "yes");
	assert_named(&r, true);
	int st = run_wait(&r);
	assert_no_leftovers(&r);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1,
		      "victim status %#x, not a failed case", st);
}
END_TEST

static void signalled(int sig, const char *fork_mode)
{
	struct run r;
	run_start(&r, "signal", fork_mode);
	assert_named(&r, !strcmp(fork_mode, "yes"));
	ck_assert_int_eq(kill(r.pid, sig), 0);
	int st = run_wait(&r);
	assert_no_leftovers(&r);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == sig,
		      "victim status %#x, not killed by signal %d", st, sig);
}

START_TEST(sigterm_fork)
{
	signalled(SIGTERM, "yes");
}
END_TEST

START_TEST(sigint_fork)
{
	signalled(SIGINT, "yes");
}
END_TEST

START_TEST(sigterm_nofork)
{
	signalled(SIGTERM, "no");
}
END_TEST

int main(int argc, char **argv)
{
	self_exe = argv[0];
	if (argc == 3 && !strcmp(argv[1], "victim"))
		return victim(argv[2]);
	Suite *s = suite_create("rundir");
	TCase *t = tcase_create("ended");
	tcase_set_timeout(t, 60);
	tcase_add_test(t, check_timeout);
	tcase_add_test(t, sigterm_fork);
	tcase_add_test(t, sigint_fork);
	tcase_add_test(t, sigterm_nofork);
	suite_add_tcase(s, t);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
