/* SPDX-License-Identifier: MIT */
/* LLLock (rTX §4.1): the 8-byte logged lease lock of a TXObj, and the data
 * pointer next to it. Both words live on a memory node and change only by
 * CAS (never by WRITE), so every change is atomic with every other.
 *
 * LLLock word:
 *
 *   unlocked  | 0 | version (63 bits)                                  |
 *   locked    | 1 | N | lease (40) | seq (10) | owner (12)             |
 *               63  62  61     22   21     12   11      0
 *
 * - version: changes on every committed update (the OCC version the paper
 *   piggybacks in the lock). An owner releases to version + 1 (commit) or
 *   to the version it locked (abort); a repairer, which cannot know the
 *   old version, releases to a fresh version (loco_lllock_fresh) that no
 *   earlier state of the object can have held.
 * - lease: milliseconds of CLOCK_REALTIME since the rtx epoch (a shared
 *   time base written once into the rtx superblock): comparable across
 *   processes and hosts up to clock drift, which the lease's drift term
 *   absorbs. 40 bits last 34 years.
 * - seq: with the lease, the "tag" (50 bits) that a thread makes strictly
 *   increasing over its transactions (up to 1024 per millisecond), so
 *   every locked word names exactly one transaction.
 * - owner: the rTX id of the holder, i.e. its thread slot, which indexes
 *   the log array.
 * - N (no log): the holder wrote no log (OPT1, a one-object write set, or
 *   an OPT2 pre-lock); a repairer steals such a lock instead of replaying
 *   a log.
 *
 * Data pointer (TXObj word 2):  | version (16) | block index (48) |;
 * block 0 is null. The 16-bit version increments on every install, so a
 * reused block cannot make a stale install CAS succeed unless the object
 * went through 65536 installs meanwhile (the wrap the repair guard bounds). */
#ifndef LOCO_RTX_LLLOCK_H
#define LOCO_RTX_LLLOCK_H

#include <stdbool.h>
#include <stdint.h>

#define LOCO_LLLOCK_LOCKED (UINT64_C(1) << 63)
#define LOCO_LLLOCK_NOLOG (UINT64_C(1) << 62)
#define LOCO_LLLOCK_OWNER_BITS 12
#define LOCO_LLLOCK_SEQ_BITS 10
#define LOCO_LLLOCK_LEASE_BITS 40
#define LOCO_LLLOCK_TAG_BITS (LOCO_LLLOCK_LEASE_BITS + LOCO_LLLOCK_SEQ_BITS)
#define LOCO_LLLOCK_MAX_OWNERS (1u << LOCO_LLLOCK_OWNER_BITS)
#define LOCO_LLLOCK_TAG_MASK ((UINT64_C(1) << LOCO_LLLOCK_TAG_BITS) - 1)
#define LOCO_LLLOCK_LEASE_MASK ((UINT64_C(1) << LOCO_LLLOCK_LEASE_BITS) - 1)
#define LOCO_LLLOCK_VERSION_MASK (LOCO_LLLOCK_LOCKED - 1)
/* Fresh versions set this bit; counted versions stay below it. */
#define LOCO_LLLOCK_FRESH (UINT64_C(1) << 62)

/* Tag of a lease (ms since the rtx epoch) and a sequence number. */
static inline uint64_t loco_lllock_tag_of(uint64_t lease_ms, unsigned seq)
{
	return ((lease_ms & LOCO_LLLOCK_LEASE_MASK) << LOCO_LLLOCK_SEQ_BITS) |
	       (seq & ((1u << LOCO_LLLOCK_SEQ_BITS) - 1));
}

/* Locked word of the transaction with TAG held by slot OWNER. */
static inline uint64_t loco_lllock_make(uint64_t tag, uint32_t owner,
					bool nolog)
{
	return LOCO_LLLOCK_LOCKED | (nolog ? LOCO_LLLOCK_NOLOG : 0) |
	       ((tag & LOCO_LLLOCK_TAG_MASK) << LOCO_LLLOCK_OWNER_BITS) |
	       (owner & (LOCO_LLLOCK_MAX_OWNERS - 1));
}

static inline bool loco_lllock_is_locked(uint64_t w)
{
	return (w & LOCO_LLLOCK_LOCKED) != 0;
}

static inline bool loco_lllock_nolog(uint64_t w)
{
	return (w & LOCO_LLLOCK_NOLOG) != 0;
}

