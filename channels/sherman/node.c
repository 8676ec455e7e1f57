/* SPDX-License-Identifier: MIT */
/* Node images: building, sealing and checking them, leaf slots and
 * internal pairs, the halves of a split (layout in internal.h). The checks are what makes a node
 * read trustworthy under the memory model, where a READ racing a WRITE
 * may see any mix of 8-byte pieces, in any order (docs/ordering.md):
 *  - a leaf's header (fences, sibling, level, version) carries a 64-bit
 *    hash of itself;
 *  - every leaf entry carries a 64-bit hash of its key and value seeded
 *    with the node version, so an entry mixed from two writes fails, and
 *    so does an entry of another version of the node than the header's
 *    (a read that spans a split);
 *  - an internal node, always written whole, carries one hash of all of
 *    it.
 * A mix passes with probability 2^-63: no reader ever sees one. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "channels/sherman/internal.h"

#define SEED_LEAF UINT64_C(0x5368524d4c454146)   /* "ShRMLEAF" */
#define SEED_INT UINT64_C(0x5368524d494e5452)    /* "ShRMINTR" */
#define SEED_ENT UINT64_C(0x9e3779b97f4a7c15)

static uint64_t load64(const void *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static void store64(void *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

uint64_t sh_leaf_hdr_check(const void *img)
{
	return XXH3_64bits_withSeed((const uint8_t *)img + 16, SH_HDR - 16,
				    SEED_LEAF);
}

uint64_t sh_int_check(const void *img, uint32_t node_size)
{
	return XXH3_64bits_withSeed((const uint8_t *)img + 16, node_size - 16,
				    SEED_INT);
}

uint64_t sh_entry_check(const uint8_t *ent, uint32_t value_len, uint64_t nv,
			bool used)
{
	uint64_t h = XXH3_64bits_withSeed(ent, 8 + value_len, nv * SEED_ENT);
	return (h & ~UINT64_C(1)) | used;
}

void sh_seal(const struct loco_sherman *t, void *img)
{
	struct sh_hdr *h = img;
	h->check = sh_level(h) ? sh_int_check(img, t->o.node_size) :
				 sh_leaf_hdr_check(img);
}

void sh_leaf_set(const struct loco_sherman *t, void *img, unsigned i,
		 uint64_t key, const void *val)
{
	const struct sh_hdr *h = img;
	uint8_t *e = sh_slot(t, img, i);
	store64(e, val ? key : 0);
	if (val)
		memcpy(e + 8, val, t->o.value_len);
	else
		memset(e + 8, 0, t->o.value_len);
	store64(e + 8 + t->o.value_len,
		sh_entry_check(e, t->o.value_len, h->nv, val != NULL));
}

static void hdr_init(struct sh_hdr *h, loco_raddr_t self, unsigned level,
		     uint64_t low, uint64_t high, loco_raddr_t sibling,
		     uint64_t nv)
{
	*h = (struct sh_hdr){ .low = low, .high = high, .sibling = sibling,
			      .self = self, .info = sh_info(level, 0),
			      .nv = nv };
}

void sh_leaf_init(const struct loco_sherman *t, void *img, loco_raddr_t self,
		  uint64_t low, uint64_t high, loco_raddr_t sibling, uint64_t nv)
{
	memset(img, 0, t->o.node_size);
	hdr_init(img, self, 0, low, high, sibling, nv);
	for (unsigned i = 0; i < t->leaf_slots; i++)
		sh_leaf_set(t, img, i, 0, NULL);
	sh_seal(t, img);
}

void sh_int_init(const struct loco_sherman *t, void *img, loco_raddr_t self,
		 unsigned level, uint64_t low, uint64_t high,
		 loco_raddr_t sibling, uint64_t nv, loco_raddr_t leftmost)
{
	memset(img, 0, t->o.node_size);
	hdr_init(img, self, level, low, high, sibling, nv);
	store64((uint8_t *)img + SH_HDR, leftmost);
	sh_seal(t, img);
}

bool sh_slot_used(const struct loco_sherman *t, const void *img, unsigned i)
{
	const uint8_t *e = (const uint8_t *)img + SH_HDR + (size_t)i * t->entry_len;
	return load64(e + 8 + t->o.value_len) & 1;
}

static bool leaf_ok(const struct loco_sherman *t, const void *img)
{
	const struct sh_hdr *h = img;
	if (h->check != sh_leaf_hdr_check(img))
		return false;
	for (unsigned i = 0; i < t->leaf_slots; i++) {
		const uint8_t *e = (const uint8_t *)img + SH_HDR +
				   (size_t)i * t->entry_len;
		uint64_t c = load64(e + 8 + t->o.value_len);
		if (c != sh_entry_check(e, t->o.value_len, h->nv, c & 1))
			return false;
	}
	return true;
}

bool sh_node_ok(const struct loco_sherman *t, const void *img,
		loco_raddr_t addr)
{
	const struct sh_hdr *h = img;
	bool ok = sh_level(h) ? h->check == sh_int_check(img, t->o.node_size) &&
				sh_count(h) <= t->int_cap :
				leaf_ok(t, img);
	return ok && (!addr || h->self == addr);
}

int sh_leaf_find(const struct loco_sherman *t, const void *img, uint64_t key,
		 int *free_slot)
{
	int found = -1, fs = -1;
	for (unsigned i = 0; i < t->leaf_slots; i++) {
		const uint8_t *e = (const uint8_t *)img + SH_HDR +
				   (size_t)i * t->entry_len;
		if (!sh_slot_used(t, img, i)) {
			if (fs < 0)
				fs = (int)i;
		} else if (load64(e) == key) {
			found = (int)i;
		}
	}
	if (free_slot)
		*free_slot = fs;
	return found;
}

uint64_t sh_int_key(const void *img, unsigned i)
{
	return load64((const uint8_t *)img + SH_HDR + 8 + (size_t)(i - 1) * 16);
}

loco_raddr_t sh_int_child(const void *img, unsigned i)
{
	const uint8_t *b = (const uint8_t *)img + SH_HDR;
	return i ? load64(b + 8 + (size_t)(i - 1) * 16 + 8) : load64(b);
}

unsigned sh_int_rank(const void *img, uint64_t key)
{
	unsigned lo = 0, hi = sh_count(img);
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		if (sh_int_key(img, mid + 1) <= key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

loco_raddr_t sh_int_pick(const void *img, uint64_t key)
{
	return sh_int_child(img, sh_int_rank(img, key));
}

bool sh_int_has(const void *img, uint64_t key, loco_raddr_t *child)
{
	unsigned r = sh_int_rank(img, key);
	if (!r || sh_int_key(img, r) != key)
		return false;
	*child = sh_int_child(img, r);
	return true;
}

bool sh_int_linked(const void *img, uint64_t key)
{
	loco_raddr_t child;
	return key == ((const struct sh_hdr *)img)->low ||
	       sh_int_has(img, key, &child);
}

void sh_int_insert(void *img, uint64_t key, loco_raddr_t child)
{
	struct sh_hdr *h = img;
	unsigned n = sh_count(h), r = sh_int_rank(img, key);
	uint8_t *pairs = (uint8_t *)img + SH_HDR + 8;
	memmove(pairs + (size_t)(r + 1) * 16, pairs + (size_t)r * 16,
		(size_t)(n - r) * 16);
	store64(pairs + (size_t)r * 16, key);
	store64(pairs + (size_t)r * 16 + 8, child);
	h->info = sh_info(sh_level(h), n + 1);
}

static int kv_cmp(const void *x, const void *y)
{
	uint64_t a = ((const struct sh_kv *)x)->key;
	uint64_t b = ((const struct sh_kv *)y)->key;
	return a < b ? -1 : a > b;
}

unsigned sh_leaf_entries(const struct loco_sherman *t, void *img, uint64_t key,
			 const void *val, struct sh_kv *e)
{
	unsigned n = 0;
	for (unsigned i = 0; i < t->leaf_slots; i++)
		if (sh_slot_used(t, img, i)) {
			const uint8_t *s = sh_slot(t, img, i);
			memcpy(&e[n].key, s, 8);
			e[n++].val = s + 8;
		}
	e[n++] = (struct sh_kv){ key, val };
	qsort(e, n, sizeof(*e), kv_cmp);
	return n;
}

unsigned sh_int_entries(const struct loco_sherman *t, const void *img,
			uint64_t key, loco_raddr_t child, uint8_t *all,
			struct sh_kv *e)
{
	memcpy(all, img, t->o.node_size);
	sh_int_insert(all, key, child);
	unsigned n = sh_count((const struct sh_hdr *)all);
	for (unsigned i = 0; i < n; i++)
		e[i] = (struct sh_kv){ sh_int_key(all, i + 1),
				    all + SH_HDR + 8 + (size_t)i * 16 + 8 };
	return n;
}

void sh_leaf_fill(const struct loco_sherman *t, void *img,
		  const struct sh_kv *e, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		sh_leaf_set(t, img, i, e[i].key, e[i].val);
	sh_seal(t, img);
}

void sh_int_fill(const struct loco_sherman *t, void *img,
		 const struct sh_kv *e, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		uint64_t c;
		memcpy(&c, e[i].val, 8);
		sh_int_insert(img, e[i].key, c);
	}
	sh_seal(t, img);
}

uint64_t sh_split_halves(const struct loco_sherman *t, const void *img,
			 const struct sh_kv *e, unsigned n, loco_raddr_t left,
			 loco_raddr_t lo_self, uint64_t lo_nv, void *lo,
			 loco_raddr_t hi_self, void *hi)
{
	const struct sh_hdr *h = img;
	unsigned lv = sh_level(h), mid = n / 2;
	uint64_t sep = e[mid].key;
	if (!lv) {
		sh_leaf_init(t, hi, hi_self, sep, h->high, h->sibling, 1);
		sh_leaf_fill(t, hi, e + mid, n - mid);
		sh_leaf_init(t, lo, lo_self, h->low, sep, hi_self, lo_nv);
		sh_leaf_fill(t, lo, e, mid);
		return sep;
	}
	/* Internal: separator MID moves up, its child leads HI. */
	uint64_t mc;
	memcpy(&mc, e[mid].val, 8);
	sh_int_init(t, hi, hi_self, lv, sep, h->high, h->sibling, 1, mc);
	sh_int_fill(t, hi, e + mid + 1, n - mid - 1);
	sh_int_init(t, lo, lo_self, lv, h->low, sep, hi_self, lo_nv, left);
	sh_int_fill(t, lo, e, mid);
	return sep;
}

void sh_root_image(const struct loco_sherman *t, const void *root,
		   uint64_t sep, loco_raddr_t lo, loco_raddr_t hi, void *out)
{
	const struct sh_hdr *r = root;
	sh_int_init(t, out, r->self, sh_level(r) + 1, r->low, SH_INF, 0,
		    r->nv + 1, lo);
	sh_int_insert(out, sep, hi);
	sh_seal(t, out);
}
