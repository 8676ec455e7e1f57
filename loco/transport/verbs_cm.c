/* SPDX-License-Identifier: MIT */
/* verbs transport, connection management with librdmacm.
 *
 * Each node listens on its RDMA address (verbs_select), port = hosts-file
 * port + LOCO_VERBS_CM_PORT_OFFSET, with one listener thread, and
 * advertises both in its arena descriptor; peers connect there, not to the
 * hosts-file (control-plane) address. qp_create connects
 * actively (address, route, REQ, REP) on a private event channel with a
 * deadline, then migrates the connected id to the listener's channel so
 * that a later DISCONNECTED (peer gone) reaches the listener thread.
 *
 * QPs are ours, not rdma_cm's (rdma_connect/accept with qp_num): rdma_cm
 * gives the addressing (path, DMAC, PSNs, timers) through rdma_init_qp_attr
 * and we override what loco configures: source GID index, the peer's GID
 * (exchanged in the private data), path MTU (the smaller of both ends') and
 * the access flags. The private data (verbs_cfg.h) also names the source
 * node, the destination node and the thread, so a passive side can refuse a
 * request that is not from a node of its hosts file, coming from the RDMA
 * address that node advertised. */
#include "loco/transport/verbs_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <loco/error.h>
#include <loco/log.h>

#define VERBS_LOG "verbs"
#define VERBS_RETRY_MS 100     /* pause between connection attempts */
#define VERBS_RETRY_COUNT 7    /* transport retries: the 3-bit maximum */
#define VERBS_RNR_RETRY 7
#define VERBS_HOP_LIMIT 64     /* RoCE v2 packets cross routers */
#define VERBS_IB_REJ_NO_LISTENER 8 /* IB CM reject: invalid service id */

_Static_assert(offsetof(struct verbs_passive, link) == 0,
	       "cm_id->context of a passive id is its verbs_passive");

/* ---- helpers ------------------------------------------------------------ */

