/* SPDX-License-Identifier: MIT */
/* Control plane over TCP: each node listens on its hosts-file address and
 * serves requests (HELLO, JOIN, REGION_OPEN, REGION_FIND, REGION_DROP) on
 * one server thread; requests from this node go out on one connection per
 * peer, one at a time.
 *
 * Every connection first proves the cluster key both ways (AUTH,
 * AUTH_CHAL, AUTH_PROOF, AUTH_ACK: docs/formats.md) and binds both node
 * ids; only then is anything about this node's memory sent, and every
 * later message carries a session tag. A node started --insecure skips
 * the exchange and talks only to nodes that do too. The server reads
 * without blocking, so a silent or slow connection delays nobody; one that
 * has not finished the exchange within HANDSHAKE_MS is closed.
 *
 * HELLO / HELLO_ACK: u32 node id, str transport, u64 arena length, u64
 * device-memory length (0: none), bytes arena descriptor (the transport's:
 * for verbs also the node's RDMA address; for ucx made for the receiver's
 * incarnation, so a client that learns the server's incarnation only from
 * the ACK says hello again), u32 flags (LOCO_HELLO_*), u64 boot id
 * (random per start), u64 durable image id (0: none); the ACK adds u32
 * status and str message first. */
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

#include "loco/auth.h"
#include "loco/internal.h"

#define REFUSED_PROBE_MS 200 /* loco_ctrl_refused's connect attempt */

#define MAX_CLIENTS 256
#define SERVER_MSG_TIMEOUT_MS 1000  /* a started message must finish */
#define HANDSHAKE_MS 900            /* accept to authenticated HELLO */
/* Largest payload before that: a HELLO with the largest arena descriptor. */
#define PREAUTH_MAX (LOCO_DESC_MAX + 1024)
#define LOGGED_MAX 64               /* addresses whose refusal was logged */
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

static size_t tag_len(const struct loco_sess *s)
{
	return s && s->on ? LOCO_MAC_LEN : 0;
}

/* Send one message: header, payload and (in a session) its tag. */
static int msg_send(int fd, struct loco_sess *s, uint16_t type, const void *p,
		    size_t len, uint64_t deadline)
{
	if (len > LOCO_WIRE_MAX)
		return -E2BIG;
	size_t total = LOCO_MSG_HDR_LEN + len + tag_len(s);
	uint8_t *buf = malloc(total);
	if (!buf)
		return -ENOMEM;
	loco_hdr_encode(buf, type, (uint32_t)len);
	if (len)
		memcpy(buf + LOCO_MSG_HDR_LEN, p, len);
	if (tag_len(s))
		loco_sess_seal(s, buf, LOCO_MSG_HDR_LEN, buf + LOCO_MSG_HDR_LEN,
			       len, buf + LOCO_MSG_HDR_LEN + len);
	int rc = io_full(fd, buf, total, true, deadline);
	free(buf);
	return rc;
}

/* Check the tag after BODY's LEN payload bytes: 0 or -LOCO_EAUTH. */
static int msg_open(struct loco_sess *s, const uint8_t hdr[LOCO_MSG_HDR_LEN],
		    const uint8_t *body, size_t len)
{
	if (!tag_len(s))
		return 0;
	return loco_sess_open(s, hdr, LOCO_MSG_HDR_LEN, body, len, body + len) ?
	       0 : -LOCO_EAUTH;
}

/* Receive one message of at most MAX payload bytes; *OUT is malloc'd
 * (NULL for an empty payload in no session). */
