/* SPDX-License-Identifier: MIT */
/* ucx transport: READ, WRITE, CAS and FAA executed by loco's own active
 * messages where UCX would emulate RMA and atomics (TCP).
 *
 * Why: UCX 1.13 emulates RMA and atomics over TCP with active messages
 * that the target's worker executes, and answers a GET, an atomic or a
 * PUT's completion with ucp_request_send, which aborts the whole process
 * ("Fatal: unexpected error") when that answer cannot be sent: a client
 * SIGKILLed with a request in flight took its memory node down with it.
 * Answers sent with ucp_am_send_nbx fail like any request (its callback
 * gets the error), so a memory node outlives its dead clients.
 *
 * The protocol, on one endpoint (one UCX lane, eager only: UCX delivers
 * the messages of one endpoint in order and runs their handlers in that
 * order, which is the per-QP order of docs/ordering.md):
 *  - request (UCX_AM_REQ, to the peer's target worker, the reply endpoint
 *    attached): the requester's (node, incarnation) and its credential
 *    (from the target's descriptor for it), then struct ucx_am_req, a
 *    WRITE's data as payload;
 *  - the target's handler recomputes the credential of the (node,
 *    incarnation) the header names (ucx_cred: a keyed hash of its secret)
 *    and compares it with the one carried (a message with another
 *    executes nothing: every request is answered -EACCES, as an RDMA NIC
 *    refuses a wrong rkey), then checks that incarnation against the
 *    fenced ones (a fenced incarnation's message executes nothing either:
 *    every request is answered -LOCO_EFENCED), checks the range against
 *    its arena, executes the request (memcpy, or a CPU atomic) and answers
 *    (UCX_AM_REP, to the requester's worker): struct ucx_am_rep, a READ's
 *    data as payload, copied when the request executes;
 *  - the requester's handler finds the request's slot by its reply token
 *    (the QP's id and the request's sequence number; a reply for a
 *    request already retired, its QP failed, is dropped), copies the
 *    result into the slot's own memory and lets it retire (ucx_sq.c).
 * A WRITE completes when its reply says it was placed.
 *
 * Fencing (docs/ordering.md "Fencing"): the handler runs with
 * tp->target_lock held from its check of the fenced list to its reply;
 * ucx_am_fence records a fence under the same lock, so once it returns
 * no request of that incarnation is mid-execution, and every later one
 * is refused. A member can name only the (node, incarnation) it was
 * given a credential for: it was handed to that incarnation alone, in
 * the descriptor the target sent it (over the control plane, after the
 * cluster-key exchange), so a member cannot act as another, and a fenced
 * incarnation cannot act by naming a new one (which has no credential
 * until it says hello itself, as a new process). */
#include "loco/transport/copy.h"
#include "loco/transport/ucx_int.h"

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include <loco/error.h>
#include <loco/log.h>

#define UCX_AM_REQ 0x4c0
#define UCX_AM_REP 0x4c1

/* A batch's message, request or reply: a header (struct ucx_am_qhdr, or
 * struct ucx_am_hdr), then COUNT entries (struct ucx_am_req, or struct
 * ucx_am_rep), then the entries' data in order (the WRITEs' bytes, or
 * the READs'); little-endian. */
struct ucx_am_qhdr {
	uint32_t count;
	uint32_t node;               /* the requester's id */
	uint64_t incarnation;        /* the requester's (boot id): checked
					against the fenced ones */
	uint64_t cred[UCX_CRED_WORDS]; /* the requester's, from the target's
					  descriptor for it (ucx_cred) */
};

struct ucx_am_hdr {
	uint32_t count;
	uint32_t pad;
};

/* Headers of whole 8-byte words: the data after them stays as 8-aligned
 * as the sender's buffer (data_at). */
_Static_assert(sizeof(struct ucx_am_qhdr) % 8 == 0, "request header in words");
_Static_assert(sizeof(struct ucx_am_hdr) % 8 == 0, "reply header in words");

/* The answer to one request. */
struct ucx_am_rep {
	uint64_t token;
	int32_t status;              /* 0 or -errno */
	uint32_t len;                /* data bytes (a READ's) */
	uint64_t old;                /* CAS, FAA: the word before */
};

