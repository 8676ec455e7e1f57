/* SPDX-License-Identifier: MIT */
/* verbs transport without a device: configuration, wire formats, GID
 * selection, the work-request chain (one doorbell), completion retirement
 * and the wc-status mapping; and open() failing cleanly with -LOCO_ENODEV
 * on a machine without RDMA. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <loco/error.h>
#include <loco/hosts.h>
#include <loco/log.h>
#include "loco/transport/transport.h"
#include "loco/transport/verbs_cfg.h"
#include "loco/transport/verbs_wr.h"
#include "test/common/capture.h"

/* ---- configuration ------------------------------------------------------ */

static const char *env_names[8];
static const char *env_values[8];
static unsigned env_n;

static const char *env_get(const char *name)
{
	for (unsigned i = 0; i < env_n; i++)
		if (!strcmp(env_names[i], name))
			return env_values[i];
	return NULL;
}

static void env_set(const char *name, const char *value)
{
	env_names[env_n] = name;
	env_values[env_n++] = value;
}

static void env_clear(void)
{
	env_n = 0;
}

static int parse(struct verbs_config *c, char *err, size_t len)
{
	return verbs_config_parse(env_get, c, err, len);
}

START_TEST(config_defaults)
{
	struct verbs_config c;
	char err[128];
	env_clear();
	ck_assert_int_eq(parse(&c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.device, "");
	ck_assert_uint_eq(c.port, 0);
	ck_assert_int_eq(c.gid_index, -1);
	ck_assert_uint_eq(c.mtu, 0);
	ck_assert_uint_eq(c.dm_bytes, 0);
	ck_assert_uint_eq(c.cm_port_offset, 1000);
	ck_assert_uint_eq(c.timeout_ms, 5000);
	env_set("LOCO_VERBS_PORT", ""); /* empty is unset */
	ck_assert_int_eq(parse(&c, err, sizeof(err)), 0);
	ck_assert_uint_eq(c.port, 0);
}
END_TEST

START_TEST(config_values)
{
	struct verbs_config c;
	char err[128];
	env_clear();
	env_set("LOCO_VERBS_DEVICE", "mlx5_1");
	env_set("LOCO_VERBS_PORT", "2");
	env_set("LOCO_VERBS_GID_INDEX", "3");
	env_set("LOCO_VERBS_MTU", "1024");
	env_set("LOCO_VERBS_DM_BYTES", "256k");
	env_set("LOCO_VERBS_CM_PORT_OFFSET", "2000");
	env_set("LOCO_TIMEOUT_MS", "750");
	ck_assert_int_eq(parse(&c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.device, "mlx5_1");
	ck_assert_uint_eq(c.port, 2);
	ck_assert_int_eq(c.gid_index, 3);
	ck_assert_uint_eq(c.mtu, 1024);
	ck_assert_uint_eq(c.dm_bytes, 256 * 1024);
	ck_assert_uint_eq(c.cm_port_offset, 2000);
	ck_assert_uint_eq(c.timeout_ms, 750);
	env_clear();
	env_set("LOCO_VERBS_DM_BYTES", "131072");
	ck_assert_int_eq(parse(&c, err, sizeof(err)), 0);
	ck_assert_uint_eq(c.dm_bytes, 131072);
}
END_TEST

static const struct { const char *name, *value; } bad_env[] = {
	{ "LOCO_VERBS_PORT", "0" },
	{ "LOCO_VERBS_PORT", "256" },
	{ "LOCO_VERBS_PORT", "one" },
	{ "LOCO_VERBS_PORT", "-1" },
	{ "LOCO_VERBS_PORT", "1x" },
	{ "LOCO_VERBS_GID_INDEX", "256" },
	{ "LOCO_VERBS_GID_INDEX", "-1" },
	{ "LOCO_VERBS_MTU", "3000" },
	{ "LOCO_VERBS_MTU", "128" },
	{ "LOCO_VERBS_MTU", "8192" },
	{ "LOCO_VERBS_DM_BYTES", "2g" },
	{ "LOCO_VERBS_DM_BYTES", "12q" },
	{ "LOCO_VERBS_DM_BYTES", "99999999999999999999999" },
	{ "LOCO_VERBS_CM_PORT_OFFSET", "0" },
	{ "LOCO_VERBS_CM_PORT_OFFSET", "65535" },
	{ "LOCO_TIMEOUT_MS", "0" },
	{ "LOCO_VERBS_DEVICE", "a-device-name-that-is-far-too-long-to-be-any-real-rdma-device-name" },
};

START_TEST(config_bad)
{
	struct verbs_config c = { .port = 77 };
	char err[160] = "";
	env_clear();
	env_set(bad_env[_i].name, bad_env[_i].value);
	ck_assert_int_eq(parse(&c, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, bad_env[_i].name) && strstr(err, bad_env[_i].value),
		      "message names the variable and value: %s", err);
	ck_assert_uint_eq(c.port, 77); /* output untouched on error */
}
END_TEST

/* Per-node settings from the hosts file: used where the environment is
 * silent, overridden where it speaks, bad values named by file and line. */
START_TEST(config_hosts_file)
{
	static const char text[] =
		"0 10.0.0.1:7000 memory rdma_dev=mlx5_1 rdma_port=2 gid_index=3\n"
		"# node 1 asks too much\n"
		"1 10.0.0.2:7000 compute mtu=1024 dm_bytes=2g\n"
		"2 10.0.0.3:7000 mtu=1000\n";
	struct loco_hosts h;
	struct verbs_config c = { .port = 77 };
	char err[VERBS_LABEL_MAX + 256] = "";
	ck_assert_int_eq(loco_hosts_parse("hosts.txt", text, &h, err, sizeof(err)), 0);
	env_clear();
	ck_assert_int_eq(verbs_config_parse_host(env_get, &h.node[0], h.path, &c, err,
						 sizeof(err)), 0);
	ck_assert_str_eq(c.device, "mlx5_1");
	ck_assert_uint_eq(c.port, 2);
	ck_assert_int_eq(c.gid_index, 3);
	ck_assert_uint_eq(c.mtu, 0);
	env_set("LOCO_VERBS_GID_INDEX", "1");
	ck_assert_int_eq(verbs_config_parse_host(env_get, &h.node[0], h.path, &c, err,
						 sizeof(err)), 0);
	ck_assert_int_eq(c.gid_index, 1);
	ck_assert_str_eq(c.device, "mlx5_1");

	env_clear();
	c.port = 77;
	ck_assert_int_eq(verbs_config_parse_host(env_get, &h.node[1], h.path, &c, err,
						 sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "hosts.txt:3: dm_bytes=2g: expected bytes (suffix k/m/g "
			 "allowed), at most 1g");
	ck_assert_uint_eq(c.port, 77);
	env_set("LOCO_VERBS_DM_BYTES", "1m");  /* the environment wins */
	ck_assert_int_eq(verbs_config_parse_host(env_get, &h.node[1], h.path, &c, err,
						 sizeof(err)), 0);
	ck_assert_uint_eq(c.dm_bytes, 1 << 20);
	ck_assert_uint_eq(c.mtu, 1024);

	env_clear();
	ck_assert_int_eq(verbs_config_parse_host(env_get, &h.node[2], h.path, &c, err,
						 sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "hosts.txt:4: mtu=1000: expected one of 256, 512, 1024, "
			 "2048, 4096");
}
END_TEST

START_TEST(cm_port)
{
	uint16_t p;
	ck_assert_int_eq(verbs_cm_port(7000, 1000, &p), 0);
	ck_assert_uint_eq(p, 8000);
	ck_assert_int_eq(verbs_cm_port(65000, 1000, &p), -ERANGE);
	ck_assert_int_eq(verbs_cm_port(64535, 1000, &p), 0);
	ck_assert_uint_eq(p, 65535);
}
END_TEST

/* ---- arena descriptor --------------------------------------------------- */

/* Field by field: the struct has padding, which memcmp would compare. */
static bool desc_eq(const struct verbs_desc *a, const struct verbs_desc *b)
{
	return a->node == b->node && a->flags == b->flags &&
	       a->arena_addr == b->arena_addr && a->arena_len == b->arena_len &&
	       a->arena_rkey == b->arena_rkey && a->dm_rkey == b->dm_rkey &&
	       a->dm_len == b->dm_len && a->addr_family == b->addr_family &&
	       a->cm_port == b->cm_port && !memcmp(a->addr, b->addr, 16);
}

static const struct verbs_desc desc_sample = {
	.node = 3, .flags = VERBS_DESC_F_DM | VERBS_DESC_F_ATOMIC,
	.arena_addr = 0x7f0012345000, .arena_len = 1 << 30,
	.arena_rkey = 0xabcdef01, .dm_rkey = 0x1234, .dm_len = 128 * 1024,
	.addr_family = 4, .cm_port = 8001, .addr = { 10, 0, 1, 5 },
};

START_TEST(desc_roundtrip)
{
	uint8_t buf[LOCO_DESC_MAX];
	size_t len = 0;
	struct verbs_desc d;
	ck_assert_int_eq(verbs_desc_pack(&desc_sample, buf, sizeof(buf), &len), 0);
	ck_assert_uint_eq(len, VERBS_DESC_LEN);
	ck_assert_uint_eq(len, 72);
	ck_assert(len <= LOCO_DESC_MAX);
	ck_assert_int_eq(memcmp(buf, "LOCV", 4), 0);           /* magic, LE */
	ck_assert_uint_eq(buf[4], 2);                           /* version */
	ck_assert_uint_eq(buf[5], 0);
	ck_assert_uint_eq(buf[6], VERBS_DESC_LEN);
	ck_assert_uint_eq(buf[8], 3);                           /* node */
	ck_assert_uint_eq(buf[16], 0x00);                       /* address, LE */
	ck_assert_uint_eq(buf[17], 0x50);
	ck_assert_uint_eq(buf[32], 0x01);                       /* rkey, LE */
	ck_assert_uint_eq(buf[35], 0xab);
	ck_assert_uint_eq(buf[48], 4);                          /* IPv4 */
	ck_assert_uint_eq(buf[50] | buf[51] << 8, 8001);        /* CM port, LE */
	ck_assert_uint_eq(buf[56], 10);                         /* network order */
	ck_assert_uint_eq(buf[59], 5);
	ck_assert_int_eq(verbs_desc_unpack(buf, len, &d), 0);
	ck_assert(desc_eq(&d, &desc_sample));
}
END_TEST

START_TEST(desc_bad)
{
	uint8_t buf[LOCO_DESC_MAX], bad[LOCO_DESC_MAX];
	size_t len;
	struct verbs_desc d = { .node = 99 };
	ck_assert_int_eq(verbs_desc_pack(&desc_sample, buf, 71, &len), -ENOSPC);
	struct verbs_desc incons = desc_sample;
	incons.dm_len = 0;
	ck_assert_int_eq(verbs_desc_pack(&incons, buf, sizeof(buf), &len), -EINVAL);
	incons = desc_sample;
	incons.addr_family = 0;
	ck_assert_int_eq(verbs_desc_pack(&incons, buf, sizeof(buf), &len), -EINVAL);
	ck_assert_int_eq(verbs_desc_pack(&desc_sample, buf, sizeof(buf), &len), 0);
	ck_assert_int_eq(verbs_desc_unpack(buf, len - 1, &d), -LOCO_EPROTO);
	ck_assert_int_eq(verbs_desc_unpack(buf, len + 1, &d), -LOCO_EPROTO);
	ck_assert_int_eq(verbs_desc_unpack(buf, 48, &d), -LOCO_EPROTO); /* version 1 size */
	memcpy(bad, buf, len);
	bad[4] = 1; /* version 1: no address */
	ck_assert_int_eq(verbs_desc_unpack(bad, len, &d), -LOCO_EPROTO);
	memcpy(bad, buf, len);
	bad[0] = 'X'; /* magic */
	ck_assert_int_eq(verbs_desc_unpack(bad, len, &d), -LOCO_EPROTO);
	memcpy(bad, buf, len);
	bad[6] = 40; /* declared length */
	ck_assert_int_eq(verbs_desc_unpack(bad, len, &d), -LOCO_EPROTO);
	memcpy(bad, buf, len);
	bad[12] |= 0x80; /* unknown flag */
	ck_assert_int_eq(verbs_desc_unpack(bad, len, &d), -LOCO_EPROTO);
	memcpy(bad, buf, len);
	memset(bad + 40, 0, 8); /* DM flag without DM length */
	ck_assert_int_eq(verbs_desc_unpack(bad, len, &d), -LOCO_EPROTO);
	memcpy(bad, buf, len);
	memset(bad + 16, 0, 8); /* no arena address */
	ck_assert_int_eq(verbs_desc_unpack(bad, len, &d), -LOCO_EPROTO);
	memcpy(bad, buf, len);
	bad[48] = 5; /* address family */
	ck_assert_int_eq(verbs_desc_unpack(bad, len, &d), -LOCO_EPROTO);
	memcpy(bad, buf, len);
	bad[49] = 1; /* reserved */
	ck_assert_int_eq(verbs_desc_unpack(bad, len, &d), -LOCO_EPROTO);
	memcpy(bad, buf, len);
	bad[53] = 1; /* reserved */
	ck_assert_int_eq(verbs_desc_unpack(bad, len, &d), -LOCO_EPROTO);
	memcpy(bad, buf, len);
	bad[50] = bad[51] = 0; /* no CM port */
	ck_assert_int_eq(verbs_desc_unpack(bad, len, &d), -LOCO_EPROTO);
	memcpy(bad, buf, len);
	memset(bad + 56, 0, 16); /* unspecified address */
	ck_assert_int_eq(verbs_desc_unpack(bad, len, &d), -LOCO_EPROTO);
	memcpy(bad, buf, len);
	bad[64] = 1; /* IPv4 with bytes past the 4th */
	ck_assert_int_eq(verbs_desc_unpack(bad, len, &d), -LOCO_EPROTO);
	ck_assert_uint_eq(d.node, 99); /* output untouched on error */
}
END_TEST

/* The advertised RDMA address, to and from socket addresses. */
START_TEST(desc_address)
{
	struct verbs_desc d = desc_sample;
	struct sockaddr_storage ss;
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons(9000) };
	struct sockaddr_in6 in6 = { .sin6_family = AF_INET6, .sin6_port = htons(9001) };
	inet_pton(AF_INET, "192.168.7.9", &in.sin_addr);
	inet_pton(AF_INET6, "fd00::1:2", &in6.sin6_addr);
	ck_assert_int_eq(verbs_desc_addr_set(&d, (struct sockaddr *)&in), 0);
	ck_assert_uint_eq(d.addr_family, 4);
	ck_assert_uint_eq(d.cm_port, 9000);
	verbs_desc_sockaddr(&d, &ss);
	ck_assert_int_eq(ss.ss_family, AF_INET);
	ck_assert_int_eq(memcmp(&ss, &in, sizeof(in)), 0);
	ck_assert(verbs_desc_addr_is(&d, (struct sockaddr *)&in));
	in.sin_port = htons(1); /* the port does not matter */
	ck_assert(verbs_desc_addr_is(&d, (struct sockaddr *)&in));
	in.sin_addr.s_addr ^= htonl(1);
	ck_assert(!verbs_desc_addr_is(&d, (struct sockaddr *)&in));
	ck_assert(!verbs_desc_addr_is(&d, (struct sockaddr *)&in6));

	ck_assert_int_eq(verbs_desc_addr_set(&d, (struct sockaddr *)&in6), 0);
	ck_assert_uint_eq(d.addr_family, 6);
	ck_assert_uint_eq(d.cm_port, 9001);
	verbs_desc_sockaddr(&d, &ss);
	ck_assert_int_eq(ss.ss_family, AF_INET6);
	ck_assert_int_eq(memcmp(&((struct sockaddr_in6 *)&ss)->sin6_addr, &in6.sin6_addr, 16), 0);
	ck_assert_uint_eq(ntohs(((struct sockaddr_in6 *)&ss)->sin6_port), 9001);
	ck_assert(verbs_desc_addr_is(&d, (struct sockaddr *)&in6));
	uint8_t buf[LOCO_DESC_MAX];
	size_t len;
	struct verbs_desc back;
	ck_assert_int_eq(verbs_desc_pack(&d, buf, sizeof(buf), &len), 0);
	ck_assert_int_eq(verbs_desc_unpack(buf, len, &back), 0);
	ck_assert(desc_eq(&back, &d));

	struct sockaddr unix_sa = { .sa_family = AF_UNIX };
	ck_assert_int_eq(verbs_desc_addr_set(&d, &unix_sa), -EAFNOSUPPORT);
}
END_TEST

/* ---- connection private data ------------------------------------------ */

START_TEST(conn_roundtrip)
{
	struct verbs_conn_msg m = { .kind = VERBS_CONN_REQ, .mtu = IBV_MTU_1024,
				    .src = 2, .dst = 5, .thread = 7, .reason = 0 };
	for (int i = 0; i < 16; i++)
		m.gid[i] = (uint8_t)(0xf0 + i);
	uint8_t buf[56] = { 0 }; /* what a REQ delivers: padded to 56 bytes */
	struct verbs_conn_msg out;
	verbs_conn_pack(&m, buf);
	ck_assert_int_eq(memcmp(buf, "LOCC", 4), 0);
	ck_assert_int_eq(verbs_conn_unpack(buf, sizeof(buf), &out), 0);
	ck_assert_int_eq(memcmp(&m, &out, sizeof(m)), 0);
	ck_assert_int_eq(verbs_conn_unpack(buf, VERBS_CONN_LEN, &out), 0);
	ck_assert_int_eq(verbs_conn_unpack(buf, VERBS_CONN_LEN - 1, &out), -LOCO_EPROTO);
	ck_assert_int_eq(verbs_conn_unpack(NULL, 0, &out), -LOCO_EPROTO);
	buf[6] = 9; /* kind */
	ck_assert_int_eq(verbs_conn_unpack(buf, sizeof(buf), &out), -LOCO_EPROTO);
	buf[6] = VERBS_CONN_REP;
	buf[7] = 6; /* MTU enum */
	ck_assert_int_eq(verbs_conn_unpack(buf, sizeof(buf), &out), -LOCO_EPROTO);
	struct verbs_conn_msg rej = { .kind = VERBS_CONN_REJ, .reason = LOCO_EHOSTS };
	verbs_conn_pack(&rej, buf);
	ck_assert_int_eq(verbs_conn_unpack(buf, VERBS_CONN_LEN, &out), 0);
	ck_assert_uint_eq(out.reason, LOCO_EHOSTS);
	uint8_t zeros[148] = { 0 }; /* a REJ from a non-loco CM */
	ck_assert_int_eq(verbs_conn_unpack(zeros, sizeof(zeros), &out), -LOCO_EPROTO);
}
END_TEST

/* ---- device, port and address selection --------------------------------- */

/* Two dual-port NICs: mlx5_0 port 1 down, port 2 active without address;
 * mlx5_1 port 1 active with an IPv6 and an IPv4 address, port 2 active
 * with one IPv4 address. */
static const struct verbs_port_info sel_ports[] = {
	{ "mlx5_0", 1, false, "PORT_DOWN" },
	{ "mlx5_0", 2, true, "PORT_ACTIVE" },
	{ "mlx5_1", 1, true, "PORT_ACTIVE" },
	{ "mlx5_1", 2, true, "PORT_ACTIVE" },
};
#define SEL_NP (sizeof(sel_ports) / sizeof(sel_ports[0]))

static struct verbs_ip sel_ips[] = {
	{ "mlx5_1", 1, true, false, "fd00::5", "ens2f0", { .ss_family = AF_INET6 } },
	{ "mlx5_1", 1, false, false, "10.0.1.5", "ens2f0", { .ss_family = AF_INET } },
	{ "mlx5_1", 2, false, false, "10.0.2.5", "ens2f1", { .ss_family = AF_INET } },
};
#define SEL_NI (sizeof(sel_ips) / sizeof(sel_ips[0]))

static char sel_msg[4 * VERBS_LABEL_MAX];

static int sel(const struct verbs_config *c, const struct verbs_port_info *p,
	       size_t np, const struct verbs_ip *ips, size_t ni,
	       struct verbs_choice *out)
{
	return verbs_select(c, p, np, ips, ni, out, sel_msg, sizeof(sel_msg));
}

#define SEL_IS(ch, pi, ii) do { \
	ck_assert_uint_eq((ch).port, pi); \
	ck_assert_uint_eq((ch).ip, ii); \
} while (0)

/* Nothing set and the hosts-file address on a management NIC: the first
 * active port with an address, IPv4 preferred. */
START_TEST(select_default_first_active)
{
	struct verbs_config c = { .gid_index = -1 };
	struct verbs_choice ch;
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, sel_ips, SEL_NI, &ch), 0);
	SEL_IS(ch, 2, 1);
	ck_assert_msg(strstr(sel_msg, "mlx5_1 port 1") && strstr(sel_msg, "10.0.1.5 on ens2f0") &&
		      strstr(sel_msg, "first active port"), "%s", sel_msg);
}
END_TEST

