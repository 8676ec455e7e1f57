/* SPDX-License-Identifier: MIT */
/* The ucx transport's arena descriptor: what a peer needs to reach this
 * node's arena, sent in the control plane's HELLO (docs/formats.md).
 * Little-endian, through loco/wire.h:
 *
 *   u32 magic "UCXL"   u16 version 3   u16 flags (UCX_DESC_F_*)
 *   u32 node id        u32 0
 *   u64 arena address (the rkey's virtual address)
 *   u64 arena length
 *   u64 u64 the arena token: 128 random bits drawn when the arena is set
 *           up, never all zero; a request message of loco's (ucx_am.c)
 *           must carry it, as an RDMA request carries an rkey
 *   bytes packed rkey (ucp_rkey_pack; u16 length first)
 *   bytes UCP worker address of the node's target worker (u16 length first)
 *
 * Internal to the library: every symbol here is hidden. */
#ifndef LOCO_TRANSPORT_UCX_DESC_H
#define LOCO_TRANSPORT_UCX_DESC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loco/transport/transport.h"

#pragma GCC visibility push(hidden)

#define UCX_DESC_MAGIC 0x4c584355u   /* "UCXL" */
#define UCX_DESC_VERSION 3           /* 2: the arena token; 3: requests
					 * carry the incarnation (fencing) */
#define UCX_DESC_FIXED 48            /* bytes before the rkey's length */
#define UCX_TOKEN_WORDS 2            /* the arena token's 64-bit words */
#define UCX_RKEY_MAX 512
/* The node executes READ, WRITE and atomics sent as loco's messages
 * (ucx_am.c) rather than through UCX's RMA and atomics. */
#define UCX_DESC_F_AM 0x1
#define UCX_ADDR_MAX (LOCO_DESC_MAX - UCX_DESC_FIXED - 4 - UCX_RKEY_MAX)
_Static_assert(UCX_ADDR_MAX >= 1024, "room for a worker address");
_Static_assert(UCX_TOKEN_WORDS == 2, "the format carries two words");

/* Whether T, an arena token, is all zero (never drawn). */
static inline bool ucx_token_zero(const uint64_t t[UCX_TOKEN_WORDS])
{
	return !(t[0] | t[1]);
}

struct ucx_desc {
	uint32_t node;
	uint16_t flags;
	uint64_t arena_addr;
	uint64_t arena_len;
	uint64_t arena_token[UCX_TOKEN_WORDS];
	uint16_t rkey_len, addr_len;
	uint8_t rkey[UCX_RKEY_MAX];
	uint8_t addr[UCX_ADDR_MAX];
};

/* Encode D into BUF (CAP bytes); *LEN gets the length. -EMSGSIZE if the
 * rkey or address is longer than this format carries or the whole does
 * not fit CAP, -EINVAL for an empty rkey, address or arena or an all-zero
 * arena token. */
int ucx_desc_pack(const struct ucx_desc *d, void *buf, size_t cap, size_t *len);
/* Decode LEN bytes: 0, or -LOCO_EPROTO (wrong magic or version, unknown
 * flags, bad lengths, an empty arena or one that wraps the address space,
 * an all-zero arena token). */
int ucx_desc_unpack(const void *buf, size_t len, struct ucx_desc *out);

#pragma GCC visibility pop

#endif
