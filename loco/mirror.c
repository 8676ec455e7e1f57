/* SPDX-License-Identifier: MIT */
/* Mirrors of durable memory nodes (docs/durability.md, "Mirrors").
 *
 * A mirror M (hosts role "mirror", loco-memnode --durable DIR
 * --mirror-of P) joins its primary P: MIRROR_JOIN makes P's transport copy
 * P's image into M's under the image's start lock and name M in P's image
 * header, after which every FLUSH of P's image, by any node, also copies
 * its ranges into M's image before it completes (durable.c); the reply
 * carries P's region table, and P sends it again (MIRROR_TABLE) whenever
 * a region comes or goes, before it answers the node that asked. So M's
 * image holds every persisted byte of P and M's table every region of P,
 * at the same offsets.
 *
 * When P dies, a compute node's keeper asks the mirrors (TAKEOVER P); M
 * takes over if P's process is dead and P's image still names M (no FLUSH
 * dropped it): it marks P's image taken (P refuses to start again, FLUSHes
 * to it fail), loads its own image into its arena and serves P's regions
 * from then on; "DIR/takeover" keeps that across M's restarts. The
 * compute nodes then route node P to M (peers.c).
 *
 * Wire (after authentication):
 *   MIRROR_JOIN:      (empty)
 *   MIRROR_JOIN_ACK:  u32 status (negated errno), str message, table
 *   MIRROR_TABLE:     table
 *   MIRROR_TABLE_ACK: u32 status, str message
 *   TAKEOVER:         u32 primary
 *   TAKEOVER_ACK:     u32 status, str message
 *   table:            u32 n, n x (str name, u64 offset, u64 length,
 *                     u32 remote access) */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loco/internal.h"

#define JOIN_RETRY_MS 200
#define FORWARD_MS 5000

enum { MIRROR_JOINING, MIRROR_SYNCED, MIRROR_TAKEN };

static void status_put(struct loco_wbuf *w, int status, const char *msg)
{
	loco_put_u32(w, (uint32_t)-status);
	loco_put_str(w, msg);
}

/* Decode "status, message" of a reply into *STATUS and MSG. */
static int status_get(struct loco_rbuf *r, int *status, char *msg, size_t len)
{
	*status = -(int)loco_get_u32(r);
	loco_get_str(r, msg, len);
	return r->err ? -LOCO_EPROTO : 0;
}

/* ---- the table -------------------------------------------------------- */

/* This node's durable arena regions (alloc_lock held). */
static void table_put(struct loco_mgr *mgr, struct loco_wbuf *w)
{
	uint32_t n = 0;
	for (const struct loco_alloc *a = mgr->allocs; a; a = a->next)
		n += a->durable;
	loco_put_u32(w, n);
	for (const struct loco_alloc *a = mgr->allocs; a; a = a->next) {
		if (!a->durable)
			continue;
		loco_put_str(w, a->name);
		loco_put_u64(w, a->off);
		loco_put_u64(w, a->len);
		loco_put_u32(w, a->access);
	}
}

/* Replace this node's regions by the table in R, and save it. */
static int table_install(struct loco_mgr *mgr, struct loco_rbuf *r)
{
	uint32_t n = loco_get_u32(r);
	int rc = r->err ? -LOCO_EPROTO : 0;
	pthread_mutex_lock(&mgr->alloc_lock);
	loco_arena_free_all(mgr);
	for (uint32_t i = 0; i < n && !rc; i++) {
		char name[LOCO_NAME_MAX];
		loco_get_str(r, name, sizeof(name));
		uint64_t off = loco_get_u64(r), len = loco_get_u64(r);
		uint32_t access = loco_get_u32(r);
		rc = r->err ? -LOCO_EPROTO :
		     loco_region_place(mgr, name, off, len, access);
	}
	if (!rc && loco_rbuf_done(r))
		rc = -LOCO_EPROTO;
	if (!rc)
		rc = loco_regions_save(mgr);
	pthread_mutex_unlock(&mgr->alloc_lock);
	return rc;
}