static int msg_recv(int fd, struct loco_sess *s, size_t max,
		    struct loco_msg_hdr *h, uint8_t **out, uint64_t deadline)
{
	uint8_t hdr[LOCO_MSG_HDR_LEN];
	int rc = io_full(fd, hdr, sizeof(hdr), false, deadline);
	if (!rc)
		rc = loco_hdr_decode(hdr, h);
	if (!rc && h->len > max)
		rc = -LOCO_EPROTO;
	if (rc)
		return rc;
	*out = NULL;
	size_t need = h->len + tag_len(s);
	if (!need)
		return 0;
	*out = malloc(need);
	if (!*out)
		return -ENOMEM;
	rc = io_full(fd, *out, need, false, deadline);
	if (!rc)
		rc = msg_open(s, hdr, *out, h->len);
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

void loco_hello_self(struct loco_mgr *mgr, struct loco_hello *out)
{
	const struct loco_opts *o = &mgr->opts;
	*out = (struct loco_hello){
		.id = mgr->id, .arena_len = mgr->arena_len, .dm_len = mgr->dm_len,
		.boot_id = mgr->boot_id, .image_id = mgr->image_id,
		.flags = (o->durable_dir[0] ? LOCO_HELLO_DURABLE : 0) |
			 (o->power_cut ? LOCO_HELLO_POWER_CUT : 0),
		.desc_len = (uint16_t)mgr->desc_len,
	};
	memcpy(out->desc, mgr->desc, mgr->desc_len);
}

/* The incarnation of PEER this node knows, for the descriptor it sends
 * PEER: 0 if none, or if it is fenced (it is given nothing). */
static uint64_t hello_boot_of(struct loco_mgr *mgr, uint32_t peer)
{
	pthread_mutex_lock(&mgr->peer_lock);
	uint64_t boot = mgr->peer_boot[peer];
	if (loco_fenced_is(mgr, peer, boot))
		boot = 0;
	pthread_mutex_unlock(&mgr->peer_lock);
	return boot;
}

/* This node's hello for incarnation BOOT of node PEER (0: not known): its
 * arena descriptor is the one made for that incarnation alone where the
 * transport makes one per peer (arena_desc_for). A failure sets W's
 * error: nothing is sent. */
static void hello_encode(struct loco_mgr *mgr, struct loco_wbuf *w,
			 uint32_t peer, uint64_t boot)
{
	struct loco_hello h;
	loco_hello_self(mgr, &h);
	if (mgr->tp_ops->arena_desc_for) {
		size_t len = sizeof(h.desc);
		int rc = mgr->tp_ops->arena_desc_for(mgr->tp, peer, boot, h.desc,
						     &len);
		if (rc && !w->err)
			w->err = rc;
		h.desc_len = rc ? 0 : (uint16_t)len;
	}
	loco_put_u32(w, h.id);
	loco_put_str(w, mgr->tp_ops->name);
	loco_put_u64(w, h.arena_len);
	loco_put_u64(w, h.dm_len);
	loco_put_bytes(w, h.desc, h.desc_len);
	loco_put_u32(w, h.flags);
	loco_put_u64(w, h.boot_id);
	loco_put_u64(w, h.image_id);
}

/* Decode a peer's hello fields and check them; TNAME gets its transport. */
static int hello_decode(struct loco_mgr *mgr, struct loco_rbuf *r,
			struct loco_hello *h, char *msg, size_t msglen)
{
	char tname[32];
	h->id = loco_get_u32(r);
	loco_get_str(r, tname, sizeof(tname));
	h->arena_len = loco_get_u64(r);
	h->dm_len = loco_get_u64(r);
	h->desc_len = loco_get_bytes(r, h->desc, sizeof(h->desc));
	h->flags = loco_get_u32(r);
	h->boot_id = loco_get_u64(r);
	h->image_id = loco_get_u64(r);
	if (loco_rbuf_done(r)) {
		snprintf(msg, msglen, "malformed HELLO");
		return -LOCO_EPROTO;
	}
	if (h->id >= LOCO_MAX_NODES || !mgr->hosts.node[h->id].present) {
		snprintf(msg, msglen, "HELLO from node %u, not in %s", h->id,
			 mgr->hosts.path);
		return -LOCO_EPROTO;
	}
	if (strcmp(tname, mgr->tp_ops->name) != 0) {
		snprintf(msg, msglen, "node %u uses transport %s, node %u uses %s",
			 h->id, tname, mgr->id, mgr->tp_ops->name);
		return -LOCO_ETRANSPORT;
	}
	return 0;
}

/* Decode a peer's hello fields, check them, and hand its arena to the
 * transport. *FROM gets the peer id, *BOOT its incarnation. MSG gets a
 * reason on failure. */
static int hello_apply(struct loco_mgr *mgr, struct loco_rbuf *r,
		       uint32_t *from, uint64_t *boot, char *msg, size_t msglen)
{
	struct loco_hello h;
	int rc = hello_decode(mgr, r, &h, msg, msglen);
	if (rc)
		return rc;
	rc = loco_peer_add(mgr, &h, true);
	if (rc) {
		snprintf(msg, msglen, "cannot attach node %u's memory: %s%s",
			 h.id, loco_strerror(rc), rc == -LOCO_ETRANSPORT ?
			 " (the refusing node's log says which setting)" : "");
		return rc;
	}
	*from = h.id;
	*boot = h.boot_id;
	return 0;
}

/* A DOWN (or LOST) peer's new hello is not published here: the keeper
 * checks it first (peers.c). peer_lock held. */
static bool peer_hello_held(struct loco_mgr *mgr, const struct loco_hello *h)
{
	uint32_t peer = h->id;
	/* Relaxed: the state is written under peer_lock, which we hold. */
	int st = atomic_load_explicit(&mgr->peer_state[peer], memory_order_relaxed);
	if (st == LOCO_PEER_DOWN) {
		mgr->peer_back_image[peer] = h->image_id;
		mgr->peer_back_len[peer] = h->arena_len;
		mgr->peer_back[peer] = true;
	} else if (st != LOCO_PEER_LOST) {
		mgr->peer_image[peer] = h->image_id;
	}
	return st == LOCO_PEER_DOWN || st == LOCO_PEER_LOST;
}

int loco_peer_add(struct loco_mgr *mgr, const struct loco_hello *h,
		  bool publish)
{
	uint32_t peer = h->id;
	bool renewed = false;
	pthread_mutex_lock(&mgr->peer_lock);
	int rc = loco_fenced_is(mgr, peer, h->boot_id) ? -LOCO_EFENCED :
		 mgr->tp_ops->peer_add(mgr->tp, peer, h->desc, h->desc_len,
				       h->arena_len, h->dm_len);
	if (!rc) {
		if (mgr->peer_boot[peer] != h->boot_id) {
			/* Its regions are another incarnation's (a durable
			 * node's come back through the keeper's reopens). */
			if (peer != mgr->id)
				loco_rtab_clear(mgr, peer);
			renewed = true;
			/* Relaxed: published by the release below. */
			atomic_fetch_add_explicit(&mgr->peer_gen[peer], 1,
						  memory_order_relaxed);
			mgr->peer_boot[peer] = h->boot_id;
		}
		publish &= !peer_hello_held(mgr, h);
		mgr->peer_hello[peer] = *h;
		/* Relaxed: published by the release below. */
		atomic_store_explicit(&mgr->peer_flags[peer], h->flags,
				      memory_order_relaxed);
		atomic_store_explicit(&mgr->peer_dm_len[peer], h->dm_len,
				      memory_order_relaxed);
	}
	if (!rc && publish) {
		/* Relaxed: a diagnosis (loco_peer_gone); the length decides. */
		atomic_store_explicit(&mgr->peer_state[peer], LOCO_PEER_UP,
				      memory_order_relaxed);
		loco_peer_up_mark(mgr, peer);
		/* Release pairs with the acquire in loco_peer_span: a
		 * thread that sees the length finds the peer in the transport,
		 * its device-memory length, flags and generation. */
		atomic_store_explicit(&mgr->peer_arena_len[peer], h->arena_len,
				      memory_order_release);
	}
	pthread_mutex_unlock(&mgr->peer_lock);
	/* A new incarnation: the inline path leaves the old mapping. */
	if (renewed)
		loco_threads_direct_close(mgr, peer);
	return rc;
}

bool loco_peer_durable(struct loco_mgr *mgr, uint32_t peer)
{
	/* Acquire: pairs with loco_peer_add's release of the length. */
	return peer < LOCO_MAX_NODES &&
	       atomic_load_explicit(&mgr->peer_arena_len[peer],
				    memory_order_acquire) &&
	       (atomic_load_explicit(&mgr->peer_flags[peer],
				     memory_order_relaxed) & LOCO_HELLO_DURABLE);
}

/* ---- client side --------------------------------------------------------- */

/* A connection to PEER, retried while it refuses until DEADLINE; with
 * DOWN_STOPS, not once the keeper found PEER down (its dead process
 * refuses: the caller learns -LOCO_EDOWN at once); with REFUSED_ENDS, a
 * refusal is not retried at all (-ECONNREFUSED: the caller knows PEER
 * ran, so nothing listening means its process is gone, not that it is
 * still starting). */
static int conn_open(struct loco_mgr *mgr, uint32_t peer, uint64_t deadline,
		     bool down_stops, bool refused_ends)
{
	struct sockaddr_in sa;
	int rc = resolve(&mgr->hosts.node[peer], &sa);
	while (!rc) {
		/* Relaxed: a state word (the keeper's). */
		if (down_stops &&
		    atomic_load_explicit(&mgr->peer_state[peer],
					 memory_order_relaxed) == LOCO_PEER_DOWN)
			return -LOCO_EDOWN;
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			sock_tune(fd);
			return fd;
		}
		rc = -errno;
		close(fd);
		if (rc != -EINTR && (rc != -ECONNREFUSED || refused_ends))
			break;
		if (loco_now_ns() + CONNECT_RETRY_MS * 1000000ull > deadline)
			return -ETIMEDOUT;
		struct timespec ts = { 0, CONNECT_RETRY_MS * 1000000L };
		nanosleep(&ts, NULL);
		rc = 0;
	}
	return rc;
}

