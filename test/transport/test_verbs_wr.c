/* SPDX-License-Identifier: MIT */
/* verbs transport without a device, its data path: the access flags of a
 * region's registration, the work-request chain (one doorbell,
 * signalling, each request's own region rkey, the fence target for
 * zero-length READs and FLUSH, bounce buffers for local buffers outside
 * the arena, device memory, bad requests) and completion retirement (in
 * post order, errors on signalled and unsignalled requests, partial posts,
 * the sequence wrapping, the wc-status mapping, a refused access). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include <loco/error.h>
#include "loco/transport/verbs_wr.h"

/* ---- work requests ------------------------------------------------------ */

#define REMOTE_ADDR UINT64_C(0x100000)
#define REMOTE_LEN (UINT64_C(1) << 20)
#define FENCE_RKEY 0x22u   /* the peer arena's fence registration */

static _Alignas(64) uint8_t arena[4096];
static _Alignas(64) uint8_t bounce[256];
static struct verbs_sq sq;
static struct ibv_send_wr swr[VERBS_SQ_DEPTH];
static struct ibv_sge sge[VERBS_SQ_DEPTH];

static void sq_setup(void)
{
	verbs_sq_init(&sq, VERBS_SQ_DEPTH, 64, 4, 5, true);
	sq.arena = (struct verbs_lmr){ (uintptr_t)arena, (uintptr_t)arena + sizeof(arena), 0x11 };
	sq.remote = (struct verbs_rmr){ REMOTE_ADDR, REMOTE_LEN, FENCE_RKEY };
	sq.remote_dm = (struct verbs_rmr){ 0, 0, 0 };
	sq.bounce = (struct verbs_bounce){ .buf = bounce, .cap = sizeof(bounce), .lkey = 0x33 };
	memset(swr, 0xa5, sizeof(swr)); /* garbage the builder must overwrite */
	memset(sge, 0xa5, sizeof(sge));
}

/* A request to the arena region whose rkey is 0x7000 + ID. */
static struct loco_wr wr_make(uint8_t op, uint8_t sig, uint32_t len, uint64_t off,
			      void *local, uint64_t id)
{
	return (struct loco_wr){ .opcode = op, .signaled = sig, .len = len,
				 .remote_off = off, .local = local, .wr_id = id,
				 .key = 0x7000 + (uint32_t)id };
}

/* What each region's registration grants: exactly its access, local
 * write where the verbs require it, atomics only on a NIC with them. */
START_TEST(mr_access_flags)
{
	const unsigned R = LOCO_REGION_REMOTE_READ, W = LOCO_REGION_REMOTE_WRITE,
		       A = LOCO_REGION_REMOTE_ATOMIC;
	const int LW = IBV_ACCESS_LOCAL_WRITE;
	ck_assert_int_eq(verbs_mr_access(0, true), 0);
	ck_assert_int_eq(verbs_mr_access(R, true), IBV_ACCESS_REMOTE_READ);
	ck_assert_int_eq(verbs_mr_access(W, true), IBV_ACCESS_REMOTE_WRITE | LW);
	ck_assert_int_eq(verbs_mr_access(A, true), IBV_ACCESS_REMOTE_ATOMIC | LW);
	ck_assert_int_eq(verbs_mr_access(R | A, true),
			 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | LW);
	ck_assert_int_eq(verbs_mr_access(LOCO_REGION_REMOTE_ALL, true),
			 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
			 IBV_ACCESS_REMOTE_ATOMIC | LW);
	/* Without RDMA atomics the NIC cannot grant them (CAS and FAA to
	 * such a node are refused at the sender: -EOPNOTSUPP). */
	ck_assert_int_eq(verbs_mr_access(R | A, false), IBV_ACCESS_REMOTE_READ);
	ck_assert_int_eq(verbs_mr_access(A, false), 0);
}
END_TEST

