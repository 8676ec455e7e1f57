/* SPDX-License-Identifier: MIT */
/* The hosts table from PMIx (boot.h). */
#include "loco/boot.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pmix.h>

#include "loco/internal.h"

/* X(member, symbol): every PMIx function used. */
#define PMIX_API_FUNCS(X)             \
	X(init, PMIx_Init)            \
	X(finalize, PMIx_Finalize)    \
	X(put, PMIx_Put)              \
	X(commit, PMIx_Commit)        \
	X(fence, PMIx_Fence)          \
	X(fence_nb, PMIx_Fence_nb)    \
	X(get, PMIx_Get)              \
	X(error_string, PMIx_Error_string)

struct pmix_api {
#define PMIX_API_MEMBER(member, symbol) __typeof__(symbol) *member;
	PMIX_API_FUNCS(PMIX_API_MEMBER)
#undef PMIX_API_MEMBER
};

#define KEY_NODE "loco.node"      /* the node's hosts-file line */
#define KEY_TRANSPORT "loco.tp"   /* its --transport */
#define LINE_MAX_LEN 128

struct loco_boot {
	struct pmix_api api;
	void *lib;
	pmix_proc_t self;
	_Atomic int end_done;     /* the end fence completed (0/1) */
	bool inited;              /* PMIx_Init succeeded */
	bool end_started;
};

/* Never unloaded: PMIx keeps a progress thread of its own. */
static int api_load(struct loco_boot *b)
{
	const char *env = getenv("LOCO_PMIX_LIB");
	const char *path = env && *env ? env : PMIX_LIB_DEFAULT;
	b->lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!b->lib) {
		loco_err("boot", "no hosts file, and cannot load PMIx (%s) to "
			 "find the other nodes: %s; install it (Debian 12: "
			 "apt-get install libpmix2) or pass --hosts FILE", path,
			 dlerror());
		return -ELIBACC;
	}
