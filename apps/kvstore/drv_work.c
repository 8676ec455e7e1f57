/* SPDX-License-Identifier: MIT */
/* loco-kvstore workers: prefill this node's share of the keys, then run
 * the mix for the measured phase keeping up to --window operations in
 * flight. Gets are asynchronous (a READ each, completed out of order);
 * inserts, deletes, updates and puts hold a lock and run to completion
 * when issued, while the window's gets stay in flight.
 *
 * Histories: every operation is recorded (loco/history.h) with the op
 * names of the lincheck model `map`. A history process runs one op at a
 * time, so with --record each window slot gets its own thread context
 * (its own QPs and history tid); without it the slots share one. Values
 * are unique per write: node << 48 | worker << 40 | sequence, in the
 * first word, the other words derived from it and checked by every get. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "apps/kvstore/drv.h"
#include <loco/history.h>
#include <loco/wait.h>

#define LAT_CAP (1u << 20)

enum op { OP_GET, OP_INSERT, OP_DELETE, OP_PUT, OP_UPDATE };

/* ---- values ------------------------------------------------------------- */

static uint64_t value_next(struct drv_worker *w)
{
	uint64_t seq = ++w->seq & ((UINT64_C(1) << 40) - 1);
	return (uint64_t)w->d->self << 48 | (uint64_t)w->idx << 40 | seq;
}

static void value_fill(uint64_t *buf, uint32_t words, uint64_t v)
{
	buf[0] = v;
	for (uint32_t i = 1; i < words; i++)
		buf[i] = rng_mix(v + i);
}

/* The id of a value read back, or false if it is not one we wrote. */
static bool value_check(const uint64_t *buf, uint32_t len, uint32_t size,
			uint64_t *v)
{
	if (len != size)
		return false;
	for (uint32_t i = 1; i < size / 8; i++)
		if (buf[i] != rng_mix(buf[0] + i))
			return false;
	*v = buf[0];
	return true;
}

/* ---- set-up ------------------------------------------------------------- */

static int worker_setup(struct drv_worker *w)
{
	struct drv *d = w->d;
	w->nctx = d->o.record ? d->o.window : 1;
	w->rng = rng_mix(d->o.seed ^ (uint64_t)d->self << 32 ^ w->idx);
	w->val = malloc(d->o.value_size);
	uint64_t stride = (uint64_t)d->nmembers * d->o.threads;
	w->shadow = d->o.verify ? calloc(d->o.keys / stride + 1, 8) : NULL;
	int rc = w->val && (w->shadow || !d->o.verify) ?
		 bench_lat_init(&w->lat, LAT_CAP) : -ENOMEM;
	for (unsigned i = 0; !rc && i < w->nctx; i++) {
		rc = loco_thread_create(d->mgr, &w->thr[i]);
		if (!rc && (rc = kv_thread_init(&w->kt[i], &d->kv, w->thr[i]))) {
			loco_thread_destroy(w->thr[i]);
			w->thr[i] = NULL;
		}
	}
	for (unsigned i = 0; !rc && i < d->o.window; i++) {
		rc = kv_get_init(&w->slot[i].g, &d->kv);
		w->slot[i].ctx = i % w->nctx;
	}
	return rc;
}

/* After an error some gets may still be in flight: destroying the thread
 * contexts waits for their READs before the buffers are freed. */
static void worker_teardown(struct drv_worker *w)
{
	for (unsigned i = 0; i < w->nctx && w->thr[i]; i++) {
		struct kv_stats st = w->kt[i].st;
		w->n[X_TORN] += st.torn;
		w->n[X_STALE] += st.stale;
		w->n[X_INVALID] += st.invalid;
		w->n[X_OUTAGES] += w->kt[i].outages;
		kv_thread_fini(&w->kt[i]);
		loco_thread_destroy(w->thr[i]);
		w->thr[i] = NULL;
	}
	for (unsigned i = 0; i < w->d->o.window; i++)
		kv_get_fini(&w->slot[i].g);
	free(w->val);
	free(w->shadow);
	w->val = NULL;
	w->shadow = NULL;
}

/* ---- owned keys (--verify) ------------------------------------------------ */

/* Keys are the workers' in turn (the prefill's split): key K belongs to
 * worker (K / members) mod threads of member K mod members. */
static uint64_t key_stride(const struct drv *d)
{
	return (uint64_t)d->nmembers * d->o.threads;
}

static uint64_t key_first(const struct drv_worker *w)
{
	return w->d->member + (uint64_t)w->idx * w->d->nmembers;
}

/* The owned key nearest below K (or the first one). */
static uint64_t key_own(const struct drv_worker *w, uint64_t k)
{
	uint64_t s = key_stride(w->d), o = k / s * s + key_first(w);
	return o < w->d->o.keys ? o : o >= s ? o - s : key_first(w);
}

