/* SPDX-License-Identifier: MIT */
/* Private structures of the core runtime. Not installed. */
#ifndef LOCO_INTERNAL_H
#define LOCO_INTERNAL_H

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "loco/affinity.h"
#include "loco/auth.h"
#include <loco/channel.h>
#include <loco/loco.h>
#include <loco/wait.h>
#include "loco/transport/transport.h"
#include "loco/wire.h"

#define LOCO_DIRTY_MAX 16     /* ranges per QP; more flush the oldest first */
#define LOCO_DIRTY_GAP 64     /* ranges closer than this merge */

/* Outstanding work requests of one (thread, peer) pair, in post order:
 * entry = ticket << 3 | opcode. */
struct loco_qp {
	struct loco_tp_qp *tp;
	uint32_t peer;
	uint32_t gen;         /* the peer's incarnation TP was made for */
	uint32_t head, count;
	uint64_t ring[LOCO_QP_DEPTH];
	uint64_t last_write;  /* ticket of the last WRITE posted */
	uint64_t placed;      /* every WRITE before this ticket is placed */
	int err;              /* sticky: first failed completion */
	uint64_t err_ticket;  /* its ticket */
	/* The first failure among the ops posted to an earlier incarnation
	 * (ticket old_err_ticket; those ops end at ticket old_upto): acks
	 * covering it still report it after the QP was renewed. */
	int old_err;
	uint64_t old_err_ticket, old_upto;
	bool durable;         /* the peer has a durable image */
	bool lost;            /* writes to an earlier incarnation were neither
			       * placed nor persisted: the next fence or
			       * persist reports -LOCO_EDOWN */
	unsigned ndirty;
	/* Ranges of a durable peer's arena the QP wrote (WRITE, CAS, FAA)
	 * since its last FLUSH: what loco_persist makes durable. */
	struct loco_drange dirty[LOCO_DIRTY_MAX];
};

/* A region of some node as this node knows it (loco/access.c). */
struct loco_rent {
	uint64_t off, len;
	uint32_t space;          /* enum loco_space */
	uint32_t access;         /* LOCO_REGION_REMOTE_* */
	uint32_t key;            /* its transport key (verbs: rkey) */
	_Atomic uint32_t logged; /* refused ops already logged (bit per op) */
	char name[LOCO_NAME_MAX];
};

/* The regions this node knows at one node: sorted by (space, off), never
 * overlapping (a newer one replaces those it overlaps: they are gone).
 * GEN grows whenever an entry goes, so a copy taken at GEN stays valid
 * while GEN has not moved. */
struct loco_rtab {
	pthread_rwlock_t lock;
	struct loco_rent *ent;
	unsigned n, cap;
	_Atomic uint64_t gen;
	_Atomic bool outside_logged; /* an op outside every region: logged */
};

/* A thread's copy of a region it used at one node; it keeps the last
 * LOCO_RCACHE_WAYS of each node, the latest first. */
#define LOCO_RCACHE_WAYS 4
struct loco_rcache {
	uint64_t gen;            /* the table's GEN it was copied at; 0: none */
	uint64_t off, len;
	uint32_t space, access, key;
};

struct loco_thread {
	/* First: the counters and what the inline operations of loco.h use.
	 * hot.sync: the transport executes and completes a request inside
	 * post (shm); the owner posts and completes without the lock, and
	 * nobody else touches its QPs (a global fence has nothing to place
	 * for it). hot.direct: its peers' mapped arenas (direct transports). */
	struct loco_thread_hot hot;
	struct loco_mgr *mgr;
	/* Asynchronous transports: held by the owner around post and poll; a
	 * global fence from another thread takes it to post and poll on this
	 * thread's QPs. Sync transports: only around QP creation. */
	pthread_mutex_t lock;
	struct loco_tp_cq *cq;
	uint64_t ticket;      /* last ticket issued (asynchronous transports) */
	struct loco_qp *qp[LOCO_MAX_NODES];
	uint64_t qps;         /* peers with a QP (set under the lock) */
	struct loco_hist_buf *hist;   /* history recorder, NULL when off */
	int cpu;              /* first CPU of its binding, -1 if not bound */
	struct loco_thread *next;
	struct loco_rcache rcache[LOCO_MAX_NODES][LOCO_RCACHE_WAYS]; /* owner only */
};
static_assert(offsetof(struct loco_thread, hot) == 0,
	      "loco_thread_hot() casts the thread to its hot part");