#define PMIX_API_RESOLVE(member, symbol)                                    \
	b->api.member = (__typeof__(symbol) *)dlsym(b->lib, #symbol);        \
	if (!b->api.member) {                                                 \
		loco_err("boot", "%s has no %s: loco needs PMIx 3 or newer",  \
			 path, #symbol);                                      \
		return -ELIBACC;                                              \
	}
	PMIX_API_FUNCS(PMIX_API_RESOLVE)
#undef PMIX_API_RESOLVE
	return 0;
}

static void info_set(pmix_info_t *info, const char *key)
{
	memset(info, 0, sizeof(*info));
	snprintf(info->key, sizeof(info->key), "%s", key);
}

/* PMIx_Get of KEY of rank RANK (PMIX_RANK_WILDCARD: the job's) of type
 * TYPE; *OUT is PMIx's allocation, freed with value_free. */
static int get(struct loco_boot *b, pmix_rank_t rank, const char *key,
	       pmix_data_type_t type, pmix_value_t **out)
{
	pmix_proc_t p = b->self;
	p.rank = rank;
	pmix_value_t *v = NULL;
	pmix_status_t st = b->api.get(&p, key, NULL, 0, &v);
	if (st == PMIX_SUCCESS && v && v->type == type) {
		*out = v;
		return 0;
	}
	loco_err("boot", "PMIx_Get of %s of rank %d: %s", key,
		 rank == PMIX_RANK_WILDCARD ? -1 : (int)rank,
		 st == PMIX_SUCCESS ? "unexpected type" : b->api.error_string(st));
	free(v);
	return -EPROTO;
}

static void value_free(pmix_value_t *v)
{
	if (v->type == PMIX_STRING)
		free(v->data.string);
	free(v);
}

/* An interface's IPv4 address (NAME), or with NAME NULL the first up,
 * non-loopback one's. */
static int iface_addr(const char *name, struct in_addr *out)
{
	struct ifaddrs *ifs, *i;
	if (getifaddrs(&ifs))
		return -errno;
	int rc = -ENOENT;
	for (i = ifs; i && rc; i = i->ifa_next) {
		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		if (name ? strcmp(i->ifa_name, name) != 0 :
		    !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
			continue;
		*out = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
		rc = 0;
	}
	freeifaddrs(ifs);
	return rc;
}

/* The address the host name resolves to, unless that is a loopback one
 * (Debian maps the host name to 127.0.1.1). */
static int hostname_addr(struct in_addr *out)
{
	char name[256];
	struct addrinfo hints = { .ai_family = AF_INET }, *res;
	if (gethostname(name, sizeof(name)) || getaddrinfo(name, NULL, &hints, &res))
		return -ENOENT;
	int rc = -ENOENT;
	for (struct addrinfo *a = res; a && rc; a = a->ai_next) {
		struct in_addr in = ((struct sockaddr_in *)a->ai_addr)->sin_addr;
		if ((ntohl(in.s_addr) >> 24) != 127) {
			*out = in;
			rc = 0;
		}
	}
	freeaddrinfo(res);
	return rc;
}

/* LOCO_LISTEN=HOST[:PORT] (HOST an IPv4 address or an interface), or the
 * default address (boot.h) and port 0. */
static int listen_addr(struct sockaddr_in *sa)
{
	const char *env = getenv("LOCO_LISTEN");
	char host[IF_NAMESIZE + 16] = "";
	unsigned port = 0;
	*sa = (struct sockaddr_in){ .sin_family = AF_INET };
	if (env && *env) {
		char extra;
		int n = sscanf(env, "%31[^:]:%u%c", host, &port, &extra);
		if ((n != 1 && n != 2) || port > 65535) {
			loco_err("boot", "LOCO_LISTEN: expected HOST[:PORT] (an "
				 "IPv4 address or an interface, port 0..65535, 0 "
				 "any), got '%s'", env);
			return -EINVAL;
		}
		if (inet_pton(AF_INET, host, &sa->sin_addr) != 1 &&
		    iface_addr(host, &sa->sin_addr)) {
			loco_err("boot", "LOCO_LISTEN: '%s' is neither an IPv4 "
				 "address nor an interface with one", host);
			return -EINVAL;
		}
	} else if (hostname_addr(&sa->sin_addr) &&
		   iface_addr(NULL, &sa->sin_addr)) {
		sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	}
	sa->sin_port = htons((uint16_t)port);
	return 0;
}

/* Binds and listens on this node's address; *SA gets the port. */
static int listen_bind(struct loco_mgr *mgr, struct sockaddr_in *sa)
{
	int rc = listen_addr(sa);
	if (rc)
		return rc;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	socklen_t len = sizeof(*sa);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)sa, sizeof(*sa)) || listen(fd, 64) ||
	    getsockname(fd, (struct sockaddr *)sa, &len)) {
		rc = -errno;
		char a[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &sa->sin_addr, a, sizeof(a));
		loco_err("boot", "cannot listen on %s:%u: %s%s", a,
			 ntohs(sa->sin_port), strerror(-rc), rc == -EADDRINUSE ?
			 " (two nodes on one host given one port in LOCO_LISTEN? "
			 "leave the port out and each node picks its own)" : "");
		close(fd);
		return rc;
	}
	mgr->listen_fd = fd;
	return 0;
}

/* The role of this node: --memory-nodes M decides (ranks 0..M-1 memory),
 * else the program's own (loco-memnode: memory), else compute. */
