/* SPDX-License-Identifier: MIT */
/* Control-plane message encoding: little-endian fixed-width fields and
 * length-prefixed strings, every read length-checked. A failed read or
 * write sets err (sticky) and returns zeros; check err once at the end. */
#ifndef LOCO_WIRE_H
#define LOCO_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define LOCO_WIRE_MAGIC 0x4f434f4cu   /* "LOCO" little-endian */
#define LOCO_WIRE_MAX   (64u * 1024)  /* largest payload accepted */

enum loco_msg_type {
	LOCO_MSG_HELLO = 1,
	LOCO_MSG_HELLO_ACK = 2,
	LOCO_MSG_JOIN = 3,
	LOCO_MSG_JOIN_ACK = 4,
	LOCO_MSG_REGION_OPEN = 5,
	LOCO_MSG_REGION_ACK = 6,
	LOCO_MSG_REGION_DROP = 7,
	LOCO_MSG_REGION_DROP_ACK = 8,
	LOCO_MSG_AUTH = 9,         /* cluster-key exchange (loco/auth.h) */
	LOCO_MSG_AUTH_CHAL = 10,
	LOCO_MSG_AUTH_PROOF = 11,
	LOCO_MSG_AUTH_ACK = 12,
	LOCO_MSG_MIRROR_JOIN = 13,  /* mirrors (loco/mirror.c) */
	LOCO_MSG_MIRROR_JOIN_ACK = 14,
	LOCO_MSG_MIRROR_TABLE = 15,
	LOCO_MSG_MIRROR_TABLE_ACK = 16,
	LOCO_MSG_TAKEOVER = 17,
	LOCO_MSG_TAKEOVER_ACK = 18,
	LOCO_MSG_REGION_FIND = 19,     /* the region holding an address */
	LOCO_MSG_REGION_FIND_ACK = 20,
	LOCO_MSG_FENCE = 21,           /* fence a node's incarnation here */
	LOCO_MSG_FENCE_ACK = 22,
};

struct loco_msg_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len;        /* payload bytes */
	uint32_t reserved;
};
#define LOCO_MSG_HDR_LEN 16

struct loco_wbuf {
	uint8_t *p;
	size_t len, cap;
	int err;
};

struct loco_rbuf {
	const uint8_t *p;
	size_t len, pos;
	int err;
};

void loco_wbuf_init(struct loco_wbuf *w);
void loco_wbuf_fini(struct loco_wbuf *w);
void loco_put_u16(struct loco_wbuf *w, uint16_t v);
void loco_put_u32(struct loco_wbuf *w, uint32_t v);
void loco_put_u64(struct loco_wbuf *w, uint64_t v);
void loco_put_bytes(struct loco_wbuf *w, const void *p, uint16_t n);
void loco_put_str(struct loco_wbuf *w, const char *s);

void loco_rbuf_init(struct loco_rbuf *r, const void *p, size_t len);
uint16_t loco_get_u16(struct loco_rbuf *r);
uint32_t loco_get_u32(struct loco_rbuf *r);
uint64_t loco_get_u64(struct loco_rbuf *r);
/* Copies at most CAP bytes; longer fields set err. Returns the length. */
uint16_t loco_get_bytes(struct loco_rbuf *r, void *out, size_t cap);
/* NUL-terminated into OUT[CAP]; a string of CAP bytes or more, or one
 * holding a NUL, sets err. */
void loco_get_str(struct loco_rbuf *r, char *out, size_t cap);
/* 0 if every field was read and nothing is left over, else -LOCO_EPROTO. */
int loco_rbuf_done(const struct loco_rbuf *r);

void loco_hdr_encode(uint8_t out[LOCO_MSG_HDR_LEN], uint16_t type, uint32_t len);
/* Checks magic, version and length: 0, -LOCO_EPROTO or -LOCO_EVERSION. */
int loco_hdr_decode(const uint8_t in[LOCO_MSG_HDR_LEN], struct loco_msg_hdr *out);

#endif
