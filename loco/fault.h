/* SPDX-License-Identifier: MIT */
/* Faults a node injects into itself (LOCO_KILL_AT, LOCO_PAUSE_AT; fault.c).
 * Internal to the library. */
#ifndef LOCO_FAULT_H
#define LOCO_FAULT_H

#pragma GCC visibility push(hidden)

struct loco_mgr;

/* Reads LOCO_KILL_AT=S and LOCO_PAUSE_AT=S:MS[,S:MS...] (seconds after
 * this call) and, if any is set, starts the thread that fires them.
 * Returns 0, or -EINVAL on a malformed value (logged, naming it). */
int loco_faults_start(struct loco_mgr *mgr);

/* Stops the thread; faults not yet due never fire. */
void loco_faults_stop(struct loco_mgr *mgr);

#pragma GCC visibility pop

#endif
