/* SPDX-License-Identifier: MIT */
/* Private structures of rtx (not installed). */
#ifndef LOCO_RTX_INTERNAL_H
#define LOCO_RTX_INTERNAL_H

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/channel.h>
#include <loco/loco.h>
#include <loco/rtx/crash.h>
#include <loco/rtx/log.h>
#include <loco/rtx/rtx.h>

/* TXObj remote layout: LLLock word, then data pointer. */
#define RTX_META_LEN 16
#define RTX_LOCK_OFF 0
#define RTX_DPTR_OFF 8

#define RTX_SCAN_BYTES (16u * 1024)   /* largest READ of a scan */
#define RTX_FLUSH_EVERY 32            /* allocations between bitmap flushes */
#define RTX_RUN_MAX 8                 /* blocks rtx_alloc_run takes in a row */
#define RTX_MAX_REPAIRS 8             /* expired locks noted per attempt */
#define RTX_SCAN_MIN_ALLOCS 8         /* allocations before a rescan */
#define RTX_FULL_WAITS 600            /* 1 ms waits for a chunk when full */
#define RTX_ASK_EVERY 10              /* waits between two asks for chunks */

/* Remote superblock (home node). */
struct rtx_super {
	uint64_t cfg;        /* hash of the options that shape the layout */
	uint64_t epoch_ms;   /* POSIX ms of time 0 of every lease */
	uint64_t pad[6];
};

/* Remote slot record (home node), one per thread slot. */
struct rtx_slot_rec {
	uint64_t incarnation; /* FAA'd by every worker that takes the slot */
	uint64_t hwm_ms;      /* leases of this slot stay below this */
	uint64_t pad[6];
};

/* One hosting node's part: the sub-channel "<name>/m<id>" that holds its
 * regions (hosted there by create-or-open; the home part also holds
 * super, slots and logs). */
struct rtx_node {
	struct loco_channel base;
	uint32_t id;
	struct loco_rregion meta, data, bitmap, chunks;
};
static_assert(offsetof(struct rtx_node, base) == 0, "base first");

/* Counters: one atomic per field of struct loco_rtx_stats, in order. The
 * owning worker is the only writer (relaxed load + store); anyone may
 * read them for a sum. */
#define RTX_NSTATS (sizeof(struct loco_rtx_stats) / sizeof(uint64_t))
struct rtx_counters {
	_Atomic uint64_t v[RTX_NSTATS];
};
#define RTX_STAT(field) (offsetof(struct loco_rtx_stats, field) / sizeof(uint64_t))

/* The rtx channel "<name>": no regions of its own, no peers to join (its
 * memory is hosted, and clients come and go), one sub-channel per hosting
 * node. */
struct loco_rtx {
	struct loco_channel base;
	struct loco_rtx_opts o;
	uint32_t home;
	struct loco_rregion super, slots, logs; /* node[0]'s (the home part) */
	unsigned nnodes;
	struct rtx_node *node;                /* nnodes, by id; node[0]: home */
	int8_t node_idx[LOCO_MAX_NODES];      /* -1: not hosting */
	uint64_t node_mask;
	uint64_t durable;                     /* hosting nodes with a durable
					       * image: they get persists */
	uint64_t epoch_ms;
	uint32_t block_len, log_len, nslots, nblocks, nchunks;
	uint32_t scan_slots;                  /* slots of present node ids */
	pthread_mutex_t lock;                 /* tidx_used, workers, retired */
	uint64_t tidx_used;
	struct loco_rtx_worker *workers;
	uint64_t retired[RTX_NSTATS];
};
static_assert(offsetof(struct loco_rtx, base) == 0, "base first");

/* Read set entry. */
struct rtx_rent {
	loco_raddr_t obj;
	uint32_t ni, idx;          /* hosting node index, TXObj index */
	uint64_t lock;             /* unlocked word read (the version) */
	uint64_t dptr;             /* data pointer read */
	uint64_t prelock;          /* our no-log lock word if pre-locked */
	uint64_t vmeta[2];         /* validation READ destination */
	int32_t wi;                /* write set index, -1 if only read */
	uint8_t cc;                /* enum loco_rtx_cc */
	bool null;                 /* never written */
	uint8_t *data;
};

