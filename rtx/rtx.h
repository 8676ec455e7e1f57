/* SPDX-License-Identifier: MIT */
/* rTX: repairable transactions on disaggregated memory (Wei et al., "Transactional
 * Indexes on (RDMA or CXL-based) Disaggregated Memory with Repairable
 * Transaction"). See docs/rtx.md for the protocol, layouts and crash points.
 *
 * An rtx object is a channel "<name>" with one sub-channel "<name>/m<id>"
 * per hosting node <id>, whose regions live on that node and are opened by
 * create-or-open (loco_channel_open_hosted), so every client that creates
 * it with the same options sees the same memory. The channels have no
 * peers to join (they are ready at once; clients come and go):
 *
 *   home node (the lowest hosting node), "<name>/m<id>." +
 *     "super"   epoch and configuration check (peers: CAS)
 *     "slots"   per thread slot: incarnation, tag high-water mark (all)
 *     "logs"    the log array, one log per thread slot (rTX id) (all)
 *   every hosting node, "<name>/m<id>." +
 *     "meta"    meta pool: TXObjs {LLLock, data pointer} (READ, CAS)
 *     "data"    data pool: fixed-size blocks (READ, WRITE)
 *     "bitmap"  allocation bitmap, one word per 64-block chunk (READ, WRITE)
 *     "chunks"  chunk owner table (slot and incarnation) (READ, CAS/FAA)
 * (in parentheses: the remote access each allows, LOCO_REGION_REMOTE_*)
 *
 * Objects are TXObjs addressed by their remote address (loco_rtx_obj); an
 * object never written reads as null. Each application thread that runs
 * transactions creates a worker on its loco_thread; a worker owns one
 * thread slot (its rTX id and log) for its lifetime:
 *
 *	struct loco_rtx_worker *w;
 *	loco_rtx_worker_create(x, thr, &w);
 *	int rc;
 *	LOCO_RTX_BLOCK(w, rc) {
 *		const uint64_t *a;
 *		if ((rc = loco_rtx_read(w, obj, (const void **)&a)))
 *			continue;
 *		uint64_t v = (a ? *a : 0) + 1;
 *		rc = loco_rtx_write(w, obj, &v);
 *	}
 *
 * Return values are 0 or -errno: -EAGAIN means the transaction conflicted
 * (it is aborted; run it again), -EBUSY that a repair of another client's
 * transaction is under way elsewhere (run it again later). */
#ifndef LOCO_RTX_RTX_H
#define LOCO_RTX_RTX_H

#include <stdbool.h>
#include <stdint.h>

#include <loco/loco.h>
#include <loco/rtx/lllock.h>

#define LOCO_RTX_DATA_MAX 4096     /* largest object value */
#define LOCO_RTX_WRITES_MAX 64     /* largest write set (log entries) */
#define LOCO_RTX_CHUNK_BLOCKS 64   /* blocks per allocation chunk */

struct loco_rtx;
struct loco_rtx_worker;

/* Zero means "default" for every field but objects and data_len. All
 * clients of one rtx must use the same options (the region sizes and the
 * superblock check catch most mismatches, with -LOCO_EMISMATCH). */
struct loco_rtx_opts {
	const char *name;           /* channel name (default "rtx"): no '/'
				     * or '.', unique among the node's channels */
	struct loco_channel *parent; /* the channel it is a part of (an index
				     * built on it), named "<parent>/<name>";
				     * NULL: top level. The parent's owner
				     * destroys the rtx before finishing it */
	uint64_t mem_nodes;         /* hosting nodes, a bit per id; 0: the
				     * first memory node, or the lowest
				     * compute node when there is none */
	uint32_t objects;           /* TXObjs per hosting node */
	uint32_t data_len;          /* bytes per value, 1..LOCO_RTX_DATA_MAX */
	uint32_t blocks;            /* data blocks per node (default 8 per
				     * object, at least 64 chunks) */
	uint32_t max_writes;        /* write set limit (default 16) */
	uint32_t max_reads;         /* read set limit (default 64) */
	uint32_t threads_per_node;  /* thread slots per compute node (8) */
	uint32_t drift_ms;          /* lease drift (default 8) */
	uint32_t per_obj_us;        /* lease budget per object (default 100) */
	uint32_t guard_us;          /* wrap guard re-check interval (500) */
	bool no_opt1;               /* log one-object write sets too */
	/* Tests only: leave out every persistence point (the bug a power
	 * cut must expose: docs/durability.md, "rTX"). */
	bool no_persist;
};

