/* SPDX-License-Identifier: MIT */
/* verbs transport: rdma-core (libibverbs + librdmacm), RC queue pairs, one
 * per (application thread, peer). How to run it: docs/verbs.md.
 *
 * - One arena per node, huge pages where available, registered once as one
 *   MR. Peers learn its address and rkey from the arena descriptor.
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
 *   are retired in post order per QP (verbs_wr.c), on the posting thread. */
#include "loco/transport/verbs_int.h"
#include <hwloc/openfabrics-verbs.h>

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <loco/error.h>
#include <loco/log.h>

#define VERBS_LOG "verbs"
#define VERBS_POLL_BATCH 32
#define VERBS_MIB(x) ((x) >> 20)

/* ---- small helpers ------------------------------------------------------ */

int64_t verbs_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t verbs_round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
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

/* ---- devices ------------------------------------------------------------ */

static struct ibv_device *verbs_device_find(struct ibv_device **list, int n,
					    const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			return list[i];
	return NULL;
}

/* The device list, or -LOCO_ENODEV with one message: no device at all. */
static int verbs_devices_get(struct ibv_device ***out, int *n)
{
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(n);
	if (!list || *n <= 0) {
		int e = errno ? errno : ENODEV;
		loco_err(VERBS_LOG, "no RDMA device found (ibv_get_device_list: %s); "
			 "use --transport shm on machines without RDMA", strerror(e));
		if (list)
			ibv_free_device_list(list);
		return -LOCO_ENODEV;
	}
	*out = list;
	return 0;
}

static int verbs_device_query(struct loco_tp *tp)
{
	if (ibv_query_device_ex(tp->ctx, NULL, &tp->attr)) {
		memset(&tp->attr, 0, sizeof(tp->attr)); /* no extended attributes: no DM */
		int r = ibv_query_device(tp->ctx, &tp->attr.orig_attr);
		if (r) {
			loco_err(VERBS_LOG, "%s: ibv_query_device: %s", tp->devname, strerror(r));
			return -r;
		}
	}
	if (tp->attr.orig_attr.max_qp_wr < VERBS_SQ_DEPTH) {
		loco_err(VERBS_LOG, "%s: send queues hold %d requests, loco needs %d",
			 tp->devname, tp->attr.orig_attr.max_qp_wr, VERBS_SQ_DEPTH);
		return -EOPNOTSUPP;
	}
	tp->atomics = tp->attr.orig_attr.atomic_cap != IBV_ATOMIC_NONE;
	if (!tp->atomics)
		loco_warn(VERBS_LOG, "%s does not execute RDMA atomics: CAS and FAA will fail with %s",
			  tp->devname, loco_strerror(-EOPNOTSUPP));
	return 0;
}

/* Open device NAME (verbs_device_choose's), port PORT. */
static int verbs_device_open(struct loco_tp *tp, struct ibv_device **list,
			     int n, const char *name, uint8_t port)
{
	struct ibv_device *dev = verbs_device_find(list, n, name);
	tp->ctx = dev ? ibv_open_device(dev) : NULL;
	if (!tp->ctx) {
		int e = dev ? errno : ENODEV;
		loco_err(VERBS_LOG, "ibv_open_device(%s): %s", name, strerror(e));
		return -e;
	}
	snprintf(tp->devname, sizeof(tp->devname), "%s", name);
	tp->port = port;
	int r = verbs_device_query(tp);
	if (r < 0)
		ibv_close_device(tp->ctx);
	return r;
}

/* ---- port: MTU and GID -------------------------------------------------- */

static int verbs_mtu_setup(struct loco_tp *tp, const struct ibv_port_attr *pa)
{
	if (!tp->cfg.mtu) {
		tp->mtu = (uint8_t)pa->active_mtu;
		return 0;
	}
	int e = verbs_mtu_enum(tp->cfg.mtu);
	if (e > (int)pa->active_mtu) {
		loco_err(VERBS_LOG, "MTU %u (LOCO_VERBS_MTU or mtu) exceeds the active MTU %u of %s port %u",
			 tp->cfg.mtu, verbs_mtu_bytes(pa->active_mtu), tp->devname, tp->port);
		return -EINVAL;
	}
	tp->mtu = (uint8_t)e;
	return 0;
}