/* A message UCX may still read until its send completes: freed then. */
static void msg_sent(void *req, ucs_status_t st, void *user_data)
{
	(void)req;
	(void)st;
	free(user_data);
}

/* Send MSG (a header of HLEN bytes, then BYTES of data, malloc'd) as
 * message ID on EP, eager; FLAGS adds to UCP_AM_SEND_FLAG_EAGER. MSG
 * belongs to the send from here on. The UCX request, NULL if sent at
 * once, or an error pointer. */
static void *msg_send(struct loco_tp *tp, ucp_ep_h ep, unsigned id, void *msg,
		      size_t hlen, size_t bytes, uint32_t flags)
{
	ucp_request_param_t p = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
				UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMORY_TYPE,
		.flags = UCP_AM_SEND_FLAG_EAGER | flags,
		.cb.send = msg_sent,
		.user_data = msg,
		.memory_type = UCS_MEMORY_TYPE_HOST,
	};
	void *r = tp->api->am_send_nbx(ep, id, msg, hlen, (uint8_t *)msg + hlen, bytes, &p);
	/* Sent at once, or failed: no callback comes. */
	if (!UCS_PTR_IS_PTR(r))
		free(msg);
	return r;
}

/* Where data of LEN bytes for arena offset OFF goes in a data area whose
 * first POS bytes are taken: at the next position congruent with OFF
 * modulo 8, so that an 8-aligned area copies it in 8-byte words, as the
 * model's untorn aligned words need (loco/transport/copy.c). */
static size_t data_at(size_t pos, uint64_t off)
{
	return pos + ((off - pos) & 7);
}

/* ---- target side -------------------------------------------------------- */

/* Whether Q is well formed and within TP's arena and, for a WRITE, its
 * data within the message's DLEN data bytes: 0, -EINVAL or -EPROTO. */
static int req_check(const struct loco_tp *tp, const struct ucx_am_req *q,
		     size_t dlen)
{
	uint64_t off = le64toh(q->off), at = le64toh(q->b);
	uint32_t n = le32toh(q->len);
	if (off > tp->arena_len || n > tp->arena_len - off)
		return -EINVAL;
	switch (q->op) {
	case LOCO_OP_READ:
		return 0;
	case LOCO_OP_WRITE:
		return at > dlen || n > dlen - at ? -EPROTO : 0;
	case LOCO_OP_CAS:
	case LOCO_OP_FAA:
		return n != 8 || off % 8 ? -EINVAL : 0;
	default:
		return -EPROTO;
	}
}

/* Execute Q, checked, on TP's arena: a WRITE from DATA (the message's data
 * area), a READ into DST, an atomic's old word into REP. */