/* Counters of a worker (or, summed, of an rtx). */
struct loco_rtx_stats {
	uint64_t commits;        /* committed transactions (read-only too) */
	uint64_t nolog_commits;  /* of which OPT1 (no log) */
	uint64_t aborts;         /* aborted attempts */
	uint64_t lock_waits;     /* attempts that met another's lock */
	uint64_t repairs;        /* repair actions that changed something */
	uint64_t steals;         /* ... stolen no-log locks */
	uint64_t rep_aborts;     /* ... INIT logs aborted */
	uint64_t rep_releases;   /* ... aborted transactions' locks released */
	uint64_t rep_recommits;  /* ... DOING logs committed again */
	uint64_t rep_late;       /* ... late locks of finished logs released */
	uint64_t repair_waits;   /* repairs that found a live (repair) lease */
	uint64_t guard_stops;    /* executions stopped by the wrap guard */
	uint64_t allocs;         /* data blocks allocated */
	uint64_t scans;          /* reclamation scans */
	uint64_t reclaimed;      /* blocks those scans freed */
	uint64_t chunk_claims;   /* chunks claimed */
	uint64_t chunk_returns;  /* chunks given back */
	uint64_t pool_asks;      /* asks for chunks (no free block found) */
};

/* Concurrency control of one object (OPT2, rTX §4.5). */
enum loco_rtx_cc {
	LOCO_RTX_CC_OCC = 0,     /* default: validated at commit */
	LOCO_RTX_CC_PRELOCK,     /* lock it at first access (execution) */
	LOCO_RTX_CC_DELEGATE,    /* the index checks it: not validated (a
				  * written object is still locked) */
};

/* Callbacks, set per worker (OPT2's and a repair's). Each may be NULL. */
struct loco_rtx_hooks {
	/* First access to OBJ in a transaction (WRITE: by loco_rtx_write). */
	enum loco_rtx_cc (*classify)(void *arg, loco_raddr_t obj, bool write);
	/* After the write set is locked and the read set validated: the
	 * index's own conflict check. 0 commits, -EAGAIN aborts. */
	int (*validate)(void *arg, struct loco_rtx_worker *w);
	/* After each repair action (counted in loco_rtx_stats.repairs) for
	 * thread slot OWNER, the holder of the lock or log repaired: lets a
	 * caller tell repairs for the dead from takeovers of a slow live
	 * holder (slot = node id * threads per node + index). */
	void (*repaired)(void *arg, uint32_t owner);
	/* Before a repair steals a lock of thread slot OWNER (a no-log lock,
	 * or one whose log moved on, whose lease ran out): 0 lets it; else
	 * the lock stays OWNER's and the repair returns that error, -EBUSY
	 * as for a live lease (say, a fence of OWNER's node that did not
	 * complete: act only for a fenced holder). HOLDING: the caller's
	 * open transaction holds pre-locks, whose leases run on while the
	 * hook waits (answer well within drift_ms), or a read for update's
	 * logged locks (loco_rtx_read_for_update); false: it holds no lock
	 * (at its first access, or repairing after its transaction closed),
	 * so the hook's wait costs the caller time only. */
	int (*taking)(void *arg, uint32_t owner, bool holding);
};

