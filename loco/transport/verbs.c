/* SPDX-License-Identifier: MIT */
/* verbs transport: rdma-core (libibverbs + librdmacm), RC queue pairs, one
 * per (application thread, peer). How to run it: docs/verbs.md.
 *
 * - One arena per node, huge pages where available, registered for local
 *   use only; its first LOCO_FENCE_LEN bytes read-only as the fence target
 *   (zero-length READs, FLUSH). Each region the core carves from it (or
 *   from the NIC's device memory) gets a registration of its own with
 *   exactly the remote access it declares (mem_reg), whose rkey travels
 *   with the region's descriptor. Peers learn the arena's address and the
 *   fence rkey from the arena descriptor.
 * - Device, port and address: LOCO_VERBS_DEVICE / _PORT (or rdma_dev /
 *   rdma_port on the node's hosts-file line) when set, else the port
 *   holding the hosts-file address if that is on an RDMA device, else the
 *   first active port with an IP address (verbs_select, verbs_dev.c). The
 *   rdma_cm listener binds to that port's address, which peers learn from
 *   the arena descriptor: the hosts-file address only carries the control
 *   plane and may be on a NIC without RDMA. The GID is chosen from the
 *   port's GID table (verbs_gid_pick) or set with LOCO_VERBS_GID_INDEX or
 *   gid_index. The environment wins over the file.
 * - QPs are connected through rdma_cm (verbs_cm.c); the active side's QP
 *   sends its completions to the thread's CQ, the passive side's QPs only
 *   serve one-sided ops.
 * - post: one chain, one ibv_post_send (doorbell batching); poll: completions
 *   are retired in post order per QP (verbs_wr.c), on the posting thread.
 *
 * Files: this one opens and closes the transport (configuration, device
 * set-up order, peers, the ops table); verbs_dev.c chooses the device and
 * port, verbs_port.c opens them (MTU, GID), verbs_mem.c registers memory
 * (arena, device memory, bounce buffers), verbs_qp.c is the data path (CQs,
 * QPs, post, poll), verbs_wr.c builds work requests and retires
 * completions, verbs_cm.c connects QPs through rdma_cm, verbs_cfg.c parses
 * the configuration and the wire formats. */
#include "loco/transport/verbs_int.h"
#include <hwloc/openfabrics-verbs.h>

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <loco/error.h>
#include <loco/log.h>

#define VERBS_LOG "verbs"

/* ---- small helpers ------------------------------------------------------ */

int64_t verbs_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *verbs_getenv(const char *name)
{
	return getenv(name);
}

