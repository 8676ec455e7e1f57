/* SPDX-License-Identifier: MIT */
/* RACE hashing (Zuo et al., "RACE: One-sided RDMA-conscious Extendible
 * Hashing", ACM TOS 2022): a hash map on memory nodes that clients on
 * compute nodes use with one-sided READ, WRITE and CAS only. See
 * docs/race.md for the layout, the protocols and the tests.
 *
 * A table is a channel "<name>" whose memory lives on memory nodes
 * (create-or-open, so every client that opens it with the same options
 * sees the same table; nobody joins anybody):
 *   home node, "<name>." + "super" (layout hash), "slots" (client
 *     incarnations), and the sub-channel "<name>/rtx": an rtx object whose
 *     TXObjs are the subtable descriptors (one per suffix, the directory);
 *   every memory node, "<name>/m<id>." + "kv" (the KV block pool) and
 *     "kvc" (its chunk table); subtables are regions "<name>.st..." on the
 *     memory node their suffix picks.
 *
 * Layout (RACE §3.2): a subtable is an array of groups of three 64-byte
 * buckets (main, shared overflow, main), each bucket a header (local depth
 * and suffix) and 7 slots of 8 bytes: fingerprint (8 bits), KV length in
 * 64-byte units (8 bits), 48-bit pointer to an out-of-place KV block
 * (key, value, the key's hash, a 64-bit checksum). A key lives in one of
 * two combined buckets (main + overflow, 128 contiguous bytes) of the
 * subtable its hash suffix selects through the directory.
 *
 * Deviations from the paper, and why (docs/race.md has the details):
 * - Two bits of the 48-bit pointer are flags: T (tentative) makes an insert
 *   invisible until its duplicate check passed, so two concurrent inserts
 *   of one key never both succeed (linearizable insert, still 3 round
 *   trips: the re-read rides behind the CAS); M (moving) freezes a slot
 *   during a resize. The pointer's other 46 bits are a memory node (6), a
 *   block generation (10: a reader detects a freed and reused block) and a
 *   block index (30).
 * - KV blocks have one size per table (key_max + value_max + 24 bytes,
 *   rounded up to 64); the slot's length still says how many 64-byte units
 *   a READ needs. Values of any length up to value_max fit.
 * - The directory is one rTX object per suffix (the paper's directory
 *   entries); clients cache it and refresh only the descriptors of the
 *   key's suffix chain when a bucket header says the cache is stale, or
 *   the subtable's own descriptor when a frozen slot says a split froze
 *   it.
 *
 * Operations, round trips (RTT) without a resize (RACE §3.3):
 *   get     READ both combined buckets (one batch); READ the KV block: 2
 *   insert  WRITE the KV block + READ the buckets; CAS the slot to a
 *           tentative pointer + re-READ the buckets (same QP, so after the
 *           CAS); CAS tentative -> committed: 3
 *   update  WRITE the new block + READ buckets; READ the KV; CAS the slot: 3
 *   delete  READ buckets; READ the KV; CAS the slot to empty: 3
 * Each may cost one more READ when a fingerprint collides, and waits for
 * a resize that froze its slots.
 *
 * Ordering: every operation is linearizable (docs/race.md argues it for
 * both resize modes): a get at the bucket READ in which it found the key's
 * committed slot (or its absence), an insert at its committing CAS, an
 * update or delete at the CAS of the key's slot.
 *
 * Return values are 0 or -errno: -ENOENT (get/update/delete of an absent
 * key), -EEXIST (insert of a present key), -E2BIG (key or value over the
 * limit), -ENOMEM (the KV pool of a memory node is exhausted), -ENOSPC
 * (the subtable must split and is at max_depth), -LOCO_EMISMATCH (the
 * table exists with another geometry), -ETIMEDOUT. */
#ifndef LOCO_CHANNELS_RACE_RACE_H
#define LOCO_CHANNELS_RACE_RACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/loco.h>

#define LOCO_RACE_KEY_MAX 1024      /* largest key_max */
#define LOCO_RACE_BLOCK_MAX (255 * 64)  /* largest KV block (8-bit length) */
#define LOCO_RACE_DEPTH_MAX 16      /* largest max_depth */
#define LOCO_RACE_INITIAL_MAX 4     /* largest initial_depth */
#define LOCO_RACE_KV_BLOCKS_MAX ((UINT32_C(1) << 30) - 64)  /* largest
					   * kv_blocks (30-bit block index) */