/* The hosts-file address on an RDMA port wins over the first active one,
 * and on that port over other addresses. */
START_TEST(select_default_ctrl_address)
{
	struct verbs_config c = { .gid_index = -1 };
	struct verbs_ip ips[SEL_NI];
	struct verbs_choice ch;
	memcpy(ips, sel_ips, sizeof(ips));
	ips[2].ctrl = true;
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, ips, SEL_NI, &ch), 0);
	SEL_IS(ch, 3, 2);
	ck_assert_msg(strstr(sel_msg, "hosts-file address 10.0.2.5"), "%s", sel_msg);
	memcpy(ips, sel_ips, sizeof(ips));
	ips[0].ctrl = true; /* an IPv6 hosts-file address beats the IPv4 one */
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, ips, SEL_NI, &ch), 0);
	SEL_IS(ch, 2, 0);
}
END_TEST

/* The hosts-file address on a down port: an error, not another NIC. */
START_TEST(select_default_ctrl_down)
{
	struct verbs_config c = { .gid_index = -1 };
	struct verbs_port_info ports[SEL_NP];
	struct verbs_ip ips[SEL_NI];
	struct verbs_choice ch = { 77, 77 };
	memcpy(ports, sel_ports, sizeof(ports));
	memcpy(ips, sel_ips, sizeof(ips));
	ports[3].active = false;
	strcpy(ports[3].state, "PORT_DOWN");
	ips[2].ctrl = true;
	ck_assert_int_eq(sel(&c, ports, SEL_NP, ips, SEL_NI, &ch), -ENETDOWN);
	ck_assert_msg(strstr(sel_msg, "mlx5_1 port 2 (it holds the hosts-file address 10.0.2.5) "
			     "is PORT_DOWN, not active") &&
		      strstr(sel_msg, "LOCO_VERBS_DEVICE") &&
		      strstr(sel_msg, "mlx5_0 port 2 PORT_ACTIVE"), "%s", sel_msg);
	SEL_IS(ch, 77, 77); /* untouched on failure */
}
END_TEST

