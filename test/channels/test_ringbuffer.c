/* SPDX-License-Identifier: MIT */
/* ringbuffer on an in-process three-node cluster, written by node 0: init
 * errors and roles; messages of every size class in order at both readers,
 * each consumed once; -EAGAIN when empty, -EMSGSIZE keeping the message;
 * a full ring (-EAGAIN from try_send, then accepted after the readers
 * drain and acknowledge), acked/wait_acked; wrap-around with pad records;
 * and a concurrent run (writer and readers in their own threads, random
 * sizes, staged batches) where every reader checks every message's
 * number, size and contents. */
#include <check.h>
#include <errno.h>
#include <pthread.h>

#include <loco/channels/ringbuffer.h>
#include "test/common/cluster.h"
#include "test/common/skip.h"

#define SMALL 4096
#define BIG (64 * 1024)

static struct cluster cl;
static struct loco_ringbuffer rb[CL_MAX];

static void setup3(void)
{
	ck_assert_int_eq(cluster_start(&cl, 3, 0, 10000), 0);
}

static void teardown(void)
{
	cluster_stop(&cl);
}

static void rings_init(uint64_t size)
{
	for (unsigned i = 0; i < cl.n; i++)
		ck_assert_int_eq(loco_ringbuffer_init(&rb[i], cl.mgr[i], NULL, "rb",
						      0, size, 0), 0);
	ck_assert_int_eq(cluster_ready(&cl, 5000), 0);
}

static void rings_fini(void)
{
	for (unsigned i = 0; i < cl.n; i++) {
		ck_assert_int_eq(loco_fence(cl.thr[i], LOCO_FENCE_THREAD, 0), 0);
		loco_ringbuffer_fini(&rb[i]);
	}
}

/* Message N: LEN bytes, byte k = (N * 131 + k) & 0xff. */
static void fill(uint8_t *buf, uint64_t n, uint32_t len)
{
	for (uint32_t k = 0; k < len; k++)
		buf[k] = (uint8_t)(n * 131 + k);
}

static bool intact(const uint8_t *buf, uint64_t n, uint32_t len)
{
	for (uint32_t k = 0; k < len; k++)
		if (buf[k] != (uint8_t)(n * 131 + k))
			return false;
	return true;
}

/* Reader R waits for message N of LEN bytes. */
static void expect_msg(unsigned r, uint64_t n, uint32_t len)
{
	uint8_t buf[BIG];
	uint32_t got = 0;
	int rc = loco_ringbuffer_recv(&rb[r], cl.thr[r], buf, sizeof(buf), &got,
				      5000);
	ck_assert_msg(rc == 0, "reader %u, message %llu: %s", r,
		      (unsigned long long)n, loco_strerror(rc));
	ck_assert_uint_eq(got, len);
	ck_assert_msg(intact(buf, n, len), "message %llu damaged", (unsigned long long)n);
}

