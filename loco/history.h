/* SPDX-License-Identifier: MIT */
/* History recorder: invoke and return events of operations, for
 * loco-lincheck (format: docs/formats.md, "The loco JSONL format").
 *
 * One file per node. Each thread appends to 1 MiB chunks of it that are
 * memory-mapped and pre-filled with newlines, so every event written before
 * a SIGKILL is in the file and the file is always valid JSONL. Times are
 * CLOCK_MONOTONIC, comparable across the processes of one host.
 *
 * Recording is off unless loco_history_open() is called or LOCO_HISTORY is
 * set (the manager opens it at start); when off, every call costs one
 * branch. Arguments are JSON fragments written as given, e.g. "[3,4]". */
#ifndef LOCO_HISTORY_H
#define LOCO_HISTORY_H

#include <stdbool.h>
#include <stdint.h>

#include <loco/loco.h>

/* Record this node's events into PATH ("%n" is replaced by the node id; a
 * directory gets "node<ID>.jsonl" inside). -EBUSY if already recording. */
int loco_history_open(struct loco_mgr *mgr, const char *path);
bool loco_history_enabled(const struct loco_mgr *mgr);

/* Invocation of OP on KEY (a JSON value, NULL for none) with ARGS (a JSON
 * array, NULL for []). Returns the op id for the matching return, 0 when
 * recording is off. */
uint64_t loco_hist_inv(struct loco_thread *thr, const char *op,
		       const char *key, const char *args);
/* The same with an unsigned integer key. */
uint64_t loco_hist_inv_u64(struct loco_thread *thr, const char *op,
			   uint64_t key, const char *args);
/* Return of op ID with RES (a JSON array, NULL for []). */
void loco_hist_ret(struct loco_thread *thr, uint64_t id, const char *res);
/* Op ID ended without a known outcome (timeout): it stays open. */
void loco_hist_info(struct loco_thread *thr, uint64_t id);
/* Op ID certainly had no effect. */
void loco_hist_fail(struct loco_thread *thr, uint64_t id);

#endif
