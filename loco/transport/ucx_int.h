/* SPDX-License-Identifier: MIT */
/* ucx transport internals shared by ucx.c (context, arena, workers,
 * endpoints, data path), ucx_progress.c (the node's progress thread) and
 * ucx_api.c (libucp loaded at run time). How it maps loco's model onto
 * UCX: docs/ucx.md. Internal to the library: every symbol here is hidden.
 *
 * Threads: an application thread owns its CQ (a UCP worker) and QPs (UCP
 * endpoints); the core serialises post, poll and abort on them, and this
 * transport adds the CQ's own mutex so that the progress thread can also
 * progress an idle CQ's worker (see ucx_progress.c). The node's target
 * worker, whose address peers connect to, is progressed by the progress
 * thread and, while they wait for their own requests, by the application
 * threads (target_lock, taken with trylock by the latter): the one
 * already on a CPU serves a peer's request, as an MPI rank does, instead
 * of waking the progress thread. The control-plane thread calls peer_add
 * (peer table under peer_lock). */
#ifndef LOCO_TRANSPORT_UCX_INT_H
#define LOCO_TRANSPORT_UCX_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <ucp/api/ucp.h>

#include <loco/hosts.h>
#include "loco/transport/durable.h"
#include "loco/transport/fence_file.h"
#include "loco/transport/transport.h"
#include "loco/transport/ucx_api.h"
#include "loco/transport/ucx_desc.h"
#include "loco/transport/ucx_sq.h"

#pragma GCC visibility push(hidden)

#define UCX_LOG "ucx"
/* Endpoints whose refused requests the target remembers having logged. */
#define UCX_REFUSED_EPS 16
/* Fenced incarnations the target remembers per node (loco's
 * LOCO_FENCED_MAX): an older one is evicted, logged. */
#define UCX_FENCED_MAX 8
/* The target's secret: a BLAKE2b key (crypto_generichash_KEYBYTES). */
#define UCX_SECRET_LEN 32

struct loco_tp_cq;

/* One request of a message asking a node to execute READs, WRITEs, CASes
 * and FAAs on its arena (ucx_am.c); little-endian. */
struct ucx_am_req {
	uint8_t op;                  /* LOCO_OP_* */
	uint8_t pad[3];
	uint32_t len;
	uint64_t token;              /* QP id << UCX_TOKEN_SEQ_BITS | sequence */
	uint64_t off;                /* in the target's arena */
	uint64_t a, b;               /* CAS: compare, swap; FAA: a is the addend;
					WRITE: b is where its data starts in the
					message's data area */
};

