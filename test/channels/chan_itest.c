/* SPDX-License-Identifier: MIT */
/* loco-chan-itest: multi-process checks of the base channels, run on every
 * compute node through tools/loco-run. The lowest compute id is the owner
 * (owned-var) and the host (atomic-var). Each command ends with a "done"
 * barrier so no node leaves while others still use its memory.
 *
 *   barrier ROUNDS    ROUNDS waits on barrier "bar"; after each, every
 *                     row (every node's count) is >= this node's count
 *                     and at most one ahead.
 *   owned-var ITERS   a 256-byte owned_var (32 words, each = the version)
 *                     is stored ITERS times (pushed every 16th store)
 *                     while every other node pulls it continuously, with
 *                     a local load every 8th pull: no value is torn, none
 *                     goes backwards; prints the checksum retries. After
 *                     "done" every copy holds the last value.
 *   atomic-var ITERS  every node does ITERS FAA(1) on one atomic_var and
 *                     ITERS CAS-loop increments on another; after "done"
 *                     both hold exactly nodes x ITERS.
 *   sst ROUNDS        every node stores and pushes a 32-byte row ROUNDS
 *                     times, checking the rows it loads meanwhile (whole,
 *                     never going back); after "done" every row holds its
 *                     node's last value.
 *
 * Exit 0 on success, 1 on a failed check, 2 on usage errors. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <loco/channels/atomic_var.h>
#include <loco/channels/barrier.h>
#include <loco/channels/owned_var.h>
#include <loco/channels/sst.h>
#include "test/common/skip.h"

#define OV_WORDS 32
#define PUSH_EVERY 16
#define LOAD_EVERY 8
#define NAP_EVERY 64
#define END_TIMEOUT_MS 300000

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "chan-itest: node %u: check failed: %s: ", \
				self_id, #cond);                             \
			fprintf(stderr, __VA_ARGS__);                        \
			fputc('\n', stderr);                                 \
			return 1;                                            \
		}                                                            \
	} while (0)

#define CALL(expr)                                                           \
	do {                                                                 \
		int rc_ = (expr);                                            \
		CHECK(rc_ == 0, "%s", loco_strerror(rc_));                   \
	} while (0)

static unsigned self_id;

struct ctx {
	struct loco_mgr *mgr;
	struct loco_thread *thr;
	uint32_t self, first;       /* this node, lowest compute id */
	uint64_t members;           /* compute nodes, this one included */
	unsigned nodes;
	long n;                     /* ROUNDS or ITERS */
	struct loco_barrier start, done;  /* both created before the command */
};

/* Every channel of the command is created: wait until all nodes have
 * theirs, then start together. */
static int start_all(struct ctx *c)
{
	CALL(loco_mgr_wait_ready(c->mgr, -1));
	CALL(loco_barrier_wait(&c->start, c->thr, -1));
	return 0;
}

/* Wait for every node to finish (nodes may differ by far more than the
 * default timeout on an oversubscribed host). */
static int finish_all(struct ctx *c)
{
	CALL(loco_barrier_wait(&c->done, c->thr, END_TIMEOUT_MS));
	return 0;
}

/* Pushes must be complete before their owned_var is finished. */
static void cleanup_fence(struct ctx *c)
{
	int rc = loco_fence(c->thr, LOCO_FENCE_THREAD, 0);
	if (rc)
		fprintf(stderr, "chan-itest: node %u: fence: %s\n", c->self,
			loco_strerror(rc));
}

/* ---- barrier ---------------------------------------------------------- */

static int rows_check(struct ctx *c, struct loco_barrier *b, uint64_t round)
{
	for (uint64_t m = c->members; m; m &= m - 1) {
		uint32_t j = (uint32_t)__builtin_ctzll(m);
		uint64_t v = 0;
		CALL(loco_sst_load(&b->sst, j, &v));
		CHECK(v >= round && v <= round + 1,
		      "round %llu: node %u's count is %llu",
		      (unsigned long long)round, j, (unsigned long long)v);
	}
	return 0;
}

static int barrier_rounds(struct ctx *c, struct loco_barrier *b)
{
	if (start_all(c))
		return 1;
	uint64_t t0 = loco_now_ns();
	for (long r = 1; r <= c->n; r++) {
		int rc = loco_barrier_wait(b, c->thr, -1);
		CHECK(rc == 0, "wait %ld: %s", r, loco_strerror(rc));
		if (rows_check(c, b, (uint64_t)r))
			return 1;
	}
	printf("chan-itest: node %u: %ld barrier rounds in %.2f s, every row >= "
	       "own count after each\n", c->self, c->n,
	       (double)(loco_now_ns() - t0) / 1e9);
	return finish_all(c);
}

