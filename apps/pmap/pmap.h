/* SPDX-License-Identifier: MIT */
/* loco-pmap: a persistent hash map per front end on the AsymNVM log
 * (channels/oplog.h); see pmap.c for the program, pmap_work.c for a
 * worker. */
#ifndef LOCO_APPS_PMAP_H
#define LOCO_APPS_PMAP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "apps/common/bench.h"
#include "apps/common/cluster.h"
#include <loco/channels/oplog.h>

#define PMAP_MAX_BATCH 32
#define PMAP_OP_PUT 1

struct pmap_opts {
	unsigned threads;       /* workers (partitions) per node */
	double duration;
	uint32_t keys;          /* per partition */
	unsigned batch;         /* operations per commit */
	unsigned apply_every;   /* commits per apply */
	unsigned write_pct;     /* puts among the operations, % */
	uint32_t cache_pages;   /* 0: the whole table */
	unsigned sample;        /* replacement candidates */
	double crash_every;     /* s between emulated front-end crashes; 0: none */
	unsigned pace_us;       /* sleep after each batch */
	const char *record;
	bool no_persist;        /* --broken no-persist */
	bool no_replay;         /* --broken no-replay */
};

/* Counters of a worker (the cluster row's extra fields). */
enum {
	X_PUTS, X_GETS, X_HITS, X_BATCHES, X_COMMITS, X_APPLIES, X_MLOG_BYTES,
	X_CACHE_HITS, X_CACHE_MISSES, X_OUTAGES, X_CRASHES, X_REPLAYED,
	X_VERIFIED, X_LOST, X_FLUSHES, X_PERSISTS, X_N
};

struct pmap;

struct pmap_worker {
	struct pmap *p;
	unsigned idx;
	pthread_t tid;
	uint32_t part;              /* partition: node * threads + idx */
	uint32_t mem;               /* its memory node */
	struct loco_thread *thr;    /* remote operations */
	struct loco_thread *ctx[PMAP_MAX_BATCH]; /* history (when recording) */
	struct loco_oplog log;
	uint64_t *acked;            /* per key: the last acknowledged value */
	uint64_t next_val;
	uint64_t rng;
	uint64_t next_crash_ns;
	uint64_t n[X_N];
	_Atomic uint64_t live_ops;
	struct bench_lat lat;
	int rc;
};

struct pmap {
	struct pmap_opts o;
	struct loco_mgr *mgr;
	uint32_t self;
	unsigned nodes;             /* compute nodes */
	uint32_t rank;              /* this node's among them */
	uint32_t mem[64];           /* memory node ids */
	unsigned nmem;
	uint64_t nbuckets;          /* table buckets (16 bytes each) */
	struct cl_run run;
	pthread_barrier_t phase;
	uint64_t end_ns;
	_Atomic unsigned done;
	struct pmap_worker *w;
};

/* The log geometry of a partition. */
void pmap_log_cfg(const struct pmap *p, struct loco_oplog_cfg *cfg);

void *pmap_worker_main(void *arg);

#endif
