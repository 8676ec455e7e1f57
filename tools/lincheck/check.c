/* SPDX-License-Identifier: MIT */
/*
 * The search, after Wing & Gong (1993) with Lowe's memoisation (2017):
 * invocations and returns form a doubly linked list in time order. The
 * search repeatedly takes the first invocation whose op is legal in the
 * current state, linearizes it (lifting its call and return out of the
 * list) and starts over from the head; reaching a return means that op was
 * not linearized in time, so the last choice is undone. A (set of
 * linearized ops, state) pair already seen is not explored again.
 * Ops that never returned have their return at +infinity: once only those
 * are left, the rest may be linearized at the end or never took effect.
 * With a P-compositional model every key is searched on its own.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lincheck.h"

#define LC_CACHE_MIN 1024
#define LC_CLOCK_EVERY 0x3fffu

struct lc_entry {
	struct lc_entry *prev;
	struct lc_entry *next;
	struct lc_entry *match;	/* a call's return */
	int64_t t;
	uint32_t op;		/* index into lc_search.ops */
	bool call;
};

struct lc_frame {
	struct lc_entry *call;
	const void *state;
};

struct lc_slot {
	uint64_t hash;
	const uint64_t *bits;
	const void *state;
};

struct lc_search {
	const struct lc_history *h;
	const struct lc_model *m;
	const size_t *ops;	/* the partition: indices into h->ops */
	size_t n;
	int64_t deadline;
	struct lc_arena arena;
	struct lc_entry *ent;	/* 2n entries, then head and tail */
	struct lc_entry *head;
	uint64_t *bits;
	size_t words;
	uint64_t bits_hash;
	struct lc_frame *stack;
	size_t depth;
	struct lc_slot *cache;
	size_t cap;
	size_t used;
	bool have_best;
	size_t best;		/* deepest stack seen at a dead end */
	size_t *best_ops;
	uint32_t best_fail;
	const void *best_state;
};

static int lc_entry_cmp(const void *x, const void *y)
{
	const struct lc_entry *a = x, *b = y;

	if (a->t != b->t)
		return a->t < b->t ? -1 : 1;
	if (a->call != b->call)
		return a->call ? -1 : 1;
	return (a->op > b->op) - (a->op < b->op);
}

/* Time-ordered list; at equal times calls first (the ops overlap). */
static int lc_search_link(struct lc_search *s)
{
	const struct lc_op *ops = s->h->ops;
	struct lc_entry *e = s->ent, *tail, **ret;
	size_t i;

	ret = malloc((s->n + 1) * sizeof(*ret));
	if (!ret)
		return -ENOMEM;
	for (i = 0; i < s->n; i++) {
		e[2 * i] = (struct lc_entry){ .t = ops[s->ops[i]].inv, .op = (uint32_t)i, .call = true };
		e[2 * i + 1] = (struct lc_entry){ .t = ops[s->ops[i]].ret, .op = (uint32_t)i };
	}
	qsort(e, 2 * s->n, sizeof(*e), lc_entry_cmp);
	for (i = 0; i < 2 * s->n; i++)
		if (!e[i].call)
			ret[e[i].op] = &e[i];
	s->head = &e[2 * s->n];
	tail = &e[2 * s->n + 1];
	*s->head = (struct lc_entry){ .t = INT64_MIN };
	*tail = (struct lc_entry){ .t = LC_T_INF };
	for (i = 0; i <= 2 * s->n; i++) {
		struct lc_entry *cur = i ? &e[i - 1] : s->head;
		struct lc_entry *nxt = i < 2 * s->n ? &e[i] : tail;

		cur->next = nxt;
		nxt->prev = cur;
		if (i < 2 * s->n && e[i].call)
			e[i].match = ret[e[i].op];
	}
	free(ret);
	return 0;
}

static int lc_search_init(struct lc_search *s, const struct lc_history *h,
			  const size_t *ops, size_t n, int64_t deadline)
{
	memset(s, 0, sizeof(*s));
	s->h = h;
	s->m = h->model;
	s->ops = ops;
	s->n = n;
	s->deadline = deadline;
	s->words = (n + 63) / 64 + 1;
	s->cap = LC_CACHE_MIN;
	lc_arena_init(&s->arena);
	s->ent = malloc((2 * n + 2) * sizeof(*s->ent));
	s->bits = calloc(s->words, sizeof(*s->bits));
	s->stack = malloc((n + 1) * sizeof(*s->stack));
	s->best_ops = malloc((n + 1) * sizeof(*s->best_ops));
	s->cache = calloc(s->cap, sizeof(*s->cache));
	if (!s->ent || !s->bits || !s->stack || !s->best_ops || !s->cache)
		return -ENOMEM;
	return lc_search_link(s);
}

