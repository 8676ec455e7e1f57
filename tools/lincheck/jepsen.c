/* SPDX-License-Identifier: MIT */
/*
 * The Jepsen history readers: jepsen.util log lines
 *	INFO  jepsen.util - 3	:ok	:cas	[3 0]
 * and EDN op maps
 *	{:process 0, :type :ok, :f :get, :key "4", :value "x 0 1 y"}
 * Times are line numbers. See docs/formats.md for the mapping to ops.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "build.h"

#define LC_EDN_DEPTH 32

struct lc_edn {
	const char *p;
	const char *end;
	struct lc_arena *a;
	const char *err;
	char *buf;
	size_t cap;
	unsigned depth;
};

/* One history event, from either line syntax. */
struct lc_jev {
	bool skip;		/* a nemesis line */
	int64_t proc;
	const struct lc_str *type;
	const struct lc_str *f;
	struct lc_val key;
	struct lc_val value;
};

struct lc_jepsen {
	struct lc_build *b;
	struct lc_edn e;
	uint32_t *pending;	/* per process: raw index + 1, or 0 */
	size_t npending;
};

static bool lc_edn_fail(struct lc_edn *e, const char *why)
{
	if (!e->err)
		e->err = why;
	return false;
}

static void lc_edn_ws(struct lc_edn *e)
{
	while (e->p < e->end && (*e->p == ' ' || *e->p == '\t' || *e->p == ',' ||
				 *e->p == '\r'))
		e->p++;
}

static bool lc_edn_symch(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || (c && strchr("*+!-_?<>=/.'", c));
}

/* A symbol or keyword name (without ':'), as [*start, e->p). */
static const char *lc_edn_sym(struct lc_edn *e, size_t *len)
{
	const char *s = e->p;

	while (e->p < e->end && lc_edn_symch(*e->p))
		e->p++;
	*len = (size_t)(e->p - s);
	return s;
}

static bool lc_edn_grow(struct lc_edn *e, size_t n)
{
	char *p;

	if (n <= e->cap)
		return true;
	p = realloc(e->buf, 2 * n);
	if (!p)
		return lc_edn_fail(e, "out of memory");
	e->buf = p;
	e->cap = 2 * n;
	return true;
}

static bool lc_edn_esc(struct lc_edn *e, char *out)
{
	static const char from[] = "\"\\ntr", to[] = "\"\\\n\t\r";
	const char *k;

	if (e->p == e->end || !*e->p || !(k = strchr(from, *e->p)))
		return lc_edn_fail(e, "unsupported escape in string");
	e->p++;
	*out = to[k - from];
	return true;
}

static bool lc_edn_str(struct lc_edn *e, struct lc_val *v)
{
	size_t n = 0;
	char c;

	e->p++;
	for (;;) {
		if (e->p == e->end)
			return lc_edn_fail(e, "unterminated string");
		c = *e->p++;
		if (c == '"')
			break;
		if (c == '\\' && !lc_edn_esc(e, &c))
			return false;
		if (!lc_edn_grow(e, n + 1))
			return false;
		e->buf[n++] = c;
	}
	v->kind = LC_STR;
	v->s = lc_str_new(e->a, e->buf ? e->buf : "", n);
	return v->s ? true : lc_edn_fail(e, "out of memory");
}

static bool lc_edn_int(struct lc_edn *e, struct lc_val *v)
{
	bool neg = *e->p == '-';
	uint64_t x = 0;

	e->p += neg;
	if (e->p == e->end || *e->p < '0' || *e->p > '9')
		return lc_edn_fail(e, "invalid number");
	for (; e->p < e->end && *e->p >= '0' && *e->p <= '9'; e->p++) {
		unsigned d = (unsigned)(*e->p - '0');

		if (x > (UINT64_MAX - d) / 10)
			return lc_edn_fail(e, "integer out of 64-bit range");
		x = x * 10 + d;
	}
	if (e->p < e->end && lc_edn_symch(*e->p))
		return lc_edn_fail(e, "only integer numbers are supported");
	if (neg && x > (uint64_t)INT64_MAX + 1)
		return lc_edn_fail(e, "integer out of 64-bit range");
	v->kind = LC_INT;
	v->i = neg ? (int64_t)(0 - x) : (int64_t)x;
	return true;
}

/* Keywords become strings (":timed-out" -> "timed-out"). */
static bool lc_edn_word(struct lc_edn *e, struct lc_val *v)
{
	bool kw = *e->p == ':';
	const char *s;
	size_t n;

	e->p += kw;
	s = lc_edn_sym(e, &n);
	if (!n)
		return lc_edn_fail(e, "invalid EDN value");
	if (!kw && n == 3 && !memcmp(s, "nil", 3))
		return true;
	if (!kw && ((n == 4 && !memcmp(s, "true", 4)) || (n == 5 && !memcmp(s, "false", 5)))) {
		v->kind = LC_BOOL;
		v->b = n == 4;
		return true;
	}
	v->kind = LC_STR;
	v->s = lc_str_new(e->a, s, n);
	return v->s ? true : lc_edn_fail(e, "out of memory");
}

