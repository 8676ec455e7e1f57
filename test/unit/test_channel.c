/* SPDX-License-Identifier: MIT */
/* Channel base: naming, region/expectation rules, the channel tree (one
 * fini finishes a subtree in one order, ops run), wait_ready failing
 * after its timeout when a participant never starts, and hosted regions
 * (create-or-open on this node and on another node). */
#include <check.h>
#include <errno.h>

#include <loco/channel.h>
#include "test/common/cluster.h"
#include "test/common/cluster1.h"

static struct cluster1 cl;

static void setup_with_absent_peer(void)
{
	char extra[64];
	snprintf(extra, sizeof(extra), "1 127.0.0.1:%d compute\n", free_port());
	ck_assert_int_eq(cluster1_start(&cl, extra, 3000), 0);
}

static void teardown(void)
{
	cluster1_stop(&cl);
}

START_TEST(names)
{
	struct loco_channel a, b, bad;
	ck_assert_int_eq(loco_channel_init(&a, cl.mgr, NULL, "bar", 0, NULL), 0);
	ck_assert_str_eq(a.name, "bar");
	ck_assert_uint_eq(a.participants, 2);  /* node 1, not self */
	ck_assert_int_eq(loco_channel_init(&b, cl.mgr, &a, "sst", 0, NULL), 0);
	ck_assert_str_eq(b.name, "bar/sst");
	ck_assert_int_eq(loco_channel_init(&bad, cl.mgr, &a, "a/b", 0, NULL), -EINVAL);
	ck_assert_int_eq(loco_channel_init(&bad, cl.mgr, &a, "a.b", 0, NULL), -EINVAL);
	ck_assert_int_eq(loco_channel_init(&bad, cl.mgr, &a, "", 0, NULL), -EINVAL);
	char longname[200];
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	ck_assert_int_eq(loco_channel_init(&bad, cl.mgr, NULL, longname, 0, NULL), -EINVAL);
	/* b is a's child: a's fini finishes b */
	ck_assert_ptr_eq(b.parent, &a);
	loco_channel_fini(&a);
	ck_assert_ptr_null(b.mgr);
	ck_assert_ptr_null(b.core);
}
END_TEST

START_TEST(regions_and_expectations)
{
	struct loco_channel ch;
	struct loco_region *r;
	ck_assert_int_eq(loco_channel_init(&ch, cl.mgr, NULL, "c", 0, NULL), 0);
	ck_assert_int_eq(loco_channel_add_region(&ch, "val", 256, &r), 0);
	ck_assert_str_eq(r->name, "c.val");
	ck_assert_int_eq(loco_channel_add_region(&ch, "val", 256, &r), -EEXIST);
	ck_assert_int_eq(loco_channel_expect(&ch, "val", 256, 0), 0);
	ck_assert_int_eq(loco_channel_expect(&ch, "other", 8, 0), 1);
	ck_assert_int_eq(loco_channel_expect(&ch, "zero", 0, 0), -EINVAL);
	/* self: the local region of the same name */
	const struct loco_rregion *self = loco_channel_remote(&ch, 0, 0);
	ck_assert_ptr_nonnull(self);
	ck_assert_uint_eq(self->off, r->off);
	ck_assert_ptr_null(loco_channel_remote(&ch, 1, 0));  /* no local "other" */
	ck_assert_ptr_null(loco_channel_remote(&ch, 0, 1));  /* not joined */
	ck_assert_int_eq(loco_channel_join(&ch), 0);
	ck_assert_int_eq(loco_channel_add_region(&ch, "late", 8, &r), -EINVAL);
	struct loco_channel dup;
	ck_assert_int_eq(loco_channel_init(&dup, cl.mgr, NULL, "c", 0, NULL), 0);
	ck_assert_int_eq(loco_channel_join(&dup), -EEXIST);
	loco_channel_fini(&dup);  /* a channel whose join failed is finished */
	loco_channel_fini(&ch);
	/* the name is free again once finished */
	ck_assert_int_eq(loco_channel_init(&ch, cl.mgr, NULL, "c", 0, NULL), 0);
	ck_assert_int_eq(loco_channel_join(&ch), 0);
	loco_channel_fini(&ch);
}
END_TEST

/* A channel tree whose fini ops record the order they run in. */
struct tnode {
	struct loco_channel base;
	char tag;
	struct loco_region *reg;
};

static char fini_order[16];