static void lc_search_fini(struct lc_search *s)
{
	lc_arena_fini(&s->arena);
	free(s->ent);
	free(s->bits);
	free(s->stack);
	free(s->best_ops);
	free(s->cache);
}

static uint64_t lc_op_bit_hash(uint32_t op)
{
	return lc_hash_mix(op + 0x632be59bd9b4e019ull);
}

static void lc_bit_flip(struct lc_search *s, uint32_t op)
{
	s->bits[op / 64] ^= 1ull << (op % 64);
	s->bits_hash ^= lc_op_bit_hash(op);
}

static struct lc_slot *lc_cache_find(struct lc_slot *c, size_t cap,
				     uint64_t hash, const uint64_t *bits,
				     size_t words, const void *st,
				     const struct lc_model *m)
{
	size_t i = hash & (cap - 1);

	for (; c[i].bits; i = (i + 1) & (cap - 1))
		if (c[i].hash == hash && !memcmp(c[i].bits, bits, words * 8) &&
		    m->equal(c[i].state, st))
			return &c[i];
	return &c[i];
}

static int lc_cache_grow(struct lc_search *s)
{
	size_t cap = 2 * s->cap, i, j;
	struct lc_slot *c = calloc(cap, sizeof(*c));

	if (!c)
		return -ENOMEM;
	for (i = 0; i < s->cap; i++) {
		if (!s->cache[i].bits)
			continue;
		for (j = s->cache[i].hash & (cap - 1); c[j].bits; j = (j + 1) & (cap - 1))
			;
		c[j] = s->cache[i];
	}
	free(s->cache);
	s->cache = c;
	s->cap = cap;
	return 0;
}

/* 1 if (bits, st) is new and now remembered, 0 if seen before, -ENOMEM. */
static int lc_cache_add(struct lc_search *s, const void *st)
{
	uint64_t hash = s->bits_hash ^ lc_hash_mix(s->m->hash(st) + 1);
	struct lc_slot *slot;
	uint64_t *bits;

	if (2 * (s->used + 1) > s->cap && lc_cache_grow(s))
		return -ENOMEM;
	slot = lc_cache_find(s->cache, s->cap, hash, s->bits, s->words, st, s->m);
	if (slot->bits)
		return 0;
	bits = lc_arena_alloc(&s->arena, s->words * sizeof(*bits));
	if (!bits)
		return -ENOMEM;
	memcpy(bits, s->bits, s->words * sizeof(*bits));
	*slot = (struct lc_slot){ hash, bits, st };
	s->used++;
	return 1;
}

static void lc_entry_lift(struct lc_entry *e)
{
	struct lc_entry *r = e->match;

	e->prev->next = e->next;
	e->next->prev = e->prev;
	r->prev->next = r->next;
	r->next->prev = r->prev;
}

static void lc_entry_unlift(struct lc_entry *e)
{
	struct lc_entry *r = e->match;

	r->prev->next = r;
	r->next->prev = r;
	e->prev->next = e;
	e->next->prev = e;
}

/* At a dead end: remember the deepest linearization and what blocked it. */
static void lc_search_note(struct lc_search *s, const struct lc_entry *e,
			   const void *st)
{
	size_t i;

	if (s->have_best && s->depth <= s->best)
		return;
	s->have_best = true;
	s->best = s->depth;
	for (i = 0; i < s->depth; i++)
		s->best_ops[i] = s->stack[i].call->op;
	s->best_fail = e->op;
	s->best_state = st;
}

/* Tries to linearize call e in *st: 1 done, 0 not possible now, -ENOMEM. */
static int lc_search_try(struct lc_search *s, struct lc_entry *e,
			 const void **st)
{
	struct lc_arena_mark mark = lc_arena_mark_get(&s->arena);
	const struct lc_op *op = &s->h->ops[s->ops[e->op]];
	const void *next;
	int ret;

	ret = s->m->step(&s->arena, *st, op, &next);
	if (ret > 0) {
		lc_bit_flip(s, e->op);
		ret = lc_cache_add(s, next);
		if (ret <= 0)
			lc_bit_flip(s, e->op);
	}
	if (ret <= 0) {
		lc_arena_release(&s->arena, mark);
		return ret;
	}
	s->stack[s->depth++] = (struct lc_frame){ e, *st };
	*st = next;
	lc_entry_lift(e);
	return 1;
}

