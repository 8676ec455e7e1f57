/* SPDX-License-Identifier: MIT */
/* loco-opbench: the cost of a single one-sided operation (READ, WRITE,
 * CAS, FAA of 8 bytes) on this node's transport, side by side with a
 * plain C11 atomic on the same shared mapping (the region's local copy:
 * the physical limit of this host).
 *
 * For each operation, in this order: the atomic (acquire load, release
 * store, seq_cst CAS, seq_cst FAA: what the shm transport executes), the
 * synchronous loco op (loco_read, loco_write, loco_cas, loco_faa, one at a
 * time in a loop shaped as the atomic's: its latency), for READ also
 * loco_words_read (the region's checks made once, by loco_words_init),
 * and the loco op with --window ops posted per wait (its throughput). Each
 * phase runs --duration seconds in batches of BATCH ops timed together
 * (one clock read a batch; p50/p99 are of the batches' per-op times).
 * Every CAS succeeds (it expects the value it left) and every READ
 * checks the value the atomic phase or the WRITEs left, so a wrong
 * transport fails the run. One JSON line a phase:
 * "op", "impl" (atomic, loco, loco-words, loco-window), "window", "ns_per_op",
 * "p50_ns_per_op" (the median batch's time over BATCH: what a run on a
 * busy host measures best, as it leaves out the batches another process
 * preempted) and, on loco lines, "vs_atomic" and "p50_vs_atomic" (each
 * over the atomic's). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/common/bench.h"
#include "apps/common/local.h"
#include "apps/common/opts.h"

/* 256: the clock read that ends a batch (some 20 ns) adds under 0.1 ns
 * to an op. */
#define BATCH 256
#define LAT_CAP (1u << 22)
#define MAX_WINDOW 128

enum op { OP_READ, OP_WRITE, OP_CAS, OP_FAA, OP_N };
static const char *const op_name[OP_N] = { "read", "write", "cas", "faa" };

struct ob {
	double duration;
	unsigned window;
	unsigned ops_mask;
	struct loco_mgr *mgr;
	struct loco_thread *thr;
	struct loco_region reg;
	struct loco_rregion rr;
	struct loco_words words;    /* rr's words, for the loco-words phase */
	_Atomic uint64_t *word;     /* the region's word, local mapping */
	uint64_t expect;            /* the word's value (this is its only user) */
	uint64_t sink;
	double atomic_ns[OP_N];
	double atomic_p50_ns[OP_N];
};

struct phase {
	const char *impl;
	unsigned window;
	bool words;                 /* READs through o->words */
	uint64_t ops, ns;
	struct bench_lat lat;
	struct bench_lat batch;     /* ns of each batch */
	struct loco_stats st;
};

/* ---- one batch of each kind --------------------------------------------- */

/* The batch functions are never inlined, so that callgrind can count
 * their instructions per op (tools/bench/opcount), and each starts on a
 * cache line: a change elsewhere in the file then does not move their
 * loops across instruction fetch windows. Unaligned, an unrelated 0x60
 * bytes more code before it took the inline READ's loop from 0.95 to
 * 1.6 ns an op on the 2-core VM's EPYC, with the same instructions. */
#define BATCH_FN __attribute__((noinline, aligned(64)))

/* BATCH plain atomics on the shared mapping: one loop per op, the op
 * chosen once before it (a switch inside the loop costs the atomic more
 * than its op, and hid half of what loco's op costs). */
