/* SPDX-License-Identifier: MIT */
/* oplog: AsymNVM's front end (Ma et al., "AsymNVM", §4, §5.1, §7.2) as a
 * reusable piece: one writer (a front end) keeps a data area on a memory
 * node (the back end, passive: it runs no code) crash-consistent with two
 * logs beside it, and caches the data area's pages.
 *
 *  - Operation log: one record per logical operation (a TYPE and up to
 *    rec_size - 24 bytes of parameters). loco_oplog_commit persists every
 *    staged record with one WRITE and one FLUSH (batched persistence): an
 *    operation is durable, and may be acknowledged, once it is committed.
 *  - Memory log: the physical writes (offset, bytes) operations make to
 *    the data area. They are staged at the front end (loco_oplog_write),
 *    where the cache shows them at once, and applied in batches
 *    (loco_oplog_apply): written with a checksum into one of two log
 *    areas, persisted, and only then written in place. A batch carries
 *    the applied mark: every operation logged before it has its writes
 *    in it or in an earlier batch.
 *  - Cache (struct loco_fcache): pages of the data area. Reads go through
 *    it (read-your-writes: a staged write is in its page, pinned until it
 *    is applied); a miss READs the page. A failure of the back end clears
 *    it.
 *
 * Recovery (loco_oplog_recover), after a crash of either side: redo the
 * complete memory-log batches (idempotent), then hand every committed
 * operation after the applied mark, in order, each once, to a replay
 * function that executes it again (reads and writes through the log, no
 * append). A batch or a record whose checksum fails was never persisted
 * whole, so it was never acknowledged: it is ignored, and a generation
 * number written at each recovery keeps the records of such a torn commit
 * from coming back later.
 *
 * Remote layout: hosted regions "<name>.log" and "<name>.data" on the
 * back end. The log region: a geometry block (64 B, written once), two
 * generation blocks (32 B each, alternating), the two memory-log areas
 * (mlog_len each), then the ring of nrec records of rec_size bytes:
 *
 *	record:  seq u64 | gen u32 | type u16 | len u16 | sum u64 | params
 *	batch:   number u64 | upto u64 | bytes u32 | entries u32 | sum u64 |
 *	         entries: off u64 | len u32 | 0 u32 | data (8-byte padded)
 *
 * A record slot is reused (seq + nrec) only after a persisted batch's
 * mark passed seq. The data area is read by this front end; other nodes
 * may read it (its applied state), but only this writer changes it.
 *
 * Rules on the user: one writer per log at a time (the caller's locking,
 * AsymNVM's single writer); an operation's writes are staged after its
 * append and before the next append; they fit in half a memory-log area
 * and their pages in half the cache (-ENOSPC otherwise). */
#ifndef LOCO_CHANNELS_OPLOG_H
#define LOCO_CHANNELS_OPLOG_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channel.h>
#include <loco/channels/fcache.h>

#define LOCO_OPLOG_REC_HDR 24u

struct loco_oplog_cfg {
	uint64_t data_len;     /* data area bytes, a multiple of page */
	uint32_t rec_size;     /* record bytes, 8-multiple, 32..4096 */
	uint32_t nrec;         /* ring records, >= 2 */
	uint32_t mlog_len;     /* bytes of each memory-log area, 8-multiple, >= 256 */
	uint32_t page;         /* cache page bytes: a power of two, 64..65536 */
	uint32_t cache_pages;  /* cache frames, >= 2 */
	uint32_t sample;       /* replacement candidates (fcache.h), >= 1 */
	bool no_persist;       /* deliberately broken: never FLUSH (tests) */
};

/* Counters since init (plain fields: the writer's thread updates them). */
struct loco_oplog_stats {
	uint64_t appended;     /* operations appended */
	uint64_t commits;      /* commits that wrote records */
	uint64_t committed;    /* records they wrote */
	uint64_t applies;      /* memory-log batches written */
	uint64_t mlog_bytes;   /* their bytes */
	uint64_t persists;     /* persistence points (FLUSHes) asked for */
	uint64_t replayed;     /* operations replayed by recoveries */
	uint64_t redone;       /* memory-log batches redone by recoveries */
	uint64_t recoveries;
};

