/* SPDX-License-Identifier: MIT */
/* Private structures of RACE hashing (not installed): remote layouts of
 * buckets, slots, KV blocks, descriptors and the KV pool, and the local
 * handles. See docs/race.md for the protocols. */
#ifndef LOCO_RACE_INTERNAL_H
#define LOCO_RACE_INTERNAL_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channel.h>
#include <loco/loco.h>
#include <loco/channels/race/race.h>
#include <loco/rtx/rtx.h>

/* ---- subtable geometry (RACE §3.2) ----------------------------------------
 * A bucket is 64 B: a header word and 7 slots. A group is 3 buckets, two
 * main buckets around the overflow bucket they share; a combined bucket
 * (main + overflow) is 128 contiguous bytes, so one READ fetches it. */
#define RACE_SLOTS 7
#define RACE_BUCKET_BYTES 64
#define RACE_GROUP_BYTES (3 * RACE_BUCKET_BYTES)
#define RACE_ST_BYTES_MAX (UINT32_C(64) << 20)   /* a subtable at most */
#define RACE_CBUCKET_BYTES (2 * RACE_BUCKET_BYTES)
#define RACE_CSLOTS (2 * RACE_SLOTS)       /* slots of a combined bucket */

/* Bucket header: | VALID | CLOSED | 0 (22) | ld (8) | suffix (32) |.
 * CLOSED marks a group of a cas-mode child whose move is not done (no
 * insert there yet). */
#define RACE_HDR_VALID (UINT64_C(1) << 63)
#define RACE_HDR_CLOSED (UINT64_C(1) << 62)

static inline uint64_t race_hdr(unsigned ld, uint32_t suffix, bool closed)
{
	return RACE_HDR_VALID | (closed ? RACE_HDR_CLOSED : 0) |
	       (uint64_t)ld << 32 | suffix;
}

static inline unsigned race_hdr_ld(uint64_t h)
{
	return (unsigned)(h >> 32) & 0xff;
}

static inline uint32_t race_hdr_suffix(uint64_t h)
{
	return (uint32_t)h;
}

/* ---- slots ----------------------------------------------------------------
 * | fp (8) | len (8) | T | M | node (6) | gen (10) | block (30) |
 * fp: fingerprint (top byte of the key's hash); len: KV block length in
 * 64-byte units (1..255); then the 48-bit pointer: T (tentative: an
 * insert not yet committed, invisible to readers), M (moving/frozen: no
 * operation may change it, a resize owns it), the memory node (index in
 * the table's node list), the block's generation (its low 10 bits) and
 * the block index in that node's KV pool. 0 is an empty slot; M alone a
 * frozen empty one. */
#define RACE_SLOT_T (UINT64_C(1) << 47)
#define RACE_SLOT_M (UINT64_C(1) << 46)
#define RACE_GEN_BITS 10
#define RACE_BLOCK_BITS 30
#define RACE_MAX_BLOCKS (UINT32_C(1) << RACE_BLOCK_BITS)
#define RACE_LEN_UNIT 64
#define RACE_LEN_MAX 255

static inline uint64_t race_slot(uint8_t fp, unsigned len, unsigned ni,
				 unsigned gen, uint32_t block)
{
	return (uint64_t)fp << 56 | (uint64_t)(len & 0xff) << 48 |
	       (uint64_t)(ni & 0x3f) << 40 |
	       (uint64_t)(gen & ((1u << RACE_GEN_BITS) - 1)) << 30 |
	       (block & (RACE_MAX_BLOCKS - 1));
}

static inline uint8_t race_slot_fp(uint64_t s) { return (uint8_t)(s >> 56); }
static inline unsigned race_slot_len(uint64_t s) { return (unsigned)(s >> 48) & 0xff; }
static inline unsigned race_slot_ni(uint64_t s) { return (unsigned)(s >> 40) & 0x3f; }
static inline unsigned race_slot_gen(uint64_t s)
{
	return (unsigned)(s >> 30) & ((1u << RACE_GEN_BITS) - 1);
}
static inline uint32_t race_slot_block(uint64_t s)
{
	return (uint32_t)(s & (RACE_MAX_BLOCKS - 1));
}
/* Holds an item (committed, tentative or frozen). */
static inline bool race_slot_item(uint64_t s) { return race_slot_len(s) != 0; }
static inline bool race_slot_tent(uint64_t s) { return (s & RACE_SLOT_T) != 0; }
static inline bool race_slot_frozen(uint64_t s) { return (s & RACE_SLOT_M) != 0; }
/* The item without its flags: what a committed slot holds. */
static inline uint64_t race_slot_plain(uint64_t s)
{
	return s & ~(RACE_SLOT_T | RACE_SLOT_M);
}

