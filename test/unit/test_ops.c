/* SPDX-License-Identifier: MIT */
/* Remote operations on a one-node cluster (ops to self go through the
 * transport like any peer): results, bounds, ack keys, batches, fences,
 * exact stats, a region's words, and a hot region falling back to the
 * arena on shm. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>

#include <loco/loco.h>
#include "test/common/cluster.h"
#include "test/common/cluster1.h"

static struct cluster1 cl;
static struct loco_thread *thr;
static struct loco_region reg;
static struct loco_rregion rr;

static void setup(void)
{
	ck_assert_int_eq(cluster1_start(&cl, "", 2000), 0);
	ck_assert_int_eq(loco_thread_create(cl.mgr, &thr), 0);
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "t.data", 4096, &reg), 0);
	loco_region_desc(cl.mgr, &reg, &rr);
}

static void teardown(void)
{
	loco_thread_destroy(thr);
	loco_region_free(cl.mgr, &reg);
	cluster1_stop(&cl);
}

START_TEST(regions)
{
	struct loco_region a, b, c;
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "x.a", 100, &a), 0);
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "x.a", 100, &b), -EEXIST);
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "x.b", 100, &b), 0);
	ck_assert_uint_eq(a.off % 64, 0);
	ck_assert_uint_eq(b.off % 64, 0);
	ck_assert(b.off >= a.off + 100 || a.off >= b.off + 100);
	memset(a.base, 0xab, 100);
	loco_region_free(cl.mgr, &a);
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "x.c", 64, &c), 0);
	for (int i = 0; i < 64; i++)
		ck_assert_int_eq(((uint8_t *)c.base)[i], 0);
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "x.huge", 1ull << 40, &a),
			 -ENOMEM);
	loco_region_free(cl.mgr, &b);
	loco_region_free(cl.mgr, &c);
}
END_TEST

/* shm has no device memory: a hot region lands in the arena (usable with
 * the CPU as any), and nothing can address device memory. */
START_TEST(hot_region_on_shm)
{
	struct loco_region h;
	uint64_t total = 1, used = 1, v = 0;
	ck_assert_int_eq(loco_region_alloc_ex(cl.mgr, "x.hot", 8, LOCO_REGION_HOT, &h), 0);
	ck_assert_uint_eq(h.space, LOCO_SPACE_ARENA);
	ck_assert_ptr_nonnull(h.base);
	ck_assert_uint_eq(h.off % 64, 0);
	loco_mgr_dm_usage(cl.mgr, &total, &used);
	ck_assert_uint_eq(total, 0);
	ck_assert_uint_eq(used, 0);
	struct loco_rregion hr;
	loco_region_desc(cl.mgr, &h, &hr);
	ck_assert_uint_eq(hr.space, LOCO_SPACE_ARENA);
	ck_assert_int_eq(loco_faa(thr, &hr, 0, 3, &v), 0);
	ck_assert_uint_eq(*(uint64_t *)h.base, 3);
	struct loco_rregion dm = { .node = 0, .space = LOCO_SPACE_DM, .len = 8 };
	ck_assert_int_eq(loco_read(thr, &dm, 0, &v, 8), -EINVAL);
	ck_assert_int_eq(loco_region_alloc_ex(cl.mgr, "x.bad", 8, 0x100, &h), -EINVAL);
	loco_region_free(cl.mgr, &h);
}
END_TEST

START_TEST(read_write_atomics)
{
	char msg[100] = "hello, network memory";
	char back[100] = "";
	uint64_t old = 0;
	ck_assert_int_eq(loco_write(thr, &rr, 8, msg, sizeof(msg)), 0);
	ck_assert_int_eq(memcmp((char *)reg.base + 8, msg, sizeof(msg)), 0);
	ck_assert_int_eq(loco_read(thr, &rr, 8, back, sizeof(back)), 0);
	ck_assert_str_eq(back, msg);

	ck_assert_int_eq(loco_faa(thr, &rr, 256, 5, &old), 0);
	ck_assert_uint_eq(old, 0);
	ck_assert_int_eq(loco_faa(thr, &rr, 256, 7, &old), 0);
	ck_assert_uint_eq(old, 5);
	ck_assert_int_eq(loco_cas(thr, &rr, 256, 11, 99, &old), 0);
	ck_assert_uint_eq(old, 12);  /* failed: value stays */
	ck_assert_int_eq(loco_cas(thr, &rr, 256, 12, 99, &old), 0);
	ck_assert_uint_eq(old, 12);
	ck_assert_uint_eq(*(uint64_t *)((char *)reg.base + 256), 99);
}
END_TEST

START_TEST(bounds)
{
	char buf[64] = { 1 };
	uint64_t old;
	memset(reg.base, 0x5a, 4096);
	ck_assert_int_eq(loco_write(thr, &rr, 4090, buf, 7), -EINVAL);
	ck_assert_int_eq(loco_write(thr, &rr, UINT64_MAX - 2, buf, 7), -EINVAL);
	ck_assert_int_eq(loco_read(thr, &rr, 4096, buf, 1), -EINVAL);
	ck_assert_int_eq(loco_faa(thr, &rr, 4, 1, &old), -EINVAL);  /* misaligned */
	ck_assert_int_eq(loco_cas(thr, &rr, 4092, 0, 1, &old), -EINVAL);
	for (int i = 0; i < 4096; i++)
		ck_assert_int_eq(((uint8_t *)reg.base)[i], 0x5a);  /* untouched */
	ck_assert_int_eq(loco_write(thr, &rr, 4089, buf, 7), 0);

	struct loco_rregion unknown = { .node = 5, .off = 64, .len = 64 };
	ck_assert_int_eq(loco_read(thr, &unknown, 0, buf, 8), -ENOTCONN);
	struct loco_rregion bad = { .node = 99, .off = 64, .len = 64 };
	ck_assert_int_eq(loco_read(thr, &bad, 0, buf, 8), -EINVAL);
	struct loco_rregion toolong = rr;
	toolong.len = 1ull << 40;  /* a forged descriptor past the arena */
	ck_assert_int_eq(loco_read(thr, &toolong, 1ull << 39, buf, 8), -EINVAL);
}
END_TEST

