/* SPDX-License-Identifier: MIT */
/* Threads, posting, completion tracking, ack keys, fences and batches.
 *
 * Every op a thread posts gets the next ticket of that thread. Each
 * (thread, peer) QP keeps the tickets of its outstanding ops in post order;
 * a signalled completion for ticket t retires every entry <= t, because a
 * QP completes in order. An ack key {peers, T} is complete when no QP in
 * peers has an outstanding ticket <= T. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loco/internal.h"

#define QP_ENTRY(ticket, op) (((ticket) << 3) | (uint64_t)(op))
#define ENTRY_TICKET(e) ((e) >> 3)
#define ENTRY_OP(e) ((unsigned)((e) & 7))

static_assert((int)LOCO_BATCH_READ == (int)LOCO_OP_READ &&
	      (int)LOCO_BATCH_WRITE == (int)LOCO_OP_WRITE &&
	      (int)LOCO_BATCH_CAS == (int)LOCO_OP_CAS &&
	      (int)LOCO_BATCH_FAA == (int)LOCO_OP_FAA,
	      "batch opcodes are the transport's");

uint64_t loco_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- threads ---------------------------------------------------------- */

int loco_thread_create(struct loco_mgr *mgr, struct loco_thread **out)
{
	struct loco_thread *thr = calloc(1, sizeof(*thr));
	if (!thr)
		return -ENOMEM;
	int rc = mgr->tp_ops->cq_create(mgr->tp, &thr->cq);
	if (rc) {
		free(thr);
		return rc;
	}
	thr->mgr = mgr;
	thr->hot.sync = mgr->tp_ops->sync;
	thr->hot.incarnation = mgr->boot_id;
	thr->cpu = mgr->aff ? loco_affinity_bind(mgr->aff) : -1;
	pthread_mutex_init(&thr->lock, NULL);
	pthread_mutex_lock(&mgr->thr_lock);
	thr->next = mgr->threads;
	mgr->threads = thr;
	pthread_mutex_unlock(&mgr->thr_lock);
	*out = thr;
	return 0;
}

struct loco_mgr *loco_thread_mgr(const struct loco_thread *thr)
{
	return thr->mgr;
}

int loco_thread_cpu(const struct loco_thread *thr)
{
	return thr->cpu;
}

static uint64_t st_get(const _Atomic uint64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed); /* a counter */
}

static void stats_add(struct loco_stats *dst, const struct loco_thread_hot *s)
{
	dst->reads += st_get(&s->reads);
	dst->writes += st_get(&s->writes);
	dst->cas += st_get(&s->cas);
	dst->faa += st_get(&s->faa);
	dst->flushes += st_get(&s->flushes);
	dst->bytes_read += st_get(&s->bytes_read);
	dst->bytes_written += st_get(&s->bytes_written);
	dst->doorbells += st_get(&s->doorbells);
	dst->rtts += st_get(&s->rtts);
	dst->fences += st_get(&s->fences);
	for (unsigned w = 0; w < 2; w++) {
		uint64_t r = st_get(&s->direct_ops[w][LOCO_OP_READ]);
		uint64_t wr = st_get(&s->direct_ops[w][LOCO_OP_WRITE]);
		uint64_t c = st_get(&s->direct_ops[w][LOCO_OP_CAS]);
		uint64_t f = st_get(&s->direct_ops[w][LOCO_OP_FAA]);
		dst->reads += r;
		dst->bytes_read += 8 * r;
		dst->writes += wr;
		dst->bytes_written += 8 * wr;
		dst->cas += c;
		dst->faa += f;
		dst->doorbells += r + wr + c + f;
		if (w)
			dst->rtts += r + wr + c + f;
	}
	uint64_t r = st_get(&s->batched_ops[LOCO_OP_READ]);
	uint64_t wr = st_get(&s->batched_ops[LOCO_OP_WRITE]);
	dst->reads += r;
	dst->bytes_read += 8 * r;
	dst->writes += wr;
	dst->bytes_written += 8 * wr;
	dst->cas += st_get(&s->batched_ops[LOCO_OP_CAS]);
	dst->faa += st_get(&s->batched_ops[LOCO_OP_FAA]);
}

static void thread_free(struct loco_thread *thr)
{
	const struct loco_transport_ops *ops = thr->mgr->tp_ops;
	for (unsigned p = 0; p < LOCO_MAX_NODES; p++) {
		if (!thr->qp[p])
			continue;
		if (thr->qp[p]->tp)
			ops->qp_destroy(thr->qp[p]->tp);
		free(thr->qp[p]);
	}
	ops->cq_destroy(thr->cq);
	loco_hist_buf_free(thr);
	pthread_mutex_destroy(&thr->lock);
	free(thr);
}

/* Unlink THR and fold its stats into the manager's. */
static void thread_unlink(struct loco_thread *thr)
{
	struct loco_mgr *mgr = thr->mgr;
	pthread_mutex_lock(&mgr->thr_lock);
	for (struct loco_thread **pp = &mgr->threads; *pp; pp = &(*pp)->next) {
		if (*pp == thr) {
			*pp = thr->next;
			break;
		}
	}
	stats_add(&mgr->retired, &thr->hot);
	pthread_mutex_unlock(&mgr->thr_lock);
}

int loco_thread_destroy(struct loco_thread *thr)
{
	if (!thr)
		return 0;
	int rc = loco_fence(thr, LOCO_FENCE_THREAD, 0);
	if (rc)
		loco_warn("thread", "outstanding ops did not finish: %s",
			  loco_strerror(rc));
	thread_unlink(thr);
	thread_free(thr);
	return rc;
}

void loco_thread_retire_all(struct loco_mgr *mgr)
{
	while (mgr->threads) {
		struct loco_thread *thr = mgr->threads;
		loco_warn("mgr", "thread context not destroyed before the manager");
		thread_unlink(thr);
		thread_free(thr);
	}
}

void loco_thread_stats(struct loco_thread *thr, struct loco_stats *out)
{
	struct loco_stats s = { 0 };
	stats_add(&s, &thr->hot);
	*out = s;
}

void loco_mgr_stats(struct loco_mgr *mgr, struct loco_stats *out)
{
	struct loco_stats sum;
	pthread_mutex_lock(&mgr->thr_lock);
	sum = mgr->retired;
	for (struct loco_thread *t = mgr->threads; t; t = t->next)
		stats_add(&sum, &t->hot);
	pthread_mutex_unlock(&mgr->thr_lock);
	*out = sum;
}

/* ---- completion tracking (thr->lock held) ------------------------------ */

static void qp_retire(struct loco_qp *qp, uint64_t ticket, int status)
{
	while (qp->count && ENTRY_TICKET(qp->ring[qp->head]) <= ticket) {
		uint64_t e = qp->ring[qp->head];
		/* A completed READ or atomic proves earlier WRITEs placed. */
		if (ENTRY_OP(e) != LOCO_OP_WRITE && ENTRY_TICKET(e) > qp->placed)
			qp->placed = ENTRY_TICKET(e);
		qp->head = (qp->head + 1) % LOCO_QP_DEPTH;
		qp->count--;
	}
	if (status && !qp->err) {
		qp->err = status;
		qp->err_ticket = ticket;
		loco_err("ops", "op to node %u failed: %s", qp->peer,
			 loco_strerror(status));
	}
}

static uint32_t peer_gen(struct loco_mgr *mgr, uint32_t peer);

/* A FLUSH on QP found its peer dead or restarted (-LOCO_EDOWN): it is
 * down now, whether or not the keeper noticed yet, so that loco_peer_wait
 * waits for its return; unless the manager already knows a newer
 * incarnation (the QP is of an older one: its ops are being drained). */
static void op_failed(struct loco_thread *thr, struct loco_qp *qp, int status)
{
	if (status == -LOCO_EFENCED)
		loco_fenced_self(thr->mgr, "a remote operation was refused");
	if (status == -LOCO_EDOWN && qp->gen == peer_gen(thr->mgr, qp->peer))
		loco_peer_down(thr->mgr, qp->peer, "a FLUSH found it gone");
}

