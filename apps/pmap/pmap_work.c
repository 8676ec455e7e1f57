/* SPDX-License-Identifier: MIT */
/* A loco-pmap worker: the single writer (AsymNVM's front end) of one
 * partition, a linear-probing hash table of 16-byte buckets {key, value}
 * in the data area of its log on a memory node.
 *
 * It runs batches: BATCH operations are invoked together (each on its own
 * history thread), executed through the log (a put appends its record
 * {key, value} and stages the bucket write; a get reads through the
 * cache), then one commit makes the batch durable (every APPLY_EVERY-th
 * an apply), and only then do the operations return. A failed commit
 * leaves them open (unknown outcome); the worker waits for the memory
 * node and recovers the log in place. With --crash-every it also crashes
 * itself now and then: the log object and everything it held (cache,
 * staged operations) is dropped and a new one recovers from the memory
 * node alone, replaying the committed operations that were not applied. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/common/zipf.h"
#include "apps/pmap/pmap.h"
#include <loco/history.h>

#define WAIT_MS 60000

struct put_rec {
	uint64_t key, val;
};

static uint64_t key_of(const struct pmap_worker *w, uint64_t i)
{
	return (uint64_t)(w->part + 1) << 32 | (i + 1);
}

/* The bucket of KEY (its key word 0 when absent) at *AT; -ENOSPC if the
 * table is full without it. */
static int bucket_find(struct pmap_worker *w, struct loco_oplog *l,
		       struct loco_thread *thr, uint64_t key, uint64_t *at,
		       uint64_t b[2])
{
	uint64_t nb = w->p->nbuckets, h = rng_mix(key);
	for (uint64_t k = 0; k < nb; k++) {
		uint64_t i = (h + k) & (nb - 1);
		int rc = loco_oplog_read(l, thr, i * 16, b, 16);
		if (rc)
			return rc;
		if (b[0] == key || b[0] == 0) {
			*at = i * 16;
			return 0;
		}
	}
	return -ENOSPC;
}

static int exec_put(struct pmap_worker *w, struct loco_oplog *l,
		    struct loco_thread *thr, uint64_t key, uint64_t val)
{
	uint64_t at, b[2];
	int rc = bucket_find(w, l, thr, key, &at, b);
	b[0] = key;
	b[1] = val;
	return rc ? rc : loco_oplog_write(l, thr, at, b, 16);
}

static int replay(void *arg, struct loco_oplog *l, struct loco_thread *thr,
		  uint64_t seq, uint16_t type, const void *params, uint16_t len)
{
	struct pmap_worker *w = arg;
	struct put_rec r;
	(void)seq;
	if (type != PMAP_OP_PUT || len != sizeof(r))
		return -EIO;
	memcpy(&r, params, sizeof(r));
	/* --broken no-replay: the operation is counted, not executed. */
	return w->p->o.no_replay ? 0 : exec_put(w, l, thr, r.key, r.val);
}

/* ---- the log ---------------------------------------------------------- */

static void log_counters(struct pmap_worker *w)
{
	const struct loco_oplog_stats *s = &w->log.stats;
	w->n[X_COMMITS] += s->commits;
	w->n[X_APPLIES] += s->applies;
	w->n[X_MLOG_BYTES] += s->mlog_bytes;
	w->n[X_REPLAYED] += s->replayed;
	w->n[X_PERSISTS] += s->persists;
	w->n[X_CACHE_HITS] += w->log.cache.stats.hits;
	w->n[X_CACHE_MISSES] += w->log.cache.stats.misses;
}

/* An outage of the memory node: a region call that found its control
 * connection reset or refused (the node restarting) is one too. */
static bool transient(int rc)
{
	return rc == -LOCO_EDOWN || rc == -ENOTCONN || rc == -ETIMEDOUT ||
	       rc == -ECONNRESET || rc == -ECONNREFUSED || rc == -EPIPE;
}

static void log_close(struct pmap_worker *w)
{
	log_counters(w);
	loco_oplog_fini(&w->log, w->thr);
}

/* Init the partition's log and recover it (replaying what a previous
 * front end committed), waiting out the memory node's outages. */
