/* SPDX-License-Identifier: MIT */
/* The remote access of regions (LOCO_REGION_REMOTE_*), on the transport
 * LOCO_TRANSPORT names (every one the build has): every op a region does not allow
 * (a WRITE to a read-only region, a CAS to a region without atomic access,
 * anything outside every region) fails with -EACCES, posts nothing and is
 * logged once per region and op; every allowed op works. For plain
 * regions (this node's, a peer's joined through a channel), create-or-open
 * regions (opened by name, found by an address read from remote memory),
 * on the inline and the out-of-line path, single ops and batches. Also
 * the core's side of the verbs transport without a device: what each
 * region is registered with (an emulated mem_reg), the key each request
 * carries, and the per-node region tables behind it (offset to region). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <loco/channel.h>
#include "loco/internal.h"
#include "test/common/capture.h"
#include "test/common/cluster.h"
#include "test/common/skip.h"

#define R LOCO_REGION_REMOTE_READ
#define W LOCO_REGION_REMOTE_WRITE
#define A LOCO_REGION_REMOTE_ATOMIC

static struct cluster cl;
static char logbuf[16384];

static void setup1(void)
{
	ck_assert_int_eq(cluster_start(&cl, 1, 0, 2000), 0);
}

static void setup3(void)
{
	ck_assert_int_eq(cluster_start(&cl, 3, 0, 5000), 0);
}

static void teardown(void)
{
	cluster_stop(&cl);
}

/* ---- every op against every access ------------------------------------ */

enum { OP_READ8, OP_WRITE8, OP_CAS, OP_FAA, OP_READ12, OP_WRITE12,
       OP_BREAD8, OP_BWRITE12, OP_BCAS, OP_BFAA, OP_N };

/* The access OP needs. */
static unsigned op_needs(unsigned op)
{
	switch (op) {
	case OP_READ8: case OP_READ12: case OP_BREAD8: return R;
	case OP_WRITE8: case OP_WRITE12: case OP_BWRITE12: return W;
	default: return A;
	}
}

/* OP at offset 64 of RR, synchronously (batches: posted and waited). */
static int op_run(struct loco_thread *thr, const struct loco_rregion *rr,
		  unsigned op, uint64_t *io)
{
	static const uint8_t twelve[12] = "abcdefghijk";
	struct loco_batch b;
	struct loco_ack ack = { 0, 0 };
	int rc;
	switch (op) {
	case OP_READ8: return loco_read(thr, rr, 64, io, 8);
	case OP_WRITE8: return loco_write(thr, rr, 64, io, 8);
	case OP_CAS: return loco_cas(thr, rr, 64, 0, 7, io);
	case OP_FAA: return loco_faa(thr, rr, 64, 1, io);
	case OP_READ12: return loco_read(thr, rr, 64, io, 12);
	case OP_WRITE12: return loco_write(thr, rr, 64, twelve, 12);
	default: break;
	}
	loco_batch_init(&b, thr);
	if (op == OP_BREAD8)
		loco_batch_read(&b, rr, 64, io, 8);
	else if (op == OP_BWRITE12)
		loco_batch_write(&b, rr, 64, twelve, 12);
	else if (op == OP_BCAS)
		loco_batch_cas(&b, rr, 64, 0, 7, io);
	else
		loco_batch_faa(&b, rr, 64, 1, io);
	rc = loco_batch_post(&b, &ack);
	return rc ? rc : loco_ack_wait(thr, &ack, -1);
}

/* Every op on RR (a region of ACCESS whose bytes at 64.. start as zero,
 * their CPU view LOCAL or NULL): the allowed ones work, the others fail
 * with -EACCES and change nothing, the READ's destination included. */
static void every_op(struct loco_thread *thr, const struct loco_rregion *rr,
		     unsigned access, const uint8_t *local)
{
	for (unsigned op = 0; op < OP_N; op++) {
		uint64_t io[2] = { 0x5151515151515151, 0x5151515151515151 };
		uint8_t before[16];
		ck_assert_int_eq(loco_fence(thr, LOCO_FENCE_THREAD, 0), 0);
		if (local)
			memcpy(before, local + 64, 16);
		int rc = op_run(thr, rr, op, io);
		ck_assert_int_eq(loco_fence(thr, LOCO_FENCE_THREAD, 0), 0);
		if (access & op_needs(op)) {
			ck_assert_msg(rc == 0, "op %u on access %#x: %d", op,
				      access, rc);
			continue;
		}
		ck_assert_msg(rc == -EACCES, "op %u on access %#x: %d", op,
			      access, rc);
		ck_assert_uint_eq(io[0], 0x5151515151515151);
		if (local)
			ck_assert_int_eq(memcmp(before, local + 64, 16), 0);
	}
	/* A zero-length READ reads nothing: allowed on every region. */
	ck_assert_int_eq(loco_read(thr, rr, 64, NULL, 0), 0);
}

