/* SPDX-License-Identifier: MIT */
/* The JSONL history reader: a strict JSON parser and the loco event format. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "build.h"

#define LC_JSON_DEPTH 32

struct lc_json {
	const char *p;
	const char *end;
	struct lc_arena *a;
	const char *err;
	char *buf;	/* scratch for unescaping strings */
	size_t cap;
	unsigned depth;
};

enum lc_num_sign {
	LC_NUM_POS,	/* 0 .. INT64_MAX */
	LC_NUM_BIG,	/* INT64_MAX+1 .. UINT64_MAX, stored wrapped */
	LC_NUM_NEG,
};

static bool lc_json_fail(struct lc_json *j, const char *why)
{
	if (!j->err)
		j->err = why;
	return false;
}

static void lc_json_ws(struct lc_json *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' ||
				 *j->p == '\n'))
		j->p++;
}

static bool lc_json_lit(struct lc_json *j, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n))
		return lc_json_fail(j, "invalid literal");
	j->p += n;
	return true;
}

static bool lc_json_digits(struct lc_json *j, uint64_t *out)
{
	uint64_t v = 0;

	if (j->p == j->end || *j->p < '0' || *j->p > '9')
		return lc_json_fail(j, "invalid number");
	if (*j->p == '0' && j->p + 1 < j->end && j->p[1] >= '0' && j->p[1] <= '9')
		return lc_json_fail(j, "invalid number (leading zero)");
	for (; j->p < j->end && *j->p >= '0' && *j->p <= '9'; j->p++) {
		unsigned d = (unsigned)(*j->p - '0');

		if (v > (UINT64_MAX - d) / 10)
			return lc_json_fail(j, "integer out of 64-bit range");
		v = v * 10 + d;
	}
	*out = v;
	return true;
}

static bool lc_json_num(struct lc_json *j, int64_t *out, enum lc_num_sign *sign)
{
	bool neg = j->p < j->end && *j->p == '-';
	uint64_t v;

	j->p += neg;
	if (!lc_json_digits(j, &v))
		return false;
	if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
		return lc_json_fail(j, "only integer numbers are supported");
	if (neg && v > (uint64_t)INT64_MAX + 1)
		return lc_json_fail(j, "integer out of 64-bit range");
	*sign = neg ? LC_NUM_NEG : v > INT64_MAX ? LC_NUM_BIG : LC_NUM_POS;
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return true;
}

static bool lc_json_room(struct lc_json *j, size_t n)
{
	char *p;

	if (n <= j->cap)
		return true;
	p = realloc(j->buf, 2 * n);
	if (!p)
		return lc_json_fail(j, "out of memory");
	j->buf = p;
	j->cap = 2 * n;
	return true;
}

/* Appends code point c (from a \u escape) as UTF-8. */
static bool lc_json_put_utf8(struct lc_json *j, size_t *n, uint32_t c)
{
	if (!lc_json_room(j, *n + 4))
		return false;
	if (c < 0x80) {
		j->buf[(*n)++] = (char)c;
	} else if (c < 0x800) {
		j->buf[(*n)++] = (char)(0xc0 | c >> 6);
		j->buf[(*n)++] = (char)(0x80 | (c & 0x3f));
	} else if (c < 0x10000) {
		j->buf[(*n)++] = (char)(0xe0 | c >> 12);
		j->buf[(*n)++] = (char)(0x80 | (c >> 6 & 0x3f));
		j->buf[(*n)++] = (char)(0x80 | (c & 0x3f));
	} else {
		j->buf[(*n)++] = (char)(0xf0 | c >> 18);
		j->buf[(*n)++] = (char)(0x80 | (c >> 12 & 0x3f));
		j->buf[(*n)++] = (char)(0x80 | (c >> 6 & 0x3f));
		j->buf[(*n)++] = (char)(0x80 | (c & 0x3f));
	}
	return true;
}

static bool lc_json_hex4(struct lc_json *j, uint32_t *out)
{
	uint32_t v = 0;
	int i;

	if (j->end - j->p < 4)
		return lc_json_fail(j, "bad \\u escape");
	for (i = 0; i < 4; i++) {
		char c = *j->p++;

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			v |= (uint32_t)((c | 0x20) - 'a' + 10);
		else
			return lc_json_fail(j, "bad \\u escape");
	}
	*out = v;
	return true;
}