/* This node's hosts-file address (TP->ctrl_addr) and rdma_cm port. */
static int verbs_self_resolve(struct loco_tp *tp)
{
	const struct loco_host *h = &tp->hosts->node[tp->self];
	if (verbs_cm_port(h->port, tp->cfg.cm_port_offset, &tp->cm_port) < 0) {
		loco_err(VERBS_LOG, "node %u: port %u + LOCO_VERBS_CM_PORT_OFFSET %u is above 65535",
			 tp->self, h->port, tp->cfg.cm_port_offset);
		return -ERANGE;
	}
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	int r = getaddrinfo(h->host, NULL, &hints, &res);
	if (r) {
		loco_err(VERBS_LOG, "node %u: cannot resolve %s: %s", tp->self, h->host,
			 gai_strerror(r));
		return -EHOSTUNREACH;
	}
	memset(&tp->ctrl_addr, 0, sizeof(tp->ctrl_addr));
	memcpy(&tp->ctrl_addr, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

int verbs_peer_desc(struct loco_tp *tp, uint32_t id, struct verbs_desc *out)
{
	if (id >= LOCO_MAX_NODES)
		return -ENOENT;
	pthread_mutex_lock(&tp->peer_lock);
	bool known = tp->peer_known[id];
	if (known)
		*out = tp->peer[id];
	pthread_mutex_unlock(&tp->peer_lock);
	return known ? 0 : -ENOENT;
}

int verbs_peer_addr(struct loco_tp *tp, uint32_t id, struct sockaddr_storage *out)
{
	struct verbs_desc d;
	int rc = verbs_peer_desc(tp, id, &d);
	if (!rc)
		verbs_desc_sockaddr(&d, out);
	return rc;
}

/* ---- open / close ------------------------------------------------------- */

static int verbs_config_load(const struct loco_tp_config *cfg,
			     struct verbs_config *vc)
{
	char err[VERBS_LABEL_MAX + 256];
	int r = verbs_config_parse_host(verbs_getenv, &cfg->hosts->node[cfg->node_id],
					cfg->hosts->path, vc, err, sizeof(err));
	if (r < 0)
		loco_err(VERBS_LOG, "%s", err);
	return r;
}

static int verbs_config_check(const struct loco_tp_config *cfg)
{
	if (!cfg->hosts || cfg->node_id >= LOCO_MAX_NODES ||
	    !cfg->hosts->node[cfg->node_id].present || !cfg->arena_bytes) {
		loco_err(VERBS_LOG, "open: node %u is not in the hosts file or the arena is empty",
			 cfg->node_id);
		return -EINVAL;
	}
	return 0;
}

static struct loco_tp *verbs_tp_alloc(const struct loco_tp_config *cfg,
				      const struct verbs_config *vc)
{
	struct loco_tp *tp = calloc(1, sizeof(*tp));
	if (!tp)
		return NULL;
	tp->cfg = *vc;
	tp->self = cfg->node_id;
	tp->incarnation = cfg->incarnation;
	tp->hosts = cfg->hosts;
	tp->wake_fd = -1;
	pthread_mutex_init(&tp->pool_lock, NULL);
	pthread_mutex_init(&tp->peer_lock, NULL);
	pthread_mutex_init(&tp->passive_lock, NULL);
	atomic_init(&tp->next_thread, 0);
	return tp;
}

static void verbs_tp_free(struct loco_tp *tp)
{
	pthread_mutex_destroy(&tp->pool_lock);
	pthread_mutex_destroy(&tp->peer_lock);
	pthread_mutex_destroy(&tp->passive_lock);
	free(tp);
}

/* Shared CQ of the passive QPs. They post nothing, so it never receives a
 * completion; each passive QP still reserves 1 send + 1 receive entry,
 * which bounds how many connections this node accepts. */
static int verbs_passive_cq_create(struct loco_tp *tp)
{
	int cqe = VERBS_PASSIVE_CQE;
	if (cqe > tp->attr.orig_attr.max_cqe)
		cqe = tp->attr.orig_attr.max_cqe;
	tp->passive_cq = ibv_create_cq(tp->ctx, cqe, NULL, NULL, 0);
	if (!tp->passive_cq) {
		int e = errno;
		loco_err(VERBS_LOG, "ibv_create_cq (passive, %d entries): %s", cqe, strerror(e));
		return -e;
	}
	tp->passive_max = (uint32_t)cqe / 2;
	return 0;
}

/* Choose and open the device and port, bind the listener to the RDMA
 * address, allocate the PD. */
static int verbs_device_setup(struct loco_tp *tp, struct ibv_device **list,
			      int n)
{
	char name[VERBS_DEVNAME_MAX];
	uint8_t port;
	int r = verbs_cm_open(tp);
	if (r < 0)
		return r;
	r = verbs_device_choose(tp, list, n, name, &port);
	if (r < 0)
		goto close_cm;
	r = verbs_device_open(tp, list, n, name, port);
	if (r < 0)
		goto close_cm;
	r = verbs_port_setup(tp);
	if (!r)
		r = verbs_cm_bind(tp);
	if (r < 0)
		goto close_device;
	tp->pd = ibv_alloc_pd(tp->ctx);
	if (!tp->pd) {
		r = -errno;
		loco_err(VERBS_LOG, "ibv_alloc_pd(%s): %s", tp->devname, strerror(-r));
		goto close_device;
	}
	return 0;
close_device:
	ibv_close_device(tp->ctx);
close_cm:
	verbs_cm_unbind(tp);
	return r;
}

static void verbs_device_teardown(struct loco_tp *tp)
{
	ibv_dealloc_pd(tp->pd);
	ibv_close_device(tp->ctx);
	verbs_cm_unbind(tp);
}

static int verbs_open(const struct loco_tp_config *cfg, struct loco_tp **out)
{
	struct verbs_config vc;
	struct ibv_device **list;
	struct loco_tp *tp;
	int ndev;
	int r = verbs_config_check(cfg);
	if (!r)
		r = verbs_config_load(cfg, &vc);
	if (r < 0)
		return r;
	if (cfg->timeout_ms > 0)  /* the manager's --timeout-ms wins */
		vc.timeout_ms = (uint32_t)cfg->timeout_ms;
	r = verbs_devices_get(&list, &ndev);
	if (r < 0)
		return r;
	tp = verbs_tp_alloc(cfg, &vc);
	r = -ENOMEM;
	if (!tp)
		goto free_list;
	r = verbs_self_resolve(tp);
	if (r < 0)
		goto free_tp;
	r = verbs_device_setup(tp, list, ndev);
	if (r < 0)
		goto free_tp;
	r = verbs_arena_create(tp, cfg);
	if (r < 0)
		goto teardown_device;
	verbs_dm_create(tp);
	r = verbs_passive_cq_create(tp);
	if (r < 0)
		goto destroy_arena;
	r = verbs_cm_listen(tp);
	if (r < 0)
		goto destroy_passive_cq;
	ibv_free_device_list(list);
	*out = tp;
	return 0;
destroy_passive_cq:
	ibv_destroy_cq(tp->passive_cq);
destroy_arena:
	verbs_dm_release(tp);
	verbs_arena_destroy(tp);
teardown_device:
	verbs_device_teardown(tp);
free_tp:
	verbs_tp_free(tp);
free_list:
	ibv_free_device_list(list);
	return r;
}

/* Caller: every QP and CQ of TP destroyed first. */
static void verbs_close(struct loco_tp *tp)
{
	verbs_cm_stop(tp);
	ibv_destroy_cq(tp->passive_cq);
	verbs_pool_destroy(tp);
	verbs_dm_release(tp);
	verbs_arena_destroy(tp);
	verbs_device_teardown(tp);
	verbs_tp_free(tp);
}

static void *verbs_arena_base(struct loco_tp *tp)
{
	return tp->arena;
}

static uint64_t verbs_arena_len(struct loco_tp *tp)
{
	return tp->arena_len;
}

/* *LEN: DESC's capacity in (LOCO_DESC_MAX is plenty), bytes written out. */
static int verbs_arena_desc(struct loco_tp *tp, void *desc, size_t *len)
{
	struct verbs_desc d = {
		.node = tp->self,
		.flags = (tp->atomics ? VERBS_DESC_F_ATOMIC : 0) |
			 (tp->dm ? VERBS_DESC_F_DM : 0),
		.arena_addr = (uintptr_t)tp->arena,
		.arena_len = tp->arena_len,
		.fence_rkey = tp->fence_mr->rkey,
		.dm_len = tp->dm_len,
	};
	int r = verbs_desc_addr_set(&d, (const struct sockaddr *)&tp->addr);
	return r < 0 ? r : verbs_desc_pack(&d, desc, *len, len);
}

static int verbs_peer_add(struct loco_tp *tp, uint32_t peer, const void *desc,
			  size_t len, uint64_t arena_len, uint64_t dm_len)
{
	struct verbs_desc d;
	if (peer >= LOCO_MAX_NODES) {
		loco_err(VERBS_LOG, "peer_add: node id %u out of range", peer);
		return -EINVAL;
	}
	int r = verbs_desc_unpack(desc, len, &d);
	if (r == 0 && (d.node != peer || d.arena_len != arena_len || d.dm_len != dm_len))
		r = -LOCO_EPROTO;
	if (r < 0) {
		loco_err(VERBS_LOG, "node %u sent a bad verbs arena descriptor (%zu bytes; expected "
			 "version %d, %d bytes, for node %u, arena %" PRIu64 " bytes, device "
			 "memory %" PRIu64 " bytes)", peer, len, VERBS_DESC_VERSION,
			 VERBS_DESC_LEN, peer, arena_len, dm_len);
		return r;
	}
	if (!(d.flags & VERBS_DESC_F_ATOMIC))
		loco_warn(VERBS_LOG, "node %u's NIC does not execute RDMA atomics: CAS and FAA to it fail",
			  peer);
	pthread_mutex_lock(&tp->peer_lock);
	tp->peer[peer] = d;
	tp->peer_known[peer] = true;
	pthread_mutex_unlock(&tp->peer_lock);
	return 0;
}

static uint64_t verbs_dm_len(struct loco_tp *tp)
{
	return tp->dm_len;
}

static int verbs_dm_zero(struct loco_tp *tp, uint64_t off, uint64_t len)
{
	if (!tp->dm)
		return -EOPNOTSUPP;
	if ((off | len) % 8 || off > tp->dm_len || len > tp->dm_len - off)
		return -EINVAL;
	int r = verbs_dm_fill_zero(tp, off, len);
	if (r)
		loco_err(VERBS_LOG, "ibv_memcpy_to_dm(offset %" PRIu64 ", %" PRIu64 " bytes): %s",
			 off, len, strerror(r));
	return -r;
}

/* ---- device locality and the ops table ----------------------------------- */

/* The NIC's local CPUs (sysfs local_cpus; every CPU where the kernel
 * does not say). */
static int verbs_local_cpus(struct loco_tp *tp, hwloc_topology_t topo,
			    hwloc_cpuset_t set)
{
	if (hwloc_ibv_get_device_cpuset(topo, tp->ctx->device, set)) {
		int e = errno;
		loco_warn(VERBS_LOG, "local CPUs of %s: %s", tp->devname, strerror(e));
		return -e;
	}
	return 0;
}

/* A verbs FLUSH is executed by the target's NIC (a READ after the
 * WRITEs), which cannot copy the range to a third node: no mirrors. */
static int verbs_mirror_set(struct loco_tp *tp, uint32_t peer)
{
	(void)tp;
	(void)peer;
	return -EOPNOTSUPP;
}

static int verbs_take_over(struct loco_tp *tp, uint32_t peer)
{
	(void)tp;
	(void)peer;
	return -EOPNOTSUPP;
}

const struct loco_transport_ops loco_verbs_ops = {
	.name = "verbs",
	.open = verbs_open,
	.close = verbs_close,
	.arena_base = verbs_arena_base,
	.arena_len = verbs_arena_len,
	.arena_desc = verbs_arena_desc,
	.peer_add = verbs_peer_add,
	.dm_len = verbs_dm_len,
	.dm_zero = verbs_dm_zero,
	.persist = verbs_persist,
	.mirror_set = verbs_mirror_set,
	.take_over = verbs_take_over,
	.mem_reg = verbs_mem_reg,
	.mem_dereg = verbs_mem_dereg,
	.cq_create = verbs_cq_create,
	.cq_destroy = verbs_cq_destroy,
	.qp_create = verbs_qp_create,
	.qp_destroy = verbs_qp_destroy,
	.post = verbs_post,
	.poll = verbs_poll,
	.qp_abort = verbs_qp_abort,
	.fence = verbs_cm_fence,
	.local_cpus = verbs_local_cpus,
};