static bool lc_edn_val(struct lc_edn *e, struct lc_val *v);

static bool lc_edn_seq(struct lc_edn *e, struct lc_val *v, char close)
{
	struct lc_val *items = NULL, *p;
	size_t n = 0, cap = 0;
	bool ok = true;

	for (e->p++;; n++) {
		lc_edn_ws(e);
		if (e->p < e->end && *e->p == close)
			break;
		if (n == cap) {
			cap = cap ? 2 * cap : 8;
			p = realloc(items, cap * sizeof(*p));
			if (!p) {
				ok = lc_edn_fail(e, "out of memory");
				break;
			}
			items = p;
		}
		ok = e->p < e->end ? lc_edn_val(e, &items[n]) :
		     lc_edn_fail(e, "unterminated vector or list");
		if (!ok)
			break;
	}
	p = ok && n ? lc_arena_alloc(e->a, n * sizeof(*p)) : NULL;
	if (ok && n && !p)
		ok = lc_edn_fail(e, "out of memory");
	if (ok) {
		if (n)
			memcpy(p, items, n * sizeof(*p));
		e->p++;
		v->kind = LC_LIST;
		v->n = (uint32_t)n;
		v->items = p;
	}
	free(items);
	return ok;
}

static bool lc_edn_val(struct lc_edn *e, struct lc_val *v)
{
	bool ok;

	memset(v, 0, sizeof(*v));
	lc_edn_ws(e);
	if (e->p == e->end)
		return lc_edn_fail(e, "missing value");
	if (++e->depth > LC_EDN_DEPTH)
		return lc_edn_fail(e, "nesting too deep");
	if (*e->p == '"')
		ok = lc_edn_str(e, v);
	else if (*e->p == '[' || *e->p == '(')
		ok = lc_edn_seq(e, v, *e->p == '[' ? ']' : ')');
	else if (*e->p == '{')
		ok = lc_edn_fail(e, "maps are not supported in op values");
	else if (*e->p == '-' || (*e->p >= '0' && *e->p <= '9'))
		ok = lc_edn_int(e, v);
	else
		ok = lc_edn_word(e, v);
	e->depth--;
	return ok;
}

static bool lc_edn_kw(struct lc_edn *e, const struct lc_str **out)
{
	struct lc_val v;

	lc_edn_ws(e);
	if (e->p == e->end || *e->p != ':')
		return lc_edn_fail(e, "expected a keyword");
	if (!lc_edn_word(e, &v))
		return false;
	*out = v.s;
	return true;
}

static bool lc_edn_end(struct lc_edn *e)
{
	lc_edn_ws(e);
	return e->p == e->end ? true : lc_edn_fail(e, "trailing text");
}

/* Process numbers are integers; :nemesis lines are not ops. */
static bool lc_jev_proc(struct lc_edn *e, const struct lc_val *v,
			struct lc_jev *ev)
{
	if (v->kind == LC_STR && !strcmp(v->s->data, "nemesis")) {
		ev->skip = true;
		return true;
	}
	if (v->kind != LC_INT || v->i < 0)
		return lc_edn_fail(e, "process must be a non-negative integer");
	ev->proc = v->i;
	return true;
}

static bool lc_edn_member(struct lc_edn *e, struct lc_jev *ev, bool *seen)
{
	static const char *const keys[] = { "process", "type", "f", "key", "value" };
	const struct lc_str *k;
	struct lc_val v;
	size_t i;

	if (!lc_edn_kw(e, &k) || !lc_edn_val(e, &v))
		return false;
	for (i = 0; i < 5 && strcmp(k->data, keys[i]); i++)
		;
	if (i < 5 && seen[i])
		return lc_edn_fail(e, "duplicate key in map");
	if (i < 5)
		seen[i] = true;
	if ((i == 1 || i == 2) && v.kind != LC_STR)
		return lc_edn_fail(e, ":type and :f must be keywords");
	switch (i) {
	case 0:
		return lc_jev_proc(e, &v, ev);
	case 1:
		ev->type = v.s;
		return true;
	case 2:
		ev->f = v.s;
		return true;
	case 3:
		ev->key = v;
		return true;
	case 4:
		ev->value = v;
		return true;
	default:
		return true;
	}
}