/* HELLO flags: what a node's arena is. */
#define LOCO_HELLO_DURABLE 0x1u    /* it has a durable image (--durable) */
#define LOCO_HELLO_POWER_CUT 0x2u  /* a kill loses what was not persisted */

#define LOCO_FENCED_MAX 8  /* fenced incarnations a target remembers per node */

/* What a node knows of a peer's memory. */
enum loco_peer_state {
	LOCO_PEER_UNKNOWN = 0,  /* no hello yet */
	LOCO_PEER_UP,           /* hello'd: its memory can be used */
	LOCO_PEER_DOWN,         /* it died: ops fail (-LOCO_EDOWN) until it is
				 * back with the same regions */
	LOCO_PEER_LOST,         /* it came back without them (-LOCO_ELOST) */
};

/* Outgoing control connection to one peer (requests from this node). */
struct loco_conn {
	pthread_mutex_t lock;
	int fd;               /* -1 when not connected */
	_Atomic int watch_fd; /* fd for the peer keeper's poll (peers.c) */
	struct loco_sess sess; /* its session once authenticated */
};

/* A region this node opened on another node (loco_region_open): re-opened
 * when that node comes back after a restart (peers.c). */
struct loco_ropen {
	uint32_t node;
	char name[LOCO_NAME_MAX];
	uint64_t off, len;
	unsigned flags;       /* its access flags, asked for again */
	struct loco_ropen *next;
};

/* Arena allocation record; the list is sorted by offset. */
struct loco_alloc {
	char name[LOCO_NAME_MAX];
	uint64_t off, len;
	uint32_t access;      /* LOCO_REGION_REMOTE_* peers have */
	uint32_t key;         /* the transport's key for it (mem_reg) */
	struct loco_tp_mr *mr; /* its registration, NULL without access */
	bool shared;          /* made by create-or-open (REGION_OPEN or a hold) */
	bool durable;         /* recorded in the durable region table */
	unsigned holds;       /* hosted-region holds of this process's channels */
	struct loco_alloc *next;
};

/* A region a channel expects from its peers. */
struct loco_chan_expect {
	char name[LOCO_REGION_NAME_MAX];
	uint64_t len;
	uint64_t from;                       /* peers that provide it */
};

/* A region of the channel on some node, opened by create-or-open. */
struct loco_chan_hosted {
	char name[LOCO_REGION_NAME_MAX];     /* short name */
	struct loco_rregion rr;
	bool held;                           /* on this node: a hold to drop */
};

/* The core's part of a channel (struct loco_channel.core). */
struct loco_chan_core {
	const struct loco_channel_ops *ops;
	struct loco_channel *children;       /* newest first (chan_lock) */
	struct loco_channel *sibling;        /* next in the parent's list */
	_Atomic uint64_t known;              /* peers whose regions are known */
	_Atomic uint64_t joined;             /* peers joined, join ops run */
	_Atomic int error;                   /* first join error, sticky */
	bool registered;
	uint32_t self_expect;  /* expect[i] this node provides (bit i), at join */
	unsigned nlocal, nexpect;
	struct loco_region local[LOCO_CHAN_REGIONS];
	char local_short[LOCO_CHAN_REGIONS][LOCO_REGION_NAME_MAX];
	struct loco_chan_expect expect[LOCO_CHAN_REGIONS];
	/* remote[i][peer]: region expect[i] as provided by peer. */
	struct loco_rregion remote[LOCO_CHAN_REGIONS][LOCO_MAX_NODES];
	unsigned nhosted;
	struct loco_chan_hosted hosted[LOCO_CHAN_HOSTED];
	struct loco_channel *next;           /* manager registry (chan_lock) */
};

struct loco_join_job {
	struct loco_channel *ch;
	uint64_t pending;     /* peers still to send JOIN to */
	uint64_t deadline_ns;
	struct loco_join_job *next;
};

/* What a HELLO says about a node. */
struct loco_hello {
	uint32_t id;
	uint32_t flags;              /* LOCO_HELLO_* */
	uint64_t arena_len, dm_len;
	uint64_t boot_id;            /* its incarnation (random per start) */
	uint64_t image_id;           /* its durable image, 0 without */
	uint16_t desc_len;
	uint8_t desc[LOCO_DESC_MAX]; /* the transport's arena descriptor */
};