/* ---- the primary ------------------------------------------------------ */

void loco_mirror_handle_join(struct loco_mgr *mgr, uint32_t from,
			     const uint8_t *req, size_t len,
			     struct loco_wbuf *reply)
{
	char msg[128] = "";
	int rc = 0;
	(void)req;
	if (len)
		rc = -LOCO_EPROTO;
	else if (mgr->hosts.node[from].role != LOCO_ROLE_MIRROR ||
		 !mgr->opts.durable_dir[0])
		rc = -EPERM;
	if (rc) {
		snprintf(msg, sizeof(msg), rc == -EPERM ? "node %u cannot mirror "
			 "node %u (a mirror mirrors a durable memory node)" :
			 "malformed MIRROR_JOIN", from, mgr->id);
		status_put(reply, rc, msg);
		return;
	}
	pthread_mutex_lock(&mgr->alloc_lock);
	rc = mgr->tp_ops->mirror_set(mgr->tp, from);
	if (!rc)
		mgr->mirror_node = from;
	if (rc)
		snprintf(msg, sizeof(msg), "cannot copy node %u's image to node "
			 "%u: %s", mgr->id, from, loco_strerror(rc));
	status_put(reply, rc, msg);
	if (!rc)
		table_put(mgr, reply);
	pthread_mutex_unlock(&mgr->alloc_lock);
	if (rc)
		loco_err("mirror", "%s", msg);
	else
		loco_info("mirror", "node %u mirrors this node's image now", from);
}

/* Drop the mirror (alloc_lock held): it no longer gets FLUSHes. */
static void mirror_drop(struct loco_mgr *mgr, int why)
{
	loco_warn("mirror", "node %u no longer mirrors this node (%s): it must "
		  "join again", mgr->mirror_node, loco_strerror(why));
	mgr->tp_ops->mirror_set(mgr->tp, LOCO_MAX_NODES);
	mgr->mirror_node = LOCO_MAX_NODES;
}

void loco_mirror_table_changed(struct loco_mgr *mgr)
{
	if (mgr->mirror_node >= LOCO_MAX_NODES)
		return;
	struct loco_wbuf w;
	uint8_t *rep = NULL;
	size_t rlen = 0;
	char msg[128];
	int status = 0;
	loco_wbuf_init(&w);
	table_put(mgr, &w);
	int rc = w.err ? w.err :
		 loco_ctrl_request(mgr, mgr->mirror_node, LOCO_MSG_MIRROR_TABLE,
				   w.p, w.len, LOCO_MSG_MIRROR_TABLE_ACK, &rep,
				   &rlen, FORWARD_MS);
	loco_wbuf_fini(&w);
	if (!rc) {
		struct loco_rbuf r;
		loco_rbuf_init(&r, rep, rlen);
		rc = status_get(&r, &status, msg, sizeof(msg));
		rc = rc ? rc : status;
		free(rep);
	}
	if (rc)
		mirror_drop(mgr, rc);
}

/* ---- the mirror ------------------------------------------------------- */

static int mirror_state(struct loco_mgr *mgr)
{
	/* Acquire: pairs with the release that set it (the table, the
	 * transport state before it). */
	return atomic_load_explicit(&mgr->mirror_state, memory_order_acquire);
}

void loco_mirror_handle_table(struct loco_mgr *mgr, uint32_t from,
			      const uint8_t *req, size_t len,
			      struct loco_wbuf *reply)
{
	struct loco_rbuf r;
	int rc = !mgr->opts.mirror || from != mgr->opts.mirror_of ||
		 mirror_state(mgr) == MIRROR_TAKEN ? -EPERM : 0;
	loco_rbuf_init(&r, req, len);
	if (!rc)
		rc = table_install(mgr, &r);
	status_put(reply, rc, rc ? loco_strerror(rc) : "");
}

/* "DIR/takeover": this node took its primary's image over. */
static void takeover_path(const struct loco_mgr *mgr, char *out, size_t len)
{
	snprintf(out, len, "%s/takeover", mgr->opts.durable_dir);
}

