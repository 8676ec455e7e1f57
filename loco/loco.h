/* SPDX-License-Identifier: MIT */
/* loco core runtime: manager, regions, remote operations, ack keys, fences,
 * stats. See docs/api.md and docs/ordering.md.
 *
 * Threading: a struct loco_mgr is shared by all threads of a process. Each
 * application thread that issues remote operations owns one struct
 * loco_thread; ack keys and batches belong to the thread that made them. */
#ifndef LOCO_LOCO_H
#define LOCO_LOCO_H

#include <assert.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <loco/error.h>
#include <loco/guard.h>
#include <loco/hosts.h>
#include <loco/log.h>
#include <loco/raddr.h>

#define LOCO_NAME_MAX 128
#define LOCO_PROTO_VERSION 5   /* control-plane messages (loco/wire.h) */

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
	uint32_t access;          /* LOCO_REGION_REMOTE_* it allows peers */
};

/* Descriptor of a region on some node (possibly this one): everything
 * remote operations need. Bounds of every op are checked against it, and
 * its access against the region's declaration (docs/security.md). */
struct loco_rregion {
	uint32_t node;            /* first, then space: loco_direct_span */
	uint32_t space;           /* enum loco_space: LOCO_SPACE_ARENA unless hot */
	uint64_t off;             /* offset in that node's arena (or device memory) */
	uint64_t len;
	/* LOCO_REGION_REMOTE_* the region allows, as the core got it from the
	 * region's node. 0 in a descriptor a program builds itself (from an
	 * offset read from remote memory): its operations are then checked
	 * out of line against the regions this node knows there. */
	uint32_t access;
	uint32_t reserved;
};
static_assert(offsetof(struct loco_rregion, node) == 0 &&
	      offsetof(struct loco_rregion, space) == 4 &&
	      LOCO_SPACE_ARENA == 0 &&
	      __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	      "the inline path reads node and space as one little-endian word");

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
/* LOCO_REGION_REMOTE_READ, _WRITE, _ATOMIC, _NONE (loco/raddr.h): what
 * peers may do to the region. Every operation (this node's own, through
 * the transport, too) outside a region that allows it fails with -EACCES,
 * logged once per region and operation. Without any of them: all three. */
#define LOCO_REGION_FLAGS (LOCO_REGION_HOT | LOCO_REGION_REMOTE_MASK)

/* Allocate LEN zeroed bytes of this node's arena, 64-byte aligned, under a
 * unique NAME, with every remote access (loco_region_alloc_ex to choose).
 * -EEXIST if the name is taken, -ENOMEM if the arena is full. */
int loco_region_alloc(struct loco_mgr *mgr, const char *name, uint64_t len,
		      struct loco_region *out);
/* As loco_region_alloc, with FLAGS (LOCO_REGION_HOT, LOCO_REGION_REMOTE_*);
 * OUT->space says where the region went, OUT->access what peers may do.
 * -EINVAL for an unknown flag or LOCO_REGION_REMOTE_NONE with another
 * access flag; the transport's error if it cannot register the region
 * (verbs: its memory registration, logged). */
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
 * caller gets a zeroed region, later callers the same one. In the node's
 * arena (device memory: loco_region_open_ex), with every remote access.
 * -LOCO_EMISMATCH if it exists with another size or access; -ETIMEDOUT if
 * the node does not answer. */
int loco_region_open(struct loco_mgr *mgr, uint32_t node, const char *name,
		     uint64_t len, struct loco_rregion *out);
/* As loco_region_open with FLAGS: LOCO_REGION_HOT places a region that
 * does not exist yet in NODE's device memory when it has room (else its
 * arena, warned once on NODE); an existing one is opened where it is.
 * OUT->space says which. LOCO_REGION_REMOTE_READ, _WRITE, _ATOMIC: the
 * remote access the region allows (none of them: all three), which every
 * opener must declare alike (-LOCO_EMISMATCH otherwise, the message
 * naming both). -EINVAL for an unknown flag or LOCO_REGION_REMOTE_NONE (a
 * create-or-open region is for peers). */
int loco_region_open_ex(struct loco_mgr *mgr, uint32_t node, const char *name,
			uint64_t len, unsigned flags, struct loco_rregion *out);
/* The descriptor of the region of node NODE that holds [OFF, OFF+LEN) of
 * its SPACE: one this node knows there (joined, opened), else the
 * create-or-open region NODE names when asked (REGION_FIND, once). For an
 * address read from remote memory (a pointer in a remote data structure):
 * the descriptor carries the region's access, so its operations may take
 * the inline path. Returns 0, -EACCES (no such region), -EINVAL (NODE not
 * in the hosts file), or the request's error (-ETIMEDOUT, -LOCO_EDOWN).
 * Caller: any thread. */
int loco_region_at(struct loco_mgr *mgr, uint32_t node, uint32_t space,
		   uint64_t off, uint64_t len, struct loco_rregion *out);

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
/* Wait for the thread's outstanding ops and place its WRITEs (a thread
 * fence), then free it, whatever the fence returned. Returns 0, or what
 * went wrong with that remote work: -ETIMEDOUT (ops still outstanding
 * after the default timeout: they may still land) or the error of a
 * failed op (the thread's QP to that peer failed earlier, e.g. after a
 * synchronous op timed out); the reason is also logged. NULL: 0.
 * Ordering: on 0, every remote op of THR is complete and placed.
 * Completion: synchronous; THR is gone in every case.
 * Caller: the thread that owns THR. */
int loco_thread_destroy(struct loco_thread *thr);
struct loco_mgr *loco_thread_mgr(const struct loco_thread *thr);
/* The first CPU of the core loco_thread_create bound THR's OS thread to,
 * or -1 when it did not bind it (--cpu-bind none, or the OS refused). */
int loco_thread_cpu(const struct loco_thread *thr);

/* Completion handle for async ops, valid only on the posting thread: the
 * set of peers involved and the last ticket it covers (0 on a sync
 * transport, where an op is complete when its post returns). */
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

