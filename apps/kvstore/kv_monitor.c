/* SPDX-License-Identifier: MIT */
/* The kvstore's monitor thread: the only user of this node's tracker as
 * writer (a ringbuffer has one sending thread) and of the other nodes'
 * trackers as reader.
 *
 * Requests: an application thread queues a request (messages on its own
 * stack) and waits for it; the monitor sends the messages (never waiting
 * for ring space: a monitor blocked on a full ring would stop
 * acknowledging, and two such monitors would wait for each other), and
 * completes the request once every reader acknowledged its last message.
 * The request list is only touched under req_mu.
 *
 * A member silent past the timeout is only suspected: it may be paused,
 * not dead, and giving up would leave the key half indexed or half
 * deleted (some members applied the message, the valid bit not set or
 * the index entry not dropped here), which no linearization explains.
 * So the waiter fences every member that has not acknowledged
 * (loco_fence_node: it never acts again under this incarnation, and its
 * reads of the trackers are refused too), then this node's tracker stops
 * writing to it and waiting for it (loco_ringbuffer_drop_reader): it no
 * longer counts as a member, and the request completes without it. A
 * member that cannot be fenced is waited for, and tried again after each
 * timeout: timing costs liveness, never safety.
 *
 * Receiving: the monitor applies each message to the index (and frees
 * this node's slot of a delete) before acknowledging it. A ringbuffer
 * acknowledgement never covers the message just returned (it counts once
 * the reader asks again), so the acknowledgements the ringbuffer pushes
 * on its own only cover applied messages. The monitor takes at most
 * about a quarter of a ring's messages from a tracker per pass, so one
 * busy tracker does not starve the others, and acknowledges them after
 * applying them. */
#include <errno.h>

#include <urcu.h>

#include <loco/wait.h>

#include "apps/kvstore/kv_internal.h"

/* Bytes one message can take in a ring: header, payload and the largest
 * skip before it (a pad is shorter than a record). */
#define MSG_RING_BYTES (2 * (24 + sizeof(struct kv_msg)))

struct kv_req {
	const struct kv_msg *msgs;
	unsigned n, sent;
	uint64_t pos;          /* stream end of the last message sent */
	_Atomic int state;     /* REQ_PENDING, 0 (done) or -errno */
	struct kv_req *next;
};

enum { REQ_PENDING = 1 };

/* ---- application side --------------------------------------------------- */

static void req_unlink(struct kv_store *kv, struct kv_req *r)
{
	struct kv_req *prev = NULL;
	for (struct kv_req *p = kv->req_head; p && p != r; p = p->next)
		prev = p;
	if (prev)
		prev->next = r->next;
	else if (kv->req_head == r)
		kv->req_head = r->next;
	if (kv->req_tail == r)
		kv->req_tail = prev;
}

/* Wait up to the manager's timeout for R: its result, or REQ_PENDING. */
static int req_wait_once(struct kv_req *r, struct loco_mgr *mgr)
{
	struct loco_wait w;
	loco_wait_init(&w, mgr, -1);
	for (;;) {
		/* Acquire: pairs with the release store in req_done; the
		 * acknowledgements it reports (every node indexed the keys)
		 * happen before our next step. */
		int s = atomic_load_explicit(&r->state, memory_order_acquire);
		if (s != REQ_PENDING || loco_wait_step(&w))
			return s;
	}
}

/* The readers of this node's tracker R waits for: those that have not
 * acknowledged its last message, or, while it is not sent whole (the
 * ring full), the last message sent. 0 once R is done. */
static uint64_t req_late(struct kv_store *kv, struct kv_req *r)
{
	struct loco_ringbuffer *rb = &kv->tr[kv->member_of[kv->self]];
	pthread_mutex_lock(&kv->req_mu);
	/* Relaxed: req_done stores under req_mu, which orders it. */
	bool pending = atomic_load_explicit(&r->state, memory_order_relaxed) ==
		       REQ_PENDING;
	uint64_t late = pending ? loco_ringbuffer_unacked(
			rb, r->sent == r->n ? r->pos : kv->sent_pos) : 0;
	pthread_mutex_unlock(&kv->req_mu);
	return late;
}

/* Fence every member in LATE, then stop waiting for it. Returns 0, or
 * the error of a fence that did not complete (that member still counts). */