static int cmd_barrier(struct ctx *c)
{
	struct loco_barrier b;
	CALL(loco_barrier_init(&b, c->mgr, NULL, "bar", 0));
	int rc = barrier_rounds(c, &b);
	cleanup_fence(c);
	loco_barrier_fini(&b);
	return rc;
}

/* ---- owned-var --------------------------------------------------------- */

struct reader_stats {
	uint64_t pulls, loads, torn_errs, last_pull, last_load, distinct;
};

/* Every word equal: the value of one store; *V gets it. */
static bool whole(const uint64_t w[OV_WORDS], uint64_t *v)
{
	for (unsigned i = 1; i < OV_WORDS; i++)
		if (w[i] != w[0])
			return false;
	*v = w[0];
	return true;
}

static int owner_run(struct ctx *c, struct loco_owned_var *ov)
{
	struct timespec nap = { 0, 20000 };
	uint64_t w[OV_WORDS];
	for (long v = 1; v <= c->n; v++) {
		for (unsigned i = 0; i < OV_WORDS; i++)
			w[i] = (uint64_t)v;
		CALL(loco_owned_var_store(ov, w));
		if (v % PUSH_EVERY == 0)
			CALL(loco_owned_var_push(ov, c->thr, 0, NULL));
		/* Nodes may outnumber cores: let the readers run meanwhile. */
		if (v % NAP_EVERY == 0)
			nanosleep(&nap, NULL);
	}
	struct loco_ack ack;
	loco_ack_clear(&ack);
	CALL(loco_owned_var_push(ov, c->thr, LOCO_PUSH_PLACE, &ack));
	CALL(loco_ack_wait(c->thr, &ack, -1));
	printf("chan-itest: node %u (owner): %ld stores, %ld pushes\n", c->self,
	       c->n, c->n / PUSH_EVERY + 1);
	return 0;
}

/* One pull (and every LOAD_EVERY-th time a load); checks and counts. */
static int reader_step(struct ctx *c, struct loco_owned_var *ov,
		       struct reader_stats *s)
{
	uint64_t w[OV_WORDS], v;
	int rc = loco_owned_var_pull(ov, c->thr, w);
	if (rc == -LOCO_ETORN) {
		s->torn_errs++;
		return 0;
	}
	CALL(rc);
	CHECK(whole(w, &v), "pull %llu returned a torn value",
	      (unsigned long long)s->pulls);
	CHECK(v >= s->last_pull && v <= (uint64_t)c->n, "pull went from %llu to "
	      "%llu", (unsigned long long)s->last_pull, (unsigned long long)v);
	s->distinct += v != s->last_pull;
	s->last_pull = v;
	if (++s->pulls % LOAD_EVERY)
		return 0;
	rc = loco_owned_var_load(ov, w);
	if (rc == -LOCO_ETORN) {
		s->torn_errs++;
		return 0;
	}
	CALL(rc);
	CHECK(whole(w, &v), "load returned a torn value");
	CHECK(v >= s->last_load, "load went from %llu to %llu",
	      (unsigned long long)s->last_load, (unsigned long long)v);
	s->last_load = v;
	s->loads++;
	return 0;
}

static int reader_run(struct ctx *c, struct loco_owned_var *ov)
{
	struct reader_stats s = { 0 };
	while (s.last_pull < (uint64_t)c->n)
		if (reader_step(c, ov, &s))
			return 1;
	printf("chan-itest: node %u (reader): %llu pulls (%llu distinct "
	       "versions), %llu loads, 0 torn values, %llu checksum retries, "
	       "%llu -LOCO_ETORN\n", c->self, (unsigned long long)s.pulls,
	       (unsigned long long)s.distinct, (unsigned long long)s.loads,
	       (unsigned long long)loco_owned_var_retries(ov),
	       (unsigned long long)s.torn_errs);
	return 0;
}

static int owned_var_run(struct ctx *c, struct loco_owned_var *ov)
{
	uint64_t w[OV_WORDS], v;
	if (start_all(c))
		return 1;
	if (c->self == c->first ? owner_run(c, ov) : reader_run(c, ov))
		return 1;
	if (finish_all(c))
		return 1;
	CALL(loco_owned_var_load(ov, w));
	CHECK(whole(w, &v) && v == (uint64_t)c->n, "copy holds %llu after done",
	      (unsigned long long)w[0]);
	return 0;
}