/* Write set entry. */
struct rtx_went {
	uint32_t ri;               /* its read set entry */
	uint64_t block;            /* new block, 0 until allocated */
	uint64_t new_dptr;
	uint64_t lock_old;         /* lock CAS result */
	bool reread;               /* the lock round READs the TXObj back (not
				    * for a pre-lock: its READ came with it;
				    * nor after a whole first READ) */
	uint64_t cas_old[2];       /* install / release CAS results */
	uint8_t *data;
};

/* This worker's chunks on one hosting node. */
struct rtx_chunk {
	uint32_t idx;              /* chunk index in the node's pool */
	uint64_t free;             /* blocks known free (bit i: idx*64 + i) */
	uint64_t alloc;            /* bitmap word as this worker keeps it */
	uint64_t stage;            /* source of the last bitmap WRITE */
	uint64_t keep;             /* scan scratch: referenced blocks */
	bool open;                 /* scan scratch: holds a block of the open
				    * transaction */
	bool stale;                /* remote word unknown: must be written */
};

struct rtx_pool {
	struct rtx_chunk *ch;
	unsigned n, cap;
	int32_t *pos;              /* chunk index -> position in ch, or -1 */
	uint64_t *seen;            /* scan scratch, chunk index -> blocks a
				    * pointer names; only owned chunks' words
				    * are cleared and read */
	uint32_t claim_cursor;
	unsigned cur;              /* position take_block starts from */
	unsigned run_none;         /* no owned chunk has a run of this many
				    * free blocks (0: not known); reset
				    * whenever a free mask grows */
	uint64_t since_scan;       /* allocations since the last scan */
	uint64_t want_seen;        /* the node's want word at our last scan */
	bool lean;                 /* it had moved then: a worker lacks
				    * blocks, so hold 1.5 times the live
				    * blocks, not 2 (pool_keep, alloc.c) */
	unsigned unflushed;
};

struct loco_rtx_worker {
	struct loco_rtx *x;
	struct loco_thread *thr;
	uint32_t slot, tidx;
	uint64_t inc;              /* incarnation of this worker's slot */
	uint64_t tag;              /* last tag issued */
	uint64_t tag_ns;           /* CLOCK_MONOTONIC read for that tag */
	uint64_t clk_off;          /* CLOCK_REALTIME - CLOCK_MONOTONIC (ns) */
	uint64_t clk_at;           /* CLOCK_MONOTONIC when clk_off was read */
	bool skewed;               /* the lease clock has a skew (else none
				    * ever: loco_lease_skew_ns(0) == 0) */
	uint64_t hwm_ms;           /* slot's persisted lease high-water mark */
	uint32_t seq;              /* last log sequence number used */
	unsigned fresh_ctr;
	const struct loco_rtx_hooks *hooks;
	void *hook_arg;
	/* the open transaction */
	bool active;
	bool single_node;          /* every object on one hosting node */
	unsigned nr, nw;
	struct rtx_rent *rs;
	struct rtx_went *ws;
	uint64_t pretag;           /* tag of this transaction's pre-locks */
	bool prelocked;            /* it took one (rs[].prelock may be set) */
	uint64_t lockv;
	uint8_t upd;               /* enum rtx_upd: loco_rtx_read_for_update */
	uint32_t upd_gen;          /* the home node's incarnation its locks
				    * went to (loco_peer_qp_gen) */
	struct loco_ack ack;       /* everything the transaction posted */
	unsigned nrep;             /* expired locks noted */
	loco_raddr_t rep_obj[RTX_MAX_REPAIRS];
	uint64_t rep_word[RTX_MAX_REPAIRS];
	/* LOCO_RTX_BLOCK */
	uint64_t block_t0;
	unsigned block_tries;
	uint64_t wake_lease;       /* earliest lease (ms) of a live foreign lock
				    * that stopped the attempt; 0 = none */
	/* buffers: log (WRITE source), repair log copy, data copy, scan */
	uint8_t *logbuf, *rlog, *copy, *scan;
	uint64_t state_old;        /* scratch CAS results */
	uint64_t xres[2 * LOCO_RTX_WRITES_MAX];
	/* allocation */
	struct rtx_pool *pool;     /* one per hosting node */
	struct loco_ack flush_ack;
	struct rtx_counters st;
	uint64_t rng;
	struct loco_rtx_worker *next;
};