/* Result of loco_rtx_audit: data blocks per state, all hosting nodes. */
struct loco_rtx_audit {
	uint64_t objects;        /* TXObjs with a non-null value */
	uint64_t referenced;     /* blocks some TXObj points to */
	uint64_t allocated;      /* blocks set in the bitmap */
	uint64_t leaked;         /* allocated, not referenced */
	uint64_t lost;           /* referenced, not allocated */
	uint64_t locked;         /* TXObjs whose LLLock is held */
};

/* ---- rtx object ---------------------------------------------------------- */

/* Open (creating on first use) the rtx described by OPTS: register its
 * channels, create-or-open its regions on the hosting nodes, then CAS the
 * layout hash and the epoch into the superblock (the first creator's win).
 * Returns 0, -EINVAL (bad options or name, no hosting node), -ENOMEM,
 * -EEXIST (this node has a channel of that name already, e.g. another
 * handle), -LOCO_EMISMATCH (it exists with other options) or a
 * control-plane or op error.
 * Ordering: the superblock CASes are atomic with every other client's.
 * Completion: synchronous (control plane, then two CASes).
 * Caller: any thread; the handle is shared by the process's workers. */
int loco_rtx_create(struct loco_mgr *mgr, const struct loco_rtx_opts *opts,
		    struct loco_rtx **out);
/* Workers must be destroyed first. Finishes the channels: the remote
 * regions stay; regions this node hosts itself are freed (a later rtx of
 * the same name on this node starts from zeroed memory). */
void loco_rtx_destroy(struct loco_rtx *x);

/* TXObj INDEX on hosting node NODE, or LOCO_RADDR_NULL if there is none. */
loco_raddr_t loco_rtx_obj(const struct loco_rtx *x, uint32_t node,
			  uint32_t index);
uint32_t loco_rtx_data_len(const struct loco_rtx *x);
/* Hosting nodes (bit per id). */
uint64_t loco_rtx_nodes(const struct loco_rtx *x);
/* Thread slots per compute node; slot = node id * this + thread index. */
uint32_t loco_rtx_threads_per_node(const struct loco_rtx *x);
/* Now in milliseconds since the rtx epoch: CLOCK_REALTIME moved by the
 * lease clock skew (loco_lease_skew_ns), the time of the leases. */
uint64_t loco_rtx_now_ms(const struct loco_rtx *x);
/* Lease length (budget + drift) of a transaction touching NOBJ objects. */
uint64_t loco_rtx_lease_ms(const struct loco_rtx *x, unsigned nobj);
/* Counters summed over every worker of X, destroyed ones included. */
void loco_rtx_stats(struct loco_rtx *x, struct loco_rtx_stats *out);

/* ---- workers ------------------------------------------------------------- */

/* Take the lowest free thread slot of this process (node id * threads per
 * node + index) for THR. A slot's previous incarnation (a crashed process
 * with this node id) is cleaned up first: its log is repaired once its
 * lease ends (this may wait a lease), and its allocation chunks are
 * adopted and their bitmap rebuilt. Returns 0, -EBUSY (no free slot),
 * -ENOMEM or an op error.
 * Ordering: the slot's state is settled on the memory node before return.
 * Completion: synchronous.
 * Caller: the thread owning THR, which then owns the worker. */
int loco_rtx_worker_create(struct loco_rtx *x, struct loco_thread *thr,
			   struct loco_rtx_worker **out);
/* Abort an open transaction, run a final reclamation scan and give every
 * allocation chunk back (its bitmap word, marking the blocks still in
 * use, written first), so other workers can use the free blocks; the
 * slot stays with this node id for the next incarnation. The worker is
 * freed in every case. Returns 0, or the error of that remote work (an op
 * error or -ETIMEDOUT: some chunks stay with the slot until a later
 * worker of this slot adopts them); logged too. NULL: 0.
 * Ordering: on 0, the bitmap WRITEs and owner-word CASes are complete
 *   (acknowledged).
 * Completion: synchronous.
 * Caller: the worker's thread. */
