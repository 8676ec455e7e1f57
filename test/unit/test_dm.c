/* SPDX-License-Identifier: MIT */
/* The core's device-memory space without a device: a one-node shm cluster
 * whose transport table is swapped, before anything else runs, for one
 * with an emulated device memory (a buffer per node that work requests
 * with LOCO_SPACE_DM reach, and dm_zero clears). Checks hot-region
 * placement (8-byte units, zeroing, names unique across spaces, the
 * fallback to the arena with one warning when full, reuse after free),
 * remote operations and batches routed by space and bounds-checked against
 * the device memory, a hot atomic_var whose host reaches its word only
 * through the transport, and the JOIN wire format carrying the space. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <loco/channels/atomic_var.h>
#include "loco/internal.h"
#include "loco/transport/shm.h"
#include "test/common/cluster1.h"
#include "test/common/capture.h"

#define DM_BYTES 256

static _Alignas(64) uint8_t dm_mem[LOCO_MAX_NODES][DM_BYTES];
static struct loco_transport_ops emu_ops;
static unsigned dm_ops, dm_zeroes;
static struct cluster1 cl;
static struct loco_thread *thr;

static uint64_t emu_dm_len(struct loco_tp *tp)
{
	(void)tp;
	return DM_BYTES;
}

static int emu_dm_zero(struct loco_tp *tp, uint64_t off, uint64_t len)
{
	ck_assert_uint_eq((off | len) % 8, 0);
	ck_assert(off <= DM_BYTES && len <= DM_BYTES - off);
	memset(dm_mem[tp->id] + off, 0, len);
	dm_zeroes++;
	return 0;
}

/* What a HELLO carries: the peer's device memory is as big as ours. */
static int emu_peer_add(struct loco_tp *tp, uint32_t peer, const void *desc,
			size_t len, uint64_t arena_len, uint64_t dm_len)
{
	if (dm_len != DM_BYTES)
		return -LOCO_EPROTO;
	return loco_shm_peer_add(tp, peer, desc, len, arena_len, 0);
}

/* shm's post, with LOCO_SPACE_DM requests executed on the peer's buffer. */
static int emu_post(struct loco_tp_qp *qp, const struct loco_wr *wr, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (wr[i].space > LOCO_SPACE_DM ||
		    (wr[i].space == LOCO_SPACE_DM &&
		     (wr[i].remote_off > DM_BYTES || wr[i].len > DM_BYTES - wr[i].remote_off)))
			return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		bool dm = wr[i].space == LOCO_SPACE_DM;
		loco_shm_execute(dm ? dm_mem[qp->peer] : qp->base, &wr[i]);
		dm_ops += dm;
		if (wr[i].signaled)
			qp->done = wr[i].wr_id;
	}
	return 0;
}

/* Node 0 runs; node 1 is in the hosts file only (the JOIN test plays it). */
static void setup(void)
{
	char extra[64];
	snprintf(extra, sizeof(extra), "1 127.0.0.1:%d compute\n", free_port());
	ck_assert_int_eq(cluster1_start(&cl, extra, 2000), 0);
	struct loco_mgr *m = cl.mgr;
	emu_ops = *m->tp_ops;
	emu_ops.dm_len = emu_dm_len;
	emu_ops.dm_zero = emu_dm_zero;
	emu_ops.peer_add = emu_peer_add;
	emu_ops.post = emu_post;
	m->tp_ops = &emu_ops;
	m->dm_len = DM_BYTES;
	struct loco_hello h;
	loco_hello_self(m, &h);
	ck_assert_int_eq(loco_peer_add(m, &h, true), 0);
	ck_assert_int_eq(loco_thread_create(m, &thr), 0);
	memset(dm_mem, 0xee, sizeof(dm_mem)); /* device memory starts undefined */
	dm_ops = dm_zeroes = 0;
}

static void teardown(void)
{
	loco_thread_destroy(thr);
	cluster1_stop(&cl);
}

static char logbuf[8192];
static struct capture cap;

