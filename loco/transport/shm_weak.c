/* SPDX-License-Identifier: MIT */
/* shm-weak: the shm transport behind an emulated NIC with RDMA's ordering
 * (docs/ordering.md). Posted requests wait in per-QP queues; one NIC
 * thread per process executes them after random delays:
 *  - execution in order within a QP, none across QPs;
 *  - a WRITE reads its source buffer when it executes, completes at once,
 *    and is placed later in 8-byte pieces in random order; a later READ,
 *    atomic or fence READ on the same QP first places every earlier WRITE;
 *  - completions become visible RTT/2 after execution, and execution
 *    starts no earlier than RTT/2 after posting (LOCO_SHM_WEAK_RTT_NS);
 *  - a FLUSH places the QP's earlier WRITEs, then copies its range into
 *    the peer's durable image (shm.c), all when it executes, so requests
 *    after it on the QP execute after it.
 * Seed: LOCO_SHM_WEAK_SEED (or LOCO_SHM_WEAK); delay scale:
 * LOCO_SHM_WEAK_DELAY_NS (default 2000); placement of an executed WRITE
 * starts after a further random delay up to LOCO_SHM_WEAK_PLACE_NS
 * (default 16 x the delay), or for one WRITE in 16 up to
 * LOCO_SHM_WEAK_TAIL_NS (default 1 ms): long enough that a reader on a
 * busy host still sees the reordering a missing fence allows. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <loco/error.h>
#include <loco/log.h>
#include "loco/transport/shm.h"

#define WQ_CAP (2 * LOCO_QP_DEPTH)      /* queued, not yet executed */
#define UNPLACED_CAP (2 * LOCO_QP_DEPTH) /* executed WRITEs not yet placed */
#define IDLE_SPIN_NS 50000  /* busy-poll this long before yielding */
#define OWNER_POLL_NS 20000 /* a CQ polled this recently executes its own */
/* A helping poller stops before each due request with chance 1/4, or
 * 1/16 while more than HELP_DEEP requests are queued. */
#define HELP_STOP 3
#define HELP_STOP_DEEP 15
#define HELP_DEEP 32
/* How often a polling owner refreshes its CQ's stamp: well below
 * OWNER_POLL_NS, so that a steady poller never looks absent. */
#define POLL_STAMP_NS 2000

struct weak_wr {
	struct loco_wr wr;
	uint64_t not_before;     /* earliest execution time */
};

struct unplaced {
	uint8_t *data;           /* copy of the source taken at execution */
	uint32_t *todo;          /* pieces not placed yet: todo[0..left) */
	uint64_t remote_off;
	uint64_t place_after;    /* not placed before this unless forced */
	uint32_t len, pieces, left;
};

#define LINE 64

/* The per-QP and CQ locks guard a few dozen instructions shared by the
 * poster, the NIC thread and helping pollers: spinlocks, so that handing a
 * request over costs no futex system call. What the NIC thread reads on
 * every pass while the owner polls (the QP's links, the CQ's poll stamp)
 * sits on lines of its own: its reads then never pull the lines the
 * owner writes for every request. */
struct weak_qp {
	struct weak_cq *cq;      /* set at creation */
	struct loco_tp_qp *owner;
	struct weak_qp *next;    /* NIC's list (list_lock) */
	_Alignas(LINE) pthread_spinlock_t lock;
	struct weak_wr q[WQ_CAP];
	unsigned qhead, qcount;
	struct unplaced up[UNPLACED_CAP];
	unsigned uhead, ucount;
	_Atomic bool unplaced;   /* hints for the NIC: ucount != 0, */
	_Atomic bool queued;     /* qcount != 0 */
	uint64_t rng;            /* delays drawn at post, under lock */
};

struct weak_cqe {
	struct loco_cqe cqe;
	uint64_t visible_at;
};

struct weak_cq {
	pthread_spinlock_t lock;
	struct weak_cqe *ring;
	unsigned head, count, cap;
	/* Last poll (coarse): the owner helps. Its alignment also rounds the
	 * struct up to whole lines, so nothing else shares this one. */
	_Alignas(LINE) _Atomic uint64_t polled_ns;
};

