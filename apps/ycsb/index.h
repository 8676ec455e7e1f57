/* SPDX-License-Identifier: MIT */
/* The index interface of loco-ycsb: what an index under test (race,
 * sherman, kvstore, local) gives the one YCSB driver. Kept small on
 * purpose: open/close per node, a handle per application thread, the five
 * map operations with 64-bit keys and byte values, and counters.
 *
 * The driver owns the manager, the threads, the workload, the history
 * recording (it records every call below as a map / ordered-map op) and the
 * end-of-run check; an index only implements the operations.
 *
 * Every operation returns 0 or a negative errno; the map outcomes are
 * -ENOENT (get/update/remove of an absent key) and -EEXIST (insert of a
 * present key). -LOCO_EDOWN (a memory node died under the operation) is
 * an outage: the driver records the op as of unknown outcome, waits for
 * the memory nodes, lets the index recover and goes on. Any other
 * negative value is an error the driver reports (the op is recorded as
 * of unknown outcome and the thread stops). Outputs are written only on
 * success. */
#ifndef LOCO_APPS_YCSB_INDEX_H
#define LOCO_APPS_YCSB_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/loco.h>

#define YCSB_VALUE_MAX 4096     /* largest --value-size */
#define YCSB_IX_OPTS 16         /* --ix-opt KEY=VALUE, at most */

/* What the driver tells an index at open. */
/* Operations per second per thread no distributed index reaches here
 * (race's workload D does about 1 M on shm): the fresh keys a timed run
 * may insert are sized from it. */
#define YCSB_RATE_MAX 3e6

struct ycsb_index_cfg {
	const char *name;       /* channel name, e.g. "ycsb" */
	uint64_t keys;          /* key space (sizing hint): keys 0..keys-1 */
	/* Fresh keys the run's inserts may add, over every client (sizing
	 * hint, 0: none): the insert share of --ops per thread, or of
	 * --duration at YCSB_RATE_MAX ops/s per thread, whichever is less. */
	uint64_t fresh;
	/* The arena of a node hosting the index (sizing hint, 0: unknown):
	 * this node's, which a launcher gives every node of the run (loco-run
	 * passes one LOCO_ARENA_MB to all). Default pools fit in it. */
	uint64_t arena_bytes;
	uint32_t value_size;    /* bytes of every value, 8..YCSB_VALUE_MAX */
	unsigned threads;       /* application threads of this node */
	/* --resize, the index's own word (race: "rtx" or "cas", sherman:
	 * "plain" or "rtx"), NULL: its default. An index rejects a word it
	 * does not know (every word, if it has no modes) as an option. */
	const char *resize;
	uint64_t seed;          /* --seed */
	/* --ix-opt KEY=VALUE pairs, index specific (e.g. race's initial
	 * depth, sherman's node size or cache MiB). An index rejects a key
	 * it does not know with -EINVAL and a message naming it. */
	unsigned nopts;
	const char *opt_key[YCSB_IX_OPTS];
	const char *opt_val[YCSB_IX_OPTS];
};

/* Counters an index adds to the result line (0 where they do not apply). */
struct ycsb_index_counters {
	uint64_t resizes;       /* splits / resizes this node performed */
	uint64_t retries;       /* optimistic retries (torn reads, lost CAS) */
	uint64_t cache_misses;  /* stale or missing client-cache entries */
	uint64_t repairs;       /* rTX repairs this node performed */
	uint64_t lock_fails;    /* lock CASes that found the lock held (one
				 * round trip each; reported for the
				 * measured phase only) */
	/* The index's remote memory at the end of the run, summed into the
	 * cluster line (0: not measured; race and sherman measure it in
	 * --verify's walk, on the node that ran it; kvstore on every node,
	 * its own slots). */
	uint64_t mem_used;      /* bytes of the structures holding the
				 * items (tables, blocks, nodes, slots) */
	uint64_t mem_reserved;  /* bytes of arena the index's regions take
				 * (pools at their full size) */
	uint64_t mem_keys;      /* keys those hold */
};