/* A write of owned KEY was acknowledged: V (0 for absent) is its value. */
static void shadow_set(struct drv_worker *w, uint64_t key, uint64_t v)
{
	if (w->shadow)
		w->shadow[key / key_stride(w->d)] = v;
}

/* ---- writes ------------------------------------------------------------- */

static const char *const op_name[] = {
	[OP_GET] = "get", [OP_INSERT] = "insert", [OP_DELETE] = "delete",
	[OP_PUT] = "put", [OP_UPDATE] = "update",
};

/* Run write OP on KEY; the history gets its invocation and result. */
static int write_op(struct drv_worker *w, struct kv_thread *kt, enum op op,
		    uint64_t key)
{
	uint32_t size = w->d->o.value_size;
	uint64_t v = value_next(w);
	char args[32];
	snprintf(args, sizeof(args), op == OP_DELETE ? "[]" : "[%" PRIu64 "]", v);
	value_fill(w->val, size / 8, v);
	uint64_t hid = loco_hist_inv_u64(kt->thr, op_name[op], key, args);
	int rc;
	switch (op) {
	case OP_INSERT:
		rc = kv_insert(kt, key, w->val, size);
		w->n[X_INSERTS]++;
		w->n[X_INSERTED] += !rc;
		rc = rc == -EEXIST ? 1 : rc;
		break;
	case OP_DELETE:
		rc = kv_delete(kt, key);
		w->n[X_DELETES]++;
		w->n[X_DELETED] += !rc;
		rc = rc == -ENOENT ? 1 : rc;
		break;
	case OP_UPDATE:
		rc = kv_update(kt, key, w->val, size);
		w->n[X_UPDATES]++;
		w->n[X_UPDATED] += !rc;
		rc = rc == -ENOENT ? 1 : rc;
		break;
	default:
		rc = kv_put(kt, key, w->val, size);
		w->n[X_PUTS]++;
		break;
	}
	if (rc < 0) {
		loco_hist_info(kt->thr, hid);
		/* --broken-broadcast: the client of a store that gives up
		 * goes on, as one that retries would, so later ops can see
		 * the half-indexed key (only the history knows the outcome). */
		return rc == -ETIMEDOUT && w->d->o.broken_broadcast ? 0 : rc;
	}
	if (!rc)
		shadow_set(w, key, op == OP_DELETE ? 0 : v);
	/* 0: done (true), 1: the key was present/absent (false). */
	loco_hist_ret(kt->thr, hid, op == OP_PUT ? "[]" : rc ? "[false]" : "[true]");
	return 0;
}

/* ---- gets ---------------------------------------------------------------- */

static int get_done(struct drv_worker *w, struct drv_slot *s)
{
	struct kv_thread *kt = &w->kt[s->ctx];
	char res[32] = "[null]";
	uint64_t v;
	bench_lat_add(&w->lat, loco_now_ns() - s->t0);
	w->n[X_GETS]++;
	if (!s->g.rc) {
		if (!value_check(kv_get_value(&s->g), s->g.len, w->d->o.value_size,
				 &v)) {
			w->n[X_BAD]++;
			loco_hist_info(kt->thr, s->hid);
			fprintf(stderr, "kvstore: key %" PRIu64 ": corrupt value\n",
				s->g.key);
			return -EIO;
		}
		w->n[X_HITS]++;
		snprintf(res, sizeof(res), "[%" PRIu64 "]", v);
	}
	loco_hist_ret(kt->thr, s->hid, res);
	return 0;
}

/* Start a get of KEY in slot S: 0 (in flight or completed) or an error. */
static int get_start(struct drv_worker *w, struct drv_slot *s, uint64_t key)
{
	struct kv_thread *kt = &w->kt[s->ctx];
	s->t0 = loco_now_ns();
	s->hid = loco_hist_inv_u64(kt->thr, "get", key, "[]");
	int rc = kv_get_start(kt, &s->g, key);
	if (rc == 1)
		return get_done(w, s);
	if (rc)
		loco_hist_info(kt->thr, s->hid);
	return rc;
}

/* Progress the get in slot S (busy). 1 if it completed, 0 if not, or an
 * error. */
static int get_poll(struct drv_worker *w, struct drv_slot *s)
{
	struct kv_thread *kt = &w->kt[s->ctx];
	int rc = kv_get_poll(kt, &s->g);
	if (rc < 0) {
		loco_hist_info(kt->thr, s->hid);
		return rc;
	}
	if (!rc)
		return 0;
	rc = get_done(w, s);
	return rc ? rc : 1;
}

/* ---- the mix -------------------------------------------------------------- */