/* Reply status and message that open AUTH_CHAL, AUTH_ACK and HELLO_ACK. */
static int reply_status(struct loco_rbuf *r, char *msg, size_t msglen)
{
	int status = -(int)loco_get_u32(r);
	loco_get_str(r, msg, msglen);
	return r->err ? -LOCO_EPROTO : status;
}

/* A field of exactly N bytes. */
static void get_exact(struct loco_rbuf *r, uint8_t *out, size_t n)
{
	if (loco_get_bytes(r, out, n) != n && !r->err)
		r->err = -LOCO_EPROTO;
}

/* Send a request in S's session and receive the reply of type WANT. */
static int conn_call(int fd, struct loco_sess *s, uint16_t type,
		     const struct loco_wbuf *w, uint16_t want, size_t max,
		     struct loco_msg_hdr *h, uint8_t **rep, uint64_t deadline)
{
	int rc = w->err ? w->err : msg_send(fd, s, type, w->p, w->len, deadline);
	if (!rc)
		rc = msg_recv(fd, s, max, h, rep, deadline);
	if (!rc && h->type != want) {
		free(*rep);
		*rep = NULL;
		rc = -LOCO_EPROTO;
	}
	return rc;
}

/* AUTH -> AUTH_CHAL: check PEER's identity and proof; fills CTX->ns. */
static int auth_challenge(struct loco_mgr *mgr, int fd, uint32_t peer,
			  struct loco_auth_ctx *ctx, char *msg, size_t msglen,
			  uint64_t deadline)
{
	struct loco_wbuf w;
	struct loco_msg_hdr h;
	uint8_t *rep = NULL, mac[LOCO_MAC_LEN];
	loco_wbuf_init(&w);
	loco_put_u32(&w, ctx->client);
	loco_put_bytes(&w, ctx->nc, LOCO_NONCE_LEN);
	int rc = conn_call(fd, NULL, LOCO_MSG_AUTH, &w, LOCO_MSG_AUTH_CHAL,
			   PREAUTH_MAX, &h, &rep, deadline);
	loco_wbuf_fini(&w);
	if (rc)
		return rc;
	struct loco_rbuf r;
	loco_rbuf_init(&r, rep, h.len);
	rc = reply_status(&r, msg, msglen);
	uint32_t sid = loco_get_u32(&r);
	get_exact(&r, ctx->ns, LOCO_NONCE_LEN);
	get_exact(&r, mac, LOCO_MAC_LEN);
	free(rep);
	if (!rc && loco_rbuf_done(&r))
		rc = -LOCO_EPROTO;
	if (!rc && sid != peer) {
		snprintf(msg, msglen, "node at %s:%u says it is node %u",
			 mgr->hosts.node[peer].host, mgr->hosts.node[peer].port, sid);
		rc = -LOCO_EAUTH;
	}
	if (!rc && !loco_auth_proof_ok(mgr->key, ctx, LOCO_SIDE_SERVER, mac)) {
		snprintf(msg, msglen, "node %u does not prove our cluster key "
			 "(a different --cluster-key?)", peer);
		rc = -LOCO_EAUTH;
	}
	return rc;
}

/* The client's half of the exchange; starts S on success. */
static int conn_auth(struct loco_mgr *mgr, int fd, uint32_t peer,
		     struct loco_sess *s, char *msg, size_t msglen,
		     uint64_t deadline)
{
	struct loco_auth_ctx ctx = { .client = mgr->id, .server = peer };
	loco_auth_nonce(ctx.nc);
	int rc = auth_challenge(mgr, fd, peer, &ctx, msg, msglen, deadline);
	if (rc)
		return rc;
	uint8_t mac[LOCO_MAC_LEN];
	struct loco_wbuf w;
	struct loco_msg_hdr h;
	uint8_t *rep = NULL;
	loco_auth_proof(mgr->key, &ctx, LOCO_SIDE_CLIENT, mac);
	loco_wbuf_init(&w);
	loco_put_bytes(&w, mac, LOCO_MAC_LEN);
	rc = conn_call(fd, NULL, LOCO_MSG_AUTH_PROOF, &w, LOCO_MSG_AUTH_ACK,
		       PREAUTH_MAX, &h, &rep, deadline);
	loco_wbuf_fini(&w);
	if (!rc) {
		struct loco_rbuf r;
		loco_rbuf_init(&r, rep, h.len);
		rc = reply_status(&r, msg, msglen);
		if (!rc)
			rc = loco_rbuf_done(&r);
		free(rep);
	}
	if (!rc)
		loco_sess_start(s, mgr->key, &ctx, LOCO_SIDE_CLIENT);
	return rc;
}

