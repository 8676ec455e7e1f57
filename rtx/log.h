/* SPDX-License-Identifier: MIT */
/* rTX log (rTX §4.2, §4.4): one log slot per thread slot (the rTX id) in
 * the log array on the rtx's home memory node. Remote layout:
 *
 *   struct loco_rtx_log_hdr   state, lockv, meta, sum
 *   struct loco_rtx_log_ent   [n]: mptr, old dptr, new dptr
 *
 * The owner writes header and entries with one WRITE before it takes any
 * lock; afterwards only the state word changes, always by CAS. The state
 * word carries the state, the slot's log sequence number and a time:
 *
 *   | state (2) | seq (22) | ms (40) |
 *
 * where ms is the transaction's lease in INIT, ABORT and DONE and the
 * repair lease in DOING. The sequence number makes a stale CAS aimed at
 * an earlier transaction of the slot fail.
 *
 * Checksum: lockv is the LockState (lock word) of the transaction that
 * wrote the log, as in the paper, and sum is a 64-bit hash over lockv,
 * meta and the entries, so a log that another transaction of the slot is
 * rewriting (a torn mix of two logs) or whose lockv is not the lock word
 * a repairer found is recognised as reused and never applied. */
#ifndef LOCO_RTX_LOG_H
#define LOCO_RTX_LOG_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/raddr.h>

enum loco_rtx_log_state {
	LOCO_RTX_LOG_DONE = 0,   /* finished (or never used): nothing to do */
	LOCO_RTX_LOG_INIT = 1,   /* executing / validating: may be aborted */
	LOCO_RTX_LOG_ABORT = 2,  /* aborted; its locks may still be held */
	LOCO_RTX_LOG_DOING = 3,  /* committing under a repair lease */
};

#define LOCO_RTX_LOG_SEQ_BITS 22
#define LOCO_RTX_LOG_MS_BITS 40
#define LOCO_RTX_LOG_SEQ_MASK ((1u << LOCO_RTX_LOG_SEQ_BITS) - 1)
#define LOCO_RTX_LOG_MS_MASK ((UINT64_C(1) << LOCO_RTX_LOG_MS_BITS) - 1)

struct loco_rtx_log_hdr {
	uint64_t state;   /* state word, above */
	uint64_t lockv;   /* lock word of the writer: the checksum's key */
	uint64_t meta;    /* seq << 32 | number of entries */
	uint64_t sum;     /* loco_rtx_log_sum() */
};
static_assert(sizeof(struct loco_rtx_log_hdr) == 32, "remote layout");

struct loco_rtx_log_ent {
	loco_raddr_t mptr;   /* the TXObj (its lock word) */
	uint64_t old_dptr;   /* data pointer the transaction read */
	uint64_t new_dptr;   /* data pointer it installs */
};
static_assert(sizeof(struct loco_rtx_log_ent) == 24, "remote layout");

static inline uint64_t loco_rtx_state_word(enum loco_rtx_log_state st,
					   uint32_t seq, uint64_t ms)
{
	return ((uint64_t)st << 62) |
	       ((uint64_t)(seq & LOCO_RTX_LOG_SEQ_MASK) << LOCO_RTX_LOG_MS_BITS) |
	       (ms & LOCO_RTX_LOG_MS_MASK);
}

static inline enum loco_rtx_log_state loco_rtx_state_of(uint64_t s)
{
	return (enum loco_rtx_log_state)(s >> 62);
}

static inline uint32_t loco_rtx_state_seq(uint64_t s)
{
	return (uint32_t)(s >> LOCO_RTX_LOG_MS_BITS) & LOCO_RTX_LOG_SEQ_MASK;
}

static inline uint64_t loco_rtx_state_ms(uint64_t s)
{
	return s & LOCO_RTX_LOG_MS_MASK;
}

static inline uint64_t loco_rtx_log_meta(uint32_t seq, uint32_t n)
{
	return (uint64_t)seq << 32 | n;
}

