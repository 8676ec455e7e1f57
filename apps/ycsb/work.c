/* SPDX-License-Identifier: MIT */
/* loco-ycsb workers: load this client's share of the keys, run the mix
 * for the measured phase, then read back what this client wrote
 * (track.c). Every index call goes through ycsb_call, which records it
 * (loco/history.h, the op names of lincheck's `map` and `ordered-map`),
 * counts the round trips the thread's loco context made during it, and
 * tells the tracker its outcome.
 *
 * Clients: the cluster has C = nodes x threads of them, client c being
 * thread c mod threads of the c / threads-th compute node. Keys:
 *  - loaded keys 0..N-1, key K loaded by client K mod C;
 *  - fresh keys (YCSB's insert sequence, workloads D and E): client c
 *    inserts R + c, R + c + C, R + c + 2C, ... where R is N rounded up
 *    to a multiple of C, so every fresh key has one inserter and the keys
 *    of all clients together grow densely past the loaded ones;
 *  - with --writers owner (the default) a write (update, read-modify-
 *    write, delete) of a chosen key K goes to the key of its block
 *    K - K mod C .. that client owns, K - K mod C + c (one block back
 *    when that is past N): every key has one writer, which makes the
 *    end-of-run check exact, while the blocks keep the chosen
 *    distribution. --writers any writes K itself, as YCSB does.
 *
 * Values are value_size bytes: the first word is a value id, unique per
 * write (value_node/value_thread in ycsb.h, a sequence number below),
 * the others derived from the id and the key, so a read that returns a
 * torn value or another key's value is caught (corrupt). The histories
 * record the ids. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "apps/ycsb/ycsb.h"
#include <loco/rtx/crash.h>
#include <loco/history.h>
#include <loco/wait.h>

#define LAT_CAP (1u << 20)
#define SEQ_MASK ((UINT64_C(1) << 40) - 1)

static const char *const kind_name[K_N] = {
	[K_GET] = "get", [K_INSERT] = "insert", [K_UPDATE] = "update",
	[K_DELETE] = "delete", [K_SCAN] = "scan",
};

/* ---- values ------------------------------------------------------------- */

static uint64_t value_next(struct ycsb_worker *w)
{
	w->seq = (w->seq + 1) & SEQ_MASK;
	w->seq += !w->seq;
	return (uint64_t)(w->y->self + 1) << 48 | (uint64_t)w->idx << 40 | w->seq;
}

static uint64_t value_word(uint64_t id, uint64_t key, uint32_t i)
{
	return rng_mix((id ^ rng_mix(key)) + i);
}

static void value_fill(uint64_t *buf, uint32_t words, uint64_t key, uint64_t id)
{
	buf[0] = id;
	for (uint32_t i = 1; i < words; i++)
		buf[i] = value_word(id, key, i);
}

/* The id of VAL (LEN bytes, any alignment) read at KEY, or false if no
 * write of this driver put it there. */
static bool value_check(const struct ycsb *y, const void *val, uint32_t len,
			uint64_t key, uint64_t *id)
{
	const unsigned char *p = val;
	uint64_t word, first;
	if (len != y->o.value_size)
		return false;
	memcpy(&first, p, 8);
	if (first == TRK_ABSENT || value_node(first) >= LOCO_MAX_NODES)
		return false;
	for (uint32_t i = 1; i < len / 8; i++) {
		memcpy(&word, p + 8 * (size_t)i, 8);
		if (word != value_word(first, key, i))
			return false;
	}
	*id = first;
	return true;
}

/* ---- one index call -------------------------------------------------------- */

static void call_error(struct ycsb_worker *w, const char *what, uint64_t key,
		       int rc)
{
	fprintf(stderr, "loco-ycsb: node %u thread %u: %s of key %" PRIu64
		": %s\n", w->y->self, w->idx, what, key, loco_strerror(rc));
}

/* Run the call; 0, 1 for the map's "absent"/"present" outcome,
 * YCSB_CORRUPT for a get that read a value no write put there (counted),
 * or an error. *GOT: the id a get read (0 if absent). */