static const unsigned accesses[] = { R, W, A, R | W, R | A, W | A,
				     R | W | A, 0 };

/* This node's regions, through the transport like a peer's: each access
 * alone and in every combination, and none. */
START_TEST(plain_regions)
{
	struct loco_mgr *m = cl.mgr[0];
	for (unsigned i = 0; i < sizeof(accesses) / sizeof(accesses[0]); i++) {
		struct loco_region reg;
		struct loco_rregion rr;
		char name[32];
		unsigned acc = accesses[i];
		snprintf(name, sizeof(name), "p.r%u", i);
		ck_assert_int_eq(loco_region_alloc_ex(m, name, 256,
			acc ? acc : LOCO_REGION_REMOTE_NONE, &reg), 0);
		ck_assert_uint_eq(reg.access, acc);
		loco_region_desc(m, &reg, &rr);
		ck_assert_uint_eq(rr.access, acc);
		struct capture cap;
		capture_start(&cap);
		every_op(cl.thr[0], &rr, acc, reg.base);
		capture_end(&cap, logbuf, sizeof(logbuf));
		loco_region_free(m, &reg);
	}
	/* Without access flags: all three (what code before them had). */
	struct loco_region all;
	ck_assert_int_eq(loco_region_alloc(m, "p.all", 64, &all), 0);
	ck_assert_uint_eq(all.access, R | W | A);
	loco_region_free(m, &all);
	ck_assert_int_eq(loco_region_alloc_ex(m, "p.bad", 64,
					      LOCO_REGION_REMOTE_NONE | R, &all),
			 -EINVAL);
}
END_TEST

/* A refusal names the region and the op, once per region and kind of op;
 * an op outside every region says so, once per node. */
START_TEST(refusals_logged_once)
{
	struct loco_mgr *m = cl.mgr[0];
	struct loco_thread *thr = cl.thr[0];
	struct loco_region reg;
	struct loco_rregion rr;
	uint64_t v = 1, old;
	ck_assert_int_eq(loco_region_alloc_ex(m, "log.ro", 256, R, &reg), 0);
	loco_region_desc(m, &reg, &rr);
	struct capture cap;
	capture_start(&cap);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(loco_write(thr, &rr, 8, &v, 8), -EACCES);
		ck_assert_int_eq(loco_write(thr, &rr, 16, &v, 4), -EACCES);
		ck_assert_int_eq(loco_cas(thr, &rr, 8, 0, 1, &old), -EACCES);
	}
	/* Free arena space is no region: a compact address there. */
	loco_raddr_t free_space = loco_raddr(0, reg.off + (8 << 20));
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(loco_post_read_raddr(thr, free_space, &old, 8,
						      NULL), -EACCES);
	capture_end(&cap, logbuf, sizeof(logbuf));
	ck_assert_uint_eq(count_substr(logbuf, "WRITE of"), 1);
	ck_assert_uint_eq(count_substr(logbuf, "CAS of"), 1);
	ck_assert_msg(strstr(logbuf, "region 'log.ro' on node 0 refused: the "
			     "region allows remote access (r--)"), "%s", logbuf);
	ck_assert_uint_eq(count_substr(logbuf, "no region this node knows"), 1);
	ck_assert_uint_eq(count_substr(logbuf, "access:"), 3);
	loco_region_free(m, &reg);
}
END_TEST

/* A descriptor built by hand carries no access: its ops are checked
 * against the region table (out of line) and allowed as the region says;
 * one that spans two regions, or leaves its region, is refused. */
