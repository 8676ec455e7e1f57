/* SPDX-License-Identifier: MIT */
/* loco-lin-itest: channel runs that record histories for loco-lincheck
 * (LOCO_HISTORY must be set; tools/loco-run --env passes it).
 *
 *   atomic-var OPS [--broken]  random read/write/cas/faa on one atomic_var
 *                              (model counter). --broken: FAA done as a
 *                              READ then a WRITE, which loses updates.
 *   owned-var OPS [--broken]   the lowest node stores versions of a
 *                              256-byte owned_var (every word = version)
 *                              every ~2 us (~1 ms after 16 x OPS)
 *                              while the others pull OPS times
 *                              (model register). --broken:
 *                              readers READ the owner's copy raw, without
 *                              the checksum, and may return a torn mix.
 *   rtx-update OPS [--broken]  random read/write/cas/faa on one rTX object
 *                              (model counter): reads are read-only
 *                              transactions, the others read the object
 *                              with loco_rtx_read_for_update (no_opt1: the
 *                              logged locks with the data READs, the
 *                              4-round-trip commit). --broken: FAA as a
 *                              read-only transaction, then a read for
 *                              update writing what the first one read + 1,
 *                              which loses updates.
 * Exit 0 when the run completed (the verdict is the checker's). */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <loco/channels/atomic_var.h>
#include <loco/channels/barrier.h>
#include <loco/channels/owned_var.h>
#include <loco/history.h>
#include <loco/rtx/rtx.h>

#define OV_LEN 256
#define TORN UINT64_C(0x4000000000000000)

struct ctx {
	struct loco_mgr *mgr;
	struct loco_thread *thr;
	struct loco_barrier start, done;
	long ops;
	bool broken;
	uint64_t rng;
};

static uint64_t rnd(struct ctx *c)
{
	c->rng ^= c->rng << 13;
	c->rng ^= c->rng >> 7;
	c->rng ^= c->rng << 17;
	return c->rng;
}

/* Ops are paced so each node's run spans ~100 ms: the nodes overlap even
 * when the host preempts them for milliseconds, so races (and a broken
 * variant's anomalies) happen in every run. */
static void pace(void)
{
	struct timespec ts = { 0, 20000 };
	nanosleep(&ts, NULL);
}

static uint32_t lowest_compute(struct ctx *c)
{
	uint64_t all = loco_mgr_compute_peers(c->mgr) |
		       UINT64_C(1) << loco_mgr_id(c->mgr);
	return (uint32_t)__builtin_ctzll(all);
}

/* ---- atomic_var / counter ------------------------------------------------- */

/* The broken FAA: not atomic, so concurrent ones lose updates. */
static int faa_broken(struct loco_atomic_var *av, struct ctx *c, uint64_t add,
		      uint64_t *old)
{
	const struct loco_rregion *rr = loco_channel_remote(&av->base, av->idx,
							    av->host);
	uint64_t v = 0;
	int rc = rr ? loco_read(c->thr, rr, 0, &v, 8) : -ENOTCONN;
	uint64_t nv = v + add, t0 = loco_now_ns();
	/* A slow client between its READ and its WRITE (5 us): wide enough
	 * that paced ops of other nodes land in the window in every run. */
	while (loco_now_ns() - t0 < 5000)
		;
	if (!rc)
		rc = loco_write(c->thr, rr, 0, &nv, 8);
	*old = v;
	return rc;
}

static int av_op(struct loco_atomic_var *av, struct ctx *c)
{
	char args[64], res[64];
	uint64_t v = 0, a = rnd(c) % 4, b = rnd(c) % 4, id;
	int rc, kind = c->broken ? 3 : (int)(rnd(c) % 4);
	switch (kind) {
	case 0:
		id = loco_hist_inv(c->thr, "read", "\"av\"", NULL);
		rc = loco_atomic_var_read(av, c->thr, &v);
		snprintf(res, sizeof(res), "[%" PRIu64 "]", v);
		break;
	case 1:
		snprintf(args, sizeof(args), "[%" PRIu64 "]", a);
		id = loco_hist_inv(c->thr, "write", "\"av\"", args);
		rc = loco_atomic_var_write(av, c->thr, a);
		snprintf(res, sizeof(res), "[]");
		break;
	case 2:
		snprintf(args, sizeof(args), "[%" PRIu64 ",%" PRIu64 "]", a, b);
		id = loco_hist_inv(c->thr, "cas", "\"av\"", args);
		rc = loco_atomic_var_cas(av, c->thr, a, b, &v);
		snprintf(res, sizeof(res), "[%s]", v == a ? "true" : "false");
		break;
	default:
		id = loco_hist_inv(c->thr, "faa", "\"av\"", "[1]");
		rc = c->broken ? faa_broken(av, c, 1, &v) :
				 loco_atomic_var_faa(av, c->thr, 1, &v);
		snprintf(res, sizeof(res), "[%" PRIu64 "]", v);
		break;
	}
	if (rc)
		loco_hist_info(c->thr, id);
	else
		loco_hist_ret(c->thr, id, res);
	return rc;
}

