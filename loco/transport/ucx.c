/* SPDX-License-Identifier: MIT */
/* ucx transport: UCX's UCP (libucp, loaded at run time) over whatever
 * UCX_TLS selects: TCP, shared memory, RDMA. Design: docs/ucx.md.
 *
 * - One UCP context per manager; the arena is ucp_mem_map'd with
 *   UCP_MEM_MAP_ALLOCATE (UCX allocates it, as shared memory where UCX_TLS
 *   offers sm, so that peers on the host reach it one-sidedly) and its
 *   rkey is packed once into the arena descriptor. Each peer gets a
 *   descriptor of its own, with the credential its incarnation alone
 *   gets (ucx_arena_desc_for; checked by ucx_am.c).
 * - A target worker per node: every peer's endpoints connect to its
 *   address (in the descriptor too); the progress thread progresses it.
 * - READ, WRITE and atomics: UCX's RMA and atomics (one-sided on shared
 *   memory and RDMA), or, where UCX_TLS is TCP, loco's own active
 *   messages executed by the target's handler (ucx_am.c: UCX 1.13's own
 *   emulation over TCP can abort the target when a requester dies).
 * - A worker per application thread (the CQ) and an endpoint per (thread,
 *   peer) with the peer's rkey unpacked on it (the QP).
 * - The model's per-QP order (docs/ordering.md): a ucp_worker_fence
 *   between any two operations of a thread; a zero-length READ and a
 *   FLUSH are a ucp_ep_flush_nbx, which completes once every earlier
 *   operation of the endpoint is complete at the target (with messages:
 *   nothing to send, they retire after every earlier request's reply).
 * - Names: "ucx" takes UCX_TLS from the environment; "ucx-tcp" and
 *   "ucx-sm" fix it (and a cluster whose nodes name different ones is
 *   refused at HELLO, as for any two transports). */
#include "loco/transport/ucx_int.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <loco/error.h>
#include <loco/log.h>

#define UCX_POLL_ROUNDS 4       /* ucp_worker_progress calls per poll */
#define UCX_CLOSE_MS 1000       /* bound of an endpoint close */
#define UCX_MIB(x) ((x) >> 20)
/* Allocation methods for the arena, all of which hand out zeroed memory:
 * UCX's default list ends in "md:*" and "heap", which need not. */
#define UCX_ALLOC_PRIO "md:sysv,md:posix,huge,thp,mmap"
/* UCX's keepalive period: how soon an endpoint to a dead process fails
 * where no connection closes to say so (shared memory: UCX checks the
 * peer's pid). UCX's default is 20 s; a loco wait gives up after 10. */
#define UCX_KEEPALIVE "1s"

/* ---- small helpers ------------------------------------------------------ */

uint64_t ucx_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct timespec ucx_deadline(clockid_t clock, int ms)
{
	struct timespec t;
	clock_gettime(clock, &t);
	uint64_t ns = (uint64_t)t.tv_nsec + (uint64_t)(ms > 0 ? ms : 0) * 1000000;
	t.tv_sec += (time_t)(ns / 1000000000);
	t.tv_nsec = (long)(ns % 1000000000);
	return t;
}

int ucx_errno(ucs_status_t st)
{
	switch (st) {
	case UCS_OK: return 0;
	case UCS_ERR_NO_RESOURCE: return -EAGAIN;
	case UCS_ERR_NO_MEMORY: return -ENOMEM;
	case UCS_ERR_INVALID_PARAM: return -EINVAL;
	case UCS_ERR_UNREACHABLE: return -EHOSTUNREACH;
	case UCS_ERR_MESSAGE_TRUNCATED: return -EMSGSIZE;
	case UCS_ERR_NO_DEVICE: return -ENODEV;
	case UCS_ERR_BUSY: return -EBUSY;
	case UCS_ERR_CANCELED: return -ECANCELED;
	case UCS_ERR_TIMED_OUT: return -ETIMEDOUT;
	/* UCX's verdict on an endpoint whose peer went away (TCP: the
	 * connection closed; keepalive: the process is gone). */
	case UCS_ERR_ENDPOINT_TIMEOUT: return -ECONNRESET;
	case UCS_ERR_UNSUPPORTED:
	case UCS_ERR_NOT_IMPLEMENTED: return -EOPNOTSUPP;
	case UCS_ERR_REJECTED: return -ECONNREFUSED;
	case UCS_ERR_NOT_CONNECTED: return -ENOTCONN;
	case UCS_ERR_CONNECTION_RESET: return -ECONNRESET;
	default:
		return UCS_IS_LINK_ERROR(st) ? -ENETDOWN : -EIO;
	}
}

/* -LOCO_EDOWN where UCX says the peer went away (its endpoint closed, the
 * connection reset, keepalive missed, the link lost), else ucx_errno. */
static int peer_errno(ucs_status_t st)
{
	if (st == UCS_ERR_ENDPOINT_TIMEOUT || st == UCS_ERR_CONNECTION_RESET ||
	    UCS_IS_ENDPOINT_ERROR(st) || UCS_IS_LINK_ERROR(st))
		return -LOCO_EDOWN;
	return ucx_errno(st);
}

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

/* The UCX_TLS in force: the transport name's, else the environment's. */
static const char *tls_of(const struct loco_tp *tp)
{
	return tp->tls ? tp->tls : env_or("UCX_TLS", "all");
}

/* Whether UCX_TLS may select UCX's shared-memory transports (mm). */
static bool tls_may_use_mm(const char *tls)
{
	static const char *const mm_names[] = { "all", "sm", "shm", "mm",
						"posix", "sysv" };
	if (tls[0] == '^')
		return true;
	for (size_t i = 0; i < sizeof(mm_names) / sizeof(mm_names[0]); i++) {
		size_t n = strlen(mm_names[i]);
		for (const char *p = tls; (p = strstr(p, mm_names[i])); p += n)
			if ((p == tls || p[-1] == ',') && (p[n] == ',' || !p[n]))
				return true;
	}
	return false;
}

