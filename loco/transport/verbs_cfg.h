/* SPDX-License-Identifier: MIT */
/* verbs transport: the parts that need no device, unit-tested on any
 * machine (test/transport/test_verbs_cfg.c):
 *  - configuration from the environment (LOCO_VERBS_*) and the node's
 *    hosts-file settings, with clear errors;
 *  - the arena descriptor peers exchange (wire format, versioned);
 *  - the rdma_cm connection private data (wire format, versioned);
 *  - choosing the RDMA device, port and address among what the machine has;
 *  - GID selection from a port's GID table;
 *  - MTU conversions and the huge page sizes to try for an arena.
 * Internal to the library: every symbol here is hidden. */
#ifndef LOCO_TRANSPORT_VERBS_CFG_H
#define LOCO_TRANSPORT_VERBS_CFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <loco/hosts.h>

#pragma GCC visibility push(hidden)

/* ---- configuration ------------------------------------------------------ */

#define VERBS_DEVNAME_MAX 64
#define VERBS_CM_PORT_OFFSET_DEFAULT 1000
#define VERBS_TIMEOUT_MS_DEFAULT 5000
#define VERBS_DM_BYTES_MAX (UINT64_C(1) << 30)
#define VERBS_LABEL_MAX (LOCO_PATH_MAX + 32)

struct verbs_config {
	char device[VERBS_DEVNAME_MAX]; /* LOCO_VERBS_DEVICE; "" = chosen (verbs_select) */
	uint32_t port;                  /* LOCO_VERBS_PORT, 1-based; 0 = chosen (verbs_select) */
	/* Where DEVICE and PORT came from, for messages: "LOCO_VERBS_DEVICE"
	 * or "PATH:LINE: rdma_dev"; "" when unset. */
	char device_from[VERBS_LABEL_MAX];
	char port_from[VERBS_LABEL_MAX];
	int32_t gid_index;              /* LOCO_VERBS_GID_INDEX; -1 = choose (verbs_gid_pick) */
	uint32_t mtu;                   /* LOCO_VERBS_MTU in bytes; 0 = the port's active MTU */
	uint64_t dm_bytes;              /* LOCO_VERBS_DM_BYTES; 0 = no device memory */
	uint32_t cm_port_offset;        /* LOCO_VERBS_CM_PORT_OFFSET */
	uint32_t timeout_ms;            /* LOCO_TIMEOUT_MS: every connection-manager wait */
};

/* Looks a variable up (getenv in production, a table in tests). */
typedef const char *(*verbs_env_fn)(const char *name);

/* Fill OUT from ENV, defaults for unset or empty variables. On a bad value
 * returns -EINVAL with "LOCO_VERBS_X=value: what is wrong" in ERR; OUT is
 * written only on success. */
int verbs_config_parse(verbs_env_fn env, struct verbs_config *out, char *err,
		       size_t errlen);

/* As verbs_config_parse, with the settings of HOST (this node's line of
 * hosts file PATH: rdma_dev, rdma_port, gid_index, mtu, dm_bytes) for the
 * variables ENV leaves unset or empty: the environment wins. A bad value
 * from the file is reported as "PATH:LINE: key=value: what is wrong". */
int verbs_config_parse_host(verbs_env_fn env, const struct loco_host *host,
			    const char *path, struct verbs_config *out, char *err,
			    size_t errlen);

/* The rdma_cm listener port of a node: its hosts-file port + OFFSET.
 * -ERANGE if that is above 65535. */
int verbs_cm_port(uint16_t ctrl_port, uint32_t offset, uint16_t *out);

/* ---- arena descriptor (travels in the control plane's hello) -------------
 *
 * Version 3, 72 bytes, every field little-endian:
 *   0  u32 magic "LOCV"       4  u16 version (3)     6  u16 length (72)
 *   8  u32 node id           12  u32 flags (VERBS_DESC_F_*)
 *  16  u64 arena address     24  u64 arena length
 *  32  u32 fence rkey: the read-only registration of the arena's first
 *      LOCO_FENCE_LEN bytes, which zero-length READs and FLUSH's READ
 *      target. The arena itself grants no remote access: every region
 *      has a registration of its own, whose rkey travels with the
 *      region's descriptor (JOIN, REGION_ACK).
 *  36  u32 reserved (0)
 *  40  u64 device-memory length (0 without DM; each hot region's
 *      registration is zero-based: remote addresses in it are offsets
 *      from the region's start)
 *  48  u8 address family (4 or 6)   49 u8 reserved (0)
 *  50  u16 rdma_cm port             52 u32 reserved (0)
 *  56  u8[16] the node's RDMA address, network byte order (IPv4: the first
 *      4 bytes, the rest 0): where its rdma_cm listens, which need not be
 *      its hosts-file (control-plane) address.
 * Unknown flags, a wrong magic, version or length, or a bad address are
 * errors. Version 1 (48 bytes, no address) and version 2 (one rkey for
 * the whole arena, one for the device memory) are refused. */
