/* SPDX-License-Identifier: MIT */
/* verbs transport internals shared by verbs.c (device, arena, CQs, QPs,
 * data path) and verbs_cm.c (rdma_cm: listener thread, connections).
 * Internal to the library: every symbol here is hidden.
 *
 * Threads: the application threads own their CQs and QPs (post and poll
 * happen on the owner, no locks); the control-plane thread calls peer_add
 * (peer table under peer_lock); one listener thread per node accepts
 * connections and owns the passive QPs. QP setup (qp_create) may run on any
 * thread, so the bounce pool has a lock and CQ slots are published with
 * release/acquire. */
#ifndef LOCO_TRANSPORT_VERBS_INT_H
#define LOCO_TRANSPORT_VERBS_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <loco/hosts.h>
#include "loco/transport/durable.h"
#include "loco/transport/transport.h"
#include "loco/transport/verbs_cfg.h"
#include "loco/transport/verbs_wr.h"

#pragma GCC visibility push(hidden)

#define VERBS_CQ_QPS LOCO_MAX_NODES   /* QPs one thread's CQ serves: one per peer */
_Static_assert(VERBS_CQ_QPS <= 64, "cq dirty mask is one 64-bit word");
#define VERBS_BOUNCE_BYTES (64u * 1024) /* per-QP bounce buffer */
#define VERBS_SLAB_CHUNKS 64            /* bounce buffers registered at once */
#define VERBS_PASSIVE_CQE 8192          /* shared CQ of the passive QPs */
#define VERBS_INLINE_WANT 256           /* max_inline_data asked for */
#define VERBS_LISTEN_BACKLOG 256
#define VERBS_FENCED_MAX 8              /* fenced incarnations kept per node */

/* Link state of an active QP, written by the listener thread (DOWN) and
 * the owner (CLOSING); read by post. It publishes no data: relaxed. */
enum verbs_link_state { VERBS_LINK_UP, VERBS_LINK_DOWN, VERBS_LINK_CLOSING };

/* cm_id->context of both ends of a connection, so the listener thread can
 * tell passive from active ids when DISCONNECTED arrives. */
struct verbs_link {
	bool passive;
	uint32_t node;          /* the other end */
	uint32_t thread;        /* thread index of the active end */
	struct ibv_qp *qp;
	atomic_int state;       /* enum verbs_link_state (active ends) */
};

/* A passive-side connection: target of one peer thread's one-sided ops. */
struct verbs_passive {
	struct verbs_link link; /* first: cm_id->context */
	struct rdma_cm_id *id;
	uint64_t incarnation;   /* the peer's, from its REQ */
	bool fenced;            /* moved to the error state by a fence */
	struct verbs_passive *next;
};

/* A region's registration (transport op mem_reg). */
struct loco_tp_mr {
	struct ibv_mr *mr;
};

struct verbs_chunk {
	struct verbs_chunk *next;
	uint8_t *buf;
	uint32_t lkey;
};

/* VERBS_SLAB_CHUNKS bounce buffers under one registration. */
struct verbs_slab {
	struct verbs_slab *next;
	struct ibv_mr *mr;
	void *mem;
	struct verbs_chunk chunk[VERBS_SLAB_CHUNKS];
};

struct loco_tp {
	struct verbs_config cfg;
	uint32_t self;
	uint64_t incarnation;     /* this process's: its REQs carry it */
	const struct loco_hosts *hosts;
	/* device, port, GID: fixed after open */
	char devname[VERBS_DEVNAME_MAX];
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_device_attr_ex attr;
	uint8_t port;
	bool ethernet;
	bool atomics;
	uint8_t mtu;              /* enum ibv_mtu */
	uint32_t gid_index;
	union ibv_gid gid;
	/* the arena: one MR for local use (lkeys: WRITE sources and READ
	 * destinations in it), granting peers nothing; its fence target,
	 * read-only; every region a registration of its own (mem_reg) */
	void *arena;
	uint64_t arena_len;
	size_t map_len;
	struct ibv_mr *arena_mr;
	struct ibv_mr *fence_mr;
	unsigned nmr;             /* region registrations (alloc lock) */
	bool durable;             /* the arena is the mapping of img */
	struct loco_dimg img;
	/* optional NIC device memory: hot regions' registrations only */
	struct ibv_dm *dm;
	uint64_t dm_len;
	/* bounce buffers */
	pthread_mutex_t pool_lock;
	struct verbs_slab *slabs;
	struct verbs_chunk *free_chunks;
	/* peers' arena descriptors */
	pthread_mutex_t peer_lock;
	bool peer_known[LOCO_MAX_NODES];
	struct verbs_desc peer[LOCO_MAX_NODES];
	atomic_uint next_thread;  /* thread index source for cq_create */
	/* connection manager */
	struct sockaddr_storage ctrl_addr; /* this node's hosts-file address (port 0) */
	uint16_t cm_port;               /* its rdma_cm port: hosts-file port + offset */
	struct sockaddr_storage addr;   /* its RDMA address (verbs_select), CM port */
	struct rdma_event_channel *cm_ch;
	struct rdma_cm_id *listen_id;
	struct ibv_cq *passive_cq;
	uint32_t passive_max;
	/* The passive connections and the fenced incarnations (a ring per
	 * node, fenced_n counting every one recorded), under passive_lock:
	 * the listener thread accepts and drops, the control-plane thread
	 * fences (verbs_cm_fence). */
	pthread_mutex_t passive_lock;
	uint32_t passive_count;
	struct verbs_passive *passive;
	uint64_t fenced[LOCO_MAX_NODES][VERBS_FENCED_MAX];
	unsigned fenced_n[LOCO_MAX_NODES];
	int wake_fd;
	pthread_t listener;
};

