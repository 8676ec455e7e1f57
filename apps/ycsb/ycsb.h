/* SPDX-License-Identifier: MIT */
/* loco-ycsb, the one YCSB driver of every index (apps/ycsb/index.h):
 * shared definitions of main.c (options, phases, report), work.c (the
 * workers: load, mix, recording), track.c (what each writer knows it
 * wrote, the end-of-run check) and indexes.c (the table of indexes). */
#ifndef LOCO_APPS_YCSB_H
#define LOCO_APPS_YCSB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "apps/common/bench.h"
#include "apps/common/cluster.h"
#include "apps/common/zipf.h"
#include "apps/ycsb/index.h"

#define YCSB_MAX_THREADS 64
#define YCSB_SCAN_MAX 1000          /* largest --scan-max */
#define YCSB_SCAN_MAX_RECORDED 16   /* largest --scan-max with --record */
#define YCSB_DEFAULT_SCAN_MAX 100

/* The indexes built into this binary (indexes.c), NULL-terminated. */
extern const struct ycsb_index_ops *const ycsb_indexes[];
const struct ycsb_index_ops *ycsb_index_find(const char *name);

/* A workload: YCSB's core mixes A-F (fractions of the operations). */
struct ycsb_mix {
	char name;                  /* 'a'..'f' */
	double read, update, insert, scan, rmw;
	bool latest;                /* reads favour the latest inserts (D) */
};

/* Who may write a key (--writers). */
enum ycsb_writers {
	W_OWNER,    /* key K: client K mod C only; the check is exact */
	W_ANY,      /* anyone (YCSB's own); see track.c for what is checked */
};

struct ycsb_opts {
	const struct ycsb_index_ops *ix;
	struct ycsb_mix mix;
	double zipf;
	uint64_t keys;              /* loaded keys 0..keys-1 */
	uint32_t value_size;
	unsigned threads, scan_max;
	bool scan_max_set;
	double duration;            /* 0: no time limit (--ops alone) */
	uint64_t max_ops;           /* per thread, 0: no limit */
	double target;              /* --target: ops/s per node, 0: no limit */
	double delete_ratio;        /* deletes, and as many inserts, of chosen keys */
	enum ycsb_writers writers;
	const char *record;
	const char *resize;
	uint64_t seed;
	bool verify;
	bool verify_after_outage;   /* --verify-after-outage (crash tests) */
	unsigned dead_ms;           /* --dead-ms: nodes may die (ctl.c); 0: no */
	struct ycsb_index_cfg cfg;  /* what the index is opened with */
};

/* Counters of a worker, also the extra fields of the result row. Calls
 * and round trips are per index call (a read-modify-write is a get and
 * an update); OPS counts a read-modify-write once. */
enum {
	X_GET, X_INSERT, X_UPDATE, X_DELETE, X_SCAN,          /* calls */
	X_GET_RTT, X_INSERT_RTT, X_UPDATE_RTT, X_DELETE_RTT, X_SCAN_RTT,
	X_RMW, X_HIT, X_SCANNED, X_DONE_FALSE,
	X_LOADED, X_CHECKED, X_MISSING, X_WRONG, X_CORRUPT,
	X_RESIZES, X_RETRIES, X_CACHE_MISSES, X_REPAIRS, X_VERIFY_FAILED,
	X_UNKNOWN, X_OUTAGES, X_FLUSHES, X_LOCK_FAILS,
	X_MEM_USED, X_MEM_RESERVED, X_MEM_KEYS,
	X_N
};
static_assert(X_N <= CL_EXTRA, "the row holds the counters");

enum ycsb_kind { K_GET, K_INSERT, K_UPDATE, K_DELETE, K_SCAN, K_N };

/* What a writer knows about one key (track.c): the id of the value of
 * its last acknowledged write, TRK_ABSENT after an acknowledged delete
 * (or a failed insert's absence), TRK_NONE if it never wrote the key. */
#define TRK_ABSENT UINT64_C(0)
#define TRK_NONE UINT64_MAX

/* A write of unknown outcome (a memory node died under it, or the error
 * that stopped the worker): KEY may hold ID (TRK_ABSENT: a delete's)
 * instead of its cur, until the writer's next acknowledged write of KEY. */
struct ycsb_alt {
	uint64_t key, id;
};

struct ycsb_track {
	uint64_t *cur;
	uint64_t n, cap;
	struct ycsb_alt *alt;
	unsigned nalt, altcap;
};

struct ycsb;

struct ycsb_worker {
	struct ycsb *y;
	unsigned idx;               /* thread index on this node */
	unsigned client;            /* index among the cluster's clients */
	pthread_t tid;
	struct loco_thread *thr;
	struct ycsb_ixthr *ixt;
	uint64_t rng, seq;
	uint64_t fresh;             /* fresh keys this client inserted */
	uint64_t issued;            /* operations of the measured phase */
	uint64_t end_ns;            /* when this worker's measured phase ended */
	uint64_t up_sum;            /* --verify-after-outage: the memory
				     * nodes' loco_peer_up_ns, summed, before
				     * the run (each only grows) */
	uint64_t *val;              /* value to write (value_size bytes) */
	uint64_t *rval;             /* value read (YCSB_VALUE_MAX bytes) */
	struct ycsb_pair *pairs;    /* scan results (scan_max) */
	struct ycsb_track trk;
	bool loading;               /* the load phase: every key is new */
	bool measuring;             /* the measured phase: count in n[] */
	uint64_t n[X_N];
	_Atomic uint64_t live_ops;  /* for the progress line */
	struct bench_lat lat;
	int rc;
};

