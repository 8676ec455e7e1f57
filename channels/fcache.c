/* SPDX-License-Identifier: MIT */
/* fcache: see fcache.h. Frames are found through a chained hash map
 * (bucket -> frame -> frame ...); unused frames wait on a stack until the
 * cache is full, after which every add replaces. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <loco/channels/fcache.h>

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= UINT64_C(0xff51afd7ed558ccd);
	x ^= x >> 33;
	x *= UINT64_C(0xc4ceb9fe1a85ec53);
	return x ^ (x >> 33);
}

static uint64_t rng_next(struct loco_fcache *c)
{
	c->rng += UINT64_C(0x9e3779b97f4a7c15);
	return mix(c->rng);
}

static uint32_t *bucket_of(struct loco_fcache *c, uint64_t page)
{
	return &c->bucket[mix(page) & (c->nbuckets - 1)];
}

int loco_fcache_init(struct loco_fcache *c, uint32_t page_size,
		     uint32_t frames, uint32_t sample, uint64_t seed)
{
	memset(c, 0, sizeof(*c));
	if (page_size < 8 || page_size > (1u << 20) ||
	    (page_size & (page_size - 1)) || !frames || frames > (1u << 24) ||
	    !sample)
		return -EINVAL;
	uint32_t nb = 1;
	while (nb < 2 * frames)
		nb <<= 1;
	c->page_size = page_size;
	c->frames = frames;
	c->sample = sample;
	c->nbuckets = nb;
	c->rng = seed;
	c->bucket = calloc(nb, sizeof(*c->bucket));
	c->frame = calloc(frames, sizeof(*c->frame));
	c->mem = malloc((size_t)frames * page_size);
	c->free = malloc(frames * sizeof(*c->free));
	if (!c->bucket || !c->frame || !c->mem || !c->free) {
		loco_fcache_fini(c);
		return -ENOMEM;
	}
	loco_fcache_clear(c);
	return 0;
}

void loco_fcache_fini(struct loco_fcache *c)
{
	free(c->bucket);
	free(c->frame);
	free(c->mem);
	free(c->free);
	memset(c, 0, sizeof(*c));
}

static struct loco_fcache_frame *find(const struct loco_fcache *c,
				      uint64_t page)
{
	for (uint32_t i = c->bucket[mix(page) & (c->nbuckets - 1)]; i;
	     i = c->frame[i - 1].next)
		if (c->frame[i - 1].page == page)
			return &c->frame[i - 1];
	return NULL;
}

static uint8_t *frame_mem(struct loco_fcache *c, struct loco_fcache_frame *f)
{
	return c->mem + (size_t)(f - c->frame) * c->page_size;
}

uint8_t *loco_fcache_get(struct loco_fcache *c, uint64_t page)
{
	struct loco_fcache_frame *f = find(c, page);
	if (!f) {
		c->stats.misses++;
		return NULL;
	}
	c->stats.hits++;
	f->last = ++c->clock;
	return frame_mem(c, f);
}

/* Take frame F out of its page's chain and mark it free. */
static void unlink_frame(struct loco_fcache *c, struct loco_fcache_frame *f)
{
	uint32_t self = (uint32_t)(f - c->frame) + 1;
	uint32_t *p = bucket_of(c, f->page);
	while (*p != self)
		p = &c->frame[*p - 1].next;
	*p = f->next;
	f->next = 0;
	f->used = false;
	f->pinned = false;
	c->nused--;
}

/* Put unused frame F back on the stack. */
static void push_free(struct loco_fcache *c, struct loco_fcache_frame *f)
{
	c->free[c->frames - c->nused - 1] = (uint32_t)(f - c->frame);
}

/* The victim: the least recently used of SAMPLE random unpinned frames;
 * if the draws met only pinned ones, the first unpinned frame. */
static struct loco_fcache_frame *victim(struct loco_fcache *c)
{
	struct loco_fcache_frame *best = NULL;
	for (uint32_t k = 0; k < c->sample; k++) {
		struct loco_fcache_frame *f = &c->frame[rng_next(c) % c->frames];
		if (!f->pinned && (!best || f->last < best->last))
			best = f;
	}
	for (uint32_t i = 0; !best && i < c->frames; i++)
		if (!c->frame[i].pinned)
			best = &c->frame[i];
	return best;
}

uint8_t *loco_fcache_add(struct loco_fcache *c, uint64_t page)
{
	struct loco_fcache_frame *f = NULL;
	if (c->nused < c->frames) {
		f = &c->frame[c->free[c->frames - c->nused - 1]];
	} else {
		f = victim(c);
		if (!f)
			return NULL;
		unlink_frame(c, f);
		c->stats.evictions++;
	}
	uint32_t *b = bucket_of(c, page);
	f->page = page;
	f->last = ++c->clock;
	f->used = true;
	f->pinned = false;
	f->next = *b;
	*b = (uint32_t)(f - c->frame) + 1;
	c->nused++;
	return frame_mem(c, f);
}

bool loco_fcache_pin(struct loco_fcache *c, uint64_t page)
{
	struct loco_fcache_frame *f = find(c, page);
	if (!f || f->pinned)
		return false;
	f->pinned = true;
	return true;
}

bool loco_fcache_pinned_page(const struct loco_fcache *c, uint64_t page)
{
	const struct loco_fcache_frame *f = find(c, page);
	return f && f->pinned;
}

void loco_fcache_unpin(struct loco_fcache *c, uint64_t page)
{
	struct loco_fcache_frame *f = find(c, page);
	if (f)
		f->pinned = false;
}

void loco_fcache_drop(struct loco_fcache *c, uint64_t page)
{
	struct loco_fcache_frame *f = find(c, page);
	if (f) {
		unlink_frame(c, f);
		push_free(c, f);
	}
}

void loco_fcache_clear(struct loco_fcache *c)
{
	memset(c->bucket, 0, c->nbuckets * sizeof(*c->bucket));
	memset(c->frame, 0, c->frames * sizeof(*c->frame));
	c->nused = 0;
	/* Lowest index on top: frames are taken in order. */
	for (uint32_t i = 0; i < c->frames; i++)
		c->free[i] = c->frames - 1 - i;
}

uint32_t loco_fcache_used(const struct loco_fcache *c)
{
	return c->nused;
}

uint32_t loco_fcache_pinned(const struct loco_fcache *c)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < c->frames; i++)
		n += c->frame[i].pinned;
	return n;
}
