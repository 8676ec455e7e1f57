/* SPDX-License-Identifier: MIT */
/* Memory nodes that die and come back (docs/durability.md,
 * "Reconnection").
 *
 * A keeper thread (on nodes whose hosts file has memory nodes besides
 * them) polls the control connection this node holds to each memory node:
 * the kernel closes a process's sockets when it dies, SIGKILL included,
 * so its end of file says the node is gone. The node is then DOWN: its
 * arena length reads 0, so every operation on it fails at once with
 * -LOCO_EDOWN (loco_peer_span), the inline path stops using its mapping,
 * and a persist of writes that went to it fails too. The keeper tries to
 * say hello again every RECONNECT_MS. When the node answers, as a new
 * incarnation with new descriptors, and still has the same durable image,
 * every region this node opened there is opened again and must come back
 * at its old offset; then the node is UP again and the old region
 * descriptors and remote addresses work as before (the QPs made for the
 * dead incarnation are renewed at their next post, ops.c). A node that
 * comes back without its image (not durable, another directory) is LOST:
 * its regions are gone, and operations fail with -LOCO_ELOST, until the
 * program opens a region there again, which starts afresh with the new
 * incarnation (loco_peer_fresh).
 *
 * A DOWN memory node that does not answer may have a mirror (mirror.c):
 * on a compute node the keeper asks the mirrors to take it over; the one
 * that does serves it from then on (mgr->route): its arena and image
 * stand for the dead node's in the transport, as a new incarnation, and
 * the dead node's regions are opened again there, at their offsets. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "loco/internal.h"

#define RECONNECT_MS 50       /* between attempts while a node is down */
#define CONNECT_TRY_MS 200    /* one attempt's bound */
#define IDLE_POLL_MS 1000     /* the keeper's poll when nothing is down */

static bool is_memory_peer(const struct loco_mgr *mgr, uint32_t peer)
{
	return peer != mgr->id && peer < LOCO_MAX_NODES &&
	       mgr->hosts.node[peer].present &&
	       (mgr->hosts.node[peer].role == LOCO_ROLE_MEMORY ||
		mgr->hosts.node[peer].role == LOCO_ROLE_MIRROR);
}

static bool routed(struct loco_mgr *mgr, uint32_t peer)
{
	return loco_route(mgr, peer) != peer;
}

static int peer_state(struct loco_mgr *mgr, uint32_t peer)
{
	/* Relaxed: a state word; the arena length orders the memory. */
	return atomic_load_explicit(&mgr->peer_state[peer], memory_order_relaxed);
}

/* ---- regions to open again --------------------------------------------- */

void loco_ropen_add(struct loco_mgr *mgr, uint32_t node, const char *name,
		    uint64_t off, uint64_t len, unsigned flags)
{
	pthread_mutex_lock(&mgr->ropen_lock);
	struct loco_ropen *r = mgr->ropens;
	while (r && !(r->node == node && !strcmp(r->name, name)))
		r = r->next;
	if (!r && (r = calloc(1, sizeof(*r)))) {
		r->node = node;
		snprintf(r->name, sizeof(r->name), "%s", name);
		r->next = mgr->ropens;
		mgr->ropens = r;
	}
	if (r) {
		r->off = off;
		r->len = len;
		r->flags = flags;
	} else {
		loco_warn("peers", "out of memory: region '%s' of node %u will not "
			  "be checked when the node comes back", name, node);
	}
	pthread_mutex_unlock(&mgr->ropen_lock);
}

static bool drop_matches(const char *rname, const char *name, unsigned flags)
{
	size_t n = strlen(name);
	return (flags & LOCO_DROP_ALL) || !strcmp(rname, name) ||
	       ((flags & LOCO_DROP_TREE) && !strncmp(rname, name, n) &&
		(rname[n] == '.' || rname[n] == '/'));
}

void loco_ropen_drop(struct loco_mgr *mgr, uint32_t node, const char *name,
		     unsigned flags)
{
	pthread_mutex_lock(&mgr->ropen_lock);
	for (struct loco_ropen **pp = &mgr->ropens; *pp;) {
		struct loco_ropen *r = *pp;
		if (r->node == node && drop_matches(r->name, name, flags)) {
			*pp = r->next;
			free(r);
		} else {
			pp = &r->next;
		}
	}
	pthread_mutex_unlock(&mgr->ropen_lock);
}

