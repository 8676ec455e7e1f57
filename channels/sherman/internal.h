/* SPDX-License-Identifier: MIT */
/* Private structures of the Sherman channel (not installed). Remote
 * layouts, docs/sherman.md:
 *
 * node (node_size bytes, both modes; rtx mode: the value of a TXObj)
 *   0   seq      scan sequence: odd while a writer is in the node, bumped
 *                around every plain-mode write (not covered by checks)
 *   8   check    leaf: hash of bytes 16..63; internal: of bytes 16..end
 *   16  low      low fence (inclusive)
 *   24  high     high fence (exclusive; SH_INF: no upper bound)
 *   32  sibling  right sibling (node address), 0 for the rightmost
 *   40  self     this node's address
 *   48  info     level (bits 0..7; 0: leaf) | count << 8 (internal pairs)
 *   56  nv       node version: +1 on every whole-node write
 *   64  body     leaf: slots of {key, value[value_len], check}, check =
 *                hash(key, value; seed nv) with bit 0 = used;
 *                internal: leftmost child, then count {key, child} pairs,
 *                sorted by key
 *
 * Lock words (plain mode, "locks" on every hosting node): 0 free, else the
 * LLLock encoding (<loco/rtx/lllock.h>): lease, sequence, owner slot. */
#ifndef LOCO_CHANNELS_SHERMAN_INTERNAL_H
#define LOCO_CHANNELS_SHERMAN_INTERNAL_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channel.h>
#include <loco/channels/sherman/sherman.h>
#include <loco/loco.h>
#include <loco/rtx/rtx.h>
#include <loco/wait.h>

#define SH_INF UINT64_MAX
#define SH_HDR 64
#define SH_LEVELS 24             /* deepest tree (tiny nodes: fanout 4) */
#define SH_CHUNK 16              /* node indices taken per FAA */
#define SH_READ_MAX (16u * 1024) /* largest READ of a lock table scan */
#define SH_STRIPES 256           /* mutexes of the local lock table */
#define SH_SEQ_OFF 0
#define SH_REPAIR_EVERY 64        /* torn reads before a reader repairs */
#define SH_FENCE_MS_MIN 50        /* shortest wait for a holder's fence */
#define SH_PREFETCH 10            /* leaves a scan reads in one batch */
/* A waiter for a global lock held by another node (lock.c's
 * lock_backoff): waits from one round trip doubling to 2^SHIFT of them;
 * a round trip measured above RTT_MAX counts as RTT_MAX (the waiter was
 * descheduled, the network was not slow); it spins through the last
 * SPIN of a wait and yields before. */
#define SH_BACKOFF_SHIFT 4
#define SH_BACKOFF_RTT_MAX_NS 50000u
#define SH_BACKOFF_SPIN_NS 5000u
#define SH_RTX_LOCK_OFF 0         /* an rTX object's lock word: TXObj word 1
				   * (<loco/rtx/lllock.h>) */

struct sh_hdr {
	uint64_t seq;
	uint64_t check;
	uint64_t low, high;
	uint64_t sibling;
	uint64_t self;
	uint64_t info;
	uint64_t nv;
};
static_assert(sizeof(struct sh_hdr) == SH_HDR, "node header is 64 bytes");

/* Superblock (home node). */
struct sh_super {
	uint64_t cfg;        /* hash of the options that shape the layout */
	uint64_t epoch_ms;   /* POSIX ms of time 0 of every lease */
	uint64_t pad[6];
};
static_assert(sizeof(struct sh_super) == 64, "superblock is 64 bytes");

/* Redo record (plain mode, one per thread slot on every hosting node):
 * written in the same batch as, and before, a locked write-back. */
struct sh_redo {
	uint64_t word;       /* the lock word it was written under */
	uint64_t target;     /* address written (node address + offset) */
	uint64_t len;
	uint64_t check;      /* hash of the data, seeded by the three above */
};
static_assert(sizeof(struct sh_redo) == 32, "redo header is 32 bytes");

