/* SPDX-License-Identifier: MIT */
/* ringbuffer: see ringbuffer.h for the record format and the protocol.
 *
 * Positions are byte offsets in the endless stream; the ring offset is
 * position mod size. Records start 8-byte aligned, so every header and
 * payload word is one 8-byte piece of a WRITE: a copy seen at any moment
 * is a mix of whole words of several laps, and the checksum tells a mix
 * from one record. Writer and readers apply the same wrap rule: a record
 * that does not fit in the LEFT bytes before the end skips them (with a
 * pad header if LEFT >= a header), so both agree where records start. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include <loco/channels/ringbuffer.h>
#include <loco/wait.h>

#define HDR ((uint64_t)sizeof(struct loco_rb_hdr))
#define HDR_WORDS (HDR / 8)

static uint64_t round8(uint64_t n)
{
	return (n + 7) & ~UINT64_C(7);
}

static uint64_t rb_sum(const void *payload, uint32_t len, uint64_t seq,
		       uint32_t kind)
{
	uint64_t seed = seq * UINT64_C(0x9e3779b97f4a7c15) ^
			((uint64_t)kind << 32 | len);
	return XXH3_64bits_withSeed(payload, len, seed);
}

static uint8_t *ring_at(const struct loco_ringbuffer *rb, uint64_t pos)
{
	return (uint8_t *)rb->ring->base + pos % rb->size;
}

/* ---- set-up ----------------------------------------------------------- */

/* "ring" (the writer expects every reader's, which only its WRITEs and
 * their placing READs reach; its own is theirs' source, which nobody
 * reaches), and the writer mark (see owned_var.h: endpoints that disagree
 * on the writer fail to join; nobody reaches it). */
static int regions_add(struct loco_ringbuffer *rb)
{
	char mark[LOCO_REGION_NAME_MAX];
	unsigned access = loco_ringbuffer_is_writer(rb) ?
			  LOCO_REGION_REMOTE_NONE : LOCO_REGION_REMOTE_WRITE;
	int rc = loco_channel_add_region_ex(&rb->base, "ring", rb->size, access,
					    &rb->ring);
	if (!rc && loco_ringbuffer_is_writer(rb)) {
		int idx = loco_channel_expect(&rb->base, "ring", rb->size, 0);
		rc = idx < 0 ? idx : 0;
		rb->idx = idx < 0 ? 0 : (unsigned)idx;
	}
	snprintf(mark, sizeof(mark), "writer%u", rb->writer);
	if (!rc)
		rc = loco_channel_add_region_ex(&rb->base, mark, 8,
						LOCO_REGION_REMOTE_NONE, NULL);
	if (!rc)
		rc = loco_channel_expect(&rb->base, mark, 8, 0);
	return rc < 0 ? rc : 0;
}

static void state_init(struct loco_ringbuffer *rb, uint32_t writer,
		       uint64_t size)
{
	rb->writer = writer;
	rb->size = size;
	rb->max_msg = (uint32_t)loco_ringbuffer_max_msg_for(size);
	rb->idx = 0;
	rb->ready = false;
	rb->head = rb->posted = rb->seq = 0;
	memset(rb->acked, 0, sizeof(rb->acked));
	rb->dropped = 0;
	rb->if_head = rb->if_count = 0;
	rb->rpos = rb->consumed = rb->pushed = 0;
	rb->rseq = 1;
	rb->st = (struct loco_rb_stats){ 0 };
}

/* The acks SST is a sub-channel, finished already. */
static void rb_release(struct loco_channel *ch)
{
	struct loco_ringbuffer *rb = (struct loco_ringbuffer *)ch;
	free(rb->scratch);
	rb->scratch = NULL;
}

static const struct loco_channel_ops ringbuffer_ops = {
	.fini = rb_release,
};