/* Nothing usable: no port active, or none with an address. */
START_TEST(select_default_nothing)
{
	struct verbs_config c = { .gid_index = -1 };
	struct verbs_choice ch;
	ck_assert_int_eq(sel(&c, sel_ports, 1, sel_ips, SEL_NI, &ch), -ENETDOWN);
	ck_assert_msg(strstr(sel_msg, "no active RDMA port with an IP address") &&
		      strstr(sel_msg, "ports: mlx5_0 port 1 PORT_DOWN"), "%s", sel_msg);
	ck_assert_int_eq(sel(&c, sel_ports, 2, sel_ips, 0, &ch), -EADDRNOTAVAIL);
	ck_assert_msg(strstr(sel_msg, "addresses on RDMA ports: none"), "%s", sel_msg);
	ck_assert_int_eq(sel(&c, sel_ports, 0, sel_ips, 0, &ch), -LOCO_ENODEV);
}
END_TEST

/* A named device: its port with the hosts-file address, else its first
 * active port with an address; the message names the setting's source. */
START_TEST(select_device)
{
	struct verbs_config c = { .gid_index = -1, .device = "mlx5_1",
				  .device_from = "hosts.txt:4: rdma_dev" };
	struct verbs_ip ips[SEL_NI];
	struct verbs_choice ch;
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, sel_ips, SEL_NI, &ch), 0);
	SEL_IS(ch, 2, 1);
	ck_assert_msg(strstr(sel_msg, "(hosts.txt:4: rdma_dev=mlx5_1)"), "%s", sel_msg);
	memcpy(ips, sel_ips, sizeof(ips));
	ips[2].ctrl = true;
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, ips, SEL_NI, &ch), 0);
	SEL_IS(ch, 3, 2);
	/* mlx5_0: port 1 is down, port 2 has no address. */
	strcpy(c.device, "mlx5_0");
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, sel_ips, SEL_NI, &ch), -EADDRNOTAVAIL);
	ck_assert_msg(strstr(sel_msg, "mlx5_0 port 2 (hosts.txt:4: rdma_dev=mlx5_0) has no IP "
			     "address") && strstr(sel_msg, "10.0.2.5 on ens2f1 (mlx5_1 port 2)"),
		      "%s", sel_msg);
	strcpy(c.device, "mlx5_9");
	c.device_from[0] = '\0';
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, sel_ips, SEL_NI, &ch), -LOCO_ENODEV);
	ck_assert_str_eq(sel_msg, "LOCO_VERBS_DEVICE=mlx5_9: no such RDMA device (this machine "
			 "has: mlx5_0 port 1 PORT_DOWN, mlx5_0 port 2 PORT_ACTIVE, mlx5_1 port 1 "
			 "PORT_ACTIVE, mlx5_1 port 2 PORT_ACTIVE)");
}
END_TEST