bool ucx_tls_only(const char *tls, const char *const *names)
{
	for (const char *p = tls; *p;) {
		size_t n = strcspn(p, ",");
		bool known = false;
		for (const char *const *q = names; *q && !known; q++)
			known = strlen(*q) == n && !strncmp(p, *q, n);
		if (!known)
			return false;
		p += n + (p[n] == ',');
	}
	return true;
}

/* How READ, WRITE and atomics execute: by loco's own messages (ucx_am.c)
 * where UCX_TLS is TCP only: UCX 1.13 emulates RMA and atomics there in a
 * way a dying peer can abort the target process with. By UCX's RMA and
 * atomics otherwise: one-sided on shared memory and RDMA (messages over
 * shared memory would go through the target's receive FIFO, which a peer
 * killed while writing into it leaves stuck). LOCO_UCX_RMA=am|ucx
 * overrides (docs/ucx.md). */
static int rma_mode(struct loco_tp *tp)
{
	static const char *const tcp[] = { "tcp", "self", NULL };
	const char *m = getenv("LOCO_UCX_RMA");
	if (!m || !*m)
		tp->am = ucx_tls_only(tls_of(tp), tcp);
	else if (!strcmp(m, "am") || !strcmp(m, "ucx"))
		tp->am = !strcmp(m, "am");
	else {
		loco_err(UCX_LOG, "LOCO_UCX_RMA=%s: say am (loco's messages) or ucx "
			 "(UCX's RMA and atomics)", m);
		return -EINVAL;
	}
	return 0;
}

/* ---- open / close ------------------------------------------------------- */

/* UCX's configuration from the environment, with UCX_TLS fixed by the
 * transport's name (ucx-tcp, ucx-sm) and three defaults of our own (each
 * only where the user set nothing): shared-memory transports that can
 * report a dead peer (endpoints use peer error handling, which UCX's mm
 * transports otherwise refuse), an arena allocated zeroed, and a
 * keepalive that notices a dead peer within a second or two. */
static int config_get(const struct loco_tp *tp, ucp_config_t **out)
{
	const struct ucx_api *api = tp->api;
	ucp_config_t *c = NULL;
	ucs_status_t st = api->config_read(NULL, NULL, &c);
	if (st != UCS_OK) {
		loco_err(UCX_LOG, "reading UCX's configuration (UCX_* variables): %s",
			 api->status_string(st));
		return ucx_errno(st);
	}
	if (tp->tls)
		st = api->config_modify(c, "TLS", tp->tls);
	if (st == UCS_OK && tls_may_use_mm(tls_of(tp)) &&
	    !getenv("UCX_MM_ERROR_HANDLING") && !getenv("UCX_POSIX_ERROR_HANDLING") &&
	    !getenv("UCX_SYSV_ERROR_HANDLING"))
		st = api->config_modify(c, "MM_ERROR_HANDLING", "y");
	if (st == UCS_OK && !getenv("UCX_ALLOC_PRIO"))
		st = api->config_modify(c, "ALLOC_PRIO", UCX_ALLOC_PRIO);
	if (st == UCS_OK && !getenv("UCX_KEEPALIVE_INTERVAL"))
		st = api->config_modify(c, "KEEPALIVE_INTERVAL", UCX_KEEPALIVE);
	if (st != UCS_OK) {
		loco_err(UCX_LOG, "setting UCX's configuration: %s", api->status_string(st));
		api->config_release(c);
		return ucx_errno(st);
	}
	*out = c;
	return 0;
}

static int context_open(struct loco_tp *tp)
{
	const struct ucx_api *api = tp->api;
	ucp_config_t *c = NULL;
	int rc = config_get(tp, &c);
	if (rc)
		return rc;
	ucp_params_t p = {
		.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
			      UCP_PARAM_FIELD_NAME,
		.features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_WAKEUP |
			    (tp->am ? UCP_FEATURE_AM : 0),
		.mt_workers_shared = 1,
		.name = "loco",
	};
	ucs_status_t st = api->init_version(UCP_API_MAJOR, UCP_API_MINOR, &p, c, &tp->ctx);
	api->config_release(c);
	if (st != UCS_OK) {
		loco_err(UCX_LOG, "UCX found no usable transport (UCX_TLS=%s, "
			 "UCX_NET_DEVICES=%s): ucp_init: %s; `ucx_info -d` lists what "
			 "this host offers", tls_of(tp),
			 env_or("UCX_NET_DEVICES", "all"), api->status_string(st));
		return st == UCS_ERR_NO_MEMORY ? -ENOMEM : -ENODEV;
	}
	return 0;
}

static int worker_new(struct loco_tp *tp, ucp_worker_h *out)
{
	ucp_worker_params_t wp = {
		.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
		.thread_mode = UCS_THREAD_MODE_SERIALIZED,
	};
	ucs_status_t st = tp->api->worker_create(tp->ctx, &wp, out);
	if (st != UCS_OK) {
		loco_err(UCX_LOG, "ucp_worker_create: %s (UCX_TLS=%s)",
			 tp->api->status_string(st), tls_of(tp));
		return ucx_errno(st) ? ucx_errno(st) : -EIO;
	}
	return 0;
}

static int target_open(struct loco_tp *tp)
{
	int rc = worker_new(tp, &tp->target);
	if (rc)
		return rc;
	ucs_status_t st = tp->api->worker_get_address(tp->target, &tp->target_addr,
						      &tp->target_addr_len);
	if (st != UCS_OK) {
		loco_err(UCX_LOG, "ucp_worker_get_address: %s", tp->api->status_string(st));
		tp->api->worker_destroy(tp->target);
		return ucx_errno(st);
	}
	rc = ucx_am_target_init(tp);
	if (rc) {
		tp->api->worker_release_address(tp->target, tp->target_addr);
		tp->api->worker_destroy(tp->target);
		return rc;
	}
	if (tp->target_addr_len > UCX_ADDR_MAX) {
		loco_err(UCX_LOG, "this node's UCP worker address has %zu bytes, loco's "
			 "descriptor carries %d: select fewer transports or devices "
			 "(UCX_TLS, UCX_NET_DEVICES)", tp->target_addr_len, UCX_ADDR_MAX);
		tp->api->worker_release_address(tp->target, tp->target_addr);
		tp->api->worker_destroy(tp->target);
		return -EMSGSIZE;
	}
	return 0;
}