static int build_commit(const struct loco_wr *w, unsigned n)
{
	uint64_t bh;
	int r = verbs_sq_build(&sq, w, n, swr, sge, &bh);
	if (r == 0)
		verbs_sq_commit(&sq, n, bh);
	return r;
}

START_TEST(wr_chain_batch)
{
	sq_setup();
	uint64_t small = 0x1122334455667788, faa_res = 0;
	struct loco_wr w[6] = {
		wr_make(LOCO_OP_WRITE, 0, 8, 64, &small, 100),             /* inline */
		wr_make(LOCO_OP_WRITE, 1, 128, 128, arena + 256, 101),     /* arena lkey */
		wr_make(LOCO_OP_READ, 0, 0, 4096, NULL, 102),              /* fence READ */
		wr_make(LOCO_OP_CAS, 0, 8, 512, arena + 8, 103),           /* arena */
		wr_make(LOCO_OP_FAA, 1, 8, 520, &faa_res, 104),            /* bounce */
		wr_make(LOCO_OP_READ, 0, 64, 4096, arena + 1024, 105),
	};
	w[3].compare = 7;
	w[3].operand = 9;
	w[4].operand = 3;
	uint64_t bh;
	ck_assert_int_eq(verbs_sq_build(&sq, w, 6, swr, sge, &bh), 0);
	ck_assert_uint_eq(sq.head, 0); /* nothing committed yet */

	/* One chain of exactly six, in order. */
	unsigned count = 0;
	for (struct ibv_send_wr *p = &swr[0]; p; p = p->next, count++)
		ck_assert_ptr_eq(p, &swr[count]);
	ck_assert_uint_eq(count, 6);

	/* Exactly the requested completions are signalled; only the small
	 * WRITE is inline. */
	const unsigned flags[6] = { IBV_SEND_INLINE, IBV_SEND_SIGNALED, 0, 0,
				    IBV_SEND_SIGNALED, 0 };
	const int ops[6] = { IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ,
			     IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
			     IBV_WR_RDMA_READ };
	for (unsigned i = 0; i < 6; i++) {
		ck_assert_uint_eq(swr[i].send_flags, flags[i]);
		ck_assert_int_eq(swr[i].opcode, ops[i]);
		ck_assert_uint_eq(swr[i].wr_id, (UINT64_C(5) << 56) | i);
	}
	/* Remote side: each request its region's rkey; the zero-length READ
	 * goes to the fence target (offset 0, the fence rkey) whatever it
	 * named. */
	ck_assert_uint_eq(swr[0].wr.rdma.remote_addr, REMOTE_ADDR + 64);
	ck_assert_uint_eq(swr[0].wr.rdma.rkey, 0x7000 + 100);
	ck_assert_uint_eq(swr[1].wr.rdma.rkey, 0x7000 + 101);
	ck_assert_uint_eq(swr[2].wr.rdma.remote_addr, REMOTE_ADDR);
	ck_assert_uint_eq(swr[2].wr.rdma.rkey, FENCE_RKEY);
	ck_assert_uint_eq(swr[3].wr.atomic.remote_addr, REMOTE_ADDR + 512);
	ck_assert_uint_eq(swr[3].wr.atomic.compare_add, 7);
	ck_assert_uint_eq(swr[3].wr.atomic.swap, 9);
	ck_assert_uint_eq(swr[3].wr.atomic.rkey, 0x7000 + 103);
	ck_assert_uint_eq(swr[4].wr.atomic.compare_add, 3);
	ck_assert_uint_eq(swr[4].wr.atomic.rkey, 0x7000 + 104);
	ck_assert_uint_eq(swr[5].wr.rdma.rkey, 0x7000 + 105);
	/* Local side. */
	ck_assert_int_eq(swr[0].num_sge, 1);
	ck_assert_uint_eq(sge[0].addr, (uintptr_t)&small);
	ck_assert_uint_eq(sge[0].length, 8);
	ck_assert_uint_eq(sge[1].lkey, 0x11);
	ck_assert_uint_eq(sge[1].addr, (uintptr_t)(arena + 256));
	ck_assert_int_eq(swr[2].num_sge, 0);        /* zero-length READ */
	ck_assert_ptr_null(swr[2].sg_list);
	ck_assert_uint_eq(sge[3].lkey, 0x11);
	ck_assert_uint_eq(sge[4].lkey, 0x33);       /* result via bounce */
	ck_assert_uint_eq(sge[4].addr, (uintptr_t)bounce);
	ck_assert_uint_eq(sge[4].length, 8);
	ck_assert_uint_eq(sge[5].lkey, 0x11);

	verbs_sq_commit(&sq, 6, bh);
	ck_assert_uint_eq(sq.head, 6);
	ck_assert_uint_eq(verbs_sq_free(&sq), VERBS_SQ_DEPTH - 6);
}
END_TEST

