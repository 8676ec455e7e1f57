/* SPDX-License-Identifier: MIT */
/* Control plane over TCP: each node listens on its hosts-file address and
 * serves requests (HELLO, JOIN, REGION_OPEN, REGION_DROP) on one server
 * thread; requests from this node go out on one connection per peer, one
 * at a time.
 *
 * HELLO / HELLO_ACK: u32 node id, str transport, u64 arena length, u64
 * device-memory length (0: none), bytes arena descriptor (the transport's:
 * for verbs also the node's RDMA address); the ACK adds u32 status and str
 * message first. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loco/internal.h"

#define MAX_CLIENTS 256
#define SERVER_MSG_TIMEOUT_MS 1000
#define CONNECT_RETRY_MS 20

/* ---- socket helpers ---------------------------------------------------- */

static int io_wait(int fd, short ev, uint64_t deadline)
{
	for (;;) {
		uint64_t now = loco_now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = fd, .events = ev };
		int ms = (int)((deadline - now) / 1000000u) + 1;
		int n = poll(&p, 1, ms);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static int io_full(int fd, void *buf, size_t len, bool wr, uint64_t deadline)
{
	uint8_t *p = buf;
	while (len) {
		int rc = io_wait(fd, wr ? POLLOUT : POLLIN, deadline);
		if (rc)
			return rc;
		ssize_t n = wr ? send(fd, p, len, MSG_NOSIGNAL) :
				 recv(fd, p, len, MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int msg_send(int fd, uint16_t type, const void *p, size_t len,
		    uint64_t deadline)
{
	uint8_t hdr[LOCO_MSG_HDR_LEN];
	if (len > LOCO_WIRE_MAX)
		return -E2BIG;
	loco_hdr_encode(hdr, type, (uint32_t)len);
	int rc = io_full(fd, hdr, sizeof(hdr), true, deadline);
	if (!rc && len)
		rc = io_full(fd, (void *)p, len, true, deadline);
	return rc;
}

/* Receive one message; *OUT is malloc'd (NULL for an empty payload). */
static int msg_recv(int fd, struct loco_msg_hdr *h, uint8_t **out,
		    uint64_t deadline)
{
	uint8_t hdr[LOCO_MSG_HDR_LEN];
	int rc = io_full(fd, hdr, sizeof(hdr), false, deadline);
	if (!rc)
		rc = loco_hdr_decode(hdr, h);
	if (rc)
		return rc;
	*out = NULL;
	if (!h->len)
		return 0;
	*out = malloc(h->len);
	if (!*out)
		return -ENOMEM;
	rc = io_full(fd, *out, h->len, false, deadline);
	if (rc) {
		free(*out);
		*out = NULL;
	}
	return rc;
}

static int resolve(const struct loco_host *h, struct sockaddr_in *sa)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	if (getaddrinfo(h->host, NULL, &hints, &res))
		return -EHOSTUNREACH;
	*sa = *(struct sockaddr_in *)res->ai_addr;
	sa->sin_port = htons(h->port);
	freeaddrinfo(res);
	return 0;
}

static void sock_tune(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	fcntl(fd, F_SETFD, FD_CLOEXEC);
}

/* ---- hello --------------------------------------------------------------- */

static void hello_encode(struct loco_mgr *mgr, struct loco_wbuf *w)
{
	loco_put_u32(w, mgr->id);
	loco_put_str(w, mgr->tp_ops->name);
	loco_put_u64(w, mgr->arena_len);
	loco_put_u64(w, mgr->dm_len);
	loco_put_bytes(w, mgr->desc, (uint16_t)mgr->desc_len);
}

/* Decode a peer's hello fields, check them, and hand its arena to the
 * transport. *FROM gets the peer id. MSG gets a reason on failure. */
static int hello_apply(struct loco_mgr *mgr, struct loco_rbuf *r,
		       uint32_t *from, char *msg, size_t msglen)
{
	char tname[32];
	uint8_t desc[LOCO_DESC_MAX];
	uint32_t id = loco_get_u32(r);
	loco_get_str(r, tname, sizeof(tname));
	uint64_t alen = loco_get_u64(r);
	uint64_t dmlen = loco_get_u64(r);
	uint16_t dlen = loco_get_bytes(r, desc, sizeof(desc));
	if (loco_rbuf_done(r)) {
		snprintf(msg, msglen, "malformed HELLO");
		return -LOCO_EPROTO;
	}
	if (id >= LOCO_MAX_NODES || !mgr->hosts.node[id].present) {
		snprintf(msg, msglen, "HELLO from node %u, not in %s", id,
			 mgr->hosts.path);
		return -LOCO_EPROTO;
	}
	if (strcmp(tname, mgr->tp_ops->name) != 0) {
		snprintf(msg, msglen, "node %u uses transport %s, node %u uses %s",
			 id, tname, mgr->id, mgr->tp_ops->name);
		return -LOCO_ETRANSPORT;
	}
	int rc = loco_peer_add(mgr, id, desc, dlen, alen, dmlen);
	if (rc) {
		snprintf(msg, msglen, "cannot attach node %u's memory: %s", id,
			 loco_strerror(rc));
		return rc;
	}
	*from = id;
	return 0;
}

int loco_peer_add(struct loco_mgr *mgr, uint32_t peer, const void *desc,
		  size_t desc_len, uint64_t arena_len, uint64_t dm_len)
{
	pthread_mutex_lock(&mgr->peer_lock);
	int rc = mgr->tp_ops->peer_add(mgr->tp, peer, desc, desc_len, arena_len,
				       dm_len);
	if (!rc) {
		/* Relaxed: published by the release below. */
		atomic_store_explicit(&mgr->peer_dm_len[peer], dm_len,
				      memory_order_relaxed);
		/* Release pairs with the acquire in loco_peer_span: a
		 * thread that sees the length finds the peer in the transport
		 * and its device-memory length. */
		atomic_store_explicit(&mgr->peer_arena_len[peer], arena_len,
				      memory_order_release);
	}
	pthread_mutex_unlock(&mgr->peer_lock);
	return rc;
}

/* ---- client side --------------------------------------------------------- */

static int conn_open(struct loco_mgr *mgr, uint32_t peer, uint64_t deadline)
{
	struct sockaddr_in sa;
	int rc = resolve(&mgr->hosts.node[peer], &sa);
	while (!rc) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			sock_tune(fd);
			return fd;
		}
		rc = -errno;
		close(fd);
		if (rc != -ECONNREFUSED && rc != -EINTR)
			break;
		if (loco_now_ns() + CONNECT_RETRY_MS * 1000000ull > deadline)
			return -ETIMEDOUT;
		struct timespec ts = { 0, CONNECT_RETRY_MS * 1000000L };
		nanosleep(&ts, NULL);
		rc = 0;
	}
	return rc;
}

static int conn_hello(struct loco_mgr *mgr, int fd, uint32_t peer,
		      uint64_t deadline)
{
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	hello_encode(mgr, &w);
	int rc = w.err ? w.err : msg_send(fd, LOCO_MSG_HELLO, w.p, w.len, deadline);
	loco_wbuf_fini(&w);
	struct loco_msg_hdr h;
	uint8_t *rep = NULL;
	if (!rc)
		rc = msg_recv(fd, &h, &rep, deadline);
	if (rc)
		return rc;
	char msg[192] = "";
	struct loco_rbuf r;
	loco_rbuf_init(&r, rep, h.len);
	int status = -(int)loco_get_u32(&r);
	loco_get_str(&r, msg, sizeof(msg));
	uint32_t from = 0;
	if (h.type != LOCO_MSG_HELLO_ACK || r.err)
		rc = -LOCO_EPROTO;
	else if (status)
		rc = status;
	else
		rc = hello_apply(mgr, &r, &from, msg, sizeof(msg));
	if (!rc && from != peer) {
		snprintf(msg, sizeof(msg), "node at %s:%u says it is node %u",
			 mgr->hosts.node[peer].host, mgr->hosts.node[peer].port,
			 from);
		rc = -LOCO_EPROTO;
	}
	if (rc)
		loco_err("ctrl", "hello with node %u failed: %s%s%s", peer,
			 loco_strerror(rc), msg[0] ? ": " : "", msg);
	free(rep);
	return rc;
}

/* Connected and hello'd; c->lock held. */
static int conn_ready(struct loco_mgr *mgr, uint32_t peer, uint64_t deadline)
{
	struct loco_conn *c = &mgr->out[peer];
	if (c->fd >= 0)
		return 0;
	int fd = conn_open(mgr, peer, deadline);
	if (fd < 0)
		return fd;
	int rc = conn_hello(mgr, fd, peer, deadline);
	if (rc) {
		close(fd);
		return rc;
	}
	c->fd = fd;
	return 0;
}

static void conn_drop(struct loco_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

int loco_ctrl_connect(struct loco_mgr *mgr, uint32_t peer, int timeout_ms)
{
	if (peer >= LOCO_MAX_NODES || !mgr->hosts.node[peer].present)
		return -EINVAL;
	if (peer == mgr->id)
		return 0;
	if (timeout_ms < 0)
		timeout_ms = mgr->opts.timeout_ms;
	struct loco_conn *c = &mgr->out[peer];
	pthread_mutex_lock(&c->lock);
	int rc = conn_ready(mgr, peer, loco_deadline(timeout_ms));
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int loco_ctrl_request(struct loco_mgr *mgr, uint32_t peer, uint16_t type,
		      const void *payload, size_t len, uint16_t reply_type,
		      uint8_t **reply, size_t *reply_len, int timeout_ms)
{
	if (peer >= LOCO_MAX_NODES || !mgr->hosts.node[peer].present ||
	    peer == mgr->id)
		return -EINVAL;
	if (timeout_ms < 0)
		timeout_ms = mgr->opts.timeout_ms;
	uint64_t deadline = loco_deadline(timeout_ms);
	struct loco_conn *c = &mgr->out[peer];
	struct loco_msg_hdr h;
	uint8_t *rep = NULL;
	pthread_mutex_lock(&c->lock);
	int rc = conn_ready(mgr, peer, deadline);
	if (!rc)
		rc = msg_send(c->fd, type, payload, len, deadline);
	if (!rc)
		rc = msg_recv(c->fd, &h, &rep, deadline);
	if (!rc && h.type != reply_type)
		rc = -LOCO_EPROTO;
	if (rc) {
		conn_drop(c);
		free(rep);
	}
	pthread_mutex_unlock(&c->lock);
	if (rc)
		return rc;
	*reply = rep;
	*reply_len = h.len;
	return 0;
}

/* ---- server side ----------------------------------------------------------- */

struct client {
	int fd;
	int peer;  /* -1 until HELLO */
};

static void serve_hello(struct loco_mgr *mgr, struct client *cl,
			const uint8_t *p, size_t len, struct loco_wbuf *reply)
{
	char msg[192] = "";
	struct loco_rbuf r;
	uint32_t from = 0;
	loco_rbuf_init(&r, p, len);
	int rc = hello_apply(mgr, &r, &from, msg, sizeof(msg));
	if (rc)
		loco_err("ctrl", "rejected a HELLO: %s", msg);
	else
		cl->peer = (int)from;
	loco_put_u32(reply, (uint32_t)-rc);
	loco_put_str(reply, msg);
	hello_encode(mgr, reply);
}

/* Handle one request; returns the reply type or a negative error (the
 * connection is then closed). */
static int serve_one(struct loco_mgr *mgr, struct client *cl,
		     const struct loco_msg_hdr *h, const uint8_t *p,
		     struct loco_wbuf *reply)
{
	if (h->type == LOCO_MSG_HELLO) {
		serve_hello(mgr, cl, p, h->len, reply);
		return LOCO_MSG_HELLO_ACK;
	}
	if (cl->peer < 0) {
		loco_err("ctrl", "request type %u before HELLO", h->type);
		return -LOCO_EPROTO;
	}
	switch (h->type) {
	case LOCO_MSG_JOIN:
		loco_channel_handle_join(mgr, (uint32_t)cl->peer, p, h->len, reply);
		return LOCO_MSG_JOIN_ACK;
	case LOCO_MSG_REGION_OPEN:
		loco_region_handle_open(mgr, (uint32_t)cl->peer, p, h->len, reply);
		return LOCO_MSG_REGION_ACK;
	case LOCO_MSG_REGION_DROP:
		loco_region_handle_drop(mgr, (uint32_t)cl->peer, p, h->len, reply);
		return LOCO_MSG_REGION_DROP_ACK;
	default:
		loco_err("ctrl", "unknown request type %u from node %d", h->type,
			 cl->peer);
		return -LOCO_EPROTO;
	}
}

/* Read a request from CL and answer it; nonzero closes the connection. */
static int serve_client(struct loco_mgr *mgr, struct client *cl)
{
	struct loco_msg_hdr h;
	uint8_t *req = NULL;
	uint64_t deadline = loco_deadline(SERVER_MSG_TIMEOUT_MS);
	int rc = msg_recv(cl->fd, &h, &req, deadline);
	if (rc) {
		if (rc != -ECONNRESET)
			loco_warn("ctrl", "dropping connection from node %d: %s",
				  cl->peer, loco_strerror(rc));
		return rc;
	}
	struct loco_wbuf reply;
	loco_wbuf_init(&reply);
	rc = serve_one(mgr, cl, &h, req, &reply);
	if (rc > 0)
		rc = reply.err ? reply.err :
		     msg_send(cl->fd, (uint16_t)rc, reply.p, reply.len, deadline);
	loco_wbuf_fini(&reply);
	free(req);
	return rc < 0 ? rc : 0;
}

static void accept_client(struct loco_mgr *mgr, struct client *cl, unsigned *n)
{
	int fd = accept4(mgr->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return;
	if (*n == MAX_CLIENTS) {
		loco_warn("ctrl", "too many control connections; refusing one");
		close(fd);
		return;
	}
	sock_tune(fd);
	cl[*n].fd = fd;
	cl[*n].peer = -1;
	(*n)++;
}

static void *server_main(void *arg)
{
	struct loco_mgr *mgr = arg;
	struct client cl[MAX_CLIENTS];
	struct pollfd pfd[MAX_CLIENTS + 2];
	unsigned n = 0;
	for (;;) {
		pfd[0] = (struct pollfd){ .fd = mgr->wake_pipe[0], .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = mgr->listen_fd, .events = POLLIN };
		for (unsigned i = 0; i < n; i++)
			pfd[i + 2] = (struct pollfd){ .fd = cl[i].fd, .events = POLLIN };
		if (poll(pfd, n + 2, -1) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents)
			break;
		for (unsigned i = n; i-- > 0;) {
			if (!pfd[i + 2].revents || !serve_client(mgr, &cl[i]))
				continue;
			close(cl[i].fd);
			cl[i] = cl[--n];
		}
		if (pfd[1].revents & POLLIN)
			accept_client(mgr, cl, &n);
	}
	for (unsigned i = 0; i < n; i++)
		close(cl[i].fd);
	return NULL;
}

static int listen_open(struct loco_mgr *mgr)
{
	const struct loco_host *self = &mgr->hosts.node[mgr->id];
	struct sockaddr_in sa;
	int rc = resolve(self, &sa);
	if (rc) {
		loco_err("ctrl", "cannot resolve own address %s", self->host);
		return rc;
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 64)) {
		rc = -errno;
		loco_err("ctrl", "cannot listen on %s:%u: %s", self->host,
			 self->port, loco_strerror(rc));
		close(fd);
		return rc;
	}
	mgr->listen_fd = fd;
	return 0;
}

int loco_ctrl_start(struct loco_mgr *mgr)
{
	for (unsigned i = 0; i < LOCO_MAX_NODES; i++) {
		mgr->out[i].fd = -1;
		pthread_mutex_init(&mgr->out[i].lock, NULL);
	}
	if (pipe2(mgr->wake_pipe, O_CLOEXEC)) {
		loco_err("ctrl", "pipe: %s", strerror(errno));
		return -errno;
	}
	int rc = listen_open(mgr);
	if (rc)
		return rc;
	rc = -pthread_create(&mgr->server, NULL, server_main, mgr);
	mgr->server_started = !rc;
	if (rc)
		loco_err("ctrl", "cannot start the server thread: %s",
			 loco_strerror(rc));
	return rc;
}

void loco_ctrl_stop(struct loco_mgr *mgr)
{
	if (mgr->server_started) {
		char b = 1;
		if (write(mgr->wake_pipe[1], &b, 1) != 1)
			loco_warn("ctrl", "cannot wake the server thread");
		pthread_join(mgr->server, NULL);
		mgr->server_started = false;
	}
	if (mgr->listen_fd >= 0)
		close(mgr->listen_fd);
	mgr->listen_fd = -1;
	for (unsigned i = 0; i < LOCO_MAX_NODES; i++) {
		conn_drop(&mgr->out[i]);
		pthread_mutex_destroy(&mgr->out[i].lock);
	}
	for (int i = 0; i < 2; i++)
		if (mgr->wake_pipe[i] >= 0)
			close(mgr->wake_pipe[i]);
}