START_TEST(hot_regions_placed_in_device_memory)
{
	struct loco_region a, b, c, d;
	uint64_t total, used;
	ck_assert_int_eq(loco_region_alloc_ex(cl.mgr, "h.a", 8, LOCO_REGION_HOT, &a), 0);
	ck_assert_uint_eq(a.space, LOCO_SPACE_DM);
	ck_assert_ptr_null(a.base);          /* no CPU address */
	ck_assert_uint_eq(a.off, 0);
	ck_assert_uint_eq(a.len, 8);
	ck_assert_int_eq(loco_region_alloc_ex(cl.mgr, "h.b", 12, LOCO_REGION_HOT, &b), 0);
	ck_assert_uint_eq(b.off, 8);         /* 8-byte units, not 64 */
	ck_assert_uint_eq(dm_zeroes, 2);
	for (unsigned i = 0; i < 24; i++)   /* zeroed through the transport */
		ck_assert_uint_eq(dm_mem[0][i], 0);
	ck_assert_uint_eq(dm_mem[0][24], 0xee);
	loco_mgr_dm_usage(cl.mgr, &total, &used);
	ck_assert_uint_eq(total, DM_BYTES);
	ck_assert_uint_eq(used, 24);
	struct loco_rregion rr;
	loco_region_desc(cl.mgr, &b, &rr);
	ck_assert_uint_eq(rr.space, LOCO_SPACE_DM);
	ck_assert_uint_eq(rr.off, 8);
	ck_assert_uint_eq(rr.len, 12);
	/* Names are unique across both spaces; plain regions stay in the arena. */
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "h.a", 8, &c), -EEXIST);
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "p.a", 8, &c), 0);
	ck_assert_uint_eq(c.space, LOCO_SPACE_ARENA);
	ck_assert_ptr_nonnull(c.base);
	ck_assert_int_eq(loco_region_alloc_ex(cl.mgr, "p.a", 8, LOCO_REGION_HOT, &d),
			 -EEXIST);
	ck_assert_int_eq(loco_region_alloc_ex(cl.mgr, "h.x", 8, 0x100, &d), -EINVAL);
	ck_assert_int_eq(loco_region_alloc_ex(cl.mgr, "h.x", 0, LOCO_REGION_HOT, &d),
			 -EINVAL);
	loco_region_free(cl.mgr, &a);
	loco_region_free(cl.mgr, &a);        /* twice is harmless */
	loco_mgr_dm_usage(cl.mgr, &total, &used);
	ck_assert_uint_eq(used, 16);
	ck_assert_int_eq(loco_region_alloc_ex(cl.mgr, "h.c", 8, LOCO_REGION_HOT, &a), 0);
	ck_assert_uint_eq(a.off, 0);         /* the freed piece is reused */
	loco_region_free(cl.mgr, &a);
	loco_region_free(cl.mgr, &b);
	loco_region_free(cl.mgr, &c);
}
END_TEST

/* Full device memory: hot regions go to the arena, with one warning. */
START_TEST(full_device_memory_falls_back_once)
{
	struct loco_region big, x, y, z;
	loco_log_set_level(LOCO_LOG_INFO);
	ck_assert_int_eq(loco_region_alloc_ex(cl.mgr, "h.big", DM_BYTES - 8,
					      LOCO_REGION_HOT, &big), 0);
	ck_assert_uint_eq(big.space, LOCO_SPACE_DM);
	capture_start(&cap);
	int r1 = loco_region_alloc_ex(cl.mgr, "h.x", 8, LOCO_REGION_HOT, &x);
	int r2 = loco_region_alloc_ex(cl.mgr, "h.y", 16, LOCO_REGION_HOT, &y);
	int r3 = loco_region_alloc_ex(cl.mgr, "h.z", 8, LOCO_REGION_HOT, &z);
	capture_end(&cap, logbuf, sizeof(logbuf));
	const char *log = logbuf;
	ck_assert_int_eq(r1 | r2 | r3, 0);
	ck_assert_uint_eq(x.space, LOCO_SPACE_DM);     /* the last 8 bytes */
	ck_assert_uint_eq(x.off, DM_BYTES - 8);
	ck_assert_uint_eq(y.space, LOCO_SPACE_ARENA);
	ck_assert_ptr_nonnull(y.base);
	ck_assert_uint_eq(y.off % 64, 0);
	ck_assert_uint_eq(z.space, LOCO_SPACE_ARENA);
	ck_assert_msg(count_substr(log, "warning") == 1 &&
		      strstr(log, "hot region h.y (16 bytes) is in host memory: device "
			     "memory is full (256 of 256 bytes in use)"), "log: %s", log);
	loco_region_free(cl.mgr, &big);
	loco_region_free(cl.mgr, &x);
	loco_region_free(cl.mgr, &y);
	loco_region_free(cl.mgr, &z);
}
END_TEST