/* STATUS of a failed op, or -LOCO_EFENCED if this incarnation is
 * fenced and STATUS is how a target that refuses it ends the op (verbs:
 * its QP moved to the error state, so the initiator's requests are
 * flushed or time out; its connection dropped). Other errors stay. */
static int fenced_status(struct loco_mgr *mgr, int status)
{
	bool refusal = status == -LOCO_EQP || status == -ETIMEDOUT ||
		       status == -ECONNABORTED || status == -ECONNRESET;
	return refusal && loco_self_fenced(mgr) ? -LOCO_EFENCED : status;
}

static int progress_locked(struct loco_thread *thr)
{
	struct loco_cqe cqe[32];
	int n = thr->mgr->tp_ops->poll(thr->cq, cqe, 32);
	for (int i = 0; i < n; i++) {
		if (cqe[i].status)
			cqe[i].status = fenced_status(thr->mgr, cqe[i].status);
		struct loco_qp *qp = cqe[i].peer < LOCO_MAX_NODES ?
				     thr->qp[cqe[i].peer] : NULL;
		if (qp)
			qp_retire(qp, cqe[i].wr_id, cqe[i].status);
		if (qp && cqe[i].status)
			op_failed(thr, qp, cqe[i].status);
	}
	return n < 0 ? n : 0;
}

/* 1 if every op of PEERS with ticket <= T is done, 0 if not, or an error. */
static int done_locked(struct loco_thread *thr, uint64_t peers, uint64_t t)
{
	for (uint64_t m = peers; m; m &= m - 1) {
		struct loco_qp *qp = thr->qp[__builtin_ctzll(m)];
		if (!qp)
			continue;
		if (qp->err)
			return qp->err;
		/* Ops of an incarnation that died, up to the first failed one. */
		if (qp->old_err && t >= qp->old_err_ticket && t <= qp->old_upto)
			return qp->old_err;
		if (qp->count && ENTRY_TICKET(qp->ring[qp->head]) <= t)
			return 0;
	}
	return 1;
}

int loco_ack_test_slow(struct loco_thread *thr, const struct loco_ack *ack)
{
	if (thr->hot.sync)  /* completed in post; a failed post returned its error */
		return 1;
	pthread_mutex_lock(&thr->lock);
	int rc = progress_locked(thr);
	if (!rc)
		rc = done_locked(thr, ack->peers, ack->ticket);
	pthread_mutex_unlock(&thr->lock);
	return rc;
}

/* Count a round trip if ops were posted since the last wait (on an
 * asynchronous transport with thr->lock held). */
static void rtt_mark(struct loco_thread *thr)
{
	if (thr->hot.unwaited) {
		loco_hot_add(&thr->hot.rtts, 1);
		thr->hot.unwaited = 0;
	}
}

/* Wait until every op of PEERS with ticket <= T completed; RTT: count
 * this wait as a round trip. The clock is read only once the first check
 * found something outstanding. */
static int wait_done(struct loco_thread *thr, uint64_t peers, uint64_t t,
		     int timeout_ms, bool rtt)
{
	if (thr->hot.sync) {
		if (rtt)
			rtt_mark(thr);
		return 0;
	}
	struct loco_wait w;
	loco_wait_init(&w, thr->mgr, timeout_ms);
	for (;;) {
		pthread_mutex_lock(&thr->lock);
		if (rtt)
			rtt_mark(thr);
		rtt = false;
		int rc = progress_locked(thr);
		if (!rc)
			rc = done_locked(thr, peers, t);
		pthread_mutex_unlock(&thr->lock);
		if (!rc)
			rc = loco_wait_step(&w);
		if (rc)
			return rc < 0 ? rc : 0;
	}
}

int loco_ack_wait_slow(struct loco_thread *thr, const struct loco_ack *ack,
		       int timeout_ms)
{
	return wait_done(thr, ack->peers, ack->ticket, timeout_ms, true);
}

/* ---- posting ------------------------------------------------------------ */

/* The inline path's view of a new QP's peer arena, if the transport
 * offers one and it can hold a word (loco_direct_span). */
static void direct_open(struct loco_mgr *mgr, uint32_t peer,
			struct loco_thread_hot *h, const struct loco_qp *qp)
{
	uint64_t len = 0;
	struct loco_guard_mark mark;
	const _Atomic uint64_t *fenced;
	uint8_t *base = mgr->tp_ops->qp_direct(qp->tp, &len, &mark, &fenced);
	if (!base || len < LOCO_ARENA_FIRST + 8)
		return;
	_Atomic uint64_t *words_at = &h->direct_words[peer];
	h->direct_base[peer] = base;
	h->direct[peer].mark = mark;
	h->direct[peer].fenced = fenced;
	uint64_t words = (len - LOCO_ARENA_FIRST) / 8;
	/* Relaxed (thr->lock held, as by loco_threads_direct_close): then
	 * the arena length, which the peer keeper zeroes before it clears
	 * every thread's words (peers.c): a peer that died meanwhile is not
	 * reached inline. */
	atomic_store_explicit(words_at, words, memory_order_relaxed);
	if (!atomic_load_explicit(&mgr->peer_arena_len[peer], memory_order_relaxed))
		atomic_store_explicit(words_at, 0, memory_order_relaxed);
	/* Seq_cst: our store of the words, then the fenced flag, which
	 * loco_fenced_self sets before loco_threads_direct_stop clears
	 * every thread's words: either that clear follows our store, or we
	 * see it. */
	atomic_thread_fence(memory_order_seq_cst);
	if (loco_self_fenced(mgr))
		atomic_store_explicit(words_at, 0, memory_order_relaxed);
}

/* Under thr->lock: the inline path stops using PEER's mapping. */
static void direct_close(struct loco_thread *thr, uint32_t peer)
{
	/* Relaxed: see loco_direct_span. */
	atomic_store_explicit(&thr->hot.direct_words[peer], 0,
			      memory_order_relaxed);
}

void loco_threads_direct_stop(struct loco_mgr *mgr)
{
	pthread_mutex_lock(&mgr->thr_lock);
	for (struct loco_thread *t = mgr->threads; t; t = t->next)
		for (uint32_t p = 0; p < LOCO_MAX_NODES; p++)
			/* Relaxed: see loco_direct_span; direct_open checks the
			 * fenced flag (set before this) after its store. */
			atomic_store_explicit(&t->hot.direct_words[p], 0,
					      memory_order_relaxed);
	pthread_mutex_unlock(&mgr->thr_lock);
}

void loco_threads_direct_close(struct loco_mgr *mgr, uint32_t peer)
{
	pthread_mutex_lock(&mgr->thr_lock);
	for (struct loco_thread *t = mgr->threads; t; t = t->next) {
		pthread_mutex_lock(&t->lock);
		direct_close(t, peer);
		pthread_mutex_unlock(&t->lock);
	}
	pthread_mutex_unlock(&mgr->thr_lock);
}

/* Relaxed: ordered after the arena length's acquire (check_bounds, or
 * peer_usable for fences and persists). */
static uint32_t peer_gen(struct loco_mgr *mgr, uint32_t peer)
{
	return atomic_load_explicit(&mgr->peer_gen[peer], memory_order_relaxed);
}

static bool peer_durable(struct loco_mgr *mgr, uint32_t peer)
{
	/* Relaxed: as peer_gen. */
	return atomic_load_explicit(&mgr->peer_flags[peer], memory_order_relaxed) &
	       LOCO_HELLO_DURABLE;
}

/* 0 if PEER's memory is there (hello'd, not down), else why not. */
static int peer_usable(struct loco_mgr *mgr, uint32_t peer)
{
	/* Acquire: pairs with the release in loco_peer_add (see
	 * loco_peer_span); the generation and flags are read after it. */
	return atomic_load_explicit(&mgr->peer_arena_len[peer],
				    memory_order_acquire) ? 0 :
	       loco_peer_gone(mgr, peer);
}

/* Whether QP may have WRITEs that are not placed yet. */
static bool qp_unplaced(const struct loco_thread *thr, const struct loco_qp *qp)
{
	return thr->hot.sync ? thr->hot.unplaced >> qp->peer & 1 :
	       qp->last_write > qp->placed;
}

/* Wait (bounded) until QP has nothing outstanding; past the default
 * timeout, stop its requests and fail them with -LOCO_EDOWN. */
