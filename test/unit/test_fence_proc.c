/* SPDX-License-Identifier: MIT */
/* Fencing a writer that is a real process, on the transport LOCO_TRANSPORT
 * names. Node 1 is a child process writing in a loop (64-byte and 8-byte
 * WRITEs, CAS and FAA on the inline path, 4-byte WRITEs out of line) to
 * a region of node 0; nodes 0
 * and 2 live in this process, and node 2 fences node 1. Once
 * loco_fence_node returns 0, node 0's bytes must not change any more
 * (checked until the child exits), and the child must see -LOCO_EFENCED
 * (on its READs too, loco_words_read's included) and know it is fenced
 * (exit status 3).
 *  - fence_running: the child runs on while it is fenced;
 *    node 0, which met node 1, finds it fenced (loco_peer_fenced);
 *  - fence_stopped: the child is SIGSTOPped mid-loop (possibly mid-op)
 *    before the fence and SIGCONTed after it returned; a fence that finds
 *    it stopped inside an op times out and is tried again after a
 *    SIGCONT, a few rounds, each with a new incarnation of node 1;
 *  - fence_waits_for_op (shm, ucx-sm): the child stops itself inside a WRITE
 *    (LOCO_SHM_STOP_IN_POST): the fence times out until it resumes;
 *  - fence_after_death_mid_op (shm, ucx-sm): the same child is SIGKILLed there,
 *    its mark left up: the fence completes once it is gone;
 *  - fence_waits_for_handler (ucx-tcp): node 0's request handler stalls
 *    inside a message of the child's, past its checks
 *    (LOCO_UCX_STALL_IN_EXEC): the fence times out until it finished;
 *  - fence_many_threads (shm, shm-weak, ucx-sm): the child writes from
 *    LOCO_GUARD_OWN + 8 threads (more than a node has own busy marks at
 *    a peer: once all the own ones are claimed in node 0's fence file,
 *    the others use the shared marks), fenced while they run, then
 *    again with the child SIGSTOPped mid-loop;
 *  - fence_with_fenced_target: node 0 fences the child, which lingers
 *    (a fenced process that has not exited yet); node 0 then fences node
 *    2, whose targets include the child: node 0 is not fenced, so that
 *    fence must not say so (-LOCO_EFENCED: a caller would stop); it
 *    waits while the child runs (ucx-tcp: -EAGAIN) and completes once
 *    it is gone;
 *  - fence_dead_target: the child, which met node 0, is SIGKILLed; node
 *    0 then fences node 2, whose targets include the dead child: a
 *    connect the child's address refuses says it is gone, so the fence
 *    completes well before its timeout (ucx-tcp: it retried the connect as
 *    for a node still starting and took its whole timeout, 2 s per fence
 *    in loco-rtx-transfer --reclaim-dead with two clients dead). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loco/transport/fence_file.h"
#include "test/common/cluster1.h"
#include "test/common/skip.h"

#define REGION_LEN 4096
#define WATCH 96        /* bytes of the region the child writes */
#define EXIT_FENCED 3
#define MANY (LOCO_GUARD_OWN + 8)  /* fence_many_threads' writer threads */
#define MANY_WATCH 2048            /* the bytes they write */

static char hosts[64], key[64], run_dir[64];
static struct loco_mgr *mgr0, *mgr2;
static struct loco_thread *thr0, *thr2;
static struct loco_rregion rr0;

static struct loco_opts opts_for(int id)
{
	struct loco_opts o = { .node_id = id, .timeout_ms = 4000,
			       .arena_bytes = 4 << 20 };
	snprintf(o.hosts_path, sizeof(o.hosts_path), "%s", hosts);
	snprintf(o.cluster_key, sizeof(o.cluster_key), "%s", key);
	snprintf(o.transport, sizeof(o.transport), "%s",
		 getenv("LOCO_TRANSPORT") ? getenv("LOCO_TRANSPORT") : "shm");
	return o;
}

/* The child, node 1: write until refused; tell the parent (FD) once the
 * first write is done. With LINGER, once fenced it stays (its manager
 * still serving) until killed. */
