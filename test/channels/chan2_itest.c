/* SPDX-License-Identifier: MIT */
/* loco-chan2-itest: multi-process checks of the ticket lock, ringbuffer
 * and queue, run on every compute node through tools/loco-run. Each
 * command ends with a "done" barrier so no node leaves while others still
 * use its memory; the lowest compute id checks the totals.
 *
 *   lock ITERS [--threads T] [--expect-handovers] [--hist mutex|counter]
 *        [--no-fence] [--hot]
 *        T threads per node (default 2) each increment a plain counter
 *        ITERS times under the lock "lk" (hosted at the lowest node): a
 *        READ, then a WRITE of an 8-byte word at the highest node. Every
 *        8th acquisition tries trylock first. The release fences the pair
 *        to the counter's node (even workers) or the thread (odd). Checks
 *        the counter == nodes x T x ITERS and (--expect-handovers) that
 *        local handovers happened; prints handovers, global acquires and
 *        verbs per section.
 *        --hist mutex records lock/trylock/unlock (model mutex, key "lk");
 *        --hist counter records each section as faa [1] -> [old] (model
 *        counter, key "ctr"). --no-fence: the release fences the pair to
 *        the lock's host instead, which leaves the counter's WRITE
 *        unfenced (a deliberate bug: the total is then only reported).
 *        --hot: the lock's words are hot (LOCO_REGION_HOT: device memory
 *        if the host has some, else its arena after one warning).
 *        --pause-ms MS: one node that hosts neither the lock nor the
 *        counter (the highest if there are two) stops itself for MS (a
 *        child process sends it SIGSTOP, then SIGCONT) in the middle of
 *        its worker 0's middle section, between the READ and the WRITE:
 *        a holder paused past every waiter's timeout. --lock-timeout-ms MS:
 *        each lock call waits at most MS (default: LONG_MS), and one that
 *        times out (its ticket abandoned) tries again. --broken-steal: a
 *        lock call that timed out takes over instead, running its section
 *        without the lock, as a takeover on a timer without a fence would
 *        (a deliberate bug: the paused holder's late WRITE loses
 *        increments; the total is then only reported).
 *   ringbuffer MSGS [--ring BYTES]
 *        the lowest node writes MSGS messages of random size 1..1024
 *        (mostly staged in batches) to ring "rb" (default 256 KiB), every
 *        8-byte piece a hash of the message number and its offset; every
 *        other node receives them and checks that each is the next one
 *        (exactly once, in order) and intact: its size and every byte;
 *        once the writer's flush is placed, that nothing follows the
 *        last one. Prints rates.
 *   queue ITEMS [--alternate] [--broken-pop]
 *        every node pushes ITEMS values (node << 24 | i) to queue "q"
 *        from its main thread while a second thread pops; after all pushes
 *        the poppers drain the queue (--alternate: one thread per node
 *        pushes a value then tries two pops, ITEMS times, then drains).
 *        Each node writes the values it popped to
 *        $LOCO_RUN_DIR/queue-pops.<id>; the lowest node checks
 *        that every value was popped exactly once and that each popper
 *        saw each producer's values in push order. With LOCO_HISTORY set,
 *        records enq/deq (model queue, key "q"; empty pops as "empty").
 *        --broken-pop: pops never close an empty cell nor fix tail (the
 *        CAS CRQ needs), so a late push lands behind head and is lost;
 *        the totals are then only reported. --pauses N:MS: a thread of
 *        every node stops its process N times for MS (as --pause-ms), at
 *        random moments of its pushes and pops: pops then close the
 *        cells of pushes that stopped between their FAA and their CAS,
 *        whose late CAS must fail.
 *
 * Exit 0 on success, 1 on a failed check, 2 on usage errors, 77 when the
 * transport has no device here. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <loco/channels/barrier.h>
#include <loco/channels/queue.h>
#include <loco/channels/ringbuffer.h>
#include <loco/channels/shared_region.h>
#include <loco/channels/ticket_lock.h>
#include <loco/history.h>
#include "test/common/skip.h"

#define END_TIMEOUT_MS 600000
#define LONG_MS 300000
#define MSG_MAX 1024
#define TRY_EVERY 8

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "chan2-itest: node %u: check failed: %s: ", \
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

enum hist_mode { HIST_NONE, HIST_MUTEX, HIST_COUNTER };

struct opts {
	const char *cmd;
	long n;
	unsigned threads;
	enum hist_mode hist;
	bool no_fence, broken_pop, alternate, expect_handovers, hot;
	bool broken_steal;
	unsigned pause_ms, timeout_ms, pauses, pauses_ms;
	uint64_t ring;
};

struct ctx {
	struct loco_mgr *mgr;
	struct loco_thread *thr;
	uint32_t self, first, last;   /* this node, lowest and highest compute */
	uint64_t members;
	unsigned nodes;
	struct opts o;
	struct loco_barrier start, done;
};