int loco_rtx_worker_destroy(struct loco_rtx_worker *w);
uint32_t loco_rtx_worker_slot(const struct loco_rtx_worker *w);
struct loco_thread *loco_rtx_worker_thread(const struct loco_rtx_worker *w);
void loco_rtx_worker_stats(const struct loco_rtx_worker *w,
			   struct loco_rtx_stats *out);
/* OPT2 callbacks (HOOKS may be NULL); ARG is passed to them. */
void loco_rtx_set_hooks(struct loco_rtx_worker *w,
			const struct loco_rtx_hooks *hooks, void *arg);

/* ---- transactions -------------------------------------------------------- */

/* Start a transaction (one at a time per worker). -EBUSY if one is open. */
int loco_rtx_begin(struct loco_rtx_worker *w);

/* Read OBJ: *VAL points to the transaction's copy (data_len bytes, valid
 * until commit or abort; a value written earlier in the transaction if
 * any), or is NULL if the object was never written. The first read costs
 * two READs (TXObj, then data); later reads are local. An expired lock
 * found on OBJ is repaired first. Returns 0, -EAGAIN (locked by a live
 * transaction: abort), -EBUSY (its repair is under way elsewhere: abort),
 * -EINVAL (not an object), -E2BIG (read set full) or an op error.
 * Ordering: the value is the one installed when the TXObj was read; the
 *   commit validates that it is still current.
 * Completion: synchronous.
 * Caller: the worker's thread, inside loco_rtx_begin .. commit/abort. */
int loco_rtx_read(struct loco_rtx_worker *w, loco_raddr_t obj,
		  const void **val);

/* Read N objects (N <= LOCO_RTX_READ_MANY) as loco_rtx_read does, each
 * into VALS[i], in two round trips for all: one batch of TXObj READs,
 * then one of data READs (an object found locked goes through
 * loco_rtx_read's repair path on its own). Returns as loco_rtx_read (the
 * first error; VALS are set only on 0).
 * Ordering: as loco_rtx_read, per object.
 * Completion: synchronous.
 * Caller: the worker's thread, inside a transaction. */
#define LOCO_RTX_READ_MANY 8
int loco_rtx_read_many(struct loco_rtx_worker *w, unsigned n,
		       const loco_raddr_t *objs, const void **vals);

/* Read for update: read N objects (1 <= N <= LOCO_RTX_READ_MANY, no
 * object twice, N <= max_writes) and declare them the transaction's
 * whole write set, as the transaction's first access. Each VALS[i] is
 * as loco_rtx_read gives it; each object is written at commit with the
 * value last given to loco_rtx_write (if none: its current value, zeros
 * for an object never written). The
 * write set cannot grow afterwards: loco_rtx_write or loco_rtx_lock of
 * an object outside it returns -EPERM; other objects may still be read
 * (validated at commit, which then takes one more round trip).
 * When N >= 2 (or no_opt1) and every object is on the rtx's home node,
 * the logged locks are taken here: the TXObj READs, then one doorbell
 * with the data READs, the log (INIT, naming new blocks not yet
 * written) and the lock CASes; the commit then writes the data with the
 * commit point's CAS in one doorbell and installs in the next: 4 round
 * trips in all, the locks held while the caller computes (within the
 * transaction's lease: loco_rtx_lease_ms(x, 2 * N); a repairer aborts a
 * transaction whose lease ran out, and its commit returns -EAGAIN).
 * Otherwise the objects are read as loco_rtx_read_many reads them and
 * the commit is the ordinary one. Returns 0, -EINVAL (no transaction,
 * not its first access, bad N, an object twice or not an object),
 * -E2BIG (N above max_writes), -EAGAIN (conflict: abort; the locks taken
 * are released and the log settled), -EBUSY, -ENOMEM (data pool full)
 * or an op error; after an error the commit returns -EAGAIN.
 * Ordering: on 0 the values are current and stay so (locked) until the
 *   commit or abort, when the locks were taken here; else as
 *   loco_rtx_read_many.
 * Completion: synchronous (two round trips).
 * Caller: the worker's thread, right after loco_rtx_begin. */