START_TEST(raddr_ops)
{
	uint64_t v = 42, back = 0, old = 0;
	loco_raddr_t ra = loco_raddr(0, reg.off + 512);
	struct loco_ack ack = { 0, 0 };
	ck_assert_int_eq(loco_post_write_raddr(thr, ra, &v, 8, &ack), 0);
	ck_assert_int_eq(loco_ack_wait(thr, &ack, -1), 0);
	ck_assert_int_eq(loco_post_faa_raddr(thr, ra, 1, &old, &ack), 0);
	ck_assert_int_eq(loco_post_cas_raddr(thr, ra, 43, 50, &old, &ack), 0);
	ck_assert_int_eq(loco_post_read_raddr(thr, ra, &back, 8, &ack), 0);
	ck_assert_int_eq(loco_ack_wait(thr, &ack, -1), 0);
	ck_assert_uint_eq(old, 43);
	ck_assert_uint_eq(back, 50);
	ck_assert_int_eq(loco_post_read_raddr(thr, LOCO_RADDR_NULL, &back, 8, NULL),
			 -EINVAL);
	ck_assert_int_eq(loco_post_read_raddr(thr, loco_raddr(0, 16 << 20), &back,
					      8, NULL), -EINVAL);
}
END_TEST

START_TEST(acks)
{
	uint64_t vals[8], olds[8];
	struct loco_ack a = { 0, 0 }, b = { 0, 0 }, u;
	for (int i = 0; i < 8; i++) {
		vals[i] = (uint64_t)i * 3;
		ck_assert_int_eq(loco_post_write(thr, &rr, (uint64_t)i * 8, &vals[i],
						 8, i < 4 ? &a : &b), 0);
	}
	loco_ack_clear(&u);
	loco_ack_union(&u, &a);
	loco_ack_union(&u, &b);
	ck_assert_uint_eq(u.ticket, b.ticket);
	ck_assert_uint_eq(u.peers, 1);
	ck_assert_int_eq(loco_ack_wait(thr, &u, 1000), 0);
	ck_assert_int_eq(loco_ack_test(thr, &a), 1);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(loco_post_faa(thr, &rr, (uint64_t)i * 8, 1, &olds[i],
					       &a), 0);
	ck_assert_int_eq(loco_ack_wait(thr, &a, 1000), 0);
	for (int i = 0; i < 8; i++)
		ck_assert_uint_eq(olds[i], (uint64_t)i * 3);
}
END_TEST

START_TEST(batch_one_doorbell)
{
	struct loco_stats s0, s1;
	uint64_t w = 77, r = 0, cas_old = 0, faa_old = 0;
	char big[200];
	memset(big, 'q', sizeof(big));
	struct loco_batch b;
	struct loco_ack ack = { 0, 0 };
	loco_thread_stats(thr, &s0);
	loco_batch_init(&b, thr);
	loco_batch_write(&b, &rr, 0, &w, 8);
	loco_batch_write(&b, &rr, 64, big, sizeof(big));
	loco_batch_read(&b, &rr, 0, &r, 8);
	loco_batch_cas(&b, &rr, 0, 77, 78, &cas_old);
	loco_batch_faa(&b, &rr, 0, 2, &faa_old);
	ck_assert_int_eq(loco_batch_post(&b, &ack), 0);
	ck_assert_int_eq(loco_ack_wait(thr, &ack, 1000), 0);
	loco_thread_stats(thr, &s1);
	ck_assert_uint_eq(r, 77);        /* in order: read sees the write */
	ck_assert_uint_eq(cas_old, 77);
	ck_assert_uint_eq(faa_old, 78);
	ck_assert_uint_eq(s1.doorbells - s0.doorbells, 1);
	ck_assert_uint_eq(s1.writes - s0.writes, 2);
	ck_assert_uint_eq(s1.reads - s0.reads, 1);
	ck_assert_uint_eq(s1.cas - s0.cas, 1);
	ck_assert_uint_eq(s1.faa - s0.faa, 1);
	ck_assert_uint_eq(s1.bytes_written - s0.bytes_written, 208);
	ck_assert_uint_eq(s1.bytes_read - s0.bytes_read, 8);
	ck_assert_uint_eq(s1.rtts - s0.rtts, 1);

	loco_batch_init(&b, thr);
	loco_batch_write(&b, &rr, 4095, &w, 8);  /* out of bounds */
	loco_batch_read(&b, &rr, 0, &r, 8);
	ck_assert_int_eq(loco_batch_post(&b, NULL), -EINVAL);
	loco_thread_stats(thr, &s0);
	ck_assert_uint_eq(s0.doorbells, s1.doorbells);  /* nothing posted */
	loco_batch_init(&b, thr);
	for (int i = 0; i <= LOCO_BATCH_MAX; i++)
		loco_batch_read(&b, &rr, 0, &r, 8);
	ck_assert_int_eq(loco_batch_post(&b, NULL), -E2BIG);
}
END_TEST

