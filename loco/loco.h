/* SPDX-License-Identifier: MIT */
/* loco core runtime: manager, regions, remote operations, ack keys, fences,
 * stats. See docs/api.md and docs/ordering.md.
 *
 * Threading: a struct loco_mgr is shared by all threads of a process. Each
 * application thread that issues remote operations owns one struct
 * loco_thread; ack keys and batches belong to the thread that made them. */
#ifndef LOCO_LOCO_H
#define LOCO_LOCO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/error.h>
#include <loco/hosts.h>
#include <loco/log.h>
#include <loco/raddr.h>

#define LOCO_NAME_MAX 128
#define LOCO_PROTO_VERSION 3   /* control-plane messages (loco/wire.h) */

struct loco_mgr;
struct loco_thread;

/* ---- manager ---------------------------------------------------------- */

/* Start a node: load the hosts file, open the transport, create and
 * register the arena, start the control plane listening on this node's
 * address. Returns 0 or -errno / -LOCO_E* (with the reason logged). */
int loco_mgr_create(const struct loco_opts *opts, struct loco_mgr **out);

/* Stop the control plane, release the arena (the shm backing file is
 * removed), free everything. Threads and channels must be finished first. */
void loco_mgr_destroy(struct loco_mgr *mgr);

/* Wait until every channel created on this node has joined all its
 * participants. Returns 0, -ETIMEDOUT (logging what is missing) or the
 * first join error (e.g. -LOCO_EMISMATCH). TIMEOUT_MS < 0: the default. */
int loco_mgr_wait_ready(struct loco_mgr *mgr, int timeout_ms);

uint32_t loco_mgr_id(const struct loco_mgr *mgr);
const struct loco_hosts *loco_mgr_hosts(const struct loco_mgr *mgr);
const char *loco_mgr_transport(const struct loco_mgr *mgr);
int loco_mgr_timeout_ms(const struct loco_mgr *mgr);
/* Bit mask of the ids with role compute, excluding this node. */
uint64_t loco_mgr_compute_peers(const struct loco_mgr *mgr);
/* Lowest id with role memory, or -ENOENT. */
int loco_mgr_first_memnode(const struct loco_mgr *mgr);

/* Serve the control plane only (memory nodes): returns when SIGINT or
 * SIGTERM arrives, or after TIMEOUT_MS if >= 0. */
int loco_mgr_serve(struct loco_mgr *mgr, int timeout_ms);

/* ---- regions ------------------------------------------------------------ */

/* A piece of this node's registered memory: its arena, or its device
 * memory for a LOCO_REGION_HOT region that found room there. */
struct loco_region {
	char name[LOCO_NAME_MAX]; /* "chan.region" */
	void *base;               /* local address; NULL in device memory */
	uint64_t off;             /* offset in the arena (or device memory) */
	uint64_t len;
	uint32_t space;           /* enum loco_space (loco/raddr.h) */
};

/* Descriptor of a region on some node (possibly this one): everything
 * remote operations need. Bounds of every op are checked against it. */
struct loco_rregion {
	uint32_t node;
	uint32_t space;           /* enum loco_space: LOCO_SPACE_ARENA unless hot */
	uint64_t off;             /* offset in that node's arena (or device memory) */
	uint64_t len;
};

/* Region flags. */
/* Small and hot (lock words, counters): place the region in the
 * transport's device memory (verbs: NIC memory, LOCO_VERBS_DM_BYTES) when
 * it has room, which spares remote atomics the PCIe trip to host memory;
 * else in the arena, with one warning per node (shm and shm-weak have no
 * device memory: always the arena). The CPU cannot load or store device
 * memory: base is NULL there, and every access, by this node too, goes
 * through remote operations (to self). Device memory is allocated in
 * 8-byte units (arena: 64). */
#define LOCO_REGION_HOT 0x1u

/* Allocate LEN zeroed bytes of this node's arena, 64-byte aligned, under a
 * unique NAME. -EEXIST if the name is taken, -ENOMEM if the arena is full. */
int loco_region_alloc(struct loco_mgr *mgr, const char *name, uint64_t len,
		      struct loco_region *out);
/* As loco_region_alloc, with FLAGS (LOCO_REGION_HOT); OUT->space says where
 * the region went. -EINVAL for an unknown flag. */
int loco_region_alloc_ex(struct loco_mgr *mgr, const char *name, uint64_t len,
			 unsigned flags, struct loco_region *out);
void loco_region_free(struct loco_mgr *mgr, struct loco_region *reg);
/* Descriptor of a local region, for operations through the transport. */
void loco_region_desc(const struct loco_mgr *mgr, const struct loco_region *reg,
		      struct loco_rregion *out);
/* Bytes of device memory this node offers (0 without, e.g. on shm) and
 * how many of them regions use. */
void loco_mgr_dm_usage(struct loco_mgr *mgr, uint64_t *total, uint64_t *used);
/* Create-or-open region NAME of LEN bytes on node NODE (usually a memory
 * node; this node's own id works too, without a message): the first
 * caller gets a zeroed region, later callers the same one. Always in the
 * node's arena. -LOCO_EMISMATCH if it exists with another size;
 * -ETIMEDOUT if the node does not answer. */
