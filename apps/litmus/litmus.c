/* SPDX-License-Identifier: MIT */
/* loco-litmus: memory-model litmus tests (docs/ordering.md).
 *
 *   mp    data WRITE (64 B) on one QP; optional fence; flag WRITE on
 *         another QP. The reader, seeing the flag, checks the data.
 *   wr    WRITE then READ of the same bytes on the same QP: the READ must
 *         return the WRITE (no fence needed in any mode).
 *   torn  64-byte WRITEs racing 64-byte READs on another QP: a READ whose
 *         words are not all equal is torn.
 *
 * With --expect some, --trials is a minimum: the test goes on until it sees
 * a violation or --max-s seconds pass, because the windows it looks for
 * open only while threads run at once, and a busy host may not run them
 * together for the first thousands of trials.
 *
 * Runs on a private one-node cluster (default transport shm-weak) unless a
 * hosts file is given; the QPs are (thread context, self) pairs. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/common/local.h"

#define DATA_OFF 0
#define FLAG_OFF 128
#define WORDS 8

struct litmus {
	const char *test, *fence_name;
	enum loco_fence_scope scope;
	bool fence;
	long trials;             /* minimum; the number run, at the end */
	bool until_some;         /* --expect some: go on until a violation */
	uint64_t deadline_ns;    /* ... or until this time (--max-s) */
	struct loco_mgr *mgr;
	struct loco_region reg;
	struct loco_rregion rr;
	_Atomic long seen;       /* reader's progress (mp) */
	_Atomic long last;       /* mp: the writer's last trial, once known */
	_Atomic bool writer_done; /* torn */
	_Atomic long violations; /* written by the reader only */
	long reads;
	int err;
};

static _Atomic uint64_t *word(struct litmus *l, uint64_t off)
{
	return (_Atomic uint64_t *)((char *)l->reg.base + off);
}

/* Spin for up to 200 us, then yield: the windows the test looks for are
 * microseconds wide, and on a busy host a yield costs a whole time slice. */
static void spin(unsigned *n)
{
	static _Thread_local uint64_t since;
	if (*n == 0)
		since = loco_now_ns();
	if (++*n % 64 == 0 && loco_now_ns() - since > 200000)
		sched_yield();
}

/* Whether to run trial T: every trial up to --trials, then (expect some)
 * more until the reader counted a violation or the deadline passed. */
static bool more(struct litmus *l, long t)
{
	if (t <= l->trials)
		return true;
	/* Relaxed: a count; a violation seen one trial late costs a trial. */
	return l->until_some &&
	       !atomic_load_explicit(&l->violations, memory_order_relaxed) &&
	       loco_now_ns() < l->deadline_ns;
}

/* ---- mp ------------------------------------------------------------------ */

static int mp_writer(struct litmus *l, struct loco_thread *qa,
		     struct loco_thread *qb)
{
	static uint64_t src[WORDS], flag;
	long t;
	for (t = 1; more(l, t); t++) {
		struct loco_ack ack = { 0, 0 };
		for (int i = 0; i < WORDS; i++)
			src[i] = (uint64_t)t;
		/* Data, then (fence), then the flag right behind it: how long
		 * this thread is descheduled does not change what the NIC may
		 * reorder. The data's completion is awaited afterwards only
		 * because its source buffer is reused next trial. */
		int rc = loco_post_write(qa, &l->rr, DATA_OFF, src, sizeof(src), &ack);
		if (!rc && l->fence)
			rc = loco_fence(qa, l->scope, l->rr.node);
		flag = (uint64_t)t;
		if (!rc)
			rc = loco_write(qb, &l->rr, FLAG_OFF, &flag, 8);
		if (!rc)
			rc = loco_ack_wait(qa, &ack, -1);
		unsigned n = 0;
		/* Acquire pairs with the reader's release of its progress. */
		while (!rc && atomic_load_explicit(&l->seen, memory_order_acquire) < t)
			spin(&n);
		if (rc)
			return rc;
	}
	l->trials = t - 1;
	/* Release: the reader, seeing LAST, stops after trial LAST (it
	 * acquired every earlier trial's flag already). */
	atomic_store_explicit(&l->last, t - 1, memory_order_release);
	return 0;
}