static uint32_t verbs_gid_type_of(uint32_t ibv_type)
{
	switch (ibv_type) {
	case IBV_GID_TYPE_IB: return VERBS_GID_IB;
	case IBV_GID_TYPE_ROCE_V1: return VERBS_GID_ROCE_V1;
	case IBV_GID_TYPE_ROCE_V2: return VERBS_GID_ROCE_V2;
	default: return VERBS_GID_UNKNOWN;
	}
}

/* Entry I of the port's GID table: 1 valid, 0 empty, -errno. */
static int verbs_gid_query(struct loco_tp *tp, int i, struct verbs_gid *out)
{
	struct ibv_gid_entry e;
	int r = ibv_query_gid_ex(tp->ctx, tp->port, (uint32_t)i, &e, 0);
	if (r == ENODATA)
		return 0;
	if (r == 0) {
		*out = (struct verbs_gid){ .index = (uint32_t)i,
					   .type = verbs_gid_type_of(e.gid_type) };
		memcpy(out->raw, e.gid.raw, 16);
		return 1;
	}
	if (r != EOPNOTSUPP && r != ENOSYS)
		return -r;
	/* Old kernel without the GID table API: no type information. */
	union ibv_gid gid;
	static const uint8_t zero[16];
	if (ibv_query_gid(tp->ctx, tp->port, i, &gid))
		return -errno;
	if (!memcmp(gid.raw, zero, 16))
		return 0;
	*out = (struct verbs_gid){ .index = (uint32_t)i,
				   .type = tp->ethernet ? VERBS_GID_UNKNOWN : VERBS_GID_IB };
	memcpy(out->raw, gid.raw, 16);
	return 1;
}

static void verbs_gid_list(const struct verbs_gid *tab, size_t n, char *buf,
			   size_t len)
{
	size_t used = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < n && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%u (%s)", i ? ", " : "",
					 tab[i].index, verbs_gid_type_name(tab[i].type));
}

static int verbs_gid_choose(struct loco_tp *tp, const struct verbs_gid *tab,
			    size_t n)
{
	uint32_t own = 0;
	if (tp->addr.ss_family == AF_INET)
		own = ((const struct sockaddr_in *)&tp->addr)->sin_addr.s_addr;
	uint32_t idx;
	if (verbs_gid_pick(tab, n, tp->ethernet, tp->cfg.gid_index, own, &idx) < 0) {
		char valid[512];
		verbs_gid_list(tab, n, valid, sizeof(valid));
		if (tp->cfg.gid_index >= 0)
			loco_err(VERBS_LOG, "GID index %d (LOCO_VERBS_GID_INDEX or gid_index) is not a valid GID of %s port %u (valid: %s)",
				 tp->cfg.gid_index, tp->devname, tp->port, n ? valid : "none");
		else
			loco_err(VERBS_LOG, "%s port %u has no valid GID", tp->devname, tp->port);
		return -ENOENT;
	}
	for (size_t i = 0; i < n; i++)
		if (tab[i].index == idx) {
			memcpy(tp->gid.raw, tab[i].raw, 16);
			char text[40];
			verbs_gid_format(tab[i].raw, text);
			loco_info(VERBS_LOG, "%s port %u (%s): GID index %u (%s %s), MTU %u",
				  tp->devname, tp->port, tp->ethernet ? "Ethernet" : "InfiniBand",
				  idx, verbs_gid_type_name(tab[i].type), text,
				  verbs_mtu_bytes(tp->mtu));
		}
	tp->gid_index = idx;
	return 0;
}