static inline unsigned sh_level(const struct sh_hdr *h)
{
	return (unsigned)(h->info & 0xff);
}

static inline unsigned sh_count(const struct sh_hdr *h)
{
	return (unsigned)((h->info >> 8) & 0xffff);
}

static inline uint64_t sh_info(unsigned level, unsigned count)
{
	return (uint64_t)level | (uint64_t)count << 8;
}

/* One hosting node's part: sub-channel "<name>/m<id>". */
struct sh_part {
	struct loco_channel base;
	uint32_t id;
	struct loco_rregion nodes;   /* plain mode: the node pool */
	struct loco_rregion alloc;   /* bump counter of node indices */
	struct loco_rregion locks;   /* plain mode: global lock table */
	struct loco_rregion redo;    /* plain mode: redo records */
};
static_assert(offsetof(struct sh_part, base) == 0, "base first");

/* ---- index cache (cache.c) ----------------------------------------------- */

struct sh_centry;

struct sh_cache {
	pthread_rwlock_t lock;
	struct sh_centry *head[SH_LEVELS]; /* per level: skip list by low */
	uint64_t n, cap;
	uint32_t node_size;
	uint64_t rng;
};

int sh_cache_init(struct sh_cache *c, uint32_t node_size, uint64_t bytes);
void sh_cache_fini(struct sh_cache *c);
/* Copy into OUT the lowest-level cached internal node whose fences hold
 * KEY, at level MIN_LEVEL (>= 1) or above. Returns true on a hit. */
bool sh_cache_find(struct sh_cache *c, uint64_t key, unsigned min_level,
		   void *out);
/* Cache internal node IMG (replacing entries of its level that overlap). */
void sh_cache_put(struct sh_cache *c, const void *img);
/* Forget the cached node of LEVEL whose low fence is LOW. */
void sh_cache_drop(struct sh_cache *c, unsigned level, uint64_t low);

/* ---- local lock table (lock.c) ------------------------------------------- */

/* An entry of the local lock table, under its stripe's mutex; owned is
 * also peeked without it (relaxed) by waiters polling for their turn. */
struct sh_llock {
	_Atomic bool owned;        /* a local thread holds or acquires it */
	unsigned waiters;          /* local threads waiting for it */
	unsigned streak;           /* handovers since the global acquire */
	uint64_t parked;           /* global word left for the next local
				    * holder (0: none) */
};

/* ---- tree handle ------------------------------------------------------------ */

#define SH_NSTATS (sizeof(struct loco_sherman_stats) / sizeof(uint64_t))
struct sh_counters {
	_Atomic uint64_t v[SH_NSTATS];
};
#define SH_STAT(field) (offsetof(struct loco_sherman_stats, field) / sizeof(uint64_t))

struct loco_sherman {
	struct loco_channel base;
	struct loco_sherman_opts o;
	uint32_t home;
	unsigned nparts;
	struct sh_part *part;                 /* nparts, by id; part[0]: home */
	int8_t part_idx[LOCO_MAX_NODES];      /* -1: not hosting */
	uint64_t part_mask;
	uint64_t durable;                     /* hosting nodes with a durable
					       * image (a bit per id) */
	struct loco_rregion super;
	uint64_t epoch_ms;
	int64_t skew_ms;                      /* this process's lease clock
					       * skew (sh_now_ms) */
	uint32_t entry_len, leaf_slots, int_cap, redo_len, nslots;
	loco_raddr_t root;                    /* fixed: index 0 on home */
	struct loco_rtx *rtx;                 /* rtx mode */
	struct sh_cache cache;
	bool cached;                          /* cache in use */
	pthread_mutex_t stripe[SH_STRIPES];   /* local lock table */
	struct sh_llock *llt;                 /* nparts * locks */
	pthread_mutex_t lock;                 /* tidx_used, workers, retired */
	uint64_t tidx_used;
	uint64_t slot_tag[64];                /* last lock tag of each thread
					       * slot: a slot's next worker
					       * issues tags above it */
	struct loco_sherman_worker *workers;
	uint64_t retired[SH_NSTATS];
};
static_assert(offsetof(struct loco_sherman, base) == 0, "base first");