static int cmd_owned_var(struct ctx *c)
{
	struct loco_owned_var ov;
	CALL(loco_owned_var_init(&ov, c->mgr, NULL, "ov", c->first,
				 OV_WORDS * 8, 0));
	int rc = owned_var_run(c, &ov);
	cleanup_fence(c);
	loco_owned_var_fini(&ov);
	return rc;
}

/* ---- atomic-var ---------------------------------------------------------- */

static int faa_run(struct ctx *c, struct loco_atomic_var *av)
{
	uint64_t prev = 0, old;
	for (long i = 0; i < c->n; i++) {
		CALL(loco_atomic_var_faa(av, c->thr, 1, &old));
		CHECK(i == 0 || old > prev, "FAA returned %llu after %llu",
		      (unsigned long long)old, (unsigned long long)prev);
		prev = old;
	}
	return 0;
}

static int cas_run(struct ctx *c, struct loco_atomic_var *av, uint64_t *fails)
{
	for (long i = 0; i < c->n; i++) {
		uint64_t guess = loco_atomic_var_cached(av), old;
		for (;;) {
			CALL(loco_atomic_var_cas(av, c->thr, guess, guess + 1, &old));
			if (old == guess)
				break;
			guess = old;
			(*fails)++;
		}
	}
	return 0;
}

static int atomic_var_run(struct ctx *c, struct loco_atomic_var *faa,
			  struct loco_atomic_var *cas)
{
	uint64_t fails = 0, total_faa = 0, total_cas = 0;
	uint64_t want = (uint64_t)c->nodes * (uint64_t)c->n;
	if (start_all(c))
		return 1;
	uint64_t t0 = loco_now_ns();
	if (faa_run(c, faa) || cas_run(c, cas, &fails))
		return 1;
	double secs = (double)(loco_now_ns() - t0) / 1e9;
	if (finish_all(c))
		return 1;
	CALL(loco_atomic_var_read(faa, c->thr, &total_faa));
	CALL(loco_atomic_var_read(cas, c->thr, &total_cas));
	CHECK(total_faa == want, "FAA total %llu, expected %llu",
	      (unsigned long long)total_faa, (unsigned long long)want);
	CHECK(total_cas == want, "CAS total %llu, expected %llu",
	      (unsigned long long)total_cas, (unsigned long long)want);
	CHECK(loco_atomic_var_cached(cas) == want, "cached copy");
	printf("chan-itest: node %u: FAA total %llu, CAS-loop total %llu "
	       "(expected %llu, %llu failed CAS here) in %.2f s\n", c->self,
	       (unsigned long long)total_faa, (unsigned long long)total_cas,
	       (unsigned long long)want, (unsigned long long)fails, secs);
	/* The host stays until every node read the totals: on a transport
	 * whose memory leaves with its process a late read would fail. */
	return finish_all(c);
}

static int cmd_atomic_var(struct ctx *c)
{
	struct loco_atomic_var faa, cas;
	CALL(loco_atomic_var_init(&faa, c->mgr, NULL, "faa", c->first, 0));
	int rc = loco_atomic_var_init(&cas, c->mgr, NULL, "cas", c->first, 0);
	if (!rc) {
		rc = atomic_var_run(c, &faa, &cas);
		loco_atomic_var_fini(&cas);
	}
	loco_atomic_var_fini(&faa);
	return rc ? 1 : 0;
}

/* ---- sst ------------------------------------------------------------------ */

struct row {
	uint64_t node, round, mix, inv;
};

static struct row row_make(uint32_t node, uint64_t round)
{
	return (struct row){ node, round, round * 1000003u + node, ~round };
}

/* Load every row; each must be one of its node's stores (or the initial
 * zero row), not older than LAST[node]. -LOCO_ETORN (a push being placed)
 * skips the row. */
static int rows_scan(struct ctx *c, struct loco_sst *sst, uint64_t *last,
		     uint64_t *torn_errs)
{
	for (uint64_t m = c->members; m; m &= m - 1) {
		uint32_t j = (uint32_t)__builtin_ctzll(m);
		struct row r;
		int rc = loco_sst_load(sst, j, &r);
		if (rc == -LOCO_ETORN) {
			(*torn_errs)++;
			continue;
		}
		CALL(rc);
		struct row want = r.round ? row_make(j, r.round) : (struct row){ 0 };
		CHECK(!memcmp(&r, &want, sizeof(r)), "row %u is not a store of "
		      "node %u (round %llu)", j, j, (unsigned long long)r.round);
		CHECK(r.round >= last[j], "row %u went from round %llu to %llu", j,
		      (unsigned long long)last[j], (unsigned long long)r.round);
		last[j] = r.round;
	}
	return 0;
}