/* One pair of a scan result. */
struct ycsb_pair {
	uint64_t key;
	uint32_t len;
	const void *val;        /* valid until the thread handle's next call */
};

struct ycsb_index;      /* one node's index (opaque to the driver) */
struct ycsb_ixthr;      /* one application thread's handle */

struct ycsb_index_ops {
	const char *name;       /* --index NAME */
	bool ordered;           /* scan supported (workload E) */
	bool distributed;       /* needs the cluster (false: "local") */
	/* Create this node's endpoint(s) and start joining; the driver calls
	 * loco_mgr_wait_ready afterwards. There is always a manager (a
	 * private one-node cluster when run alone); a local index ignores it. */
	int (*open)(struct loco_mgr *mgr, const struct ycsb_index_cfg *cfg,
		    struct ycsb_index **out);
	/* After loco_mgr_wait_ready (start monitor threads etc.); may be NULL. */
	int (*start)(struct ycsb_index *ix);
	/* Called on the OS thread that will use the handle (and THR). */
	int (*thread_open)(struct ycsb_index *ix, struct loco_thread *thr,
			   struct ycsb_ixthr **out);
	void (*thread_close)(struct ycsb_ixthr *t);
	/* Completes or reports the remote work of teardown. */
	int (*close)(struct ycsb_index *ix);

	/* VAL holds at least YCSB_VALUE_MAX bytes. */
	int (*get)(struct ycsb_ixthr *t, uint64_t key, void *val, uint32_t *len);
	int (*insert)(struct ycsb_ixthr *t, uint64_t key, const void *val,
		      uint32_t len);
	int (*update)(struct ycsb_ixthr *t, uint64_t key, const void *val,
		      uint32_t len);
	int (*remove)(struct ycsb_ixthr *t, uint64_t key);
	/* Pairs with LO <= key <= HI in key order, at most MAX of them, into
	 * OUT; *N gets the count. NULL when !ordered. */
	int (*scan)(struct ycsb_ixthr *t, uint64_t lo, uint64_t hi,
		    unsigned max, struct ycsb_pair *out, unsigned *n);

	/* After a memory node's outage: an operation of T returned
	 * -LOCO_EDOWN (its outcome unknown) and every memory node is back
	 * (loco_peer_wait returned 0). Settle what T's remote state may have
	 * lost (e.g. start a new client incarnation) so that its next
	 * operation can run. 0, -LOCO_EDOWN (a node died again: the driver
	 * waits and calls it again) or an error. May be NULL (nothing to
	 * settle). */
	int (*recover)(struct ycsb_ixthr *t);

	/* This node's counters so far; may be NULL. The driver calls it
	 * after every thread handle is closed. */
	void (*counters)(struct ycsb_index *ix, struct ycsb_index_counters *c);
	/* --verify: walk the whole structure and check its invariants, after
	 * the end-of-run check, on the lowest compute node only. No operation
	 * runs anywhere meanwhile, but the other thread handles, of this node
	 * and of the others, may be closing; every index handle stays open
	 * until the verify is done. 0, or a negative errno with what is
	 * wrong in MSG (LEN bytes). May be NULL (--verify is then refused). */
	int (*verify)(struct ycsb_ixthr *t, char *msg, size_t len);
};

/* The indexes the driver knows (defined by each index's adapter file,
 * apps/ycsb/ix_<name>.c, a '-' in the name as '_'). */
extern const struct ycsb_index_ops ycsb_ix_local;
extern const struct ycsb_index_ops ycsb_ix_local_ordered;
extern const struct ycsb_index_ops ycsb_ix_kvstore;
extern const struct ycsb_index_ops ycsb_ix_race;
extern const struct ycsb_index_ops ycsb_ix_sherman;

#endif
