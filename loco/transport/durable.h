/* SPDX-License-Identifier: MIT */
/* The durable image of a node's arena (--durable DIR): DIR/arena.img, a
 * file as long as the arena, mapped shared. It is the node's persistence
 * domain: what a FLUSH (loco_persist) copied or synced into it survives
 * the node's death, a restart and, with a sync mode other than "none",
 * the machine's power loss. Shared by the transports (shm keeps a
 * volatile layer in front of it, verbs registers the mapping itself).
 *
 * Header (the arena's first 64 bytes, which hold no region):
 *	u64 magic "loco-img", u32 version, u32 flags (sync mode),
 *	u64 arena length, u64 image id (random, fixed at creation),
 *	u64 epoch (bumped by every start of the owner),
 *	u32 mirror (its mirror's node id + 1, 0: none), u32 taken_by (the
 *	node id + 1 of the mirror that took the image over after a
 *	fail-over, 0: none), u64 the mirror's epoch when it joined, u64 the
 *	mirror generation (bumped at each join).
 *
 * Mirrors: while the header names a mirror, every FLUSH copies its ranges
 * into the mirror's image too (the path is in "<image>.mirror"), under the
 * same span lock, before it completes; one that finds the mirror dead or
 * restarted drops it from the header. A join copies the whole image
 * under the start lock and then names the mirror. A take-over (the
 * mirror's) checks under the start lock that the owner is dead and the
 * mirror still named, then marks the image taken: its owner refuses to
 * start again and FLUSHes to it fail.
 *
 * Locks (open file description locks, released by the kernel when a
 * process dies, so a killed node never leaves one behind):
 *  - the owner (the node serving DIR) holds a read lock on bytes [0, 8)
 *    for its whole life: a writer probe there tells whether it is alive,
 *    and a second owner is refused;
 *  - a start takes a write lock on [64, len) while it bumps the epoch
 *    and loads the image, so no FLUSH of an earlier incarnation lands
 *    after the load;
 *  - a FLUSH takes a write lock on the span it copies, checks the owner
 *    is alive and the epoch is the one its writes went to, copies, and
 *    unlocks: copies of overlapping ranges are totally ordered, so a copy
 *    that read older bytes can never land over a newer one.
 *
 * Direct images (LOCO_DIMG_DIRECT, the header's flags): the owner's arena
 * is the image's mapping itself (shm without --power-cut, verbs, ucx), so
 * a FLUSH copies nothing and takes no lock: it checks the epoch and that
 * no mirror is named (else it copies into the mirror as above), then
 * syncs. With LOCO_DIMG_RENEW a start moves an existing image to a new
 * file (the earlier incarnation's mappings keep the old one).
 *
 * Syncs: fdatasync mode syncs by group commit (struct loco_dimg_gc): a
 * FLUSH waits for a sync in flight that began after its bytes were in the
 * image, or runs one at once beside the others (the kernel merges
 * concurrent fdatasyncs of a file) while fewer than the owner's
 * LOCO_DURABLE_SYNCS (default LOCO_DIMG_GC_SLOTS) run; else it waits for
 * one to end, and the next covers all waiters. */
#ifndef LOCO_TRANSPORT_DURABLE_H
#define LOCO_TRANSPORT_DURABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <loco/hosts.h>
#include "loco/transport/transport.h"

#pragma GCC visibility push(hidden)

#define LOCO_DIMG_HDR 64          /* header bytes: LOCO_ARENA_FIRST */
#define LOCO_DIMG_NAME "arena.img"

/* How a FLUSH makes the copied bytes reach stable storage
 * (LOCO_DURABLE_SYNC on the owner; docs/durability.md measures them). */
enum loco_dsync {
	LOCO_DSYNC_MSYNC = 0,     /* msync(MS_SYNC) of the flushed pages */
	LOCO_DSYNC_FDATASYNC = 1, /* fdatasync of the whole image (default) */
	LOCO_DSYNC_NONE = 2,      /* page cache only: survives the node's death,
				   * not the machine's power loss */
};

struct dimg_mirror;

struct loco_dimg {
	int fd;
	uint8_t *map;             /* the image, mapped shared */
	uint64_t len;
	uint64_t image_id;
	uint64_t epoch;           /* the incarnation this handle belongs to */
	bool own;                 /* the owner's handle (loco_dimg_own) */
	bool direct;              /* the owner's arena is the image */
	uint64_t group_wait_ns;   /* a group-commit waiter syncs by itself after
				   * this long without the leader's sync (0:
				   * 200 ms) */
	struct dimg_mirror *mx;   /* its path and its mirror, as flushed */
};

#define LOCO_DIMG_GC_LAT 96
#define LOCO_DIMG_GC_SLOTS 4    /* fdatasyncs in flight at most, and
				 * the default of LOCO_DURABLE_SYNCS */

/* Group commit (fdatasync mode): "<image>.sync", made anew by every
 * start of the owner and mapped shared by every process that flushes into
 * that incarnation. A FLUSH whose bytes are in the image takes a ticket
 * (req); a sync holds a slot, reads req (started), runs fdatasync, and
 * publishes what it read as done. A FLUSH returns once done covers its
 * ticket. */
