/* SPDX-License-Identifier: MIT */
/* ucx transport: the arena descriptor's wire format, the per-QP ring
 * (transport-owned local memory, in-order retirement of requests UCX
 * completes in any order, the failure rules, orphans), the status
 * mapping; then the ops table on this machine over UCX_TLS=tcp and sm
 * (the ucx-tcp and ucx-sm names): every opcode, a fence READ, a FLUSH,
 * batches, bounds, abort, a durable arena, and open failing with one clear
 * message when libucp is missing or UCX_TLS names nothing usable; and a
 * credential per client and incarnation (one member cannot act as another,
 * a fenced incarnation cannot act as a new one). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <loco/error.h>
#include <loco/hosts.h>
#include <loco/log.h>
#include "loco/transport/copy.h"
#include "loco/transport/transport.h"
#include "loco/transport/ucx_desc.h"
#include "loco/transport/ucx_int.h"
#include "loco/transport/ucx_sq.h"
#include "test/common/capture.h"
#include "test/common/tp_node.h"

/* ---- descriptor ---------------------------------------------------------- */

static struct ucx_desc desc_sample(void)
{
	struct ucx_desc d = { .node = 7, .flags = UCX_DESC_F_AM, .arena_addr = 0x7f0000001000,
			      .arena_len = 1 << 20, .rkey_len = 23, .addr_len = 116,
			      .for_node = 3, .for_incarnation = 0x1122334455667788,
			      .cred = { 0x0123456789abcdef, 0xfedcba9876543210 } };
	for (unsigned i = 0; i < d.rkey_len; i++)
		d.rkey[i] = (uint8_t)(i * 3 + 1);
	for (unsigned i = 0; i < d.addr_len; i++)
		d.addr[i] = (uint8_t)(i * 5 + 2);
	return d;
}

START_TEST(desc_roundtrip)
{
	struct ucx_desc d = desc_sample(), out;
	uint8_t buf[LOCO_DESC_MAX];
	size_t len;
	ck_assert_int_eq(ucx_desc_pack(&d, buf, sizeof(buf), &len), 0);
	ck_assert_uint_eq(len, UCX_DESC_FIXED + 4 + d.rkey_len + d.addr_len);
	ck_assert_int_eq(ucx_desc_unpack(buf, len, &out), 0);
	ck_assert_uint_eq(out.node, 7);
	ck_assert_uint_eq(out.flags, UCX_DESC_F_AM);
	ck_assert_uint_eq(out.arena_addr, d.arena_addr);
	ck_assert_uint_eq(out.arena_len, d.arena_len);
	ck_assert_uint_eq(out.for_node, 3);
	ck_assert_uint_eq(out.for_incarnation, d.for_incarnation);
	ck_assert_uint_eq(out.cred[0], d.cred[0]);
	ck_assert_uint_eq(out.cred[1], d.cred[1]);
	ck_assert_uint_eq(out.rkey_len, d.rkey_len);
	ck_assert_uint_eq(out.addr_len, d.addr_len);
	ck_assert_mem_eq(out.rkey, d.rkey, d.rkey_len);
	ck_assert_mem_eq(out.addr, d.addr, d.addr_len);
	/* The largest descriptor fits LOCO_DESC_MAX exactly. */
	d.rkey_len = UCX_RKEY_MAX;
	d.addr_len = UCX_ADDR_MAX;
	ck_assert_int_eq(ucx_desc_pack(&d, buf, sizeof(buf), &len), 0);
	ck_assert_uint_eq(len, LOCO_DESC_MAX);
	ck_assert_int_eq(ucx_desc_unpack(buf, len, &out), 0);
	/* No credential (its sender did not know the receiver's
	 * incarnation): all zero, carried as such. */
	d = desc_sample();
	d.cred[0] = d.cred[1] = 0;
	ck_assert_int_eq(ucx_desc_pack(&d, buf, sizeof(buf), &len), 0);
	ck_assert_int_eq(ucx_desc_unpack(buf, len, &out), 0);
	ck_assert(ucx_cred_zero(out.cred));
	ck_assert_uint_eq(ucx_desc_version(buf, len), UCX_DESC_VERSION);
}
END_TEST

START_TEST(desc_pack_refuses)
{
	struct ucx_desc d = desc_sample();
	uint8_t buf[LOCO_DESC_MAX];
	size_t len;
	ck_assert_int_eq(ucx_desc_pack(&d, buf, 100, &len), -EMSGSIZE);
	d.addr_len = UCX_ADDR_MAX + 1;
	ck_assert_int_eq(ucx_desc_pack(&d, buf, sizeof(buf), &len), -EMSGSIZE);
	d = desc_sample();
	d.rkey_len = 0;
	ck_assert_int_eq(ucx_desc_pack(&d, buf, sizeof(buf), &len), -EINVAL);
	d = desc_sample();
	d.arena_len = 0;
	ck_assert_int_eq(ucx_desc_pack(&d, buf, sizeof(buf), &len), -EINVAL);
	d = desc_sample();
	d.flags = 2;
	ck_assert_int_eq(ucx_desc_pack(&d, buf, sizeof(buf), &len), -EINVAL);
}
END_TEST

/* Byte OFF of a good encoding changed to V, or the encoding cut or
 * extended: unpack refuses. */
static int unpack_mutated(size_t off, int v, int dlen)
{
	struct ucx_desc d = desc_sample(), out;
	uint8_t buf[LOCO_DESC_MAX + 1];
	size_t len;
	ck_assert_int_eq(ucx_desc_pack(&d, buf, LOCO_DESC_MAX, &len), 0);
	if (v >= 0)
		buf[off] = (uint8_t)v;
	return ucx_desc_unpack(buf, (size_t)((int)len + dlen), &out);
}

START_TEST(desc_unpack_refuses)
{
	ck_assert_int_eq(unpack_mutated(0, 'X', 0), -LOCO_EPROTO);   /* magic */
	ck_assert_int_eq(unpack_mutated(4, 9, 0), -LOCO_EPROTO);     /* version */
	ck_assert_int_eq(unpack_mutated(4, 1, 0), -LOCO_EPROTO);     /* version 1: no token */
	ck_assert_int_eq(unpack_mutated(4, 3, 0), -LOCO_EPROTO);     /* 3: one shared token */
	ck_assert_int_eq(unpack_mutated(6, 3, 0), -LOCO_EPROTO);     /* unknown flag */
	ck_assert_int_eq(unpack_mutated(0, -1, -1), -LOCO_EPROTO);   /* cut short */
	ck_assert_int_eq(unpack_mutated(0, -1, 1), -LOCO_EPROTO);    /* trailing byte */
	ck_assert_int_eq(unpack_mutated(0, -1, -150), -LOCO_EPROTO); /* address cut */
	/* A wrapping arena, an empty one. */
	struct ucx_desc d = desc_sample(), out;
	uint8_t buf[LOCO_DESC_MAX];
	size_t len;
	d.arena_addr = UINT64_MAX - 100;
	ck_assert_int_eq(ucx_desc_pack(&d, buf, sizeof(buf), &len), 0);
	ck_assert_int_eq(ucx_desc_unpack(buf, len, &out), -LOCO_EPROTO);
	d = desc_sample();
	d.arena_addr = 0;
	ck_assert_int_eq(ucx_desc_pack(&d, buf, sizeof(buf), &len), 0);
	ck_assert_int_eq(ucx_desc_unpack(buf, len, &out), -LOCO_EPROTO);
	/* The version of what is refused, for the error naming it. */
	d = desc_sample();
	ck_assert_int_eq(ucx_desc_pack(&d, buf, sizeof(buf), &len), 0);
	buf[4] = 3;
	ck_assert_uint_eq(ucx_desc_version(buf, len), 3);
	buf[0] = 'X';
	ck_assert_uint_eq(ucx_desc_version(buf, len), 0);
	ck_assert_uint_eq(ucx_desc_version(buf, 5), 0);
}
END_TEST

/* ---- the ring, with fake UCX requests ------------------------------------ */

struct fake_req {
	int done;
	int status;
	int freed;
};

