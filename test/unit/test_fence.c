/* SPDX-License-Identifier: MIT */
/* Fencing (loco_fence_node), on the transport LOCO_TRANSPORT names, in an
 * in-process cluster of three nodes: node 2 fences node 1, which writes
 * to a region of node 0. After the fence every op of node 1 fails with
 * -LOCO_EFENCED (inline and out of line, single ops and batches), the
 * target's bytes do not change, node 1 knows it is fenced, a second fence
 * is free, and node 1 rejoins as a new incarnation (a new manager) whose
 * ops work. Also the lease clock (LOCO_CLOCK_SKEW_MS, a skew that ends:
 * LOCO_CLOCK_SKEW_FOR_MS) and bad arguments. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "loco/internal.h"
#include "test/common/cluster.h"
#include "test/common/skip.h"

static struct cluster cl;
static struct loco_rregion rr[3];

static void setup(void)
{
	ck_assert_int_eq(cluster_start(&cl, 3, 0, 4000), 0);
	for (unsigned i = 0; i < 3; i++)
		ck_assert_int_eq(loco_region_open(cl.mgr[i], 0, "fence.r", 4096,
						  &rr[i]), 0);
}

static void teardown(void)
{
	cluster_stop(&cl);
}

static uint64_t word_at(uint64_t off)
{
	uint64_t v = 0;
	ck_assert_int_eq(loco_read(cl.thr[0], &rr[0], off, &v, 8), 0);
	return v;
}

/* Every kind of op node 1 can post to node 0 fails with -LOCO_EFENCED
 * and changes nothing there. */
static void node1_refused(void)
{
	struct loco_thread *t = cl.thr[1];
	uint64_t v = 0x99, old = 0;
	uint8_t big[40];
	memset(big, 0x77, sizeof(big));
	ck_assert_int_eq(loco_write(t, &rr[1], 0, &v, 8), -LOCO_EFENCED);
	ck_assert_int_eq(loco_write(t, &rr[1], 64, big, sizeof(big)), -LOCO_EFENCED);
	ck_assert_int_eq(loco_cas(t, &rr[1], 8, 1, 2, &old), -LOCO_EFENCED);
	ck_assert_int_eq(loco_faa(t, &rr[1], 16, 1, &old), -LOCO_EFENCED);
	struct loco_batch b;
	struct loco_ack ack = { 0, 0 };
	loco_batch_init(&b, t);
	loco_batch_write(&b, &rr[1], 24, &v, 8);
	int rc = loco_batch_post(&b, &ack);
	if (!rc)
		rc = loco_ack_wait(t, &ack, -1);
	ck_assert_int_eq(rc, -LOCO_EFENCED);
	ck_assert_uint_eq(word_at(0), 1);
	ck_assert_uint_eq(word_at(8), 1);
	ck_assert_uint_eq(word_at(16), 0);
	ck_assert_uint_eq(word_at(24), 0);
	ck_assert_uint_eq(word_at(64), 0);
}

START_TEST(fence_refuses)
{
	uint64_t one = 1, old = 0;
	ck_assert_int_eq(loco_write(cl.thr[1], &rr[1], 0, &one, 8), 0);
	ck_assert_int_eq(loco_cas(cl.thr[1], &rr[1], 8, 0, 1, &old), 0);
	ck_assert_int_eq(loco_fence(cl.thr[1], LOCO_FENCE_THREAD, 0), 0);
	ck_assert(!loco_self_fenced(cl.mgr[1]));
	ck_assert_int_eq(loco_fence_node(cl.mgr[2], 1, -1), 0);
	node1_refused();
	ck_assert(loco_self_fenced(cl.mgr[1]));
	/* Its READs fail too, once it knows. */
	ck_assert_int_eq(loco_read(cl.thr[1], &rr[1], 0, &old, 8), -LOCO_EFENCED);
	/* Remembered: free the second time; the others work on. */
	ck_assert_int_eq(loco_fence_node(cl.mgr[2], 1, -1), 0);
	ck_assert_int_eq(loco_fence_node(cl.mgr[0], 1, -1), 0);
	uint64_t two = 2;
	ck_assert_int_eq(loco_write(cl.thr[2], &rr[2], 32, &two, 8), 0);
	ck_assert_int_eq(loco_fence(cl.thr[2], LOCO_FENCE_THREAD, 0), 0);
	ck_assert_uint_eq(word_at(32), 2);
	/* A fenced node cannot fence anyone. */
	ck_assert_int_eq(loco_fence_node(cl.mgr[1], 2, -1), -LOCO_EFENCED);
}
END_TEST

