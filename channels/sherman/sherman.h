/* SPDX-License-Identifier: MIT */
/* Sherman: a write-optimised B+tree on disaggregated memory (Wang, Lu and
 * Shu, SIGMOD '22; ../shared/papers/sherman-btree.txt), as a loco channel
 * built on the core and, in its --rtx split mode, on rTX. docs/sherman.md
 * has the layouts, the protocols, the round trips and the tests.
 *
 * A B-link tree of fixed-size nodes spread over the hosting (memory)
 * nodes: every node has low and high fence keys, a level and a sibling
 * pointer; leaves are unsorted arrays of fixed-size entries, internal
 * nodes sorted arrays of separators and children. Keys are 64-bit (2^64 - 1
 * is reserved), values a fixed VALUE_LEN bytes.
 *
 *	struct loco_sherman_opts o = { .value_len = 8 };
 *	struct loco_sherman *t;
 *	loco_sherman_create(mgr, &o, &t);        create-or-open
 *	struct loco_sherman_worker *w;
 *	loco_sherman_worker_create(t, thr, &w);  one per thread
 *	loco_sherman_insert(w, 42, &v);
 *	loco_sherman_lookup(w, 42, &v);
 *
 * Concurrency (plain mode, the paper's): lookups and scans take no lock;
 * writers lock one node at a time with HOCL, the hierarchical lock:
 * global lock words on the hosting nodes (in NIC device memory where
 * there is some, LOCO_REGION_HOT) behind a local lock table per process
 * that hands a held lock to a local waiter (at most handover_max
 * times in a row). A leaf write-back and the lock release go in one batch
 * on one QP (command combination). Every node read is checked: a 64-bit
 * hash per leaf entry that binds the node's version, one over the leaf
 * header, one over a whole internal node; a read that fails any of them
 * was torn by a concurrent writer and is read again.
 *
 * Scans are linearizable: each leaf is read between two READs of its
 * sequence word (odd while a writer is in it, one batch on one QP), and
 * after the last leaf every sequence word is read again; the scan returns
 * only if none moved, so every leaf held what was read at one instant.
 *
 * Splits: plain mode splits B-link style (new sibling written first, then
 * the half-split node and its release in one batch, the parent updated
 * later under its own lock; a missing parent entry is added by the next
 * writer that walks past it). In rtx mode (opts.rtx) every tree node is an
 * rTX object and every write is an rTX; a split (leaf, new sibling, parent
 * and any node it splits in turn) is one transaction, so a client killed
 * in the middle is repaired by a survivor. Plain mode survives killed
 * clients too: locks carry leases, and every locked write-back is preceded
 * in its batch by a redo record that a client stealing an expired lock
 * applies again, so a write torn by its writer's death is completed.
 *
 * Return values are 0 or -errno; -ENOENT (lookup, update, delete of an
 * absent key), -EEXIST (insert of a present key), -EINVAL (bad argument,
 * the reserved key), -ENOSPC (node pool full), -ETIMEDOUT (a lock or a
 * torn node did not settle within the manager's timeout; rtx mode: a
 * write that kept conflicting that long), -EAGAIN or -ESTALE (plain
 * mode: a write that lost its lock, or found the node its descent led
 * to not holding its key, 64 times in a row), -EIO (a broken tree: a
 * rightmost node whose high fence is not infinity). */
#ifndef LOCO_CHANNELS_SHERMAN_SHERMAN_H
#define LOCO_CHANNELS_SHERMAN_SHERMAN_H

#include <stdbool.h>
#include <stdint.h>

#include <loco/channel.h>
#include <loco/loco.h>

#define LOCO_SHERMAN_KEY_MAX (UINT64_MAX - 1)  /* 2^64 - 1 is reserved */
#define LOCO_SHERMAN_NODE_MIN 128
#define LOCO_SHERMAN_NODE_MAX 4096
#define LOCO_SHERMAN_VALUE_MAX 256