struct loco_tp_cq {
	struct loco_tp *tp;
	struct ibv_cq *cq;
	uint32_t thread;
	uint32_t qp_cap;          /* QPs the CQ is sized for (<= VERBS_CQ_QPS) */
	uint64_t dirty;           /* tags of QPs with completions to report */
	_Atomic(struct loco_tp_qp *) qp[VERBS_CQ_QPS]; /* by tag */
};

struct loco_tp_qp {
	struct verbs_link link;   /* cm_id->context */
	struct loco_tp *tp;
	struct loco_tp_cq *cq;
	struct ibv_qp *qp;
	struct rdma_cm_id *id;
	struct verbs_chunk *bounce;
	struct ibv_send_wr swr[VERBS_SQ_DEPTH];
	struct ibv_sge sge[VERBS_SQ_DEPTH];
	struct verbs_sq sq;
};

/* verbs_dev.c */

/* Choose the device, port and RDMA address (verbs_select's rules) from
 * the ports of LIST[0..N-1] and the local addresses rdma_cm binds to them
 * (scratch ids on TP->cm_ch); TP->ctrl_addr marks the hosts-file address.
 * Sets TP->addr (with TP->cm_port), DEVNAME and *PORT. Logs the choice, or
 * the reason and returns -errno / -LOCO_ENODEV. */
int verbs_device_choose(struct loco_tp *tp, struct ibv_device **list, int n,
			char devname[VERBS_DEVNAME_MAX], uint8_t *port);

/* verbs_cm.c */

/* Create the rdma_cm event channel (TP->cm_ch). */
int verbs_cm_open(struct loco_tp *tp);
/* Create the listener id, bound to TP->addr; it must be on TP's device
 * and port. */
int verbs_cm_bind(struct loco_tp *tp);
/* Listen and start the listener thread (needs the PD and passive CQ). */
int verbs_cm_listen(struct loco_tp *tp);
/* Stop the listener thread and tear down the passive connections. */
void verbs_cm_stop(struct loco_tp *tp);
/* Destroy the listener id (if bound) and the event channel (after every QP). */
void verbs_cm_unbind(struct loco_tp *tp);
/* Connect QP (created, RESET) to its peer's listener; on success QP->id
 * is set and the QP is in RTS. Logs once and returns -errno on failure. */
int verbs_cm_connect(struct loco_tp *tp, struct loco_tp_qp *q);
/* The fence op (transport.h): record PEER's INCARNATION as fenced (its
 * later connection requests are refused with LOCO_EFENCED) and move
 * every passive QP of it to the error state, then disconnect it. Returns
 * once every ibv_modify_qp succeeded: the NIC executes no further request
 * of those QPs (docs/ordering.md, "Fencing"). -ETIMEDOUT if the passive
 * list stays busy past TIMEOUT_MS, or the first modify's -errno. */
int verbs_cm_fence(struct loco_tp *tp, uint32_t peer, uint64_t incarnation,
		   int timeout_ms);
/* Disconnect and destroy QP->id (the ibv QP stays for the caller). */
void verbs_cm_disconnect(struct loco_tp_qp *qp);
/* The numeric form of SA's IP address in BUF (LEN bytes); returns BUF. */
const char *verbs_addr_str(const struct sockaddr *sa, char *buf, size_t len);

/* verbs.c */

/* Milliseconds on CLOCK_MONOTONIC. */
int64_t verbs_now_ms(void);

/* The port of an AF_INET or AF_INET6 address, host order, and setting it. */
static inline uint16_t verbs_addr_port(const struct sockaddr_storage *a)
{
	return ntohs(a->ss_family == AF_INET
		     ? ((const struct sockaddr_in *)a)->sin_port
		     : ((const struct sockaddr_in6 *)a)->sin6_port);
}

static inline void verbs_addr_set_port(struct sockaddr_storage *a,
				       uint16_t port)
{
	if (a->ss_family == AF_INET)
		((struct sockaddr_in *)a)->sin_port = htons(port);
	else
		((struct sockaddr_in6 *)a)->sin6_port = htons(port);
}