/* Node 1's batch over two peers and two regions (node 0's fence.r, node
 * 2's fence.q), ops interleaved: each peer's ops run in the order added,
 * one doorbell a peer, and a thread fence then posts one READ, for node
 * 2, whose last op was a WRITE. Then node 1 is fenced: a batch whose
 * first ops are READs and whose WRITEs and atomics come after fails with
 * -LOCO_EFENCED and changes nothing at either peer. */
START_TEST(batch_two_peers)
{
	struct loco_thread *t = cl.thr[1];
	struct loco_rregion q1, q2;
	ck_assert_int_eq(loco_region_open(cl.mgr[1], 2, "fence.q", 4096, &q1), 0);
	ck_assert_int_eq(loco_region_open(cl.mgr[2], 2, "fence.q", 4096, &q2), 0);
	uint64_t one = 1, seven = 7, w2[2] = { 8, 9 }, r0 = 0, r16[2] = { 0 },
		 cas_old = 9, faa_old = 0, v = 0;
	struct loco_stats s0, s1;
	struct loco_batch b;
	/* QPs open: the batch's ops go inline where the transport has it. */
	ck_assert_int_eq(loco_write(t, &rr[1], 0, &one, 8), 0);
	ck_assert_int_eq(loco_write(t, &q1, 0, &one, 8), 0);
	ck_assert_int_eq(loco_fence(t, LOCO_FENCE_THREAD, 0), 0);
	loco_thread_stats(t, &s0);
	loco_batch_init(&b, t);
	loco_batch_write(&b, &rr[1], 8, &seven, 8);
	loco_batch_faa(&b, &q1, 0, 5, &faa_old);
	loco_batch_read(&b, &rr[1], 8, &r0, 8);
	loco_batch_write(&b, &q1, 16, w2, 16);
	loco_batch_cas(&b, &rr[1], 16, 0, 3, &cas_old);
	loco_batch_read(&b, &q1, 16, r16, 16);
	loco_batch_write(&b, &q1, 32, &seven, 8);
	ck_assert_int_eq(loco_batch_run(&b, -1), 0);
	ck_assert_uint_eq(faa_old, 1);
	ck_assert_uint_eq(r0, 7);
	ck_assert_uint_eq(cas_old, 0);
	ck_assert_uint_eq(r16[0], 8);
	ck_assert_uint_eq(r16[1], 9);
	ck_assert_int_eq(loco_fence(t, LOCO_FENCE_THREAD, 0), 0);
	loco_thread_stats(t, &s1);
	ck_assert_uint_eq(s1.writes - s0.writes, 3);
	ck_assert_uint_eq(s1.bytes_written - s0.bytes_written, 32);
	ck_assert_uint_eq(s1.reads - s0.reads, 3);   /* 2 and the fence's */
	ck_assert_uint_eq(s1.bytes_read - s0.bytes_read, 24);
	ck_assert_uint_eq(s1.cas - s0.cas, 1);
	ck_assert_uint_eq(s1.faa - s0.faa, 1);
	ck_assert_uint_eq(s1.doorbells - s0.doorbells, 3);
	ck_assert_uint_eq(word_at(8), 7);
	ck_assert_uint_eq(word_at(16), 3);
	ck_assert_int_eq(loco_read(cl.thr[2], &q2, 0, &v, 8), 0);
	ck_assert_uint_eq(v, 6);
	ck_assert_int_eq(loco_read(cl.thr[2], &q2, 32, &v, 8), 0);
	ck_assert_uint_eq(v, 7);

	ck_assert_int_eq(loco_fence_node(cl.mgr[2], 1, -1), 0);
	uint64_t x = 0x99;
	loco_batch_init(&b, t);
	loco_batch_read(&b, &rr[1], 8, &r0, 8);
	loco_batch_read(&b, &q1, 0, &v, 8);
	loco_batch_write(&b, &rr[1], 40, &x, 8);
	loco_batch_faa(&b, &q1, 0, 1, &faa_old);
	loco_batch_write(&b, &q1, 48, &x, 8);
	loco_batch_cas(&b, &rr[1], 16, 3, 4, &cas_old);
	ck_assert_int_eq(loco_batch_run(&b, -1), -LOCO_EFENCED);
	ck_assert_uint_eq(b.n, 0);
	ck_assert_uint_eq(word_at(40), 0);
	ck_assert_uint_eq(word_at(16), 3);
	ck_assert_int_eq(loco_read(cl.thr[2], &q2, 0, &v, 8), 0);
	ck_assert_uint_eq(v, 6);
	ck_assert_int_eq(loco_read(cl.thr[2], &q2, 48, &v, 8), 0);
	ck_assert_uint_eq(v, 0);
}
END_TEST