int loco_rtx_read_for_update(struct loco_rtx_worker *w, unsigned n,
			     const loco_raddr_t *objs, const void **vals);

/* Set OBJ to VAL (data_len bytes, copied) at commit; reads OBJ first if
 * the transaction has not. Returns as loco_rtx_read, or -E2BIG (write set
 * full), -EPERM (the write set was declared by loco_rtx_read_for_update
 * and OBJ is not in it).
 * Ordering: none until commit (the value is local).
 * Completion: synchronous (the first access READs).
 * Caller: the worker's thread, inside a transaction. */
int loco_rtx_write(struct loco_rtx_worker *w, loco_raddr_t obj,
		   const void *val);

/* OPT2 pre-lock: take OBJ's LLLock now, as a no-log lock, so the commit
 * cannot fail on it (reads it first if needed). Returns as loco_rtx_read,
 * or -EPERM outside a write set declared by loco_rtx_read_for_update (0
 * for an object in it whose logged lock is held already).
 * Ordering: the transaction's copy of OBJ is current while the lock is
 *   held; the lease is the transaction's (budget for max_writes objects).
 * Completion: synchronous (one CAS and one READ in one round trip).
 * Caller: the worker's thread, inside a transaction. */
int loco_rtx_lock(struct loco_rtx_worker *w, loco_raddr_t obj);

/* Renew the lease of every pre-lock the open transaction holds (OPT2,
 * loco_rtx_lock): one CAS per pre-lock to a word with a fresh lease, so a
 * transaction that holds its pre-locks longer than a lease (an index
 * moving a large object piece by piece) is not taken for dead. Returns
 * 0, -EAGAIN (a pre-lock was stolen by a repairer meanwhile: the
 * transaction must abort), -EINVAL (no transaction) or an op error.
 * Ordering: each renewal CAS is atomic with every other client's lock
 *   operations; the old lease must not have run out when it executes
 *   (renew well within a lease: loco_rtx_lease_ms(x, max_writes)).
 * Completion: synchronous (one batch of CASes).
 * Caller: the worker's thread, inside a transaction. */
int loco_rtx_renew(struct loco_rtx_worker *w);

/* Commit: write the log (unless OPT1), lock the write set, validate the
 * read set, then TryCommit (INIT -> DOING, CAS-install the new data
 * pointers, CAS-release the locks, DONE). Returns 0 (committed: every
 * write is installed or will be by a repairer), -EAGAIN (aborted:
 * conflict, or another client aborted it as suspected failed), -ENOMEM
 * (data pool full) or an op error. Expired locks met on the way are
 * repaired before it returns. The transaction is closed in every case.
 * Ordering: serialisable with every other rtx transaction; on return 0
 *   the new values are installed and visible to every reader.
 * Completion: synchronous; every posted op has completed on return.
 * Caller: the worker's thread. */
int loco_rtx_commit(struct loco_rtx_worker *w);

/* Abort: release pre-locks, drop the read and write sets.
 * Ordering: pre-lock releases are complete on return.
 * Completion: synchronous.
 * Caller: the worker's thread. */
void loco_rtx_abort(struct loco_rtx_worker *w);

/* Read the committed values of N objects OBJS without a transaction: for
 * each, the TXObj (lock word and data pointer), then the data block and
 * the TXObj again in one batch, retrying an object whose data pointer
 * moved meanwhile. VALS gets N values of data_len bytes (a never-written
 * object reads as zeros); LOCKS (may be NULL) the lock words read with
 * them, so the caller can see a running or expired lock. No lock is
 * taken, nothing is validated later and nothing is repaired. Returns 0,
 * -EINVAL (not an object), -EAGAIN (an object kept moving) or an op
 * error.
 * Ordering: each value was the installed one at a moment between the
 *   call and its return (the two TXObj reads name the same pointer).
 * Completion: synchronous (two round trips; more if a pointer moved).
 * Caller: the worker's thread, inside or outside a transaction (the
 *   transaction is not affected). */