static void ropen_free_all(struct loco_mgr *mgr)
{
	while (mgr->ropens) {
		struct loco_ropen *r = mgr->ropens;
		mgr->ropens = r->next;
		free(r);
	}
}

/* ---- up ------------------------------------------------------------------- */

void loco_peer_up_mark(struct loco_mgr *mgr, uint32_t peer)
{
	if (!is_memory_peer(mgr, peer))
		return;
	/* Relaxed: published by the release of the arena length that
	 * follows (an op that acts on the peer's memory acquired it). */
	atomic_store_explicit(&mgr->peer_up_ns[peer], loco_lease_now_ns(),
			      memory_order_relaxed);
}

uint64_t loco_peer_up_ns(struct loco_mgr *mgr, uint32_t peer)
{
	if (peer >= LOCO_MAX_NODES)
		return 0;
	/* Relaxed: see loco_peer_up_mark. */
	return atomic_load_explicit(&mgr->peer_up_ns[peer], memory_order_relaxed);
}

/* ---- down ---------------------------------------------------------------- */

void loco_peer_down(struct loco_mgr *mgr, uint32_t peer, const char *why)
{
	if (!is_memory_peer(mgr, peer))
		return;
	pthread_mutex_lock(&mgr->peer_lock);
	bool was_up = peer_state(mgr, peer) == LOCO_PEER_UP;
	if (was_up) {
		/* Relaxed: read with the length below (loco_peer_gone). */
		atomic_store_explicit(&mgr->peer_state[peer], LOCO_PEER_DOWN,
				      memory_order_relaxed);
		mgr->peer_back[peer] = false;
		mgr->peer_hangup[peer] = true;
		/* Relaxed: each thread's lock orders it before the clearing
		 * of its inline words below (direct_open reads it under that
		 * lock after setting the words). */
		atomic_store_explicit(&mgr->peer_arena_len[peer], 0,
				      memory_order_relaxed);
	}
	pthread_mutex_unlock(&mgr->peer_lock);
	if (!was_up)
		return;
	/* Only sync transports have an inline path; on the others a caller
	 * may hold a thread's lock, which thr_lock must not follow. */
	if (mgr->tp_ops->sync)
		loco_threads_direct_close(mgr, peer);
	loco_warn("peers", "memory node %u is down (%s): operations on it fail "
		  "with -LOCO_EDOWN until it is back", peer, why);
	/* The nodes it serves after a fail-over go down with it. */
	for (uint32_t p = 0; p <= mgr->hosts.max_id; p++)
		if (p != peer && loco_route(mgr, p) == peer)
			loco_peer_down(mgr, p, "the mirror serving it is down");
}

void loco_peer_watch(struct loco_mgr *mgr, uint32_t peer, int fd)
{
	if (!is_memory_peer(mgr, peer))
		return;
	/* Relaxed: the keeper checks the fd under the connection's lock. */
	atomic_store_explicit(&mgr->out[peer].watch_fd, fd, memory_order_relaxed);
	/* Acquire: pairs with loco_peers_start's release; the pipe stays
	 * open until loco_peers_fini, after the control thread stopped. */
	if (fd >= 0 && atomic_load_explicit(&mgr->keeper_started,
					    memory_order_acquire)) {
		char b = 1;
		if (write(mgr->keeper_pipe[1], &b, 1) < 0 && errno != EAGAIN)
			loco_warn("peers", "cannot wake the peer keeper: %s",
				  strerror(errno));
	}
}

/* The polled connection of PEER said something: end of file (or an
 * error) means the node's process is gone. */
static void conn_check(struct loco_mgr *mgr, uint32_t peer, int fd)
{
	if (loco_ctrl_conn_dead(mgr, peer, fd))
		loco_peer_down(mgr, peer, "its control connection closed");
}

/* ---- back ---------------------------------------------------------------- */

/* Open every region this node had on PEER again: each must be where it
 * was. Returns 0, or the first difference (-LOCO_ELOST) or error. */