static int fake_check(void *ctx, void *req, int *status)
{
	(void)ctx;
	struct fake_req *r = req;
	ck_assert(!r->freed);
	if (!r->done)
		return 0;
	*status = r->status;
	return 1;
}

static void fake_free(void *ctx, void *req)
{
	(void)ctx;
	struct fake_req *r = req;
	ck_assert(!r->freed);
	r->freed = 1;
}

static const struct ucx_req_ops fake_ops = { fake_check, fake_free, NULL };
static struct ucx_sq sq;
#define ARENA (1u << 20)

static struct loco_wr wr_read(uint64_t id, uint64_t off, void *dst, uint32_t len)
{
	return (struct loco_wr){ .opcode = LOCO_OP_READ, .len = len, .remote_off = off,
				 .local = dst, .wr_id = id };
}

static struct loco_wr wr_write(uint64_t id, uint64_t off, void *src, uint32_t len)
{
	return (struct loco_wr){ .opcode = LOCO_OP_WRITE, .len = len, .remote_off = off,
				 .local = src, .wr_id = id };
}

/* Stage and commit N requests, attaching REQ[i] (NULL: done at once). */
static void post(struct loco_wr *w, unsigned n, struct fake_req **req)
{
	uint64_t bhead;
	ck_assert_int_eq(ucx_sq_stage(&sq, w, n, ARENA, &bhead), 0);
	for (unsigned i = 0; i < n; i++)
		ucx_sq_staged(&sq, i)->req = req ? req[i] : NULL;
	ucx_sq_commit(&sq, n, bhead);
}

START_TEST(sq_retire_in_order)
{
	ck_assert_int_eq(ucx_sq_init(&sq, 3), 0);
	uint64_t a = 0, b = 0, src = 0x1122334455667788;
	struct fake_req r[3] = { { 0 } };
	struct fake_req *req[3] = { &r[0], &r[1], &r[2] };
	struct loco_wr w[3] = { wr_read(1, 64, &a, 8), wr_write(2, 72, &src, 8),
				wr_read(3, 80, &b, 8) };
	w[0].signaled = w[2].signaled = 1;
	post(w, 3, req);
	src = 0; /* WRITE data was copied at post */
	struct loco_cqe c[4];
	/* UCX completes the later READ first: nothing may be reported. */
	memcpy(sq.slot[2].buf, "\x02\0\0\0\0\0\0\0", 8);
	r[2].done = 1;
	ck_assert_uint_eq(ucx_sq_drain(&sq, &fake_ops, c, 4), 0);
	ck_assert_uint_eq(b, 0);
	memcpy(sq.slot[0].buf, "\x01\0\0\0\0\0\0\0", 8);
	r[0].done = 1;
	ck_assert_uint_eq(ucx_sq_drain(&sq, &fake_ops, c, 4), 1);
	ck_assert_uint_eq(c[0].wr_id, 1);
	ck_assert_uint_eq(c[0].peer, 3);
	ck_assert_uint_eq(a, 1);
	ck_assert_uint_eq(b, 0);
	uint64_t sent;
	memcpy(&sent, sq.slot[1].buf, 8);
	ck_assert_uint_eq(sent, 0x1122334455667788);
	r[1].done = 1;
	ck_assert_uint_eq(ucx_sq_drain(&sq, &fake_ops, c, 4), 1);
	ck_assert_uint_eq(c[0].wr_id, 3);
	ck_assert_uint_eq(b, 2);
	ck_assert(r[0].freed && r[1].freed && r[2].freed);
	ck_assert_uint_eq(ucx_sq_outstanding(&sq), 0);
	ck_assert_uint_eq(sq.bounce.tail, sq.bounce.head);
	ucx_sq_fini(&sq, false);
}
END_TEST

START_TEST(sq_atomic_layout)
{
	ck_assert_int_eq(ucx_sq_init(&sq, 0), 0);
	uint64_t old = 99, fold = 99;
	struct loco_wr w[2] = {
		{ .opcode = LOCO_OP_CAS, .len = 8, .remote_off = 8, .local = &old,
		  .compare = 5, .operand = 6, .wr_id = 1, .signaled = 1 },
		{ .opcode = LOCO_OP_FAA, .len = 8, .remote_off = 16, .local = &fold,
		  .operand = 10, .wr_id = 2, .signaled = 1 },
	};
	post(w, 2, NULL);
	uint64_t v[2];
	memcpy(v, sq.slot[0].buf, 16);
	ck_assert_uint_eq(v[0], 5);  /* compare: the operand buffer */
	ck_assert_uint_eq(v[1], 6);  /* swap value in the reply buffer */
	memcpy(v, sq.slot[1].buf, 16);
	ck_assert_uint_eq(v[0], 10); /* addend */
	v[0] = 5;                    /* what UCX returns: the old values */
	memcpy(sq.slot[0].buf + 8, v, 8);
	v[0] = 40;
	memcpy(sq.slot[1].buf + 8, v, 8);
	struct loco_cqe c[2];
	ck_assert_uint_eq(ucx_sq_drain(&sq, &fake_ops, c, 2), 2);
	ck_assert_uint_eq(old, 5);
	ck_assert_uint_eq(fold, 40);
	ucx_sq_fini(&sq, false);
}
END_TEST

START_TEST(sq_checks)
{
	ck_assert_int_eq(ucx_sq_init(&sq, 0), 0);
	uint64_t x = 0, bhead;
	struct loco_wr bad[] = {
		wr_read(1, ARENA - 4, &x, 8),                /* past the arena */
		wr_read(1, 0, NULL, 8),                      /* no buffer */
		{ .opcode = LOCO_OP_CAS, .len = 8, .remote_off = 12, .local = &x }, /* unaligned */
		{ .opcode = LOCO_OP_FAA, .len = 4, .remote_off = 8, .local = &x },
		{ .opcode = 9, .len = 8, .local = &x },
		{ .opcode = LOCO_OP_READ, .space = LOCO_SPACE_DM, .len = 8, .local = &x },
	};
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_int_eq(ucx_sq_stage(&sq, &bad[i], 1, ARENA, &bhead), -EINVAL);
	/* A bad request second in a batch: nothing staged, nothing leaked. */
	uint8_t *big = calloc(1, 100000);
	struct loco_wr two[2] = { wr_write(1, 0, big, 100000), bad[0] };
	ck_assert_int_eq(ucx_sq_stage(&sq, two, 2, ARENA, &bhead), -EINVAL);
	ck_assert_uint_eq(ucx_sq_outstanding(&sq), 0);
	/* A zero-length READ (the fence READ) needs no memory. */
	struct loco_wr f = wr_read(2, 0, NULL, 0);
	f.signaled = 1;
	post(&f, 1, NULL);
	ck_assert_ptr_null(sq.slot[0].buf);
	struct loco_cqe c;
	ck_assert_uint_eq(ucx_sq_drain(&sq, &fake_ops, &c, 1), 1);
	free(big);
	ucx_sq_fini(&sq, false);
}
END_TEST