static bool lc_json_uescape(struct lc_json *j, uint32_t *out)
{
	uint32_t hi, lo;

	if (!lc_json_hex4(j, &hi))
		return false;
	if (hi < 0xd800 || hi > 0xdfff) {
		*out = hi;
		return true;
	}
	if (hi > 0xdbff || j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
		return lc_json_fail(j, "unpaired surrogate in \\u escape");
	j->p += 2;
	if (!lc_json_hex4(j, &lo))
		return false;
	if (lo < 0xdc00 || lo > 0xdfff)
		return lc_json_fail(j, "unpaired surrogate in \\u escape");
	*out = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
	return true;
}

/* After a backslash: appends the escaped character. */
static bool lc_json_escape(struct lc_json *j, size_t *n)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *k;
	uint32_t c;

	if (j->p == j->end)
		return lc_json_fail(j, "unterminated string");
	if (*j->p == 'u') {
		j->p++;
		return lc_json_uescape(j, &c) && lc_json_put_utf8(j, n, c);
	}
	k = strchr(from, *j->p);
	if (!*j->p || !k)
		return lc_json_fail(j, "bad escape in string");
	j->p++;
	return lc_json_put_utf8(j, n, (unsigned char)to[k - from]);
}

/* Other bytes are copied as they are (UTF-8 is not validated). */
static bool lc_json_str(struct lc_json *j, const struct lc_str **out)
{
	size_t n = 0;
	char c;

	j->p++;
	for (;;) {
		if (j->p == j->end)
			return lc_json_fail(j, "unterminated string");
		c = *j->p++;
		if (c == '"')
			break;
		if ((unsigned char)c < 0x20)
			return lc_json_fail(j, "control character in string");
		if (c == '\\' && !lc_json_escape(j, &n))
			return false;
		if (c == '\\')
			continue;
		if (!lc_json_room(j, n + 1))
			return false;
		j->buf[n++] = c;
	}
	*out = lc_str_new(j->a, j->buf ? j->buf : "", n);
	return *out ? true : lc_json_fail(j, "out of memory");
}

static bool lc_json_val(struct lc_json *j, struct lc_val *v);

/* Items go to a malloc'ed buffer first, then to the arena in one piece. */
static bool lc_json_items(struct lc_json *j, struct lc_val **items, size_t *n)
{
	size_t cap = 0;

	for (;;) {
		if (*n == cap) {
			struct lc_val *p;

			cap = cap ? 2 * cap : 8;
			p = realloc(*items, cap * sizeof(*p));
			if (!p)
				return lc_json_fail(j, "out of memory");
			*items = p;
		}
		if (!lc_json_val(j, &(*items)[(*n)++]))
			return false;
		lc_json_ws(j);
		if (j->p < j->end && *j->p == ']')
			return true;
		if (j->p == j->end || *j->p != ',')
			return lc_json_fail(j, "expected ',' or ']' in array");
		j->p++;
	}
}

static bool lc_json_arr(struct lc_json *j, struct lc_val *v)
{
	struct lc_val *items = NULL, *copy;
	size_t n = 0;
	bool ok = true;

	j->p++;
	lc_json_ws(j);
	if (j->p < j->end && *j->p == ']')
		goto done;
	ok = lc_json_items(j, &items, &n);
	if (ok && n > UINT32_MAX)
		ok = lc_json_fail(j, "array too long");
done:
	copy = ok && n ? lc_arena_alloc(j->a, n * sizeof(*copy)) : NULL;
	if (ok && n && !copy)
		ok = lc_json_fail(j, "out of memory");
	if (ok) {
		if (n)
			memcpy(copy, items, n * sizeof(*copy));
		j->p++;
		v->kind = LC_LIST;
		v->n = (uint32_t)n;
		v->items = copy;
	}
	free(items);
	return ok;
}