static void qp_drain_locked(struct loco_thread *thr, struct loco_qp *qp)
{
	struct loco_wait w;
	loco_wait_init(&w, thr->mgr, -1);
	while (qp->count && !progress_locked(thr) && qp->count) {
		pthread_mutex_unlock(&thr->lock);
		int rc = loco_wait_step(&w);
		pthread_mutex_lock(&thr->lock);
		if (rc)
			break;
	}
	if (qp->count) {
		thr->mgr->tp_ops->qp_abort(qp->tp);
		qp_retire(qp, UINT64_MAX, -LOCO_EDOWN);
	}
}

/* QP's transport QP was made for an incarnation of its peer that died:
 * settle what is outstanding on it and start afresh for generation GEN.
 * Acks of the old ops keep their outcome (old_err); WRITEs that were
 * neither placed nor persisted may be gone, which the next fence or
 * persist reports. */
static void qp_renew_locked(struct loco_thread *thr, struct loco_qp *qp,
			    uint32_t gen)
{
	qp_drain_locked(thr, qp);
	thr->mgr->tp_ops->qp_destroy(qp->tp);
	qp->tp = NULL;
	if (qp->err) {
		qp->old_err = qp->err;
		qp->old_err_ticket = qp->err_ticket;
		qp->old_upto = thr->ticket;
	}
	qp->lost |= qp->ndirty || qp_unplaced(thr, qp);
	qp->placed = qp->last_write;
	qp->ndirty = 0;
	qp->err = 0;
	qp->head = qp->count = 0;
	qp->gen = gen;
	thr->hot.unplaced &= ~(UINT64_C(1) << qp->peer);
	direct_close(thr, qp->peer);
}

static int qp_get_locked(struct loco_thread *thr, uint32_t peer,
			 struct loco_qp **out)
{
	struct loco_mgr *mgr = thr->mgr;
	struct loco_qp *qp = thr->qp[peer];
	uint32_t gen = peer_gen(mgr, peer);
	if (!qp) {
		qp = calloc(1, sizeof(*qp));
		if (!qp)
			return -ENOMEM;
		qp->peer = peer;
		qp->gen = gen;
		thr->qp[peer] = qp;
		thr->qps |= UINT64_C(1) << peer;
	}
	if (qp->tp && qp->gen != gen)
		qp_renew_locked(thr, qp, gen);
	if (!qp->tp) {
		const struct loco_transport_ops *ops = mgr->tp_ops;
		int rc = ops->qp_create(mgr->tp, thr->cq, peer, &qp->tp);
		if (rc)
			return rc;
		qp->durable = peer_durable(mgr, peer);
		/* A durable peer's inline WRITEs and atomics note their
		 * ranges (loco_direct_noted), as posts do (dirty_note). */
		thr->hot.noted = (thr->hot.noted & ~(UINT64_C(1) << peer)) |
				 (uint64_t)qp->durable << peer;
		if (thr->hot.sync && ops->qp_direct)
			direct_open(mgr, peer, &thr->hot, qp);
	}
	if (qp->err)
		return qp->err;
	*out = qp;
	return 0;
}

/* ---- dirty ranges of durable peers --------------------------------------- */

#define DIRTY_MERGE_MAX (UINT64_C(1) << 30)

/* Note [OFF, OFF+LEN) as written on QP: merged into a range it overlaps
 * or nearly touches, else a new one. False if the list is full. */
static bool dirty_add(struct loco_qp *qp, uint64_t off, uint64_t len)
{
	uint64_t end = off + len;
	for (unsigned i = qp->ndirty; i-- > 0;) {
		struct loco_drange *d = &qp->dirty[i];
		uint64_t lo = off < d->off ? off : d->off;
		uint64_t hi = end > d->off + d->len ? end : d->off + d->len;
		if (off > d->off + d->len + LOCO_DIRTY_GAP ||
		    d->off > end + LOCO_DIRTY_GAP || hi - lo > DIRTY_MERGE_MAX)
			continue;
		d->off = lo;
		d->len = hi - lo;
		return true;
	}
	if (qp->ndirty == LOCO_DIRTY_MAX)
		return false;
	qp->dirty[qp->ndirty++] = (struct loco_drange){ off, len };
	return true;
}

/* FLUSH requests for every dirty range of QP into WR (LOCO_DIRTY_MAX
 * room), emptying the list; returns their count. */
static unsigned dirty_take(struct loco_qp *qp, struct loco_wr *wr)
{
	unsigned n = qp->ndirty;
	for (unsigned i = 0; i < n; i++)
		wr[i] = (struct loco_wr){ .opcode = LOCO_OP_FLUSH,
					  .space = LOCO_SPACE_ARENA,
					  .remote_off = qp->dirty[i].off,
					  .len = (uint32_t)qp->dirty[i].len };
	qp->ndirty = 0;
	return n;
}

static bool dirties(const struct loco_wr *wr)
{
	return wr->space == LOCO_SPACE_ARENA &&
	       (wr->opcode == LOCO_OP_WRITE || wr->opcode == LOCO_OP_CAS ||
		wr->opcode == LOCO_OP_FAA);
}

/* Make room for N entries; drops and retakes thr->lock while waiting. */
static int qp_room_locked(struct loco_thread *thr, struct loco_qp *qp,
			  unsigned n)
{
	struct loco_wait w;
	loco_wait_init(&w, thr->mgr, -1);
	while (qp->count + n > LOCO_QP_DEPTH) {
		int rc = progress_locked(thr);
		if (rc)
			return rc;
		if (qp->count + n <= LOCO_QP_DEPTH)
			break;
		pthread_mutex_unlock(&thr->lock);
		rc = loco_wait_step(&w);
		pthread_mutex_lock(&thr->lock);
		if (rc)
			return rc;
	}
	return qp->err;
}

/* Hand N requests to the transport; on -EAGAIN (its own resources busy)
 * poll completions and retry until the default timeout. */
static int tp_post_locked(struct loco_thread *thr, struct loco_qp *qp,
			  struct loco_wr *wr, unsigned n)
{
	struct loco_wait w;
	loco_wait_init(&w, thr->mgr, -1);
	for (;;) {
		int rc = thr->mgr->tp_ops->post(qp->tp, wr, n);
		if (rc != -EAGAIN)
			return rc;
		if ((rc = progress_locked(thr)))
			return rc;
		pthread_mutex_unlock(&thr->lock);
		rc = loco_wait_step(&w);
		pthread_mutex_lock(&thr->lock);
		if (rc)
			return rc;
	}
}

static void count_op(struct loco_thread_hot *st, uint8_t opcode, uint32_t len)
{
	switch (opcode) {
	case LOCO_OP_READ:
		loco_hot_add(&st->reads, 1);
		loco_hot_add(&st->bytes_read, len);
		break;
	case LOCO_OP_WRITE:
		loco_hot_add(&st->writes, 1);
		loco_hot_add(&st->bytes_written, len);
		break;
	case LOCO_OP_CAS:
		loco_hot_add(&st->cas, 1);
		break;
	case LOCO_OP_FLUSH:
		loco_hot_add(&st->flushes, 1);
		break;
	default:
		loco_hot_add(&st->faa, 1);
		break;
	}
}

/* Tickets for N requests; the last one is signalled. */
static void assign_tickets(struct loco_thread *thr, struct loco_wr *wr,
			   unsigned n)
{
	uint64_t first = thr->ticket + 1;
	for (unsigned i = 0; i < n; i++) {
		wr[i].wr_id = first + i;
		wr[i].signaled = i + 1 == n;
	}
}

/* One doorbell of N requests rang (counted by kind by the caller): their
 * tickets, and the thread has ops not waited for. */
static void rang(struct loco_thread *thr, unsigned n)
{
	thr->ticket += n;
	loco_hot_add(&thr->hot.doorbells, 1);
	thr->hot.unwaited = 1;
	thr->hot.pending = 1;
}

/* The N requests to PEER were accepted by the transport: count them and
 * fill ACK. */
