/* SPDX-License-Identifier: MIT */
/* loco-rtx-transfer: shared definitions of the program's parts.
 *
 * Every compute node runs the same program. Coordination is barrier-free
 * and tolerates dead nodes: each node owns a record in region "xfer-run.ctl"
 * on the home memory node, heartbeats into it while it works and marks it
 * DONE at the end. A node that is not DONE and whose heartbeat stopped
 * for --dead-ms is dead. When every node is DONE or dead, one DONE node
 * (--reporter if it finished, else the lowest DONE id) repairs what the
 * dead left, checks the total and prints the JSON result line. */
#ifndef LOCO_APPS_XFER_H
#define LOCO_APPS_XFER_H

#include <assert.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "apps/common/bench.h"
#include <loco/channel.h>
#include <loco/loco.h>
#include <loco/rtx/rtx.h>

#define XFER_MAX_THREADS 31         /* one rtx slot stays for the reporter */
#define XFER_SLOTS(threads) ((threads) < 8 ? 8u : 32u) /* rtx slots a node */
#define XFER_TL_SLACK_MS 3000       /* timeline past --duration */
#define XFER_BACK_MS 30000          /* wait for a dead memory node's return */

enum xfer_mode { XFER_RTX, XFER_LOCK };
enum xfer_state { XFER_NONE = 0, XFER_RUNNING = 1, XFER_DONE = 2 };

struct xfer_opts {
	unsigned accounts;
	uint64_t balance;
	unsigned max_amount;
	double duration;
	unsigned threads;
	enum xfer_mode mode;
	unsigned drift_ms;
	bool no_opt1;
	bool prelock;               /* OPT2: pre-lock both accounts */
	bool update;                /* loco_rtx_read_for_update: the write
				     * set named at the read */
	unsigned touch_pct;         /* % of ops rewriting one account as is */
	bool all_mem;               /* spread accounts over every memory node */
	unsigned blocks;            /* data blocks per hosting node; 0: rtx's */
	const char *timeline;       /* CSV path, or NULL */
	unsigned hb_ms, dead_ms;
	uint64_t seed;
	unsigned reporter;          /* --reporter: reports if it finished;
				     * LOCO_MAX_NODES: none named */
	bool count_commits;         /* each transfer also counts itself in
				     * its worker's commit counter object */
	bool no_persist;            /* tests: rtx without persistence points */
	bool reclaim_dead;          /* --reclaim-dead: fence and adopt a dead
				     * node's slots during the run */
};

/* Remote record of one compute node (region "xfer-run.ctl"). */
struct xfer_rec {
	uint64_t hb_ms;             /* CLOCK_REALTIME ms of the last beat */
	uint64_t state;             /* enum xfer_state */
	uint64_t ops, aborts, repairs, lock_waits;
	/* remote ops of the measured phase (struct loco_stats) */
	uint64_t reads, writes, cas, faa, bytes_read, bytes_written, rtts;
	uint64_t flushes;           /* FLUSHes (persists) */
	uint64_t blocked;           /* transfers that waited on a lock */
	uint64_t blocked_p99_us, blocked_max_us;
	uint64_t stalls;            /* transfers that repaired something */
	uint64_t stall_p50_us, stall_p99_us, stall_max_us;
	uint64_t repair_end_us;     /* CLOCK_REALTIME us: first repairing transfer done */
	uint64_t acked;             /* --count-commits: transfers acknowledged */
	uint64_t unknown;           /* transfers whose outcome a memory node's
				     * death left unknown */
	uint64_t outages;           /* recoveries from a memory node's death */
	uint64_t repairs_of[LOCO_MAX_NODES]; /* repairs, by the owner's node */
	uint64_t reclaimed;         /* --reclaim-dead: node ids whose slots
				     * this node adopted during the run */
};
static_assert(sizeof(struct xfer_rec) == 208 + 8 * LOCO_MAX_NODES,
	      "remote layout");

/* Region "xfer-run.ctl": this header, then one record per node id. */
struct xfer_hdr {
	uint64_t t0_ms;             /* timeline origin: first start, by CAS */
	uint64_t pad[15];
};
static_assert(sizeof(struct xfer_hdr) == 128, "remote layout");