static BATCH_FN int batch_atomic(struct ob *o, enum op op)
{
	_Atomic uint64_t *word = o->word;
	uint64_t v, e = o->expect, sum = 0;
	switch (op) {
	case OP_READ:
		for (unsigned i = 0; i < BATCH; i++)
			/* Acquire: as the shm transport's READ (pairs with WRITE). */
			sum += atomic_load_explicit(word, memory_order_acquire);
		o->sink += sum;
		return sum != (uint64_t)BATCH * e ? -EIO : 0;
	case OP_WRITE:
		for (unsigned i = 0; i < BATCH; i++)
			/* Release: as the shm transport's WRITE. */
			atomic_store_explicit(word, e, memory_order_release);
		return 0;
	case OP_CAS:
		for (unsigned i = 0; i < BATCH; i++, e++) {
			v = e;
			/* seq_cst: as the shm transport's CAS. */
			if (!atomic_compare_exchange_strong_explicit(
				    word, &v, e + 1, memory_order_seq_cst,
				    memory_order_seq_cst))
				return -EIO;
		}
		break;
	default:
		for (unsigned i = 0; i < BATCH; i++)
			/* seq_cst: as the shm transport's FAA. */
			e = atomic_fetch_add_explicit(word, 1,
						      memory_order_seq_cst) + 1;
		break;
	}
	o->expect = e;
	return 0;
}

/* BATCH synchronous loco ops, shaped as batch_atomic: the same loops, the
 * same checks; a failed op ends the batch as a wrong CAS ends the
 * atomic's. */
static BATCH_FN int batch_sync(struct ob *o, enum op op)
{
	struct loco_thread *thr = o->thr;
	const struct loco_rregion *rr = &o->rr;
	uint64_t v, e = o->expect, sum = 0;
	int rc;
	switch (op) {
	case OP_READ:
		for (unsigned i = 0; i < BATCH; i++) {
			rc = loco_read(thr, rr, 0, &v, 8);
			if (rc)
				return rc;
			sum += v;
		}
		o->sink += sum;
		return sum != (uint64_t)BATCH * e ? -EIO : 0;
	case OP_WRITE:
		for (unsigned i = 0; i < BATCH; i++) {
			rc = loco_write(thr, rr, 0, &o->expect, 8);
			if (rc)
				return rc;
		}
		return 0;
	case OP_CAS:
		for (unsigned i = 0; i < BATCH; i++, e++) {
			rc = loco_cas(thr, rr, 0, e, e + 1, &v);
			if (rc)
				return rc;
			if (v != e)
				return -EIO;
		}
		break;
	default:
		for (unsigned i = 0; i < BATCH; i++) {
			rc = loco_faa(thr, rr, 0, 1, &v);
			if (rc)
				return rc;
			e = v + 1;
		}
		break;
	}
	o->expect = e;
	return 0;
}

/* BATCH synchronous READs through a struct loco_words bound once (the
 * region's own checks made by loco_words_init), shaped as batch_atomic's
 * READ loop. */
static BATCH_FN int batch_words(struct ob *o)
{
	struct loco_words w = o->words;   /* a local, as batch_atomic's word */
	uint64_t v, sum = 0;
	for (unsigned i = 0; i < BATCH; i++) {
		int rc = loco_words_read(&w, 0, &v);
		if (rc)
			return rc;
		sum += v;
	}
	o->sink += sum;
	return sum != (uint64_t)BATCH * o->expect ? -EIO : 0;
}

/* The I-th loco op of a window, of kind OP, posted through ACK (ops of
 * one QP execute in order: the I-th CAS expects what the ones before it
 * leave). */
static int post_op(struct ob *o, enum op op, unsigned i, uint64_t *res,
		   struct loco_ack *ack)
{
	switch (op) {
	case OP_READ:
		return loco_post_read(o->thr, &o->rr, 0, res, 8, ack);
	case OP_WRITE:
		return loco_post_write(o->thr, &o->rr, 0, &o->expect, 8, ack);
	case OP_CAS:
		return loco_post_cas(o->thr, &o->rr, 0, o->expect + i,
				     o->expect + i + 1, res, ack);
	default:
		return loco_post_faa(o->thr, &o->rr, 0, 1, res, ack);
	}
}

/* The results of N completed ops of kind OP: the word's value moves as
 * expected and every READ saw it. */
static int check_ops(struct ob *o, enum op op, const uint64_t *res, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (op == OP_WRITE)
			continue;
		if (res[i] != o->expect)
			return -EIO;
		if (op != OP_READ)
			o->expect++;
	}
	return 0;
}

