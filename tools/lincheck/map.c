/* SPDX-License-Identifier: MIT */
/*
 * Key-value models: map (get/put/insert/update/delete), ordered-map (map
 * plus range scans, so not partitioned) and append-map (get/put/append on
 * strings, the Porcupine kv logs). The state is an immutable array of pairs
 * sorted by key, copied on change; its hash is a sum over the pairs, so it
 * is updated in O(1).
 */
#include <errno.h>
#include <string.h>

#include "lincheck.h"

enum {
	LC_MAP_GET,
	LC_MAP_PUT,
	LC_MAP_INSERT,
	LC_MAP_UPDATE,
	LC_MAP_DELETE,
	LC_MAP_SCAN,
};

enum { LC_AM_GET, LC_AM_PUT, LC_AM_APPEND };

static const struct lc_opdesc lc_map_ops[] = {
	[LC_MAP_GET] = { "get", 0, LC_RES_VAL },
	[LC_MAP_PUT] = { "put", 1, LC_RES_NONE },
	[LC_MAP_INSERT] = { "insert", 1, LC_RES_BOOL },
	[LC_MAP_UPDATE] = { "update", 1, LC_RES_BOOL },
	[LC_MAP_DELETE] = { "delete", 0, LC_RES_BOOL },
	[LC_MAP_SCAN] = { "scan", 2, LC_RES_VAL },
};

static const struct lc_opdesc lc_am_ops[] = {
	[LC_AM_GET] = { "get", 0, LC_RES_VAL },
	[LC_AM_PUT] = { "put", 1, LC_RES_NONE },
	[LC_AM_APPEND] = { "append", 1, LC_RES_NONE },
};

struct lc_kv {
	struct lc_val k;
	struct lc_val v;
};

struct lc_kvs {
	uint64_t hash;
	uint32_t n;
	struct lc_kv kv[];
};

static const struct lc_kvs lc_kvs_empty;

static uint64_t lc_kv_hash(const struct lc_val *k, const struct lc_val *v)
{
	return lc_hash_mix(lc_val_hash(k) ^ lc_hash_mix(lc_val_hash(v) + 1));
}