static int atomic_var_run(struct ctx *c)
{
	struct loco_atomic_var av;
	int rc = loco_atomic_var_init(&av, c->mgr, NULL, "av", lowest_compute(c), 0);
	if (rc)
		return rc;
	if (!(rc = loco_mgr_wait_ready(c->mgr, -1)) &&
	    !(rc = loco_barrier_wait(&c->start, c->thr, -1))) {
		for (long i = 0; i < c->ops && !rc; i++) {
			rc = av_op(&av, c);
			pace();
		}
		if (!rc)
			rc = loco_barrier_wait(&c->done, c->thr, -1);
	}
	loco_atomic_var_fini(&av);
	return rc;
}

/* ---- owned_var / register ----------------------------------------------------- */

static int ov_write(struct loco_owned_var *ov, struct ctx *c, uint64_t v)
{
	uint64_t val[OV_LEN / 8];
	char args[32];
	for (unsigned i = 0; i < OV_LEN / 8; i++)
		val[i] = v;
	snprintf(args, sizeof(args), "[%" PRIu64 "]", v);
	uint64_t id = loco_hist_inv(c->thr, "write", "\"ov\"", args);
	int rc = loco_owned_var_store(ov, val);
	if (!rc)
		loco_hist_ret(c->thr, id, NULL);
	return rc;
}

/* The value a read returns: the version if every word agrees, else a
 * number no write ever wrote. */
static uint64_t ov_value(const uint64_t *val)
{
	for (unsigned i = 1; i < OV_LEN / 8; i++)
		if (val[i] != val[0])
			return TORN | (val[0] & 0xffff) << 16 | (val[i] & 0xffff);
	return val[0];
}

static int ov_read(struct loco_owned_var *ov, struct ctx *c)
{
	uint64_t buf[OV_LEN / 8 + 2];
	char res[32];
	uint64_t id = loco_hist_inv(c->thr, "read", "\"ov\"", NULL);
	int rc;
	if (c->broken) {
		const struct loco_rregion *rr = loco_channel_remote(&ov->base,
								    ov->idx,
								    ov->owner);
		rc = rr ? loco_read(c->thr, rr, 0, buf, sizeof(buf)) : -ENOTCONN;
		memmove(buf, buf + 2, OV_LEN);  /* skip {version, sum} */
	} else {
		rc = loco_owned_var_pull(ov, c->thr, buf);
	}
	if (rc) {
		loco_hist_info(c->thr, id);
		return rc;
	}
	uint64_t v = ov_value(buf);
	snprintf(res, sizeof(res), "[%" PRIu64 "]", v ? v : 0);
	/* The register starts as null; version 0 is the all-zero initial. */
	loco_hist_ret(c->thr, id, v ? res : "[null]");
	return 0;
}

/* Owner: store versions until every reader has finished (counted on
 * DONE), so that reads overlap stores all along: every ~2 us for the first
 * 16 x OPS versions, then every ~1 ms, so that slow readers (ucx-tcp on a
 * loaded host) do not make a history too long to check. */
static int ov_owner(struct loco_owned_var *ov, struct loco_atomic_var *done,
		    struct ctx *c)
{
	uint64_t readers = (uint64_t)__builtin_popcountll(
		loco_mgr_compute_peers(c->mgr)), finished = 0, v = 0;
	uint64_t fast = 16 * (uint64_t)c->ops;
	int rc = 0;
	while (!rc && finished < readers) {
		for (int i = 0; i < 64 && !rc; i++) {
			rc = ov_write(ov, c, ++v);
			uint64_t t0 = loco_now_ns(), gap = v < fast ? 2000 : 1000000;
			while (loco_now_ns() - t0 < gap)
				if (gap > 2000)
					sched_yield();
		}
		if (!rc)
			rc = loco_atomic_var_read(done, c->thr, &finished);
	}
	return rc;
}

