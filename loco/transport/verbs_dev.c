/* SPDX-License-Identifier: MIT */
/* verbs transport: finding the RDMA device, port and address. The rules
 * are verbs_select's (verbs_cfg.h); this file gathers what they choose
 * from: every port of every device with its state, and every local IP
 * address that rdma_cm binds to an RDMA port (a scratch cm_id bound to the
 * address tells the device and port: id->verbs, id->port_num). */
#include "loco/transport/verbs_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loco/error.h>
#include <loco/log.h>

#define VERBS_LOG "verbs"
#define VERBS_IPS_MAX 256

/* Every port of every device that opens, in device-list order. */
static int verbs_ports_list(struct ibv_device **list, int n,
			    struct verbs_port_info **out, size_t *np)
{
	size_t cap = 0, used = 0;
	struct verbs_port_info *p = NULL;
	for (int d = 0; d < n; d++) {
		const char *name = ibv_get_device_name(list[d]);
		struct ibv_context *ctx = ibv_open_device(list[d]);
		struct ibv_device_attr da;
		if (!ctx) {
			loco_warn(VERBS_LOG, "ibv_open_device(%s): %s: not considered",
				  name, strerror(errno));
			continue;
		}
		int r = ibv_query_device(ctx, &da);
		for (uint8_t port = 1; !r && port <= da.phys_port_cnt; port++) {
			struct ibv_port_attr pa;
			if (ibv_query_port(ctx, port, &pa))
				continue;
			if (used == cap) {
				cap = cap ? 2 * cap : 8;
				void *q = realloc(p, cap * sizeof(*p));
				if (!q) {
					ibv_close_device(ctx);
					free(p);
					return -ENOMEM;
				}
				p = q;
			}
			struct verbs_port_info *e = &p[used++];
			memset(e, 0, sizeof(*e));
			snprintf(e->dev, sizeof(e->dev), "%s", name);
			e->port = port;
			e->active = pa.state == IBV_PORT_ACTIVE;
			snprintf(e->state, sizeof(e->state), "%s", ibv_port_state_str(pa.state));
		}
		if (r)
			loco_warn(VERBS_LOG, "ibv_query_device(%s): %s: not considered", name,
				  strerror(r));
		ibv_close_device(ctx);
	}
	*out = p;
	*np = used;
	return 0;
}

static bool verbs_same_ip(const struct sockaddr *a, const struct sockaddr_storage *b)
{
	if (a->sa_family != b->ss_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		       &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
}

/* Up, not loopback, IPv4 or non-link-local IPv6 (a link-local address
 * needs a scope id that means nothing to the peers it is advertised to). */
static bool verbs_ifa_usable(const struct ifaddrs *ifa)
{
	if (!ifa->ifa_addr || !(ifa->ifa_flags & IFF_UP) || (ifa->ifa_flags & IFF_LOOPBACK))
		return false;
	if (ifa->ifa_addr->sa_family == AF_INET)
		return true;
	return ifa->ifa_addr->sa_family == AF_INET6 &&
	       !IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr);
}

/* Bind a scratch id to SA (port 0): 1 and the device and port if it is on
 * an RDMA port, 0 if not, -errno if rdma_cm fails otherwise. */
static int verbs_ip_probe(struct rdma_event_channel *ch, const struct sockaddr *sa,
			  struct verbs_ip *e)
{
	struct rdma_cm_id *id;
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	memcpy(&ss, sa, sa->sa_family == AF_INET ? sizeof(struct sockaddr_in)
						 : sizeof(struct sockaddr_in6));
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return -errno;
	int r = 0;
	if (rdma_bind_addr(id, (struct sockaddr *)&ss) == 0 && id->verbs) {
		snprintf(e->dev, sizeof(e->dev), "%s", ibv_get_device_name(id->verbs->device));
		e->port = id->port_num;
		r = 1;
	}
	/* A bind failure (ENODEV: not an RDMA netdev) only means "not here". */
	rdma_destroy_id(id);
	return r;
}

/* Every usable local address on an RDMA port. CTRL is the hosts-file
 * address (port ignored). */
static int verbs_ips_list(struct rdma_event_channel *ch,
			  const struct sockaddr_storage *ctrl,
			  struct verbs_ip *ips, size_t *ni)
{
	struct ifaddrs *all;
	if (getifaddrs(&all)) {
		int e = errno;
		loco_err(VERBS_LOG, "getifaddrs: %s", strerror(e));
		return -e;
	}
	size_t n = 0;
	int r = 0;
	for (struct ifaddrs *ifa = all; ifa && n < VERBS_IPS_MAX && r >= 0;
	     ifa = ifa->ifa_next) {
		if (!verbs_ifa_usable(ifa))
			continue;
		struct verbs_ip *e = &ips[n];
		memset(e, 0, sizeof(*e));
		r = verbs_ip_probe(ch, ifa->ifa_addr, e);
		if (r <= 0)
			continue;
		const struct sockaddr *sa = ifa->ifa_addr;
		e->ipv6 = sa->sa_family == AF_INET6;
		e->ctrl = verbs_same_ip(sa, ctrl);
		verbs_addr_str(sa, e->text, sizeof(e->text));
		snprintf(e->ifname, sizeof(e->ifname), "%s", ifa->ifa_name);
		memcpy(&e->sa, sa, e->ipv6 ? sizeof(struct sockaddr_in6)
					   : sizeof(struct sockaddr_in));
		n++;
	}
	freeifaddrs(all);
	if (r < 0) {
		loco_err(VERBS_LOG, "rdma_create_id: %s", strerror(-r));
		return r;
	}
	*ni = n;
	return 0;
}

int verbs_device_choose(struct loco_tp *tp, struct ibv_device **list, int n,
			char devname[VERBS_DEVNAME_MAX], uint8_t *port)
{
	struct verbs_port_info *ports = NULL;
	size_t np = 0, ni = 0;
	struct verbs_ip *ips = calloc(VERBS_IPS_MAX, sizeof(*ips));
	int r = ips ? 0 : -ENOMEM;
	if (!r)
		r = verbs_ports_list(list, n, &ports, &np);
	if (!r)
		r = verbs_ips_list(tp->cm_ch, &tp->ctrl_addr, ips, &ni);
	if (r < 0)
		goto out;
	char msg[4 * VERBS_LABEL_MAX];
	struct verbs_choice ch;
	r = verbs_select(&tp->cfg, ports, np, ips, ni, &ch, msg, sizeof(msg));
	if (r < 0) {
		loco_err(VERBS_LOG, "%s", msg);
		goto out;
	}
	loco_info(VERBS_LOG, "RDMA: %s", msg);
	snprintf(devname, VERBS_DEVNAME_MAX, "%s", ports[ch.port].dev);
	*port = ports[ch.port].port;
	tp->addr = ips[ch.ip].sa;
	verbs_addr_set_port(&tp->addr, tp->cm_port);
out:
	free(ports);
	free(ips);
	return r;
}