static void tnode_release(struct loco_channel *ch)
{
	struct tnode *t = (struct tnode *)ch;
	size_t n = strlen(fini_order);
	ck_assert_uint_lt(n, sizeof(fini_order) - 1);
	/* its regions are still there (its children are gone already: the
	 * order the tests check) */
	ck_assert_ptr_eq(loco_channel_local(ch, "r"), t->reg);
	fini_order[n] = t->tag;
}

static const struct loco_channel_ops tnode_ops = { .fini = tnode_release };

static void tnode_init(struct tnode *t, struct loco_channel *parent,
		       const char *name, char tag)
{
	t->tag = tag;
	ck_assert_int_eq(loco_channel_init(&t->base, cl.mgr, parent, name,
					   UINT64_C(1) << 0, &tnode_ops), 0);
	ck_assert_int_eq(loco_channel_add_region(&t->base, "r", 64, &t->reg), 0);
	ck_assert_int_eq(loco_channel_join(&t->base), 0);
}

/* One fini of the root finishes the tree: each channel after its
 * children, the newest child first, each unregistered and its regions
 * freed (their names can be taken again); a second fini does nothing. */
START_TEST(tree_fini_order)
{
	struct tnode a, b, c, d;
	struct loco_region r;
	memset(fini_order, 0, sizeof(fini_order));
	tnode_init(&a, NULL, "t", 'a');
	tnode_init(&b, &a.base, "b", 'b');
	tnode_init(&c, &a.base, "c", 'c');
	tnode_init(&d, &c.base, "d", 'd');
	ck_assert_str_eq(d.base.name, "t/c/d");
	ck_assert_int_eq(loco_mgr_wait_ready(cl.mgr, 1000), 0);
	loco_channel_fini(&a.base);
	ck_assert_str_eq(fini_order, "dcba");
	ck_assert_ptr_null(a.base.mgr);
	ck_assert_ptr_null(d.base.mgr);
	loco_channel_fini(&a.base);
	loco_channel_fini(&d.base);
	ck_assert_str_eq(fini_order, "dcba");
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "t/c/d.r", 64, &r), 0);
	loco_region_free(cl.mgr, &r);
	struct loco_channel again;
	ck_assert_int_eq(loco_channel_init(&again, cl.mgr, NULL, "t", 0, NULL), 0);
	ck_assert_int_eq(loco_channel_join(&again), 0);
	loco_channel_fini(&again);
}
END_TEST

/* A child finished on its own leaves its parent's children: the parent's
 * fini does not finish it again. */
START_TEST(tree_child_alone)
{
	struct tnode a, b, c;
	memset(fini_order, 0, sizeof(fini_order));
	tnode_init(&a, NULL, "t", 'a');
	tnode_init(&b, &a.base, "b", 'b');
	tnode_init(&c, &a.base, "c", 'c');
	loco_channel_fini(&c.base);
	ck_assert_str_eq(fini_order, "c");
	ck_assert_ptr_null(c.base.mgr);
	loco_channel_fini(&a.base);
	ck_assert_str_eq(fini_order, "cba");
}
END_TEST

START_TEST(ready_times_out)
{
	struct loco_channel ch;
	ck_assert_int_eq(loco_channel_init(&ch, cl.mgr, NULL, "lonely", 0, NULL), 0);
	ck_assert_int_eq(loco_channel_add_region(&ch, "r", 64, NULL), 0);
	ck_assert_int_eq(loco_channel_join(&ch), 0);
	uint64_t t0 = loco_now_ns();
	ck_assert_int_eq(loco_mgr_wait_ready(cl.mgr, 500), -ETIMEDOUT);
	uint64_t ms = (loco_now_ns() - t0) / 1000000;
	ck_assert_uint_ge(ms, 500);
	ck_assert_uint_lt(ms, 3000);
	ck_assert_int_eq(loco_channel_wait(&ch, 100), -ETIMEDOUT);
	int err = 1;
	ck_assert(!loco_channel_ready(&ch, &err));
	ck_assert_int_eq(err, 0);
	t0 = loco_now_ns();
	loco_channel_fini(&ch);  /* bounded even while a join is retrying */
	ck_assert_uint_lt((loco_now_ns() - t0) / 1000000, 2500);
}
END_TEST

START_TEST(self_only_channel_is_ready)
{
	struct loco_channel ch;
	ck_assert_int_eq(loco_channel_init(&ch, cl.mgr, NULL, "solo",
					   UINT64_C(1) << 0, NULL), 0);
	ck_assert_int_eq(loco_channel_join(&ch), 0);
	ck_assert_int_eq(loco_channel_wait(&ch, 100), 0);
	loco_channel_fini(&ch);
}
END_TEST