/* A batch of async writes, then each fence scope: after the fence every
 * write is complete; a fence READ is posted only while writes are
 * unplaced; stats count exactly what was posted. */
START_TEST(fence_scopes)
{
	static uint64_t src[16];
	struct loco_stats s0, s1;
	enum loco_fence_scope scopes[] = { LOCO_FENCE_PAIR, LOCO_FENCE_THREAD,
					   LOCO_FENCE_GLOBAL };
	for (int sc = 0; sc < 3; sc++) {
		struct loco_batch b;
		struct loco_ack ack = { 0, 0 };
		loco_thread_stats(thr, &s0);
		loco_batch_init(&b, thr);
		for (int i = 0; i < 16; i++) {
			src[i] = (uint64_t)(sc * 100 + i);
			loco_batch_write(&b, &rr, (uint64_t)i * 8, &src[i], 8);
		}
		ck_assert_int_eq(loco_batch_post(&b, &ack), 0);
		ck_assert_int_eq(loco_fence(thr, scopes[sc], 0), 0);
		ck_assert_int_eq(loco_ack_test(thr, &ack), 1);
		for (int i = 0; i < 16; i++)
			ck_assert_uint_eq(((uint64_t *)reg.base)[i], src[i]);
		loco_thread_stats(thr, &s1);
		ck_assert_uint_eq(s1.writes - s0.writes, 16);
		ck_assert_uint_eq(s1.bytes_written - s0.bytes_written, 128);
		ck_assert_uint_eq(s1.reads - s0.reads, 1);  /* the fence READ */
		ck_assert_uint_eq(s1.bytes_read - s0.bytes_read, 0);
		ck_assert_uint_eq(s1.doorbells - s0.doorbells, 2);
		ck_assert_uint_eq(s1.fences - s0.fences, 1);
		/* Nothing unplaced now: the next fence posts nothing. */
		ck_assert_int_eq(loco_fence(thr, scopes[sc], 0), 0);
		loco_thread_stats(thr, &s0);
		ck_assert_uint_eq(s0.reads, s1.reads);
	}
	ck_assert_int_eq(loco_fence(thr, LOCO_FENCE_PAIR, 64), -EINVAL);
}
END_TEST

struct other {
	struct loco_thread *thr;
	struct loco_ack ack;
	uint64_t v;
	pthread_barrier_t posted, fenced;
};

static void *other_main(void *arg)
{
	struct other *o = arg;
	loco_ack_clear(&o->ack);
	ck_assert_int_eq(loco_post_write(o->thr, &rr, 1024, &o->v, 8, &o->ack), 0);
	pthread_barrier_wait(&o->posted);
	pthread_barrier_wait(&o->fenced);
	return NULL;
}

/* A global fence covers another thread's unplaced writes. On shm a WRITE
 * is placed when posted: the fence has nothing to post for the other
 * thread (and does not touch its QPs); on shm-weak it posts a fence READ
 * on the other thread's QP. */
START_TEST(fence_global_other_thread)
{
	struct other o = { .v = 4242 };
	struct loco_stats s;
	uint64_t fence_reads = strcmp(loco_mgr_transport(cl.mgr), "shm") ? 1 : 0;
	pthread_t t;
	ck_assert_int_eq(loco_thread_create(cl.mgr, &o.thr), 0);
	pthread_barrier_init(&o.posted, NULL, 2);
	pthread_barrier_init(&o.fenced, NULL, 2);
	pthread_create(&t, NULL, other_main, &o);
	pthread_barrier_wait(&o.posted);
	ck_assert_int_eq(loco_fence(thr, LOCO_FENCE_GLOBAL, 0), 0);
	loco_thread_stats(o.thr, &s);
	ck_assert_uint_eq(s.reads, fence_reads);
	ck_assert_int_eq(loco_ack_test(o.thr, &o.ack), 1);
	ck_assert_uint_eq(((uint64_t *)reg.base)[128], 4242);
	pthread_barrier_wait(&o.fenced);
	pthread_join(t, NULL);
	loco_thread_destroy(o.thr);
	struct loco_stats all;
	loco_mgr_stats(cl.mgr, &all);
	ck_assert_uint_eq(all.writes, 1);
	/* One fence READ either way: the global fence's, or on shm the one
	 * loco_thread_destroy's thread fence posts for the other thread. */
	ck_assert_uint_eq(all.reads, 1);
}
END_TEST

START_TEST(exact_stats)
{
	struct loco_stats s;
	char buf[40] = { 0 };
	for (int i = 0; i < 25; i++)
		ck_assert_int_eq(loco_write(thr, &rr, 0, buf, sizeof(buf)), 0);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(loco_read(thr, &rr, 0, buf, 10), 0);
	loco_thread_stats(thr, &s);
	ck_assert_uint_eq(s.writes, 25);
	ck_assert_uint_eq(s.bytes_written, 1000);
	ck_assert_uint_eq(s.reads, 5);
	ck_assert_uint_eq(s.bytes_read, 50);
	ck_assert_uint_eq(s.doorbells, 30);
	ck_assert_uint_eq(s.rtts, 30);
	ck_assert_uint_eq(loco_stats_verbs(&s), 30);
}
END_TEST

/* The counters moved from A to B by exactly D (verbs, bytes, doorbells,
 * round trips, fences). */