/* One HELLO to PEER on FD, with the descriptor made for PEER's
 * incarnation BOOT_FOR (0: not known); *BOOT gets PEER's from its answer. */
static int conn_hello_once(struct loco_mgr *mgr, int fd, uint32_t peer,
			   struct loco_sess *s, uint64_t boot_for, uint64_t *boot,
			   char *msg, size_t msglen, uint64_t deadline)
{
	struct loco_wbuf w;
	struct loco_msg_hdr h;
	uint8_t *rep = NULL;
	loco_wbuf_init(&w);
	hello_encode(mgr, &w, peer, boot_for);
	int rc = conn_call(fd, s, LOCO_MSG_HELLO, &w, LOCO_MSG_HELLO_ACK,
			   LOCO_WIRE_MAX, &h, &rep, deadline);
	loco_wbuf_fini(&w);
	if (rc)
		return rc;
	struct loco_rbuf r;
	loco_rbuf_init(&r, rep, h.len);
	uint32_t from = 0;
	rc = reply_status(&r, msg, msglen);
	if (rc == -LOCO_EFENCED)
		loco_fenced_self(mgr, "a HELLO was refused");
	if (!rc)
		rc = hello_apply(mgr, &r, &from, boot, msg, msglen);
	if (!rc && from != peer) {
		snprintf(msg, msglen, "node at %s:%u says it is node %u",
			 mgr->hosts.node[peer].host, mgr->hosts.node[peer].port,
			 from);
		rc = -LOCO_EPROTO;
	}
	free(rep);
	return rc;
}

/* HELLO, and again if the first one's descriptor was made for another
 * incarnation of PEER than the one that answered (or for none, not yet
 * known): where descriptors are per peer (ucx: a credential per client
 * incarnation), PEER reaches this node's memory only with the second. */
static int conn_hello(struct loco_mgr *mgr, int fd, uint32_t peer,
		      struct loco_sess *s, char *msg, size_t msglen,
		      uint64_t deadline)
{
	uint64_t boot_for = hello_boot_of(mgr, peer), boot = 0;
	int rc = conn_hello_once(mgr, fd, peer, s, boot_for, &boot, msg, msglen,
				 deadline);
	if (!rc && mgr->tp_ops->arena_desc_for && boot != boot_for)
		rc = conn_hello_once(mgr, fd, peer, s, hello_boot_of(mgr, peer),
				     &boot, msg, msglen, deadline);
	return rc;
}

/* Whether a failed attempt may be repeated: the server closed the
 * connection before answering (it was restarting, or closed a handshake
 * this loaded process was too slow to finish). */
static bool conn_retry(int rc, const char *msg, uint64_t deadline)
{
	return rc == -ECONNRESET && !msg[0] &&
	       loco_now_ns() + CONNECT_RETRY_MS * 1000000ull < deadline;
}

/* Connected, authenticated and hello'd; c->lock held. QUIET: a failure
 * is the caller's to report (the peer keeper's tries while a node is
 * down). REFUSED_ENDS: as conn_open's. */
static int conn_ready(struct loco_mgr *mgr, uint32_t peer, uint64_t deadline,
		      bool quiet, bool refused_ends)
{
	struct loco_conn *c = &mgr->out[peer];
	char msg[192];
	int rc;
	if (c->fd >= 0)
		return 0;
	do {
		int fd = conn_open(mgr, peer, deadline, !quiet, refused_ends);
		if (fd < 0)
			return fd;
		msg[0] = 0;
		rc = mgr->keyed ? conn_auth(mgr, fd, peer, &c->sess, msg,
					    sizeof(msg), deadline) : 0;
		if (!rc)
			rc = conn_hello(mgr, fd, peer, &c->sess, msg, sizeof(msg),
					deadline);
		if (!rc) {
			c->fd = fd;
			loco_peer_watch(mgr, peer, fd);
			return 0;
		}
		close(fd);
		loco_sess_end(&c->sess);
	} while (conn_retry(rc, msg, deadline));
	if (!quiet)
		loco_err("ctrl", "hello with node %u failed: %s%s%s", peer,
			 loco_strerror(rc), msg[0] ? ": " : "", msg);
	return rc;
}

static void conn_drop(struct loco_mgr *mgr, uint32_t peer)
{
	struct loco_conn *c = &mgr->out[peer];
	loco_peer_watch(mgr, peer, -1);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	loco_sess_end(&c->sess);
}

bool loco_ctrl_conn_dead(struct loco_mgr *mgr, uint32_t peer, int fd)
{
	struct loco_conn *c = &mgr->out[peer];
	char b;
	pthread_mutex_lock(&c->lock);
	ssize_t n = c->fd == fd ? recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) : 1;
	bool dead = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
	if (dead)
		conn_drop(mgr, peer);
	pthread_mutex_unlock(&c->lock);
	return dead;
}

void loco_ctrl_hangup(struct loco_mgr *mgr, uint32_t peer)
{
	struct loco_conn *c = &mgr->out[peer];
	pthread_mutex_lock(&c->lock);
	conn_drop(mgr, peer);
	pthread_mutex_unlock(&c->lock);
}