START_TEST(fence_bad_args)
{
	ck_assert_int_eq(loco_fence_node(cl.mgr[2], 2, -1), -EINVAL);
	ck_assert_int_eq(loco_fence_node(cl.mgr[2], 7, -1), -EINVAL);
	ck_assert_int_eq(loco_fence_node(cl.mgr[2], LOCO_MAX_NODES, -1), -EINVAL);
	ck_assert(!loco_self_fenced(cl.mgr[2]));
}
END_TEST

/* Node 1 fenced, then started again as a new incarnation (a new manager
 * with the same id): it rejoins and its writes land. */
START_TEST(fence_rejoin)
{
	ck_assert_int_eq(loco_fence_node(cl.mgr[2], 1, -1), 0);
	uint64_t v = 5;
	ck_assert_int_eq(loco_write(cl.thr[1], &rr[1], 40, &v, 8), -LOCO_EFENCED);
	loco_thread_destroy(cl.thr[1]);
	loco_mgr_destroy(cl.mgr[1]);
	cl.thr[1] = NULL;
	cl.mgr[1] = NULL;
	struct loco_opts o = { .node_id = 1, .timeout_ms = 4000,
			       .arena_bytes = 16 << 20 };
	snprintf(o.hosts_path, sizeof(o.hosts_path), "%s", cl.hosts);
	snprintf(o.cluster_key, sizeof(o.cluster_key), "%s", cl.key);
	snprintf(o.transport, sizeof(o.transport), "%s",
		 getenv("LOCO_TRANSPORT") ? getenv("LOCO_TRANSPORT") : "shm");
	ck_assert_int_eq(loco_mgr_create(&o, &cl.mgr[1]), 0);
	ck_assert_int_eq(loco_thread_create(cl.mgr[1], &cl.thr[1]), 0);
	ck_assert_int_eq(loco_region_open(cl.mgr[1], 0, "fence.r", 4096, &rr[1]), 0);
	ck_assert_int_eq(loco_write(cl.thr[1], &rr[1], 40, &v, 8), 0);
	ck_assert_int_eq(loco_fence(cl.thr[1], LOCO_FENCE_THREAD, 0), 0);
	ck_assert_uint_eq(word_at(40), 5);
	ck_assert(!loco_self_fenced(cl.mgr[1]));
	/* The new incarnation can be fenced in its turn. */
	ck_assert_int_eq(loco_fence_node(cl.mgr[2], 1, -1), 0);
	ck_assert_int_eq(loco_write(cl.thr[1], &rr[1], 40, &v, 8), -LOCO_EFENCED);
}
END_TEST

