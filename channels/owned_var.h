/* SPDX-License-Identifier: MIT */
/* owned_var (LOCO §5.1.1): a single-writer, multi-reader register. The
 * owner holds the authoritative copy; every reader holds a copy that the
 * owner updates by a push (one WRITE per reader). A reader can instead
 * pull (READ) the owner's copy. Loads never return a torn value:
 *
 *  - values of at most 8 bytes live in one aligned 8-byte word, which the
 *    memory model moves atomically;
 *  - larger values carry a header {version, checksum}; the checksum is
 *    XXH3-64 of the value seeded with the version, so a copy assembled
 *    from pieces of different stores fails the check and the reader
 *    retries (bounded, then -LOCO_ETORN). Every retry is counted.
 *
 * A pull returns the owner's value but does not refresh this node's copy:
 * that copy is written by the owner's pushes, and a local store racing an
 * incoming push could leave it mixed from two sources with no later push
 * to repair it. So the reader copy has exactly one writer, the owner.
 *
 *	struct loco_owned_var ov;
 *	loco_owned_var_init(&ov, mgr, parent, "cfg", owner, sizeof(cfg), 0);
 *	loco_mgr_wait_ready(mgr, -1);
 *	owner:  loco_owned_var_store(&ov, &cfg);
 *	        loco_owned_var_push(&ov, thr, 0, &ack);
 *	reader: loco_owned_var_load(&ov, &cfg);       (last pushed value)
 *	        loco_owned_var_pull(&ov, thr, &cfg);  (owner's value now)
 *
 * Regions: "<channel>.val", one copy: the 8-byte word, or struct
 * loco_ov_hdr followed by the value zero-padded to 8 bytes (peers may
 * only READ the owner's, only WRITE a reader's); and "<channel>.stage",
 * private (no remote access): push sources (owner), pull buffer (reader);
 * "<channel>.owner<ID>" (8 bytes, unused, no remote access): every
 * endpoint offers and expects it with the owner id it was given, so
 * endpoints that disagree on the owner fail to join with -LOCO_EMISMATCH. */
#ifndef LOCO_CHANNELS_OWNED_VAR_H
#define LOCO_CHANNELS_OWNED_VAR_H

#include <assert.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channel.h>

#define LOCO_OV_WORD 8           /* values up to this size need no header */
#define LOCO_OV_MAX_LEN 4096     /* largest value */
#define LOCO_OV_STAGES 4         /* pushes in flight per owned_var */
/* Checksum failures before -LOCO_ETORN. The retries back off (spin, yield,
 * then 20 us naps), so this bounds an inconsistent copy to roughly 0.1 s:
 * long enough to outlast a writer preempted mid-store, short enough to
 * report a copy left torn for good (a writer that died mid-store). */
#define LOCO_OV_RETRY_MAX 4096

/* Push flags. */
enum {
	/* Follow each reader's WRITE with a zero-length READ on the same QP:
	 * the ack then completes only once every reader's copy is placed
	 * (visible), at the cost of one more verb per reader, same doorbell. */
	LOCO_PUSH_PLACE = 1u << 0,
};

/* Remote layout of a copy of a value larger than 8 bytes: this header,
 * then the value, zero-padded to a multiple of 8 bytes. */
struct loco_ov_hdr {
	uint64_t version;   /* 1, 2, ... per store; 0 = initial (all zero) */
	uint64_t sum;       /* XXH3_64bits_withSeed(value, len, version) */
};
static_assert(sizeof(struct loco_ov_hdr) == 16, "remote layout");

struct loco_owned_var {
	struct loco_channel base;
	uint32_t owner;
	uint32_t len;               /* value bytes */
	uint32_t copy_len;          /* bytes of one copy */
	unsigned idx;               /* expectation index of "val" */
	struct loco_region *val;    /* this node's copy */
	struct loco_region *stage;  /* owner: LOCO_OV_STAGES push sources;
				     * reader: one pull destination */
	uint64_t version;           /* owner: version of the last store */
	unsigned next_stage;
	struct loco_ack stage_ack[LOCO_OV_STAGES];
	_Atomic uint64_t retries;   /* checksum mismatches seen */
};
static_assert(offsetof(struct loco_owned_var, base) == 0, "base first");

