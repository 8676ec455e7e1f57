/* SPDX-License-Identifier: MIT */
/* The ucx transport's arena descriptor: what a peer needs to reach this
 * node's arena, sent in the control plane's HELLO (docs/formats.md).
 * Little-endian, through loco/wire.h:
 *
 *   u32 magic "UCXL"   u16 version 4   u16 flags (UCX_DESC_F_*)
 *   u32 node id        u32 the node the descriptor is for (its receiver)
 *   u64 arena address (the rkey's virtual address)
 *   u64 arena length
 *   u64 the receiver's incarnation the credential is for
 *   u64 u64 the credential: a keyed hash of the node's secret (drawn with
 *           the arena) over (node, receiver, incarnation); a request
 *           message of loco's (ucx_am.c) from that receiver's incarnation
 *           must carry it, as an RDMA request carries an rkey. All zero:
 *           none (the sender did not know the receiver's incarnation yet;
 *           the core says hello again once it does)
 *   bytes packed rkey (ucp_rkey_pack; u16 length first)
 *   bytes UCP worker address of the node's target worker (u16 length first)
 *
 * Each peer gets its own descriptor (ucx_arena_desc_for): one credential
 * per (client node, incarnation), so one member cannot act as another.
 * Internal to the library: every symbol here is hidden. */
#ifndef LOCO_TRANSPORT_UCX_DESC_H
#define LOCO_TRANSPORT_UCX_DESC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loco/transport/transport.h"

#pragma GCC visibility push(hidden)

#define UCX_DESC_MAGIC 0x4c584355u   /* "UCXL" */
#define UCX_DESC_VERSION 4           /* 2: the arena token; 3: requests
					 * carry the incarnation (fencing);
					 * 4: a credential per (client node,
					 * incarnation) instead of the token */
#define UCX_DESC_FIXED 56            /* bytes before the rkey's length */
#define UCX_CRED_WORDS 2             /* the credential's 64-bit words */
#define UCX_RKEY_MAX 512
/* The node executes READ, WRITE and atomics sent as loco's messages
 * (ucx_am.c) rather than through UCX's RMA and atomics. */
#define UCX_DESC_F_AM 0x1
#define UCX_ADDR_MAX (LOCO_DESC_MAX - UCX_DESC_FIXED - 4 - UCX_RKEY_MAX)
_Static_assert(UCX_ADDR_MAX >= 1024, "room for a worker address");
_Static_assert(UCX_CRED_WORDS == 2, "the format carries two words");

/* Whether C, a credential, is all zero (none). */
static inline bool ucx_cred_zero(const uint64_t c[UCX_CRED_WORDS])
{
	return !(c[0] | c[1]);
}

struct ucx_desc {
	uint32_t node;
	uint16_t flags;
	uint32_t for_node;           /* the receiver */
	uint64_t arena_addr;
	uint64_t arena_len;
	uint64_t for_incarnation;    /* the receiver's the credential is for */
	uint64_t cred[UCX_CRED_WORDS];
	uint16_t rkey_len, addr_len;
	uint8_t rkey[UCX_RKEY_MAX];
	uint8_t addr[UCX_ADDR_MAX];
};

/* Encode D into BUF (CAP bytes); *LEN gets the length. -EMSGSIZE if the
 * rkey or address is longer than this format carries or the whole does
 * not fit CAP, -EINVAL for an empty rkey, address or arena. */
int ucx_desc_pack(const struct ucx_desc *d, void *buf, size_t cap, size_t *len);
/* Decode LEN bytes: 0, or -LOCO_EPROTO (wrong magic or version, unknown
 * flags, bad lengths, an empty arena or one that wraps the address space). */
int ucx_desc_unpack(const void *buf, size_t len, struct ucx_desc *out);
/* The version LEN bytes of a descriptor say they are, 0 if they are not
 * one (too short, another magic): for the error that names it. */
unsigned ucx_desc_version(const void *buf, size_t len);

#pragma GCC visibility pop

#endif