/* A value of an op: null, true, false, integer, string or array of them. */
static bool lc_json_val(struct lc_json *j, struct lc_val *v)
{
	enum lc_num_sign sign;
	bool ok;

	memset(v, 0, sizeof(*v));
	lc_json_ws(j);
	if (j->p == j->end)
		return lc_json_fail(j, "missing value");
	if (++j->depth > LC_JSON_DEPTH)
		return lc_json_fail(j, "nesting too deep");
	switch (*j->p) {
	case '"':
		v->kind = LC_STR;
		ok = lc_json_str(j, &v->s);
		break;
	case '[':
		ok = lc_json_arr(j, v);
		break;
	case '{':
		ok = lc_json_fail(j, "objects are not supported in op values");
		break;
	case 'n':
		ok = lc_json_lit(j, "null");
		break;
	case 't':
	case 'f':
		v->kind = LC_BOOL;
		v->b = *j->p == 't';
		ok = lc_json_lit(j, v->b ? "true" : "false");
		break;
	default:
		v->kind = LC_INT;
		ok = (*j->p == '-' || (*j->p >= '0' && *j->p <= '9')) ?
		     lc_json_num(j, &v->i, &sign) :
		     lc_json_fail(j, "invalid JSON value");
		v->n = ok && sign == LC_NUM_BIG;
		break;
	}
	j->depth--;
	return ok;
}

static bool lc_json_skip(struct lc_json *j);

/* Skips the members of an object or the items of an array up to close. */
static bool lc_json_skip_seq(struct lc_json *j, char close, bool members)
{
	const struct lc_str *s;

	j->p++;
	lc_json_ws(j);
	if (j->p < j->end && *j->p == close)
		goto done;
	for (;;) {
		lc_json_ws(j);
		if (members && (j->p == j->end || *j->p != '"'))
			return lc_json_fail(j, "expected a field name");
		if (members && !lc_json_str(j, &s))
			return false;
		lc_json_ws(j);
		if (members && (j->p == j->end || *j->p++ != ':'))
			return lc_json_fail(j, "expected ':'");
		if (!lc_json_skip(j))
			return false;
		lc_json_ws(j);
		if (j->p < j->end && *j->p == close)
			break;
		if (j->p == j->end || *j->p != ',')
			return lc_json_fail(j, "expected ',' in object or array");
		j->p++;
	}
done:
	j->p++;
	return true;
}

/* Any JSON value, objects included, checked and thrown away. */
static bool lc_json_skip(struct lc_json *j)
{
	struct lc_val v;
	bool ok;

	lc_json_ws(j);
	if (j->p == j->end || (*j->p != '{' && *j->p != '['))
		return lc_json_val(j, &v);
	if (++j->depth > LC_JSON_DEPTH)
		return lc_json_fail(j, "nesting too deep");
	ok = lc_json_skip_seq(j, *j->p == '{' ? '}' : ']', *j->p == '{');
	j->depth--;
	return ok;
}

/* One event line of the loco history format (see docs/formats.md). */
enum lc_field {
	LC_F_T,
	LC_F_EV,
	LC_F_PID,
	LC_F_TID,
	LC_F_ID,
	LC_F_OP,
	LC_F_KEY,
	LC_F_ARGS,
	LC_F_RES,
	LC_F_COUNT,
};

static const char *const lc_field_names[LC_F_COUNT] = {
	"t", "ev", "pid", "tid", "id", "op", "key", "args", "res",
};

struct lc_event {
	struct lc_val f[LC_F_COUNT];
	bool has[LC_F_COUNT];
	enum lc_num_sign sign[LC_F_COUNT];
};

static int lc_field_find(const struct lc_str *name)
{
	int i;

	for (i = 0; i < LC_F_COUNT; i++)
		if (!strcmp(name->data, lc_field_names[i]) &&
		    strlen(lc_field_names[i]) == name->len)
			return i;
	return -1;
}

static bool lc_event_field(struct lc_json *j, struct lc_event *e, int f)
{
	if (e->has[f])
		return lc_json_fail(j, "duplicate field in object");
	e->has[f] = true;
	lc_json_ws(j);
	if (j->p < j->end && (*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))) {
		e->f[f].kind = LC_INT;
		if (!lc_json_num(j, &e->f[f].i, &e->sign[f]))
			return false;
		e->f[f].n = e->sign[f] == LC_NUM_BIG;
		return true;
	}
	return lc_json_val(j, &e->f[f]);
}