/* What loco_rtx_read_for_update made of the open transaction. */
enum rtx_upd {
	RTX_UPD_NONE = 0,          /* no declared write set */
	RTX_UPD_DECLARED,          /* declared, read: the ordinary commit */
	RTX_UPD_EARLY,             /* declared, log INIT and locks held: the
				    * 4-round-trip commit (rtx_commit_early) */
	RTX_UPD_FAILED,            /* the read for update failed: the commit
				    * returns -EAGAIN */
};

/* Where a log entry's TXObj is: the meta region of its node and the
 * TXObj's offset there (meta NULL: no TXObj of this rtx). */
struct rtx_loc {
	const struct loco_rregion *meta;
	uint64_t off;
};

/* A TryCommit execution (owner or repairer), rTX Fig. 9. */
struct rtx_exec {
	const struct loco_rtx_log_ent *ent;
	const struct rtx_loc *loc;  /* per entry */
	unsigned n;
	uint64_t lockv;
	const uint64_t *release;   /* per entry; NULL: fresh versions */
	uint32_t slot;             /* whose log */
	uint64_t state;            /* the DOING word last seen */
	uint64_t confirmed_ns;     /* when STATE was seen current */
};

/* ---- rtx.c --------------------------------------------------------------- */
static inline void rtx_count(struct loco_rtx_worker *w, size_t idx, uint64_t n)
{
	/* Relaxed: single writer; readers only sum statistics. */
	uint64_t v = atomic_load_explicit(&w->st.v[idx], memory_order_relaxed);
	atomic_store_explicit(&w->st.v[idx], v + n, memory_order_relaxed);
}
#define RTX_INC(w, field) rtx_count((w), RTX_STAT(field), 1)

/* The time leases are taken and judged on: CLOCK_REALTIME (ns) moved by
 * this node's lease clock skew (loco_lease_skew_ns, loco-run
 * --clock-skew; docs/rtx.md, "Clock reads"). */
uint64_t rtx_clock_ns(void);
/* rtx_clock_ns in ms since the rtx's epoch. */
uint64_t rtx_now_ms(const struct loco_rtx *x);
/* loco_rtx_lease_ms, inline for the commit path. */
static inline uint64_t rtx_lease_ms(const struct loco_rtx *x, unsigned nobj)
{
	return ((uint64_t)x->o.per_obj_us * nobj + 999) / 1000 + x->o.drift_ms;
}
/* The ms at which a lease taken now over NOBJ objects is over. */
static inline uint64_t rtx_lease_end_ms(const struct loco_rtx *x,
					unsigned nobj)
{
	return rtx_now_ms(x) + rtx_lease_ms(x, nobj);
}
/* Strictly increasing tag for a transaction touching NOBJ objects, its
 * lease counted from one clock read, whose CLOCK_MONOTONIC time goes to
 * w->tag_ns. */
int rtx_next_tag(struct loco_rtx_worker *w, unsigned nobj, uint64_t *tag);
uint64_t rtx_fresh_version(struct loco_rtx_worker *w);
/* Hosting node index and TXObj index of OBJ, or -EINVAL. */
static inline int rtx_locate(const struct loco_rtx *x, loco_raddr_t obj,
			     uint32_t *ni, uint32_t *idx)
{
	uint32_t node = loco_raddr_node(obj);
	if (node >= LOCO_MAX_NODES || x->node_idx[node] < 0)
		return -EINVAL;
	const struct loco_rregion *m = &x->node[x->node_idx[node]].meta;
	uint64_t off = loco_raddr_off(obj);
	if (off < m->off || off - m->off >= m->len ||
	    (off - m->off) % RTX_META_LEN)
		return -EINVAL;
	*ni = (uint32_t)x->node_idx[node];
	*idx = (uint32_t)((off - m->off) / RTX_META_LEN);
	return 0;
}

