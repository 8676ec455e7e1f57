/* SPDX-License-Identifier: MIT */
/*
 * Sequential specifications of the single-object models: register,
 * cas-register, counter, mutex and queue. With a key, an op names one of
 * many independent objects, checked apart (P-compositionality).
 */
#include <errno.h>
#include <string.h>

#include "lincheck.h"

const struct lc_model *const lc_models[] = {
	&lc_model_register,
	&lc_model_cas_register,
	&lc_model_counter,
	&lc_model_mutex,
	&lc_model_queue,
	&lc_model_map,
	&lc_model_append_map,
	&lc_model_ordered_map,
	NULL,
};

const struct lc_model *lc_model_find(const char *name)
{
	size_t i;

	for (i = 0; lc_models[i]; i++)
		if (!strcmp(lc_models[i]->name, name))
			return lc_models[i];
	return NULL;
}

const struct lc_opdesc *lc_model_op(const struct lc_model *m, const char *name,
				    uint16_t *code)
{
	unsigned i;

	for (i = 0; i < m->nops; i++) {
		if (!strcmp(m->ops[i].name, name)) {
			*code = (uint16_t)i;
			return &m->ops[i];
		}
	}
	return NULL;
}

/* Registers: the state is a pointer to the current value. */
enum { LC_REG_READ, LC_REG_WRITE, LC_REG_CAS, LC_REG_FAA };

static const struct lc_opdesc lc_reg_ops[] = {
	[LC_REG_READ] = { "read", 0, LC_RES_VAL },
	[LC_REG_WRITE] = { "write", 1, LC_RES_NONE },
	[LC_REG_CAS] = { "cas", 2, LC_RES_BOOL },
	[LC_REG_FAA] = { "faa", 1, LC_RES_VAL },
};

static const char *lc_reg_validate(struct lc_op *op, bool res)
{
	(void)op;
	(void)res;
	return NULL;
}

static int lc_reg_init(struct lc_arena *a, const void **st)
{
	(void)a;
	*st = &lc_val_null;
	return 0;
}

/* A CAS from old to new; its result (true iff it took effect) is checked. */
static int lc_reg_cas(const struct lc_val *v, const struct lc_op *op,
		      const void **next)
{
	bool match = lc_val_equal(v, &op->args[0]);

	*next = match ? &op->args[1] : (const void *)v;
	return op->unknown || match == op->res.b;
}

static int lc_reg_step(struct lc_arena *a, const void *st,
		       const struct lc_op *op, const void **next)
{
	(void)a;
	switch (op->code) {
	case LC_REG_READ:
		*next = st;
		return op->unknown || lc_val_equal(st, &op->res);
	case LC_REG_WRITE:
		*next = &op->args[0];
		return 1;
	default:
		return lc_reg_cas(st, op, next);
	}
}

static uint64_t lc_reg_hash(const void *st)
{
	return lc_val_hash(st);
}

static bool lc_reg_equal(const void *x, const void *y)
{
	return lc_val_equal(x, y);
}

static void lc_reg_describe(const void *st, FILE *f)
{
	lc_val_print(st, f);
}

const struct lc_model lc_model_register = {
	.name = "register",
	.summary = "read, write; initially null",
	.ops = lc_reg_ops,
	.nops = 2,
	.partition = true,
	.validate = lc_reg_validate,
	.init = lc_reg_init,
	.step = lc_reg_step,
	.hash = lc_reg_hash,
	.equal = lc_reg_equal,
	.describe = lc_reg_describe,
};

const struct lc_model lc_model_cas_register = {
	.name = "cas-register",
	.summary = "read, write, cas; initially null (the etcd logs)",
	.ops = lc_reg_ops,
	.nops = 3,
	.partition = true,
	.validate = lc_reg_validate,
	.init = lc_reg_init,
	.step = lc_reg_step,
	.hash = lc_reg_hash,
	.equal = lc_reg_equal,
	.describe = lc_reg_describe,
};

/* Counter: a 64-bit integer register with fetch-and-add (wrapping). */
static const struct lc_val lc_val_zero = { .kind = LC_INT, .i = 0 };