static bool lc_event_member(struct lc_json *j, struct lc_event *e)
{
	const struct lc_str *name;
	int f;

	lc_json_ws(j);
	if (j->p == j->end || *j->p != '"')
		return lc_json_fail(j, "expected a field name");
	if (!lc_json_str(j, &name))
		return false;
	lc_json_ws(j);
	if (j->p == j->end || *j->p++ != ':')
		return lc_json_fail(j, "expected ':' after field name");
	f = lc_field_find(name);
	return f < 0 ? lc_json_skip(j) : lc_event_field(j, e, f);
}

static bool lc_event_parse(struct lc_json *j, struct lc_event *e)
{
	memset(e, 0, sizeof(*e));
	lc_json_ws(j);
	if (j->p == j->end || *j->p != '{')
		return lc_json_fail(j, "expected a JSON object");
	j->p++;
	lc_json_ws(j);
	if (j->p < j->end && *j->p == '}')
		goto done;
	for (;;) {
		if (!lc_event_member(j, e))
			return false;
		lc_json_ws(j);
		if (j->p < j->end && *j->p == '}')
			break;
		if (j->p == j->end || *j->p != ',')
			return lc_json_fail(j, "expected ',' or '}' in object");
		j->p++;
	}
done:
	j->p++;
	lc_json_ws(j);
	return j->p == j->end ? true : lc_json_fail(j, "trailing text after object");
}

static int lc_event_need(struct lc_build *b, unsigned line,
			 const struct lc_event *e, int f, bool u64)
{
	if (!e->has[f])
		return lc_build_err(b, line, "missing field \"%s\"", lc_field_names[f]);
	if (e->f[f].kind != LC_INT || e->sign[f] == LC_NUM_NEG ||
	    (!u64 && e->sign[f] == LC_NUM_BIG))
		return lc_build_err(b, line, "field \"%s\" must be a non-negative integer",
				    lc_field_names[f]);
	return 0;
}

static int lc_event_ids(struct lc_build *b, unsigned line,
			const struct lc_event *e)
{
	int ret = lc_event_need(b, line, e, LC_F_T, false);

	if (!ret && e->f[LC_F_T].i == LC_T_INF)
		ret = lc_build_err(b, line, "field \"t\" out of range");
	if (!ret)
		ret = lc_event_need(b, line, e, LC_F_PID, true);
	if (!ret && e->has[LC_F_TID])
		ret = lc_event_need(b, line, e, LC_F_TID, true);
	if (!ret)
		ret = lc_event_need(b, line, e, LC_F_ID, true);
	return ret;
}

static int lc_event_proc(struct lc_build *b, const struct lc_event *e,
			 uint32_t *proc)
{
	uint64_t pid = (uint64_t)e->f[LC_F_PID].i;
	uint64_t tid = e->has[LC_F_TID] ? (uint64_t)e->f[LC_F_TID].i : 0;
	char name[48];

	snprintf(name, sizeof(name), "%" PRIu64 "/%" PRIu64, pid, tid);
	return lc_build_proc(b, pid, tid, name, proc);
}

static const char *lc_event_key(const struct lc_event *e, struct lc_val *key)
{
	const struct lc_val *k = &e->f[LC_F_KEY];

	*key = lc_val_null;
	if (!e->has[LC_F_KEY] || k->kind == LC_NULL)
		return NULL;
	if (k->kind == LC_STR || (k->kind == LC_INT && e->sign[LC_F_KEY] != LC_NUM_NEG)) {
		*key = *k;
		return NULL;
	}
	return "field \"key\" must be a u64 or a string";
}

/* An optional array field; absent reads as []. */
static bool lc_event_list(const struct lc_event *e, int f, struct lc_val *out)
{
	static const struct lc_val none = { .kind = LC_LIST };

	if (e->has[f] && e->f[f].kind != LC_LIST)
		return false;
	*out = e->has[f] ? e->f[f] : none;
	return true;
}

static int lc_event_inv(struct lc_build *b, unsigned line,
			const struct lc_event *e, struct lc_raw *r)
{
	const char *why = NULL;

	if (r->has_inv)
		return lc_build_err(b, line, "duplicate invocation of op id %" PRIu64 " of process %s (line %u)",
				    r->id, b->h->procs[r->proc], r->inv_line);
	if (e->has[LC_F_RES])
		why = "field \"res\" belongs to return events";
	else if (!e->has[LC_F_OP] || e->f[LC_F_OP].kind != LC_STR)
		why = "field \"op\" must be a string";
	else if (r->name && !lc_str_equal(r->name, e->f[LC_F_OP].s))
		why = "op differs from the op of its return event";
	if (!why)
		why = lc_event_key(e, &r->key);
	if (!why && !lc_event_list(e, LC_F_ARGS, &r->args))
		why = "field \"args\" must be an array";
	if (why)
		return lc_build_err(b, line, "%s", why);
	r->name = e->f[LC_F_OP].s;
	r->has_inv = true;
	r->inv = e->f[LC_F_T].i;
	r->inv_line = line;
	return 0;
}

