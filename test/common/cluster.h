/* SPDX-License-Identifier: MIT */
/* An in-process cluster for channel unit tests: NODES managers (ids
 * 0..NODES-1) in this one process, each with its own thread context, all
 * listed in one hosts file, plus ABSENT more ids that never start. The
 * managers join each other over loopback like separate processes would;
 * the transport comes from LOCO_TRANSPORT (default shm). */
#ifndef LOCO_TEST_COMMON_CLUSTER_H
#define LOCO_TEST_COMMON_CLUSTER_H

#include <errno.h>

#include "test/common/rundir.h"
#include <loco/loco.h>
#include "test/common/cluster1.h"

#define CL_MAX 4

struct cluster {
	unsigned n;
	char hosts[64];
	char run_dir[64];
	char key[64];         /* the cluster key file all nodes share */
	struct loco_mgr *mgr[CL_MAX];
	struct loco_thread *thr[CL_MAX];
};

static inline void cluster_stop(struct cluster *c);

static inline int cluster_start_once(struct cluster *c, unsigned nodes,
				      unsigned absent, int timeout_ms)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->hosts, sizeof(c->hosts), "/tmp/loco-chan-hosts-XXXXXX");
	int fd = mkstemp(c->hosts);
	if (fd < 0)
		return -1;
	if (nodes + absent > CL_MAX) {
		close(fd);
		return -1;
	}
	for (unsigned i = 0; i < nodes + absent; i++)
		dprintf(fd, "%u 127.0.0.1:%d compute\n", i, free_port());
	close(fd);
	snprintf(c->key, sizeof(c->key), "/tmp/loco-chan-key-XXXXXX");
	if (test_key_make(c->key)) {
		c->key[0] = 0;
		return -1;
	}
	rundir_name(c->run_dir, sizeof(c->run_dir), "chan");
	setenv("LOCO_RUN_DIR", c->run_dir, 1);
	rundir_at_exit(c->run_dir);
	for (unsigned i = 0; i < nodes; i++) {
		struct loco_opts o = { .node_id = (int)i, .timeout_ms = timeout_ms,
				       .arena_bytes = 16 << 20 };
		snprintf(o.hosts_path, sizeof(o.hosts_path), "%s", c->hosts);
		snprintf(o.cluster_key, sizeof(o.cluster_key), "%s", c->key);
		snprintf(o.transport, sizeof(o.transport), "%s",
			 getenv("LOCO_TRANSPORT") ? getenv("LOCO_TRANSPORT") : "shm");
		int rc = loco_mgr_create(&o, &c->mgr[i]);
		if (rc)
			return rc;
		c->n = i + 1;   /* cluster_stop destroys it, thread or not */
		rc = loco_thread_create(c->mgr[i], &c->thr[i]);
		if (rc)
			return rc;
	}
	return 0;
}

/* Free ports are found by binding port 0 and closing it; a test starting
 * in parallel can take such a port before our manager listens on it
 * (-EADDRINUSE): start again with fresh ports, a few times. A start that
 * fails stops what it started and leaves no file behind (a second
 * cluster_stop is harmless). */
static inline int cluster_start(struct cluster *c, unsigned nodes,
				unsigned absent, int timeout_ms)
{
	for (int i = 1;; i++) {
		int rc = cluster_start_once(c, nodes, absent, timeout_ms);
		if (rc)
			cluster_stop(c);
		if (rc != -EADDRINUSE || i == 5)
			return rc;
	}
}

/* Wait until every manager's channels are ready: 0 or the first error. */
static inline int cluster_ready(struct cluster *c, int timeout_ms)
{
	for (unsigned i = 0; i < c->n; i++) {
		int rc = loco_mgr_wait_ready(c->mgr[i], timeout_ms);
		if (rc)
			return rc;
	}
	return 0;
}

static inline void cluster_stop(struct cluster *c)
{
	for (unsigned i = 0; i < c->n; i++)
		loco_thread_destroy(c->thr[i]);
	for (unsigned i = 0; i < c->n; i++)
		loco_mgr_destroy(c->mgr[i]);
	c->n = 0;
	unlink(c->hosts);
	if (c->key[0])
		unlink(c->key);
	rmdir(c->run_dir);
}

#endif