static inline uint32_t loco_rtx_log_nent(const struct loco_rtx_log_hdr *h)
{
	return (uint32_t)h->meta;
}

static inline uint32_t loco_rtx_log_seq(const struct loco_rtx_log_hdr *h)
{
	return (uint32_t)(h->meta >> 32);
}

/* True if state word STATE is of the transaction log H was written for
 * (their sequence numbers agree). */
static inline bool loco_rtx_state_of_log(uint64_t state,
					 const struct loco_rtx_log_hdr *h)
{
	return loco_rtx_state_seq(state) ==
	       (loco_rtx_log_seq(h) & LOCO_RTX_LOG_SEQ_MASK);
}

/* Bytes of a log with N entries. */
static inline size_t loco_rtx_log_bytes(unsigned n)
{
	return sizeof(struct loco_rtx_log_hdr) + n * sizeof(struct loco_rtx_log_ent);
}

/* Checksum of header H (lockv and meta) and its entries E. */
uint64_t loco_rtx_log_sum(const struct loco_rtx_log_hdr *h,
			  const struct loco_rtx_log_ent *e);

/* Fill header H for N entries E written by the transaction with lock word
 * LOCKV and sequence number SEQ, in state INIT with lease LEASE_MS. */
void loco_rtx_log_seal(struct loco_rtx_log_hdr *h,
		       const struct loco_rtx_log_ent *e, unsigned n,
		       uint64_t lockv, uint32_t seq, uint64_t lease_ms);

/* True if the log at BUF (header then entries, a copy read from the
 * memory node) was written by the transaction whose lock word is LOCKV,
 * is whole (checksum), and has at most MAX_ENT entries. */
bool loco_rtx_log_matches(const void *buf, uint64_t lockv, unsigned max_ent);

/* True if the log at BUF is open: whole (loco_rtx_log_matches for its own
 * lockv), its state word its own (the header's sequence number) and not
 * DONE. Only an open log names blocks in use or has work for a repair.
 * The seal does not cover the state word (it changes by CAS), so a WRITE
 * of the slot's next log that placed only its first word leaves INIT of
 * the next transaction over the previous log, which still matches: that
 * log is DONE (a slot's log is rewritten only then), so such a log is
 * not open. The next transaction's locks follow the whole WRITE on its
 * QP; one a power cut kept without the rest of the log (durable nodes
 * persist log and locks together) names a log that does not match it,
 * and a repair steals it. */
bool loco_rtx_log_open(const void *buf, unsigned max_ent);

/* ---- repair decisions (rTX Fig. 10) -------------------------------------- */

enum loco_rtx_repair_action {
	LOCO_RTX_REPAIR_NONE,      /* lock not held, or nothing left to do */
	LOCO_RTX_REPAIR_WAIT,      /* lease (or repair lease) still running */
	LOCO_RTX_REPAIR_STEAL,     /* no log (N bit) or a reused log: steal the
				    * lock, switch the data to a copy, release */
	LOCO_RTX_REPAIR_ABORT,     /* INIT: CAS to ABORT, then release */
	LOCO_RTX_REPAIR_RELEASE,   /* ABORT: release its locks, then DONE */
	LOCO_RTX_REPAIR_RECOMMIT,  /* DOING, repair lease over: take the repair
				    * lease and re-run TryCommit from the log */
	LOCO_RTX_REPAIR_LATE_LOCK, /* DONE but this lock still held: a lock
				    * taken after an abort; release it */
};

/* What to do about lock word LOCKV found on an object at NOW_MS, given
 * whether the owner's log MATCHES it and, if so, the log's STATE word.
 * Pure: no remote access. */
enum loco_rtx_repair_action loco_rtx_repair_decide(uint64_t lockv,
						   bool matches,
						   uint64_t state,
						   uint64_t now_ms);

const char *loco_rtx_repair_name(enum loco_rtx_repair_action a);

#endif