static void writer(int fd, bool linger)
{
	struct loco_opts o = opts_for(1);
	struct loco_mgr *m;
	struct loco_thread *t;
	struct loco_rregion rr;
	if (loco_mgr_create(&o, &m) || loco_thread_create(m, &t) ||
	    loco_region_open(m, 0, "fence.w", REGION_LEN, &rr))
		_exit(1);
	int rc = 0;
	for (uint64_t i = 1; !rc; i++) {
		uint64_t big[8], old;
		for (unsigned k = 0; k < 8; k++)
			big[k] = i;
		rc = loco_write(t, &rr, 0, big, sizeof(big));
		if (!rc)
			rc = loco_write(t, &rr, 64, &i, 8);
		if (!rc)
			rc = loco_cas(t, &rr, 72, i - 1, i, &old);
		if (!rc)
			rc = loco_faa(t, &rr, 80, 1, &old);
		if (!rc)  /* 4 bytes: the out-of-line path */
			rc = loco_write(t, &rr, 88, &i, 4);
		if (i == 1 && write(fd, "r", 1) != 1)
			_exit(1);
	}
	/* Fenced: a READ fails as well, through a region's words too. */
	struct loco_words w;
	uint64_t v;
	loco_words_init(&w, t, &rr);
	bool reads_fenced = loco_read(t, &rr, 64, &v, 8) == -LOCO_EFENCED &&
			    loco_words_read(&w, 8, &v) == -LOCO_EFENCED;
	bool fenced = rc == -LOCO_EFENCED && loco_self_fenced(m) &&
		      reads_fenced;
	if (linger && fenced && write(fd, "f", 1) == 1)
		for (;;)
			pause();
	_exit(fenced ? EXIT_FENCED : 2);
}

/* fence_many_threads' child: thread K of MANY writes word K (8 bytes,
 * inline) and 4 bytes at 1024 + 8 K (out of line) until refused. */
static struct loco_mgr *many_mgr;
static struct loco_rregion many_rr;
static _Atomic unsigned many_made, many_started, many_fenced;

static void *many_thread(void *arg)
{
	uint64_t k = (uint64_t)(uintptr_t)arg;
	struct loco_thread *t;
	if (loco_thread_create(many_mgr, &t))
		return NULL;
	/* Relaxed: a count the main thread polls. */
	atomic_fetch_add_explicit(&many_made, 1, memory_order_relaxed);
	int rc = 0;
	for (uint64_t i = 1; !rc; i++) {
		rc = loco_write(t, &many_rr, 8 * k, &i, 8);
		if (!rc)
			rc = loco_write(t, &many_rr, 1024 + 8 * k, &i, 4);
		if (i == 1)
			/* Relaxed: a count the main thread polls. */
			atomic_fetch_add_explicit(&many_started, 1, memory_order_relaxed);
	}
	if (rc == -LOCO_EFENCED)
		/* Relaxed: read after the join. */
		atomic_fetch_add_explicit(&many_fenced, 1, memory_order_relaxed);
	return NULL;
}