/* Node 2 says hello to node 1, which it never met (neither knows the
 * other's incarnation): where descriptors are per peer (ucx: a credential
 * per client incarnation), the descriptor node 1 keeps from node 2 must be
 * the one made for node 1's incarnation, which node 2 could make only
 * after the answer told it: its second HELLO (without it node 1 keeps
 * one with no credential, and its QPs to node 2 wait for one). */
START_TEST(hello_per_peer_desc)
{
	struct loco_mgr *m1 = cl.mgr[1], *m2 = cl.mgr[2];
	pthread_mutex_lock(&m2->peer_lock);
	uint64_t known = m2->peer_boot[1];
	pthread_mutex_unlock(&m2->peer_lock);
	ck_assert_uint_eq(known, 0);
	ck_assert_int_eq(loco_peer_wait(m2, 1, 4000), 0);
	if (!m2->tp_ops->arena_desc_for)
		return;
	uint8_t want[LOCO_DESC_MAX];
	size_t len = sizeof(want);
	ck_assert_int_eq(m2->tp_ops->arena_desc_for(m2->tp, 1, m1->boot_id, want, &len), 0);
	pthread_mutex_lock(&m1->peer_lock);
	bool same = m1->peer_hello[2].desc_len == len &&
		    !memcmp(m1->peer_hello[2].desc, want, len);
	pthread_mutex_unlock(&m1->peer_lock);
	ck_assert_msg(same, "node 1 keeps a descriptor of node 2 not made for it");
}
END_TEST

/* The lease clock's offset from CLOCK_MONOTONIC now is within [*LO, *HI]
 * ns (two reads of CLOCK_MONOTONIC around the lease clock's). */
static void skew_now(int64_t *lo, int64_t *hi)
{
	uint64_t t1 = loco_now_ns();
	uint64_t l = loco_lease_now_ns();
	uint64_t t2 = loco_now_ns();
	*lo = (int64_t)(l - t2);
	*hi = (int64_t)(l - t1);
}

static bool skew_is(int64_t ms)
{
	int64_t lo, hi;
	skew_now(&lo, &hi);
	return lo <= ms * 1000000 && ms * 1000000 <= hi;
}

/* The child process of skew_child (test_fence --lease-clock SKEW FORK_NS
 * [FOR]; the environment set): its lease clock is SKEW ms off; with FOR,
 * until FOR ms from its start (after FORK_NS, before MAIN_NS), then it
 * steps back to CLOCK_MONOTONIC for good. Exit status: 0, or which check
 * failed. With FOR it samples the clock every millisecond until a sample
 * taken wholly after MAIN_NS + FOR: a sample taken wholly before FORK_NS +
 * FOR must show the skew, one after MAIN_NS + FOR none, and once gone it
 * stays gone. What a loaded host delays is when the samples are taken,
 * never what each one must show. */
static int lease_clock_child(uint64_t main_ns, char **argv)
{
	int64_t skew = strtoll(argv[2], NULL, 10);
	uint64_t fork_ns = strtoull(argv[3], NULL, 10);
	if (!skew_is(skew))
		return 2;
	if (!argv[4])
		return 0;
	uint64_t for_ns = strtoull(argv[4], NULL, 10) * 1000000u;
	uint64_t early = fork_ns + for_ns, late = main_ns + for_ns;
	bool gone = false;
	for (;;) {
		uint64_t t1 = loco_now_ns();
		bool on = skew_is(skew), off = skew_is(0);
		uint64_t t2 = loco_now_ns();
		if (t2 < early && !on)
			return 3;
		if (gone && !off)
			return 5;
		gone = off && !on;
		if (t1 > late && on != off)   /* else preempted: sample again */
			break;
		usleep(1000);
	}
	if (!gone)
		return 4;
	usleep(20000);
	return skew_is(0) ? 0 : 5;
}

/* A fresh process (this program, exec'd) with LOCO_CLOCK_SKEW_MS=SKEW and
 * LOCO_CLOCK_SKEW_FOR_MS=FOR (NULL: unset) finds its lease clock EXPECT ms
 * off (and with FOR, stepping back to CLOCK_MONOTONIC FOR ms after its
 * start): lease_clock_child's exit status. */