/* BATCH loco ops, WINDOW posted per wait. */
static BATCH_FN int batch_window(struct ob *o, enum op op, unsigned window)
{
	uint64_t res[MAX_WINDOW];
	for (unsigned done = 0; done < BATCH; done += window) {
		unsigned n = BATCH - done < window ? BATCH - done : window;
		struct loco_ack ack = { 0, 0 };
		int rc = 0;
		for (unsigned i = 0; !rc && i < n; i++)
			rc = post_op(o, op, i, &res[i], &ack);
		int wrc = loco_ack_wait(o->thr, &ack, -1);
		if (rc || wrc)
			return rc ? rc : wrc;
		rc = check_ops(o, op, res, n);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- phases ----------------------------------------------------------- */

static int run_phase(struct ob *o, enum op op, struct phase *p)
{
	struct loco_stats s0;
	loco_thread_stats(o->thr, &s0);
	uint64_t t0 = loco_now_ns(), t = t0;
	uint64_t end = t0 + (uint64_t)(o->duration * 1e9);
	while (t < end) {
		int rc = p->window > 1 ? batch_window(o, op, p->window) :
			 p->words ? batch_words(o) :
			 p->window ? batch_sync(o, op) : batch_atomic(o, op);
		if (rc)
			return rc;
		uint64_t t1 = loco_now_ns();
		bench_lat_add(&p->lat, (t1 - t + BATCH / 2) / BATCH);
		bench_lat_add(&p->batch, t1 - t);
		t = t1;
		p->ops += BATCH;
	}
	p->ns = t - t0;
	loco_thread_stats(o->thr, &p->st);
	bench_stats_sub(&p->st, &s0);
	/* Place the phase's WRITEs (shm-weak places them late) before the
	 * next phase's atomics read the word: outside the timed part. */
	return p->window ? loco_fence(o->thr, LOCO_FENCE_THREAD, 0) : 0;
}

static void report(struct ob *o, enum op op, struct phase *p)
{
	double ns = (double)p->ns / (double)p->ops;
	double p50 = bench_lat_pct_us(&p->batch, 50) * 1000.0 / BATCH;
	struct bench_result r = {
		.app = "opbench", .transport = loco_mgr_transport(o->mgr),
		.nodes = 1, .threads = 1, .duration_s = (double)p->ns / 1e9,
		.ops = p->ops, .p50_us = bench_lat_pct_us(&p->lat, 50),
		.p99_us = bench_lat_pct_us(&p->lat, 99), .stats = p->st,
	};
	bench_json_begin(stdout, &r);
	printf(",\"op\":\"%s\",\"impl\":\"%s\",\"window\":%u,\"ns_per_op\":%.2f"
	       ",\"p50_ns_per_op\":%.2f", op_name[op], p->impl, p->window, ns, p50);
	if (p->window) {
		printf(",\"vs_atomic\":%.2f", ns / o->atomic_ns[op]);
		printf(",\"p50_vs_atomic\":%.2f", p50 / o->atomic_p50_ns[op]);
	} else {
		o->atomic_ns[op] = ns;
		o->atomic_p50_ns[op] = p50;
	}
	bench_json_end(stdout);
	fflush(stdout);
}

static int bench_op(struct ob *o, enum op op)
{
	struct phase ph[4] = {
		{ .impl = "atomic", .window = 0 },
		{ .impl = "loco", .window = 1 },
	};
	unsigned n = 2;
	if (op == OP_READ)
		ph[n++] = (struct phase){ .impl = "loco-words", .window = 1,
					  .words = true };
	if (o->window > 1)
		ph[n++] = (struct phase){ .impl = "loco-window",
					  .window = o->window };
	o->expect = atomic_load_explicit(o->word, memory_order_relaxed); /* ours alone */
	for (unsigned i = 0; i < n; i++) {
		int rc = bench_lat_init(&ph[i].lat, LAT_CAP);
		if (!rc)
			rc = bench_lat_init(&ph[i].batch, LAT_CAP);
		if (!rc)
			rc = run_phase(o, op, &ph[i]);
		if (!rc)
			report(o, op, &ph[i]);
		bench_lat_fini(&ph[i].lat);
		bench_lat_fini(&ph[i].batch);
		if (rc) {
			fprintf(stderr, "loco-opbench: %s (%s): %s\n", op_name[op],
				ph[i].impl, rc == -EIO ? "wrong result" :
				loco_strerror(rc));
			return rc;
		}
	}
	return 0;
}

/* ---- options and main ------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
"usage: loco-opbench [--duration S] [--window W] [--ops read,write,cas,faa]\n"
"                    (plus node options: --transport/--arena-mb/...; runs as a\n"
"                    private one-node cluster unless given --id/--hosts)\n"
"  --duration S  seconds of each phase (default 0.3)\n"
"  --window W    ops posted per wait in the loco-window phase, 1..%u\n"
"                (default 16; 1 leaves the phase out)\n"
"  --ops LIST    operations to measure (default read,write,cas,faa)\n"
"Per op: a plain C11 atomic on the region's shared mapping, the synchronous\n"
"loco op (for read also through loco_words_read), and the windowed one; a\n"
"JSON line each (ns_per_op, p50_ns_per_op, vs_atomic, p50_vs_atomic).\n",
		MAX_WINDOW);
}

static int parse_ops(const char *arg, unsigned *mask, char *expect)
{
	char buf[64];
	snprintf(expect, BENCH_EXPECT_MAX, "a list of read, write, cas, faa");
	if (strlen(arg) >= sizeof(buf))
		return -1;
	snprintf(buf, sizeof(buf), "%s", arg);
	*mask = 0;
	for (char *save, *t = strtok_r(buf, ",", &save); t;
	     t = strtok_r(NULL, ",", &save)) {
		unsigned k = 0;
		while (k < OP_N && strcmp(t, op_name[k]))
			k++;
		if (k == OP_N)
			return -1;
		*mask |= 1u << k;
	}
	return *mask ? 0 : -1;
}

static int parse_one(void *arg, int c, const char *val, char *expect)
{
	struct ob *o = arg;
	switch (c) {
	case 'd': return bench_parse_duration(val, &o->duration, expect);
	case 'w': return bench_parse_uint(val, 1, MAX_WINDOW, &o->window, expect);
	case 'o': return parse_ops(val, &o->ops_mask, expect);
	default: return -1;
	}
}

static int parse(void *arg, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "duration", required_argument, NULL, 'd' },
		{ "window", required_argument, NULL, 'w' },
		{ "ops", required_argument, NULL, 'o' },
		{ NULL, 0, NULL, 0 },
	};
	if (bench_wants_help(argc, argv))
		return 1;
	return bench_getopt(argc, argv, "", opts, parse_one, arg,
			    "loco-opbench") ? 2 : 0;
}

static int run(void *arg, struct loco_mgr *mgr)
{
	struct ob *o = arg;
	o->mgr = mgr;
	int rc = loco_region_alloc(mgr, "opbench.word", 64, &o->reg);
	if (rc)
		return rc;
	loco_region_desc(mgr, &o->reg, &o->rr);
	o->word = (_Atomic uint64_t *)o->reg.base;
	rc = loco_thread_create(mgr, &o->thr);
	if (!rc)
		loco_words_init(&o->words, o->thr, &o->rr);
	/* Open the QP before the phases: the first op to a peer goes out of
	 * line (milliseconds under valgrind), which a short phase would
	 * count as its own. */
	uint64_t v;
	if (!rc)
		rc = loco_read(o->thr, &o->rr, 0, &v, 8);
	for (unsigned k = 0; !rc && k < OP_N; k++)
		if (o->ops_mask & (1u << k))
			rc = bench_op(o, (enum op)k);
	if (o->thr) {
		int drc = loco_thread_destroy(o->thr);
		rc = rc ? rc : drc;
	}
	loco_region_free(mgr, &o->reg);
	return rc;
}

int main(int argc, char **argv)
{
	static struct ob o = { .duration = 0.3, .window = 16,
			       .ops_mask = (1u << OP_N) - 1 };
	static const struct local_prog prog = {
		.name = "loco-opbench", .usage = usage, .parse = parse, .run = run,
	};
	return local_main(&prog, &o, argc, argv);
}