static int members_fence(struct kv_store *kv, uint64_t late)
{
	struct loco_ringbuffer *rb = &kv->tr[kv->member_of[kv->self]];
	for (; late; late &= late - 1) {
		uint32_t node = (uint32_t)__builtin_ctzll(late);
		/* A fence that cannot complete (-ETIMEDOUT, or -EOPNOTSUPP:
		 * a transport that cannot refuse) means wait, never act on
		 * the timeout alone (docs/ordering.md, "Fencing"). */
		int rc = loco_fence_node(kv->base.mgr, node, -1);
		if (rc) {
			loco_warn(kv->base.name, "node %u silent past the timeout "
				  "and not fenced: %s; waiting for it%s", node,
				  loco_strerror(rc), rc == -EOPNOTSUPP ?
				  " (this transport cannot fence)" : "");
			return rc;
		}
		pthread_mutex_lock(&kv->req_mu);
		if (!(kv->fenced & UINT64_C(1) << node)) {
			kv->fenced |= UINT64_C(1) << node;
			loco_ringbuffer_drop_reader(rb, node);
			loco_warn(kv->base.name, "node %u silent past the timeout: "
				  "fenced, no longer a member", node);
		}
		pthread_mutex_unlock(&kv->req_mu);
	}
	return 0;
}

/* Unlink R if still pending: its result, or -ETIMEDOUT. */
static int req_abandon(struct kv_store *kv, struct kv_req *r)
{
	pthread_mutex_lock(&kv->req_mu);
	/* Relaxed: req_done stores under req_mu, which orders it. */
	int s = atomic_load_explicit(&r->state, memory_order_relaxed);
	if (s == REQ_PENDING)
		req_unlink(kv, r);
	pthread_mutex_unlock(&kv->req_mu);
	return s == REQ_PENDING ? -ETIMEDOUT : s;
}

/* Wait for R; after each timeout, fence the members it waits for. */
static int req_wait(struct kv_store *kv, struct kv_req *r)
{
	for (;;) {
		int s = req_wait_once(r, kv->base.mgr);
		if (s != REQ_PENDING)
			return s;
		if (kv->cfg.broken_broadcast)
			return req_abandon(kv, r);
		if (loco_self_fenced(kv->base.mgr)) {
			/* Unlinked: R is on our stack. */
			s = req_abandon(kv, r);
			return s == -ETIMEDOUT ? -LOCO_EFENCED : s;
		}
		members_fence(kv, req_late(kv, r));
	}
}

int kv_broadcast(struct kv_store *kv, const struct kv_msg *msgs, unsigned n)
{
	struct kv_req r = { .msgs = msgs, .n = n };
	if (kv->nmembers == 1)
		return 0;
	atomic_init(&r.state, REQ_PENDING);
	pthread_mutex_lock(&kv->req_mu);
	/* Relaxed: the monitor stores its error before reqs_fail takes
	 * req_mu, so either we see it here or reqs_fail fails our request. */
	int err = atomic_load_explicit(&kv->error, memory_order_relaxed);
	if (!err) {
		if (kv->req_tail)
			kv->req_tail->next = &r;
		else
			kv->req_head = &r;
		kv->req_tail = &r;
	}
	pthread_mutex_unlock(&kv->req_mu);
	return err ? err : req_wait(kv, &r);
}

/* ---- monitor: requests (req_mu held) ------------------------------------ */

static struct loco_ringbuffer *tracker_of(struct kv_store *kv, uint32_t node)
{
	for (unsigned i = 0; i < kv->nmembers; i++)
		if (kv->node[i] == node)
			return &kv->tr[i];
	return NULL;
}

/* Unlink the head request R with result RC; its waiter may return (and
 * its frame vanish) as soon as req_mu is released. */
static void req_done(struct kv_store *kv, struct kv_req *r, int rc)
{
	kv->req_head = r->next;
	if (!kv->req_head)
		kv->req_tail = NULL;
	/* Release: pairs with the acquire load in req_wait. */
	atomic_store_explicit(&r->state, rc, memory_order_release);
}

/* Complete the sent requests at the head that every reader acknowledged
 * (requests are sent in list order, so acknowledged in it). */
static unsigned reqs_acked(struct kv_store *kv, struct loco_ringbuffer *rb)
{
	unsigned done = 0;
	struct kv_req *r;
	while ((r = kv->req_head) && r->sent == r->n &&
	       loco_ringbuffer_acked(rb, r->pos)) {
		req_done(kv, r, 0);
		done++;
	}
	return done;
}

/* Send what fits of the unsent messages, in list order. Returns the
 * number sent or an error. */
static int reqs_send(struct kv_store *kv, struct loco_ringbuffer *rb,
		     struct loco_thread *thr)
{
	int sent = 0;
	for (struct kv_req *r = kv->req_head; r; r = r->next) {
		while (r->sent < r->n) {
			/* Placed: the readers see the messages without
			 * waiting for a later fence of ours. */
			int rc = loco_ringbuffer_try_send(
				rb, thr, &r->msgs[r->sent], sizeof(struct kv_msg),
				LOCO_RB_PLACE, &r->pos);
			if (rc == -EAGAIN)
				return sent;
			if (rc)
				return rc;
			kv->sent_pos = r->pos;
			r->sent++;
			sent++;
		}
	}
	return sent;
}