START_TEST(sq_memory)
{
	ck_assert_int_eq(ucx_sq_init(&sq, 0), 0);
	static uint8_t src[UCX_BOUNCE_BYTES];
	struct fake_req r = { 0 };
	struct fake_req *req[8] = { &r };
	uint64_t bhead;
	/* Big requests get their own buffer. */
	struct loco_wr big = wr_write(1, 0, src, UCX_BOUNCE_MAX_OP + 8);
	post(&big, 1, req);
	ck_assert(sq.slot[0].heap && !sq.slot[0].uses_bounce);
	/* The ring busy with one 16 KiB request: a batch needing 64 KiB more
	 * must wait (-EAGAIN) for retirement... */
	struct loco_wr w[5];
	for (unsigned i = 0; i < 5; i++)
		w[i] = wr_write(2 + i, 0, src, UCX_BOUNCE_MAX_OP);
	post(w, 1, req + 1);
	ck_assert(sq.slot[1].uses_bounce);
	ck_assert_int_eq(ucx_sq_stage(&sq, w + 1, 4, ARENA, &bhead), -EAGAIN);
	struct loco_cqe c[8];
	ck_assert_uint_eq(ucx_sq_drain(&sq, &fake_ops, c, 8), 0);
	r.done = 1;
	ck_assert_uint_eq(ucx_sq_drain(&sq, &fake_ops, c, 8), 0); /* unsignaled */
	ck_assert_uint_eq(ucx_sq_outstanding(&sq), 0);
	/* ...and then goes in whole: what the empty ring cannot take gets
	 * buffers of its own. */
	post(w, 5, NULL);
	unsigned heap = 0;
	for (uint64_t s = sq.head - 5; s < sq.head; s++)
		heap += sq.slot[s % UCX_RING_SLOTS].heap;
	ck_assert_uint_eq(heap, 1);
	ck_assert_uint_eq(ucx_sq_drain(&sq, &fake_ops, c, 8), 0);
	ck_assert_uint_eq(sq.bounce.tail, sq.bounce.head);
	/* The ring of slots is bounded too. */
	struct loco_wr one = wr_read(9, 0, src, 8);
	for (unsigned i = 0; i < UCX_SQ_DEPTH; i++)
		post(&one, 1, NULL);
	ck_assert_int_eq(ucx_sq_stage(&sq, &one, 1, ARENA, &bhead), -EAGAIN);
	ck_assert_int_eq(ucx_sq_stage(&sq, w, UCX_SQ_DEPTH + 1, ARENA, &bhead), -EINVAL);
	while (ucx_sq_outstanding(&sq))
		ucx_sq_drain(&sq, &fake_ops, c, 8);
	ck_assert_uint_eq(sq.bounce.tail, sq.bounce.head);
	ucx_sq_fini(&sq, false);
}
END_TEST

START_TEST(sq_failure_rules)
{
	ck_assert_int_eq(ucx_sq_init(&sq, 1), 0);
	uint64_t dst[4] = { 7, 7, 7, 7 };
	struct fake_req r[4] = { { 0 } };
	struct fake_req *req[4] = { &r[0], &r[1], &r[2], &r[3] };
	struct loco_wr w[4];
	for (unsigned i = 0; i < 4; i++) {
		w[i] = wr_read(10 + i, 8 * i, &dst[i], 8);
		w[i].signaled = i != 1;
	}
	post(w, 4, req);
	for (unsigned i = 0; i < 4; i++)
		memset(sq.slot[i].buf, 0, 8);
	r[0].done = 1;
	r[1].done = 1;
	r[1].status = -ECONNRESET; /* unsignaled request fails */
	struct loco_cqe c[4];
	/* Request 2 still runs, but the QP failed: it becomes an orphan. */
	ck_assert_uint_eq(ucx_sq_drain(&sq, &fake_ops, c, 4), 3);
	ck_assert_uint_eq(c[0].wr_id, 10);
	ck_assert_int_eq(c[0].status, 0);
	ck_assert_uint_eq(c[1].wr_id, 12);
	ck_assert_int_eq(c[1].status, -ECONNRESET); /* first signalled after it */
	ck_assert_uint_eq(c[2].wr_id, 13);
	ck_assert_int_eq(c[2].status, -LOCO_EQP);
	ck_assert_uint_eq(dst[0], 0);
	ck_assert(dst[1] == 7 && dst[2] == 7 && dst[3] == 7); /* never copied out */
	ck_assert_uint_eq(sq.orphans, 2);
	ck_assert_uint_eq(ucx_sq_reap(&sq, &fake_ops), 2);
	r[2].done = r[3].done = 1;
	ck_assert_uint_eq(ucx_sq_reap(&sq, &fake_ops), 0);
	ck_assert(r[2].freed && r[3].freed);
	ucx_sq_fini(&sq, false);
}
END_TEST

START_TEST(sq_refused_batch)
{
	ck_assert_int_eq(ucx_sq_init(&sq, 2), 0);
	uint64_t x = 0, bhead;
	uint8_t *big = calloc(1, 100000);
	struct fake_req r = { 0 };
	struct loco_wr w[3] = { wr_read(1, 0, &x, 8), wr_read(2, 8, &x, 8),
				wr_write(3, 0, big, 100000) };
	w[2].signaled = 1;
	ck_assert_int_eq(ucx_sq_stage(&sq, w, 3, ARENA, &bhead), 0);
	ucx_sq_staged(&sq, 0)->req = &r; /* issued; the second one refused */
	ucx_sq_refused(&sq, 1, 3, bhead, -EIO);
	ck_assert(ucx_sq_failed(&sq));
	ck_assert_uint_eq(ucx_sq_outstanding(&sq), 1);
	struct loco_cqe c[2];
	/* The issued request is silent: the caller saw the batch refused. */
	ck_assert_uint_eq(ucx_sq_drain(&sq, &fake_ops, c, 2), 0);
	ck_assert_uint_eq(sq.orphans, 1);
	r.done = 1;
	ck_assert_uint_eq(ucx_sq_reap(&sq, &fake_ops), 0);
	free(big);
	ucx_sq_fini(&sq, false);
}
END_TEST

/* Requests executed by messages (ucx_am.c): a request retires only once
 * its send completed and its reply came; a reply finds its slot by token
 * and is dropped once the request is gone (retired, its QP failed). */
START_TEST(sq_replies)
{
	ck_assert_int_eq(ucx_sq_init(&sq, 4), 0);
	uint64_t a = 0, src = 5;
	struct fake_req r[3] = { { 0 } };
	struct fake_req *req[3] = { &r[0], &r[1], &r[2] };
	struct loco_wr w[3] = { wr_read(1, 64, &a, 8), wr_write(2, 72, &src, 8),
				wr_read(3, 80, &a, 8) };
	w[0].signaled = w[1].signaled = w[2].signaled = 1;
	uint64_t bhead;
	ck_assert_int_eq(ucx_sq_stage(&sq, w, 3, ARENA, &bhead), 0);
	for (unsigned i = 0; i < 3; i++) {
		struct ucx_slot *s = ucx_sq_staged(&sq, i);
		s->req = req[i];
		s->am_wait = 1;
		s->token = (UINT64_C(9) << UCX_TOKEN_SEQ_BITS) | i;
	}
	ucx_sq_commit(&sq, 3, bhead);
	struct loco_cqe c[4];
	r[0].done = r[1].done = 1;
	ck_assert_uint_eq(ucx_sq_drain(&sq, &fake_ops, c, 4), 0); /* no reply yet */
	ck_assert_ptr_null(ucx_sq_reply(&sq, (UINT64_C(8) << UCX_TOKEN_SEQ_BITS) | 0));
	ck_assert_ptr_null(ucx_sq_reply(&sq, (UINT64_C(9) << UCX_TOKEN_SEQ_BITS) | 7));
	struct ucx_slot *s0 = ucx_sq_reply(&sq, (UINT64_C(9) << UCX_TOKEN_SEQ_BITS) | 0);
	ck_assert_ptr_eq(s0, &sq.slot[0]);
	memcpy(s0->buf, "\x2a\0\0\0\0\0\0\0", 8);
	s0->am_wait = 0;
	ck_assert_uint_eq(ucx_sq_drain(&sq, &fake_ops, c, 4), 1);
	ck_assert_uint_eq(a, 42);
	/* The reply of the WRITE says the target refused it: the QP fails
	 * from it on, and the READ's late reply is dropped. */
	struct ucx_slot *s1 = ucx_sq_reply(&sq, (UINT64_C(9) << UCX_TOKEN_SEQ_BITS) | 1);
	ck_assert_ptr_nonnull(s1);
	s1->status = -EINVAL;
	s1->am_wait = 0;
	ck_assert_uint_eq(ucx_sq_drain(&sq, &fake_ops, c, 4), 2);
	ck_assert_int_eq(c[0].status, -EINVAL);
	ck_assert_int_eq(c[1].status, -LOCO_EQP);
	ck_assert_ptr_null(ucx_sq_reply(&sq, (UINT64_C(9) << UCX_TOKEN_SEQ_BITS) | 2));
	ck_assert_uint_eq(sq.orphans, 1); /* the READ's send still ran */
	r[2].done = 1;
	ck_assert_uint_eq(ucx_sq_reap(&sq, &fake_ops), 0);
	ucx_sq_fini(&sq, false);
}
END_TEST