/* Create endpoint NAME (under PARENT, may be NULL) of a LEN-byte value
 * (1..LOCO_OV_MAX_LEN) owned by node OWNER, shared with PARTICIPANTS (a
 * bit per node id; 0: every compute node); OWNER must be this node or a
 * participant. The value starts all zero. Starts joining: the owner joins
 * every reader, a reader the owner. Returns 0, -EINVAL, -ENOMEM, -EEXIST;
 * on failure nothing is left to finish. */
int loco_owned_var_init(struct loco_owned_var *ov, struct loco_mgr *mgr,
			struct loco_channel *parent, const char *name,
			uint32_t owner, uint32_t len, uint64_t participants);

/* Unregister and free the regions. Pushes must be complete (e.g. the
 * pushing thread destroyed or fenced). */
void loco_owned_var_fini(struct loco_owned_var *ov);

static inline bool loco_owned_var_is_owner(const struct loco_owned_var *ov)
{
	return ov->owner == loco_channel_self(&ov->base);
}

/* Checksum mismatches this endpoint has seen (loads and pulls). */
static inline uint64_t loco_owned_var_retries(const struct loco_owned_var *ov)
{
	/* Relaxed: a statistic; it orders nothing. */
	return atomic_load_explicit(&ov->retries, memory_order_relaxed);
}

/* Owner: make VAL (len bytes) the value of the local, authoritative copy.
 * Remote readers see it after a push (or when they pull). Returns 0 or
 * -EPERM on a reader.
 * Ordering: the copy's words are release stores; a load or pull that
 *   returns this value happens after everything the owner did before.
 * Completion: synchronous (local).
 * Caller: the owner; one storing thread at a time. */
int loco_owned_var_store(struct loco_owned_var *ov, const void *val);

/* Read this node's copy (the owner's value at the owner, the last placed
 * push at a reader) into DST (len bytes). Returns 0, or -LOCO_ETORN if the
 * copy stayed inconsistent for LOCO_OV_RETRY_MAX attempts (a push being
 * placed right now; try again later). DST is written only on success.
 * Ordering: acquire: pairs with the release stores of loco_owned_var_store
 *   (owner) or with the owner's fence before the push (reader).
 * Completion: synchronous (local).
 * Caller: any thread, concurrently with stores and pushes. */
int loco_owned_var_load(struct loco_owned_var *ov, void *dst);

/* Owner: post one WRITE of the current value to every reader's copy (a
 * snapshot is taken now: later stores do not change what this push
 * writes). FLAGS: 0 or LOCO_PUSH_PLACE. Returns 0, -EPERM on a reader,
 * -ENOTCONN if a reader has not joined yet (nothing posted), or a post
 * error.
 * Ordering: per reader, pushes are placed in push order; a push is visible
 *   to the reader only once placed: after the ack with LOCO_PUSH_PLACE,
 *   else after a later fence by THR. To publish earlier remote writes
 *   with the value, fence them before the push (LOCO §5.3 release-write).
 * Completion: ACK (unioned, may be NULL) covers every reader's op. Up to
 *   LOCO_OV_STAGES pushes are in flight; the next one waits for the oldest.
 * Caller: the owner; the same thread for every push of this owned_var. */
int loco_owned_var_push(struct loco_owned_var *ov, struct loco_thread *thr,
			unsigned flags, struct loco_ack *ack);

/* Reader: READ the owner's copy into DST (len bytes), retrying on a
 * checksum mismatch; at the owner, the same as loco_owned_var_load.
 * Does not change this node's copy. Returns 0, -ENOTCONN (owner not joined
 * yet), -LOCO_ETORN (LOCO_OV_RETRY_MAX mismatches), -ETIMEDOUT or an op
 * error. DST is written only on success.
 * Ordering: returns a value the owner stored, never older than one this
 *   thread pulled before; sees everything the owner did before storing it.
 * Completion: synchronous (one READ per attempt).
 * Caller: any thread owning THR; one pulling thread at a time per endpoint
 *   (they share the pull buffer). */
int loco_owned_var_pull(struct loco_owned_var *ov, struct loco_thread *thr,
			void *dst);

#endif
