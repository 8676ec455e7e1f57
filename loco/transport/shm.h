/* SPDX-License-Identifier: MIT */
/* Internals shared by the shm transport and its weak (emulated NIC) mode. */
#ifndef LOCO_TRANSPORT_SHM_H
#define LOCO_TRANSPORT_SHM_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "loco/transport/copy.h"
#include "loco/transport/durable.h"
#include "loco/transport/fence_file.h"
#include "loco/transport/transport.h"

struct shm_peer {
	uint8_t *base;       /* mapping of the peer's arena */
	uint64_t len;
	uint64_t nonce;      /* identifies one incarnation of the peer */
	struct loco_dimg *img; /* its durable image, NULL if it has none */
	struct loco_ffile *fence; /* its fence file (mapped once: every
				       * incarnation has the same) */
	struct shm_peer *older; /* earlier incarnations' mappings (kept to
				 * the close: QPs may still use them) */
};

struct loco_tp {
	uint32_t id;
	uint8_t *arena;      /* the volatile layer (of the image if durable) */
	uint64_t len;
	uint64_t nonce;
	int fd;              /* the arena file's */
	bool durable;
	bool direct;          /* durable without --power-cut: arena is img.map */
	bool mirror;          /* a mirror's image, not taken over (no write-back) */
	struct loco_dimg img; /* durable: this node's image */
	char file[56];
	char dir[LOCO_PATH_MAX];
	char path[LOCO_PATH_MAX + 64];
	struct shm_peer peers[LOCO_MAX_NODES];
	/* peers[]' incarnations: peer_add replaces them under it, a QP's
	 * creation copies them under it (loco_shm_qp_peer). */
	pthread_mutex_t peer_lock;
	void *weak;          /* shm-weak state */
	struct loco_ffile *fence; /* this node's fence file */
	char fence_path[LOCO_PATH_MAX + 64];
	_Atomic unsigned cqs; /* CQs made: a shared mark is cqs % SLOTS */
	/* LOCO_SHM_STOP_IN_POST=N (tests of the fence's wait): the Nth post
	 * of this process stops it (SIGSTOP) inside its fence guard, before
	 * it executes; 0: never. */
	uint64_t stop_at;
	_Atomic uint64_t posts;
};

struct loco_tp_cq {
	struct loco_tp_qp *qps[LOCO_MAX_NODES];
	unsigned nqp;
	unsigned slot;       /* its shared busy mark at every peer (if own
			      * marks are out) */
	void *weak;
};

struct loco_tp_qp {
	struct loco_tp *tp;
	struct loco_tp_cq *cq;
	uint32_t peer;
	uint8_t *base;       /* the peer's arena as mapped when the QP opened */
	uint64_t len;        /* its length */
	struct loco_dimg *img; /* the peer's durable image, or NULL */
	/* The fence guard at the peer: this QP's busy mark (its own, or
	 * its CQ's shared one), this node's fence line. Written by the CQ's
	 * thread (shm) or under the weak QP's lock (shm-weak). */
	struct loco_ffile_mark mark;
	const _Atomic uint64_t *fenced;
	uint64_t done;       /* last signalled ticket executed */
	uint64_t reported;   /* last ticket handed to poll */
	void *weak;
};

int loco_shm_dir_create(const char *dir);
/* Give QP (of CQ) its fence guard at its peer (after loco_shm_qp_peer);
 * loco_shm_qp_unguard gives its mark back when QP is destroyed. */
void loco_shm_qp_guard(struct loco_tp *tp, struct loco_tp_cq *cq,
		       struct loco_tp_qp *qp);
void loco_shm_qp_unguard(struct loco_tp_qp *qp);
/* Enter / leave QP's fence guard: false if this node's incarnation is
 * fenced at QP's peer (nothing may be executed there). */
bool loco_shm_guard_enter(struct loco_tp_qp *qp);
void loco_shm_guard_exit(struct loco_tp_qp *qp);
/* loco_ffile_fence at node TARGET (this node or another). */
int loco_shm_fence_at(struct loco_tp *tp, uint32_t target, uint32_t peer,
		      uint64_t incarnation, int timeout_ms);
/* Whether PEER's INCARNATION is fenced in this node's fence file. */
bool loco_shm_fenced_here(struct loco_tp *tp, uint32_t peer,
			  uint64_t incarnation);
/* The fence op of both modes: loco_shm_fence_at this node. */
int loco_shm_fence(struct loco_tp *tp, uint32_t peer, uint64_t incarnation,
		   int timeout_ms);
/* Every CQ: its shared busy mark (for QPs that find no own one). */
void loco_shm_cq_slot(struct loco_tp *tp, struct loco_tp_cq *cq);
int loco_shm_open_common(const struct loco_tp_config *cfg, struct loco_tp *tp);
void loco_shm_close_common(struct loco_tp *tp);
/* Give QP PEER's current incarnation (mapping, length, image): 0, or
 * -ENOTCONN before PEER's hello. */
int loco_shm_qp_peer(struct loco_tp *tp, uint32_t peer,
		     struct loco_tp_qp *qp);
int loco_shm_peer_add(struct loco_tp *tp, uint32_t peer, const void *desc,
		      size_t len, uint64_t arena_len, uint64_t dm_len);
/* No device memory: dm_len 0 and dm_zero -EOPNOTSUPP; the core then posts
 * nothing outside the arena (loco_peer_span refuses a DM space of 0). */
uint64_t loco_shm_dm_len(struct loco_tp *tp);
int loco_shm_dm_zero(struct loco_tp *tp, uint64_t off, uint64_t len);
void loco_shm_execute(uint8_t *base, const struct loco_wr *wr);
/* Execute the N FLUSH requests at WR (one run of a post) on QP: copy
 * their ranges into the peer's durable image and sync them; nothing for
 * a peer without one (a shm WRITE is placed at once). 0 or -LOCO_EDOWN. */
int loco_shm_flush(struct loco_tp_qp *qp, const struct loco_wr *wr, unsigned n);
/* The persist op: [OFF, OFF+LEN) of this node's own arena into its image. */
int loco_shm_persist(struct loco_tp *tp, uint64_t off, uint64_t len);
int loco_shm_mirror_set(struct loco_tp *tp, uint32_t peer);
int loco_shm_take_over(struct loco_tp *tp, uint32_t peer);

#endif