static int verbs_gid_setup(struct loco_tp *tp, const struct ibv_port_attr *pa)
{
	int len = pa->gid_tbl_len;
	struct verbs_gid *tab = calloc(len > 0 ? (size_t)len : 1, sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	size_t n = 0;
	int r = 0;
	for (int i = 0; i < len && r >= 0; i++) {
		r = verbs_gid_query(tp, i, &tab[n]);
		n += r > 0;
	}
	if (r < 0)
		loco_err(VERBS_LOG, "%s port %u: reading the GID table: %s", tp->devname,
			 tp->port, strerror(-r));
	else
		r = verbs_gid_choose(tp, tab, n);
	free(tab);
	return r;
}

static int verbs_port_setup(struct loco_tp *tp)
{
	struct ibv_port_attr pa;
	int r = ibv_query_port(tp->ctx, tp->port, &pa);
	if (r) {
		loco_err(VERBS_LOG, "%s port %u: ibv_query_port: %s", tp->devname, tp->port,
			 strerror(r));
		return -r;
	}
	if (pa.state != IBV_PORT_ACTIVE) {
		loco_err(VERBS_LOG, "%s port %u is %s, not active (check the link with ibv_devinfo)",
			 tp->devname, tp->port, ibv_port_state_str(pa.state));
		return -ENETDOWN;
	}
	tp->ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	r = verbs_mtu_setup(tp, &pa);
	return r < 0 ? r : verbs_gid_setup(tp, &pa);
}

/* ---- arena -------------------------------------------------------------- */

/* Huge pages, largest first; normal pages with one warning otherwise.
 * Anonymous mappings are zeroed by the kernel. */
static int verbs_arena_map(struct loco_tp *tp, uint64_t bytes)
{
	uint64_t sizes[2];
	unsigned n = verbs_arena_page_sizes(bytes, sizes);
	for (unsigned i = 0; i < n; i++) {
		size_t len = verbs_round_up(bytes, sizes[i]);
		int huge = (int)__builtin_ctzll(sizes[i]) << MAP_HUGE_SHIFT;
		void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | huge, -1, 0);
		if (p != MAP_FAILED) {
			tp->arena = p;
			tp->map_len = len;
			loco_info(VERBS_LOG, "arena: %" PRIu64 " MiB on %" PRIu64 " MiB huge pages",
				  VERBS_MIB(bytes), VERBS_MIB(sizes[i]));
			return 0;
		}
	}
	size_t len = verbs_round_up(bytes, (uint64_t)sysconf(_SC_PAGESIZE));
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		loco_err(VERBS_LOG, "arena of %" PRIu64 " bytes: mmap: %s", bytes, strerror(e));
		return -e;
	}
	loco_warn(VERBS_LOG, "no huge pages free for the %" PRIu64 " MiB arena (tried %s2 MiB): "
		  "using normal pages, expect more NIC translation misses; see docs/verbs.md",
		  VERBS_MIB(bytes), n > 1 ? "1 GiB, " : "");
	tp->arena = p;
	tp->map_len = len;
	return 0;
}

/* A durable arena is the shared mapping of its image (durable.h): a
 * placed WRITE is in the image's page cache (or, on a DAX file system over
 * persistent memory, in the persistence domain itself), which survives
 * the node's process; the persist op and a clean stop msync it. The
 * FLUSH a peer sends is a READ (verbs_wr.c) and needs no code here. */
static int verbs_arena_durable(struct loco_tp *tp, const struct loco_tp_config *cfg)
{
	if (cfg->power_cut) {
		loco_err(VERBS_LOG, "--power-cut emulates a power cut on the shm "
			 "transports only; on verbs the hardware decides what a "
			 "power cut loses");
		return -EOPNOTSUPP;
	}
	int r = loco_dimg_own(cfg->durable_dir, cfg->arena_bytes, cfg->dsync,
			      cfg->image_id, &tp->img);
	if (!r)
		r = loco_dimg_ready(&tp->img);
	if (r) {
		loco_dimg_close(&tp->img);
		return r;
	}
	tp->durable = true;
	tp->arena = tp->img.map;
	tp->map_len = cfg->arena_bytes;
	return 0;
}

static void verbs_arena_unmap(struct loco_tp *tp)
{
	if (!tp->durable) {
		munmap(tp->arena, tp->map_len);
		return;
	}
	if (msync(tp->img.map, tp->img.len, MS_SYNC))
		loco_err(VERBS_LOG, "msync of the durable arena: %s", strerror(errno));
	loco_dimg_close(&tp->img);
}