static void many_writer(int fd)
{
	struct loco_opts o = opts_for(1);
	if (loco_mgr_create(&o, &many_mgr) ||
	    loco_region_open(many_mgr, 0, "fence.w", REGION_LEN, &many_rr))
		_exit(1);
	pthread_t th[MANY];
	for (uintptr_t k = 0; k < MANY; k++)
		if (pthread_create(&th[k], NULL, many_thread, (void *)k))
			_exit(1);
	uint64_t t0 = loco_now_ns();
	/* Relaxed: counts. Every context made, half of them past their
	 * first WRITEs (shm-weak's one NIC thread is slow with so many on a
	 * busy host; the others are inside theirs). */
	while (atomic_load_explicit(&many_made, memory_order_relaxed) < MANY ||
	       atomic_load_explicit(&many_started, memory_order_relaxed) < MANY / 2) {
		if (loco_now_ns() - t0 > 30000000000ull)
			_exit(1);
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	if (write(fd, "r", 1) != 1)
		_exit(1);
	for (unsigned k = 0; k < MANY; k++)
		pthread_join(th[k], NULL);
	_exit(atomic_load(&many_fenced) == MANY && loco_self_fenced(many_mgr) ?
	      EXIT_FENCED : 2);
}

static bool many;  /* the next child is many_writer */

static pid_t child_start_ex(bool linger, int *fdp)
{
	int fd[2];
	ck_assert_int_eq(pipe(fd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		close(fd[0]);
		if (many)
			many_writer(fd[1]);
		writer(fd[1], linger);
	}
	close(fd[1]);
	char c;
	struct pollfd p = { .fd = fd[0], .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, 40000), 1);
	ck_assert_int_eq(read(fd[0], &c, 1), 1);
	if (fdp)
		*fdp = fd[0];
	else
		close(fd[0]);
	return pid;
}

static pid_t child_start(void)
{
	return child_start_ex(false, NULL);
}

/* The bytes the child writes. */
static size_t watch_len(void)
{
	return many ? MANY_WATCH : WATCH;
}

static void snapshot(uint8_t *out)
{
	ck_assert_int_eq(loco_read(thr0, &rr0, 0, out, watch_len()), 0);
}

/* After the fence returned: the bytes stay as they are until the child
 * exits (status 3), which it must do within a few seconds. */
static void unchanged_until_exit(pid_t pid)
{
	uint8_t before[MANY_WATCH], now[MANY_WATCH];
	size_t len = watch_len();
	snapshot(before);
	int st = 0;
	uint64_t t0 = loco_now_ns();
	for (;;) {
		snapshot(now);
		ck_assert_msg(!memcmp(before, now, len),
			      "node 0's bytes changed after the fence returned");
		if (waitpid(pid, &st, WNOHANG) == pid)
			break;
		if (loco_now_ns() - t0 > 20000000000ull) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			ck_abort_msg("the fenced child did not stop");
		}
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	/* A last look, now that no process of node 1 is left. */
	snapshot(now);
	ck_assert(!memcmp(before, now, len));
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == EXIT_FENCED,
		      "child status %#x", st);
}

static void setup(void)
{
	snprintf(hosts, sizeof(hosts), "/tmp/loco-fence-hosts-XXXXXX");
	int fd = mkstemp(hosts);
	ck_assert_int_ge(fd, 0);
	for (unsigned i = 0; i < 3; i++)
		dprintf(fd, "%u 127.0.0.1:%d compute\n", i, free_port());
	close(fd);
	snprintf(key, sizeof(key), "/tmp/loco-fence-key-XXXXXX");
	ck_assert_int_eq(test_key_make(key), 0);
	rundir_name(run_dir, sizeof(run_dir), "fence");
	setenv("LOCO_RUN_DIR", run_dir, 1);
	rundir_at_exit(run_dir);
	struct loco_opts o0 = opts_for(0), o2 = opts_for(2);
	ck_assert_int_eq(loco_mgr_create(&o0, &mgr0), 0);
	ck_assert_int_eq(loco_mgr_create(&o2, &mgr2), 0);
	ck_assert_int_eq(loco_thread_create(mgr0, &thr0), 0);
	ck_assert_int_eq(loco_thread_create(mgr2, &thr2), 0);
	ck_assert_int_eq(loco_region_open(mgr0, 0, "fence.w", REGION_LEN, &rr0), 0);
}

static void teardown(void)
{
	loco_thread_destroy(thr0);
	loco_thread_destroy(thr2);
	loco_mgr_destroy(mgr0);
	loco_mgr_destroy(mgr2);
	unlink(hosts);
	unlink(key);
}

START_TEST(fence_running)
{
	pid_t pid = child_start();
	ck_assert(!loco_peer_fenced(mgr0, 1));
	ck_assert_int_eq(loco_fence_node(mgr2, 1, -1), 0);
	/* Node 0, which met node 1, learns it from the fence itself (node 2
	 * fenced there); node 2 never met node 1. */
	ck_assert(loco_peer_fenced(mgr0, 1));
	ck_assert(!loco_peer_fenced(mgr2, 1));
	ck_assert(!loco_peer_fenced(mgr0, 2));
	unchanged_until_exit(pid);
}
END_TEST

