/* SPDX-License-Identifier: MIT */
/* Values: hashing, equality, ordering and printing. */
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "lincheck.h"

const struct lc_val lc_val_null = { .kind = LC_NULL };

/* The splitmix64 finaliser: a cheap bijective 64-bit mixer. */
uint64_t lc_hash_mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

/* FNV-1a over 8-byte words, then mixed: good enough for short strings. */
uint64_t lc_hash_bytes(const void *p, size_t len)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull ^ len;
	size_t i;

	for (i = 0; i + 8 <= len; i += 8) {
		uint64_t w;

		memcpy(&w, b + i, 8);
		h = (h ^ w) * 0x100000001b3ull;
	}
	for (; i < len; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return lc_hash_mix(h);
}

static struct lc_str *lc_str_alloc(struct lc_arena *a, size_t len)
{
	struct lc_str *s;

	if (len > UINT32_MAX)
		return NULL;
	s = lc_arena_alloc(a, sizeof(*s) + len + 1);
	if (!s)
		return NULL;
	s->len = (uint32_t)len;
	s->data[len] = '\0';
	return s;
}

const struct lc_str *lc_str_new(struct lc_arena *a, const char *p, size_t len)
{
	struct lc_str *s = lc_str_alloc(a, len);

	if (!s)
		return NULL;
	memcpy(s->data, p, len);
	s->hash = lc_hash_bytes(s->data, len);
	return s;
}

const struct lc_str *lc_str_cat(struct lc_arena *a, const struct lc_str *x,
				const struct lc_str *y)
{
	struct lc_str *s = lc_str_alloc(a, (size_t)x->len + y->len);

	if (!s)
		return NULL;
	memcpy(s->data, x->data, x->len);
	memcpy(s->data + x->len, y->data, y->len);
	s->hash = lc_hash_bytes(s->data, s->len);
	return s;
}

bool lc_str_equal(const struct lc_str *x, const struct lc_str *y)
{
	return x == y || (x->hash == y->hash && x->len == y->len &&
			  !memcmp(x->data, y->data, x->len));
}

bool lc_val_equal(const struct lc_val *x, const struct lc_val *y)
{
	uint32_t i;

	if (x->kind != y->kind)
		return false;
	switch (x->kind) {
	case LC_BOOL:
		return x->b == y->b;
	case LC_INT:
		return x->i == y->i;
	case LC_STR:
		return lc_str_equal(x->s, y->s);
	case LC_LIST:
		if (x->n != y->n)
			return false;
		for (i = 0; i < x->n; i++)
			if (!lc_val_equal(&x->items[i], &y->items[i]))
				return false;
		return true;
	default:
		return true;
	}
}

uint64_t lc_val_hash(const struct lc_val *v)
{
	uint64_t h = lc_hash_mix(v->kind + 1);
	uint32_t i;

	switch (v->kind) {
	case LC_BOOL:
		return h ^ v->b;
	case LC_INT:
		return h ^ lc_hash_mix((uint64_t)v->i + 0x9e3779b97f4a7c15ull);
	case LC_STR:
		return h ^ v->s->hash;
	case LC_LIST:
		for (i = 0; i < v->n; i++)
			h = lc_hash_mix(h ^ lc_val_hash(&v->items[i]));
		return h;
	default:
		return h;
	}
}

static int lc_cmp_u64(uint64_t x, uint64_t y)
{
	return (x > y) - (x < y);
}

static int lc_str_cmp(const struct lc_str *x, const struct lc_str *y)
{
	uint32_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->data, y->data, n);

	return c ? (c > 0) - (c < 0) : lc_cmp_u64(x->len, y->len);
}

int lc_val_cmp(const struct lc_val *x, const struct lc_val *y)
{
	uint32_t i;
	int c;

	if (x->kind != y->kind)
		return lc_cmp_u64(x->kind, y->kind);
	switch (x->kind) {
	case LC_BOOL:
		return lc_cmp_u64(x->b, y->b);
	case LC_INT:
		return lc_cmp_u64((uint64_t)x->i, (uint64_t)y->i);
	case LC_STR:
		return lc_str_cmp(x->s, y->s);
	case LC_LIST:
		for (i = 0; i < x->n && i < y->n; i++) {
			c = lc_val_cmp(&x->items[i], &y->items[i]);
			if (c)
				return c;
		}
		return lc_cmp_u64(x->n, y->n);
	default:
		return 0;
	}
}

bool lc_val_is_str(const struct lc_val *v, const char *s)
{
	return v->kind == LC_STR && strlen(s) == v->s->len &&
	       !memcmp(v->s->data, s, v->s->len);
}

static void lc_str_print(const struct lc_str *s, FILE *f)
{
	uint32_t i;

	fputc('"', f);
	for (i = 0; i < s->len; i++) {
		unsigned char c = (unsigned char)s->data[i];

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

void lc_val_print(const struct lc_val *v, FILE *f)
{
	uint32_t i;

	switch (v->kind) {
	case LC_NULL:
		fputs("null", f);
		break;
	case LC_BOOL:
		fputs(v->b ? "true" : "false", f);
		break;
	case LC_INT:
		if (v->n)
			fprintf(f, "%" PRIu64, (uint64_t)v->i);
		else
			fprintf(f, "%" PRId64, v->i);
		break;
	case LC_STR:
		lc_str_print(v->s, f);
		break;
	case LC_LIST:
		fputc('[', f);
		for (i = 0; i < v->n; i++) {
			if (i)
				fputc(',', f);
			lc_val_print(&v->items[i], f);
		}
		fputc(']', f);
		break;
	default:
		fputs("\"empty\"", f);
		break;
	}
}

int64_t lc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
