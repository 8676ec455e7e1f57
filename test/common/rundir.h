/* SPDX-License-Identifier: MIT */
/* A test's private shm run directory, /dev/shm/loco-KIND-TOP-PID: PID is
 * the process that named it (its owner), TOP the test program's first
 * process (Check's runner in fork mode; the same as PID with CK_FORK=no).
 *
 * The owner removes it when it exits, also after a failed assertion
 * (Check ends a failing test's process without its teardown), and when
 * it is sent SIGTERM or SIGINT. An owner killed outright (Check's
 * per-test timeout sends SIGKILL) cannot: the top process then removes,
 * when it exits and when it is sent SIGTERM or SIGINT, every directory
 * of its own TOP whose owner is gone. Only names of that exact form
 * with this program's TOP are touched, never another program's. */
#ifndef LOCO_TEST_RUNDIR_H
#define LOCO_TEST_RUNDIR_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define RUNDIR_SHM "/dev/shm"

static char rundir_path[64];
static pid_t rundir_owner;
static pid_t rundir_top;

/* Everything below runs in signal handlers too: system calls and plain
 * loops only (no stdio, no malloc, no opendir). */

/* "loco-KIND-TOP-PID" with KIND lower-case letters: TOP and PID, or
 * false for any other name. */
static inline bool rundir_parse(const char *name, long *top, long *pid)
{
	const char *p = name;
	if (strncmp(p, "loco-", 5))
		return false;
	p += 5;
	const char *k = p;
	while (*p >= 'a' && *p <= 'z')
		p++;
	if (p == k || *p != '-')
		return false;
	long v[2];
	for (int i = 0; i < 2; i++) {
		if (*p++ != '-' || *p < '1' || *p > '9')
			return false;
		for (v[i] = 0; *p >= '0' && *p <= '9' && v[i] < 1000000000L; p++)
			v[i] = v[i] * 10 + (*p - '0');
	}
	*top = v[0];
	*pid = v[1];
	return *p == 0;
}

/* Call FN(DIRFD, NAME, ARG) for each entry of the directory open as FD
 * but "." and "..". */
static inline void rundir_each(int fd, void (*fn)(int, const char *, void *),
			       void *arg)
{
	_Alignas(8) char buf[4096];
	long n;
	while ((n = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0)
		for (long off = 0; off < n;) {
			struct dirent64 *e = (struct dirent64 *)(buf + off);
			off += e->d_reclen;
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				fn(fd, e->d_name, arg);
		}
}

static inline void rundir_unlink_cb(int dfd, const char *name, void *arg)
{
	(void)arg;
	unlinkat(dfd, name, 0);
}

/* Remove NAME, a directory of files (no subdirectories) in the
 * directory open as AT (or NAME's absolute path). */
static inline void rundir_remove_at(int at, const char *name)
{
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	rundir_each(fd, rundir_unlink_cb, NULL);
	close(fd);
	unlinkat(at, name, AT_REMOVEDIR);
}

/* PID runs (a zombie, killed but not yet reaped, does not). */
static inline bool rundir_alive(long pid)
{
	char path[32] = "/proc/", num[16], stat[256];
	int n = 0, len = 6;
	for (long v = pid; v && n < 15; v /= 10)
		num[n++] = (char)('0' + v % 10);
	while (n)
		path[len++] = num[--n];
	memcpy(path + len, "/stat", 6);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t got = read(fd, stat, sizeof(stat) - 1);
	close(fd);
	if (got <= 0)
		return false;
	stat[got] = 0;
	const char *p = strrchr(stat, ')');
	return !p || (p[1] == ' ' && p[2] != 'Z' && p[2] != 'X');
}

struct rundir_sweep_arg {
	bool waiting;           /* an owner of ours still runs */
};

static inline void rundir_sweep_cb(int shm, const char *name, void *arg)
{
	struct rundir_sweep_arg *a = arg;
	long top, pid;
	if (!rundir_parse(name, &top, &pid) || top != rundir_top)
		return;
	if (rundir_alive(pid))
		a->waiting = true;
	else
		rundir_remove_at(shm, name);
}

/* Remove every directory of this program's TOP whose owner is gone;
 * true when one's owner still runs. */
static inline bool rundir_sweep_once(void)
{
	struct rundir_sweep_arg a = { false };
	int shm = open(RUNDIR_SHM, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (shm < 0)
		return false;
	rundir_each(shm, rundir_sweep_cb, &a);
	close(shm);
	return a.waiting;
}

/* The owner's own directory; in the top process also the others whose
 * owner is gone. WAIT_MS: how long the top waits for owners still
 * running (being killed along with it) to be gone. */
static inline void rundir_clean(int wait_ms)
{
	pid_t self = getpid();
	if (rundir_path[0] && self == rundir_owner)
		rundir_remove_at(AT_FDCWD, rundir_path);
	if (self != rundir_top)
		return;
	for (int waited = 0; rundir_sweep_once() && waited < wait_ms; waited += 10)
		nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
}

static inline void rundir_at_exit_clean(void)
{
	rundir_clean(0);
}

/* Clean up, then die of SIG as without this handler (SA_RESETHAND put
 * the default action back; SIG is delivered again on return). Check's
 * runner, sent SIGTERM or SIGINT, kills its test's process group
 * (SIGTERM, or SIGKILL for SIGINT), puts this handler back and signals
 * itself again; meson sends SIGKILL 0.5 s after SIGTERM: the top waits
 * a little for the dying test. */
static inline void rundir_on_signal(int sig)
{
	int saved = errno;
	rundir_clean(300);
	errno = saved;
	raise(sig);
}

/* Before main, in the test program's first process: it is TOP. */
__attribute__((constructor)) static void rundir_top_init(void)
{
	rundir_top = getpid();
	atexit(rundir_at_exit_clean);
	struct sigaction sa = { .sa_handler = rundir_on_signal,
				.sa_flags = SA_RESETHAND };
	int sigs[] = { SIGTERM, SIGINT };
	for (unsigned i = 0; i < 2; i++) {
		struct sigaction old;
		/* A signal ignored at start (a background job's SIGINT)
		 * stays ignored. */
		if (!sigaction(sigs[i], NULL, &old) && old.sa_handler == SIG_DFL)
			sigaction(sigs[i], &sa, NULL);
	}
}

/* DIR (at least 64 bytes): this process's run directory of KIND. */
static inline void rundir_name(char *dir, size_t len, const char *kind)
{
	snprintf(dir, len, RUNDIR_SHM "/loco-%s-%d-%d", kind, (int)rundir_top,
		 (int)getpid());
}

/* Remember DIR (named by rundir_name) and remove it when this process
 * exits or is sent SIGTERM/SIGINT. Only in the process that named it: a
 * child forked after (a test's writer) inherits the handlers, and its
 * exit must not remove the directory under the process still using it
 * (whose next fence would then make it anew, holding only fence files,
 * and leave it behind). The top process's handlers cover every owner. */
static inline void rundir_at_exit(const char *dir)
{
	snprintf(rundir_path, sizeof(rundir_path), "%s", dir);
	rundir_owner = getpid();
}

#endif
