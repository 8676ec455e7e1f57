/* SPDX-License-Identifier: MIT */
/* Compact remote addresses: node id in the top 16 bits, offset in that
 * node's arena in the low 48, so they fit in one 8-byte word inside remote
 * data structures (RACE slots, B+tree pointers). 0 is never a valid region
 * address (arena offset 0 is reserved), so it can mean "null". */
#ifndef LOCO_RADDR_H
#define LOCO_RADDR_H

#include <stdint.h>

typedef uint64_t loco_raddr_t;

/* The memory spaces of a node that remote operations reach: its arena
 * (host memory, registered once) and, on transports that have it, a small
 * device memory (verbs: NIC memory, ibv_alloc_dm). Offsets are per space.
 * Compact remote addresses always point into the arena. */
enum loco_space {
	LOCO_SPACE_ARENA = 0,
	LOCO_SPACE_DM = 1,
};

/* What peers may do to a region: its remote access, declared when the
 * region is made (region flags, loco/loco.h) and enforced on every
 * transport (verbs: the region's own memory registration grants exactly
 * this, and the NIC refuses the rest). Without any of these flags a region
 * allows all three (LOCO_REGION_REMOTE_ALL), so code written before they
 * existed keeps working. A zero-length READ reads nothing and needs none. */
#define LOCO_REGION_REMOTE_READ   0x2u  /* READ */
#define LOCO_REGION_REMOTE_WRITE  0x4u  /* WRITE */
#define LOCO_REGION_REMOTE_ATOMIC 0x8u  /* CAS and FAA */
/* No remote access at all: memory only this node's CPU touches (WRITE
 * sources, READ destinations, join marks). Alone, never with the above. */
#define LOCO_REGION_REMOTE_NONE   0x10u
#define LOCO_REGION_REMOTE_ALL (LOCO_REGION_REMOTE_READ | \
				LOCO_REGION_REMOTE_WRITE | \
				LOCO_REGION_REMOTE_ATOMIC)
#define LOCO_REGION_REMOTE_MASK (LOCO_REGION_REMOTE_ALL | \
				 LOCO_REGION_REMOTE_NONE)

/* The access an operation needs (OPCODE: LOCO_BATCH_READ 0, WRITE 1,
 * CAS 2, FAA 3, as enum loco_opcode). */
static inline unsigned loco_op_access(unsigned opcode)
{
	return opcode < 2 ? LOCO_REGION_REMOTE_READ << opcode :
	       LOCO_REGION_REMOTE_ATOMIC;
}

/* The access FLAGS (region flags) declare: their LOCO_REGION_REMOTE_*
 * bits, all three when they name none, 0 for LOCO_REGION_REMOTE_NONE. */
static inline unsigned loco_access_of(unsigned flags)
{
	unsigned a = flags & LOCO_REGION_REMOTE_ALL;
	return flags & LOCO_REGION_REMOTE_NONE ? 0 :
	       a ? a : LOCO_REGION_REMOTE_ALL;
}

#define LOCO_RADDR_OFF_BITS 48
#define LOCO_RADDR_OFF_MASK ((UINT64_C(1) << LOCO_RADDR_OFF_BITS) - 1)
#define LOCO_RADDR_NULL ((loco_raddr_t)0)

static inline loco_raddr_t loco_raddr(uint32_t node, uint64_t off)
{
	return ((uint64_t)node << LOCO_RADDR_OFF_BITS) | (off & LOCO_RADDR_OFF_MASK);
}

static inline uint32_t loco_raddr_node(loco_raddr_t ra)
{
	return (uint32_t)(ra >> LOCO_RADDR_OFF_BITS);
}

static inline uint64_t loco_raddr_off(loco_raddr_t ra)
{
	return ra & LOCO_RADDR_OFF_MASK;
}

#endif