struct loco_dimg_gc {
	uint64_t magic;
	uint64_t epoch;          /* the owner's incarnation it serves */
	_Atomic uint64_t req;    /* tickets taken */
	_Atomic uint64_t started; /* the most req a sync in flight or done read */
	_Atomic uint64_t done;   /* every ticket <= done is synced */
	_Atomic uint64_t syncs;  /* fdatasyncs run for tickets */
	_Atomic uint32_t wake;   /* futex word: bumped when done moves */
	uint32_t syncs_max;      /* syncs in flight at most, the owner's
				  * LOCO_DURABLE_SYNCS (1..LOCO_DIMG_GC_SLOTS),
				  * written before the file is named */
	/* For reports (loco_dimg_group_stats): the most tickets one sync
	 * moved done by, and the fdatasyncs' durations by LOCO_DIMG_GC_LAT
	 * buckets (4 a power of two of microseconds). */
	_Atomic uint64_t slot[LOCO_DIMG_GC_SLOTS]; /* a sync in flight: its start
				   * (CLOCK_MONOTONIC ns), 0: free */
	_Atomic uint64_t covered_max;
	_Atomic uint64_t lat[LOCO_DIMG_GC_LAT];
};

/* The sync mode LOCO_DURABLE_SYNC names (msync, fdatasync, none), or -1
 * with a warning for anything else; fdatasync when unset. */
int loco_dsync_from_env(void);
/* Syncs in flight at most, LOCO_DURABLE_SYNCS (1..LOCO_DIMG_GC_SLOTS;
 * LOCO_DIMG_GC_SLOTS when unset), or -EINVAL with an error naming it:
 * read by the owner at its start, for every flusher of the incarnation. */
int loco_dsyncs_from_env(void);

/* loco_dimg_own's HOW. */
#define LOCO_DIMG_DIRECT 1u /* the arena is the image's mapping */
#define LOCO_DIMG_RENEW 2u  /* move an existing image to a new file */

/* Start as the owner of DIR/arena.img for an arena of LEN bytes: create it
 * (sparse, identity IMAGE_ID) or open it (the length and identity must
 * match: -LOCO_EMISMATCH), refuse if another process owns it (-EBUSY),
 * bump the epoch (HOW: LOCO_DIMG_* flags). On return the start lock is
 * held: load the image, then call loco_dimg_ready. Errors are logged with
 * the path. */
int loco_dimg_own(const char *dir, uint64_t len, int sync, unsigned how,
		  uint64_t image_id, struct loco_dimg *out);
/* End of the start: release the start lock, keep the liveness lock. */
int loco_dimg_ready(struct loco_dimg *d);

struct loco_tp_config;
/* The start of a transport whose arena is the image's mapping itself
 * (verbs, ucx: registered with the NIC or UCX): refuses --power-cut (only
 * the shm transports emulate one; WHO names the transport in the
 * message, -EOPNOTSUPP), then loco_dimg_own and loco_dimg_ready for
 * CFG's durable directory, arena length, sync mode and image identity. */
int loco_dimg_arena_open(const struct loco_tp_config *cfg, const char *who,
			 struct loco_dimg *out);

/* Map a peer's image at PATH (its length LEN) to flush into it; its
 * header must carry IMAGE_ID (0: any) and EPOCH (else -ESTALE: the peer
 * moved on). */
int loco_dimg_attach(const char *path, uint64_t len, uint64_t image_id,
		     uint64_t epoch, struct loco_dimg *out);

/* FLUSH: copy the N ranges of SRC (the volatile layer, same offsets) into
 * the image unless it is direct, then sync them. Fails with -LOCO_EDOWN,
 * copying nothing, if the owner's epoch is no longer D's (or, not direct,
 * the owner is dead). Ranges must lie in [LOCO_DIMG_HDR, len). */
int loco_dimg_flush(struct loco_dimg *d, const uint8_t *src,
		    const struct loco_drange *r, unsigned n);

/* Group commit's counters of D's incarnation: FLUSHes that asked for an
 * fdatasync (TICKETS) and the fdatasyncs run for them (SYNCS); -ENOENT
 * for a handle without the state. */
int loco_dimg_group_counts(const struct loco_dimg *d, uint64_t *tickets,
			   uint64_t *syncs);
/* ... and for a report: the most FLUSHes one sync covered, and the
 * fdatasyncs' p50 and p99 in microseconds (a bucket's upper bound:
 * within 19%). */
struct loco_dimg_gc_stats {
	uint64_t tickets, syncs, covered_max;
	double sync_p50_us, sync_p99_us;
};
int loco_dimg_group_stats(const struct loco_dimg *d,
			  struct loco_dimg_gc_stats *out);

/* Copy every allocated extent of the file FD (LEN bytes) into DST: the
 * load of a volatile layer from an image (or from a surviving layer). */
int loco_dimg_load(int fd, uint64_t len, uint8_t *dst);

/* The owner OWN makes the image M (attached, of node NODE) its mirror:
 * under the start lock, M gets a copy of the whole image and the header
 * names it. From then on every FLUSH also lands in M. */
int loco_dimg_mirror_add(struct loco_dimg *own, struct loco_dimg *m,
			 uint32_t node);
/* The owner drops its mirror (it died, or fell behind). */
void loco_dimg_mirror_drop(struct loco_dimg *own);
/* Node ME, whose own image is at epoch MY_EPOCH, takes over the image P
 * (attached) it mirrors: 0 (also when it had already), -EBUSY (P's owner
 * lives), -ESTALE (P no longer names ME as its mirror at MY_EPOCH: ME
 * may have missed FLUSHes). */
int loco_dimg_take_over(struct loco_dimg *p, uint32_t me, uint64_t my_epoch);

void loco_dimg_close(struct loco_dimg *d);

#pragma GCC visibility pop

#endif
