/* SPDX-License-Identifier: MIT */
/* loco-durable-bench: what durability costs, measured against real
 * loco-memnode processes this program starts itself (node 0; with a
 * mirror, node 1; this process is the compute node):
 *
 *   persist    a WRITE of --bytes and loco_persist, --ops times, for each
 *              way persisted bytes reach the disk (LOCO_DURABLE_SYNC none,
 *              msync, fdatasync) and on a memory node without --durable
 *              (a persist is a fence there): one JSON line per mode;
 *   restart    --rounds times: SIGKILL the memory node (a power cut), start
 *              it again after --down-ms, and time from its start (the
 *              exec) to the first completed operation on the region
 *              opened before (a READ, a WRITE and a persist), and from the
 *              kill to the first failed operation (detection);
 *   failover   --rounds times: a primary and its mirror; SIGKILL the
 *              primary and time from the kill to the first operation
 *              completed on the mirror.
 *
 *	loco-durable-bench persist --ops 2000
 *	loco-durable-bench restart --rounds 20 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "apps/common/bench.h"
#include "apps/common/opts.h"
#include "apps/common/rundir.h"
#include <loco/loco.h>

#define PROG "loco-durable-bench"
#define REGION_LEN (1u << 20)
#define WAIT_MS 20000
#define HDR_MIRROR 40    /* the image header's mirror word (durable.h) */

struct opts {
	const char *mode;
	uint64_t ops;
	unsigned rounds, bytes, down_ms;
	struct loco_opts node;   /* --transport, --arena-mb, --timeout-ms */
	const char *transport;
};

/* The cluster: hosts file, key, run directory, the memory nodes' durable
 * directories and processes, this node's manager, thread and region. */
struct cl {
	char hosts[64], key[64], run[64], dir[2][64];
	int port[3];
	bool mirror;
	uint64_t arena;       /* bytes of every node's arena */
	int timeout_ms;
	pid_t pid[2];
	struct loco_mgr *mgr;
	struct loco_thread *thr;
	struct loco_rregion rr;
};

static void usage(FILE *f)
{
	fputs("usage: loco-durable-bench persist|restart|failover [options]\n"
	      "  --ops N        persist: operations per mode (default 2000)\n"
	      "  --bytes B      persist: bytes written per operation, 8..65536\n"
	      "                 (default 8)\n"
	      "  --rounds R     restart, failover: rounds (default 10)\n"
	      "  --down-ms MS   restart: the node stays dead this long (default 0)\n"
	      "  (node options: --transport shm|shm-weak (default shm),\n"
	      "  --arena-mb MB (16), --timeout-ms MS; the others are checked but\n"
	      "  not used: the program makes its own cluster)\n"
	      "Starts its own loco-memnode processes (LOCO_MEMNODE: the program;\n"
	      "default: the build's, else PATH's). One JSON line per mode or run.\n",
	      f);
}

static int parse_one(void *arg, int c, const char *s, char *expect)
{
	struct opts *o = arg;
	switch (c) {
	case 'o': return bench_parse_u64(s, 1, 100000000, &o->ops, expect);
	case 'b': return bench_parse_uint(s, 8, 65536, &o->bytes, expect);
	case 'r': return bench_parse_uint(s, 1, 10000, &o->rounds, expect);
	case 'd': return bench_parse_uint(s, 0, 60000, &o->down_ms, expect);
	default: return -1;
	}
}

