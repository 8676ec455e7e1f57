/* SPDX-License-Identifier: MIT */
/* The run of a threaded benchmark on every compute node (loco-lockbench,
 * loco-queuebench): the nodes pass the barrier "bar", THREADS workers,
 * each with its own loco_thread, call OP for DURATION seconds while the
 * main thread prints a progress line a second, REPORT prints the node's
 * result (bench_pool_result, bench_pool_total), and the nodes pass "bar"
 * again. The atomic_var "total" sums the nodes' ops. */
#ifndef LOCO_APPS_POOL_H
#define LOCO_APPS_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "apps/common/bench.h"
#include <loco/channels/atomic_var.h>
#include <loco/channels/barrier.h>

/* The K-th op of worker IDX, on THR. Returns 0 (an op), 1 (it found
 * nothing to do, e.g. an empty queue: not counted as an op) or -errno,
 * which ends the worker and the run. Every call is timed. */
typedef int bench_op_fn(void *arg, struct loco_thread *thr, unsigned idx,
			uint64_t k);

/* The node's line, after the workers ran for SECS seconds. */
typedef void bench_report_fn(void *arg, double secs);

struct bench_pool;

struct bench_worker {
	pthread_t tid;
	struct bench_pool *p;
	unsigned idx;
	struct bench_lat lat;
	_Atomic uint64_t ops;
	uint64_t empty;             /* calls that returned 1 */
	struct loco_stats st;
	int err;
};

struct bench_pool {
	/* Set by the caller before bench_pool_init. */
	const char *name;           /* of the progress lines */
	struct loco_mgr *mgr;
	unsigned threads;
	double duration;            /* seconds */
	bench_op_fn *op;
	bench_report_fn *report;
	void *arg;                  /* of OP and REPORT */
	/* The pool's. */
	struct loco_thread *thr;    /* main thread: barriers, totals */
	struct loco_atomic_var total;
	struct loco_barrier bar;
	struct bench_worker *w;
	_Atomic bool go;            /* workers start together */
	uint64_t end_ns;            /* written before go */
};

/* Create the main thread, "total" (hosted by HOST) and "bar". */
int bench_pool_init(struct bench_pool *p, uint32_t host);
void bench_pool_fini(struct bench_pool *p);

/* The whole run (see above). Returns 0, or the first error of the
 * workers or the barriers. */
int bench_pool_run(struct bench_pool *p);

/* For REPORT: the workers' ops, verbs and latency percentiles into R.
 * Returns 0 or -ENOMEM. */
int bench_pool_result(struct bench_pool *p, struct bench_result *r);

/* The options every pool program has: --threads (C 't', 1..64) into
 * *THREADS and --duration (C 'd', seconds) into *DURATION. Returns 0, -1
 * on a bad value (EXPECT as for bench_opt_fn), 1 if C is neither. */
int bench_pool_opt(int c, const char *s, unsigned *threads, double *duration,
		   char *expect);

/* For REPORT: the calls that found nothing to do. */
uint64_t bench_pool_empty(const struct bench_pool *p);

/* For REPORT: add OPS to "total", pass "bar", then read the sum of every
 * node's into *SUM. Returns 0 or the first error.
 * Ordering: the barrier (a global fence on arrival) places every node's
 *   add before any node's read.
 * Completion: synchronous.
 * Caller: the main thread. */
int bench_pool_total(struct bench_pool *p, uint64_t ops, uint64_t *sum);

#endif