/* cas mode's moves (docs/race.md, "Stale movers"): a word a move froze
 * carries the move's epoch (8 bits) where the fingerprint was, T clear;
 * an empty slot of a child's group not moved yet is M alone with the
 * epoch (closed-empty). A mover's CASes all expect words of its own
 * epoch, so once a takeover re-marked them with a new one, every CAS of
 * the old mover fails. Readers take any frozen item of a cas-mode table
 * as a fingerprint match (its key is in its block). */
static inline uint64_t race_slot_mark(uint64_t v, unsigned epoch)
{
	return (v & ~(UINT64_C(0xff) << 56) & ~RACE_SLOT_T) | RACE_SLOT_M |
	       (uint64_t)(epoch & 0xff) << 56;
}
static inline unsigned race_slot_epoch(uint64_t v) { return (unsigned)(v >> 56); }
/* A and B name the same item (flags, fingerprint and epoch aside). */
static inline bool race_slot_same(uint64_t a, uint64_t b)
{
	return !((a ^ b) & ((UINT64_C(1) << 56) - 1) & ~(RACE_SLOT_T | RACE_SLOT_M));
}

/* ---- KV blocks (RACE Fig. 6) ------------------------------------------------
 * Out of place, fixed size per table (block_len, a multiple of 64):
 *   word 0  gen (16) | DEAD | klen (15) | vlen (32)
 *   word 1  the key's hash (resizes read it to split by suffix)
 *   word 2  checksum: XXH3 of the block with word 2 zero and DEAD clear,
 *           up to the end of the value
 *   key, value
 * gen is never 0 in a used block, so word 0 = 0 is a block never used.
 * Whoever unlinks a block (the CAS that removed its last slot) frees it by
 * CASing DEAD into word 0 (the word it read): idempotent, and a late CAS
 * aimed at an earlier generation fails. Only the block's chunk owner
 * hands blocks out, and only blocks it finds DEAD or never used. */
#define RACE_KV_HDR 24
#define RACE_KV_DEAD (UINT64_C(1) << 47)

static inline uint64_t race_kv_w0(unsigned gen, uint32_t klen, uint32_t vlen)
{
	return (uint64_t)(gen & 0xffff) << 48 | (uint64_t)(klen & 0x7fff) << 32 |
	       vlen;
}

static inline unsigned race_kv_gen(uint64_t w0) { return (unsigned)(w0 >> 48); }
static inline uint32_t race_kv_klen(uint64_t w0) { return (uint32_t)(w0 >> 32) & 0x7fff; }
static inline uint32_t race_kv_vlen(uint64_t w0) { return (uint32_t)w0; }
/* In use: written and not freed. */
static inline bool race_kv_live(uint64_t w0)
{
	return w0 && !(w0 & RACE_KV_DEAD);
}

/* ---- KV pool chunks ----------------------------------------------------------
 * Per memory node, one owner word per chunk of 64 blocks: a client slot
 * and its incarnation (incarnation << 16 | slot + 1), 0: nobody. */
#define RACE_CHUNK_BLOCKS 64
static_assert(LOCO_RACE_KV_BLOCKS_MAX == RACE_MAX_BLOCKS - RACE_CHUNK_BLOCKS,
	      "kv_blocks rounded up to whole chunks fits a block index");

/* ---- descriptors -------------------------------------------------------------
 * One rTX object per suffix slot (2^max_depth of them): the subtable whose
 * suffix is that slot's index, its local depth, state and block. The value
 * (16 B, rtx data) is word 0 | VALID | state (8) | ld (8) | node (16) |,
 * word 1 the block's arena offset on that node. A never-written object
 * reads as zeros: no subtable. */
#define RACE_DESC_VALID (UINT64_C(1) << 63)
/* Bits 24-31 of word 0: the epoch of the subtable's latest cas-mode move
 * (a child starts from its parent's, so no move of the parent's or the
 * child's region reuses an epoch a stale mover may still hold, until
 * 256 moves and takeovers wrapped it). */
