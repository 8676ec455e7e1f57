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
 * States are hash-consed, so the memo compares them by address and keeps
 * one copy of each. With a P-compositional model every key is searched on
 * its own, the keys taking turns.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lincheck.h"

#define LC_TABLE_MIN 256
#define LC_SLICE (1ul << 16)	/* search steps per turn of a partition */

struct lc_entry {
	struct lc_entry *prev;
	struct lc_entry *next;
	struct lc_entry *match;	/* a call's return */
	int64_t t;
	uint32_t op;		/* index into lc_search.ops */
	bool call;
};

/* A state with its hash; states are hash-consed, so equal means same. */
struct lc_state {
	const void *st;
	uint64_t hash;
};

struct lc_frame {
	struct lc_entry *call;
	struct lc_state state;
};

/* Slot of the seen-configurations cache (bits != NULL when used)... */
struct lc_slot {
	uint64_t hash;
	const uint64_t *bits;
	const void *st;
};

/* ...and of the state intern table (st != NULL when used). */
struct lc_table {
	struct lc_slot *slots;
	size_t cap;
	size_t used;
};

/*
 * One partition's search; it runs in slices so that partitions take
 * turns (a violation in one is found while a hard one is still going).
 */
struct lc_search {
	const struct lc_history *h;
	const struct lc_model *m;
	const size_t *ops;	/* the partition: indices into h->ops */
	size_t n;
	struct lc_arena arena;
	struct lc_entry *ent;	/* 2n entries, then head and tail */
	struct lc_entry *head;
	struct lc_entry *e;	/* where the search goes on */
	struct lc_state cur;
	uint64_t *bits;
	size_t words;
	uint64_t bits_hash;
	struct lc_frame *stack;
	size_t depth;
	struct lc_table cache;
	struct lc_table states;
	bool done;
	enum lc_verdict verdict;
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
	s->e = s->head->next;
	return 0;
}

static bool lc_slot_used(const struct lc_slot *x)
{
	return x->st != NULL;
}

static int lc_table_init(struct lc_table *t)
{
	t->cap = LC_TABLE_MIN;
	t->used = 0;
	t->slots = calloc(t->cap, sizeof(*t->slots));
	return t->slots ? 0 : -ENOMEM;
}

/* Makes room for one more entry; slots move, so look up after this. */
static int lc_table_reserve(struct lc_table *t)
{
	size_t cap = 2 * t->cap, i, j;
	struct lc_slot *c;

	if (2 * (t->used + 1) <= t->cap)
		return 0;
	c = calloc(cap, sizeof(*c));
	if (!c)
		return -ENOMEM;
	for (i = 0; i < t->cap; i++) {
		if (!lc_slot_used(&t->slots[i]))
			continue;
		for (j = t->slots[i].hash & (cap - 1); lc_slot_used(&c[j]); j = (j + 1) & (cap - 1))
			;
		c[j] = t->slots[i];
	}
	free(t->slots);
	t->slots = c;
	t->cap = cap;
	return 0;
}