/* Wait for trial T's flag; false once the writer stopped before T. */
static bool mp_wait_flag(struct litmus *l, long t)
{
	unsigned n = 0;
	/* Relaxed flag, as the model allows: the fence must suffice. Acquire
	 * LAST: pairs with the writer's release. */
	while (atomic_load_explicit(word(l, FLAG_OFF), memory_order_relaxed) <
	       (uint64_t)t) {
		long last = atomic_load_explicit(&l->last, memory_order_acquire);
		if (last && t > last)
			return false;
		spin(&n);
	}
	return true;
}

static void *mp_reader(void *arg)
{
	struct litmus *l = arg;
	for (long t = 1; mp_wait_flag(l, t); t++) {
		for (int i = 0; i < WORDS; i++) {
			if (atomic_load_explicit(word(l, DATA_OFF + 8 * i),
						 memory_order_relaxed) < (uint64_t)t) {
				/* Relaxed: only this thread writes it. */
				atomic_fetch_add_explicit(&l->violations, 1,
							  memory_order_relaxed);
				break;
			}
		}
		/* Release pairs with the writer's acquire: next trial. */
		atomic_store_explicit(&l->seen, t, memory_order_release);
	}
	return NULL;
}

/* ---- wr ------------------------------------------------------------------- */

static int wr_run(struct litmus *l, struct loco_thread *qa)
{
	static uint64_t src[WORDS], back[WORDS];
	for (long t = 1; t <= l->trials; t++) {
		struct loco_ack ack = { 0, 0 };
		for (int i = 0; i < WORDS; i++)
			src[i] = (uint64_t)t;
		int rc = loco_post_write(qa, &l->rr, DATA_OFF, src, sizeof(src), &ack);
		if (!rc)
			rc = loco_post_read(qa, &l->rr, DATA_OFF, back, sizeof(back),
					    &ack);
		if (!rc)
			rc = loco_ack_wait(qa, &ack, -1);
		if (rc)
			return rc;
		if (memcmp(src, back, sizeof(src)))
			/* Relaxed: a count, read after the run. */
			atomic_fetch_add_explicit(&l->violations, 1,
						  memory_order_relaxed);
	}
	return 0;
}

/* ---- torn ------------------------------------------------------------------ */

static void *torn_reader(void *arg)
{
	struct litmus *l = arg;
	struct loco_thread *qr;
	uint64_t back[WORDS];
	if ((l->err = loco_thread_create(l->mgr, &qr)))
		return NULL;
	/* Relaxed: a flag; the last reads need no ordering with it. */
	while (!atomic_load_explicit(&l->writer_done, memory_order_relaxed)) {
		if ((l->err = loco_read(qr, &l->rr, DATA_OFF, back, sizeof(back))))
			break;
		l->reads++;
		for (int i = 1; i < WORDS; i++) {
			if (back[i] != back[0]) {
				/* Relaxed: only this thread writes it. */
				atomic_fetch_add_explicit(&l->violations, 1,
							  memory_order_relaxed);
				break;
			}
		}
	}
	loco_thread_destroy(qr);
	return NULL;
}

static int torn_writer(struct litmus *l, struct loco_thread *qa)
{
	static uint64_t src[WORDS];
	int rc = 0;
	long t;
	for (t = 1; more(l, t) && !rc; t++) {
		for (int i = 0; i < WORDS; i++)
			src[i] = (uint64_t)t;
		rc = loco_write(qa, &l->rr, DATA_OFF, src, sizeof(src));
		/* A writer that outruns placement only makes the NIC place
		 * whole writes at once; pausing lets pieces land one by one
		 * while the reader reads. */
		uint64_t t0 = loco_now_ns();
		while (loco_now_ns() - t0 < 5000)
			;
	}
	l->trials = t - 1;
	/* Relaxed: see torn_reader. */
	atomic_store_explicit(&l->writer_done, true, memory_order_relaxed);
	return rc;
}

/* ---- driver -------------------------------------------------------------------- */

static int run(struct litmus *l)
{
	struct loco_thread *qa, *qb;
	pthread_t reader;
	bool two = strcmp(l->test, "wr") != 0;
	int rc = loco_thread_create(l->mgr, &qa);
	if (rc)
		return rc;
	if (!(rc = loco_thread_create(l->mgr, &qb))) {
		if (two)
			pthread_create(&reader, NULL, l->test[0] == 'm' ? mp_reader :
				       torn_reader, l);
		if (!strcmp(l->test, "mp"))
			rc = mp_writer(l, qa, qb);
		else if (!strcmp(l->test, "torn"))
			rc = torn_writer(l, qa);
		else
			rc = wr_run(l, qa);
		if (two && !rc)
			pthread_join(reader, NULL);
		else if (two)
			exit(1);  /* the reader may spin on a flag never written */
		loco_thread_destroy(qb);
	}
	loco_thread_destroy(qa);
	return rc ? rc : l->err;
}