int loco_rtx_peek(struct loco_rtx_worker *w, const loco_raddr_t *objs,
		  unsigned n, void *vals, uint64_t *locks);

/* ---- maintenance --------------------------------------------------------- */

/* Scan every TXObj's LLLock and repair the expired ones, waiting for
 * running leases to end, until none is held or TIMEOUT_MS passes. *HELD
 * (may be NULL) gets the number still held. Returns 0 or an op error.
 * Ordering: repairs are complete and placed on return.
 * Completion: synchronous.
 * Caller: the worker's thread, outside a transaction. */
int loco_rtx_repair_all(struct loco_rtx_worker *w, int timeout_ms,
			uint64_t *held);

/* Settle every other slot's log that is not DONE: once its lease is
 * over (waiting for it), abort an INIT log, release an ABORT log's locks,
 * re-run a DOING log's commit (the repair actions of a lock found
 * expired, rTX Fig. 10), so a crashed transaction that left its log but
 * no lock (killed right after the log WRITE) is finished too. *PENDING
 * (may be NULL) gets the logs still not DONE afterwards (0 at
 * quiescence). Safe while other clients run: a running transaction's
 * lease has not run out, and repairing an expired one is what any
 * client does. Returns 0, -EINVAL (inside a transaction) or an error.
 * Ordering: the repairs are complete on return.
 * Completion: synchronous (reads every log; may wait out leases).
 * Caller: the worker's thread, outside a transaction. */
int loco_rtx_settle_logs(struct loco_rtx_worker *w, uint64_t *pending);

/* Take over thread slot SLOT of a client that is gone (dead, or its
 * workers destroyed): repair its log (waiting out its lease), adopt its
 * allocation chunks and rebuild their bitmap words from a reference scan.
 * Returns 0, -EINVAL (bad or own slot) or an op error.
 * Ordering: the slot's log is DONE on the memory node on return.
 * Completion: synchronous.
 * Caller: the worker's thread, outside a transaction; the caller vouches
 *   that no live process uses SLOT. */
int loco_rtx_adopt_slot(struct loco_rtx_worker *w, uint32_t slot);

/* Count data blocks by allocation state over every hosting node (see
 * struct loco_rtx_audit), after settling this worker's own chunks (scan,
 * bitmap flush) and the unowned chunks given back with blocks in use
 * (claimed, rebuilt by a scan). Exact only when no transaction runs and
 * every other slot's worker is destroyed or adopted.
 * Ordering: the settling WRITEs and CASes are complete before the reads.
 * Completion: synchronous.
 * Caller: the worker's thread, outside a transaction. */
int loco_rtx_audit(struct loco_rtx_worker *w, struct loco_rtx_audit *out);

/* ---- the RTRANSACTION block ---------------------------------------------- */

/* Run the block as a transaction until it commits, retrying (with
 * backoff) while it fails with -EAGAIN or -EBUSY, for at most the
 * manager's timeout from the first failure (a block that commits at once
 * reads no clock). The block sets RC (an int) to 0 or an error and ends
 * an attempt with `continue` or by falling off its end; `break` and
 * `return` are not allowed. After the loop RC is 0 (committed) or the
 * error that ended it (-ETIMEDOUT after too many retries). */
#define LOCO_RTX_BLOCK(w, rc)                                               \
	for (int loco_rtx_go_ = loco_rtx_block_start_((w), &(rc));          \
	     loco_rtx_go_; loco_rtx_go_ = loco_rtx_block_next_((w), &(rc)))

/* Helpers of LOCO_RTX_BLOCK. */
int loco_rtx_block_start_(struct loco_rtx_worker *w, int *rc);
int loco_rtx_block_next_(struct loco_rtx_worker *w, int *rc);

#endif