START_TEST(wr_single_and_unsignaled)
{
	sq_setup();
	struct loco_wr w = wr_make(LOCO_OP_READ, 1, 16, 0, arena, 1);
	ck_assert_int_eq(build_commit(&w, 1), 0);
	ck_assert_ptr_null(swr[0].next);
	ck_assert_uint_eq(swr[0].send_flags, IBV_SEND_SIGNALED);
	struct loco_wr u[3] = { wr_make(LOCO_OP_READ, 0, 8, 0, arena, 2),
				wr_make(LOCO_OP_READ, 0, 8, 8, arena, 3),
				wr_make(LOCO_OP_READ, 0, 8, 16, arena, 4) };
	ck_assert_int_eq(build_commit(u, 3), 0);
	for (unsigned i = 0; i < 3; i++)
		ck_assert_uint_eq(swr[i].send_flags, 0);
	ck_assert_uint_eq(swr[0].wr_id, (UINT64_C(5) << 56) | 1);
}
END_TEST

START_TEST(wr_bounce_write_copies_source)
{
	sq_setup();
	uint8_t src[100];
	for (unsigned i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)i;
	struct loco_wr w = wr_make(LOCO_OP_WRITE, 1, sizeof(src), 0, src, 9);
	ck_assert_int_eq(build_commit(&w, 1), 0);
	ck_assert_uint_eq(swr[0].send_flags, IBV_SEND_SIGNALED); /* > max_inline */
	ck_assert_uint_eq(sge[0].lkey, 0x33);
	ck_assert_int_eq(memcmp((void *)(uintptr_t)sge[0].addr, src, sizeof(src)), 0);
	memset(src, 0, sizeof(src)); /* caller may reuse its buffer at once */
	ck_assert_uint_eq(((uint8_t *)(uintptr_t)sge[0].addr)[99], 99);
}
END_TEST

START_TEST(wr_bounce_read_copied_at_completion)
{
	sq_setup();
	uint8_t dst[40] = { 0 };
	uint64_t old = 0;
	struct loco_wr w[2] = { wr_make(LOCO_OP_READ, 0, sizeof(dst), 0, dst, 1),
				wr_make(LOCO_OP_CAS, 1, 8, 64, &old, 2) };
	ck_assert_int_eq(build_commit(w, 2), 0);
	memset((void *)(uintptr_t)sge[0].addr, 0x5a, sizeof(dst)); /* the "NIC" */
	uint64_t v = 42;
	memcpy((void *)(uintptr_t)sge[1].addr, &v, 8);
	ck_assert_uint_eq(dst[0], 0);           /* nothing before the completion */
	ck_assert(verbs_sq_mark(&sq, swr[1].wr_id, 0));
	struct loco_cqe c[4];
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 4), 1);
	ck_assert_uint_eq(c[0].wr_id, 2);
	ck_assert_int_eq(c[0].status, 0);
	ck_assert_uint_eq(c[0].peer, 4);
	ck_assert_uint_eq(dst[0], 0x5a);        /* unsignalled READ retired too */
	ck_assert_uint_eq(dst[39], 0x5a);
	ck_assert_uint_eq(old, 42);
	ck_assert_uint_eq(sq.bounce.tail, sq.bounce.head);
}
END_TEST