START_TEST(select_device_port)
{
	struct verbs_config c = { .gid_index = -1, .device = "mlx5_1", .port = 2,
				  .device_from = "LOCO_VERBS_DEVICE",
				  .port_from = "LOCO_VERBS_PORT" };
	struct verbs_choice ch;
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, sel_ips, SEL_NI, &ch), 0);
	SEL_IS(ch, 3, 2);
	ck_assert_msg(strstr(sel_msg, "LOCO_VERBS_DEVICE=mlx5_1, LOCO_VERBS_PORT=2"), "%s",
		      sel_msg);
	c.port = 3;
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, sel_ips, SEL_NI, &ch), -LOCO_ENODEV);
	ck_assert_str_eq(sel_msg, "LOCO_VERBS_PORT=3: mlx5_1 has no port 3 (it has: mlx5_1 "
			 "port 1 PORT_ACTIVE, mlx5_1 port 2 PORT_ACTIVE)");
	strcpy(c.device, "mlx5_0");
	c.port = 1;
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, sel_ips, SEL_NI, &ch), -ENETDOWN);
	ck_assert_msg(strstr(sel_msg, "mlx5_0 port 1 (LOCO_VERBS_DEVICE=mlx5_0, "
			     "LOCO_VERBS_PORT=1) is PORT_DOWN, not active"), "%s", sel_msg);
}
END_TEST

/* A port without a device: of the hosts-file address's device, else of
 * the first device where it is active with an address. */
START_TEST(select_port_only)
{
	struct verbs_config c = { .gid_index = -1, .port = 2,
				  .port_from = "hosts.txt:2: rdma_port" };
	struct verbs_ip ips[SEL_NI];
	struct verbs_choice ch;
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, sel_ips, SEL_NI, &ch), 0);
	SEL_IS(ch, 3, 2); /* mlx5_0 port 2 has no address */
	memcpy(ips, sel_ips, sizeof(ips));
	ips[1].ctrl = true; /* on mlx5_1 port 1: port 2 of mlx5_1 */
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, ips, SEL_NI, &ch), 0);
	SEL_IS(ch, 3, 2);
	c.port = 3;
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, ips, SEL_NI, &ch), -LOCO_ENODEV);
	ck_assert_msg(strstr(sel_msg, "hosts.txt:2: rdma_port=3: mlx5_1 (the device of the "
			     "hosts-file address) has no port 3"), "%s", sel_msg);
	ck_assert_int_eq(sel(&c, sel_ports, SEL_NP, sel_ips, SEL_NI, &ch), -LOCO_ENODEV);
	ck_assert_msg(strstr(sel_msg, "no RDMA device has a port 3"), "%s", sel_msg);
}
END_TEST