static int ctrl_connect(struct loco_mgr *mgr, uint32_t peer, int timeout_ms,
			bool quiet)
{
	if (peer >= LOCO_MAX_NODES || !mgr->hosts.node[peer].present)
		return -EINVAL;
	peer = loco_route(mgr, peer);
	if (peer == mgr->id)
		return 0;
	if (timeout_ms < 0)
		timeout_ms = mgr->opts.timeout_ms;
	struct loco_conn *c = &mgr->out[peer];
	pthread_mutex_lock(&c->lock);
	int rc = conn_ready(mgr, peer, loco_deadline(timeout_ms), quiet, false);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

int loco_ctrl_connect(struct loco_mgr *mgr, uint32_t peer, int timeout_ms)
{
	return ctrl_connect(mgr, peer, timeout_ms, false);
}

int loco_ctrl_reconnect(struct loco_mgr *mgr, uint32_t peer, int timeout_ms)
{
	return ctrl_connect(mgr, peer, timeout_ms, true);
}

int loco_ctrl_request(struct loco_mgr *mgr, uint32_t peer, uint16_t type,
		      const void *payload, size_t len, uint16_t reply_type,
		      uint8_t **reply, size_t *reply_len, int timeout_ms)
{
	if (peer >= LOCO_MAX_NODES || !mgr->hosts.node[peer].present ||
	    peer == mgr->id)
		return -EINVAL;
	peer = loco_route(mgr, peer);
	if (timeout_ms < 0)
		timeout_ms = mgr->opts.timeout_ms;
	uint64_t deadline = loco_deadline(timeout_ms);
	struct loco_conn *c = &mgr->out[peer];
	struct loco_msg_hdr h;
	uint8_t *rep = NULL;
	pthread_mutex_lock(&c->lock);
	int rc = conn_ready(mgr, peer, deadline, false, false);
	if (!rc)
		rc = msg_send(c->fd, &c->sess, type, payload, len, deadline);
	if (!rc)
		rc = msg_recv(c->fd, &c->sess, LOCO_WIRE_MAX, &h, &rep, deadline);
	if (!rc && h.type != reply_type)
		rc = -LOCO_EPROTO;
	if (rc) {
		conn_drop(mgr, peer);
		free(rep);
	}
	pthread_mutex_unlock(&c->lock);
	/* A memory node whose connection broke under a request is gone: the
	 * request fails as every operation on it does then. Relaxed: a state
	 * word, as in loco_peer_gone. */
	if (rc == -ECONNRESET || rc == -EPIPE) {
		loco_peer_down(mgr, peer, "a request found its connection closed");
		if (atomic_load_explicit(&mgr->peer_state[peer],
					 memory_order_relaxed) == LOCO_PEER_DOWN)
			rc = -LOCO_EDOWN;
	}
	if (rc)
		return rc;
	*reply = rep;
	*reply_len = h.len;
	return 0;
}

bool loco_ctrl_refused(struct loco_mgr *mgr, uint32_t peer)
{
	struct sockaddr_in sa;
	if (resolve(&mgr->hosts.node[peer], &sa))
		return false;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return false;
	int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ? errno : 0;
	if (rc == EINPROGRESS) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		socklen_t len = sizeof(rc);
		rc = poll(&p, 1, REFUSED_PROBE_MS) == 1 &&
		     !getsockopt(fd, SOL_SOCKET, SO_ERROR, &rc, &len) ? rc :
		     ETIMEDOUT;
	}
	close(fd);
	return rc == ECONNREFUSED;
}

int loco_ctrl_multi(struct loco_mgr *mgr, uint64_t peers, uint64_t ran,
		    uint16_t type, const void *payload, size_t len,
		    uint16_t reply_type, struct loco_ctrl_reply *out,
		    int timeout_ms)
{
	uint64_t deadline = loco_deadline(timeout_ms < 0 ? mgr->opts.timeout_ms :
					  timeout_ms);
	uint64_t sent = 0;
	/* Ascending ids, each connection's lock held from its send to its
	 * reply: two callers never wait for each other in a cycle. */
	for (uint64_t m = peers; m; m &= m - 1) {
		uint32_t p = (uint32_t)__builtin_ctzll(m);
		struct loco_conn *c = &mgr->out[p];
		out[p] = (struct loco_ctrl_reply){ 0 };
		pthread_mutex_lock(&c->lock);
		int rc = conn_ready(mgr, p, deadline, false, ran >> p & 1);
		if (!rc)
			rc = msg_send(c->fd, &c->sess, type, payload, len, deadline);
		out[p].rc = rc;
		if (!rc) {
			sent |= UINT64_C(1) << p;
			continue;
		}
		conn_drop(mgr, p);
		pthread_mutex_unlock(&c->lock);
	}
	int first = 0;
	for (uint64_t m = peers; m; m &= m - 1) {
		uint32_t p = (uint32_t)__builtin_ctzll(m);
		struct loco_conn *c = &mgr->out[p];
		struct loco_msg_hdr h;
		if (sent >> p & 1) {
			int rc = msg_recv(c->fd, &c->sess, LOCO_WIRE_MAX, &h,
					  &out[p].p, deadline);
			if (!rc && h.type != reply_type) {
				free(out[p].p);
				out[p].p = NULL;
				rc = -LOCO_EPROTO;
			}
			out[p].len = rc ? 0 : h.len;
			out[p].rc = rc;
			if (rc)
				conn_drop(mgr, p);
			pthread_mutex_unlock(&c->lock);
		}
		if (!first)
			first = out[p].rc;
	}
	return first;
}

/* ---- server side ----------------------------------------------------------- */

/* Where a connection is in the exchange. */
enum cl_state {
	CL_NEW,       /* keyed: AUTH expected; insecure: HELLO expected */
	CL_PROOF,     /* AUTH_CHAL sent, AUTH_PROOF expected */
	CL_AUTHED,    /* key proven, HELLO (tagged) expected */
	CL_READY,     /* HELLO done: requests served */
};

struct client {
	int fd;
	enum cl_state state;
	int peer;                 /* -1 until HELLO */
	bool closing;             /* close once the reply is out */
	uint64_t deadline;        /* the handshake's, or the current message's */
	struct sockaddr_in addr;
	uint8_t hdr[LOCO_MSG_HDR_LEN];
	struct loco_msg_hdr h;
	uint8_t *body;            /* payload, then the tag in a session */
	size_t got, need;         /* bytes of header + body read; body length */
	struct loco_auth_ctx ctx;
	struct loco_sess sess;
};