struct weak_nic {
	pthread_t thread;
	pthread_mutex_t list_lock;   /* QP list; NIC holds it for one pass */
	pthread_cond_t wake;
	struct weak_qp *qps;
	_Atomic bool stop;
	_Atomic bool asleep;         /* NIC about to wait or waiting on wake */
	_Atomic uint64_t qp_serial;  /* seeds per-QP generators */
	uint64_t seed;
	uint64_t rng;                /* NIC thread only */
	uint64_t delay_ns, half_rtt_ns;
	uint64_t place_ns;           /* deferral of WRITE placement */
	uint64_t tail_ns;            /* rarer, long deferral */
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;  /* xorshift64* */
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * UINT64_C(2685821657736338717);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return dflt;
	char *end;
	unsigned long long x = strtoull(v, &end, 0);
	if (*end) {
		loco_warn("shm-weak", "ignoring %s='%s' (not a number)", name, v);
		return dflt;
	}
	return x;
}

/* ---- completion queue ------------------------------------------------------ */

static int cq_push(struct weak_cq *cq, const struct weak_cqe *e)
{
	pthread_spin_lock(&cq->lock);
	if (cq->count == cq->cap) {
		unsigned cap = cq->cap ? cq->cap * 2 : 256;
		struct weak_cqe *r = malloc(cap * sizeof(*r));
		if (!r) {
			pthread_spin_unlock(&cq->lock);
			return -ENOMEM;
		}
		for (unsigned i = 0; i < cq->count; i++)
			r[i] = cq->ring[(cq->head + i) % cq->cap];
		free(cq->ring);
		cq->ring = r;
		cq->head = 0;
		cq->cap = cap;
	}
	cq->ring[(cq->head + cq->count++) % cq->cap] = *e;
	pthread_spin_unlock(&cq->lock);
	return 0;
}

static int exec_head(struct weak_nic *nic, uint64_t *rng, struct weak_qp *qp,
		     uint64_t now);
static bool place_due(uint64_t *rng, struct weak_qp *qp, uint64_t now);

/* A thread polling its completions lends the NIC a hand on its own QPs:
 * it executes requests that are due, under the same rules (QP order, the
 * random delays, deferred placement). On an oversubscribed host this
 * saves a context switch per request; the NIC thread still does the rest.
 * Each QP in turn, from one chosen by the clock, runs a random number of
 * its due requests (HELP_STOP), so that QPs interleave at random; a deep
 * queue runs longer stretches, so that a pipeline of hundreds of requests
 * costs a clock read and a lock round per 16 requests, not per 4. */
static void weak_help(struct loco_tp_cq *tcq, uint64_t now)
{
	if (!tcq->nqp)
		return;
	struct weak_nic *nic = tcq->qps[0]->tp->weak;
	unsigned start = (unsigned)(now % tcq->nqp);
	for (unsigned k = 0; k < tcq->nqp; k++) {
		struct weak_qp *qp = tcq->qps[(start + k) % tcq->nqp]->weak;
		pthread_spin_lock(&qp->lock);
		while (qp->qcount && qp->q[qp->qhead].not_before <= now &&
		       (rng_next(&qp->rng) & (qp->qcount > HELP_DEEP ?
					      HELP_STOP_DEEP : HELP_STOP)) != 0)
			if (exec_head(nic, &qp->rng, qp, now))
				break;
		place_due(&qp->rng, qp, now);
		pthread_spin_unlock(&qp->lock);
	}
}