static int parse_fence(struct litmus *l, const char *s)
{
	static const char *const names[] = { "pair", "thread", "global" };
	l->fence_name = s;
	l->fence = strcmp(s, "none") != 0;
	for (int i = 0; i < 3; i++)
		if (!strcmp(s, names[i]))
			l->scope = (enum loco_fence_scope)i;
	return !l->fence || !strcmp(s, "pair") || !strcmp(s, "thread") ||
	       !strcmp(s, "global") ? 0 : -1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: loco-litmus mp|wr|torn [--fence none|pair|thread|global]\n"
		   "                  [--trials N] [--expect zero|some] [--max-s S]\n"
		   "                  [--transport shm|shm-weak] (default shm-weak)\n"
		   "Prints {\"test\":...,\"fence\":...,\"trials\":N,\"violations\":K}.\n"
		   "--expect: exit 1 unless K is zero / greater than zero.\n"
		   "--expect some: run past N trials until a violation shows,\n"
		   "  for up to S seconds (default 30).\n");
}

static int parse(struct litmus *l, int argc, char **argv, const char **expect)
{
	static const struct option opts[] = {
		{ "fence", required_argument, NULL, 'f' },
		{ "trials", required_argument, NULL, 't' },
		{ "expect", required_argument, NULL, 'e' },
		{ "max-s", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;
	char *end;
	long max_s = 30;
	while ((c = getopt_long(argc, argv, "f:t:e:s:h", opts, NULL)) != -1) {
		if (c == 'f' && parse_fence(l, optarg) == 0)
			continue;
		if (c == 't' && (l->trials = strtol(optarg, &end, 10)) > 0 && !*end)
			continue;
		if (c == 'e' && (!strcmp(optarg, "zero") || !strcmp(optarg, "some"))) {
			*expect = optarg;
			l->until_some = optarg[0] == 's';
			continue;
		}
		if (c == 's' && (max_s = strtol(optarg, &end, 10)) > 0 && !*end &&
		    max_s <= 3600)
			continue;
		if (c == 'h') {
			usage(stdout);
			exit(0);
		}
		fprintf(stderr, "loco-litmus: bad option or value%s%s\n",
			optarg ? ": " : "", optarg ? optarg : "");
		return 2;
	}
	if (optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	l->test = argv[optind];
	l->deadline_ns = loco_now_ns() + (uint64_t)max_s * 1000000000ull;
	if (strcmp(l->test, "mp") && strcmp(l->test, "wr") && strcmp(l->test, "torn")) {
		fprintf(stderr, "loco-litmus: unknown test '%s'\n", l->test);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct litmus l = { .fence_name = "none", .trials = 10000 };
	const char *expect = NULL;
	struct local_node ln;
	int rc = local_node_start(&ln, &argc, argv, "loco-litmus", "shm-weak");
	if (rc)
		return rc;
	rc = parse(&l, argc, argv, &expect);
	l.mgr = ln.mgr;
	if (!rc && (rc = loco_region_alloc_ex(l.mgr, "litmus.mem", 4096,
					      LOCO_REGION_REMOTE_READ |
					      LOCO_REGION_REMOTE_WRITE, &l.reg)))
		fprintf(stderr, "loco-litmus: %s\n", loco_strerror(rc));
	if (!rc) {
		loco_region_desc(l.mgr, &l.reg, &l.rr);
		if ((rc = run(&l)))
			fprintf(stderr, "loco-litmus: %s\n", loco_strerror(rc));
	}
	/* Relaxed: the threads were joined. */
	long violations = atomic_load_explicit(&l.violations, memory_order_relaxed);
	if (!rc) {
		printf("{\"test\":\"%s\",\"fence\":\"%s\",\"transport\":\"%s\","
		       "\"trials\":%ld,\"violations\":%ld", l.test, l.fence_name,
		       loco_mgr_transport(l.mgr), l.trials, violations);
		if (!strcmp(l.test, "torn"))
			printf(",\"reads\":%ld", l.reads);
		printf("}\n");
		if (expect && (expect[0] == 'z') != (violations == 0))
			rc = 1;
	}
	if (l.reg.base)
		loco_region_free(l.mgr, &l.reg);
	local_node_stop(&ln);
	return rc == 2 ? 2 : rc ? 1 : 0;
}
