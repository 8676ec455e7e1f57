/* SPDX-License-Identifier: MIT */
/* A two-node cluster for tests of memory nodes that die and come back:
 * node 0 is a real loco-memnode child process (LOCO_MEMNODE: its path),
 * which the test kills and restarts at will; node 1 is this process's
 * manager, which the test may create and destroy several times. With a
 * mirror (mc_init_mirror), node 1 is a second loco-memnode child, node
 * 0's mirror, and this process is node 2. */
#ifndef LOCO_TEST_MEMNODE_H
#define LOCO_TEST_MEMNODE_H

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <loco/loco.h>
#include "test/common/cluster1.h"

struct mcluster {
	char hosts[64];
	char key[64];
	char run_dir[64];
	char dir[64];           /* the memory node's durable directory */
	char mdir[64];          /* the mirror's ("" without a mirror) */
	pid_t mem;              /* the memory node's process, 0 if none */
	pid_t mirror;           /* the mirror's process, 0 if none */
	int self;               /* this process's node id */
	struct loco_mgr *mgr;   /* this process's manager, NULL if none */
};

/* A free port below the ephemeral range (as tools/loco-run picks them):
 * the nodes' ports are listened on again after restarts, so no outgoing
 * connection of another process may take one meanwhile. */
static inline int free_low_port(void)
{
	for (;;) {
		int port = 10000 + (int)(random() % 22000);
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_port = htons((uint16_t)port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
		close(fd);
		if (!rc)
			return port;
	}
}

/* Hosts file (node 0 memory, node 1 compute; with MIRROR node 1 is
 * node 0's mirror and node 2 compute), key, run and durable
 * directories. */
static inline void mc_init_nodes(struct mcluster *c, bool mirror)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->hosts, sizeof(c->hosts), "/tmp/loco-test-hosts-XXXXXX");
	int fd = mkstemp(c->hosts);
	ck_assert_int_ge(fd, 0);
	srandom((unsigned)getpid() ^ (unsigned)time(NULL));
	int port[3];
	for (int i = 0; i < 3; i++) {
		bool dup;
		do {
			port[i] = free_low_port();
			dup = false;
			for (int j = 0; j < i; j++)
				dup |= port[j] == port[i];
		} while (dup);
	}
	c->self = mirror ? 2 : 1;
	dprintf(fd, "0 127.0.0.1:%d memory\n", port[0]);
	if (mirror)
		dprintf(fd, "1 127.0.0.1:%d mirror\n", port[1]);
	dprintf(fd, "%d 127.0.0.1:%d compute\n", c->self, port[2]);
	close(fd);
	snprintf(c->key, sizeof(c->key), "/tmp/loco-test-key-XXXXXX");
	ck_assert_int_eq(test_key_make(c->key), 0);
	rundir_name(c->run_dir, sizeof(c->run_dir), "test");
	setenv("LOCO_RUN_DIR", c->run_dir, 1);
	rundir_at_exit(c->run_dir);
	snprintf(c->dir, sizeof(c->dir), "/tmp/loco-test-durable-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(c->dir));
	if (mirror) {
		snprintf(c->mdir, sizeof(c->mdir), "/tmp/loco-test-mirror-XXXXXX");
		ck_assert_ptr_nonnull(mkdtemp(c->mdir));
	}
}

static inline void mc_init(struct mcluster *c)
{
	mc_init_nodes(c, false);
}

/* Start the memory node with extra environment ENV ("K=V" strings, NULL
 * terminated; e.g. LOCO_POWER_CUT=1); DURABLE: with --durable. Returns
 * once the child exec'd: until then it holds copies of this process's
 * descriptors (node 1's listening socket among them), which would keep
 * a port busy that node 1 listens on again. */
static inline pid_t mc_spawn_node(struct mcluster *c, int id, bool durable,
				  const char *const *env)
{
	const char *exe = getenv("LOCO_MEMNODE");
	int ex[2];
	ck_assert_msg(exe && *exe, "LOCO_MEMNODE is not set");
	ck_assert_int_eq(pipe2(ex, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid) {
		char b;
		close(ex[1]);
		while (read(ex[0], &b, 1) < 0 && errno == EINTR)
			;
		close(ex[0]);
		return pid;
	}
	{
		setenv("LOCO_NODE_ID", id ? "1" : "0", 1);
		setenv("LOCO_HOSTS", c->hosts, 1);
		setenv("LOCO_CLUSTER_KEY", c->key, 1);
		setenv("LOCO_ARENA_MB", "16", 1);
		if (durable)
			setenv("LOCO_DURABLE_DIR", id ? c->mdir : c->dir, 1);
		if (id)
			setenv("LOCO_MIRROR_OF", "0", 1);
		for (unsigned i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		execl(exe, exe, (char *)NULL);
		_exit(127);
	}
}

static inline pid_t mc_spawn(struct mcluster *c, bool durable,
			     const char *const *env)
{
	return mc_spawn_node(c, 0, durable, env);
}

static inline void mc_start_mem(struct mcluster *c, bool durable,
				const char *const *env)
{
	c->mem = mc_spawn(c, durable, env);
}

/* Start node 1, node 0's mirror (durable, with ENV). */
static inline void mc_start_mirror(struct mcluster *c, const char *const *env)
{
	c->mirror = mc_spawn_node(c, 1, true, env);
}

/* Stop the memory node with SIG (SIGKILL: a crash; SIGTERM: a clean
 * stop) and reap it; returns its wait status. */
static inline int mc_stop_pid(pid_t *pid, int sig)
{
	int st = 0;
	if (!*pid)
		return 0;
	kill(*pid, sig);
	waitpid(*pid, &st, 0);
	*pid = 0;
	return st;
}

static inline int mc_stop_mem(struct mcluster *c, int sig)
{
	return mc_stop_pid(&c->mem, sig);
}

static inline int mc_stop_mirror(struct mcluster *c, int sig)
{
	return mc_stop_pid(&c->mirror, sig);
}

/* This process as node 1. */
static inline void mc_start_self(struct mcluster *c, int timeout_ms)
{
	struct loco_opts o = { .node_id = c->self, .timeout_ms = timeout_ms,
			       .arena_bytes = 16 << 20 };
	snprintf(o.hosts_path, sizeof(o.hosts_path), "%s", c->hosts);
	snprintf(o.cluster_key, sizeof(o.cluster_key), "%s", c->key);
	snprintf(o.transport, sizeof(o.transport), "%s",
		 getenv("LOCO_TRANSPORT") ? getenv("LOCO_TRANSPORT") : "shm");
	ck_assert_int_eq(loco_mgr_create(&o, &c->mgr), 0);
}

static inline void mc_stop_self(struct mcluster *c)
{
	loco_mgr_destroy(c->mgr);
	c->mgr = NULL;
}

/* Remove a directory's files (one level) and the directory. */
static inline void mc_rmdir(const char *dir)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

static inline void mc_fini(struct mcluster *c)
{
	if (c->mgr)
		mc_stop_self(c);
	mc_stop_mem(c, SIGKILL);
	mc_stop_mirror(c, SIGKILL);
	unlink(c->hosts);
	unlink(c->key);
	mc_rmdir(c->dir);
	if (c->mdir[0])
		mc_rmdir(c->mdir);
	mc_rmdir(c->run_dir);
}

#endif