static void execute(struct loco_tp *tp, const struct ucx_am_req *q,
		    const uint8_t *data, uint8_t *dst, struct ucx_am_rep *rep)
{
	uint8_t *at = tp->arena + le64toh(q->off);
	uint32_t n = le32toh(q->len);
	uint64_t old = le64toh(q->a);
	switch (q->op) {
	case LOCO_OP_READ:
		/* Acquire loads, as a shm READ takes the words: the target's
		 * own threads store them concurrently. */
		loco_tp_copy_in(dst, at, n);
		return;
	case LOCO_OP_WRITE:
		/* 8-byte release stores, as a shm WRITE places its words:
		 * the target's own threads load them concurrently. */
		loco_tp_copy_out(at, data + le64toh(q->b), n);
		return;
	case LOCO_OP_CAS:
		__atomic_compare_exchange_n((uint64_t *)(void *)at, &old,
					    le64toh(q->b), false, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
		break;
	default:
		old = __atomic_fetch_add((uint64_t *)(void *)at, old, __ATOMIC_SEQ_CST);
		break;
	}
	rep->old = htole64(old);
}

/* The reply's data bytes for the COUNT requests at Q (their READs' data,
 * placed by data_at), DLEN data bytes following them. */
static size_t reply_bytes(const struct loco_tp *tp, const uint8_t *q,
			  uint32_t count, size_t dlen)
{
	size_t out = 0;
	for (uint32_t i = 0; i < count; i++) {
		struct ucx_am_req r;
		memcpy(&r, q + i * sizeof(r), sizeof(r));
		if (r.op == LOCO_OP_READ && !req_check(tp, &r, dlen))
			out = data_at(out, le64toh(r.off)) + le32toh(r.len);
	}
	return out;
}

/* Execute the batch's COUNT requests at Q in order (their WRITE data in
 * the DLEN bytes at DATA) into reply REP: its entries, then the READs'
 * data (an entry's old word says where in it). */
static void batch_run(struct loco_tp *tp, const uint8_t *q, uint32_t count,
		      const uint8_t *data, size_t dlen, struct ucx_am_hdr *rep)
{
	struct ucx_am_rep *e = (struct ucx_am_rep *)(rep + 1);
	uint8_t *out = (uint8_t *)(e + count);
	size_t pos = 0;
	for (uint32_t i = 0; i < count; i++) {
		struct ucx_am_req r;
		memcpy(&r, q + i * sizeof(r), sizeof(r));
		int rc = req_check(tp, &r, dlen);
		uint32_t n = !rc && r.op == LOCO_OP_READ ? le32toh(r.len) : 0;
		e[i] = (struct ucx_am_rep){ .token = r.token,
					    .status = (int32_t)htole32((uint32_t)rc),
					    .len = htole32(n) };
		if (n) {
			pos = data_at(pos, le64toh(r.off));
			e[i].old = htole64(pos);
		}
		if (!rc)
			execute(tp, &r, data, out + pos, &e[i]);
		pos += n;
	}
}

/* The reply to a batch of COUNT requests at Q, DLEN data bytes after
 * them (8-aligned): executed in order, sent back as one message. */
static void batch_serve(struct loco_tp *tp, ucp_ep_h reply_ep, const uint8_t *q,
			uint32_t count, size_t dlen)
{
	size_t qbytes = count * sizeof(struct ucx_am_req);
	size_t bytes = count * sizeof(struct ucx_am_rep) +
		       reply_bytes(tp, q, count, dlen);
	struct ucx_am_hdr *rep = malloc(sizeof(*rep) + bytes);
	if (!rep) {
		loco_err(UCX_LOG, "no memory for a reply: a peer's requests time out");
		return;
	}
	*rep = (struct ucx_am_hdr){ .count = htole32(count) };
	batch_run(tp, q, count, q + qbytes, dlen, rep);
	/* A reply that cannot be sent (the requester died) fails quietly. */
	msg_send(tp, reply_ep, UCX_AM_REP, rep, sizeof(*rep), bytes, 0);
}

_Static_assert(UCX_SECRET_LEN == crypto_generichash_KEYBYTES, "the secret is a key");
_Static_assert(UCX_CRED_WORDS * 8 >= crypto_generichash_BYTES_MIN &&
	       UCX_CRED_WORDS * 8 <= crypto_generichash_BYTES_MAX, "a hash's length");

void ucx_cred(const struct loco_tp *tp, uint32_t client, uint64_t incarnation,
	      uint64_t out[UCX_CRED_WORDS])
{
	/* A label: a credential can never be mistaken for another hash of
	 * the secret, nor a version-4 one for a later one. */
	static const char label[] = "loco-ucx-cred-v4";
	uint8_t in[sizeof(label) - 1 + 16];
	uint8_t h[UCX_CRED_WORDS * 8];
	uint32_t ids[2] = { htole32(tp->self), htole32(client) };
	uint64_t inc = htole64(incarnation);
	memcpy(in, label, sizeof(label) - 1);
	memcpy(in + sizeof(label) - 1, ids, 8);
	memcpy(in + sizeof(label) - 1 + 8, &inc, 8);
	crypto_generichash(h, sizeof(h), in, sizeof(in), tp->secret, sizeof(tp->secret));
	for (unsigned i = 0; i < UCX_CRED_WORDS; i++) {
		memcpy(&out[i], h + 8 * i, 8);
		out[i] = le64toh(out[i]);
	}
	/* All zero says "none" in a descriptor. */
	if (ucx_cred_zero(out))
		out[0] = 1;
}

/* Whether H carries the credential of the (node, incarnation) it names
 * (tp->target_lock held): the one this node's descriptor gave that
 * incarnation. Hashed once per (node, incarnation) named (cred_memo);
 * compared in constant time, so that the time of a refusal says nothing
 * of how much was right. */
static bool cred_ok(struct loco_tp *tp, const struct ucx_am_qhdr *h)
{
	uint32_t node = le32toh(h->node);
	uint64_t inc = le64toh(h->incarnation), c[UCX_CRED_WORDS];
	if (node >= LOCO_MAX_NODES)
		return false;
	if (!inc || tp->cred_inc[node] != inc) {
		ucx_cred(tp, node, inc, tp->cred_memo[node]);
		tp->cred_inc[node] = inc;
	}
	for (unsigned i = 0; i < UCX_CRED_WORDS; i++)
		c[i] = le64toh(h->cred[i]);
	return sodium_memcmp(c, tp->cred_memo[node], sizeof(c)) == 0;
}

/* Log a refusal of EP's requests once per endpoint (of the last
 * UCX_REFUSED_EPS refused; tp->target_lock held). NODE, INC: who the
 * sender says it is, unverified. */
static void refused_log(struct loco_tp *tp, ucp_ep_h ep, uint32_t node, uint64_t inc)
{
	for (unsigned i = 0; i < UCX_REFUSED_EPS; i++)
		if (tp->am_refused[i] == ep)
			return;
	tp->am_refused[tp->am_refused_next++ % UCX_REFUSED_EPS] = ep;
	loco_err(UCX_LOG, "refused requests from an endpoint that says it is node %"
		 PRIu32 " incarnation %016" PRIx64 ": wrong credential (a peer holding "
		 "a descriptor of an earlier life of this node, one naming a node or "
		 "incarnation it is not, or not a member of the cluster); they fail "
		 "with -EACCES, executed nothing (further refusals on this endpoint "
		 "are not logged)", node, inc);
}

/* Whether NODE's incarnation INC is fenced here (tp->target_lock held). */
static bool fenced(const struct loco_tp *tp, uint32_t node, uint64_t inc)
{
	if (node >= LOCO_MAX_NODES)
		return false;
	unsigned n = tp->am_fenced_n[node];
	for (unsigned i = 0; i < n && i < UCX_FENCED_MAX; i++)
		if (tp->am_fenced[node][i] == inc)
			return true;
	return false;
}

int ucx_am_fence(struct loco_tp *tp, uint32_t peer, uint64_t incarnation,
		 int timeout_ms)
{
	if (!tp->am)
		return -EOPNOTSUPP;
	if (peer >= LOCO_MAX_NODES)
		return -EINVAL;
	/* pthread_mutex_timedlock reads CLOCK_REALTIME. */
	struct timespec until = ucx_deadline(CLOCK_REALTIME, timeout_ms);
	/* Held by a handler while it executes a request: taking it waits for
	 * the one mid-execution (a worker stopped inside one: -ETIMEDOUT). */
	int rc = pthread_mutex_timedlock(&tp->target_lock, &until);
	if (rc)
		return rc == ETIMEDOUT ? -ETIMEDOUT : -rc;
	if (!fenced(tp, peer, incarnation)) {
		unsigned n = tp->am_fenced_n[peer]++;
		if (n >= UCX_FENCED_MAX)
			loco_warn(UCX_LOG, "node %" PRIu32 ": an %uth fenced incarnation "
				  "evicts the oldest, %016" PRIx64 ", from the list of "
				  "those refused", peer, n + 1,
				  tp->am_fenced[peer][n % UCX_FENCED_MAX]);
		tp->am_fenced[peer][n % UCX_FENCED_MAX] = incarnation;
	}
	pthread_mutex_unlock(&tp->target_lock);
	return 0;
}

/* Answer each of the COUNT requests at Q (not necessarily aligned) with
 * STATUS, executing none: -EACCES when their message lacked its sender's
 * credential, -LOCO_EFENCED when its sender's incarnation is fenced. */
static void batch_refuse(struct loco_tp *tp, ucp_ep_h reply_ep, const uint8_t *q,
			 uint32_t count, int status)
{
	size_t bytes = count * sizeof(struct ucx_am_rep);
	struct ucx_am_hdr *rep = malloc(sizeof(*rep) + bytes);
	if (!rep) {
		loco_err(UCX_LOG, "no memory for a reply: a peer's requests time out");
		return;
	}
	*rep = (struct ucx_am_hdr){ .count = htole32(count) };
	struct ucx_am_rep *e = (struct ucx_am_rep *)(rep + 1);
	for (uint32_t i = 0; i < count; i++) {
		struct ucx_am_req r;
		memcpy(&r, q + i * sizeof(r), sizeof(r));
		e[i] = (struct ucx_am_rep){ .token = r.token,
					    .status = (int32_t)htole32((uint32_t)status) };
	}
	msg_send(tp, reply_ep, UCX_AM_REP, rep, sizeof(*rep), bytes, 0);
}

/* LOCO_UCX_STALL_IN_EXEC (tp->target_lock held): the handler delayed
 * between its checks and the execution, announced first. */
static void stall_in_exec(struct loco_tp *tp)
{
	if (!tp->stall_at || ++tp->am_msgs != tp->stall_at)
		return;
	loco_warn(UCX_LOG, "LOCO_UCX_STALL_IN_EXEC: request message %" PRIu64
		  " stalls %u ms inside its execution", tp->am_msgs, tp->stall_ms);
	struct timespec ts = { (time_t)(tp->stall_ms / 1000),
			       (long)(tp->stall_ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts))
		;
}

/* UCX_AM_REQ on the target worker (the progress thread, or an application
 * thread lending a hand, with tp->target_lock held): a batch of requests,
 * executed in order, answered by one reply. */
static ucs_status_t req_handler(void *arg, const void *header, size_t hlen,
				void *data, size_t len, const ucp_am_recv_param_t *param)
{
	struct loco_tp *tp = arg;
	struct ucx_am_qhdr h;
	if (hlen != sizeof(h) || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ||
	    !param->reply_ep || param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
		loco_warn(UCX_LOG, "dropped a malformed request message (%zu header bytes)",
			  hlen);
		return UCS_OK;
	}
	memcpy(&h, header, sizeof(h));
	uint32_t count = le32toh(h.count);
	size_t qbytes = (size_t)count * sizeof(struct ucx_am_req);
	if (!count || count > UCX_SQ_DEPTH || len < qbytes) {
		loco_warn(UCX_LOG, "dropped a malformed request message (%" PRIu32
			  " requests, %zu bytes)", count, len);
		return UCS_OK;
	}
	if (!cred_ok(tp, &h)) {
		refused_log(tp, param->reply_ep, le32toh(h.node), le64toh(h.incarnation));
		batch_refuse(tp, param->reply_ep, data, count, -EACCES);
		return UCS_OK;
	}
	if (fenced(tp, le32toh(h.node), le64toh(h.incarnation))) {
		batch_refuse(tp, param->reply_ep, data, count, -LOCO_EFENCED);
		return UCS_OK;
	}
	stall_in_exec(tp);
	if ((uintptr_t)data % 8 == 0) {
		batch_serve(tp, param->reply_ep, data, count, len - qbytes);
		return UCS_OK;
	}
	/* WRITE data must sit as data_at put it, for 8-byte stores; UCX 1.13
	 * on TCP hands the data 5 bytes past an 8-byte boundary. */
	if (len > tp->am_copy_cap) {
		uint64_t *copy = realloc(tp->am_copy, len);
		if (!copy) {
			loco_err(UCX_LOG, "no memory for a request: a peer's requests time out");
			return UCS_OK;
		}
		tp->am_copy = copy;
		tp->am_copy_cap = len;
	}
	memcpy(tp->am_copy, data, len);
	batch_serve(tp, param->reply_ep, (const uint8_t *)tp->am_copy, count,
		    len - qbytes);
	return UCS_OK;
}

/* ---- requester side ----------------------------------------------------- */

/* Fill Q's slot for reply entry E, the reply's data area D of DLEN bytes
 * (a reply for a slot that no longer waits is dropped: its QP failed). A
 * refusal for want of the credential is logged once per QP. */
static void rep_one(struct loco_tp_qp *q, const struct ucx_am_rep *e,
		    const uint8_t *d, size_t dlen)
{
	struct ucx_slot *s = ucx_sq_reply(&q->sq, le64toh(e->token));
	if (!s)
		return;
	int st = (int32_t)le32toh((uint32_t)e->status);
	uint32_t n = le32toh(e->len);
	uint64_t at = le64toh(e->old);
	if (st == -EACCES && !q->refused_logged) {
		q->refused_logged = true;
		loco_err(UCX_LOG, "node %u refused this node's requests: they carry a "
			 "credential it does not know (it restarted since its "
			 "descriptor came?); they fail with -EACCES", q->peer);
	}
	if (!st && s->am_op == LOCO_OP_READ) {
		if (n != s->copy_len || at > dlen || n > dlen - at)
			st = -LOCO_EPROTO;
		else
			memcpy(s->buf, d + at, n);
	} else if (!st && (s->am_op == LOCO_OP_CAS || s->am_op == LOCO_OP_FAA)) {
		memcpy(s->buf + s->copy_off, &at, 8);
	}
	s->status = st;
	s->am_wait = 0;
}

/* UCX_AM_REP on an application thread's worker (cq->lock held): the
 * answers to one batch, in order. */
static ucs_status_t rep_handler(void *arg, const void *header, size_t hlen,
				void *data, size_t len, const ucp_am_recv_param_t *param)
{
	struct loco_tp_cq *cq = arg;
	struct ucx_am_hdr h;
	if (hlen != sizeof(h) || param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
		return UCS_OK;
	memcpy(&h, header, sizeof(h));
	uint32_t count = le32toh(h.count);
	size_t ebytes = (size_t)count * sizeof(struct ucx_am_rep);
	if (!count || len < ebytes)
		return UCS_OK;
	const uint8_t *d = data;
	struct ucx_am_rep e;
	memcpy(&e, d, sizeof(e));
	uint32_t id = (uint32_t)(le64toh(e.token) >> UCX_TOKEN_SEQ_BITS);
	struct loco_tp_qp *q = cq->qps;
	while (q && q->id != id)
		q = q->next;
	if (!q)
		return UCS_OK; /* its QP is gone: dropped */
	for (uint32_t i = 0; i < count; i++) {
		memcpy(&e, d + i * sizeof(e), sizeof(e));
		rep_one(q, &e, d + ebytes, len - ebytes);
	}
	return UCS_OK;
}

/* Whether W is sent: a FLUSH or fence READ only waits for the replies of
 * the requests before it. */
static bool sent(const struct loco_wr *w)
{
	return !(w->opcode == LOCO_OP_FLUSH || (w->opcode == LOCO_OP_READ && !w->len));
}

/* Describe W, staged at slot S with sequence number SEQ of Q, in E; a
 * WRITE's data at AT of the data area. */
static void req_fill(struct loco_tp_qp *q, const struct loco_wr *w,
		     struct ucx_slot *s, uint64_t seq, size_t at,
		     struct ucx_am_req *e)
{
	const uint64_t mask = (UINT64_C(1) << UCX_TOKEN_SEQ_BITS) - 1;
	uint64_t token = (uint64_t)q->id << UCX_TOKEN_SEQ_BITS | (seq & mask);
	bool cas = w->opcode == LOCO_OP_CAS;
	*e = (struct ucx_am_req){
		.op = (uint8_t)w->opcode,
		.len = htole32(w->len),
		.token = htole64(token),
		.off = htole64(w->remote_off),
		.a = htole64(cas ? w->compare : w->operand),
		.b = htole64(cas ? w->operand : w->opcode == LOCO_OP_WRITE ? at : 0),
	};
	s->token = token;
	s->am_op = (uint8_t)w->opcode;
	s->am_wait = 1;
}

/* The request message's data bytes for the N requests WR (the WRITEs'
 * data, placed by data_at), and in *COUNT how many are sent. */
static size_t batch_bytes(const struct loco_wr *wr, unsigned n, uint32_t *count)
{
	size_t pos = 0;
	*count = 0;
	for (unsigned i = 0; i < n; i++) {
		*count += sent(&wr[i]);
		if (wr[i].opcode == LOCO_OP_WRITE)
			pos = data_at(pos, wr[i].remote_off) + wr[i].len;
	}
	return pos;
}

int ucx_am_issue(struct loco_tp_qp *q, const struct loco_wr *wr, unsigned n)
{
	uint32_t count;
	size_t dbytes = batch_bytes(wr, n, &count), pos = 0;
	if (!count)
		return 0;
	size_t qbytes = count * sizeof(struct ucx_am_req);
	/* Zeroed: the padding before WRITE data goes out too. */
	struct ucx_am_qhdr *msg = calloc(1, sizeof(*msg) + qbytes + dbytes);
	if (!msg)
		return -ENOMEM;
	*msg = (struct ucx_am_qhdr){ .count = htole32(count),
				     .node = htole32(q->cq->tp->self),
				     .incarnation = htole64(q->cq->tp->incarnation) };
	for (unsigned i = 0; i < UCX_CRED_WORDS; i++)
		msg->cred[i] = htole64(q->cred[i]);
	struct ucx_am_req *e = (struct ucx_am_req *)(msg + 1);
	uint8_t *data = (uint8_t *)(e + count);
	struct ucx_slot *first = NULL;
	for (unsigned i = 0; i < n; i++) {
		struct ucx_slot *s = ucx_sq_staged(&q->sq, i);
		if (!sent(&wr[i]))
			continue;
		if (wr[i].opcode == LOCO_OP_WRITE) {
			pos = data_at(pos, wr[i].remote_off);
			memcpy(data + pos, s->buf, wr[i].len);
		}
		req_fill(q, &wr[i], s, q->sq.head + i, pos, e++);
		if (wr[i].opcode == LOCO_OP_WRITE)
			pos += wr[i].len;
		first = first ? first : s;
	}
	void *r = msg_send(q->cq->tp, q->ep, UCX_AM_REQ, msg, sizeof(*msg),
			   qbytes + dbytes, UCP_AM_SEND_FLAG_REPLY);
	if (UCS_PTR_IS_ERR(r)) {
		int rc = ucx_errno(UCS_PTR_STATUS(r));
		return rc ? rc : -EIO;
	}
	/* The batch's first request retires only once the send completed
	 * too (the replies imply delivery; a failed send fails it). */
	first->req = r;
	return 0;
}

/* ---- set-up ------------------------------------------------------------- */

static int handler_set(struct loco_tp *tp, ucp_worker_h w, unsigned id,
		       ucp_am_recv_callback_t cb, void *arg)
{
	ucp_am_handler_param_t p = {
		.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
			      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
		.id = id,
		.flags = UCP_AM_FLAG_WHOLE_MSG,
		.cb = cb,
		.arg = arg,
	};
	ucs_status_t st = tp->api->worker_set_am_recv_handler(w, &p);
	if (st != UCS_OK) {
		loco_err(UCX_LOG, "ucp_worker_set_am_recv_handler: %s",
			 tp->api->status_string(st));
		return ucx_errno(st) ? ucx_errno(st) : -EIO;
	}
	return 0;
}

int ucx_am_target_init(struct loco_tp *tp)
{
	/* For ucx_cred's BLAKE2b (idempotent, thread-safe). */
	if (sodium_init() < 0) {
		loco_err(UCX_LOG, "libsodium failed to initialise: no credentials");
		return -EIO;
	}
	return tp->am ? handler_set(tp, tp->target, UCX_AM_REQ, req_handler, tp) : 0;
}

int ucx_am_cq_init(struct loco_tp_cq *cq)
{
	return cq->tp->am ? handler_set(cq->tp, cq->worker, UCX_AM_REP, rep_handler, cq) : 0;
}