static int ov_reader(struct loco_owned_var *ov, struct loco_atomic_var *done,
		     struct ctx *c)
{
	int rc = 0;
	for (long i = 0; i < c->ops && !rc; i++) {
		rc = ov_read(ov, c);
		pace();
	}
	uint64_t old;
	return rc ? rc : loco_atomic_var_faa(done, c->thr, 1, &old);
}

static int owned_var_run(struct ctx *c)
{
	struct loco_owned_var ov;
	struct loco_atomic_var done;
	uint32_t owner = lowest_compute(c);
	int rc = loco_owned_var_init(&ov, c->mgr, NULL, "ov", owner, OV_LEN, 0);
	if (rc)
		return rc;
	if ((rc = loco_atomic_var_init(&done, c->mgr, NULL, "ovdone", owner, 0))) {
		loco_owned_var_fini(&ov);
		return rc;
	}
	if (!(rc = loco_mgr_wait_ready(c->mgr, -1)) &&
	    !(rc = loco_barrier_wait(&c->start, c->thr, -1))) {
		rc = loco_owned_var_is_owner(&ov) ? ov_owner(&ov, &done, c) :
						    ov_reader(&ov, &done, c);
		if (!rc)
			rc = loco_barrier_wait(&c->done, c->thr, -1);
	}
	loco_atomic_var_fini(&done);
	loco_owned_var_fini(&ov);
	return rc;
}

/* ---- rtx / counter ------------------------------------------------------------------ */

struct rx {
	struct loco_rtx_worker *w;
	loco_raddr_t obj;
};

static int rx_get(struct rx *r, uint64_t *v)
{
	int rc;
	LOCO_RTX_BLOCK(r->w, rc) {
		const uint64_t *p;
		if ((rc = loco_rtx_read(r->w, r->obj, (const void **)&p)))
			continue;
		*v = p ? *p : 0;
	}
	return rc;
}

/* KIND 1: write A; 2: cas A -> B (*OK); 3: faa 1 (*OLD: before). */
static int rx_update(struct rx *r, int kind, uint64_t a, uint64_t b,
		     uint64_t *old, bool *ok)
{
	int rc;
	LOCO_RTX_BLOCK(r->w, rc) {
		const void *v[1];
		if ((rc = loco_rtx_read_for_update(r->w, 1, &r->obj, v)))
			continue;
		uint64_t cur = v[0] ? *(const uint64_t *)v[0] : 0, nv;
		*old = cur;
		*ok = kind != 2 || cur == a;
		nv = kind == 1 ? a : kind == 2 ? (*ok ? b : cur) : cur + 1;
		rc = loco_rtx_write(r->w, r->obj, &nv);
	}
	return rc;
}

/* The broken FAA: read in one transaction, write in another, a slow
 * client between them (5 us, as faa_broken's), so that paced ops of
 * other nodes land in the window in every run, a busy host's too. */
static int rx_faa_broken(struct rx *r, uint64_t *old)
{
	int rc = rx_get(r, old);
	uint64_t t0 = loco_now_ns();
	while (!rc && loco_now_ns() - t0 < 5000)
		;
	LOCO_RTX_BLOCK(r->w, rc) {
		const void *v[1];
		uint64_t nv = *old + 1;
		if (!(rc = loco_rtx_read_for_update(r->w, 1, &r->obj, v)))
			rc = loco_rtx_write(r->w, r->obj, &nv);
	}
	return rc;
}