START_TEST(handmade_descriptors)
{
	struct loco_mgr *m = cl.mgr[0];
	struct loco_thread *thr = cl.thr[0];
	struct loco_region a, b;
	uint64_t v = 3, old = 0;
	ck_assert_int_eq(loco_region_alloc_ex(m, "h.a", 64, R | A, &a), 0);
	ck_assert_int_eq(loco_region_alloc_ex(m, "h.b", 64, R | W, &b), 0);
	ck_assert_uint_eq(b.off, a.off + 64);
	struct loco_rregion span = { .node = 0, .off = a.off, .len = 128 };
	ck_assert_int_eq(loco_faa(thr, &span, 0, 1, &old), 0);
	ck_assert_int_eq(loco_write(thr, &span, 0, &v, 8), -EACCES);
	ck_assert_int_eq(loco_write(thr, &span, 64, &v, 8), 0);
	ck_assert_int_eq(loco_faa(thr, &span, 64, 1, &old), -EACCES);
	ck_assert_int_eq(loco_read(thr, &span, 56, &old, 16), -EACCES);
	ck_assert_int_eq(loco_read(thr, &span, 64, &old, 8), 0);
	ck_assert_uint_eq(old, 3);
	/* loco_region_at gives the real descriptor, access and all. */
	struct loco_rregion rr;
	ck_assert_int_eq(loco_region_at(m, 0, LOCO_SPACE_ARENA, b.off + 8, 8, &rr),
			 0);
	ck_assert_uint_eq(rr.off, b.off);
	ck_assert_uint_eq(rr.len, 64);
	ck_assert_uint_eq(rr.access, R | W);
	ck_assert_int_eq(loco_region_at(m, 0, LOCO_SPACE_ARENA, a.off + 60, 8,
					 &rr), -EACCES);
	loco_region_free(m, &a);
	loco_region_free(m, &b);
	/* Freed: no region there any more. */
	ck_assert_int_eq(loco_write(thr, &span, 64, &v, 8), -EACCES);
}
END_TEST

/* ---- peers -------------------------------------------------------------- */

/* A channel whose region "r" has access ACC[id] at each node. */
static void chan_make(struct loco_channel *ch, unsigned id, unsigned acc,
		      int *idx)
{
	ck_assert_int_eq(loco_channel_init(ch, cl.mgr[id], NULL, "j", 0x7, NULL),
			 0);
	ck_assert_int_eq(loco_channel_add_region_ex(ch, "r", 256, acc, NULL), 0);
	*idx = loco_channel_expect(ch, "r", 256, 0);
	ck_assert_int_ge(*idx, 0);
	ck_assert_int_eq(loco_channel_join(ch), 0);
}

/* Each node declares its own copy's access; the peers' ops follow it,
 * and the descriptors they get say so. */
START_TEST(joined_regions)
{
	static const unsigned acc[3] = { R, W, A };
	struct loco_channel ch[3];
	int idx[3];
	for (unsigned i = 0; i < 3; i++)
		chan_make(&ch[i], i, acc[i], &idx[i]);
	ck_assert_int_eq(cluster_ready(&cl, 5000), 0);
	for (unsigned from = 0; from < 3; from++) {
		for (unsigned to = 0; to < 3; to++) {
			const struct loco_rregion *rr =
				loco_channel_remote(&ch[from], (unsigned)idx[from],
						    to);
			ck_assert_ptr_nonnull(rr);
			ck_assert_uint_eq(rr->access, acc[to]);
			const struct loco_region *l =
				loco_channel_local(&ch[to], "r");
			every_op(cl.thr[from], rr, acc[to], l->base);
		}
	}
	for (unsigned i = 0; i < 3; i++)
		loco_channel_fini(&ch[i]);
}
END_TEST

/* Create-or-open: every opener declares the access alike, and gets it; a
 * node that never opened a region reaches it by an address read from
 * memory (REGION_FIND) with the same access; an address in no
 * create-or-open region is refused. */
