/* SPDX-License-Identifier: MIT */
/* SST: the table's own channel holds no region; it exists to learn who
 * joins. Its join op adds the joining peer's row. Rows are
 * owned_vars over the same participants, named "ov<owner id>". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include <loco/channels/sst.h>

static struct loco_owned_var *row_get(struct loco_sst *sst, uint32_t node)
{
	/* Acquire: pairs with the release in row_create; the row is
	 * initialised before its pointer is seen. */
	return atomic_load_explicit(&sst->rows[node], memory_order_acquire);
}

/* Create and join node OWNER's row. */
static int row_create(struct loco_sst *sst, uint32_t owner)
{
	char name[16];
	struct loco_owned_var *ov = malloc(sizeof(*ov));
	if (!ov)
		return -ENOMEM;
	snprintf(name, sizeof(name), "ov%u", owner);
	int rc = loco_owned_var_init(ov, sst->base.mgr, &sst->base, name, owner,
				     sst->len, loco_sst_members(sst));
	if (rc) {
		free(ov);
		return rc;
	}
	/* Release: pairs with the acquire in row_get. */
	atomic_store_explicit(&sst->rows[owner], ov, memory_order_release);
	return 0;
}

/* Join op (control-plane thread, once per peer): add PEER's row. A
 * failure fails the table, like a join error, since it can never be
 * ready. */
static void sst_join(struct loco_channel *ch, uint32_t peer)
{
	struct loco_sst *sst = (struct loco_sst *)ch;
	if (!(ch->participants & UINT64_C(1) << peer))
		return;  /* a node outside the table has no row */
	int rc = row_create(sst, peer);
	if (!rc)
		return;
	char msg[96];
	snprintf(msg, sizeof(msg), "cannot create the row of node %u: %s", peer,
		 loco_strerror(rc));
	loco_channel_fail(ch, rc, msg);
}

/* The rows are sub-channels, finished already: free their memory. */
static void sst_release(struct loco_channel *ch)
{
	struct loco_sst *sst = (struct loco_sst *)ch;
	for (unsigned i = 0; i < LOCO_MAX_NODES; i++) {
		/* Relaxed: the table is unregistered; no join op runs. */
		free(atomic_load_explicit(&sst->rows[i], memory_order_relaxed));
		atomic_store_explicit(&sst->rows[i], NULL, memory_order_relaxed);
	}
}

static const struct loco_channel_ops sst_ops = {
	.join = sst_join,
	.fini = sst_release,
};

int loco_sst_init(struct loco_sst *sst, struct loco_mgr *mgr,
		  struct loco_channel *parent, const char *name, uint32_t len,
		  uint64_t participants)
{
	if (!len || len > LOCO_OV_MAX_LEN)
		return -EINVAL;
	for (unsigned i = 0; i < LOCO_MAX_NODES; i++)
		atomic_init(&sst->rows[i], NULL);
	int rc = loco_channel_init(&sst->base, mgr, parent, name, participants,
				   &sst_ops);
	if (rc)
		return rc;
	sst->len = len;
	rc = row_create(sst, loco_channel_self(&sst->base));
	if (!rc)
		rc = loco_channel_join(&sst->base);
	if (rc)
		loco_channel_fini(&sst->base);
	return rc;
}

void loco_sst_fini(struct loco_sst *sst)
{
	loco_channel_fini(&sst->base);
}

bool loco_sst_ready(struct loco_sst *sst)
{
	if (!loco_channel_ready(&sst->base, NULL))
		return false;
	for (uint64_t m = loco_sst_members(sst); m; m &= m - 1) {
		uint32_t node = (uint32_t)__builtin_ctzll(m);
		struct loco_owned_var *ov = row_get(sst, node);
		if (!ov || !loco_channel_ready(&ov->base, NULL))
			return false;
	}
	return true;
}

static bool member(const struct loco_sst *sst, uint32_t node)
{
	return node < LOCO_MAX_NODES &&
	       (loco_sst_members(sst) & UINT64_C(1) << node);
}

struct loco_owned_var *loco_sst_row(struct loco_sst *sst, uint32_t node)
{
	return member(sst, node) ? row_get(sst, node) : NULL;
}

int loco_sst_store_mine(struct loco_sst *sst, const void *val)
{
	return loco_owned_var_store(row_get(sst, loco_channel_self(&sst->base)),
				    val);
}

int loco_sst_push_broadcast(struct loco_sst *sst, struct loco_thread *thr,
			    unsigned flags, struct loco_ack *ack)
{
	return loco_owned_var_push(row_get(sst, loco_channel_self(&sst->base)),
				   thr, flags, ack);
}

int loco_sst_load(struct loco_sst *sst, uint32_t node, void *dst)
{
	if (!member(sst, node))
		return -EINVAL;
	struct loco_owned_var *ov = row_get(sst, node);
	return ov ? loco_owned_var_load(ov, dst) : -ENOENT;
}
