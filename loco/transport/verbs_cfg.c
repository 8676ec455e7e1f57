/* SPDX-License-Identifier: MIT */
#include "loco/transport/verbs_cfg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <loco/error.h>

/* ---- little-endian fields --------------------------------------------- */

static void verbs_put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void verbs_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void verbs_put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t verbs_get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t verbs_get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint64_t verbs_get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* ---- configuration ------------------------------------------------------ */

/* Decimal number with an optional binary suffix (k, m, g; any case) when
 * SUFFIX is set. -EINVAL unless the whole string is consumed and in range. */
static int verbs_num_parse(const char *s, bool suffix, uint64_t max,
			   uint64_t *out)
{
	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	unsigned shift = 0;
	if (suffix && *end) {
		switch (*end | 0x20) {
		case 'k': shift = 10; break;
		case 'm': shift = 20; break;
		case 'g': shift = 30; break;
		default: return -EINVAL;
		}
		end++;
	}
	if (*end || v > (max >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

/* Where settings come from: the environment, else (when HOST is set)
 * this node's hosts-file line. */
struct verbs_src {
	verbs_env_fn env;
	const struct loco_host *host;
	const char *path;
};

static const struct {
	const char *var;
	enum loco_host_opt opt;
} host_keys[] = {
	{ "LOCO_VERBS_DEVICE", LOCO_HOPT_RDMA_DEV },
	{ "LOCO_VERBS_PORT", LOCO_HOPT_RDMA_PORT },
	{ "LOCO_VERBS_GID_INDEX", LOCO_HOPT_GID_INDEX },
	{ "LOCO_VERBS_MTU", LOCO_HOPT_MTU },
	{ "LOCO_VERBS_DM_BYTES", LOCO_HOPT_DM_BYTES },
};

/* Value of variable NAME, NULL if unset or empty; LABEL (for errors) gets
 * "NAME" or "PATH:LINE: key". */
static const char *src_get(const struct verbs_src *src, const char *name,
			   char *label, size_t len)
{
	const char *s = src->env(name);
	snprintf(label, len, "%s", name);
	if (s && *s)
		return s;
	for (size_t i = 0; src->host && i < sizeof(host_keys) / sizeof(host_keys[0]); i++) {
		const char *v = src->host->opt[host_keys[i].opt];
		if (strcmp(host_keys[i].var, name) || !v[0])
			continue;
		snprintf(label, len, "%s:%u: %s", src->path, src->host->line,
			 loco_host_opt_name(host_keys[i].opt));
		return v;
	}
	return NULL;
}

/* One numeric setting: unset or empty keeps *OUT; else MIN..MAX. */
static int verbs_env_num(const struct verbs_src *src, const char *name, bool suffix,
			 uint64_t min, uint64_t max, const char *expect,
			 uint64_t *out, char *err, size_t errlen)
{
	char label[VERBS_LABEL_MAX];
	const char *s = src_get(src, name, label, sizeof(label));
	if (!s)
		return 0;
	uint64_t v;
	if (verbs_num_parse(s, suffix, max, &v) < 0 || v < min) {
		snprintf(err, errlen, "%s=%s: expected %s", label, s, expect);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

static int verbs_env_device(const struct verbs_src *src, struct verbs_config *c,
			    char *err, size_t errlen)
{
	char label[VERBS_LABEL_MAX];
	const char *s = src_get(src, "LOCO_VERBS_DEVICE", label, sizeof(label));
	if (!s)
		return 0;
	if (strlen(s) >= sizeof(c->device)) {
		snprintf(err, errlen, "%s=%s: name longer than %zu bytes",
			 label, s, sizeof(c->device) - 1);
		return -EINVAL;
	}
	strcpy(c->device, s);
	snprintf(c->device_from, sizeof(c->device_from), "%s", label);
	return 0;
}

static int verbs_env_port(const struct verbs_src *src, struct verbs_config *c,
			  char *err, size_t errlen)
{
	uint64_t port = 0;
	int r = verbs_env_num(src, "LOCO_VERBS_PORT", false, 1, 255,
			      "a port number 1..255", &port, err, errlen);
	if (r < 0 || !port)
		return r;
	c->port = (uint32_t)port;
	src_get(src, "LOCO_VERBS_PORT", c->port_from, sizeof(c->port_from));
	return 0;
}

static int verbs_env_mtu(const struct verbs_src *src, struct verbs_config *c,
			 char *err, size_t errlen)
{
	static const char expect[] = "one of 256, 512, 1024, 2048, 4096";
	uint64_t v = 0;
	int r = verbs_env_num(src, "LOCO_VERBS_MTU", false, 256, 4096, expect, &v,
			      err, errlen);
	if (r < 0 || v == 0)
		return r;
	if (verbs_mtu_enum((uint32_t)v) < 0) {
		char label[VERBS_LABEL_MAX];
		const char *s = src_get(src, "LOCO_VERBS_MTU", label, sizeof(label));
		snprintf(err, errlen, "%s=%s: expected %s", label, s, expect);
		return -EINVAL;
	}
	c->mtu = (uint32_t)v;
	return 0;
}

static int verbs_config_src(const struct verbs_src *src, struct verbs_config *out,
			    char *err, size_t errlen)
{
	struct verbs_config c = {
		.gid_index = -1,
		.cm_port_offset = VERBS_CM_PORT_OFFSET_DEFAULT,
		.timeout_ms = VERBS_TIMEOUT_MS_DEFAULT,
	};
	uint64_t offset = c.cm_port_offset, timeout = c.timeout_ms;
	uint64_t gid = UINT64_MAX;
	int r = verbs_env_device(src, &c, err, errlen);
	if (!r)
		r = verbs_env_port(src, &c, err, errlen);
	if (!r)
		r = verbs_env_num(src, "LOCO_VERBS_GID_INDEX", false, 0, 255,
				  "a GID table index 0..255", &gid, err, errlen);
	if (!r)
		r = verbs_env_mtu(src, &c, err, errlen);
	if (!r)
		r = verbs_env_num(src, "LOCO_VERBS_DM_BYTES", true, 0, VERBS_DM_BYTES_MAX,
				  "bytes (suffix k/m/g allowed), at most 1g",
				  &c.dm_bytes, err, errlen);
	if (!r)
		r = verbs_env_num(src, "LOCO_VERBS_CM_PORT_OFFSET", false, 1, 65534,
				  "a port offset 1..65534", &offset, err, errlen);
	if (!r)
		r = verbs_env_num(src, "LOCO_TIMEOUT_MS", false, 1, 3600000,
				  "milliseconds 1..3600000", &timeout, err, errlen);
	if (r < 0)
		return r;
	c.gid_index = gid == UINT64_MAX ? -1 : (int32_t)gid;
	c.cm_port_offset = (uint32_t)offset;
	c.timeout_ms = (uint32_t)timeout;
	*out = c;
	return 0;
}

int verbs_config_parse(verbs_env_fn env, struct verbs_config *out, char *err,
		       size_t errlen)
{
	struct verbs_src src = { .env = env };
	return verbs_config_src(&src, out, err, errlen);
}

int verbs_config_parse_host(verbs_env_fn env, const struct loco_host *host,
			    const char *path, struct verbs_config *out, char *err,
			    size_t errlen)
{
	struct verbs_src src = { .env = env, .host = host, .path = path };
	return verbs_config_src(&src, out, err, errlen);
}

int verbs_cm_port(uint16_t ctrl_port, uint32_t offset, uint16_t *out)
{
	if ((uint32_t)ctrl_port + offset > 65535)
		return -ERANGE;
	*out = (uint16_t)(ctrl_port + offset);
	return 0;
}

/* ---- arena descriptor --------------------------------------------------- */

static bool verbs_desc_addr_ok(const struct verbs_desc *d)
{
	static const uint8_t zero[16];
	if (d->addr_family != 4 && d->addr_family != 6)
		return false;
	if (!d->cm_port || !memcmp(d->addr, zero, 16))
		return false;
	return d->addr_family == 6 || !memcmp(d->addr + 4, zero, 12);
}

static bool verbs_desc_consistent(const struct verbs_desc *d)
{
	if (d->flags & ~VERBS_DESC_F_ALL || !verbs_desc_addr_ok(d))
		return false;
	if (d->flags & VERBS_DESC_F_DM)
		return d->dm_len != 0;
	return d->dm_len == 0;
}

int verbs_desc_pack(const struct verbs_desc *d, void *buf, size_t cap,
		    size_t *len)
{
	if (cap < VERBS_DESC_LEN)
		return -ENOSPC;
	if (!verbs_desc_consistent(d))
		return -EINVAL;
	uint8_t *p = buf;
	memset(p, 0, VERBS_DESC_LEN);
	verbs_put32(p + 0, VERBS_DESC_MAGIC);
	verbs_put16(p + 4, VERBS_DESC_VERSION);
	verbs_put16(p + 6, VERBS_DESC_LEN);
	verbs_put32(p + 8, d->node);
	verbs_put32(p + 12, d->flags);
	verbs_put64(p + 16, d->arena_addr);
	verbs_put64(p + 24, d->arena_len);
	verbs_put32(p + 32, d->fence_rkey);
	verbs_put64(p + 40, d->dm_len);
	p[48] = d->addr_family;
	verbs_put16(p + 50, d->cm_port);
	memcpy(p + 56, d->addr, 16);
	*len = VERBS_DESC_LEN;
	return 0;
}

int verbs_desc_unpack(const void *buf, size_t len, struct verbs_desc *out)
{
	const uint8_t *p = buf;
	if (len != VERBS_DESC_LEN || verbs_get32(p) != VERBS_DESC_MAGIC ||
	    verbs_get16(p + 4) != VERBS_DESC_VERSION ||
	    verbs_get16(p + 6) != VERBS_DESC_LEN || p[49] || verbs_get32(p + 36) ||
	    verbs_get32(p + 52))
		return -LOCO_EPROTO;
	struct verbs_desc d = {
		.node = verbs_get32(p + 8),
		.flags = verbs_get32(p + 12),
		.arena_addr = verbs_get64(p + 16),
		.arena_len = verbs_get64(p + 24),
		.fence_rkey = verbs_get32(p + 32),
		.dm_len = verbs_get64(p + 40),
		.addr_family = p[48],
		.cm_port = verbs_get16(p + 50),
	};
	memcpy(d.addr, p + 56, 16);
	if (!d.arena_addr || !d.arena_len || d.arena_addr + d.arena_len < d.arena_addr ||
	    !verbs_desc_consistent(&d))
		return -LOCO_EPROTO;
	*out = d;
	return 0;
}

int verbs_desc_addr_set(struct verbs_desc *d, const struct sockaddr *sa)
{
	memset(d->addr, 0, sizeof(d->addr));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
		d->addr_family = 4;
		d->cm_port = ntohs(in->sin_port);
		memcpy(d->addr, &in->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
		d->addr_family = 6;
		d->cm_port = ntohs(in6->sin6_port);
		memcpy(d->addr, &in6->sin6_addr, 16);
		return 0;
	}
	return -EAFNOSUPPORT;
}

void verbs_desc_sockaddr(const struct verbs_desc *d, struct sockaddr_storage *out)
{
	memset(out, 0, sizeof(*out));
	if (d->addr_family == 4) {
		struct sockaddr_in *in = (struct sockaddr_in *)out;
		in->sin_family = AF_INET;
		in->sin_port = htons(d->cm_port);
		memcpy(&in->sin_addr, d->addr, 4);
	} else {
		struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(d->cm_port);
		memcpy(&in6->sin6_addr, d->addr, 16);
	}
}

bool verbs_desc_addr_is(const struct verbs_desc *d, const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return d->addr_family == 4 &&
		       !memcmp(&((const struct sockaddr_in *)sa)->sin_addr, d->addr, 4);
	if (sa->sa_family == AF_INET6)
		return d->addr_family == 6 &&
		       !memcmp(&((const struct sockaddr_in6 *)sa)->sin6_addr, d->addr, 16);
	return false;
}

/* ---- connection private data ------------------------------------------- */

void verbs_conn_pack(const struct verbs_conn_msg *m, uint8_t buf[VERBS_CONN_LEN])
{
	verbs_put32(buf + 0, VERBS_CONN_MAGIC);
	verbs_put16(buf + 4, VERBS_CONN_VERSION);
	buf[6] = m->kind;
	buf[7] = m->mtu;
	verbs_put32(buf + 8, m->src);
	verbs_put32(buf + 12, m->dst);
	verbs_put32(buf + 16, m->thread);
	verbs_put32(buf + 20, m->reason);
	memcpy(buf + 24, m->gid, 16);
	verbs_put64(buf + 40, m->incarnation);
}

int verbs_conn_unpack(const void *buf, size_t len, struct verbs_conn_msg *out)
{
	const uint8_t *p = buf;
	if (!p || len < VERBS_CONN_LEN || verbs_get32(p) != VERBS_CONN_MAGIC ||
	    verbs_get16(p + 4) != VERBS_CONN_VERSION)
		return -LOCO_EPROTO;
	struct verbs_conn_msg m = {
		.kind = p[6],
		.mtu = p[7],
		.src = verbs_get32(p + 8),
		.dst = verbs_get32(p + 12),
		.thread = verbs_get32(p + 16),
		.reason = verbs_get32(p + 20),
	};
	memcpy(m.gid, p + 24, 16);
	m.incarnation = verbs_get64(p + 40);
	if (m.kind < VERBS_CONN_REQ || m.kind > VERBS_CONN_REJ)
		return -LOCO_EPROTO;
	if (m.kind != VERBS_CONN_REJ && !verbs_mtu_bytes(m.mtu))
		return -LOCO_EPROTO;
	*out = m;
	return 0;
}

/* ---- device, port and address selection --------------------------------- */

#define SEL_LIST_MAX 512

/* Append to BUF (LEN bytes, *USED so far), truncating quietly. */
__attribute__((format(printf, 4, 5)))
static void sel_append(char *buf, size_t len, size_t *used, const char *fmt, ...)
{
	if (*used >= len)
		return;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + *used, len - *used, fmt, ap);
	va_end(ap);
	*used += n > 0 ? (size_t)n : 0;
}

/* "mlx5_0 port 1 ACTIVE, mlx5_1 port 1 DOWN": the ports of DEV (every
 * device's when DEV is NULL), or "none". */
static void sel_ports_text(const struct verbs_port_info *p, size_t np,
			   const char *dev, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < np; i++)
		if (!dev || !strcmp(p[i].dev, dev))
			sel_append(buf, len, &used, "%s%s port %u %s", used ? ", " : "",
				   p[i].dev, p[i].port, p[i].state);
	if (!used)
		snprintf(buf, len, "none");
}

/* "10.0.0.1 on ens1f0 (mlx5_0 port 1), ..." or "none". */
static void sel_ips_text(const struct verbs_ip *ips, size_t ni, char *buf,
			 size_t len)
{
	size_t used = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < ni; i++)
		sel_append(buf, len, &used, "%s%s on %s (%s port %u)", used ? ", " : "",
			   ips[i].text, ips[i].ifname, ips[i].dev, ips[i].port);
	if (!used)
		snprintf(buf, len, "none");
}

static bool sel_has_dev(const struct verbs_port_info *p, size_t np, const char *dev)
{
	for (size_t i = 0; i < np; i++)
		if (!strcmp(p[i].dev, dev))
			return true;
	return false;
}

static long sel_port_find(const struct verbs_port_info *p, size_t np,
			  const char *dev, uint32_t port)
{
	for (size_t i = 0; i < np; i++)
		if (!strcmp(p[i].dev, dev) && p[i].port == port)
			return (long)i;
	return -1;
}

/* Address to use on (DEV, PORT): the hosts-file one, else the first
 * IPv4, else the first; -1 if the port has none. */
static long sel_ip(const struct verbs_ip *ips, size_t ni, const char *dev,
		   uint8_t port)
{
	long best = -1;
	for (size_t i = 0; i < ni; i++) {
		if (strcmp(ips[i].dev, dev) || ips[i].port != port)
			continue;
		if (ips[i].ctrl)
			return (long)i;
		if (best < 0 || (ips[best].ipv6 && !ips[i].ipv6))
			best = (long)i;
	}
	return best;
}

/* The hosts-file address among IPS (so on an RDMA port), or -1. */
static long sel_ctrl(const struct verbs_ip *ips, size_t ni)
{
	for (size_t i = 0; i < ni; i++)
		if (ips[i].ctrl)
			return (long)i;
	return -1;
}

/* First port (of DEV if set; numbered PORT if nonzero) that is active and
 * has an address; else the first active one; else the first; -1 if none. */
static long sel_first(const struct verbs_port_info *p, size_t np,
		      const struct verbs_ip *ips, size_t ni, const char *dev,
		      uint32_t port)
{
	long active = -1, any = -1;
	for (size_t i = 0; i < np; i++) {
		if ((dev && strcmp(p[i].dev, dev)) || (port && p[i].port != port))
			continue;
		if (p[i].active && sel_ip(ips, ni, p[i].dev, p[i].port) >= 0)
			return (long)i;
		if (p[i].active && active < 0)
			active = (long)i;
		if (any < 0)
			any = (long)i;
	}
	return active >= 0 ? active : any;
}

/* "LOCO_VERBS_DEVICE=mlx5_9" or "hosts.txt:3: rdma_dev=mlx5_9". */
static void sel_setting(const char *from, const char *var, const char *value,
			char *buf, size_t len)
{
	snprintf(buf, len, "%s=%s", from[0] ? from : var, value);
}

/* The port named by CFG (device and/or port); *WHY gets the reason. */
static int sel_named(const struct verbs_config *cfg,
		     const struct verbs_port_info *ports, size_t np,
		     const struct verbs_ip *ips, size_t ni, long *out,
		     char *why, size_t whylen, char *msg, size_t msglen)
{
	char dev_set[VERBS_LABEL_MAX + VERBS_DEVNAME_MAX + 2] = "";
	char port_set[VERBS_LABEL_MAX + 8] = "", portnum[8], have[SEL_LIST_MAX];
	long c = sel_ctrl(ips, ni), i;
	snprintf(portnum, sizeof(portnum), "%u", cfg->port);
	if (cfg->device[0])
		sel_setting(cfg->device_from, "LOCO_VERBS_DEVICE", cfg->device, dev_set,
			    sizeof(dev_set));
	if (cfg->port)
		sel_setting(cfg->port_from, "LOCO_VERBS_PORT", portnum, port_set,
			    sizeof(port_set));
	snprintf(why, whylen, "%s%s%s", dev_set, dev_set[0] && port_set[0] ? ", " : "",
		 port_set);
	if (cfg->device[0] && !sel_has_dev(ports, np, cfg->device)) {
		sel_ports_text(ports, np, NULL, have, sizeof(have));
		snprintf(msg, msglen, "%s: no such RDMA device (this machine has: %s)",
			 dev_set, have);
		return -LOCO_ENODEV;
	}
	/* The device: the named one, else the one of the hosts-file address. */
	const char *dev = cfg->device[0] ? cfg->device : c >= 0 ? ips[c].dev : NULL;
	if (cfg->port) {
		i = dev ? sel_port_find(ports, np, dev, cfg->port)
			: sel_first(ports, np, ips, ni, NULL, cfg->port);
		if (i < 0) {
			sel_ports_text(ports, np, dev, have, sizeof(have));
			if (dev)
				snprintf(msg, msglen, "%s: %s%s has no port %u (it has: %s)",
					 port_set, dev, cfg->device[0] ? "" :
					 " (the device of the hosts-file address)",
					 cfg->port, have);
			else
				snprintf(msg, msglen, "%s: no RDMA device has a port %u "
					 "(this machine has: %s)", port_set, cfg->port, have);
			return -LOCO_ENODEV;
		}
	} else if (c >= 0 && !strcmp(ips[c].dev, dev)) {
		i = sel_port_find(ports, np, dev, ips[c].port);
		if (i < 0 || !ports[i].active)
			i = sel_first(ports, np, ips, ni, dev, 0);
	} else {
		i = sel_first(ports, np, ips, ni, dev, 0);
	}
	*out = i;
	return 0;
}

int verbs_select(const struct verbs_config *cfg,
		 const struct verbs_port_info *ports, size_t np,
		 const struct verbs_ip *ips, size_t ni,
		 struct verbs_choice *out, char *msg, size_t msglen)
{
	char why[2 * VERBS_LABEL_MAX + 64], have[SEL_LIST_MAX], addrs[SEL_LIST_MAX];
	long c = sel_ctrl(ips, ni), i;
	if (cfg->device[0] || cfg->port) {
		int r = sel_named(cfg, ports, np, ips, ni, &i, why, sizeof(why), msg, msglen);
		if (r < 0)
			return r;
	} else if (c >= 0) {
		i = sel_port_find(ports, np, ips[c].dev, ips[c].port);
		snprintf(why, sizeof(why), "it holds the hosts-file address %s", ips[c].text);
	} else {
		i = sel_first(ports, np, ips, ni, NULL, 0);
		snprintf(why, sizeof(why), "the first active port with an IP address; "
			 "the hosts-file address is not on an RDMA device");
	}
	sel_ports_text(ports, np, NULL, have, sizeof(have));
	if (i < 0) {
		snprintf(msg, msglen, "no RDMA port (ports: %s)", have);
		return -LOCO_ENODEV;
	}
	if (!cfg->device[0] && !cfg->port && c < 0 &&
	    (!ports[i].active || sel_ip(ips, ni, ports[i].dev, ports[i].port) < 0)) {
		sel_ips_text(ips, ni, addrs, sizeof(addrs));
		snprintf(msg, msglen, "no active RDMA port with an IP address, and the "
			 "hosts-file address is not on an RDMA device (ports: %s; addresses "
			 "on RDMA ports: %s)", have, addrs);
		return ports[i].active ? -EADDRNOTAVAIL : -ENETDOWN;
	}
	const struct verbs_port_info *p = &ports[i];
	if (!p->active) {
		snprintf(msg, msglen, "%s port %u (%s) is %s, not active: check the link "
			 "with ibv_devinfo, or choose another port with LOCO_VERBS_DEVICE / "
			 "LOCO_VERBS_PORT (ports: %s)", p->dev, p->port, why, p->state, have);
		return -ENETDOWN;
	}
	long a = sel_ip(ips, ni, p->dev, p->port);
	if (a < 0) {
		sel_ips_text(ips, ni, addrs, sizeof(addrs));
		snprintf(msg, msglen, "%s port %u (%s) has no IP address: rdma_cm needs one "
			 "on its netdev (the RoCE interface or IPoIB; addresses on RDMA "
			 "ports: %s)", p->dev, p->port, why, addrs);
		return -EADDRNOTAVAIL;
	}
	snprintf(msg, msglen, "%s port %u (%s), address %s on %s", p->dev, p->port, why,
		 ips[a].text, ips[a].ifname);
	*out = (struct verbs_choice){ .port = (size_t)i, .ip = (size_t)a };
	return 0;
}

/* ---- GIDs --------------------------------------------------------------- */

bool verbs_gid_ipv4(const uint8_t raw[16], uint32_t *ipv4)
{
	static const uint8_t prefix[12] = { [10] = 0xff, [11] = 0xff };
	if (memcmp(raw, prefix, sizeof(prefix)) != 0)
		return false;
	memcpy(ipv4, raw + 12, 4); /* already network order */
	return true;
}

/* First entry satisfying the rule (0: RoCE v2 with OWN, 1: RoCE v2 IPv4,
 * 2: RoCE v2), or -1. */
static int verbs_gid_find(const struct verbs_gid *tab, size_t n, int rule,
			  uint32_t own)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t ip;
		if (tab[i].type != VERBS_GID_ROCE_V2)
			continue;
		bool v4 = verbs_gid_ipv4(tab[i].raw, &ip);
		if (rule == 2 || (v4 && (rule == 1 || (own && ip == own))))
			return (int)i;
	}
	return -1;
}