static const char *lc_ctr_validate(struct lc_op *op, bool res)
{
	unsigned i;

	if (res)
		return op->code == LC_REG_READ || op->code == LC_REG_FAA ?
		       (op->res.kind == LC_INT ? NULL : "res must be an integer") :
		       NULL;
	for (i = 0; i < op->nargs; i++)
		if (op->args[i].kind != LC_INT)
			return "args must be integers";
	return NULL;
}

static int lc_ctr_init(struct lc_arena *a, const void **st)
{
	(void)a;
	*st = &lc_val_zero;
	return 0;
}

static int lc_ctr_faa(struct lc_arena *a, const struct lc_val *v,
		      const struct lc_op *op, const void **next)
{
	struct lc_val *n;

	if (!op->unknown && op->res.i != v->i)
		return 0;
	n = lc_arena_alloc(a, sizeof(*n));
	if (!n)
		return -ENOMEM;
	*n = *v;
	n->i = (int64_t)((uint64_t)v->i + (uint64_t)op->args[0].i);
	*next = n;
	return 1;
}

static int lc_ctr_step(struct lc_arena *a, const void *st,
		       const struct lc_op *op, const void **next)
{
	return op->code == LC_REG_FAA ? lc_ctr_faa(a, st, op, next) :
	       lc_reg_step(a, st, op, next);
}

const struct lc_model lc_model_counter = {
	.name = "counter",
	.summary = "read, write, cas, faa on a 64-bit integer; initially 0",
	.ops = lc_reg_ops,
	.nops = 4,
	.partition = true,
	.validate = lc_ctr_validate,
	.init = lc_ctr_init,
	.step = lc_ctr_step,
	.hash = lc_reg_hash,
	.equal = lc_reg_equal,
	.describe = lc_reg_describe,
};

/* Mutex: the state is the holder's process number + 1, or 0 when free. */
enum { LC_MTX_LOCK, LC_MTX_UNLOCK, LC_MTX_TRYLOCK };

static const struct lc_opdesc lc_mtx_ops[] = {
	[LC_MTX_LOCK] = { "lock", 0, LC_RES_NONE },
	[LC_MTX_UNLOCK] = { "unlock", 0, LC_RES_NONE },
	[LC_MTX_TRYLOCK] = { "trylock", 0, LC_RES_BOOL },
};

static const uint32_t lc_mtx_free;

static int lc_mtx_init(struct lc_arena *a, const void **st)
{
	(void)a;
	*st = &lc_mtx_free;
	return 0;
}

static int lc_mtx_set(struct lc_arena *a, uint32_t holder, const void **next)
{
	uint32_t *h;

	if (!holder) {
		*next = &lc_mtx_free;
		return 1;
	}
	h = lc_arena_alloc(a, sizeof(*h));
	if (!h)
		return -ENOMEM;
	*h = holder;
	*next = h;
	return 1;
}

/* A failed trylock is legal iff the lock is held (by anyone). */
static int lc_mtx_step(struct lc_arena *a, const void *st,
		       const struct lc_op *op, const void **next)
{
	uint32_t holder = *(const uint32_t *)st;

	*next = st;
	switch (op->code) {
	case LC_MTX_LOCK:
		return holder ? 0 : lc_mtx_set(a, op->proc + 1, next);
	case LC_MTX_UNLOCK:
		return holder == op->proc + 1 ? lc_mtx_set(a, 0, next) : 0;
	default:
		if (!holder && (op->unknown || op->res.b))
			return lc_mtx_set(a, op->proc + 1, next);
		return holder && (op->unknown || !op->res.b);
	}
}

static uint64_t lc_mtx_hash(const void *st)
{
	return lc_hash_mix(*(const uint32_t *)st);
}

static bool lc_mtx_equal(const void *x, const void *y)
{
	return *(const uint32_t *)x == *(const uint32_t *)y;
}

static void lc_mtx_describe(const void *st, FILE *f)
{
	uint32_t holder = *(const uint32_t *)st;

	if (holder)
		fprintf(f, "held by process #%u", holder - 1);
	else
		fputs("free", f);
}