/* Operations on a device-memory region reach the device memory (here: the
 * emulated buffer), never the arena; bounds are the region's and the
 * device memory's. */
START_TEST(ops_routed_by_space)
{
	struct loco_region h, p;
	struct loco_rregion hr, pr;
	uint64_t old = 0, v = 0, w = 0x1122334455667788;
	ck_assert_int_eq(loco_region_alloc_ex(cl.mgr, "h.w", 16, LOCO_REGION_HOT, &h), 0);
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "p.w", 64, &p), 0);
	loco_region_desc(cl.mgr, &h, &hr);
	loco_region_desc(cl.mgr, &p, &pr);
	ck_assert_int_eq(loco_write(thr, &hr, 8, &w, 8), 0);
	ck_assert_int_eq(memcmp(dm_mem[0] + h.off + 8, &w, 8), 0);
	ck_assert_int_eq(loco_faa(thr, &hr, 0, 5, &old), 0);
	ck_assert_uint_eq(old, 0);
	ck_assert_int_eq(loco_cas(thr, &hr, 0, 5, 7, &old), 0);
	ck_assert_uint_eq(old, 5);
	ck_assert_int_eq(loco_read(thr, &hr, 0, &v, 8), 0);
	ck_assert_uint_eq(v, 7);
	ck_assert_uint_eq(dm_ops, 4);
	for (unsigned i = 0; i < 64; i++)
		ck_assert_uint_eq(((uint8_t *)p.base)[i], 0);  /* arena untouched */
	/* Bounds: the region's, then the device memory's; misaligned atomics. */
	ck_assert_int_eq(loco_read(thr, &hr, 16, &v, 8), -EINVAL);
	ck_assert_int_eq(loco_faa(thr, &hr, 4, 1, &old), -EINVAL);
	struct loco_rregion forged = { .node = 0, .space = LOCO_SPACE_DM,
				       .off = DM_BYTES - 8, .len = 16 };
	ck_assert_int_eq(loco_read(thr, &forged, 0, &v, 16), -EINVAL);
	forged.off = 0;  /* offset 0 is fine in device memory (not in the arena) */
	ck_assert_int_eq(loco_read(thr, &forged, 0, &v, 8), 0);
	forged.space = 5;
	ck_assert_int_eq(loco_read(thr, &forged, 0, &v, 8), -EINVAL);
	struct loco_rregion absent = { .node = 1, .space = LOCO_SPACE_DM, .len = 8 };
	ck_assert_int_eq(loco_read(thr, &absent, 0, &v, 8), -ENOTCONN);
	/* A batch mixing both spaces goes as one doorbell. */
	struct loco_batch b;
	struct loco_stats s0, s1;
	uint64_t f = 0, r = 0;
	loco_thread_stats(thr, &s0);
	loco_batch_init(&b, thr);
	loco_batch_write(&b, &pr, 0, &w, 8);
	loco_batch_faa(&b, &hr, 0, 3, &f);
	loco_batch_read(&b, &hr, 8, &r, 8);
	ck_assert_int_eq(loco_batch_post(&b, NULL), 0);
	ck_assert_int_eq(loco_fence(thr, LOCO_FENCE_THREAD, 0), 0);
	loco_thread_stats(thr, &s1);
	ck_assert_uint_eq(s1.doorbells - s0.doorbells, 1);
	ck_assert_uint_eq(f, 7);
	ck_assert_uint_eq(r, w);
	ck_assert_int_eq(memcmp(p.base, &w, 8), 0);
	ck_assert_int_eq(memcmp(dm_mem[0] + h.off, &(uint64_t){ 10 }, 8), 0);
	loco_region_free(cl.mgr, &h);
	loco_region_free(cl.mgr, &p);
}
END_TEST

/* A hot atomic_var hosted here: the word is in device memory and the
 * host reaches it through the transport. */
