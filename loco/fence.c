/* SPDX-License-Identifier: MIT */
/* Fencing (docs/ordering.md, "Fencing"): a node's incarnation (its boot
 * id, exchanged in HELLO) is fenced at every node that hosts memory, by
 * one control-plane round trip to each (FENCE / FENCE_ACK); each target
 * records it, refuses its HELLOs and control requests, and has its
 * transport refuse its remote ops and wait until none is mid-execution.
 * Also the lease clock (LOCO_CLOCK_SKEW_MS, LOCO_CLOCK_SKEW_FOR_MS).
 *
 * FENCE: u32 node, u64 incarnation (0: the fencer knows none), u32
 * timeout (ms, the target's wait for ops mid-execution). FENCE_ACK: u32
 * status, str message, u32 whether it fenced an incarnation (the named
 * one, or the one it knows as the node's current). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "loco/internal.h"

/* ---- the lease clock ------------------------------------------------------- */

/* When this process started (CLOCK_MONOTONIC, ns): the origin of
 * LOCO_CLOCK_SKEW_FOR_MS. */
static uint64_t start_ns;

__attribute__((constructor)) static void lease_clock_start(void)
{
	start_ns = loco_now_ns();
}

/* Environment variable NAME as a whole number of milliseconds (negative
 * allowed if NEG) into *MS: 0 (absent or empty: *MS = 0), else -EINVAL. */
static int env_ms(const char *name, bool neg, int64_t *ms)
{
	const char *v = getenv(name);
	*ms = 0;
	if (!v || !*v)
		return 0;
	char *end;
	errno = 0;
	long long x = strtoll(v, &end, 10);
	if (errno || *end || (!neg && x < 0) || x > INT64_MAX / 1000000 ||
	    x < INT64_MIN / 1000000)
		return -EINVAL;
	*ms = x;
	return 0;
}

/* The skew (ns) and until when it applies (CLOCK_MONOTONIC ns; UINT64_MAX:
 * the whole run). */
struct skew {
	int64_t ns;
	uint64_t until_ns;
};

/* LOCO_CLOCK_SKEW_MS and LOCO_CLOCK_SKEW_FOR_MS into *OUT: 0, or -EINVAL
 * naming what is wrong in *WHY. */
static int skew_parse(struct skew *out, const char **why)
{
	int64_t ms, for_ms;
	*out = (struct skew){ 0, UINT64_MAX };
	*why = "LOCO_CLOCK_SKEW_MS: expected an integer number of milliseconds "
	       "(negative: the lease clock runs behind)";
	if (env_ms("LOCO_CLOCK_SKEW_MS", true, &ms))
		return -EINVAL;
	*why = "LOCO_CLOCK_SKEW_FOR_MS: expected a positive integer number of "
	       "milliseconds (how long the skew lasts from the process start)";
	if (env_ms("LOCO_CLOCK_SKEW_FOR_MS", false, &for_ms))
		return -EINVAL;
	const char *f = getenv("LOCO_CLOCK_SKEW_FOR_MS");
	if (f && *f && !for_ms)
		return -EINVAL;
	*why = "LOCO_CLOCK_SKEW_FOR_MS needs a non-zero LOCO_CLOCK_SKEW_MS (there "
	       "is no skew to end)";
	if (for_ms && !ms)
		return -EINVAL;
	out->ns = ms * 1000000;
	if (for_ms)
		out->until_ns = start_ns + (uint64_t)for_ms * 1000000u;
	return 0;
}

static struct skew skew;
static pthread_once_t skew_once = PTHREAD_ONCE_INIT;

static void skew_load(void)
{
	const char *why;
	if (skew_parse(&skew, &why))
		skew = (struct skew){ 0, UINT64_MAX };
}

static const char *env_or_empty(const char *name)
{
	const char *v = getenv(name);
	return v ? v : "";
}

int loco_lease_skew_check(void)
{
	struct skew s;
	const char *why;
	int rc = skew_parse(&s, &why);
	if (rc)
		loco_err("mgr", "%s; got LOCO_CLOCK_SKEW_MS='%s', "
			 "LOCO_CLOCK_SKEW_FOR_MS='%s'", why,
			 env_or_empty("LOCO_CLOCK_SKEW_MS"),
			 env_or_empty("LOCO_CLOCK_SKEW_FOR_MS"));
	return rc;
}