START_TEST(wr_atomic_unaligned_local_bounces)
{
	sq_setup();
	struct loco_wr w = wr_make(LOCO_OP_FAA, 1, 8, 0, arena + 4, 1);
	ck_assert_int_eq(build_commit(&w, 1), 0);
	ck_assert_uint_eq(sge[0].lkey, 0x33);
}
END_TEST

START_TEST(wr_bounce_full_is_all_or_nothing)
{
	sq_setup();
	uint8_t a[200], b[200], big[300];
	struct loco_wr w[2] = { wr_make(LOCO_OP_READ, 0, 200, 0, a, 1),
				wr_make(LOCO_OP_READ, 1, 200, 256, b, 2) };
	uint64_t bh;
	/* Together they never fit, even in the empty buffer. */
	ck_assert_int_eq(verbs_sq_build(&sq, w, 2, swr, sge, &bh), -EMSGSIZE);
	ck_assert_uint_eq(sq.head, 0);
	ck_assert_uint_eq(sq.bounce.head, 0);
	ck_assert_int_eq(build_commit(&w[0], 1), 0);
	ck_assert_int_eq(verbs_sq_build(&sq, &w[1], 1, swr, sge, &bh), -EAGAIN);
	struct loco_wr huge = wr_make(LOCO_OP_READ, 1, sizeof(big), 0, big, 3);
	ck_assert_int_eq(verbs_sq_build(&sq, &huge, 1, swr, sge, &bh), -EMSGSIZE);
	/* Retiring the first frees its bounce space; the second wraps to 0. */
	ck_assert(verbs_sq_mark(&sq, verbs_wrid_make(5, 0), 0));
	struct loco_cqe c[1];
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 1), 0); /* unsignalled: no report */
	ck_assert_int_eq(build_commit(&w[1], 1), 0);
	ck_assert_uint_eq(sge[0].addr, (uintptr_t)bounce);
}
END_TEST

/* Requests in device memory target their region's zero-based MR: address
 * = offset from the region's start (KEY_OFF), the region's rkey, bounds of
 * the DM; a batch may mix both spaces. */
START_TEST(wr_device_memory)
{
	sq_setup();
	sq.remote_dm = (struct verbs_rmr){ 0, 256, 0 };
	uint64_t res = 0, bh;
	struct loco_wr w[3] = {
		wr_make(LOCO_OP_FAA, 0, 8, 16, &res, 1),
		wr_make(LOCO_OP_WRITE, 0, 8, 64, arena, 2),
		wr_make(LOCO_OP_READ, 1, 16, 240, arena + 64, 3),
	};
	w[0].space = LOCO_SPACE_DM;
	w[0].operand = 1;
	w[0].key = 0x44;
	w[0].key_off = 16;         /* the region starts at DM offset 16 */
	w[2].space = LOCO_SPACE_DM;
	w[2].key = 0x45;
	w[2].key_off = 224;
	ck_assert_int_eq(verbs_sq_build(&sq, w, 3, swr, sge, &bh), 0);
	ck_assert_int_eq(swr[0].opcode, IBV_WR_ATOMIC_FETCH_AND_ADD);
	ck_assert_uint_eq(swr[0].wr.atomic.remote_addr, 0);
	ck_assert_uint_eq(swr[0].wr.atomic.rkey, 0x44);
	ck_assert_uint_eq(swr[1].wr.rdma.remote_addr, REMOTE_ADDR + 64); /* arena */
	ck_assert_uint_eq(swr[1].wr.rdma.rkey, 0x7000 + 2);
	ck_assert_uint_eq(swr[2].wr.rdma.remote_addr, 16);
	ck_assert_uint_eq(swr[2].wr.rdma.rkey, 0x45);
	verbs_sq_commit(&sq, 3, bh);

	struct loco_wr bad[] = {
		wr_make(LOCO_OP_READ, 1, 16, 248, arena, 9),  /* past the DM's end */
		wr_make(LOCO_OP_READ, 1, 8, 256, arena, 9),
		wr_make(LOCO_OP_READ, 1, 8, 0, arena, 9),     /* unknown space */
		wr_make(LOCO_OP_READ, 1, 8, 8, arena, 9),     /* before its region */
	};
	bad[0].space = bad[1].space = bad[3].space = LOCO_SPACE_DM;
	bad[2].space = 7;
	bad[3].key_off = 16;
	for (unsigned i = 0; i < 4; i++)
		ck_assert_int_eq(verbs_sq_build(&sq, &bad[i], 1, swr, sge, &bh), -EINVAL);
	/* A peer without device memory: every DM request is out of bounds. */
	sq.remote_dm = (struct verbs_rmr){ 0, 0, 0 };
	struct loco_wr one = wr_make(LOCO_OP_CAS, 1, 8, 0, &res, 9);
	one.space = LOCO_SPACE_DM;
	ck_assert_int_eq(verbs_sq_build(&sq, &one, 1, swr, sge, &bh), -EINVAL);
	ck_assert_uint_eq(sq.head, 3);
}
END_TEST