/* Broken variants, for the tests that must see them fail. */
#define LOCO_SHERMAN_UNSAFE_NO_CHECK 0x1u  /* node reads not checked */
#define LOCO_SHERMAN_UNSAFE_NO_SCAN_CHECK 0x2u /* scans not validated */
#define LOCO_SHERMAN_UNSAFE_NO_PERSIST 0x4u /* on durable memory nodes,
					     * plain mode write-backs are
					     * released unpersisted */
#define LOCO_SHERMAN_UNSAFE_NO_FENCE 0x8u /* plain mode steals an expired
					   * lock without fencing its
					   * holder */

struct loco_sherman;
struct loco_sherman_worker;

/* Zero means "default" for every field. All clients of one tree must use
 * the same options (the superblock's layout hash catches a mismatch:
 * -LOCO_EMISMATCH); cache_mib, lease_ms (a lock word carries its own
 * lease's end), handover_max, no_hocl, no_combine and unsafe are per
 * process. */
struct loco_sherman_opts {
	const char *name;           /* channel name (default "sherman"): no
				     * '/' or '.', unique among the node's
				     * channels */
	struct loco_channel *parent; /* NULL: top level */
	uint64_t mem_nodes;         /* hosting nodes, a bit per id; 0: every
				     * memory node, or the lowest compute
				     * node when there is none */
	uint32_t node_size;         /* bytes per node, a multiple of 64 in
				     * [NODE_MIN, NODE_MAX] (default 1024) */
	uint32_t value_len;         /* bytes per value, a multiple of 8 in
				     * [8, VALUE_MAX] (default 8) */
	uint32_t nodes;             /* node pool per hosting node (default
				     * 32768) */
	uint32_t locks;             /* global lock words per hosting node
				     * (default 16384: 128 KiB) */
	uint32_t cache_mib;         /* index cache of this process (default
				     * 16; ~0u: none) */
	uint32_t threads_per_node;  /* thread slots per compute node (8) */
	uint32_t lease_ms;          /* plain mode lock lease (default 1000;
				     * see docs/sherman.md, "Leases") */
	uint32_t handover_max;      /* consecutive local handovers (default 4;
				     * ~0u: none) */
	bool rtx;                   /* split mode: every write an rTX */
	bool no_hocl;               /* no local lock table: every thread
				     * CASes the global word itself */
	bool no_combine;            /* write back, wait, then release */
	unsigned unsafe;            /* LOCO_SHERMAN_UNSAFE_* (tests only) */
};

/* Counters of a worker (or, summed, of a tree handle). */
struct loco_sherman_stats {
	uint64_t lookups, inserts, updates, deletes, scans;
	uint64_t splits;           /* nodes this worker split */
	uint64_t root_splits;      /* ... of which the root */
	uint64_t links;            /* missing parent entries added for others */
	uint64_t torn_retries;     /* node reads that failed a check, read again */
	uint64_t torn_returned;    /* failed a check, used anyway (unsafe only) */
	uint64_t scan_retries;     /* scans whose validation failed */
	uint64_t cache_hits;       /* descents that started at a cached node */
	uint64_t cache_stale;      /* cached nodes found stale by fences */
	uint64_t sibling_moves;    /* B-link moves to the right */
	uint64_t lock_fails;       /* global lock CASes that found it held */
	uint64_t handovers;        /* locks received from a local thread */
	uint64_t steals;           /* expired locks taken over */
	uint64_t lost_locks;       /* our locks taken over while we held them
				    * (a holder slower than its lease) */
	uint64_t redos;            /* redo records applied after a steal */
	uint64_t fences;           /* holders of expired locks fenced */
	uint64_t fence_waits;      /* ... that could not be fenced (yet) */
	uint64_t rtx_retries;      /* rtx mode: aborted attempts */
	uint64_t rtx_repairs;      /* rtx mode: its workers' rTX repairs */
};