static void posted(struct loco_thread *thr, uint32_t peer,
		   const struct loco_wr *wr, unsigned n, struct loco_ack *ack)
{
	for (unsigned i = 0; i < n; i++)
		count_op(&thr->hot, wr[i].opcode, wr[i].len);
	rang(thr, n);
	if (ack) {
		ack->peers |= UINT64_C(1) << peer;
		if (!thr->hot.sync)  /* sync: complete already, no ticket */
			ack->ticket = thr->ticket;
	}
}

static int post_locked(struct loco_thread *thr, uint32_t peer,
		       struct loco_wr *wr, unsigned n, struct loco_ack *ack);
static int post_sync(struct loco_thread *thr, uint32_t peer,
		     struct loco_wr *wr, unsigned n, struct loco_ack *ack);

/* [OFF, OFF+LEN) of QP's peer was just written: noted; a full list is
 * flushed first (persisting early is always allowed). A FLUSH that
 * cannot be posted leaves QP lost: the next persist reports it.
 * thr->lock held on async transports. */
static void dirty_note_range(struct loco_thread *thr, struct loco_qp *qp,
			     uint64_t off, uint64_t len)
{
	if (dirty_add(qp, off, len))
		return;
	struct loco_wr fl[LOCO_DIRTY_MAX];
	unsigned k = dirty_take(qp, fl);
	int rc = thr->hot.sync ? post_sync(thr, qp->peer, fl, k, NULL) :
				 post_locked(thr, qp->peer, fl, k, NULL);
	if (rc)
		qp->lost = true;
	dirty_add(qp, off, len);
}

/* The N requests just posted on QP dirty these ranges (dirty_note_range). */
static void dirty_note(struct loco_thread *thr, struct loco_qp *qp,
		       const struct loco_wr *wr, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (dirties(&wr[i]))
			dirty_note_range(thr, qp, wr[i].remote_off, wr[i].len);
}

/* The inline path reaches PEER only through a QP opened by qp_get_locked
 * (which set its noted bit), on a sync transport: no lock to take. */
void loco_direct_noted(struct loco_thread *thr, uint32_t peer, uint64_t off,
		       uint32_t len)
{
	dirty_note_range(thr, thr->qp[peer], off, len);
}

/* Post N requests to PEER as one doorbell (thr->lock held). Tickets are
 * assigned here; the last request is signalled. */
static int post_locked(struct loco_thread *thr, uint32_t peer,
		       struct loco_wr *wr, unsigned n, struct loco_ack *ack)
{
	struct loco_qp *qp;
	int rc = loco_self_fenced(thr->mgr) ? -LOCO_EFENCED :
		 qp_get_locked(thr, peer, &qp);
	if (!rc)
		rc = qp_room_locked(thr, qp, n);
	if (!rc) {
		assign_tickets(thr, wr, n);
		rc = tp_post_locked(thr, qp, wr, n);
	}
	/* Refused by the initiator's guard (ucx-sm) or a target that fenced
	 * this incarnation (verbs: its connection request refused). */
	if (rc == -LOCO_EFENCED)
		loco_fenced_self(thr->mgr, "a remote operation was refused");
	if (rc)
		return rc;
	for (unsigned i = 0; i < n; i++) {
		unsigned slot = (qp->head + qp->count) % LOCO_QP_DEPTH;
		qp->ring[slot] = QP_ENTRY(wr[i].wr_id, wr[i].opcode);
		qp->count++;
		if (wr[i].opcode == LOCO_OP_WRITE)
			qp->last_write = wr[i].wr_id;
	}
	posted(thr, peer, wr, n, ack);
	if (qp->durable)
		dirty_note(thr, qp, wr, n);
	return 0;
}

/* PEER's QP of a sync transport now has unplaced WRITEs if the last of
 * the requests it executed was a WRITE: a READ or atomic places the
 * WRITEs before it, as its completion does on the other transports, so
 * fences post the same READs everywhere. */
static void sync_placed(struct loco_thread *thr, uint32_t peer, bool write)
{
	if (write) {
		thr->hot.unplaced |= UINT64_C(1) << peer;
		thr->hot.pending = 1;
	} else
		thr->hot.unplaced &= ~(UINT64_C(1) << peer);
}


/* Post on a sync transport (thr->hot.sync): the requests have executed
 * and completed when the transport returns, so nothing is queued and no
 * lock is taken (only this thread touches its QPs). */
static int post_sync(struct loco_thread *thr, uint32_t peer,
		     struct loco_wr *wr, unsigned n, struct loco_ack *ack)
{
	struct loco_qp *qp = thr->qp[peer];
	if (loco_self_fenced(thr->mgr))
		return -LOCO_EFENCED;
	if (__builtin_expect(!qp || !qp->tp || qp->err ||
			     qp->gen != peer_gen(thr->mgr, peer), 0)) {
		pthread_mutex_lock(&thr->lock);
		int rc = qp_get_locked(thr, peer, &qp);
		pthread_mutex_unlock(&thr->lock);
		if (rc)
			return rc;
	}
	assign_tickets(thr, wr, n);
	int rc = thr->mgr->tp_ops->post(qp->tp, wr, n);
	if (rc) {
		op_failed(thr, qp, rc);
		return rc;
	}
	sync_placed(thr, peer, wr[n - 1].opcode == LOCO_OP_WRITE);
	posted(thr, peer, wr, n, ack);
	if (qp->durable)
		dirty_note(thr, qp, wr, n);
	return 0;
}

static int post_one(struct loco_thread *thr, uint32_t peer, struct loco_wr *wr,
		    struct loco_ack *ack)
{
	if (thr->hot.sync)
		return post_sync(thr, peer, wr, 1, ack);
	pthread_mutex_lock(&thr->lock);
	int rc = post_locked(thr, peer, wr, 1, ack);
	pthread_mutex_unlock(&thr->lock);
	return rc;
}

/* Offset of [off, off+len) inside RR in its node's memory space, or
 * -EINVAL; -ENOTCONN before the node's hello. */
static int check_bounds(struct loco_thread *thr, const struct loco_rregion *rr,
			uint64_t off, uint64_t len, bool atomic, uint64_t *space_off)
{
	if (!rr || rr->node >= LOCO_MAX_NODES || off > rr->len ||
	    len > rr->len - off)
		return -EINVAL;
	uint64_t at = rr->off + off;
	if (atomic && (at & 7))
		return -EINVAL;
	/* Before the peer's state: a fenced node's targets close its control
	 * connections, which may make a peer look down from here. */
	if (loco_self_fenced(thr->mgr))
		return -LOCO_EFENCED;
	int rc = loco_peer_span(thr->mgr, rr->node, rr->space, at, len);
	if (!rc)
		*space_off = at;
	return rc;
}

/* The region holding RA's LEN bytes as a descriptor, and RA's offset in
 * it (*OFF), so that the op may take the inline path; else the whole
 * arena, where the out-of-line check refuses it (and says why). */
static struct loco_rregion raddr_region(struct loco_thread *thr,
					loco_raddr_t ra, uint32_t len,
					uint64_t *off)
{
	struct loco_rregion rr = {
		.node = loco_raddr_node(ra),
		.off = 0,
		.len = LOCO_RADDR_OFF_MASK,
	};
	*off = loco_raddr_off(ra);
	if (rr.node < LOCO_MAX_NODES &&
	    !loco_access_region(thr, rr.node, *off, len, &rr))
		*off -= rr.off;
	return rr;
}

/* The fence target (transport.h): a zero-length READ, whatever it
 * named, reads nothing and needs no access. */
static void fence_target(struct loco_wr *wr)
{
	wr->space = LOCO_SPACE_ARENA;
	wr->remote_off = 0;
	wr->key = 0;
	wr->key_off = 0;
}

/* Bounds, then the access of the region the request targets and its key
 * (access.c); a zero-length READ goes to the fence target instead. */
static int build_wr(struct loco_thread *thr, const struct loco_rregion *rr,
		    uint64_t off, struct loco_wr *wr)
{
	bool atomic = wr->opcode == LOCO_OP_CAS || wr->opcode == LOCO_OP_FAA;
	wr->space = rr ? (uint8_t)rr->space : LOCO_SPACE_ARENA;
	int rc = check_bounds(thr, rr, off, wr->len, atomic, &wr->remote_off);
	if (rc || wr->opcode == LOCO_OP_FLUSH)
		return rc;
	if (wr->opcode == LOCO_OP_READ && !wr->len) {
		fence_target(wr);
		return 0;
	}
	return loco_access_check(thr, rr->node, wr->space, wr->remote_off,
				 wr->len, wr->opcode, &wr->key, &wr->key_off);
}