static int skew_child(const char *skew, const char *for_ms, int64_t expect)
{
	char e[32], f[32];
	snprintf(e, sizeof(e), "%lld", (long long)expect);
	snprintf(f, sizeof(f), "%llu", (unsigned long long)loco_now_ns());
	pid_t pid = fork();
	if (!pid) {
		unsetenv("LOCO_CLOCK_SKEW_MS");
		unsetenv("LOCO_CLOCK_SKEW_FOR_MS");
		if (skew)
			setenv("LOCO_CLOCK_SKEW_MS", skew, 1);
		if (for_ms)
			setenv("LOCO_CLOCK_SKEW_FOR_MS", for_ms, 1);
		char *argv[] = { "test_fence", "--lease-clock", e, f,
				 (char *)for_ms, NULL };
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* loco_mgr_create with LOCO_CLOCK_SKEW_MS=SKEW and LOCO_CLOCK_SKEW_FOR_MS=
 * FOR (NULL: unset): its return code. */
static int mgr_with_skew(const char *skew, const char *for_ms)
{
	if (skew)
		setenv("LOCO_CLOCK_SKEW_MS", skew, 1);
	if (for_ms)
		setenv("LOCO_CLOCK_SKEW_FOR_MS", for_ms, 1);
	struct loco_mgr *m = NULL;
	struct loco_opts o = { .node_id = 2, .timeout_ms = 4000,
			       .arena_bytes = 1 << 20 };
	snprintf(o.hosts_path, sizeof(o.hosts_path), "%s", cl.hosts);
	snprintf(o.cluster_key, sizeof(o.cluster_key), "%s", cl.key);
	snprintf(o.transport, sizeof(o.transport), "shm");
	int rc = loco_mgr_create(&o, &m);
	unsetenv("LOCO_CLOCK_SKEW_MS");
	unsetenv("LOCO_CLOCK_SKEW_FOR_MS");
	if (!rc)
		loco_mgr_destroy(m);
	else
		ck_assert_ptr_null(m);
	return rc;
}

START_TEST(lease_clock)
{
	ck_assert_int_eq(skew_child(NULL, NULL, 0), 0);
	ck_assert_int_eq(skew_child("5000", NULL, 5000), 0);
	ck_assert_int_eq(skew_child("-3000", NULL, -3000), 0);
	ck_assert_int_eq(skew_child("-3000", NULL, 5000), 2);
	/* A bad value: the manager refuses to start. */
	ck_assert_int_eq(mgr_with_skew("12ms", NULL), -EINVAL);
	ck_assert_int_eq(mgr_with_skew("12", "0"), -EINVAL);
	ck_assert_int_eq(mgr_with_skew("12", "-5"), -EINVAL);
	ck_assert_int_eq(mgr_with_skew("12", "1s"), -EINVAL);
	ck_assert_int_eq(mgr_with_skew(NULL, "100"), -EINVAL);
	ck_assert_int_eq(mgr_with_skew("0", "100"), -EINVAL);
}
END_TEST

/* LOCO_CLOCK_SKEW_FOR_MS: the skew ends, ahead or behind. */
START_TEST(lease_clock_step)
{
	ck_assert_int_eq(skew_child("4000", "600", 4000), 0);
	ck_assert_int_eq(skew_child("-2000", "600", -2000), 0);
}
END_TEST

int main(int argc, char **argv)
{
	uint64_t main_ns = loco_now_ns();
	if (argc >= 4 && !strcmp(argv[1], "--lease-clock"))
		return lease_clock_child(main_ns, argv);
	if (test_transport_skip())
		return TEST_SKIP;
	Suite *s = suite_create("fence");
	TCase *tc = tcase_create("fence");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, fence_refuses);
	tcase_add_test(tc, fence_bad_args);
	tcase_add_test(tc, batch_two_peers);
	tcase_add_test(tc, fence_rejoin);
	tcase_add_test(tc, hello_per_peer_desc);
	tcase_add_test(tc, lease_clock);
	tcase_add_test(tc, lease_clock_step);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