static void stats_moved(const struct loco_stats *a, const struct loco_stats *b,
			struct loco_stats d)
{
	ck_assert_uint_eq(b->reads - a->reads, d.reads);
	ck_assert_uint_eq(b->writes - a->writes, d.writes);
	ck_assert_uint_eq(b->cas - a->cas, d.cas);
	ck_assert_uint_eq(b->faa - a->faa, d.faa);
	ck_assert_uint_eq(b->bytes_read - a->bytes_read, d.bytes_read);
	ck_assert_uint_eq(b->bytes_written - a->bytes_written, d.bytes_written);
	ck_assert_uint_eq(b->doorbells - a->doorbells, d.doorbells);
	ck_assert_uint_eq(b->rtts - a->rtts, d.rtts);
	ck_assert_uint_eq(b->fences - a->fences, d.fences);
}

/* The inline path (8-byte words and longer aligned spans on shm, once the
 * QP is open) and the out-of-line one (a misaligned READ, an odd length)
 * give the same results and count the same verbs, bytes, doorbells and
 * round trips; a WRITE leaves one fence READ to post, a READ after it
 * none. */
START_TEST(inline_path_stats)
{
	struct loco_stats s0, s1;
	uint64_t v = 11, r[4] = { 0 }, w3[3] = { 1, 2, 3 }, old = 0;
	struct loco_ack ack = { 0, 0 };
	struct loco_batch b;
	ck_assert_int_eq(loco_write(thr, &rr, 0, &v, 8), 0);  /* QP open */
	loco_thread_stats(thr, &s0);
	ck_assert_int_eq(loco_write(thr, &rr, 8, w3, 24), 0);
	ck_assert_int_eq(loco_read(thr, &rr, 0, r, 16), 0);
	ck_assert_uint_eq(r[0], 11);
	ck_assert_uint_eq(r[1], 1);
	ck_assert_int_eq(loco_read(thr, &rr, 4, r, 8), 0);     /* misaligned */
	ck_assert_int_eq(loco_read(thr, &rr, 8, r, 10), 0);    /* odd length */
	ck_assert_uint_eq(r[0], 1);
	ck_assert_int_eq(loco_cas(thr, &rr, 0, 11, 12, &old), 0);
	ck_assert_uint_eq(old, 11);
	ck_assert_int_eq(loco_post_faa(thr, &rr, 0, 3, &old, &ack), 0);
	ck_assert_int_eq(loco_post_write(thr, &rr, 16, &v, 8, &ack), 0);
	ck_assert_int_eq(loco_ack_wait(thr, &ack, 1000), 0);
	ck_assert_uint_eq(old, 12);
	loco_thread_stats(thr, &s1);
	stats_moved(&s0, &s1, (struct loco_stats){ .reads = 3, .writes = 2,
		.cas = 1, .faa = 1, .bytes_read = 34, .bytes_written = 32,
		.doorbells = 7, .rtts = 6 });
	/* The posted WRITE is the QP's last op: one fence READ. */
	ck_assert_int_eq(loco_fence(thr, LOCO_FENCE_THREAD, 0), 0);
	loco_batch_init(&b, thr);
	loco_batch_read(&b, &rr, 0, r, 32);
	loco_batch_write(&b, &rr, 24, &v, 8);
	loco_batch_read(&b, &rr, 24, &r[3], 8);
	ck_assert_int_eq(loco_batch_post(&b, &ack), 0);
	ck_assert_int_eq(loco_ack_wait(thr, &ack, 1000), 0);
	ck_assert_uint_eq(r[0], 15);
	ck_assert_uint_eq(r[3], 11);
	/* The batch ended with a READ: nothing left to place. */
	ck_assert_int_eq(loco_fence(thr, LOCO_FENCE_THREAD, 0), 0);
	loco_thread_stats(thr, &s0);
	/* One wait covered the fence READ and the batch. */
	stats_moved(&s1, &s0, (struct loco_stats){ .reads = 3, .writes = 1,
		.bytes_read = 40, .bytes_written = 8, .doorbells = 2,
		.rtts = 1, .fences = 2 });
}
END_TEST

/* A batch of ops added inline (8-byte words, 16-byte spans), and one
 * mixing them with ops added out of line (a misaligned READ, an odd
 * length), run every op in the order added with the results and
 * counters of single ops, through loco_batch_post and through
 * loco_batch_run. A batch whose add failed
 * (out of bounds, between inline adds) records no later add, executes
 * none of its ops, moves no counter, and is empty afterwards; an add
 * past LOCO_BATCH_MAX fails it with -E2BIG the same way. */