static int log_open(struct pmap_worker *w)
{
	struct loco_oplog_cfg cfg;
	char name[32];
	pmap_log_cfg(w->p, &cfg);
	snprintf(name, sizeof(name), "pmap-p%u", w->part);
	for (;;) {
		int rc = loco_oplog_init(&w->log, w->p->mgr, NULL, name, w->mem,
					 &cfg);
		if (!rc)
			rc = loco_oplog_recover(&w->log, w->thr, replay, w, NULL);
		if (!rc)
			return 0;
		if (w->log.base.mgr)
			log_close(w);
		if (!transient(rc))
			return rc;
		w->n[X_OUTAGES]++;
		rc = loco_peer_wait(w->p->mgr, w->mem, WAIT_MS);
		if (rc)
			return rc;
	}
}

/* Drop the log object and all it held, as a crashed front end loses it,
 * and recover a new one from the memory node. */
static int front_crash(struct pmap_worker *w)
{
	log_close(w);
	w->n[X_CRASHES]++;
	return log_open(w);
}

/* After a failed operation: wait for the memory node and recover the log
 * in place (its stats go on). */
static int outage(struct pmap_worker *w)
{
	int rc;
	w->n[X_OUTAGES]++;
	do {
		rc = loco_peer_wait(w->p->mgr, w->mem, WAIT_MS);
		if (!rc)
			rc = loco_oplog_recover(&w->log, w->thr, replay, w, NULL);
	} while (rc == -LOCO_EDOWN);
	if (rc)
		fprintf(stderr, "pmap: partition %u: memory node %u: %s\n",
			w->part, w->mem, loco_strerror(rc));
	return rc;
}

/* ---- batches ---------------------------------------------------------- */

struct op {
	uint64_t hid, i, key, val;
	bool put, found;
};

static struct loco_thread *ctx_of(struct pmap_worker *w, unsigned c)
{
	return w->ctx[c] ? w->ctx[c] : w->thr;
}

/* Invoke and execute operation C of the batch. */
static int op_run(struct pmap_worker *w, unsigned c, struct op *op)
{
	const struct pmap_opts *o = &w->p->o;
	char args[32];
	uint64_t r = rng_next(&w->rng);
	op->i = r % o->keys;
	op->key = key_of(w, op->i);
	op->put = (r >> 40) % 100 < o->write_pct;
	op->val = op->put ? (uint64_t)(w->part + 1) << 40 | ++w->next_val : 0;
	snprintf(args, sizeof(args), op->put ? "[%" PRIu64 "]" : "[]", op->val);
	op->hid = loco_hist_inv_u64(ctx_of(w, c), op->put ? "put" : "get",
				    op->key, args);
	if (op->put) {
		struct put_rec rec = { op->key, op->val };
		int rc = loco_oplog_append(&w->log, w->thr, PMAP_OP_PUT, &rec,
					   sizeof(rec), NULL);
		return rc ? rc : exec_put(w, &w->log, w->thr, op->key, op->val);
	}
	uint64_t at, b[2];
	int rc = bucket_find(w, &w->log, w->thr, op->key, &at, b);
	op->found = !rc && b[0] == op->key;
	op->val = op->found ? b[1] : 0;
	return rc;
}

/* The batch's operations return (RC 0) or stay open (unknown outcome). */
static void batch_end(struct pmap_worker *w, struct op *ops, unsigned n,
		      int rc)
{
	char res[32];
	for (unsigned c = 0; c < n; c++) {
		struct op *op = &ops[c];
		if (rc) {
			loco_hist_info(ctx_of(w, c), op->hid);
			continue;
		}
		if (op->put) {
			w->acked[op->i] = op->val;
			w->n[X_PUTS]++;
		} else {
			w->n[X_GETS]++;
			w->n[X_HITS] += op->found;
		}
		snprintf(res, sizeof(res), op->found ? "[%" PRIu64 "]" : "[null]",
			 op->val);
		loco_hist_ret(ctx_of(w, c), op->hid, op->put ? "[]" : res);
	}
}

static int batch_run(struct pmap_worker *w)
{
	const struct pmap_opts *o = &w->p->o;
	struct op ops[PMAP_MAX_BATCH];
	unsigned n = 0;
	int rc = 0;
	uint64_t t0 = loco_now_ns();
	while (n < o->batch && !rc) {
		rc = op_run(w, n, &ops[n]);
		n++;
	}
	if (!rc)
		rc = ++w->n[X_BATCHES] % o->apply_every ?
		     loco_oplog_commit(&w->log, w->thr) :
		     loco_oplog_apply(&w->log, w->thr);
	batch_end(w, ops, n, rc);
	uint64_t dt = loco_now_ns() - t0;
	for (unsigned c = 0; !rc && c < n; c++)
		bench_lat_add(&w->lat, dt);
	atomic_fetch_add_explicit(&w->live_ops, rc ? 0 : n,
				  memory_order_relaxed); /* progress only */
	return rc;
}