/* A FLUSH is a READ of 8 bytes of the fence target after the QP's
 * WRITEs (the range's own region may grant no READ), into the bounce
 * buffer, discarded. */
START_TEST(wr_flush_reads_the_fence)
{
	sq_setup();
	uint64_t bh;
	struct loco_wr f = { .opcode = LOCO_OP_FLUSH, .signaled = 1, .len = 4096,
			     .remote_off = 8192, .wr_id = 7 };
	ck_assert_int_eq(verbs_sq_build(&sq, &f, 1, swr, sge, &bh), 0);
	ck_assert_int_eq(swr[0].opcode, IBV_WR_RDMA_READ);
	ck_assert_uint_eq(swr[0].wr.rdma.remote_addr, REMOTE_ADDR);
	ck_assert_uint_eq(swr[0].wr.rdma.rkey, FENCE_RKEY);
	ck_assert_uint_eq(sge[0].length, 8);
	ck_assert_uint_eq(sge[0].lkey, 0x33);
	/* The range is still checked against the peer's arena. */
	f.remote_off = REMOTE_LEN - 8;
	ck_assert_int_eq(verbs_sq_build(&sq, &f, 1, swr, sge, &bh), -EINVAL);
}
END_TEST

START_TEST(wr_invalid)
{
	sq_setup();
	uint64_t x;
	uint64_t bh;
	struct loco_wr bad[] = {
		wr_make(LOCO_OP_READ, 1, 16, REMOTE_LEN - 8, arena, 1), /* past the end */
		wr_make(LOCO_OP_WRITE, 1, 8, UINT64_MAX, arena, 1),     /* overflow */
		wr_make(LOCO_OP_CAS, 1, 4, 0, &x, 1),                   /* atomic size */
		wr_make(LOCO_OP_FAA, 1, 8, 12, &x, 1),                  /* misaligned */
		wr_make(9, 1, 8, 0, &x, 1),                             /* opcode */
		wr_make(LOCO_OP_READ, 1, 8, 0, NULL, 1),                /* no buffer */
	};
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_int_eq(verbs_sq_build(&sq, &bad[i], 1, swr, sge, &bh), -EINVAL);
	struct loco_wr edge = wr_make(LOCO_OP_READ, 1, 0, REMOTE_LEN, NULL, 1);
	ck_assert_int_eq(verbs_sq_build(&sq, &edge, 1, swr, sge, &bh), 0);
	sq.atomics = false;
	struct loco_wr cas = wr_make(LOCO_OP_CAS, 1, 8, 0, &x, 1);
	ck_assert_int_eq(verbs_sq_build(&sq, &cas, 1, swr, sge, &bh), -EOPNOTSUPP);
	ck_assert_uint_eq(sq.head, 0);
}
END_TEST