static int weak_poll(struct loco_tp_cq *tcq, struct loco_cqe *out, unsigned max)
{
	struct weak_cq *cq = tcq->weak;
	uint64_t now = now_ns();
	/* Relaxed: a hint for the NIC thread (owner_polling), refreshed at
	 * most every POLL_STAMP_NS so that its line stays mostly shared. */
	uint64_t stamp = atomic_load_explicit(&cq->polled_ns,
					      memory_order_relaxed);
	if (now - stamp > POLL_STAMP_NS)
		atomic_store_explicit(&cq->polled_ns, now, memory_order_relaxed);
	weak_help(tcq, now);
	unsigned n = 0;
	pthread_spin_lock(&cq->lock);
	/* In NIC order; a completion not yet visible holds back later ones,
	 * which keeps every QP's completions in order. */
	while (n < max && cq->count && cq->ring[cq->head].visible_at <= now) {
		out[n++] = cq->ring[cq->head].cqe;
		cq->head = (cq->head + 1) % cq->cap;
		cq->count--;
	}
	pthread_spin_unlock(&cq->lock);
	return (int)n;
}

/* ---- placement ---------------------------------------------------------------- */

static void piece_place(struct weak_qp *qp, struct unplaced *u, uint32_t i)
{
	uint32_t at = i * 8, n = u->len - at < 8 ? u->len - at : 8;
	loco_tp_copy_out(qp->owner->base + u->remote_off + at, u->data + at, n);
}

static void unplaced_pop(struct weak_qp *qp)
{
	struct unplaced *u = &qp->up[qp->uhead];
	free(u->data);
	free(u->todo);
	qp->uhead = (qp->uhead + 1) % UNPLACED_CAP;
	qp->ucount--;
	/* Relaxed: a hint (qp->lock orders the queue itself). */
	atomic_store_explicit(&qp->unplaced, qp->ucount != 0, memory_order_relaxed);
}

/* This node is fenced at QP's peer: its executed WRITEs are never placed
 * (their completions said acknowledged, not placed). */
static void unplaced_drop(struct weak_qp *qp)
{
	while (qp->ucount)
		unplaced_pop(qp);
}

/* Place one random piece of the oldest unplaced WRITE (qp->lock held):
 * a step of a Fisher-Yates shuffle of its pieces, so each piece costs
 * O(1) and the order is uniformly random (a random start and a linear
 * probe for an unplaced piece cost O(n^1.5) per WRITE: milliseconds for a
 * 48 KB WRITE). RNG: the NIC thread's generator, or the QP's when a
 * poller helps. */
static void place_one(uint64_t *rng, struct weak_qp *qp)
{
	struct unplaced *u = &qp->up[qp->uhead];
	/* k uniform in [0, left) by a multiply, not a division. */
	uint32_t k = (uint32_t)(((rng_next(rng) >> 32) * u->left) >> 32);
	uint32_t i = u->todo[k];
	u->todo[k] = u->todo[--u->left];
	piece_place(qp, u, i);
	if (!u->left)
		unplaced_pop(qp);
}

/* One step of placement (qp->lock held), by the NIC thread a pass or by
 * the polling owner a poll: a piece of the oldest unplaced WRITE whose
 * placement is due, one time in two. True if it placed one. */
static bool place_due(uint64_t *rng, struct weak_qp *qp, uint64_t now)
{
	if (!qp->ucount || qp->up[qp->uhead].place_after > now ||
	    !(rng_next(rng) & 1))
		return false;
	if (!loco_shm_guard_enter(qp->owner)) {
		unplaced_drop(qp);
		return true;
	}
	place_one(rng, qp);
	loco_shm_guard_exit(qp->owner);
	return true;
}

/* Place every executed WRITE of QP, each in random piece order. */
static void place_all(uint64_t *rng, struct weak_qp *qp)
{
	while (qp->ucount)
		place_one(rng, qp);
}

/* Place every executed WRITE under the fence guard (qp->lock held). */
static void place_all_guarded(uint64_t *rng, struct weak_qp *qp)
{
	if (!qp->ucount)
		return;
	if (!loco_shm_guard_enter(qp->owner)) {
		unplaced_drop(qp);
		return;
	}
	place_all(rng, qp);
	loco_shm_guard_exit(qp->owner);
}

/* ---- execution ------------------------------------------------------------------ */