static int takeover_record(struct loco_mgr *mgr)
{
	char path[LOCO_PATH_MAX + 16];
	takeover_path(mgr, path, sizeof(path));
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	char line[16];
	int n = snprintf(line, sizeof(line), "%u\n", mgr->opts.mirror_of);
	int rc = write(fd, line, (size_t)n) == n && !fsync(fd) ? 0 : -EIO;
	close(fd);
	return rc;
}

bool loco_mirror_taken(const struct loco_mgr *mgr)
{
	char path[LOCO_PATH_MAX + 16];
	if (!mgr->opts.mirror)
		return false;
	takeover_path(mgr, path, sizeof(path));
	return access(path, F_OK) == 0;
}

void loco_mirror_handle_takeover(struct loco_mgr *mgr, uint32_t from,
				 const uint8_t *req, size_t len,
				 struct loco_wbuf *reply)
{
	char msg[128] = "";
	struct loco_rbuf r;
	loco_rbuf_init(&r, req, len);
	uint32_t primary = loco_get_u32(&r);
	int rc = loco_rbuf_done(&r) ? -LOCO_EPROTO :
		 !mgr->opts.mirror || primary != mgr->opts.mirror_of ? -ENOENT : 0;
	pthread_mutex_lock(&mgr->mirror_lock);
	int st = mirror_state(mgr);
	if (!rc && st == MIRROR_JOINING)
		rc = -EAGAIN;
	if (!rc && st == MIRROR_SYNCED) {
		rc = mgr->tp_ops->take_over(mgr->tp, primary);
		if (!rc)
			rc = takeover_record(mgr);
		if (!rc) {
			/* Release: pairs with mirror_state's acquire. */
			atomic_store_explicit(&mgr->mirror_state, MIRROR_TAKEN,
					      memory_order_release);
			loco_warn("mirror", "node %u (asked by node %u) took over "
				  "node %u's image: it serves node %u's regions "
				  "now", mgr->id, from, primary, primary);
		}
	}
	pthread_mutex_unlock(&mgr->mirror_lock);
	if (rc)
		snprintf(msg, sizeof(msg), "node %u cannot take over node %u: %s",
			 mgr->id, primary, rc == -ENOENT ? "not its mirror" :
			 rc == -EAGAIN ? "not in sync yet" :
			 rc == -EBUSY ? "it is alive" :
			 rc == -ESTALE ? "it dropped this mirror" :
			 loco_strerror(rc));
	status_put(reply, rc, msg);
}

bool loco_mirror_serves(struct loco_mgr *mgr, char *msg, size_t len)
{
	if (!mgr->opts.mirror || mirror_state(mgr) == MIRROR_TAKEN)
		return true;
	snprintf(msg, len, "node %u mirrors node %u: it serves regions only "
		 "after a fail-over", mgr->id, mgr->opts.mirror_of);
	return false;
}

/* One MIRROR_JOIN: 0 when this node mirrors its primary now. */
static int join_once(struct loco_mgr *mgr)
{
	uint8_t *rep = NULL;
	size_t rlen = 0;
	char msg[128];
	int status;
	int rc = loco_ctrl_reconnect(mgr, mgr->opts.mirror_of, JOIN_RETRY_MS);
	if (!rc)
		rc = loco_ctrl_request(mgr, mgr->opts.mirror_of,
				       LOCO_MSG_MIRROR_JOIN, NULL, 0,
				       LOCO_MSG_MIRROR_JOIN_ACK, &rep, &rlen,
				       FORWARD_MS);
	if (rc)
		return rc;
	struct loco_rbuf r;
	loco_rbuf_init(&r, rep, rlen);
	rc = status_get(&r, &status, msg, sizeof(msg));
	if (!rc && status) {
		loco_err("mirror", "joining node %u: %s", mgr->opts.mirror_of,
			 msg[0] ? msg : loco_strerror(status));
		rc = status;
	}
	if (!rc)
		rc = table_install(mgr, &r);
	free(rep);
	return rc;
}