static bool lc_edn_map(struct lc_edn *e, struct lc_jev *ev)
{
	bool seen[5] = { false };

	e->p++;
	for (;;) {
		lc_edn_ws(e);
		if (e->p == e->end)
			return lc_edn_fail(e, "unterminated map");
		if (*e->p == '}')
			break;
		if (!lc_edn_member(e, ev, seen))
			return false;
	}
	e->p++;
	if (!lc_edn_end(e))
		return false;
	if (!seen[0] || !seen[1] || (!seen[2] && !ev->skip))
		return lc_edn_fail(e, "op map needs :process, :type and :f");
	return true;
}

static bool lc_log_token(struct lc_edn *e, const char **s, size_t *n)
{
	lc_edn_ws(e);
	*s = e->p;
	while (e->p < e->end && *e->p != ' ' && *e->p != '\t' && *e->p != '\r')
		e->p++;
	*n = (size_t)(e->p - *s);
	return *n > 0;
}

static bool lc_tok_is(const char *s, size_t n, const char *word)
{
	return strlen(word) == n && !memcmp(s, word, n);
}

/* "LEVEL logger - " prefix; other loggers' lines are not history. */
static bool lc_log_prefix(struct lc_edn *e, bool *ours)
{
	static const char *const levels[] = { "TRACE", "DEBUG", "INFO", "WARN", "ERROR" };
	const char *s;
	size_t n, i;

	if (!lc_log_token(e, &s, &n))
		return lc_edn_fail(e, "not a Jepsen history line");
	for (i = 0; i < 5 && !lc_tok_is(s, n, levels[i]); i++)
		;
	if (i == 5 || !lc_log_token(e, &s, &n))
		return lc_edn_fail(e, "not a Jepsen history line");
	*ours = lc_tok_is(s, n, "jepsen.util");
	if (*ours && (!lc_log_token(e, &s, &n) || !lc_tok_is(s, n, "-")))
		return lc_edn_fail(e, "expected '-' after jepsen.util");
	return true;
}

static bool lc_log_line(struct lc_edn *e, struct lc_jev *ev)
{
	struct lc_val v;
	bool ours;

	if (!lc_log_prefix(e, &ours))
		return false;
	if (!ours) {
		ev->skip = true;
		return true;
	}
	if (!lc_edn_val(e, &v) || !lc_jev_proc(e, &v, ev))
		return false;
	if (ev->skip)
		return true;
	if (!lc_edn_kw(e, &ev->type) || !lc_edn_kw(e, &ev->f))
		return false;
	lc_edn_ws(e);
	if (e->p < e->end && !lc_edn_val(e, &ev->value))
		return false;
	return lc_edn_end(e);
}

static int lc_jepsen_slot(struct lc_jepsen *j, int64_t proc, uint32_t **out)
{
	char name[24];
	uint32_t idx;
	int ret;

	snprintf(name, sizeof(name), "%" PRId64, proc);
	ret = lc_build_proc(j->b, (uint64_t)proc, 0, name, &idx);
	if (ret)
		return ret;
	if (idx >= j->npending) {
		size_t n = 2 * (size_t)idx + 16;
		uint32_t *p = realloc(j->pending, n * sizeof(*p));

		if (!p)
			return lc_build_nomem(j->b);
		memset(p + j->npending, 0, (n - j->npending) * sizeof(*p));
		j->pending = p;
		j->npending = n;
	}
	*out = &j->pending[idx];
	return 0;
}

/* nil -> [], [a b] -> [a b], v -> [v] */
static struct lc_val lc_jepsen_list(const struct lc_val *v, struct lc_arena *a)
{
	struct lc_val l = { .kind = LC_LIST };
	struct lc_val *one;

	if (v->kind == LC_LIST)
		return *v;
	if (v->kind == LC_NULL)
		return l;
	one = lc_arena_alloc(a, sizeof(*one));
	if (one) {
		*one = *v;
		l.n = 1;
		l.items = one;
	}
	return l;
}

static int lc_jepsen_inv(struct lc_jepsen *j, unsigned line,
			 const struct lc_jev *ev, uint32_t *slot)
{
	struct lc_build *b = j->b;
	struct lc_raw *r;
	int ret;

	if (*slot)
		return lc_build_err(b, line, "process %" PRId64 " invokes while its op of line %u is pending",
				    ev->proc, b->raw[*slot - 1].inv_line);
	if (ev->key.kind != LC_NULL && ev->key.kind != LC_INT && ev->key.kind != LC_STR)
		return lc_build_err(b, line, ":key must be an integer or a string");
	ret = lc_build_push(b, &r);
	if (ret)
		return ret;
	r->proc = (uint32_t)(slot - j->pending);
	r->id = b->nraw;
	r->name = ev->f;
	r->key = ev->key;
	r->args = lc_jepsen_list(&ev->value, &b->h->arena);
	r->has_inv = true;
	r->inv = line;
	r->inv_line = line;
	if (ev->value.kind != LC_NULL && ev->value.kind != LC_LIST && !r->args.n)
		return lc_build_nomem(b);
	*slot = (uint32_t)b->nraw;
	return 0;
}