/* A copy of node ID's arena descriptor (this node's own too): 0, or
 * -ENOENT before it arrived. */
int verbs_peer_desc(struct loco_tp *tp, uint32_t id, struct verbs_desc *out);
/* The RDMA address and rdma_cm port node ID advertised (its arena
 * descriptor): 0, or -ENOENT before its descriptor. */
int verbs_peer_addr(struct loco_tp *tp, uint32_t id,
		    struct sockaddr_storage *out);

/* verbs_port.c: the device and its port */
/* The device list, or -LOCO_ENODEV with one message: no device at all. */
int verbs_devices_get(struct ibv_device ***out, int *n);
/* Open device NAME (verbs_device_choose's), port PORT. */
int verbs_device_open(struct loco_tp *tp, struct ibv_device **list,
		      int n, const char *name, uint8_t port);
/* Query the chosen port: its MTU (capped by LOCO_VERBS_MTU) and its GID. */
int verbs_port_setup(struct loco_tp *tp);

/* verbs_mem.c: arena, device memory, bounce buffers */
/* Map the arena (huge pages where there are any; under --durable the
 * image file's shared mapping), register it for local access and its
 * first LOCO_FENCE_LEN bytes as the read-only fence target. */
int verbs_arena_create(struct loco_tp *tp, const struct loco_tp_config *cfg);
/* Transport ops: a region's own registration with exactly its access
 * (verbs_mr_access), zero-based in device memory, and its release. */
int verbs_mem_reg(struct loco_tp *tp, uint32_t space, uint64_t off,
		  uint64_t len, unsigned access, struct loco_tp_mr **mr,
		  uint32_t *key);
void verbs_mem_dereg(struct loco_tp *tp, struct loco_tp_mr *mr);
/* Deregister and unmap the arena. */
void verbs_arena_destroy(struct loco_tp *tp);
/* Transport op: msync [OFF, OFF+LEN) of a durable arena's image (0 when
 * the arena is not durable). */
int verbs_persist(struct loco_tp *tp, uint64_t off, uint64_t len);
/* Free the device memory, if any. */
void verbs_dm_release(struct loco_tp *tp);
/* Zero LEN bytes of the DM at OFF through ibv_memcpy_to_dm: the CPU has
 * no plain access to NIC memory. Returns 0 or a positive errno.
 * Ordering: providers copy with plain stores into the device mapping
 * (write-combined on some), and promise no flush; the seq_cst RMW after
 * the copies (a locked instruction, which drains write-combining buffers)
 * orders them before everything after, in particular before the core
 * publishes the piece (a JOIN or REGION_ACK over TCP), so a peer's first
 * READ or atomic on it sees the zeros. */
int verbs_dm_fill_zero(struct loco_tp *tp, uint64_t off, uint64_t len);
/* LOCO_VERBS_DM_BYTES of NIC memory (regions in it register their own
 * pieces). Any failure warns and leaves the node without DM: it is an
 * optimisation. */
void verbs_dm_create(struct loco_tp *tp);
/* Deregister and free every bounce-buffer slab. */
void verbs_pool_destroy(struct loco_tp *tp);
/* A registered bounce buffer (VERBS_BOUNCE_BYTES), from the pool or a new
 * slab: 0 or -ENOMEM. */
int verbs_pool_get(struct loco_tp *tp, struct verbs_chunk **out);
/* Give a bounce buffer back. */
void verbs_pool_put(struct loco_tp *tp, struct verbs_chunk *c);

/* verbs_qp.c: completion queues, queue pairs, the data path (transport ops) */
/* One CQ per thread, sized for VERBS_CQ_QPS send queues (+1 receive entry
 * each: QPs have a minimal receive queue, never used) or fewer QPs if the
 * device caps CQ sizes. */
int verbs_cq_create(struct loco_tp *tp, struct loco_tp_cq **out);
/* Caller: the CQ's QPs destroyed first. */
void verbs_cq_destroy(struct loco_tp_cq *c);
/* The RC QP of one (thread, peer) pair, connected through rdma_cm. */
int verbs_qp_create(struct loco_tp *tp, struct loco_tp_cq *cq,
		    uint32_t peer, struct loco_tp_qp **out);
/* Caller: the thread that polls the QP's CQ, with no post or poll running. */
void verbs_qp_destroy(struct loco_tp_qp *q);
/* The error state stops the NIC's work on Q: requests not yet done are
 * flushed (no data moves for them any more). Every outstanding request
 * is failed now, so none copies a result out of the bounce buffer. */
void verbs_qp_abort(struct loco_tp_qp *q);
/* Post N requests as one chain with one doorbell (transport op). */
int verbs_post(struct loco_tp_qp *q, const struct loco_wr *wr, unsigned n);
/* Up to MAX completions of the CQ, in post order per QP (transport op). */
int verbs_poll(struct loco_tp_cq *c, struct loco_cqe *out, unsigned max);

#pragma GCC visibility pop

#endif
