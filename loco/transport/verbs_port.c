/* SPDX-License-Identifier: MIT */
/* verbs transport: opening the chosen RDMA device (verbs_dev.c chooses it)
 * and setting up its port: the MTU and the GID (verbs_gid_pick or the
 * configured index). */
#include "loco/transport/verbs_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loco/error.h>
#include <loco/log.h>

#define VERBS_LOG "verbs"

/* ---- devices ------------------------------------------------------------ */

static struct ibv_device *verbs_device_find(struct ibv_device **list, int n,
					    const char *name)
{
	for (int i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			return list[i];
	return NULL;
}

int verbs_devices_get(struct ibv_device ***out, int *n)
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

int verbs_device_open(struct loco_tp *tp, struct ibv_device **list,
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

int verbs_port_setup(struct loco_tp *tp)
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
