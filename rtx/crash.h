/* SPDX-License-Identifier: MIT */
/* Crash injection: named points in the rTX code where the process kills
 * itself with SIGKILL, for the crash tests (test/crash, docs/rtx.md).
 *
 * Environment, read once:
 *   LOCO_CRASH_AT=POINT     the point (e.g. rtx.after_lock); unset: off
 *   LOCO_CRASH_AFTER=N      crash the Nth time the point is reached in
 *                           this process (default 1)
 *   LOCO_CRASH_NODES=1,3    only on these node ids (LOCO_NODE_ID); unset:
 *                           every node
 * An unknown point name is reported (loco_warn) and ignored. When off, a
 * point costs one predictable branch. */
#ifndef LOCO_RTX_CRASH_H
#define LOCO_RTX_CRASH_H

#include <stdbool.h>

/* Every point the code defines, NULL-terminated (docs/rtx.md lists them). */
extern const char *const loco_crash_points[];

/* Reach point NAME: SIGKILL this process if it is the armed point, on
 * this node, for the Nth time. */
void loco_crash_point(const char *name);

/* True if NAME is the armed point on this node (code that batches ops
 * across the point splits the batch only then). */
bool loco_crash_armed(const char *name);

#endif