START_TEST(status_map)
{
	ck_assert_int_eq(ucx_errno(UCS_OK), 0);
	ck_assert_int_eq(ucx_errno(UCS_ERR_CONNECTION_RESET), -ECONNRESET);
	ck_assert_int_eq(ucx_errno(UCS_ERR_ENDPOINT_TIMEOUT), -ECONNRESET);
	ck_assert_int_eq(ucx_errno(UCS_ERR_TIMED_OUT), -ETIMEDOUT);
	ck_assert_int_eq(ucx_errno(UCS_ERR_UNREACHABLE), -EHOSTUNREACH);
	ck_assert_int_eq(ucx_errno(UCS_ERR_CANCELED), -ECANCELED);
	ck_assert_int_eq(ucx_errno(UCS_ERR_REJECTED), -ECONNREFUSED);
	ck_assert_int_eq(ucx_errno(UCS_ERR_UNSUPPORTED), -EOPNOTSUPP);
	ck_assert_int_eq(ucx_errno(UCS_ERR_FIRST_LINK_FAILURE), -ENETDOWN);
	for (int s = UCS_ERR_NO_MESSAGE; s > UCS_ERR_LAST; s--)
		ck_assert_int_lt(ucx_errno((ucs_status_t)s), 0);
}
END_TEST

/* ---- the ops table on this machine ---------------------------------------- */

static struct loco_hosts hosts;

static const struct loco_transport_ops *ops = &loco_ucx_ops;
static struct loco_tp *tp;
static struct loco_tp_cq *cq;
static struct loco_tp_qp *qp;
/* ucx-tcp and ucx-sm: the names that fix UCX_TLS. */
static const struct loco_transport_ops *const named[] = { &loco_ucx_tcp_ops,
							   &loco_ucx_sm_ops };

/* The loop tests' variants: ucx-tcp and ucx-sm as they run (loco's
 * messages on TCP, UCX's RMA on shared memory), then each with the other
 * way of executing requests (LOCO_UCX_RMA). Each test runs in a process
 * of its own (check forks), so the variable stays there. */
#define VARIANTS 4
static const struct loco_transport_ops *variant(int i)
{
	if (i >= 2)
		setenv("LOCO_UCX_RMA", i == 2 ? "ucx" : "am", 1);
	return named[i % 2];
}

/* Open a one-node transport (CFG) with a QP to itself. */
static void node_open_cfg(const struct loco_transport_ops *o,
			  const struct loco_tp_config *cfg)
{
	uint8_t desc[LOCO_DESC_MAX];
	size_t len = sizeof(desc);
	ops = o;
	ck_assert_int_eq(ops->open(cfg, &tp), 0);
	ck_assert_uint_eq(ops->arena_len(tp), 1 << 20);
	ck_assert_uint_eq(ops->dm_len(tp), 0);
	ck_assert_int_eq(ops->dm_zero(tp, 0, 8), -EOPNOTSUPP);
	ck_assert_int_eq(ops->arena_desc(tp, desc, &len), 0);
	ck_assert_int_eq(ops->peer_add(tp, 0, desc, len, 1 << 20, 0), 0);
	ck_assert_int_eq(ops->cq_create(tp, &cq), 0);
	ck_assert_int_eq(ops->qp_create(tp, cq, 0, &qp), 0);
}

static void node_open(const struct loco_transport_ops *o)
{
	struct loco_tp_config cfg = tp_one_node(&hosts, 5000);
	node_open_cfg(o, &cfg);
}

static void node_close(void)
{
	ops->qp_destroy(qp);
	ops->cq_destroy(cq);
	ops->close(tp);
}

/* Post N requests on Q (of CQ C), the last signalled, and wait for that
 * completion. */
static int run_at(struct loco_tp_cq *c0, struct loco_tp_qp *q, struct loco_wr *w,
		  unsigned n)
{
	static uint64_t id;
	for (unsigned i = 0; i < n; i++) {
		w[i].wr_id = ++id;
		w[i].signaled = i + 1 == n;
	}
	int rc = ops->post(q, w, n);
	if (rc)
		return rc;
	struct loco_cqe c;
	for (unsigned spins = 0; spins < 10000000; spins++) {
		int k = ops->poll(c0, &c, 1);
		ck_assert_int_ge(k, 0);
		if (k) {
			ck_assert_uint_eq(c.wr_id, id);
			ck_assert_uint_eq(c.peer, 0);
			return c.status;
		}
	}
	ck_abort_msg("no completion");
	return -1;
}

static int run_on(struct loco_tp_qp *q, struct loco_wr *w, unsigned n)
{
	return run_at(cq, q, w, n);
}

static int run(struct loco_wr *w, unsigned n)
{
	return run_on(qp, w, n);
}

/* The arena's bytes at OFF equal WANT's N: read as the transport writes
 * them (loco_tp_copy_in: the progress thread executes requests into the
 * arena concurrently, and its completion reached us through UCX, which
 * TSan does not see as an order). */
static void arena_eq(uint64_t off, const void *want, uint32_t n)
{
	uint8_t got[256];
	ck_assert_uint_le(n, sizeof(got));
	loco_tp_copy_in(got, (const uint8_t *)ops->arena_base(tp) + off, n);
	ck_assert_mem_eq(got, want, n);
}

START_TEST(ops_every_opcode)
{
	node_open(variant(_i));
	uint64_t data[8], back[8] = { 0 }, old = 1, zero = 0;
	for (unsigned i = 0; i < 8; i++)
		data[i] = 0x0101010101010101ull * (i + 1);
	/* WRITE, then READ on the same QP sees it (no fence in between). */
	struct loco_wr w[3] = {
		{ .opcode = LOCO_OP_WRITE, .len = 64, .remote_off = 128, .local = data },
		{ .opcode = LOCO_OP_READ, .len = 64, .remote_off = 128, .local = back },
	};
	ck_assert_int_eq(run(w, 2), 0);
	ck_assert_mem_eq(back, data, 64);
	arena_eq(128, data, 64);
	/* CAS that succeeds, one that fails, FAA. */
	w[0] = (struct loco_wr){ .opcode = LOCO_OP_CAS, .len = 8, .remote_off = 256,
				 .local = &old, .compare = 0, .operand = 5 };
	ck_assert_int_eq(run(w, 1), 0);
	ck_assert_uint_eq(old, 0);
	w[0].operand = 9;
	ck_assert_int_eq(run(w, 1), 0);
	ck_assert_uint_eq(old, 5);
	w[0] = (struct loco_wr){ .opcode = LOCO_OP_FAA, .len = 8, .remote_off = 256,
				 .local = &old, .operand = 3 };
	ck_assert_int_eq(run(w, 1), 0);
	ck_assert_uint_eq(old, 5);
	/* A WRITE and the fence READ (zero length) in one batch: placed. */
	w[0] = (struct loco_wr){ .opcode = LOCO_OP_WRITE, .len = 8, .remote_off = 264,
				 .local = &data[3] };
	w[1] = (struct loco_wr){ .opcode = LOCO_OP_READ, .len = 0,
				 .remote_off = 64 };
	ck_assert_int_eq(run(w, 2), 0);
	arena_eq(264, &data[3], 8);
	arena_eq(256, &(uint64_t){ 8 }, 8);
	/* A WRITE and a FLUSH of its range: complete once placed. */
	w[0] = (struct loco_wr){ .opcode = LOCO_OP_WRITE, .len = 8, .remote_off = 280,
				 .local = &data[4] };
	w[1] = (struct loco_wr){ .opcode = LOCO_OP_FLUSH, .len = 8, .remote_off = 280 };
	ck_assert_int_eq(run(w, 2), 0);
	arena_eq(280, &data[4], 8);
	ck_assert_int_eq(ops->persist(tp, 280, 8), 0); /* no image: nothing to do */
	/* The WRITE's source may change right after post: its bytes were taken. */
	uint64_t src = 77;
	w[0] = (struct loco_wr){ .opcode = LOCO_OP_WRITE, .len = 8, .remote_off = 272,
				 .local = &src };
	w[1] = (struct loco_wr){ .opcode = LOCO_OP_READ, .len = 8, .remote_off = 272,
				 .local = &zero };
	for (unsigned i = 0; i < 2; i++)
		w[i].wr_id = 1000 + i;
	w[1].signaled = 1;
	ck_assert_int_eq(ops->post(qp, w, 2), 0);
	src = 78;
	struct loco_cqe c;
	while (ops->poll(cq, &c, 1) == 0)
		;
	ck_assert_uint_eq(zero, 77);
	node_close();
}
END_TEST