/* ---- the inline fast path (not API: use the functions below) ---------
 * On a direct transport (shm: every peer's arena is mapped into this
 * process and a request executes inside its post) the operations below run
 * inline when their target is an ordinary 8-byte word of the arena on a QP
 * the thread has opened: the bounds check, the load, store or atomic the
 * transport would execute, and the counters; no call, no lock, no clock.
 * Everything else (other transports, device memory, other lengths, the
 * first op to a peer, a peer that restarted since, every error) takes the
 * out-of-line path (the *_slow functions), which checks and reports
 * exactly as before. A WRITE or atomic to a peer with a durable image
 * runs inline too and then notes its range for the next persist
 * (loco_direct_noted), as the out-of-line post would. */

/* Arena offsets below this are never a region: raddr 0 means null. */
#define LOCO_ARENA_FIRST 64

/* Opcodes of batch ops and of the inline path's counters (the
 * transport's, enum loco_opcode). */
enum {
	LOCO_BATCH_READ = 0,
	LOCO_BATCH_WRITE = 1,
	LOCO_BATCH_CAS = 2,
	LOCO_BATCH_FAA = 3,
};

/* A thread's view of one peer's mapped arena, in struct loco_thread_hot
 * (arrays of 8-byte entries, so that a peer's is one indexed load): the
 * words at arena offsets LOCO_ARENA_FIRST + 8 * i, i < WORDS[peer], are
 * reached at BASE[peer] (WORDS 0: not direct). Set by the owner when it
 * opens the QP (BASE, then WORDS); WORDS is cleared by the manager when
 * the peer restarts or dies or this node is fenced (the next op goes out
 * of line, which renews the QP or fails with -LOCO_EDOWN or
 * -LOCO_EFENCED). BASE is never cleared: the mapping stays until the
 * owner renews or closes the QP, so an op that read WORDS before a clear
 * still addresses mapped memory, and the check needs no second branch. */
struct loco_direct_qp {
	/* The fence guard (<loco/guard.h>) of WRITEs and atomics: this
	 * thread's busy mark at the peer and this node's fence line there. */
	struct loco_guard_mark mark;
	const _Atomic uint64_t *fenced;
};

/* The first member of every struct loco_thread: its counters (written by
 * the thread that posts on its QPs, read by anyone: relaxed atomics) and
 * the state the inline path needs. An inline op adds one to one counter
 * of DIRECT_OPS[waited][opcode]: each is one verb (8 bytes for a READ or
 * WRITE) of one doorbell, and a waited (synchronous) one a round trip;
 * loco_thread_stats adds them in. */
struct loco_thread_hot {
	/* First: an atomic load takes no displacement (GCC adds it to the
	 * index), so at offset 0 a peer's word count is one load. */
	_Atomic uint64_t direct_words[LOCO_MAX_NODES];
	_Atomic uint64_t reads, writes, cas, faa, flushes;
	_Atomic uint64_t bytes_read, bytes_written;
	_Atomic uint64_t doorbells, rtts, fences;
	_Atomic uint64_t direct_ops[2][4];
	_Atomic uint64_t batched_ops[4];  /* 8-byte direct ops of batches:
					   * verbs (doorbells counted apart) */
	uint64_t unplaced;    /* sync: peers whose QP has unplaced WRITEs */
	uint64_t unwaited;    /* 1: ops posted since the last wait (RTT
			       * count) */
	uint64_t pending;     /* nonzero whenever unplaced or unwaited is
			       * (it may stay set after both clear): the
			       * one word an inline synchronous READ tests */
	uint64_t noted;       /* peers with a durable image: the ranges of
			       * inline WRITEs and atomics are noted for
			       * persists (read by the owner only) */
	bool sync;            /* requests complete inside their post */
	uint64_t incarnation; /* this node's (the manager's boot id) */
	uint8_t *direct_base[LOCO_MAX_NODES];   /* read by the owner only */
	struct loco_direct_qp direct[LOCO_MAX_NODES];
};

static inline struct loco_thread_hot *loco_thread_hot(struct loco_thread *thr)
{
	return (struct loco_thread_hot *)(void *)thr;
}

/* Single writer: a relaxed load and store, no read-modify-write. On
 * x86-64 one unlocked add to memory: its load and store are each a
 * single-copy atomic aligned 8-byte access, which is all the relaxed
 * pair promises a reader (the old value or the new one), in one
 * instruction where the compiler emits three for the pair. */
static inline void loco_hot_add(_Atomic uint64_t *c, uint64_t n)
{
#if defined(__x86_64__)
	__asm__("addq %1, %0" : "+m"(*c) : "er"(n)); /* a counter, orders nothing */
#else
	atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
			      memory_order_relaxed); /* a counter, orders nothing */
#endif
}

/* X rotated right by 3 bits: X / 8 if X is a multiple of 8, else at
 * least 2^61 (its low bits land on top), so one compare checks both the
 * alignment and the bound of a word index. */
static inline uint64_t loco_word_index(uint64_t x)
{
	return x >> 3 | x << 61;
}

/* True, with *W the mapped 8-byte aligned words [OFF, OFF + LEN) of RR
 * (LEN a nonzero multiple of 8) and *PEER RR's node, if H (a thread's
 * view, loco_thread_hot) reaches them
 * directly for OPCODE; else false (the caller then takes the out-of-line
 * path). The checks
 * are those loco_post_* make: inside RR, inside the peer's arena, and an
 * access RR's region allows (its descriptor carries it). Every branch
 * that fails goes out of line, so the common case is straight-line code. */