static int exec_write(struct weak_nic *nic, uint64_t *rng, struct weak_qp *qp,
		      const struct loco_wr *wr)
{
	if (!wr->len)
		return 0;
	struct unplaced *u = &qp->up[(qp->uhead + qp->ucount) % UNPLACED_CAP];
	u->pieces = u->left = (wr->len + 7) / 8;
	u->data = malloc(wr->len);
	u->todo = malloc((size_t)u->pieces * sizeof(*u->todo));
	if (!u->data || !u->todo) {
		free(u->data);
		free(u->todo);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < u->pieces; i++)
		u->todo[i] = i;
	/* The source is read now, not at post time (lazy NIC DMA). */
	loco_tp_copy_in(u->data, wr->local, wr->len);
	u->remote_off = wr->remote_off;
	u->len = wr->len;
	uint64_t defer = rng_next(rng);
	/* One WRITE in 16 lingers up to the long tail: a completed WRITE that
	 * nothing forces may stay unplaced for long on real NICs too. */
	defer = (defer & 15) == 0 ? defer % (nic->tail_ns + 1) :
				    defer % (nic->place_ns + 1);
	u->place_after = now_ns() + defer;
	qp->ucount++;
	/* Relaxed: a hint (qp->lock orders the queue itself). */
	atomic_store_explicit(&qp->unplaced, true, memory_order_relaxed);
	return 0;
}