/* 0 to run, 1 after --help, 2 on a bad command line. */
static int parse(struct opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "ops", required_argument, NULL, 'o' },
		{ "bytes", required_argument, NULL, 'b' },
		{ "rounds", required_argument, NULL, 'r' },
		{ "down-ms", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char err[512];
	if (bench_wants_help(argc, argv))
		return 1;
	/* The node options, checked as every program checks them; the
	 * cluster is this program's own (its id and hosts file). */
	setenv("LOCO_NODE_ID", "2", 0);
	setenv("LOCO_HOSTS", "/dev/null", 0);
	setenv("LOCO_ARENA_MB", "16", 0);
	if (loco_opts_parse(&o->node, &argc, argv, err, sizeof(err))) {
		fprintf(stderr, PROG ": %s\n", err);
		return 2;
	}
	o->transport = o->node.transport;
	if (strcmp(o->transport, "shm") && strcmp(o->transport, "shm-weak")) {
		fprintf(stderr, PROG ": --transport %s: runs on shm or shm-weak\n",
			o->transport);
		return 2;
	}
	if (argc < 2 || (strcmp(argv[1], "persist") && strcmp(argv[1], "restart") &&
			 strcmp(argv[1], "failover"))) {
		fprintf(stderr, PROG ": %s%s%s (expected persist, restart or "
			"failover)\n", argc < 2 ? "no mode" : "unknown mode '",
			argc < 2 ? "" : argv[1], argc < 2 ? "" : "'");
		return 2;
	}
	o->mode = argv[1];
	return bench_getopt(argc - 1, argv + 1, "h", lo, parse_one, o, PROG);
}

/* ---- the cluster ---------------------------------------------------------- */

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* A free port below the ephemeral range: the memory node listens on it
 * again after each restart (no outgoing connection may take it). */
static int low_port(void)
{
	for (;;) {
		int port = 10000 + (int)(random() % 22000);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_port = htons((uint16_t)port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sa, sizeof(sa));
		if (fd >= 0)
			close(fd);
		if (!rc)
			return port;
	}
}

static int key_make(char *path)
{
	unsigned char k[32];
	int fd = mkstemp(path);
	bool ok = fd >= 0 && getrandom(k, sizeof(k), 0) == (ssize_t)sizeof(k) &&
		  write(fd, k, sizeof(k)) == (ssize_t)sizeof(k);
	if (fd >= 0)
		close(fd);
	return ok ? 0 : -EIO;
}

/* Hosts (0 memory, 1 mirror with MIRROR, then this node), key, run and
 * durable directories. */
static int cl_init(struct cl *c, const struct opts *o, bool mirror)
{
	memset(c, 0, sizeof(*c));
	c->mirror = mirror;
	c->arena = o->node.arena_bytes;
	c->timeout_ms = o->node.timeout_ms;
	srandom((unsigned)getpid() ^ (unsigned)time(NULL));
	for (int i = 0; i < 3; i++) {
		bool dup;
		do {
			c->port[i] = low_port();
			dup = false;
			for (int k = 0; k < i; k++)
				dup |= c->port[k] == c->port[i];
		} while (dup);
	}
	snprintf(c->hosts, sizeof(c->hosts), "/tmp/loco-dbench-hosts-XXXXXX");
	int fd = mkstemp(c->hosts);
	if (fd < 0)
		return -errno;
	dprintf(fd, "0 127.0.0.1:%d memory\n", c->port[0]);
	if (mirror)
		dprintf(fd, "1 127.0.0.1:%d mirror\n", c->port[1]);
	dprintf(fd, "2 127.0.0.1:%d compute\n", c->port[2]);
	close(fd);
	snprintf(c->key, sizeof(c->key), "/tmp/loco-dbench-key-XXXXXX");
	snprintf(c->run, sizeof(c->run), "/dev/shm/loco-dbench-%d", (int)getpid());
	setenv("LOCO_RUN_DIR", c->run, 1);
	for (int i = 0; i < 2; i++) {
		snprintf(c->dir[i], sizeof(c->dir[i]), "/tmp/loco-dbench-d%d-XXXXXX", i);
		if (!mkdtemp(c->dir[i]))
			return -errno;
	}
	return key_make(c->key);
}

/* The memory-node program: LOCO_MEMNODE, else the build's beside this
 * program's build directory, else PATH's. */
static const char *memnode_path(void)
{
	static char path[4096];
	const char *e = getenv("LOCO_MEMNODE");
	if (e && *e)
		return e;
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 64);
	if (n > 0) {
		path[n] = 0;
		char *slash = strrchr(path, '/');
		if (slash) {
			strcpy(slash, "/../../tools/memnode/loco-memnode");
			if (access(path, X_OK) == 0)
				return path;
		}
	}
	return "loco-memnode";
}