/* Whether the end of the skew was logged. */
static atomic_bool skew_end_told;

int64_t loco_lease_skew_ns(uint64_t now_ns)
{
	pthread_once(&skew_once, skew_load);
	if (now_ns < skew.until_ns)
		return skew.ns;
	/* Relaxed: only which reader logs the step, once. */
	if (skew.ns &&
	    !atomic_load_explicit(&skew_end_told, memory_order_relaxed) &&
	    !atomic_exchange_explicit(&skew_end_told, true,
				      memory_order_relaxed))
		loco_info("clock", "lease clock skew of %lld ms ended %llu ms "
			  "after the start: the clock stepped %s to "
			  "CLOCK_MONOTONIC", (long long)(skew.ns / 1000000),
			  (unsigned long long)((skew.until_ns - start_ns) /
					       1000000u),
			  skew.ns > 0 ? "back" : "forward");
	return 0;
}

uint64_t loco_lease_now_ns(void)
{
	uint64_t now = loco_now_ns();
	int64_t d = loco_lease_skew_ns(now);
	if (d < 0 && now < (uint64_t)-d)
		return 0;
	return now + (uint64_t)d;
}

/* ---- what this node knows ---------------------------------------------------- */

bool loco_self_fenced(struct loco_mgr *mgr)
{
	/* Relaxed: a flag; the refusals it reports come from the targets. */
	return atomic_load_explicit(&mgr->self_fenced, memory_order_relaxed);
}

void loco_fenced_self(struct loco_mgr *mgr, const char *why)
{
	/* Seq_cst: before the clears below (pairs with direct_open's fence);
	 * the exchange logs once. */
	if (atomic_exchange_explicit(&mgr->self_fenced, true, memory_order_seq_cst))
		return;
	loco_err("fence", "node %u: this incarnation (%016llx) was fenced by the "
		 "cluster (%s): every remote operation now fails with "
		 "-LOCO_EFENCED; restart the process to rejoin", mgr->id,
		 (unsigned long long)mgr->boot_id, why);
	/* Every later op goes out of line, where it fails. */
	loco_threads_direct_stop(mgr);
}

bool loco_fenced_is(struct loco_mgr *mgr, uint32_t node, uint64_t boot)
{
	if (node >= LOCO_MAX_NODES || !boot)
		return false;
	for (unsigned i = 0; i < LOCO_FENCED_MAX; i++)
		if (mgr->fenced[node][i] == boot)
			return true;
	return false;
}

bool loco_peer_fenced(struct loco_mgr *mgr, uint32_t node)
{
	if (node >= LOCO_MAX_NODES)
		return false;
	pthread_mutex_lock(&mgr->peer_lock);
	uint64_t boot = mgr->peer_boot[node];
	bool f = loco_fenced_is(mgr, node, boot);
	pthread_mutex_unlock(&mgr->peer_lock);
	/* Fenced in shared memory by another process (fence_direct): only
	 * this node's fence state knows. */
	return f || (boot && mgr->tp_ops->fenced_here &&
		     mgr->tp_ops->fenced_here(mgr->tp, node, boot));
}

/* Remember NODE's BOOT as fenced (peer_lock held): true if it is new. */
static bool fenced_add(struct loco_mgr *mgr, uint32_t node, uint64_t boot)
{
	if (loco_fenced_is(mgr, node, boot))
		return false;
	mgr->fenced[node][mgr->nfenced[node]++ % LOCO_FENCED_MAX] = boot;
	return true;
}

static void fenced_path(const struct loco_mgr *mgr, char *out, size_t len)
{
	snprintf(out, len, "%s/node%u.fenced", mgr->run_dir, mgr->id);
}

/* A record of the fenced file. */
struct fenced_rec {
	uint32_t node, pad;
	uint64_t boot;
};

/* Append NODE's BOOT to the fenced file: a restart in this run reloads
 * it (the target must still refuse that incarnation). */
