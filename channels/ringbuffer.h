/* SPDX-License-Identifier: MIT */
/* ringbuffer (LOCO §5.4, after FaRM's message rings): one writer
 * broadcasts messages of mixed sizes to every other participant (the
 * readers). Each participant holds a copy of the ring with owned-var
 * semantics: the writer's copy is the authoritative one, where it encodes
 * messages; a reader's copy is written only by the writer's WRITEs (one
 * per reader and contiguous range, several messages per WRITE when
 * batched), and the reader polls it locally, without remote operations.
 *
 * Atomicity: a WRITE may be placed torn, in 8-byte pieces in any order,
 * over older bytes. Every record is
 *
 *	struct loco_rb_hdr { seq, len, kind, sum }, payload (padded to 8)
 *
 * where seq numbers messages 1, 2, ... and sum is XXH3-64 of the payload
 * seeded with seq, len and kind. A reader expecting message n at some
 * position takes it only when the header there says n and the checksum of
 * the payload it copied out matches: a record still being placed, or the
 * bytes of an older lap, fail the check and the reader tries again later.
 * A record that does not fit before the end of the ring is preceded by a
 * pad record (kind LOCO_RB_PAD, same seq) telling the reader to wrap;
 * fewer than a header's bytes left before the end are skipped implicitly.
 *
 * Flow control: each reader publishes the stream position it consumed up
 * to in its row of the SST "<rb>/acks" (8-byte rows, pushed when a
 * quarter of the ring has been consumed since the last push, when the
 * reader finds nothing new, or on loco_ringbuffer_ack). A message counts
 * as consumed once the reader calls again (or acknowledges): an
 * acknowledgement never covers the message just returned, so "every
 * reader acknowledged position P" means every reader finished with what
 * it did with the messages before P. The writer reuses
 * space once every reader's row has passed it and the WRITEs that carried
 * it completed (their source is the writer's copy). A full ring makes a
 * send return -EAGAIN, or wait up to a timeout.
 *
 *	writer: loco_ringbuffer_send(&rb, thr, msg, len, 0, NULL, -1);
 *	reader: loco_ringbuffer_recv(&rb, thr, buf, sizeof(buf), &len, -1);
 *
 * Region "<rb>.ring" (SIZE bytes, every participant; the writer expects
 * it from every reader, whose copies peers may only WRITE; the writer's
 * own is its source, which nobody reaches); "<rb>.writer<ID>" (8 bytes,
 * unused, no remote access: endpoints that disagree on the writer fail to
 * join with -LOCO_EMISMATCH); the SST "<rb>/acks". */
#ifndef LOCO_CHANNELS_RINGBUFFER_H
#define LOCO_CHANNELS_RINGBUFFER_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channels/sst.h>
#include <loco/channel.h>

#define LOCO_RB_MIN_SIZE 4096
/* Posts in flight (each one WRITE per reader and range). */
#define LOCO_RB_INFLIGHT 64

/* Record kinds. */
enum {
	LOCO_RB_MSG = 1,
	LOCO_RB_PAD = 2,
};

/* Send flags. */
enum {
	/* Stage only: post with a later send without it, or a flush. */
	LOCO_RB_MORE = 1u << 0,
	/* Follow each reader's WRITEs with a zero-length READ on the same
	 * QP, so the post's completion means the message is placed (visible)
	 * at every reader. */
	LOCO_RB_PLACE = 1u << 1,
};

/* Remote layout of a record header. */
struct loco_rb_hdr {
	uint64_t seq;       /* message number (a pad: the next message's) */
	uint32_t len;       /* payload bytes (a pad: 0) */
	uint32_t kind;      /* LOCO_RB_MSG or LOCO_RB_PAD */
	uint64_t sum;       /* XXH3-64 of the payload, seeded (see .c) */
};
static_assert(sizeof(struct loco_rb_hdr) == 24, "remote layout");

struct loco_rb_stats {
	uint64_t msgs;      /* sent (writer) or received (reader) */
	uint64_t bytes;     /* payload bytes of those */
	uint64_t posts;     /* writer: posts (each one WRITE per reader+range) */
	uint64_t full;      /* writer: sends that found the ring full */
	uint64_t torn;      /* reader: records seen incomplete, retried */
	uint64_t acks;      /* reader: acknowledgement pushes */
};

/* One post in flight: stream positions [start, end) and its completion. */
struct loco_rb_post {
	uint64_t start, end;
	struct loco_ack ack;
};