enum loco_race_resize {
	LOCO_RACE_RESIZE_RTX = 0,   /* a split is one repairable transaction */
	LOCO_RACE_RESIZE_CAS = 1,   /* slot-by-slot moves (RACE §3.4.2) */
};

/* Deliberately broken variants, for the tests that must catch them. */
#define LOCO_RACE_BROKEN_NO_DUP_CHECK 0x1   /* insert commits without the
					     * duplicate re-read */
#define LOCO_RACE_BROKEN_NO_STALE_CHECK 0x2 /* bucket headers and frozen
					     * slots are not checked */
#define LOCO_RACE_BROKEN_NO_PERSIST 0x4     /* on durable memory nodes,
					     * operations return before
					     * what they wrote or read is
					     * persisted */
#define LOCO_RACE_BROKEN_NO_FENCE 0x8       /* resizes taken over without
					     * fencing the holder (tests:
					     * the epochs alone) */
#define LOCO_RACE_BROKEN_NO_EPOCH 0x10      /* cas-mode moves without
					     * epochs: a takeover keeps
					     * the mover's, a closed-empty
					     * slot is 0 (a stale mover's
					     * CASes hit, unless fenced) */

/* Zero means "default". All clients of one table use the same geometry
 * (name, mem_nodes, groups, depths, key_max, value_max, kv_blocks,
 * resize, threads_per_node): a table that exists with another one is
 * refused with -LOCO_EMISMATCH. broken is per client. */
struct loco_race_opts {
	const char *name;           /* channel name (default "race") */
	uint64_t mem_nodes;         /* hosting nodes, a bit per id; 0: every
				     * memory node, or the lowest compute node
				     * when there is none */
	uint32_t groups;            /* bucket groups per subtable (64) */
	uint32_t initial_depth;     /* subtables at creation: 2^this (0) */
	uint32_t max_depth;         /* largest local depth (12) */
	uint32_t key_max;           /* largest key in bytes (16) */
	uint32_t value_max;         /* largest value in bytes (64) */
	uint32_t kv_blocks;         /* KV blocks per memory node (65536) */
	enum loco_race_resize resize;
	uint32_t threads_per_node;  /* clients per compute node (8) */
	unsigned broken;            /* LOCO_RACE_BROKEN_*: tests only */
};

/* Phases of a split (docs/race.md, "Resize time"): each split attempt's
 * time, round trips and verbs go to the phase that spent them. */
enum loco_race_phase {
	LOCO_RACE_PH_LOCK,      /* rTX begin, pre-lock and READ of the
				 * descriptor (cas: T1's and T2's, and a new
				 * epoch's commit on a takeover) */
	LOCO_RACE_PH_HEADERS,   /* cas a: a group's header CASes and READs */
	LOCO_RACE_PH_FREEZE,    /* rtx: snapshot READ, freeze CASes and hash
				 * READs; cas b: hash READs, freeze CASes,
				 * group re-READs */
	LOCO_RACE_PH_BUILD,     /* local: rtx O' and N; cas N's closed image */
	LOCO_RACE_PH_REGION,    /* fresh regions (control plane) */
	LOCO_RACE_PH_WRITE,     /* WRITE of the new subtable(s), fence or
				 * persist */
	LOCO_RACE_PH_COPY,      /* cas c: copy CASes into N */
	LOCO_RACE_PH_CLEAR,     /* cas d: clear CASes in O */
	LOCO_RACE_PH_OPEN,      /* cas e: N's group READ, fingerprint READs,
				 * unfreeze and open CASes */
	LOCO_RACE_PH_COMMIT,    /* rTX commit of the descriptors (cas: T1's
				 * and T2's) */
	LOCO_RACE_PH_RENEW,     /* lease renewals while splitting */
	LOCO_RACE_PHASES
};