static inline uint64_t loco_lllock_tag(uint64_t w)
{
	return (w >> LOCO_LLLOCK_OWNER_BITS) & LOCO_LLLOCK_TAG_MASK;
}

static inline uint64_t loco_lllock_lease(uint64_t w)
{
	return loco_lllock_tag(w) >> LOCO_LLLOCK_SEQ_BITS;
}

static inline uint32_t loco_lllock_owner(uint64_t w)
{
	return (uint32_t)(w & (LOCO_LLLOCK_MAX_OWNERS - 1));
}

/* Version carried by an unlocked word. */
static inline uint64_t loco_lllock_version(uint64_t w)
{
	return w & LOCO_LLLOCK_VERSION_MASK;
}

/* Whether a lease (a lock's, or a DOING log's repair lease) is over at
 * NOW_MS (ms since the epoch). A lease names the first millisecond at
 * which it counts as over: taken at time T with L ms (now_ms + L), it ends
 * between L - 1 and L ms after T, so a dead holder's lock is repairable
 * within L ms of its death. */
static inline bool loco_lease_over(uint64_t lease_ms, uint64_t now_ms)
{
	return lease_ms <= now_ms;
}

/* A locked word whose lease is over at NOW_MS. */
static inline bool loco_lllock_expired(uint64_t w, uint64_t now_ms)
{
	return loco_lllock_is_locked(w) &&
	       loco_lease_over(loco_lllock_lease(w), now_ms);
}

/* A version no earlier state of any object held: FRESH bit, NOW_MS (40
 * bits), slot (12), and a per-slot counter CTR (10). Two fresh versions
 * of one object are at least a lease apart (an object is repaired only
 * after its lock expired), so counted versions (fresh + k, one per
 * commit) cannot reach the next fresh one unless 4M commits land within a
 * millisecond. */
static inline uint64_t loco_lllock_fresh(uint64_t now_ms, uint32_t slot,
					 unsigned ctr)
{
	return LOCO_LLLOCK_FRESH |
	       ((now_ms & LOCO_LLLOCK_LEASE_MASK) << 22) |
	       ((uint64_t)(slot & (LOCO_LLLOCK_MAX_OWNERS - 1)) << 10) |
	       (ctr & 1023u);
}

/* ---- data pointers ------------------------------------------------------- */

#define LOCO_RTX_DPTR_BLOCK_BITS 48
#define LOCO_RTX_DPTR_BLOCK_MASK ((UINT64_C(1) << LOCO_RTX_DPTR_BLOCK_BITS) - 1)

static inline uint64_t loco_rtx_dptr(uint16_t ver, uint64_t block)
{
	return ((uint64_t)ver << LOCO_RTX_DPTR_BLOCK_BITS) |
	       (block & LOCO_RTX_DPTR_BLOCK_MASK);
}

static inline uint16_t loco_rtx_dptr_ver(uint64_t d)
{
	return (uint16_t)(d >> LOCO_RTX_DPTR_BLOCK_BITS);
}

static inline uint64_t loco_rtx_dptr_block(uint64_t d)
{
	return d & LOCO_RTX_DPTR_BLOCK_MASK;
}

/* The pointer that replaces OLD by BLOCK (0: null): version + 1, wrapping. */
static inline uint64_t loco_rtx_dptr_next(uint64_t old, uint64_t block)
{
	return loco_rtx_dptr((uint16_t)(loco_rtx_dptr_ver(old) + 1u), block);
}

/* Whether lock word W and data pointer D, read by one 16-byte READ that
 * may have torn, are one state of the object: W a counted version (no
 * repair ever released the object) whose low 16 bits are D's version.
 * From the zeroed TXObj (0, null) on, every commit adds one to both (its
 * install to the pointer's version, its owner's release to the lock's),
 * and an owner's abort changes neither; only a repairer's fresh version
 * (and a steal's copy) breaks the match, for good: its counted
 * successors keep LOCO_LLLOCK_FRESH. So a READ whose halves straddle a
 * commit never matches unless 65536 commits of the object fell between
 * them, the wrap every pointer comparison rests on. A lock CAS from a
 * matching W that succeeds then proves D current (docs/rtx.md, "The
 * validation READ of a written object"); one that does not match is
 * READ back. */
static inline bool loco_rtx_meta_whole(uint64_t w, uint64_t d)
{
	return !(w & (LOCO_LLLOCK_LOCKED | LOCO_LLLOCK_FRESH)) &&
	       (uint16_t)w == loco_rtx_dptr_ver(d);
}

#endif