/* ---- completions -------------------------------------------------------- */

/* Post four READs from the arena, signalled as SIG says. */
static void post4(const uint8_t sig[4])
{
	struct loco_wr w[4];
	for (unsigned i = 0; i < 4; i++)
		w[i] = wr_make(LOCO_OP_READ, sig[i], 8, 8 * i, arena + 8 * i, 10 + i);
	ck_assert_int_eq(build_commit(w, 4), 0);
}

START_TEST(cq_in_order)
{
	sq_setup();
	static const uint8_t sig[4] = { 0, 1, 0, 1 };
	struct loco_cqe c[4];
	post4(sig);
	ck_assert(verbs_sq_mark(&sq, verbs_wrid_make(5, 1), 0));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 4), 1);
	ck_assert_uint_eq(c[0].wr_id, 11);
	ck_assert_uint_eq(sq.tail, 2);
	ck_assert(!verbs_sq_mark(&sq, verbs_wrid_make(5, 0), 0)); /* stale */
	ck_assert(!verbs_sq_mark(&sq, verbs_wrid_make(5, 9), 0)); /* never posted */
	ck_assert(verbs_sq_mark(&sq, verbs_wrid_make(5, 3), 0));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 4), 1);
	ck_assert_uint_eq(c[0].wr_id, 13);
	ck_assert(!verbs_sq_pending(&sq));
	ck_assert_uint_eq(verbs_sq_free(&sq), VERBS_SQ_DEPTH);
}
END_TEST

START_TEST(cq_error_on_unsignaled)
{
	sq_setup();
	static const uint8_t sig[4] = { 0, 1, 0, 1 };
	struct loco_cqe c[4];
	post4(sig);
	/* The unsignalled first request fails (errors always complete). */
	ck_assert(verbs_sq_mark(&sq, verbs_wrid_make(5, 0), -EACCES));
	ck_assert(verbs_sq_failed(&sq));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 4), 2);
	ck_assert_uint_eq(c[0].wr_id, 11);
	ck_assert_int_eq(c[0].status, -EACCES);    /* the cause, once */
	ck_assert_uint_eq(c[1].wr_id, 13);
	ck_assert_int_eq(c[1].status, -LOCO_EQP);  /* flushed */
	/* The hardware's flush completions that follow are stale. */
	ck_assert(!verbs_sq_mark(&sq, verbs_wrid_make(5, 3), -LOCO_EQP));
	ck_assert(!verbs_sq_pending(&sq));
}
END_TEST

START_TEST(cq_error_on_signaled)
{
	sq_setup();
	static const uint8_t sig[4] = { 1, 1, 0, 1 };
	struct loco_cqe c[4];
	post4(sig);
	ck_assert(verbs_sq_mark(&sq, verbs_wrid_make(5, 0), 0));
	ck_assert(verbs_sq_mark(&sq, verbs_wrid_make(5, 1), -ETIMEDOUT));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 1), 1); /* bounded by MAX */
	ck_assert_uint_eq(c[0].wr_id, 10);
	ck_assert_int_eq(c[0].status, 0);
	ck_assert(verbs_sq_pending(&sq));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 4), 2);
	ck_assert_uint_eq(c[0].wr_id, 11);
	ck_assert_int_eq(c[0].status, -ETIMEDOUT);
	ck_assert_uint_eq(c[1].wr_id, 13);
	ck_assert_int_eq(c[1].status, -LOCO_EQP);
}
END_TEST