static void target_close(struct loco_tp *tp)
{
	tp->api->worker_release_address(tp->target, tp->target_addr);
	tp->api->worker_destroy(tp->target);
}

/* A durable arena is the shared mapping of its image (durable.h), as on
 * verbs: a placed WRITE is in the image's page cache (or, on a DAX file
 * system, the persistence domain itself), which survives the node's
 * process; persist and a clean stop msync it. The FLUSH a peer sends is a
 * ucp_ep_flush_nbx and needs no code here. */
static int arena_durable(struct loco_tp *tp, const struct loco_tp_config *cfg)
{
	int rc = loco_dimg_arena_open(cfg, UCX_LOG, &tp->img);
	if (rc)
		return rc;
	tp->durable = true;
	return 0;
}

static void arena_durable_close(struct loco_tp *tp)
{
	if (!tp->durable)
		return;
	if (msync(tp->img.map, tp->img.len, MS_SYNC))
		loco_err(UCX_LOG, "msync of the durable arena: %s", strerror(errno));
	loco_dimg_close(&tp->img);
}

/* ucp_mem_map the arena: allocated by UCX (zeroed: UCX_ALLOC_PRIO), or a
 * durable arena's image mapping, registered. */
static int arena_map(struct loco_tp *tp, uint64_t bytes)
{
	const struct ucx_api *api = tp->api;
	ucp_mem_map_params_t mp = {
		.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
			      UCP_MEM_MAP_PARAM_FIELD_FLAGS,
		.address = tp->durable ? tp->img.map : NULL,
		.length = bytes,
		.flags = tp->durable ? 0 : UCP_MEM_MAP_ALLOCATE,
	};
	ucs_status_t st = api->mem_map(tp->ctx, &mp, &tp->arena_memh);
	if (st != UCS_OK) {
		loco_err(UCX_LOG, "ucp_mem_map of the %" PRIu64 " MiB arena: %s", UCX_MIB(bytes),
			 api->status_string(st));
		return ucx_errno(st);
	}
	ucp_mem_attr_t ma = { .field_mask = UCP_MEM_ATTR_FIELD_ADDRESS |
					    UCP_MEM_ATTR_FIELD_LENGTH };
	st = api->mem_query(tp->arena_memh, &ma);
	if (st == UCS_OK && ma.length < bytes)
		st = UCS_ERR_NO_MEMORY;
	if (st == UCS_OK)
		st = api->rkey_pack(tp->ctx, tp->arena_memh, &tp->rkey_buf, &tp->rkey_len);
	if (st == UCS_OK && tp->rkey_len > UCX_RKEY_MAX) {
		api->rkey_buffer_release(tp->rkey_buf);
		loco_err(UCX_LOG, "the arena's packed rkey has %zu bytes, loco's descriptor "
			 "carries %d", tp->rkey_len, UCX_RKEY_MAX);
		api->mem_unmap(tp->ctx, tp->arena_memh);
		return -EMSGSIZE;
	}
	if (st != UCS_OK) {
		loco_err(UCX_LOG, "arena: ucp_mem_query / ucp_rkey_pack: %s",
			 api->status_string(st));
		api->mem_unmap(tp->ctx, tp->arena_memh);
		return ucx_errno(st);
	}
	tp->arena = ma.address;
	tp->arena_len = bytes;
	return 0;
}

/* Draw the secret the credentials are hashed with (ucx_cred): a new one
 * with every arena, so a node's restart invalidates what its peers had. */
static int secret_draw(struct loco_tp *tp)
{
	if (getrandom(tp->secret, sizeof(tp->secret), 0) != (ssize_t)sizeof(tp->secret)) {
		int rc = -errno;
		loco_err(UCX_LOG, "getrandom for the arena's secret: %s", strerror(errno));
		return rc ? rc : -EIO;
	}
	return 0;
}

static int arena_open(struct loco_tp *tp, const struct loco_tp_config *cfg)
{
	int rc = secret_draw(tp);
	if (!rc)
		rc = cfg->durable_dir ? arena_durable(tp, cfg) : 0;
	if (!rc && (rc = arena_map(tp, cfg->arena_bytes)))
		arena_durable_close(tp);
	return rc;
}

static void arena_close(struct loco_tp *tp)
{
	tp->api->rkey_buffer_release(tp->rkey_buf);
	tp->api->mem_unmap(tp->ctx, tp->arena_memh);
	arena_durable_close(tp);
}

static int config_check(const struct loco_tp_config *cfg)
{
	if (!cfg->hosts || cfg->node_id >= LOCO_MAX_NODES ||
	    !cfg->hosts->node[cfg->node_id].present || !cfg->arena_bytes) {
		loco_err(UCX_LOG, "open: node %u is not in the hosts file or the arena is empty",
			 cfg->node_id);
		return -EINVAL;
	}
	return 0;
}

static struct loco_tp *tp_alloc(const struct loco_tp_config *cfg,
				const struct ucx_api *api, const char *tls)
{
	struct loco_tp *tp = calloc(1, sizeof(*tp));
	if (!tp)
		return NULL;
	tp->api = api;
	tp->tls = tls;
	tp->self = cfg->node_id;
	tp->incarnation = cfg->incarnation;
	const char *stall = getenv("LOCO_UCX_STALL_IN_EXEC");
	if (stall && sscanf(stall, "%" SCNu64 ":%u", &tp->stall_at, &tp->stall_ms) != 2)
		tp->stall_at = 0;
	tp->hosts = cfg->hosts;
	tp->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 10000;
	tp->wake_fd = tp->epoll_fd = -1;
	pthread_mutex_init(&tp->peer_lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&tp->peer_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&tp->cq_lock, NULL);
	pthread_mutex_init(&tp->target_lock, NULL);
	return tp;
}