int loco_ringbuffer_init(struct loco_ringbuffer *rb, struct loco_mgr *mgr,
			 struct loco_channel *parent, const char *name,
			 uint32_t writer, uint64_t size, uint64_t participants)
{
	if (writer >= LOCO_MAX_NODES || size < LOCO_RB_MIN_SIZE || size % 8 ||
	    size > UINT32_MAX)
		return -EINVAL;
	int rc = loco_channel_init(&rb->base, mgr, parent, name, participants,
				   &ringbuffer_ops);
	if (rc)
		return rc;
	state_init(rb, writer, size);
	uint64_t members = rb->base.participants |
			   UINT64_C(1) << loco_channel_self(&rb->base);
	rb->scratch = malloc(HDR + round8(rb->max_msg));
	if (!(members & UINT64_C(1) << writer))
		rc = -EINVAL;
	else if (!rb->scratch)
		rc = -ENOMEM;
	if (!rc)
		rc = regions_add(rb);
	if (!rc)
		rc = loco_sst_init(&rb->acks, mgr, &rb->base, "acks",
				   sizeof(uint64_t), members);
	if (!rc)
		rc = loco_channel_join(&rb->base);
	if (rc)
		loco_channel_fini(&rb->base);  /* the acks, the scratch */
	return rc;
}

void loco_ringbuffer_fini(struct loco_ringbuffer *rb)
{
	loco_channel_fini(&rb->base);
}

/* ---- writer ------------------------------------------------------------ */

static int writer_check(struct loco_ringbuffer *rb)
{
	if (!loco_ringbuffer_is_writer(rb))
		return -EPERM;
	if (!rb->ready && !(rb->ready = loco_channel_ready(&rb->base, NULL)))
		return -ENOTCONN;
	return 0;
}

/* The readers the writer writes to and waits for: not dropped. */
static uint64_t readers(const struct loco_ringbuffer *rb)
{
	return rb->base.participants & ~rb->dropped;
}

/* Refresh every reader's acknowledged position from its row (a row not
 * created yet, or torn past the retry limit, keeps the last value). */
static void acks_load(struct loco_ringbuffer *rb)
{
	for (uint64_t m = readers(rb); m; m &= m - 1) {
		uint32_t r = (uint32_t)__builtin_ctzll(m);
		uint64_t pos;
		/* Acquire (inside loco_sst_load): pairs with the reader's
		 * release store of its row, placed by its push. */
		if (!loco_sst_load(&rb->acks, r, &pos) && pos > rb->acked[r])
			rb->acked[r] = pos;
	}
}

/* Drop the completed posts at the front of the FIFO (the NIC no longer
 * reads their source). Returns 0 or a failed post's error. */
static int inflight_retire(struct loco_ringbuffer *rb, struct loco_thread *thr)
{
	while (rb->if_count) {
		int rc = loco_ack_test(thr, &rb->inflight[rb->if_head].ack);
		if (rc <= 0)
			return rc;
		rb->if_head = (rb->if_head + 1) % LOCO_RB_INFLIGHT;
		rb->if_count--;
	}
	return 0;
}

/* Lowest position still needed: unread by some reader, or the source of a
 * post in flight. Space below it + size is free. */
static uint64_t reuse_limit(const struct loco_ringbuffer *rb)
{
	uint64_t low = rb->posted;
	for (uint64_t m = readers(rb); m; m &= m - 1) {
		uint64_t a = rb->acked[__builtin_ctzll(m)];
		low = a < low ? a : low;
	}
	if (rb->if_count && rb->inflight[rb->if_head].start < low)
		low = rb->inflight[rb->if_head].start;
	return low;
}

/* Bytes a record of REC bytes takes at HEAD, the skip before it included. */
static uint64_t need_at(const struct loco_ringbuffer *rb, uint64_t rec)
{
	uint64_t left = rb->size - rb->head % rb->size;
	return left >= rec ? rec : left + rec;
}

/* 1 if NEED bytes are free at head, 0 if not, or a post's error. */
static int room(struct loco_ringbuffer *rb, struct loco_thread *thr,
		uint64_t need)
{
	if (rb->head + need <= reuse_limit(rb) + rb->size)
		return 1;
	acks_load(rb);
	int rc = inflight_retire(rb, thr);
	if (rc)
		return rc;
	return rb->head + need <= reuse_limit(rb) + rb->size;
}

/* Encode a record into scratch and store it at head (relaxed: only the
 * local NIC reads the writer's copy, after the post that hands it over). */
static void record_store(struct loco_ringbuffer *rb, const void *payload,
			 uint32_t len, uint32_t kind)
{
	struct loco_rb_hdr h = {
		.seq = rb->seq + 1, .len = len, .kind = kind,
		.sum = rb_sum(payload, len, rb->seq + 1, kind),
	};
	uint64_t words = HDR_WORDS + round8(len) / 8;
	rb->scratch[words - 1] = 0;
	memcpy(rb->scratch, &h, HDR);
	if (len)
		memcpy(rb->scratch + HDR_WORDS, payload, len);
	loco_words_store(ring_at(rb, rb->head), rb->scratch, words,
			 memory_order_relaxed);
}