/* ---- persistence points (docs/sherman.md, "Durability") ------------------ */

/* Whether NODE keeps a durable image: its writes need persists. */
static inline bool sh_durable(const struct loco_sherman *t, uint32_t node)
{
	return node < 64 && (t->durable >> node & 1);
}
/* The same, for the write-backs the broken variant
 * LOCO_SHERMAN_UNSAFE_NO_PERSIST releases unpersisted. */
static inline bool sh_op_durable(const struct loco_sherman *t, uint32_t node)
{
	return sh_durable(t, node) &&
	       !(t->o.unsafe & LOCO_SHERMAN_UNSAFE_NO_PERSIST);
}

/* 0, or -ENOTCONN for a worker whose reset failed (rtx mode: no rTX
 * worker until a reset succeeds). */
static inline int sh_ready(const struct loco_sherman_worker *w);

/* A lock held by a worker (plain mode). */
struct sh_held {
	uint32_t pi, idx;          /* hosting part, lock index */
	uint64_t word;             /* our word in the lock table */
	bool local;                /* we own the local lock (HOCL) */
	bool raw;                  /* set by the caller: read the node
				    * unchecked (the root's creation) */
};

/* An entry being sorted for a split: leaf value, or internal child (8
 * bytes), in a node image. */
struct sh_kv {
	uint64_t key;
	const uint8_t *val;
};
/* The entries of full leaf IMG plus {KEY, VAL}, sorted by key, into E
 * (leaf_slots + 1 of them); returns their number. */
unsigned sh_leaf_entries(const struct loco_sherman *t, void *img, uint64_t key,
			 const void *val, struct sh_kv *e);
/* The separators of full internal IMG plus {KEY, CHILD}, copied into ALL
 * (a node buffer); E[i] = {separator i, its child in ALL}. Returns their
 * number; the leftmost child stays sh_int_child(ALL, 0). */
unsigned sh_int_entries(const struct loco_sherman *t, const void *img,
			uint64_t key, loco_raddr_t child, uint8_t *all,
			struct sh_kv *e);
/* The halves of a split of full node IMG whose entries, with the new
 * one, are E[0..N) (sorted; internal: LEFT its leftmost child): LO, node
 * LO_SELF at version LO_NV, takes IMG's low fence and E[0..N/2); HI, new
 * node HI_SELF, takes the rest (internal: E[N/2] moves up, its child
 * leading HI), IMG's high fence and sibling, and is LO's sibling.
 * Returns the separator, HI's low fence. A root split passes a new node
 * as LO_SELF (the root's address stays the root's: sh_root_image). */
uint64_t sh_split_halves(const struct loco_sherman *t, const void *img,
			 const struct sh_kv *e, unsigned n, loco_raddr_t left,
			 loco_raddr_t lo_self, uint64_t lo_nv, void *lo,
			 loco_raddr_t hi_self, void *hi);
/* Into OUT the split root ROOT (image) as the parent of its halves LO
 * and HI, separated at SEP: one level up, version + 1. */
void sh_root_image(const struct loco_sherman *t, const void *root,
		   uint64_t sep, loco_raddr_t lo, loco_raddr_t hi, void *out);
/* Leaf slots 0..N-1 from E, then seal; internal pairs from E, then seal. */
void sh_leaf_fill(const struct loco_sherman *t, void *img,
		  const struct sh_kv *e, unsigned n);
void sh_int_fill(const struct loco_sherman *t, void *img,
		 const struct sh_kv *e, unsigned n);

#define SH_PENDING (2 * SH_LEVELS + 2)

/* Where a descent went: the node of each level on the way to the key
 * (0 where it did not pass), and whether it was read remotely. */
struct sh_path {
	loco_raddr_t at[SH_LEVELS];
	bool fresh[SH_LEVELS];
};