static enum op op_pick(const struct drv_opts *o, uint64_t *rng)
{
	double u = rng_unit(rng);
	if (u < o->read)
		return OP_GET;
	u -= o->read;
	if (u < o->insert)
		return OP_INSERT;
	u -= o->insert;
	if (u < o->insert)
		return OP_DELETE;
	u -= o->insert;
	return u < o->put ? OP_PUT : OP_UPDATE;
}

/* Issue one operation in free slot S. */
static int op_issue(struct drv_worker *w, struct drv_slot *s)
{
	struct drv *d = w->d;
	enum op op = op_pick(&d->o, &w->rng);
	uint64_t key = zipf_next(&d->zipf, &w->rng);
	if (d->o.verify)
		key = key_own(w, key);
	if (op == OP_GET)
		return get_start(w, s, key);
	uint64_t t0 = loco_now_ns();
	int rc = write_op(w, &w->kt[s->ctx], op, key);
	bench_lat_add(&w->lat, loco_now_ns() - t0);
	return rc;
}

/* Wait for the first busy slot's READ (nothing else progressed). */
static int wait_some(struct drv_worker *w)
{
	for (unsigned i = 0; i < w->d->o.window; i++) {
		struct drv_slot *s = &w->slot[i];
		if (s->g.busy)
			return loco_ack_wait(w->thr[s->ctx], &s->g.ack, -1);
	}
	return 0;
}

/* A get failed because the data node died (--data memory): it ends with
 * an unknown outcome (the history says so); once the node is back the
 * slot takes new operations. Other errors stay errors. */
static int get_outage(struct drv_worker *w, struct drv_slot *s, int rc)
{
	if (rc != -LOCO_EDOWN || !w->d->o.data_memory)
		return rc;
	s->g.busy = false;
	w->n[X_OUTAGES]++;
	return loco_peer_wait(w->d->mgr, w->d->kv.cfg.data_node, KV_BACK_MS);
}

/* One pass over the window: progress the busy slots, refill the free
 * ones unless STOP. *BUSY gets the slots still in flight. */
static int window_pass(struct drv_worker *w, bool stop, unsigned *busy,
		       unsigned *progressed)
{
	uint64_t max = w->d->o.max_ops;
	*busy = 0;
	for (unsigned i = 0; i < w->d->o.window; i++) {
		struct drv_slot *s = &w->slot[i];
		int rc = s->g.busy ? get_outage(w, s, get_poll(w, s)) : 1;
		if (rc < 0)
			return rc;
		if (rc && !stop && (!max || w->issued < max)) {
			if ((rc = get_outage(w, s, op_issue(w, s))))
				return rc;
			(*progressed)++;
			w->issued++;
			/* Relaxed: a progress counter. */
			atomic_fetch_add_explicit(&w->live_ops, 1,
						  memory_order_relaxed);
		}
		*busy += s->g.busy;
	}
	return 0;
}

static int run(struct drv_worker *w)
{
	for (;;) {
		bool stop = loco_now_ns() >= w->d->end_ns ||
			    (w->d->o.max_ops && w->issued >= w->d->o.max_ops);
		unsigned busy, progressed = 0;
		int rc = window_pass(w, stop, &busy, &progressed);
		if (rc)
			return rc;
		if (stop && !busy)
			return 0;
		if (!progressed && (rc = wait_some(w)) && rc != -LOCO_EDOWN)
			return rc;
	}
}

/* Whether the data node came back from an outage since W's run began
 * (this node found it up again later than before the run), whether or
 * not an op of W's ran while it was down: a worker descheduled across a
 * short restart sees no -LOCO_EDOWN. Counted as an outage W saw. */
static bool outage_missed(struct drv_worker *w)
{
	struct drv *d = w->d;
	if (loco_peer_up_ns(d->mgr, d->kv.cfg.data_node) == w->up_ns)
		return false;
	w->n[X_OUTAGES]++;
	return true;
}

/* --verify-after-outage: wait (60 s at most) until a READ of the slots
 * finds the data node down, then until it is back, unless this worker
 * already saw an outage during the run, or the node came back from one
 * since the run began. Every write of the run is then behind the node's
 * death, or acknowledged by its next incarnation, so the check that
 * follows reads what the restart (or the mirror) kept, not the volatile
 * layer it replaced. */
static int await_outage(struct drv_worker *w)
{
	struct drv *d = w->d;
	struct loco_wait wt;
	loco_wait_init(&wt, NULL, DRV_OUTAGE_WAIT_MS);
	if (w->n[X_OUTAGES])
		return 0;
	for (;;) {
		int rc = kv_probe_slots(&w->kt[0]);
		if (rc == -LOCO_EDOWN)
			return get_outage(w, &w->slot[0], rc);
		if (rc)
			return rc;
		if (outage_missed(w))
			return 0;
		if (loco_wait_step(&wt)) {
			fprintf(stderr, "kvstore: node %u: --verify-after-outage: "
				"the data node did not go down within %d ms\n",
				d->self, DRV_OUTAGE_WAIT_MS);
			return -ETIMEDOUT;
		}
	}
}

