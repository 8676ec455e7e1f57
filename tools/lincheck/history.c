/* SPDX-License-Identifier: MIT */
/* Building a history from raw events: processes, op ids, validation. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "build.h"

struct lc_idx_slot {
	uint64_t k[3];
	uint32_t val;
	bool used;
};

static void lc_idx_fini(struct lc_idx *x)
{
	free(x->slots);
	x->slots = NULL;
	x->cap = 0;
	x->n = 0;
}

static size_t lc_idx_home(const struct lc_idx *x, const uint64_t k[3])
{
	uint64_t h = lc_hash_mix(k[0] ^ lc_hash_mix(k[1] ^ lc_hash_mix(k[2])));

	return h & (x->cap - 1);
}

static struct lc_idx_slot *lc_idx_slot_find(const struct lc_idx *x,
					    const uint64_t k[3])
{
	size_t i = lc_idx_home(x, k);

	while (x->slots[i].used && memcmp(x->slots[i].k, k, sizeof(x->slots[i].k)))
		i = (i + 1) & (x->cap - 1);
	return &x->slots[i];
}

static int lc_idx_grow(struct lc_idx *x)
{
	struct lc_idx old = *x;
	size_t i;

	x->cap = old.cap ? old.cap * 2 : 64;
	x->slots = calloc(x->cap, sizeof(*x->slots));
	if (!x->slots) {
		*x = old;
		return -ENOMEM;
	}
	for (i = 0; i < old.cap; i++)
		if (old.slots[i].used)
			*lc_idx_slot_find(x, old.slots[i].k) = old.slots[i];
	free(old.slots);
	return 0;
}

/* The slot of k, claimed (used, val unset) if it was free. */
static int lc_idx_get(struct lc_idx *x, const uint64_t k[3],
		      struct lc_idx_slot **out, bool *fresh)
{
	struct lc_idx_slot *s;
	int ret;

	if (2 * (x->n + 1) > x->cap) {
		ret = lc_idx_grow(x);
		if (ret)
			return ret;
	}
	s = lc_idx_slot_find(x, k);
	*fresh = !s->used;
	if (!s->used) {
		memcpy(s->k, k, sizeof(s->k));
		s->used = true;
		x->n++;
	}
	*out = s;
	return 0;
}

void lc_build_init(struct lc_build *b, struct lc_history *h,
		   struct lc_diag *d)
{
	memset(b, 0, sizeof(*b));
	b->h = h;
	b->d = d;
}

void lc_build_fini(struct lc_build *b)
{
	free(b->raw);
	lc_idx_fini(&b->procs);
	lc_idx_fini(&b->ids);
}