static inline const struct loco_rregion *rtx_meta(const struct loco_rtx *x,
						  uint32_t ni)
{
	return &x->node[ni].meta;
}

static inline uint64_t rtx_log_off(const struct loco_rtx *x, uint32_t slot)
{
	return (uint64_t)slot * x->log_len;
}

/* Offset of a hosting node's want word: after its chunk owner words. */
static inline uint64_t rtx_want_off(const struct loco_rtx *x)
{
	return (uint64_t)x->nchunks * 8;
}

static inline uint64_t rtx_state_off(const struct loco_rtx *x, uint32_t slot)
{
	return rtx_log_off(x, slot) + offsetof(struct loco_rtx_log_hdr, state);
}

/* Wait for ACK; on success clear it. Inline: on a synchronous
 * transport the wait is a few instructions (loco_ack_wait). */
static inline int rtx_wait(struct loco_rtx_worker *w, struct loco_ack *ack)
{
	if (!ack->peers)
		return 0;
	int rc = loco_ack_wait(w->thr, ack, -1);
	loco_ack_clear(ack);
	return rc;
}

/* Whether the worker has persistence points to keep (durable hosting
 * nodes, and not the no_persist test option). */
static inline bool rtx_durable(const struct loco_rtx_worker *w)
{
	return w->x->durable && !w->x->o.no_persist;
}

int rtx_persist_post_slow(struct loco_rtx_worker *w, struct loco_ack *ack);
/* Persistence point (docs/durability.md, "rTX"): post, into ACK, the
 * persists that make durable everything this worker's thread wrote to the
 * durable hosting nodes; rtx_persist also waits. Nothing on nodes without
 * a durable image. */
static inline int rtx_persist_post(struct loco_rtx_worker *w,
				   struct loco_ack *ack)
{
	return rtx_durable(w) ? rtx_persist_post_slow(w, ack) : 0;
}
int rtx_persist(struct loco_rtx_worker *w);
/* Make durable bytes [OFF, OFF+LEN) of RR as they are now, whoever wrote
 * them (what a scan saw before it frees on the strength of it); waits. */
int rtx_persist_seen(struct loco_rtx_worker *w, const struct loco_rregion *rr,
		     uint64_t off, uint64_t len);
void rtx_sleep_us(unsigned us);

/* ---- commit.c ------------------------------------------------------------ */
/* Run (or finish) a TryCommit whose log is DOING with E->state. Returns 0
 * when the log is DONE, whoever finished it. */
int rtx_exec_commit(struct loco_rtx_worker *w, struct rtx_exec *e);
/* LOC[i] for each of the N log entries ENT. */
void rtx_exec_locate(const struct loco_rtx *x,
		     const struct loco_rtx_log_ent *ent, unsigned n,
		     struct rtx_loc *loc);
/* The DOING state word of sequence SEQ with a fresh repair lease for N
 * objects, for a repairer's take (the owner's INIT -> DOING carries its
 * locks' lease). *AT_NS: a time sampled before the caller's CAS, so no
 * later than the moment DOING is confirmed: the wrap guard counts from
 * it. */
uint64_t rtx_doing_word(struct loco_rtx_worker *w, uint32_t seq, unsigned n,
			uint64_t *at_ns);
int rtx_commit_logged(struct loco_rtx_worker *w);
int rtx_commit_nolog(struct loco_rtx_worker *w);
int rtx_commit_readonly(struct loco_rtx_worker *w);
/* loco_rtx_read_for_update's second round for the write set ws[0..nw)
 * (read set entries read by their TXObjs, all on the home node): new
 * blocks, data READs, log WRITE (INIT) and lock CASes in one doorbell.
 * 0: w->upd becomes RTX_UPD_EARLY; else the log is settled, the locks
 * released and the blocks freed. */
int rtx_update_lock(struct loco_rtx_worker *w);
/* The commit of an RTX_UPD_EARLY transaction: data WRITEs and
 * INIT -> DOING in one doorbell, then TryCommit. */
