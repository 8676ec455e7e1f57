/* SPDX-License-Identifier: MIT */
/* fcache: a front end's cache of pages of remote memory (AsymNVM §4.4).
 *
 * A fixed number of page frames, looked up by page number through a hash
 * map. When it is full, a new page replaces a victim chosen as AsymNVM
 * does: SAMPLE frames drawn at random (random replacement), of which the
 * least recently used goes (LRU among them). SAMPLE 1 is plain random
 * replacement; SAMPLE >= the frame count is exact LRU. Pinned frames
 * (pages with writes the remote copy does not hold yet) are never
 * replaced.
 *
 * The cache is local memory only: its owner reads pages in on a miss and
 * decides what a page holds (loco_oplog keeps the data area of a log in
 * one). Not thread-safe: one thread at a time. */
#ifndef LOCO_CHANNELS_FCACHE_H
#define LOCO_CHANNELS_FCACHE_H

#include <stdbool.h>
#include <stdint.h>

struct loco_fcache_frame {
	uint64_t page;      /* page number; valid only if used */
	uint64_t last;      /* the clock at its last use (LRU) */
	uint32_t next;      /* hash chain (frame index + 1; 0 ends) */
	bool pinned;
	bool used;
};

struct loco_fcache_stats {
	uint64_t hits, misses, evictions;
};

struct loco_fcache {
	uint32_t page_size, frames, sample;
	uint32_t nbuckets;                   /* power of two */
	uint32_t *bucket;                    /* frame index + 1; 0 empty */
	struct loco_fcache_frame *frame;
	uint8_t *mem;                        /* frames * page_size bytes */
	uint32_t *free;                      /* unused frames (a stack) */
	uint32_t nused;
	uint64_t clock;
	uint64_t rng;
	struct loco_fcache_stats stats;
};

/* FRAMES frames of PAGE_SIZE bytes (a power of two, 8..1 MiB), SAMPLE
 * (>= 1) candidates per replacement, SEED for the random draws. Returns
 * 0, -EINVAL or -ENOMEM. */
int loco_fcache_init(struct loco_fcache *c, uint32_t page_size,
		     uint32_t frames, uint32_t sample, uint64_t seed);
void loco_fcache_fini(struct loco_fcache *c);

/* The frame of PAGE, or NULL if it is not cached. A hit counts as a use
 * (and in stats.hits); a miss counts in stats.misses. */
uint8_t *loco_fcache_get(struct loco_fcache *c, uint64_t page);

/* A frame for PAGE, which must not be cached: a free frame, else the
 * victim of a replacement (counted in stats.evictions). Its bytes are
 * stale: the caller fills them. NULL (-ENOSPC) when every frame is
 * pinned. */
uint8_t *loco_fcache_add(struct loco_fcache *c, uint64_t page);

/* Pin PAGE (cached): true if it was not pinned before. */
bool loco_fcache_pin(struct loco_fcache *c, uint64_t page);
/* Whether PAGE is cached and pinned (not a use, not counted). */
bool loco_fcache_pinned_page(const struct loco_fcache *c, uint64_t page);
/* Unpin PAGE (if cached). */
void loco_fcache_unpin(struct loco_fcache *c, uint64_t page);

/* Drop PAGE if cached (pinned or not). */
void loco_fcache_drop(struct loco_fcache *c, uint64_t page);

/* Drop every page, pinned ones too (the remote copy changed under the
 * cache: its node died). */
void loco_fcache_clear(struct loco_fcache *c);

/* Frames in use, of which pinned. */
uint32_t loco_fcache_used(const struct loco_fcache *c);
uint32_t loco_fcache_pinned(const struct loco_fcache *c);

#endif