const char *verbs_addr_str(const struct sockaddr *sa, char *buf, size_t len)
{
	const void *ip = sa->sa_family == AF_INET
		? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
		: (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (!inet_ntop(sa->sa_family, ip, buf, (socklen_t)len))
		snprintf(buf, len, "(address family %d)", sa->sa_family);
	return buf;
}

/* Describe a failed step in WHY; returns R. */
__attribute__((format(printf, 4, 5)))
static int verbs_why(char *why, size_t len, int r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
	return r;
}

static int verbs_left_ms(int64_t deadline)
{
	int64_t left = deadline - verbs_now_ms();
	return left < 1 ? 1 : (int)left;
}

static void verbs_sleep_ms(int64_t ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static bool verbs_on_our_port(const struct loco_tp *tp, const struct rdma_cm_id *id)
{
	return !strcmp(ibv_get_device_name(id->verbs->device), tp->devname) &&
	       id->port_num == tp->port;
}

static void verbs_conn_fill(const struct loco_tp *tp, uint8_t kind, uint32_t dst,
			    uint32_t thread, uint32_t reason,
			    uint8_t buf[VERBS_CONN_LEN])
{
	struct verbs_conn_msg m = { .kind = kind, .mtu = tp->mtu, .src = tp->self,
				    .dst = dst, .thread = thread, .reason = reason,
				    .incarnation = tp->incarnation };
	memcpy(m.gid, tp->gid.raw, 16);
	verbs_conn_pack(&m, buf);
}

/* ---- QP state transitions ------------------------------------------------ */

/* RESET (legal from any state, so retries start clean), then INIT with the
 * port and P_Key rdma_cm chose and remote access for one-sided ops. */
static int verbs_qp_init(const struct loco_tp *tp, struct rdma_cm_id *id,
			 struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
	int mask;
	int r = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	if (r)
		return -r;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	if (rdma_init_qp_attr(id, &a, &mask))
		return -errno;
	a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
			    (tp->atomics ? IBV_ACCESS_REMOTE_ATOMIC : 0);
	return -ibv_modify_qp(qp, &a, mask | IBV_QP_ACCESS_FLAGS);
}

/* RTR then RTS. rdma_cm supplies the path, PSNs and timers; we set our GID
 * index, the PEER's GID and the path MTU. RESP_RES / INIT_DEPTH >= 0
 * override the responder resources / initiator depth (passive side: what
 * its accept announces). */
static int verbs_qp_ready(const struct loco_tp *tp, struct rdma_cm_id *id,
			  struct ibv_qp *qp, const struct verbs_conn_msg *peer,
			  int resp_res, int init_depth)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	int mask;
	if (rdma_init_qp_attr(id, &a, &mask))
		return -errno;
	a.path_mtu = tp->mtu < peer->mtu ? tp->mtu : peer->mtu;
	mask |= IBV_QP_PATH_MTU;
	if (a.ah_attr.is_global) {
		a.ah_attr.grh.sgid_index = (uint8_t)tp->gid_index;
		memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
		if (tp->ethernet && a.ah_attr.grh.hop_limit < VERBS_HOP_LIMIT)
			a.ah_attr.grh.hop_limit = VERBS_HOP_LIMIT;
	}
	if (resp_res >= 0) {
		a.max_dest_rd_atomic = (uint8_t)resp_res;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC;
	}
	int r = ibv_modify_qp(qp, &a, mask);
	if (r)
		return -r;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	if (rdma_init_qp_attr(id, &a, &mask))
		return -errno;
	if (init_depth >= 0) {
		a.max_rd_atomic = (uint8_t)init_depth;
		mask |= IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return -ibv_modify_qp(qp, &a, mask);
}

/* ---- passive side (listener thread) -------------------------------------- */

/* Is FROM the RDMA address node SRC advertised (WANT gets that address)?
 * 1 yes, 0 no, -1 its descriptor has not arrived yet (the hello that
 * carries it may still be on its way: the requester retries). */
static int verbs_addr_matches(struct loco_tp *tp, uint32_t src,
			      const struct sockaddr *from, char *want, size_t len)
{
	struct sockaddr_storage adv;
	struct verbs_desc d;
	if (verbs_peer_desc(tp, src, &d))
		return -1;
	verbs_desc_sockaddr(&d, &adv);
	verbs_addr_str((const struct sockaddr *)&adv, want, len);
	return verbs_desc_addr_is(&d, from);
}

/* Whether NODE's incarnation INC is fenced here (passive_lock held). */
static bool verbs_fenced_is(const struct loco_tp *tp, uint32_t node, uint64_t inc)
{
	if (node >= LOCO_MAX_NODES)
		return false;
	for (unsigned i = 0; i < tp->fenced_n[node] && i < VERBS_FENCED_MAX; i++)
		if (tp->fenced[node][i] == inc)
			return true;
	return false;
}

/* 0, or the reason (positive errno / LOCO code) to refuse the request
 * (passive_lock held, so that a fence sees either the refusal or the
 * accepted QP). */
static uint32_t verbs_passive_check(struct loco_tp *tp, struct rdma_cm_event *ev,
				    struct verbs_conn_msg *req)
{
	struct sockaddr *from = rdma_get_peer_addr(ev->id);
	const struct rdma_conn_param *cp = &ev->param.conn;
	char addr[INET6_ADDRSTRLEN + 24];
	verbs_addr_str(from, addr, sizeof(addr));
	if (verbs_conn_unpack(cp->private_data, cp->private_data_len, req) < 0 ||
	    req->kind != VERBS_CONN_REQ) {
		loco_err(VERBS_LOG, "connection request from %s is not a loco verbs v%d request: refused",
			 addr, VERBS_CONN_VERSION);
		return LOCO_EPROTO;
	}
	if (req->dst != tp->self) {
		loco_err(VERBS_LOG, "connection request from %s (node %u) is for node %u, this is node %u: "
			 "do all nodes use the same hosts file?", addr, req->src, req->dst, tp->self);
		return LOCO_EHOSTS;
	}
	if (req->src >= LOCO_MAX_NODES || !tp->hosts->node[req->src].present) {
		loco_err(VERBS_LOG, "connection request from %s claims to be node %u, which is not "
			 "in the hosts file: refused", addr, req->src);
		return EPERM;
	}
	char want[INET6_ADDRSTRLEN];
	int m = verbs_addr_matches(tp, req->src, from, want, sizeof(want));
	if (m < 0) {
		loco_dbg(VERBS_LOG, "connection request from node %u before its hello: "
			 "asking it to retry", req->src);
		return EAGAIN;
	}
	if (!m) {
		loco_err(VERBS_LOG, "connection request from %s claims to be node %u, whose RDMA "
			 "address is %s: refused", addr, req->src, want);
		return EPERM;
	}
	if (!verbs_on_our_port(tp, ev->id)) {
		loco_err(VERBS_LOG, "connection request from node %u arrived on %s port %u, loco uses %s port %u",
			 req->src, ibv_get_device_name(ev->id->verbs->device), ev->id->port_num,
			 tp->devname, tp->port);
		return ENODEV;
	}
	if (verbs_fenced_is(tp, req->src, req->incarnation)) {
		loco_warn(VERBS_LOG, "connection request from node %u: its incarnation %016"
			  PRIx64 " is fenced here: refused", req->src, req->incarnation);
		return LOCO_EFENCED;
	}
	if (tp->passive_count >= tp->passive_max) {
		loco_err(VERBS_LOG, "connection request from node %u: already %u connections, the most "
			 "this node's passive CQ is sized for", req->src, tp->passive_count);
		return ENOSPC;
	}
	return 0;
}

static int verbs_passive_qp(const struct loco_tp *tp, struct verbs_passive *p)
{
	/* Target of one-sided ops only: minimal queues, never posted to. */
	struct ibv_qp_init_attr a = {
		.send_cq = tp->passive_cq,
		.recv_cq = tp->passive_cq,
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	p->link.qp = ibv_create_qp(tp->pd, &a);
	return p->link.qp ? 0 : -errno;
}

static int verbs_passive_reply(const struct loco_tp *tp, struct rdma_cm_id *id,
			       const struct verbs_conn_msg *req, struct ibv_qp *qp,
			       uint8_t resp_res)
{
	uint8_t buf[VERBS_CONN_LEN];
	verbs_conn_fill(tp, VERBS_CONN_REP, req->src, req->thread, 0, buf);
	struct rdma_conn_param cp = {
		.private_data = buf,
		.private_data_len = sizeof(buf),
		.responder_resources = resp_res,
		.initiator_depth = 0,   /* the passive QP issues nothing */
		.rnr_retry_count = VERBS_RNR_RETRY,
		.qp_num = qp->qp_num,
	};
	return rdma_accept(id, &cp) ? -errno : 0;
}

/* Create, ready and accept the passive QP. 0 or the refusal reason. */
static uint32_t verbs_passive_setup(struct loco_tp *tp, struct rdma_cm_event *ev,
				    const struct verbs_conn_msg *req,
				    struct verbs_passive **out)
{
	struct verbs_passive *p = calloc(1, sizeof(*p));
	if (!p)
		return ENOMEM;
	p->id = ev->id;
	p->incarnation = req->incarnation;
	p->link = (struct verbs_link){ .passive = true, .node = req->src,
				       .thread = req->thread };
	int max = tp->attr.orig_attr.max_qp_rd_atom;
	uint8_t rr = ev->param.conn.initiator_depth < max ? ev->param.conn.initiator_depth
							  : (uint8_t)max;
	ev->id->context = &p->link;
	int r = verbs_passive_qp(tp, p);
	if (!r)
		r = verbs_qp_init(tp, ev->id, p->link.qp);
	if (!r)
		r = verbs_qp_ready(tp, ev->id, p->link.qp, req, rr, 0);
	if (!r)
		r = verbs_passive_reply(tp, ev->id, req, p->link.qp, rr);
	if (r < 0) {
		loco_err(VERBS_LOG, "accepting node %u thread %u: %s", req->src, req->thread,
			 strerror(-r));
		ev->id->context = NULL;
		if (p->link.qp)
			ibv_destroy_qp(p->link.qp);
		free(p);
		return (uint32_t)-r;
	}
	*out = p;
	return 0;
}

/* Handle a connection request; returns the id to destroy after the ack
 * (refused), or NULL (accepted). */
static struct rdma_cm_id *verbs_passive_accept(struct loco_tp *tp,
					       struct rdma_cm_event *ev)
{
	struct verbs_conn_msg req = { 0 };
	struct verbs_passive *p = NULL;
	pthread_mutex_lock(&tp->passive_lock);
	uint32_t reason = verbs_passive_check(tp, ev, &req);
	if (!reason)
		reason = verbs_passive_setup(tp, ev, &req, &p);
	if (!reason) {
		p->next = tp->passive;
		tp->passive = p;
		tp->passive_count++;
	}
	pthread_mutex_unlock(&tp->passive_lock);
	if (!reason) {
		loco_dbg(VERBS_LOG, "accepted node %u thread %u", req.src, req.thread);
		return NULL;
	}
	uint8_t buf[VERBS_CONN_LEN];
	verbs_conn_fill(tp, VERBS_CONN_REJ, req.src, req.thread, reason, buf);
	if (rdma_reject(ev->id, buf, sizeof(buf)))
		loco_dbg(VERBS_LOG, "rdma_reject: %s", strerror(errno));
	return ev->id;
}

static void verbs_passive_free(struct loco_tp *tp, struct verbs_passive *p)
{
	rdma_disconnect(p->id); /* fails harmlessly if the peer left first */
	rdma_destroy_id(p->id);
	ibv_destroy_qp(p->link.qp);
	tp->passive_count--;
	free(p);
}

static void verbs_passive_drop(struct loco_tp *tp, struct verbs_passive *p)
{
	pthread_mutex_lock(&tp->passive_lock);
	struct verbs_passive **pp = &tp->passive;
	while (*pp != p)
		pp = &(*pp)->next;
	*pp = p->next;
	loco_dbg(VERBS_LOG, "node %u thread %u disconnected", p->link.node, p->link.thread);
	verbs_passive_free(tp, p);
	pthread_mutex_unlock(&tp->passive_lock);
}

/* Record NODE's INC as fenced (passive_lock held). */
static void verbs_fenced_add(struct loco_tp *tp, uint32_t node, uint64_t inc)
{
	if (verbs_fenced_is(tp, node, inc))
		return;
	unsigned n = tp->fenced_n[node]++;
	if (n >= VERBS_FENCED_MAX)
		loco_warn(VERBS_LOG, "node %u: an %uth fenced incarnation evicts the "
			  "oldest, %016" PRIx64 ", from those refused", node, n + 1,
			  tp->fenced[node][n % VERBS_FENCED_MAX]);
	tp->fenced[node][n % VERBS_FENCED_MAX] = inc;
}

/* Move P's QP to the error state: from then on its responder executes no
 * incoming request (IBTA: "queue processing is stopped"; packets to a QP
 * in Error are dropped), and what is in flight at the initiator is
 * flushed there. Then disconnect, so that the initiator learns at once
 * instead of after its transport retries. 0 or -errno. */
static int verbs_passive_fence(struct verbs_passive *p)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	int r = ibv_modify_qp(p->link.qp, &a, IBV_QP_STATE);
	if (r) {
		loco_err(VERBS_LOG, "fencing node %u (thread %u): moving its QP %#x to "
			 "the error state: %s", p->link.node, p->link.thread,
			 p->link.qp->qp_num, strerror(r));
		return -r;
	}
	p->fenced = true;
	rdma_disconnect(p->id); /* fails harmlessly if the peer left first */
	return 0;
}

int verbs_cm_fence(struct loco_tp *tp, uint32_t peer, uint64_t incarnation,
		   int timeout_ms)
{
	if (peer >= LOCO_MAX_NODES || !incarnation)
		return -EINVAL;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	uint64_t ns = (uint64_t)until.tv_nsec +
		      (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000u;
	until.tv_sec += (time_t)(ns / 1000000000u);
	until.tv_nsec = (long)(ns % 1000000000u);
	/* The listener holds it while it accepts (rdma_accept may wait). */
	int e = pthread_mutex_timedlock(&tp->passive_lock, &until);
	if (e)
		return e == ETIMEDOUT ? -ETIMEDOUT : -e;
	verbs_fenced_add(tp, peer, incarnation);
	int rc = 0;
	unsigned n = 0;
	for (struct verbs_passive *p = tp->passive; p; p = p->next) {
		if (p->link.node != peer || p->incarnation != incarnation || p->fenced)
			continue;
		int r = verbs_passive_fence(p);
		if (!rc)
			rc = r;
		n += !r;
	}
	pthread_mutex_unlock(&tp->passive_lock);
	if (n)
		loco_info(VERBS_LOG, "fenced node %u (incarnation %016" PRIx64 "): %u of "
			  "its QPs moved to the error state", peer, incarnation, n);
	return rc;
}

/* An active QP's peer went away: fail its operations now rather than after
 * the transport retries. */
static void verbs_link_down(struct verbs_link *link, const struct rdma_cm_event *ev)
{
	int up = VERBS_LINK_UP;
	/* Relaxed: the state publishes no data (verbs_int.h). */
	if (!atomic_compare_exchange_strong_explicit(&link->state, &up, VERBS_LINK_DOWN,
						     memory_order_relaxed,
						     memory_order_relaxed))
		return; /* closing (qp_destroy) or already down */
	loco_warn(VERBS_LOG, "connection of thread %u to node %u lost (%s): its operations fail with %s",
		  link->thread, link->node, rdma_event_str(ev->event),
		  loco_strerror(-LOCO_EQP));
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	int r = ibv_modify_qp(link->qp, &a, IBV_QP_STATE); /* flushes to the owner's CQ */
	if (r)
		loco_err(VERBS_LOG, "moving the QP to node %u to the error state: %s", link->node,
			 strerror(r));
}

static void verbs_cm_event_take(struct loco_tp *tp)
{
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(tp->cm_ch, &ev)) {
		if (errno != EAGAIN)
			loco_err(VERBS_LOG, "rdma_get_cm_event: %s", strerror(errno));
		return;
	}
	struct verbs_link *link = ev->id->context;
	struct rdma_cm_id *refused = NULL;
	struct verbs_passive *gone = NULL;
	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		refused = verbs_passive_accept(tp, ev);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		if (link && link->passive)
			gone = (struct verbs_passive *)link;
		else if (link)
			verbs_link_down(link, ev);
		else
			loco_err(VERBS_LOG, "rdma_cm listener: %s (status %d)",
				 rdma_event_str(ev->event), ev->status);
		break;
	default: /* ESTABLISHED, TIMEWAIT_EXIT, ADDR_CHANGE: nothing to do */
		loco_dbg(VERBS_LOG, "rdma_cm: %s", rdma_event_str(ev->event));
		break;
	}
	rdma_ack_cm_event(ev);
	/* rdma_destroy_id waits for the ack of the id's events: after it. */
	if (refused)
		rdma_destroy_id(refused);
	if (gone)
		verbs_passive_drop(tp, gone);
}

static void verbs_async_event_take(struct loco_tp *tp)
{
	struct ibv_async_event e;
	if (ibv_get_async_event(tp->ctx, &e))
		return;
	switch (e.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
		loco_err(VERBS_LOG, "%s: %s on QP %#x", tp->devname,
			 ibv_event_type_str(e.event_type), e.element.qp->qp_num);
		break;
	case IBV_EVENT_CQ_ERR:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_DEVICE_FATAL:
		loco_err(VERBS_LOG, "%s: %s", tp->devname, ibv_event_type_str(e.event_type));
		break;
	default:
		loco_info(VERBS_LOG, "%s: %s", tp->devname, ibv_event_type_str(e.event_type));
		break;
	}
	ibv_ack_async_event(&e);
}

static void *verbs_listen_main(void *arg)
{
	struct loco_tp *tp = arg;
	struct pollfd fds[3] = {
		{ .fd = tp->cm_ch->fd, .events = POLLIN },
		{ .fd = tp->ctx->async_fd, .events = POLLIN },
		{ .fd = tp->wake_fd, .events = POLLIN },
	};
	for (;;) {
		if (poll(fds, 3, -1) < 0) {
			if (errno == EINTR)
				continue;
			loco_err(VERBS_LOG, "listener: poll: %s", strerror(errno));
			return NULL;
		}
		if (fds[2].revents)
			return NULL;
		if (fds[0].revents)
			verbs_cm_event_take(tp);
		if (fds[1].revents)
			verbs_async_event_take(tp);
	}
}

/* ---- listener lifecycle ------------------------------------------------ */

static int verbs_bind_error(const struct loco_tp *tp, int e)
{
	char addr[INET6_ADDRSTRLEN];
	verbs_addr_str((const struct sockaddr *)&tp->addr, addr, sizeof(addr));
	if (e == EADDRINUSE)
		loco_err(VERBS_LOG, "rdma_cm port %u on %s is taken (hosts-file port + "
			 "LOCO_VERBS_CM_PORT_OFFSET): another node with the same port on this host?",
			 tp->cm_port, addr);
	else if (e == ENODEV)
		loco_err(VERBS_LOG, "%s is no longer on an RDMA port (address removed since?)",
			 addr);
	else
		loco_err(VERBS_LOG, "rdma_bind_addr(%s port %u): %s", addr, tp->cm_port,
			 strerror(e));
	return e == ENODEV ? -LOCO_ENODEV : -e;
}

int verbs_cm_open(struct loco_tp *tp)
{
	tp->cm_ch = rdma_create_event_channel();
	if (!tp->cm_ch) {
		loco_err(VERBS_LOG, "rdma_cm unavailable (rdma_create_event_channel: %s): "
			 "is the rdma_ucm kernel module loaded?", strerror(errno));
		return -LOCO_ENODEV;
	}
	return 0;
}

int verbs_cm_bind(struct loco_tp *tp)
{
	int r;
	if (rdma_create_id(tp->cm_ch, &tp->listen_id, NULL, RDMA_PS_TCP)) {
		r = -errno;
		loco_err(VERBS_LOG, "rdma_create_id: %s", strerror(-r));
		tp->listen_id = NULL;
		return r;
	}
	if (rdma_bind_addr(tp->listen_id, (struct sockaddr *)&tp->addr)) {
		r = verbs_bind_error(tp, errno);
		goto destroy_id;
	}
	if (!tp->listen_id->verbs) {
		r = verbs_bind_error(tp, ENODEV);
		goto destroy_id;
	}
	if (!verbs_on_our_port(tp, tp->listen_id)) {
		char addr[INET6_ADDRSTRLEN];
		loco_err(VERBS_LOG, "rdma_cm binds %s to %s port %u, not the chosen %s port %u",
			 verbs_addr_str((const struct sockaddr *)&tp->addr, addr, sizeof(addr)),
			 ibv_get_device_name(tp->listen_id->verbs->device),
			 tp->listen_id->port_num, tp->devname, tp->port);
		r = -ENODEV;
		goto destroy_id;
	}
	return 0;
destroy_id:
	rdma_destroy_id(tp->listen_id);
	tp->listen_id = NULL;
	return r;
}

/* The listener polls both fds, then reads: non-blocking, so a spurious
 * wake-up cannot wedge it (and with it close()). */
static int verbs_fd_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

int verbs_cm_listen(struct loco_tp *tp)
{
	if (rdma_listen(tp->listen_id, VERBS_LISTEN_BACKLOG)) {
		int e = errno;
		loco_err(VERBS_LOG, "rdma_listen: %s", strerror(e));
		return -e;
	}
	int r = verbs_fd_nonblock(tp->cm_ch->fd);
	if (!r)
		r = verbs_fd_nonblock(tp->ctx->async_fd);
	if (r < 0) {
		loco_err(VERBS_LOG, "fcntl(O_NONBLOCK): %s", strerror(-r));
		return r;
	}
	tp->wake_fd = eventfd(0, EFD_CLOEXEC);
	if (tp->wake_fd < 0) {
		int e = errno;
		loco_err(VERBS_LOG, "eventfd: %s", strerror(e));
		return -e;
	}
	r = pthread_create(&tp->listener, NULL, verbs_listen_main, tp);
	if (r) {
		loco_err(VERBS_LOG, "starting the rdma_cm listener thread: %s", strerror(r));
		close(tp->wake_fd);
		return -r;
	}
	return 0;
}

void verbs_cm_stop(struct loco_tp *tp)
{
	uint64_t one = 1;
	if (write(tp->wake_fd, &one, sizeof(one)) != sizeof(one))
		loco_err(VERBS_LOG, "waking the listener thread: %s", strerror(errno));
	pthread_join(tp->listener, NULL);
	close(tp->wake_fd);
	pthread_mutex_lock(&tp->passive_lock);
	while (tp->passive) {
		struct verbs_passive *p = tp->passive;
		tp->passive = p->next;
		verbs_passive_free(tp, p);
	}
	pthread_mutex_unlock(&tp->passive_lock);
}

void verbs_cm_unbind(struct loco_tp *tp)
{
	if (tp->listen_id)
		rdma_destroy_id(tp->listen_id);
	tp->listen_id = NULL;
	rdma_destroy_event_channel(tp->cm_ch);
}

/* ---- active side ---------------------------------------------------------- */

/* Next event on CH before DEADLINE; the caller acks it. */
static int verbs_cm_next(struct rdma_event_channel *ch, int64_t deadline,
			 struct rdma_cm_event **ev)
{
	for (;;) {
		int64_t left = deadline - verbs_now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
		int r = poll(&pfd, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -ETIMEDOUT;
		return rdma_get_cm_event(ch, ev) ? -errno : 0;
	}
}

/* An event other than the one STEP waits for: retryable (-EAGAIN). */
static int verbs_event_unexpected(const struct rdma_cm_event *ev, const char *step,
				  char *why, size_t len)
{
	const char *hint = "";
	if (ev->event == RDMA_CM_EVENT_REJECTED && ev->status == VERBS_IB_REJ_NO_LISTENER)
		hint = "nothing listens there (yet)";
	else if (ev->event == RDMA_CM_EVENT_UNREACHABLE)
		hint = "no answer from the peer's connection manager";
	else if (ev->status < 0)
		hint = strerror(-ev->status);
	return verbs_why(why, len, -EAGAIN, "%s: %s (status %d)%s%s", step,
			 rdma_event_str(ev->event), ev->status, *hint ? ": " : "", hint);
}

static int verbs_cm_expect(struct rdma_event_channel *ch, int64_t deadline,
			   enum rdma_cm_event_type want, const char *step,
			   char *why, size_t len)
{
	struct rdma_cm_event *ev;
	int r = verbs_cm_next(ch, deadline, &ev);
	if (r == -ETIMEDOUT)
		return verbs_why(why, len, r, "timed out in %s", step);
	if (r < 0)
		return verbs_why(why, len, r, "%s: rdma_get_cm_event: %s", step, strerror(-r));
	if (ev->event != want)
		r = verbs_event_unexpected(ev, step, why, len);
	rdma_ack_cm_event(ev);
	return r;
}

/* Resolve DST from this node's address; the route must leave through the
 * device and port the arena is registered on. */
static int verbs_connect_route(const struct loco_tp *tp, struct rdma_cm_id *id,
			       struct sockaddr_storage *dst, int64_t deadline,
			       char *why, size_t len)
{
	struct sockaddr_storage src = tp->addr;
	verbs_addr_set_port(&src, 0);
	if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)dst,
			      verbs_left_ms(deadline)))
		return verbs_why(why, len, -errno, "rdma_resolve_addr: %s", strerror(errno));
	int r = verbs_cm_expect(id->channel, deadline, RDMA_CM_EVENT_ADDR_RESOLVED,
				"address resolution", why, len);
	if (r < 0)
		return r;
	if (!verbs_on_our_port(tp, id))
		return verbs_why(why, len, -ENETUNREACH, "the route leaves through %s port %u, "
				 "not %s port %u: check the IP routes of the RDMA interfaces",
				 ibv_get_device_name(id->verbs->device), id->port_num,
				 tp->devname, tp->port);
	if (rdma_resolve_route(id, verbs_left_ms(deadline)))
		return verbs_why(why, len, -errno, "rdma_resolve_route: %s", strerror(errno));
	return verbs_cm_expect(id->channel, deadline, RDMA_CM_EVENT_ROUTE_RESOLVED,
			       "route resolution", why, len);
}

