/* SPDX-License-Identifier: MIT */
/* lock_array: the array's own channel holds no region; it names the locks
 * ("<array>/<i>") and pairs the members. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <loco/channels/lock_array.h>

/* Node id of the (I mod P)-th set bit of MEMBERS (P bits set). */
static uint32_t member_at(uint64_t members, unsigned i)
{
	unsigned k = i % (unsigned)__builtin_popcountll(members);
	while (k--)
		members &= members - 1;
	return (uint32_t)__builtin_ctzll(members);
}

static int locks_init(struct loco_lock_array *a, uint64_t members,
		      unsigned flags)
{
	for (unsigned i = 0; i < a->n; i++) {
		char name[16];
		snprintf(name, sizeof(name), "%u", i);
		int rc = loco_ticket_lock_init_ex(&a->locks[i], a->base.mgr, &a->base,
						  name, member_at(members, i),
						  members, flags);
		if (rc)
			return rc;
	}
	return 0;
}

/* The locks are sub-channels, finished already. */
static void array_release(struct loco_channel *ch)
{
	struct loco_lock_array *a = (struct loco_lock_array *)ch;
	free(a->locks);
	a->locks = NULL;
}

static const struct loco_channel_ops lock_array_ops = {
	.fini = array_release,
};

int loco_lock_array_init(struct loco_lock_array *a, struct loco_mgr *mgr,
			 struct loco_channel *parent, const char *name,
			 unsigned n, uint64_t participants)
{
	return loco_lock_array_init_ex(a, mgr, parent, name, n, participants, 0);
}

int loco_lock_array_init_ex(struct loco_lock_array *a, struct loco_mgr *mgr,
			    struct loco_channel *parent, const char *name,
			    unsigned n, uint64_t participants, unsigned flags)
{
	if (!n || (flags & ~(LOCO_REGION_HOT | LOCO_TICKET_LOCK_SOLO)))
		return -EINVAL;
	int rc = loco_channel_init(&a->base, mgr, parent, name, participants,
				   &lock_array_ops);
	if (rc)
		return rc;
	a->n = n;
	a->locks = calloc(n, sizeof(*a->locks));
	/* Self included: a mask of 0 would mean every compute node. */
	rc = a->locks ? locks_init(a, a->base.participants |
				      UINT64_C(1) << loco_channel_self(&a->base),
				   flags) : -ENOMEM;
	if (!rc)
		rc = loco_channel_join(&a->base);
	if (rc)
		loco_channel_fini(&a->base);  /* the locks made, the array */
	return rc;
}

void loco_lock_array_fini(struct loco_lock_array *a)
{
	loco_channel_fini(&a->base);
}