/* One batch of every opcode at odd offsets and lengths (on TCP one
 * message, executed in order): each request sees the ones before it,
 * every READ and atomic gets its own result back. */
START_TEST(ops_mixed_batch)
{
	node_open(variant(_i));
	uint8_t a[3] = { 1, 2, 3 }, b[13], ra[3] = { 0 }, rb[13] = { 0 };
	uint64_t c[2] = { 0x1111, 0x2222 }, rc2[2] = { 0 }, cas_old = 9,
		 faa_old = 9, word = 0;
	for (unsigned i = 0; i < sizeof(b); i++)
		b[i] = (uint8_t)(0xa0 + i);
	struct loco_wr w[] = {
		{ .opcode = LOCO_OP_WRITE, .len = 3, .remote_off = 1001, .local = a },
		{ .opcode = LOCO_OP_WRITE, .len = 16, .remote_off = 2048, .local = c },
		{ .opcode = LOCO_OP_READ, .len = 3, .remote_off = 1001, .local = ra },
		{ .opcode = LOCO_OP_CAS, .len = 8, .remote_off = 2048, .local = &cas_old,
		  .compare = 0x1111, .operand = 0x3333 },
		{ .opcode = LOCO_OP_READ, .len = 0, .remote_off = 64 },
		{ .opcode = LOCO_OP_FAA, .len = 8, .remote_off = 2056, .local = &faa_old,
		  .operand = 2 },
		{ .opcode = LOCO_OP_WRITE, .len = 13, .remote_off = 3005, .local = b },
		{ .opcode = LOCO_OP_READ, .len = 16, .remote_off = 2048, .local = rc2 },
		{ .opcode = LOCO_OP_READ, .len = 13, .remote_off = 3005, .local = rb },
		{ .opcode = LOCO_OP_READ, .len = 8, .remote_off = 2056, .local = &word },
	};
	/* The last completes after every earlier one (retired in order). */
	ck_assert_int_eq(run(w, sizeof(w) / sizeof(w[0])), 0);
	ck_assert_mem_eq(ra, a, 3);
	ck_assert_uint_eq(cas_old, 0x1111);
	ck_assert_uint_eq(faa_old, 0x2222);
	ck_assert_uint_eq(rc2[0], 0x3333);
	ck_assert_uint_eq(rc2[1], 0x2224);
	ck_assert_uint_eq(word, 0x2224);
	ck_assert_mem_eq(rb, b, 13);
	arena_eq(3005, b, 13);
	arena_eq(1001, a, 3);
	node_close();
}
END_TEST

START_TEST(ops_large_and_bounds)
{
	node_open(variant(_i));
	size_t n = 200 * 1024;
	uint8_t *src = malloc(n), *dst = calloc(1, n);
	for (size_t i = 0; i < n; i++)
		src[i] = (uint8_t)(i * 7);
	struct loco_wr w[2] = {
		{ .opcode = LOCO_OP_WRITE, .len = (uint32_t)n, .remote_off = 4096, .local = src },
		{ .opcode = LOCO_OP_READ, .len = (uint32_t)n, .remote_off = 4096, .local = dst },
	};
	ck_assert_int_eq(run(w, 2), 0);
	ck_assert_mem_eq(dst, src, n);
	/* Outside the peer's arena: refused at post, nothing issued. */
	w[0] = (struct loco_wr){ .opcode = LOCO_OP_READ, .len = 16,
				 .remote_off = (1 << 20) - 8, .local = dst };
	ck_assert_int_eq(ops->post(qp, w, 1), -EINVAL);
	w[0].remote_off = 0;
	ck_assert_int_eq(run(w, 1), 0);
	free(src);
	free(dst);
	node_close();
}
END_TEST

START_TEST(ops_abort)
{
	node_open(variant(_i));
	uint64_t x = 0;
	struct loco_wr w = { .opcode = LOCO_OP_READ, .len = 8, .remote_off = 64,
			     .local = &x, .signaled = 1, .wr_id = 5 };
	ops->qp_abort(qp);
	ops->qp_abort(qp); /* twice is harmless */
	ck_assert_int_eq(ops->post(qp, &w, 1), -LOCO_EQP);
	struct loco_cqe c;
	ck_assert_int_eq(ops->poll(cq, &c, 1), 0);
	node_close();
}
END_TEST

/* A durable arena (--durable DIR): the image's mapping, registered with
 * UCX; a WRITE then a FLUSH land in the image, persist syncs it; a power
 * cut cannot be emulated on ucx. */
START_TEST(ops_durable)
{
	char dir[] = "/tmp/loco-test-ucx-XXXXXX", img[64];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(img, sizeof(img), "%s/arena.img", dir);
	struct loco_tp_config cfg = tp_one_node(&hosts, 5000);
	cfg.durable_dir = dir;
	cfg.image_id = 0x1234;
	cfg.power_cut = true;
	ck_assert_int_eq(loco_ucx_tcp_ops.open(&cfg, &tp), -EOPNOTSUPP);
	cfg.power_cut = false;
	node_open_cfg(variant(_i), &cfg);
	uint64_t v = 0xfeedfacecafebeef, got = 0;
	struct loco_wr w[2] = {
		{ .opcode = LOCO_OP_WRITE, .len = 8, .remote_off = 4096, .local = &v },
		{ .opcode = LOCO_OP_FLUSH, .len = 8, .remote_off = 4096 },
	};
	ck_assert_int_eq(run(w, 2), 0);
	ck_assert_int_eq(ops->persist(tp, 4096, 8), 0);
	int fd = open(img, O_RDONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &got, 8, 4096), 8);
	close(fd);
	ck_assert_uint_eq(got, v);
	node_close();
	unlink(img);
	char path[80];
	snprintf(path, sizeof(path), "%s/regions", dir);
	unlink(path);
	/* The group commit's state (docs/durability.md). */
	snprintf(path, sizeof(path), "%s.sync", img);
	unlink(path);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

START_TEST(peer_add_refuses)
{
	node_open(&loco_ucx_tcp_ops);
	uint8_t desc[LOCO_DESC_MAX];
	size_t len = sizeof(desc);
	char log[2048];
	struct capture cap;
	ck_assert_int_eq(ops->arena_desc(tp, desc, &len), 0);
	capture_start(&cap);
	int wrong_node = ops->peer_add(tp, 1, desc, len, 1 << 20, 0);
	int wrong_len = ops->peer_add(tp, 0, desc, len, 1 << 19, 0);
	int with_dm = ops->peer_add(tp, 0, desc, len, 1 << 20, 64);
	int garbage = ops->peer_add(tp, 0, "nonsense", 8, 1 << 20, 0);
	capture_end(&cap, log, sizeof(log));
	ck_assert_int_eq(wrong_node, -LOCO_EPROTO);
	ck_assert_int_eq(wrong_len, -LOCO_EPROTO);
	ck_assert_int_eq(with_dm, -LOCO_EPROTO);
	ck_assert_int_eq(garbage, -LOCO_EPROTO);
	ck_assert_msg(count_substr(log, "sent a bad ucx arena descriptor") == 4, "log: %s", log);
	/* A node that executes requests the other way (its flags). */
	desc[6] ^= UCX_DESC_F_AM;
	capture_start(&cap);
	int other_way = ops->peer_add(tp, 0, desc, len, 1 << 20, 0);
	capture_end(&cap, log, sizeof(log));
	ck_assert_int_eq(other_way, -LOCO_ETRANSPORT);
	ck_assert_msg(strstr(log, "node 0 executes READ, WRITE and atomics by UCX, this "
			      "node by loco's messages: give every node the same UCX_TLS"),
		      "log: %s", log);
	/* A descriptor made for another node; one of version 3 (a token
	 * shared by every member): each refused, saying which. */
	desc[6] ^= UCX_DESC_F_AM;
	uint8_t other[LOCO_DESC_MAX];
	size_t olen = sizeof(other);
	ck_assert_int_eq(ops->arena_desc_for(tp, 5, 1, other, &olen), 0);
	desc[4] = 3;
	capture_start(&cap);
	int for_other = ops->peer_add(tp, 0, other, olen, 1 << 20, 0);
	int v3 = ops->peer_add(tp, 0, desc, len, 1 << 20, 0);
	capture_end(&cap, log, sizeof(log));
	ck_assert_int_eq(for_other, -LOCO_EPROTO);
	ck_assert_int_eq(v3, -LOCO_EPROTO);
	ck_assert_msg(strstr(log, "node 0 sent this node (0) the ucx arena descriptor it "
			      "made for node 5") &&
		      strstr(log, "node 0 sent a version-3 ucx arena descriptor, this node "
			     "reads version 4"), "log: %s", log);
	struct loco_tp_qp *q2;
	ck_assert_int_eq(ops->qp_create(tp, cq, 1, &q2), -EINVAL); /* not in hosts */
	node_close();
}
END_TEST