/* The sources of device and port as the configuration records them. */
START_TEST(select_config_sources)
{
	static const char text[] = "0 10.0.0.1:7000 compute rdma_dev=mlx5_1 rdma_port=2\n";
	struct loco_hosts h;
	struct verbs_config c;
	char err[VERBS_LABEL_MAX + 256] = "";
	ck_assert_int_eq(loco_hosts_parse("hosts.txt", text, &h, err, sizeof(err)), 0);
	env_clear();
	ck_assert_int_eq(verbs_config_parse_host(env_get, &h.node[0], h.path, &c, err,
						 sizeof(err)), 0);
	ck_assert_str_eq(c.device_from, "hosts.txt:1: rdma_dev");
	ck_assert_str_eq(c.port_from, "hosts.txt:1: rdma_port");
	env_set("LOCO_VERBS_PORT", "1");
	ck_assert_int_eq(verbs_config_parse_host(env_get, &h.node[0], h.path, &c, err,
						 sizeof(err)), 0);
	ck_assert_str_eq(c.port_from, "LOCO_VERBS_PORT");
	ck_assert_uint_eq(c.port, 1);
	env_clear();
	ck_assert_int_eq(parse(&c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.device_from, "");
	ck_assert_str_eq(c.port_from, "");
}
END_TEST

/* ---- GID selection ------------------------------------------------------ */

static struct verbs_gid gid_entry(uint32_t index, uint32_t type, uint32_t ipv4)
{
	struct verbs_gid g = { .index = index, .type = type };
	if (ipv4) {
		g.raw[10] = g.raw[11] = 0xff;
		memcpy(g.raw + 12, &ipv4, 4);
	} else {
		g.raw[0] = 0xfe;
		g.raw[1] = 0x80;
		g.raw[15] = (uint8_t)index;
	}
	return g;
}

#define IP4(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)

START_TEST(gid_pick_roce)
{
	struct verbs_gid tab[] = {
		gid_entry(0, VERBS_GID_ROCE_V1, 0),
		gid_entry(1, VERBS_GID_ROCE_V2, 0),
		gid_entry(2, VERBS_GID_ROCE_V1, IP4(10, 0, 0, 1)),
		gid_entry(3, VERBS_GID_ROCE_V2, IP4(10, 0, 0, 1)),
		gid_entry(5, VERBS_GID_ROCE_V2, IP4(10, 0, 0, 2)),
	};
	uint32_t idx, ip;
	ck_assert(verbs_gid_ipv4(tab[3].raw, &ip));
	ck_assert_uint_eq(ip, IP4(10, 0, 0, 1));
	ck_assert(!verbs_gid_ipv4(tab[1].raw, &ip));
	ck_assert_int_eq(verbs_gid_pick(tab, 5, true, -1, IP4(10, 0, 0, 2), &idx), 0);
	ck_assert_uint_eq(idx, 5);   /* RoCE v2 with our own address */
	ck_assert_int_eq(verbs_gid_pick(tab, 5, true, -1, 0, &idx), 0);
	ck_assert_uint_eq(idx, 3);   /* first RoCE v2 IPv4-mapped */
	ck_assert_int_eq(verbs_gid_pick(tab, 5, true, -1, IP4(192, 168, 0, 9), &idx), 0);
	ck_assert_uint_eq(idx, 3);
	ck_assert_int_eq(verbs_gid_pick(tab, 3, true, -1, 0, &idx), 0);
	ck_assert_uint_eq(idx, 1);   /* first RoCE v2 */
	ck_assert_int_eq(verbs_gid_pick(tab, 1, true, -1, 0, &idx), 0);
	ck_assert_uint_eq(idx, 0);   /* only RoCE v1: lowest index */
	ck_assert_int_eq(verbs_gid_pick(tab, 5, true, 2, 0, &idx), 0);
	ck_assert_uint_eq(idx, 2);   /* explicit */
	ck_assert_int_eq(verbs_gid_pick(tab, 5, true, 4, 0, &idx), -ENOENT);
	ck_assert_int_eq(verbs_gid_pick(tab, 0, true, -1, 0, &idx), -ENOENT);
}
END_TEST

START_TEST(gid_pick_ib)
{
	struct verbs_gid tab[] = {
		gid_entry(1, VERBS_GID_IB, 0),
		gid_entry(0, VERBS_GID_IB, 0),
	};
	uint32_t idx;
	ck_assert_int_eq(verbs_gid_pick(tab, 2, false, -1, 0, &idx), 0);
	ck_assert_uint_eq(idx, 0);
	struct verbs_gid unknown[] = { gid_entry(4, VERBS_GID_UNKNOWN, IP4(10, 0, 0, 1)),
				       gid_entry(2, VERBS_GID_UNKNOWN, 0) };
	ck_assert_int_eq(verbs_gid_pick(unknown, 2, true, -1, IP4(10, 0, 0, 1), &idx), 0);
	ck_assert_uint_eq(idx, 2);   /* no type information: lowest index */
	char text[40];
	verbs_gid_format(tab[1].raw, text);
	ck_assert_str_eq(text, "fe80:0000:0000:0000:0000:0000:0000:0000");
}
END_TEST

START_TEST(mtu_and_pages)
{
	ck_assert_int_eq(verbs_mtu_enum(256), IBV_MTU_256);
	ck_assert_int_eq(verbs_mtu_enum(4096), IBV_MTU_4096);
	ck_assert_int_eq(verbs_mtu_enum(1500), -EINVAL);
	ck_assert_uint_eq(verbs_mtu_bytes(IBV_MTU_2048), 2048);
	ck_assert_uint_eq(verbs_mtu_bytes(0), 0);
	ck_assert_uint_eq(verbs_mtu_bytes(6), 0);
	uint64_t sz[2];
	ck_assert_uint_eq(verbs_arena_page_sizes(256 << 20, sz), 1);
	ck_assert_uint_eq(sz[0], 2 << 20);
	ck_assert_uint_eq(verbs_arena_page_sizes(UINT64_C(1) << 30, sz), 2);
	ck_assert_uint_eq(sz[0], UINT64_C(1) << 30);
	ck_assert_uint_eq(sz[1], 2 << 20);
}
END_TEST

/* ---- work requests ------------------------------------------------------ */

#define REMOTE_ADDR UINT64_C(0x100000)
#define REMOTE_LEN (UINT64_C(1) << 20)

static _Alignas(64) uint8_t arena[4096];
static _Alignas(64) uint8_t bounce[256];
static struct verbs_sq sq;
static struct ibv_send_wr swr[VERBS_SQ_DEPTH];
static struct ibv_sge sge[VERBS_SQ_DEPTH];

static void sq_setup(void)
{
	verbs_sq_init(&sq, VERBS_SQ_DEPTH, 64, 4, 5, true);
	sq.arena = (struct verbs_lmr){ (uintptr_t)arena, (uintptr_t)arena + sizeof(arena), 0x11 };
	sq.remote = (struct verbs_rmr){ REMOTE_ADDR, REMOTE_LEN, 0x22 };
	sq.remote_dm = (struct verbs_rmr){ 0, 0, 0 };
	sq.bounce = (struct verbs_bounce){ .buf = bounce, .cap = sizeof(bounce), .lkey = 0x33 };
	memset(swr, 0xa5, sizeof(swr)); /* garbage the builder must overwrite */
	memset(sge, 0xa5, sizeof(sge));
}

static struct loco_wr wr_make(uint8_t op, uint8_t sig, uint32_t len, uint64_t off,
			      void *local, uint64_t id)
{
	return (struct loco_wr){ .opcode = op, .signaled = sig, .len = len,
				 .remote_off = off, .local = local, .wr_id = id };
}

static int build_commit(const struct loco_wr *w, unsigned n)
{
	uint64_t bh;
	int r = verbs_sq_build(&sq, w, n, swr, sge, &bh);
	if (r == 0)
		verbs_sq_commit(&sq, n, bh);
	return r;
}

START_TEST(wr_chain_batch)
{
	sq_setup();
	uint64_t small = 0x1122334455667788, faa_res = 0;
	struct loco_wr w[6] = {
		wr_make(LOCO_OP_WRITE, 0, 8, 64, &small, 100),             /* inline */
		wr_make(LOCO_OP_WRITE, 1, 128, 128, arena + 256, 101),     /* arena lkey */
		wr_make(LOCO_OP_READ, 0, 0, 0, NULL, 102),                 /* fence READ */
		wr_make(LOCO_OP_CAS, 0, 8, 512, arena + 8, 103),           /* arena */
		wr_make(LOCO_OP_FAA, 1, 8, 520, &faa_res, 104),            /* bounce */
		wr_make(LOCO_OP_READ, 0, 64, 4096, arena + 1024, 105),
	};
	w[3].compare = 7;
	w[3].operand = 9;
	w[4].operand = 3;
	uint64_t bh;
	ck_assert_int_eq(verbs_sq_build(&sq, w, 6, swr, sge, &bh), 0);
	ck_assert_uint_eq(sq.head, 0); /* nothing committed yet */

	/* One chain of exactly six, in order. */
	unsigned count = 0;
	for (struct ibv_send_wr *p = &swr[0]; p; p = p->next, count++)
		ck_assert_ptr_eq(p, &swr[count]);
	ck_assert_uint_eq(count, 6);

	/* Exactly the requested completions are signalled; only the small
	 * WRITE is inline. */
	const unsigned flags[6] = { IBV_SEND_INLINE, IBV_SEND_SIGNALED, 0, 0,
				    IBV_SEND_SIGNALED, 0 };
	const int ops[6] = { IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ,
			     IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
			     IBV_WR_RDMA_READ };
	for (unsigned i = 0; i < 6; i++) {
		ck_assert_uint_eq(swr[i].send_flags, flags[i]);
		ck_assert_int_eq(swr[i].opcode, ops[i]);
		ck_assert_uint_eq(swr[i].wr_id, (UINT64_C(5) << 56) | i);
	}
	/* Remote side. */
	ck_assert_uint_eq(swr[0].wr.rdma.remote_addr, REMOTE_ADDR + 64);
	ck_assert_uint_eq(swr[1].wr.rdma.rkey, 0x22);
	ck_assert_uint_eq(swr[3].wr.atomic.remote_addr, REMOTE_ADDR + 512);
	ck_assert_uint_eq(swr[3].wr.atomic.compare_add, 7);
	ck_assert_uint_eq(swr[3].wr.atomic.swap, 9);
	ck_assert_uint_eq(swr[3].wr.atomic.rkey, 0x22);
	ck_assert_uint_eq(swr[4].wr.atomic.compare_add, 3);
	/* Local side. */
	ck_assert_int_eq(swr[0].num_sge, 1);
	ck_assert_uint_eq(sge[0].addr, (uintptr_t)&small);
	ck_assert_uint_eq(sge[0].length, 8);
	ck_assert_uint_eq(sge[1].lkey, 0x11);
	ck_assert_uint_eq(sge[1].addr, (uintptr_t)(arena + 256));
	ck_assert_int_eq(swr[2].num_sge, 0);        /* zero-length READ */
	ck_assert_ptr_null(swr[2].sg_list);
	ck_assert_uint_eq(sge[3].lkey, 0x11);
	ck_assert_uint_eq(sge[4].lkey, 0x33);       /* result via bounce */
	ck_assert_uint_eq(sge[4].addr, (uintptr_t)bounce);
	ck_assert_uint_eq(sge[4].length, 8);
	ck_assert_uint_eq(sge[5].lkey, 0x11);

	verbs_sq_commit(&sq, 6, bh);
	ck_assert_uint_eq(sq.head, 6);
	ck_assert_uint_eq(verbs_sq_free(&sq), VERBS_SQ_DEPTH - 6);
}
END_TEST

START_TEST(wr_single_and_unsignaled)
{
	sq_setup();
	struct loco_wr w = wr_make(LOCO_OP_READ, 1, 16, 0, arena, 1);
	ck_assert_int_eq(build_commit(&w, 1), 0);
	ck_assert_ptr_null(swr[0].next);
	ck_assert_uint_eq(swr[0].send_flags, IBV_SEND_SIGNALED);
	struct loco_wr u[3] = { wr_make(LOCO_OP_READ, 0, 8, 0, arena, 2),
				wr_make(LOCO_OP_READ, 0, 8, 8, arena, 3),
				wr_make(LOCO_OP_READ, 0, 8, 16, arena, 4) };
	ck_assert_int_eq(build_commit(u, 3), 0);
	for (unsigned i = 0; i < 3; i++)
		ck_assert_uint_eq(swr[i].send_flags, 0);
	ck_assert_uint_eq(swr[0].wr_id, (UINT64_C(5) << 56) | 1);
}
END_TEST

START_TEST(wr_bounce_write_copies_source)
{
	sq_setup();
	uint8_t src[100];
	for (unsigned i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)i;
	struct loco_wr w = wr_make(LOCO_OP_WRITE, 1, sizeof(src), 0, src, 9);
	ck_assert_int_eq(build_commit(&w, 1), 0);
	ck_assert_uint_eq(swr[0].send_flags, IBV_SEND_SIGNALED); /* > max_inline */
	ck_assert_uint_eq(sge[0].lkey, 0x33);
	ck_assert_int_eq(memcmp((void *)(uintptr_t)sge[0].addr, src, sizeof(src)), 0);
	memset(src, 0, sizeof(src)); /* caller may reuse its buffer at once */
	ck_assert_uint_eq(((uint8_t *)(uintptr_t)sge[0].addr)[99], 99);
}
END_TEST

START_TEST(wr_bounce_read_copied_at_completion)
{
	sq_setup();
	uint8_t dst[40] = { 0 };
	uint64_t old = 0;
	struct loco_wr w[2] = { wr_make(LOCO_OP_READ, 0, sizeof(dst), 0, dst, 1),
				wr_make(LOCO_OP_CAS, 1, 8, 64, &old, 2) };
	ck_assert_int_eq(build_commit(w, 2), 0);
	memset((void *)(uintptr_t)sge[0].addr, 0x5a, sizeof(dst)); /* the "NIC" */
	uint64_t v = 42;
	memcpy((void *)(uintptr_t)sge[1].addr, &v, 8);
	ck_assert_uint_eq(dst[0], 0);           /* nothing before the completion */
	ck_assert(verbs_sq_mark(&sq, swr[1].wr_id, 0));
	struct loco_cqe c[4];
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 4), 1);
	ck_assert_uint_eq(c[0].wr_id, 2);
	ck_assert_int_eq(c[0].status, 0);
	ck_assert_uint_eq(c[0].peer, 4);
	ck_assert_uint_eq(dst[0], 0x5a);        /* unsignalled READ retired too */
	ck_assert_uint_eq(dst[39], 0x5a);
	ck_assert_uint_eq(old, 42);
	ck_assert_uint_eq(sq.bounce.tail, sq.bounce.head);
}
END_TEST