/* Counters of a client (or, summed, of a table handle). */
struct loco_race_stats {
	uint64_t gets, inserts, updates, deletes;   /* calls */
	uint64_t retries;        /* attempts restarted (lost CAS, torn read,
				  * reused block, duplicate insert) */
	uint64_t refreshes;      /* cache refreshes (stale entries) */
	uint64_t fp_reads;       /* extra KV READs after fingerprint matches */
	uint64_t resize_waits;   /* operations that waited for a resize */
	uint64_t resize_wait_ns; /* time they spent waiting (backing off,
				  * peeking at the descriptor, and running
				  * the takeovers they made) */
	uint64_t splits;         /* splits this client completed */
	uint64_t split_ns;       /* time spent in them (from the split's
				  * or takeover's start: cas mode's T1
				  * included) */
	uint64_t takeovers;      /* resizes finished for a client that left
				  * them (dead, or its lease ran out) */
	uint64_t moved;          /* items moved by our splits */
	uint64_t tent_steals;    /* stale tentative slots cleared */
	uint64_t rtx_repairs;    /* rTX repair actions of the client's worker
				  * (a dead resizer's descriptor locks) */
	uint64_t reclaims;       /* rounds of READs of owned KV chunks' words
				  * by allocations that knew no free block
				  * (a round trip each) */
	uint64_t reclaim_reads;  /* READs those posted */
	uint64_t reclaim_found;  /* freed blocks they found */
	uint64_t ahead_reads;    /* READs ahead of chunks' words (no round
				  * trip of their own) */
	uint64_t ahead_found;    /* freed blocks those found */
	uint64_t claims;         /* KV chunks claimed */
	uint64_t hole_waits;     /* lookups that found a split's commit
				  * half installed (the parent's new depth,
				  * not yet the child) and waited for it */
	uint64_t fences;         /* nodes fenced before taking over their
				  * resize (their lease ran out) */
	/* Per phase, over every split attempt (finished or not, so they
	 * may sum to more than split_ns): time, round trips, verbs. */
	uint64_t phase_ns[LOCO_RACE_PHASES];
	uint64_t phase_rtts[LOCO_RACE_PHASES];
	uint64_t phase_verbs[LOCO_RACE_PHASES];
};

/* Result of loco_race_verify. */
struct loco_race_audit {
	uint64_t subtables;      /* live subtables */
	uint64_t items;          /* committed items */
	uint64_t allocated;      /* KV blocks in use per the chunk words */
	uint64_t referenced;     /* KV blocks some slot points to */
	uint64_t leaked;         /* allocated, not referenced (after repair) */
	uint64_t lost;           /* referenced, not allocated */
	uint64_t reclaimed;      /* blocks of dead clients freed by it */
	uint64_t repaired;       /* resizes and slots it had to finish */
	uint64_t locks_held;     /* descriptor locks still held */
	uint64_t logs_pending;   /* rTX logs not DONE (after settling) */
	unsigned depth;          /* global depth (largest local depth) */
};

struct loco_race;
struct loco_race_client;

/* Open (creating on first use) the table described by OPTS: its channels,
 * its regions on the memory nodes, the layout check, and on first use the
 * 2^initial_depth root subtables. Returns 0, -EINVAL (bad options, a name
 * in use on this node, no hosting node), -ENOMEM, -LOCO_EMISMATCH (the
 * table exists with another geometry) or a control-plane or op error.
 * Ordering: the creating transaction is atomic with every other client's.
 * Completion: synchronous.
 * Caller: any thread; the handle is shared by the process's clients. */
int loco_race_create(struct loco_mgr *mgr, const struct loco_race_opts *opts,
		     struct loco_race **out);
/* Clients first. The table stays on the memory nodes. */
void loco_race_destroy(struct loco_race *r);

/* A client on THR (one per application thread): takes a client slot (node
 * id * threads_per_node + index) and its rtx worker, then adopts the KV
 * chunks a previous incarnation of that slot left (a crashed process of
 * this node id), freeing what no table slot references. Returns 0, -EBUSY
 * (no free slot), -ENOMEM or an op error.
 * Ordering: the slot's previous state is settled before return.
 * Completion: synchronous.
 * Caller: the thread owning THR, which then owns the client. */
int loco_race_client_create(struct loco_race *r, struct loco_thread *thr,
			    struct loco_race_client **out);
/* Completes the client's asynchronous frees, gives every KV chunk back
 * (owner word to 0: another client claims it and learns its blocks from
 * their word 0) and destroys its rtx worker.
 * Returns 0, or the first error of those remote steps (the client is
 * freed either way; chunks it could not give back stay with its slot,
 * for its next incarnation or an adoption).
 * Ordering: the frees and the owner-word CASes are complete on return.
 * Completion: synchronous.
 * Caller: the client's thread, with no operation of it running. */
int loco_race_client_destroy(struct loco_race_client *c);

/* Start client C over after a memory node's outage: an operation
 * failed with -LOCO_EDOWN (its outcome unknown) and loco_peer_wait
 * returned 0. C becomes a new incarnation of a slot of this node (a new
 * rtx worker, which repairs what the old one left), adopts the KV chunks
 * its old incarnation held (what a power cut took back may have changed
 * their blocks: they are learnt anew, and blocks no slot references are
 * freed) and forgets its directory cache. Returns 0, -LOCO_EDOWN (a node
 * died again: wait and reset again), -LOCO_ELOST or another op error;
 * until a reset succeeds, operations on C return -ENOTCONN.
 * Ordering: C's old incarnation is settled before return.
 * Completion: synchronous (a reference scan of the table).
 * Caller: the client's thread, with no operation of it running. */