struct loco_mgr {
	uint32_t id;
	struct loco_hosts hosts;
	struct loco_opts opts;
	struct loco_boot *boot;      /* the PMIx bootstrap (boot.h); NULL with
				      * a hosts file */
	bool created;                /* loco_mgr_create succeeded */
	struct loco_faults *faults;  /* LOCO_KILL_AT, ... (fault.h); NULL if none */
	char run_dir[LOCO_PATH_MAX];
	const struct loco_transport_ops *tp_ops;
	struct loco_tp *tp;
	uint8_t *arena;
	uint64_t arena_len;
	uint8_t desc[LOCO_DESC_MAX];
	size_t desc_len;
	uint64_t dm_len;             /* this node's device memory (0: none) */
	bool keyed;                  /* has a cluster key (else --insecure) */
	uint8_t key[LOCO_KEY_LEN];   /* the cluster key */
	/* Arena lengths of peers that said hello; 0 = unknown. Written by
	 * the control plane, read by posting threads. */
	_Atomic uint64_t peer_arena_len[LOCO_MAX_NODES];
	/* Their device-memory lengths: stored before the arena length's
	 * release, read after its acquire. */
	_Atomic uint64_t peer_dm_len[LOCO_MAX_NODES];
	/* Their hello flags (LOCO_HELLO_*) and incarnation: stored before the
	 * arena length's release, read after its acquire. A new incarnation
	 * (another boot id) bumps the generation; QPs made for an older one
	 * are renewed before their next post. */
	_Atomic uint32_t peer_flags[LOCO_MAX_NODES];
	_Atomic uint32_t peer_gen[LOCO_MAX_NODES];
	/* When this node last found each memory peer up (loco_lease_now_ns;
	 * 0: never): stored before the arena length's release. */
	_Atomic uint64_t peer_up_ns[LOCO_MAX_NODES];
	/* enum loco_peer_state: why the arena length is 0 (relaxed). */
	_Atomic int peer_state[LOCO_MAX_NODES];
	uint64_t peer_boot[LOCO_MAX_NODES];   /* under peer_lock */
	uint64_t peer_image[LOCO_MAX_NODES];  /* durable image ids, peer_lock */
	/* What a DOWN peer's new incarnation said hello with: its image id
	 * (the keeper compares it with peer_image) and arena length; under
	 * peer_lock. */
	uint64_t peer_back_image[LOCO_MAX_NODES];
	uint64_t peer_back_len[LOCO_MAX_NODES];
	bool peer_back[LOCO_MAX_NODES];       /* that hello arrived */
	/* Went DOWN since the keeper last tried it: its old control
	 * connection is closed before the next try (peer_lock). */
	bool peer_hangup[LOCO_MAX_NODES];
	/* Each peer's last hello, under peer_lock (a fail-over gives a
	 * mirror's to the node it took over). */
	struct loco_hello peer_hello[LOCO_MAX_NODES];
	/* Where node i is served: i, or the mirror that took it over
	 * (peers.c); control requests to i go there. */
	_Atomic uint32_t route[LOCO_MAX_NODES];

	/* Mirrors (mirror.c). A primary's mirror (LOCO_MAX_NODES: none),
	 * under alloc_lock; a mirror's state and joining thread. */
	uint32_t mirror_node;
	_Atomic int mirror_state;
	pthread_mutex_t mirror_lock;
	pthread_t mirror_thr;
	bool mirror_started;

	/* Regions opened on other nodes, and the peer keeper (peers.c). */
	pthread_mutex_t ropen_lock;
	struct loco_ropen *ropens;
	pthread_t keeper;
	_Atomic bool keeper_started; /* the pipe is set up (see peers.c) */
	int keeper_pipe[2];          /* wakes the keeper (a new connection) */
	uint64_t boot_id;            /* this process's incarnation (random) */
	uint64_t image_id;           /* durable: the region table's identity */

	pthread_mutex_t peer_lock;   /* serialises transport peer_add */

	/* The regions known at each node, this one's own too (access.c). */
	struct loco_rtab rtab[LOCO_MAX_NODES];

	pthread_mutex_t alloc_lock;   /* recursive */
	struct loco_alloc *allocs;    /* arena */
	struct loco_alloc *dm_allocs; /* device memory */
	_Atomic bool hot_warned;      /* the one fallback warning was logged */