static int regions_again(struct loco_mgr *mgr, uint32_t peer, unsigned *n)
{
	int rc = 0;
	*n = 0;
	pthread_mutex_lock(&mgr->ropen_lock);
	for (struct loco_ropen *r = mgr->ropens; r && !rc; r = r->next) {
		if (r->node != peer)
			continue;
		uint64_t off = 0;
		rc = loco_region_reopen(mgr, peer, r->name, r->len, r->flags,
					&off);
		if (!rc && off != r->off) {
			loco_err("peers", "node %u serves region '%s' at offset %lu, "
				 "it was at %lu", peer, r->name, (unsigned long)off,
				 (unsigned long)r->off);
			rc = -LOCO_ELOST;
		}
		(*n)++;
	}
	pthread_mutex_unlock(&mgr->ropen_lock);
	return rc;
}

/* PEER (DOWN) said hello again: UP if it kept its image and regions,
 * LOST if not; a failure to reach it leaves it DOWN for the next try. */
static void peer_verify(struct loco_mgr *mgr, uint32_t peer)
{
	pthread_mutex_lock(&mgr->peer_lock);
	uint64_t img = mgr->peer_back_image[peer];
	bool same = img && img == mgr->peer_image[peer];
	pthread_mutex_unlock(&mgr->peer_lock);
	unsigned n = 0;
	int rc = same ? regions_again(mgr, peer, &n) : -LOCO_ELOST;
	if (rc && rc != -LOCO_ELOST)
		return;
	pthread_mutex_lock(&mgr->peer_lock);
	/* Relaxed: read with the length (loco_peer_gone). */
	atomic_store_explicit(&mgr->peer_state[peer], rc ? LOCO_PEER_LOST :
			      LOCO_PEER_UP, memory_order_relaxed);
	if (!rc)
		loco_peer_up_mark(mgr, peer);
	if (!rc)
		/* Release pairs with the acquire in loco_peer_span: the new
		 * incarnation's transport peer, flags and generation are
		 * visible to whoever sees the length. */
		atomic_store_explicit(&mgr->peer_arena_len[peer],
				      mgr->peer_back_len[peer],
				      memory_order_release);
	pthread_mutex_unlock(&mgr->peer_lock);
	if (rc)
		loco_err("peers", "memory node %u came back without the memory it "
			 "held (%s): operations on it fail with -LOCO_ELOST", peer,
			 same ? "its regions moved" : img ? "another durable image" :
			 "it is not durable");
	else
		loco_info("peers", "memory node %u is back: %u region(s) opened "
			  "again at their offsets", peer, n);
}

void loco_peer_fresh(struct loco_mgr *mgr, uint32_t peer)
{
	pthread_mutex_lock(&mgr->peer_lock);
	bool fresh = peer_state(mgr, peer) == LOCO_PEER_LOST &&
		     mgr->peer_back[peer];
	if (fresh) {
		mgr->peer_image[peer] = mgr->peer_back_image[peer];
		/* Relaxed: read with the length (loco_peer_gone). */
		atomic_store_explicit(&mgr->peer_state[peer], LOCO_PEER_UP,
				      memory_order_relaxed);
		loco_peer_up_mark(mgr, peer);
		/* Release: as in peer_verify. */
		atomic_store_explicit(&mgr->peer_arena_len[peer],
				      mgr->peer_back_len[peer],
				      memory_order_release);
	}
	pthread_mutex_unlock(&mgr->peer_lock);
	if (!fresh)
		return;
	loco_ropen_drop(mgr, peer, "", LOCO_DROP_TREE | LOCO_DROP_ALL);
	loco_warn("peers", "memory node %u starts afresh: regions opened there "
		  "before it was lost are gone, and their descriptors must not "
		  "be used", peer);
}

/* ---- fail-over ------------------------------------------------------------ */

/* Serve DOWN node PEER from TO (UP), the mirror that took it over: TO's
 * arena and image stand for PEER's in the transport (a new incarnation
 * of PEER), then PEER's regions are opened again there, where they must
 * be at their old offsets. */
static void route_install(struct loco_mgr *mgr, uint32_t peer, uint32_t to)
{
	pthread_mutex_lock(&mgr->peer_lock);
	struct loco_hello h = mgr->peer_hello[to];
	pthread_mutex_unlock(&mgr->peer_lock);
	h.id = peer;
	if (!h.arena_len || loco_peer_add(mgr, &h, false))
		return;
	peer_verify(mgr, peer);
}

