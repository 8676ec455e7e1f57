/* SPDX-License-Identifier: MIT */
/* loco-kvstore, the YCSB-style driver of the kvstore: shared definitions
 * of driver.c (options, phases, report) and drv_work.c (the workers). */
#ifndef LOCO_APPS_DRV_H
#define LOCO_APPS_DRV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "apps/common/bench.h"
#include "apps/common/cluster.h"
#include "apps/common/zipf.h"
#include "apps/kvstore/kv.h"

#define DRV_MAX_THREADS 64
#define DRV_MAX_WINDOW 128

struct drv_opts {
	uint64_t keys;
	uint32_t value_size;
	double read, insert, put;   /* ratios: get; insert (and delete); put */
	double zipf;
	unsigned threads, window, locks;
	double duration, fill;
	uint64_t max_ops;           /* per thread, 0: no limit */
	const char *record;
	uint64_t seed;
	bool broken_fence;          /* tests: see kv_config */
	bool hot_locks;             /* see kv_config */
	bool data_memory;           /* --data memory: kv_config.remote_data */
	bool broken_persist;        /* tests: see kv_config */
	bool broken_broadcast;      /* tests: see kv_config */
	bool verify;                /* --verify: own keys only, checked at the end */
	bool verify_after_outage;   /* --verify-after-outage (tests) */
};

/* --verify-after-outage: how long a worker waits for the outage. */
#define DRV_OUTAGE_WAIT_MS 60000

/* Counters of a worker, also the extra fields of the results row. */
enum {
	X_GETS, X_HITS, X_INSERTS, X_INSERTED, X_DELETES, X_DELETED,
	X_UPDATES, X_UPDATED, X_PUTS, X_TORN, X_STALE, X_INVALID, X_BAD,
	X_APPLIED, X_PREFILL, X_OUTAGES, X_VERIFIED, X_LOST, X_FLUSHES, X_N
};

/* One outstanding operation of a worker's window. */
struct drv_slot {
	struct kv_get g;
	unsigned ctx;               /* the kv_thread it runs on */
	uint64_t hid;               /* history id of a get in flight */
	uint64_t t0;
};

struct drv;

struct drv_worker {
	struct drv *d;
	unsigned idx;
	pthread_t tid;
	unsigned nctx;              /* 1, or window when recording */
	struct loco_thread *thr[DRV_MAX_WINDOW];
	struct kv_thread kt[DRV_MAX_WINDOW];
	struct drv_slot slot[DRV_MAX_WINDOW];
	uint64_t *val;              /* value to write */
	uint64_t *shadow;           /* --verify: last acknowledged value of each
				     * owned key (value id, 0: absent) */
	uint64_t rng, seq;
	uint64_t issued;            /* operations of the measured phase */
	uint64_t up_ns;             /* --verify-after-outage: when this node
				     * last found the data node up, before
				     * the run (loco_peer_up_ns) */
	uint64_t n[X_N];
	_Atomic uint64_t live_ops;  /* for the progress line */
	struct bench_lat lat;
	int rc;
};

struct drv {
	struct drv_opts o;
	struct loco_mgr *mgr;
	struct kv_store kv;
	struct cl_run run;
	struct zipf zipf;
	uint32_t self;
	unsigned member, nmembers;  /* this node's rank among the members */
	pthread_barrier_t phase;
	uint64_t end_ns;            /* end of the measured phase */
	_Atomic unsigned done;      /* workers finished */
	struct drv_worker w[DRV_MAX_THREADS];
};

/* drv_work.c */
void *drv_worker_main(void *arg);

#endif