/* ---- the run ---------------------------------------------------------- */

static int run_loop(struct pmap_worker *w)
{
	uint64_t every = (uint64_t)(w->p->o.crash_every * 1e9);
	int rc = 0;
	w->next_crash_ns = every ? loco_now_ns() + every : UINT64_MAX;
	while (!rc && loco_now_ns() < w->p->end_ns) {
		rc = batch_run(w);
		if (w->p->o.pace_us) {
			struct timespec ts = { 0, (long)w->p->o.pace_us * 1000 };
			nanosleep(&ts, NULL);
		}
		if (transient(rc))
			rc = outage(w);
		if (!rc && loco_now_ns() >= w->next_crash_ns) {
			w->next_crash_ns += every;
			rc = front_crash(w);
		}
	}
	return rc;
}

/* After the run: a last front-end crash (what was committed and not
 * applied is replayed), then every key read back, as the recovered log
 * shows it (recorded as gets): none may be older than its last
 * acknowledged put (a partition's values only grow). */
static int verify(struct pmap_worker *w)
{
	int rc = front_crash(w);
	for (uint64_t i = 0; !rc && i < w->p->o.keys; i++) {
		struct op op = { .i = i, .key = key_of(w, i) };
		uint64_t at, b[2];
		op.hid = loco_hist_inv_u64(ctx_of(w, 0), "get", op.key, "[]");
		rc = bucket_find(w, &w->log, w->thr, op.key, &at, b);
		op.found = !rc && b[0] == op.key;
		op.val = op.found ? b[1] : 0;
		if (rc) {
			loco_hist_info(ctx_of(w, 0), op.hid);
			break;
		}
		batch_end(w, &op, 1, 0);
		w->n[X_GETS]--;
		w->n[X_HITS] -= op.found;
		w->n[X_VERIFIED]++;
		if (op.val < w->acked[i]) {
			w->n[X_LOST]++;
			fprintf(stderr, "pmap: partition %u: key %" PRIu64 " reads %"
				PRIu64 ", acknowledged %" PRIu64 "\n", w->part,
				op.key, op.val, w->acked[i]);
		}
	}
	return rc;
}

static int worker_setup(struct pmap_worker *w)
{
	struct pmap *p = w->p;
	w->part = p->rank * p->o.threads + w->idx;
	w->mem = p->nmem ? p->mem[w->part % p->nmem] : p->self;
	w->rng = rng_mix(w->part + 1);
	w->acked = calloc(p->o.keys, sizeof(*w->acked));
	int rc = w->acked ? 0 : -ENOMEM;
	if (!rc)
		rc = bench_lat_init(&w->lat, 1 << 20);
	if (!rc)
		rc = loco_thread_create(p->mgr, &w->thr);
	for (unsigned c = 0; !rc && p->o.record && c < p->o.batch; c++)
		rc = loco_thread_create(p->mgr, &w->ctx[c]);
	if (!rc)
		rc = log_open(w);
	return rc;
}

static void worker_teardown(struct pmap_worker *w)
{
	if (w->log.base.mgr)
		log_close(w);
	for (unsigned c = 0; c < PMAP_MAX_BATCH; c++)
		if (w->ctx[c])
			loco_thread_destroy(w->ctx[c]);
	if (w->thr)
		loco_thread_destroy(w->thr);
	free(w->acked);
}

void *pmap_worker_main(void *arg)
{
	struct pmap_worker *w = arg;
	int rc = worker_setup(w);
	pthread_barrier_wait(&w->p->phase);   /* set up */
	pthread_barrier_wait(&w->p->phase);   /* the run's end is set */
	if (!rc && w->p->end_ns)
		rc = run_loop(w);
	if (!rc)
		rc = verify(w);
	worker_teardown(w);
	if (rc)
		fprintf(stderr, "pmap: partition %u: %s\n", w->part,
			loco_strerror(rc));
	w->rc = rc;
	/* Release: the counters above are read after the count. */
	atomic_fetch_add_explicit(&w->p->done, 1, memory_order_release);
	return NULL;
}