START_TEST(hot_atomic_var_on_device_memory)
{
	struct loco_atomic_var av;
	uint64_t old = 0, v = 0;
	ck_assert_int_eq(loco_atomic_var_init_ex(&av, cl.mgr, NULL, "a", 0,
						 UINT64_C(1) << 0, LOCO_REGION_HOT), 0);
	ck_assert_int_eq(loco_mgr_wait_ready(cl.mgr, 1000), 0);
	const struct loco_region *word = loco_channel_local(&av.base, "word");
	ck_assert_ptr_nonnull(word);
	ck_assert_uint_eq(word->space, LOCO_SPACE_DM);
	ck_assert_ptr_null(word->base);
	ck_assert_int_eq(loco_atomic_var_faa(&av, thr, 41, &old), 0);
	ck_assert_int_eq(loco_atomic_var_faa(&av, thr, 1, &old), 0);
	ck_assert_uint_eq(old, 41);
	ck_assert_int_eq(loco_atomic_var_write(&av, thr, 99), 0);
	ck_assert_int_eq(loco_atomic_var_read(&av, thr, &v), 0);
	ck_assert_uint_eq(v, 99);
	uint64_t in_dm;
	memcpy(&in_dm, dm_mem[0] + word->off, 8);
	ck_assert_uint_eq(in_dm, 99);
	ck_assert_uint_ge(dm_ops, 4);
	loco_atomic_var_fini(&av);
}
END_TEST

/* JOIN from (pretend) node 1 offering a device-memory region; the reply
 * offers ours with its space. Node 1 is "known" with our own arena
 * descriptor (shm maps the same file again). */
static void join_from_1(const char *chan, uint32_t space, uint64_t off,
			struct loco_rbuf *r, struct loco_wbuf *reply)
{
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_str(&w, chan);
	loco_put_u32(&w, 1);               /* node 1 offers "w" */
	loco_put_str(&w, "w");
	loco_put_u32(&w, space);
	loco_put_u32(&w, LOCO_REGION_REMOTE_READ);   /* access */
	loco_put_u32(&w, 0);                         /* key */
	loco_put_u64(&w, off);
	loco_put_u64(&w, 8);
	loco_put_u32(&w, 1);               /* and expects "h" of 8 bytes */
	loco_put_str(&w, "h");
	loco_put_u64(&w, 8);
	ck_assert_int_eq(w.err, 0);
	loco_wbuf_init(reply);
	loco_channel_handle_join(cl.mgr, 1, w.p, w.len, reply);
	loco_wbuf_fini(&w);
	ck_assert_int_eq(reply->err, 0);
	loco_rbuf_init(r, reply->p, reply->len);
}