int loco_post_read_slow(struct loco_thread *thr,
			const struct loco_rregion *rr,
		   uint64_t off, void *dst, uint32_t len, struct loco_ack *ack)
{
	struct loco_wr wr = { .opcode = LOCO_OP_READ, .len = len, .local = dst };
	int rc = build_wr(thr, rr, off, &wr);
	return rc ? rc : post_one(thr, rr->node, &wr, ack);
}

int loco_post_write_slow(struct loco_thread *thr,
			const struct loco_rregion *rr,
		    uint64_t off, const void *src, uint32_t len,
		    struct loco_ack *ack)
{
	struct loco_wr wr = { .opcode = LOCO_OP_WRITE, .len = len,
			      .local = (void *)src };
	int rc = build_wr(thr, rr, off, &wr);
	return rc ? rc : post_one(thr, rr->node, &wr, ack);
}

int loco_post_cas_slow(struct loco_thread *thr,
			const struct loco_rregion *rr,
		  uint64_t off, uint64_t expect, uint64_t desired, uint64_t *old,
		  struct loco_ack *ack)
{
	struct loco_wr wr = { .opcode = LOCO_OP_CAS, .len = 8, .local = old,
			      .compare = expect, .operand = desired };
	int rc = build_wr(thr, rr, off, &wr);
	return rc ? rc : post_one(thr, rr->node, &wr, ack);
}

int loco_post_faa_slow(struct loco_thread *thr,
			const struct loco_rregion *rr,
		  uint64_t off, uint64_t add, uint64_t *old, struct loco_ack *ack)
{
	struct loco_wr wr = { .opcode = LOCO_OP_FAA, .len = 8, .local = old,
			      .operand = add };
	int rc = build_wr(thr, rr, off, &wr);
	return rc ? rc : post_one(thr, rr->node, &wr, ack);
}

int loco_post_read_raddr(struct loco_thread *thr, loco_raddr_t ra, void *dst,
			 uint32_t len, struct loco_ack *ack)
{
	uint64_t off;
	struct loco_rregion rr = raddr_region(thr, ra, len, &off);
	return loco_post_read(thr, &rr, off, dst, len, ack);
}

int loco_post_write_raddr(struct loco_thread *thr, loco_raddr_t ra,
			  const void *src, uint32_t len, struct loco_ack *ack)
{
	uint64_t off;
	struct loco_rregion rr = raddr_region(thr, ra, len, &off);
	return loco_post_write(thr, &rr, off, src, len, ack);
}

int loco_post_cas_raddr(struct loco_thread *thr, loco_raddr_t ra,
			uint64_t expect, uint64_t desired, uint64_t *old,
			struct loco_ack *ack)
{
	uint64_t off;
	struct loco_rregion rr = raddr_region(thr, ra, 8, &off);
	return loco_post_cas(thr, &rr, off, expect, desired, old, ack);
}

int loco_post_faa_raddr(struct loco_thread *thr, loco_raddr_t ra, uint64_t add,
			uint64_t *old, struct loco_ack *ack)
{
	uint64_t off;
	struct loco_rregion rr = raddr_region(thr, ra, 8, &off);
	return loco_post_faa(thr, &rr, off, add, old, ack);
}

/* A synchronous op to PEERS timed out: its local buffer is the caller's
 * (often on the stack) and must not be touched once we return. Move the
 * QPs to the error state, like RDMA after a transport error: every
 * outstanding op fails, later posts to those peers fail. */
static void qps_abort(struct loco_thread *thr, uint64_t peers, int err)
{
	pthread_mutex_lock(&thr->lock);
	for (uint64_t m = peers; m; m &= m - 1) {
		struct loco_qp *qp = thr->qp[__builtin_ctzll(m)];
		if (!qp || !qp->tp)
			continue;
		thr->mgr->tp_ops->qp_abort(qp->tp);
		qp_retire(qp, UINT64_MAX, err);
		direct_close(thr, qp->peer);
	}
	pthread_mutex_unlock(&thr->lock);
}

/* Post through POSTED's ack, then wait for it. */
static int finish_sync(struct loco_thread *thr, int rc, struct loco_ack *ack)
{
	if (rc)
		return rc;
	rc = loco_ack_wait(thr, ack, -1);
	if (rc == -ETIMEDOUT)
		qps_abort(thr, ack->peers, rc);
	return rc;
}

int loco_read_slow(struct loco_thread *thr, const struct loco_rregion *rr,
	      uint64_t off, void *dst, uint32_t len)
{
	struct loco_ack ack = { 0, 0 };
	return finish_sync(thr, loco_post_read_slow(thr, rr, off, dst, len, &ack), &ack);
}

int loco_write_slow(struct loco_thread *thr, const struct loco_rregion *rr,
	       uint64_t off, const void *src, uint32_t len)
{
	struct loco_ack ack = { 0, 0 };
	return finish_sync(thr, loco_post_write_slow(thr, rr, off, src, len, &ack),
			   &ack);
}

int loco_cas_slow(struct loco_thread *thr, const struct loco_rregion *rr,
	     uint64_t off, uint64_t expect, uint64_t desired, uint64_t *old)
{
	struct loco_ack ack = { 0, 0 };
	return finish_sync(thr, loco_post_cas_slow(thr, rr, off, expect, desired, old,
					      &ack), &ack);
}

int loco_faa_slow(struct loco_thread *thr, const struct loco_rregion *rr,
	     uint64_t off, uint64_t add, uint64_t *old)
{
	struct loco_ack ack = { 0, 0 };
	return finish_sync(thr, loco_post_faa_slow(thr, rr, off, add, old, &ack), &ack);
}

/* ---- batches ------------------------------------------------------------ */

/* OP's op (enum loco_opcode) and length, whatever its flags. */
static inline uint8_t op_code(const struct loco_batch_op *op)
{
	return op->opcode & LOCO_BATCH_OP;
}

static inline uint32_t op_len(const struct loco_batch_op *op)
{
	return op->opcode & (LOCO_BATCH_LONG | LOCO_BATCH_SLOW) ? op->len : 8;
}

const struct loco_thread_hot loco_batch_failed;

void loco_batch_add_slow(struct loco_batch *b, const struct loco_rregion *rr,
			 uint64_t off, uint8_t opcode, void *local,
			 uint32_t len, uint64_t compare, uint64_t operand)
{
	if (b->err)
		return;
	b->slow++;
	int rc = -E2BIG;
	struct loco_wr wr = { .opcode = opcode, .len = len };
	if (b->n == LOCO_BATCH_MAX || (rc = build_wr(b->thr, rr, off, &wr))) {
		b->err = rc;
		b->hot = &loco_batch_failed;  /* later adds come here */
		return;
	}
	struct loco_batch_op *o = &b->op[b->n];
	*o = (struct loco_batch_op){
		.opcode = (uint8_t)(opcode | LOCO_BATCH_SLOW),
		.peer = (uint8_t)rr->node, .len = len,
		.arena_off = wr.remote_off, .local = local,
		.compare = compare, .operand = operand };
	b->where[b->n++] = (struct loco_batch_where){
		.key_off = wr.key_off, .key = wr.key, .space = wr.space };
	b->peers |= UINT64_C(1) << rr->node;
}

/* loco_direct_copy's body, inlined into the batch's op loop (a call a
 * copy cost as much as a short copy's loop). */
static inline void direct_copy(_Atomic uint64_t *w, unsigned opcode,
			       void *local, uint32_t len)
{
	uint8_t *l = local;
	if (opcode == LOCO_OP_READ) {
		for (uint32_t i = 0; i < len / 8; i++) {
			/* Acquire: as the transport's READ (pairs with a
			 * WRITE's release stores). */
			uint64_t v = atomic_load_explicit(&w[i],
							  memory_order_acquire);
			memcpy(l + 8 * i, &v, 8);
		}
		return;
	}
	for (uint32_t i = 0; i < len / 8; i++) {
		uint64_t v;
		memcpy(&v, l + 8 * i, 8);
		/* Release: as the transport's WRITE (pairs with a READ's). */
		atomic_store_explicit(&w[i], v, memory_order_release);
	}
}