#define VERBS_DESC_MAGIC 0x56434f4cu /* "LOCV" */
#define VERBS_DESC_VERSION 3
#define VERBS_DESC_LEN 72
#define VERBS_DESC_F_DM 0x1u      /* a device-memory region is offered */
#define VERBS_DESC_F_ATOMIC 0x2u  /* the NIC executes RDMA atomics */
#define VERBS_DESC_F_ALL (VERBS_DESC_F_DM | VERBS_DESC_F_ATOMIC)

struct verbs_desc {
	uint32_t node;
	uint32_t flags;
	uint64_t arena_addr;
	uint64_t arena_len;
	uint32_t fence_rkey;
	uint64_t dm_len;
	uint8_t addr_family;   /* 4 or 6 */
	uint16_t cm_port;
	uint8_t addr[16];
};

/* Serialise D into BUF (CAP bytes); *LEN = VERBS_DESC_LEN. -ENOSPC if
 * CAP is too small, -EINVAL if D is inconsistent (DM flag vs length, bad
 * address). */
int verbs_desc_pack(const struct verbs_desc *d, void *buf, size_t cap,
		    size_t *len);
/* Parse and validate LEN bytes. -LOCO_EPROTO on a wrong length, magic,
 * version, unknown flag, zero arena address or length, DM fields that
 * disagree with the DM flag, or an address that is not a unicast IPv4 or
 * IPv6 address with a port. */
int verbs_desc_unpack(const void *buf, size_t len, struct verbs_desc *out);

/* D's address and rdma_cm port from SA (AF_INET or AF_INET6 with its
 * port): 0, or -EAFNOSUPPORT. */
int verbs_desc_addr_set(struct verbs_desc *d, const struct sockaddr *sa);
/* D's address and port as a socket address. */
void verbs_desc_sockaddr(const struct verbs_desc *d, struct sockaddr_storage *out);
/* True if SA's IP (port ignored) is D's address. */
bool verbs_desc_addr_is(const struct verbs_desc *d, const struct sockaddr *sa);

/* ---- connection private data (rdma_cm REQ / REP / REJ) -------------------
 *
 * Version 2, 48 bytes, little-endian; fits the 56 bytes a REQ carries over
 * RDMA_PS_TCP. The receiver may see trailing zero padding (the CM delivers
 * a fixed-size buffer), so parsing accepts LEN >= 48.
 *   0  u32 magic "LOCC"   4  u16 version (2)   6  u8 kind   7  u8 path MTU (enum ibv_mtu)
 *   8  u32 source node   12  u32 destination node   16  u32 thread index
 *  20  u32 reason (REJ: positive errno or LOCO code; else 0)
 *  24  u8[16] the sender's GID (the one its QP uses as source)
 *  40  u64 the sender's incarnation (what a fence names: a fenced one's
 *      REQ is refused with LOCO_EFENCED) */
#define VERBS_CONN_MAGIC 0x43434f4cu /* "LOCC" */
#define VERBS_CONN_VERSION 2
#define VERBS_CONN_LEN 48

enum verbs_conn_kind {
	VERBS_CONN_REQ = 1, /* active side: I am SRC, thread THREAD, for DST */
	VERBS_CONN_REP = 2, /* passive side accepts */
	VERBS_CONN_REJ = 3, /* passive side refuses, REASON says why */
};

struct verbs_conn_msg {
	uint8_t kind;
	uint8_t mtu;
	uint32_t src;
	uint32_t dst;
	uint32_t thread;
	uint32_t reason;
	uint8_t gid[16];
	uint64_t incarnation;
};

void verbs_conn_pack(const struct verbs_conn_msg *m, uint8_t buf[VERBS_CONN_LEN]);
/* -LOCO_EPROTO on short data, wrong magic, version or kind, bad MTU. */
int verbs_conn_unpack(const void *buf, size_t len, struct verbs_conn_msg *out);