/* Start a child, let it run a little (ROUND+1 times 3 ms), SIGSTOP it,
 * fence it; a fence that finds it stopped inside an op times out and is
 * tried again after a SIGCONT. Then nothing changes once it runs on. */
static void fence_stopped_round(unsigned round, unsigned *timeouts)
{
	pid_t pid = child_start();
	struct timespec ts = { 0, (long)(round + 1) * 3000000 };
	nanosleep(&ts, NULL);
	ck_assert_int_eq(kill(pid, SIGSTOP), 0);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
	int rc;
	bool gone = false;
	while (!gone &&
	       (rc = loco_fence_node(mgr2, 1, 300)) == -ETIMEDOUT) {
		/* Stopped inside an op (its mark raised): the fence waits
		 * for it; let it run a moment, stop it again. The fence is
		 * recorded: it may well find out and exit meanwhile. */
		(*timeouts)++;
		kill(pid, SIGCONT);
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
		kill(pid, SIGSTOP);
		ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
		gone = !WIFSTOPPED(st);
	}
	if (gone) {
		ck_assert_int_eq(loco_fence_node(mgr2, 1, 300), 0);
		ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == EXIT_FENCED);
		return;
	}
	ck_assert_int_eq(rc, 0);
	uint8_t before[MANY_WATCH], now[MANY_WATCH];
	snapshot(before);
	ck_assert_int_eq(kill(pid, SIGCONT), 0);
	unchanged_until_exit(pid);
	snapshot(now);
	ck_assert(!memcmp(before, now, watch_len()));
}

START_TEST(fence_stopped)
{
	unsigned timeouts = 0;
	for (unsigned round = 0; round < 4; round++)
		fence_stopped_round(round, &timeouts);
	fprintf(stderr, "fence_stopped: %u fences found the child stopped "
		"mid-op and timed out\n", timeouts);
}
END_TEST

/* How many of FN's own marks are claimed. */
static unsigned own_claimed(struct loco_ffile_node *fn)
{
	unsigned n = 0;
	for (unsigned i = 0; i < LOCO_GUARD_OWN; i++)
		/* Relaxed: a count, nothing to order. */
		n += atomic_load_explicit(&fn->own[i].owner, memory_order_relaxed) != 0;
	return n;
}

/* Whether the fence files' guard is the fence here (shm, shm-weak,
 * ucx-sm with UCX's RMA): the transports with busy marks. */
static bool marks_here(void)
{
	const char *tp = getenv("LOCO_TRANSPORT");
	const char *rma = getenv("LOCO_UCX_RMA");
	return !tp || !strcmp(tp, "shm") || !strcmp(tp, "shm-weak") ||
	       (!strcmp(tp, "ucx-sm") && !(rma && !strcmp(rma, "am")));
}

/* MANY threads, own marks and shared ones: fenced running, then
 * stopped. Only where the marks are (on ucx-tcp, 72 endpoints of a
 * stopped writer failing at once hit an assertion inside UCX's wireup,
 * ucp_request.c:684, in node 0). */
START_TEST(fence_many_threads)
{
	if (!marks_here())
		return;
	many = true;
	pid_t pid = child_start();
	if (loco_ffile_own_marks()) {
		/* Every own mark of node 1 at node 0 claimed: the contexts
		 * beyond run on the shared ones. */
		char path[128];
		struct loco_ffile *f;
		loco_ffile_path(path, sizeof(path), run_dir, 0);
		ck_assert_int_eq(loco_ffile_map(path, false, &f), 0);
		unsigned claimed = 0;
		uint64_t t0 = loco_now_ns();
		while ((claimed = own_claimed(&f->node[1])) < LOCO_GUARD_OWN &&
		       loco_now_ns() - t0 < 30000000000ull)
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
		loco_ffile_unmap(f);
		ck_assert_uint_eq(claimed, LOCO_GUARD_OWN);
	}
	ck_assert_int_eq(loco_fence_node(mgr2, 1, -1), 0);
	unchanged_until_exit(pid);
	unsigned timeouts = 0;
	fence_stopped_round(0, &timeouts);
	fprintf(stderr, "fence_many_threads: %u fences found the child "
		"stopped mid-op and timed out\n", timeouts);
	many = false;
}
END_TEST