	pthread_mutex_t thr_lock;    /* thread list, retired stats */
	struct loco_thread *threads;
	struct loco_stats retired;

	pthread_mutex_t chan_lock;   /* recursive: join ops register sub-channels */
	struct loco_channel *channels;

	struct loco_conn out[LOCO_MAX_NODES];

	/* Control-plane server. */
	int listen_fd;
	int wake_pipe[2];
	pthread_t server;
	bool server_started;

	/* Join worker. */
	pthread_mutex_t job_lock;
	pthread_cond_t job_cond;
	struct loco_join_job *jobs;
	struct loco_channel *job_current; /* job the worker is running */
	struct loco_channel *job_cancel;  /* its channel is being finished */
	pthread_t joiner;
	bool joiner_started;
	_Atomic bool stopping;
	/* Fencing (fence.c). Incarnations of each node fenced here as a
	 * target, a ring under peer_lock; the last incarnation of each node
	 * this node fenced (fence_lock: one fence at a time, logged once);
	 * whether this node's own incarnation is fenced. */
	uint64_t fenced[LOCO_MAX_NODES][LOCO_FENCED_MAX];
	unsigned nfenced[LOCO_MAX_NODES];
	pthread_mutex_t fence_lock;
	uint64_t fence_done[LOCO_MAX_NODES];
	_Atomic bool self_fenced;
	struct loco_history *history; /* NULL unless recording */
	struct loco_affinity *aff;    /* NULL unless --cpu-bind core works */
};

/* region.c */
/* A durable node's region table (DIR/regions): load it into the arena's
 * records, or start an empty one with a new identity (mgr->image_id). */
int loco_regions_load(struct loco_mgr *mgr);
/* Write the table after a durable region came or went (alloc_lock held). */
int loco_regions_save(struct loco_mgr *mgr);
/* Create-or-open NAME (LEN bytes) for a channel's hosted region on this
 * node, in device memory for a new region with LOCO_REGION_HOT in FLAGS
 * that finds room there, else in the arena, with the remote access FLAGS
 * declare; count one hold on it. *SPACE and *OFF: where it is.
 * -LOCO_EMISMATCH if it exists with another size or access, -EEXIST if it
 * is a private region (loco_region_alloc); MSG (if not NULL) explains an
 * error. */
int loco_region_hold(struct loco_mgr *mgr, const char *name, uint64_t len,
		     unsigned flags, uint32_t *space, uint64_t *off, char *msg,
		     size_t msglen);
/* Drop a hold of the region at OFF in SPACE; the last one frees it. */
void loco_region_unhold(struct loco_mgr *mgr, uint32_t space, uint64_t off);
/* FLAGS hold only ALLOWED region flags, and LOCO_REGION_REMOTE_NONE alone. */
bool loco_region_flags_ok(unsigned flags, unsigned allowed);
void loco_arena_free_all(struct loco_mgr *mgr);
void loco_region_handle_open(struct loco_mgr *mgr, uint32_t from,
			     const uint8_t *req, size_t len,
			     struct loco_wbuf *reply);
void loco_region_handle_drop(struct loco_mgr *mgr, uint32_t from,
			     const uint8_t *req, size_t len,
			     struct loco_wbuf *reply);
void loco_region_handle_find(struct loco_mgr *mgr, uint32_t from,
			     const uint8_t *req, size_t len,
			     struct loco_wbuf *reply);
/* Ask NODE which create-or-open region holds [OFF, OFF+LEN) of its SPACE
 * (REGION_FIND) and record it: 0, -ENOENT (none) or the request's error. */
int loco_region_find(struct loco_mgr *mgr, uint32_t node, uint32_t space,
		     uint64_t off, uint64_t len);
/* Register this node's regions loaded from its durable table with the
 * transport (after it opened) and record them as known. */
int loco_regions_publish(struct loco_mgr *mgr);

/* ctrl.c */
int loco_ctrl_start(struct loco_mgr *mgr);
void loco_ctrl_stop(struct loco_mgr *mgr);
/* Send a request to PEER and receive its reply (connects and says hello
 * first if needed). REPLY receives a malloc'd payload. */
int loco_ctrl_request(struct loco_mgr *mgr, uint32_t peer, uint16_t type,
		      const void *payload, size_t len, uint16_t reply_type,
		      uint8_t **reply, size_t *reply_len, int timeout_ms);