void loco_direct_copy(_Atomic uint64_t *w, unsigned opcode, void *local,
		      uint32_t len)
{
	direct_copy(w, opcode, local, len);
}

/* Op I of B cannot run inline (the fence guard refused it, or its peer
 * went down): the ops before it executed; the rest go out of line, where
 * they fail with -LOCO_EFENCED (or -LOCO_EDOWN). B's ops were all added
 * inline: where[] holds nothing to move. */
static int batch_refused(struct loco_batch *b, unsigned i, unsigned doorbells,
			 struct loco_ack *ack)
{
	loco_hot_add(&b->thr->hot.doorbells, doorbells);
	memmove(&b->op[0], &b->op[i], (b->n - i) * sizeof(b->op[0]));
	b->n -= i;
	return loco_batch_post_slow(b, ack);
}

/* Raise the fence guard's mark at every peer in GUARDED (the peers of
 * B's WRITEs and atomics) and check its fence line: true if B may
 * execute them all (lower the marks with batch_guard_exit once they ran);
 * false if a peer fenced this incarnation (no mark is left raised). One
 * mark a peer covers all of B's ops to it: the fencer waits until every
 * mark is down, so each op still executes under a mark raised before the
 * line was checked (guard.h). */
static bool batch_guard_enter(struct loco_thread_hot *h, uint64_t guarded)
{
	for (uint64_t m = guarded; m; m &= m - 1) {
		const struct loco_direct_qp *d = &h->direct[__builtin_ctzll(m)];
		if (loco_guard_enter(d->mark, d->fenced, h->incarnation))
			continue;
		for (uint64_t k = guarded & ~m; k; k &= k - 1)
			loco_guard_exit(h->direct[__builtin_ctzll(k)].mark);
		return false;
	}
	return true;
}

static void batch_guard_exit(struct loco_thread_hot *h, uint64_t guarded)
{
	for (uint64_t m = guarded; m; m &= m - 1)
		loco_guard_exit(h->direct[__builtin_ctzll(m)].mark);
}

/* An inline 8-byte op: OPCODE is a constant at each call (exec_at's
 * switch), so only the fields it reads are loaded. */
__attribute__((always_inline))
static inline void exec_word(struct loco_thread_hot *h, _Atomic uint64_t *w,
			     unsigned opcode, const struct loco_batch_op *op)
{
	loco_direct_exec(w, opcode, op->local,
			 opcode == LOCO_OP_CAS ? op->compare : 0,
			 opcode >= LOCO_OP_CAS ? op->operand : 0);
	loco_hot_add(&h->batched_ops[opcode], 1);
}

/* Execute OP of an inline batch at its peer's mapping (the peer checked
 * up, the guard's mark raised when OP writes) and count it; its
 * placement is the caller's to note. One switch on the opcode with its
 * flags: an 8-byte op never loads a length. */
__attribute__((always_inline))
static inline void exec_at(struct loco_thread_hot *h, uint8_t *base,
			   const struct loco_batch_op *op)
{
	_Atomic uint64_t *w = (_Atomic uint64_t *)(void *)(base + op->arena_off);
	switch (op->opcode) {
	case LOCO_OP_READ:
		exec_word(h, w, LOCO_OP_READ, op);
		break;
	case LOCO_OP_WRITE:
		exec_word(h, w, LOCO_OP_WRITE, op);
		break;
	case LOCO_OP_CAS:
		exec_word(h, w, LOCO_OP_CAS, op);
		break;
	case LOCO_OP_FAA:
		exec_word(h, w, LOCO_OP_FAA, op);
		break;
	default:   /* LONG: a READ or WRITE of more than 8 bytes */
		direct_copy(w, op_code(op), op->local, op->len);
		count_op(h, op_code(op), op->len);
		break;
	}
}

static inline void exec_batched(struct loco_thread_hot *h,
				const struct loco_batch_op *op)
{
	exec_at(h, h->direct_base[op->peer], op);
}

/* Op by op, each under its own mark, because a peer refused the batch's
 * marks: B->n, or the index of the first op refused (or whose peer went
 * down since the check in loco_batch_post_direct); those before it ran. */
static unsigned batch_one_by_one(struct loco_batch *b)
{
	struct loco_thread_hot *h = &b->thr->hot;
	for (unsigned i = 0; i < b->n; i++) {
		const struct loco_batch_op *op = &b->op[i];
		/* Relaxed: as in loco_batch_post_direct. The base stays
		 * mapped after a clear (loco_direct_qp). */
		if (!atomic_load_explicit(&h->direct_words[op->peer],
					  memory_order_relaxed))
			return i;
		const struct loco_direct_qp *d = &h->direct[op->peer];
		bool guarded = op_code(op) != LOCO_OP_READ;
		if (guarded && !loco_guard_enter(d->mark, d->fenced,
						 h->incarnation))
			return i;
		exec_batched(h, op);
		sync_placed(b->thr, op->peer, op_code(op) == LOCO_OP_WRITE);
		if (guarded)
			loco_guard_exit(d->mark);
		if (guarded && (h->noted >> op->peer & 1))
			dirty_note_range(b->thr, b->thr->qp[op->peer],
					 op->arena_off, op_len(op));
	}
	return b->n;
}

/* B's inline ops ran: the ranges of its WRITEs and atomics to peers with
 * a durable image noted for the next persist (as post_sync notes them),
 * in the order the ops ran. */
static void batch_noted(struct loco_batch *b)
{
	struct loco_thread *thr = b->thr;
	for (unsigned i = 0; i < b->n; i++) {
		const struct loco_batch_op *op = &b->op[i];
		if (op_code(op) != LOCO_OP_READ &&
		    (thr->hot.noted >> op->peer & 1))
			dirty_note_range(thr, thr->qp[op->peer], op->arena_off,
					 op_len(op));
	}
}

/* An inline batch's ops all ran: count its DOORBELLS, and either (WAIT)
 * the wait that follows the post (its round trip: the thread has nothing
 * unwaited left) or note the thread unwaited and add the batch's peers to
 * ACK; empty the batch. */
__attribute__((always_inline))
static inline int batch_posted(struct loco_batch *b, unsigned doorbells,
			       struct loco_ack *ack, bool wait)
{
	struct loco_thread_hot *h = &b->thr->hot;
	loco_hot_add(&h->doorbells, doorbells);
	if (wait) {
		loco_hot_add(&h->rtts, 1);
		h->unwaited = 0;
	} else {
		h->unwaited = 1;
		h->pending = 1;
		if (ack)
			ack->peers |= b->peers;
	}
	b->n = 0;
	b->kinds = 0;
	b->peers = 0;
	return 0;
}

/* Every op added inline (a direct word, checked then; so a sync
 * transport): execute them in the order added (each peer's in post
 * order), one doorbell per peer, as the transport would. What the ops
 * need as a whole was gathered as they were added (the peers, the
 * opcodes), so this is one pass over the ops to find the guarded peers
 * and one to run them. Each peer is checked up once, as the out-of-line
 * post checks a QP once per post (post_sync); the fence guard's marks are
 * raised once a batch. Only when a peer refuses them do the ops go one by
 * one, each under its own mark, so that those before the first refused
 * op execute and the rest fail. */