START_TEST(batch_mixed_and_errors)
{
	uint64_t *mem = reg.base;
	uint64_t one = 1, w2[2] = { 21, 22 }, rmis = 0, cas_old = 0,
		 faa_old = 0, r16[2] = { 0 };
	uint8_t odd[10] = { 0 };
	struct loco_stats s0, s1;
	struct loco_batch b;
	struct loco_ack ack = { 0, 0 };
	ck_assert_int_eq(loco_write(thr, &rr, 0, &one, 8), 0);  /* QP open */
	ck_assert_int_eq(loco_fence(thr, LOCO_FENCE_THREAD, 0), 0);
	/* Inline only (on shm), ending with a WRITE: one doorbell, one round
	 * trip however it is waited for (a second wait counts none, nor does
	 * the fence after a wait), and a fence READ left to post. */
	for (int run = 0; run < 2; run++) {
		struct loco_ack none = { 0, 0 };
		memset(mem, 0, 128);
		loco_thread_stats(thr, &s0);
		loco_batch_init(&b, thr);
		loco_batch_faa(&b, &rr, 0, 4, &faa_old);
		loco_batch_write(&b, &rr, 8, w2, 16);
		loco_batch_read(&b, &rr, 0, r16, 16);
		loco_batch_cas(&b, &rr, 0, 4, 6, &cas_old);
		loco_batch_write(&b, &rr, 24, &one, 8);
		ck_assert_int_eq(run ? loco_batch_run(&b, 1000) :
				 loco_batch_post(&b, &ack), 0);
		if (!run)
			ck_assert_int_eq(loco_ack_wait(thr, &ack, 1000), 0);
		ck_assert_int_eq(loco_ack_wait(thr, &none, 1000), 0);
		ck_assert_uint_eq(faa_old, 0);
		ck_assert_uint_eq(r16[0], 4);
		ck_assert_uint_eq(r16[1], 21);
		ck_assert_uint_eq(cas_old, 4);
		ck_assert_uint_eq(mem[0], 6);
		ck_assert_uint_eq(mem[3], 1);
		ck_assert_int_eq(loco_fence(thr, LOCO_FENCE_THREAD, 0), 0);
		loco_thread_stats(thr, &s1);
		stats_moved(&s0, &s1, (struct loco_stats){ .reads = 2,
			.writes = 2, .cas = 1, .faa = 1, .bytes_read = 16,
			.bytes_written = 24, .doorbells = 2, .rtts = 1,
			.fences = 1 });
	}
	for (int run = 0; run < 2; run++) {
		memset(mem, 0, 128);
		loco_thread_stats(thr, &s0);
		loco_batch_init(&b, thr);
		loco_batch_write(&b, &rr, 0, &one, 8);
		loco_batch_write(&b, &rr, 8, w2, 16);
		loco_batch_read(&b, &rr, 4, &rmis, 8);       /* out of line */
		loco_batch_cas(&b, &rr, 0, 1, 5, &cas_old);
		loco_batch_read(&b, &rr, 8, odd, 10);        /* out of line */
		loco_batch_faa(&b, &rr, 16, 100, &faa_old);
		loco_batch_read(&b, &rr, 0, r16, 16);
		ck_assert_uint_eq(b.n, 7);
		ck_assert_int_eq(run ? loco_batch_run(&b, 1000) :
				 loco_batch_post(&b, &ack), 0);
		ck_assert_uint_eq(b.n, 0);
		if (!run)
			ck_assert_int_eq(loco_ack_wait(thr, &ack, 1000), 0);
		loco_thread_stats(thr, &s1);
		ck_assert_uint_eq(rmis, (uint64_t)21 << 32);  /* bytes 4..11 */
		ck_assert_uint_eq(cas_old, 1);
		ck_assert_uint_eq(odd[0], 21);
		ck_assert_uint_eq(odd[8], 22);
		ck_assert_uint_eq(faa_old, 22);
		ck_assert_uint_eq(r16[0], 5);
		ck_assert_uint_eq(r16[1], 21);
		ck_assert_uint_eq(mem[2], 122);
		stats_moved(&s0, &s1, (struct loco_stats){ .reads = 3,
			.writes = 2, .cas = 1, .faa = 1, .bytes_read = 34,
			.bytes_written = 24, .doorbells = 1, .rtts = 1 });
	}

	memset(mem, 0, 128);
	for (int run = 0; run < 2; run++) {
		loco_thread_stats(thr, &s0);
		loco_batch_init(&b, thr);
		loco_batch_write(&b, &rr, 0, &one, 8);
		loco_batch_faa(&b, &rr, 8, 1, &faa_old);
		loco_batch_write(&b, &rr, 4095, &one, 8);     /* out of bounds */
		loco_batch_write(&b, &rr, 16, &one, 8);
		loco_batch_cas(&b, &rr, 24, 0, 1, &cas_old);
		ck_assert_int_eq(b.err, -EINVAL);
		ck_assert_uint_eq(b.n, 2);   /* nothing added after the error */
		ck_assert_int_eq(run ? loco_batch_run(&b, 1000) :
				 loco_batch_post(&b, NULL), -EINVAL);
		ck_assert_uint_eq(b.n, 0);
		ck_assert_int_eq(b.err, 0);
		for (int i = 0; i < 16; i++)
			ck_assert_uint_eq(mem[i], 0);
		loco_thread_stats(thr, &s1);
		stats_moved(&s0, &s1, (struct loco_stats){ 0 });
		/* Empty again: posts nothing, returns 0. */
		ck_assert_int_eq(loco_batch_post(&b, NULL), 0);
	}
	loco_thread_stats(thr, &s0);
	loco_batch_init(&b, thr);
	for (int i = 0; i <= LOCO_BATCH_MAX; i++)
		loco_batch_write(&b, &rr, 8 * (uint64_t)(i % 16), &one, 8);
	ck_assert_uint_eq(b.n, LOCO_BATCH_MAX);
	ck_assert_int_eq(loco_batch_run(&b, 1000), -E2BIG);
	for (int i = 0; i < 16; i++)
		ck_assert_uint_eq(mem[i], 0);
	loco_thread_stats(thr, &s1);
	stats_moved(&s0, &s1, (struct loco_stats){ 0 });
}
END_TEST