/* Per worker thread. */
struct xfer_wstats {
	uint64_t ops, aborts, repairs, lock_waits, blocked, stalls;
	uint64_t acked, unknown, outages;
	uint64_t repair_end_us;      /* first transfer that repaired: its end */
	struct bench_lat lat, blocked_lat, stall_lat;
};

struct xfer {
	struct xfer_opts o;
	struct loco_mgr *mgr;
	struct loco_thread *thr;     /* the main thread's */
	uint32_t self;
	uint32_t home;               /* hosts xfer-run.ctl and .tl */
	uint64_t compute;            /* compute node ids, self included */
	struct loco_rregion ctl, tlr;
	struct loco_channel run;     /* "xfer-run": ctl, tl and lk, at home */
	uint64_t t0_ms;
	uint32_t tl_len;             /* buckets (ms) per node */
	_Atomic uint32_t *tl;        /* this node's ops per ms */
	uint32_t *tl_stage;          /* WRITE source of the timeline */
	struct xfer_rec rec;         /* WRITE source of the record */
	_Atomic bool stop;
	_Atomic uint64_t live_ops, live_repairs; /* for the heartbeats */
	uint64_t init_repairs;       /* repairs while initialising */
	struct xfer_wstats ws[XFER_MAX_THREADS];
	struct loco_stats st0, st1;  /* manager stats around the run */
	/* mode state */
	struct loco_rtx *rtx;
	loco_raddr_t *acct;          /* rtx: TXObj of each account */
	uint64_t mem;                /* the memory nodes it uses */
	_Atomic uint64_t live_acked, live_unknown, live_outages;
	/* repairs by this node's workers, by the repaired slot's node */
	_Atomic uint64_t live_repairs_of[LOCO_MAX_NODES];
	/* --reclaim-dead: node ids reclaimed during the run, and the
	 * repairs of the reclaims (xfer_reclaimer's) */
	_Atomic uint64_t live_reclaimed;
	uint64_t reclaim_repairs;
	struct loco_rregion lk;      /* lock mode: accounts {lock, balance} */
};

/* Final outcome, filled by the reporter. */
struct xfer_result {
	uint64_t total, expected, nulls;
	uint64_t repairs, final_repairs, locks_held;
	/* repairs for the nodes found dead (not takeovers from a slow live
	 * holder): REPAIRS_OF (every node's, by owner node) summed over DEAD */
	uint64_t dead_repairs, repairs_of[LOCO_MAX_NODES];
	uint64_t ops, aborts, blocked;
	uint64_t blocked_p99_us, blocked_max_us;
	uint64_t stalls, stall_p50_us, stall_p99_us, stall_max_us;
	uint64_t repair_end_us;      /* earliest over the nodes, 0: none */
	struct loco_stats st;        /* summed over the nodes */
	uint64_t leaked, lost;
	uint64_t dead;               /* node ids found dead */
	uint64_t done;               /* node ids that finished */
	/* --count-commits: commit counters summed over the workers, and
	 * acknowledged transfers missing from them (lost after a power cut) */
	uint64_t acked, unknown, counted, lost_commits;
	uint64_t outages;            /* recoveries from memory node deaths */
	uint64_t reclaimed;          /* node ids reclaimed during the run */
};

uint64_t xfer_realtime_ms(void);
uint64_t xfer_realtime_us(void);

/* The smaller of A and B where 0 means "not set". */
static inline uint64_t xfer_min_set(uint64_t a, uint64_t b)
{
	return !a ? b : !b ? a : a < b ? a : b;
}
uint64_t xfer_rng(uint64_t *s);
/* Record one committed transfer of worker W at CLOCK_REALTIME ms NOW. */
void xfer_tick(struct xfer *xf, uint64_t now_ms);

/* A memory node died under an operation (-LOCO_EDOWN): wait until every
 * memory node the run uses is back. 0, or why not (-LOCO_ELOST, a
 * timeout). */
