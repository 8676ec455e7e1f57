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