/* Ask mirror X to take over PEER: 0 if it serves PEER now. */
static int takeover_ask(struct loco_mgr *mgr, uint32_t x, uint32_t peer)
{
	uint8_t *rep = NULL;
	size_t rlen = 0;
	if (peer_state(mgr, x) == LOCO_PEER_DOWN ||
	    loco_ctrl_reconnect(mgr, x, CONNECT_TRY_MS))
		return -EAGAIN;
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_u32(&w, peer);
	int rc = w.err ? w.err :
		 loco_ctrl_request(mgr, x, LOCO_MSG_TAKEOVER, w.p, w.len,
				   LOCO_MSG_TAKEOVER_ACK, &rep, &rlen, -1);
	loco_wbuf_fini(&w);
	if (rc)
		return rc;
	struct loco_rbuf r;
	loco_rbuf_init(&r, rep, rlen);
	rc = -(int)loco_get_u32(&r);
	free(rep);
	return r.err ? -LOCO_EPROTO : rc;
}

/* PEER (a memory node, DOWN) may have a mirror: the first mirror that
 * takes it over (it does only if PEER's process is dead) serves it from
 * now on. Compute nodes only. Whether one did. */
static bool fail_over(struct loco_mgr *mgr, uint32_t peer)
{
	if (mgr->hosts.node[mgr->id].role != LOCO_ROLE_COMPUTE ||
	    mgr->hosts.node[peer].role != LOCO_ROLE_MEMORY)
		return false;
	for (uint32_t x = 0; x <= mgr->hosts.max_id; x++) {
		if (!is_memory_peer(mgr, x) ||
		    mgr->hosts.node[x].role != LOCO_ROLE_MIRROR ||
		    takeover_ask(mgr, x, peer))
			continue;
		pthread_mutex_lock(&mgr->peer_lock);
		mgr->peer_image[peer] = mgr->peer_hello[x].image_id;
		pthread_mutex_unlock(&mgr->peer_lock);
		/* Relaxed: see loco_route; control requests for PEER go to X
		 * from now on (the re-opens below). */
		atomic_store_explicit(&mgr->route[peer], x, memory_order_relaxed);
		loco_warn("peers", "memory node %u failed over to its mirror, "
			  "node %u", peer, x);
		route_install(mgr, peer, x);
		return true;
	}
	return false;
}

/* One reconnection attempt to DOWN node PEER: to the mirror serving it
 * if it failed over; else a fail-over if a mirror takes it (its process
 * is dead), else to it. */
static void peer_try(struct loco_mgr *mgr, uint32_t peer)
{
	uint32_t to = loco_route(mgr, peer);
	if (to != peer) {
		if (peer_state(mgr, to) == LOCO_PEER_UP)
			route_install(mgr, peer, to);
		return;
	}
	/* Found down by an op or a FLUSH, the node's control connection
	 * may still look open here (its end not read yet): the reconnect
	 * must dial whatever listens there now and hear its hello. */
	pthread_mutex_lock(&mgr->peer_lock);
	bool hangup = mgr->peer_hangup[peer];
	mgr->peer_hangup[peer] = false;
	pthread_mutex_unlock(&mgr->peer_lock);
	if (hangup)
		loco_ctrl_hangup(mgr, peer);
	if (fail_over(mgr, peer) ||
	    loco_ctrl_reconnect(mgr, peer, CONNECT_TRY_MS))
		return;
	pthread_mutex_lock(&mgr->peer_lock);
	bool back = mgr->peer_back[peer];
	pthread_mutex_unlock(&mgr->peer_lock);
	if (back)
		peer_verify(mgr, peer);
}

/* ---- the keeper thread --------------------------------------------------- */

/* The fds to poll: the wake pipe, then the UP memory peers' connections.
 * *DOWN: whether some memory peer is down. */
static unsigned watch_fds(struct loco_mgr *mgr, struct pollfd *pfd,
			  uint32_t *ids, bool *down)
{
	unsigned n = 1;
	pfd[0] = (struct pollfd){ .fd = mgr->keeper_pipe[0], .events = POLLIN };
	*down = false;
	for (uint32_t p = 0; p <= mgr->hosts.max_id; p++) {
		if (!is_memory_peer(mgr, p))
			continue;
		int st = peer_state(mgr, p);
		*down |= st == LOCO_PEER_DOWN;
		/* Relaxed: checked under the connection's lock (conn_check). */
		int fd = atomic_load_explicit(&mgr->out[p].watch_fd,
					      memory_order_relaxed);
		/* A node that failed over lives as its mirror does. */
		if (st != LOCO_PEER_UP || fd < 0 || routed(mgr, p))
			continue;
		ids[n] = p;
		pfd[n++] = (struct pollfd){ .fd = fd, .events = POLLRDHUP };
	}
	return n;
}