/* Stage MSG at head: skip (with a pad header) to the ring start if it does
 * not fit before the end. Room was checked. */
static void stage(struct loco_ringbuffer *rb, const void *msg, uint32_t len)
{
	uint64_t rec = HDR + round8(len), left = rb->size - rb->head % rb->size;
	if (left < rec) {
		if (left >= HDR)
			record_store(rb, NULL, 0, LOCO_RB_PAD);
		rb->head += left;
	}
	record_store(rb, msg, len, LOCO_RB_MSG);
	rb->head += rec;
	rb->seq++;
	rb->st.msgs++;
	rb->st.bytes += len;
}

/* Add the WRITEs of ring range [from, to) (no wrap) to reader R. */
static int range_add(struct loco_ringbuffer *rb, struct loco_batch *b,
		     const struct loco_rregion *rr, uint64_t from, uint64_t to,
		     unsigned flags, struct loco_ack *ack)
{
	unsigned per = flags & LOCO_RB_PLACE ? 2 : 1;
	if (b->n + per > LOCO_BATCH_MAX) {
		int rc = loco_batch_post(b, ack);
		if (rc)
			return rc;
	}
	uint64_t off = from % rb->size;
	loco_batch_write(b, rr, off, ring_at(rb, from), (uint32_t)(to - from));
	if (per == 2)
		/* Zero-length READ after the WRITE on the same QP: completes
		 * only once the WRITE is placed. */
		loco_batch_read(b, rr, off, NULL, 0);
	return 0;
}

/* Post [from, to) to every reader, split at the ring end. */
static int post_range(struct loco_ringbuffer *rb, struct loco_thread *thr,
		      uint64_t from, uint64_t to, unsigned flags,
		      struct loco_ack *ack)
{
	uint64_t cut = from - from % rb->size + rb->size;
	struct loco_batch b;
	loco_batch_init(&b, thr);
	for (uint64_t m = readers(rb); m; m &= m - 1) {
		const struct loco_rregion *rr = loco_channel_remote(
			&rb->base, rb->idx, (uint32_t)__builtin_ctzll(m));
		int rc = rr ? 0 : -ENOTCONN;
		if (!rc)
			rc = range_add(rb, &b, rr, from, to < cut ? to : cut,
				       flags, ack);
		if (!rc && to > cut)
			rc = range_add(rb, &b, rr, cut, to, flags, ack);
		if (rc)
			return rc;
	}
	return loco_batch_post(&b, ack);
}

/* Post everything staged; the post joins the in-flight FIFO (waiting for
 * the oldest when it is full). */
static int post_staged(struct loco_ringbuffer *rb, struct loco_thread *thr,
		       unsigned flags)
{
	if (rb->posted == rb->head)
		return 0;
	if (rb->if_count == LOCO_RB_INFLIGHT) {
		int rc = loco_ack_wait(thr, &rb->inflight[rb->if_head].ack, -1);
		if (rc)
			return rc;
		rb->if_head = (rb->if_head + 1) % LOCO_RB_INFLIGHT;
		rb->if_count--;
	}
	struct loco_rb_post *p =
		&rb->inflight[(rb->if_head + rb->if_count) % LOCO_RB_INFLIGHT];
	p->start = rb->posted;
	p->end = rb->head;
	loco_ack_clear(&p->ack);
	int rc = post_range(rb, thr, rb->posted, rb->head, flags, &p->ack);
	/* Whatever was posted is in flight, even after an error. */
	if (p->ack.peers)
		rb->if_count++;
	if (rc)
		return rc;
	rb->posted = rb->head;
	rb->st.posts++;
	return 0;
}