/* Start memory node ID (1: the mirror) with LOCO_DURABLE_SYNC SYNC (NULL:
 * not durable); returns once it exec'd. */
static int cl_spawn(struct cl *c, int id, const char *sync, const char *tp)
{
	int ex[2];
	if (pipe2(ex, O_CLOEXEC))
		return -errno;
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (!pid) {
		setenv("LOCO_NODE_ID", id ? "1" : "0", 1);
		setenv("LOCO_HOSTS", c->hosts, 1);
		setenv("LOCO_CLUSTER_KEY", c->key, 1);
		setenv("LOCO_TRANSPORT", tp, 1);
		char mb[24];
		snprintf(mb, sizeof(mb), "%llu",
			 (unsigned long long)(c->arena >> 20));
		setenv("LOCO_ARENA_MB", mb, 1);
		setenv("LOCO_LOG", "error", 1);
		if (sync) {
			setenv("LOCO_DURABLE_DIR", c->dir[id], 1);
			setenv("LOCO_DURABLE_SYNC", sync, 1);
			setenv("LOCO_POWER_CUT", "1", 1);
		}
		if (id)
			setenv("LOCO_MIRROR_OF", "0", 1);
		const char *exe = memnode_path();
		execlp(exe, exe, (char *)NULL);
		_exit(127);
	}
	char b;
	close(ex[1]);
	while (read(ex[0], &b, 1) < 0 && errno == EINTR)
		;
	close(ex[0]);
	c->pid[id] = pid;
	return 0;
}

static void cl_kill(struct cl *c, int id)
{
	if (!c->pid[id])
		return;
	kill(c->pid[id], SIGKILL);
	waitpid(c->pid[id], NULL, 0);
	c->pid[id] = 0;
}

static int cl_self(struct cl *c, const char *tp)
{
	struct loco_opts o = { .node_id = 2, .timeout_ms = c->timeout_ms,
			       .arena_bytes = c->arena };
	snprintf(o.hosts_path, sizeof(o.hosts_path), "%s", c->hosts);
	snprintf(o.cluster_key, sizeof(o.cluster_key), "%s", c->key);
	snprintf(o.transport, sizeof(o.transport), "%s", tp);
	int rc = loco_mgr_create(&o, &c->mgr);
	if (!rc)
		rc = loco_thread_create(c->mgr, &c->thr);
	if (!rc)
		rc = loco_region_open(c->mgr, 0, "dbench.r", REGION_LEN, &c->rr);
	return rc;
}

static void cl_fini(struct cl *c)
{
	if (c->thr)
		loco_thread_destroy(c->thr);
	if (c->mgr)
		loco_mgr_destroy(c->mgr);
	cl_kill(c, 0);
	cl_kill(c, 1);
	unlink(c->hosts);
	unlink(c->key);
	rundir_remove_dir(c->run);
	for (int i = 0; i < 2; i++) {
		char cmd[96];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->dir[i]);
		if (c->dir[i][0] && system(cmd) != 0)
			fprintf(stderr, PROG ": cannot remove %s\n", c->dir[i]);
	}
}

/* ---- persist ------------------------------------------------------------- */

static void result_line(const char *app, const struct opts *o, uint64_t ops,
			double secs, struct bench_lat *lat,
			const struct loco_stats *st)
{
	struct bench_result r = {
		.app = app, .transport = o->transport, .nodes = 1, .threads = 1,
		.duration_s = secs, .ops = ops, .stats = *st,
		.p50_us = bench_lat_pct_us(lat, 50), .p99_us = bench_lat_pct_us(lat, 99),
	};
	bench_json_begin(stdout, &r);
}

/* --ops WRITEs of --bytes and persists with sync mode SYNC (NULL: a
 * memory node without --durable). */