static void tp_free(struct loco_tp *tp)
{
	pthread_mutex_destroy(&tp->peer_lock);
	pthread_cond_destroy(&tp->peer_cond);
	pthread_mutex_destroy(&tp->cq_lock);
	pthread_mutex_destroy(&tp->target_lock);
	free(tp->am_copy);
	free(tp);
}

/* Open with UCX_TLS fixed to TLS (NULL: the environment's). */
static int open_tls(const struct loco_tp_config *cfg, const char *tls,
		    struct loco_tp **out)
{
	const struct ucx_api *api;
	int rc = config_check(cfg);
	if (!rc)
		rc = ucx_api_get(&api);
	if (rc)
		return rc;
	struct loco_tp *tp = tp_alloc(cfg, api, tls);
	if (!tp)
		return -ENOMEM;
	rc = rma_mode(tp);
	if (!rc)
		rc = ucx_guard_open(tp, cfg, tls_of(tp));
	if (!rc)
		rc = context_open(tp);
	if (rc)
		goto free_tp;
	rc = target_open(tp);
	if (rc)
		goto cleanup;
	rc = arena_open(tp, cfg);
	if (rc)
		goto close_target;
	rc = ucx_progress_start(tp);
	if (rc)
		goto close_arena;
	loco_info(UCX_LOG, "UCX %s (%s), UCX_TLS=%s, RMA by %s: %sarena %" PRIu64
		  " MiB, worker address %zu bytes, rkey %zu bytes",
		  api->get_version_string(), api->path, tls_of(tp),
		  tp->am ? "loco's messages" : "UCX", tp->durable ? "durable " : "",
		  UCX_MIB(tp->arena_len), tp->target_addr_len, tp->rkey_len);
	*out = tp;
	return 0;
close_arena:
	arena_close(tp);
close_target:
	target_close(tp);
cleanup:
	api->cleanup(tp->ctx);
free_tp:
	ucx_guard_close(tp);
	tp_free(tp);
	return rc;
}

static int ucx_open(const struct loco_tp_config *cfg, struct loco_tp **out)
{
	return open_tls(cfg, NULL, out);
}

static int ucx_open_tcp(const struct loco_tp_config *cfg, struct loco_tp **out)
{
	return open_tls(cfg, "tcp", out);
}

static int ucx_open_sm(const struct loco_tp_config *cfg, struct loco_tp **out)
{
	return open_tls(cfg, "sm", out);
}

/* Caller: every QP and CQ of TP destroyed first. */
static void ucx_close(struct loco_tp *tp)
{
	ucx_progress_stop(tp);
	arena_close(tp);
	target_close(tp);
	tp->api->cleanup(tp->ctx);
	ucx_guard_close(tp);
	tp_free(tp);
}

static void *ucx_arena_base(struct loco_tp *tp)
{
	return tp->arena;
}

static uint64_t ucx_arena_len(struct loco_tp *tp)
{
	return tp->arena_len;
}

/* The descriptor for incarnation INCARNATION of node PEER (0: not known
 * yet, no credential): this node's arena and address, and the credential
 * that incarnation alone is given (ucx_cred). */
static int ucx_arena_desc_for(struct loco_tp *tp, uint32_t peer, uint64_t incarnation,
			      void *desc, size_t *len)
{
	struct ucx_desc *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->node = tp->self;
	d->flags = tp->am ? UCX_DESC_F_AM : 0;
	d->for_node = peer;
	d->arena_addr = (uintptr_t)tp->arena;
	d->arena_len = tp->arena_len;
	d->for_incarnation = incarnation;
	if (incarnation)
		ucx_cred(tp, peer, incarnation, d->cred);
	d->rkey_len = (uint16_t)tp->rkey_len;
	memcpy(d->rkey, tp->rkey_buf, tp->rkey_len);
	d->addr_len = (uint16_t)tp->target_addr_len;
	memcpy(d->addr, tp->target_addr, tp->target_addr_len);
	int rc = ucx_desc_pack(d, desc, *len, len);
	free(d);
	return rc;
}

/* This node's own descriptor (its QPs to itself). */
static int ucx_arena_desc(struct loco_tp *tp, void *desc, size_t *len)
{
	return ucx_arena_desc_for(tp, tp->self, tp->incarnation, desc, len);
}

/* Whether D carries a credential for this process (tp->self and its
 * incarnation), or needs none (UCX's RMA: no message of loco's carries
 * it); peer_lock held, or D local. */
static bool cred_mine(const struct loco_tp *tp, const struct ucx_desc *d)
{
	return !tp->am || (!ucx_cred_zero(d->cred) && d->for_node == tp->self &&
			   d->for_incarnation == tp->incarnation);
}

/* Log why DESC (LEN bytes) from PEER is refused (RC from unpacking it). */
static void desc_refused(const struct loco_tp *tp, uint32_t peer, const void *desc,
			 size_t len, uint64_t arena_len, int rc, const struct ucx_desc *d)
{
	unsigned v = ucx_desc_version(desc, len);
	if (v && v != UCX_DESC_VERSION)
		loco_err(UCX_LOG, "node %u sent a version-%u ucx arena descriptor, this "
			 "node reads version %d (a credential per client and "
			 "incarnation): run the same loco on every node", peer, v,
			 UCX_DESC_VERSION);
	else if (!rc && d->for_node != tp->self)
		loco_err(UCX_LOG, "node %u sent this node (%u) the ucx arena descriptor "
			 "it made for node %u", peer, tp->self, d->for_node);
	else
		loco_err(UCX_LOG, "node %u sent a bad ucx arena descriptor (%zu bytes; "
			 "expected version %d for node %u, arena %" PRIu64 " bytes, no "
			 "device memory)", peer, len, UCX_DESC_VERSION, peer, arena_len);
}