/* One attempt: 0, -EAGAIN when full (staged messages posted), or errors. */
static int send_once(struct loco_ringbuffer *rb, struct loco_thread *thr,
		     const void *msg, uint32_t len, unsigned flags,
		     uint64_t *pos)
{
	int rc = writer_check(rb);
	if (rc)
		return rc;
	if (!len || len > rb->max_msg ||
	    (flags & ~(unsigned)(LOCO_RB_MORE | LOCO_RB_PLACE)))
		return -EINVAL;
	rc = room(rb, thr, need_at(rb, HDR + round8(len)));
	if (rc <= 0) {
		int prc = post_staged(rb, thr, flags & LOCO_RB_PLACE);
		return rc < 0 ? rc : prc ? prc : -EAGAIN;
	}
	stage(rb, msg, len);
	if (pos)
		*pos = rb->head;
	return flags & LOCO_RB_MORE ? 0 : post_staged(rb, thr, flags);
}

int loco_ringbuffer_try_send(struct loco_ringbuffer *rb, struct loco_thread *thr,
			     const void *msg, uint32_t len, unsigned flags,
			     uint64_t *pos)
{
	int rc = send_once(rb, thr, msg, len, flags, pos);
	if (rc == -EAGAIN)
		rb->st.full++;
	return rc;
}

int loco_ringbuffer_send(struct loco_ringbuffer *rb, struct loco_thread *thr,
			 const void *msg, uint32_t len, unsigned flags,
			 uint64_t *pos, int timeout_ms)
{
	int rc = send_once(rb, thr, msg, len, flags, pos);
	if (rc != -EAGAIN)
		return rc;
	rb->st.full++;
	struct loco_wait w;
	loco_wait_init(&w, rb->base.mgr, timeout_ms);
	/* Release: whatever the readers still need is placed, so they can
	 * consume it and acknowledge (the model bounds placement only by a
	 * later READ or fence on the QP). */
	rc = loco_fence(thr, LOCO_FENCE_THREAD, 0);
	while (!rc && !(rc = loco_wait_step(&w))) {
		rc = send_once(rb, thr, msg, len, flags, pos);
		if (rc != -EAGAIN)
			return rc;
		rc = 0;
	}
	return rc;
}

int loco_ringbuffer_flush(struct loco_ringbuffer *rb, struct loco_thread *thr)
{
	int rc = writer_check(rb);
	if (!rc)
		rc = post_staged(rb, thr, 0);
	/* Release: every message posted so far is placed at every reader. */
	return rc ? rc : loco_fence(thr, LOCO_FENCE_THREAD, 0);
}

bool loco_ringbuffer_acked(struct loco_ringbuffer *rb, uint64_t pos)
{
	return !loco_ringbuffer_unacked(rb, pos);
}

uint64_t loco_ringbuffer_unacked(struct loco_ringbuffer *rb, uint64_t pos)
{
	uint64_t late = 0;
	acks_load(rb);
	for (uint64_t m = readers(rb); m; m &= m - 1)
		if (rb->acked[__builtin_ctzll(m)] < pos)
			late |= m & -m;
	return late;
}

int loco_ringbuffer_drop_reader(struct loco_ringbuffer *rb, uint32_t node)
{
	if (!loco_ringbuffer_is_writer(rb))
		return -EPERM;
	if (node >= LOCO_MAX_NODES ||
	    !(rb->base.participants & UINT64_C(1) << node))
		return -EINVAL;
	rb->dropped |= UINT64_C(1) << node;
	return 0;
}