START_TEST(create_or_open_regions)
{
	struct loco_rregion a, b, h;
	struct loco_mgr *m0 = cl.mgr[0], *m2 = cl.mgr[2];
	ck_assert_int_eq(loco_region_open_ex(m0, 1, "c.ro", 256, R, &a), 0);
	ck_assert_uint_eq(a.access, R);
	every_op(cl.thr[0], &a, R, NULL);
	struct capture cap;
	capture_start(&cap);
	ck_assert_int_eq(loco_region_open_ex(m2, 1, "c.ro", 256, R | W, &b),
			 -LOCO_EMISMATCH);
	ck_assert_int_eq(loco_region_open(m2, 1, "c.ro", 256, &b),
			 -LOCO_EMISMATCH);
	capture_end(&cap, logbuf, sizeof(logbuf));
	ck_assert_msg(strstr(logbuf, "region 'c.ro' exists with remote access "
			     "r--, node 2 asked for rw-"), "%s", logbuf);
	ck_assert_int_eq(loco_region_open_ex(m0, 1, "c.bad", 64,
					     LOCO_REGION_REMOTE_NONE, &b), -EINVAL);

	/* A channel's hosted region, held on its own node (node 1). */
	struct loco_channel hc, oc;
	ck_assert_int_eq(loco_channel_init(&hc, cl.mgr[1], NULL, "hc", 0x2, NULL),
			 0);
	ck_assert_int_eq(loco_channel_open_hosted_ex(&hc, 1, "w", 128, W | A, &h),
			 0);
	ck_assert_uint_eq(h.access, W | A);
	every_op(cl.thr[1], &h, W | A, NULL);
	ck_assert_int_eq(loco_channel_init(&oc, m0, NULL, "hc", 0x1, NULL), 0);
	ck_assert_int_eq(loco_channel_open_hosted_ex(&oc, 1, "w", 128, W, &b),
			 -LOCO_EMISMATCH);
	ck_assert_int_eq(loco_channel_open_hosted_ex(&oc, 1, "w", 128, W | A, &b),
			 0);
	every_op(cl.thr[0], &b, W | A, NULL);

	/* Node 2 opened neither: an address inside is found at node 1. */
	uint64_t v = 9, got = 0;
	loco_raddr_t in_a = loco_raddr(1, a.off + 64), in_h = loco_raddr(1, h.off);
	ck_assert_int_eq(loco_post_read_raddr(cl.thr[2], in_a, &got, 8, NULL), 0);
	ck_assert_int_eq(loco_post_write_raddr(cl.thr[2], in_a, &v, 8, NULL),
			 -EACCES);
	ck_assert_int_eq(loco_post_write_raddr(cl.thr[2], in_h, &v, 8, NULL), 0);
	ck_assert_int_eq(loco_post_faa_raddr(cl.thr[2], in_h, 1, &got, NULL), 0);
	ck_assert_int_eq(loco_fence(cl.thr[2], LOCO_FENCE_THREAD, 0), 0);
	ck_assert_uint_eq(got, 9);
	ck_assert_int_eq(loco_read(cl.thr[2], &(struct loco_rregion){
		.node = 1, .off = h.off, .len = 8 }, 0, &got, 8), -EACCES);
	struct loco_rregion found;
	ck_assert_int_eq(loco_region_at(m2, 1, LOCO_SPACE_ARENA, a.off + 8, 16,
					 &found), 0);
	ck_assert_uint_eq(found.off, a.off);
	ck_assert_uint_eq(found.access, R);
	/* Past every region of node 1, and a range leaving one. */
	ck_assert_int_eq(loco_region_at(m2, 1, LOCO_SPACE_ARENA, 8 << 20, 8,
					 &found), -EACCES);
	ck_assert_int_eq(loco_region_at(m2, 1, LOCO_SPACE_ARENA, a.off + 250, 8,
					 &found), -EACCES);
	ck_assert_int_eq(loco_post_read_raddr(cl.thr[2], loco_raddr(1, 8 << 20),
					      &got, 8, NULL), -EACCES);
	loco_channel_fini(&oc);
	loco_channel_fini(&hc);
}
END_TEST

/* ---- the region tables (offset to region and key) ---------------------- */

static struct loco_rdesc desc(uint64_t off, uint64_t len, unsigned access,
			      uint32_t key)
{
	return (struct loco_rdesc){ .space = LOCO_SPACE_ARENA, .access = access,
				    .key = key, .off = off, .len = len };
}

/* What a peer's table answers: the key and start of the region holding an
 * op, and -EACCES around it; a newer region replaces those it overlaps;
 * a thread's copy of the last region goes when the table changes. */