/* Whether LOCO_SHM_STOP_IN_POST works here: the fence files' hook, on
 * shm and on ucx-sm with UCX's RMA (not with LOCO_UCX_RMA=am). */
static bool stop_hook_here(void)
{
	const char *tp = getenv("LOCO_TRANSPORT");
	const char *rma = getenv("LOCO_UCX_RMA");
	return !tp || !strcmp(tp, "shm") ||
	       (!strcmp(tp, "ucx-sm") && !(rma && !strcmp(rma, "am")));
}

/* shm, ucx-sm: the child stops itself inside a WRITE, its busy mark up
 * (LOCO_SHM_STOP_IN_POST). The fence must wait for it (-ETIMEDOUT while
 * it is stopped), not return while that WRITE may still land. */
START_TEST(fence_waits_for_op)
{
	if (!stop_hook_here())
		return;
	setenv("LOCO_SHM_STOP_IN_POST", "200", 1);
	pid_t pid = child_start();
	unsetenv("LOCO_SHM_STOP_IN_POST");
	int st;
	ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
	ck_assert(WIFSTOPPED(st));
	ck_assert_int_eq(loco_fence_node(mgr2, 1, 400), -ETIMEDOUT);
	ck_assert_int_eq(kill(pid, SIGCONT), 0);
	int rc;
	while ((rc = loco_fence_node(mgr2, 1, 400)) == -ETIMEDOUT)
		;
	ck_assert_int_eq(rc, 0);
	unchanged_until_exit(pid);
}
END_TEST

/* shm, ucx-sm: the child stops itself inside a WRITE, its busy mark up, and is
 * then SIGKILLed there. Its mark stays up in node 0's fence file, but
 * nothing of it can execute any more: the fence must complete, not wait
 * for that mark for good. */
START_TEST(fence_after_death_mid_op)
{
	if (!stop_hook_here())
		return;
	setenv("LOCO_SHM_STOP_IN_POST", "200", 1);
	pid_t pid = child_start();
	unsetenv("LOCO_SHM_STOP_IN_POST");
	int st;
	ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
	ck_assert(WIFSTOPPED(st));
	ck_assert_int_eq(loco_fence_node(mgr2, 1, 300), -ETIMEDOUT);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_int_eq(loco_fence_node(mgr2, 1, 2000), 0);
}
END_TEST

/* ucx-tcp: node 0 (this process) is set up with its handler's 200th
 * request message stalling 3 s inside its execution. */
static void setup_stall(void)
{
	setenv("LOCO_UCX_STALL_IN_EXEC", "200:3000", 1);
	setup();
	unsetenv("LOCO_UCX_STALL_IN_EXEC");
}

static atomic_bool stalled;

static void stall_seen(const struct loco_log_msg *m, void *arg)
{
	(void)arg;
	if (strstr(m->text, "LOCO_UCX_STALL_IN_EXEC"))
		/* Release: pairs with the test's acquire load. */
		atomic_store_explicit(&stalled, true, memory_order_release);
}

/* ucx-tcp: the handler of node 0 stalls inside one of the child's
 * request messages, past its fence check. The fence must wait for it
 * (-ETIMEDOUT while it stalls), not return while its WRITEs may still
 * land. */