int loco_ringbuffer_wait_acked(struct loco_ringbuffer *rb,
			       struct loco_thread *thr, uint64_t pos,
			       int timeout_ms)
{
	int rc = loco_ringbuffer_flush(rb, thr);
	if (rc)
		return rc;
	struct loco_wait w;
	loco_wait_init(&w, rb->base.mgr, timeout_ms);
	while (!loco_ringbuffer_acked(rb, pos)) {
		rc = loco_wait_step(&w);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- reader ------------------------------------------------------------ */

static int ack_push(struct loco_ringbuffer *rb, struct loco_thread *thr)
{
	uint64_t pos = rb->consumed;
	/* Release (inside the store): the loads of the consumed records, and
	 * what the caller did with them, come before the row value that frees
	 * their space. */
	loco_sst_store_mine(&rb->acks, &pos);
	int rc = loco_sst_push_broadcast(&rb->acks, thr, LOCO_PUSH_PLACE, NULL);
	if (rc)
		return rc;
	rb->pushed = pos;
	rb->st.acks++;
	return 0;
}

int loco_ringbuffer_ack(struct loco_ringbuffer *rb, struct loco_thread *thr)
{
	if (loco_ringbuffer_is_writer(rb))
		return -EPERM;
	rb->consumed = rb->rpos;
	return rb->consumed == rb->pushed ? 0 : ack_push(rb, thr);
}

/* Nothing new: the caller is done with everything returned (it asked
 * again); acknowledge it, so a writer waiting for space is not left
 * waiting for a push threshold. */
static int idle(struct loco_ringbuffer *rb, struct loco_thread *thr)
{
	rb->consumed = rb->rpos;
	int rc = rb->consumed == rb->pushed ? 0 : ack_push(rb, thr);
	return rc && rc != -ENOTCONN ? rc : -EAGAIN;
}

/* Load the header at rpos into *H. */
static void hdr_load(struct loco_ringbuffer *rb, struct loco_rb_hdr *h)
{
	/* Acquire: pairs with the release stores that place the writer's
	 * WRITE into this copy (transport), after the writer's fences. */
	loco_words_load(rb->scratch, ring_at(rb, rb->rpos), HDR_WORDS,
			memory_order_acquire);
	memcpy(h, rb->scratch, HDR);
}

/* A whole pad for message rseq: skip to the ring start (1); 0 if torn. */
static int pad_take(struct loco_ringbuffer *rb, const struct loco_rb_hdr *h,
		    uint64_t left)
{
	if (h->len || h->sum != rb_sum(NULL, 0, h->seq, LOCO_RB_PAD))
		return 0;
	rb->rpos += left;
	return 1;
}

/* Copy the payload of H out and check it: true if whole. */
static bool payload_load(struct loco_ringbuffer *rb, const struct loco_rb_hdr *h,
			 uint64_t left)
{
	if (h->kind != LOCO_RB_MSG || !h->len || h->len > rb->max_msg ||
	    HDR + round8(h->len) > left)
		return false;
	/* Acquire: as in hdr_load. */
	loco_words_load(rb->scratch + HDR_WORDS, ring_at(rb, rb->rpos) + HDR,
			round8(h->len) / 8, memory_order_acquire);
	return rb_sum(rb->scratch + HDR_WORDS, h->len, h->seq, LOCO_RB_MSG) ==
	       h->sum;
}

/* Consume the checked message H into BUF. */
static int take(struct loco_ringbuffer *rb, struct loco_thread *thr,
		const struct loco_rb_hdr *h, void *buf, uint32_t cap,
		uint32_t *len)
{
	*len = h->len;
	if (h->len > cap)
		return -EMSGSIZE;
	memcpy(buf, rb->scratch + HDR_WORDS, h->len);
	/* The caller asked again: done with every earlier message (and the
	 * pads before this one). This one counts from the next call on. */
	rb->consumed = rb->rpos;
	rb->rpos += HDR + round8(h->len);
	rb->rseq++;
	rb->st.msgs++;
	rb->st.bytes += h->len;
	/* A failed push stays pending: the idle path retries and reports. */
	if (rb->consumed - rb->pushed >= rb->size / 4)
		ack_push(rb, thr);
	return 0;
}

int loco_ringbuffer_try_recv(struct loco_ringbuffer *rb, struct loco_thread *thr,
			     void *buf, uint32_t cap, uint32_t *len)
{
	if (loco_ringbuffer_is_writer(rb))
		return -EPERM;
	for (;;) {
		uint64_t left = rb->size - rb->rpos % rb->size;
		struct loco_rb_hdr h;
		if (left < HDR) {
			rb->rpos += left;
			continue;
		}
		hdr_load(rb, &h);
		if (h.seq != rb->rseq)
			return idle(rb, thr);
		if (h.kind == LOCO_RB_PAD && pad_take(rb, &h, left))
			continue;
		if (h.kind == LOCO_RB_PAD || !payload_load(rb, &h, left)) {
			rb->st.torn++;
			return -EAGAIN;
		}
		return take(rb, thr, &h, buf, cap, len);
	}
}

int loco_ringbuffer_recv(struct loco_ringbuffer *rb, struct loco_thread *thr,
			 void *buf, uint32_t cap, uint32_t *len, int timeout_ms)
{
	struct loco_wait w;
	loco_wait_init(&w, rb->base.mgr, timeout_ms);
	for (;;) {
		int rc = loco_ringbuffer_try_recv(rb, thr, buf, cap, len);
		if (rc != -EAGAIN)
			return rc;
		rc = loco_wait_step(&w);
		if (rc)
			return rc;
	}
}