/* --verify: every owned key holds its last acknowledged value (or is
 * absent if that was a delete), read back with gets after the run. */
static int verify(struct drv_worker *w)
{
	struct drv *d = w->d;
	struct kv_get *g = &w->slot[0].g;
	uint32_t size = d->o.value_size, len = 0;
	int rc = 0;
	for (uint64_t k = key_first(w); !rc && k < d->o.keys;
	     k += key_stride(d)) {
		uint64_t want = w->shadow[k / key_stride(d)], got = 0;
		rc = kv_get(&w->kt[0], g, k, w->val, &len);
		if (rc == -LOCO_EDOWN && !(rc = get_outage(w, &w->slot[0], rc))) {
			k -= key_stride(d);
			continue;
		}
		if (!rc && !value_check(w->val, len, size, &got))
			got = UINT64_MAX;
		if (rc == -ENOENT)
			rc = 0;
		w->n[X_VERIFIED]++;
		if (!rc && got != want) {
			w->n[X_LOST]++;
			fprintf(stderr, "kvstore: node %u: key %" PRIu64 " holds %"
				PRIu64 ", its last acknowledged write left %"
				PRIu64 "\n", d->self, k, got, want);
		}
	}
	return rc;
}

/* ---- prefill -------------------------------------------------------------- */

/* Key I is prefilled iff its hash falls under the fill fraction. */
static bool prefilled(const struct drv_opts *o, uint64_t i)
{
	return (double)(rng_mix(i ^ o->seed) >> 11) * 0x1.0p-53 < o->fill;
}

/* Bulk-load the N keys of KEYS with fresh values (not recorded). */
static int load_batch(struct drv_worker *w, const uint64_t *keys, unsigned n,
		      uint64_t *vals)
{
	uint32_t size = w->d->o.value_size;
	for (unsigned i = 0; i < n; i++)
		value_fill(vals + (size_t)i * size / 8, size / 8, value_next(w));
	int rc = kv_load(&w->kt[0], keys, vals, size, n);
	w->n[X_PREFILL] += rc ? 0 : n;
	for (unsigned i = 0; !rc && i < n; i++)
		shadow_set(w, keys[i], vals[(size_t)i * size / 8]);
	return rc;
}

/* Load this worker's share: keys I with I mod members == our rank and
 * (I / members) mod threads == the worker's index, KV_LOAD_MAX at a time.
 * A recorded run inserts them one by one instead, so that the history
 * has an insert (one op at a time per process) for each. */
static int prefill(struct drv_worker *w)
{
	struct drv *d = w->d;
	uint64_t stride = (uint64_t)d->nmembers * d->o.threads, keys[KV_LOAD_MAX];
	uint64_t first = d->member + (uint64_t)w->idx * d->nmembers;
	uint64_t *vals = malloc((size_t)KV_LOAD_MAX * d->o.value_size);
	unsigned n = 0;
	int rc = vals ? 0 : -ENOMEM;
	for (uint64_t i = first; !rc && i < d->o.keys; i += stride) {
		if (!prefilled(&d->o, i))
			continue;
		if (d->o.record) {
			rc = write_op(w, &w->kt[0], OP_INSERT, i);
			w->n[X_PREFILL] += !rc;
			continue;
		}
		keys[n++] = i;
		if (n == KV_LOAD_MAX) {
			rc = load_batch(w, keys, n, vals);
			n = 0;
		}
	}
	if (!rc && n)
		rc = load_batch(w, keys, n, vals);
	free(vals);
	w->n[X_INSERTS] = w->n[X_INSERTED] = 0;
	return rc;
}

void *drv_worker_main(void *arg)
{
	struct drv_worker *w = arg;
	struct drv *d = w->d;
	w->rc = worker_setup(w);
	if (!w->rc)
		w->rc = prefill(w);
	pthread_barrier_wait(&d->phase);   /* prefill done here */
	pthread_barrier_wait(&d->phase);   /* every node prefilled */
	w->up_ns = loco_peer_up_ns(d->mgr, d->kv.cfg.data_node);
	if (!w->rc)
		w->rc = run(w);
	if (!w->rc && d->o.verify_after_outage)
		w->rc = await_outage(w);
	if (!w->rc && d->o.verify)
		w->rc = verify(w);
	if (w->rc)
		fprintf(stderr, "kvstore: node %u worker %u: %s\n", d->self,
			w->idx, loco_strerror(w->rc));
	worker_teardown(w);
	/* Release: pairs with the acquire load in cl_progress_run (driver.c's
	 * progress); the worker's counters are final. */
	atomic_fetch_add_explicit(&d->done, 1, memory_order_release);
	return NULL;
}
