/* SPDX-License-Identifier: MIT */
/* Fence files: the fence state of the transports whose remote ops are
 * executed by the initiator's own process on memory of the same host
 * (shm, shm-weak, ucx-sm), with the guard of <loco/guard.h>.
 *
 * A node's fence file, <run dir>/node<ID>.fence, has for every node that
 * may write to this one its fence line and busy marks. It outlives the
 * node's process (a restart in the same run reopens it: the fences stay);
 * a clean stop removes it if it holds no fence. A fencer records an
 * incarnation in the target's file itself (the file is shared memory, so
 * a target that died or is stopped is fenced all the same), then waits
 * for that node's busy marks there to drop, or for the process that
 * raised them to be gone (guard.h: own marks need the fencer's
 * membarrier, shared ones a seq_cst fence). */
#ifndef LOCO_TRANSPORT_FENCE_FILE_H
#define LOCO_TRANSPORT_FENCE_FILE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <loco/guard.h>
#include "loco/transport/transport.h"

struct loco_ffile_node {
	_Alignas(64) _Atomic uint64_t line[1 + LOCO_GUARD_FENCED];
	/* The process that executes for the node here with the shared marks
	 * (the last one that took them): its pid and start time (/proc), so
	 * that a fencer can tell marks left up by a process that died from
	 * those of a live one. */
	_Alignas(64) _Atomic uint64_t owner_pid;
	_Atomic uint64_t owner_start;
	struct {
		_Alignas(64) _Atomic uint64_t n;
	} mark[LOCO_GUARD_SLOTS];
	/* Own marks: OWNER is 0 (free) or the claiming process (pid and
	 * start time, packed: fence_file.c), whose one context alone
	 * writes N. */
	struct {
		_Alignas(64) _Atomic uint64_t n;
		_Atomic uint64_t owner;
	} own[LOCO_GUARD_OWN];
};

struct loco_ffile {
	_Alignas(64) uint64_t magic;
	struct loco_ffile_node node[LOCO_MAX_NODES];
};

/* An executing context's busy mark at one peer (loco_ffile_mark_get). */
struct loco_ffile_mark {
	struct loco_guard_mark m;
	struct loco_ffile_node *fn;
	int slot;             /* own[slot], or -1: a shared mark */
};

/* NODE's fence file in DIR into OUT (LEN bytes). */
void loco_ffile_path(char *out, size_t len, const char *dir, uint32_t node);
/* Map the fence file at PATH; CREATE: made if missing (by its node, or
 * by a fencer that got there first), kept if there. */
int loco_ffile_map(const char *path, bool create, struct loco_ffile **out);
void loco_ffile_unmap(struct loco_ffile *f);
/* Whether F records any fence (read at a clean stop). */
bool loco_ffile_any(const struct loco_ffile *f);
/* Whether F records INCARNATION of PEER as fenced. */
bool loco_ffile_fenced(const struct loco_ffile *f, uint32_t peer,
		       uint64_t incarnation);
/* Once per process (logged): register for
 * MEMBARRIER_CMD_GLOBAL_EXPEDITED. True if this process's contexts may
 * use own marks; false: shared ones (read-modify-writes), as when
 * membarrier is missing. */
bool loco_ffile_own_marks(void);
/* A busy mark of FN for one executing context of this process: an own
 * one if loco_ffile_own_marks and one is free (or its claimer is gone),
 * else shared mark SPREAD % LOCO_GUARD_SLOTS (after
 * loco_ffile_owner_take). Callers of one process serialise their calls
 * for one FN. */
void loco_ffile_mark_get(struct loco_ffile_node *fn, unsigned spread,
			 struct loco_ffile_mark *out);
/* Give M back (its context is gone; the mark is down). */
void loco_ffile_mark_put(struct loco_ffile_mark *m);
/* This process executes for its node at FN with the shared marks from
 * now on (callers of one process serialise their calls, as those of
 * loco_ffile_mark_get). Shared marks that a dead earlier owner left up
 * are cleared: nothing of it can be mid-execution any more. */
void loco_ffile_owner_take(struct loco_ffile_node *fn);
/* Record INCARNATION of PEER in node TARGET's fence file F (NULL: map
 * DIR's for this call), then wait at most TIMEOUT_MS for PEER's busy
 * marks there to drop or their owner to be gone (-ETIMEDOUT; the fence
 * stays recorded; -EOPNOTSUPP if an own mark is claimed and membarrier
 * fails). SELF names the fencer in logs. */
int loco_ffile_fence(const char *dir, struct loco_ffile *f, uint32_t self,
		     uint32_t target, uint32_t peer, uint64_t incarnation,
		     int timeout_ms);

#endif