static int call_index(struct ycsb_worker *w, enum ycsb_kind k, uint64_t key,
		      uint64_t *got)
{
	const struct ycsb_index_ops *ops = w->y->o.ix;
	uint32_t len = 0, size = w->y->o.value_size;
	int rc;
	switch (k) {
	case K_GET:
		rc = ops->get(w->ixt, key, w->rval, &len);
		if (rc == -ENOENT) {
			*got = TRK_ABSENT;
			return 1;
		}
		if (!rc && !value_check(w->y, w->rval, len, key, got)) {
			w->n[X_CORRUPT]++;
			fprintf(stderr, "loco-ycsb: node %u thread %u: get of key %"
				PRIu64 ": a value no write put there (%u bytes)\n",
				w->y->self, w->idx, key, len);
			return YCSB_CORRUPT;
		}
		return rc;
	case K_INSERT:
		rc = ops->insert(w->ixt, key, w->val, size);
		return rc == -EEXIST ? 1 : rc;
	case K_UPDATE:
		rc = ops->update(w->ixt, key, w->val, size);
		return rc == -ENOENT ? 1 : rc;
	default:
		rc = ops->remove(w->ixt, key);
		return rc == -ENOENT ? 1 : rc;
	}
}

static void count_call(struct ycsb_worker *w, enum ycsb_kind k,
		       const struct loco_stats *s0)
{
	struct loco_stats s1;
	if (!w->measuring)
		return;
	loco_thread_stats(w->thr, &s1);
	w->n[X_GET + k]++;
	w->n[X_GET_RTT + k] += s1.rtts - s0->rtts;
	w->n[X_FLUSHES] += s1.flushes - s0->flushes;
}

/* ---- outages ------------------------------------------------------------------ */

/* Wait until every memory node is up (loco_peer_wait), then let the
 * index settle (its recover hook); again while a node dies under that. */
static int back_up(struct ycsb_worker *w)
{
	const struct ycsb *y = w->y;
	const struct loco_hosts *h = loco_mgr_hosts(y->mgr);
	int rc;
	do {
		rc = 0;
		for (uint32_t id = 0; id <= h->max_id && !rc; id++)
			if (h->node[id].present &&
			    h->node[id].role == LOCO_ROLE_MEMORY)
				rc = loco_peer_wait(y->mgr, id, YCSB_BACK_MS);
		if (!rc && y->o.ix->recover)
			rc = y->o.ix->recover(w->ixt);
	} while (rc == -LOCO_EDOWN);
	return rc;
}

int ycsb_outage(struct ycsb_worker *w, const char *what, uint64_t key)
{
	w->n[X_OUTAGES]++;
	int rc = back_up(w);
	if (!rc)
		return YCSB_UNKNOWN;
	fprintf(stderr, "loco-ycsb: node %u thread %u: %s of key %" PRIu64
		": a memory node died and %s\n", w->y->self, w->idx, what, key,
		rc == -LOCO_ELOST ? "came back without its memory" :
		loco_strerror(rc));
	return rc;
}

/* The sum of when this node last found each memory node up
 * (loco_peer_up_ns): it grows once one came back from an outage. */
static uint64_t up_sum(const struct ycsb *y)
{
	const struct loco_hosts *h = loco_mgr_hosts(y->mgr);
	uint64_t sum = 0;
	for (uint32_t id = 0; id <= h->max_id; id++)
		if (h->node[id].present && h->node[id].role == LOCO_ROLE_MEMORY)
			sum += loco_peer_up_ns(y->mgr, id);
	return sum;
}

/* --verify-after-outage: probe until a memory node is found down, then
 * wait it out (ycsb_outage), unless this worker saw an outage during the
 * run, or a memory node came back from one since the run began (a worker
 * descheduled across a short restart sees no -LOCO_EDOWN; it still lets
 * the index recover, as after an outage it saw). */
int ycsb_await_outage(struct ycsb_worker *w)
{
	struct loco_wait wt;
	uint32_t len = 0;
	if (w->n[X_OUTAGES])
		return 0;
	loco_wait_init(&wt, NULL, YCSB_OUTAGE_WAIT_MS);
	for (;;) {
		/* A get changes nothing: a probe of the index's nodes. */
		int rc = w->y->o.ix->get(w->ixt, 0, w->rval, &len);
		bool missed = (!rc || rc == -ENOENT) &&
			      up_sum(w->y) != w->up_sum;
		if (rc == -LOCO_EDOWN || missed) {
			rc = ycsb_outage(w, "--verify-after-outage probe", 0);
			return rc == YCSB_UNKNOWN ? 0 : rc;
		}
		if (rc && rc != -ENOENT)
			return rc;
		if (loco_wait_step(&wt)) {
			fprintf(stderr, "loco-ycsb: node %u thread %u: "
				"--verify-after-outage: no memory node went down "
				"within %d ms\n", w->y->self, w->idx,
				YCSB_OUTAGE_WAIT_MS);
			return -ETIMEDOUT;
		}
	}
}