struct loco_tp {
	const struct ucx_api *api;
	const char *tls;             /* UCX_TLS the transport's name fixes, or NULL */
	/* READ, WRITE and atomics executed by loco's own messages (ucx_am.c)
	 * rather than UCX's RMA and atomics: where UCX_TLS may use TCP, whose
	 * RMA UCX emulates (LOCO_UCX_RMA overrides; docs/ucx.md) */
	bool am;
	uint32_t self;
	uint64_t incarnation;        /* this process's: its requests carry it */
	const struct loco_hosts *hosts;
	int timeout_ms;
	ucp_context_h ctx;
	/* target side: peers' endpoints connect to this worker; the progress
	 * thread and polling application threads take turns on it */
	ucp_worker_h target;
	pthread_mutex_t target_lock;
	/* Under target_lock: the request handler's 8-aligned copy of a
	 * message (UCX hands its data at an odd offset), grown as needed */
	uint64_t *am_copy;
	size_t am_copy_cap;
	/* Under target_lock: the last UCX_REFUSED_EPS endpoints whose request
	 * messages carried a wrong credential, each logged once (ucx_am.c) */
	ucp_ep_h am_refused[UCX_REFUSED_EPS];
	unsigned am_refused_next;
	/* Under target_lock: the fenced incarnations of each node, whose
	 * request messages the handler refuses (-LOCO_EFENCED); a ring,
	 * am_fenced_n[] counts every fence recorded (ucx_am.c) */
	uint64_t am_fenced[LOCO_MAX_NODES][UCX_FENCED_MAX];
	unsigned am_fenced_n[LOCO_MAX_NODES];
	/* LOCO_UCX_STALL_IN_EXEC=N:MS, a test hook: the handler's Nth request
	 * message, past its checks, waits MS ms before executing (an executor
	 * delayed mid-op, what a fence must wait for); am_msgs counts them
	 * (under target_lock) */
	uint64_t stall_at;
	unsigned stall_ms;
	uint64_t am_msgs;
	ucp_address_t *target_addr;
	size_t target_addr_len;
	/* the arena: ucp_mem_map'd (allocated by UCX, shared memory where
	 * UCX_TLS offers it; a durable arena is its image's mapping,
	 * registered), rkey packed once */
	ucp_mem_h arena_memh;
	uint8_t *arena;
	uint64_t arena_len;
	bool durable;
	struct loco_dimg img;
	void *rkey_buf;
	size_t rkey_len;
	/* 256 random bits, drawn with the arena, never sent: the key of the
	 * credential each (client node, incarnation) gets in the descriptor
	 * sent to it (ucx_cred); a request message must carry its sender's
	 * (ucx_am.c), as an RDMA request carries the rkey */
	uint8_t secret[UCX_SECRET_LEN];
	/* Under target_lock: the credential last checked per node, for
	 * incarnation cred_inc[] (0: none yet), so that the handler hashes
	 * once per (node, incarnation) named, not once per message */
	uint64_t cred_inc[LOCO_MAX_NODES];
	uint64_t cred_memo[LOCO_MAX_NODES][UCX_CRED_WORDS];
	/* peers' arena descriptors; peer_cond is signalled when one arrives
	 * (a QP waits for the credential: ucx_qp_create) */
	pthread_mutex_t peer_lock;
	pthread_cond_t peer_cond;
	bool peer_known[LOCO_MAX_NODES];
	struct ucx_desc peer[LOCO_MAX_NODES];
	/* CQs, for the progress thread's safety net */
	pthread_mutex_t cq_lock;
	struct loco_tp_cq *cqs;
	/* the progress thread (ucx_progress.c) */
	pthread_t progress;
	bool progress_started;
	int wake_fd;                 /* eventfd: written once, to stop it */
	int epoll_fd;                /* the target worker's efd and WAKE_FD */
	_Atomic bool stopping;
	uint64_t spin_ns;            /* busy-poll after activity (LOCO_UCX_SPIN_US) */
	_Atomic uint64_t served_ns;  /* the target worker's last event */
	/* The fence guard (ucx_guard.c), with UCX's RMA on shared memory
	 * only: this node's fence file and the peers' (under peer_lock) in
	 * the run directory. */
	bool guard;
	char run_dir[LOCO_PATH_MAX];
	char fence_path[LOCO_PATH_MAX + 64];
	struct loco_ffile *fence;
	struct loco_ffile *peer_fence[LOCO_MAX_NODES];
	_Atomic unsigned cqs_made;   /* CQs made: a shared mark is cqs_made % SLOTS */
	/* LOCO_SHM_STOP_IN_POST=N, the fence files' test hook (as on shm):
	 * the Nth guarded post stops this process (SIGSTOP) with its mark
	 * up, before it issues; 0: never. */
	uint64_t stop_at;
	_Atomic uint64_t posts;
};

struct loco_tp_cq {
	struct loco_tp *tp;
	ucp_worker_h worker;
	/* Held around every call into WORKER (post, poll, QP set-up and
	 * tear-down by the owner; progress by the progress thread). */
	pthread_mutex_t lock;
	bool fence_due;              /* an op was issued since the last fence */
	uint32_t next_qp_id;         /* for reply tokens (ucx_am.c) */
	struct loco_tp_qp *qps;      /* this CQ's QPs */
	/* Hints for the progress thread, read without the lock (relaxed):
	 * the owner's last progress and post, and whether requests are
	 * outstanding. */
	_Atomic uint64_t polled_ns;
	_Atomic uint64_t posted_ns;
	_Atomic bool busy;
	struct ucx_grave *graves;    /* buffers UCX may still touch */
	unsigned slot;               /* its shared busy mark at every peer (guard) */
	struct loco_tp_cq *next;     /* tp->cqs */
};

struct loco_tp_qp {
	struct loco_tp_cq *cq;
	uint32_t peer;
	ucp_ep_h ep;                 /* NULL once closed (aborted) */
	ucp_rkey_h rkey;
	uint64_t remote_base;        /* the peer's arena address */
	uint64_t remote_len;         /* and length */
	uint64_t cred[UCX_CRED_WORDS]; /* ours at the peer, from its descriptor */
	bool refused_logged;         /* the peer refused our credential: said once */
	int ep_status;               /* -errno once UCX reported the endpoint failed */
	uint32_t id;                 /* unique in its CQ (mod 2^24): reply tokens */
	struct ucx_sq sq;
	/* The fence guard at the peer (ucx_guard.c; cq->lock): its busy
	 * mark and this node's fence line; whether the mark is up, whether
	 * a WRITE or atomic was issued under it, the flush that settles
	 * those before it drops. */
	struct loco_ffile_mark mark;
	const _Atomic uint64_t *line;
	bool marked, wrote;
	void *flush;
	struct loco_tp_qp *next;     /* cq->qps */
};

/* Memory a request UCX has not finished with may still write: kept until
 * the worker is destroyed. */
struct ucx_grave {
	void *mem;
	struct ucx_grave *next;
};

/* ucx.c */