__attribute__((noinline))
static int batch_post_peers(struct loco_batch *b, struct loco_ack *ack)
{
	struct loco_thread_hot *h = &b->thr->hot;
	uint64_t peers = b->peers, guarded = 0, wlast = 0;
	unsigned doorbells = 0;
	/* The peers of WRITEs and atomics (the guard's marks to raise) and
	 * those whose last op is a WRITE (left unplaced). */
	for (unsigned i = 0; i < b->n; i++) {
		uint64_t bit = UINT64_C(1) << b->op[i].peer;
		if (op_code(&b->op[i]) != LOCO_OP_READ)
			guarded |= bit;
		if (op_code(&b->op[i]) == LOCO_OP_WRITE)
			wlast |= bit;
		else
			wlast &= ~bit;
	}
	for (uint64_t m = peers; m; m &= m - 1, doorbells++)
		/* Relaxed: see loco_direct_span. */
		if (!atomic_load_explicit(&h->direct_words[__builtin_ctzll(m)],
					  memory_order_relaxed))
			return loco_batch_post_slow(b, ack);  /* a peer restarted */
	if (__builtin_expect(batch_guard_enter(h, guarded), 1)) {
		for (unsigned i = 0; i < b->n; i++)
			exec_batched(h, &b->op[i]);
		batch_guard_exit(h, guarded);
		h->unplaced = (h->unplaced & ~peers) | wlast;
		h->pending |= wlast;
		if (guarded & h->noted)
			batch_noted(b);
	} else {
		unsigned ran = batch_one_by_one(b);
		if (ran < b->n)
			return batch_refused(b, ran, doorbells, ack);
	}
	return batch_posted(b, doorbells, ack, false);
}

/* batch_post_peers, then the wait (loco_batch_run). */
__attribute__((noinline))
static int batch_run_peers(struct loco_batch *b)
{
	struct loco_ack ack = { 0, 0 };
	int rc = batch_post_peers(b, &ack);
	return rc ? rc : loco_ack_wait(b->thr, &ack, -1);
}

/* The one peer's batch ran with durable ranges to note (batch_noted):
 * out of line, so that the common post makes no call. */
__attribute__((noinline))
static int batch_noted_posted(struct loco_batch *b, struct loco_ack *ack,
			      bool wait)
{
	batch_noted(b);
	return batch_posted(b, 1, ack, wait);
}

/* The batch's ops all go to one peer, the usual case: the same steps
 * as batch_post_peers (the peer checked up once, the guard's mark
 * raised once when the batch writes, the ops executed in the order
 * added, one doorbell), with the peer's mapping loaded once and no loop
 * over peers. Every other case (several peers, a peer restarted or down
 * since the adds, a mark refused) takes batch_post_peers, whose checks
 * and fallbacks are the same as before. WAIT: loco_batch_run's, the
 * wait done with the post (ACK unused). */
__attribute__((always_inline))
static inline int batch_direct(struct loco_batch *b, struct loco_ack *ack,
			       bool wait)
{
	struct loco_thread_hot *h = &b->thr->hot;
	uint64_t peers = b->peers;
	if (__builtin_expect(peers & (peers - 1), 0))
		return wait ? batch_run_peers(b) : batch_post_peers(b, ack);
	uint64_t peer = (uint64_t)__builtin_ctzll(peers);  /* an index */
	const struct loco_direct_qp *d = &h->direct[peer];
	bool guarded = (b->kinds & ~(1u << LOCO_OP_READ)) != 0;
	/* Relaxed: see loco_direct_span. */
	if (__builtin_expect(!atomic_load_explicit(&h->direct_words[peer],
						   memory_order_relaxed) ||
			     (guarded && !loco_guard_enter(d->mark, d->fenced,
							   h->incarnation)), 0))
		return wait ? batch_run_peers(b) : batch_post_peers(b, ack);
	uint8_t *base = h->direct_base[peer];
	const struct loco_batch_op *op = b->op, *end = op + b->n;
	do
		exec_at(h, base, op);
	while (++op != end);
	if (guarded)
		loco_guard_exit(d->mark);
	/* The peer's QP is left with an unplaced WRITE iff its last op is
	 * one (a READ or atomic after it places it). */
	uint64_t wlast = op_code(end - 1) == LOCO_OP_WRITE ? peers : 0;
	h->unplaced = (h->unplaced & ~peers) | wlast;
	h->pending |= wlast;
	if (__builtin_expect(guarded && (h->noted & peers), 0))
		return batch_noted_posted(b, ack, wait);
	return batch_posted(b, 1, ack, wait);
}

int loco_batch_post_direct(struct loco_batch *b, struct loco_ack *ack)
{
	return batch_direct(b, ack, false);
}

int loco_batch_run_direct(struct loco_batch *b)
{
	return batch_direct(b, NULL, true);
}

int loco_batch_post_slow(struct loco_batch *b, struct loco_ack *ack)
{
	int rc = b->err;
	struct loco_thread *thr = b->thr;
	bool sync = thr->hot.sync;
	uint64_t peers = 0;
	for (unsigned i = 0; i < b->n; i++)
		peers |= UINT64_C(1) << b->op[i].peer;
	if (!sync)
		pthread_mutex_lock(&thr->lock);
	for (uint64_t m = peers; m && !rc; m &= m - 1) {
		uint32_t peer = (uint32_t)__builtin_ctzll(m);
		struct loco_wr wr[LOCO_BATCH_MAX];
		unsigned n = 0;
		for (unsigned i = 0; i < b->n; i++) {
			const struct loco_batch_op *op = &b->op[i];
			if (op->peer != peer)
				continue;
			/* An op added inline targets the arena, where a
			 * direct (sync) transport needs no key; it stored
			 * only the operands its opcode reads. */
			struct loco_batch_where at = { 0, 0, LOCO_SPACE_ARENA };
			if (op->opcode & LOCO_BATCH_SLOW)
				at = b->where[i];
			uint8_t code = op_code(op);
			wr[n++] = (struct loco_wr){
				.opcode = code, .space = at.space,
				.len = op_len(op), .remote_off = op->arena_off,
				.local = op->local,
				.compare = code == LOCO_OP_CAS ? op->compare : 0,
				.operand = code >= LOCO_OP_CAS ? op->operand : 0,
				.key = at.key, .key_off = at.key_off };
		}
		rc = sync ? post_sync(thr, peer, wr, n, ack) :
			    post_locked(thr, peer, wr, n, ack);
	}
	if (!sync)
		pthread_mutex_unlock(&thr->lock);
	b->n = 0;
	b->err = 0;
	b->slow = 0;
	b->kinds = 0;
	b->peers = 0;
	b->hot = &thr->hot;
	return rc;
}

/* ---- fences ------------------------------------------------------------- */

/* The fence READ: completes only after the WRITEs before it on its QP are
 * placed (RC ordering, transport.h); it goes to the peer's fence target. */
static struct loco_wr fence_wr(void)
{
	return (struct loco_wr){ .opcode = LOCO_OP_READ, .len = 0,
				 .remote_off = 0 };
}

/* QP's pending writes were reported lost (-LOCO_EDOWN) to the caller,
 * who redoes them: they are no one's to report again. */
static void qp_loss_reported(struct loco_thread *thr, struct loco_qp *qp)
{
	qp->ndirty = 0;
	qp->placed = qp->last_write;
	qp->lost = false;
	thr->hot.unplaced &= ~(UINT64_C(1) << qp->peer);
}

/* Before placing or persisting QP's writes: -LOCO_EDOWN (reported once)
 * if some went to an incarnation of the peer that died since, or if the
 * peer is down now and some are not placed or persisted yet. Renews a QP
 * of a dead incarnation. thr->lock held (async transports). */
static int qp_writes_lost(struct loco_thread *thr, struct loco_qp *qp)
{
	uint32_t gen = peer_gen(thr->mgr, qp->peer);
	if (qp->tp && qp->gen != gen)
		qp_renew_locked(thr, qp, gen);
	if (qp->lost) {
		qp->lost = false;
		return -LOCO_EDOWN;
	}
	bool pending = qp_unplaced(thr, qp) || qp->ndirty;
	int rc = pending ? peer_usable(thr->mgr, qp->peer) : 0;
	if (rc)
		qp_loss_reported(thr, qp);
	return rc;
}

/* Post a zero-length READ on QP if it has unplaced WRITEs; thr->lock held. */
static int fence_post_locked(struct loco_thread *thr, struct loco_qp *qp)
{
	if (!qp || !qp->tp)
		return 0;
	int rc = qp_writes_lost(thr, qp);
	if (rc || qp->err || !qp_unplaced(thr, qp))
		return rc ? rc : qp->err;
	struct loco_wr wr = fence_wr();
	return post_locked(thr, qp->peer, &wr, 1, NULL);
}

/* Sync transport: a fence READ on each of PEERS' QPs that has unplaced
 * WRITEs; it completes at once, so nothing is waited for. */