#define RACE_DESC_EPOCH_SHIFT 24
static inline unsigned race_desc_epoch(uint64_t w0)
{
	return (unsigned)(w0 >> RACE_DESC_EPOCH_SHIFT) & 0xff;
}
static inline uint64_t race_desc_set_epoch(uint64_t w0, unsigned epoch)
{
	return (w0 & ~(UINT64_C(0xff) << RACE_DESC_EPOCH_SHIFT)) |
	       (uint64_t)(epoch & 0xff) << RACE_DESC_EPOCH_SHIFT;
}
enum race_state {
	RACE_LIVE = 1,        /* a subtable in use */
	RACE_SPLITTING = 2,   /* cas mode: its items are moving to its child */
	RACE_MOVING = 3,      /* cas mode: the child being filled */
};

struct race_desc {
	uint64_t w0;
	uint64_t off;
};
static_assert(sizeof(struct race_desc) == 16, "remote layout");

static inline uint64_t race_desc_w0(enum race_state st, unsigned ld,
				    uint32_t node)
{
	return RACE_DESC_VALID | (uint64_t)st << 48 | (uint64_t)ld << 40 |
	       (node & 0xffff);
}

/* Remote superblock (home node): the layout hash, set once by CAS. */
struct race_super {
	uint64_t cfg;
	uint64_t pad[7];
};

/* ---- local handles ----------------------------------------------------------- */

/* One memory node's part: the sub-channel "<name>/m<id>" with its KV pool
 * ("kv") and chunk table ("kvc"), hosted there. */
struct race_mnode {
	struct loco_channel base;
	uint32_t id;
	struct loco_rregion kv, kvc;
};
static_assert(offsetof(struct race_mnode, base) == 0, "base first");

#define RACE_NSTATS (sizeof(struct loco_race_stats) / sizeof(uint64_t))
#define RACE_STAT(f) (offsetof(struct loco_race_stats, f) / sizeof(uint64_t))

struct loco_race {
	struct loco_channel base;            /* "<name>": super, slots */
	struct loco_race_opts o;
	struct loco_rtx *rtx;                /* "<name>/rtx": descriptors */
	struct loco_rregion super, slots;
	unsigned nmn;
	struct race_mnode *mn;               /* memory nodes, by index */
	int8_t mn_idx[LOCO_MAX_NODES];
	uint32_t home;
	uint32_t groups, st_bytes, block_len, nblocks, nchunks;
	uint32_t ndesc;                      /* 1 << max_depth */
	uint32_t nslots;                     /* client slots (incarnations) */
	uint64_t cfg;
	uint64_t durable;                    /* hosting nodes with a durable
					      * image (a bit per id): their
					      * writes need persists */
	struct loco_rregion meta;            /* the descriptors' TXObjs (the
					      * rtx's metadata on the home) */
	pthread_mutex_t lock;                /* retired, clients */
	uint64_t retired[RACE_NSTATS];
	struct loco_race_client *clients;
};
static_assert(offsetof(struct loco_race, base) == 0, "base first");

/* A client's cached descriptor. */
/* A subtable's region: buckets are read, slots CAS'd, headers written. */
#define RACE_ST_ACCESS LOCO_REGION_REMOTE_ALL

struct race_cdesc {
	uint8_t valid, state, ld;
	uint8_t ni;             /* memory node index of the block */
	uint8_t access;         /* its region's remote access, as the node
				 * declared it (0: unknown, ops checked out
				 * of line) */
	uint64_t off;           /* arena offset of the block */
};

/* One owned chunk of a client's pool on one memory node. */
struct race_own {
	uint32_t idx;
	uint64_t free;          /* blocks we may hand out (DEAD or unused) */
	uint64_t used;          /* blocks handed out since (LIVE, or freed
				 * by an unlinker we have not looked at) */
	uint16_t gen[RACE_CHUNK_BLOCKS];
};

struct race_pool {
	struct race_own *ch;
	unsigned n, cap;
	uint32_t cursor;
	uint64_t nfree;         /* free blocks over every owned chunk */
	unsigned first_free;    /* no chunk below this index has a free
				 * block: take starts there (a scan from 0
				 * made a load of N keys cost N^2 / 64) */
	int64_t ahead;          /* chunk whose words a READ ahead fetches, -1 */
	unsigned ahead_pos;     /* its index in ch (chunks never move) */
	uint64_t ahead_want;    /* its blocks whose words it fetches */
	unsigned ahead_next;    /* where the next READ ahead or reclaim
				 * starts (round robin over ch) */
	unsigned claim_skip;    /* reclaims left before a claim is tried
				 * again (one found no free chunk) */
	uint8_t *abuf;          /* its destination */
};

/* Everything needed to address one subtable. */
struct race_st {
	uint32_t suffix;
	unsigned ld;
	enum race_state state;
	unsigned ni;
	struct loco_rregion rr;
};