struct loco_ringbuffer {
	struct loco_channel base;
	struct loco_sst acks;          /* rows: consumed position (readers) */
	uint32_t writer;
	uint32_t max_msg;              /* largest payload */
	uint64_t size;                 /* ring bytes */
	unsigned idx;                  /* expectation index of "ring" */
	struct loco_region *ring;      /* this node's copy */
	uint64_t *scratch;             /* one record, word aligned */
	bool ready;                    /* every reader joined (writer) */
	/* writer: next position to write, first unposted position, last
	 * message number, the consumed position each reader acknowledged, and
	 * the posts in flight (a FIFO). */
	uint64_t head, posted, seq;
	uint64_t acked[LOCO_MAX_NODES];
	uint64_t dropped;              /* readers no longer written or waited
					* for (loco_ringbuffer_drop_reader) */
	struct loco_rb_post inflight[LOCO_RB_INFLIGHT];
	unsigned if_head, if_count;
	/* reader: next position to read, next message number, the end of
	 * the messages the caller is done with (every message returned
	 * before the last one), and the last pushed consumed position. */
	uint64_t rpos, rseq, consumed, pushed;
	struct loco_rb_stats st;
};
static_assert(offsetof(struct loco_ringbuffer, base) == 0, "base first");

/* Create endpoint NAME (under PARENT, may be NULL) of a ring of SIZE bytes
 * (a multiple of 8, LOCO_RB_MIN_SIZE .. 4 GiB - 8) written by node WRITER (this
 * node or one of PARTICIPANTS, 0: every compute node), read by every other
 * member, and start joining. Messages are at most SIZE / 4 - 24 bytes.
 * Returns 0, -EINVAL, -ENOMEM or -EEXIST; on failure nothing is left. */
int loco_ringbuffer_init(struct loco_ringbuffer *rb, struct loco_mgr *mgr,
			 struct loco_channel *parent, const char *name,
			 uint32_t writer, uint64_t size, uint64_t participants);

/* Finish the ring and its SST. The writer's posts and the readers'
 * acknowledgement pushes must be complete (the thread fenced or
 * destroyed). */
void loco_ringbuffer_fini(struct loco_ringbuffer *rb);

static inline bool loco_ringbuffer_is_writer(const struct loco_ringbuffer *rb)
{
	return rb->writer == loco_channel_self(&rb->base);
}

static inline uint32_t loco_ringbuffer_max_msg(const struct loco_ringbuffer *rb)
{
	return rb->max_msg;
}

/* The largest payload a ring of SIZE bytes takes (a quarter of the ring,
 * less a record header), before one exists: for checking options. */
static inline uint64_t loco_ringbuffer_max_msg_for(uint64_t size)
{
	return size / 4 - sizeof(struct loco_rb_hdr);
}

/* Writer: append message MSG of LEN bytes (1..max_msg) and, unless FLAGS
 * has LOCO_RB_MORE, post everything staged: one WRITE per reader and
 * contiguous range. *POS (may be NULL) gets the message's end position in
 * the stream, for loco_ringbuffer_acked. Returns 0, -EAGAIN if the ring is
 * full (staged messages are posted then, so readers can drain it),
 * -EINVAL, -EPERM on a reader, -ENOTCONN before every reader joined, or a
 * post error.
 * Ordering: readers see messages in send order, each whole. A message is
 *   visible once placed: after the post's completion with LOCO_RB_PLACE,
 *   or after a later loco_ringbuffer_flush. To publish other remote
 *   writes with a message, fence them before sending it.
 * Completion: asynchronous; the writer tracks its posts itself.
 * Caller: the writer, always with the same THR (its WRITEs to a reader
 *   share one QP, so a reused ring word is never overwritten by a late
 *   piece of an older WRITE); one calling thread at a time. */
int loco_ringbuffer_try_send(struct loco_ringbuffer *rb, struct loco_thread *thr,
			     const void *msg, uint32_t len, unsigned flags,
			     uint64_t *pos);

/* Writer: as loco_ringbuffer_try_send, but while the ring is full post
 * and fence what is staged (so every reader can see it), then wait (spin
 * briefly, yield, nap) for the readers' acknowledgements, up to
 * TIMEOUT_MS (< 0: the manager default): -ETIMEDOUT then.
 * Ordering: as loco_ringbuffer_try_send.
 * Completion: as loco_ringbuffer_try_send.
 * Caller: as loco_ringbuffer_try_send. */
