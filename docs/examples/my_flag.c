/* SPDX-License-Identifier: MIT */
/* my_flag, the channel of docs/write-your-own-channel.md: a round number
 * that one node at a time raises and every participant waits for. Each
 * participant keeps a copy of one 8-byte word; the setter fences, then
 * WRITEs the new value into every copy (its own too, through the
 * transport); a waiter polls its own copy with an acquire load. */
#include <errno.h>

#include <loco/channel.h>
#include <loco/wait.h>

#include "my_flag.h"

int my_flag_init(struct my_flag *f, struct loco_mgr *mgr,
		 struct loco_channel *parent, const char *name,
		 uint64_t participants)
{
	int rc = loco_channel_init(&f->base, mgr, parent, name, participants,
				   NULL);
	if (rc)
		return rc;                       /* nothing to undo */
	/* Peers only WRITE our copy (the setter's pushes): least access. */
	rc = loco_channel_add_region_ex(&f->base, "word", 8,
					LOCO_REGION_REMOTE_WRITE, &f->word);
	int idx = rc ? rc : loco_channel_expect(&f->base, "word", 8, 0);
	f->idx = idx < 0 ? 0 : (unsigned)idx;
	rc = idx < 0 ? idx : loco_channel_join(&f->base);
	if (rc)
		loco_channel_fini(&f->base);     /* undoes everything */
	return rc;
}

int my_flag_set(struct my_flag *f, struct loco_thread *thr, uint64_t v)
{
	uint64_t all = f->base.participants |
		       UINT64_C(1) << loco_channel_self(&f->base);
	/* Release: what this thread wrote before is placed before V. */
	int rc = loco_fence(thr, LOCO_FENCE_THREAD, 0);
	f->src = v;
	for (uint64_t m = all; m && !rc; m &= m - 1) {
		const struct loco_rregion *rr = loco_channel_remote(
			&f->base, f->idx, (uint32_t)__builtin_ctzll(m));
		rc = rr ? loco_post_write(thr, rr, 0, &f->src, 8, NULL) : -ENOTCONN;
	}
	/* Every WRITE complete (f->src free again) and placed (visible). */
	int frc = loco_fence(thr, LOCO_FENCE_THREAD, 0);
	return rc ? rc : frc;
}

int my_flag_wait(struct my_flag *f, uint64_t v, int timeout_ms)
{
	struct loco_wait w;
	uint64_t cur;
	loco_wait_init(&w, f->base.mgr, timeout_ms);
	for (;;) {
		/* Acquire: pairs with the setter's fence before its WRITE. */
		loco_words_load(&cur, f->word->base, 1, memory_order_acquire);
		if (cur >= v)
			return 0;
		int rc = loco_wait_step(&w);     /* spin, yield, nap; deadline */
		if (rc)
			return rc;
	}
}

void my_flag_fini(struct my_flag *f)
{
	loco_channel_fini(&f->base);
}