static inline bool loco_direct_span(const struct loco_thread_hot *h,
				    const struct loco_rregion *rr, uint64_t off,
				    uint32_t len, unsigned opcode,
				    _Atomic uint64_t **w, uint32_t *peer)
{
	if (__builtin_expect(!rr, 0))
		return false;
	/* Node and space in one load (struct loco_rregion starts with them):
	 * below LOCO_MAX_NODES iff the node is one and the space the arena. */
	uint64_t node_space;
	memcpy(&node_space, rr, 8);
	if (__builtin_expect(node_space >= LOCO_MAX_NODES ||
			     !(rr->access & loco_op_access(opcode)), 0))
		return false;
	/* Relaxed: the mapping stays; a clear only sends later ops out of
	 * line (as the out-of-line path reads the peer's generation). */
	uint64_t words = atomic_load_explicit(&h->direct_words[node_space],
					      memory_order_relaxed);
	uint64_t at = rr->off + off;
	uint64_t more = (len - 8) >> 3;   /* words past the first */
	if (__builtin_expect(off > rr->len || rr->len - off < len ||
			     (len != 8 && more >= words) ||
			     loco_word_index(at - LOCO_ARENA_FIRST) >=
			     words - more, 0))
		return false;
	*w = (_Atomic uint64_t *)(void *)(h->direct_base[node_space] + at);
	*peer = (uint32_t)node_space;
	return true;
}

/* LEN bytes (a multiple of 8, more than 8) between words W and LOCAL, as
 * the transport moves them: acquire loads (READ) or release stores
 * (WRITE) of 8 bytes each, in address order. */
void loco_direct_copy(_Atomic uint64_t *w, unsigned opcode, void *local,
		      uint32_t len);

/* An inline WRITE or atomic to PEER, a peer with a durable image (bit
 * PEER of noted), wrote [OFF, OFF + LEN) of its arena: noted for the next
 * persist, as the out-of-line post notes it. */
void loco_direct_noted(struct loco_thread *thr, uint32_t peer, uint64_t off,
		       uint32_t len);

/* A direct op (OPCODE, enum loco_opcode) to PEER executed. A WRITE leaves
 * an unplaced WRITE on its QP (fences post the same READs on every
 * transport); a READ or atomic places the earlier ones. WAITED: a
 * synchronous op, whose wait is one round trip. */
static inline void loco_direct_count(struct loco_thread *thr, uint32_t peer,
				     unsigned opcode, bool waited)
{
	struct loco_thread_hot *h = loco_thread_hot(thr);
	uint64_t bit = UINT64_C(1) << peer;
	loco_hot_add(&h->direct_ops[waited][opcode], 1);
	if (opcode == LOCO_BATCH_READ && waited) {
		/* A synchronous READ places its QP's WRITEs and is a wait;
		 * usually there is neither to record: one test, no store. */
		if (__builtin_expect(h->pending != 0, 0)) {
			h->unplaced &= ~bit;
			h->unwaited = 0;
			h->pending = h->unplaced;
		}
		return;
	}
	if (opcode == LOCO_BATCH_WRITE)
		h->unplaced |= bit;
	else if (__builtin_expect(h->unplaced != 0, 0))
		h->unplaced &= ~bit;
	h->unwaited = !waited;
	h->pending = h->unplaced | !waited;
}

/* Execute OPCODE on word W as the transport would: LOCAL is the READ's
 * destination, the WRITE's source or the atomic's result (8 bytes). */
static inline void loco_direct_exec(_Atomic uint64_t *w, unsigned opcode,
				    void *local, uint64_t compare,
				    uint64_t operand)
{
	uint64_t v;
	switch (opcode) {
	case LOCO_BATCH_READ:
		/* Acquire: as the transport's READ (pairs with a WRITE's). */
		v = atomic_load_explicit(w, memory_order_acquire);
		break;
	case LOCO_BATCH_WRITE:
		memcpy(&v, local, 8);
		/* Release: as the transport's WRITE (pairs with a READ's). */
		atomic_store_explicit(w, v, memory_order_release);
		return;
	case LOCO_BATCH_CAS:
		v = compare;
		/* seq_cst: remote atomics are totally ordered among themselves. */
		atomic_compare_exchange_strong_explicit(w, &v, operand,
							memory_order_seq_cst,
							memory_order_seq_cst);
		break;
	default:
		/* seq_cst: as for CAS. */
		v = atomic_fetch_add_explicit(w, operand, memory_order_seq_cst);
		break;
	}
	memcpy(local, &v, 8);
}

/* One op through the inline path: true if it ran (counted, and added to
 * ACK if not NULL), false if the out-of-line path must take it. LEN: 8,
 * or for a READ or WRITE any nonzero multiple of 8. WAITED: a
 * synchronous op. */
static inline bool loco_direct_op(struct loco_thread *thr,
				  const struct loco_rregion *rr, uint64_t off,
				  unsigned opcode, void *local, uint32_t len,
				  uint64_t compare, uint64_t operand,
				  bool waited, struct loco_ack *ack)
{
	_Atomic uint64_t *w;
	uint32_t peer;
	if (!len || (len & 7) ||
	    !loco_direct_span(loco_thread_hot(thr), rr, off, len, opcode, &w,
			      &peer))
		return false;
	/* A WRITE or atomic runs under the fence guard; a fenced one goes
	 * out of line, which fails it with -LOCO_EFENCED. A READ changes
	 * nothing: unguarded. */
	struct loco_thread_hot *hg = loco_thread_hot(thr);
	const struct loco_direct_qp *d = &hg->direct[peer];
	bool guarded = opcode != LOCO_BATCH_READ;
	if (guarded && !loco_guard_enter(d->mark, d->fenced, hg->incarnation))
		return false;
	/* Counted before it runs: then nothing stores between the result's
	 * store to LOCAL and the caller's use of it, which the compiler
	 * forwards from a register. */
	loco_direct_count(thr, peer, opcode, waited);
	if (len == 8) {
		loco_direct_exec(w, opcode, local, compare, operand);
	} else {
		struct loco_thread_hot *h = loco_thread_hot(thr);
		loco_direct_copy(w, opcode, local, len);
		/* The counter below counts 8 bytes. */
		loco_hot_add(opcode == LOCO_BATCH_READ ? &h->bytes_read :
			     &h->bytes_written, len - 8);
	}
	if (guarded) {
		loco_guard_exit(d->mark);
		if (__builtin_expect(hg->noted >> peer & 1, 0))
			loco_direct_noted(thr, peer, rr->off + off, len);
	}
	if (ack)
		ack->peers |= UINT64_C(1) << peer;
	return true;
}