const struct lc_model lc_model_mutex = {
	.name = "mutex",
	.summary = "lock, unlock, trylock; unlock only by the holder",
	.ops = lc_mtx_ops,
	.nops = 3,
	.partition = true,
	.validate = lc_reg_validate,
	.init = lc_mtx_init,
	.step = lc_mtx_step,
	.hash = lc_mtx_hash,
	.equal = lc_mtx_equal,
	.describe = lc_mtx_describe,
};

/* FIFO queue: the state is an immutable array, copied on change. */
enum { LC_Q_ENQ, LC_Q_DEQ };

static const struct lc_opdesc lc_q_ops[] = {
	[LC_Q_ENQ] = { "enq", 1, LC_RES_NONE },
	[LC_Q_DEQ] = { "deq", 0, LC_RES_VAL },
};

struct lc_queue {
	uint64_t hash;
	uint32_t n;
	struct lc_val items[];
};

static const struct lc_queue lc_q_empty;

static const char *lc_q_validate(struct lc_op *op, bool res)
{
	if (!res && op->code == LC_Q_ENQ && lc_val_is_str(&op->args[0], "empty"))
		return "\"empty\" is reserved for the result of a dequeue on an empty queue";
	if (res && op->code == LC_Q_DEQ && lc_val_is_str(&op->res, "empty"))
		op->res.kind = LC_EMPTY;
	return NULL;
}

static int lc_q_init(struct lc_arena *a, const void **st)
{
	(void)a;
	*st = &lc_q_empty;
	return 0;
}

/* The queue holding items[0..n) then, if add, one more item. */
static int lc_q_make(struct lc_arena *a, const struct lc_val *items, uint32_t n,
		     const struct lc_val *add, const void **next)
{
	struct lc_queue *q;
	uint32_t i;

	if (!n && !add) {
		*next = &lc_q_empty;
		return 1;
	}
	q = lc_arena_alloc(a, sizeof(*q) + (n + 1) * sizeof(q->items[0]));
	if (!q)
		return -ENOMEM;
	memcpy(q->items, items, n * sizeof(q->items[0]));
	if (add)
		q->items[n++] = *add;
	q->n = n;
	q->hash = lc_hash_mix(n);
	for (i = 0; i < n; i++)
		q->hash = lc_hash_mix(q->hash ^ lc_val_hash(&q->items[i]));
	*next = q;
	return 1;
}

static int lc_q_step(struct lc_arena *a, const void *st,
		     const struct lc_op *op, const void **next)
{
	const struct lc_queue *q = st;

	*next = st;
	if (op->code == LC_Q_ENQ)
		return lc_q_make(a, q->items, q->n, &op->args[0], next);
	if (!q->n)
		return op->unknown || op->res.kind == LC_EMPTY;
	if (!op->unknown && !lc_val_equal(&op->res, &q->items[0]))
		return 0;
	return lc_q_make(a, q->items + 1, q->n - 1, NULL, next);
}

static uint64_t lc_q_hash(const void *st)
{
	return ((const struct lc_queue *)st)->hash;
}

static bool lc_q_equal(const void *x, const void *y)
{
	const struct lc_queue *p = x, *q = y;
	uint32_t i;

	if (p->hash != q->hash || p->n != q->n)
		return false;
	for (i = 0; i < p->n; i++)
		if (!lc_val_equal(&p->items[i], &q->items[i]))
			return false;
	return true;
}

static void lc_q_describe(const void *st, FILE *f)
{
	const struct lc_queue *q = st;
	uint32_t i;

	fputc('[', f);
	for (i = 0; i < q->n; i++) {
		if (i)
			fputs(", ", f);
		lc_val_print(&q->items[i], f);
	}
	fputs("] (head first)", f);
}

const struct lc_model lc_model_queue = {
	.name = "queue",
	.summary = "enq, deq (value or \"empty\"); FIFO",
	.ops = lc_q_ops,
	.nops = 2,
	.partition = true,
	.validate = lc_q_validate,
	.init = lc_q_init,
	.step = lc_q_step,
	.hash = lc_q_hash,
	.equal = lc_q_equal,
	.describe = lc_q_describe,
};