#define RACE_PEND_MAX 4
#define RACE_OWE_MAX 8

struct loco_race_client {
	struct loco_race *r;
	struct loco_thread *thr;
	struct loco_rtx_worker *w;
	uint32_t slot;
	uint64_t inc;
	struct race_cdesc *cache;            /* ndesc entries */
	unsigned gd;                         /* largest ld cached */
	struct race_pool *pool;              /* per memory node */
	uint8_t *kvw;                        /* WRITE source: our new block */
	uint8_t *kvr;                        /* READ destination: blocks */
	uint8_t *big;                        /* resize and scan buffers */
	size_t big_len;
	struct loco_ack pend;                /* async frees (DEAD CASes) */
	uint64_t pend_old[RACE_PEND_MAX];
	unsigned npend;
	uint64_t rng;
	uint32_t split_seq;
	uint64_t renew_ns;                   /* last lease renewal */
	uint32_t owe[RACE_OWE_MAX];          /* nodes whose expired locks our
					      * worker's rTX repair took, not
					      * fenced yet (race_fence_owed) */
	unsigned nowe;
	bool owe_lost;                       /* more than RACE_OWE_MAX */
	uint64_t ph_ns;                      /* the split's phase clock: */
	struct loco_stats ph_st;             /* when and counters at the
					      * last phase boundary */
	_Atomic uint64_t st[RACE_NSTATS];
	struct loco_race_client *next;
};

/* ---- race.c ----------------------------------------------------------------- */
/* Crash point NAME (loco_crash_point), then the test stop point
 * LOCO_RACE_STOP_AT may name (race.c). */
void race_point(const char *name);

static inline void race_count(struct loco_race_client *c, size_t i, uint64_t n)
{
	/* Relaxed: the client's thread is the only writer; readers sum. */
	uint64_t v = atomic_load_explicit(&c->st[i], memory_order_relaxed);
	atomic_store_explicit(&c->st[i], v + n, memory_order_relaxed);
}
#define RACE_INC(c, f) race_count((c), RACE_STAT(f), 1)

/* Start the phase clock of a split (race_phase_end closes phases). */
static inline void race_phase_start(struct loco_race_client *c)
{
	c->ph_ns = loco_now_ns();
	loco_thread_stats(c->thr, &c->ph_st);
}

/* The time, round trips and verbs since the last boundary go to phase
 * PH: two clock reads' worth (a clock read, a counter snapshot). */
static inline void race_phase_end(struct loco_race_client *c,
				  enum loco_race_phase ph)
{
	uint64_t now = loco_now_ns();
	struct loco_stats s;
	loco_thread_stats(c->thr, &s);
	race_count(c, RACE_STAT(phase_ns) + ph, now - c->ph_ns);
	race_count(c, RACE_STAT(phase_rtts) + ph, s.rtts - c->ph_st.rtts);
	race_count(c, RACE_STAT(phase_verbs) + ph,
		   loco_stats_verbs(&s) - loco_stats_verbs(&c->ph_st));
	c->ph_ns = now;
	c->ph_st = s;
}

/* The key's hashes. */
struct race_key {
	const void *key;
	uint32_t klen;
	uint64_t h1, h2;
	uint8_t fp;
	uint32_t m1, m2;        /* main buckets */
};
void race_key_init(const struct loco_race *r, struct race_key *k,
		   const void *key, uint32_t klen);
/* Descriptor object of suffix slot S. */
loco_raddr_t race_desc_obj(const struct loco_race *r, uint32_t s);
/* Decode a descriptor value into the cache entry E. */
void race_cdesc_set(const struct loco_race *r, struct race_cdesc *e,
		    const struct race_desc *d);
/* Subtable of hash H1 from the cache (refreshing it once if needed). */
int race_locate(struct loco_race_client *c, uint64_t h1, struct race_st *st);
/* The subtable in cache slot S (valid), as a race_st. */
void race_st_of(const struct loco_race *r, const struct race_cdesc *e,
		uint32_t s, struct race_st *st);
/* Fence every node whose expired lock our worker's rTX repair took
 * since the last call (docs/race.md, "Fencing"): 0 when all are fenced
 * (or the transport has nothing that can refuse, -EOPNOTSUPP), else
 * -EAGAIN: the caller must not act for them yet (it waits and tries
 * again); -LOCO_EFENCED when this node was fenced itself. */