struct ycsb {
	struct ycsb_opts o;
	struct loco_mgr *mgr;
	uint64_t arena_bytes;       /* this node's arena (local_node) */
	struct ycsb_index *ix;
	struct cl_run run;
	struct zipf zipf;           /* keys 0..keys-1 */
	uint32_t self;
	unsigned member, nmembers;  /* this node's rank among the members */
	uint64_t clients;           /* nmembers x threads */
	uint64_t fresh_base;        /* first fresh key: keys rounded up to clients */
	pthread_barrier_t phase;
	struct ycsb_ctl *ctl;       /* --dead-ms: the node records (ctl.c) */
	uint64_t dead;              /* members found dead (ctl.c) */
	uint64_t end_ns;            /* end of the measured phase (0: none) */
	_Atomic unsigned done;      /* workers through the measured phase */
	struct ycsb_worker w[YCSB_MAX_THREADS];
};

/* ctl.c: the phases with --dead-ms (nodes may die): every node's
 * heartbeat, phase and final row in a region on the first memory node. */
enum { YCSB_PHASE_LOADED = 1, YCSB_PHASE_RUN = 2, YCSB_PHASE_CHECKED = 3,
       YCSB_PHASE_DONE = 4 };
struct ycsb_ctl;
/* The records and this node's heartbeat thread; 2 if there is no memory
 * node (named on stderr). */
int ycsb_ctl_open(struct ycsb *y);
void ycsb_ctl_close(struct ycsb *y);
/* Say hello to every other member now, so that this node knows each
 * one's incarnation: a member found silent later is fenced by it
 * (loco_fence_node asks a member it never met, which a paused or dead
 * one cannot answer). A member not met within --dead-ms is left; it is
 * waited for at the phases. */
void ycsb_ctl_meet(struct ycsb *y);
/* Reach PHASE (after a global fence, as a barrier arrival), then wait
 * until every other member reached it or is dead (no heartbeat for
 * --dead-ms; it joins y->dead). 0, -ETIMEDOUT or an op error. */
int ycsb_ctl_sync(struct ycsb *y, struct loco_thread *thr, uint64_t phase,
		  int timeout_ms);
/* Publish MINE and reach DONE; report it, and on the lowest member not
 * dead the sum of the finished nodes' rows too. */
int ycsb_ctl_finish(struct ycsb *y, struct loco_thread *thr,
		    const struct cl_row *mine, int timeout_ms,
		    cl_report_fn *report, void *arg);
/* The lowest member not found dead. */
bool ycsb_ctl_leader(const struct ycsb *y);

/* work.c */
void *ycsb_worker_main(void *arg);
/* ycsb_call's result for a get that read a value no write put there: it
 * is counted (corrupt), recorded as open, and the thread goes on. */
#define YCSB_CORRUPT 2
/* ycsb_call's result for a call a memory node's death interrupted: its
 * outcome is unknown (recorded open, tracked as either), the memory
 * nodes are back and the index recovered: the thread goes on. */
#define YCSB_UNKNOWN 3
/* Memory nodes get this long to come back after an outage. */
#define YCSB_BACK_MS 30000
/* --verify-after-outage: how long a worker waits for a node to die. */
#define YCSB_OUTAGE_WAIT_MS 60000
/* One index call of kind K, recorded and counted; 0, or 1 for the map
 * outcome "absent"/"present" (-ENOENT, -EEXIST), YCSB_CORRUPT, or an
 * error (the thread then stops). ID is the value id written
 * (insert/update) and *GOT the id read (get: 0 when absent). */
int ycsb_call(struct ycsb_worker *w, enum ycsb_kind k, uint64_t key,
	      uint64_t id, uint64_t *got);
/* A call failed with -LOCO_EDOWN: wait for every memory node (-LOCO_ELOST,
 * one that came back without its memory, ends the run with a message)
 * and let the index recover. YCSB_UNKNOWN, or an error (the thread
 * stops). */
int ycsb_outage(struct ycsb_worker *w, const char *what, uint64_t key);
/* --verify-after-outage: unless W already lived through an outage, probe
 * the index with gets until a memory node is down, then wait it out
 * (ycsb_outage). 0, -ETIMEDOUT (none within YCSB_OUTAGE_WAIT_MS) or an
 * error. */
int ycsb_await_outage(struct ycsb_worker *w);

/* track.c */
int track_init(struct ycsb_worker *w);
void track_fini(struct ycsb_worker *w);
/* The entry of KEY in W's table (grown as needed), NULL if W does not
 * track KEY or memory ran out (then W->rc is -ENOMEM). */
uint64_t *track_at(struct ycsb_worker *w, uint64_t key);
/* The call of kind K on KEY writing ID ended with RC (ycsb_call): update
 * what W knows, and with --writers owner compare the outcome with it
 * (a get by the owner must return its last write). RC < 0 or
 * YCSB_UNKNOWN: the write's outcome is unknown (KEY may hold either). */
void track_result(struct ycsb_worker *w, enum ycsb_kind k, uint64_t key,
		  uint64_t id, int rc, uint64_t got);
/* Read back every key W wrote and count missing and wrong values. */
int track_check(struct ycsb_worker *w);

/* Value ids: node + 1 in the top 16 bits, the thread in the next 8, a
 * sequence number (from 1) in the low 40. */
static inline uint32_t value_node(uint64_t id)
{
	return (uint32_t)(id >> 48) - 1;
}

static inline unsigned value_thread(uint64_t id)
{
	return (unsigned)(id >> 40) & 0xff;
}

#endif