int loco_ack_test_slow(struct loco_thread *thr, const struct loco_ack *ack);
int loco_ack_wait_slow(struct loco_thread *thr, const struct loco_ack *ack,
		       int timeout_ms);
int loco_post_read_slow(struct loco_thread *thr, const struct loco_rregion *rr,
			uint64_t off, void *dst, uint32_t len,
			struct loco_ack *ack);
int loco_post_write_slow(struct loco_thread *thr, const struct loco_rregion *rr,
			 uint64_t off, const void *src, uint32_t len,
			 struct loco_ack *ack);
int loco_post_cas_slow(struct loco_thread *thr, const struct loco_rregion *rr,
		       uint64_t off, uint64_t expect, uint64_t desired,
		       uint64_t *old, struct loco_ack *ack);
int loco_post_faa_slow(struct loco_thread *thr, const struct loco_rregion *rr,
		       uint64_t off, uint64_t add, uint64_t *old,
		       struct loco_ack *ack);
int loco_read_slow(struct loco_thread *thr, const struct loco_rregion *rr,
		   uint64_t off, void *dst, uint32_t len);
int loco_write_slow(struct loco_thread *thr, const struct loco_rregion *rr,
		    uint64_t off, const void *src, uint32_t len);
int loco_cas_slow(struct loco_thread *thr, const struct loco_rregion *rr,
		  uint64_t off, uint64_t expect, uint64_t desired, uint64_t *old);
int loco_faa_slow(struct loco_thread *thr, const struct loco_rregion *rr,
		  uint64_t off, uint64_t add, uint64_t *old);

/* 1 if every op ACK covers is complete, 0 if not yet, or the error of a
 * failed op it covers (every later test or wait of such an ACK reports it
 * too). Polls completions once; never waits.
 * Ordering: on 1, each READ's destination holds what the READ read, and
 *   each CAS/FAA's *OLD its old value, visible to this thread (an acquire
 *   of those buffers); a READ returns what was placed at the target when
 *   it executed: this thread's earlier WRITEs to that peer (same QP), and
 *   others' writes only as far as their fences placed them (docs/
 *   ordering.md). A covered WRITE is acknowledged, not necessarily placed;
 *   a completed READ or atomic on its QP, or a fence, places it.
 * Completion: on 1 every covered buffer is free again (a WRITE's source may
 *   change, a READ's destination may be read). On 0 they stay the NIC's
 *   until a later test or wait covering them says complete; after an
 *   error, ops of other peers may still be in flight: keep every covered
 *   buffer until loco_thread_destroy (the error sticks to the QP).
 * Caller: the thread that owns THR and posted the ops. */
static inline int loco_ack_test(struct loco_thread *thr,
				const struct loco_ack *ack)
{
	/* Sync: complete in its post; a failed post returned its error. */
	return loco_thread_hot(thr)->sync ? 1 : loco_ack_test_slow(thr, ack);
}

/* Wait until every op ACK covers is complete: 0, -ETIMEDOUT after
 * TIMEOUT_MS (< 0: the manager default), or the error of a failed op it
 * covers. Spins briefly, then yields (<loco/wait.h>). A wait that covers
 * ops posted since the thread's previous wait counts a round trip.
 * Ordering: on 0, as loco_ack_test returning 1: READ destinations and
 *   atomics' old values hold their results, visible to this thread; covered
 *   WRITEs are acknowledged, not necessarily placed (fence to publish).
 * Completion: on 0 every covered buffer is free again. On -ETIMEDOUT the
 *   ops may still complete later: keep their buffers until a later wait
 *   covering them returns 0 (a synchronous op's timeout instead moves the
 *   QP to the error state, docs/api.md).
 * Caller: the thread that owns THR and posted the ops. */
static inline int loco_ack_wait(struct loco_thread *thr,
				const struct loco_ack *ack, int timeout_ms)
{
	struct loco_thread_hot *h = loco_thread_hot(thr);
	if (!h->sync)
		return loco_ack_wait_slow(thr, ack, timeout_ms);
	if (h->unwaited) {
		loco_hot_add(&h->rtts, 1);
		h->unwaited = 0;
	}
	return 0;
}

/* ---- remote operations -------------------------------------------------
 * All take a region descriptor and an offset into it; out-of-bounds (or a
 * misaligned atomic) returns -EINVAL and posts nothing; an op outside
 * every region this node knows at the target, or one its region does not
 * allow (LOCO_REGION_REMOTE_*: a WRITE to a read-only region, a CAS to a
 * region without atomic access), returns -EACCES, logged once per region
 * and op, and posts nothing (on verbs the NIC would refuse it as well:
 * IBV_WC_REM_ACCESS_ERR, which completes as -EACCES). ACK may be NULL; if
 * not, the op is added to it (union). Buffers: the source of a WRITE and the
 * destination of a READ or atomic must stay untouched until completion.
 *
 * Ordering: ops of one thread to one peer are placed in post order; a READ
 *   or atomic completes only after earlier WRITEs on that pair are placed;
 *   nothing is ordered across peers or threads without a fence.
 * Completion: when the ack covering the op tests complete. A completed
 *   WRITE is acknowledged, not necessarily placed (see loco_fence).
 * Caller: the thread that owns THR. */
static inline int loco_post_read(struct loco_thread *thr,
				 const struct loco_rregion *rr, uint64_t off,
				 void *dst, uint32_t len, struct loco_ack *ack)
{
	if (loco_direct_op(thr, rr, off, LOCO_BATCH_READ, dst, len, 0, 0, false,
			   ack))
		return 0;
	return loco_post_read_slow(thr, rr, off, dst, len, ack);
}

static inline int loco_post_write(struct loco_thread *thr,
				  const struct loco_rregion *rr, uint64_t off,
				  const void *src, uint32_t len,
				  struct loco_ack *ack)
{
	if (loco_direct_op(thr, rr, off, LOCO_BATCH_WRITE, (void *)src, len, 0,
			   0, false, ack))
		return 0;
	return loco_post_write_slow(thr, rr, off, src, len, ack);
}

