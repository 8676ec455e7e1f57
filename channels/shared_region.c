/* SPDX-License-Identifier: MIT */
/* shared_region: one "data" region per participant, every copy expected
 * from every peer, so the join checks that all agree on the length. */
#include <errno.h>

#include <loco/channels/shared_region.h>

int loco_shared_region_init(struct loco_shared_region *sr, struct loco_mgr *mgr,
			    struct loco_channel *parent, const char *name,
			    uint64_t len, uint64_t participants)
{
	return loco_shared_region_init_ex(sr, mgr, parent, name, len,
					  participants, 0);
}

int loco_shared_region_init_ex(struct loco_shared_region *sr,
			       struct loco_mgr *mgr, struct loco_channel *parent,
			       const char *name, uint64_t len,
			       uint64_t participants, unsigned flags)
{
	if (!len || (flags & ~(LOCO_REGION_HOT | LOCO_REGION_REMOTE_ALL)))
		return -EINVAL;
	int rc = loco_channel_init(&sr->base, mgr, parent, name, participants,
				   NULL);
	if (rc)
		return rc;
	sr->len = len;
	rc = loco_channel_add_region_ex(&sr->base, "data", len, flags,
					&sr->local);
	int idx = rc ? rc : loco_channel_expect(&sr->base, "data", len, 0);
	if (idx >= 0) {
		sr->idx = (unsigned)idx;
		rc = loco_channel_join(&sr->base);
	} else {
		rc = idx;
	}
	if (rc)
		loco_channel_fini(&sr->base);
	return rc;
}

void loco_shared_region_fini(struct loco_shared_region *sr)
{
	loco_channel_fini(&sr->base);
}

const struct loco_rregion *loco_shared_region_at(struct loco_shared_region *sr,
						 uint32_t node)
{
	if (node >= LOCO_MAX_NODES)
		return NULL;
	uint64_t members = sr->base.participants |
			   UINT64_C(1) << loco_channel_self(&sr->base);
	if (!(members & UINT64_C(1) << node))
		return NULL;
	return loco_channel_remote(&sr->base, sr->idx, node);
}

/* NODE's copy, or -EINVAL (not a participant) / -ENOTCONN (not joined). */
static int copy_of(struct loco_shared_region *sr, uint32_t node,
		   const struct loco_rregion **out)
{
	if (node >= LOCO_MAX_NODES)
		return -EINVAL;
	*out = loco_shared_region_at(sr, node);
	if (*out)
		return 0;
	return sr->base.participants & UINT64_C(1) << node ? -ENOTCONN : -EINVAL;
}

int loco_shared_region_post_read(struct loco_shared_region *sr,
				 struct loco_thread *thr, uint32_t node,
				 uint64_t off, void *dst, uint32_t len,
				 struct loco_ack *ack)
{
	const struct loco_rregion *rr;
	int rc = copy_of(sr, node, &rr);
	return rc ? rc : loco_post_read(thr, rr, off, dst, len, ack);
}

int loco_shared_region_post_write(struct loco_shared_region *sr,
				  struct loco_thread *thr, uint32_t node,
				  uint64_t off, const void *src, uint32_t len,
				  struct loco_ack *ack)
{
	const struct loco_rregion *rr;
	int rc = copy_of(sr, node, &rr);
	return rc ? rc : loco_post_write(thr, rr, off, src, len, ack);
}

int loco_shared_region_read(struct loco_shared_region *sr,
			    struct loco_thread *thr, uint32_t node, uint64_t off,
			    void *dst, uint32_t len)
{
	const struct loco_rregion *rr;
	int rc = copy_of(sr, node, &rr);
	return rc ? rc : loco_read(thr, rr, off, dst, len);
}

int loco_shared_region_write(struct loco_shared_region *sr,
			     struct loco_thread *thr, uint32_t node,
			     uint64_t off, const void *src, uint32_t len)
{
	const struct loco_rregion *rr;
	int rc = copy_of(sr, node, &rr);
	return rc ? rc : loco_write(thr, rr, off, src, len);
}