/* The passive side answered with a REP: check it, ready the QP, send RTU. */
static int verbs_connect_finish(const struct loco_tp *tp, struct loco_tp_qp *q,
				struct rdma_cm_id *id, const struct rdma_cm_event *ev,
				char *why, size_t len)
{
	const struct rdma_conn_param *cp = &ev->param.conn;
	struct verbs_conn_msg rep;
	int r = verbs_conn_unpack(cp->private_data, cp->private_data_len, &rep);
	if (r < 0 || rep.kind != VERBS_CONN_REP || rep.src != q->link.node ||
	    rep.dst != tp->self || rep.thread != q->link.thread)
		r = verbs_why(why, len, -LOCO_EPROTO, "unexpected connection reply");
	if (!r) {
		r = verbs_qp_ready(tp, id, q->qp, &rep, -1, -1);
		if (r < 0)
			verbs_why(why, len, r, "moving the QP to RTR/RTS: %s", strerror(-r));
	}
	if (!r && rdma_establish(id))
		r = verbs_why(why, len, -errno, "rdma_establish: %s", strerror(errno));
	if (r < 0 && rdma_reject(id, NULL, 0))
		loco_dbg(VERBS_LOG, "rdma_reject: %s", strerror(errno));
	return r;
}

/* Anything but a REP. A refusal by a loco node is final; the rest (no
 * listener yet, CM timeout) is retried until the deadline. */