static int self_role(struct loco_mgr *mgr, uint32_t size)
{
	const struct loco_opts *o = &mgr->opts;
	if (o->memory_nodes < 0)
		return o->role >= 0 ? o->role : LOCO_ROLE_COMPUTE;
	if ((uint32_t)o->memory_nodes >= size) {
		loco_err("boot", "%d memory nodes leave no compute node in a job "
			 "of %u processes (--memory-nodes / LOCO_MEMORY_NODES "
			 "must be below the job's size)", o->memory_nodes, size);
		return -EINVAL;
	}
	int role = mgr->id < (uint32_t)o->memory_nodes ? LOCO_ROLE_MEMORY :
		   LOCO_ROLE_COMPUTE;
	if (o->role >= 0 && o->role != role) {
		loco_err("boot", "rank %u runs a %s node's program, but with "
			 "--memory-nodes %d it is a %s node (ranks 0..%d serve "
			 "memory: mpirun -np %d loco-memnode : -np N PROGRAM)",
			 mgr->id, loco_role_name(o->role), o->memory_nodes,
			 loco_role_name(role), o->memory_nodes - 1, o->memory_nodes);
		return -EINVAL;
	}
	return role;
}

/* PMIx_Put of this node's line and transport, Commit, Fence collecting
 * every rank's. */
static int publish(struct loco_mgr *mgr, struct loco_boot *b,
		   const char *line)
{
	pmix_value_t v = { .type = PMIX_STRING };
	v.data.string = (char *)line;
	pmix_status_t st = b->api.put(PMIX_GLOBAL, KEY_NODE, &v);
	if (st == PMIX_SUCCESS) {
		v.data.string = mgr->opts.transport;
		st = b->api.put(PMIX_GLOBAL, KEY_TRANSPORT, &v);
	}
	if (st == PMIX_SUCCESS)
		st = b->api.commit();
	pmix_info_t info[2];
	info_set(&info[0], PMIX_COLLECT_DATA);
	info[0].value.type = PMIX_BOOL;
	info[0].value.data.flag = true;
	info_set(&info[1], PMIX_TIMEOUT);
	info[1].value.type = PMIX_INT;
	info[1].value.data.integer = (mgr->opts.timeout_ms + 999) / 1000;
	if (st == PMIX_SUCCESS)
		st = b->api.fence(NULL, 0, info, 2);
	if (st == PMIX_SUCCESS)
		return 0;
	loco_err("boot", "publishing this node's address through PMIx failed: "
		 "%s (the other nodes did not all arrive within %d ms?)",
		 b->api.error_string(st), mgr->opts.timeout_ms);
	return -EPROTO;
}

/* Rank R's line into TEXT (LEN bytes used of CAP); checks its transport. */
static int collect_one(struct loco_mgr *mgr, struct loco_boot *b, uint32_t r,
		       char *text, size_t *len, size_t cap)
{
	pmix_value_t *line, *tp = NULL;
	int rc = get(b, r, KEY_NODE, PMIX_STRING, &line);
	if (rc)
		return rc;
	rc = get(b, r, KEY_TRANSPORT, PMIX_STRING, &tp);
	if (!rc && strcmp(tp->data.string, mgr->opts.transport) != 0) {
		loco_err("boot", "node %u runs transport %s, this node (%u) %s: "
			 "every node of a job needs the same --transport", r,
			 tp->data.string, mgr->id, mgr->opts.transport);
		rc = -EINVAL;
	}
	if (!rc)
		*len += (size_t)snprintf(text + *len, cap - *len, "%s\n",
					 line->data.string);
	value_free(line);
	if (tp)
		value_free(tp);
	return rc;
}

static int collect(struct loco_mgr *mgr, struct loco_boot *b, uint32_t size)
{
	size_t cap = (size_t)size * (LINE_MAX_LEN + 1) + 1, len = 0;
	char *text = malloc(cap);
	char path[LOCO_PATH_MAX], err[LOCO_PATH_MAX + 256];
	if (!text)
		return -ENOMEM;
	int rc = 0;
	for (uint32_t r = 0; r < size && !rc; r++)
		rc = collect_one(mgr, b, r, text, &len, cap);
	snprintf(path, sizeof(path), "PMIx job %s", b->self.nspace);
	if (!rc && (rc = loco_hosts_parse(path, text, &mgr->hosts, err,
					  sizeof(err))))
		loco_err("boot", "%s", err);
	free(text);
	return rc;
}