struct server {
	struct loco_mgr *mgr;
	struct client cl[MAX_CLIENTS];
	unsigned n;
	struct in_addr logged[LOGGED_MAX];
	unsigned nlogged;
	bool log_full;
};

/* Log a refused connection once per source address. */
static void refuse_log(struct server *sv, const struct client *cl,
		       const char *why)
{
	for (unsigned i = 0; i < sv->nlogged; i++)
		if (sv->logged[i].s_addr == cl->addr.sin_addr.s_addr)
			return;
	char a[INET_ADDRSTRLEN] = "?";
	inet_ntop(AF_INET, &cl->addr.sin_addr, a, sizeof(a));
	if (sv->nlogged == LOGGED_MAX) {
		if (!sv->log_full)
			loco_warn("ctrl", "refused a control connection from %s: %s "
				  "(refusals from further new addresses are not "
				  "logged)", a, why);
		sv->log_full = true;
		return;
	}
	sv->logged[sv->nlogged++] = cl->addr.sin_addr;
	loco_warn("ctrl", "refused a control connection from %s: %s (further "
		  "refusals from %s are not logged)", a, why, a);
}

/* Refuse CL after REPLY (if any) is sent: REASON goes to the log and the
 * peer. */
static void refuse(struct server *sv, struct client *cl,
		   struct loco_wbuf *reply, int status, const char *reason)
{
	refuse_log(sv, cl, reason);
	if (reply) {
		loco_put_u32(reply, (uint32_t)-status);
		loco_put_str(reply, reason);
	}
	cl->closing = true;
}

static void put_status(struct loco_wbuf *w, int status, const char *msg)
{
	loco_put_u32(w, (uint32_t)-status);
	loco_put_str(w, msg);
}

/* AUTH: u32 client id, bytes nonce. Answers AUTH_CHAL: status, message,
 * u32 server id, bytes nonce, bytes proof. */
static void serve_auth(struct server *sv, struct client *cl,
		       struct loco_rbuf *r, struct loco_wbuf *reply)
{
	struct loco_mgr *mgr = sv->mgr;
	char why[160];
	cl->ctx.client = loco_get_u32(r);
	get_exact(r, cl->ctx.nc, LOCO_NONCE_LEN);
	uint32_t id = cl->ctx.client;
	if (loco_rbuf_done(r))
		snprintf(why, sizeof(why), "malformed AUTH");
	else if (!mgr->keyed)
		snprintf(why, sizeof(why), "node %u runs --insecure, without a "
			 "cluster key", mgr->id);
	else if (id >= LOCO_MAX_NODES || !mgr->hosts.node[id].present ||
		 id == mgr->id)
		snprintf(why, sizeof(why), "AUTH as node %u, which is not another "
			 "node of %s", id, mgr->hosts.path);
	else
		why[0] = 0;
	if (why[0]) {
		refuse(sv, cl, reply, -LOCO_EAUTH, why);
		return;
	}
	uint8_t mac[LOCO_MAC_LEN];
	cl->ctx.server = mgr->id;
	loco_auth_nonce(cl->ctx.ns);
	loco_auth_proof(mgr->key, &cl->ctx, LOCO_SIDE_SERVER, mac);
	put_status(reply, 0, "");
	loco_put_u32(reply, mgr->id);
	loco_put_bytes(reply, cl->ctx.ns, LOCO_NONCE_LEN);
	loco_put_bytes(reply, mac, LOCO_MAC_LEN);
	cl->state = CL_PROOF;
}

/* AUTH_PROOF: bytes proof. Answers AUTH_ACK: status, message. */
static void serve_proof(struct server *sv, struct client *cl,
			struct loco_rbuf *r, struct loco_wbuf *reply)
{
	uint8_t mac[LOCO_MAC_LEN];
	get_exact(r, mac, LOCO_MAC_LEN);
	if (loco_rbuf_done(r)) {
		refuse(sv, cl, reply, -LOCO_EPROTO, "malformed AUTH_PROOF");
		return;
	}
	if (!loco_auth_proof_ok(sv->mgr->key, &cl->ctx, LOCO_SIDE_CLIENT, mac)) {
		char why[96];
		snprintf(why, sizeof(why), "node %u's proof does not match the "
			 "cluster key (a different --cluster-key?)", cl->ctx.client);
		refuse(sv, cl, reply, -LOCO_EAUTH, why);
		return;
	}
	put_status(reply, 0, "");
	/* The ACK goes out untagged; the session starts after it. */
	cl->state = CL_AUTHED;
}

static void serve_hello(struct server *sv, struct client *cl,
			struct loco_rbuf *r, struct loco_wbuf *reply)
{
	struct loco_mgr *mgr = sv->mgr;
	char msg[192] = "";
	struct loco_rbuf peek = *r;
	uint32_t from = loco_get_u32(&peek);
	if (mgr->keyed && from != cl->ctx.client) {
		snprintf(msg, sizeof(msg), "HELLO as node %u on a connection "
			 "authenticated as node %u", from, cl->ctx.client);
		refuse(sv, cl, reply, -LOCO_EAUTH, msg);
		return;
	}
	uint64_t boot = 0;
	int rc = hello_apply(mgr, r, &from, &boot, msg, sizeof(msg));
	if (rc) {
		loco_err("ctrl", "rejected a HELLO: %s", msg);
	} else {
		cl->peer = (int)from;
		cl->state = CL_READY;
	}
	put_status(reply, rc, msg);
	/* A refused node is given no credential. */
	hello_encode(mgr, reply, from, rc ? 0 : boot);
}