static uint64_t mix64(uint64_t x)
{
	x += UINT64_C(0x9e3779b97f4a7c15);
	x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
	return x ^ (x >> 31);
}

static int start_all(struct ctx *c)
{
	CALL(loco_mgr_wait_ready(c->mgr, -1));
	CALL(loco_barrier_wait(&c->start, c->thr, -1));
	return 0;
}

static int finish_all(struct ctx *c)
{
	CALL(loco_barrier_wait(&c->done, c->thr, END_TIMEOUT_MS));
	return 0;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Stop this whole process for MS, as a pause nemesis would from outside:
 * a child sends SIGSTOP, sleeps MS, sends SIGCONT. The calling thread
 * waits for the child (stopped there with the others). The child calls
 * only async-signal-safe functions. 0 or -errno. */
static int pause_self(unsigned ms)
{
	pid_t parent = getpid(), pid = fork();
	if (pid < 0)
		return -errno;
	if (!pid) {
		struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
		kill(parent, SIGSTOP);
		nanosleep(&ts, NULL);
		kill(parent, SIGCONT);
		_exit(0);
	}
	while (waitpid(pid, NULL, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

static double secs_since(uint64_t t0)
{
	return (double)(loco_now_ns() - t0) / 1e9;
}

static double verbs_of(struct loco_mgr *mgr)
{
	struct loco_stats s;
	loco_mgr_stats(mgr, &s);
	return (double)loco_stats_verbs(&s);
}

/* ---- lock --------------------------------------------------------------- */

struct lock_run {
	struct ctx *c;
	struct loco_ticket_lock lk;
	struct loco_shared_region ctr;
	pthread_barrier_t go;
};

struct lock_worker {
	pthread_t tid;
	struct lock_run *r;
	unsigned idx;
	int err;
	long trylocks, timeouts, steals;
};

/* The node --pause-ms stops: one hosting neither the lock (first) nor
 * the counter (last), or the last of two. */
static bool pause_node(const struct ctx *c)
{
	uint64_t others = c->members & ~(UINT64_C(1) << c->first) &
			  ~(UINT64_C(1) << c->last);
	uint32_t id = others ? (uint32_t)__builtin_ctzll(others) : c->last;
	return c->o.pause_ms && c->self == id;
}

/* Trylock first on every TRY_EVERY-th round, else (or if busy) lock. */
static int acquire(struct lock_worker *w, struct loco_thread *thr, long i)
{
	bool rec = w->r->c->o.hist == HIST_MUTEX;
	if (i % TRY_EVERY == 0) {
		uint64_t id = rec ? loco_hist_inv(thr, "trylock", "\"lk\"", NULL) : 0;
		int rc = loco_ticket_lock_trylock(&w->r->lk, thr);
		if (!rc) {
			loco_hist_ret(thr, id, "[true]");
			w->trylocks++;
			return 0;
		}
		/* -EBUSY had no effect (and may be spurious: not checked). */
		loco_hist_fail(thr, id);
		if (rc != -EBUSY)
			return rc;
	}
	int tmo = w->r->c->o.timeout_ms ? (int)w->r->c->o.timeout_ms : LONG_MS;
	for (;;) {
		uint64_t id = rec ? loco_hist_inv(thr, "lock", "\"lk\"", NULL) : 0;
		int rc = loco_ticket_lock_lock(&w->r->lk, thr, tmo);
		if (!rc)
			loco_hist_ret(thr, id, NULL);
		if (rc != -ETIMEDOUT || tmo == LONG_MS)
			return rc;
		/* The attempt left its ticket: it had no effect. */
		loco_hist_fail(thr, id);
		w->timeouts++;
		if (w->r->c->o.broken_steal) {
			w->steals++;
			return 1;
		}
	}
}

/* The section: READ the counter, WRITE it + 1 (with --pause-ms, the
 * paused node's worker 0 stops in between in its middle section, I). */
static int section(struct lock_worker *w, struct loco_thread *thr, long i)
{
	struct ctx *c = w->r->c;
	uint64_t v = 0, id = 0;
	char res[32];
	if (c->o.hist == HIST_COUNTER)
		id = loco_hist_inv(thr, "faa", "\"ctr\"", "[1]");
	int rc = loco_shared_region_read(&w->r->ctr, thr, c->last, 0, &v, 8);
	uint64_t nv = v + 1;
	if (!rc && !w->idx && i == c->o.n / 2 && pause_node(c))
		rc = pause_self(c->o.pause_ms);
	if (!rc)
		rc = loco_shared_region_write(&w->r->ctr, thr, c->last, 0, &nv, 8);
	snprintf(res, sizeof(res), "[%" PRIu64 "]", v);
	if (!rc)
		loco_hist_ret(thr, id, res);
	return rc;
}

static int release(struct lock_worker *w, struct loco_thread *thr)
{
	struct ctx *c = w->r->c;
	uint64_t id = c->o.hist == HIST_MUTEX ?
		      loco_hist_inv(thr, "unlock", "\"lk\"", NULL) : 0;
	enum loco_fence_scope scope = w->idx % 2 && !c->o.no_fence ?
				      LOCO_FENCE_THREAD : LOCO_FENCE_PAIR;
	int rc = loco_ticket_lock_unlock(&w->r->lk, thr, scope,
					 c->o.no_fence ? c->first : c->last);
	if (!rc)
		loco_hist_ret(thr, id, NULL);
	return rc;
}

static void *lock_worker_main(void *arg)
{
	struct lock_worker *w = arg;
	struct loco_thread *thr;
	w->err = loco_thread_create(w->r->c->mgr, &thr);
	pthread_barrier_wait(&w->r->go);
	for (long i = 0; !w->err && i < w->r->c->o.n; i++) {
		int got = acquire(w, thr, i);
		w->err = got < 0 ? got : 0;
		if (w->err)
			break;
		w->err = section(w, thr, i);
		int rc = got ? 0 : release(w, thr);
		w->err = w->err ? w->err : rc;
	}
	if (!w->err)
		w->err = loco_thread_destroy(thr);
	return NULL;
}

static int lock_workers(struct lock_run *r, long *trylocks, long *timeouts,
			long *steals)
{
	struct ctx *c = r->c;
	struct lock_worker w[64];
	pthread_barrier_init(&r->go, NULL, c->o.threads);
	for (unsigned i = 0; i < c->o.threads; i++) {
		w[i] = (struct lock_worker){ .r = r, .idx = i };
		CHECK(!pthread_create(&w[i].tid, NULL, lock_worker_main, &w[i]),
		      "pthread_create");
	}
	int bad = 0;
	for (unsigned i = 0; i < c->o.threads; i++) {
		pthread_join(w[i].tid, NULL);
		if (w[i].err)
			fprintf(stderr, "chan2-itest: node %u: worker %u: %s\n",
				c->self, i, loco_strerror(w[i].err));
		bad |= w[i].err != 0;
		*trylocks += w[i].trylocks;
		*timeouts += w[i].timeouts;
		*steals += w[i].steals;
	}
	pthread_barrier_destroy(&r->go);
	return bad;
}

static int lock_total(struct lock_run *r)
{
	struct ctx *c = r->c;
	uint64_t v, want = (uint64_t)c->nodes * c->o.threads * (uint64_t)c->o.n;
	CALL(loco_shared_region_read(&r->ctr, c->thr, c->last, 0, &v, 8));
	if (c->o.no_fence || c->o.broken_steal) {
		printf("chan2-itest: counter %" PRIu64 " of %" PRIu64 " (%s: "
		       "%" PRIu64 " increments lost)\n", v, want, c->o.no_fence ?
		       "no fence" : "broken steal", want - v);
		return 0;
	}
	CHECK(v == want, "counter %" PRIu64 ", expected %" PRIu64, v, want);
	printf("chan2-itest: counter %" PRIu64 " = %u nodes x %u threads x %ld "
	       "sections: exact\n", v, c->nodes, c->o.threads, c->o.n);
	return 0;
}

static int lock_run(struct lock_run *r)
{
	struct ctx *c = r->c;
	struct loco_ticket_lock_stats s;
	long trylocks = 0, timeouts = 0, steals = 0;
	if (start_all(c))
		return 1;
	uint64_t t0 = loco_now_ns();
	double v0 = verbs_of(c->mgr);
	if (lock_workers(r, &trylocks, &timeouts, &steals))
		return 1;
	double secs = secs_since(t0), sections = (double)c->o.threads * c->o.n;
	loco_ticket_lock_stats(&r->lk, &s);
	printf("chan2-itest: node %u: %u threads x %ld sections in %.2f s "
	       "(%.0f/s): %" PRIu64 " global acquires (%ld by trylock), %" PRIu64
	       " local handovers, %" PRIu64 " timeouts (%ld tried again, %ld "
	       "taken over); %.2f verbs/section\n",
	       c->self, c->o.threads, c->o.n, secs, sections / secs, s.acquires,
	       trylocks, s.handovers, s.timeouts, timeouts - steals, steals,
	       (verbs_of(c->mgr) - v0) / sections);
	CHECK(s.acquires + s.handovers + (uint64_t)steals == (uint64_t)sections,
	      "acquisitions");
	CHECK(!c->o.expect_handovers || s.handovers > 0, "no local handover");
	if (finish_all(c))
		return 1;
	/* The counter's node (the last) stays until the first has read it:
	 * on a transport whose memory leaves with its process, a read after
	 * the last barrier could find it gone. */
	int rc = c->self == c->first ? lock_total(r) : 0;
	if (finish_all(c))
		return 1;
	return rc;
}

static int cmd_lock(struct ctx *c)
{
	struct lock_run r = { .c = c };
	CALL(loco_ticket_lock_init_ex(&r.lk, c->mgr, NULL, "lk", c->first, 0,
				      c->o.hot ? LOCO_REGION_HOT : 0));
	int rc = loco_shared_region_init(&r.ctr, c->mgr, NULL, "ctr", 64, 0);
	if (!rc) {
		rc = lock_run(&r);
		loco_shared_region_fini(&r.ctr);
	} else {
		fprintf(stderr, "chan2-itest: %s\n", loco_strerror(rc));
	}
	loco_ticket_lock_fini(&r.lk);
	return rc ? 1 : 0;
}

/* ---- ringbuffer ------------------------------------------------------------ */

/* Message N: LEN bytes, every 8-byte piece a hash of (N, piece). */
static void msg_fill(uint8_t *buf, uint64_t n, uint32_t len)
{
	for (uint32_t k = 0; k < len; k += 8) {
		uint64_t h = mix64(n << 20 | k);
		memcpy(buf + k, &h, len - k < 8 ? len - k : 8);
	}
}

/* Size and flags of message N, the same at the writer and the readers. */
static uint32_t msg_len(uint64_t n, unsigned *flags)
{
	uint64_t h = mix64(~n);
	*flags = h >> 40 & 3 ? LOCO_RB_MORE : 0;
	return 1 + (uint32_t)(h % MSG_MAX);
}

static int rb_write(struct ctx *c, struct loco_ringbuffer *rb)
{
	uint8_t buf[MSG_MAX];
	uint64_t bytes = 0, t0 = loco_now_ns();
	for (long n = 0; n < c->o.n; n++) {
		unsigned flags;
		uint32_t len = msg_len((uint64_t)n, &flags);
		msg_fill(buf, (uint64_t)n, len);
		int rc = loco_ringbuffer_send(rb, c->thr, buf, len, flags, NULL,
					      LONG_MS);
		CHECK(rc == 0, "send %ld: %s", n, loco_strerror(rc));
		bytes += len;
	}
	CALL(loco_ringbuffer_flush(rb, c->thr));
	double secs = secs_since(t0);
	printf("chan2-itest: node %u (writer): %ld messages, %.1f MB in %.2f s: "
	       "%.0f msgs/s, %.1f MB/s; %" PRIu64 " posts, ring full %" PRIu64
	       " times\n", c->self, c->o.n, (double)bytes / 1e6, secs,
	       (double)c->o.n / secs, (double)bytes / 1e6 / secs,
	       rb->st.posts, rb->st.full);
	return 0;
}

static int rb_read(struct ctx *c, struct loco_ringbuffer *rb)
{
	uint8_t buf[MSG_MAX], want[MSG_MAX];
	uint64_t t0 = loco_now_ns();
	for (long n = 0; n < c->o.n; n++) {
		unsigned flags;
		uint32_t len = 0, wlen = msg_len((uint64_t)n, &flags);
		int rc = loco_ringbuffer_recv(rb, c->thr, buf, sizeof(buf), &len,
					      LONG_MS);
		CHECK(rc == 0, "message %ld: %s", n, loco_strerror(rc));
		msg_fill(want, (uint64_t)n, wlen);
		CHECK(len == wlen && !memcmp(buf, want, len), "message %ld: %u "
		      "bytes, expected %u, or damaged", n, len, wlen);
	}
	CALL(loco_ringbuffer_ack(rb, c->thr));
	double secs = secs_since(t0);
	printf("chan2-itest: node %u (reader): %ld messages in order, intact, "
	       "in %.2f s (%.0f msgs/s); %" PRIu64 " incomplete records retried, "
	       "%" PRIu64 " acknowledgement pushes\n", c->self, c->o.n, secs,
	       (double)c->o.n / secs, rb->st.torn, rb->st.acks);
	return 0;
}

/* After the first "done" round every message the writer sent is placed
 * here (its flush fenced them before it arrived): the ring must hold
 * nothing beyond message MSGS - 1, not even part of a record. */
static int rb_read_none(struct ctx *c, struct loco_ringbuffer *rb)
{
	uint8_t buf[MSG_MAX];
	uint32_t len = 0;
	uint64_t torn = rb->st.torn;
	int rc = loco_ringbuffer_try_recv(rb, c->thr, buf, sizeof(buf), &len);
	CHECK(rc == -EAGAIN && rb->st.torn == torn, "after the last message "
	      "(%ld): %s, expected an empty ring", c->o.n - 1,
	      rc == -EAGAIN ? "part of a record" :
	      rc == 0 ? "one more message" : loco_strerror(rc));
	CHECK(rb->st.msgs == (uint64_t)c->o.n, "%" PRIu64 " messages received, "
	      "expected %ld", rb->st.msgs, c->o.n);
	return 0;
}

static int cmd_ringbuffer(struct ctx *c)
{
	struct loco_ringbuffer rb;
	CALL(loco_ringbuffer_init(&rb, c->mgr, NULL, "rb", c->first, c->o.ring, 0));
	bool writer = loco_ringbuffer_is_writer(&rb);
	int rc = start_all(c);
	if (!rc)
		rc = writer ? rb_write(c, &rb) : rb_read(c, &rb);
	if (!rc)
		rc = finish_all(c);
	if (!rc && !writer)
		rc = rb_read_none(c, &rb);
	/* A second round: the writer stays until the readers checked (their
	 * receive may push an acknowledgement to it). */
	if (!rc)
		rc = finish_all(c);
	/* Posts and acknowledgement pushes complete before the ring goes. */
	int frc = loco_fence(c->thr, LOCO_FENCE_THREAD, 0);
	loco_ringbuffer_fini(&rb);
	CALL(frc);
	return rc;
}

/* ---- queue ------------------------------------------------------------------- */

struct queue_run {
	struct ctx *c;
	struct loco_queue q;
	_Atomic bool pushed;          /* every node finished pushing */
	uint32_t *got;                /* values popped here, in order */
	uint64_t ngot, empty;
	int err;
};

/* --broken-pop: CRQ's pop without the CAS that closes an empty cell and
 * without fixState: a push that arrives late stores behind head. */
static int pop_broken(struct loco_queue *q, struct loco_thread *thr, uint32_t *v)
{
	for (;;) {
		uint64_t h, t, w, old;
		int rc = loco_atomic_var_faa(&q->head, thr, 1, &h);
		uint64_t i = h % q->ring, c = h / q->ring;
		const struct loco_rregion *rr = loco_channel_remote(
			&q->base, q->idx, loco_queue_cell_node(q, i));
		if (!rc)
			rc = loco_read(thr, rr, loco_queue_cell_off(q, i), &w, 8);
		if (!rc && (w & LOCO_QUEUE_FULL) && loco_queue_cell_cycle(w) == c) {
			uint64_t next = loco_queue_cell(c + 1, w & LOCO_QUEUE_UNSAFE, 0);
			rc = loco_cas(thr, rr, loco_queue_cell_off(q, i), w, next, &old);
			if (!rc && old == w) {
				*v = (uint32_t)w;
				return 0;
			}
		}
		if (!rc)
			rc = loco_atomic_var_read(&q->tail, thr, &t);
		if (rc)
			return rc;
		if (t <= h + 1)
			return -ENODATA;
	}
}

/* One recorded pop: 0 (value stored), -ENODATA or an error. */
static int pop_one(struct queue_run *r, struct loco_thread *thr)
{
	uint32_t v = 0;
	char res[32];
	uint64_t id = loco_hist_inv(thr, "deq", "\"q\"", NULL);
	int rc = r->c->o.broken_pop ? pop_broken(&r->q, thr, &v) :
				      loco_queue_try_pop(&r->q, thr, &v);
	if (rc == -ENODATA) {
		loco_hist_ret(thr, id, "[\"empty\"]");
		r->empty++;
		return rc;
	}
	if (rc)
		return rc;
	snprintf(res, sizeof(res), "[%u]", v);
	loco_hist_ret(thr, id, res);
	r->got[r->ngot++] = v;
	return 0;
}

static void *popper_main(void *arg)
{
	struct queue_run *r = arg;
	struct loco_thread *thr;
	r->err = loco_thread_create(r->c->mgr, &thr);
	while (!r->err) {
		/* Acquire: pairs with the release store after the "pushed"
		 * barrier; every push of every node is complete then. */
		bool after = atomic_load_explicit(&r->pushed, memory_order_acquire);
		int rc = pop_one(r, thr);
		if (rc == -ENODATA && after)
			break;
		if (rc == -ENODATA)
			usleep(50);
		else
			r->err = rc;
	}
	if (!r->err)
		r->err = loco_thread_destroy(thr);
	return NULL;
}

/* Push this node's value I (recorded). */
static int push_one(struct queue_run *r, long i)
{
	struct ctx *c = r->c;
	char args[32];
	uint32_t v = c->self << 24 | (uint32_t)i;
	snprintf(args, sizeof(args), "[%u]", v);
	uint64_t id = loco_hist_inv(c->thr, "enq", "\"q\"", args);
	int rc = loco_queue_push(&r->q, c->thr, v, LONG_MS);
	CHECK(rc == 0, "push %ld: %s", i, loco_strerror(rc));
	loco_hist_ret(c->thr, id, NULL);
	return 0;
}

static int push_all(struct queue_run *r)
{
	for (long i = 0; i < r->c->o.n; i++)
		if (push_one(r, i))
			return 1;
	return 0;
}

/* --alternate: push, then try two pops, ITEMS times (so the queue runs
 * empty often); after every node has pushed, pop until it is empty. One
 * thread, so at most one op per node is in flight and the queue stays
 * short: histories the checker searches quickly. */
static int queue_alternate(struct queue_run *r, struct loco_barrier *pushed)
{
	struct ctx *c = r->c;
	int rc = 0;
	for (long i = 0; !rc && i < c->o.n; i++) {
		rc = push_one(r, i) ? -EIO : pop_one(r, c->thr);
		if (!rc || rc == -ENODATA)
			rc = pop_one(r, c->thr);
		rc = rc == -ENODATA ? 0 : rc;
	}
	if (!rc)
		rc = loco_barrier_wait(pushed, c->thr, END_TIMEOUT_MS);
	while (!rc)
		rc = pop_one(r, c->thr);
	return rc == -ENODATA ? 0 : rc;
}

static int pops_save(struct queue_run *r)
{
	char path[512];
	const char *dir = getenv("LOCO_RUN_DIR");
	snprintf(path, sizeof(path), "%s/queue-pops.%u", dir ? dir : ".",
		 r->c->self);
	FILE *f = fopen(path, "wb");
	CHECK(f, "%s: %s", path, strerror(errno));
	size_t n = fwrite(r->got, 4, r->ngot, f);
	CHECK(!fclose(f) && n == r->ngot, "%s: write failed", path);
	return 0;
}

/* The lowest node: every node's pops, each value once, in push order per
 * producer within each popper. Returns the failed checks (0 = all ok). */
static long pops_check(struct ctx *c, uint64_t *total)
{
	uint64_t per = (uint64_t)c->o.n;
	uint8_t *seen = calloc((size_t)LOCO_MAX_NODES * per, 1);
	long bad = 0;
	for (uint64_t m = c->members; m && seen; m &= m - 1) {
		char path[512];
		snprintf(path, sizeof(path), "%s/queue-pops.%u",
			 getenv("LOCO_RUN_DIR") ? getenv("LOCO_RUN_DIR") : ".",
			 (unsigned)__builtin_ctzll(m));
		FILE *f = fopen(path, "rb");
		int64_t last[LOCO_MAX_NODES];
		memset(last, 0xff, sizeof(last));
		for (uint32_t v; f && fread(&v, 4, 1, f) == 1; (*total)++) {
			uint32_t p = v >> 24, i = v & 0xffffff;
			bool ok = p < LOCO_MAX_NODES && (c->members >> p & 1) &&
				  i < per && (int64_t)i > last[p] &&
				  !seen[p * per + i]++;
			bad += !ok;
			if (ok)
				last[p] = i;
		}
		bad += !f;
		if (f)
			fclose(f);
	}
	free(seen);
	return seen ? bad : 1;
}

static int queue_totals(struct queue_run *r)
{
	struct ctx *c = r->c;
	uint64_t total = 0, want = (uint64_t)c->nodes * (uint64_t)c->o.n;
	long bad = pops_check(c, &total);
	if (c->o.broken_pop) {
		printf("chan2-itest: broken pop: %" PRIu64 " of %" PRIu64 " values "
		       "popped, %ld out of order or twice\n", total, want, bad);
		return 0;
	}
	CHECK(!bad && total == want, "%" PRIu64 " values popped of %" PRIu64
	      ", %ld duplicated, unknown or out of order", total, want, bad);
	printf("chan2-itest: %" PRIu64 " values = %u nodes x %ld: each popped "
	       "exactly once, every producer's in push order at every popper\n",
	       total, c->nodes, c->o.n);
	return 0;
}

/* Push everything while the popper thread pops; stop it after every node
 * has pushed and the queue ran empty. */
static int queue_phase(struct queue_run *r, struct loco_barrier *pushed)
{
	struct ctx *c = r->c;
	pthread_t tid;
	if (pthread_create(&tid, NULL, popper_main, r))
		return -EAGAIN;
	int rc = push_all(r);
	if (!rc)
		rc = loco_barrier_wait(pushed, c->thr, END_TIMEOUT_MS);
	/* Release: pairs with the acquire in popper_main. */
	atomic_store_explicit(&r->pushed, true, memory_order_release);
	pthread_join(tid, NULL);
	return rc ? rc : r->err;
}

/* --pauses N:MS: stop this process N times for MS, a random 0..2 x MS
 * apart. */
static void *pauser_main(void *arg)
{
	struct ctx *c = arg;
	uint64_t rng = mix64(c->self);
	for (unsigned i = 0; i < c->o.pauses; i++) {
		rng = mix64(rng);
		sleep_ms((unsigned)(rng % (2 * c->o.pauses_ms + 1)));
		if (pause_self(c->o.pauses_ms))
			break;
	}
	return NULL;
}

static int queue_run(struct queue_run *r)
{
	struct ctx *c = r->c;
	struct loco_barrier pushed;
	struct loco_queue_stats s;
	CALL(loco_barrier_init(&pushed, c->mgr, NULL, "pushed", 0));
	int rc = start_all(c);
	uint64_t t0 = loco_now_ns();
	pthread_t ptid;
	bool pausing = !rc && c->o.pauses &&
		       !pthread_create(&ptid, NULL, pauser_main, c);
	if (!rc)
		rc = c->o.alternate ? queue_alternate(r, &pushed) :
				      queue_phase(r, &pushed);
	if (pausing)
		pthread_join(ptid, NULL);
	double secs = secs_since(t0);
	loco_queue_stats(&r->q, &s);
	printf("chan2-itest: node %u: %ld pushes and %" PRIu64 " pops in %.2f s "
	       "(%.0f ops/s); %" PRIu64 " empty pops, %" PRIu64 " positions "
	       "passed, %" PRIu64 " tail fixes\n", c->self, c->o.n, r->ngot, secs,
	       ((double)c->o.n + (double)r->ngot) / secs, r->empty, s.retries,
	       s.fixes);
	if (!rc)
		rc = pops_save(r) || finish_all(c);
	int frc = loco_fence(c->thr, LOCO_FENCE_THREAD, 0);
	loco_barrier_fini(&pushed);
	if (rc || frc)
		return 1;
	return c->self == c->first ? queue_totals(r) : 0;
}

static int cmd_queue(struct ctx *c)
{
	struct queue_run r = { .c = c };
	r.got = malloc((size_t)c->nodes * (size_t)c->o.n * 4);
	CHECK(r.got, "out of memory");
	/* Room for every value of two nodes: pushes rarely wait, and the
	 * ring is reused about twice. --alternate (short runs, possibly with
	 * the broken pop, whose lost values hold their cells for good): no
	 * cell is reused. */
	uint64_t per = c->o.alternate ? 4 * (uint64_t)c->o.n + 64 :
					2 * (uint64_t)c->o.n / c->nodes + 64;
	int rc = loco_queue_init(&r.q, c->mgr, NULL, "q", (uint32_t)per, 0);
	if (!rc) {
		rc = queue_run(&r);
		loco_queue_fini(&r.q);
	} else {
		fprintf(stderr, "chan2-itest: %s\n", loco_strerror(rc));
	}
	free(r.got);
	return rc ? 1 : 0;
}

/* ---- main ------------------------------------------------------------------ */

static int usage(void)
{
	fprintf(stderr, "usage: loco-chan2-itest lock ITERS [--threads T] "
		"[--expect-handovers] [--hist mutex|counter] [--no-fence] [--hot]\n"
		"       [--pause-ms MS] [--lock-timeout-ms MS] [--broken-steal]\n"
		"       loco-chan2-itest ringbuffer MSGS [--ring BYTES]\n"
		"       loco-chan2-itest queue ITEMS [--alternate] [--broken-pop] "
		"[--pauses N:MS]\n");
	return 2;
}

/* Whole number S (base 10, or 0x/0 prefixed with BASE 0) in [LO, HI] and,
 * with MULT, a multiple of it; else name WHAT and what was expected. */
static bool num_parse(const char *what, const char *s, int base, long long lo,
		      long long hi, long long mult, long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, base);
	if (errno || end == s || *end || v < lo || v > hi || (mult && v % mult)) {
		fprintf(stderr, "chan2-itest: %s: bad value '%s' (expected %s"
			"%lld..%lld)\n", what, s, mult ? "a multiple of 8 in " : "",
			lo, hi);
		return false;
	}
	*out = v;
	return true;
}

/* One option of getopt_long: true if taken. */
static bool opt_one(struct opts *o, int ch, const char *arg)
{
	long long v;
	switch (ch) {
	case 't':
		if (!num_parse("--threads", arg, 10, 1, 64, 0, &v))
			return false;
		o->threads = (unsigned)v;
		return true;
	case 'H':
		o->hist = !strcmp(arg, "mutex") ? HIST_MUTEX :
			  !strcmp(arg, "counter") ? HIST_COUNTER : HIST_NONE;
		if (o->hist == HIST_NONE)
			fprintf(stderr, "chan2-itest: --hist: bad value '%s' "
				"(expected mutex or counter)\n", arg);
		return o->hist != HIST_NONE;
	case 'r':
		/* Room for the largest message: a quarter of the ring. */
		if (!num_parse("--ring", arg, 0,
			       4 * (MSG_MAX + sizeof(struct loco_rb_hdr)),
			       UINT32_MAX - 7, 8, &v))
			return false;
		o->ring = (uint64_t)v;
		return true;
	case 'P':
		if (!num_parse("--pause-ms", arg, 10, 1, 600000, 0, &v))
			return false;
		o->pause_ms = (unsigned)v;
		return true;
	case 'T':
		if (!num_parse("--lock-timeout-ms", arg, 10, 1, 600000, 0, &v))
			return false;
		o->timeout_ms = (unsigned)v;
		return true;
	case 'U': {
		unsigned n, ms;
		char end;
		if (sscanf(arg, "%u:%u%c", &n, &ms, &end) != 2 || !n ||
		    n > 1000 || !ms || ms > 60000) {
			fprintf(stderr, "chan2-itest: --pauses: bad value '%s' "
				"(expected N:MS, N in 1..1000, MS in 1..60000)\n",
				arg);
			return false;
		}
		o->pauses = n;
		o->pauses_ms = ms;
		return true;
	}
	case 'S': o->broken_steal = true; return true;
	case 'F': o->no_fence = true; return true;
	case 'B': o->broken_pop = true; return true;
	case 'A': o->alternate = true; return true;
	case 'E': o->expect_handovers = true; return true;
	case 'h': o->hot = true; return true;
	default: return false;
	}
}

static int opts_parse(struct opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "threads", required_argument, NULL, 't' },
		{ "hist", required_argument, NULL, 'H' },
		{ "no-fence", no_argument, NULL, 'F' },
		{ "broken-pop", no_argument, NULL, 'B' },
		{ "alternate", no_argument, NULL, 'A' },
		{ "expect-handovers", no_argument, NULL, 'E' },
		{ "hot", no_argument, NULL, 'h' },
		{ "ring", required_argument, NULL, 'r' },
		{ "pause-ms", required_argument, NULL, 'P' },
		{ "lock-timeout-ms", required_argument, NULL, 'T' },
		{ "pauses", required_argument, NULL, 'U' },
		{ "broken-steal", no_argument, NULL, 'S' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;
	long long n;
	*o = (struct opts){ .threads = 2, .ring = 256 * 1024 };
	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1)
		if (!opt_one(o, ch, optarg))
			return usage();
	if (optind + 2 != argc)
		return usage();
	o->cmd = argv[optind];
	if (strcmp(o->cmd, "lock") && strcmp(o->cmd, "ringbuffer") &&
	    strcmp(o->cmd, "queue")) {
		fprintf(stderr, "chan2-itest: unknown command '%s'\n", o->cmd);
		return usage();
	}
	const char *what = !strcmp(o->cmd, "lock") ? "lock ITERS" :
			   !strcmp(o->cmd, "queue") ? "queue ITEMS" :
						      "ringbuffer MSGS";
	if (!num_parse(what, argv[optind + 1], 10, 1, (1 << 24) - 1, 0, &n))
		return usage();
	o->n = (long)n;
	return 0;
}

static int dispatch(struct ctx *c)
{
	if (!strcmp(c->o.cmd, "lock"))
		return cmd_lock(c);
	if (!strcmp(c->o.cmd, "ringbuffer"))
		return cmd_ringbuffer(c);
	return cmd_queue(c);
}

static int setup(struct ctx *c)
{
	c->self = self_id = loco_mgr_id(c->mgr);
	c->members = loco_mgr_compute_peers(c->mgr) | UINT64_C(1) << c->self;
	c->first = (uint32_t)__builtin_ctzll(c->members);
	c->last = 63 - (uint32_t)__builtin_clzll(c->members);
	c->nodes = (unsigned)__builtin_popcountll(c->members);
	int rc = loco_thread_create(c->mgr, &c->thr);
	if (!rc)
		rc = loco_barrier_init(&c->start, c->mgr, NULL, "start", 0);
	if (!rc && (rc = loco_barrier_init(&c->done, c->mgr, NULL, "done", 0)))
		loco_barrier_fini(&c->start);
	return rc;
}

int main(int argc, char **argv)
{
	struct ctx c = { .mgr = NULL };
	struct loco_opts lopts;
	char err[512];
	if (loco_opts_parse(&lopts, &argc, argv, err, sizeof(err))) {
		fprintf(stderr, "chan2-itest: %s\n", err);
		return 2;
	}
	int rc = opts_parse(&c.o, argc, argv);
	if (rc)
		return rc;
	rc = loco_mgr_create(&lopts, &c.mgr);
	if (rc)
		return test_mgr_create_status(rc);
	rc = setup(&c);
	if (!rc) {
		rc = dispatch(&c);
		loco_barrier_fini(&c.done);
		loco_barrier_fini(&c.start);
	} else {
		fprintf(stderr, "chan2-itest: %s\n", loco_strerror(rc));
	}
	if (c.thr && loco_thread_destroy(c.thr))
		rc = rc ? rc : 1;
	loco_mgr_destroy(c.mgr);
	return rc ? 1 : 0;
}