int ycsb_call(struct ycsb_worker *w, enum ycsb_kind k, uint64_t key,
	      uint64_t id, uint64_t *got)
{
	char args[32] = "[]", res[32];
	struct loco_stats s0 = { 0 };
	uint64_t v = TRK_ABSENT;
	if (k == K_INSERT || k == K_UPDATE) {
		value_fill(w->val, w->y->o.value_size / 8, key, id);
		snprintf(args, sizeof(args), "[%" PRIu64 "]", id);
	}
	uint64_t hid = loco_hist_inv_u64(w->thr, kind_name[k], key, args);
	if (w->measuring)
		loco_thread_stats(w->thr, &s0);
	int rc = call_index(w, k, key, &v);
	count_call(w, k, &s0);
	if (rc == -LOCO_EDOWN) {
		/* Open: a memory node died under the call; its outcome is
		 * unknown, its write may be there or not (track.c). */
		loco_hist_info(w->thr, hid);
		w->n[X_UNKNOWN]++;
		track_result(w, k, key, id, YCSB_UNKNOWN, v);
		return ycsb_outage(w, kind_name[k], key);
	}
	if (rc < 0 || rc == YCSB_CORRUPT) {
		/* Open in the history: an error's outcome is unknown, and a
		 * corrupt value is no result of the map. */
		loco_hist_info(w->thr, hid);
		if (rc < 0) {
			call_error(w, kind_name[k], key, rc);
			track_result(w, k, key, id, rc, v);
		}
		return rc;
	}
	if (k == K_GET && rc == 0)
		snprintf(res, sizeof(res), "[%" PRIu64 "]", v);
	else
		snprintf(res, sizeof(res), k == K_GET ? "[null]" :
			 rc ? "[false]" : "[true]");
	loco_hist_ret(w->thr, hid, res);
	w->n[X_HIT] += w->measuring && k == K_GET && !rc;
	w->n[X_DONE_FALSE] += w->measuring && k != K_GET && rc;
	track_result(w, k, key, id, rc, v);
	if (got)
		*got = v;
	return rc;
}

/* ---- scans ------------------------------------------------------------------ */

/* The pairs of a scan of LO..HI: in order, inside the range, each value
 * written for its key. Appends them to RES ("[[k,v],...") while they fit
 * in its LEN bytes: a recorded scan (at most YCSB_SCAN_MAX_RECORDED
 * pairs) always fits. */
static bool scan_valid(struct ycsb_worker *w, uint64_t lo, uint64_t hi,
		       unsigned n, char *res, size_t len)
{
	size_t at = strlen(res);
	uint64_t prev = 0, id;
	for (unsigned i = 0; i < n; i++) {
		const struct ycsb_pair *p = &w->pairs[i];
		if (p->key < lo || p->key > hi || (i && p->key <= prev) ||
		    !value_check(w->y, p->val, p->len, p->key, &id))
			return false;
		prev = p->key;
		if (at < len)
			at += (size_t)snprintf(res + at, len - at, "%s[%" PRIu64 ",%"
					       PRIu64 "]", i ? "," : "", p->key, id);
	}
	return true;
}

/* Scan keys LO..LO+LEN-1 (at most LEN pairs, since keys are integers: the
 * result is the whole range, as lincheck's ordered-map scan wants). */
static int ycsb_scan(struct ycsb_worker *w, uint64_t lo, unsigned len)
{
	uint64_t hi = lo + len - 1;
	char args[48], res[YCSB_SCAN_MAX_RECORDED * 48 + 8] = "[[";
	struct loco_stats s0 = { 0 };
	unsigned n = 0;
	snprintf(args, sizeof(args), "[%" PRIu64 ",%" PRIu64 "]", lo, hi);
	uint64_t hid = loco_hist_inv(w->thr, "scan", NULL, args);
	if (w->measuring)
		loco_thread_stats(w->thr, &s0);
	int rc = w->y->o.ix->scan(w->ixt, lo, hi, len, w->pairs, &n);
	count_call(w, K_SCAN, &s0);
	if (rc == -LOCO_EDOWN) {
		loco_hist_info(w->thr, hid);
		w->n[X_UNKNOWN]++;
		rc = ycsb_outage(w, "scan", lo);
		return rc == YCSB_UNKNOWN ? 0 : rc;
	}
	if (rc) {
		loco_hist_info(w->thr, hid);
		call_error(w, "scan", lo, rc);
		return rc;
	}
	if (n > len || !scan_valid(w, lo, hi, n, res, sizeof(res) - 3)) {
		loco_hist_info(w->thr, hid);
		w->n[X_CORRUPT]++;
		fprintf(stderr, "loco-ycsb: node %u thread %u: scan of %" PRIu64
			"..%" PRIu64 ": pairs out of order, out of range or with "
			"values no write put there\n", w->y->self, w->idx, lo, hi);
		return 0;
	}
	strcat(res, "]]");
	loco_hist_ret(w->thr, hid, res);
	w->n[X_SCANNED] += w->measuring ? n : 0;
	return 0;
}