struct loco_sherman_worker {
	struct loco_sherman *t;
	struct loco_thread *thr;
	struct loco_rtx_worker *xw;   /* rtx mode */
	uint32_t slot, tidx;
	uint64_t tag;                 /* last lock tag issued */
	uint64_t tag_floor;           /* every tag this worker issues is
				       * above it (lock.c's own_word) */
	uint32_t rr;                  /* next part to allocate from */
	uint32_t *chunk_next, *chunk_end; /* per part: node indices in hand */
	/* node images (node_size + 128 each): 0 a descent's, 1 the op's,
	 * 2 and 3 a split's halves, 4 scratch of splits, 5 redo data, 6 a
	 * new root */
	uint8_t *nb[7];
	uint8_t *redo;                /* redo record (WRITE source) */
	uint64_t seqw[2];             /* seq words (WRITE sources) */
	uint64_t cas_old;
	struct loco_sherman_worker *next;
	/* scans: the leaves read (address, seq or stamp, re-read value),
	 * the pairs collected (keys, values, order) */
	loco_raddr_t *scan_addr;
	uint64_t *scan_seq, *scan_seq2;
	unsigned scan_cap;
	uint64_t *pk;
	uint8_t *pv;
	uint32_t *po;
	unsigned pcap;
	/* scan prefetch: leaves read in one round, their seq words */
	loco_raddr_t pf_addr[SH_PREFETCH];
	uint64_t pf_s1[SH_PREFETCH], pf_s2[SH_PREFETCH];
	uint8_t *pf_img;
	unsigned pf_n, pf_next;
	struct sh_kv *kv;             /* split scratch: a node's entries + 1 */
	/* rtx mode: where the next attempt starts (a move right), attempts
	 * of the operation, node addresses taken by this attempt and left
	 * by aborted ones */
	loco_raddr_t hint;
	unsigned tries, npending, nspare;
	unsigned tx_splits, tx_root_splits; /* the attempt's, counted once
					     * it commits */
	loco_raddr_t pending[SH_PENDING], spare[SH_PENDING];
	struct sh_counters st;
};

static inline int sh_ready(const struct loco_sherman_worker *w)
{
	return w->t->o.rtx && !w->xw ? -ENOTCONN : 0;
}

static inline void sh_count_add(struct loco_sherman_worker *w, size_t idx,
				uint64_t n)
{
	/* Relaxed: single writer; readers only sum statistics. */
	uint64_t v = atomic_load_explicit(&w->st.v[idx], memory_order_relaxed);
	atomic_store_explicit(&w->st.v[idx], v + n, memory_order_relaxed);
}
#define SH_INC(w, field) sh_count_add((w), SH_STAT(field), 1)
#define SH_INC_BY(w, field, n) sh_count_add((w), SH_STAT(field), (n))

/* ---- node.c --------------------------------------------------------------- */

uint64_t sh_leaf_hdr_check(const void *img);
uint64_t sh_int_check(const void *img, uint32_t node_size);
uint64_t sh_entry_check(const uint8_t *ent, uint32_t value_len, uint64_t nv,
			bool used);
/* Seal an image: header check (leaf) or whole-node check (internal). */
void sh_seal(const struct loco_sherman *t, void *img);
/* Write leaf slot I: KEY and VAL (NULL: empty slot) under version NV. */
void sh_leaf_set(const struct loco_sherman *t, void *img, unsigned i,
		 uint64_t key, const void *val);
/* An empty leaf or internal image (all slots empty, checks sealed). */
void sh_leaf_init(const struct loco_sherman *t, void *img, loco_raddr_t self,
		  uint64_t low, uint64_t high, loco_raddr_t sibling, uint64_t nv);
void sh_int_init(const struct loco_sherman *t, void *img, loco_raddr_t self,
		 unsigned level, uint64_t low, uint64_t high,
		 loco_raddr_t sibling, uint64_t nv, loco_raddr_t leftmost);
/* Whether IMG passes its checks (and is the node at ADDR, if not 0). */
bool sh_node_ok(const struct loco_sherman *t, const void *img,
		loco_raddr_t addr);