static uint32_t gcd(uint32_t a, uint32_t b)
{
	while (b) {
		uint32_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* A READ of more than 8 bytes gathers its 8-byte pieces in random order,
 * as a NIC's DMA may: a concurrent writer can leave it torn. */
static void exec_read(uint64_t *rng, struct weak_qp *qp, const struct loco_wr *wr)
{
	uint32_t pieces = (wr->len + 7) / 8;
	if (pieces <= 1) {
		loco_shm_execute(qp->owner->base, wr);
		return;
	}
	uint32_t start = (uint32_t)(rng_next(rng) % pieces);
	uint32_t step = 1 + (uint32_t)(rng_next(rng) % (pieces - 1));
	while (gcd(step, pieces) != 1)  /* coprime: every piece exactly once */
		step--;
	for (uint32_t k = 0, i = start; k < pieces; k++, i = (i + step) % pieces) {
		uint32_t at = i * 8, n = wr->len - at < 8 ? wr->len - at : 8;
		loco_tp_copy_in((uint8_t *)wr->local + at,
				 qp->owner->base + wr->remote_off + at, n);
	}
}

/* Execute the head request of QP at time NOW (qp->lock held). */
static int exec_head(struct weak_nic *nic, uint64_t *rng, struct weak_qp *qp,
		     uint64_t now)
{
	struct loco_wr *wr = &qp->q[qp->qhead].wr;
	int status = 0;
	/* The fence guard covers the execution and the placements it
	 * forces: a fenced node's request fails, its unplaced WRITEs go. */
	if (!loco_shm_guard_enter(qp->owner)) {
		unplaced_drop(qp);
		status = -LOCO_EFENCED;
	} else if (wr->opcode == LOCO_OP_WRITE) {
		while (qp->ucount == UNPLACED_CAP)
			place_one(rng, qp);
		status = exec_write(nic, rng, qp, wr);
	} else {
		/* A READ, atomic or FLUSH completes only after earlier WRITEs
		 * on this QP are placed. */
		place_all(rng, qp);
		if (wr->opcode == LOCO_OP_READ)
			exec_read(rng, qp, wr);
		else if (wr->opcode == LOCO_OP_FLUSH)
			status = loco_shm_flush(qp->owner, wr, 1);
		else
			loco_shm_execute(qp->owner->base, wr);
	}
	if (status != -LOCO_EFENCED)
		loco_shm_guard_exit(qp->owner);
	int rc = 0;
	if (wr->signaled || status) {
		struct weak_cqe e = {
			.cqe = { .wr_id = wr->wr_id, .status = status,
				 .peer = qp->owner->peer },
			.visible_at = now + nic->half_rtt_ns,
		};
		rc = cq_push(qp->cq, &e);
	}
	qp->qhead = (qp->qhead + 1) % WQ_CAP;
	qp->qcount--;
	/* Relaxed: a hint (qp->lock orders the queue itself). */
	atomic_store_explicit(&qp->queued, qp->qcount != 0, memory_order_relaxed);
	return rc;
}

enum { NIC_IDLE, NIC_WAITING, NIC_PROGRESS };

/* True while QP's owner thread keeps polling its CQ: it then executes its
 * due requests itself (weak_help, same rules), and the NIC thread leaves
 * them alone, so that the two do not pull the QP's lines back and forth
 * for every request; it places the QP's WRITEs too (weak_help). */
static bool owner_polling(const struct weak_qp *qp, uint64_t now)
{
	/* Relaxed: a hint; stale values only move work between threads. */
	uint64_t t = atomic_load_explicit(&qp->cq->polled_ns, memory_order_relaxed);
	return now < t + OWNER_POLL_NS;
}

/* One NIC step on QP: maybe execute its head, maybe place a piece. */
static int qp_step(struct weak_nic *nic, struct weak_qp *qp, uint64_t now)
{
	int state = NIC_IDLE;
	/* While its owner polls, stay awake (yielding; reading only the
	 * CQ's stamp line): its posts then need no wake-up, a futex call
	 * each, and when it stops polling the next pass takes over. */
	if (owner_polling(qp, now))
		return NIC_WAITING;
	/* A QP being posted to or helped right now is visited next pass. */
	if (pthread_spin_trylock(&qp->lock))
		return NIC_WAITING;
	if (qp->qcount && qp->q[qp->qhead].not_before <= now &&
	    (rng_next(&nic->rng) & 3) != 0) {
		if (exec_head(nic, &nic->rng, qp, now))
			loco_err("shm-weak", "completion queue: out of memory");
		state = NIC_PROGRESS;
	}
	if (place_due(&nic->rng, qp, now))
		state = NIC_PROGRESS;
	if (state == NIC_IDLE && (qp->qcount || qp->ucount))
		state = NIC_WAITING;
	pthread_spin_unlock(&qp->lock);
	return state;
}

/* Visit every QP once, starting at a random one. */
static int nic_pass(struct weak_nic *nic)
{
	int state = NIC_IDLE;
	uint64_t now = now_ns();
	pthread_mutex_lock(&nic->list_lock);
	unsigned n = 0;
	for (struct weak_qp *q = nic->qps; q; q = q->next)
		n++;
	unsigned skip = n ? (unsigned)(rng_next(&nic->rng) % n) : 0;
	struct weak_qp *start = nic->qps;
	for (unsigned i = 0; i < skip; i++)
		start = start->next;
	for (struct weak_qp *q = start; q; q = q->next) {
		int st = qp_step(nic, q, now);
		state = st > state ? st : state;
	}
	for (struct weak_qp *q = nic->qps; q != start; q = q->next) {
		int st = qp_step(nic, q, now);
		state = st > state ? st : state;
	}
	pthread_mutex_unlock(&nic->list_lock);
	return state;
}

/* A short pause between unproductive passes, so that a NIC waiting for
 * delays to expire does not keep pulling the QPs' cache lines away from
 * the threads posting to them. */
static void cpu_relax(unsigned n)
{
	while (n--) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#else
		atomic_signal_fence(memory_order_seq_cst); /* compiler barrier only */
#endif
	}
}

/* True if some QP has requests queued or WRITEs unplaced (hints). */
static bool nic_has_work(struct weak_nic *nic)
{
	for (struct weak_qp *q = nic->qps; q; q = q->next)
		/* Seq_cst QUEUED: pairs with weak_post (see nic_idle). Relaxed
		 * UNPLACED: a WRITE a polling owner executed just as we fall
		 * asleep waits at most the 1 ms timed wait to be placed, which
		 * the model allows (placement may lag: LOCO_SHM_WEAK_TAIL_NS). */
		if (atomic_load_explicit(&q->queued, memory_order_seq_cst) ||
		    atomic_load_explicit(&q->unplaced, memory_order_relaxed))
			return true;
	return false;
}

/* Sleep until a post wakes us (or 1 ms). We store ASLEEP, then look at
 * the QUEUED hints; a poster stores QUEUED, then reads ASLEEP; all four
 * accesses are seq_cst (Dekker): either we see its request or it sees
 * ASLEEP and wakes us, so no request waits for the timeout. */
static void nic_idle(struct weak_nic *nic)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 1000000;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&nic->list_lock);
	/* Seq_cst: pairs with the load of ASLEEP in weak_post. */
	atomic_store_explicit(&nic->asleep, true, memory_order_seq_cst);
	/* Relaxed: stop is a flag; join() orders the rest. */
	if (!nic_has_work(nic) &&
	    !atomic_load_explicit(&nic->stop, memory_order_relaxed))
		pthread_cond_timedwait(&nic->wake, &nic->list_lock, &ts);
	/* Relaxed: a late false only costs a poster a needless signal. */
	atomic_store_explicit(&nic->asleep, false, memory_order_relaxed);
	pthread_mutex_unlock(&nic->list_lock);
}