int race_fence_owed(struct loco_race_client *c);
/* Whether a fence is owed (race_fence_owed has work). */
bool race_fence_pending(const struct loco_race_client *c);
/* Set the client worker's rTX hooks (the repairs it must fence for). */
void race_worker_hooks(struct loco_race_client *c);
/* Re-read the descriptors on H1's chain (one per depth). */
int race_refresh(struct loco_race_client *c, uint64_t h1);
/* Re-read descriptor S; *LOCK gets its lock word. */
int race_refresh_one(struct loco_race_client *c, uint32_t s, uint64_t *lock);
uint32_t race_node_for(const struct loco_race *r, uint32_t suffix);
void race_backoff(struct loco_race_client *c, unsigned *tries);
uint64_t race_rand(struct loco_race_client *c);
uint64_t race_deadline(const struct loco_race_client *c);
/* Wait for the client's asynchronous ops (c->pend: frees, READs ahead,
 * posted lists), if any, before touching their buffers. The set is
 * cleared only when the wait returns 0. */
int race_pend_wait(struct loco_race_client *c);
/* Post batch B into the asynchronous set and wait for all of it: one
 * round trip. */
int race_run(struct loco_race_client *c, struct loco_batch *b);

/* ---- persistence points (docs/race.md, "Durability") ----------------------
 * Nothing is posted for a node without a durable image: there a FLUSH
 * would be a fence the callers do not need. */
static inline bool race_durable(const struct loco_race *r, uint32_t node)
{
	return node < 64 && (r->durable >> node & 1);
}
/* The operations' own persistence points, which the broken variant
 * LOCO_RACE_BROKEN_NO_PERSIST leaves out (setup, allocation and resizes
 * keep theirs). */
static inline bool race_op_durable(const struct loco_race *r, uint32_t node)
{
	return race_durable(r, node) &&
	       !(r->o.broken & LOCO_RACE_BROKEN_NO_PERSIST);
}
/* Post into the client's asynchronous set the FLUSHes that make durable
 * everything its thread wrote to NODE (a FLUSH executes after the
 * requests before it on the QP): the next wait covers them. */
int race_persist_post(struct loco_race_client *c, uint32_t node);
/* The same, and wait. */
int race_persist(struct loco_race_client *c, uint32_t node);
/* Post the FLUSH of [OFF, OFF+LEN) of RR, whoever wrote those bytes: what
 * the client read and acts on, or returns, is durable once the wait
 * covering it returns. */
int race_persist_seen(struct loco_race_client *c, const struct loco_rregion *rr,
		      uint64_t off, uint64_t len);
/* CAS OFF of RR; with PERSIST (and RR's node durable) its FLUSH follows
 * it in the same round trip. 0 or an op error; *OLD the word found. */
int race_cas_sync(struct loco_race_client *c, const struct loco_rregion *rr,
		  uint64_t off, uint64_t expect, uint64_t desired,
		  uint64_t *old, bool persist);
/* READ [OFF, OFF+LEN) of RR into DST and (RR's node durable) FLUSH it
 * behind the READ: one round trip, the bytes read durable. */
int race_read_seen(struct loco_race_client *c, const struct loco_rregion *rr,
		   uint64_t off, void *dst, uint32_t len);
/* Make the values of descriptors S[0..N) durable as they are (a value
 * read by loco_rtx_peek may be installed and not yet persisted by its
 * commit, which persists it before it releases the lock). One round
 * trip on a durable home, nothing otherwise. */
int race_desc_persist(struct loco_race_client *c, const uint32_t *s,
		      unsigned n);

/* Any number of ops, posted into the client's asynchronous set in batches
 * of LOCO_BATCH_MAX (a doorbell each) as they are added; race_ops_run
 * waits for all of them at once: one round trip. */
struct race_ops {
	struct loco_race_client *c;
	struct loco_batch b;
	int rc;                  /* first error of a post */
};
void race_ops_init(struct race_ops *l, struct loco_race_client *c);
void race_ops_read(struct race_ops *l, const struct loco_rregion *rr,
		   uint64_t off, void *dst, uint32_t len);
void race_ops_cas(struct race_ops *l, const struct loco_rregion *rr,
		  uint64_t off, uint64_t expect, uint64_t desired, uint64_t *old);
/* Post what is left, no wait (the client's next wait covers it); the
 * list is empty again. 0 or the first error. */
int race_ops_post(struct race_ops *l);
/* Post what is left and wait for everything: 0 or the first error. */
int race_ops_run(struct race_ops *l);
/* The same with the persist of this thread's writes to NODE behind them
 * (a durable NODE): each step of a move is durable before the next. */