int loco_region_open(struct loco_mgr *mgr, uint32_t node, const char *name,
		     uint64_t len, struct loco_rregion *out);

/* loco_region_drop: also every region of channel NAME's tree, NAME.* and
 * NAME/... (a channel's hosted regions and its sub-channels'). */
#define LOCO_DROP_TREE 0x1u

/* Free create-or-open regions on node NODE (loco_region_open,
 * loco_channel_open_hosted): NAME, and with LOCO_DROP_TREE in FLAGS its
 * channel tree. Their space returns to NODE's arena; a later open of a
 * name starts from zeroed memory. All or nothing: -EBUSY, and nothing
 * freed, if a channel in NODE's own process still holds one of them (or
 * NAME is a channel's private region there). *COUNT (may be NULL) gets
 * the number freed. Returns 0, -ENOENT (no such region), -EINVAL,
 * -EBUSY or -ETIMEDOUT (NODE does not answer); the reason is logged.
 * Caller: no node may use the regions any more (a descriptor kept past
 * the drop addresses memory that later regions reuse), e.g. the last
 * node of a run, after every other one finished or died. */
int loco_region_drop(struct loco_mgr *mgr, uint32_t node, const char *name,
		     unsigned flags, unsigned *count);

/* ---- threads, ack keys ------------------------------------------------ */

/* Thread context for the calling OS thread. With --cpu-bind core
 * (loco_opts.cpu_bind) it also binds the calling thread to one core: the
 * k-th context of a node gets core (r + k*n) mod ncores of the cores its
 * process may use, those near the transport's device first (verbs: the
 * NIC's), where n nodes of the hosts file share this node's host string
 * and r is its rank among them by id. The binding outlives the context;
 * threads the caller creates afterwards inherit it. A binding the OS
 * refuses is a warning, not an error. */
int loco_thread_create(struct loco_mgr *mgr, struct loco_thread **out);
/* Waits (bounded) for the thread's outstanding ops, then frees it. */
void loco_thread_destroy(struct loco_thread *thr);
struct loco_mgr *loco_thread_mgr(const struct loco_thread *thr);
/* The first CPU of the core loco_thread_create bound THR's OS thread to,
 * or -1 when it did not bind it (--cpu-bind none, or the OS refused). */
int loco_thread_cpu(const struct loco_thread *thr);

/* Completion handle for async ops, valid only on the posting thread: the
 * set of peers involved and the last ticket it covers. */
struct loco_ack {
	uint64_t peers;
	uint64_t ticket;
};

static inline void loco_ack_clear(struct loco_ack *ack)
{
	ack->peers = 0;
	ack->ticket = 0;
}

/* DST waits for everything either waited for. */
static inline void loco_ack_union(struct loco_ack *dst, const struct loco_ack *src)
{
	dst->peers |= src->peers;
	if (src->ticket > dst->ticket)
		dst->ticket = src->ticket;
}

/* 1 if complete, 0 if not yet, or the error of a failed op. Polls. */
int loco_ack_test(struct loco_thread *thr, const struct loco_ack *ack);
/* 0 when complete, -ETIMEDOUT, or the error of a failed op. Spins
 * briefly, then yields. TIMEOUT_MS < 0: the manager default. */
int loco_ack_wait(struct loco_thread *thr, const struct loco_ack *ack,
		  int timeout_ms);

/* ---- remote operations -------------------------------------------------
 * All take a region descriptor and an offset into it; out-of-bounds (or a
 * misaligned atomic) returns -EINVAL and posts nothing. ACK may be NULL; if
 * not, the op is added to it (union). Buffers: the source of a WRITE and the
 * destination of a READ or atomic must stay untouched until completion.
 *
 * Ordering: ops of one thread to one peer are placed in post order; a READ
 *   or atomic completes only after earlier WRITEs on that pair are placed;
 *   nothing is ordered across peers or threads without a fence.
 * Completion: when the ack covering the op tests complete. A completed
 *   WRITE is acknowledged, not necessarily placed (see loco_fence).
 * Caller: the thread that owns THR. */
int loco_post_read(struct loco_thread *thr, const struct loco_rregion *rr,
		   uint64_t off, void *dst, uint32_t len, struct loco_ack *ack);
int loco_post_write(struct loco_thread *thr, const struct loco_rregion *rr,
		    uint64_t off, const void *src, uint32_t len,
		    struct loco_ack *ack);
/* 8-byte aligned compare-and-swap; *OLD receives the previous value. */
int loco_post_cas(struct loco_thread *thr, const struct loco_rregion *rr,
		  uint64_t off, uint64_t expect, uint64_t desired, uint64_t *old,
		  struct loco_ack *ack);
/* 8-byte aligned fetch-and-add; *OLD receives the previous value. */
int loco_post_faa(struct loco_thread *thr, const struct loco_rregion *rr,
		  uint64_t off, uint64_t add, uint64_t *old, struct loco_ack *ack);