START_TEST(region_open_bad_args)
{
	struct loco_rregion rr;
	ck_assert_int_eq(loco_region_open(cl.mgr, 40, "x", 8, &rr), -EINVAL);
	ck_assert_int_eq(loco_region_open(cl.mgr, 1, "x", 0, &rr), -EINVAL);
}
END_TEST

/* Create-or-open on this very node: zeroed the first time, the same
 * region later, a size mismatch refused; ops reach it. */
START_TEST(region_open_self)
{
	struct loco_rregion a, b;
	struct loco_thread *thr;
	uint64_t v = 0;
	ck_assert_int_eq(loco_region_open(cl.mgr, 0, "self.r", 128, &a), 0);
	ck_assert_uint_eq(a.node, 0);
	ck_assert_uint_eq(a.len, 128);
	ck_assert_int_eq(loco_region_open(cl.mgr, 0, "self.r", 128, &b), 0);
	ck_assert_uint_eq(b.off, a.off);
	ck_assert_int_eq(loco_region_open(cl.mgr, 0, "self.r", 64, &b),
			 -LOCO_EMISMATCH);
	ck_assert_int_eq(loco_thread_create(cl.mgr, &thr), 0);
	ck_assert_int_eq(loco_faa(thr, &a, 8, 5, &v), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(loco_read(thr, &a, 8, &v, 8), 0);
	ck_assert_uint_eq(v, 5);
	loco_thread_destroy(thr);
}
END_TEST

static uint64_t self_bit(struct loco_mgr *mgr)
{
	return UINT64_C(1) << loco_mgr_id(mgr);
}

/* Drop on this node: a name, or a channel tree (NAME.* and NAME/...,
 * not NAME-prefixed siblings); a dropped name opens zeroed again; a
 * region a channel holds or owns is refused, all or nothing. */
START_TEST(region_drop_self)
{
	struct loco_rregion a, b, c, rr;
	struct loco_thread *thr;
	struct loco_channel h;
	struct loco_region priv;
	unsigned n = 0;
	uint64_t v = 0;
	ck_assert_int_eq(loco_thread_create(cl.mgr, &thr), 0);
	ck_assert_int_eq(loco_region_open(cl.mgr, 0, "d/x.a", 64, &a), 0);
	ck_assert_int_eq(loco_region_open(cl.mgr, 0, "d/x/m0.b", 64, &b), 0);
	ck_assert_int_eq(loco_region_open(cl.mgr, 0, "d/xy.c", 64, &c), 0);
	ck_assert_int_eq(loco_faa(thr, &a, 0, 9, &v), 0);
	ck_assert_int_eq(loco_faa(thr, &c, 0, 4, &v), 0);
	ck_assert_int_eq(loco_region_drop(cl.mgr, 0, "d/x", LOCO_DROP_TREE, &n), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_int_eq(loco_region_drop(cl.mgr, 0, "d/x", LOCO_DROP_TREE, &n),
			 -ENOENT);
	ck_assert_int_eq(loco_region_open(cl.mgr, 0, "d/x.a", 64, &a), 0);
	ck_assert_int_eq(loco_read(thr, &a, 0, &v, 8), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(loco_faa(thr, &a, 0, 3, &v), 0);
	ck_assert_int_eq(loco_region_open(cl.mgr, 0, "d/xy.c", 64, &rr), 0);
	ck_assert_uint_eq(rr.off, c.off);
	ck_assert_int_eq(loco_read(thr, &rr, 0, &v, 8), 0);
	ck_assert_uint_eq(v, 4);
	ck_assert_int_eq(loco_region_drop(cl.mgr, 0, "d/xy.c", 0, &n), 0);
	ck_assert_uint_eq(n, 1);
	/* held by a channel of this process: refused, nothing freed */
	ck_assert_int_eq(loco_channel_init(&h, cl.mgr, NULL, "d",
					   self_bit(cl.mgr), NULL), 0);
	ck_assert_int_eq(loco_channel_open_hosted(&h, 0, "held", 64, &rr), 0);
	ck_assert_int_eq(loco_region_drop(cl.mgr, 0, "d", LOCO_DROP_TREE, &n),
			 -EBUSY);
	ck_assert_int_eq(loco_region_open(cl.mgr, 0, "d/x.a", 64, &b), 0);
	ck_assert_uint_eq(b.off, a.off);
	ck_assert_int_eq(loco_read(thr, &b, 0, &v, 8), 0);
	ck_assert_uint_eq(v, 3);
	ck_assert_int_eq(loco_region_drop(cl.mgr, 0, "d/x.a", 0, NULL), 0);
	loco_channel_fini(&h);
	ck_assert_int_eq(loco_region_drop(cl.mgr, 0, "d", LOCO_DROP_TREE, &n),
			 -ENOENT);
	/* a channel's private region is not a create-or-open one */
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "p.r", 64, &priv), 0);
	ck_assert_int_eq(loco_region_drop(cl.mgr, 0, "p.r", 0, &n), -EBUSY);
	loco_region_free(cl.mgr, &priv);
	ck_assert_int_eq(loco_region_drop(cl.mgr, 40, "x", 0, &n), -EINVAL);
	ck_assert_int_eq(loco_region_drop(cl.mgr, 0, "", 0, &n), -EINVAL);
	ck_assert_int_eq(loco_region_drop(cl.mgr, 0, "x", 2, &n), -EINVAL);
	loco_thread_destroy(thr);
}
END_TEST

/* Hosted on this node: named "<channel>.<short>", create-or-open (shared
 * by every channel of that name and by REGION_OPEN), size checked, and
 * freed with the last channel holding it. A hosted-only channel is ready
 * at once although compute node 1 never starts. */
START_TEST(hosted_self)
{
	struct loco_channel a, b, c;
	struct loco_rregion ra, rb, rr;
	struct loco_region priv;
	struct loco_thread *thr;
	uint64_t v = 0;
	ck_assert_int_eq(loco_channel_init(&a, cl.mgr, NULL, "h",
					   self_bit(cl.mgr), NULL), 0);
	ck_assert_uint_eq(a.participants, 0);
	ck_assert_int_eq(loco_channel_open_hosted(&a, 0, "val", 128, &ra), 0);
	ck_assert_uint_eq(ra.node, 0);
	ck_assert_uint_eq(ra.len, 128);
	/* the name: a peer's REGION_OPEN of "h.val" finds it */
	ck_assert_int_eq(loco_region_open(cl.mgr, 0, "h.val", 128, &rr), 0);
	ck_assert_uint_eq(rr.off, ra.off);
	ck_assert_int_eq(loco_channel_open_hosted(&a, 0, "val", 128, &rr),
			 -EEXIST);
	ck_assert_int_eq(loco_channel_open_hosted(&a, 0, "a.b", 8, &rr),
			 -EINVAL);
	ck_assert_int_eq(loco_channel_open_hosted(&a, 0, "z", 0, &rr), -EINVAL);
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "h.priv", 64, &priv), 0);
	ck_assert_int_eq(loco_channel_open_hosted(&a, 0, "priv", 64, &rr),
			 -EEXIST);   /* a private region is not opened */
	loco_region_free(cl.mgr, &priv);
	/* another handle of the same channel: same region, size checked */
	ck_assert_int_eq(loco_channel_init(&b, cl.mgr, NULL, "h",
					   self_bit(cl.mgr), NULL), 0);
	ck_assert_int_eq(loco_channel_open_hosted(&b, 0, "val", 64, &rb),
			 -LOCO_EMISMATCH);
	ck_assert_int_eq(loco_channel_open_hosted(&b, 0, "val", 128, &rb), 0);
	ck_assert_uint_eq(rb.off, ra.off);
	/* ready at once, with node 1 absent */
	ck_assert_int_eq(loco_channel_join(&a), 0);
	ck_assert(loco_channel_ready(&a, NULL));
	ck_assert_int_eq(loco_mgr_wait_ready(cl.mgr, 100), 0);
	ck_assert_int_eq(loco_thread_create(cl.mgr, &thr), 0);
	ck_assert_int_eq(loco_faa(thr, &ra, 8, 5, &v), 0);
	/* fini releases: the region lives while a holder does */
	loco_channel_fini(&a);
	ck_assert_int_eq(loco_read(thr, &rb, 8, &v, 8), 0);
	ck_assert_uint_eq(v, 5);
	loco_channel_fini(&b);
	ck_assert_int_eq(loco_region_alloc(cl.mgr, "h.val", 64, &priv), 0);
	loco_region_free(cl.mgr, &priv);
	ck_assert_int_eq(loco_channel_init(&c, cl.mgr, NULL, "h",
					   self_bit(cl.mgr), NULL), 0);
	ck_assert_int_eq(loco_channel_open_hosted(&c, 0, "val", 128, &rr), 0);
	ck_assert_int_eq(loco_read(thr, &rr, 8, &v, 8), 0);
	ck_assert_uint_eq(v, 0);     /* a new region, zeroed */
	loco_channel_fini(&c);
	loco_thread_destroy(thr);
}
END_TEST