START_TEST(wr_atomic_unaligned_local_bounces)
{
	sq_setup();
	struct loco_wr w = wr_make(LOCO_OP_FAA, 1, 8, 0, arena + 4, 1);
	ck_assert_int_eq(build_commit(&w, 1), 0);
	ck_assert_uint_eq(sge[0].lkey, 0x33);
}
END_TEST

START_TEST(wr_bounce_full_is_all_or_nothing)
{
	sq_setup();
	uint8_t a[200], b[200], big[300];
	struct loco_wr w[2] = { wr_make(LOCO_OP_READ, 0, 200, 0, a, 1),
				wr_make(LOCO_OP_READ, 1, 200, 256, b, 2) };
	uint64_t bh;
	/* Together they never fit, even in the empty buffer. */
	ck_assert_int_eq(verbs_sq_build(&sq, w, 2, swr, sge, &bh), -EMSGSIZE);
	ck_assert_uint_eq(sq.head, 0);
	ck_assert_uint_eq(sq.bounce.head, 0);
	ck_assert_int_eq(build_commit(&w[0], 1), 0);
	ck_assert_int_eq(verbs_sq_build(&sq, &w[1], 1, swr, sge, &bh), -EAGAIN);
	struct loco_wr huge = wr_make(LOCO_OP_READ, 1, sizeof(big), 0, big, 3);
	ck_assert_int_eq(verbs_sq_build(&sq, &huge, 1, swr, sge, &bh), -EMSGSIZE);
	/* Retiring the first frees its bounce space; the second wraps to 0. */
	ck_assert(verbs_sq_mark(&sq, verbs_wrid_make(5, 0), 0));
	struct loco_cqe c[1];
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 1), 0); /* unsignalled: no report */
	ck_assert_int_eq(build_commit(&w[1], 1), 0);
	ck_assert_uint_eq(sge[0].addr, (uintptr_t)bounce);
}
END_TEST

/* Requests in device memory target the peer's zero-based DM MR: address
 * = offset, the DM rkey, bounds of the DM; a batch may mix both spaces. */