/* 8-byte aligned compare-and-swap; *OLD receives the previous value. */
static inline int loco_post_cas(struct loco_thread *thr,
				const struct loco_rregion *rr, uint64_t off,
				uint64_t expect, uint64_t desired, uint64_t *old,
				struct loco_ack *ack)
{
	if (loco_direct_op(thr, rr, off, LOCO_BATCH_CAS, old, 8, expect, desired,
			   false, ack))
		return 0;
	return loco_post_cas_slow(thr, rr, off, expect, desired, old, ack);
}

/* 8-byte aligned fetch-and-add; *OLD receives the previous value. */
static inline int loco_post_faa(struct loco_thread *thr,
				const struct loco_rregion *rr, uint64_t off,
				uint64_t add, uint64_t *old, struct loco_ack *ack)
{
	if (loco_direct_op(thr, rr, off, LOCO_BATCH_FAA, old, 8, 0, add, false,
			   ack))
		return 0;
	return loco_post_faa_slow(thr, rr, off, add, old, ack);
}

/* Synchronous forms: post, then wait with the default timeout.
 * Ordering/Completion as above; the op is complete on return 0. On
 * -ETIMEDOUT the thread's QP to that peer goes to the error state: the op
 * never touches the buffer after the return, and later ops of THR to
 * that peer fail (docs/api.md). */
static inline int loco_read(struct loco_thread *thr,
			    const struct loco_rregion *rr, uint64_t off,
			    void *dst, uint32_t len)
{
	if (loco_direct_op(thr, rr, off, LOCO_BATCH_READ, dst, len, 0, 0, true,
			   NULL))
		return 0;
	return loco_read_slow(thr, rr, off, dst, len);
}

static inline int loco_write(struct loco_thread *thr,
			     const struct loco_rregion *rr, uint64_t off,
			     const void *src, uint32_t len)
{
	if (loco_direct_op(thr, rr, off, LOCO_BATCH_WRITE, (void *)src, len, 0,
			   0, true, NULL))
		return 0;
	return loco_write_slow(thr, rr, off, src, len);
}

static inline int loco_cas(struct loco_thread *thr,
			   const struct loco_rregion *rr, uint64_t off,
			   uint64_t expect, uint64_t desired, uint64_t *old)
{
	if (loco_direct_op(thr, rr, off, LOCO_BATCH_CAS, old, 8, expect, desired,
			   true, NULL))
		return 0;
	return loco_cas_slow(thr, rr, off, expect, desired, old);
}

static inline int loco_faa(struct loco_thread *thr,
			   const struct loco_rregion *rr, uint64_t off,
			   uint64_t add, uint64_t *old)
{
	if (loco_direct_op(thr, rr, off, LOCO_BATCH_FAA, old, 8, 0, add, true,
			   NULL))
		return 0;
	return loco_faa_slow(thr, rr, off, add, old);
}

/* ---- a region's words: the READ's checks made once ----------------------
 * struct loco_words is one thread's handle on the 8-byte words of one
 * region. loco_words_read(W, I, V) is loco_read(THR, RR, 8 * I, V, 8):
 * the same value, errors, counters, round trips and ordering, but what
 * depends on the region alone (its node and space, its READ access, the
 * alignment and arena bound of its words) is checked once, by
 * loco_words_init. Each READ then checks only its index against the
 * region's words and, in one compare, that this thread still reaches the
 * peer's arena as far as the region's end (a restart, a death or a fence
 * clears that, as for loco_read: the READ then goes out of line). On a
 * transport without the inline path, or for a descriptor it does not
 * take, every READ is loco_read's out-of-line path. */
struct loco_words {
	struct loco_thread *thr;
	uint64_t n;         /* whole words of the region: its len / 8 */
	uint64_t need;      /* the peer's word count (struct loco_thread_hot's
			     * direct_words) that reaches word N - 1; above
			     * any arena when the inline path never applies */
	uint64_t at;        /* the arena offset of word 0 */
	uint32_t peer;      /* RR's node (0 when never inline) */
	struct loco_rregion rr;
};

/* Bind W to THR and the region RR describes (copied). Makes no remote
 * op and cannot fail: what is wrong with RR, each READ reports (as
 * loco_read would). Caller: the thread that owns THR, which alone may
 * use W. */
static inline void loco_words_init(struct loco_words *w,
				   struct loco_thread *thr,
				   const struct loco_rregion *rr)
{
	uint64_t node_space;
	memcpy(&node_space, rr, 8);   /* as loco_direct_span */
	bool direct = node_space < LOCO_MAX_NODES &&
		      (rr->access & loco_op_access(LOCO_BATCH_READ)) &&
		      rr->off >= LOCO_ARENA_FIRST && !(rr->off & 7) &&
		      rr->len >= 8;
	w->thr = thr;
	w->n = rr->len / 8;
	w->at = rr->off;
	w->peer = direct ? (uint32_t)node_space : 0;
	w->need = direct ? (rr->off - LOCO_ARENA_FIRST) / 8 + w->n : UINT64_MAX;
	w->rr = *rr;
}

/* Word I of W's region into *V: loco_read(THR, RR, 8 * I, V, 8) (an I
 * past the region: -EINVAL, as its offset past it; one whose offset
 * overflows as offset UINT64_MAX).
 * Ordering/Completion as loco_read. Caller: the thread that owns THR. */
static inline int loco_words_read(const struct loco_words *w, uint64_t i,
				  uint64_t *v)
{
	struct loco_thread_hot *h = loco_thread_hot(w->thr);
	/* Relaxed: as loco_direct_span's load of the word count. */
	if (__builtin_expect(i < w->n &&
			     atomic_load_explicit(&h->direct_words[w->peer],
						  memory_order_relaxed) >= w->need, 1)) {
		loco_direct_count(w->thr, w->peer, LOCO_BATCH_READ, true);
		const _Atomic uint64_t *word = (const _Atomic uint64_t *)(const void *)
			(h->direct_base[w->peer] + w->at) + i;
		/* Acquire: as the transport's READ (pairs with a WRITE's). */
		*v = atomic_load_explicit(word, memory_order_acquire);
		return 0;
	}
	/* Out of line through copies, so that neither W nor V escapes and
	 * a caller's local handle and result can stay in registers. An I
	 * whose offset overflows is past the region as UINT64_MAX is. */
	struct loco_rregion rr = w->rr;
	uint64_t t;
	int rc = loco_read_slow(w->thr, &rr, i > UINT64_MAX / 8 ? UINT64_MAX :
				8 * i, &t, 8);
	if (!rc)
		*v = t;
	return rc;
}