/* The refusals' log lines: the target's (once per endpoint), the
 * requester's (once per QP). */
#define REFUSED_TARGET "refused requests from an endpoint that says it is node 0 " \
	"incarnation 0000000000000001: wrong credential"
#define REFUSED_SENDER "node 0 refused this node's requests: they carry a credential " \
	"it does not know"

/* A READ, a WRITE, a CAS and an FAA at 512 of the arena, into or from
 * LOCAL's words. */
static void token_ops(struct loco_wr w[4], uint64_t local[4])
{
	w[0] = (struct loco_wr){ .opcode = LOCO_OP_READ, .len = 8, .remote_off = 512,
				 .local = &local[0] };
	w[1] = (struct loco_wr){ .opcode = LOCO_OP_WRITE, .len = 8, .remote_off = 520,
				 .local = &local[1] };
	w[2] = (struct loco_wr){ .opcode = LOCO_OP_CAS, .len = 8, .remote_off = 528,
				 .local = &local[2], .compare = 33, .operand = 99 };
	w[3] = (struct loco_wr){ .opcode = LOCO_OP_FAA, .len = 8, .remote_off = 536,
				 .local = &local[3], .operand = 5 };
}

/* On TCP (loco's messages; also on sm with LOCO_UCX_RMA=am) a request
 * must carry the credential the target gave its sender, as an RDMA
 * request carries an rkey: with the sender's copy of it altered (QPs made while the
 * transport's copy of node 0's descriptor had a bit flipped), a READ, a
 * WRITE, a CAS and an FAA each fail with -EACCES, execute nothing and
 * copy nothing back; the target logs once per endpoint, not per message
 * (a new QP's endpoint may reuse a closed one's address and not be logged
 * again), the requester once per QP; with the credential restored a new
 * QP works. */
START_TEST(ops_wrong_token)
{
	node_open(variant(_i ? 3 : 0));
	ck_assert(tp->am);
	uint64_t *arena = (uint64_t *)ops->arena_base(tp);
	const uint64_t init[4] = { 11, 22, 33, 44 };
	loco_tp_copy_out((uint8_t *)(arena + 64), (const uint8_t *)init,
			 sizeof(init)); /* offsets 512 to 543 */
	uint64_t local[4] = { 7, 0xdead, 7, 7 };
	struct loco_wr w[4];
	struct loco_tp_qp *bad;
	char log[8192];
	struct capture cap;
	tp->peer[0].cred[1] ^= 1;
	/* Two messages on one endpoint before either answer: both refused,
	 * each side logs once. */
	ck_assert_int_eq(ops->qp_create(tp, cq, 0, &bad), 0);
	token_ops(w, local);
	w[0].signaled = w[1].signaled = 1;
	capture_start(&cap);
	ck_assert_int_eq(ops->post(bad, &w[0], 1), 0);
	ck_assert_int_eq(ops->post(bad, &w[1], 1), 0);
	struct loco_cqe c[2];
	int got = 0;
	for (unsigned spins = 0; got < 2 && spins < 10000000; spins++)
		got += ops->poll(cq, c + got, 2 - (unsigned)got);
	capture_end(&cap, log, sizeof(log));
	ck_assert_int_eq(got, 2);
	ck_assert_int_eq(c[0].status, -EACCES);
	ck_assert_int_eq(c[1].status, -LOCO_EQP); /* its QP failed before */
	ck_assert_msg(count_substr(log, REFUSED_TARGET) == 1 &&
		      count_substr(log, REFUSED_SENDER) == 1, "log: %s", log);
	ops->qp_destroy(bad);
	/* Each kind of request on a QP of its own. */
	for (unsigned i = 0; i < 4; i++) {
		ck_assert_int_eq(ops->qp_create(tp, cq, 0, &bad), 0);
		token_ops(w, local);
		capture_start(&cap);
		int rc = run_on(bad, &w[i], 1);
		capture_end(&cap, log, sizeof(log));
		ck_assert_msg(rc == -EACCES, "op %u: %d", i, rc);
		ck_assert_msg(count_substr(log, REFUSED_TARGET) <= 1 &&
			      count_substr(log, REFUSED_SENDER) == 1, "op %u: log: %s", i, log);
		ops->qp_destroy(bad);
	}
	arena_eq(512, init, sizeof(init));
	ck_assert(local[0] == 7 && local[2] == 7 && local[3] == 7);
	/* The credential restored: a new QP's requests execute. */
	tp->peer[0].cred[1] ^= 1;
	ck_assert_int_eq(ops->qp_create(tp, cq, 0, &bad), 0);
	token_ops(w, local);
	ck_assert_int_eq(run_on(bad, w, 4), 0);
	ck_assert_uint_eq(local[0], 11);
	ck_assert_uint_eq(local[2], 33);
	ck_assert_uint_eq(local[3], 44);
	const uint64_t after[4] = { 11, 0xdead, 99, 49 };
	arena_eq(512, after, sizeof(after));
	ops->qp_destroy(bad);
	node_close();
}
END_TEST

/* ---- a credential per client and incarnation --------------------------- */

/* Target node 0 and clients 1 and 2 in this process, each its own
 * transport; the clients reach node 0 only. */
#define T3_INC0 100
static struct loco_hosts hosts3;
static struct loco_tp *t3[3];
static struct loco_tp_cq *c3[3];

static void three_open(const struct loco_transport_ops *o, uint64_t inc1, uint64_t inc2)
{
	const uint64_t inc[3] = { T3_INC0, inc1, inc2 };
	memset(&hosts3, 0, sizeof(hosts3));
	for (uint32_t i = 0; i < 3; i++)
		hosts3.node[i] = (struct loco_host){ .id = i, .port = (uint16_t)(7000 + i),
						     .present = 1, .host = "127.0.0.1" };
	hosts3.count = 3;
	ops = o;
	for (uint32_t i = 0; i < 3; i++) {
		struct loco_tp_config cfg = { .node_id = i, .arena_bytes = 1 << 20,
					      .hosts = &hosts3, .timeout_ms = 5000,
					      .incarnation = inc[i] };
		ck_assert_int_eq(ops->open(&cfg, &t3[i]), 0);
		ck_assert_int_eq(ops->cq_create(t3[i], &c3[i]), 0);
	}
	ck_assert(t3[0]->am);
}

static void three_close(void)
{
	for (unsigned i = 0; i < 3; i++) {
		ops->cq_destroy(c3[i]);
		ops->close(t3[i]);
	}
}

/* Node 0's descriptor made for incarnation INC of node N, handed to N's
 * transport (what HELLO carries). */
static void three_give(uint32_t n, uint64_t inc)
{
	uint8_t desc[LOCO_DESC_MAX];
	size_t len = sizeof(desc);
	ck_assert_int_eq(ops->arena_desc_for(t3[0], n, inc, desc, &len), 0);
	ck_assert_int_eq(ops->peer_add(t3[n], 0, desc, len, 1 << 20, 0), 0);
}