START_TEST(region_table_lookup)
{
	struct loco_mgr *m = cl.mgr[0];
	struct loco_thread *thr = cl.thr[0];
	const uint32_t peer = 2;   /* asked when the table has nothing */
	uint32_t key = 0;
	uint64_t koff = 0;
	/* Hello first: a new incarnation's hello clears the peer's table. */
	ck_assert_int_eq(loco_ctrl_connect(m, peer, 2000), 0);
	for (unsigned i = 0; i < 40; i++) {  /* out of order, past 16 */
		unsigned j = (i * 7) % 40;
		struct loco_rdesc d = desc(4096 + 256 * j, 128, R | W, 100 + j);
		ck_assert_int_eq(loco_rtab_put(m, peer, "t", &d), 0);
	}
	for (unsigned j = 0; j < 40; j++) {
		uint64_t at = 4096 + 256 * j;
		ck_assert_int_eq(loco_access_check(thr, peer, LOCO_SPACE_ARENA,
						   at + 120, 8, LOCO_OP_WRITE,
						   &key, &koff), 0);
		ck_assert_uint_eq(key, 100 + j);
		ck_assert_uint_eq(koff, at);
		ck_assert_int_eq(loco_access_check(thr, peer, LOCO_SPACE_ARENA,
						   at + 124, 8, LOCO_OP_READ,
						   &key, &koff), -EACCES);
		ck_assert_int_eq(loco_access_check(thr, peer, LOCO_SPACE_ARENA,
						   at, 8, LOCO_OP_CAS, &key,
						   &koff), -EACCES);
		ck_assert_int_eq(loco_access_check(thr, peer, LOCO_SPACE_DM, at, 8,
						   LOCO_OP_READ, &key, &koff),
				 -EACCES);
	}
	/* A region over three old ones replaces them. */
	struct loco_rdesc big = desc(4096 + 256, 600, A, 7);
	ck_assert_int_eq(loco_rtab_put(m, peer, "big", &big), 0);
	ck_assert_int_eq(loco_access_check(thr, peer, LOCO_SPACE_ARENA, 4096 + 512,
					   8, LOCO_OP_FAA, &key, &koff), 0);
	ck_assert_uint_eq(key, 7);
	ck_assert_int_eq(loco_access_check(thr, peer, LOCO_SPACE_ARENA, 4096 + 512,
					   8, LOCO_OP_READ, &key, &koff), -EACCES);
	ck_assert_int_eq(loco_access_check(thr, peer, LOCO_SPACE_ARENA, 4096, 8,
					   LOCO_OP_READ, &key, &koff), 0);
	ck_assert_uint_eq(key, 100);
	/* Gone (the thread's copy of it too), then all of the peer. */
	loco_rtab_del(m, peer, LOCO_SPACE_ARENA, 4096);
	ck_assert_int_eq(loco_access_check(thr, peer, LOCO_SPACE_ARENA, 4096, 8,
					   LOCO_OP_READ, &key, &koff), -EACCES);
	ck_assert_int_eq(loco_access_check(thr, peer, LOCO_SPACE_ARENA, 4096 + 512,
					   8, LOCO_OP_CAS, &key, &koff), 0);
	loco_rtab_clear(m, peer);
	ck_assert_int_eq(loco_access_check(thr, peer, LOCO_SPACE_ARENA, 4096 + 512,
					   8, LOCO_OP_CAS, &key, &koff), -EACCES);
}
END_TEST

/* ---- what the transport registers --------------------------------------- */

static struct loco_transport_ops emu_ops;
static struct {
	unsigned regs, deregs;
	uint64_t off, len;
	unsigned access;
	uint32_t space;
	uint32_t last_key;
	uint64_t last_key_off;
} emu;

struct loco_tp_mr {
	uint32_t key;
};

static int emu_mem_reg(struct loco_tp *tp, uint32_t space, uint64_t off,
		       uint64_t len, unsigned access, struct loco_tp_mr **mr,
		       uint32_t *key)
{
	(void)tp;
	static struct loco_tp_mr mrs[64];
	ck_assert_uint_lt(emu.regs, 64);
	ck_assert_uint_ne(access, 0);
	emu.space = space;
	emu.off = off;
	emu.len = len;
	emu.access = access;
	mrs[emu.regs].key = 0x1000 + emu.regs;
	*mr = &mrs[emu.regs++];
	*key = (*mr)->key;
	return 0;
}