START_TEST(hosted_table_full)
{
	struct loco_channel a;
	struct loco_rregion rr;
	char name[8];
	ck_assert_int_eq(loco_channel_init(&a, cl.mgr, NULL, "full",
					   self_bit(cl.mgr), NULL), 0);
	ck_assert_int_eq(loco_channel_open_hosted(&a, 7, "r0", 64, &rr),
			 -EINVAL);   /* not in the hosts file */
	for (int i = 0; i < LOCO_CHAN_HOSTED; i++) {
		snprintf(name, sizeof(name), "r%d", i);
		ck_assert_int_eq(loco_channel_open_hosted(&a, 0, name, 64, &rr), 0);
	}
	ck_assert_int_eq(loco_channel_open_hosted(&a, 0, "more", 64, &rr),
			 -EINVAL);
	loco_channel_fini(&a);
}
END_TEST

/* Hosted on another node (node 1 serves create-or-open; node 0 runs the
 * channel): the same region for every opener, including node 1's own
 * channel of that name; a size mismatch refused; fini on node 0 leaves
 * the region on node 1. */
START_TEST(hosted_remote)
{
	struct cluster c2;
	struct loco_channel a, b, h;
	struct loco_rregion ra, rb, rh;
	uint64_t v = 0;
	ck_assert_int_eq(cluster_start(&c2, 2, 0, 3000), 0);
	ck_assert_int_eq(loco_channel_init(&a, c2.mgr[0], NULL, "x",
					   self_bit(c2.mgr[0]), NULL), 0);
	ck_assert_int_eq(loco_channel_init(&b, c2.mgr[0], NULL, "x",
					   self_bit(c2.mgr[0]), NULL), 0);
	ck_assert_int_eq(loco_channel_open_hosted(&a, 1, "w", 64, &ra), 0);
	ck_assert_uint_eq(ra.node, 1);
	ck_assert_uint_eq(ra.len, 64);
	ck_assert_int_eq(loco_channel_join(&a), 0);
	ck_assert_int_eq(loco_channel_wait(&a, 100), 0);
	ck_assert_int_eq(loco_channel_open_hosted(&b, 1, "w", 32, &rb),
			 -LOCO_EMISMATCH);
	ck_assert_int_eq(loco_faa(c2.thr[0], &ra, 0, 7, &v), 0);
	loco_channel_fini(&a);
	ck_assert_int_eq(loco_channel_open_hosted(&b, 1, "w", 64, &rb), 0);
	ck_assert_uint_eq(rb.off, ra.off);
	/* node 1's own endpoint of "x" holds the region a peer created */
	ck_assert_int_eq(loco_channel_init(&h, c2.mgr[1], NULL, "x",
					   self_bit(c2.mgr[1]), NULL), 0);
	ck_assert_int_eq(loco_channel_open_hosted(&h, 1, "w", 64, &rh), 0);
	ck_assert_uint_eq(rh.off, ra.off);
	ck_assert_int_eq(loco_read(c2.thr[1], &rh, 0, &v, 8), 0);
	ck_assert_uint_eq(v, 7);
	loco_channel_fini(&h);
	loco_channel_fini(&b);
	cluster_stop(&c2);
}
END_TEST