int race_ops_run_durable(struct race_ops *l, uint32_t node);

/* ---- ops.c ------------------------------------------------------------------ */
/* Checksum of the LEN bytes of KV block BLK, with word 2 zero and DEAD
 * clear (BLK is restored before return). */
uint64_t race_kv_sum(uint8_t *blk, uint32_t len);
/* Slot V names no block of the table (its node, block or length out of
 * range). */
bool race_slot_bad(const struct loco_race *r, uint64_t v);
/* KV block BLK, as READ for slot V (race_slot_len(V) units), is whole: of
 * V's generation, its length within the slot's and the table's, its
 * checksum right (freed or not). *W0 gets its word 0 then. */
bool race_kv_whole(const struct loco_race *r, uint8_t *blk, uint64_t v,
		   uint64_t *w0);

/* ---- split.c ------------------------------------------------------------------ */
/* Split the subtable ST (RACE §3.4.2 in cas mode, one rTX transaction in
 * rtx mode), or finish a split that another client left. Returns 0 (split
 * or already split: refresh and retry), -EAGAIN (another client holds the
 * lock: wait), -ENOSPC (at max depth) or an error. */
int race_split(struct loco_race_client *c, const struct race_st *st);
/* Run or finish the cas-mode move of parent suffix S (TAKEOVER: another
 * client started it); 0 (done, or done by someone meanwhile) or -EAGAIN
 * (its owner holds the lock). */
int race_move_finish(struct loco_race_client *c, uint32_t s, bool takeover);
/* An operation met a frozen slot or closed group of ST: wait for the
 * resize, helping (taking over) once its owner's lease is over. 0: the
 * cache may have changed, retry. */
int race_wait_resize(struct loco_race_client *c, const struct race_st *st,
		     unsigned *tries);

/* ---- alloc.c ------------------------------------------------------------------ */
int race_pools_init(struct loco_race_client *c);
void race_pools_fini(struct loco_race_client *c);
/* Drop every chunk we own, writing nothing (a reset: the next
 * incarnation adopts them). */
void race_pools_forget(struct loco_race_client *c);
/* A block on memory node NI for a new KV; *GEN: its generation (write it
 * into word 0). Reclaims freed blocks of our chunks, or claims a chunk,
 * when none is known free. -ENOMEM: the node's pool is exhausted. */
int race_alloc(struct loco_race_client *c, unsigned ni, uint32_t *block,
	       unsigned *gen);
/* Return BLOCK (written by us, never committed in a slot): it is ours
 * again, and its word 0 is marked DEAD (async). */
int race_free_local(struct loco_race_client *c, unsigned ni, uint32_t block,
		    uint64_t w0);
/* The block of SLOT was unlinked by us: CAS DEAD into its word 0 W0 (the
 * word we read), async, covered by the client's next wait. */
int race_free_remote(struct loco_race_client *c, uint64_t slot, uint64_t w0);
const struct loco_rregion *race_kv(const struct loco_race *r, unsigned ni);
/* Give every chunk back (destroy). */
int race_pools_release(struct loco_race_client *c);
/* Take the chunks SLOT's older incarnations own (a crashed process of this
 * slot), marking DEAD the blocks of theirs no table slot references. */
int race_adopt_own(struct loco_race_client *c);
/* Mark DEAD every LIVE block of any chunk that no slot references in
 * REFS (garbage a dead client left in flight), at quiescence; *N gets how
 * many. *LIVE_OUT (may be NULL): per node bitmaps of the LIVE blocks
 * afterwards. */
int race_reclaim_garbage(struct loco_race_client *c, uint64_t *const *refs,
			 uint64_t *n, uint64_t **live_out);

/* ---- race.c (tests only) ------------------------------------------------------ */
/* Forget client C as its process's death would: nothing written (its KV
 * chunks and their blocks stay as they are; the caller drops its rtx
 * worker the same way first, rtx_worker_drop). */
void race_client_forget(struct loco_race_client *c);

/* ---- audit.c ------------------------------------------------------------------ */
/* Reference bitmaps of every node's KV pool (nblocks bits each) from a
 * scan of every current subtable, repeated until no descriptor changed
 * during it. Tentative slots are not references (an insert's tentative
 * block is its owner's to free, and a dead owner's is garbage). */
int race_scan_refs(struct loco_race_client *c, uint64_t ***refs);
void race_refs_free(const struct loco_race *r, uint64_t **refs);

#endif