/* A region's words (loco_words_read) give what loco_read gives at 8 * I:
 * values, errors (past the region, an offset that overflows, forged or
 * hand-built descriptors, a region without READ access) and exactly the
 * same counters, a READ placing the WRITE posted before it. */
static void same_as_read(const struct loco_rregion *d, uint64_t i)
{
	struct loco_words w;
	uint64_t a = 0x1111, b = 0x2222;
	loco_words_init(&w, thr, d);
	int rc = loco_words_read(&w, i, &a);
	ck_assert_int_eq(rc, loco_read(thr, d, i > UINT64_MAX / 8 ? UINT64_MAX :
				       8 * i, &b, 8));
	if (rc)
		ck_assert_uint_eq(a, 0x1111);  /* untouched */
	else
		ck_assert_uint_eq(a, b);
}

START_TEST(words_read)
{
	struct loco_words w;
	struct loco_stats s0, s1, s2;
	struct loco_ack ack = { 0, 0 };
	uint64_t v = 0, x = 5;
	for (uint64_t k = 0; k < 512; k++)
		((uint64_t *)reg.base)[k] = 1000 + k;
	loco_words_init(&w, thr, &rr);
	for (uint64_t k = 0; k < 512; k += 37) {  /* the first opens the QP */
		ck_assert_int_eq(loco_words_read(&w, k, &v), 0);
		ck_assert_uint_eq(v, 1000 + k);
	}
	/* The same ops through loco_read and through the words. */
	loco_thread_stats(thr, &s0);
	for (int pass = 0; pass < 2; pass++) {
		ck_assert_int_eq(loco_post_write(thr, &rr, 16, &x, 8, &ack), 0);
		ck_assert_int_eq(pass ? loco_words_read(&w, 2, &v) :
				 loco_read(thr, &rr, 16, &v, 8), 0);
		ck_assert_uint_eq(v, 5);
		ck_assert_int_eq(loco_ack_wait(thr, &ack, 1000), 0);
		ck_assert_int_eq(pass ? loco_words_read(&w, 3, &v) :
				 loco_read(thr, &rr, 24, &v, 8), 0);
		ck_assert_uint_eq(v, 1003);
		/* The READ placed the WRITE: the fence has nothing to post. */
		ck_assert_int_eq(loco_fence(thr, LOCO_FENCE_THREAD, 0), 0);
		loco_thread_stats(thr, pass ? &s2 : &s1);
	}
	stats_moved(&s0, &s1, (struct loco_stats){ .reads = 2, .writes = 1,
		.bytes_read = 16, .bytes_written = 8, .doorbells = 3,
		.rtts = 2, .fences = 1 });
	stats_moved(&s1, &s2, (struct loco_stats){ .reads = 2, .writes = 1,
		.bytes_read = 16, .bytes_written = 8, .doorbells = 3,
		.rtts = 2, .fences = 1 });

	same_as_read(&rr, 511);
	same_as_read(&rr, 512);                 /* past the region */
	same_as_read(&rr, UINT64_MAX / 8);
	same_as_read(&rr, UINT64_MAX / 8 + 1);  /* 8 * I overflows */
	same_as_read(&rr, UINT64_MAX);
	struct loco_region r100, wo;
	struct loco_rregion d100, dwo;
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "t.r100", 100, &r100), 0);
	loco_region_desc(cl.mgr, &r100, &d100);
	same_as_read(&d100, 11);
	same_as_read(&d100, 12);                /* bytes 96..103 of 100 */
	ck_assert_int_eq(loco_region_alloc_ex(cl.mgr, "t.wo", 64,
					      LOCO_REGION_REMOTE_WRITE, &wo), 0);
	loco_region_desc(cl.mgr, &wo, &dwo);
	same_as_read(&dwo, 0);                  /* no READ access */
	struct loco_rregion d = rr;
	d.access = 0;                           /* built by hand */
	same_as_read(&d, 5);
	d = rr;
	d.off += 4;                             /* misaligned */
	d.len -= 4;
	same_as_read(&d, 5);
	d = rr;
	d.len = 1ull << 40;                     /* forged, past the arena */
	same_as_read(&d, 1ull << 36);
	same_as_read(&d, 5);
	d.node = 99;                            /* no such node */
	same_as_read(&d, 0);
	d.node = 5;                             /* not in the cluster */
	same_as_read(&d, 0);
	loco_region_free(cl.mgr, &r100);
	loco_region_free(cl.mgr, &wo);
}
END_TEST

START_TEST(arena_file_private)
{
	struct stat st;
	char path[128];
	ck_assert_int_eq(stat(cl.run_dir, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0700);
	snprintf(path, sizeof(path), "%s/node0.arena", cl.run_dir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
}
END_TEST

START_TEST(wait_ready_without_channels)
{
	ck_assert_int_eq(loco_mgr_wait_ready(cl.mgr, 100), 0);
	ck_assert_int_eq(loco_mgr_first_memnode(cl.mgr), -ENOENT);
	ck_assert_uint_eq(loco_mgr_compute_peers(cl.mgr), 0);
}
END_TEST

/* shm-weak with a 1 s round trip and a 100 ms op timeout: a synchronous
 * op gives up long before the emulated NIC would execute it. */
static void setup_slow(void)
{
	setenv("LOCO_TRANSPORT", "shm-weak", 1);
	setenv("LOCO_SHM_WEAK_RTT_NS", "1000000000", 1);
	ck_assert_int_eq(cluster1_start(&cl, "", 100), 0);
	ck_assert_int_eq(loco_thread_create(cl.mgr, &thr), 0);
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "t.data", 4096, &reg), 0);
	loco_region_desc(cl.mgr, &reg, &rr);
}