START_TEST(join_carries_the_space)
{
	struct loco_mgr *m = cl.mgr;
	struct loco_hello hl;
	loco_hello_self(m, &hl);
	hl.id = 1;
	ck_assert_int_eq(loco_peer_add(m, &hl, true), 0);
	struct loco_channel ch;
	struct loco_region *h;
	ck_assert_int_eq(loco_channel_init(&ch, m, NULL, "c", UINT64_C(1) << 1, NULL), 0);
	ck_assert_int_eq(loco_channel_add_region_ex(&ch, "h", 8, LOCO_REGION_HOT, &h), 0);
	int idx = loco_channel_expect(&ch, "w", 8, 0);
	ck_assert_int_ge(idx, 0);
	ck_assert_int_eq(loco_channel_join(&ch), 0);

	struct loco_rbuf r;
	struct loco_wbuf reply;
	char msg[256], name[32];
	join_from_1("c", LOCO_SPACE_DM, 16, &r, &reply);
	ck_assert_uint_eq(loco_get_u32(&r), 0);          /* status */
	loco_get_str(&r, msg, sizeof(msg));
	ck_assert_uint_eq(loco_get_u32(&r), 1);          /* our offer */
	loco_get_str(&r, name, sizeof(name));
	ck_assert_str_eq(name, "h");
	ck_assert_uint_eq(loco_get_u32(&r), LOCO_SPACE_DM);
	ck_assert_uint_eq(loco_get_u32(&r), LOCO_REGION_REMOTE_ALL);
	ck_assert_uint_eq(loco_get_u32(&r), 0);          /* shm: no keys */
	ck_assert_uint_eq(loco_get_u64(&r), h->off);
	ck_assert_uint_eq(loco_get_u64(&r), 8);
	ck_assert_int_eq(loco_rbuf_done(&r), 0);
	loco_wbuf_fini(&reply);
	const struct loco_rregion *rr = loco_channel_remote(&ch, (unsigned)idx, 1);
	ck_assert_ptr_nonnull(rr);
	ck_assert_uint_eq(rr->space, LOCO_SPACE_DM);
	ck_assert_uint_eq(rr->off, 16);
	ck_assert_uint_eq(rr->len, 8);
	ck_assert_uint_eq(rr->access, LOCO_REGION_REMOTE_READ);
	loco_channel_fini(&ch);

	/* An offer outside the peer's device memory fails the join. */
	ck_assert_int_eq(loco_channel_init(&ch, m, NULL, "d", UINT64_C(1) << 1, NULL), 0);
	ck_assert_int_eq(loco_channel_add_region(&ch, "h", 8, NULL), 0);
	ck_assert_int_ge(loco_channel_expect(&ch, "w", 8, 0), 0);
	ck_assert_int_eq(loco_channel_join(&ch), 0);
	capture_start(&cap);
	join_from_1("d", LOCO_SPACE_DM, DM_BYTES - 4, &r, &reply);
	capture_end(&cap, logbuf, sizeof(logbuf));
	ck_assert_uint_eq(loco_get_u32(&r), LOCO_EPROTO);
	loco_get_str(&r, msg, sizeof(msg));
	ck_assert_msg(strstr(msg, "offered region 'w' outside its device memory"), "%s", msg);
	loco_wbuf_fini(&reply);
	loco_channel_fini(&ch);

	/* An unknown space is a malformed JOIN. */
	join_from_1("c", 7, 16, &r, &reply);
	ck_assert_uint_eq(loco_get_u32(&r), LOCO_EPROTO);
	loco_get_str(&r, msg, sizeof(msg));
	ck_assert_str_eq(msg, "malformed JOIN");
	loco_wbuf_fini(&reply);
}
END_TEST

/* Hosted hot regions: create-or-open with LOCO_REGION_HOT puts a new
 * region in device memory, both through a channel's hold on its own node
 * and through the REGION_OPEN handler (its flags, answered with the
 * space, access and key); an existing region is opened where it is; the
 * last hold frees it; drop reaches device memory too. */
static void region_open_req(const char *name, uint64_t len, uint32_t flags,
			    struct loco_rbuf *r, struct loco_wbuf *reply)
{
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_str(&w, name);
	loco_put_u64(&w, len);
	loco_put_u32(&w, flags);
	ck_assert_int_eq(w.err, 0);
	loco_wbuf_init(reply);
	loco_region_handle_open(cl.mgr, 1, w.p, w.len, reply);
	loco_wbuf_fini(&w);
	ck_assert_int_eq(reply->err, 0);
	loco_rbuf_init(r, reply->p, reply->len);
}