static void *nic_main(void *arg)
{
	struct weak_nic *nic = arg;
	uint64_t idle_since = 0;
	unsigned idle = 0;
	/* Relaxed: stop is a flag; join() orders the rest. */
	while (!atomic_load_explicit(&nic->stop, memory_order_relaxed)) {
		int state = nic_pass(nic);
		if (state == NIC_PROGRESS) {
			idle = 0;
			continue;
		}
		uint64_t now = now_ns();
		if (!idle++)
			idle_since = now;
		/* Busy-poll (with pauses) for a few microseconds, then poll
		 * yielding while requests wait on their delays, then sleep. */
		if (now - idle_since < IDLE_SPIN_NS) {
			cpu_relax(32);
			continue;
		}
		if (state == NIC_WAITING || now - idle_since < 2 * IDLE_SPIN_NS) {
			sched_yield();
			continue;
		}
		nic_idle(nic);
	}
	return NULL;
}

/* ---- ops table ---------------------------------------------------------------- */

static int weak_open(const struct loco_tp_config *cfg, struct loco_tp **out)
{
	struct loco_tp *tp = calloc(1, sizeof(*tp));
	struct weak_nic *nic = calloc(1, sizeof(*nic));
	int rc = tp && nic ? loco_shm_open_common(cfg, tp) : -ENOMEM;
	if (rc)
		goto free_mem;
	uint64_t seed = env_u64("LOCO_SHM_WEAK_SEED", env_u64("LOCO_SHM_WEAK", 0));
	if (!seed && getrandom(&seed, sizeof(seed), 0) != sizeof(seed))
		seed = (uint64_t)getpid();
	nic->seed = seed ^ (UINT64_C(0x9e3779b97f4a7c15) * (cfg->node_id + 1));
	nic->rng = nic->seed | 1;
	nic->delay_ns = env_u64("LOCO_SHM_WEAK_DELAY_NS", 2000);
	nic->half_rtt_ns = env_u64("LOCO_SHM_WEAK_RTT_NS", 0) / 2;
	nic->place_ns = env_u64("LOCO_SHM_WEAK_PLACE_NS", 16 * nic->delay_ns);
	nic->tail_ns = env_u64("LOCO_SHM_WEAK_TAIL_NS", 1000000);
	pthread_mutex_init(&nic->list_lock, NULL);
	pthread_cond_init(&nic->wake, NULL);
	rc = -pthread_create(&nic->thread, NULL, nic_main, nic);
	if (rc)
		goto close_shm;
	loco_info("shm-weak", "emulated NIC: seed %llu, delay %llu ns, placement "
		  "%llu ns, rtt %llu ns", (unsigned long long)seed,
		  (unsigned long long)nic->delay_ns,
		  (unsigned long long)nic->place_ns,
		  (unsigned long long)(2 * nic->half_rtt_ns));
	tp->weak = nic;
	*out = tp;
	return 0;
close_shm:
	loco_shm_close_common(tp);
free_mem:
	free(nic);
	free(tp);
	return rc;
}