/* ---- keys ------------------------------------------------------------------- */

static uint64_t key_chosen(struct ycsb_worker *w)
{
	return zipf_next(&w->y->zipf, &w->rng);
}

/* The key a write of chosen key K goes to (module comment). */
static uint64_t key_written(const struct ycsb_worker *w, uint64_t k)
{
	const struct ycsb *y = w->y;
	if (y->o.writers == W_ANY)
		return k;
	uint64_t mine = k - k % y->clients + w->client;
	return mine < y->o.keys ? mine : mine - y->clients;
}

static uint64_t key_fresh(const struct ycsb_worker *w, uint64_t j)
{
	return w->y->fresh_base + w->client + j * w->y->clients;
}

/* Workload D's reads: the latest keys most often (YCSB's
 * SkewedLatestGenerator), counted back from this client's last insert. */
static uint64_t key_latest(struct ycsb_worker *w)
{
	uint64_t latest = w->fresh ? key_fresh(w, w->fresh - 1) : w->y->o.keys - 1;
	return latest - zipf_rank(&w->y->zipf, &w->rng);
}

/* ---- the mix ------------------------------------------------------------------ */

static int op_rmw(struct ycsb_worker *w, uint64_t key)
{
	int rc = ycsb_call(w, K_GET, key, 0, NULL);
	if (rc >= 0)
		rc = ycsb_call(w, K_UPDATE, key, value_next(w), NULL);
	w->n[X_RMW]++;
	return rc < 0 ? rc : 0;
}

static int op_insert_fresh(struct ycsb_worker *w)
{
	uint64_t key = key_fresh(w, w->fresh++);
	int rc = ycsb_call(w, K_INSERT, key, value_next(w), NULL);
	return rc < 0 ? rc : 0;
}

/* One operation of the mix (after --delete-ratio's share). */
static int op_mix(struct ycsb_worker *w, double u)
{
	const struct ycsb_mix *m = &w->y->o.mix;
	int rc;
	if (u < m->read) {
		uint64_t key = m->latest ? key_latest(w) : key_chosen(w);
		rc = ycsb_call(w, K_GET, key, 0, NULL);
	} else if ((u -= m->read) < m->update) {
		rc = ycsb_call(w, K_UPDATE, key_written(w, key_chosen(w)),
			       value_next(w), NULL);
	} else if ((u -= m->update) < m->insert) {
		rc = op_insert_fresh(w);
	} else if ((u -= m->insert) < m->scan) {
		unsigned len = 1 + (unsigned)(rng_next(&w->rng) % w->y->o.scan_max);
		rc = ycsb_scan(w, key_chosen(w), len);
	} else {
		rc = op_rmw(w, key_written(w, key_chosen(w)));
	}
	return rc < 0 ? rc : 0;
}

static int op_one(struct ycsb_worker *w)
{
	double u = rng_unit(&w->rng), d = w->y->o.delete_ratio;
	int rc;
	if (u < 2 * d) {
		uint64_t key = key_written(w, key_chosen(w));
		rc = u < d ? ycsb_call(w, K_DELETE, key, 0, NULL) :
		     ycsb_call(w, K_INSERT, key, value_next(w), NULL);
		return rc < 0 ? rc : 0;
	}
	return op_mix(w, (u - 2 * d) / (1 - 2 * d));
}

/* --target: wait until this thread's next operation is due at *NEXT
 * (every threads/target seconds); a thread that fell behind (a pause)
 * starts again from now instead of catching up in a burst. */
static void pace(const struct ycsb *y, uint64_t *next)
{
	uint64_t gap = (uint64_t)(1e9 * y->o.threads / y->o.target);
	uint64_t now = loco_now_ns();
	if (*next > now) {
		uint64_t ns = *next - now;
		struct timespec ts = { (time_t)(ns / 1000000000u),
				       (long)(ns % 1000000000u) };
		nanosleep(&ts, NULL);
	}
	*next = (*next > now ? *next : now) + gap;
}

