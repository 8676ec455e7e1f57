/* SPDX-License-Identifier: MIT */
/* The frame of a benchmark run on every compute node (loco-kvstore,
 * loco-transfer): a barrier to start and end together, and an SST with
 * one row of results per node, read by every node after the final
 * barrier so the lowest id can print the cluster-wide line; and the
 * progress and result lines of such a run.
 *
 * Channel "<name>" with sub-channels "<name>/bar" and "<name>/rows". */
#ifndef LOCO_APPS_CLUSTER_H
#define LOCO_APPS_CLUSTER_H

#include <assert.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "apps/common/bench.h"
#include <loco/channels/barrier.h>
#include <loco/channels/sst.h>
#include <loco/channel.h>

#define CL_EXTRA 32

/* Remote layout of one node's results. */
struct cl_row {
	uint64_t ops;
	uint64_t dur_ns;
	uint64_t p50_ns, p99_ns;
	uint64_t reads, writes, cas, faa, rtts;  /* verbs of the run */
	uint64_t extra[CL_EXTRA];                /* the app's counters */
};
static_assert(sizeof(struct cl_row) == 328, "remote layout");

struct cl_run {
	struct loco_channel base;
	struct loco_barrier bar;
	struct loco_sst rows;
	unsigned nodes;
};
static_assert(offsetof(struct cl_run, base) == 0, "base first");

/* Create the endpoints on every compute node and start joining. */
int cl_run_init(struct cl_run *r, struct loco_mgr *mgr, const char *name);
void cl_run_fini(struct cl_run *r);

/* Wait for every node, up to TIMEOUT_MS (the phases before a barrier
 * may take long: prefills). A participant fenced meanwhile (by this node
 * or another) can never arrive: the wait looks for one every 200 ms.
 * Returns 0, -ESRCH (a participant was fenced), -ETIMEDOUT or an error.
 * Ordering: a barrier (global fence on arrival): remote writes any
 *   thread of any node made before arriving are placed at the return.
 * Completion: synchronous.
 * Caller: one thread per node, THR's owner. */
int cl_run_sync(struct cl_run *r, struct loco_thread *thr, int timeout_ms);

/* Store this node's row, push it (placed), then cl_run_sync: after the
 * return every node's row can be loaded with cl_run_sum.
 * Ordering: the push is placed before the barrier arrival.
 * Completion: synchronous.
 * Caller: as cl_run_sync. */
int cl_run_publish(struct cl_run *r, struct loco_thread *thr,
		   const struct cl_row *mine, int timeout_ms);

/* Sum of every node's row into *OUT: counters and ops added, dur_ns and
 * the latency percentiles the maximum over the nodes (an upper bound of
 * the cluster's percentile); *MIN_OPS and *MAX_OPS get the fewest and
 * most ops of a node (fairness). Returns 0 or a row load error. */
int cl_run_sum(struct cl_run *r, struct cl_row *out, uint64_t *min_ops,
	       uint64_t *max_ops);

/* A program's result line: ROW of this node (CLUSTER NULL), or the sum
 * of every node's (CLUSTER: the fewest and most ops of a node). */
typedef void cl_report_fn(void *arg, const struct cl_row *row,
			  const uint64_t *cluster);

/* cl_run_publish MINE, REPORT it, and on the leader REPORT the cluster's
 * sum too (cl_run_sum). Returns 0 or the first error. A participant
 * found fenced while waiting (the others took it for dead) ends the wait:
 * only this node's line is reported, and 0 returned (the caller's own
 * checks say whether the run is sound).
 * Ordering, Completion, Caller: as cl_run_publish. */
int cl_run_finish(struct cl_run *r, struct loco_thread *thr,
		  const struct cl_row *mine, int timeout_ms,
		  cl_report_fn *report, void *arg);

/* Add row X into SUM as cl_run_sum does (counters and ops added, dur_ns
 * and the percentiles the maximum). */
void cl_row_add(struct cl_row *sum, const struct cl_row *x);

/* True on the lowest node id, which prints the cluster line. */
bool cl_run_leader(const struct cl_run *r);

/* Fill the verbs of ROW from the difference of two manager snapshots. */
void cl_row_verbs(struct cl_row *row, const struct loco_stats *before,
		  const struct loco_stats *after);

/* The latency percentiles of LAT into ROW (LAT's samples get sorted). */
void cl_row_lat(struct cl_row *row, struct bench_lat *lat);

/* bench_json_begin for ROW: R gives app, transport, nodes and threads,
 * ROW the rest. Then the scope: CLUSTER, the fewest and most ops of a
 * node, for the cluster's line; NULL for the line of node NODE. */
void cl_json_begin(FILE *f, struct bench_result *r, const struct cl_row *row,
		   const uint64_t *cluster, uint32_t node);

/* The progress of the measured phase: first "NAME: node NODE: measured
 * phase begins" (tools/loco-run aims faults at it), then every second
 * until *DONE reaches THREADS, "NAME: node NODE: S s, R UNIT/s" on
 * stderr, R the rate of the sum of the workers' op counters (OPS,
 * STRIDE) since the last line. */
struct cl_progress {
	const char *name, *unit;
	uint32_t node;
	unsigned threads;
	_Atomic unsigned *done;     /* incremented (release) by each worker */
	/* Worker I's op counter is at (char *)ops + I * stride (a field of
	 * the workers' array). */
	const _Atomic uint64_t *ops;
	size_t stride;
};

void cl_progress_run(const struct cl_progress *p, uint64_t t0);

#endif