static void reqs_fail(struct kv_store *kv, int err)
{
	pthread_mutex_lock(&kv->req_mu);
	while (kv->req_head)
		req_done(kv, kv->req_head, err);
	pthread_mutex_unlock(&kv->req_mu);
}

/* Complete and send requests; *BUSY counts what moved. Waiting for the
 * readers' acknowledgements is not work: the monitor backs off then, so
 * that on a busy host the monitors it waits for get the CPU. */
static int reqs_progress(struct kv_store *kv, struct loco_thread *thr,
			 unsigned *busy)
{
	struct loco_ringbuffer *rb = tracker_of(kv, kv->self);
	pthread_mutex_lock(&kv->req_mu);
	*busy += reqs_acked(kv, rb);
	int rc = reqs_send(kv, rb, thr);
	pthread_mutex_unlock(&kv->req_mu);
	if (rc > 0)
		*busy += (unsigned)rc;
	return rc < 0 ? rc : 0;
}

/* ---- monitor: receiving ------------------------------------------------- */

static int apply(struct kv_store *kv, const struct kv_msg *m, uint32_t from)
{
	struct kv_loc loc = { .host = (uint32_t)m->node, .slot = m->slot,
			      .counter = m->counter };
	if (m->node >= LOCO_MAX_NODES || m->slot >= kv->cfg.capacity)
		return -LOCO_EPROTO;
	if (m->op == KV_MSG_INSERT && m->node == from)
		return kv_index_put(kv, m->key, &loc);
	if (m->op != KV_MSG_DELETE)
		return -LOCO_EPROTO;
	kv_index_del(kv, m->key, &loc);
	if (loc.host == kv->self)
		kv_slot_free(kv, loc.slot);
	return 0;
}

/* Apply up to about a quarter of a ring of node FROM's tracker's
 * messages, then acknowledge them. Returns the number applied or an error. */
static int tracker_poll(struct kv_store *kv, struct loco_ringbuffer *rb,
			uint32_t from, struct loco_thread *thr)
{
	uint64_t batch = rb->size / 4 / MSG_RING_BYTES - 1;
	int n = 0;
	for (uint64_t i = 0; i < batch; i++) {
		struct kv_msg m;
		uint32_t len;
		int rc = loco_ringbuffer_try_recv(rb, thr, &m, sizeof(m), &len);
		if (rc == -EAGAIN)
			break;
		if (!rc && len != sizeof(m))
			rc = -LOCO_EPROTO;
		if (!rc)
			rc = apply(kv, &m, from);
		if (rc)
			return rc;
		n++;
	}
	if (n)
		/* Relaxed: a statistic. */
		atomic_fetch_add_explicit(&kv->applied, (uint64_t)n,
					  memory_order_relaxed);
	/* After the index updates: acknowledging is the release that tells
	 * the sender every node indexed them (see kv_index.c). */
	int rc = n ? loco_ringbuffer_ack(rb, thr) : 0;
	return rc ? rc : n;
}

static int trackers_poll(struct kv_store *kv, struct loco_thread *thr,
			 unsigned *busy)
{
	for (unsigned i = 0; i < kv->nmembers; i++) {
		if (kv->node[i] == kv->self)
			continue;
		int rc = tracker_poll(kv, &kv->tr[i], kv->node[i], thr);
		if (rc < 0)
			return rc;
		*busy += (unsigned)rc;
	}
	return 0;
}

static int monitor_loop(struct kv_store *kv, struct loco_thread *thr)
{
	unsigned spins = 0;
	/* Relaxed: a stop flag; kv_stop joins the thread. */
	while (!atomic_load_explicit(&kv->stop, memory_order_relaxed)) {
		unsigned busy = 0;
		int rc = reqs_progress(kv, thr, &busy);
		if (!rc)
			rc = trackers_poll(kv, thr, &busy);
		if (rc)
			return rc;
		if (busy)
			spins = 0;
		else
			loco_backoff(&spins);
	}
	return 0;
}

void *kv_monitor_main(void *arg)
{
	struct kv_store *kv = arg;
	struct loco_thread *thr;
	int rc = loco_thread_create(kv->base.mgr, &thr);
	if (!rc) {
		kv_rcu_online();
		rc = monitor_loop(kv, thr);
		kv_rcu_offline();
		int drc = loco_thread_destroy(thr);
		rc = rc ? rc : drc;
	}
	if (rc) {
		loco_err(kv->base.name, "monitor stopped: %s", loco_strerror(rc));
		/* Relaxed: kv_broadcast reads it under req_mu, which
		 * reqs_fail takes after this store. */
		atomic_store_explicit(&kv->error, rc, memory_order_relaxed);
		reqs_fail(kv, rc);
	}
	return NULL;
}