static int run(struct ycsb_worker *w)
{
	const struct ycsb *y = w->y;
	uint64_t next = 0;
	int rc = 0;
	w->measuring = true;
	while (!rc && (!y->o.max_ops || w->issued < y->o.max_ops) &&
	       (!y->end_ns || loco_now_ns() < y->end_ns)) {
		if (y->o.target > 0)
			pace(y, &next);
		uint64_t t0 = loco_now_ns();
		rc = op_one(w);
		bench_lat_add(&w->lat, loco_now_ns() - t0);
		w->issued++;
		/* Relaxed: a progress counter. */
		atomic_fetch_add_explicit(&w->live_ops, 1, memory_order_relaxed);
	}
	w->measuring = false;
	w->end_ns = loco_now_ns();
	return rc;
}

/* ---- load ----------------------------------------------------------------------- */

/* Insert this client's loaded keys K = client, client + C, ... < N. */
static int load(struct ycsb_worker *w)
{
	const struct ycsb *y = w->y;
	int rc = 0;
	w->loading = true;
	for (uint64_t k = w->client; rc >= 0 && k < y->o.keys; k += y->clients) {
		rc = ycsb_call(w, K_INSERT, k, value_next(w), NULL);
		w->n[X_LOADED] += !rc;
		loco_crash_point("ycsb.load");
	}
	w->loading = false;
	return rc < 0 ? rc : 0;
}

/* ---- the worker ------------------------------------------------------------------- */

static int worker_setup(struct ycsb_worker *w)
{
	struct ycsb *y = w->y;
	w->client = y->member * y->o.threads + w->idx;
	w->rng = rng_mix(y->o.seed ^ (uint64_t)y->self << 32 ^ w->idx);
	w->val = malloc(y->o.value_size);
	w->rval = malloc(YCSB_VALUE_MAX);
	w->pairs = calloc(y->o.scan_max, sizeof(*w->pairs));
	if (!w->val || !w->rval || !w->pairs)
		return -ENOMEM;
	int rc = bench_lat_init(&w->lat, LAT_CAP);
	if (!rc)
		rc = track_init(w);
	if (!rc)
		rc = loco_thread_create(y->mgr, &w->thr);
	if (!rc && (rc = y->o.ix->thread_open(y->ix, w->thr, &w->ixt))) {
		fprintf(stderr, "loco-ycsb: node %u thread %u: %s: %s\n", y->self,
			w->idx, y->o.ix->name, loco_strerror(rc));
		w->ixt = NULL;
	}
	return rc;
}

static void worker_teardown(struct ycsb_worker *w)
{
	if (w->ixt)
		w->y->o.ix->thread_close(w->ixt);
	w->ixt = NULL;
	if (w->thr)
		loco_thread_destroy(w->thr);
	w->thr = NULL;
	track_fini(w);
	free(w->val);
	free(w->rval);
	free(w->pairs);
	w->val = w->rval = NULL;
	w->pairs = NULL;
}

/* --verify on the lowest node, by its first worker. */
static void verify(struct ycsb_worker *w)
{
	char msg[512] = "";
	int rc = w->y->o.ix->verify(w->ixt, msg, sizeof(msg));
	if (!rc)
		return;
	fprintf(stderr, "loco-ycsb: node %u: --verify: %s: %s\n", w->y->self,
		loco_strerror(rc), msg[0] ? msg : "(no detail)");
	w->n[X_VERIFY_FAILED]++;
}

void *ycsb_worker_main(void *arg)
{
	struct ycsb_worker *w = arg;
	struct ycsb *y = w->y;
	w->rc = worker_setup(w);
	if (!w->rc)
		w->rc = load(w);
	pthread_barrier_wait(&y->phase);   /* loaded here */
	pthread_barrier_wait(&y->phase);   /* every node loaded */
	w->up_sum = up_sum(y);
	if (!w->rc)
		w->rc = run(w);
	if (!w->rc && y->o.verify_after_outage)
		w->rc = ycsb_await_outage(w);
	/* Release: pairs with the acquire load in cl_progress_run; the
	 * worker's run counters are final. */
	atomic_fetch_add_explicit(&y->done, 1, memory_order_release);
	pthread_barrier_wait(&y->phase);   /* run over here */
	pthread_barrier_wait(&y->phase);   /* every node's writes are done */
	int rc = w->rc ? 0 : track_check(w);
	pthread_barrier_wait(&y->phase);   /* checked here */
	pthread_barrier_wait(&y->phase);   /* every node checked */
	w->rc = w->rc ? w->rc : rc;
	if (!w->rc && y->o.verify && w->idx == 0 &&
	    (y->ctl ? ycsb_ctl_leader(y) : cl_run_leader(&y->run)))
		verify(w);
	worker_teardown(w);
	return NULL;
}