START_TEST(wr_device_memory)
{
	sq_setup();
	sq.remote_dm = (struct verbs_rmr){ 0, 256, 0x44 };
	uint64_t res = 0, bh;
	struct loco_wr w[3] = {
		wr_make(LOCO_OP_FAA, 0, 8, 16, &res, 1),
		wr_make(LOCO_OP_WRITE, 0, 8, 64, arena, 2),
		wr_make(LOCO_OP_READ, 1, 16, 240, arena + 64, 3),
	};
	w[0].space = LOCO_SPACE_DM;
	w[0].operand = 1;
	w[2].space = LOCO_SPACE_DM;
	ck_assert_int_eq(verbs_sq_build(&sq, w, 3, swr, sge, &bh), 0);
	ck_assert_int_eq(swr[0].opcode, IBV_WR_ATOMIC_FETCH_AND_ADD);
	ck_assert_uint_eq(swr[0].wr.atomic.remote_addr, 16);
	ck_assert_uint_eq(swr[0].wr.atomic.rkey, 0x44);
	ck_assert_uint_eq(swr[1].wr.rdma.remote_addr, REMOTE_ADDR + 64); /* arena */
	ck_assert_uint_eq(swr[1].wr.rdma.rkey, 0x22);
	ck_assert_uint_eq(swr[2].wr.rdma.remote_addr, 240);
	ck_assert_uint_eq(swr[2].wr.rdma.rkey, 0x44);
	verbs_sq_commit(&sq, 3, bh);

	struct loco_wr bad[] = {
		wr_make(LOCO_OP_READ, 1, 16, 248, arena, 9),  /* past the DM's end */
		wr_make(LOCO_OP_READ, 1, 8, 256, arena, 9),
		wr_make(LOCO_OP_READ, 1, 8, 0, arena, 9),     /* unknown space */
	};
	bad[0].space = bad[1].space = LOCO_SPACE_DM;
	bad[2].space = 7;
	for (unsigned i = 0; i < 3; i++)
		ck_assert_int_eq(verbs_sq_build(&sq, &bad[i], 1, swr, sge, &bh), -EINVAL);
	/* A peer without device memory: every DM request is out of bounds. */
	sq.remote_dm = (struct verbs_rmr){ 0, 0, 0 };
	struct loco_wr one = wr_make(LOCO_OP_CAS, 1, 8, 0, &res, 9);
	one.space = LOCO_SPACE_DM;
	ck_assert_int_eq(verbs_sq_build(&sq, &one, 1, swr, sge, &bh), -EINVAL);
	ck_assert_uint_eq(sq.head, 3);
}
END_TEST

START_TEST(wr_invalid)
{
	sq_setup();
	uint64_t x;
	uint64_t bh;
	struct loco_wr bad[] = {
		wr_make(LOCO_OP_READ, 1, 16, REMOTE_LEN - 8, arena, 1), /* past the end */
		wr_make(LOCO_OP_WRITE, 1, 8, UINT64_MAX, arena, 1),     /* overflow */
		wr_make(LOCO_OP_CAS, 1, 4, 0, &x, 1),                   /* atomic size */
		wr_make(LOCO_OP_FAA, 1, 8, 12, &x, 1),                  /* misaligned */
		wr_make(9, 1, 8, 0, &x, 1),                             /* opcode */
		wr_make(LOCO_OP_READ, 1, 8, 0, NULL, 1),                /* no buffer */
	};
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_int_eq(verbs_sq_build(&sq, &bad[i], 1, swr, sge, &bh), -EINVAL);
	struct loco_wr edge = wr_make(LOCO_OP_READ, 1, 0, REMOTE_LEN, NULL, 1);
	ck_assert_int_eq(verbs_sq_build(&sq, &edge, 1, swr, sge, &bh), 0);
	sq.atomics = false;
	struct loco_wr cas = wr_make(LOCO_OP_CAS, 1, 8, 0, &x, 1);
	ck_assert_int_eq(verbs_sq_build(&sq, &cas, 1, swr, sge, &bh), -EOPNOTSUPP);
	ck_assert_uint_eq(sq.head, 0);
}
END_TEST

/* ---- completions -------------------------------------------------------- */

/* Post four READs from the arena, signalled as SIG says. */
static void post4(const uint8_t sig[4])
{
	struct loco_wr w[4];
	for (unsigned i = 0; i < 4; i++)
		w[i] = wr_make(LOCO_OP_READ, sig[i], 8, 8 * i, arena + 8 * i, 10 + i);
	ck_assert_int_eq(build_commit(w, 4), 0);
}

START_TEST(cq_in_order)
{
	sq_setup();
	static const uint8_t sig[4] = { 0, 1, 0, 1 };
	struct loco_cqe c[4];
	post4(sig);
	ck_assert(verbs_sq_mark(&sq, verbs_wrid_make(5, 1), 0));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 4), 1);
	ck_assert_uint_eq(c[0].wr_id, 11);
	ck_assert_uint_eq(sq.tail, 2);
	ck_assert(!verbs_sq_mark(&sq, verbs_wrid_make(5, 0), 0)); /* stale */
	ck_assert(!verbs_sq_mark(&sq, verbs_wrid_make(5, 9), 0)); /* never posted */
	ck_assert(verbs_sq_mark(&sq, verbs_wrid_make(5, 3), 0));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 4), 1);
	ck_assert_uint_eq(c[0].wr_id, 13);
	ck_assert(!verbs_sq_pending(&sq));
	ck_assert_uint_eq(verbs_sq_free(&sq), VERBS_SQ_DEPTH);
}
END_TEST

START_TEST(cq_error_on_unsignaled)
{
	sq_setup();
	static const uint8_t sig[4] = { 0, 1, 0, 1 };
	struct loco_cqe c[4];
	post4(sig);
	/* The unsignalled first request fails (errors always complete). */
	ck_assert(verbs_sq_mark(&sq, verbs_wrid_make(5, 0), -EACCES));
	ck_assert(verbs_sq_failed(&sq));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 4), 2);
	ck_assert_uint_eq(c[0].wr_id, 11);
	ck_assert_int_eq(c[0].status, -EACCES);    /* the cause, once */
	ck_assert_uint_eq(c[1].wr_id, 13);
	ck_assert_int_eq(c[1].status, -LOCO_EQP);  /* flushed */
	/* The hardware's flush completions that follow are stale. */
	ck_assert(!verbs_sq_mark(&sq, verbs_wrid_make(5, 3), -LOCO_EQP));
	ck_assert(!verbs_sq_pending(&sq));
}
END_TEST

START_TEST(cq_error_on_signaled)
{
	sq_setup();
	static const uint8_t sig[4] = { 1, 1, 0, 1 };
	struct loco_cqe c[4];
	post4(sig);
	ck_assert(verbs_sq_mark(&sq, verbs_wrid_make(5, 0), 0));
	ck_assert(verbs_sq_mark(&sq, verbs_wrid_make(5, 1), -ETIMEDOUT));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 1), 1); /* bounded by MAX */
	ck_assert_uint_eq(c[0].wr_id, 10);
	ck_assert_int_eq(c[0].status, 0);
	ck_assert(verbs_sq_pending(&sq));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 4), 2);
	ck_assert_uint_eq(c[0].wr_id, 11);
	ck_assert_int_eq(c[0].status, -ETIMEDOUT);
	ck_assert_uint_eq(c[1].wr_id, 13);
	ck_assert_int_eq(c[1].status, -LOCO_EQP);
}
END_TEST

START_TEST(cq_partial_post)
{
	sq_setup();
	struct loco_cqe c[8];
	struct loco_wr first = wr_make(LOCO_OP_READ, 1, 8, 0, arena, 1);
	ck_assert_int_eq(build_commit(&first, 1), 0);
	uint8_t dst[8];
	struct loco_wr w[3] = { wr_make(LOCO_OP_READ, 1, 8, 0, dst, 2),
				wr_make(LOCO_OP_READ, 1, 8, 8, arena, 3),
				wr_make(LOCO_OP_READ, 1, 8, 16, arena, 4) };
	uint64_t bh;
	ck_assert_int_eq(verbs_sq_build(&sq, w, 3, swr, sge, &bh), 0);
	verbs_sq_fail_partial(&sq, 2, -LOCO_EQP); /* NIC took 2 of 3 */
	ck_assert_uint_eq(sq.head, 3);
	ck_assert_uint_eq(sq.bounce.head, 8);     /* only the taken request's bounce */
	ck_assert(verbs_sq_failed(&sq));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 8), 1); /* refused batch is silent */
	ck_assert_uint_eq(c[0].wr_id, 1);
	ck_assert_int_eq(c[0].status, -LOCO_EQP);
	ck_assert_uint_eq(sq.bounce.tail, sq.bounce.head);
}
END_TEST