/* Whether nothing listens at PEER's control address any more (one
 * connect attempt, refused): its process is gone. */
bool loco_ctrl_refused(struct loco_mgr *mgr, uint32_t peer);

/* One reply of loco_ctrl_multi: RC, and on 0 the malloc'd payload. */
struct loco_ctrl_reply {
	int rc;
	uint8_t *p;
	size_t len;
};
/* Send the same request to every node of PEERS (served there: routed
 * ids, not this node), all before waiting for
 * any reply (one round trip), and receive their replies into OUT[peer].
 * Returns 0 if every one arrived, else the first error (each in its
 * OUT[peer].rc). A connect refused is retried until the deadline (a node
 * still starting), except to the nodes of RAN, known to have run: those
 * fail with -ECONNREFUSED at once (the process is gone). */
int loco_ctrl_multi(struct loco_mgr *mgr, uint64_t peers, uint64_t ran,
		    uint16_t type, const void *payload, size_t len,
		    uint16_t reply_type, struct loco_ctrl_reply *out,
		    int timeout_ms);
/* Make sure PEER's arena is known (hello exchanged). */
int loco_ctrl_connect(struct loco_mgr *mgr, uint32_t peer, int timeout_ms);
/* The same, without logging a failure (the peer keeper's tries). */
int loco_ctrl_reconnect(struct loco_mgr *mgr, uint32_t peer, int timeout_ms);
/* Whether the connection to PEER, FD, hit its end (the peer's process is
 * gone); if so it is closed. */
bool loco_ctrl_conn_dead(struct loco_mgr *mgr, uint32_t peer, int fd);
/* Close the control connection to PEER, if any (the next request or
 * reconnect dials again and says hello). */
void loco_ctrl_hangup(struct loco_mgr *mgr, uint32_t peer);

/* This node's hello. */
void loco_hello_self(struct loco_mgr *mgr, struct loco_hello *out);
/* Hand H's arena to the transport and record the peer; PUBLISH makes its
 * memory usable by posting threads (UP). A new boot id starts a new
 * generation of the peer's QPs. */
int loco_peer_add(struct loco_mgr *mgr, const struct loco_hello *h,
		  bool publish);

/* Why PEER's memory cannot be used: -LOCO_EDOWN, -LOCO_ELOST, or
 * -ENOTCONN before its first hello. */
static inline int loco_peer_gone(struct loco_mgr *mgr, uint32_t peer)
{
	/* Relaxed: a diagnosis; the arena length decides. */
	int st = atomic_load_explicit(&mgr->peer_state[peer], memory_order_relaxed);
	return st == LOCO_PEER_DOWN ? -LOCO_EDOWN :
	       st == LOCO_PEER_LOST ? -LOCO_ELOST : -ENOTCONN;
}

/* Arena offsets below this are never a region: raddr 0 means null. */
#define LOCO_ARENA_FIRST 64



/* Whether [OFF, OFF+LEN) lies in PEER's memory SPACE as its hello said
 * (PEER < LOCO_MAX_NODES): 0; -ENOTCONN before the hello; -EINVAL outside
 * it, or in a space PEER does not offer (no device memory: length 0). */
static inline int loco_peer_span(struct loco_mgr *mgr, uint32_t peer,
				 uint32_t space, uint64_t off, uint64_t len)
{
	/* Acquire: pairs with the release in loco_peer_add; once the arena
	 * length is visible, so are the transport's peer and the DM length. */
	uint64_t slen = atomic_load_explicit(&mgr->peer_arena_len[peer],
					     memory_order_acquire);
	uint64_t first = LOCO_ARENA_FIRST;
	if (!slen)
		return loco_peer_gone(mgr, peer);
	if (space == LOCO_SPACE_DM) {
		/* Relaxed: ordered by the acquire above. */
		slen = atomic_load_explicit(&mgr->peer_dm_len[peer],
					    memory_order_relaxed);
		first = 0;
	} else if (space != LOCO_SPACE_ARENA) {
		return -EINVAL;
	}
	return slen && off >= first && off <= slen && len <= slen - off ?
	       0 : -EINVAL;
}

/* peers.c: memory peers that die and come back. */
/* Start the keeper thread if the hosts file has memory nodes besides this
 * one: it watches their control connections and reconnects the ones
 * that went down. */