/* Same operations addressed by a compact remote address (loco/raddr.h),
 * bounds-checked against the whole arena of the target node and checked
 * against the region that holds the address: one this node opened or
 * joined there, or a create-or-open region the node names on request
 * (REGION_FIND, once per region; -EACCES if there is none). */
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

/* Flags of a batch op's opcode (batches carry READ, WRITE, CAS and FAA
 * only, so the low two bits are the op): LONG, an op added inline whose
 * LEN is not 8 (then in op->len); SLOW, one added out of line (LEN in
 * op->len, its space and key in the batch's where[]). An op with neither
 * is an inline 8-byte one: the post's dispatch is one switch on opcode,
 * with no length to load. */
#define LOCO_BATCH_OP 3u
#define LOCO_BATCH_LONG 4u
#define LOCO_BATCH_SLOW 8u

/* 40 bytes, so that the adds index the array with one instruction; the
 * inline adds store only what their op reads (COMPARE for a CAS, OPERAND
 * for a CAS or FAA, LEN when LONG). */
struct loco_batch_op {
	uint8_t opcode;           /* LOCO_BATCH_* | LOCO_BATCH_LONG/_SLOW */
	uint8_t peer;
	uint16_t reserved;
	uint32_t len;             /* LONG or SLOW only (else 8) */
	uint64_t arena_off;       /* in the peer's arena (or, SLOW, its space) */
	void *local;
	uint64_t compare;
	uint64_t operand;
};
static_assert(sizeof(struct loco_batch_op) == 40 && LOCO_MAX_NODES <= 256,
	      "a batch op is 40 bytes, its peer one byte");

/* Where an op added out of line goes beyond its arena offset: its
 * space (enum loco_space) and the target region's transport key and
 * offset. */
struct loco_batch_where {
	uint64_t key_off;
	uint32_t key;
	uint8_t space;
};

/* A thread view with no direct peer: a batch's adds see it once one
 * failed, so every later add goes out of line, which records nothing
 * after an error (loco_batch.hot). */
extern const struct loco_thread_hot loco_batch_failed;

struct loco_batch {
	struct loco_thread *thr;
	/* What the inline adds check words against: THR's view, or
	 * loco_batch_failed once an add failed (then no add records
	 * anything, as before, without a test of err in each). */
	const struct loco_thread_hot *hot;
	uint32_t n;     /* beside kinds: an inline post clears both at once */
	/* Of the ops added inline, the opcodes (bit 1 << opcode): the
	 * inline post of a one-peer batch raises the fence guard's mark if
	 * one writes (the general post works out per peer what it needs
	 * from the ops). */
	uint32_t kinds;
	int err;   /* first error from an add; reported by post. Only an
		    * out-of-line add sets it, having counted itself in
		    * slow first: err implies slow. */
	uint32_t slow;  /* ops added out of line (not all direct words) */
	uint64_t peers; /* peers of the ops added */
	struct loco_batch_op op[LOCO_BATCH_MAX];
	struct loco_batch_where where[LOCO_BATCH_MAX];  /* SLOW ops' */
};

static inline void loco_batch_init(struct loco_batch *b,
				   struct loco_thread *thr)
{
	b->thr = thr;
	b->hot = loco_thread_hot(thr);
	b->n = 0;
	b->err = 0;
	b->slow = 0;
	b->kinds = 0;
	b->peers = 0;
}
/* Out-of-line add of OPCODE (LOCAL, LEN, COMPARE, OPERAND) at OFF of RR:
 * checks the target, records an error in b->err. */
void loco_batch_add_slow(struct loco_batch *b, const struct loco_rregion *rr,
			 uint64_t off, uint8_t opcode, void *local,
			 uint32_t len, uint64_t compare, uint64_t operand);

/* Add an op (OPCODE, LOCAL, LEN, COMPARE, OPERAND) at OFF of RR: inline
 * when the target is direct 8-byte words. Always inlined: OPCODE is then
 * a constant, and the add a few stores. */
__attribute__((always_inline))
static inline void loco_batch_add(struct loco_batch *b,
				  const struct loco_rregion *rr, uint64_t off,
				  uint8_t opcode, void *local, uint32_t len,
				  uint64_t compare, uint64_t operand)
{
	_Atomic uint64_t *w;
	uint32_t peer;
	uint32_t n = b->n;
	if (len && !(len & 7) && n < LOCO_BATCH_MAX &&
	    loco_direct_span(b->hot, rr, off, len, opcode, &w, &peer)) {
		struct loco_batch_op *o = &b->op[n];
		b->n = n + 1;
		o->opcode = (uint8_t)(opcode | (len != 8 ? LOCO_BATCH_LONG : 0));
		o->peer = (uint8_t)peer;
		if (len != 8)
			o->len = len;
		o->arena_off = rr->off + off;
		o->local = local;
		if (opcode == LOCO_BATCH_CAS)
			o->compare = compare;
		if (opcode == LOCO_BATCH_CAS || opcode == LOCO_BATCH_FAA)
			o->operand = operand;
		b->peers |= UINT64_C(1) << peer;
		/* OPCODE is a constant at every call: one OR. */
		b->kinds |= 1u << opcode;
		return;
	}
	loco_batch_add_slow(b, rr, off, opcode, local, len, compare, operand);
}

/* Adds record bounds errors in b->err (-EINVAL) or -E2BIG when full. */
__attribute__((always_inline))
static inline void loco_batch_read(struct loco_batch *b,
				   const struct loco_rregion *rr, uint64_t off,
				   void *dst, uint32_t len)
{
	loco_batch_add(b, rr, off, LOCO_BATCH_READ, dst, len, 0, 0);
}