static inline uint8_t *sh_slot(const struct loco_sherman *t, void *img,
			       unsigned i)
{
	return (uint8_t *)img + SH_HDR + (size_t)i * t->entry_len;
}
/* Slot of KEY in leaf IMG, or -1; *FREE (may be NULL) gets a free slot
 * or -1. */
int sh_leaf_find(const struct loco_sherman *t, const void *img, uint64_t key,
		 int *free_slot);
bool sh_slot_used(const struct loco_sherman *t, const void *img, unsigned i);
/* Internal nodes: key I (1-based pairs), child I (0: leftmost). */
uint64_t sh_int_key(const void *img, unsigned i);
loco_raddr_t sh_int_child(const void *img, unsigned i);
/* Number of separators of internal IMG that are <= KEY: the index of
 * the child whose range holds KEY. */
unsigned sh_int_rank(const void *img, uint64_t key);
/* Child of internal IMG whose range holds KEY. */
loco_raddr_t sh_int_pick(const void *img, uint64_t key);
/* Whether internal IMG has separator KEY (child into *CHILD). */
bool sh_int_has(const void *img, uint64_t key, loco_raddr_t *child);
/* Whether internal IMG (covering KEY) leads to the node whose low fence is
 * KEY by a separator, or by its leftmost child (KEY is IMG's own low
 * fence: IMG was split off at KEY, taking that child along). */
bool sh_int_linked(const void *img, uint64_t key);
/* Insert pair {KEY, CHILD} into internal IMG (room checked by caller). */
void sh_int_insert(void *img, uint64_t key, loco_raddr_t child);

/* ---- tree.c --------------------------------------------------------------- */

uint64_t sh_now_ms(const struct loco_sherman *t);
/* Part index and region offset of node address A (plain mode). */
int sh_locate(const struct loco_sherman *t, loco_raddr_t a, uint32_t *pi,
	      uint64_t *off);
/* A fresh node address (round robin over the parts): 0 or -ENOSPC. */
int sh_alloc(struct loco_sherman_worker *w, loco_raddr_t *out);
int sh_wait(struct loco_sherman_worker *w, struct loco_ack *ack);
/* Plain mode: node A's part *PI and offset *NOFF in the part's node
 * pool, and batch B started (the ops of B to that part share a QP, so
 * it places them in the order added). 0 or -EINVAL (not a node). */
int sh_node_batch(struct loco_sherman_worker *w, loco_raddr_t a,
		  struct loco_batch *b, uint32_t *pi, uint64_t *noff);
/* Post batch B and wait for it. */
int sh_batch_wait(struct loco_sherman_worker *w, struct loco_batch *b);

/* ---- read.c: node reads and descents --------------------------------------- */

/* Read node A into IMG, checked, read again while torn (plain) or while
 * a commit replaces it (rtx). Returns 0, -ETIMEDOUT or an op error. */
int sh_read_node(struct loco_sherman_worker *w, loco_raddr_t a, void *img);
/* The same; rtx mode: *STAMP gets the object's lock word (loco_rtx_peek). */
int sh_read_node_stamp(struct loco_sherman_worker *w, loco_raddr_t a,
		       void *img, uint64_t *stamp);
/* After a read of node A that failed its checks (or, in a scan, its seq
 * test): count it, every SH_REPAIR_EVERY-th time (*TRIES) settle A's
 * lock if its lease is over (plain mode: a dead writer's torn write is
 * redone), then a step of WAIT. 0: read again; -ETIMEDOUT (logged) or a
 * repair's error. */
int sh_torn_step(struct loco_sherman_worker *w, loco_raddr_t a,
		 unsigned *tries, struct loco_wait *wait);
/* Descend towards KEY to level LEVEL (from the cache unless NOCACHE):
 * *OUT gets the address of the node there that should hold KEY (not
 * read), PATH the nodes passed. */
int sh_descend(struct loco_sherman_worker *w, uint64_t key, unsigned level,
	       bool nocache, loco_raddr_t *out, struct sh_path *path);
/* Read the node of LEVEL holding KEY into IMG, starting at A and moving
 * right; *A gets its address. -ESTALE if A's low fence is above KEY. */