/* :ok carries the result; :fail of a boolean op is a false result. */
static int lc_jepsen_res(struct lc_jepsen *j, const struct lc_opdesc *od,
			 enum lc_end end, const struct lc_val *value,
			 struct lc_raw *r)
{
	static const struct lc_val yes = { .kind = LC_BOOL, .b = true };
	static const struct lc_val no = { .kind = LC_BOOL, .b = false };

	r->res.kind = LC_LIST;
	r->res.n = 0;
	if (end == LC_END_FAIL && od->res == LC_RES_BOOL) {
		end = LC_END_RET;
		r->res.n = 1;
		r->res.items = &no;
	} else if (end == LC_END_RET && od->res == LC_RES_BOOL) {
		r->res.n = 1;
		r->res.items = &yes;
	} else if (end == LC_END_RET && od->res == LC_RES_VAL) {
		struct lc_val *one = lc_arena_alloc(&j->b->h->arena, sizeof(*one));

		if (!one)
			return lc_build_nomem(j->b);
		*one = *value;
		r->res.n = 1;
		r->res.items = one;
	}
	r->end = (uint8_t)end;
	return 0;
}

static int lc_jepsen_type(struct lc_build *b, unsigned line,
			  const struct lc_str *type, enum lc_end *end)
{
	if (!strcmp(type->data, "ok"))
		*end = LC_END_RET;
	else if (!strcmp(type->data, "fail"))
		*end = LC_END_FAIL;
	else if (!strcmp(type->data, "info"))
		*end = LC_END_INFO;
	else
		return lc_build_err(b, line, "unknown :type :%s", type->data);
	return 0;
}

static int lc_jepsen_done(struct lc_jepsen *j, unsigned line,
			  const struct lc_jev *ev, uint32_t *slot)
{
	struct lc_build *b = j->b;
	const struct lc_opdesc *od;
	struct lc_raw *r;
	enum lc_end end = LC_END_OPEN;
	uint16_t code;
	int ret;

	ret = lc_jepsen_type(b, line, ev->type, &end);
	if (ret)
		return ret;
	if (!*slot)
		return lc_build_err(b, line, "completion without an invocation of process %" PRId64,
				    ev->proc);
	r = &b->raw[*slot - 1];
	if (!lc_str_equal(r->name, ev->f))
		return lc_build_err(b, line, "completion :%s of an invocation :%s (line %u)",
				    ev->f->data, r->name->data, r->inv_line);
	od = lc_model_op(b->h->model, r->name->data, &code);
	if (!od)
		return lc_build_err(b, r->inv_line, "unknown op '%s' for model %s",
				    r->name->data, b->h->model->name);
	r->ret = line;
	r->ret_line = line;
	*slot = 0;
	return lc_jepsen_res(j, od, end, &ev->value, r);
}

static int lc_jepsen_event(struct lc_jepsen *j, unsigned line,
			   const struct lc_jev *ev)
{
	uint32_t *slot = NULL;
	int ret;

	if (ev->skip)
		return 0;
	ret = lc_jepsen_slot(j, ev->proc, &slot);
	if (ret)
		return ret;
	if (!strcmp(ev->type->data, "invoke"))
		return lc_jepsen_inv(j, line, ev, slot);
	return lc_jepsen_done(j, line, ev, slot);
}

static int lc_jepsen_line(struct lc_jepsen *j, unsigned line)
{
	struct lc_jev ev;
	bool ok;

	memset(&ev, 0, sizeof(ev));
	j->e.err = NULL;
	j->e.depth = 0;
	lc_edn_ws(&j->e);
	ok = *j->e.p == '{' ? lc_edn_map(&j->e, &ev) : lc_log_line(&j->e, &ev);
	if (!ok)
		return lc_build_err(j->b, line, "%s", j->e.err);
	return lc_jepsen_event(j, line, &ev);
}

static bool lc_jepsen_blank(const char *p, const char *end)
{
	for (; p < end; p++)
		if (*p != ' ' && *p != '\t' && *p != '\r' && *p != ',')
			return false;
	return true;
}

int lc_jepsen_parse(struct lc_build *b, const char *buf, size_t len)
{
	struct lc_jepsen j = { .b = b, .e = { .a = &b->h->arena } };
	const char *p = buf, *end = buf + len;
	unsigned line = 0;
	int ret = 0;

	while (!ret && p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end;

		line++;
		if (!lc_jepsen_blank(p, eol)) {
			j.e.p = p;
			j.e.end = eol;
			ret = lc_jepsen_line(&j, line);
		}
		p = nl ? nl + 1 : end;
	}
	free(j.pending);
	free(j.e.buf);
	return ret;
}
