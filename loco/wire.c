/* SPDX-License-Identifier: MIT */
#include "loco/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <loco/error.h>
#include <loco/loco.h>

void loco_wbuf_init(struct loco_wbuf *w)
{
	memset(w, 0, sizeof(*w));
}

void loco_wbuf_fini(struct loco_wbuf *w)
{
	free(w->p);
	memset(w, 0, sizeof(*w));
}

static uint8_t *wbuf_reserve(struct loco_wbuf *w, size_t n)
{
	if (w->err)
		return NULL;
	if (w->len + n > LOCO_WIRE_MAX) {
		w->err = -E2BIG;
		return NULL;
	}
	if (w->len + n > w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 256;
		while (cap < w->len + n)
			cap *= 2;
		uint8_t *p = realloc(w->p, cap);
		if (!p) {
			w->err = -ENOMEM;
			return NULL;
		}
		w->p = p;
		w->cap = cap;
	}
	uint8_t *at = w->p + w->len;
	w->len += n;
	return at;
}

static void put_le(struct loco_wbuf *w, uint64_t v, unsigned n)
{
	uint8_t *p = wbuf_reserve(w, n);
	for (unsigned i = 0; p && i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

void loco_put_u16(struct loco_wbuf *w, uint16_t v) { put_le(w, v, 2); }
void loco_put_u32(struct loco_wbuf *w, uint32_t v) { put_le(w, v, 4); }
void loco_put_u64(struct loco_wbuf *w, uint64_t v) { put_le(w, v, 8); }

void loco_put_bytes(struct loco_wbuf *w, const void *src, uint16_t n)
{
	loco_put_u16(w, n);
	uint8_t *p = wbuf_reserve(w, n);
	if (p && n)
		memcpy(p, src, n);
}

void loco_put_str(struct loco_wbuf *w, const char *s)
{
	size_t n = strlen(s);
	if (n > UINT16_MAX) {
		w->err = -E2BIG;
		return;
	}
	loco_put_bytes(w, s, (uint16_t)n);
}

void loco_rbuf_init(struct loco_rbuf *r, const void *p, size_t len)
{
	r->p = p;
	r->len = len;
	r->pos = 0;
	r->err = 0;
}

static const uint8_t *rbuf_take(struct loco_rbuf *r, size_t n)
{
	if (r->err || r->len - r->pos < n) {
		r->err = -LOCO_EPROTO;
		return NULL;
	}
	const uint8_t *at = r->p + r->pos;
	r->pos += n;
	return at;
}

static uint64_t get_le(struct loco_rbuf *r, unsigned n)
{
	const uint8_t *p = rbuf_take(r, n);
	uint64_t v = 0;
	for (unsigned i = 0; p && i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

uint16_t loco_get_u16(struct loco_rbuf *r) { return (uint16_t)get_le(r, 2); }
uint32_t loco_get_u32(struct loco_rbuf *r) { return (uint32_t)get_le(r, 4); }
uint64_t loco_get_u64(struct loco_rbuf *r) { return get_le(r, 8); }

uint16_t loco_get_bytes(struct loco_rbuf *r, void *out, size_t cap)
{
	uint16_t n = loco_get_u16(r);
	if (!r->err && n > cap) {
		r->err = -LOCO_EPROTO;
		return 0;
	}
	const uint8_t *p = rbuf_take(r, n);
	if (!p)
		return 0;
	memcpy(out, p, n);
	return n;
}

void loco_get_str(struct loco_rbuf *r, char *out, size_t cap)
{
	uint16_t n = loco_get_bytes(r, out, cap - 1);
	if (r->err || memchr(out, 0, n)) {
		r->err = -LOCO_EPROTO;
		out[0] = 0;
		return;
	}
	out[n] = 0;
}

int loco_rbuf_done(const struct loco_rbuf *r)
{
	if (r->err || r->pos != r->len)
		return -LOCO_EPROTO;
	return 0;
}

void loco_hdr_encode(uint8_t out[LOCO_MSG_HDR_LEN], uint16_t type, uint32_t len)
{
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_u32(&w, LOCO_WIRE_MAGIC);
	loco_put_u16(&w, LOCO_PROTO_VERSION);
	loco_put_u16(&w, type);
	loco_put_u32(&w, len);
	loco_put_u32(&w, 0);
	if (!w.err)
		memcpy(out, w.p, LOCO_MSG_HDR_LEN);
	else
		memset(out, 0, LOCO_MSG_HDR_LEN);
	loco_wbuf_fini(&w);
}

int loco_hdr_decode(const uint8_t in[LOCO_MSG_HDR_LEN], struct loco_msg_hdr *out)
{
	struct loco_rbuf r;
	struct loco_msg_hdr h;
	loco_rbuf_init(&r, in, LOCO_MSG_HDR_LEN);
	h.magic = loco_get_u32(&r);
	h.version = loco_get_u16(&r);
	h.type = loco_get_u16(&r);
	h.len = loco_get_u32(&r);
	h.reserved = loco_get_u32(&r);
	if (h.magic != LOCO_WIRE_MAGIC)
		return -LOCO_EPROTO;
	if (h.version != LOCO_PROTO_VERSION)
		return -LOCO_EVERSION;
	if (h.len > LOCO_WIRE_MAX)
		return -LOCO_EPROTO;
	*out = h;
	return 0;
}
