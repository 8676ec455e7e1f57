/* SPDX-License-Identifier: MIT */
/* The interface every backend implements (shm, shm-weak, verbs, ucx). The
 * core has already bounds-checked every work request against the target's
 * registration and checked it against the access of the region it
 * targets (loco/access.c); a transport only moves bytes and reports
 * completions. A transport that enforces access itself (verbs: a memory
 * registration per region, mem_reg) needs the region's key, which every
 * request carries.
 *
 * The fence target: every transport keeps the first LOCO_FENCE_LEN bytes
 * of its arena readable by every peer and nothing else there (verbs: a
 * read-only registration of its own, whose key the arena descriptor
 * carries). A zero-length READ (a fence READ, or a placing READ after a
 * WRITE) goes there, at offset 0, whatever region it named; so does the
 * READ with which verbs emulates FLUSH. Such requests carry no key.
 *
 * Model (docs/ordering.md): work requests on one QP are placed in order; a
 * READ, atomic or FLUSH completes only after earlier WRITEs on its QP are
 * placed; completions of one QP arrive in post order; a signalled
 * completion implies every earlier request of that QP completed. Nothing
 * is ordered across QPs.
 *
 * FLUSH (RDMA FLUSH, loco_persist): executes after every earlier request
 * of its QP and before every later one; it makes the bytes of its range,
 * as they are when it executes, durable in the peer's persistence domain
 * (its durable image) before it completes. At a peer without one it only
 * places (a zero-length READ). A FLUSH whose peer died or restarted since
 * the QP was made fails with -LOCO_EDOWN: the writes it covered may be
 * lost. */
#ifndef LOCO_TRANSPORT_H
#define LOCO_TRANSPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/guard.h>
#include <loco/hosts.h>
#include <loco/raddr.h>

/* Transport's arena descriptor blob: room for a UCP worker address. */
#define LOCO_DESC_MAX 3072
#define LOCO_FENCE_LEN 64   /* the fence target: arena offsets [0, 64) */
#define LOCO_QP_DEPTH 256   /* max outstanding work requests per QP */

enum loco_opcode {
	LOCO_OP_READ = 0,
	LOCO_OP_WRITE = 1,
	LOCO_OP_CAS = 2,
	LOCO_OP_FAA = 3,
	LOCO_OP_FLUSH = 4,    /* REMOTE_OFF, LEN: the range to make durable */
};

/* One range of a FLUSH: LEN bytes at OFF of the peer's arena. */
struct loco_drange {
	uint64_t off, len;
};

struct loco_wr {
	uint8_t opcode;       /* enum loco_opcode */
	uint8_t signaled;     /* produce a completion */
	uint8_t space;        /* enum loco_space: what REMOTE_OFF is an offset in */
	uint8_t pad;
	uint32_t len;         /* READ/WRITE/FLUSH bytes (0 allowed: a fence
			       * READ); 8 for atomics */
	uint64_t remote_off;  /* offset in the peer's arena or device memory */
	void *local;          /* READ dst, WRITE src, atomic result (8 bytes) */
	uint64_t compare;     /* CAS expected value */
	uint64_t operand;     /* CAS desired value / FAA addend */
	uint64_t wr_id;       /* returned in the completion */
	uint32_t key;         /* the target region's key (mem_reg); 0 for a
			       * zero-length READ and a FLUSH */
	uint32_t pad2;
	uint64_t key_off;     /* that region's first offset in its space (a
			       * registration may be zero-based) */
};

struct loco_cqe {
	uint64_t wr_id;
	int status;           /* 0, or -errno / -LOCO_EQP for a failed request */
	uint32_t peer;
};

struct loco_tp;           /* one per manager */
struct loco_tp_mr;        /* one per registered region (mem_reg) */
struct loco_tp_cq;        /* one per application thread */
struct loco_tp_qp;        /* one per (thread, peer) */

struct loco_tp_config {
	uint32_t node_id;
	uint64_t arena_bytes;
	const char *run_dir;          /* shm: private directory for backing files */
	int timeout_ms;               /* bound of every wait on a peer */
	const struct loco_hosts *hosts;
	const char *durable_dir;      /* NULL: volatile arena; else its image
				       * lives in this directory (durable.h) */
	bool power_cut;               /* shm: a restart drops what the dead
				       * incarnation did not persist */
	int dsync;                    /* enum loco_dsync of the image */
	uint64_t image_id;            /* the image's identity: a new image
				       * takes it, an existing one must have
				       * it (the core's region table's) */
	uint64_t incarnation;         /* this process's (the core's boot id,
				       * nonzero): what peers fence */
	bool mirror;                  /* the image is another node's copy
				       * (--mirror-of, not taken over): the
				       * arena is not written back into it */
};

/* hwloc's types (hwloc_topology_t, hwloc_cpuset_t), without its header:
 * only affinity.c and the transports that know their device use hwloc. */