START_TEST(cq_seq_wraps)
{
	sq_setup();
	static const uint8_t sig[4] = { 0, 0, 0, 1 };
	struct loco_cqe c[2];
	sq.head = sq.tail = sq.done = VERBS_SEQ_MASK - 1; /* 56-bit wr_id wraps */
	post4(sig);
	ck_assert_uint_eq(swr[3].wr_id, (UINT64_C(5) << 56) | 1);
	ck_assert(verbs_sq_mark(&sq, swr[3].wr_id, 0));
	ck_assert_uint_eq(verbs_sq_drain(&sq, c, 2), 1);
	ck_assert_uint_eq(c[0].wr_id, 13);
}
END_TEST

START_TEST(wc_status_map)
{
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_SUCCESS), 0);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_REM_ACCESS_ERR), -EACCES);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_RETRY_EXC_ERR), -ETIMEDOUT);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_RNR_RETRY_EXC_ERR), -ETIMEDOUT);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_WR_FLUSH_ERR), -LOCO_EQP);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_LOC_LEN_ERR), -EMSGSIZE);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_LOC_PROT_ERR), -EFAULT);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_REM_INV_REQ_ERR), -EINVAL);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_REM_OP_ERR), -EREMOTEIO);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_REM_ABORT_ERR), -ECONNABORTED);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_BAD_RESP_ERR), -EPROTO);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_FATAL_ERR), -EIO);
	ck_assert_int_eq(verbs_wc_errno(IBV_WC_GENERAL_ERR), -EIO);
	for (int s = IBV_WC_SUCCESS + 1; s <= IBV_WC_TM_RNDV_INCOMPLETE; s++)
		ck_assert_int_lt(verbs_wc_errno((enum ibv_wc_status)s), 0);
}
END_TEST

/* ---- the ops table on this machine -------------------------------------- */

START_TEST(ops_table)
{
	const struct loco_transport_ops *o = &loco_verbs_ops;
	ck_assert_str_eq(o->name, "verbs");
	ck_assert(o->open && o->close && o->arena_base && o->arena_len &&
		  o->arena_desc && o->peer_add && o->dm_len && o->dm_zero &&
		  o->cq_create && o->cq_destroy && o->qp_create && o->qp_destroy &&
		  o->post && o->poll && o->qp_abort);
}
END_TEST

static struct loco_hosts hosts;

static struct loco_tp_config one_node(void)
{
	memset(&hosts, 0, sizeof(hosts));
	hosts.node[0] = (struct loco_host){ .id = 0, .port = 7000, .present = 1,
					    .host = "127.0.0.1" };
	hosts.count = 1;
	return (struct loco_tp_config){ .node_id = 0, .arena_bytes = 1 << 20,
					.hosts = &hosts };
}

static bool have_rdma_device(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (l)
		ibv_free_device_list(l);
	return l && n > 0;
}

/* Run open with stderr captured; returns its result and the log text. */
static int open_captured(const struct loco_tp_config *cfg, struct loco_tp **tp,
			 char *log, size_t len)
{
	struct capture cap;
	capture_start(&cap);
	int r = loco_verbs_ops.open(cfg, tp);
	capture_end(&cap, log, len);
	return r;
}

START_TEST(open_without_device)
{
	if (have_rdma_device())
		return; /* covered by the device tests */
	struct loco_tp_config cfg = one_node();
	struct loco_tp *tp = NULL;
	char log[2048];
	loco_log_set_level(LOCO_LOG_INFO);
	ck_assert_int_eq(open_captured(&cfg, &tp, log, sizeof(log)), -LOCO_ENODEV);
	ck_assert_ptr_null(tp);
	ck_assert_msg(strstr(log, "no RDMA device found (ibv_get_device_list: ") &&
		      strstr(log, "use --transport shm"), "log: %s", log);
	unsigned msgs = 0;
	for (const char *p = log; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		msgs += !strncmp(p, "loco ", 5);
	ck_assert_msg(msgs == 1, "exactly one message, got: %s", log);
	/* And again: nothing was left half-open. */
	ck_assert_int_eq(open_captured(&cfg, &tp, log, sizeof(log)), -LOCO_ENODEV);
}
END_TEST

START_TEST(open_bad_env)
{
	struct loco_tp_config cfg = one_node();
	struct loco_tp *tp = NULL;
	char log[2048];
	setenv("LOCO_VERBS_MTU", "3000", 1);
	int r = open_captured(&cfg, &tp, log, sizeof(log));
	unsetenv("LOCO_VERBS_MTU");
	ck_assert_int_eq(r, -EINVAL);
	ck_assert_msg(strstr(log, "LOCO_VERBS_MTU=3000"), "log: %s", log);
}
END_TEST

static Suite *verbs_suite(void)
{
	Suite *s = suite_create("verbs");
	TCase *t = tcase_create("config");
	tcase_add_test(t, config_defaults);
	tcase_add_test(t, config_values);
	tcase_add_loop_test(t, config_bad, 0, sizeof(bad_env) / sizeof(bad_env[0]));
	tcase_add_test(t, config_hosts_file);
	tcase_add_test(t, cm_port);
	tcase_add_test(t, mtu_and_pages);
	suite_add_tcase(s, t);
	t = tcase_create("wire");
	tcase_add_test(t, desc_roundtrip);
	tcase_add_test(t, desc_bad);
	tcase_add_test(t, desc_address);
	tcase_add_test(t, conn_roundtrip);
	suite_add_tcase(s, t);
	t = tcase_create("select");
	tcase_add_test(t, select_default_first_active);
	tcase_add_test(t, select_default_ctrl_address);
	tcase_add_test(t, select_default_ctrl_down);
	tcase_add_test(t, select_default_nothing);
	tcase_add_test(t, select_device);
	tcase_add_test(t, select_device_port);
	tcase_add_test(t, select_port_only);
	tcase_add_test(t, select_config_sources);
	suite_add_tcase(s, t);
	t = tcase_create("gid");
	tcase_add_test(t, gid_pick_roce);
	tcase_add_test(t, gid_pick_ib);
	suite_add_tcase(s, t);
	t = tcase_create("wr");
	tcase_add_test(t, wr_chain_batch);
	tcase_add_test(t, wr_single_and_unsignaled);
	tcase_add_test(t, wr_bounce_write_copies_source);
	tcase_add_test(t, wr_bounce_read_copied_at_completion);
	tcase_add_test(t, wr_atomic_unaligned_local_bounces);
	tcase_add_test(t, wr_bounce_full_is_all_or_nothing);
	tcase_add_test(t, wr_invalid);
	tcase_add_test(t, wr_device_memory);
	suite_add_tcase(s, t);
	t = tcase_create("cq");
	tcase_add_test(t, cq_in_order);
	tcase_add_test(t, cq_error_on_unsignaled);
	tcase_add_test(t, cq_error_on_signaled);
	tcase_add_test(t, cq_partial_post);
	tcase_add_test(t, cq_seq_wraps);
	tcase_add_test(t, wc_status_map);
	suite_add_tcase(s, t);
	t = tcase_create("open");
	tcase_add_test(t, ops_table);
	tcase_add_test(t, open_without_device);
	tcase_add_test(t, open_bad_env);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(verbs_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
