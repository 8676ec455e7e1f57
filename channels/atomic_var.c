/* SPDX-License-Identifier: MIT */
/* atomic_var: the host offers "word"; the others expect it from the host
 * only. The host reaches its own word through the transport (loco ops to
 * self: verbs' loopback QP), never with CPU atomics: those are not atomic
 * with NIC atomics, and a word in device memory has no CPU address. */
#include <errno.h>

#include <loco/channels/atomic_var.h>

#define WORD_LEN 8

int loco_atomic_var_init(struct loco_atomic_var *av, struct loco_mgr *mgr,
			 struct loco_channel *parent, const char *name,
			 uint32_t host, uint64_t participants)
{
	return loco_atomic_var_init_ex(av, mgr, parent, name, host, participants, 0);
}

int loco_atomic_var_init_ex(struct loco_atomic_var *av, struct loco_mgr *mgr,
			    struct loco_channel *parent, const char *name,
			    uint32_t host, uint64_t participants, unsigned flags)
{
	if (host >= LOCO_MAX_NODES ||
	    (flags & ~(LOCO_REGION_HOT | LOCO_REGION_REMOTE_ALL)))
		return -EINVAL;
	int rc = loco_channel_init(&av->base, mgr, parent, name, participants,
				   NULL);
	if (rc)
		return rc;
	av->host = host;
	atomic_init(&av->cached, 0);
	bool self = host == loco_channel_self(&av->base);
	if (!self && !(av->base.participants & UINT64_C(1) << host))
		rc = -EINVAL;
	if (!rc && self)
		rc = loco_channel_add_region_ex(&av->base, "word", WORD_LEN, flags,
						NULL);
	int idx = rc ? rc : loco_channel_expect(&av->base, "word", WORD_LEN,
						UINT64_C(1) << host);
	if (idx >= 0) {
		av->idx = (unsigned)idx;
		rc = loco_channel_join(&av->base);
	} else {
		rc = idx;
	}
	if (rc)
		loco_channel_fini(&av->base);
	return rc;
}

void loco_atomic_var_fini(struct loco_atomic_var *av)
{
	loco_channel_fini(&av->base);
}

static const struct loco_rregion *word(struct loco_atomic_var *av)
{
	return loco_channel_remote(&av->base, av->idx, av->host);
}

static void cache_set(struct loco_atomic_var *av, uint64_t v)
{
	/* Relaxed: a hint; nothing is published with it. */
	atomic_store_explicit(&av->cached, v, memory_order_relaxed);
}

int loco_atomic_var_post_read(struct loco_atomic_var *av,
			      struct loco_thread *thr, uint64_t *dst,
			      struct loco_ack *ack)
{
	const struct loco_rregion *rr = word(av);
	return rr ? loco_post_read(thr, rr, 0, dst, WORD_LEN, ack) : -ENOTCONN;
}

int loco_atomic_var_post_cas(struct loco_atomic_var *av,
			     struct loco_thread *thr, uint64_t expect,
			     uint64_t desired, uint64_t *old,
			     struct loco_ack *ack)
{
	const struct loco_rregion *rr = word(av);
	return rr ? loco_post_cas(thr, rr, 0, expect, desired, old, ack) :
		    -ENOTCONN;
}

int loco_atomic_var_post_faa(struct loco_atomic_var *av,
			     struct loco_thread *thr, uint64_t add,
			     uint64_t *old, struct loco_ack *ack)
{
	const struct loco_rregion *rr = word(av);
	return rr ? loco_post_faa(thr, rr, 0, add, old, ack) : -ENOTCONN;
}

/* Post through a fresh ack and wait for it. */
static int sync_wait(struct loco_thread *thr, int rc, const struct loco_ack *ack)
{
	return rc ? rc : loco_ack_wait(thr, ack, -1);
}

int loco_atomic_var_read(struct loco_atomic_var *av, struct loco_thread *thr,
			 uint64_t *out)
{
	struct loco_ack ack = { 0, 0 };
	uint64_t v;
	int rc = sync_wait(thr, loco_atomic_var_post_read(av, thr, &v, &ack), &ack);
	if (rc)
		return rc;
	cache_set(av, v);
	*out = v;
	return 0;
}

int loco_atomic_var_cas(struct loco_atomic_var *av, struct loco_thread *thr,
			uint64_t expect, uint64_t desired, uint64_t *old)
{
	struct loco_ack ack = { 0, 0 };
	uint64_t prev;
	int rc = sync_wait(thr, loco_atomic_var_post_cas(av, thr, expect, desired,
							 &prev, &ack), &ack);
	if (rc)
		return rc;
	cache_set(av, prev == expect ? desired : prev);
	*old = prev;
	return 0;
}

int loco_atomic_var_faa(struct loco_atomic_var *av, struct loco_thread *thr,
			uint64_t add, uint64_t *old)
{
	struct loco_ack ack = { 0, 0 };
	uint64_t prev;
	int rc = sync_wait(thr, loco_atomic_var_post_faa(av, thr, add, &prev, &ack),
			   &ack);
	if (rc)
		return rc;
	cache_set(av, prev + add);
	*old = prev;
	return 0;
}

int loco_atomic_var_write(struct loco_atomic_var *av, struct loco_thread *thr,
			  uint64_t value)
{
	uint64_t guess = loco_atomic_var_cached(av), old;
	for (;;) {
		int rc = loco_atomic_var_cas(av, thr, guess, value, &old);
		if (rc || old == guess)
			return rc;
		guess = old;
	}
}