/* A request of an authenticated (or, insecure, hello'd) peer. */
static int serve_request(struct server *sv, struct client *cl, uint16_t type,
			 const uint8_t *p, size_t len, struct loco_wbuf *reply)
{
	struct loco_mgr *mgr = sv->mgr;
	uint32_t from = (uint32_t)cl->peer;
	pthread_mutex_lock(&mgr->peer_lock);
	bool fenced = loco_fenced_is(mgr, from, mgr->peer_boot[from]);
	pthread_mutex_unlock(&mgr->peer_lock);
	if (fenced) {
		loco_warn("ctrl", "closing the connection of node %u: its "
			  "incarnation is fenced", from);
		return -LOCO_EFENCED;
	}
	switch (type) {
	case LOCO_MSG_FENCE:
		loco_fence_handle(mgr, from, p, len, reply);
		return LOCO_MSG_FENCE_ACK;
	case LOCO_MSG_JOIN:
		loco_channel_handle_join(mgr, from, p, len, reply);
		return LOCO_MSG_JOIN_ACK;
	case LOCO_MSG_REGION_OPEN:
		loco_region_handle_open(mgr, from, p, len, reply);
		return LOCO_MSG_REGION_ACK;
	case LOCO_MSG_REGION_DROP:
		loco_region_handle_drop(mgr, from, p, len, reply);
		return LOCO_MSG_REGION_DROP_ACK;
	case LOCO_MSG_MIRROR_JOIN:
		loco_mirror_handle_join(mgr, from, p, len, reply);
		return LOCO_MSG_MIRROR_JOIN_ACK;
	case LOCO_MSG_MIRROR_TABLE:
		loco_mirror_handle_table(mgr, from, p, len, reply);
		return LOCO_MSG_MIRROR_TABLE_ACK;
	case LOCO_MSG_TAKEOVER:
		loco_mirror_handle_takeover(mgr, from, p, len, reply);
		return LOCO_MSG_TAKEOVER_ACK;
	case LOCO_MSG_REGION_FIND:
		loco_region_handle_find(mgr, from, p, len, reply);
		return LOCO_MSG_REGION_FIND_ACK;
	default:
		loco_err("ctrl", "unknown request type %u from node %d", type,
			 cl->peer);
		return -LOCO_EPROTO;
	}
}

/* Handle CL's complete message; returns the reply type or a negative
 * error (the connection is then closed without a reply). */
static int serve_one(struct server *sv, struct client *cl,
		     struct loco_wbuf *reply)
{
	uint16_t type = cl->h.type;
	struct loco_rbuf r;
	loco_rbuf_init(&r, cl->body, cl->h.len);
	bool keyed = sv->mgr->keyed;
	if (cl->state == CL_NEW && type == LOCO_MSG_AUTH) {
		serve_auth(sv, cl, &r, reply);
		return LOCO_MSG_AUTH_CHAL;
	}
	if (cl->state == CL_PROOF && type == LOCO_MSG_AUTH_PROOF) {
		serve_proof(sv, cl, &r, reply);
		return LOCO_MSG_AUTH_ACK;
	}
	if (type == LOCO_MSG_HELLO &&
	    (cl->state == CL_AUTHED || cl->state == CL_READY ||
	     (cl->state == CL_NEW && !keyed))) {
		serve_hello(sv, cl, &r, reply);
		return LOCO_MSG_HELLO_ACK;
	}
	if (cl->state == CL_READY)
		return serve_request(sv, cl, type, cl->body, cl->h.len, reply);
	if (type == LOCO_MSG_HELLO && keyed) {
		refuse(sv, cl, reply, -LOCO_EAUTH, "HELLO without the cluster-key "
		       "exchange (is that node --insecure?)");
		return LOCO_MSG_HELLO_ACK;
	}
	char why[64];
	snprintf(why, sizeof(why), "message type %u before %s", type,
		 keyed ? "authentication" : "HELLO");
	refuse(sv, cl, NULL, -LOCO_EPROTO, why);
	return -LOCO_EPROTO;
}

static void client_reset_msg(struct client *cl)
{
	free(cl->body);
	cl->body = NULL;
	cl->got = cl->need = 0;
	if (cl->state == CL_READY)
		cl->deadline = UINT64_MAX;
}

/* The header is in: check it and make room for the body. */
static int client_hdr(struct server *sv, struct client *cl)
{
	int rc = loco_hdr_decode(cl->hdr, &cl->h);
	size_t max = cl->state == CL_READY ? LOCO_WIRE_MAX : PREAUTH_MAX;
	if (!rc && cl->h.len > max)
		rc = -E2BIG;
	if (rc) {
		char why[96];
		snprintf(why, sizeof(why), "%s", rc == -E2BIG ?
			 "message longer than allowed at this point" :
			 loco_strerror(rc));
		if (cl->state != CL_READY)
			refuse_log(sv, cl, why);
		else
			loco_warn("ctrl", "dropping connection from node %d: %s",
				  cl->peer, why);
		return rc;
	}
	cl->need = cl->h.len + tag_len(&cl->sess);
	if (cl->need && !(cl->body = malloc(cl->need)))
		return -ENOMEM;
	return 0;
}

/* Read what CL's socket holds: 1 once a whole message is in, 0 if more
 * is to come, or a negative error (close). */