/* Called with the manager's peer lock held (one caller at a time). */
static int ucx_peer_add(struct loco_tp *tp, uint32_t peer, const void *desc,
			size_t len, uint64_t arena_len, uint64_t dm_len)
{
	if (peer >= LOCO_MAX_NODES) {
		loco_err(UCX_LOG, "peer_add: node id %u out of range", peer);
		return -EINVAL;
	}
	struct ucx_desc *d = malloc(sizeof(*d));
	if (!d)
		return -ENOMEM;
	int unpacked = ucx_desc_unpack(desc, len, d);
	int rc = unpacked;
	if (!rc && (d->node != peer || d->arena_len != arena_len || dm_len ||
		    d->for_node != tp->self))
		rc = -LOCO_EPROTO;
	if (rc) {
		desc_refused(tp, peer, desc, len, arena_len, unpacked, d);
	} else if (!(d->flags & UCX_DESC_F_AM) != !tp->am) {
		/* One kind of atomics per arena: a CPU's on the target, or
		 * UCX's (a NIC's on RDMA), never both. */
		loco_err(UCX_LOG, "node %u executes READ, WRITE and atomics by %s, this "
			 "node by %s: give every node the same UCX_TLS (and LOCO_UCX_RMA)",
			 peer, d->flags & UCX_DESC_F_AM ? "loco's messages" : "UCX",
			 tp->am ? "loco's messages" : "UCX");
		rc = -LOCO_ETRANSPORT;
	} else {
		/* Without a credential for this incarnation (its sender did not
		 * know it yet), QPs wait for the next one (ucx_qp_create). */
		pthread_mutex_lock(&tp->peer_lock);
		tp->peer[peer] = *d;
		tp->peer_known[peer] = true;
		pthread_cond_broadcast(&tp->peer_cond);
		pthread_mutex_unlock(&tp->peer_lock);
	}
	free(d);
	return rc;
}

/* No device memory: the core then posts nothing outside the arena. */
static uint64_t ucx_dm_len(struct loco_tp *tp)
{
	(void)tp;
	return 0;
}

static int ucx_dm_zero(struct loco_tp *tp, uint64_t off, uint64_t len)
{
	(void)tp;
	(void)off;
	(void)len;
	return -EOPNOTSUPP;
}

/* msync [OFF, OFF+LEN) of a durable arena's image (0 without one). */
static int ucx_persist(struct loco_tp *tp, uint64_t off, uint64_t len)
{
	struct loco_drange rg = { off, len };
	return tp->durable && len ? loco_dimg_flush(&tp->img, tp->img.map, &rg, 1) : 0;
}

/* The arena is the image and a FLUSH is the target's (a flush of the
 * endpoint): no CPU of this path can copy a range to a third node, so no
 * mirrors (docs/ordering.md, "Mirrors"). */
static int ucx_mirror_set(struct loco_tp *tp, uint32_t peer)
{
	(void)tp;
	(void)peer;
	return -EOPNOTSUPP;
}

static int ucx_take_over(struct loco_tp *tp, uint32_t peer)
{
	(void)tp;
	(void)peer;
	return -EOPNOTSUPP;
}

/* ---- requests ----------------------------------------------------------- */

static int req_check(void *ctx, void *req, int *status)
{
	const struct ucx_api *api = ctx;
	ucs_status_t st = api->request_check_status(req);
	if (st == UCS_INPROGRESS)
		return 0;
	*status = peer_errno(st);
	return 1;
}

static void req_free(void *ctx, void *req)
{
	const struct ucx_api *api = ctx;
	api->request_free(req);
}

static struct ucx_req_ops req_ops_of(struct loco_tp *tp)
{
	return (struct ucx_req_ops){ .check = req_check, .free = req_free,
				     .ctx = (void *)tp->api };
}

/* Progress CQ's worker until REQ (NULL: done at once; an error pointer:
 * failed at once) completes, at most MS milliseconds; cq->lock held.
 * Returns 0, -errno from UCX, or -ETIMEDOUT (REQ then freed unfinished:
 * UCX completes it on its own). */
static int req_wait(struct loco_tp_cq *cq, void *req, int ms)
{
	const struct ucx_api *api = cq->tp->api;
	if (!req)
		return 0;
	if (UCS_PTR_IS_ERR(req))
		return ucx_errno(UCS_PTR_STATUS(req));
	uint64_t deadline = ucx_now_ns() + (uint64_t)ms * 1000000u;
	ucs_status_t st;
	while ((st = api->request_check_status(req)) == UCS_INPROGRESS) {
		if (!api->worker_progress(cq->worker)) {
			if (ucx_now_ns() > deadline)
				break;
			sched_yield();
		}
	}
	api->request_free(req);
	return st == UCS_INPROGRESS ? -ETIMEDOUT : ucx_errno(st);
}

/* ---- completion queues -------------------------------------------------- */

static int ucx_cq_create(struct loco_tp *tp, struct loco_tp_cq **out)
{
	struct loco_tp_cq *cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	int rc = worker_new(tp, &cq->worker);
	if (rc) {
		free(cq);
		return rc;
	}
	cq->tp = tp;
	ucx_guard_cq(tp, cq);
	rc = ucx_am_cq_init(cq);
	if (rc) {
		tp->api->worker_destroy(cq->worker);
		free(cq);
		return rc;
	}
	pthread_mutex_init(&cq->lock, NULL);
	atomic_init(&cq->polled_ns, ucx_now_ns());
	atomic_init(&cq->posted_ns, 0);
	atomic_init(&cq->busy, false);
	pthread_mutex_lock(&tp->cq_lock);
	cq->next = tp->cqs;
	tp->cqs = cq;
	pthread_mutex_unlock(&tp->cq_lock);
	*out = cq;
	return 0;
}

/* Caller: the CQ's QPs destroyed first. Once the worker is gone nothing
 * of UCX writes the graves' memory any more. */
static void ucx_cq_destroy(struct loco_tp_cq *cq)
{
	struct loco_tp *tp = cq->tp;
	pthread_mutex_lock(&tp->cq_lock);
	for (struct loco_tp_cq **pp = &tp->cqs; *pp; pp = &(*pp)->next)
		if (*pp == cq) {
			*pp = cq->next;
			break;
		}
	pthread_mutex_unlock(&tp->cq_lock);
	tp->api->worker_destroy(cq->worker);
	while (cq->graves) {
		struct ucx_grave *g = cq->graves;
		cq->graves = g->next;
		free(g->mem);
		free(g);
	}
	pthread_mutex_destroy(&cq->lock);
	free(cq);
}