static int verbs_arena_create(struct loco_tp *tp, const struct loco_tp_config *cfg)
{
	uint64_t bytes = cfg->arena_bytes;
	int r = cfg->durable_dir ? verbs_arena_durable(tp, cfg) :
		verbs_arena_map(tp, bytes);
	if (r < 0)
		return r;
	tp->arena_len = bytes;
	tp->arena_mr = ibv_reg_mr(tp->pd, tp->arena, bytes,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
				  IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	if (!tp->arena_mr) {
		int e = errno;
		loco_err(VERBS_LOG, "registering the %" PRIu64 " MiB arena: %s%s", VERBS_MIB(bytes),
			 strerror(e), e == ENOMEM || e == EPERM
			 ? " (raise the locked-memory limit: ulimit -l unlimited)" : "");
		verbs_arena_unmap(tp);
		return -e;
	}
	return 0;
}

static void verbs_arena_destroy(struct loco_tp *tp)
{
	int r = ibv_dereg_mr(tp->arena_mr);
	if (r)
		loco_err(VERBS_LOG, "ibv_dereg_mr(arena): %s", strerror(r));
	verbs_arena_unmap(tp);
}

static int verbs_persist(struct loco_tp *tp, uint64_t off, uint64_t len)
{
	struct loco_drange rg = { off, len };
	return tp->durable && len ? loco_dimg_flush(&tp->img, tp->img.map, &rg, 1) : 0;
}

/* ---- device memory (optional) ------------------------------------------- */

static void verbs_dm_release(struct loco_tp *tp)
{
	if (tp->dm_mr)
		ibv_dereg_mr(tp->dm_mr);
	if (tp->dm)
		ibv_free_dm(tp->dm);
	tp->dm_mr = NULL;
	tp->dm = NULL;
	tp->dm_len = 0;
}

/* Zero LEN bytes of the DM at OFF through ibv_memcpy_to_dm: the CPU has
 * no plain access to NIC memory. Returns 0 or a positive errno.
 * Ordering: providers copy with plain stores into the device mapping
 * (write-combined on some), and promise no flush; the seq_cst RMW after
 * the copies (a locked instruction, which drains write-combining buffers)
 * orders them before everything after, in particular before the core
 * publishes the piece (a JOIN or REGION_ACK over TCP), so a peer's first
 * READ or atomic on it sees the zeros. */
static int verbs_dm_fill_zero(struct loco_tp *tp, uint64_t off, uint64_t len)
{
	static const uint8_t zero[4096];
	static _Atomic unsigned drain;
	while (len) {
		size_t n = len < sizeof(zero) ? (size_t)len : sizeof(zero);
		int r = ibv_memcpy_to_dm(tp->dm, off, zero, n);
		if (r)
			return r;
		off += n;
		len -= n;
	}
	atomic_fetch_add_explicit(&drain, 1, memory_order_seq_cst);
	return 0;
}

/* LOCO_VERBS_DM_BYTES of NIC memory, one zero-based MR. Any failure warns
 * and leaves the node without DM: it is an optimisation. */
static void verbs_dm_create(struct loco_tp *tp)
{
	uint64_t len = verbs_round_up(tp->cfg.dm_bytes, 64);
	if (!len)
		return;
	if (len > tp->attr.max_dm_size) {
		loco_warn(VERBS_LOG, "device memory: %s offers %" PRIu64 " bytes, LOCO_VERBS_DM_BYTES "
			  "asks %" PRIu64 ": using host memory only", tp->devname,
			  (uint64_t)tp->attr.max_dm_size, len);
		return;
	}
	struct ibv_alloc_dm_attr a = { .length = len, .log_align_req = 6 };
	const char *step = "ibv_alloc_dm";
	int e = 0;
	tp->dm = ibv_alloc_dm(tp->ctx, &a);
	if (!tp->dm)
		e = errno;
	if (!e) {
		step = "ibv_reg_dm_mr";
		tp->dm_mr = ibv_reg_dm_mr(tp->pd, tp->dm, 0, len,
					  IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE |
					  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
					  IBV_ACCESS_REMOTE_ATOMIC);
		e = tp->dm_mr ? 0 : errno;
	}
	if (!e) {
		/* A probe that host writes reach it: the core zeroes each
		 * piece it hands out (dm_zero), so nothing more here. */
		step = "ibv_memcpy_to_dm";
		e = verbs_dm_fill_zero(tp, 0, 8);
	}
	if (e) {
		loco_warn(VERBS_LOG, "device memory: %s of %" PRIu64 " bytes on %s: %s; using host memory only",
			  step, len, tp->devname, strerror(e));
		verbs_dm_release(tp);
		return;
	}
	tp->dm_len = len;
	loco_info(VERBS_LOG, "device memory: %" PRIu64 " bytes on %s (rkey %#x)", len,
		  tp->devname, tp->dm_mr->rkey);
}

/* ---- bounce buffer pool ------------------------------------------------- */

static int verbs_slab_add(struct loco_tp *tp)
{
	size_t bytes = (size_t)VERBS_SLAB_CHUNKS * VERBS_BOUNCE_BYTES;
	struct verbs_slab *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->mem = aligned_alloc(4096, bytes);
	if (!s->mem)
		goto free_slab;
	s->mr = ibv_reg_mr(tp->pd, s->mem, bytes, IBV_ACCESS_LOCAL_WRITE);
	if (!s->mr) {
		loco_err(VERBS_LOG, "registering bounce buffers: %s", strerror(errno));
		goto free_mem;
	}
	for (unsigned i = 0; i < VERBS_SLAB_CHUNKS; i++) {
		struct verbs_chunk *c = &s->chunk[i];
		c->buf = (uint8_t *)s->mem + (size_t)i * VERBS_BOUNCE_BYTES;
		c->lkey = s->mr->lkey;
		c->next = tp->free_chunks;
		tp->free_chunks = c;
	}
	s->next = tp->slabs;
	tp->slabs = s;
	return 0;
free_mem:
	free(s->mem);
free_slab:
	free(s);
	return -ENOMEM;
}

static int verbs_pool_get(struct loco_tp *tp, struct verbs_chunk **out)
{
	int r = 0;
	pthread_mutex_lock(&tp->pool_lock);
	if (!tp->free_chunks)
		r = verbs_slab_add(tp);
	if (!r) {
		*out = tp->free_chunks;
		tp->free_chunks = (*out)->next;
	}
	pthread_mutex_unlock(&tp->pool_lock);
	return r;
}

static void verbs_pool_put(struct loco_tp *tp, struct verbs_chunk *c)
{
	pthread_mutex_lock(&tp->pool_lock);
	c->next = tp->free_chunks;
	tp->free_chunks = c;
	pthread_mutex_unlock(&tp->pool_lock);
}

static void verbs_pool_destroy(struct loco_tp *tp)
{
	while (tp->slabs) {
		struct verbs_slab *s = tp->slabs;
		tp->slabs = s->next;
		ibv_dereg_mr(s->mr);
		free(s->mem);
		free(s);
	}
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
	tp->hosts = cfg->hosts;
	tp->wake_fd = -1;
	pthread_mutex_init(&tp->pool_lock, NULL);
	pthread_mutex_init(&tp->peer_lock, NULL);
	atomic_init(&tp->next_thread, 0);
	return tp;
}

static void verbs_tp_free(struct loco_tp *tp)
{
	pthread_mutex_destroy(&tp->pool_lock);
	pthread_mutex_destroy(&tp->peer_lock);
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
			 (tp->dm_mr ? VERBS_DESC_F_DM : 0),
		.arena_addr = (uintptr_t)tp->arena,
		.arena_len = tp->arena_len,
		.arena_rkey = tp->arena_mr->rkey,
		.dm_rkey = tp->dm_mr ? tp->dm_mr->rkey : 0,
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

/* ---- completion queues -------------------------------------------------- */

/* One CQ per thread, sized for VERBS_CQ_QPS send queues (+1 receive entry
 * each: QPs have a minimal receive queue, never used) or fewer QPs if the
 * device caps CQ sizes. */
static int verbs_cq_create(struct loco_tp *tp, struct loco_tp_cq **out)
{
	int per = VERBS_SQ_DEPTH + 1;
	int cqe = VERBS_CQ_QPS * per;
	if (cqe > tp->attr.orig_attr.max_cqe)
		cqe = tp->attr.orig_attr.max_cqe / per * per;
	if (cqe < per) {
		loco_err(VERBS_LOG, "%s: CQs hold %d entries, one QP needs %d", tp->devname,
			 tp->attr.orig_attr.max_cqe, per);
		return -EOPNOTSUPP;
	}
	struct loco_tp_cq *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cq = ibv_create_cq(tp->ctx, cqe, NULL, NULL, 0);
	if (!c->cq) {
		int e = errno;
		loco_err(VERBS_LOG, "ibv_create_cq (%d entries): %s", cqe, strerror(e));
		free(c);
		return -e;
	}
	c->tp = tp;
	c->qp_cap = (uint32_t)(cqe / per);
	/* A unique thread index for connection private data: relaxed, a counter. */
	c->thread = atomic_fetch_add_explicit(&tp->next_thread, 1, memory_order_relaxed);
	for (unsigned i = 0; i < VERBS_CQ_QPS; i++)
		atomic_init(&c->qp[i], NULL);
	*out = c;
	return 0;
}

/* Caller: the CQ's QPs destroyed first. */
static void verbs_cq_destroy(struct loco_tp_cq *c)
{
	int r = ibv_destroy_cq(c->cq);
	if (r)
		loco_err(VERBS_LOG, "ibv_destroy_cq (thread %u): %s", c->thread, strerror(r));
	free(c);
}

/* ---- queue pairs -------------------------------------------------------- */

/* The peer's arena (RM) and device memory (DM; len 0 if none), and
 * whether both NICs execute atomics. */
static int verbs_peer_target(struct loco_tp *tp, uint32_t peer,
			     struct verbs_rmr *rm, struct verbs_rmr *dm,
			     bool *atomics)
{
	if (peer >= LOCO_MAX_NODES || !tp->hosts->node[peer].present) {
		loco_err(VERBS_LOG, "qp_create: node %u is not in the hosts file", peer);
		return -EINVAL;
	}
	if (peer == tp->self) {
		*rm = (struct verbs_rmr){ (uintptr_t)tp->arena, tp->arena_len,
					  tp->arena_mr->rkey };
		*dm = (struct verbs_rmr){ 0, tp->dm_len, tp->dm_mr ? tp->dm_mr->rkey : 0 };
		*atomics = tp->atomics;
		return 0;
	}
	struct verbs_desc d;
	if (verbs_peer_desc(tp, peer, &d)) {
		loco_err(VERBS_LOG, "qp_create: no arena descriptor from node %u yet (peer_add first)",
			 peer);
		return -ENOENT;
	}
	*rm = (struct verbs_rmr){ d.arena_addr, d.arena_len, d.arena_rkey };
	/* The DM MR is zero-based: remote addresses are offsets from 0. */
	*dm = (struct verbs_rmr){ 0, d.dm_len, d.dm_rkey };
	*atomics = tp->atomics && (d.flags & VERBS_DESC_F_ATOMIC);
	return 0;
}

/* RC QP whose sends complete on the thread's CQ; asks for VERBS_INLINE_WANT
 * inline bytes and settles for less if the device refuses. */
static int verbs_qp_alloc(struct loco_tp *tp, struct loco_tp_qp *q,
			  uint32_t *max_inline)
{
	static const uint32_t inline_try[] = { VERBS_INLINE_WANT, 128, 64, 0 };
	int e = 0;
	for (unsigned i = 0; i < sizeof(inline_try) / sizeof(inline_try[0]); i++) {
		struct ibv_qp_init_attr a = {
			.send_cq = q->cq->cq,
			.recv_cq = q->cq->cq,
			.qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = VERBS_SQ_DEPTH, .max_recv_wr = 1,
				 .max_send_sge = 1, .max_recv_sge = 1,
				 .max_inline_data = inline_try[i] },
		};
		q->qp = ibv_create_qp(tp->pd, &a);
		if (q->qp) {
			*max_inline = a.cap.max_inline_data;
			q->link.qp = q->qp;
			return 0;
		}
		e = errno ? errno : EIO;
		if (e != EINVAL)
			break;
	}
	loco_err(VERBS_LOG, "ibv_create_qp for node %u: %s", q->link.node, strerror(e));
	return -e;
}

/* Claim a free tag (CQ slot) for Q: the CAS makes concurrent qp_create
 * calls on one CQ safe; release publishes Q's set-up fields to the poller's
 * acquire in verbs_wc_take. */
static int verbs_cq_attach(struct loco_tp_cq *c, struct loco_tp_qp *q)
{
	for (uint32_t tag = 0; tag < c->qp_cap; tag++) {
		struct loco_tp_qp *none = NULL;
		q->sq.tag = (uint8_t)tag;
		if (atomic_compare_exchange_strong_explicit(&c->qp[tag], &none, q,
							    memory_order_release,
							    memory_order_relaxed))
			return 0;
	}
	loco_err(VERBS_LOG, "thread %u: its CQ already serves %u QPs", c->thread, c->qp_cap);
	return -ENOSPC;
}

static void verbs_sq_setup(struct loco_tp *tp, struct loco_tp_qp *q,
			   uint32_t max_inline, const struct verbs_rmr *rm,
			   const struct verbs_rmr *dm, bool atomics)
{
	verbs_sq_init(&q->sq, VERBS_SQ_DEPTH, max_inline, q->link.node, 0, atomics);
	q->sq.arena = (struct verbs_lmr){ (uintptr_t)tp->arena,
					  (uintptr_t)tp->arena + tp->arena_len,
					  tp->arena_mr->lkey };
	q->sq.remote = *rm;
	q->sq.remote_dm = *dm;
	q->sq.bounce = (struct verbs_bounce){ .buf = q->bounce->buf,
					      .cap = VERBS_BOUNCE_BYTES,
					      .lkey = q->bounce->lkey };
}

static int verbs_qp_create(struct loco_tp *tp, struct loco_tp_cq *cq,
			   uint32_t peer, struct loco_tp_qp **out)
{
	struct verbs_rmr rm, dm;
	bool atomics;
	uint32_t max_inline = 0;
	int r = verbs_peer_target(tp, peer, &rm, &dm, &atomics);
	if (r < 0)
		return r;
	struct loco_tp_qp *q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->tp = tp;
	q->cq = cq;
	q->link = (struct verbs_link){ .node = peer, .thread = cq->thread };
	atomic_init(&q->link.state, VERBS_LINK_UP);
	r = verbs_pool_get(tp, &q->bounce);
	if (r < 0)
		goto free_qp;
	r = verbs_qp_alloc(tp, q, &max_inline);
	if (r < 0)
		goto put_bounce;
	verbs_sq_setup(tp, q, max_inline, &rm, &dm, atomics);
	r = verbs_cq_attach(cq, q);
	if (r < 0)
		goto destroy_qp;
	r = verbs_cm_connect(tp, q);
	if (r < 0)
		goto detach;
	*out = q;
	return 0;
detach:
	atomic_store_explicit(&cq->qp[q->sq.tag], NULL, memory_order_relaxed); /* never used */
destroy_qp:
	ibv_destroy_qp(q->qp);
put_bounce:
	verbs_pool_put(tp, q->bounce);
free_qp:
	free(q);
	return r;
}

/* Caller: the thread that polls the QP's CQ, with no post or poll running. */
static void verbs_qp_destroy(struct loco_tp_qp *q)
{
	struct loco_tp_cq *c = q->cq;
	verbs_cm_disconnect(q);
	int r = ibv_destroy_qp(q->qp);
	if (r)
		loco_err(VERBS_LOG, "ibv_destroy_qp (node %u): %s", q->link.node, strerror(r));
	/* Stale completions of Q left in the CQ now find no QP and are dropped;
	 * relaxed: only this thread polls. */
	atomic_store_explicit(&c->qp[q->sq.tag], NULL, memory_order_relaxed);
	c->dirty &= ~(UINT64_C(1) << q->sq.tag);
	verbs_pool_put(q->tp, q->bounce);
	free(q);
}

/* ---- data path ---------------------------------------------------------- */

/* ibv_post_send returned ERR at BAD: nothing or a prefix went to the NIC. */
static int verbs_post_refused(struct loco_tp_qp *q, unsigned n, int err,
			      struct ibv_send_wr *bad)
{
	unsigned k = bad ? (unsigned)(bad - q->swr) : 0;
	if (k == 0 || k >= n) {
		if (err == ENOMEM)
			return -EAGAIN; /* provider found the send queue full */
		loco_err(VERBS_LOG, "ibv_post_send to node %u: %s", q->link.node, strerror(err));
		return -err;
	}
	loco_err(VERBS_LOG, "ibv_post_send to node %u took %u of %u requests (%s): "
		 "QP moved to the error state", q->link.node, k, n, strerror(err));
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
	verbs_sq_fail_partial(&q->sq, k, -LOCO_EQP);
	q->cq->dirty |= UINT64_C(1) << q->sq.tag;
	return -LOCO_EQP;
}

/* The error state stops the NIC's work on Q: requests not yet done are
 * flushed (no data moves for them any more). Every outstanding request
 * is failed now, so none copies a result out of the bounce buffer. */
static void verbs_qp_abort(struct loco_tp_qp *q)
{
	if (verbs_sq_failed(&q->sq))
		return;
	loco_err(VERBS_LOG, "giving up on the requests of thread %u to node %u: QP moved to "
		 "the error state", q->link.thread, q->link.node);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };
	int r = ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
	if (r)
		loco_err(VERBS_LOG, "moving the QP to node %u to the error state: %s",
			 q->link.node, strerror(r));
	verbs_sq_fail_partial(&q->sq, 0, -ETIMEDOUT);
	q->cq->dirty |= UINT64_C(1) << q->sq.tag;
}