static void weak_close(struct loco_tp *tp)
{
	struct weak_nic *nic = tp->weak;
	/* Relaxed: join() below orders everything after the flag. */
	atomic_store_explicit(&nic->stop, true, memory_order_relaxed);
	pthread_mutex_lock(&nic->list_lock);
	pthread_cond_signal(&nic->wake);
	pthread_mutex_unlock(&nic->list_lock);
	pthread_join(nic->thread, NULL);
	pthread_mutex_destroy(&nic->list_lock);
	pthread_cond_destroy(&nic->wake);
	free(nic);
	loco_shm_close_common(tp);
	free(tp);
}

static void *weak_arena_base(struct loco_tp *tp) { return tp->arena; }
static uint64_t weak_arena_len(struct loco_tp *tp) { return tp->len; }

static int weak_arena_desc(struct loco_tp *tp, void *desc, size_t *len)
{
	return loco_shm_ops.arena_desc(tp, desc, len);
}

static int weak_cq_create(struct loco_tp *tp, struct loco_tp_cq **out)
{
	struct loco_tp_cq *tcq = calloc(1, sizeof(*tcq));
	struct weak_cq *cq = aligned_alloc(LINE, sizeof(*cq));
	if (!tcq || !cq) {
		free(tcq);
		free(cq);
		return -ENOMEM;
	}
	memset(cq, 0, sizeof(*cq));
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	loco_shm_cq_slot(tp, tcq);
	tcq->weak = cq;
	*out = tcq;
	return 0;
}

static void weak_cq_destroy(struct loco_tp_cq *tcq)
{
	struct weak_cq *cq = tcq->weak;
	pthread_spin_destroy(&cq->lock);
	free(cq->ring);
	free(cq);
	free(tcq);
}

static int weak_qp_create(struct loco_tp *tp, struct loco_tp_cq *cq,
			  uint32_t peer, struct loco_tp_qp **out)
{
	struct loco_tp_qp *tqp = calloc(1, sizeof(*tqp));
	struct weak_qp *qp = aligned_alloc(LINE, sizeof(*qp));
	int rc = tqp && qp ? loco_shm_qp_peer(tp, peer, tqp) : -ENOMEM;
	if (rc) {
		free(tqp);
		free(qp);
		return rc;
	}
	memset(qp, 0, sizeof(*qp));
	tqp->tp = tp;
	tqp->cq = cq;
	tqp->peer = peer;
	tqp->weak = qp;
	loco_shm_qp_guard(tp, cq, tqp);
	pthread_spin_init(&qp->lock, PTHREAD_PROCESS_PRIVATE);
	/* Relaxed: a unique number is all that is needed. */
	uint64_t serial = atomic_fetch_add_explicit(
		&((struct weak_nic *)tp->weak)->qp_serial, 1, memory_order_relaxed);
	qp->rng = (((struct weak_nic *)tp->weak)->seed +
		   serial * UINT64_C(0xbf58476d1ce4e5b9)) | 1;
	qp->cq = cq->weak;
	qp->owner = tqp;
	cq->qps[cq->nqp++] = tqp;
	struct weak_nic *nic = tp->weak;
	pthread_mutex_lock(&nic->list_lock);
	qp->next = nic->qps;
	nic->qps = qp;
	pthread_mutex_unlock(&nic->list_lock);
	*out = tqp;
	return 0;
}

/* The core waits for outstanding ops before destroying a QP; whatever the
 * NIC still holds (unplaced WRITEs) is placed now. */