/* Keep MEM until the worker is destroyed; cq->lock held. If even the
 * record cannot be allocated, MEM leaks (it must not be freed). */
static void grave_add(struct loco_tp_cq *cq, void *mem)
{
	struct ucx_grave *g = malloc(sizeof(*g));
	if (!mem || !g) {
		free(g);
		return;
	}
	g->mem = mem;
	g->next = cq->graves;
	cq->graves = g;
}

/* ---- queue pairs -------------------------------------------------------- */

/* UCX found the endpoint broken (peer died, connection lost): called from
 * a progress of the QP's worker, with cq->lock held. */
static void ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	struct loco_tp_qp *q = arg;
	(void)ep;
	if (q->ep_status)
		return;
	q->ep_status = peer_errno(status) ? peer_errno(status) : -EIO;
	/* Requests lost: an error. None: the peer may just have left (a
	 * cluster's last barrier), and a later post reports the failure. */
	if (ucx_sq_outstanding(&q->sq))
		loco_err(UCX_LOG, "endpoint to node %u failed (%s): its %" PRIu64
			 " outstanding requests fail", q->peer,
			 q->cq->tp->api->status_string(status),
			 ucx_sq_outstanding(&q->sq));
	else
		loco_info(UCX_LOG, "endpoint to node %u closed (%s): the node left or "
			  "the connection broke", q->peer,
			  q->cq->tp->api->status_string(status));
}

/* Wait until PEER's descriptor (known) carries this process's credential,
 * at most tp->timeout_ms: whether it does. peer_lock held. */
static bool cred_wait(struct loco_tp *tp, uint32_t peer)
{
	struct timespec until = ucx_deadline(CLOCK_MONOTONIC, tp->timeout_ms);
	while (!cred_mine(tp, &tp->peer[peer]))
		if (pthread_cond_timedwait(&tp->peer_cond, &tp->peer_lock, &until))
			return cred_mine(tp, &tp->peer[peer]);
	return true;
}

/* PEER's descriptor into OUT, once it carries this process's credential:
 * a descriptor sent before its sender knew this incarnation has none,
 * and the sender says hello again with one a round trip later (ctrl.c). */
static int peer_desc(struct loco_tp *tp, uint32_t peer, struct ucx_desc *out)
{
	if (peer >= LOCO_MAX_NODES || !tp->hosts->node[peer].present) {
		loco_err(UCX_LOG, "qp_create: node %u is not in the hosts file", peer);
		return -EINVAL;
	}
	pthread_mutex_lock(&tp->peer_lock);
	bool known = tp->peer_known[peer];
	bool mine = known && cred_wait(tp, peer);
	if (mine)
		*out = tp->peer[peer];
	pthread_mutex_unlock(&tp->peer_lock);
	if (!known)
		loco_err(UCX_LOG, "qp_create: no arena descriptor from node %u yet", peer);
	else if (!mine)
		loco_err(UCX_LOG, "qp_create: node %u gave no credential to this "
			 "incarnation within %d ms", peer, tp->timeout_ms);
	return !known ? -ENOTCONN : mine ? 0 : -ETIMEDOUT;
}

/* The endpoint to D's target worker and D's rkey on it; cq->lock held. */
static int ep_open(struct loco_tp_qp *q, const struct ucx_desc *d)
{
	const struct ucx_api *api = q->cq->tp->api;
	char name[48];
	snprintf(name, sizeof(name), "loco n%u->n%u", q->cq->tp->self, q->peer);
	ucp_ep_params_t ep = {
		.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
			      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
			      UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_NAME,
		.address = (const ucp_address_t *)d->addr,
		.err_mode = UCP_ERR_HANDLING_MODE_PEER,
		.err_handler = { .cb = ep_failed, .arg = q },
		.name = name,
	};
	ucs_status_t st = api->ep_create(q->cq->worker, &ep, &q->ep);
	if (st != UCS_OK) {
		loco_err(UCX_LOG, "no UCX path to node %u (UCX_TLS=%s): ucp_ep_create: %s", q->peer,
			 tls_of(q->cq->tp), api->status_string(st));
		return ucx_errno(st);
	}
	st = api->ep_rkey_unpack(q->ep, d->rkey, &q->rkey);
	if (st != UCS_OK) {
		loco_err(UCX_LOG, "node %u's rkey: ucp_ep_rkey_unpack: %s", q->peer,
			 api->status_string(st));
		void *r = api->ep_close_nbx(q->ep, &(ucp_request_param_t){
			.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
			.flags = UCP_EP_CLOSE_FLAG_FORCE });
		req_wait(q->cq, r, UCX_CLOSE_MS);
		q->ep = NULL;
		return ucx_errno(st);
	}
	return 0;
}

static int ucx_qp_create(struct loco_tp *tp, struct loco_tp_cq *cq,
			 uint32_t peer, struct loco_tp_qp **out)
{
	struct ucx_desc *d = malloc(sizeof(*d));
	struct loco_tp_qp *q = calloc(1, sizeof(*q));
	int rc = d && q ? peer_desc(tp, peer, d) : -ENOMEM;
	if (!rc)
		rc = ucx_sq_init(&q->sq, peer);
	if (rc) {
		free(d);
		free(q);
		return rc;
	}
	q->cq = cq;
	q->peer = peer;
	rc = ucx_guard_qp(tp, q);
	if (rc) {
		ucx_sq_fini(&q->sq, false);
		free(d);
		free(q);
		return rc;
	}
	q->remote_base = d->arena_addr;
	q->remote_len = d->arena_len;
	memcpy(q->cred, d->cred, sizeof(q->cred));
	pthread_mutex_lock(&cq->lock);
	q->id = cq->next_qp_id++ & ((UINT32_C(1) << (64 - UCX_TOKEN_SEQ_BITS)) - 1);
	rc = ep_open(q, d);
	if (!rc) {
		q->next = cq->qps;
		cq->qps = q;
	}
	pthread_mutex_unlock(&cq->lock);
	free(d);
	if (rc) {
		ucx_sq_fini(&q->sq, false);
		free(q);
		return rc;
	}
	*out = q;
	return 0;
}