static int verbs_post(struct loco_tp_qp *q, const struct loco_wr *wr, unsigned n)
{
	struct verbs_sq *sq = &q->sq;
	if (n == 0)
		return 0;
	/* Relaxed: the link state publishes no data, a stale UP only delays
	 * the error to the completions. */
	if (verbs_sq_failed(sq) ||
	    atomic_load_explicit(&q->link.state, memory_order_relaxed) != VERBS_LINK_UP)
		return -LOCO_EQP;
	if (n > sq->depth) {
		loco_err(VERBS_LOG, "post: batch of %u exceeds the send queue (%u)", n, sq->depth);
		return -EINVAL;
	}
	if (n > verbs_sq_free(sq))
		return -EAGAIN;
	uint64_t bhead;
	int r = verbs_sq_build(sq, wr, n, q->swr, q->sge, &bhead);
	if (r < 0)
		return r;
	struct ibv_send_wr *bad = NULL;
	r = ibv_post_send(q->qp, q->swr, &bad);
	if (r)
		return verbs_post_refused(q, n, r, bad);
	verbs_sq_commit(sq, n, bhead);
	return 0;
}

static void verbs_wc_log(const struct loco_tp_qp *q, const struct ibv_wc *wc,
			 int st)
{
	/* A flush after the listener reported the lost connection says nothing new. */
	if (wc->status == IBV_WC_WR_FLUSH_ERR &&
	    atomic_load_explicit(&q->link.state, memory_order_relaxed) != VERBS_LINK_UP)
		return;
	loco_err(VERBS_LOG, "node %u (thread %u): request failed: %s (vendor error %#x): "
		 "%s; the QP is in the error state", q->link.node, q->link.thread,
		 ibv_wc_status_str(wc->status), wc->vendor_err, loco_strerror(st));
}