static int job_size(struct loco_boot *b, uint32_t *size)
{
	pmix_value_t *v;
	int rc = get(b, PMIX_RANK_WILDCARD, PMIX_JOB_SIZE, PMIX_UINT32, &v);
	if (rc)
		return rc;
	*size = v->data.uint32;
	value_free(v);
	if (*size <= LOCO_MAX_NODES)
		return 0;
	loco_err("boot", "the PMIx job has %u processes; loco runs at most %d "
		 "nodes", *size, LOCO_MAX_NODES);
	return -EINVAL;
}

/* After PMIx_Init: rank, size, role; bind; publish; collect. */
static int exchange(struct loco_mgr *mgr, struct loco_boot *b)
{
	uint32_t size = 0;
	struct sockaddr_in sa;
	if ((int)b->self.rank != mgr->opts.node_id) {
		loco_err("boot", "--id %d differs from this process's PMIx rank "
			 "%u", mgr->opts.node_id, b->self.rank);
		return -EINVAL;
	}
	int rc = job_size(b, &size);
	int role = rc ? rc : self_role(mgr, size);
	if (role < 0)
		return role;
	if ((rc = listen_bind(mgr, &sa)))
		return rc;
	char line[LINE_MAX_LEN], a[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &sa.sin_addr, a, sizeof(a));
	snprintf(line, sizeof(line), "%u %s:%u %s", mgr->id, a,
		 ntohs(sa.sin_port), loco_role_name(role));
	rc = publish(mgr, b, line);
	return rc ? rc : collect(mgr, b, size);
}

int loco_boot_pmix(struct loco_mgr *mgr)
{
	struct loco_boot *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	mgr->boot = b;
	int rc = api_load(b);
	if (rc)
		return rc;
	pmix_status_t st = b->api.init(&b->self, NULL, 0);
	if (st != PMIX_SUCCESS) {
		loco_err("boot", "PMIx_Init: %s (PMIX_RANK is set, but no PMIx "
			 "server answers: start the job with mpirun or srun "
			 "--mpi=pmix, or pass --hosts FILE)",
			 b->api.error_string(st));
		return -EPROTO;
	}
	b->inited = true;
	return exchange(mgr, b);
}

static void end_cb(pmix_status_t st, void *arg)
{
	struct loco_boot *b = arg;
	(void)st;
	/* Release: pairs with loco_boot_ended's acquire load. */
	atomic_store_explicit(&b->end_done, 1, memory_order_release);
}

void loco_boot_end_start(struct loco_mgr *mgr)
{
	struct loco_boot *b = mgr->boot;
	if (!b || !b->inited || b->end_started)
		return;
	b->end_started = true;
	pmix_status_t st = b->api.fence_nb(NULL, 0, NULL, 0, end_cb, b);
	if (st != PMIX_SUCCESS) {
		loco_err("boot", "PMIx_Fence_nb (the job's end): %s",
			 b->api.error_string(st));
		end_cb(st, b);
	}
}

bool loco_boot_ended(struct loco_mgr *mgr)
{
	struct loco_boot *b = mgr->boot;
	/* Acquire: pairs with end_cb's release store. */
	return b && atomic_load_explicit(&b->end_done, memory_order_acquire);
}

void loco_boot_fini(struct loco_mgr *mgr, bool fence)
{
	struct loco_boot *b = mgr->boot;
	if (!b)
		return;
	if (b->inited && fence && !b->end_started) {
		pmix_status_t st = b->api.fence(NULL, 0, NULL, 0);
		if (st != PMIX_SUCCESS)
			loco_warn("boot", "PMIx_Fence (the job's end): %s",
				  b->api.error_string(st));
	}
	/* A memory node stopped by a signal leaves its end fence pending:
	 * finalising then would wait for it. */
	if (b->inited && (!b->end_started || loco_boot_ended(mgr)))
		b->api.finalize(NULL, 0);
	free(b);
	mgr->boot = NULL;
}