/* A channel whose join op adds a sub-channel "p<peer>" per peer, as the
 * SST adds rows: the op runs once per peer before the channel is ready,
 * and the parent's fini finishes what it made. */
struct jchan {
	struct loco_channel base;
	struct loco_channel sub[2];
	_Atomic unsigned calls;
};

static void jchan_join(struct loco_channel *ch, uint32_t peer)
{
	struct jchan *j = (struct jchan *)ch;
	char name[8];
	snprintf(name, sizeof(name), "p%u", peer);
	/* Relaxed: a counter the test reads after wait_ready. */
	atomic_fetch_add_explicit(&j->calls, 1, memory_order_relaxed);
	int rc = loco_channel_init(&j->sub[peer], ch->mgr, ch, name,
				   UINT64_C(1) << loco_channel_self(ch), NULL);
	if (!rc)
		rc = loco_channel_join(&j->sub[peer]);
	if (rc)
		loco_channel_fail(ch, rc, "cannot add the peer's sub-channel");
}

static const struct loco_channel_ops jchan_ops = { .join = jchan_join };

START_TEST(join_op_adds_children)
{
	struct cluster c2;
	struct jchan j[2];
	ck_assert_int_eq(cluster_start(&c2, 2, 0, 3000), 0);
	for (unsigned i = 0; i < 2; i++) {
		memset(&j[i], 0, sizeof(j[i]));
		ck_assert_int_eq(loco_channel_init(&j[i].base, c2.mgr[i], NULL,
						   "j", 0, &jchan_ops), 0);
		ck_assert_int_eq(loco_channel_join(&j[i].base), 0);
	}
	ck_assert_int_eq(cluster_ready(&c2, 3000), 0);
	for (unsigned i = 0; i < 2; i++) {
		unsigned peer = 1 - i;
		char name[8];
		snprintf(name, sizeof(name), "j/p%u", peer);
		/* Relaxed: wait_ready returned after the op ran. */
		ck_assert_uint_eq(atomic_load_explicit(&j[i].calls,
						       memory_order_relaxed), 1);
		ck_assert_ptr_eq(j[i].sub[peer].parent, &j[i].base);
		ck_assert_ptr_nonnull(j[i].sub[peer].mgr);
		ck_assert_str_eq(j[i].sub[peer].name, name);
		loco_channel_fini(&j[i].base);
		ck_assert_ptr_null(j[i].sub[peer].mgr);
	}
	cluster_stop(&c2);
}
END_TEST