int sh_read_covering(struct loco_sherman_worker *w, uint64_t key,
		     loco_raddr_t *a, void *img);

/* ---- lock.c (plain mode) ---------------------------------------------------- */

int sh_llt_init(struct loco_sherman *t);
/* Index of node A's global lock word (its part's lock table). */
uint32_t sh_lock_index(const struct loco_sherman *t, loco_raddr_t a);
/* Check of redo record R (header) and its DATA. */
uint64_t sh_redo_check(const struct sh_redo *r, const void *data);
void sh_llt_fini(struct loco_sherman *t);
/* Lock node A (HOCL) and read it into IMG (checked). */
int sh_lock_node(struct loco_sherman_worker *w, loco_raddr_t a, void *img,
		 struct sh_held *h);
/* Make sure the lease of H lasts a write-back (renewing it): 0, or
 * -EAGAIN (the lock was lost) or an op error, H's local lock then passed
 * on (a global word still ours expires with its lease). */
int sh_lock_keep(struct loco_sherman_worker *w, struct sh_held *h);
/* Write LEN bytes of DATA at offset OFF of node A (held by H, whose seq
 * word was SEQ), with its redo record and the seq bumps, then release H
 * (combined, or handed over). */
int sh_write_release(struct loco_sherman_worker *w, struct sh_held *h,
		     loco_raddr_t a, uint64_t seq, uint32_t off,
		     const void *data, uint32_t len);
/* The same, with new node PRE (image PRE_IMG, not yet reachable, on A's
 * hosting node) written whole first in the same batch (a split's new
 * sibling, Sherman's second combination). */
int sh_write_release_pre(struct loco_sherman_worker *w, struct sh_held *h,
			 loco_raddr_t a, uint64_t seq, uint32_t off,
			 const void *data, uint32_t len, loco_raddr_t pre,
			 const void *pre_img);
/* The same without releasing: placed on return. */
int sh_write_placed(struct loco_sherman_worker *w, struct sh_held *h,
		    loco_raddr_t a, uint64_t seq, uint32_t off,
		    const void *data, uint32_t len);
void sh_unlock(struct loco_sherman_worker *w, struct sh_held *h);
/* A reader that keeps finding node A torn: if A's lock is held with its
 * lease over, settle it (a dead writer's torn write-back is completed by
 * its redo record). */
int sh_lock_repair(struct loco_sherman_worker *w, loco_raddr_t a);
/* Settle every lock of the tree held by SLOT (all slots: ~0u) after its
 * lease: steal, redo, release; with OWN (W between its operations, SLOT
 * its own) the words W made itself at once, without waiting for their
 * lease. *HELD: how many are still held. */
int sh_settle_locks(struct loco_sherman_worker *w, uint32_t slot, bool own,
		    int timeout_ms, uint64_t *held);
/* W's words so far are not its own (own_word): a new worker's, set once
 * it settled what its slot's earlier workers left; its next tag is above
 * every tag issued before now. */
void sh_tag_floor(struct loco_sherman_worker *w);

/* ---- plain.c / rtxmode.c ------------------------------------------------------ */

enum sh_op { SH_INSERT, SH_UPDATE, SH_DELETE };
int sh_plain_write(struct loco_sherman_worker *w, enum sh_op op, uint64_t key,
		   const void *val);
/* Plain mode: insert separator KEY -> CHILD into level LEVEL (idempotent). */
int sh_plain_link(struct loco_sherman_worker *w, unsigned level, uint64_t key,
		  loco_raddr_t child, loco_raddr_t hint);
int sh_plain_init_root(struct loco_sherman_worker *w);
int sh_rtx_write(struct loco_sherman_worker *w, enum sh_op op, uint64_t key,
		 const void *val);
int sh_rtx_init_root(struct loco_sherman_worker *w);

/* ---- scan.c ---------------------------------------------------------------------- */

int sh_scan(struct loco_sherman_worker *w, uint64_t lo, uint64_t hi,
	    unsigned max, uint64_t *keys, void *vals, unsigned *n);

#endif