static int verbs_connect_refused(const struct loco_tp_qp *q,
				 const struct rdma_cm_event *ev, char *why, size_t len)
{
	const struct rdma_conn_param *cp = &ev->param.conn;
	struct verbs_conn_msg rej;
	if (ev->event == RDMA_CM_EVENT_REJECTED &&
	    !verbs_conn_unpack(cp->private_data, cp->private_data_len, &rej) &&
	    rej.kind == VERBS_CONN_REJ) {
		if (rej.reason == EAGAIN) /* it has not seen our hello yet */
			return verbs_why(why, len, -EAGAIN, "node %u does not know this "
					 "node's RDMA address yet", q->link.node);
		int e = rej.reason ? -(int)rej.reason : -ECONNREFUSED;
		return verbs_why(why, len, e, "node %u refused the connection: %s",
				 q->link.node, loco_strerror(e));
	}
	return verbs_event_unexpected(ev, "connection", why, len);
}

static int verbs_connect_request(const struct loco_tp *tp, struct loco_tp_qp *q,
				 struct rdma_cm_id *id, int64_t deadline,
				 char *why, size_t len)
{
	uint8_t buf[VERBS_CONN_LEN];
	verbs_conn_fill(tp, VERBS_CONN_REQ, q->link.node, q->link.thread, 0, buf);
	int depth = tp->attr.orig_attr.max_qp_init_rd_atom;
	struct rdma_conn_param cp = {
		.private_data = buf,
		.private_data_len = sizeof(buf),
		.initiator_depth = (uint8_t)(depth > 255 ? 255 : depth),
		.responder_resources = 0, /* nobody reads through the active QP */
		.retry_count = VERBS_RETRY_COUNT,
		.rnr_retry_count = VERBS_RNR_RETRY,
		.qp_num = q->qp->qp_num,
	};
	if (rdma_connect(id, &cp))
		return verbs_why(why, len, -errno, "rdma_connect: %s", strerror(errno));
	struct rdma_cm_event *ev;
	int r = verbs_cm_next(id->channel, deadline, &ev);
	if (r < 0)
		return verbs_why(why, len, r, "waiting for the connection reply: %s",
				 strerror(-r));
	if (ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE)
		r = verbs_connect_finish(tp, q, id, ev, why, len);
	else
		r = verbs_connect_refused(q, ev, why, len);
	rdma_ack_cm_event(ev);
	return r;
}