/* After "done": every row holds its node's last round. */
static int rows_final(struct ctx *c, struct loco_sst *sst, uint64_t *retries)
{
	for (uint64_t m = c->members; m; m &= m - 1) {
		uint32_t j = (uint32_t)__builtin_ctzll(m);
		struct row r, want = row_make(j, (uint64_t)c->n);
		CALL(loco_sst_load(sst, j, &r));
		CHECK(!memcmp(&r, &want, sizeof(r)), "row %u holds round %llu after "
		      "done", j, (unsigned long long)r.round);
		*retries += loco_owned_var_retries(loco_sst_row(sst, j));
	}
	return 0;
}

static int sst_run(struct ctx *c, struct loco_sst *sst)
{
	uint64_t last[LOCO_MAX_NODES] = { 0 }, torn_errs = 0, retries = 0;
	if (start_all(c))
		return 1;
	for (long r = 1; r <= c->n; r++) {
		struct row mine = row_make(c->self, (uint64_t)r);
		CALL(loco_sst_store_mine(sst, &mine));
		CALL(loco_sst_push_broadcast(sst, c->thr, 0, NULL));
		if (rows_scan(c, sst, last, &torn_errs))
			return 1;
	}
	if (finish_all(c) || rows_final(c, sst, &retries))
		return 1;
	printf("chan-itest: node %u: %u rows converged to round %ld (%llu "
	       "checksum retries, %llu -LOCO_ETORN while running)\n", c->self,
	       c->nodes, c->n, (unsigned long long)retries,
	       (unsigned long long)torn_errs);
	return 0;
}

static int cmd_sst(struct ctx *c)
{
	struct loco_sst sst;
	CALL(loco_sst_init(&sst, c->mgr, NULL, "sst", sizeof(struct row), 0));
	int rc = sst_run(c, &sst);
	cleanup_fence(c);
	loco_sst_fini(&sst);
	return rc;
}

/* ---- main ------------------------------------------------------------------ */

static int usage(void)
{
	fprintf(stderr, "usage: loco-chan-itest barrier ROUNDS | owned-var ITERS "
		"| atomic-var ITERS | sst ROUNDS\n");
	return 2;
}

static int dispatch(struct ctx *c, const char *cmd)
{
	if (!strcmp(cmd, "barrier"))
		return cmd_barrier(c);
	if (!strcmp(cmd, "owned-var"))
		return cmd_owned_var(c);
	if (!strcmp(cmd, "atomic-var"))
		return cmd_atomic_var(c);
	return cmd_sst(c);
}

static bool known(const char *cmd)
{
	return !strcmp(cmd, "barrier") || !strcmp(cmd, "owned-var") ||
	       !strcmp(cmd, "atomic-var") || !strcmp(cmd, "sst");
}

int main(int argc, char **argv)
{
	struct ctx c = { .n = 0 };
	struct loco_opts opts;
	char err[512], *end;
	if (loco_opts_parse(&opts, &argc, argv, err, sizeof(err))) {
		fprintf(stderr, "chan-itest: %s\n", err);
		return 2;
	}
	if (argc != 3 || !known(argv[1]))
		return usage();
	c.n = strtol(argv[2], &end, 10);
	if (*end || c.n <= 0)
		return usage();
	int started = loco_mgr_create(&opts, &c.mgr);
	if (started)
		return test_mgr_create_status(started);
	c.self = self_id = loco_mgr_id(c.mgr);
	c.members = loco_mgr_compute_peers(c.mgr) | UINT64_C(1) << c.self;
	c.first = (uint32_t)__builtin_ctzll(c.members);
	c.nodes = (unsigned)__builtin_popcountll(c.members);
	int rc = loco_thread_create(c.mgr, &c.thr);
	if (!rc)
		rc = loco_barrier_init(&c.start, c.mgr, NULL, "start", 0);
	if (!rc && (rc = loco_barrier_init(&c.done, c.mgr, NULL, "done", 0)))
		loco_barrier_fini(&c.start);
	if (!rc) {
		rc = dispatch(&c, argv[1]);
		cleanup_fence(&c);
		loco_barrier_fini(&c.done);
		loco_barrier_fini(&c.start);
	} else {
		fprintf(stderr, "chan-itest: %s\n", loco_strerror(rc));
	}
	if (c.thr && loco_thread_destroy(c.thr))
		rc = rc ? rc : 1;
	loco_mgr_destroy(c.mgr);
	return rc ? 1 : 0;
}