static int rx_op(struct rx *r, struct ctx *c)
{
	char args[64], res[64];
	uint64_t v = 0, a = rnd(c) % 4, b = rnd(c) % 4, id;
	bool ok = false;
	int rc, kind = c->broken ? 3 : (int)(rnd(c) % 4);
	switch (kind) {
	case 0:
		id = loco_hist_inv(c->thr, "read", "\"rx\"", NULL);
		rc = rx_get(r, &v);
		snprintf(res, sizeof(res), "[%" PRIu64 "]", v);
		break;
	case 1:
		snprintf(args, sizeof(args), "[%" PRIu64 "]", a);
		id = loco_hist_inv(c->thr, "write", "\"rx\"", args);
		rc = rx_update(r, 1, a, b, &v, &ok);
		snprintf(res, sizeof(res), "[]");
		break;
	case 2:
		snprintf(args, sizeof(args), "[%" PRIu64 ",%" PRIu64 "]", a, b);
		id = loco_hist_inv(c->thr, "cas", "\"rx\"", args);
		rc = rx_update(r, 2, a, b, &v, &ok);
		snprintf(res, sizeof(res), "[%s]", ok ? "true" : "false");
		break;
	default:
		id = loco_hist_inv(c->thr, "faa", "\"rx\"", "[1]");
		rc = c->broken ? rx_faa_broken(r, &v) :
				 rx_update(r, 3, 1, 0, &v, &ok);
		snprintf(res, sizeof(res), "[%" PRIu64 "]", v);
		break;
	}
	if (rc)
		loco_hist_info(c->thr, id);
	else
		loco_hist_ret(c->thr, id, res);
	return rc;
}

static int rtx_update_run(struct ctx *c)
{
	struct loco_rtx_opts o = { .name = "linrx", .objects = 1,
				   .data_len = 8, .no_opt1 = true };
	struct loco_rtx *x;
	struct rx r;
	int rc = loco_rtx_create(c->mgr, &o, &x);
	if (rc)
		return rc;
	r.obj = loco_rtx_obj(x, (uint32_t)__builtin_ctzll(loco_rtx_nodes(x)), 0);
	if (!(rc = loco_rtx_worker_create(x, c->thr, &r.w))) {
		if (!(rc = loco_mgr_wait_ready(c->mgr, -1)) &&
		    !(rc = loco_barrier_wait(&c->start, c->thr, -1))) {
			for (long i = 0; i < c->ops && !rc; i++) {
				rc = rx_op(&r, c);
				pace();
			}
			if (!rc)
				rc = loco_barrier_wait(&c->done, c->thr, -1);
		}
		int drc = loco_rtx_worker_destroy(r.w);
		rc = rc ? rc : drc;
	}
	loco_rtx_destroy(x);
	return rc;
}

/* ---- main -------------------------------------------------------------------------- */

static int run(struct ctx *c, const char *cmd)
{
	int rc = loco_barrier_init(&c->start, c->mgr, NULL, "start", 0);
	if (rc)
		return rc;
	if (!(rc = loco_barrier_init(&c->done, c->mgr, NULL, "done", 0))) {
		rc = !strcmp(cmd, "atomic-var") ? atomic_var_run(c) :
		     !strcmp(cmd, "rtx-update") ? rtx_update_run(c) :
						 owned_var_run(c);
		int drc = loco_thread_destroy(c->thr);  /* completes the last pushes */
		rc = rc ? rc : drc;
		c->thr = NULL;
		loco_barrier_fini(&c->done);
	}
	loco_barrier_fini(&c->start);
	return rc;
}

int main(int argc, char **argv)
{
	struct loco_opts opts;
	struct ctx c = { .ops = 0 };
	char err[512];
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (loco_opts_parse(&opts, &argc, argv, err, sizeof(err))) {
		fprintf(stderr, "lin-itest: %s\n", err);
		return 2;
	}
	if (argc < 3 || (strcmp(argv[1], "atomic-var") &&
			 strcmp(argv[1], "owned-var") &&
			 strcmp(argv[1], "rtx-update")) ||
	    (c.ops = atol(argv[2])) <= 0) {
		fprintf(stderr, "usage: loco-lin-itest atomic-var|owned-var|rtx-update OPS "
			"[--broken]\n");
		return 2;
	}
	c.broken = argc > 3 && !strcmp(argv[3], "--broken");
	c.rng = 0x9e3779b97f4a7c15ull * (uint64_t)(opts.node_id + 1);
	if (!getenv("LOCO_HISTORY"))
		fprintf(stderr, "lin-itest: LOCO_HISTORY is not set; nothing recorded\n");
	if (loco_mgr_create(&opts, &c.mgr))
		return 1;
	int rc = loco_thread_create(c.mgr, &c.thr);
	if (!rc)
		rc = run(&c, argv[1]);
	if (c.thr)
		loco_thread_destroy(c.thr);
	if (rc)
		fprintf(stderr, "lin-itest: node %d: %s\n", opts.node_id,
			loco_strerror(rc));
	loco_mgr_destroy(c.mgr);
	return rc ? 1 : 0;
}