static int fence_sync(struct loco_thread *thr, uint64_t peers)
{
	int rc = 0;
	for (uint64_t m = peers & thr->qps; m && !rc; m &= m - 1) {
		uint32_t peer = (uint32_t)__builtin_ctzll(m);
		struct loco_qp *qp = thr->qp[peer];
		if (qp->tp)
			rc = qp_writes_lost(thr, qp);
		if (!rc && (thr->hot.unplaced >> peer & 1)) {
			struct loco_wr wr = fence_wr();
			rc = post_sync(thr, peer, &wr, 1, NULL);
		}
	}
	return rc;
}

/* Fence PEERS of THR: post the fence READs, then wait for everything.
 * OWN: THR is the caller's (count the fence and a round trip). */
static int fence_thread_peers(struct loco_thread *thr, uint64_t peers,
			      int timeout_ms, bool own)
{
	uint64_t t;
	if (thr->hot.sync) {
		rtt_mark(thr);
		loco_hot_add(&thr->hot.fences, 1);
		return fence_sync(thr, peers);
	}
	pthread_mutex_lock(&thr->lock);
	if (own) {
		rtt_mark(thr);
		loco_hot_add(&thr->hot.fences, 1);
	}
	/* Collect finished ops first: a completed READ may already have
	 * placed the WRITEs this fence would otherwise post a READ for. */
	int rc = progress_locked(thr);
	for (uint64_t m = peers & thr->qps; m && !rc; m &= m - 1)
		rc = fence_post_locked(thr, thr->qp[__builtin_ctzll(m)]);
	t = thr->ticket;
	pthread_mutex_unlock(&thr->lock);
	if (rc)
		return rc;
	return wait_done(thr, peers, t, timeout_ms, false);
}

/* Every thread of the node. On a sync transport the other threads' WRITEs
 * were placed when they were posted: only the caller's QPs are fenced
 * (and no other thread's QP is touched). */
static int fence_global(struct loco_thread *self, int timeout_ms)
{
	struct loco_mgr *mgr = self->mgr;
	int rc = fence_thread_peers(self, ~UINT64_C(0), timeout_ms, true);
	if (self->hot.sync)
		return rc;
	pthread_mutex_lock(&mgr->thr_lock);
	for (struct loco_thread *t = mgr->threads; t && !rc; t = t->next)
		if (t != self)
			rc = fence_thread_peers(t, ~UINT64_C(0), timeout_ms, false);
	pthread_mutex_unlock(&mgr->thr_lock);
	return rc;
}

int loco_fence(struct loco_thread *thr, enum loco_fence_scope scope,
	       uint32_t peer)
{
	int rc;
	switch (scope) {
	case LOCO_FENCE_PAIR:
		if (peer >= LOCO_MAX_NODES)
			return -EINVAL;
		rc = fence_thread_peers(thr, UINT64_C(1) << peer, -1, true);
		break;
	case LOCO_FENCE_THREAD:
		rc = fence_thread_peers(thr, ~UINT64_C(0), -1, true);
		break;
	case LOCO_FENCE_GLOBAL:
		rc = fence_global(thr, -1);
		break;
	default:
		return -EINVAL;
	}
	/* Orders this thread's later local accesses after the fence too. */
	atomic_thread_fence(memory_order_seq_cst);
	return rc;
}

/* ---- persistence points ---------------------------------------------------- */

/* A sync transport's FLUSHes of QP's dirty ranges (N of them) through
 * its flush op: what post_sync of the FLUSH requests does, without
 * building them. -EAGAIN: QP must be renewed first (post them). */
static int persist_direct(struct loco_thread *thr, struct loco_qp *qp,
			  unsigned n)
{
	if (loco_self_fenced(thr->mgr))
		return -LOCO_EFENCED;
	if (qp->err || qp->gen != peer_gen(thr->mgr, qp->peer))
		return -EAGAIN;
	qp->ndirty = 0;
	int rc = thr->mgr->tp_ops->flush(qp->tp, qp->dirty, n);
	if (rc) {
		op_failed(thr, qp, rc);
		return rc;
	}
	sync_placed(thr, qp->peer, false);
	loco_hot_add(&thr->hot.flushes, n);
	rang(thr, n);
	return 0;
}

/* The FLUSHes (a durable peer) or the fence READ (another) that make
 * what THR wrote to PEER durable, posted; ACK covers them and everything
 * THR has outstanding there. thr->lock held on async transports. */
static int persist_post(struct loco_thread *thr, uint32_t peer,
			struct loco_ack *ack)
{
	struct loco_qp *qp = thr->qp[peer];
	if (!qp || !qp->tp)
		return 0;
	int rc = qp_writes_lost(thr, qp);
	struct loco_wr wr[LOCO_DIRTY_MAX];
	unsigned n = 0;
	if (!rc && qp->durable && qp->ndirty && thr->hot.sync &&
	    thr->mgr->tp_ops->flush) {
		rc = persist_direct(thr, qp, qp->ndirty);
		if (rc == -EAGAIN) {  /* a QP to renew: post them */
			rc = 0;
			n = dirty_take(qp, wr);
		}
	} else if (!rc && qp->durable) {
		n = dirty_take(qp, wr);
	} else if (!rc && qp_unplaced(thr, qp)) {
		wr[n++] = fence_wr();
	}
	if (n)
		rc = thr->hot.sync ? post_sync(thr, peer, wr, n, NULL) :
				 post_locked(thr, peer, wr, n, NULL);
	if (rc == -LOCO_EDOWN)
		qp_loss_reported(thr, qp);
	if (!rc && ack) {
		ack->peers |= UINT64_C(1) << peer;
		if (!thr->hot.sync)  /* sync: complete already, no ticket */
			ack->ticket = thr->ticket;
	}
	return rc;
}

int loco_post_persist(struct loco_thread *thr, uint32_t peer,
		      struct loco_ack *ack)
{
	if (peer >= LOCO_MAX_NODES)
		return -EINVAL;
	if (thr->hot.sync)
		return persist_post(thr, peer, ack);
	pthread_mutex_lock(&thr->lock);
	int rc = persist_post(thr, peer, ack);
	pthread_mutex_unlock(&thr->lock);
	return rc;
}

int loco_persist(struct loco_thread *thr, uint32_t peer)
{
	struct loco_ack ack = { 0, 0 };
	int rc = finish_sync(thr, loco_post_persist(thr, peer, &ack), &ack);
	/* Orders this thread's later local accesses after it, as a fence. */
	atomic_thread_fence(memory_order_seq_cst);
	return rc;
}

int loco_post_persist_range(struct loco_thread *thr,
			    const struct loco_rregion *rr, uint64_t off,
			    uint64_t len, struct loco_ack *ack)
{
	if (!rr || len > UINT32_MAX || rr->space != LOCO_SPACE_ARENA)
		return -EINVAL;
	struct loco_wr wr = { .opcode = LOCO_OP_FLUSH, .len = (uint32_t)len };
	int rc = build_wr(thr, rr, off, &wr);
	if (rc)
		return rc;
	if (!peer_durable(thr->mgr, rr->node))
		return loco_post_persist(thr, rr->node, ack);
	return post_one(thr, rr->node, &wr, ack);
}

int loco_persist_range(struct loco_thread *thr, const struct loco_rregion *rr,
		       uint64_t off, uint64_t len)
{
	struct loco_ack ack = { 0, 0 };
	int rc = finish_sync(thr, loco_post_persist_range(thr, rr, off, len,
							  &ack), &ack);
	/* Orders this thread's later local accesses after it, as a fence. */
	atomic_thread_fence(memory_order_seq_cst);
	return rc;
}

uint32_t loco_peer_qp_gen(struct loco_thread *thr, uint32_t peer)
{
	if (peer >= LOCO_MAX_NODES)
		return 0;
	/* Async transports: another thread's global fence may renew the QP
	 * (under thr->lock); a sync transport's QPs are this thread's. */
	if (!thr->hot.sync)
		pthread_mutex_lock(&thr->lock);
	const struct loco_qp *qp = thr->qp[peer];
	uint32_t gen = qp ? qp->gen : 0;
	if (!thr->hot.sync)
		pthread_mutex_unlock(&thr->lock);
	return gen;
}