int loco_ringbuffer_send(struct loco_ringbuffer *rb, struct loco_thread *thr,
			 const void *msg, uint32_t len, unsigned flags,
			 uint64_t *pos, int timeout_ms);

/* Writer: post what is staged and fence THR, so every message sent so far
 * is placed at every reader. Returns 0, -EPERM, -ENOTCONN or an op error.
 * Ordering: a release for the messages: placed before the return.
 * Completion: synchronous.
 * Caller: the writer, with the THR of its sends. */
int loco_ringbuffer_flush(struct loco_ringbuffer *rb, struct loco_thread *thr);

/* Writer: true when every reader acknowledged the stream up to POS (from
 * a send), i.e. consumed the message; loads the rows locally.
 * Ordering: acquire on the rows: a reader's acknowledgement carries what
 *   that reader did before consuming further (see the reader's side).
 * Completion: synchronous (local).
 * Caller: the writer; one thread at a time with the sender. */
bool loco_ringbuffer_acked(struct loco_ringbuffer *rb, uint64_t pos);

/* Writer: the readers (a bit per node id) that have not acknowledged the
 * stream up to POS yet; 0 when loco_ringbuffer_acked(POS).
 * Ordering, Completion, Caller: as loco_ringbuffer_acked. */
uint64_t loco_ringbuffer_unacked(struct loco_ringbuffer *rb, uint64_t pos);

/* Writer: stop writing to reader NODE and waiting for it (its
 * acknowledgements no longer count), for good: for a reader fenced
 * (loco_fence_node), which will never read again. Returns 0, -EPERM on
 * a reader, -EINVAL if NODE is not a reader.
 * Ordering: none; later sends and loco_ringbuffer_acked skip NODE.
 * Completion: synchronous (local).
 * Caller: the writer; one thread at a time with the sender. */
int loco_ringbuffer_drop_reader(struct loco_ringbuffer *rb, uint32_t node);

/* Writer: flush, then wait until loco_ringbuffer_acked(POS), up to
 * TIMEOUT_MS (< 0: the manager default). Returns 0, -ETIMEDOUT, -EPERM or
 * an op error.
 * Ordering: as loco_ringbuffer_acked.
 * Completion: synchronous.
 * Caller: the writer, with the THR of its sends. */
int loco_ringbuffer_wait_acked(struct loco_ringbuffer *rb,
			       struct loco_thread *thr, uint64_t pos,
			       int timeout_ms);

/* Reader: take the next message into BUF (CAP bytes); *LEN gets its size.
 * Returns 0, -EAGAIN if no complete message is there yet, -EMSGSIZE if
 * CAP is too small (*LEN gets the size; the message stays), -EPERM on the
 * writer, or the error of an acknowledgement push. The messages returned
 * by earlier calls count as consumed (the one returned now does not): they
 * are acknowledged (pushed) when a quarter of the ring has been consumed
 * or when nothing new is there.
 * Ordering: acquire on this node's copy: a message carries what the writer
 *   fenced before sending it. An acknowledgement is a release of the
 *   reader's loads of the space it frees.
 * Completion: synchronous (local; a push is posted, not waited for).
 * Caller: one receiving thread per reader endpoint, always with the same
 *   THR (it pushes the acknowledgements). */
int loco_ringbuffer_try_recv(struct loco_ringbuffer *rb, struct loco_thread *thr,
			     void *buf, uint32_t cap, uint32_t *len);

/* Reader: as loco_ringbuffer_try_recv, waiting (spin briefly, yield, nap)
 * up to TIMEOUT_MS (< 0: the manager default) for a message: -ETIMEDOUT.
 * Ordering: as loco_ringbuffer_try_recv.
 * Completion: as loco_ringbuffer_try_recv.
 * Caller: as loco_ringbuffer_try_recv. */
int loco_ringbuffer_recv(struct loco_ringbuffer *rb, struct loco_thread *thr,
			 void *buf, uint32_t cap, uint32_t *len, int timeout_ms);

/* Reader: every message returned so far counts as consumed; push the
 * consumed position now (if it moved), placed. Returns
 * 0, -EPERM, -ENOTCONN (rows not joined yet) or a post error.
 * Ordering: as the pushes of loco_ringbuffer_try_recv.
 * Completion: posted; placed once THR's next fence or push completes.
 * Caller: the receiving thread. */
int loco_ringbuffer_ack(struct loco_ringbuffer *rb, struct loco_thread *thr);

#endif