/* Drop on another node over the control plane: node 0 drops node 1's
 * region "r.w"; a later open from either node gets zeroed memory; a
 * region node 1's channel holds is refused. */
START_TEST(region_drop_remote)
{
	struct cluster c2;
	struct loco_rregion ra, rb;
	struct loco_channel h;
	unsigned n = 0;
	uint64_t v = 0;
	ck_assert_int_eq(cluster_start(&c2, 2, 0, 3000), 0);
	ck_assert_int_eq(loco_region_open(c2.mgr[0], 1, "r.w", 64, &ra), 0);
	ck_assert_int_eq(loco_faa(c2.thr[0], &ra, 0, 7, &v), 0);
	ck_assert_int_eq(loco_region_drop(c2.mgr[0], 1, "r", LOCO_DROP_TREE, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_int_eq(loco_region_drop(c2.mgr[0], 1, "r.w", 0, &n), -ENOENT);
	ck_assert_int_eq(loco_region_open(c2.mgr[1], 1, "r.w", 64, &rb), 0);
	ck_assert_int_eq(loco_read(c2.thr[0], &rb, 0, &v, 8), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(loco_channel_init(&h, c2.mgr[1], NULL, "r",
					   self_bit(c2.mgr[1]), NULL), 0);
	ck_assert_int_eq(loco_channel_open_hosted(&h, 1, "w", 64, &rb), 0);
	ck_assert_int_eq(loco_region_drop(c2.mgr[0], 1, "r.w", 0, &n), -EBUSY);
	loco_channel_fini(&h);
	ck_assert_int_eq(loco_region_drop(c2.mgr[0], 1, "r.w", 0, &n), -ENOENT);
	cluster_stop(&c2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("channel");
	TCase *tc = tcase_create("base");
	tcase_add_checked_fixture(tc, setup_with_absent_peer, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, names);
	tcase_add_test(tc, tree_fini_order);
	tcase_add_test(tc, tree_child_alone);
	tcase_add_test(tc, regions_and_expectations);
	tcase_add_test(tc, ready_times_out);
	tcase_add_test(tc, self_only_channel_is_ready);
	tcase_add_test(tc, region_open_bad_args);
	tcase_add_test(tc, region_open_self);
	tcase_add_test(tc, region_drop_self);
	tcase_add_test(tc, hosted_self);
	tcase_add_test(tc, hosted_table_full);
	suite_add_tcase(s, tc);
	TCase *two = tcase_create("two nodes");
	tcase_set_timeout(two, 30);
	tcase_add_test(two, hosted_remote);
	tcase_add_test(two, join_op_adds_children);
	tcase_add_test(two, region_drop_remote);
	suite_add_tcase(s, two);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