START_TEST(hosted_hot_regions)
{
	struct loco_mgr *m = cl.mgr;
	struct loco_channel a;
	struct loco_rregion ra, rb, rp;
	uint64_t total, used;
	ck_assert_int_eq(loco_channel_init(&a, m, NULL, "t", UINT64_C(1), NULL),
			 0);
	ck_assert_int_eq(loco_channel_open_hosted_ex(&a, 0, "locks", 16,
						     LOCO_REGION_HOT, &ra), 0);
	ck_assert_uint_eq(ra.space, LOCO_SPACE_DM);
	ck_assert_int_eq(loco_channel_open_hosted(&a, 0, "plain", 16, &rp), 0);
	ck_assert_uint_eq(rp.space, LOCO_SPACE_ARENA);
	ck_assert_int_eq(loco_channel_open_hosted_ex(&a, 0, "bad", 8, 0x100, &rb),
			 -EINVAL);
	ck_assert_int_eq(loco_channel_open_hosted_ex(&a, 0, "bad", 8,
						     LOCO_REGION_REMOTE_NONE, &rb),
			 -EINVAL);
	uint64_t v = 0, w = 77;
	ck_assert_int_eq(loco_write(thr, &ra, 8, &w, 8), 0);
	ck_assert_int_eq(memcmp(dm_mem[0] + ra.off + 8, &w, 8), 0);
	/* Another hold of the name opens the same device memory, flags or
	 * not; a mismatched size is refused. */
	uint32_t space;
	uint64_t off;
	ck_assert_int_eq(loco_region_hold(m, "t.locks", 16, 0, &space, &off,
					  NULL, 0), 0);
	ck_assert_uint_eq(space, LOCO_SPACE_DM);
	ck_assert_uint_eq(off, ra.off);
	ck_assert_int_eq(loco_region_hold(m, "t.locks", 24, LOCO_REGION_HOT,
					  &space, &off, NULL, 0), -LOCO_EMISMATCH);
	ck_assert_int_eq(loco_read(thr, &ra, 8, &v, 8), 0);
	ck_assert_uint_eq(v, 77);
	loco_region_unhold(m, LOCO_SPACE_DM, ra.off);
	loco_mgr_dm_usage(m, &total, &used);
	ck_assert_uint_eq(used, 16);              /* a's hold keeps it */
	loco_channel_fini(&a);
	loco_mgr_dm_usage(m, &total, &used);
	ck_assert_uint_eq(used, 0);               /* the last hold freed it */

	/* REGION_OPEN as a peer sends it: the reply has the space, access
	 * and key. */
	struct loco_rbuf r;
	struct loco_wbuf reply;
	char msg[256];
	region_open_req("p.hot", 8, LOCO_REGION_HOT | LOCO_REGION_REMOTE_ATOMIC,
			&r, &reply);
	ck_assert_uint_eq(loco_get_u32(&r), 0);
	loco_get_str(&r, msg, sizeof(msg));
	uint64_t hot_off = loco_get_u64(&r);
	ck_assert_uint_eq(loco_get_u64(&r), 8);
	ck_assert_uint_eq(loco_get_u64(&r), LOCO_SPACE_DM);
	ck_assert_uint_eq(loco_get_u64(&r), LOCO_REGION_REMOTE_ATOMIC);
	ck_assert_uint_eq(loco_get_u64(&r), 0);          /* shm: no keys */
	ck_assert_int_eq(loco_rbuf_done(&r), 0);
	loco_wbuf_fini(&reply);
	/* Without HOT, the same region where it is. */
	region_open_req("p.hot", 8, LOCO_REGION_REMOTE_ATOMIC, &r, &reply);
	ck_assert_uint_eq(loco_get_u32(&r), 0);
	loco_get_str(&r, msg, sizeof(msg));
	ck_assert_uint_eq(loco_get_u64(&r), hot_off);
	ck_assert_uint_eq(loco_get_u64(&r), 8);
	ck_assert_uint_eq(loco_get_u64(&r), LOCO_SPACE_DM);
	loco_wbuf_fini(&reply);
	/* An unknown flag is a malformed request. */
	region_open_req("p.odd", 8, 0x40, &r, &reply);
	ck_assert_uint_eq(loco_get_u32(&r), LOCO_EPROTO);
	loco_get_str(&r, msg, sizeof(msg));
	ck_assert_str_eq(msg, "malformed REGION_OPEN");
	loco_wbuf_fini(&reply);
	/* Drop frees device memory too. */
	unsigned n = 0;
	ck_assert_int_eq(loco_region_drop(m, 0, "p.hot", 0, &n), 0);
	ck_assert_uint_eq(n, 1);
	loco_mgr_dm_usage(m, &total, &used);
	ck_assert_uint_eq(used, 0);
	ck_assert_int_eq(loco_region_open_ex(m, 0, "p.x", 8, 0x40, &rp), -EINVAL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dm");
	TCase *t = tcase_create("emulated");
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, hot_regions_placed_in_device_memory);
	tcase_add_test(t, full_device_memory_falls_back_once);
	tcase_add_test(t, ops_routed_by_space);
	tcase_add_test(t, hot_atomic_var_on_device_memory);
	tcase_add_test(t, join_carries_the_space);
	tcase_add_test(t, hosted_hot_regions);
	suite_add_tcase(s, t);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