/* One attempt on a private event channel; -EAGAIN means try again. */
static int verbs_connect_once(struct loco_tp *tp, struct loco_tp_qp *q,
			      struct sockaddr_storage *dst, int64_t deadline,
			      char *why, size_t len)
{
	struct rdma_cm_id *id;
	int r;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		return verbs_why(why, len, -errno, "rdma_create_event_channel: %s",
				 strerror(errno));
	if (rdma_create_id(ch, &id, &q->link, RDMA_PS_TCP)) {
		r = verbs_why(why, len, -errno, "rdma_create_id: %s", strerror(errno));
		goto destroy_channel;
	}
	r = verbs_connect_route(tp, id, dst, deadline, why, len);
	if (!r) {
		r = verbs_qp_init(tp, id, q->qp);
		if (r < 0)
			verbs_why(why, len, r, "moving the QP to INIT: %s", strerror(-r));
	}
	if (!r)
		r = verbs_connect_request(tp, q, id, deadline, why, len);
	if (r < 0)
		goto destroy_id;
	if (rdma_migrate_id(id, tp->cm_ch)) {
		r = verbs_why(why, len, -errno, "rdma_migrate_id: %s", strerror(errno));
		goto disconnect;
	}
	rdma_destroy_event_channel(ch);
	q->id = id;
	return 0;
disconnect:
	rdma_disconnect(id);
destroy_id:
	rdma_destroy_id(id);
destroy_channel:
	rdma_destroy_event_channel(ch);
	return r;
}