/* Index of key, or where it would go; true if present. */
static bool lc_kvs_find(const struct lc_kvs *m, const struct lc_val *key,
			uint32_t *idx)
{
	uint32_t lo = 0, hi = m->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (lc_val_cmp(&m->kv[mid].k, key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*idx = lo;
	return lo < m->n && !lc_val_cmp(&m->kv[lo].k, key);
}

/* A copy of m with key set to v (v NULL: removed); returns 1 or -ENOMEM. */
static int lc_kvs_with(struct lc_arena *a, const struct lc_kvs *m,
		       const struct lc_val *key, const struct lc_val *v,
		       const void **next)
{
	bool found;
	uint32_t i, n;
	struct lc_kvs *c;

	found = lc_kvs_find(m, key, &i);
	if (!found && !v) {
		*next = m;
		return 1;
	}
	n = m->n - found + (v != NULL);
	if (!n) {
		*next = &lc_kvs_empty;
		return 1;
	}
	c = lc_arena_alloc(a, sizeof(*c) + n * sizeof(c->kv[0]));
	if (!c)
		return -ENOMEM;
	c->n = n;
	c->hash = m->hash;
	memcpy(c->kv, m->kv, i * sizeof(c->kv[0]));
	if (found)
		c->hash -= lc_kv_hash(&m->kv[i].k, &m->kv[i].v);
	if (v) {
		c->kv[i].k = *key;
		c->kv[i].v = *v;
		c->hash += lc_kv_hash(key, v);
	}
	memcpy(c->kv + i + (v != NULL), m->kv + i + found,
	       (m->n - i - found) * sizeof(c->kv[0]));
	*next = c;
	return 1;
}

static int lc_kvs_init(struct lc_arena *a, const void **st)
{
	(void)a;
	*st = &lc_kvs_empty;
	return 0;
}

static uint64_t lc_kvs_hash(const void *st)
{
	return ((const struct lc_kvs *)st)->hash;
}

static bool lc_kvs_equal(const void *x, const void *y)
{
	const struct lc_kvs *p = x, *q = y;
	uint32_t i;

	if (p->hash != q->hash || p->n != q->n)
		return false;
	for (i = 0; i < p->n; i++)
		if (!lc_val_equal(&p->kv[i].k, &q->kv[i].k) ||
		    !lc_val_equal(&p->kv[i].v, &q->kv[i].v))
			return false;
	return true;
}

static void lc_kvs_describe(const void *st, FILE *f)
{
	const struct lc_kvs *m = st;
	uint32_t i;

	fputc('{', f);
	for (i = 0; i < m->n; i++) {
		fputs(i ? ", " : "", f);
		lc_val_print(&m->kv[i].k, f);
		fputs(": ", f);
		lc_val_print(&m->kv[i].v, f);
	}
	fputc('}', f);
}

static bool lc_val_scalar(const struct lc_val *v)
{
	return v->kind == LC_INT || v->kind == LC_STR;
}

static bool lc_scan_res_ok(const struct lc_val *res)
{
	uint32_t i;

	if (res->kind != LC_LIST)
		return false;
	for (i = 0; i < res->n; i++) {
		const struct lc_val *p = &res->items[i];

		if (p->kind != LC_LIST || p->n != 2 || !lc_val_scalar(&p->items[0]) ||
		    !lc_val_scalar(&p->items[1]))
			return false;
	}
	return true;
}

static const char *lc_map_validate_res(const struct lc_op *op)
{
	if (op->code == LC_MAP_GET && op->res.kind != LC_NULL &&
	    !lc_val_scalar(&op->res))
		return "res must be [integer], [string] or [null]";
	if (op->code == LC_MAP_SCAN && !lc_scan_res_ok(&op->res))
		return "res must be [[[key, value], ...]]";
	return NULL;
}

static const char *lc_map_validate(struct lc_op *op, bool res)
{
	if (res)
		return lc_map_validate_res(op);
	if (op->code == LC_MAP_SCAN)
		return op->key.kind != LC_NULL ? "scan takes no key" :
		       !lc_val_scalar(&op->args[0]) || !lc_val_scalar(&op->args[1]) ?
		       "scan bounds must be integers or strings" : NULL;
	if (op->key.kind == LC_NULL)
		return "needs a key";
	if (op->nargs && !lc_val_scalar(&op->args[0]))
		return "value must be an integer or a string";
	return NULL;
}

/* insert, update, delete: legal iff the result says whether key was there */
static int lc_map_cond(struct lc_arena *a, const struct lc_kvs *m,
		       const struct lc_op *op, const void **next)
{
	uint32_t i;
	bool found = lc_kvs_find(m, &op->key, &i);
	bool effect = op->code == LC_MAP_INSERT ? !found : found;

	*next = m;
	if (!op->unknown && op->res.b != effect)
		return 0;
	if (!effect)
		return 1;
	return lc_kvs_with(a, m, &op->key,
			   op->code == LC_MAP_DELETE ? NULL : &op->args[0], next);
}

/* The pairs with lo <= key <= hi, in order, must be exactly res. */
static bool lc_map_scan_ok(const struct lc_kvs *m, const struct lc_op *op)
{
	uint32_t i, j = 0;

	lc_kvs_find(m, &op->args[0], &i);
	for (; i < m->n && lc_val_cmp(&m->kv[i].k, &op->args[1]) <= 0; i++, j++) {
		const struct lc_val *p = &op->res.items[j];

		if (j == op->res.n || !lc_val_equal(&p->items[0], &m->kv[i].k) ||
		    !lc_val_equal(&p->items[1], &m->kv[i].v))
			return false;
	}
	return j == op->res.n;
}

static int lc_map_step(struct lc_arena *a, const void *st,
		       const struct lc_op *op, const void **next)
{
	const struct lc_kvs *m = st;
	uint32_t i;

	*next = st;
	switch (op->code) {
	case LC_MAP_GET:
		if (op->unknown)
			return 1;
		return lc_kvs_find(m, &op->key, &i) ?
		       lc_val_equal(&op->res, &m->kv[i].v) : op->res.kind == LC_NULL;
	case LC_MAP_PUT:
		return lc_kvs_with(a, m, &op->key, &op->args[0], next);
	case LC_MAP_SCAN:
		return op->unknown || lc_map_scan_ok(m, op);
	default:
		return lc_map_cond(a, m, op, next);
	}
}

const struct lc_model lc_model_map = {
	.name = "map",
	.summary = "get, put, insert, update, delete; partitioned by key",
	.ops = lc_map_ops,
	.nops = 5,
	.partition = true,
	.validate = lc_map_validate,
	.init = lc_kvs_init,
	.step = lc_map_step,
	.hash = lc_kvs_hash,
	.equal = lc_kvs_equal,
	.describe = lc_kvs_describe,
};

const struct lc_model lc_model_ordered_map = {
	.name = "ordered-map",
	.summary = "map plus scan [lo, hi]; checked whole (not partitioned)",
	.ops = lc_map_ops,
	.nops = 6,
	.partition = false,
	.validate = lc_map_validate,
	.init = lc_kvs_init,
	.step = lc_map_step,
	.hash = lc_kvs_hash,
	.equal = lc_kvs_equal,
	.describe = lc_kvs_describe,
};

/* append-map: absent keys read as ""; "" is never stored. */
static const char *lc_am_validate(struct lc_op *op, bool res)
{
	if (res)
		return op->res.kind == LC_STR || op->res.kind == LC_NULL ? NULL :
		       "res must be [string] or [null]";
	if (op->key.kind == LC_NULL)
		return "needs a key";
	if (op->nargs && op->args[0].kind != LC_STR)
		return "value must be a string";
	return NULL;
}

static bool lc_am_get_ok(const struct lc_kvs *m, const struct lc_op *op)
{
	uint32_t i;
	bool found = lc_kvs_find(m, &op->key, &i);

	if (op->res.kind == LC_NULL || !op->res.s->len)
		return !found;
	return found && lc_str_equal(op->res.s, m->kv[i].v.s);
}

static int lc_am_append(struct lc_arena *a, const struct lc_kvs *m,
			const struct lc_op *op, const void **next)
{
	struct lc_val v = op->args[0];
	uint32_t i;

	if (!v.s->len)
		return 1;
	if (lc_kvs_find(m, &op->key, &i)) {
		v.s = lc_str_cat(a, m->kv[i].v.s, v.s);
		if (!v.s)
			return -ENOMEM;
	}
	return lc_kvs_with(a, m, &op->key, &v, next);
}

static int lc_am_step(struct lc_arena *a, const void *st,
		      const struct lc_op *op, const void **next)
{
	const struct lc_kvs *m = st;

	*next = st;
	switch (op->code) {
	case LC_AM_GET:
		return op->unknown || lc_am_get_ok(m, op);
	case LC_AM_PUT:
		return lc_kvs_with(a, m, &op->key,
				   op->args[0].s->len ? &op->args[0] : NULL, next);
	default:
		return lc_am_append(a, m, op, next);
	}
}

const struct lc_model lc_model_append_map = {
	.name = "append-map",
	.summary = "get, put, append on strings (\"\" when absent); partitioned by key",
	.ops = lc_am_ops,
	.nops = 3,
	.partition = true,
	.validate = lc_am_validate,
	.init = lc_kvs_init,
	.step = lc_am_step,
	.hash = lc_kvs_hash,
	.equal = lc_kvs_equal,
	.describe = lc_kvs_describe,
};