int loco_race_client_reset(struct loco_race_client *c);

/* Get KEY: copies its value (at most CAP bytes) into VAL and its length
 * into *VLEN. -ENOENT if absent, -ENOBUFS if CAP is too small (*VLEN set).
 * Ordering: linearizable: the value was the key's at the moment of the
 *   bucket READ that found its slot. On a durable memory node the buckets
 *   read are persisted behind their READs (same round trip): what a get
 *   returns, a power cut cannot take back.
 * Completion: synchronous, 2 RTTs without resize or collision.
 * Caller: the client's thread. */
int loco_race_get(struct loco_race_client *c, const void *key, uint32_t klen,
		  void *val, uint32_t cap, uint32_t *vlen);
/* Insert KEY -> VAL; -EEXIST if present.
 * Ordering: linearizable at the CAS that commits the tentative slot; the
 *   KV block is placed before (same QP, written first). On a durable
 *   memory node the block is persisted before the slot CAS (its FLUSH in
 *   the block WRITE's round trip) and the committing CAS is persisted
 *   before return (its FLUSH behind it, same round trip): acknowledged
 *   means durable. On other nodes no FLUSH is posted.
 *   -LOCO_EDOWN: outcome unknown; after loco_race_client_reset the insert
 *   may be run again: it finds its own key (-EEXIST) if the first one
 *   committed (a tentative slot it left is cleared by whoever finds it
 *   stale), so it never lands twice.
 * Completion: synchronous, 3 RTTs (one more per fingerprint collision);
 *   may split a full subtable first.
 * Caller: the client's thread. */
int loco_race_insert(struct loco_race_client *c, const void *key,
		     uint32_t klen, const void *val, uint32_t vlen);
/* Replace KEY's value (out of place: new block, CAS of the slot); -ENOENT
 * if absent. The old block is freed (its owner reuses it later).
 * Ordering: linearizable at the slot CAS; the new block is placed before
 *   (durable on a durable memory node, and the slot CAS persisted before
 *   return and before the old block is freed, as for insert).
 * Completion: synchronous, 3 RTTs.
 * Caller: the client's thread. */
int loco_race_update(struct loco_race_client *c, const void *key,
		     uint32_t klen, const void *val, uint32_t vlen);
/* Delete KEY; -ENOENT if absent.
 * Ordering: linearizable at the CAS that empties the slot, persisted
 *   before return on a durable memory node (and before the block is
 *   freed).
 * Completion: synchronous, 3 RTTs.
 * Caller: the client's thread. */
int loco_race_delete(struct loco_race_client *c, const void *key,
		     uint32_t klen);

void loco_race_client_stats(const struct loco_race_client *c,
			    struct loco_race_stats *out);
/* Summed over every client of R, destroyed ones included. */
void loco_race_stats(struct loco_race *r, struct loco_race_stats *out);
/* Short name of phase PH ("lock", "freeze", ...), NULL out of range. */
const char *loco_race_phase_name(unsigned ph);
/* Largest key and value of the table. */
void loco_race_limits(const struct loco_race *r, uint32_t *key_max,
		      uint32_t *value_max);

/* Settle and check the whole table, at quiescence (no operation running
 * on any node; the other clients may stay open): finish the resizes a
 * dead client left, repair expired descriptor locks and settle the rTX
 * logs of dead transactions, clear dead clients' tentative slots, adopt the KV chunks holding blocks no slot references
 * (dead clients' in-flight blocks), then walk every subtable and check:
 * headers, every item in the subtable and bucket its hash selects, no
 * duplicate key, every KV block whole (checksum), no frozen or tentative
 * slot left, no lock held, no rTX log pending, every referenced block
 * allocated and every allocated one referenced. OUT gets the
 * counts; MSG (LEN bytes) names the first violation. Returns 0, -EPROTO
 * (a violation) or an op error.
 * Ordering: the repairs are complete before the walk.
 * Completion: synchronous (reads the whole table).
 * Caller: the client's thread, while nothing else runs on the table. */
int loco_race_verify(struct loco_race_client *c, struct loco_race_audit *out,
		     char *msg, size_t len);

#endif