static int lc_event_end(struct lc_build *b, unsigned line,
			const struct lc_event *e, struct lc_raw *r, enum lc_end end)
{
	const char *why = NULL;

	if (r->ret_line)
		return lc_build_err(b, line, "duplicate return of op id %" PRIu64 " of process %s (line %u)",
				    r->id, b->h->procs[r->proc], r->ret_line);
	if (e->has[LC_F_KEY] || e->has[LC_F_ARGS])
		why = "fields \"key\" and \"args\" belong to invocations";
	else if (end != LC_END_RET && e->has[LC_F_RES])
		why = "only \"ret\" events carry \"res\"";
	else if (e->has[LC_F_OP] && e->f[LC_F_OP].kind != LC_STR)
		why = "field \"op\" must be a string";
	else if (e->has[LC_F_OP] && r->name && !lc_str_equal(r->name, e->f[LC_F_OP].s))
		why = "op differs from the op of its invocation";
	if (!why && !lc_event_list(e, LC_F_RES, &r->res))
		why = "field \"res\" must be an array";
	if (why)
		return lc_build_err(b, line, "%s", why);
	if (!r->name && e->has[LC_F_OP])
		r->name = e->f[LC_F_OP].s;
	r->end = (uint8_t)end;
	r->ret = e->f[LC_F_T].i;
	r->ret_line = line;
	return 0;
}

static int lc_event_kind(const struct lc_event *e, int *ev)
{
	static const char *const names[] = { "inv", "ret", "info", "fail" };
	static const int ends[] = { -1, LC_END_RET, LC_END_INFO, LC_END_FAIL };
	size_t i;

	if (!e->has[LC_F_EV] || e->f[LC_F_EV].kind != LC_STR)
		return -EINVAL;
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (lc_val_is_str(&e->f[LC_F_EV], names[i])) {
			*ev = ends[i];
			return 0;
		}
	}
	return -EINVAL;
}

static int lc_event_add(struct lc_build *b, unsigned line,
			const struct lc_event *e)
{
	struct lc_raw *r;
	uint32_t proc;
	bool fresh;
	int ev, ret;

	ret = lc_event_ids(b, line, e);
	if (ret)
		return ret;
	if (lc_event_kind(e, &ev))
		return lc_build_err(b, line, "field \"ev\" must be \"inv\", \"ret\", \"info\" or \"fail\"");
	ret = lc_event_proc(b, e, &proc);
	if (!ret)
		ret = lc_build_raw(b, proc, (uint64_t)e->f[LC_F_ID].i, &r, &fresh);
	if (ret)
		return ret;
	return ev < 0 ? lc_event_inv(b, line, e, r) :
	       lc_event_end(b, line, e, r, (enum lc_end)ev);
}

static int lc_jsonl_line(struct lc_build *b, struct lc_json *j, unsigned line)
{
	struct lc_event e;

	if (!lc_event_parse(j, &e))
		return lc_build_err(b, line, "%s", j->err);
	return lc_event_add(b, line, &e);
}

static bool lc_line_blank(const char *p, const char *end)
{
	for (; p < end; p++)
		if (*p != ' ' && *p != '\t' && *p != '\r')
			return false;
	return true;
}

int lc_jsonl_parse(struct lc_build *b, const char *buf, size_t len)
{
	struct lc_json j = { .a = &b->h->arena };
	const char *p = buf, *end = buf + len;
	unsigned line = 0;
	int ret = 0;

	while (!ret && p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *eol = nl ? nl : end;

		line++;
		if (!lc_line_blank(p, eol)) {
			j.p = p;
			j.end = eol;
			j.err = NULL;
			j.depth = 0;
			ret = lc_jsonl_line(b, &j, line);
		}
		p = nl ? nl + 1 : end;
	}
	free(j.buf);
	return ret;
}
