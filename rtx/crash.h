/* SPDX-License-Identifier: MIT */
/* Crash injection: named points in the rTX code where the process kills
 * itself with SIGKILL, for the crash tests (test/crash, docs/rtx.md).
 *
 * Environment, read once:
 *   LOCO_CRASH_AT=SPEC      SPEC is one entry or several separated by ',':
 *                           POINT[@NODES][:N], e.g. rtx.after_lock or
 *                           rtx.after_doing@2:2000,rtx.repair_after_take@3+4
 *                           (NODES: node ids separated by '+'); unset: off
 *   LOCO_CRASH_AFTER=N      for entries without :N, crash the Nth time the
 *                           point is reached in this process (default 1)
 *   LOCO_CRASH_NODES=1,3    for entries without @, only on these node ids
 *                           (LOCO_NODE_ID); unset: every node
 *   LOCO_CRASH_STAMP=FILE   write the CLOCK_REALTIME ns of the crash to FILE
 *                           just before the kill (for recovery timing)
 * Each armed point counts its own hits. An unknown point name is reported
 * (loco_warn) and ignored. When off, a point costs one load. */
#ifndef LOCO_RTX_CRASH_H
#define LOCO_RTX_CRASH_H

#include <stdbool.h>

/* Every point rtx defines, NULL-terminated (docs/rtx.md lists them);
 * the layers above add theirs with loco_crash_register. */
extern const char *const loco_crash_points[];

/* Add the NULL-terminated point table POINTS of a layer above rtx (whose
 * names start with that layer's prefix, e.g. "race."), so LOCO_CRASH_AT
 * can arm them. Call it before the first crash point of the process is
 * reached, when LOCO_CRASH_AT is parsed: from a library constructor.
 * Returns 0 (also if POINTS is registered already) or -ENOSPC.
 * Caller: one thread, before any other thread reaches a crash point. */
int loco_crash_register(const char *const *points);

/* Reach point NAME: the test hook first (if set, internal.h), then
 * SIGKILL this process if NAME is armed on this node and this is the hit
 * its entry names (each entry counts its own hits). */
void loco_crash_point(const char *name);

/* True if NAME is armed on this node (code that batches ops across the
 * point splits the batch only then). */
bool loco_crash_armed(const char *name);

#endif