static bool lc_search_late(struct lc_search *s, unsigned *tick)
{
	if (++*tick & LC_CLOCK_EVERY)
		return false;
	return s->deadline && lc_now_ns() > s->deadline;
}

static int lc_search_run(struct lc_search *s, enum lc_verdict *v)
{
	struct lc_entry *e = s->head->next;
	const void *st;
	unsigned tick = 0;
	int ret;

	ret = s->m->init(&s->arena, &st);
	while (!ret) {
		if (lc_search_late(s, &tick)) {
			*v = LC_UNKNOWN;
			return 0;
		}
		if (e->call) {
			ret = lc_search_try(s, e, &st);
			e = ret > 0 ? s->head->next : e->next;
			ret = ret < 0 ? ret : 0;
			continue;
		}
		if (e->t == LC_T_INF) {
			*v = LC_LINEARIZABLE;
			return 0;
		}
		lc_search_note(s, e, st);
		if (!s->depth) {
			*v = LC_NOT_LINEARIZABLE;
			return 0;
		}
		s->depth--;
		e = s->stack[s->depth].call;
		st = s->stack[s->depth].state;
		lc_bit_flip(s, e->op);
		lc_entry_unlift(e);
		e = e->next;
	}
	return ret;
}

static char *lc_state_describe(const struct lc_model *m, const void *st)
{
	char *buf = NULL;
	size_t len;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	m->describe(st, f);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* Copies the failing partition's evidence into r. */
static int lc_search_report(const struct lc_search *s, struct lc_result *r)
{
	size_t i;

	r->part = malloc((s->n + 1) * sizeof(*r->part));
	r->prefix = malloc((s->best + 1) * sizeof(*r->prefix));
	r->state = lc_state_describe(s->m, s->best_state);
	if (!r->part || !r->prefix || !r->state)
		return -ENOMEM;
	memcpy(r->part, s->ops, s->n * sizeof(*r->part));
	r->npart = s->n;
	for (i = 0; i < s->best; i++)
		r->prefix[i] = s->ops[s->best_ops[i]];
	r->nprefix = s->best;
	r->fail_op = s->ops[s->best_fail];
	return 0;
}

static int lc_check_part(const struct lc_history *h, const size_t *ops,
			 size_t n, int64_t deadline, struct lc_result *r)
{
	struct lc_search s;
	int ret;

	ret = lc_search_init(&s, h, ops, n, deadline);
	if (!ret)
		ret = lc_search_run(&s, &r->verdict);
	if (!ret && r->verdict == LC_NOT_LINEARIZABLE)
		ret = lc_search_report(&s, r);
	lc_search_fini(&s);
	return ret;
}

static int lc_key_cmp(const void *x, const void *y, void *arg)
{
	const struct lc_history *h = arg;
	size_t a = *(const size_t *)x, b = *(const size_t *)y;
	int c = lc_val_cmp(&h->ops[a].key, &h->ops[b].key);

	return c ? c : (a > b) - (a < b);
}

/* Op indices grouped by key (or all in one group), in invocation order. */
static size_t *lc_partition(const struct lc_history *h)
{
	size_t *idx = malloc((h->nops + 1) * sizeof(*idx)), i;

	if (!idx)
		return NULL;
	for (i = 0; i < h->nops; i++)
		idx[i] = i;
	if (h->model->partition)
		qsort_r(idx, h->nops, sizeof(*idx), lc_key_cmp, (void *)h);
	return idx;
}

static size_t lc_group_len(const struct lc_history *h, const size_t *idx,
			   size_t n)
{
	size_t i = 1;

	if (!h->model->partition)
		return n;
	while (i < n && !lc_val_cmp(&h->ops[idx[0]].key, &h->ops[idx[i]].key))
		i++;
	return i;
}

int lc_check(const struct lc_history *h, const struct lc_check_opts *o,
	     struct lc_result *r)
{
	size_t *idx = lc_partition(h), i, len;
	struct lc_result res = { .verdict = LC_LINEARIZABLE };
	int ret = idx ? 0 : -ENOMEM;

	for (i = 0; !ret && i < h->nops && res.verdict == LC_LINEARIZABLE; i += len) {
		len = lc_group_len(h, idx + i, h->nops - i);
		ret = lc_check_part(h, idx + i, len, o->deadline_ns, &res);
	}
	free(idx);
	if (ret) {
		lc_result_fini(&res);
		return ret;
	}
	*r = res;
	return 0;
}

void lc_result_fini(struct lc_result *r)
{
	free(r->part);
	free(r->prefix);
	free(r->state);
	r->part = NULL;
	r->prefix = NULL;
	r->state = NULL;
}
