/* SPDX-License-Identifier: MIT */
/* A one-node cluster inside a test process: a hosts file with this node
 * on a free loopback port, a private run directory, and a manager. */
#ifndef LOCO_TEST_CLUSTER1_H
#define LOCO_TEST_CLUSTER1_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <loco/loco.h>
#include "test/common/key.h"
#include "test/common/rundir.h"

struct cluster1 {
	char hosts[64];
	char run_dir[64];
	char key[64];         /* its cluster key file */
	struct loco_mgr *mgr;
};

/* A loopback port that was free: bind port 0, read it, close. The kernel
 * may hand out a port it just gave us again (nothing holds it), and two
 * nodes of one hosts file on one port fail the hosts check: a port this
 * process already got is kept bound while we ask again, so the ports of
 * one process are distinct. */
static inline int free_port(void)
{
	static int given[256];
	static unsigned ngiven;
	int held[16], nheld = 0, port = 0;
	while (!port && nheld < 16) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t len = sizeof(sa);
		if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
		    getsockname(fd, (struct sockaddr *)&sa, &len))
			abort();
		held[nheld++] = fd;
		port = ntohs(sa.sin_port);
		for (unsigned i = 0; i < ngiven && i < 256; i++)
			if (given[i] == port)
				port = 0;
	}
	for (int i = 0; i < nheld; i++)
		close(held[i]);
	if (!port)
		abort();
	given[ngiven++ % 256] = port;
	return port;
}

static inline int cluster1_start_once(struct cluster1 *c, const char *extra,
				      int timeout_ms)
{
	snprintf(c->hosts, sizeof(c->hosts), "/tmp/loco-test-hosts-XXXXXX");
	int fd = mkstemp(c->hosts);
	if (fd < 0)
		return -1;
	dprintf(fd, "0 127.0.0.1:%d compute\n%s", free_port(), extra);
	close(fd);
	snprintf(c->key, sizeof(c->key), "/tmp/loco-test-key-XXXXXX");
	if (test_key_make(c->key)) {
		unlink(c->hosts);
		return -1;
	}
	rundir_name(c->run_dir, sizeof(c->run_dir), "test");
	setenv("LOCO_RUN_DIR", c->run_dir, 1);
	rundir_at_exit(c->run_dir);
	/* LOCO_CPU_BIND applies, through loco_opts_parse as in a program. */
	char *argv[] = { "cluster1", "--id", "0", "--hosts", c->hosts, NULL };
	int argc = 5;
	struct loco_opts env;
	char err[256];
	if (loco_opts_parse(&env, &argc, argv, err, sizeof(err))) {
		fprintf(stderr, "cluster1: %s\n", err);
		return -EINVAL;
	}
	struct loco_opts o = { .node_id = 0, .timeout_ms = timeout_ms,
			       .arena_bytes = 16 << 20,
			       .cpu_bind = env.cpu_bind };
	snprintf(o.hosts_path, sizeof(o.hosts_path), "%s", c->hosts);
	snprintf(o.cluster_key, sizeof(o.cluster_key), "%s", c->key);
	snprintf(o.transport, sizeof(o.transport), "%s",
		 getenv("LOCO_TRANSPORT") ? getenv("LOCO_TRANSPORT") : "shm");
	return loco_mgr_create(&o, &c->mgr);
}

/* The hosts file, the key and the run directory (a name still holding
 * mkstemp's XXXXXX names no file). */
static inline void cluster1_remove_files(struct cluster1 *c)
{
	unlink(c->hosts);
	unlink(c->key);
	rmdir(c->run_dir);
}

static inline void cluster1_stop(struct cluster1 *c)
{
	loco_mgr_destroy(c->mgr);
	c->mgr = NULL;
	cluster1_remove_files(c);
}

/* EXTRA: more hosts-file lines (nodes that never start), or "". The port
 * comes from binding port 0 and closing it, so a parallel test may take
 * it first (-EADDRINUSE): then start again with a fresh one. A start
 * that fails leaves no file behind (a test that then skips, as one of
 * verbs without a device, calls no cluster1_stop). */
static inline int cluster1_start(struct cluster1 *c, const char *extra,
				 int timeout_ms)
{
	for (int i = 1;; i++) {
		c->key[0] = c->run_dir[0] = 0;
		int rc = cluster1_start_once(c, extra, timeout_ms);
		if (rc)
			cluster1_remove_files(c);
		if (rc != -EADDRINUSE || i == 5)
			return rc;
	}
}

#endif