/* Node 0's arena words at 512 to 543 (token_ops's) equal WANT. */
static void three_eq(const uint64_t want[4])
{
	uint64_t got[4];
	loco_tp_copy_in((uint8_t *)got, (const uint8_t *)ops->arena_base(t3[0]) + 512,
			sizeof(got));
	ck_assert_msg(!memcmp(got, want, sizeof(got)), "arena %lu %lu %lu %lu",
		      (unsigned long)got[0], (unsigned long)got[1],
		      (unsigned long)got[2], (unsigned long)got[3]);
}

/* Each kind of request (token_ops) on a QP of its own from node N, which
 * names node NAME_NODE, incarnation NAME_INC in its messages while it
 * posts: each fails with WANT (nothing executes, nothing is copied
 * back). */
static void three_refused(uint32_t n, uint32_t name_node, uint64_t name_inc, int want)
{
	struct loco_tp *c = t3[n];
	uint32_t self = c->self;
	uint64_t inc = c->incarnation;
	for (unsigned i = 0; i < 4; i++) {
		uint64_t local[4] = { 7, 0xdead, 7, 7 };
		struct loco_wr w[4];
		struct loco_tp_qp *q;
		ck_assert_int_eq(ops->qp_create(c, c3[n], 0, &q), 0);
		token_ops(w, local);
		c->self = name_node;
		c->incarnation = name_inc;
		int rc = run_at(c3[n], q, &w[i], 1);
		c->self = self;
		c->incarnation = inc;
		ck_assert_msg(rc == want, "node %u as (%u, %lu), op %u: %d", n, name_node,
			      (unsigned long)name_inc, i, rc);
		ck_assert(local[0] == 7 && local[2] == 7 && local[3] == 7);
		ops->qp_destroy(q);
	}
}

/* Every kind of request from node N, in one batch with a fence READ and
 * a FLUSH: executed. Node 0's words go from BEFORE to AFTER; the WRITE
 * writes V. */
static void three_works(uint32_t n, uint64_t v)
{
	uint64_t local[4] = { 7, v, 0, 0 }, zero = 0;
	struct loco_wr w[6];
	struct loco_tp_qp *q;
	uint64_t before[4];
	loco_tp_copy_in((uint8_t *)before, (const uint8_t *)ops->arena_base(t3[0]) + 512,
			sizeof(before));
	ck_assert_int_eq(ops->qp_create(t3[n], c3[n], 0, &q), 0);
	token_ops(w, local);
	w[2].compare = before[2];
	w[4] = (struct loco_wr){ .opcode = LOCO_OP_READ, .len = 0, .local = &zero };
	w[5] = (struct loco_wr){ .opcode = LOCO_OP_FLUSH, .len = 8, .remote_off = 520 };
	ck_assert_int_eq(run_at(c3[n], q, w, 6), 0);
	ck_assert_uint_eq(local[0], before[0]);
	ck_assert_uint_eq(local[2], before[2]);
	ck_assert_uint_eq(local[3], before[3]);
	const uint64_t after[4] = { before[0], v, 99, before[3] + 5 };
	three_eq(after);
	ops->qp_destroy(q);
}

/* One member cannot act as another: node 0 gives clients 1 and 2 each
 * a credential of their own; client 1, naming client 2 (its node, its
 * incarnation, or both) or another incarnation of itself with its own
 * credential, is refused -EACCES on every kind of request and executes
 * nothing, logged once per endpoint; both clients' own traffic works,
 * before and after. */
START_TEST(cred_forged_identity)
{
	three_open(variant(_i ? 3 : 0), 11, 22);
	const uint64_t init[4] = { 11, 22, 33, 44 };
	loco_tp_copy_out((uint8_t *)ops->arena_base(t3[0]) + 512, (const uint8_t *)init,
			 sizeof(init));
	three_give(1, 11);
	three_give(2, 22);
	three_works(1, 0x1111);
	three_works(2, 0x2222);
	uint64_t now[4];
	loco_tp_copy_in((uint8_t *)now, (const uint8_t *)ops->arena_base(t3[0]) + 512,
			sizeof(now));
	char log[16384];
	struct capture cap;
	capture_start(&cap);
	three_refused(1, 2, 22, -EACCES);     /* as client 2 */
	three_refused(1, 2, 11, -EACCES);     /* client 2's node, its own incarnation */
	three_refused(1, 1, 12, -EACCES);     /* another incarnation of node 1 */
	three_refused(1, 0, T3_INC0, -EACCES); /* as the target itself */
	capture_end(&cap, log, sizeof(log));
	three_eq(now);
	ck_assert_msg(count_substr(log, "that says it is node 2 incarnation "
				   "0000000000000016: wrong credential") >= 1 &&
		      count_substr(log, "wrong credential") <= 16, "log: %s", log);
	three_works(2, 0x2323);
	three_works(1, 0x1212);
	three_close();
}
END_TEST

/* A fenced incarnation cannot act by naming a new one: with client 1's
 * incarnation 11 fenced at node 0, its requests fail -LOCO_EFENCED;
 * naming incarnation 12 with 11's credential, -EACCES; node 0 executes
 * none. A descriptor made for 11 again gives nothing (still fenced);
 * incarnation 12, given its own credential (a new process's hello),
 * works, and client 2 never stopped. */
START_TEST(cred_fenced_new_incarnation)
{
	three_open(variant(_i ? 3 : 0), 11, 22);
	three_give(1, 11);
	three_give(2, 22);
	three_works(1, 5);
	uint64_t now[4];
	loco_tp_copy_in((uint8_t *)now, (const uint8_t *)ops->arena_base(t3[0]) + 512,
			sizeof(now));
	ck_assert_int_eq(ops->fence(t3[0], 1, 11, 1000), 0);
	char log[16384];
	struct capture cap;
	capture_start(&cap);
	three_refused(1, 1, 11, -LOCO_EFENCED);
	three_refused(1, 1, 12, -EACCES);
	three_refused(1, 1, 0, -EACCES);
	three_give(1, 11);
	three_refused(1, 1, 11, -LOCO_EFENCED);
	capture_end(&cap, log, sizeof(log));
	three_eq(now);
	three_works(2, 6);
	t3[1]->incarnation = 12;
	three_give(1, 12);
	three_works(1, 7);
	three_close();
}
END_TEST

/* A descriptor sent before its sender knew the receiver's incarnation
 * carries no credential: a QP waits for the next one (the core's second
 * hello), bounded by the transport's timeout. */
static void *give_later(void *arg)
{
	(void)arg;
	struct timespec ts = { 0, 50 * 1000000 };
	nanosleep(&ts, NULL);
	three_give(1, 11);
	return NULL;
}

START_TEST(cred_qp_waits)
{
	three_open(variant(_i ? 3 : 0), 11, 22);
	struct loco_tp_qp *q;
	three_give(1, 0);
	t3[1]->timeout_ms = 200;
	char log[4096];
	struct capture cap;
	capture_start(&cap);
	int rc = ops->qp_create(t3[1], c3[1], 0, &q);
	capture_end(&cap, log, sizeof(log));
	ck_assert_int_eq(rc, -ETIMEDOUT);
	ck_assert_msg(strstr(log, "node 0 gave no credential to this incarnation within "
			      "200 ms"), "log: %s", log);
	/* One for incarnation 10 (an earlier life of node 1): as none. */
	three_give(1, 10);
	ck_assert_int_eq(ops->qp_create(t3[1], c3[1], 0, &q), -ETIMEDOUT);
	t3[1]->timeout_ms = 5000;
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, give_later, NULL), 0);
	ck_assert_int_eq(ops->qp_create(t3[1], c3[1], 0, &q), 0);
	pthread_join(th, NULL);
	ops->qp_destroy(q);
	three_works(1, 9);
	three_close();
}
END_TEST

static int open_captured(char *log, size_t len)
{
	struct loco_tp_config cfg = tp_one_node(&hosts, 5000);
	struct capture cap;
	loco_log_set_level(LOCO_LOG_INFO);
	capture_start(&cap);
	int r = ops->open(&cfg, &tp);
	capture_end(&cap, log, len);
	return r;
}

