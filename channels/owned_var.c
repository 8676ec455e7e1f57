/* SPDX-License-Identifier: MIT */
/* owned_var: see owned_var.h for the layout and why it cannot tear.
 *
 * Writers of each copy: the owner's copy is written only by the owner's
 * local stores; a reader's copy only by the owner's pushes (the NIC). Each
 * 8-byte word is moved atomically, so a copy seen at any moment is a mix of
 * whole words of several stores; the checksum tells a mix from a store. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include <loco/channels/owned_var.h>
#include <loco/wait.h>

#define HDR_WORDS (sizeof(struct loco_ov_hdr) / 8)
#define COPY_WORDS_MAX (HDR_WORDS + LOCO_OV_MAX_LEN / 8)

static bool small(const struct loco_owned_var *ov)
{
	return ov->len <= LOCO_OV_WORD;
}

static uint32_t copy_len_of(uint32_t len)
{
	return len <= LOCO_OV_WORD ? 8 :
	       (uint32_t)sizeof(struct loco_ov_hdr) + (len + 7) / 8 * 8;
}

static uint64_t ov_sum(const void *val, uint32_t len, uint64_t version)
{
	return XXH3_64bits_withSeed(val, len, version);
}

/* Encode VAL with VERSION into COPY (copy_len bytes, private memory). */
static void encode(const struct loco_owned_var *ov, uint64_t *copy,
		   const void *val, uint64_t version)
{
	memset(copy, 0, ov->copy_len);
	if (small(ov)) {
		memcpy(copy, val, ov->len);
		return;
	}
	copy[0] = version;
	copy[1] = ov_sum(val, ov->len, version);
	memcpy(copy + HDR_WORDS, val, ov->len);
}

/* True if COPY (private memory) is one store's value; copies it to DST. */
static bool decode(const struct loco_owned_var *ov, const uint64_t *copy,
		   void *dst)
{
	if (small(ov)) {
		memcpy(dst, copy, ov->len);
		return true;
	}
	const uint64_t *val = copy + HDR_WORDS;
	if (ov_sum(val, ov->len, copy[0]) != copy[1])
		return false;
	memcpy(dst, val, ov->len);
	return true;
}

static void count_retry(struct loco_owned_var *ov)
{
	/* Relaxed: a statistic; it orders nothing. */
	atomic_fetch_add_explicit(&ov->retries, 1, memory_order_relaxed);
}

/* Every participant's copy starts as a valid encoding of the zero value,
 * written before the join publishes the region, so loads never see an
 * unencoded copy. */
static void copy_init(struct loco_owned_var *ov)
{
	uint64_t copy[COPY_WORDS_MAX];
	static const uint8_t zero[LOCO_OV_MAX_LEN];
	encode(ov, copy, zero, 0);
	memcpy(ov->val->base, copy, ov->copy_len);
}

/* Every endpoint offers an 8-byte region "owner<ID>" naming the owner it
 * was given and expects the same from every participant, so endpoints that
 * disagree on the owner fail to join (-LOCO_EMISMATCH, the message naming
 * the region) instead of silently never seeing updates. */
static int owner_mark(struct loco_owned_var *ov)
{
	char mark[LOCO_REGION_NAME_MAX];
	snprintf(mark, sizeof(mark), "owner%u", ov->owner);
	int rc = loco_channel_add_region_ex(&ov->base, mark, 8,
					    LOCO_REGION_REMOTE_NONE, NULL);
	return rc ? rc : loco_channel_expect(&ov->base, mark, 8, 0);
}

/* "val" (expected by the owner from every reader, by a reader from the
 * owner), "stage" and the owner mark. Readers READ the owner's copy
 * (pull); the owner WRITEs the readers' copies (push, with placing
 * zero-length READs); nobody reaches the stage (WRITE sources and READ
 * destinations) or the mark. */
static int regions_add(struct loco_owned_var *ov)
{
	bool owner = loco_owned_var_is_owner(ov);
	uint64_t from = owner ? 0 : UINT64_C(1) << ov->owner;
	int rc = loco_channel_add_region_ex(&ov->base, "val", ov->copy_len,
					    owner ? LOCO_REGION_REMOTE_READ :
						    LOCO_REGION_REMOTE_WRITE,
					    &ov->val);
	if (!rc)
		rc = loco_channel_add_region_ex(&ov->base, "stage",
						(uint64_t)ov->copy_len *
						(owner ? LOCO_OV_STAGES : 1),
						LOCO_REGION_REMOTE_NONE,
						&ov->stage);
	int idx = rc ? rc : loco_channel_expect(&ov->base, "val", ov->copy_len,
						from);
	if (idx < 0)
		return idx;
	ov->idx = (unsigned)idx;
	rc = owner_mark(ov);
	return rc < 0 ? rc : 0;
}

int loco_owned_var_init(struct loco_owned_var *ov, struct loco_mgr *mgr,
			struct loco_channel *parent, const char *name,
			uint32_t owner, uint32_t len, uint64_t participants)
{
	if (!len || len > LOCO_OV_MAX_LEN || owner >= LOCO_MAX_NODES)
		return -EINVAL;
	int rc = loco_channel_init(&ov->base, mgr, parent, name, participants,
				   NULL);
	if (rc)
		return rc;
	ov->owner = owner;
	ov->len = len;
	ov->copy_len = copy_len_of(len);
	ov->version = 0;
	ov->next_stage = 0;
	memset(ov->stage_ack, 0, sizeof(ov->stage_ack));
	atomic_init(&ov->retries, 0);
	if (!loco_owned_var_is_owner(ov) &&
	    !(ov->base.participants & UINT64_C(1) << owner))
		rc = -EINVAL;
	if (!rc)
		rc = regions_add(ov);
	if (!rc) {
		copy_init(ov);
		rc = loco_channel_join(&ov->base);
	}
	if (rc)
		loco_channel_fini(&ov->base);
	return rc;
}