START_TEST(init_errors_and_roles)
{
	struct loco_ringbuffer x;
	uint32_t len;
	uint8_t buf[16];
	ck_assert_int_eq(loco_ringbuffer_init(&x, cl.mgr[0], NULL, "x", 0, 4100, 0),
			 -EINVAL);
	ck_assert_int_eq(loco_ringbuffer_init(&x, cl.mgr[0], NULL, "x", 0, 2048, 0),
			 -EINVAL);
	ck_assert_int_eq(loco_ringbuffer_init(&x, cl.mgr[0], NULL, "x", 3, SMALL, 0),
			 -EINVAL);
	ck_assert_int_eq(loco_ringbuffer_init(&x, cl.mgr[0], NULL, "x", 1, SMALL,
					      UINT64_C(1) << 2), -EINVAL);
	/* before the readers joined */
	ck_assert_int_eq(loco_ringbuffer_init(&x, cl.mgr[0], NULL, "x", 0, SMALL, 0),
			 0);
	ck_assert_int_eq(loco_ringbuffer_try_send(&x, cl.thr[0], buf, 8, 0, NULL),
			 -ENOTCONN);
	loco_ringbuffer_fini(&x);
	rings_init(SMALL);
	ck_assert_uint_eq(loco_ringbuffer_max_msg(&rb[1]), SMALL / 4 - 24);
	ck_assert_int_eq(loco_ringbuffer_try_send(&rb[1], cl.thr[1], buf, 8, 0, NULL),
			 -EPERM);
	ck_assert_int_eq(loco_ringbuffer_try_recv(&rb[0], cl.thr[0], buf, 16, &len),
			 -EPERM);
	ck_assert_int_eq(loco_ringbuffer_try_send(&rb[0], cl.thr[0], buf, 0, 0, NULL),
			 -EINVAL);
	ck_assert_int_eq(loco_ringbuffer_try_send(&rb[0], cl.thr[0], buf,
						  SMALL / 4 - 23, 0, NULL), -EINVAL);
	ck_assert_int_eq(loco_ringbuffer_try_send(&rb[0], cl.thr[0], buf, 8, 1u << 7,
						  NULL), -EINVAL);
	ck_assert_int_eq(loco_ringbuffer_try_recv(&rb[1], cl.thr[1], buf, 16, &len),
			 -EAGAIN);
	rings_fini();
}
END_TEST

START_TEST(sizes_in_order)
{
	static const uint32_t sizes[] = { 1, 7, 8, 9, 24, 100, 1000, 4096, 16000,
					  BIG / 4 - 24 };
	uint8_t buf[BIG];
	uint32_t len = 0;
	rings_init(BIG);
	for (unsigned i = 0; i < 10; i++) {
		fill(buf, i, sizes[i]);
		ck_assert_int_eq(loco_ringbuffer_send(&rb[0], cl.thr[0], buf, sizes[i],
						      LOCO_RB_PLACE, NULL, 5000), 0);
	}
	for (unsigned r = 1; r < 3; r++)
		for (unsigned i = 0; i < 10; i++)
			expect_msg(r, i, sizes[i]);
	/* nothing more; a small buffer keeps the message for a bigger one */
	ck_assert_int_eq(loco_ringbuffer_try_recv(&rb[1], cl.thr[1], buf, BIG, &len),
			 -EAGAIN);
	fill(buf, 10, 500);
	ck_assert_int_eq(loco_ringbuffer_send(&rb[0], cl.thr[0], buf, 500, 0, NULL,
					      5000), 0);
	ck_assert_int_eq(loco_ringbuffer_flush(&rb[0], cl.thr[0]), 0);
	ck_assert_int_eq(loco_ringbuffer_try_recv(&rb[2], cl.thr[2], buf, 100, &len),
			 -EMSGSIZE);
	ck_assert_uint_eq(len, 500);
	expect_msg(2, 10, 500);
	expect_msg(1, 10, 500);
	ck_assert_uint_eq(rb[1].st.msgs, 11);
	ck_assert_uint_eq(rb[0].st.msgs, 11);
	rings_fini();
}
END_TEST

/* Fill a 4 KiB ring with 1000-byte messages (1024-byte records) until
 * -EAGAIN; the readers drain and acknowledge; then it takes more. */