static void teardown_slow(void)
{
	teardown();
	unsetenv("LOCO_TRANSPORT");
	unsetenv("LOCO_SHM_WEAK_RTT_NS");
}

/* A timed-out synchronous op never writes the caller's buffer later, and
 * the thread's QP to that peer is in the error state; another thread's
 * QP is not. */
START_TEST(sync_timeout_abandons_op)
{
	uint8_t *back = malloc(64);
	uint64_t old = 7;
	memset(reg.base, 0x11, 64);
	memset(back, 0x5a, 64);
	ck_assert_int_eq(loco_read(thr, &rr, 0, back, 64), -ETIMEDOUT);
	usleep(1200 * 1000);  /* the NIC would have executed it by now */
	for (int i = 0; i < 64; i++)
		ck_assert_uint_eq(back[i], 0x5a);
	ck_assert_int_eq(loco_cas(thr, &rr, 0, 0x1111111111111111ull, 3, &old),
			 -ETIMEDOUT);
	ck_assert_uint_eq(old, 7);
	ck_assert_uint_eq(*(uint64_t *)reg.base, 0x1111111111111111ull);

	struct loco_thread *t2;
	struct loco_ack ack = { 0, 0 };
	ck_assert_int_eq(loco_thread_create(cl.mgr, &t2), 0);
	ck_assert_int_eq(loco_post_read(t2, &rr, 0, back, 64, &ack), 0);
	ck_assert_int_eq(loco_ack_wait(t2, &ack, 5000), 0);
	for (int i = 0; i < 64; i++)
		ck_assert_uint_eq(back[i], 0x11);
	ck_assert_int_eq(loco_thread_destroy(t2), 0);
	free(back);
}
END_TEST

/* loco_thread_destroy reports what its remote work met: a WRITE the slow
 * NIC does not complete within the timeout (-ETIMEDOUT), and a QP failed
 * by an earlier timed-out synchronous op; a thread with nothing
 * outstanding, 0. */
START_TEST(destroy_reports_remote_failure)
{
	static uint64_t src = 42;  /* the NIC may read it after the destroy */
	uint64_t v;
	struct loco_thread *t;
	ck_assert_int_eq(loco_thread_create(cl.mgr, &t), 0);
	ck_assert_int_eq(loco_post_write(t, &rr, 512, &src, 8, NULL), 0);
	ck_assert_int_eq(loco_thread_destroy(t), -ETIMEDOUT);
	ck_assert_int_eq(loco_thread_create(cl.mgr, &t), 0);
	ck_assert_int_eq(loco_read(t, &rr, 0, &v, 8), -ETIMEDOUT);
	ck_assert_int_eq(loco_thread_destroy(t), -ETIMEDOUT);
	ck_assert_int_eq(loco_thread_create(cl.mgr, &t), 0);
	ck_assert_int_eq(loco_thread_destroy(t), 0);
	ck_assert_int_eq(loco_thread_destroy(NULL), 0);
	usleep(1200 * 1000);  /* let the emulated NIC finish with SRC */
}
END_TEST

/* A synchronous READ places its QP's WRITEs and is a wait, whatever left
 * them: after it, a fence posts no fence READ to its peer and a wait
 * counts no round trip. Each case starts from a thread with nothing
 * unplaced or unwaited, leaves something behind with one kind of op (the
 * inline and out-of-line posts, batches run or posted, to one peer or
 * two), READs each peer it wrote and checks that nothing is left: every
 * path that leaves work marks it for the READ's one test. */
struct two_peers {
	struct cluster c;
	struct loco_thread *t;
	struct loco_rregion r[2];
};

/* What a wait and a thread fence find left to do: the round trips the
 * wait counts, and the fence READs the fence posts. */
static void left(struct two_peers *p, uint64_t *rtts, uint64_t *reads)
{
	struct loco_stats s0, s1, s2;
	struct loco_ack none = { 0, 0 };
	loco_thread_stats(p->t, &s0);
	ck_assert_int_eq(loco_ack_wait(p->t, &none, 1000), 0);
	loco_thread_stats(p->t, &s1);
	ck_assert_int_eq(loco_fence(p->t, LOCO_FENCE_THREAD, 0), 0);
	loco_thread_stats(p->t, &s2);
	*rtts = s1.rtts - s0.rtts;
	*reads = s2.reads - s1.reads;
}

/* Nothing is left: a wait counts no round trip, a fence posts nothing. */
static void nothing_left(struct two_peers *p)
{
	uint64_t rtts, reads;
	left(p, &rtts, &reads);
	ck_assert_uint_eq(rtts, 0);
	ck_assert_uint_eq(reads, 0);
}

/* READ word 0 of peer I's region inline (through a struct loco_words
 * when WORDS) and check it. */
static void read_peer(struct two_peers *p, unsigned i, bool words, uint64_t want)
{
	uint64_t v = 0;
	struct loco_words w;
	loco_words_init(&w, p->t, &p->r[i]);
	ck_assert_int_eq(words ? loco_words_read(&w, 0, &v) :
			 loco_read(p->t, &p->r[i], 0, &v, 8), 0);
	ck_assert_uint_eq(v, want);
}

enum leave { INLINE_WRITE, INLINE_POST_CAS, POST_ODD_WRITE, POST_MISALIGNED,
	     BATCH_RUN_WRITE, BATCH_POST_READ, BATCH_RUN_TWO, LEAVE_N };