START_TEST(fence_waits_for_handler)
{
	const char *tp = getenv("LOCO_TRANSPORT");
	if (!tp || strcmp(tp, "ucx-tcp"))
		return;  /* the hook is ucx's messages' */
	loco_log_set_level(LOCO_LOG_WARN);
	loco_log_set_handler(stall_seen, NULL);
	pid_t pid = child_start();
	uint64_t t0 = loco_now_ns();
	/* Acquire: pairs with the handler's release store. */
	while (!atomic_load_explicit(&stalled, memory_order_acquire)) {
		ck_assert_msg(loco_now_ns() - t0 < 20000000000ull,
			      "node 0's handler never stalled");
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	ck_assert_int_eq(loco_fence_node(mgr2, 1, 400), -ETIMEDOUT);
	int rc;
	while ((rc = loco_fence_node(mgr2, 1, 400)) == -ETIMEDOUT)
		ck_assert_msg(loco_now_ns() - t0 < 30000000000ull,
			      "the fence never completed");
	ck_assert_int_eq(rc, 0);
	loco_log_set_handler(NULL, NULL);
	unchanged_until_exit(pid);
}
END_TEST

/* Node 0, which met the child, fences it (so it knows that incarnation
 * fenced), then fences node 2, whose targets include the lingering
 * child. */
START_TEST(fence_with_fenced_target)
{
	int fd;
	struct loco_rregion rr;
	/* Node 2 meets node 0 (node 0 knows the incarnation it fences). */
	ck_assert_int_eq(loco_region_open(mgr2, 0, "fence.w", REGION_LEN, &rr), 0);
	pid_t pid = child_start_ex(true, &fd);
	ck_assert_int_eq(loco_fence_node(mgr0, 1, -1), 0);
	ck_assert(loco_peer_fenced(mgr0, 1));
	/* The child saw it: fenced, and still there. */
	char c;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, 20000), 1);
	ck_assert_int_eq(read(fd, &c, 1), 1);
	ck_assert_int_eq(c, 'f');
	close(fd);
	int rc = loco_fence_node(mgr0, 2, 1000);
	ck_assert_msg(rc != -LOCO_EFENCED && !loco_self_fenced(mgr0),
		      "a fenced target made the fencer take itself for "
		      "fenced (%s)", loco_strerror(rc));
	const char *tp = getenv("LOCO_TRANSPORT");
	if (tp && !strcmp(tp, "ucx-tcp"))  /* FENCE messages: it must wait */
		ck_assert_int_eq(rc, -EAGAIN);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_int_eq(loco_fence_node(mgr0, 2, 2000), 0);
	ck_assert(!loco_self_fenced(mgr0));
}
END_TEST

#define DEAD_FENCE_MS 20000  /* fence_dead_target's timeout */

START_TEST(fence_dead_target)
{
	struct loco_rregion rr;
	/* Node 2 meets node 0 (node 0 knows the incarnation it fences). */
	ck_assert_int_eq(loco_region_open(mgr2, 0, "fence.w", REGION_LEN, &rr), 0);
	pid_t pid = child_start();
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	uint64_t t0 = loco_now_ns();
	ck_assert_int_eq(loco_fence_node(mgr0, 2, DEAD_FENCE_MS), 0);
	uint64_t ms = (loco_now_ns() - t0) / 1000000;
	/* Retried, the connect gives up just short of the deadline: half
	 * the timeout tells the two apart with seconds to spare. */
	ck_assert_msg(ms < DEAD_FENCE_MS / 2, "the fence waited out its "
		      "timeout (%llu of %d ms) for a target whose process is "
		      "gone", (unsigned long long)ms, DEAD_FENCE_MS);
	ck_assert(!loco_self_fenced(mgr0));
}
END_TEST

int main(void)
{
	if (test_transport_skip())
		return TEST_SKIP;
	Suite *s = suite_create("fence_proc");
	TCase *tc = tcase_create("fence_proc");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 100);
	tcase_add_test(tc, fence_running);
	tcase_add_test(tc, fence_stopped);
	tcase_add_test(tc, fence_many_threads);
	tcase_add_test(tc, fence_waits_for_op);
	tcase_add_test(tc, fence_after_death_mid_op);
	tcase_add_test(tc, fence_with_fenced_target);
	tcase_add_test(tc, fence_dead_target);
	suite_add_tcase(s, tc);
	TCase *stall = tcase_create("fence_proc_stall");
	tcase_add_checked_fixture(stall, setup_stall, teardown);
	tcase_set_timeout(stall, 100);
	tcase_add_test(stall, fence_waits_for_handler);
	suite_add_tcase(s, stall);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