/* -errno for a UCX status (0 for UCS_OK). */
int ucx_errno(ucs_status_t st);
/* Nanoseconds on CLOCK_MONOTONIC. */
uint64_t ucx_now_ns(void);
/* CLOCK's time MS milliseconds from now (0 if MS < 0), for a timed
 * wait on that clock. */
struct timespec ucx_deadline(clockid_t clock, int ms);
/* Whether every transport UCX_TLS TLS names is one of NAMES
 * (NULL-terminated); true for an empty TLS. */
bool ucx_tls_only(const char *tls, const char *const *names);

/* ucx_am.c */

/* The credential TP (the target) gives incarnation INCARNATION of node
 * CLIENT, into OUT: BLAKE2b keyed with TP's secret over (TP's node,
 * CLIENT, INCARNATION); never all zero. */
void ucx_cred(const struct loco_tp *tp, uint32_t client, uint64_t incarnation,
	      uint64_t out[UCX_CRED_WORDS]);
/* Register the handler of requests on TP's target worker (and make
 * ucx_cred ready) / of replies on CQ's worker. 0 or -errno (logged). */
int ucx_am_target_init(struct loco_tp *tp);
int ucx_am_cq_init(struct loco_tp_cq *cq);
/* Send the N requests WR, staged in Q's slots from its head, as one
 * message (a FLUSH or a fence READ is not sent: it retires after the
 * replies before it). The first sent one keeps the UCX send request; each
 * completes when its reply arrives (am_wait). 0 or -errno (nothing sent).
 * cq->lock held. */
int ucx_am_issue(struct loco_tp_qp *q, const struct loco_wr *wr, unsigned n);
/* The transport's fence op (transport.h): record (PEER, INCARNATION) as
 * fenced under target_lock, which every execution of a request holds
 * whole, so none is mid-execution once it is taken. -EOPNOTSUPP where
 * UCX executes RMA itself (not loco's messages): ucx_guard_fence. */
int ucx_am_fence(struct loco_tp *tp, uint32_t peer, uint64_t incarnation,
		 int timeout_ms);

/* ucx_guard.c: the fence guard (fence_file.h) where UCX executes RMA
 * on shared memory only (TP->am false, TLS sm transports only). */

/* Open this node's fence file if the guard applies: 0 or -errno (logged). */
int ucx_guard_open(struct loco_tp *tp, const struct loco_tp_config *cfg,
		   const char *tls);
void ucx_guard_close(struct loco_tp *tp);
/* CQ's busy mark slot. */
void ucx_guard_cq(struct loco_tp *tp, struct loco_tp_cq *cq);
/* Q's mark and line at its peer (q->cq and q->peer set). 0 or -errno. */
int ucx_guard_qp(struct loco_tp *tp, struct loco_tp_qp *q);
/* Before Q issues the N requests WR: raise its mark (if down) and check
 * the fence line: 0, or -LOCO_EFENCED (nothing may be issued). cq->lock. */
int ucx_guard_post(struct loco_tp_qp *q, const struct loco_wr *wr, unsigned n);
/* Lower Q's mark once nothing it issued can execute any more (no UCX
 * request of it running; a flush after WRITEs and atomics complete):
 * on sm most complete inline, so the mark drops at the end of the post
 * that raised it. cq->lock. */
void ucx_guard_settle(struct loco_tp_qp *q);
/* Q's endpoint is closed (forced): lower its mark. cq->lock. */
void ucx_guard_drop(struct loco_tp_qp *q);
/* Q is destroyed (after ucx_guard_drop): give its mark back. */
void ucx_guard_put(struct loco_tp_qp *q);
/* Record the fence of PEER's INCARNATION in node TARGET's fence file and
 * wait for PEER's marks there (loco_ffile_fence); -EOPNOTSUPP without
 * the guard. */
int ucx_guard_fence(struct loco_tp *tp, uint32_t target, uint32_t peer,
		    uint64_t incarnation, int timeout_ms);
/* Whether this node's fence file records PEER's INCARNATION (false
 * without the guard). */
bool ucx_guard_fenced(struct loco_tp *tp, uint32_t peer, uint64_t incarnation);

/* ucx_progress.c */

/* Progress the target worker if no other thread is (an application
 * thread polling its own CQ): returns what ucp_worker_progress did. */
unsigned ucx_target_help(struct loco_tp *tp);
/* Start the progress thread (TP->target must exist). Logs and returns
 * -errno on failure. */
int ucx_progress_start(struct loco_tp *tp);
/* Stop and join it (a no-op if it never started), once the target worker
 * has been quiet for a while: requests peers sent before this node left
 * (a barrier's placing READs) are answered, as a NIC finishes what is
 * in flight, instead of failing on the peers as -LOCO_EDOWN. */
void ucx_progress_stop(struct loco_tp *tp);

#pragma GCC visibility pop

#endif