int verbs_cm_connect(struct loco_tp *tp, struct loco_tp_qp *q)
{
	struct sockaddr_storage dst;
	char why[256] = "";
	char addr[INET6_ADDRSTRLEN];
	int r = verbs_peer_addr(tp, q->link.node, &dst);
	if (r < 0) {
		loco_err(VERBS_LOG, "connecting thread %u to node %u: its RDMA address is not "
			 "known yet (no arena descriptor)", q->link.thread, q->link.node);
		return r;
	}
	int64_t deadline = verbs_now_ms() + tp->cfg.timeout_ms;
	for (;;) {
		r = verbs_connect_once(tp, q, &dst, deadline, why, sizeof(why));
		if (r != -EAGAIN)
			break;
		int64_t left = deadline - verbs_now_ms();
		if (left <= 0) {
			r = -ETIMEDOUT;
			break;
		}
		verbs_sleep_ms(left < VERBS_RETRY_MS ? left : VERBS_RETRY_MS);
	}
	if (r < 0)
		loco_err(VERBS_LOG, "connecting thread %u to node %u (%s, rdma_cm port %u) "
			 "within %u ms failed: %s", q->link.thread, q->link.node,
			 verbs_addr_str((struct sockaddr *)&dst, addr, sizeof(addr)),
			 verbs_addr_port(&dst),
			 tp->cfg.timeout_ms, why);
	return r;
}

void verbs_cm_disconnect(struct loco_tp_qp *q)
{
	/* Relaxed: only keeps the listener from reporting this as a loss. */
	atomic_store_explicit(&q->link.state, VERBS_LINK_CLOSING, memory_order_relaxed);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
	rdma_disconnect(q->id); /* fails harmlessly if the peer left first */
	/* Waits until the listener acked this id's events, so the listener is
	 * done with Q->link before the caller frees it. */
	rdma_destroy_id(q->id);
}