/* Result of loco_sherman_verify. */
struct loco_sherman_verify {
	uint32_t levels;           /* height (root level + 1) */
	uint64_t nodes;            /* nodes reachable along the levels */
	uint64_t leaves;
	uint64_t keys;             /* keys in the leaves */
	uint64_t unlinked;         /* nodes only their left sibling reaches
				    * (a split whose parent entry is missing) */
	uint64_t linked;           /* ... of which verify added (fix) */
	uint64_t errors;           /* broken invariants */
	char first_error[192];     /* the first of them, with the node */
};

/* ---- tree ---------------------------------------------------------------- */

/* Open (creating on first use) the tree described by OPTS: the channel
 * "<name>" with one sub-channel "<name>/m<id>" per hosting node whose
 * regions live there (create-or-open), the superblock check, and the
 * empty root leaf if there is none yet. Returns 0, -EINVAL (bad options,
 * name or hosting nodes), -ENOMEM, -EEXIST (a channel of that name on
 * this node), -LOCO_EMISMATCH (the tree exists with other options) or a
 * control-plane or op error.
 * Ordering: the superblock CASes and the root's creation are atomic with
 *   every other client's.
 * Completion: synchronous.
 * Caller: any thread; the handle is shared by the process's workers. */
int loco_sherman_create(struct loco_mgr *mgr,
			const struct loco_sherman_opts *opts,
			struct loco_sherman **out);
/* Workers must be destroyed first. The remote tree stays. */
void loco_sherman_destroy(struct loco_sherman *t);

uint32_t loco_sherman_value_len(const struct loco_sherman *t);
/* Counters summed over every worker, destroyed ones included. */
void loco_sherman_stats(struct loco_sherman *t, struct loco_sherman_stats *out);

/* ---- workers ------------------------------------------------------------- */

/* Take the lowest free thread slot of this process for THR. Plain mode
 * first settles what an earlier incarnation of the slot (a crashed
 * process with this node id) left: its locks are repaired once their
 * leases end. Returns 0, -EBUSY (no free slot), -ENOMEM or an op error.
 * Ordering: the slot's old locks are released on return (one whose
 *   lease outlasts the manager's timeout stays held, to its lease).
 * Completion: synchronous.
 * Caller: the thread owning THR, which then owns the worker. */
int loco_sherman_worker_create(struct loco_sherman *t, struct loco_thread *thr,
			       struct loco_sherman_worker **out);
/* Retire worker W: its statistics go to the tree's totals, its slot is
 * free for another worker; in rtx mode its rtx worker is destroyed
 * (its data chunks given back). Returns 0, or that rtx worker's remote
 * error (loco_rtx_worker_destroy); W is freed either way. NULL: 0.
 * Ordering: as loco_rtx_worker_destroy's.
 * Completion: synchronous.
 * Caller: the worker's thread, with no operation of it running. */
int loco_sherman_worker_destroy(struct loco_sherman_worker *w);

/* Start worker W over after a memory node's outage: an operation failed
 * with -LOCO_EDOWN (its outcome unknown) and loco_peer_wait returned 0.
 * Plain mode settles the locks W's slot held (their leases end, their
 * redo records are applied, they are released); rtx mode starts a new
 * rTX worker on the slot (which repairs what the old one left and adopts
 * its chunks). An insert whose outcome is unknown may be run again: it
 * finds its own key (-EEXIST) if the first one took effect, so it is
 * never applied twice. Returns 0, -LOCO_EDOWN (a node died again: wait
 * and reset again) or another op error; in rtx mode, until a reset
 * succeeds, operations on W return -ENOTCONN.
 * Ordering: what W's slot held is settled on return.
 * Completion: synchronous.
 * Caller: W's thread, with no operation of W running. */
int loco_sherman_worker_reset(struct loco_sherman_worker *w);
void loco_sherman_worker_stats(const struct loco_sherman_worker *w,
			       struct loco_sherman_stats *out);

/* ---- operations ----------------------------------------------------------
 * VAL is value_len bytes. Outputs are written only on success. */

/* KEY's value into VAL; -ENOENT if absent.
 * Ordering: linearizable (the leaf entry's read).
 * Completion: synchronous; one READ with a warm cache (plain mode).
 * Caller: the worker's thread. */
