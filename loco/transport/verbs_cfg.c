/* SPDX-License-Identifier: MIT */
#include "loco/transport/verbs_cfg.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loco/error.h"

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
	uint64_t port = 0, offset = c.cm_port_offset, timeout = c.timeout_ms;
	uint64_t gid = UINT64_MAX;
	int r = verbs_env_device(src, &c, err, errlen);
	if (!r)
		r = verbs_env_num(src, "LOCO_VERBS_PORT", false, 1, 255,
				  "a port number 1..255", &port, err, errlen);
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
	c.port = (uint32_t)port;
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

static bool verbs_desc_consistent(const struct verbs_desc *d)
{
	if (d->flags & ~VERBS_DESC_F_ALL)
		return false;
	if (d->flags & VERBS_DESC_F_DM)
		return d->dm_len != 0;
	return d->dm_len == 0 && d->dm_rkey == 0;
}

int verbs_desc_pack(const struct verbs_desc *d, void *buf, size_t cap,
		    size_t *len)
{
	if (cap < VERBS_DESC_LEN)
		return -ENOSPC;
	if (!verbs_desc_consistent(d))
		return -EINVAL;
	uint8_t *p = buf;
	verbs_put32(p + 0, VERBS_DESC_MAGIC);
	verbs_put16(p + 4, VERBS_DESC_VERSION);
	verbs_put16(p + 6, VERBS_DESC_LEN);
	verbs_put32(p + 8, d->node);
	verbs_put32(p + 12, d->flags);
	verbs_put64(p + 16, d->arena_addr);
	verbs_put64(p + 24, d->arena_len);
	verbs_put32(p + 32, d->arena_rkey);
	verbs_put32(p + 36, d->dm_rkey);
	verbs_put64(p + 40, d->dm_len);
	*len = VERBS_DESC_LEN;
	return 0;
}

int verbs_desc_unpack(const void *buf, size_t len, struct verbs_desc *out)
{
	const uint8_t *p = buf;
	if (len != VERBS_DESC_LEN || verbs_get32(p) != VERBS_DESC_MAGIC ||
	    verbs_get16(p + 4) != VERBS_DESC_VERSION ||
	    verbs_get16(p + 6) != VERBS_DESC_LEN)
		return -LOCO_EPROTO;
	struct verbs_desc d = {
		.node = verbs_get32(p + 8),
		.flags = verbs_get32(p + 12),
		.arena_addr = verbs_get64(p + 16),
		.arena_len = verbs_get64(p + 24),
		.arena_rkey = verbs_get32(p + 32),
		.dm_rkey = verbs_get32(p + 36),
		.dm_len = verbs_get64(p + 40),
	};
	if (!d.arena_addr || !d.arena_len || d.arena_addr + d.arena_len < d.arena_addr ||
	    !verbs_desc_consistent(&d))
		return -LOCO_EPROTO;
	*out = d;
	return 0;
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
	if (m.kind < VERBS_CONN_REQ || m.kind > VERBS_CONN_REJ)
		return -LOCO_EPROTO;
	if (m.kind != VERBS_CONN_REJ && !verbs_mtu_bytes(m.mtu))
		return -LOCO_EPROTO;
	*out = m;
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