START_TEST(open_library_missing)
{
	char log[4096];
	setenv("LOCO_UCX_LIB", "/nonexistent/libucp.so.0", 1);
	ck_assert_int_eq(open_captured(log, sizeof(log)), -ELIBACC);
	ck_assert_msg(strstr(log, "cannot load UCX (/nonexistent/libucp.so.0)") &&
		      strstr(log, "apt-get install libucx0"), "log: %s", log);
	ck_assert_uint_eq(count_substr(log, "loco "), 1);
	/* Later opens fail the same way without logging again. */
	ck_assert_int_eq(open_captured(log, sizeof(log)), -ELIBACC);
	ck_assert_uint_eq(count_substr(log, "loco "), 0);
}
END_TEST

START_TEST(open_no_usable_transport)
{
	char log[4096];
	setenv("UCX_TLS", "nosuchtransport", 1);
	ck_assert_int_eq(open_captured(log, sizeof(log)), -ENODEV);
	ck_assert_msg(strstr(log, "UCX found no usable transport (UCX_TLS=nosuchtransport"),
		      "log: %s", log);
}
END_TEST

START_TEST(open_bad_rma_mode)
{
	char log[4096];
	setenv("LOCO_UCX_RMA", "maybe", 1);
	ck_assert_int_eq(open_captured(log, sizeof(log)), -EINVAL);
	ck_assert_msg(strstr(log, "LOCO_UCX_RMA=maybe: say am"), "log: %s", log);
}
END_TEST

/* ---- a requester that dies ------------------------------------------------ */

/* The requester process (this binary, --requester DESC VARIANT FD): node
 * 0's arena descriptor in file DESC; it hammers that arena with batches of
 * READs, WRITEs, CASes and FAAs until it is killed, and writes one byte to
 * FD once its first batch completed (its connection is up). */
static int requester(const char *path, int v, int ready_fd)
{
	uint8_t desc[LOCO_DESC_MAX];
	FILE *f = fopen(path, "rb");
	size_t len = f ? fread(desc, 1, sizeof(desc), f) : 0;
	if (f)
		fclose(f);
	struct loco_tp_config cfg = tp_one_node(&hosts, 5000);
	loco_log_set_level(LOCO_LOG_ERR);
	ops = variant(v);
	if (!len || ops->open(&cfg, &tp) || ops->peer_add(tp, 0, desc, len, 1 << 20, 0) ||
	    ops->cq_create(tp, &cq) || ops->qp_create(tp, cq, 0, &qp))
		return 1;
	static uint8_t buf[16][4096];
	uint64_t one = 1;
	for (uint64_t round = 0;; round++) {
		struct loco_wr w[16];
		for (unsigned i = 0; i < 16; i++) {
			uint64_t off = ((round * 16 + i) * 4096) % ((1 << 20) - 4096);
			w[i] = (struct loco_wr){ .opcode = i % 4, .len = i % 4 < 2 ? 4096 : 8,
						 .remote_off = off, .local = buf[i],
						 .compare = 0, .operand = one };
		}
		w[15].signaled = 1;
		if (ops->post(qp, w, 16))
			return 1;
		struct loco_cqe c;
		int k;
		while (!(k = ops->poll(cq, &c, 1)))
			;
		if (k < 0 || c.status)
			return 1;
		if (round == 0 && write(ready_fd, "r", 1) != 1)
			return 1;
	}
}

/* Wait (up to 30 s) for requester PID's ready byte on FD. */
static void requester_wait_ready(int fd, pid_t pid)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;
	ck_assert_msg(poll(&p, 1, 30000) == 1, "requester %d: not ready in 30 s",
		      (int)pid);
	ck_assert_msg(read(fd, &c, 1) == 1,
		      "requester %d: stopped before its first batch completed",
		      (int)pid);
}

/* Requesters SIGKILLed with requests in flight to this node, again and
 * again: the node serves the next one (UCX 1.13's own emulation of RMA
 * over TCP aborted the target when the answer to a dead requester could
 * not be sent; loco's messages fail that answer quietly). Each is killed
 * 0-50 ms after its first batch completed, while it posts more: a kill
 * inside UCX's connection set-up (wireup) instead can abort the target in
 * UCX 1.13 itself (an assertion in ucp_request.c that UCX later removed;
 * docs/ucx.md), which is not what this test is about. */
START_TEST(target_survives_dead_requesters)
{
	node_open(variant(_i));
	uint8_t desc[LOCO_DESC_MAX];
	size_t len = sizeof(desc);
	ck_assert_int_eq(ops->arena_desc(tp, desc, &len), 0);
	char path[] = "/tmp/loco-test-ucx-desc-XXXXXX", vs[8];
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, desc, len), (ssize_t)len);
	close(fd);
	snprintf(vs, sizeof(vs), "%d", _i);
	srand((unsigned)time(NULL));
	for (int k = 0; k < 12; k++) {
		int pfd[2];
		ck_assert_int_eq(pipe(pfd), 0);
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			char fds[16];
			close(pfd[0]);
			snprintf(fds, sizeof(fds), "%d", pfd[1]);
			execl("/proc/self/exe", "test_ucx", "--requester", path, vs,
			      fds, (char *)NULL);
			_exit(127);
		}
		close(pfd[1]);
		requester_wait_ready(pfd[0], pid);
		close(pfd[0]);
		usleep((useconds_t)(rand() % 50000));
		int wst;
		ck_assert_int_eq(kill(pid, SIGKILL), 0);
		ck_assert_int_eq(waitpid(pid, &wst, 0), pid);
		ck_assert_msg(WIFSIGNALED(wst), "the requester stopped on its own: %d", wst);
	}
	unlink(path);
	/* Still serving: a WRITE and a READ of its own. */
	uint64_t v = 77, got = 0;
	struct loco_wr w[2] = {
		{ .opcode = LOCO_OP_WRITE, .len = 8, .remote_off = 8, .local = &v },
		{ .opcode = LOCO_OP_READ, .len = 8, .remote_off = 8, .local = &got },
	};
	ck_assert_int_eq(run(w, 2), 0);
	ck_assert_uint_eq(got, 77);
	node_close();
}
END_TEST

static Suite *ucx_suite(void)
{
	Suite *s = suite_create("ucx");
	TCase *t = tcase_create("wire");
	tcase_add_test(t, desc_roundtrip);
	tcase_add_test(t, desc_pack_refuses);
	tcase_add_test(t, desc_unpack_refuses);
	tcase_add_test(t, status_map);
	suite_add_tcase(s, t);
	t = tcase_create("ring");
	tcase_add_test(t, sq_retire_in_order);
	tcase_add_test(t, sq_atomic_layout);
	tcase_add_test(t, sq_checks);
	tcase_add_test(t, sq_memory);
	tcase_add_test(t, sq_failure_rules);
	tcase_add_test(t, sq_refused_batch);
	tcase_add_test(t, sq_replies);
	suite_add_tcase(s, t);
	t = tcase_create("ops");
	tcase_set_timeout(t, 60);
	tcase_add_loop_test(t, ops_every_opcode, 0, VARIANTS);
	tcase_add_loop_test(t, ops_mixed_batch, 0, VARIANTS);
	tcase_add_loop_test(t, ops_large_and_bounds, 0, VARIANTS);
	tcase_add_loop_test(t, ops_abort, 0, VARIANTS);
	tcase_add_loop_test(t, ops_durable, 0, VARIANTS);
	tcase_add_loop_test(t, ops_wrong_token, 0, 2);
	tcase_add_loop_test(t, cred_forged_identity, 0, 2);
	tcase_add_loop_test(t, cred_fenced_new_incarnation, 0, 2);
	tcase_add_loop_test(t, cred_qp_waits, 0, 2);
	tcase_add_test(t, peer_add_refuses);
	tcase_add_test(t, open_library_missing);
	tcase_add_test(t, open_no_usable_transport);
	tcase_add_test(t, open_bad_rma_mode);
	/* ucx-tcp and ucx-sm as they run: LOCO_UCX_RMA=ucx on TCP (variant
	 * 2) is the case that aborts (docs/ucx.md). */
	tcase_add_loop_test(t, target_survives_dead_requesters, 0, 2);
	suite_add_tcase(s, t);
	return s;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "--requester"))
		return requester(argv[2], atoi(argv[3]), atoi(argv[4]));
	SRunner *r = srunner_create(ucx_suite());
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