static int persist_mode(const struct opts *o, const char *sync)
{
	struct cl c;
	struct bench_lat lat;
	struct loco_stats s0, s1;
	uint8_t *buf = calloc(1, o->bytes);
	int rc = buf ? cl_init(&c, o, false) : -ENOMEM;
	if (!rc)
		rc = bench_lat_init(&lat, o->ops);
	if (!rc)
		rc = cl_spawn(&c, 0, sync, o->transport);
	if (!rc)
		rc = cl_self(&c, o->transport);
	if (!rc)
		loco_thread_stats(c.thr, &s0);
	uint64_t t0 = loco_now_ns(), slots = REGION_LEN / o->bytes;
	for (uint64_t i = 0; !rc && i < o->ops; i++) {
		uint64_t t = loco_now_ns();
		memcpy(buf, &i, 8);
		rc = loco_write(c.thr, &c.rr, (i * 7919 % slots) * o->bytes, buf,
				o->bytes);
		if (!rc)
			rc = loco_persist(c.thr, 0);
		bench_lat_add(&lat, loco_now_ns() - t);
	}
	if (!rc) {
		double secs = (double)(loco_now_ns() - t0) / 1e9;
		loco_thread_stats(c.thr, &s1);
		bench_stats_sub(&s1, &s0);
		result_line("durable-persist", o, o->ops, secs, &lat, &s1);
		printf(",\"durable\":%s,\"sync\":\"%s\",\"bytes\":%u,"
		       "\"flushes_per_op\":%.3f", sync ? "true" : "false",
		       sync ? sync : "volatile", o->bytes,
		       (double)s1.flushes / (double)o->ops);
		bench_json_end(stdout);
	}
	bench_lat_fini(&lat);
	cl_fini(&c);
	free(buf);
	return rc;
}

/* ---- restart and failover ------------------------------------------------ */

/* The first operation on the region since the node died: a READ, a WRITE
 * and a persist, retried (after loco_peer_wait) until they succeed. */
static int first_op(struct cl *c, uint64_t v)
{
	int rc;
	do {
		uint64_t got;
		rc = loco_peer_wait(c->mgr, 0, WAIT_MS);
		if (!rc)
			rc = loco_read(c->thr, &c->rr, 0, &got, 8);
		if (!rc)
			rc = loco_write(c->thr, &c->rr, 0, &v, 8);
		if (!rc)
			rc = loco_persist(c->thr, 0);
	} while (rc == -LOCO_EDOWN);
	return rc;
}

/* Until an operation on the region fails: the node is seen down. */
static void until_down(struct cl *c)
{
	uint64_t v, t0 = loco_now_ns();
	while (!loco_read(c->thr, &c->rr, 0, &v, 8) &&
	       loco_now_ns() - t0 < WAIT_MS * 1000000ull)
		sleep_ms(1);
}

/* The primary names the mirror in its image header (the join is done). */
static bool joined(const struct cl *c)
{
	char path[96];
	uint32_t m = 0;
	snprintf(path, sizeof(path), "%s/arena.img", c->dir[0]);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (pread(fd, &m, 4, HDR_MIRROR) != 4)
			m = 0;
		close(fd);
	}
	return m == 2;
}

static int wait_joined(const struct cl *c)
{
	for (int i = 0; i < WAIT_MS / 5; i++) {
		if (joined(c))
			return 0;
		sleep_ms(5);
	}
	fprintf(stderr, PROG ": the mirror did not join\n");
	return -ETIMEDOUT;
}

static void rounds_line(const char *app, const struct opts *o,
			struct bench_lat *lat, struct bench_lat *detect,
			double secs)
{
	struct loco_stats none = { 0 };
	result_line(app, o, lat->n, secs, lat, &none);  /* sorts LAT */
	double max = lat->n ? (double)lat->ns[lat->n - 1] / 1e6 : 0;
	printf(",\"rounds\":%zu,\"down_ms\":%u,\"first_op_p50_ms\":%.3f,"
	       "\"first_op_max_ms\":%.3f,\"detect_p50_ms\":%.3f",
	       lat->n, o->down_ms, bench_lat_pct_us(lat, 50) / 1e3, max,
	       bench_lat_pct_us(detect, 50) / 1e3);
	bench_json_end(stdout);
}