START_TEST(full_then_acked)
{
	uint8_t buf[1000];
	uint64_t pos = 0, last = 0;
	unsigned sent = 0;
	rings_init(SMALL);
	int rc;
	for (;;) {
		fill(buf, sent, 1000);
		rc = loco_ringbuffer_try_send(&rb[0], cl.thr[0], buf, 1000, 0, &pos);
		if (rc)
			break;
		last = pos;
		sent++;
	}
	ck_assert_int_eq(rc, -EAGAIN);
	ck_assert_uint_eq(sent, 4);
	ck_assert_uint_eq(last, 4096);
	ck_assert_uint_ge(rb[0].st.full, 1);
	ck_assert(!loco_ringbuffer_acked(&rb[0], last));
	ck_assert_int_eq(loco_ringbuffer_flush(&rb[0], cl.thr[0]), 0);
	for (unsigned r = 1; r < 3; r++) {
		for (unsigned i = 0; i < sent; i++)
			expect_msg(r, i, 1000);
		/* nothing new: the reader pushes its position */
		uint32_t len;
		ck_assert_int_eq(loco_ringbuffer_try_recv(&rb[r], cl.thr[r], buf,
							  sizeof(buf), &len), -EAGAIN);
	}
	ck_assert_int_eq(loco_ringbuffer_wait_acked(&rb[0], cl.thr[0], last, 5000),
			 0);
	fill(buf, sent, 1000);
	ck_assert_int_eq(loco_ringbuffer_try_send(&rb[0], cl.thr[0], buf, 1000, 0,
						  &pos), 0);
	ck_assert_int_eq(loco_ringbuffer_wait_acked(&rb[0], cl.thr[0], pos, 100),
			 -ETIMEDOUT);
	ck_assert_int_eq(loco_ringbuffer_send(&rb[0], cl.thr[0], buf, 1000, 0, NULL,
					      100), 0);
	ck_assert_int_eq(loco_ringbuffer_send(&rb[0], cl.thr[0], buf, 1000, 0, NULL,
					      100), 0);
	ck_assert_int_eq(loco_ringbuffer_send(&rb[0], cl.thr[0], buf, 1000, 0, NULL,
					      100), 0);
	ck_assert_int_eq(loco_ringbuffer_send(&rb[0], cl.thr[0], buf, 1000, 0, NULL,
					      100), -ETIMEDOUT);
	rings_fini();
}
END_TEST

/* 1000-byte messages take 1024 bytes, a quarter of the ring: taking the
 * second one pushes an acknowledgement, which covers the first message
 * only; the second counts once the reader acknowledges (or asks again). */
START_TEST(ack_excludes_message_just_returned)
{
	uint8_t buf[1000];
	uint64_t end[2];
	rings_init(SMALL);
	for (unsigned i = 0; i < 2; i++) {
		fill(buf, i, sizeof(buf));
		ck_assert_int_eq(loco_ringbuffer_try_send(&rb[0], cl.thr[0], buf,
							  sizeof(buf), 0, &end[i]), 0);
	}
	ck_assert_uint_eq(end[0], 1024);
	ck_assert_int_eq(loco_ringbuffer_flush(&rb[0], cl.thr[0]), 0);
	for (unsigned r = 1; r < 3; r++) {
		expect_msg(r, 0, sizeof(buf));
		ck_assert_uint_eq(rb[r].st.acks, 0);
		expect_msg(r, 1, sizeof(buf));
		ck_assert_uint_eq(rb[r].st.acks, 1);
	}
	ck_assert_int_eq(loco_ringbuffer_wait_acked(&rb[0], cl.thr[0], end[0],
						    5000), 0);
	ck_assert_int_eq(loco_ringbuffer_wait_acked(&rb[0], cl.thr[0], end[1],
						    200), -ETIMEDOUT);
	for (unsigned r = 1; r < 3; r++)
		ck_assert_int_eq(loco_ringbuffer_ack(&rb[r], cl.thr[r]), 0);
	ck_assert_int_eq(loco_ringbuffer_wait_acked(&rb[0], cl.thr[0], end[1],
						    5000), 0);
	rings_fini();
}
END_TEST

/* 300-byte records (276-byte messages) in a 4 KiB ring leave 196 bytes
 * at the end of each lap: a pad record. 200-byte messages leave 16 bytes:
 * an implicit skip. Many laps, one message at a time. */