void loco_owned_var_fini(struct loco_owned_var *ov)
{
	loco_channel_fini(&ov->base);
}

int loco_owned_var_store(struct loco_owned_var *ov, const void *val)
{
	uint64_t copy[COPY_WORDS_MAX];
	if (!loco_owned_var_is_owner(ov))
		return -EPERM;
	encode(ov, copy, val, ++ov->version);
	/* Release: pairs with the acquire loads of loco_owned_var_load and of
	 * a reader's READ (pull), so the value carries what came before. */
	loco_words_store(ov->val->base, copy, ov->copy_len / 8,
			 memory_order_release);
	return 0;
}

int loco_owned_var_load(struct loco_owned_var *ov, void *dst)
{
	uint64_t copy[COPY_WORDS_MAX];
	unsigned spins = 0;
	for (unsigned i = 0; i < LOCO_OV_RETRY_MAX; i++) {
		/* Acquire: pairs with the owner's release stores (here, or
		 * placed by its push after its fence). */
		loco_words_load(copy, ov->val->base, ov->copy_len / 8,
				memory_order_acquire);
		if (decode(ov, copy, dst))
			return 0;
		count_retry(ov);
		loco_backoff(&spins);
	}
	return -LOCO_ETORN;
}

/* Wait until stage SLOT's previous push is complete: the NIC may read a
 * WRITE's source until then. */
static int stage_free(struct loco_owned_var *ov, struct loco_thread *thr,
		      unsigned slot)
{
	struct loco_ack *a = &ov->stage_ack[slot];
	if (!a->peers)
		return 0;
	int rc = loco_ack_test(thr, a);
	if (rc == 0)
		rc = loco_ack_wait(thr, a, -1);
	if (rc < 0)
		return rc;
	loco_ack_clear(a);
	return 0;
}

/* Every reader's copy, or -ENOTCONN if one has not joined. */
static int readers_get(struct loco_owned_var *ov,
		       const struct loco_rregion *rr[LOCO_MAX_NODES])
{
	for (uint64_t m = ov->base.participants; m; m &= m - 1) {
		unsigned r = (unsigned)__builtin_ctzll(m);
		rr[r] = loco_channel_remote(&ov->base, ov->idx, r);
		if (!rr[r])
			return -ENOTCONN;
	}
	return 0;
}

/* Post SRC to every reader (plus a placing READ each with FLAGS). */
static int post_all(struct loco_owned_var *ov, struct loco_thread *thr,
		    const struct loco_rregion *rr[LOCO_MAX_NODES],
		    const void *src, unsigned flags, struct loco_ack *ack)
{
	unsigned per = flags & LOCO_PUSH_PLACE ? 2 : 1;
	struct loco_batch b;
	loco_batch_init(&b, thr);
	for (uint64_t m = ov->base.participants; m; m &= m - 1) {
		const struct loco_rregion *r = rr[__builtin_ctzll(m)];
		if (b.n + per > LOCO_BATCH_MAX) {
			int rc = loco_batch_post(&b, ack);
			if (rc)
				return rc;
		}
		loco_batch_write(&b, r, 0, src, ov->copy_len);
		if (per == 2)
			/* Zero-length READ after the WRITE on the same QP:
			 * completes only once the WRITE is placed. */
			loco_batch_read(&b, r, 0, NULL, 0);
	}
	return loco_batch_post(&b, ack);
}

int loco_owned_var_push(struct loco_owned_var *ov, struct loco_thread *thr,
			unsigned flags, struct loco_ack *ack)
{
	const struct loco_rregion *rr[LOCO_MAX_NODES];
	if (!loco_owned_var_is_owner(ov))
		return -EPERM;
	if (flags & ~(unsigned)LOCO_PUSH_PLACE)
		return -EINVAL;
	int rc = readers_get(ov, rr);
	if (rc || !ov->base.participants)
		return rc;
	unsigned slot = ov->next_stage;
	rc = stage_free(ov, thr, slot);
	if (rc)
		return rc;
	uint64_t *src = (uint64_t *)((uint8_t *)ov->stage->base +
				     (size_t)slot * ov->copy_len);
	/* Relaxed: this thread is the copy's only writer; it reads back its
	 * own stores. */
	loco_words_load(src, ov->val->base, ov->copy_len / 8,
			memory_order_relaxed);
	ov->next_stage = (slot + 1) % LOCO_OV_STAGES;
	rc = post_all(ov, thr, rr, src, flags, &ov->stage_ack[slot]);
	if (ack)
		loco_ack_union(ack, &ov->stage_ack[slot]);
	return rc;
}

int loco_owned_var_pull(struct loco_owned_var *ov, struct loco_thread *thr,
			void *dst)
{
	if (loco_owned_var_is_owner(ov))
		return loco_owned_var_load(ov, dst);
	const struct loco_rregion *rr =
		loco_channel_remote(&ov->base, ov->idx, ov->owner);
	if (!rr)
		return -ENOTCONN;
	uint64_t *buf = ov->stage->base;
	unsigned spins = 0;
	for (unsigned i = 0; i < LOCO_OV_RETRY_MAX; i++) {
		/* The READ's completion makes BUF's contents visible here. */
		int rc = loco_read(thr, rr, 0, buf, ov->copy_len);
		if (rc)
			return rc;
		if (decode(ov, buf, dst))
			return 0;
		count_retry(ov);
		loco_backoff(&spins);
	}
	return -LOCO_ETORN;
}