int loco_peers_start(struct loco_mgr *mgr);
/* Join the keeper; loco_peers_fini (after the control thread stopped)
 * closes its pipe and forgets the regions opened on peers. */
void loco_peers_stop(struct loco_mgr *mgr);
void loco_peers_fini(struct loco_mgr *mgr);
/* A memory node's control connection went away (or an op found it dead):
 * mark it DOWN unless it is already. WHY goes to the log. */
void loco_peer_down(struct loco_mgr *mgr, uint32_t peer, const char *why);
/* A connection to PEER is ready (FD) or gone (-1): tell the keeper. */
void loco_peer_watch(struct loco_mgr *mgr, uint32_t peer, int fd);
/* region.c: create-or-open NAME (LEN bytes, access FLAGS) on NODE again,
 * for the keeper, whatever NODE's state; *OFF gets its offset, and the
 * region's new key is recorded. */
int loco_region_reopen(struct loco_mgr *mgr, uint32_t node, const char *name,
		       uint64_t len, unsigned flags, uint64_t *off);
/* A LOST PEER said hello again and a region was opened there anew: it is
 * UP with its new incarnation, its old regions forgotten. */
void loco_peer_fresh(struct loco_mgr *mgr, uint32_t peer);
/* PEER, if a memory node, is found up now (its first hello, or back after
 * an outage or a fail-over): note the time (loco_peer_up_ns). Before the
 * release of its arena length; peer_lock held. */
void loco_peer_up_mark(struct loco_mgr *mgr, uint32_t peer);
/* loco_ropen_drop: every region of the node (internal flag). */
#define LOCO_DROP_ALL 0x100u
/* Remember / forget regions opened on NODE (loco_region_open, _drop). */
void loco_ropen_add(struct loco_mgr *mgr, uint32_t node, const char *name,
		    uint64_t off, uint64_t len, unsigned flags);
void loco_ropen_drop(struct loco_mgr *mgr, uint32_t node, const char *name,
		     unsigned flags);

/* fence.c (docs/ordering.md, "Fencing"). */
/* LOCO_CLOCK_SKEW_MS is absent or an integer and LOCO_CLOCK_SKEW_FOR_MS
 * absent or a positive integer (with a non-zero skew): 0, else -EINVAL
 * (logged). */
int loco_lease_skew_check(void);
/* The fences recorded here in an earlier life of this node in this run
 * (<run dir>/node<ID>.fenced). */
void loco_fenced_load(struct loco_mgr *mgr);
/* Whether NODE's incarnation BOOT is fenced here (peer_lock held). */
bool loco_fenced_is(struct loco_mgr *mgr, uint32_t node, uint64_t boot);
/* This node learnt that it is fenced (WHY, logged once): every later op
 * fails with -LOCO_EFENCED. */
void loco_fenced_self(struct loco_mgr *mgr, const char *why);
void loco_fence_handle(struct loco_mgr *mgr, uint32_t from, const uint8_t *req,
		       size_t len, struct loco_wbuf *reply);

/* mirror.c (docs/durability.md, "Mirrors"). */
/* The options of a mirror agree with the hosts file: 0 or -EINVAL. */
int loco_mirror_check(const struct loco_mgr *mgr);
/* This mirror took its primary over in an earlier incarnation. */
bool loco_mirror_taken(const struct loco_mgr *mgr);
/* A mirror starts joining its primary (a thread that retries). */
int loco_mirror_start(struct loco_mgr *mgr);
void loco_mirror_stop(struct loco_mgr *mgr);
/* A primary's region table changed (alloc_lock held): its mirror gets
 * it before the change is acknowledged; a mirror that does not take it
 * is dropped. */
void loco_mirror_table_changed(struct loco_mgr *mgr);
/* Whether this node serves region requests (a mirror only after taking
 * over); if not, MSG says why. */
bool loco_mirror_serves(struct loco_mgr *mgr, char *msg, size_t len);
void loco_mirror_handle_join(struct loco_mgr *mgr, uint32_t from,
			     const uint8_t *req, size_t len,
			     struct loco_wbuf *reply);
void loco_mirror_handle_table(struct loco_mgr *mgr, uint32_t from,
			      const uint8_t *req, size_t len,
			      struct loco_wbuf *reply);
void loco_mirror_handle_takeover(struct loco_mgr *mgr, uint32_t from,
				 const uint8_t *req, size_t len,
				 struct loco_wbuf *reply);