int loco_sherman_lookup(struct loco_sherman_worker *w, uint64_t key, void *val);

/* Insert KEY with VAL; -EEXIST if present (nothing changes).
 * Ordering: linearizable; on return 0 the entry is placed on its node.
 *   On a durable memory node it is durable too, before anyone can see
 *   the lock free: plain mode posts the leaf's FLUSH between the
 *   write-back and the release (same round trip); a split's new nodes
 *   are persisted before the write that links them; rtx mode's commit
 *   rounds persist (docs/rtx.md). Update and delete likewise.
 *   -LOCO_EDOWN: outcome unknown; after loco_sherman_worker_reset the
 *   insert may be run again: it finds its own key (-EEXIST) if the first
 *   one took effect.
 * Completion: synchronous; plain mode: lock CAS and leaf READ in one
 *   batch, then the write-back and the release in one (2 round trips).
 * Caller: the worker's thread. */
int loco_sherman_insert(struct loco_sherman_worker *w, uint64_t key,
			const void *val);

/* Replace KEY's value with VAL; -ENOENT if absent.
 * Ordering, Completion, Caller: as loco_sherman_insert. */
int loco_sherman_update(struct loco_sherman_worker *w, uint64_t key,
			const void *val);

/* Remove KEY (in place: nodes never merge, as in Sherman); -ENOENT if
 * absent.
 * Ordering, Completion, Caller: as loco_sherman_insert. */
int loco_sherman_delete(struct loco_sherman_worker *w, uint64_t key);

/* The pairs with LO <= key <= HI, in key order, at most MAX of them (the
 * smallest): keys into KEYS[MAX], values into VALS (MAX * value_len
 * bytes); *N gets the count. -EINVAL if LO > HI, MAX is 0 or HI is the
 * reserved key.
 * Ordering: linearizable: the result is the tree's content at one instant
 *   during the call (the leaves' sequence words are validated).
 * Completion: synchronous; plain mode: three READs a leaf (sequence
 *   word, leaf, sequence word), those of the leaves the level-1 node
 *   names in one batch, each further leaf in a batch of its own, then
 *   one batch re-reading every leaf's sequence word; rtx mode:
 *   loco_rtx_peek per leaf, then every leaf's lock word re-read.
 * Caller: the worker's thread. */
int loco_sherman_scan(struct loco_sherman_worker *w, uint64_t lo, uint64_t hi,
		      unsigned max, uint64_t *keys, void *vals, unsigned *n);

/* ---- maintenance --------------------------------------------------------- */

/* Walk every level along the sibling chains from the leftmost node and
 * check the tree: node checks, levels, fences contiguous from 0 to
 * infinity on every level, keys inside their node's fences, sorted and
 * unique separators, unique leaf keys, every child of a level found on
 * the level below in order with low fence equal to its separator. With
 * FIX, nodes that only their left sibling reaches get their parent entry
 * (as the next writer would add it). Counts into *OUT. Returns 0 (read
 * OUT->errors for the verdict) or an op error.
 * Ordering: consistent only when no writer runs.
 * Completion: synchronous.
 * Caller: the worker's thread. */
int loco_sherman_verify(struct loco_sherman_worker *w, bool fix,
			struct loco_sherman_verify *out);

/* Repair every expired lock of the tree (plain mode: steal it, apply the
 * holder's redo record, release; rtx mode: loco_rtx_repair_all), waiting
 * for running leases to end, until none is held or TIMEOUT_MS passes.
 * *HELD (may be NULL) gets the number still held. Returns 0 or an op
 * error.
 * Ordering: the repairs are complete and placed on return.
 * Completion: synchronous.
 * Caller: the worker's thread, with no other client running (an audit:
 *   a lock taken meanwhile counts as held). */
int loco_sherman_repair_locks(struct loco_sherman_worker *w, int timeout_ms,
			      uint64_t *held);

#endif