static uint32_t verbs_gid_lowest(const struct verbs_gid *tab, size_t n)
{
	uint32_t low = tab[0].index;
	for (size_t i = 1; i < n; i++)
		if (tab[i].index < low)
			low = tab[i].index;
	return low;
}

int verbs_gid_pick(const struct verbs_gid *tab, size_t n, bool ethernet,
		   int32_t want, uint32_t own_ipv4, uint32_t *index)
{
	if (n == 0)
		return -ENOENT;
	if (want >= 0) {
		for (size_t i = 0; i < n; i++)
			if (tab[i].index == (uint32_t)want) {
				*index = tab[i].index;
				return 0;
			}
		return -ENOENT;
	}
	for (int rule = 0; ethernet && rule < 3; rule++) {
		int i = verbs_gid_find(tab, n, rule, own_ipv4);
		if (i >= 0) {
			*index = tab[i].index;
			return 0;
		}
	}
	*index = verbs_gid_lowest(tab, n);
	return 0;
}

const char *verbs_gid_type_name(uint32_t type)
{
	switch (type) {
	case VERBS_GID_IB: return "IB";
	case VERBS_GID_ROCE_V1: return "RoCE v1";
	case VERBS_GID_ROCE_V2: return "RoCE v2";
	default: return "unknown";
	}
}

void verbs_gid_format(const uint8_t raw[16], char out[40])
{
	for (int i = 0; i < 8; i++)
		snprintf(out + 5 * i, 6, "%02x%02x%s", raw[2 * i], raw[2 * i + 1],
			 i < 7 ? ":" : "");
}

/* ---- MTU and pages ------------------------------------------------------ */

int verbs_mtu_enum(uint32_t bytes)
{
	for (int e = 1; e <= 5; e++)
		if (bytes == verbs_mtu_bytes(e))
			return e;
	return -EINVAL;
}

uint32_t verbs_mtu_bytes(int mtu)
{
	return mtu >= 1 && mtu <= 5 ? 128u << mtu : 0;
}

unsigned verbs_arena_page_sizes(uint64_t arena_bytes, uint64_t out[2])
{
	unsigned n = 0;
	if (arena_bytes >= (UINT64_C(1) << 30))
		out[n++] = UINT64_C(1) << 30;
	out[n++] = UINT64_C(2) << 20;
	return n;
}