/* ---- device, port and address selection ----------------------------------
 *
 * The hosts-file address is the control plane's (TCP) and may sit on a
 * management NIC without RDMA. The RDMA device, port and the IP address
 * rdma_cm uses are chosen from what the machine has (verbs_dev.c lists it):
 *  1. LOCO_VERBS_DEVICE / LOCO_VERBS_PORT (or rdma_dev / rdma_port) when
 *     given: that device (its port holding the hosts-file address, else its
 *     first active port with an address) or that port (of the device holding
 *     the hosts-file address, else of the first device where it is active
 *     with an address); absent, down or address-less is an error naming the
 *     setting and listing what exists;
 *  2. else the port holding the hosts-file address, if it is on an RDMA
 *     device (a down port is then an error, not a silent switch of NIC);
 *  3. else the first port, in device-list order, that is active and has
 *     an IP address.
 * On the chosen port the address is the hosts-file address if it is there,
 * else the first IPv4 address, else the first IPv6 one. */

#define VERBS_PORT_STATE_MAX 24

/* One port of one device, as ibv_query_port saw it. */
struct verbs_port_info {
	char dev[VERBS_DEVNAME_MAX];
	uint8_t port;
	bool active;                       /* IBV_PORT_ACTIVE */
	char state[VERBS_PORT_STATE_MAX];  /* ibv_port_state_str, for messages */
};

/* A local IP address and the (device, port) rdma_cm binds it to. Only
 * addresses on RDMA ports are listed. */
struct verbs_ip {
	char dev[VERBS_DEVNAME_MAX];
	uint8_t port;
	bool ipv6;
	bool ctrl;                         /* it is the hosts-file address */
	char text[48];                     /* numeric form, for messages */
	char ifname[16];                   /* its netdev */
	struct sockaddr_storage sa;        /* the address (port 0) */
};

/* What verbs_select chose: indices into its PORTS and IPS arguments. */
struct verbs_choice {
	size_t port;
	size_t ip;
};

/* Choose among NP ports and NI addresses by the rules above (CFG's device,
 * port and their sources). On success MSG says what was chosen and why
 * ("mlx5_0 port 1 (LOCO_VERBS_DEVICE), address 10.0.0.1 on ens1f0"); on
 * failure returns -LOCO_ENODEV (no such device or port), -ENETDOWN (not
 * active) or -EADDRNOTAVAIL (no address), with the error in MSG. OUT is
 * written only on success. */
int verbs_select(const struct verbs_config *cfg,
		 const struct verbs_port_info *ports, size_t np,
		 const struct verbs_ip *ips, size_t ni,
		 struct verbs_choice *out, char *msg, size_t msglen);

/* ---- GID selection ------------------------------------------------------ */

enum verbs_gid_type {
	VERBS_GID_IB = 0,
	VERBS_GID_ROCE_V1 = 1,
	VERBS_GID_ROCE_V2 = 2,
	VERBS_GID_UNKNOWN = 3, /* kernel could not tell (no GID table query) */
};

struct verbs_gid {
	uint32_t index;
	uint32_t type;   /* enum verbs_gid_type */
	uint8_t raw[16];
};

/* True if RAW is an IPv4-mapped GID (::ffff:a.b.c.d); *IPV4 gets a.b.c.d in
 * network byte order. */
bool verbs_gid_ipv4(const uint8_t raw[16], uint32_t *ipv4);

/* Choose a source GID among the N valid entries of one port.
 * WANT >= 0: that index, which must be in TAB (else -ENOENT).
 * WANT < 0 on Ethernet (RoCE): a RoCE v2 IPv4-mapped GID whose address is
 * OWN_IPV4 (network order, 0 = unknown), else the first RoCE v2 IPv4-mapped
 * GID, else the first RoCE v2 GID, else the lowest index. On InfiniBand:
 * index 0 if present, else the lowest. -ENOENT if N is 0. */
int verbs_gid_pick(const struct verbs_gid *tab, size_t n, bool ethernet,
		   int32_t want, uint32_t own_ipv4, uint32_t *index);

const char *verbs_gid_type_name(uint32_t type);
/* "fe80:0000:...": 39 characters and a NUL. */
void verbs_gid_format(const uint8_t raw[16], char out[40]);

/* ---- MTU and pages ------------------------------------------------------ */

/* Bytes (256..4096, a power of two) to enum ibv_mtu (1..5), or -EINVAL. */
int verbs_mtu_enum(uint32_t bytes);
/* enum ibv_mtu to bytes; 0 for an invalid value. */
uint32_t verbs_mtu_bytes(int mtu);

/* Huge page sizes worth trying for an arena of ARENA_BYTES, largest first,
 * into OUT[2]; returns how many. 1 GiB pages only when the arena is at least
 * 1 GiB (a smaller arena would pin a whole 1 GiB page), then 2 MiB. */
unsigned verbs_arena_page_sizes(uint64_t arena_bytes, uint64_t out[2]);

#pragma GCC visibility pop

#endif
