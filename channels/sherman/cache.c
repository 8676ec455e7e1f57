/* SPDX-License-Identifier: MIT */
/* The index cache of a process (Sherman §4.2): copies of internal nodes,
 * one skip list per level ordered by low fence, bounded by a byte budget.
 * Within a level the cached ranges never overlap (caching a node drops
 * the entries it overlaps), so the entry that may hold a key is the one
 * with the greatest low fence at or below it. A cached copy can be stale:
 * the descent that uses it checks the fences of the node it leads to and
 * drops the entry when they do not hold the key (read.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "channels/sherman/internal.h"

#define CH_MAXH 12

struct sh_centry {
	uint64_t low, high;
	unsigned h;
	struct sh_centry *next[CH_MAXH];
	uint8_t img[];
};

int sh_cache_init(struct sh_cache *c, uint32_t node_size, uint64_t bytes)
{
	memset(c, 0, sizeof(*c));
	c->node_size = node_size;
	c->cap = bytes / (sizeof(struct sh_centry) + node_size);
	if (c->cap < 1)
		c->cap = 1;
	c->rng = UINT64_C(0x243f6a8885a308d3);
	for (unsigned l = 0; l < SH_LEVELS; l++) {
		c->head[l] = calloc(1, sizeof(struct sh_centry));
		if (!c->head[l]) {
			sh_cache_fini(c);
			return -ENOMEM;
		}
		c->head[l]->h = CH_MAXH;
	}
	return pthread_rwlock_init(&c->lock, NULL) ? -ENOMEM : 0;
}

void sh_cache_fini(struct sh_cache *c)
{
	for (unsigned l = 0; l < SH_LEVELS; l++) {
		struct sh_centry *e = c->head[l];
		while (e) {
			struct sh_centry *n = e->next[0];
			free(e);
			e = n;
		}
		c->head[l] = NULL;
	}
	pthread_rwlock_destroy(&c->lock);
}

static uint64_t rng(struct sh_cache *c)
{
	uint64_t x = c->rng;  /* xorshift64, under the write lock */
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	c->rng = x;
	return x;
}

/* Predecessors at every height of the first entry with low >= LOW. */
static struct sh_centry *search(struct sh_centry *head, uint64_t low,
				struct sh_centry **pred)
{
	struct sh_centry *p = head;
	for (int h = CH_MAXH - 1; h >= 0; h--) {
		while (p->next[h] && p->next[h]->low < low)
			p = p->next[h];
		if (pred)
			pred[h] = p;
	}
	return p->next[0];
}

/* The entry with the greatest low <= KEY, or NULL. */
static struct sh_centry *floor_of(struct sh_centry *head, uint64_t key)
{
	struct sh_centry *p = head;
	for (int h = CH_MAXH - 1; h >= 0; h--)
		while (p->next[h] && p->next[h]->low <= key)
			p = p->next[h];
	return p == head ? NULL : p;
}

static void unlink_entry(struct sh_cache *c, struct sh_centry *head,
			 struct sh_centry *e)
{
	struct sh_centry *pred[CH_MAXH];
	search(head, e->low, pred);
	for (unsigned h = 0; h < e->h; h++)
		if (pred[h]->next[h] == e)
			pred[h]->next[h] = e->next[h];
	free(e);
	c->n--;
}

bool sh_cache_find(struct sh_cache *c, uint64_t key, unsigned min_level,
		   void *out)
{
	bool hit = false;
	pthread_rwlock_rdlock(&c->lock);
	for (unsigned l = min_level; l < SH_LEVELS && !hit; l++) {
		const struct sh_centry *e = floor_of(c->head[l], key);
		if (e && key < e->high) {
			memcpy(out, e->img, c->node_size);
			hit = true;
		}
	}
	pthread_rwlock_unlock(&c->lock);
	return hit;
}

/* Drop a victim: an entry of the lowest level that has any, at a random
 * key (the upper levels are few and hold every descent's first steps). */
static void evict(struct sh_cache *c)
{
	for (unsigned l = 1; l < SH_LEVELS; l++) {
		struct sh_centry *head = c->head[l];
		if (!head->next[0])
			continue;
		struct sh_centry *e = floor_of(head, rng(c));
		unlink_entry(c, head, e ? e : head->next[0]);
		return;
	}
}

void sh_cache_put(struct sh_cache *c, const void *img)
{
	const struct sh_hdr *h = img;
	unsigned level = sh_level(h);
	if (!level || level >= SH_LEVELS)
		return;
	struct sh_centry *e = malloc(sizeof(*e) + c->node_size);
	if (!e)
		return;   /* a cache, not a store: nothing is lost */
	memcpy(e->img, img, c->node_size);
	e->low = h->low;
	e->high = h->high;
	pthread_rwlock_wrlock(&c->lock);
	struct sh_centry *head = c->head[level], *o = floor_of(head, e->low);
	if (!o || o->high <= e->low)
		o = search(head, e->low, NULL);
	while (o && o->low < e->high) {
		struct sh_centry *n = o->next[0];
		unlink_entry(c, head, o);
		o = n;
	}
	while (c->n >= c->cap)
		evict(c);
	e->h = 1;
	while (e->h < CH_MAXH && (rng(c) & 3) == 0)
		e->h++;
	struct sh_centry *pred[CH_MAXH];
	search(head, e->low, pred);
	for (unsigned k = 0; k < e->h; k++) {
		e->next[k] = pred[k]->next[k];
		pred[k]->next[k] = e;
	}
	c->n++;
	pthread_rwlock_unlock(&c->lock);
}

void sh_cache_drop(struct sh_cache *c, unsigned level, uint64_t low)
{
	if (!level || level >= SH_LEVELS)
		return;
	pthread_rwlock_wrlock(&c->lock);
	struct sh_centry *e = floor_of(c->head[level], low);
	if (e && e->low == low)
		unlink_entry(c, c->head[level], e);
	pthread_rwlock_unlock(&c->lock);
}