static void weak_qp_destroy(struct loco_tp_qp *tqp)
{
	struct weak_qp *qp = tqp->weak;
	struct weak_nic *nic = tqp->tp->weak;
	pthread_mutex_lock(&nic->list_lock);
	for (struct weak_qp **pp = &nic->qps; *pp; pp = &(*pp)->next) {
		if (*pp == qp) {
			*pp = qp->next;
			break;
		}
	}
	pthread_mutex_unlock(&nic->list_lock);
	place_all_guarded(&qp->rng, qp);
	struct loco_tp_cq *cq = tqp->cq;
	for (unsigned i = 0; i < cq->nqp; i++) {
		if (cq->qps[i] == tqp) {
			cq->qps[i] = cq->qps[--cq->nqp];
			break;
		}
	}
	pthread_spin_destroy(&qp->lock);
	loco_shm_qp_unguard(tqp);
	free(qp);
	free(tqp);
}

/* Drop the requests not yet executed (the NIC executes under qp->lock, so
 * none is half done). Executed WRITEs still being placed only touch the
 * peer's memory, from copies: they are left to the NIC. */
static void weak_qp_abort(struct loco_tp_qp *tqp)
{
	struct weak_qp *qp = tqp->weak;
	pthread_spin_lock(&qp->lock);
	qp->qhead = 0;
	qp->qcount = 0;
	/* Relaxed: a hint (qp->lock orders the queue itself). */
	atomic_store_explicit(&qp->queued, false, memory_order_relaxed);
	pthread_spin_unlock(&qp->lock);
}

static int weak_post(struct loco_tp_qp *tqp, const struct loco_wr *wr, unsigned n)
{
	struct weak_qp *qp = tqp->weak;
	struct weak_nic *nic = tqp->tp->weak;
	uint64_t now = now_ns(), prev = 0;
	pthread_spin_lock(&qp->lock);
	if (qp->qcount + n > WQ_CAP) {
		pthread_spin_unlock(&qp->lock);
		return -EAGAIN;
	}
	if (qp->qcount)
		prev = qp->q[(qp->qhead + qp->qcount - 1) % WQ_CAP].not_before;
	for (unsigned i = 0; i < n; i++) {
		struct weak_wr *w = &qp->q[(qp->qhead + qp->qcount++) % WQ_CAP];
		w->wr = wr[i];
		/* Random delay; never before the request ahead of it. */
		uint64_t d = rng_next(&qp->rng) % (nic->delay_ns + 1);
		w->not_before = now + nic->half_rtt_ns + d;
		if (w->not_before < prev)
			w->not_before = prev;
		prev = w->not_before;
	}
	/* Seq_cst: pairs with nic_idle (store ASLEEP, load QUEUED). */
	atomic_store_explicit(&qp->queued, true, memory_order_seq_cst);
	pthread_spin_unlock(&qp->lock);
	/* Seq_cst: the NIC sees QUEUED or we see ASLEEP. Reading ASLEEP (a
	 * line the NIC rarely writes) keeps posting free of a shared counter. */
	if (atomic_load_explicit(&nic->asleep, memory_order_seq_cst)) {
		pthread_mutex_lock(&nic->list_lock);
		pthread_cond_signal(&nic->wake);
		pthread_mutex_unlock(&nic->list_lock);
	}
	return 0;
}

const struct loco_transport_ops loco_shm_weak_ops = {
	.name = "shm-weak",
	.open = weak_open,
	.close = weak_close,
	.arena_base = weak_arena_base,
	.arena_len = weak_arena_len,
	.arena_desc = weak_arena_desc,
	.peer_add = loco_shm_peer_add,
	.dm_len = loco_shm_dm_len,
	.dm_zero = loco_shm_dm_zero,
	.persist = loco_shm_persist,
	.mirror_set = loco_shm_mirror_set,
	.take_over = loco_shm_take_over,
	.cq_create = weak_cq_create,
	.cq_destroy = weak_cq_destroy,
	.qp_create = weak_qp_create,
	.qp_destroy = weak_qp_destroy,
	.post = weak_post,
	.poll = weak_poll,
	.qp_abort = weak_qp_abort,
	.fence = loco_shm_fence,
	.fence_at = loco_shm_fence_at,
	.fenced_here = loco_shm_fenced_here,
};