/* One restart round: kill, (down), start, first operation. */
static int restart_round(struct cl *c, const struct opts *o, unsigned k,
			 struct bench_lat *lat, struct bench_lat *detect)
{
	uint64_t t = loco_now_ns();
	cl_kill(c, 0);
	until_down(c);
	bench_lat_add(detect, loco_now_ns() - t);
	sleep_ms(o->down_ms);
	int rc = cl_spawn(c, 0, "none", o->transport);
	t = loco_now_ns();
	if (!rc)
		rc = first_op(c, k);
	bench_lat_add(lat, loco_now_ns() - t);
	return rc;
}

static int restart_mode(const struct opts *o)
{
	struct cl c;
	struct bench_lat lat, detect;
	int rc = cl_init(&c, o, false);
	if (!rc)
		rc = bench_lat_init(&lat, o->rounds);
	if (!rc)
		rc = bench_lat_init(&detect, o->rounds);
	if (!rc)
		rc = cl_spawn(&c, 0, "none", o->transport);
	if (!rc)
		rc = cl_self(&c, o->transport);
	uint64_t t0 = loco_now_ns();
	for (unsigned k = 0; !rc && k < o->rounds; k++)
		rc = restart_round(&c, o, k + 1, &lat, &detect);
	if (!rc)
		rounds_line("durable-restart", o, &lat, &detect,
			    (double)(loco_now_ns() - t0) / 1e9);
	bench_lat_fini(&lat);
	bench_lat_fini(&detect);
	cl_fini(&c);
	return rc;
}

/* One fail-over: a fresh primary and mirror, kill the primary, first op. */
static int failover_round(const struct opts *o, struct bench_lat *lat,
			  struct bench_lat *detect)
{
	struct cl c;
	int rc = cl_init(&c, o, true);
	if (!rc)
		rc = cl_spawn(&c, 0, "none", o->transport);
	if (!rc)
		rc = cl_spawn(&c, 1, "none", o->transport);
	if (!rc)
		rc = wait_joined(&c);
	if (!rc)
		rc = cl_self(&c, o->transport);
	if (!rc)
		rc = first_op(&c, 1);
	if (!rc) {
		uint64_t t = loco_now_ns();
		cl_kill(&c, 0);
		until_down(&c);
		bench_lat_add(detect, loco_now_ns() - t);
		rc = first_op(&c, 2);
		bench_lat_add(lat, loco_now_ns() - t);
	}
	cl_fini(&c);
	return rc;
}

static int failover_mode(const struct opts *o)
{
	struct bench_lat lat, detect;
	int rc = bench_lat_init(&lat, o->rounds);
	if (!rc)
		rc = bench_lat_init(&detect, o->rounds);
	uint64_t t0 = loco_now_ns();
	for (unsigned k = 0; !rc && k < o->rounds; k++)
		rc = failover_round(o, &lat, &detect);
	if (!rc)
		rounds_line("durable-failover", o, &lat, &detect,
			    (double)(loco_now_ns() - t0) / 1e9);
	bench_lat_fini(&lat);
	bench_lat_fini(&detect);
	return rc;
}

int main(int argc, char **argv)
{
	struct opts o = { .ops = 2000, .rounds = 10, .bytes = 8 };
	int rc = parse(&o, argc, argv);
	if (rc == 1)
		usage(stdout);
	if (rc == 2)
		usage(stderr);
	if (rc)
		return rc == 1 ? 0 : 2;
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(o.mode, "persist")) {
		static const char *const modes[] = { NULL, "none", "msync",
						     "fdatasync" };
		for (unsigned i = 0; !rc && i < 4; i++)
			rc = persist_mode(&o, modes[i]);
	} else if (!strcmp(o.mode, "restart")) {
		rc = restart_mode(&o);
	} else {
		rc = failover_mode(&o);
	}
	if (rc)
		fprintf(stderr, PROG ": %s\n", loco_strerror(rc));
	return rc ? 1 : 0;
}