/* Whether a failed join is worth another try (the primary may not be up
 * yet, or restarting); a refusal is not. */
static bool join_retry(int rc)
{
	return rc != -EPERM && rc != -EOPNOTSUPP && rc != -LOCO_EMISMATCH &&
	       rc != -LOCO_EPROTO && rc != -LOCO_EAUTH;
}

static void *mirror_main(void *arg)
{
	struct loco_mgr *mgr = arg;
	int rc;
	/* Relaxed: a stop flag; the join orders the rest. */
	while ((rc = join_once(mgr)) && join_retry(rc) &&
	       !atomic_load_explicit(&mgr->stopping, memory_order_relaxed)) {
		struct timespec ts = { 0, JOIN_RETRY_MS * 1000000L };
		nanosleep(&ts, NULL);
	}
	if (rc && !join_retry(rc))
		loco_err("mirror", "node %u gives up mirroring node %u: %s",
			 mgr->id, mgr->opts.mirror_of, loco_strerror(rc));
	if (rc)
		return NULL;
	pthread_mutex_lock(&mgr->mirror_lock);
	/* Release: pairs with mirror_state's acquire (the table is in). */
	atomic_store_explicit(&mgr->mirror_state, MIRROR_SYNCED,
			      memory_order_release);
	pthread_mutex_unlock(&mgr->mirror_lock);
	loco_info("mirror", "node %u mirrors node %u", mgr->id,
		  mgr->opts.mirror_of);
	return NULL;
}

int loco_mirror_check(const struct loco_mgr *mgr)
{
	const struct loco_opts *o = &mgr->opts;
	uint8_t role = mgr->hosts.node[mgr->id].role;
	const char *why = NULL;
	if (role == LOCO_ROLE_MIRROR && !o->mirror)
		why = "has role mirror: start it with --mirror-of ID";
	else if (o->mirror && role != LOCO_ROLE_MIRROR)
		why = "is given --mirror-of but its role is not mirror";
	else if (o->mirror && (o->mirror_of >= LOCO_MAX_NODES ||
			       !mgr->hosts.node[o->mirror_of].present ||
			       mgr->hosts.node[o->mirror_of].role !=
			       LOCO_ROLE_MEMORY))
		why = "mirrors a node that is not a memory node";
	if (!why)
		return 0;
	loco_err("mirror", "node %u in %s %s", mgr->id, mgr->hosts.path, why);
	return -EINVAL;
}

int loco_mirror_start(struct loco_mgr *mgr)
{
	/* mirror_node is LOCO_MAX_NODES from locks_init (mgr.c), before the
	 * control thread that changes it under alloc_lock starts. */
	if (!mgr->opts.mirror)
		return 0;
	if (loco_mirror_taken(mgr)) {
		atomic_store_explicit(&mgr->mirror_state, MIRROR_TAKEN,
				      memory_order_relaxed); /* before any thread */
		loco_info("mirror", "node %u serves node %u's image (taken over "
			  "before)", mgr->id, mgr->opts.mirror_of);
		return 0;
	}
	/* A drop of no mirror: a no-op where mirrors exist. */
	int rc = mgr->tp_ops->mirror_set(mgr->tp, LOCO_MAX_NODES);
	if (rc) {
		loco_err("mirror", "transport %s has no mirrors (shm and shm-weak "
			 "have)", mgr->tp_ops->name);
		return rc;
	}
	rc = -pthread_create(&mgr->mirror_thr, NULL, mirror_main, mgr);
	mgr->mirror_started = !rc;
	return rc;
}

void loco_mirror_stop(struct loco_mgr *mgr)
{
	/* Relaxed: the thread reads it between tries; the join orders. */
	atomic_store_explicit(&mgr->stopping, true, memory_order_relaxed);
	if (mgr->mirror_started)
		pthread_join(mgr->mirror_thr, NULL);
	mgr->mirror_started = false;
}