/* region.c: record region NAME at [OFF, OFF+LEN) of the arena, with
 * remote ACCESS, as a mirror's table says (alloc_lock held), registered
 * like any; -LOCO_EPROTO if it overlaps or does not fit. */
int loco_region_place(struct loco_mgr *mgr, const char *name, uint64_t off,
		      uint64_t len, uint32_t access);
/* The node that serves PEER (itself, or the mirror that took it over). */
static inline uint32_t loco_route(struct loco_mgr *mgr, uint32_t peer)
{
	/* Relaxed: a routing word; a request to the old node fails and is
	 * retried, the keeper publishes the new one before the node is UP. */
	return peer < LOCO_MAX_NODES ?
	       atomic_load_explicit(&mgr->route[peer], memory_order_relaxed) :
	       peer;
}

/* access.c: the remote access of regions. */
/* A region as the control plane carries it (JOIN, REGION_ACK,
 * REGION_FIND_ACK): u32 space, u32 access, u32 key, u64 off, u64 len. */
struct loco_rdesc {
	uint32_t space, access, key;
	uint64_t off, len;
};
void loco_put_rdesc(struct loco_wbuf *w, const struct loco_rdesc *d);
/* Sets R's error on an unknown space or access bit. */
void loco_get_rdesc(struct loco_rbuf *r, struct loco_rdesc *d);
/* "rwa" with '-' for what ACCESS lacks, into BUF. */
const char *loco_access_str(unsigned access, char buf[4]);
void loco_rtab_init(struct loco_mgr *mgr);
void loco_rtab_fini(struct loco_mgr *mgr);
/* Record region NAME (D) of NODE, replacing the entries it overlaps
 * (regions that are gone). 0 or -ENOMEM. */
int loco_rtab_put(struct loco_mgr *mgr, uint32_t node, const char *name,
		  const struct loco_rdesc *d);
/* Forget NODE's region at OFF of SPACE (this node's, freed). */
void loco_rtab_del(struct loco_mgr *mgr, uint32_t node, uint32_t space,
		   uint64_t off);
/* The transport key of this node's region REG (0 without one). */
uint32_t loco_region_key(struct loco_mgr *mgr, const struct loco_region *reg);
/* Forget every region of NODE (a new incarnation of it). */
void loco_rtab_clear(struct loco_mgr *mgr, uint32_t node);
/* May THR's out-of-line OPCODE (READ, WRITE, CAS, FAA) reach [AT, AT+LEN)
 * of NODE's SPACE? 0 with the region's transport key and first offset in
 * *KEY and *KEY_OFF; -EACCES (logged once per region and op) if the
 * region there does not allow it or no region holds it, after asking
 * NODE (REGION_FIND) about an address in no region known there.
 * Caller: THR's owner. */
int loco_access_check(struct loco_thread *thr, uint32_t node, uint32_t space,
		      uint64_t at, uint64_t len, unsigned opcode,
		      uint32_t *key, uint64_t *key_off);
/* The descriptor of the region holding [AT, AT+LEN) of NODE's arena, as
 * loco_access_check finds it; -EACCES (not logged) if none. */
int loco_access_region(struct loco_thread *thr, uint32_t node, uint64_t at,
		       uint64_t len, struct loco_rregion *out);

/* channel.c: control-plane handlers and the join worker. */
void loco_channel_handle_join(struct loco_mgr *mgr, uint32_t from,
			      const uint8_t *req, size_t len,
			      struct loco_wbuf *reply);
int loco_joiner_start(struct loco_mgr *mgr);
void loco_joiner_stop(struct loco_mgr *mgr);

/* history.c */
void loco_history_close(struct loco_mgr *mgr);
void loco_hist_buf_free(struct loco_thread *thr);

/* ops.c */
void loco_thread_retire_all(struct loco_mgr *mgr);
/* PEER restarted: every thread's inline path stops using its old
 * mapping (their next op goes out of line and renews the QP). */
void loco_threads_direct_close(struct loco_mgr *mgr, uint32_t peer);
/* This node is fenced: no thread uses the inline path any more (without
 * their locks: callable from anywhere). */
void loco_threads_direct_stop(struct loco_mgr *mgr);

/* Deadline helpers. */
static inline uint64_t loco_deadline(int timeout_ms)
{
	return loco_now_ns() + (uint64_t)timeout_ms * 1000000u;
}

#endif