START_TEST(wrap_many_laps)
{
	uint8_t buf[1000];
	rings_init(SMALL);
	for (unsigned i = 0; i < 500; i++) {
		uint32_t len = i % 2 ? 276 : 200;
		fill(buf, i, len);
		ck_assert_int_eq(loco_ringbuffer_send(&rb[0], cl.thr[0], buf, len,
						      LOCO_RB_PLACE, NULL, 5000), 0);
		for (unsigned r = 1; r < 3; r++)
			expect_msg(r, i, len);
	}
	rings_fini();
}
END_TEST

/* ---- concurrent ------------------------------------------------------- */

#define CONC_MSGS 20000

struct party {
	pthread_t tid;
	unsigned node;
	int err;
	unsigned long bad;
};

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void *writer_main(void *arg)
{
	struct party *p = arg;
	uint8_t buf[2048];
	uint64_t s = 88172645463325252ull;
	for (uint64_t n = 0; !p->err && n < CONC_MSGS; n++) {
		uint32_t len = 1 + (uint32_t)(rnd(&s) % 2048);
		fill(buf, n, len);
		unsigned flags = rnd(&s) % 4 ? LOCO_RB_MORE : 0;
		p->err = loco_ringbuffer_send(&rb[0], cl.thr[0], buf, len, flags,
					      NULL, 10000);
	}
	if (!p->err)
		p->err = loco_ringbuffer_flush(&rb[0], cl.thr[0]);
	return NULL;
}

static void *reader_main(void *arg)
{
	struct party *p = arg;
	uint8_t buf[2048];
	uint64_t s = 88172645463325252ull;
	for (uint64_t n = 0; !p->err && n < CONC_MSGS; n++) {
		uint32_t want = 1 + (uint32_t)(rnd(&s) % 2048), len = 0;
		rnd(&s);
		p->err = loco_ringbuffer_recv(&rb[p->node], cl.thr[p->node], buf,
					      sizeof(buf), &len, 10000);
		p->bad += !p->err && (len != want || !intact(buf, n, len));
	}
	if (!p->err)
		p->err = loco_ringbuffer_ack(&rb[p->node], cl.thr[p->node]);
	return NULL;
}

START_TEST(concurrent_random_sizes)
{
	struct party w = { .node = 0 }, r[2] = { { .node = 1 }, { .node = 2 } };
	rings_init(BIG);
	ck_assert_int_eq(pthread_create(&w.tid, NULL, writer_main, &w), 0);
	for (unsigned i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_create(&r[i].tid, NULL, reader_main, &r[i]),
				 0);
	pthread_join(w.tid, NULL);
	for (unsigned i = 0; i < 2; i++)
		pthread_join(r[i].tid, NULL);
	ck_assert_msg(w.err == 0, "writer: %s", loco_strerror(w.err));
	for (unsigned i = 0; i < 2; i++) {
		ck_assert_msg(r[i].err == 0, "reader: %s", loco_strerror(r[i].err));
		ck_assert_uint_eq(r[i].bad, 0);
		ck_assert_uint_eq(rb[i + 1].st.msgs, CONC_MSGS);
	}
	printf("concurrent: %d messages, %llu posts, ring full %llu times, "
	       "%llu + %llu incomplete records retried\n", CONC_MSGS,
	       (unsigned long long)rb[0].st.posts,
	       (unsigned long long)rb[0].st.full,
	       (unsigned long long)rb[1].st.torn,
	       (unsigned long long)rb[2].st.torn);
	rings_fini();
}
END_TEST

int main(void)
{
	if (test_transport_skip())
		return TEST_SKIP;
	Suite *s = suite_create("ringbuffer");
	TCase *tc = tcase_create("three_nodes");
	tcase_add_checked_fixture(tc, setup3, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, init_errors_and_roles);
	tcase_add_test(tc, sizes_in_order);
	tcase_add_test(tc, full_then_acked);
	tcase_add_test(tc, ack_excludes_message_just_returned);
	tcase_add_test(tc, wrap_many_laps);
	tcase_add_test(tc, concurrent_random_sizes);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