struct loco_oplog {
	struct loco_channel base;
	struct loco_oplog_cfg cfg;
	uint32_t node;                /* the back end */
	struct loco_rregion log, data;
	struct loco_fcache cache;
	uint8_t *stage;               /* staged records: cfg.nrec * rec_size */
	uint32_t nstaged;
	uint8_t *mlog;                /* staged batch (cfg.mlog_len) */
	uint32_t mlog_used, mlog_nent;
	uint64_t *dirty;              /* pages pinned by the staged batch */
	uint32_t ndirty;
	uint8_t *post;                /* the last batch, kept while its in-place
				       * WRITEs may still be reading it */
	uint64_t next_seq;            /* the next operation's */
	uint64_t committed;           /* operations below are durable */
	uint64_t applied;             /* below: writes in a durable batch */
	uint64_t batch;               /* the next batch's number */
	uint64_t gen, gen_start;      /* the generation (see the top) */
	bool ready;                   /* recovered since init or a failure */
	bool replaying;
	struct loco_oplog_stats stats;
};
static_assert(offsetof(struct loco_oplog, base) == 0, "base first");

/* Replay of operation SEQ (TYPE, PARAMS of LEN bytes) during recovery: it
 * executes the operation again through loco_oplog_read/_write (never
 * _append) and returns 0 or a negative errno, which ends the recovery. */
typedef int loco_oplog_replay_fn(void *arg, struct loco_oplog *l,
				 struct loco_thread *thr, uint64_t seq,
				 uint16_t type, const void *params,
				 uint16_t len);

/* Log NAME under PARENT (may be NULL) on back end NODE with geometry CFG:
 * opens (creating at first) its hosted regions there. No remote data is
 * read: call loco_oplog_recover before anything else. Returns 0,
 * -EINVAL (bad CFG or name), -ENOMEM, -LOCO_EMISMATCH (the log exists
 * with another geometry's sizes), -LOCO_EDOWN or -ETIMEDOUT; on failure
 * nothing is left to finish. */
int loco_oplog_init(struct loco_oplog *l, struct loco_mgr *mgr,
		    struct loco_channel *parent, const char *name,
		    uint32_t node, const struct loco_oplog_cfg *cfg);

/* Recover: format a fresh log, or redo its complete batches, persist
 * them and a new generation, then replay every committed operation past
 * the applied mark through REPLAY(ARG, ...) (NULL: there must be none),
 * in order; *REPLAYED (may be NULL) gets their number. Their writes are
 * staged, as a running operation's. Also what the writer calls after a
 * back-end failure, once loco_peer_wait says the node is back: the
 * staged (unacknowledged) operations are gone, the cache is empty.
 * Returns 0, -LOCO_EMISMATCH (a log of another geometry), -EIO (the
 * geometry block is damaged), REPLAY's error, or an op error
 * (-LOCO_EDOWN: the back end died again).
 * Ordering: the redone writes are durable before any replayed operation
 *   runs; the new generation is durable before the return.
 * Completion: synchronous.
 * Caller: the log's writer, THR's owner. */
int loco_oplog_recover(struct loco_oplog *l, struct loco_thread *thr,
		       loco_oplog_replay_fn *replay, void *arg,
		       uint64_t *replayed);

/* Stage operation TYPE with LEN (<= rec_size - 24) bytes of PARAMS; *SEQ
 * (may be NULL) gets its number. It is durable after the next commit.
 * May apply first (when the ring, the memory log or the cache would
 * overflow), which commits too. Returns 0, -EINVAL (LEN too big),
 * -ENOTCONN (not recovered) or what loco_oplog_apply returns.
 * Ordering: none by itself; see loco_oplog_commit.
 * Completion: local unless it applies (then synchronous).
 * Caller: the writer, THR's owner. */