/* Leave work with op kind K: a WRITE or CAS stores a new value V into
 * word 0 of the regions it writes (WANT[i]: word 0 of region i). */
static void leave(struct two_peers *p, enum leave k, uint64_t v,
		  uint64_t want[2])
{
	static uint64_t src[2], old, odd[2], r;
	struct loco_ack ack = { 0, 0 };
	struct loco_batch b;
	src[0] = src[1] = odd[0] = v;
	odd[1] = 0;
	loco_batch_init(&b, p->t);
	switch (k) {
	case INLINE_WRITE:
		ck_assert_int_eq(loco_write(p->t, &p->r[0], 0, src, 8), 0);
		break;
	case INLINE_POST_CAS:
		ck_assert_int_eq(loco_post_cas(p->t, &p->r[0], 0, want[0], v,
					       &old, &ack), 0);
		break;
	case POST_ODD_WRITE:   /* out of line: 12 bytes */
		ck_assert_int_eq(loco_post_write(p->t, &p->r[0], 0, odd, 12,
						 &ack), 0);
		break;
	case POST_MISALIGNED:  /* out of line, only unwaited */
		ck_assert_int_eq(loco_post_read(p->t, &p->r[0], 4, &r, 8,
						&ack), 0);
		return;
	case BATCH_RUN_WRITE:
		loco_batch_write(&b, &p->r[0], 0, src, 8);
		ck_assert_int_eq(loco_batch_run(&b, 1000), 0);
		break;
	case BATCH_POST_READ:  /* only unwaited */
		loco_batch_read(&b, &p->r[0], 8, &r, 8);
		ck_assert_int_eq(loco_batch_post(&b, &ack), 0);
		return;
	default:               /* two peers, each left with a WRITE */
		loco_batch_write(&b, &p->r[0], 0, &src[0], 8);
		loco_batch_write(&b, &p->r[1], 0, &src[1], 8);
		ck_assert_int_eq(loco_batch_run(&b, 1000), 0);
		want[1] = v;
		break;
	}
	want[0] = v;
}

START_TEST(read_places_and_waits)
{
	struct two_peers p;
	uint64_t v = 0, want[2] = { 0, 0 };
	ck_assert_int_eq(cluster_start(&p.c, 2, 0, 2000), 0);
	ck_assert_int_eq(cluster_ready(&p.c, 3000), 0);
	p.t = p.c.thr[0];
	ck_assert_int_eq(loco_region_open(p.c.mgr[0], 0, "pw.a", 64, &p.r[0]), 0);
	ck_assert_int_eq(loco_region_open(p.c.mgr[0], 1, "pw.b", 64, &p.r[1]), 0);
	for (unsigned i = 0; i < 2; i++)  /* QPs open, both words 0 */
		ck_assert_int_eq(loco_write(p.t, &p.r[i], 0, &v, 8), 0);
	for (int k = 0; k < LEAVE_N; k++) {
		for (int words = 0; words < 2; words++) {
			read_peer(&p, 0, false, want[0]);
			read_peer(&p, 1, false, want[1]);
			nothing_left(&p);  /* a clean start */
			leave(&p, (enum leave)k, ++v, want);
			read_peer(&p, 0, words, want[0]);
			if (k == BATCH_RUN_TWO)
				read_peer(&p, 1, words, want[1]);
			nothing_left(&p);
		}
	}
	/* Two peers left unplaced: a READ of one leaves the other's. */
	ck_assert_int_eq(loco_write(p.t, &p.r[1], 0, &v, 8), 0);
	ck_assert_int_eq(loco_write(p.t, &p.r[0], 0, &v, 8), 0);
	read_peer(&p, 0, true, v);
	uint64_t rtts, reads;
	left(&p, &rtts, &reads);
	ck_assert_uint_eq(rtts, 0);
	ck_assert_uint_eq(reads, 1);
	ck_assert_int_eq(loco_write(p.t, &p.r[1], 0, &v, 8), 0);
	ck_assert_int_eq(loco_write(p.t, &p.r[0], 0, &v, 8), 0);
	read_peer(&p, 0, true, v);
	read_peer(&p, 1, true, v);
	nothing_left(&p);
	cluster_stop(&p.c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ops");
	TCase *tc = tcase_create("one-node");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, regions);
	tcase_add_test(tc, hot_region_on_shm);
	tcase_add_test(tc, read_write_atomics);
	tcase_add_test(tc, bounds);
	tcase_add_test(tc, raddr_ops);
	tcase_add_test(tc, acks);
	tcase_add_test(tc, batch_one_doorbell);
	tcase_add_test(tc, fence_scopes);
	tcase_add_test(tc, fence_global_other_thread);
	tcase_add_test(tc, exact_stats);
	tcase_add_test(tc, inline_path_stats);
	tcase_add_test(tc, batch_mixed_and_errors);
	tcase_add_test(tc, words_read);
	tcase_add_test(tc, arena_file_private);
	tcase_add_test(tc, wait_ready_without_channels);
	suite_add_tcase(s, tc);
	tc = tcase_create("two-node");
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, read_places_and_waits);
	suite_add_tcase(s, tc);
	tc = tcase_create("slow-nic");
	tcase_add_checked_fixture(tc, setup_slow, teardown_slow);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, sync_timeout_abandons_op);
	tcase_add_test(tc, destroy_reports_remote_failure);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