__attribute__((always_inline))
static inline void loco_batch_write(struct loco_batch *b,
				    const struct loco_rregion *rr, uint64_t off,
				    const void *src, uint32_t len)
{
	loco_batch_add(b, rr, off, LOCO_BATCH_WRITE, (void *)src, len, 0, 0);
}

__attribute__((always_inline))
static inline void loco_batch_cas(struct loco_batch *b,
				  const struct loco_rregion *rr, uint64_t off,
				  uint64_t expect, uint64_t desired,
				  uint64_t *old)
{
	loco_batch_add(b, rr, off, LOCO_BATCH_CAS, old, 8, expect, desired);
}

__attribute__((always_inline))
static inline void loco_batch_faa(struct loco_batch *b,
				  const struct loco_rregion *rr, uint64_t off,
				  uint64_t add, uint64_t *old)
{
	loco_batch_add(b, rr, off, LOCO_BATCH_FAA, old, 8, 0, add);
}

int loco_batch_post_direct(struct loco_batch *b, struct loco_ack *ack);
int loco_batch_run_direct(struct loco_batch *b);
int loco_batch_post_slow(struct loco_batch *b, struct loco_ack *ack);

/* Post everything added: ops to one peer go as one linked list with one
 * doorbell and one signalled completion. Empties the batch. A batch with
 * nothing added posts nothing and returns 0 at once, unless an add
 * failed: that error is returned here even when no op was added (a
 * target found down adds nothing), so post every batch you filled,
 * never only those with ops (b->n), or the error is lost and the
 * READs' buffers are used unwritten.
 * Ordering: as for single ops, in the order added.
 * Completion: ACK (unioned) covers every op of the batch.
 * Caller: the owner of the batch's thread. Returns 0 or the first error. */
static inline int loco_batch_post(struct loco_batch *b, struct loco_ack *ack)
{
	/* No op out of line (so no error either: err implies slow). */
	if (!b->slow && b->n)  /* only direct words */
		return loco_batch_post_direct(b, ack);
	if (!b->err && !b->n)
		return 0;
	return loco_batch_post_slow(b, ack);
}

/* Post everything added and wait for it: loco_batch_post with an ack of
 * its own, then loco_ack_wait (TIMEOUT_MS) of that ack, in one call when
 * every op was added inline (the wait is then the post's, and counts the
 * batch's round trip).
 * Ordering: as loco_batch_post, then as loco_ack_wait returning 0.
 * Completion: on 0 every op's buffers are free again (loco_ack_wait).
 * Caller: the owner of the batch's thread. Returns 0 or the first error
 * (of the post, else of the wait). */
static inline int loco_batch_run(struct loco_batch *b, int timeout_ms)
{
	if (!b->slow && b->n)  /* only direct words: as loco_batch_post */
		return loco_batch_run_direct(b);
	struct loco_ack ack = { 0, 0 };
	int rc = loco_batch_post(b, &ack);
	return rc ? rc : loco_ack_wait(b->thr, &ack, timeout_ms);
}

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

/* ---- persistence (docs/durability.md) --------------------------------------
 * A node started with --durable DIR keeps its arena in a durable image
 * there; its region names and their offsets survive restarts, so region
 * descriptors and remote addresses stay valid. What reached the image is
 * durable; what was written but not persisted may be lost when the node
 * dies (with --power-cut it is lost). A persist is RDMA FLUSH. */

/* Persistence point: make durable every byte THR wrote to PEER (WRITE,
 * CAS, FAA, in PEER's arena) before this call. Device memory is never
 * durable.
 * Ordering: it is also a pair fence: those writes are placed before it
 *   completes. A write that THR posts after it is persisted after them,
 *   never before (a FLUSH executes between the requests of its QP); so a
 *   flag written after a persist is durable only if the data before it
 *   is. Other threads' writes to the same bytes may be persisted with
 *   them (as a cache line holds what it holds); persisting more, or
 *   earlier, is always allowed, persisting less never.
 * Completion: synchronous for loco_persist; loco_post_persist adds the
 *   FLUSHes and everything THR has outstanding at PEER to ACK.
 * Caller: the thread that owns THR.
 * On a peer without a durable image it is loco_fence(LOCO_FENCE_PAIR).
 * Returns 0, -LOCO_EDOWN (PEER died or restarted since the writes: some
 * of them may be lost, reported once; retry the writes after
 * loco_peer_wait), -ETIMEDOUT, or the error of a failed op. */
int loco_post_persist(struct loco_thread *thr, uint32_t peer,
		      struct loco_ack *ack);
int loco_persist(struct loco_thread *thr, uint32_t peer);

/* A FLUSH of [OFF, OFF+LEN) of RR, whoever wrote those bytes: they are
 * durable, as they are when it executes, when it completes (what a
 * thread that read data and acts on it, e.g. frees what it no longer
 * references, makes durable first).
 * Ordering: as loco_persist for THR's own writes to RR's node (it places
 *   them); others' writes are covered if they were placed before it
 *   executes.
 * Completion: loco_persist_range is synchronous; the post form adds the
 *   FLUSH to ACK.
 * Caller: the thread that owns THR. On a peer without a durable image it
 * is loco_fence(LOCO_FENCE_PAIR). Returns as loco_persist, or -EINVAL
 * out of bounds. */
int loco_post_persist_range(struct loco_thread *thr,
			    const struct loco_rregion *rr, uint64_t off,
			    uint64_t len, struct loco_ack *ack);
int loco_persist_range(struct loco_thread *thr, const struct loco_rregion *rr,
		       uint64_t off, uint64_t len);

/* Which incarnation of PEER THR's operations reach: a number that
 * changes when THR's first operation to PEER after the node came back
 * (or failed over) finds it a new incarnation; 0 before THR's first. The
 * same value before and after a span of THR's operations to PEER means
 * they all went to one incarnation (a persist's loss report, -LOCO_EDOWN,
 * comes once: a caller whose writes must still be there at a later
 * persist compares this instead of trusting that report to be its own).
 * Caller: the thread that owns THR. */
uint32_t loco_peer_qp_gen(struct loco_thread *thr, uint32_t peer);

