/* SPDX-License-Identifier: MIT */
/* verbs transport without a device, its configuration and wire formats:
 * settings from the environment and the hosts file (defaults, values, bad
 * values), the arena descriptor and connection private data (round trips,
 * bad input), device/port/address selection and GID selection. */
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
#include "loco/transport/transport.h"
#include "loco/transport/verbs_cfg.h"

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
	       a->fence_rkey == b->fence_rkey && a->dm_len == b->dm_len && a->addr_family == b->addr_family &&
	       a->cm_port == b->cm_port && !memcmp(a->addr, b->addr, 16);
}

static const struct verbs_desc desc_sample = {
	.node = 3, .flags = VERBS_DESC_F_DM | VERBS_DESC_F_ATOMIC,
	.arena_addr = 0x7f0012345000, .arena_len = 1 << 30,
	.fence_rkey = 0xabcdef01, .dm_len = 128 * 1024,
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
	ck_assert_uint_eq(buf[4], 3);                           /* version */
	ck_assert_uint_eq(buf[5], 0);
	ck_assert_uint_eq(buf[6], VERBS_DESC_LEN);
	ck_assert_uint_eq(buf[8], 3);                           /* node */
	ck_assert_uint_eq(buf[16], 0x00);                       /* address, LE */
	ck_assert_uint_eq(buf[17], 0x50);
	ck_assert_uint_eq(buf[32], 0x01);                       /* fence rkey, LE */
	ck_assert_uint_eq(buf[35], 0xab);
	for (unsigned i = 36; i < 40; i++)                      /* reserved */
		ck_assert_uint_eq(buf[i], 0);
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
	bad[4] = 2; /* version 2: an rkey for the whole arena */
	ck_assert_int_eq(verbs_desc_unpack(bad, len, &d), -LOCO_EPROTO);
	memcpy(bad, buf, len);
	bad[37] = 0x12; /* version 2's device-memory rkey: reserved now */
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
				    .src = 2, .dst = 5, .thread = 7, .reason = 0,
				    .incarnation = UINT64_C(0x0123456789abcdef) };
	for (int i = 0; i < 16; i++)
		m.gid[i] = (uint8_t)(0xf0 + i);
	uint8_t buf[56] = { 0 }; /* what a REQ delivers: padded to 56 bytes */
	struct verbs_conn_msg out;
	verbs_conn_pack(&m, buf);
	ck_assert_int_eq(memcmp(buf, "LOCC", 4), 0);
	ck_assert_int_eq(verbs_conn_unpack(buf, sizeof(buf), &out), 0);
	ck_assert_int_eq(memcmp(&m, &out, sizeof(m)), 0);
	ck_assert_uint_eq(out.incarnation, UINT64_C(0x0123456789abcdef));
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
	buf[4] = 1; /* version 1: no incarnation, which a fence must see */
	ck_assert_int_eq(verbs_conn_unpack(buf, sizeof(buf), &out), -LOCO_EPROTO);
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

int main(void)
{
	Suite *s = suite_create("verbs config");
	TCase *t;
	t = tcase_create("config");
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
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