static void verbs_wc_take(struct loco_tp_cq *c, const struct ibv_wc *wc)
{
	uint8_t tag = verbs_wrid_tag(wc->wr_id);
	if (tag >= VERBS_CQ_QPS)
		return;
	/* Pairs with the release in verbs_cq_attach. */
	struct loco_tp_qp *q = atomic_load_explicit(&c->qp[tag], memory_order_acquire);
	if (!q || q->qp->qp_num != wc->qp_num)
		return; /* completion of a QP destroyed since */
	int st = verbs_wc_errno(wc->status);
	if (st && !verbs_sq_failed(&q->sq))
		verbs_wc_log(q, wc, st);
	if (verbs_sq_mark(&q->sq, wc->wr_id, st))
		c->dirty |= UINT64_C(1) << tag;
}

/* Report what the dirty QPs have retired, at most MAX. */
static unsigned verbs_cq_drain(struct loco_tp_cq *c, struct loco_cqe *out,
			       unsigned max)
{
	unsigned n = 0;
	for (uint64_t m = c->dirty; m && n < max; m &= m - 1) {
		unsigned tag = (unsigned)__builtin_ctzll(m);
		/* Relaxed: dirty tags are QPs this thread already loaded. */
		struct loco_tp_qp *q = atomic_load_explicit(&c->qp[tag], memory_order_relaxed);
		n += verbs_sq_drain(&q->sq, out + n, max - n);
		if (!verbs_sq_pending(&q->sq))
			c->dirty &= ~(UINT64_C(1) << tag);
	}
	return n;
}

static int verbs_poll(struct loco_tp_cq *c, struct loco_cqe *out, unsigned max)
{
	unsigned n = verbs_cq_drain(c, out, max);
	while (n < max) {
		struct ibv_wc wc[VERBS_POLL_BATCH];
		int want = max - n < VERBS_POLL_BATCH ? (int)(max - n) : VERBS_POLL_BATCH;
		int k = ibv_poll_cq(c->cq, want, wc);
		if (k < 0) {
			loco_err(VERBS_LOG, "thread %u: ibv_poll_cq failed (%d)", c->thread, k);
			return n ? (int)n : -EIO;
		}
		for (int i = 0; i < k; i++)
			verbs_wc_take(c, &wc[i]);
		n += verbs_cq_drain(c, out + n, max - n);
		if (k < want)
			break;
	}
	return (int)n;
}

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
	.cq_create = verbs_cq_create,
	.cq_destroy = verbs_cq_destroy,
	.qp_create = verbs_qp_create,
	.qp_destroy = verbs_qp_destroy,
	.post = verbs_post,
	.poll = verbs_poll,
	.qp_abort = verbs_qp_abort,
	.local_cpus = verbs_local_cpus,
};