/* The interned copy of *x: an equal state seen before, or *x itself. */
static int lc_state_intern(struct lc_search *s, struct lc_state *x)
{
	struct lc_table *t = &s->states;
	size_t i;
	int ret;

	ret = lc_table_reserve(t);
	if (ret)
		return ret;
	for (i = x->hash & (t->cap - 1); lc_slot_used(&t->slots[i]); i = (i + 1) & (t->cap - 1)) {
		if (t->slots[i].hash == x->hash && s->m->equal(t->slots[i].st, x->st)) {
			x->st = t->slots[i].st;
			return 0;
		}
	}
	t->slots[i] = (struct lc_slot){ .hash = x->hash, .st = x->st };
	t->used++;
	return 1;
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

/* 1 if (bits, state) is new and now remembered, 0 if seen before, -ENOMEM. */
static int lc_cache_add(struct lc_search *s, const struct lc_state *x)
{
	uint64_t hash = s->bits_hash ^ lc_hash_mix(x->hash + 1);
	struct lc_table *t = &s->cache;
	uint64_t *bits;
	size_t i;
	int ret;

	ret = lc_table_reserve(t);
	if (ret)
		return ret;
	for (i = hash & (t->cap - 1); lc_slot_used(&t->slots[i]); i = (i + 1) & (t->cap - 1))
		if (t->slots[i].hash == hash && t->slots[i].st == x->st &&
		    !memcmp(t->slots[i].bits, s->bits, s->words * sizeof(*bits)))
			return 0;
	bits = lc_arena_alloc(&s->arena, s->words * sizeof(*bits));
	if (!bits)
		return -ENOMEM;
	memcpy(bits, s->bits, s->words * sizeof(*bits));
	t->slots[i] = (struct lc_slot){ hash, bits, x->st };
	t->used++;
	return 1;
}

static int lc_search_init(struct lc_search *s, const struct lc_history *h,
			  const size_t *ops, size_t n)
{
	int ret;

	memset(s, 0, sizeof(*s));
	s->h = h;
	s->m = h->model;
	s->ops = ops;
	s->n = n;
	s->words = (n + 63) / 64 + 1;
	lc_arena_init(&s->arena);
	s->ent = malloc((2 * n + 2) * sizeof(*s->ent));
	s->bits = calloc(s->words, sizeof(*s->bits));
	s->stack = malloc((n + 1) * sizeof(*s->stack));
	s->best_ops = malloc((n + 1) * sizeof(*s->best_ops));
	if (!s->ent || !s->bits || !s->stack || !s->best_ops ||
	    lc_table_init(&s->cache) || lc_table_init(&s->states))
		return -ENOMEM;
	ret = s->m->init(&s->arena, &s->cur.st);
	if (ret)
		return ret;
	s->cur.hash = s->m->hash(s->cur.st);
	ret = lc_state_intern(s, &s->cur);
	return ret < 0 ? ret : lc_search_link(s);
}

static void lc_search_fini(struct lc_search *s)
{
	lc_arena_fini(&s->arena);
	free(s->ent);
	free(s->bits);
	free(s->stack);
	free(s->best_ops);
	free(s->cache.slots);
	free(s->states.slots);
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
static void lc_search_note(struct lc_search *s)
{
	size_t i;

	if (s->have_best && s->depth <= s->best)
		return;
	s->have_best = true;
	s->best = s->depth;
	for (i = 0; i < s->depth; i++)
		s->best_ops[i] = s->stack[i].call->op;
	s->best_fail = s->e->op;
	s->best_state = s->cur.st;
}

/* The state after op, interned: 1 legal, 0 not, -ENOMEM. */
static int lc_search_next(struct lc_search *s, const struct lc_op *op,
			  struct lc_state *next)
{
	struct lc_arena_mark mark = lc_arena_mark_get(&s->arena);
	int ret;

	ret = s->m->step(&s->arena, s->cur.st, op, &next->st);
	if (ret <= 0 || next->st == s->cur.st) {
		next->hash = s->cur.hash;
		return ret;
	}
	next->hash = s->m->hash(next->st);
	ret = lc_state_intern(s, next);
	if (!ret)
		lc_arena_release(&s->arena, mark);
	return ret < 0 ? ret : 1;
}

/* Tries to linearize call e now: 1 done, 0 not possible, -ENOMEM. */
static int lc_search_try(struct lc_search *s, struct lc_entry *e)
{
	const struct lc_op *op = &s->h->ops[s->ops[e->op]];
	struct lc_state next;
	int ret;

	ret = lc_search_next(s, op, &next);
	if (ret <= 0)
		return ret;
	lc_bit_flip(s, e->op);
	ret = lc_cache_add(s, &next);
	if (ret <= 0) {
		lc_bit_flip(s, e->op);
		return ret;
	}
	s->stack[s->depth++] = (struct lc_frame){ e, s->cur };
	s->cur = next;
	lc_entry_lift(e);
	return 1;
}

/* At a return: all done if it is at +infinity, else undo the last choice. */
static void lc_search_back(struct lc_search *s)
{
	struct lc_entry *e = s->e;

	if (e->t == LC_T_INF) {
		s->done = true;
		s->verdict = LC_LINEARIZABLE;
		return;
	}
	lc_search_note(s);
	if (!s->depth) {
		s->done = true;
		s->verdict = LC_NOT_LINEARIZABLE;
		return;
	}
	s->depth--;
	e = s->stack[s->depth].call;
	s->cur = s->stack[s->depth].state;
	lc_bit_flip(s, e->op);
	lc_entry_unlift(e);
	s->e = e->next;
}

/* Up to budget steps; s->done tells whether the verdict is in. */
static int lc_search_run(struct lc_search *s, unsigned long budget)
{
	int ret;

	while (!s->done && budget--) {
		if (!s->e->call) {
			lc_search_back(s);
			continue;
		}
		ret = lc_search_try(s, s->e);
		if (ret < 0)
			return ret;
		s->e = ret ? s->head->next : s->e->next;
	}
	return 0;
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

static int lc_search_new(const struct lc_history *h, const size_t *ops,
			 size_t n, struct lc_search **out)
{
	struct lc_search *s = malloc(sizeof(*s));
	int ret;

	if (!s)
		return -ENOMEM;
	ret = lc_search_init(s, h, ops, n);
	if (ret) {
		lc_search_fini(s);
		free(s);
		return ret;
	}
	*out = s;
	return 0;
}

static void lc_search_free(struct lc_search *s)
{
	lc_search_fini(s);
	free(s);
}

/* Memory held by a search (its arena and its tables). */
static size_t lc_search_bytes(const struct lc_search *s)
{
	return s->arena.bytes + (s->cache.cap + s->states.cap) * sizeof(struct lc_slot) +
	       s->n * (2 * sizeof(struct lc_entry) + sizeof(struct lc_frame) + sizeof(size_t));
}

/* The partitions still being searched, taking turns. */
struct lc_sched {
	struct lc_search **live;
	size_t nlive;
	size_t bytes;	/* held by the live searches */
	const struct lc_check_opts *o;
	struct lc_result res;
};

static void lc_sched_limits(struct lc_sched *q)
{
	if (q->o->max_bytes && q->bytes > q->o->max_bytes)
		q->res.limit = LC_LIMIT_MEMORY;
	else if (q->o->deadline_ns && lc_now_ns() > q->o->deadline_ns)
		q->res.limit = LC_LIMIT_TIME;
	if (q->res.limit != LC_LIMIT_NONE)
		q->res.verdict = LC_UNKNOWN;
}

/* One turn of s: 1 if it finished (and is freed), 0 if not, -errno. */
static int lc_sched_turn(struct lc_sched *q, struct lc_search *s)
{
	size_t before = lc_search_bytes(s);
	int ret = lc_search_run(s, LC_SLICE);

	if (!ret && s->done && s->verdict == LC_NOT_LINEARIZABLE) {
		q->res.verdict = LC_NOT_LINEARIZABLE;
		ret = lc_search_report(s, &q->res);
	}
	q->bytes -= before;
	if (ret || s->done) {
		lc_search_free(s);
		return ret ? ret : 1;
	}
	q->bytes += lc_search_bytes(s);
	lc_sched_limits(q);
	return 0;
}

/* A turn for every unfinished partition, in order. */
static int lc_sched_round(struct lc_sched *q)
{
	size_t i, j = 0;
	int err = 0;

	for (i = 0; i < q->nlive; i++) {
		struct lc_search *s = q->live[i];
		int ret = err || q->res.verdict != LC_LINEARIZABLE ? 0 :
			  lc_sched_turn(q, s);

		if (ret < 0)
			err = ret;
		if (!ret)
			q->live[j++] = s;
	}
	q->nlive = j;
	return err;
}

/* Gives every partition a first turn, then turns among the unfinished. */
static int lc_sched_run(struct lc_sched *q, const struct lc_history *h,
			const size_t *idx)
{
	struct lc_search *s;
	size_t i, len;
	int ret;

	for (i = 0; i < h->nops && q->res.verdict == LC_LINEARIZABLE; i += len) {
		len = lc_group_len(h, idx + i, h->nops - i);
		ret = lc_search_new(h, idx + i, len, &s);
		if (!ret) {
			q->bytes += lc_search_bytes(s);
			ret = lc_sched_turn(q, s);
		}
		if (ret < 0)
			return ret;
		if (!ret)
			q->live[q->nlive++] = s;
	}
	while (q->nlive && q->res.verdict == LC_LINEARIZABLE) {
		ret = lc_sched_round(q);
		if (ret)
			return ret;
	}
	return 0;
}

int lc_check(const struct lc_history *h, const struct lc_check_opts *o,
	     struct lc_result *r)
{
	struct lc_sched q = { .o = o };
	size_t *idx = lc_partition(h), i;
	int ret = -ENOMEM;

	q.res.verdict = LC_LINEARIZABLE;
	q.live = malloc((h->nops + 1) * sizeof(*q.live));
	if (idx && q.live)
		ret = lc_sched_run(&q, h, idx);
	for (i = 0; i < q.nlive; i++)
		lc_search_free(q.live[i]);
	free(q.live);
	free(idx);
	if (ret) {
		lc_result_fini(&q.res);
		return ret;
	}
	*r = q.res;
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