struct hwloc_topology;
struct hwloc_bitmap_s;

struct loco_transport_ops {
	const char *name;
	/* Every request executes, is placed and completes inside post, which
	 * never fails for a bounds-checked request (shm): the core then
	 * retires requests at post time and never polls. */
	bool sync;
	/* Open the backend and create this node's arena (zeroed). */
	int (*open)(const struct loco_tp_config *cfg, struct loco_tp **out);
	void (*close)(struct loco_tp *tp);
	/* Local arena: base address, length, and the descriptor peers need. */
	void *(*arena_base)(struct loco_tp *tp);
	uint64_t (*arena_len)(struct loco_tp *tp);
	/* *LEN: capacity in, bytes written out. This node's own descriptor
	 * (what its peer_add of itself takes). */
	int (*arena_desc)(struct loco_tp *tp, void *desc, size_t *len);
	/* Optional (NULL: arena_desc serves every peer): the descriptor for
	 * incarnation INCARNATION of node PEER alone (0: its incarnation is
	 * not known yet), where a descriptor carries what lets that
	 * incarnation, and no other, reach this node's memory (ucx: its
	 * credential). The core sends it in HELLO and HELLO_ACK, and says
	 * hello again once it learns the incarnation it did not know. */
	int (*arena_desc_for)(struct loco_tp *tp, uint32_t peer, uint64_t incarnation,
			      void *desc, size_t *len);
	/* A peer's arena descriptor arrived (control-plane hello), with the
	 * lengths of its arena and device memory. */
	int (*peer_add)(struct loco_tp *tp, uint32_t peer, const void *desc,
			size_t len, uint64_t arena_len, uint64_t dm_len);
	/* Device memory (LOCO_SPACE_DM): bytes this node offers, 0 if none
	 * (shm, shm-weak). The CPU cannot load or store it; the core reaches
	 * it only with work requests, and zeroes pieces with dm_zero. */
	uint64_t (*dm_len)(struct loco_tp *tp);
	/* Zero LEN bytes of this node's device memory at OFF (both multiples
	 * of 8). -EOPNOTSUPP without device memory, -EINVAL out of range.
	 * Ordering: the zeros are in device memory on return, before the
	 * core publishes the piece to any peer. */
	int (*dm_zero)(struct loco_tp *tp, uint64_t off, uint64_t len);
	/* Make [OFF, OFF+LEN) of this node's own arena durable in its image
	 * (what a FLUSH to this node does), synchronously; 0 at once without
	 * an image. The core uses it for zeroed new regions before their
	 * names are recorded (region.c). Caller: any thread. */
	int (*persist)(struct loco_tp *tp, uint64_t off, uint64_t len);
	/* Mirrors (docs/durability.md, "Mirrors"); -EOPNOTSUPP where a FLUSH
	 * is not executed by a CPU that can copy (verbs).
	 * mirror_set: make durable peer PEER's image a mirror of this node's
	 * own: copy the image there and have every FLUSH of it (by any node)
	 * copy its ranges there too before it completes; PEER
	 * LOCO_MAX_NODES drops the mirror. Caller: the core, serialised with
	 * region creation.
	 * take_over: this node mirrors PEER; if PEER's process is dead and
	 * its image still names this node as its mirror, mark that image
	 * taken over (it is then never served or flushed again) and load
	 * this node's own image into its arena, which from then on stands
	 * for PEER's. -EBUSY while PEER lives, -ESTALE if it dropped this
	 * mirror. */
	int (*mirror_set)(struct loco_tp *tp, uint32_t peer);
	int (*take_over)(struct loco_tp *tp, uint32_t peer);
	/* Optional (NULL: the transport needs no registration and its keys
	 * are 0; shm, shm-weak): let peers reach [OFF, OFF+LEN) of this
	 * node's SPACE with exactly ACCESS (LOCO_REGION_REMOTE_*, nonzero)
	 * and nothing more; *KEY is what their requests to it carry, *MR
	 * what mem_dereg takes. The core calls it for every region with
	 * remote access, before the region's descriptor leaves this node,
	 * and mem_dereg when the region is freed. Errors are logged here.
	 * Caller: any thread, one at a time (the allocator's lock). */
	int (*mem_reg)(struct loco_tp *tp, uint32_t space, uint64_t off,
		       uint64_t len, unsigned access, struct loco_tp_mr **mr,
		       uint32_t *key);
	void (*mem_dereg)(struct loco_tp *tp, struct loco_tp_mr *mr);
	int (*cq_create)(struct loco_tp *tp, struct loco_tp_cq **out);
	void (*cq_destroy)(struct loco_tp_cq *cq);
	int (*qp_create)(struct loco_tp *tp, struct loco_tp_cq *cq, uint32_t peer,
			 struct loco_tp_qp **out);
	void (*qp_destroy)(struct loco_tp_qp *qp);
	/* Post N requests to one QP as one doorbell. Either all are accepted
	 * (0) or none (-errno); -EAGAIN means "poll, then try again". */
	int (*post)(struct loco_tp_qp *qp, const struct loco_wr *wr, unsigned n);
	/* Optional (NULL: none), sync transports only: the local mapping of
	 * QP's peer arena and its length (*LEN) when this process reaches it
	 * with loads and stores (shm). The core then executes 8-byte aligned
	 * requests on it itself, exactly as post does (acquire load, release
	 * store, seq_cst CAS and FAA), in loco.h's inline operations, its
	 * WRITEs and atomics under the fence guard whose mark and line
	 * (*MARK, *FENCED: <loco/guard.h>) it gives too; the mark is the
	 * QP's, used only by the thread that posts on it. */
	uint8_t *(*qp_direct)(struct loco_tp_qp *qp, uint64_t *len,
			      struct loco_guard_mark *mark,
			      const _Atomic uint64_t **fenced);
	/* Optional (NULL: FLUSHes are posted), sync transports only: N FLUSH
	 * requests of the ranges R[0..N) on QP as one doorbell, executed
	 * exactly as post executes them (the same checks of the peer's
	 * image, the same sync, the same errors), without the requests
	 * themselves. The core's persist takes it for a QP's dirty ranges.
	 * Caller: the thread that posts on QP. */
	int (*flush)(struct loco_tp_qp *qp, const struct loco_drange *r,
		     unsigned n);
	/* Up to MAX completions of the CQ's QPs; returns the count or -errno. */
	int (*poll)(struct loco_tp_cq *cq, struct loco_cqe *out, unsigned max);
	/* Move QP to the error state (its caller gave up waiting): once this
	 * returns, no request posted to QP reads or writes local memory any
	 * more; requests not yet executed never execute. The core treats
	 * every outstanding request as failed and posts no more to QP.
	 * Caller: the thread that polls the QP's CQ. */
	void (*qp_abort)(struct loco_tp_qp *qp);
	/* Fence incarnation INCARNATION of node PEER here (this node is the
	 * target, docs/ordering.md "Fencing"): from the return of 0 on, no
	 * remote op of that incarnation executes on this node's memory (its
	 * arena and device memory) again, and each completes with
	 * -LOCO_EFENCED at its initiator; none is mid-execution any more
	 * (waits at most TIMEOUT_MS for those that are: -ETIMEDOUT, the
	 * fence stays recorded and a later call waits again). Fencing an
	 * incarnation this node never saw records it all the same. Any
	 * incarnation may be fenced, the current one of PEER or an older.
	 * -EOPNOTSUPP if the transport cannot refuse. Caller: the core's
	 * control plane, one call at a time. */
	int (*fence)(struct loco_tp *tp, uint32_t peer, uint64_t incarnation,
		     int timeout_ms);
	/* Optional (NULL: none): the same fence at node TARGET, done by this
	 * process alone, where every node's fence state is shared memory
	 * (shm, shm-weak): a target that died or is stopped cannot answer a
	 * FENCE, but its memory outlives it and must refuse all the same.
	 * Caller: the fencer (loco_fence_node). */
	int (*fence_at)(struct loco_tp *tp, uint32_t target, uint32_t peer,
			uint64_t incarnation, int timeout_ms);
	/* Optional (NULL: none), with fence_at: whether incarnation
	 * INCARNATION of PEER is fenced here, by whichever fencer wrote this
	 * node's fence state. Caller: any thread. */
	bool (*fenced_here)(struct loco_tp *tp, uint32_t peer,
			    uint64_t incarnation);
	/* Optional, NULL without a device (shm, shm-weak): the CPUs close to
	 * the transport's device into SET, for thread placement (--cpu-bind
	 * core puts threads on those cores first). TOPO is this machine's
	 * loaded topology. Returns 0 or -errno. */
	int (*local_cpus)(struct loco_tp *tp, struct hwloc_topology *topo,
			  struct hwloc_bitmap_s *set);
};

extern const struct loco_transport_ops loco_shm_ops;
extern const struct loco_transport_ops loco_shm_weak_ops;
extern const struct loco_transport_ops loco_verbs_ops;
#ifdef LOCO_HAVE_UCX
extern const struct loco_transport_ops loco_ucx_ops;      /* UCX_TLS from the environment */
extern const struct loco_transport_ops loco_ucx_tcp_ops;  /* UCX_TLS=tcp */
extern const struct loco_transport_ops loco_ucx_sm_ops;   /* UCX_TLS=sm */
#endif

/* The backend called NAME ("shm", "shm-weak", "verbs", "ucx", "ucx-tcp",
 * "ucx-sm"), or NULL. */
const struct loco_transport_ops *loco_transport_find(const char *name);
/* Why this build has no backend NAME although loco knows it (verbs or ucx
 * left out at meson setup), or NULL. */
const char *loco_transport_absent(const char *name);

#endif