/* Whether PEER (after its hello) keeps its arena in a durable image. */
bool loco_peer_durable(struct loco_mgr *mgr, uint32_t peer);

/* Wait until memory node PEER can be used: after it died (operations on
 * it fail with -LOCO_EDOWN meanwhile, at once), until it is back with the
 * same durable image and every region this node had opened on it is
 * where it was (docs/durability.md, "Reconnection"); on first contact,
 * until it answers. Returns 0, -LOCO_ELOST (it came back without its
 * memory: not durable, or another image), -ETIMEDOUT or -EINVAL.
 * Caller: any thread. TIMEOUT_MS < 0: the manager default. */
int loco_peer_wait(struct loco_mgr *mgr, uint32_t peer, int timeout_ms);

/* When this node last found memory node PEER up, on the lease clock
 * (loco_lease_now_ns): its first hello, or its return after an outage or
 * a fail-over; 0 if never (or PEER is no memory node). Every node finds a
 * restarted memory node up at or after the moment it came back, so a
 * lease whose holder could not reach PEER meanwhile can be counted anew
 * from this time (docs/sherman.md, "Outages"). Caller: any thread; an op
 * on PEER that completed reads a time at least as late as the one of the
 * incarnation it reached. */
uint64_t loco_peer_up_ns(struct loco_mgr *mgr, uint32_t peer);

/* ---- stats -------------------------------------------------------------- */

struct loco_stats {
	uint64_t reads, writes, cas, faa; /* verbs posted (fence READs included) */
	uint64_t flushes;                 /* FLUSH verbs (persists) */
	uint64_t bytes_read, bytes_written;
	uint64_t doorbells;               /* post calls reaching the transport */
	uint64_t rtts;                    /* waits that covered new ops */
	uint64_t fences;
};

static inline uint64_t loco_stats_verbs(const struct loco_stats *s)
{
	return s->reads + s->writes + s->cas + s->faa + s->flushes;
}

/* Snapshot of THR's counters (callable from any thread). */
void loco_thread_stats(struct loco_thread *thr, struct loco_stats *out);
/* Sum over every thread of the manager, including destroyed ones. */
void loco_mgr_stats(struct loco_mgr *mgr, struct loco_stats *out);

/* Monotonic time in nanoseconds (CLOCK_MONOTONIC). */
uint64_t loco_now_ns(void);

/* ---- fencing (docs/ordering.md, "Fencing") ------------------------------ */

/* The clock every lease, heartbeat and deadline reads: CLOCK_MONOTONIC
 * plus LOCO_CLOCK_SKEW_MS (an integer, negative allowed: this node's lease
 * clock runs that far ahead or behind; loco-run --clock-skew sets it),
 * read once. With LOCO_CLOCK_SKEW_FOR_MS (a positive integer) the skew
 * lasts that many ms from the process start, then the clock steps back
 * to CLOCK_MONOTONIC as an NTP step would: a reader must not assume it
 * never goes back (a deadline now + T set before a backward step of S ms
 * comes up to S ms late, one before a forward step that much early;
 * docs/api.md, "lease clock"). loco_mgr_create refuses a malformed value
 * (-EINVAL, logged); here a malformed value counts as no skew. Never
 * below 0. Caller: any thread. */
uint64_t loco_lease_now_ns(void);

/* The lease clock's skew (ns, negative: behind) at CLOCK_MONOTONIC time
 * NOW_NS: for a clock other than CLOCK_MONOTONIC that must be moved alike
 * (rTX's CLOCK_REALTIME leases). Caller: any thread. */
int64_t loco_lease_skew_ns(uint64_t now_ns);

/* Fence node NODE's current incarnation at every node that hosts memory
 * it can reach: one control-plane round trip to each, sent in parallel.
 * The request names the incarnation this node knows (if any); each
 * target fences that one and the one it knows
 * as NODE's current, if another (a new incarnation this node has not met
 * yet): it records the fence (for good: a restart of the target in the
 * same run keeps it), makes its data path refuse that incarnation, waits
 * until none of its ops is mid-execution there, then answers. On 0, no
 * target executes another remote op of those incarnations, and each of
 * their later ops fails with -LOCO_EFENCED; NODE may rejoin only as a new
 * incarnation (a new process, a new loco_mgr). Remembered per incarnation
 * at the targets: a second call costs one round trip and waits for
 * nothing there (it still asks, because only the targets know whether
 * NODE came back as a new incarnation meanwhile). Targets: every node of the hosts
 * file but NODE itself (memory hosted by NODE is not fenced: a taker must
 * not rely on it) and this one (fenced in place). Returns 0, -ETIMEDOUT
 * (a target did not answer within TIMEOUT_MS, < 0: the manager default;
 * e.g. a paused target, or one whose executor of NODE's ops is stopped
 * mid-op), -LOCO_EDOWN (a memory node is down: it must be back first),
 * -EINVAL (NODE is this node or not in the hosts file), -ENOTCONN (no
 * node has met any incarnation of NODE yet), -EOPNOTSUPP (the
 * transport cannot fence), -EAGAIN (a target is fenced itself but still
 * runs: its memory may still execute NODE's ops until it is gone), or
 * another -errno: then the caller must not act for NODE; it waits and
 * tries again later. -LOCO_EFENCED only when this node is fenced
 * (loco_self_fenced).
 * Caller: any thread. */
int loco_fence_node(struct loco_mgr *mgr, uint32_t node, int timeout_ms);

/* True once this node's incarnation is known to be fenced (an op or a
 * hello was refused with -LOCO_EFENCED; logged once): the process must
 * stop (apps exit with status 3). Every later remote op fails with
 * -LOCO_EFENCED. Caller: any thread. */
bool loco_self_fenced(struct loco_mgr *mgr);

/* True if the incarnation of NODE this node last met is recorded fenced
 * here (loco_fence_node, by any node, fences it at every node but NODE):
 * that incarnation never acts again, e.g. never arrives at a barrier it
 * had not reached. False if this node never met NODE.
 * Caller: any thread. */
bool loco_peer_fenced(struct loco_mgr *mgr, uint32_t node);

#endif