int lc_build_err(struct lc_build *b, unsigned line, const char *fmt, ...)
{
	va_list ap;

	b->d->line = line;
	va_start(ap, fmt);
	vsnprintf(b->d->msg, sizeof(b->d->msg), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

int lc_build_nomem(struct lc_build *b)
{
	b->d->line = 0;
	snprintf(b->d->msg, sizeof(b->d->msg), "out of memory");
	return -ENOMEM;
}

static int lc_build_proc_add(struct lc_build *b, const char *name,
			     uint32_t *out)
{
	struct lc_history *h = b->h;
	size_t len = strlen(name);
	char *copy;

	if (h->nprocs == b->procs_cap) {
		size_t cap = b->procs_cap ? 2 * b->procs_cap : 16;
		const char **p = lc_arena_alloc(&h->arena, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		if (h->nprocs)
			memcpy(p, h->procs, h->nprocs * sizeof(*p));
		h->procs = p;
		b->procs_cap = cap;
	}
	copy = lc_arena_alloc(&h->arena, len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, name, len + 1);
	h->procs[h->nprocs] = copy;
	*out = (uint32_t)h->nprocs++;
	return 0;
}

int lc_build_proc(struct lc_build *b, uint64_t x, uint64_t y,
		  const char *name, uint32_t *out)
{
	uint64_t k[3] = { x, y, 0 };
	struct lc_idx_slot *s;
	bool fresh;
	int ret;

	ret = lc_idx_get(&b->procs, k, &s, &fresh);
	if (!ret && fresh)
		ret = lc_build_proc_add(b, name, &s->val);
	if (ret)
		return lc_build_nomem(b);
	*out = s->val;
	return 0;
}

int lc_build_push(struct lc_build *b, struct lc_raw **out)
{
	if (b->nraw == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 256;
		struct lc_raw *p = realloc(b->raw, cap * sizeof(*p));

		if (!p)
			return lc_build_nomem(b);
		b->raw = p;
		b->cap = cap;
	}
	*out = &b->raw[b->nraw++];
	memset(*out, 0, sizeof(**out));
	return 0;
}

int lc_build_raw(struct lc_build *b, uint32_t proc, uint64_t id,
		 struct lc_raw **out, bool *fresh)
{
	uint64_t k[3] = { proc, id, 1 };
	struct lc_idx_slot *s;
	int ret;

	ret = lc_idx_get(&b->ids, k, &s, fresh);
	if (ret)
		return lc_build_nomem(b);
	if (!*fresh) {
		*out = &b->raw[s->val];
		return 0;
	}
	s->val = (uint32_t)b->nraw;
	ret = lc_build_push(b, out);
	if (ret)
		return ret;
	(*out)->proc = proc;
	(*out)->id = id;
	return 0;
}

static const char *lc_res_check(struct lc_op *op, const struct lc_opdesc *od,
				const struct lc_val *res)
{
	switch (od->res) {
	case LC_RES_NONE:
		return res->n ? "expects res []" : NULL;
	case LC_RES_BOOL:
		if (res->n != 1)
			return "expects res [true|false]";
		op->res = res->items[0];
		if (lc_val_is_str(&op->res, "fail")) {
			op->res.kind = LC_BOOL;
			op->res.b = false;
		}
		return op->res.kind == LC_BOOL ? NULL :
		       "expects res [true|false]";
	default:
		if (res->n != 1)
			return "expects res [value]";
		op->res = res->items[0];
		return NULL;
	}
}

static int lc_build_args(struct lc_build *b, const struct lc_raw *r,
			 struct lc_op *op)
{
	const struct lc_model *m = b->h->model;
	const struct lc_opdesc *od;
	const char *why;

	od = lc_model_op(m, r->name->data, &op->code);
	if (!od)
		return lc_build_err(b, r->inv_line, "unknown op '%s' for model %s",
				    r->name->data, m->name);
	if (r->args.n != od->nargs)
		return lc_build_err(b, r->inv_line, "op '%s' takes %u args, got %u",
				    od->name, od->nargs, r->args.n);
	op->nargs = od->nargs;
	if (od->nargs)
		memcpy(op->args, r->args.items, od->nargs * sizeof(op->args[0]));
	op->key = r->key;
	why = m->validate(op, false);
	if (why)
		return lc_build_err(b, r->inv_line, "op '%s': %s", od->name, why);
	return 0;
}

static int lc_build_res(struct lc_build *b, const struct lc_raw *r,
			struct lc_op *op)
{
	const struct lc_opdesc *od = &b->h->model->ops[op->code];
	const char *why;

	if (r->end != LC_END_RET) {
		op->unknown = true;
		op->ret = LC_T_INF;
		return 0;
	}
	if (r->ret < r->inv)
		return lc_build_err(b, r->ret_line, "op returns before its invocation (line %u)",
				    r->inv_line);
	why = lc_res_check(op, od, &r->res);
	if (!why)
		why = b->h->model->validate(op, true);
	if (why)
		return lc_build_err(b, r->ret_line, "op '%s': %s", od->name, why);
	return 0;
}

static int lc_build_op(struct lc_build *b, const struct lc_raw *r,
		       struct lc_op *op)
{
	int ret;

	memset(op, 0, sizeof(*op));
	op->proc = r->proc;
	op->inv = r->inv;
	op->ret = r->ret;
	op->inv_line = r->inv_line;
	op->ret_line = r->ret_line;
	ret = lc_build_args(b, r, op);
	return ret ? ret : lc_build_res(b, r, op);
}

static int lc_raw_cmp(const void *x, const void *y)
{
	const struct lc_raw *a = x, *b = y;

	if (a->proc != b->proc)
		return a->proc < b->proc ? -1 : 1;
	if (a->inv != b->inv)
		return a->inv < b->inv ? -1 : 1;
	return (a->inv_line > b->inv_line) - (a->inv_line < b->inv_line);
}

/* A thread runs one op at a time, unless an earlier one never returned. */
static int lc_build_overlap(struct lc_build *b)
{
	size_t i;

	if (b->nraw)
		qsort(b->raw, b->nraw, sizeof(*b->raw), lc_raw_cmp);
	for (i = 1; i < b->nraw; i++) {
		const struct lc_raw *p = &b->raw[i - 1], *r = &b->raw[i];

		if (p->proc == r->proc && p->ret_line && p->ret > r->inv)
			return lc_build_err(b, r->inv_line, "process %s invokes while its op of line %u is running",
					    b->h->procs[r->proc], p->inv_line);
	}
	return 0;
}

static int lc_op_cmp(const void *x, const void *y)
{
	const struct lc_op *a = x, *b = y;

	if (a->inv != b->inv)
		return a->inv < b->inv ? -1 : 1;
	return (a->inv_line > b->inv_line) - (a->inv_line < b->inv_line);
}

static int lc_build_check_inv(struct lc_build *b)
{
	size_t i;

	for (i = 0; i < b->nraw; i++) {
		const struct lc_raw *r = &b->raw[i];

		if (!r->has_inv)
			return lc_build_err(b, r->ret_line, "return of op %llu of process %s without an invocation",
					    (unsigned long long)r->id,
					    b->h->procs[r->proc]);
	}
	return 0;
}

int lc_build_finish(struct lc_build *b)
{
	struct lc_history *h = b->h;
	struct lc_op *ops;
	size_t i, n = 0;
	int ret;

	ret = lc_build_check_inv(b);
	if (ret)
		return ret;
	ops = lc_arena_alloc(&h->arena, (b->nraw + 1) * sizeof(*ops));
	if (!ops)
		return lc_build_nomem(b);
	for (i = 0; i < b->nraw; i++) {
		if (b->raw[i].end == LC_END_FAIL)
			continue;
		ret = lc_build_op(b, &b->raw[i], &ops[n++]);
		if (ret)
			return ret;
	}
	ret = lc_build_overlap(b);
	if (ret)
		return ret;
	qsort(ops, n, sizeof(*ops), lc_op_cmp);
	h->ops = ops;
	h->nops = n;
	return 0;
}

int lc_format_parse(const char *s, enum lc_format *out)
{
	if (!strcmp(s, "jsonl"))
		*out = LC_FMT_JSONL;
	else if (!strcmp(s, "jepsen") || !strcmp(s, "edn"))
		*out = LC_FMT_JEPSEN;
	else
		return -EINVAL;
	return 0;
}

/* First non-blank "{"" is JSONL, "{:" or a jepsen.util line is Jepsen. */
static int lc_format_sniff(const char *buf, size_t len, enum lc_format *out)
{
	const char *p = buf, *end = buf + len;

	while (p < end && strchr(" \t\r\n", *p) && *p)
		p++;
	if (p == end)
		*out = LC_FMT_JSONL;
	else if (*p == '{') {
		for (p++; p < end && (*p == ' ' || *p == '\t'); p++)
			;
		if (p == end || (*p != '"' && *p != ':'))
			return -EINVAL;
		*out = *p == '"' ? LC_FMT_JSONL : LC_FMT_JEPSEN;
	} else if (memmem(p, (size_t)(end - p), "jepsen.util", 11)) {
		*out = LC_FMT_JEPSEN;
	} else {
		return -EINVAL;
	}
	return 0;
}

static int lc_history_load(struct lc_build *b, const char *buf, size_t len,
			   enum lc_format fmt)
{
	int ret;

	if (fmt == LC_FMT_AUTO && lc_format_sniff(buf, len, &fmt))
		return lc_build_err(b, 1, "cannot tell the history format (use --format)");
	b->h->jsonl = fmt == LC_FMT_JSONL;
	ret = fmt == LC_FMT_JSONL ? lc_jsonl_parse(b, buf, len) :
	      lc_jepsen_parse(b, buf, len);
	return ret ? ret : lc_build_finish(b);
}

int lc_history_parse(const char *name, const char *buf, size_t len,
		     enum lc_format fmt, const struct lc_model *m,
		     struct lc_history *h, struct lc_diag *d)
{
	struct lc_history tmp = { .name = name, .model = m };
	struct lc_build b;
	int ret;

	lc_arena_init(&tmp.arena);
	lc_build_init(&b, &tmp, d);
	ret = lc_history_load(&b, buf, len, fmt);
	lc_build_fini(&b);
	if (ret) {
		lc_history_fini(&tmp);
		return ret;
	}
	*h = tmp;
	return 0;
}

static int lc_file_slurp(FILE *f, char **buf, size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	char *p = malloc(cap), *q;

	while (p) {
		n += fread(p + n, 1, cap - n, f);
		if (n < cap)
			break;
		cap *= 2;
		q = realloc(p, cap);
		if (!q)
			free(p);
		p = q;
	}
	if (!p)
		return -ENOMEM;
	if (ferror(f)) {
		free(p);
		return -EIO;
	}
	*buf = p;
	*len = n;
	return 0;
}

int lc_history_read(const char *path, enum lc_format fmt,
		    const struct lc_model *m, struct lc_history *h,
		    struct lc_diag *d)
{
	FILE *f = fopen(path, "rb");
	size_t len;
	char *buf;
	int ret;

	if (!f) {
		ret = -errno;
		goto err;
	}
	ret = lc_file_slurp(f, &buf, &len);
	fclose(f);
	if (ret)
		goto err;
	ret = lc_history_parse(path, buf, len, fmt, m, h, d);
	free(buf);
	return ret;
err:
	d->line = 0;
	snprintf(d->msg, sizeof(d->msg), "%s", strerror(-ret));
	return ret;
}

void lc_history_fini(struct lc_history *h)
{
	lc_arena_fini(&h->arena);
	h->ops = NULL;
	h->nops = 0;
	h->procs = NULL;
	h->nprocs = 0;
}

/* "cas(3, 0) -> true", "put[5](7)", "read() -> ?" */
void lc_op_print_call(const struct lc_history *h, const struct lc_op *op,
		      FILE *f)
{
	const struct lc_opdesc *od = &h->model->ops[op->code];
	unsigned i;

	fputs(od->name, f);
	if (op->key.kind != LC_NULL) {
		fputc('[', f);
		lc_val_print(&op->key, f);
		fputc(']', f);
	}
	fputc('(', f);
	for (i = 0; i < op->nargs; i++) {
		if (i)
			fputs(", ", f);
		lc_val_print(&op->args[i], f);
	}
	fputc(')', f);
	if (op->unknown) {
		fputs(" -> ?", f);
	} else if (od->res != LC_RES_NONE) {
		fputs(" -> ", f);
		lc_val_print(&op->res, f);
	}
}

/* The call preceded by the process: "3: cas(3, 0) -> true" */
void lc_op_print(const struct lc_history *h, const struct lc_op *op, FILE *f)
{
	fprintf(f, "%s: ", h->procs[op->proc]);
	lc_op_print_call(h, op, f);
}