/* Synchronous forms: post, then wait with the default timeout.
 * Ordering/Completion as above; the op is complete on return 0. On
 * -ETIMEDOUT the thread's QP to that peer goes to the error state: the op
 * never touches the buffer after the return, and later ops of THR to
 * that peer fail (docs/api.md). */
int loco_read(struct loco_thread *thr, const struct loco_rregion *rr,
	      uint64_t off, void *dst, uint32_t len);
int loco_write(struct loco_thread *thr, const struct loco_rregion *rr,
	       uint64_t off, const void *src, uint32_t len);
int loco_cas(struct loco_thread *thr, const struct loco_rregion *rr,
	     uint64_t off, uint64_t expect, uint64_t desired, uint64_t *old);
int loco_faa(struct loco_thread *thr, const struct loco_rregion *rr,
	     uint64_t off, uint64_t add, uint64_t *old);

/* Same operations addressed by a compact remote address (loco/raddr.h),
 * bounds-checked against the whole arena of the target node. */
int loco_post_read_raddr(struct loco_thread *thr, loco_raddr_t ra, void *dst,
			 uint32_t len, struct loco_ack *ack);
int loco_post_write_raddr(struct loco_thread *thr, loco_raddr_t ra,
			  const void *src, uint32_t len, struct loco_ack *ack);
int loco_post_cas_raddr(struct loco_thread *thr, loco_raddr_t ra,
			uint64_t expect, uint64_t desired, uint64_t *old,
			struct loco_ack *ack);
int loco_post_faa_raddr(struct loco_thread *thr, loco_raddr_t ra, uint64_t add,
			uint64_t *old, struct loco_ack *ack);

/* ---- batches: several ops, one doorbell per peer, one completion ----- */

#define LOCO_BATCH_MAX 32

struct loco_batch_op {
	uint8_t opcode;
	uint8_t space;            /* enum loco_space: where arena_off points
				   * (the arena, or device memory) */
	uint32_t peer;
	uint64_t arena_off;
	void *local;
	uint32_t len;
	uint64_t compare;
	uint64_t operand;
};

struct loco_batch {
	struct loco_thread *thr;
	uint32_t n;
	int err; /* first error from an add; reported by post */
	struct loco_batch_op op[LOCO_BATCH_MAX];
};

void loco_batch_init(struct loco_batch *b, struct loco_thread *thr);
/* Adds record bounds errors in b->err (-EINVAL) or -E2BIG when full. */
void loco_batch_read(struct loco_batch *b, const struct loco_rregion *rr,
		     uint64_t off, void *dst, uint32_t len);
void loco_batch_write(struct loco_batch *b, const struct loco_rregion *rr,
		      uint64_t off, const void *src, uint32_t len);
void loco_batch_cas(struct loco_batch *b, const struct loco_rregion *rr,
		    uint64_t off, uint64_t expect, uint64_t desired, uint64_t *old);
void loco_batch_faa(struct loco_batch *b, const struct loco_rregion *rr,
		    uint64_t off, uint64_t add, uint64_t *old);
/* Post everything added: ops to one peer go as one linked list with one
 * doorbell and one signalled completion. Empties the batch.
 * Ordering: as for single ops, in the order added.
 * Completion: ACK (unioned) covers every op of the batch.
 * Caller: the owner of the batch's thread. Returns 0 or the first error. */
int loco_batch_post(struct loco_batch *b, struct loco_ack *ack);

/* ---- fences (LOCO §5.3) ------------------------------------------------ */

enum loco_fence_scope {
	LOCO_FENCE_PAIR,   /* this thread's ops to PEER */
	LOCO_FENCE_THREAD, /* this thread's ops to every peer */
	LOCO_FENCE_GLOBAL, /* every thread of this node, every peer */
};

/* Ordering: remote ops in SCOPE issued before the fence are complete and
 *   placed (visible to any reader) before the fence returns, so a WRITE
 *   after the fence is a release: a reader that sees it sees them too.
 * Completion: synchronous. Costs one zero-length READ per pair that has
 *   unplaced writes; otherwise only waits for what is outstanding.
 * Caller: any thread; PEER is used only for LOCO_FENCE_PAIR.
 * Returns 0, -ETIMEDOUT or the error of a failed op in scope. */
int loco_fence(struct loco_thread *thr, enum loco_fence_scope scope,
	       uint32_t peer);

/* ---- stats -------------------------------------------------------------- */

struct loco_stats {
	uint64_t reads, writes, cas, faa; /* verbs posted (fence READs included) */
	uint64_t bytes_read, bytes_written;
	uint64_t doorbells;               /* post calls reaching the transport */
	uint64_t rtts;                    /* waits that covered new ops */
	uint64_t fences;
};

static inline uint64_t loco_stats_verbs(const struct loco_stats *s)
{
	return s->reads + s->writes + s->cas + s->faa;
}

/* Snapshot of THR's counters (callable from any thread). */
void loco_thread_stats(struct loco_thread *thr, struct loco_stats *out);
/* Sum over every thread of the manager, including destroyed ones. */
void loco_mgr_stats(struct loco_mgr *mgr, struct loco_stats *out);

/* Monotonic time in nanoseconds (CLOCK_MONOTONIC). */
uint64_t loco_now_ns(void);

#endif
