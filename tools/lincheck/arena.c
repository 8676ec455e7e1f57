/* SPDX-License-Identifier: MIT */
/* Chunked bump allocator with mark/release, for histories and searches. */
#include <stdlib.h>

#include "lincheck.h"

#define LC_CHUNK_MIN (1u << 20)
#define LC_ALIGN 16

struct lc_chunk {
	struct lc_chunk *prev;
	size_t size;	/* bytes in data[] */
	size_t used;
	unsigned char data[];
};

void lc_arena_init(struct lc_arena *a)
{
	a->cur = NULL;
	a->spare = NULL;
	a->bytes = 0;
}

static void lc_chunk_free_list(struct lc_chunk *c)
{
	while (c) {
		struct lc_chunk *prev = c->prev;

		free(c);
		c = prev;
	}
}

void lc_arena_fini(struct lc_arena *a)
{
	lc_chunk_free_list(a->cur);
	free(a->spare);
	a->cur = NULL;
	a->spare = NULL;
	a->bytes = 0;
}

static void lc_chunk_drop(struct lc_arena *a, struct lc_chunk *c)
{
	if (c)
		a->bytes -= sizeof(*c) + c->size;
	free(c);
}

static size_t lc_chunk_pad(const struct lc_chunk *c)
{
	uintptr_t p = (uintptr_t)(c->data + c->used);

	return (LC_ALIGN - (p & (LC_ALIGN - 1))) & (LC_ALIGN - 1);
}

static struct lc_chunk *lc_chunk_new(struct lc_arena *a, size_t size)
{
	struct lc_chunk *c = a->spare;

	if (c && c->size >= size) {
		a->spare = NULL;
	} else {
		if (size < LC_CHUNK_MIN)
			size = LC_CHUNK_MIN;
		c = malloc(sizeof(*c) + size);
		if (!c)
			return NULL;
		c->size = size;
		a->bytes += sizeof(*c) + size;
	}
	c->used = 0;
	c->prev = a->cur;
	a->cur = c;
	return c;
}

void *lc_arena_alloc(struct lc_arena *a, size_t size)
{
	struct lc_chunk *c = a->cur;
	void *p;

	if (!c || c->used + lc_chunk_pad(c) + size > c->size) {
		c = lc_chunk_new(a, size + LC_ALIGN);
		if (!c)
			return NULL;
	}
	c->used += lc_chunk_pad(c);
	p = c->data + c->used;
	c->used += size;
	return p;
}

struct lc_arena_mark lc_arena_mark_get(const struct lc_arena *a)
{
	struct lc_arena_mark m = { a->cur, a->cur ? a->cur->used : 0 };

	return m;
}

/* Chunks newer than the mark go away; the largest one is kept as spare. */
void lc_arena_release(struct lc_arena *a, struct lc_arena_mark m)
{
	while (a->cur != m.chunk) {
		struct lc_chunk *c = a->cur;

		a->cur = c->prev;
		if (!a->spare || a->spare->size < c->size) {
			lc_chunk_drop(a, a->spare);
			a->spare = c;
		} else {
			lc_chunk_drop(a, c);
		}
	}
	if (a->cur)
		a->cur->used = m.used;
}