/* Close Q's endpoint (FORCE: pending requests are cancelled, none of them
 * executes later); cq->lock held. */
static void ep_close(struct loco_tp_qp *q)
{
	const struct ucx_api *api = q->cq->tp->api;
	if (!q->ep)
		return;
	api->rkey_destroy(q->rkey);
	void *r = api->ep_close_nbx(q->ep, &(ucp_request_param_t){
		.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
		.flags = UCP_EP_CLOSE_FLAG_FORCE });
	int rc = req_wait(q->cq, r, UCX_CLOSE_MS);
	if (rc && rc != -ECONNRESET && rc != -ECANCELED && rc != -LOCO_EDOWN)
		loco_warn(UCX_LOG, "closing the endpoint to node %u: %s", q->peer,
			  loco_strerror(rc));
	q->ep = NULL;
	q->rkey = NULL;
}

/* Wait (bounded) for the orphans UCX still runs, then hand what remains
 * to the CQ's graves; cq->lock held. */
static void qp_bury(struct loco_tp_qp *q)
{
	struct loco_tp_cq *cq = q->cq;
	struct ucx_req_ops ops = req_ops_of(cq->tp);
	uint64_t deadline = ucx_now_ns() + (uint64_t)UCX_CLOSE_MS * 1000000u;
	while (ucx_sq_reap(&q->sq, &ops) && ucx_now_ns() < deadline)
		if (!cq->tp->api->worker_progress(cq->worker))
			sched_yield();
	for (unsigned i = 0; i < q->sq.orphans; i++) {
		cq->tp->api->request_free(q->sq.orphan[i].req);
		grave_add(cq, q->sq.orphan[i].heap);
	}
	grave_add(cq, ucx_sq_fini(&q->sq, q->sq.orphans > 0));
}

/* Caller: the thread that polls the QP's CQ, with no post or poll running. */
static void ucx_qp_destroy(struct loco_tp_qp *q)
{
	struct loco_tp_cq *cq = q->cq;
	struct ucx_req_ops ops = req_ops_of(cq->tp);
	struct loco_cqe drop[32];
	pthread_mutex_lock(&cq->lock);
	ucx_sq_fail(&q->sq, -LOCO_EQP);
	ep_close(q);
	ucx_guard_drop(q);
	while (ucx_sq_outstanding(&q->sq))
		ucx_sq_drain(&q->sq, &ops, drop, 32);
	qp_bury(q);
	ucx_guard_put(q);
	for (struct loco_tp_qp **pp = &cq->qps; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	pthread_mutex_unlock(&cq->lock);
	free(q);
}

/* Stop Q: no request of it executes or touches local memory after this
 * (results are copied out only for requests that completed before; the
 * FORCE close cancels the rest). */
static void ucx_qp_abort(struct loco_tp_qp *q)
{
	pthread_mutex_lock(&q->cq->lock);
	if (q->ep) {
		loco_err(UCX_LOG, "no answer from node %u in time: its requests fail "
			 "and the endpoint is closed", q->peer);
		ucx_sq_fail(&q->sq, -ETIMEDOUT);
		ep_close(q);
		ucx_guard_drop(q);
	}
	pthread_mutex_unlock(&q->cq->lock);
}

/* ---- data path ---------------------------------------------------------- */

/* Issue W (staged into S) on Q's endpoint by UCX's RMA and atomics: the
 * UCX request, NULL if it completed at once, or an error pointer. */
static void *issue(struct loco_tp_qp *q, const struct loco_wr *w,
		   struct ucx_slot *s)
{
	const struct ucx_api *api = q->cq->tp->api;
	uint64_t raddr = q->remote_base + w->remote_off;
	ucp_request_param_t p = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE,
		.memory_type = UCS_MEMORY_TYPE_HOST,
	};
	switch (w->opcode) {
	case LOCO_OP_FLUSH:
		/* Every earlier request complete at the target: placed in its
		 * arena, which on a durable node is its image's mapping. */
		return api->ep_flush_nbx(q->ep, &p);
	case LOCO_OP_READ:
		if (!w->len) /* the fence READ: as a FLUSH */
			return api->ep_flush_nbx(q->ep, &p);
		return api->get_nbx(q->ep, s->buf, w->len, raddr, q->rkey, &p);
	case LOCO_OP_WRITE:
		return api->put_nbx(q->ep, s->buf, w->len, raddr, q->rkey, &p);
	default:
		p.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
		p.datatype = ucp_dt_make_contig(8);
		p.reply_buffer = s->buf + 8;
		return api->atomic_op_nbx(q->ep, w->opcode == LOCO_OP_CAS ?
					  UCP_ATOMIC_OP_CSWAP : UCP_ATOMIC_OP_ADD,
					  s->buf, 1, raddr, q->rkey, &p);
	}
}

static void post_log(const struct loco_tp_qp *q, const struct loco_wr *w,
		     unsigned i, unsigned n, int rc)
{
	static const char *const names[] = { "READ", "WRITE", "CAS", "FAA", "FLUSH" };
	loco_err(UCX_LOG, "node %u: request %u of %u (%s %" PRIu32 " bytes at offset %"
		 PRIu64 ") refused: %s", q->peer, i, n, w->opcode <= LOCO_OP_FLUSH ?
		 names[w->opcode] : "opcode?", w->len, w->remote_off, loco_strerror(rc));
}

/* Issue the N staged requests: as one message of loco's (TCP), or by
 * UCX's RMA with a worker fence before each one that follows another of
 * this thread (the per-QP order of docs/ordering.md); cq->lock held. */