static void *keeper_main(void *arg)
{
	struct loco_mgr *mgr = arg;
	struct pollfd pfd[LOCO_MAX_NODES + 1];
	uint32_t ids[LOCO_MAX_NODES + 1];
	/* Relaxed: a stop flag; the join orders the rest. */
	while (!atomic_load_explicit(&mgr->stopping, memory_order_relaxed)) {
		bool down;
		unsigned n = watch_fds(mgr, pfd, ids, &down);
		if (poll(pfd, n, down ? RECONNECT_MS : IDLE_POLL_MS) < 0 &&
		    errno != EINTR)
			break;
		char b[16];
		if (pfd[0].revents && read(mgr->keeper_pipe[0], b, sizeof(b)) < 0 &&
		    errno != EAGAIN)
			break;
		for (unsigned i = 1; i < n; i++)
			if (pfd[i].revents)
				conn_check(mgr, ids[i], pfd[i].fd);
		/* Also a node found down just now: its first try (or
		 * fail-over) need not wait for the next round. */
		for (uint32_t p = 0; p <= mgr->hosts.max_id; p++)
			if (is_memory_peer(mgr, p) &&
			    peer_state(mgr, p) == LOCO_PEER_DOWN)
				peer_try(mgr, p);
	}
	return NULL;
}

int loco_peers_start(struct loco_mgr *mgr)
{
	bool any = false;
	for (uint32_t p = 0; p <= mgr->hosts.max_id; p++)
		any |= is_memory_peer(mgr, p);
	if (!any)
		return 0;
	if (pipe2(mgr->keeper_pipe, O_CLOEXEC | O_NONBLOCK))
		return -errno;
	int rc = -pthread_create(&mgr->keeper, NULL, keeper_main, mgr);
	/* Release: the pipe is set up before the control thread (running
	 * already) may write to it. */
	atomic_store_explicit(&mgr->keeper_started, !rc, memory_order_release);
	return rc;
}

void loco_peers_stop(struct loco_mgr *mgr)
{
	/* Relaxed: only this thread stores it after the start. */
	if (atomic_load_explicit(&mgr->keeper_started, memory_order_relaxed)) {
		/* Relaxed: the keeper reads it each round; the join orders. */
		atomic_store_explicit(&mgr->stopping, true, memory_order_relaxed);
		char b = 1;
		if (write(mgr->keeper_pipe[1], &b, 1) < 0)
			loco_warn("peers", "cannot wake the peer keeper: %s",
				  strerror(errno));
		pthread_join(mgr->keeper, NULL);
		/* Relaxed: a late loco_peer_watch then only skips the wake. */
		atomic_store_explicit(&mgr->keeper_started, false,
				      memory_order_relaxed);
	}
}

void loco_peers_fini(struct loco_mgr *mgr)
{
	for (int i = 0; i < 2; i++)
		if (mgr->keeper_pipe[i] >= 0)
			close(mgr->keeper_pipe[i]);
	mgr->keeper_pipe[0] = mgr->keeper_pipe[1] = -1;
	ropen_free_all(mgr);
}

int loco_peer_wait(struct loco_mgr *mgr, uint32_t peer, int timeout_ms)
{
	if (peer >= LOCO_MAX_NODES || !mgr->hosts.node[peer].present)
		return -EINVAL;
	if (peer_state(mgr, peer) == LOCO_PEER_UNKNOWN)
		return loco_ctrl_connect(mgr, peer, timeout_ms);
	struct loco_wait w;
	loco_wait_init(&w, mgr, timeout_ms);
	for (;;) {
		/* Acquire: pairs with peer_verify's release: an UP node's
		 * memory is usable once this is seen. */
		if (atomic_load_explicit(&mgr->peer_arena_len[peer],
					 memory_order_acquire))
			return 0;
		if (peer_state(mgr, peer) == LOCO_PEER_LOST)
			return -LOCO_ELOST;
		int rc = loco_wait_step(&w);
		if (rc)
			return rc;
	}
}