static void emu_mem_dereg(struct loco_tp *tp, struct loco_tp_mr *mr)
{
	(void)tp;
	(void)mr;
	emu.deregs++;
}

static int emu_post(struct loco_tp_qp *qp, const struct loco_wr *wr,
		    unsigned n)
{
	emu.last_key = wr[n - 1].key;
	emu.last_key_off = wr[n - 1].key_off;
	return loco_shm_ops.post(qp, wr, n);
}

/* Every region with access is registered with exactly it, before anyone
 * learns of it; one without is not; a free deregisters; each request
 * carries its region's key (what verbs puts in the work request). */
START_TEST(registration_and_keys)
{
	struct loco_mgr *m = cl.mgr[0];
	emu_ops = *m->tp_ops;
	emu_ops.mem_reg = emu_mem_reg;
	emu_ops.mem_dereg = emu_mem_dereg;
	emu_ops.post = emu_post;
	emu_ops.qp_direct = NULL;   /* every op through post */
	m->tp_ops = &emu_ops;
	struct loco_region ro, none;
	struct loco_rregion rr;
	uint64_t v = 0;
	ck_assert_int_eq(loco_region_alloc_ex(m, "k.ro", 100, R, &ro), 0);
	ck_assert_uint_eq(emu.regs, 1);
	ck_assert_uint_eq(emu.access, R);
	ck_assert_uint_eq(emu.off, ro.off);
	ck_assert_uint_eq(emu.len, 100);
	ck_assert_uint_eq(emu.space, LOCO_SPACE_ARENA);
	ck_assert_uint_eq(loco_region_key(m, &ro), 0x1000);
	ck_assert_int_eq(loco_region_alloc_ex(m, "k.none", 64,
					      LOCO_REGION_REMOTE_NONE, &none), 0);
	ck_assert_uint_eq(emu.regs, 1);
	struct loco_rregion hosted;
	ck_assert_int_eq(loco_region_open_ex(m, 0, "k.open", 64, W | A, &hosted),
			 0);
	ck_assert_uint_eq(emu.regs, 2);
	ck_assert_uint_eq(emu.access, W | A);
	loco_region_desc(m, &ro, &rr);
	ck_assert_int_eq(loco_read(cl.thr[0], &rr, 8, &v, 8), 0);
	ck_assert_uint_eq(emu.last_key, 0x1000);
	ck_assert_uint_eq(emu.last_key_off, ro.off);
	ck_assert_int_eq(loco_write(cl.thr[0], &hosted, 8, &v, 8), 0);
	ck_assert_uint_eq(emu.last_key, 0x1001);
	ck_assert_uint_eq(emu.last_key_off, hosted.off);
	/* A fence READ names no region. */
	ck_assert_int_eq(loco_fence(cl.thr[0], LOCO_FENCE_THREAD, 0), 0);
	ck_assert_uint_eq(emu.last_key, 0);
	loco_region_free(m, &ro);
	ck_assert_uint_eq(emu.deregs, 1);
	loco_region_free(m, &none);
	ck_assert_uint_eq(emu.deregs, 1);
	unsigned n = 0;
	ck_assert_int_eq(loco_region_drop(m, 0, "k.open", 0, &n), 0);
	ck_assert_uint_eq(emu.deregs, 2);
	m->tp_ops = &loco_shm_ops;
}
END_TEST

int main(void)
{
	int skip = test_transport_skip();
	if (skip)
		return skip;
	Suite *s = suite_create("access");
	TCase *one = tcase_create("one-node");
	tcase_add_checked_fixture(one, setup1, teardown);
	tcase_set_timeout(one, 60);
	tcase_add_test(one, plain_regions);
	tcase_add_test(one, refusals_logged_once);
	tcase_add_test(one, handmade_descriptors);
	/* The emulation wraps shm's post. */
	const char *tp = getenv("LOCO_TRANSPORT");
	if (!tp || !strcmp(tp, "shm"))
		tcase_add_test(one, registration_and_keys);
	suite_add_tcase(s, one);
	TCase *three = tcase_create("three-nodes");
	tcase_add_checked_fixture(three, setup3, teardown);
	tcase_set_timeout(three, 120);
	tcase_add_test(three, joined_regions);
	tcase_add_test(three, create_or_open_regions);
	tcase_add_test(three, region_table_lookup);
	suite_add_tcase(s, three);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