int xfer_wait_memory(struct xfer *xf);

/* xfer_ctl.c */
/* Open region NAME of LEN of the run's channel, hosted on the home node
 * (create-or-open; held in our arena when we are it), with remote ACCESS
 * (LOCO_REGION_REMOTE_*). After xfer_ctl_open. */
int xfer_open_shared(struct xfer *xf, const char *name, uint64_t len,
		     unsigned access, struct loco_rregion *out);
int xfer_ctl_open(struct xfer *xf);
void xfer_ctl_close(struct xfer *xf);
/* What one look at another node's record found (xfer_look). */
enum xfer_seen { XFER_SEEN_ALIVE, XFER_SEEN_DONE, XFER_SEEN_SUSPECT };

/* One watcher's view of another node's heartbeat. */
struct xfer_peer {
	uint64_t hb, since_ns;
	bool settled, unfenced;
};

/* READ node ID's record into *R on THR and judge it: DONE, ALIVE (its
 * heartbeat moved within --dead-ms, or this is the first look), or
 * SUSPECT (no beat for --dead-ms: maybe dead, maybe paused; nothing may
 * act for it before xfer_fence_suspect). 0 or the READ's error. */
int xfer_look(struct xfer *xf, struct loco_thread *thr, uint32_t id,
	      struct xfer_peer *pw, struct xfer_rec *r, enum xfer_seen *seen);
/* Fence suspect ID (loco_fence_node): true once fenced; false if the
 * fence did not complete (said once on stderr): ask again later. */
bool xfer_fence_suspect(struct xfer *xf, uint32_t id, struct xfer_peer *pw);
/* --reclaim-dead, rtx mode: a thread (struct xfer_warg) that watches the
 * other compute nodes during the measured phase, until xf->stop, and
 * reclaims a dead one's slots (fenced first); docs/rtx.md, "Reclaiming
 * a dead client's slots during the run". */
void *xfer_reclaimer(void *arg);
/* Say hello to every other compute node, so that this node knows each
 * one's incarnation: one found silent later is fenced by it
 * (loco_fence_node asks a node it never met, which a paused or dead one
 * cannot answer). One not met within --dead-ms is left. */
void xfer_ctl_meet(struct xfer *xf);
int xfer_publish(struct xfer *xf, enum xfer_state st);
/* Remote-op counters of the record: NOW minus the start of the run. */
void xfer_rec_stats(struct xfer *xf, const struct loco_stats *now);
/* Wait until every other compute node is DONE or dead; fills the
 * outcome's done/dead sets and sums over their records. */
int xfer_wait_others(struct xfer *xf, struct xfer_result *res);
/* RES->dead_repairs: the other nodes' repairs (summed by
 * xfer_wait_others) and this node's, of the slots of RES->dead. */
void xfer_dead_repairs(struct xfer *xf, struct xfer_result *res);
int xfer_write_timeline(struct xfer *xf, const struct xfer_result *res);

/* xfer_rtx.c */
int xfer_rtx_open(struct xfer *xf);
void xfer_rtx_close(struct xfer *xf);
int xfer_rtx_init(struct xfer *xf, struct loco_rtx_worker *w);
void *xfer_rtx_worker(void *arg);
int xfer_rtx_final(struct xfer *xf, struct xfer_result *res);
/* Adopt every thread slot of compute node ID (fenced by the caller) with
 * a worker created on THR for it and destroyed after, which gives every
 * adopted chunk back to the pool. */
int xfer_rtx_reclaim(struct xfer *xf, struct loco_thread *thr, uint32_t id);

/* xfer_lock.c */
int xfer_lock_open(struct xfer *xf);
int xfer_lock_init(struct xfer *xf);
void *xfer_lock_worker(void *arg);
int xfer_lock_final(struct xfer *xf, struct xfer_result *res);

/* Argument of a worker thread. */
struct xfer_warg {
	struct xfer *xf;
	unsigned idx;
	int rc;
};

/* Entry point of the rTX transfer program (argv as for main). */
int rtx_transfer_main(int argc, char **argv);

#endif