static int fenced_save(struct loco_mgr *mgr, uint32_t node, uint64_t boot)
{
	char path[LOCO_PATH_MAX + 32];
	struct fenced_rec r = { .node = node, .boot = boot };
	if (mkdir(mgr->run_dir, 0700) && errno != EEXIST)
		return -errno;
	fenced_path(mgr, path, sizeof(path));
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC |
		      O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	int rc = write(fd, &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : -EIO;
	if (!rc && fsync(fd))
		rc = -errno;
	close(fd);
	return rc;
}

void loco_fenced_load(struct loco_mgr *mgr)
{
	char path[LOCO_PATH_MAX + 32];
	struct fenced_rec r;
	unsigned n = 0;
	fenced_path(mgr, path, sizeof(path));
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	pthread_mutex_lock(&mgr->peer_lock);
	while (read(fd, &r, sizeof(r)) == (ssize_t)sizeof(r))
		if (r.node < LOCO_MAX_NODES && r.boot)
			n += fenced_add(mgr, r.node, r.boot);
	pthread_mutex_unlock(&mgr->peer_lock);
	close(fd);
	if (n)
		loco_info("fence", "node %u: %u fenced incarnations recorded by its "
			  "last life in this run are refused", mgr->id, n);
}

/* ---- the target ---------------------------------------------------------------- */

/* Fence NODE's incarnation BOOT here: record it, then let the transport
 * refuse it and wait (TIMEOUT_MS) for its ops mid-execution. */
static int fence_here(struct loco_mgr *mgr, uint32_t node, uint64_t boot,
		      int timeout_ms)
{
	pthread_mutex_lock(&mgr->peer_lock);
	bool fresh = fenced_add(mgr, node, boot);
	pthread_mutex_unlock(&mgr->peer_lock);
	int rc = fresh ? fenced_save(mgr, node, boot) : 0;
	if (rc)
		loco_warn("fence", "node %u: cannot record the fence of node %u "
			  "in %s: %s (a restart of this node would forget it)",
			  mgr->id, node, mgr->run_dir, loco_strerror(rc));
	if (!mgr->tp_ops->fence)
		return -EOPNOTSUPP;
	rc = mgr->tp_ops->fence(mgr->tp, node, boot, timeout_ms);
	if (fresh && !rc)
		loco_info("fence", "node %u: node %u's incarnation %016llx is "
			  "fenced here", mgr->id, node, (unsigned long long)boot);
	return rc;
}

/* Fence NODE's incarnation BOOT here (0: none named), and the one this
 * node knows as current if that is another (a new incarnation the fencer
 * has not met yet is fenced all the same: the fence is of the node as it
 * is now). *ANY: whether some incarnation was fenced. */
static int fence_node_here(struct loco_mgr *mgr, uint32_t node, uint64_t boot,
			   int timeout_ms, bool *any)
{
	pthread_mutex_lock(&mgr->peer_lock);
	uint64_t cur = mgr->peer_boot[node];
	pthread_mutex_unlock(&mgr->peer_lock);
	int rc = boot ? fence_here(mgr, node, boot, timeout_ms) : 0;
	if (!rc && cur && cur != boot)
		rc = fence_here(mgr, node, cur, timeout_ms);
	*any = boot || cur;
	return rc;
}

void loco_fence_handle(struct loco_mgr *mgr, uint32_t from, const uint8_t *req,
		       size_t len, struct loco_wbuf *reply)
{
	struct loco_rbuf r;
	loco_rbuf_init(&r, req, len);
	uint32_t node = loco_get_u32(&r);
	uint64_t boot = loco_get_u64(&r);
	uint32_t ms = loco_get_u32(&r);
	int rc = loco_rbuf_done(&r);
	char msg[128] = "";
	bool any = false;
	if (!rc && (node >= LOCO_MAX_NODES || !mgr->hosts.node[node].present ||
		    node == mgr->id || ms > INT_MAX)) {
		snprintf(msg, sizeof(msg), "cannot fence node %u (incarnation "
			 "%016llx) at node %u", node, (unsigned long long)boot,
			 mgr->id);
		rc = -EINVAL;
	}
	if (!rc)
		rc = fence_node_here(mgr, node, boot, (int)ms, &any);
	if (rc && !msg[0])
		snprintf(msg, sizeof(msg), "node %u: fencing node %u for node %u: %s",
			 mgr->id, node, from, loco_strerror(rc));
	loco_put_u32(reply, (uint32_t)-rc);
	loco_put_str(reply, msg);
	loco_put_u32(reply, any);
}

/* ---- the fencer ------------------------------------------------------------------ */

/* The nodes a FENCE of NODE goes to (where they are served), but this. */
static uint64_t fence_targets(struct loco_mgr *mgr, uint32_t node)
{
	uint64_t m = 0;
	for (uint32_t i = 0; i <= mgr->hosts.max_id; i++) {
		if (!mgr->hosts.node[i].present || i == node)
			continue;
		uint32_t r = loco_route(mgr, i);
		if (r != mgr->id && r != node)
			m |= UINT64_C(1) << r;
	}
	return m;
}

/* Whether target T, which did not answer a FENCE (RC), is a compute node
 * whose process is gone (nothing listens at its address any more: a
 * connect is refused, whatever the FENCE's own error was): its memory
 * left with it (ucx, verbs: a compute node's arena lives in its
 * process), so nothing of it can execute an op any more. A memory node
 * may come back with its image: it must answer, so the fence waits. */
static bool target_gone(struct loco_mgr *mgr, uint32_t t, int rc)
{
	return rc && mgr->hosts.node[t].role == LOCO_ROLE_COMPUTE &&
	       loco_ctrl_refused(mgr, t);
}

/* The replies' first error (logged with the target's message); *ANY:
 * whether some target fenced an incarnation. */
static int fence_replies(struct loco_mgr *mgr, uint32_t node, uint64_t targets,
			 struct loco_ctrl_reply *rep, bool *any)
{
	int first = 0;
	for (uint64_t m = targets; m; m &= m - 1) {
		uint32_t t = (uint32_t)__builtin_ctzll(m);
		int rc = rep[t].rc;
		char msg[160] = "";
		if (!rc) {
			struct loco_rbuf r;
			loco_rbuf_init(&r, rep[t].p, rep[t].len);
			rc = -(int)loco_get_u32(&r);
			loco_get_str(&r, msg, sizeof(msg));
			*any |= loco_get_u32(&r) != 0;
			if (loco_rbuf_done(&r))
				rc = -LOCO_EPROTO;
		}
		free(rep[t].p);
		if (rc && target_gone(mgr, t, rc))
			continue;
		if (rc == -LOCO_EFENCED && !loco_self_fenced(mgr)) {
			/* Not about us: T's own incarnation is fenced here
			 * (its hello refused), but while it runs its memory
			 * may still execute NODE's ops: wait until T is gone,
			 * as for a target that does not answer. */
			rc = -EAGAIN;
			snprintf(msg, sizeof(msg), "node %u is fenced itself "
				 "and not gone yet", t);
		}
		if (rc && !first)
			first = rc;
		if (rc)
			loco_warn("fence", "node %u: fencing node %u at node %u: %s%s%s",
				  mgr->id, node, t, loco_strerror(rc),
				  msg[0] ? ": " : "", msg);
	}
	return first;
}

/* The compute nodes of TARGETS that have run (this node knows an
 * incarnation of each, from a hello): a connect one of them refuses
 * says its process is gone (target_gone), not that it is still
 * starting, so the FENCE is not retried at it until the timeout. With
 * two dead clients, each fence of one waited the whole timeout for the
 * other (2 s each in loco-rtx-transfer --reclaim-dead on ucx-tcp). */
static uint64_t targets_ran(struct loco_mgr *mgr, uint64_t targets)
{
	uint64_t ran = 0;
	pthread_mutex_lock(&mgr->peer_lock);
	for (uint64_t m = targets; m; m &= m - 1) {
		uint32_t t = (uint32_t)__builtin_ctzll(m);
		if (mgr->hosts.node[t].role == LOCO_ROLE_COMPUTE &&
		    mgr->peer_boot[t])
			ran |= UINT64_C(1) << t;
	}
	pthread_mutex_unlock(&mgr->peer_lock);
	return ran;
}

/* Fence NODE's BOOT at TARGETS by FENCE messages, and here (W: the
 * message, consumed). */
static int fence_remote(struct loco_mgr *mgr, uint32_t node, uint64_t boot,
			uint64_t targets, struct loco_wbuf *w, int timeout_ms,
			bool *any)
{
	struct loco_ctrl_reply rep[LOCO_MAX_NODES];
	int rc = w->err ? w->err : loco_ctrl_multi(mgr, targets,
						   targets_ran(mgr, targets),
						   LOCO_MSG_FENCE, w->p, w->len,
						   LOCO_MSG_FENCE_ACK, rep,
						   timeout_ms);
	loco_wbuf_fini(w);
	if (rc == -ENOMEM)
		return rc;
	int here = fence_node_here(mgr, node, boot, timeout_ms / 2, any);
	rc = fence_replies(mgr, node, targets, rep, any);
	return rc ? rc : here;
}

/* Fence NODE's BOOT at TARGETS and here, each in its fence state in
 * shared memory, by this process alone (shm, shm-weak): no target needs
 * to be alive or running for it. */
static int fence_direct(struct loco_mgr *mgr, uint32_t node, uint64_t boot,
			uint64_t targets, int timeout_ms, bool *any)
{
	int rc = fence_node_here(mgr, node, boot, timeout_ms, any);
	for (uint64_t m = targets; m && !rc; m &= m - 1) {
		uint32_t t = (uint32_t)__builtin_ctzll(m);
		rc = mgr->tp_ops->fence_at(mgr->tp, t, node, boot, timeout_ms);
		if (rc)
			loco_warn("fence", "node %u: fencing node %u at node %u: %s",
				  mgr->id, node, t, loco_strerror(rc));
	}
	return rc;
}

int loco_fence_node(struct loco_mgr *mgr, uint32_t node, int timeout_ms)
{
	if (node >= LOCO_MAX_NODES || !mgr->hosts.node[node].present ||
	    node == mgr->id)
		return -EINVAL;
	if (loco_self_fenced(mgr))
		return -LOCO_EFENCED;
	if (timeout_ms < 0)
		timeout_ms = mgr->opts.timeout_ms;
	pthread_mutex_lock(&mgr->peer_lock);
	uint64_t boot = mgr->peer_boot[node];
	pthread_mutex_unlock(&mgr->peer_lock);
	pthread_mutex_lock(&mgr->fence_lock);
	/* The targets wait for ops mid-execution half the time, so that
	 * their answer still arrives in time. */
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_u32(&w, node);
	loco_put_u64(&w, boot);
	loco_put_u32(&w, (uint32_t)timeout_ms / 2);
	uint64_t targets = fence_targets(mgr, node);
	uint64_t t0 = loco_now_ns();
	bool any = false;
	int rc;
	/* -EOPNOTSUPP from fence_direct: this node's transport has no fence
	 * state in shared memory after all (ucx-sm with LOCO_UCX_RMA=am). */
	rc = boot && mgr->tp_ops->fence_at ?
	     fence_direct(mgr, node, boot, targets, timeout_ms, &any) : -EOPNOTSUPP;
	if (rc != -EOPNOTSUPP) {
		loco_wbuf_fini(&w);
	} else {
		any = false;
		rc = fence_remote(mgr, node, boot, targets, &w, timeout_ms, &any);
		if (rc == -ENOMEM) {
			pthread_mutex_unlock(&mgr->fence_lock);
			return rc;
		}
	}
	/* No node has met NODE: nothing of it can execute anywhere yet, but
	 * nothing would refuse its first hello either. */
	if (!rc && !any)
		rc = -ENOTCONN;
	if (!rc && mgr->fence_done[node] != boot) {
		mgr->fence_done[node] = boot;
		loco_info("fence", "node %u fenced node %u (incarnation %016llx) at "
			  "%d nodes in %llu us", mgr->id, node,
			  (unsigned long long)boot, __builtin_popcountll(targets) + 1,
			  (unsigned long long)(loco_now_ns() - t0) / 1000);
	}
	pthread_mutex_unlock(&mgr->fence_lock);
	return rc;
}