int rtx_commit_early(struct loco_rtx_worker *w);
/* Abort an RTX_UPD_EARLY transaction: settle its log, release its locks. */
int rtx_abort_early(struct loco_rtx_worker *w);
/* Release every pre-lock of the read set to its version. */
int rtx_release_prelocks_slow(struct loco_rtx_worker *w);
/* Inline: most transactions took none (a call to learn it cost ~20
 * instructions a commit). */
static inline int rtx_release_prelocks(struct loco_rtx_worker *w)
{
	return w->prelocked ? rtx_release_prelocks_slow(w) : 0;
}
/* Note an expired lock for repair after the attempt aborts. */
void rtx_note_expired(struct loco_rtx_worker *w, loco_raddr_t obj,
		      uint64_t word);
/* Repair the noted locks. */
void rtx_repair_noted(struct loco_rtx_worker *w);

/* ---- repair.c ------------------------------------------------------------ */
/* Repair the transaction holding OBJ's lock with word LOCKV (expired).
 * OBJ may be LOCO_RADDR_NULL: only the log is settled. Returns 0, -EBUSY
 * (repair lease running elsewhere) or an op error. */
int rtx_repair(struct loco_rtx_worker *w, loco_raddr_t obj, uint64_t lockv);
/* Settle slot SLOT's log (a gone client's): wait out its leases, repair
 * it until DONE. *SEQ (may be NULL) gets its last sequence number. */
int rtx_recover_log(struct loco_rtx_worker *w, uint32_t slot, uint32_t *seq);

/* ---- alloc.c ------------------------------------------------------------- */
int rtx_pools_init(struct loco_rtx_worker *w);
void rtx_pools_fini(struct loco_rtx_worker *w);
int rtx_alloc(struct loco_rtx_worker *w, uint32_t ni, uint64_t *block);
/* N blocks in a row (*FIRST and the N - 1 after it) on node NI, when an
 * owned chunk has such a run free: one data WRITE fills them. -ENOSPC
 * when none has (allocate one by one then), or N is not 2..RTX_RUN_MAX. */
int rtx_alloc_run(struct loco_rtx_worker *w, uint32_t ni, unsigned n,
		  uint64_t *first);
/* Return a block this worker allocated and never installed. */
void rtx_free_local(struct loco_rtx_worker *w, uint32_t ni, uint64_t block);
/* Adopt SLOT's chunks on every node (all of them, or only those of
 * another incarnation) and rebuild their state by a scan. */
int rtx_adopt_chunks(struct loco_rtx_worker *w, uint32_t slot, bool stale_only);
/* Scan and flush every pool of the worker. */
int rtx_pools_settle(struct loco_rtx_worker *w);
/* Settle, then give every chunk back (detach). */
int rtx_pools_release(struct loco_rtx_worker *w);

/* ---- rtx.c (tests only) -------------------------------------------------- */
/* Forget worker W as its process's death would: nothing is written (log,
 * chunks and bitmap stay as they are for the next incarnation). */
void rtx_worker_drop(struct loco_rtx_worker *w);

/* ---- crash.c (tests only) ------------------------------------------------ */

/* Call FN(NAME, ARG) at every crash point reached, in the thread that
 * reaches it, before the crash check (NULL: no hook). Not exported: tests
 * link the internal library. Set it while no transaction runs; it lets a
 * test stall an executor or change remote state exactly between two steps
 * of the protocol. */
typedef void (*rtx_crash_hook)(const char *name, void *arg);
void rtx_crash_set_hook(rtx_crash_hook fn, void *arg);

/* ---- crash.c: rtx's own points --------------------------------------------
 * rtx's commit path passes a dozen points per transaction: with nothing
 * armed and no hook each costs one load of this gate instead of two calls
 * (loco_crash_point reads the environment at its first call, so the gate
 * stays open until then). */
extern _Atomic int rtx_crash_gate_;
static inline bool rtx_crash_open(void)
{
	/* Relaxed: see gate_update in crash.c. */
	return atomic_load_explicit(&rtx_crash_gate_, memory_order_relaxed);
}

static inline void rtx_crash_point(const char *name)
{
	if (rtx_crash_open())
		loco_crash_point(name);
}

static inline bool rtx_crash_armed(const char *name)
{
	return rtx_crash_open() && loco_crash_armed(name);
}

#endif