static int issue_all(struct loco_tp_qp *q, const struct loco_wr *wr,
		     unsigned n, uint64_t bhead)
{
	struct loco_tp_cq *cq = q->cq;
	const struct ucx_api *api = cq->tp->api;
	if (cq->tp->am) {
		/* One message: executed in order at the target. */
		int rc = ucx_am_issue(q, wr, n);
		if (rc) {
			post_log(q, &wr[0], 0, n, rc);
			ucx_sq_refused(&q->sq, 0, n, bhead, rc);
			return -LOCO_EQP;
		}
		ucx_sq_commit(&q->sq, n, bhead);
		return 0;
	}
	for (unsigned i = 0; i < n; i++) {
		ucs_status_t st = cq->fence_due ? api->worker_fence(cq->worker) : UCS_OK;
		struct ucx_slot *s = ucx_sq_staged(&q->sq, i);
		void *r = st == UCS_OK ? issue(q, &wr[i], s) :
			  UCS_STATUS_PTR(st);
		if (UCS_PTR_IS_ERR(r)) {
			int rc = ucx_errno(UCS_PTR_STATUS(r));
			post_log(q, &wr[i], i, n, rc);
			ucx_sq_refused(&q->sq, i, n, bhead, rc ? rc : -EIO);
			return -LOCO_EQP;
		}
		s->req = r;
		cq->fence_due = true;
	}
	ucx_sq_commit(&q->sq, n, bhead);
	return 0;
}

static int ucx_post(struct loco_tp_qp *q, const struct loco_wr *wr, unsigned n)
{
	struct loco_tp_cq *cq = q->cq;
	uint64_t bhead;
	if (n == 0)
		return 0;
	pthread_mutex_lock(&cq->lock);
	if (q->ep_status)
		ucx_sq_fail(&q->sq, q->ep_status);
	int rc = ucx_sq_failed(&q->sq) || !q->ep ? -LOCO_EQP :
		 ucx_guard_post(q, wr, n);
	if (!rc)
		rc = ucx_sq_stage(&q->sq, wr, n, q->remote_len, &bhead);
	if (rc && rc != -EAGAIN && rc != -LOCO_EQP && rc != -LOCO_EFENCED)
		post_log(q, &wr[0], 0, n, rc);
	if (!rc)
		rc = issue_all(q, wr, n, bhead);
	if (q->marked)
		ucx_guard_settle(q);
	if (!rc) {
		/* Hints for the progress thread: relaxed, they order nothing. */
		atomic_store_explicit(&cq->posted_ns, ucx_now_ns(), memory_order_relaxed);
		atomic_store_explicit(&cq->busy, true, memory_order_relaxed);
	}
	pthread_mutex_unlock(&cq->lock);
	return rc;
}

static int ucx_poll(struct loco_tp_cq *cq, struct loco_cqe *out, unsigned max)
{
	const struct ucx_api *api = cq->tp->api;
	struct ucx_req_ops ops = req_ops_of(cq->tp);
	unsigned n = 0;
	bool busy = false;
	pthread_mutex_lock(&cq->lock);
	for (unsigned i = 0; i < UCX_POLL_ROUNDS && api->worker_progress(cq->worker); i++)
		;
	/* Serve peers while waiting: their requests to this node need the
	 * target worker progressed, and this thread is on a CPU already. */
	ucx_target_help(cq->tp);
	for (struct loco_tp_qp *q = cq->qps; q; q = q->next) {
		if (q->ep_status)
			ucx_sq_fail(&q->sq, q->ep_status);
		if (n < max)
			n += ucx_sq_drain(&q->sq, &ops, out + n, max - n);
		ucx_guard_settle(q);
		busy |= ucx_sq_outstanding(&q->sq) > 0 || q->marked;
	}
	/* Hints for the progress thread: relaxed, they order nothing. */
	atomic_store_explicit(&cq->polled_ns, ucx_now_ns(), memory_order_relaxed);
	atomic_store_explicit(&cq->busy, busy, memory_order_relaxed);
	pthread_mutex_unlock(&cq->lock);
	return (int)n;
}

/* The fence op (transport.h): loco's messages refuse at the target's
 * handler (ucx_am.c); UCX's RMA on shared memory at the initiator's guard
 * (ucx_guard.c); UCX's RMA in hardware (RDMA) cannot be refused by loco:
 * -EOPNOTSUPP, so loco_fence_node fails and callers wait. */
static int ucx_fence(struct loco_tp *tp, uint32_t peer, uint64_t incarnation,
		     int timeout_ms)
{
	if (tp->am)
		return ucx_am_fence(tp, peer, incarnation, timeout_ms);
	return ucx_guard_fence(tp, tp->self, peer, incarnation, timeout_ms);
}

/* The ops of every name: they differ only in the name and in open. */
#define UCX_OPS(NAME, OPEN, FENCE_AT, FENCED) \
	{                                    \
		.name = NAME,                \
		.open = OPEN,                \
		.close = ucx_close,          \
		.arena_base = ucx_arena_base, \
		.arena_len = ucx_arena_len,  \
		.arena_desc = ucx_arena_desc, \
		.arena_desc_for = ucx_arena_desc_for, \
		.peer_add = ucx_peer_add,    \
		.dm_len = ucx_dm_len,        \
		.dm_zero = ucx_dm_zero,      \
		.persist = ucx_persist,      \
		.mirror_set = ucx_mirror_set, \
		.take_over = ucx_take_over,  \
		.cq_create = ucx_cq_create,  \
		.cq_destroy = ucx_cq_destroy, \
		.qp_create = ucx_qp_create,  \
		.qp_destroy = ucx_qp_destroy, \
		.post = ucx_post,            \
		.poll = ucx_poll,            \
		.qp_abort = ucx_qp_abort,    \
		.fence = ucx_fence,          \
		.fence_at = FENCE_AT,        \
		.fenced_here = FENCED,       \
	}

/* ucx-sm fences at every node itself, in the fence files (a stopped or
 * dead target's memory must refuse too); the others by FENCE messages. */
const struct loco_transport_ops loco_ucx_ops = UCX_OPS("ucx", ucx_open, NULL, NULL);
const struct loco_transport_ops loco_ucx_tcp_ops = UCX_OPS("ucx-tcp", ucx_open_tcp, NULL,
							    NULL);
const struct loco_transport_ops loco_ucx_sm_ops = UCX_OPS("ucx-sm", ucx_open_sm,
							   ucx_guard_fence,
							   ucx_guard_fenced);