int loco_oplog_append(struct loco_oplog *l, struct loco_thread *thr,
		      uint16_t type, const void *params, uint16_t len,
		      uint64_t *seq);

/* Read LEN bytes at OFF of the data area into DST, as this writer sees
 * it: staged writes included. Through the cache; a missed page is READ
 * (one READ per page). Returns 0, -EINVAL (out of bounds), -ENOSPC
 * (every frame pinned), -ENOTCONN or an op error.
 * Ordering: sees every write this writer staged or applied before.
 * Completion: synchronous.
 * Caller: the writer, THR's owner. */
int loco_oplog_read(struct loco_oplog *l, struct loco_thread *thr,
		    uint64_t off, void *dst, uint32_t len);

/* Stage a write of LEN bytes of SRC at OFF of the data area, for the
 * operation appended last: its page(s) come into the cache (READ if
 * missing), take the bytes and stay pinned until applied. Returns 0,
 * -EINVAL, -ENOSPC (the batch or the cache is full with this
 * operation's writes alone), -ENOTCONN or an op error.
 * Ordering: visible to loco_oplog_read at once; in place (for other
 *   readers) after the apply that takes it; durable as the operation.
 * Completion: local unless a page is read in (synchronous then).
 * Caller: the writer, THR's owner. */
int loco_oplog_write(struct loco_oplog *l, struct loco_thread *thr,
		     uint64_t off, const void *src, uint32_t len);

/* Persist every staged record: one WRITE (two where the ring wraps; a
 * long run is split into 16 KiB pieces) and one persist. Nothing staged:
 * nothing done.
 * Ordering: on 0, every operation appended before is durable: after a
 *   crash of either side it is recovered (replayed or applied).
 * Completion: synchronous.
 * Caller: the writer, THR's owner. Returns 0, -ENOTCONN or an op error
 * (-LOCO_EDOWN: the back end died; the staged operations may or may not
 * be durable, recover and look). After any op error the log answers
 * -ENOTCONN until loco_oplog_recover (once loco_peer_wait says the back
 * end is back; after -LOCO_ELOST it lost its memory: finish the log and
 * init it again). */
int loco_oplog_commit(struct loco_oplog *l, struct loco_thread *thr);

/* Apply the staged memory log: its batch (with the staged records) is
 * written and persisted, then its writes are posted in place, and the
 * pages unpinned. Nothing staged: nothing done.
 * Ordering: on 0, as loco_oplog_commit, and the batch is durable. The
 *   in-place WRITEs are placed at the next persist or fence of THR's
 *   writes to the back end (the next apply's, at the latest), not now.
 * Completion: synchronous for the batch; the in-place writes are posted.
 * Caller: the writer, THR's owner. Errors as loco_oplog_commit. */
int loco_oplog_apply(struct loco_oplog *l, struct loco_thread *thr);

/* Apply, then persist the in-place writes too: the data area alone then
 * holds every operation (what a writer does before it stops).
 * Ordering: on 0, the data area is durable and placed.
 * Completion: synchronous.
 * Caller: the writer, THR's owner. Errors as loco_oplog_commit. */
int loco_oplog_sync(struct loco_oplog *l, struct loco_thread *thr);

/* The data area's descriptor (for other nodes' reads of it). */
static inline const struct loco_rregion *loco_oplog_data(
	const struct loco_oplog *l)
{
	return &l->data;
}

/* Finish; operations staged and not committed are dropped (the in-place
 * writes of the last apply are fenced first, errors ignored: call
 * loco_oplog_sync before to know). Caller: the writer, with THR; NULL
 * fences nothing, so the thread that posted into the log (whose WRITEs
 * read the buffers this frees until they complete) must be destroyed
 * first. */
void loco_oplog_fini(struct loco_oplog *l, struct loco_thread *thr);

#endif