START_TEST(cq_partial_post)
{
	sq_setup();
	struct loco_cqe c[8];
	struct loco_wr first = wr_make(LOCO_OP_READ, 1, 8, 0, arena, 1);
	ck_assert_int_eq(build_commit(&first, 1), 0);
	uint8_t dst[8];
	struct loco_wr w[3] = { wr_make(LOCO_OP_READ, 1, 8, 0, dst, 2),
				wr_make(LOCO_OP_READ, 1, 8, 8, arena, 3),
				wr_make(LOCO_OP_READ, 1, 8, 16, arena, 4) };
	uint64_t bh;
	ck_assert_int_eq(verbs_sq_build(&sq, w, 3, swr, sge, &bh), 0);
	verbs_sq_fail_partial(&sq, 2, -LOCO_EQP); /* NIC took 2 of 3 */
	ck_assert_uint_eq(sq.head, 3);
	ck_assert_uint_eq(sq.bounce.head, 8);     /* only the taken request's bounce */
	ck_assert(verbs_sq_failed(&sq));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 8), 1); /* refused batch is silent */
	ck_assert_uint_eq(c[0].wr_id, 1);
	ck_assert_int_eq(c[0].status, -LOCO_EQP);
	ck_assert_uint_eq(sq.bounce.tail, sq.bounce.head);
}
END_TEST

START_TEST(cq_seq_wraps)
{
	sq_setup();
	static const uint8_t sig[4] = { 0, 0, 0, 1 };
	struct loco_cqe c[2];
	sq.head = sq.tail = sq.done = VERBS_SEQ_MASK - 1; /* 56-bit wr_id wraps */
	post4(sig);
	ck_assert_uint_eq(swr[3].wr_id, (UINT64_C(5) << 56) | 1);
	ck_assert(verbs_sq_mark(&sq, swr[3].wr_id, 0));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 2), 1);
	ck_assert_uint_eq(c[0].wr_id, 13);
}
END_TEST

START_TEST(wc_status_map)
{
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_SUCCESS), 0);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_REM_ACCESS_ERR), -EACCES);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_RETRY_EXC_ERR), -ETIMEDOUT);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_RNR_RETRY_EXC_ERR), -ETIMEDOUT);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_WR_FLUSH_ERR), -LOCO_EQP);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_LOC_LEN_ERR), -EMSGSIZE);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_LOC_PROT_ERR), -EFAULT);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_REM_INV_REQ_ERR), -EINVAL);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_REM_OP_ERR), -EREMOTEIO);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_REM_ABORT_ERR), -ECONNABORTED);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_BAD_RESP_ERR), -EPROTO);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_FATAL_ERR), -EIO);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_GENERAL_ERR), -EIO);
	for (int s = IBV_WC_SUCCESS + 1; s <= IBV_WC_TM_RNDV_INCOMPLETE; s++)
		ck_assert_int_lt(verbs_wc_errno((enum ibv_wc_status)s), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("verbs data path");
	TCase *t;
	t = tcase_create("wr");
	tcase_add_test(t, mr_access_flags);
	tcase_add_test(t, wr_chain_batch);
	tcase_add_test(t, wr_single_and_unsignaled);
	tcase_add_test(t, wr_bounce_write_copies_source);
	tcase_add_test(t, wr_bounce_read_copied_at_completion);
	tcase_add_test(t, wr_atomic_unaligned_local_bounces);
	tcase_add_test(t, wr_bounce_full_is_all_or_nothing);
	tcase_add_test(t, wr_invalid);
	tcase_add_test(t, wr_device_memory);
	tcase_add_test(t, wr_flush_reads_the_fence);
	suite_add_tcase(s, t);
	t = tcase_create("cq");
	tcase_add_test(t, cq_in_order);
	tcase_add_test(t, cq_error_on_unsignaled);
	tcase_add_test(t, cq_error_on_signaled);
	tcase_add_test(t, cq_partial_post);
	tcase_add_test(t, cq_seq_wraps);
	tcase_add_test(t, wc_status_map);
	suite_add_tcase(s, t);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