static int client_read(struct server *sv, struct client *cl)
{
	while (cl->got < LOCO_MSG_HDR_LEN + cl->need) {
		bool in_hdr = cl->got < LOCO_MSG_HDR_LEN;
		uint8_t *dst = in_hdr ? cl->hdr + cl->got :
			       cl->body + (cl->got - LOCO_MSG_HDR_LEN);
		size_t want = in_hdr ? LOCO_MSG_HDR_LEN - cl->got :
			      LOCO_MSG_HDR_LEN + cl->need - cl->got;
		ssize_t n = recv(cl->fd, dst, want, MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		if (cl->got == 0 && cl->state == CL_READY)
			cl->deadline = loco_deadline(SERVER_MSG_TIMEOUT_MS);
		cl->got += (size_t)n;
		if (cl->got == LOCO_MSG_HDR_LEN) {
			int rc = client_hdr(sv, cl);
			if (rc)
				return rc;
		}
	}
	return 1;
}

/* Serve CL's complete message: 0, or nonzero to close the connection. */
static int client_serve(struct server *sv, struct client *cl)
{
	int rc = msg_open(&cl->sess, cl->hdr, cl->body, cl->h.len);
	if (rc) {
		loco_warn("ctrl", "dropping connection from node %u: a message's "
			  "session tag does not match", cl->ctx.client);
		return rc;
	}
	bool was_authed = cl->state == CL_AUTHED;
	struct loco_wbuf reply;
	loco_wbuf_init(&reply);
	rc = serve_one(sv, cl, &reply);
	if (rc > 0)
		rc = reply.err ? reply.err :
		     msg_send(cl->fd, &cl->sess, (uint16_t)rc, reply.p, reply.len,
			      loco_deadline(SERVER_MSG_TIMEOUT_MS));
	loco_wbuf_fini(&reply);
	/* The session starts with the first message after AUTH_ACK. */
	if (rc >= 0 && cl->state == CL_AUTHED && !was_authed)
		loco_sess_start(&cl->sess, sv->mgr->key, &cl->ctx,
				LOCO_SIDE_SERVER);
	client_reset_msg(cl);
	return rc < 0 ? rc : cl->closing;
}

static void client_close(struct server *sv, unsigned i)
{
	struct client *cl = &sv->cl[i];
	close(cl->fd);
	free(cl->body);
	loco_sess_end(&cl->sess);
	sv->cl[i] = sv->cl[--sv->n];
}

/* Make room by closing the connection nearest its handshake deadline;
 * false if every connection is authenticated. */
static bool evict_one(struct server *sv)
{
	unsigned pick = sv->n;
	for (unsigned i = 0; i < sv->n; i++)
		if (sv->cl[i].state != CL_READY &&
		    (pick == sv->n || sv->cl[i].deadline < sv->cl[pick].deadline))
			pick = i;
	if (pick == sv->n)
		return false;
	refuse_log(sv, &sv->cl[pick], "closed unauthenticated to make room");
	client_close(sv, pick);
	return true;
}

static void accept_client(struct server *sv)
{
	struct sockaddr_in sa;
	socklen_t slen = sizeof(sa);
	int fd = accept4(sv->mgr->listen_fd, (struct sockaddr *)&sa, &slen,
			 SOCK_CLOEXEC);
	if (fd < 0)
		return;
	if (sv->n == MAX_CLIENTS && !evict_one(sv)) {
		loco_warn("ctrl", "too many control connections; refusing one");
		close(fd);
		return;
	}
	sock_tune(fd);
	struct client *cl = &sv->cl[sv->n++];
	memset(cl, 0, sizeof(*cl));
	cl->fd = fd;
	cl->peer = -1;
	cl->state = CL_NEW;
	cl->addr = sa;
	cl->deadline = loco_deadline(HANDSHAKE_MS);
}

/* Close connections past their deadline; returns the poll timeout (ms)
 * until the next one, or -1. */
static int expire_clients(struct server *sv)
{
	uint64_t now = loco_now_ns(), next = UINT64_MAX;
	for (unsigned i = sv->n; i-- > 0;) {
		struct client *cl = &sv->cl[i];
		if (cl->deadline > now) {
			if (cl->deadline < next)
				next = cl->deadline;
			continue;
		}
		if (cl->state != CL_READY)
			refuse_log(sv, cl, "no authenticated HELLO in time");
		else
			loco_warn("ctrl", "dropping connection from node %d: a "
				  "message stayed incomplete for %d ms", cl->peer,
				  SERVER_MSG_TIMEOUT_MS);
		client_close(sv, i);
	}
	return next == UINT64_MAX ? -1 : (int)((next - now) / 1000000u) + 1;
}

static void serve_loop(struct server *sv)
{
	struct loco_mgr *mgr = sv->mgr;
	struct pollfd pfd[MAX_CLIENTS + 2];
	for (;;) {
		int ms = expire_clients(sv);
		pfd[0] = (struct pollfd){ .fd = mgr->wake_pipe[0], .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = mgr->listen_fd, .events = POLLIN };
		for (unsigned i = 0; i < sv->n; i++)
			pfd[i + 2] = (struct pollfd){ .fd = sv->cl[i].fd,
						      .events = POLLIN };
		unsigned polled = sv->n;
		if (poll(pfd, polled + 2, ms) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents)
			break;
		for (unsigned i = polled; i-- > 0;) {
			if (!pfd[i + 2].revents)
				continue;
			int rc = client_read(sv, &sv->cl[i]);
			if (rc > 0)
				rc = client_serve(sv, &sv->cl[i]) ? -1 : 0;
			if (rc < 0)
				client_close(sv, i);
		}
		if (pfd[1].revents & POLLIN)
			accept_client(sv);
	}
}

static void *server_main(void *arg)
{
	struct server *sv = arg;
	serve_loop(sv);
	while (sv->n)
		client_close(sv, sv->n - 1);
	free(sv);
	return NULL;
}

static int listen_open(struct loco_mgr *mgr)
{
	if (mgr->listen_fd >= 0)
		return 0;   /* bound by the bootstrap (boot.h) */
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
	if (pipe2(mgr->wake_pipe, O_CLOEXEC)) {
		loco_err("ctrl", "pipe: %s", strerror(errno));
		return -errno;
	}
	int rc = listen_open(mgr);
	if (rc)
		return rc;
	struct server *sv = calloc(1, sizeof(*sv));
	if (!sv)
		return -ENOMEM;
	sv->mgr = mgr;
	rc = -pthread_create(&mgr->server, NULL, server_main, sv);
	mgr->server_started = !rc;
	if (rc)
		free(sv);
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
	for (unsigned i = 0; i < LOCO_MAX_NODES; i++)
		conn_drop(mgr, i);
	for (int i = 0; i < 2; i++)
		if (mgr->wake_pipe[i] >= 0)
			close(mgr->wake_pipe[i]);
}
