/* SPDX-License-Identifier: MIT */
/* loco-fencebench [NODES [ROUNDS]]: the cost of loco_fence_node in a
 * private cluster of NODES nodes (3..4, default 3) in this one process,
 * on LOCO_TRANSPORT (default shm): node 0 hosts a region, node 1 is the
 * victim, the last node fences. Each round starts a new incarnation of
 * node 1 (a new manager, one WRITE to node 0), fences it (the first
 * fence: every target records it and waits for its ops), then fences it
 * again (remembered: a round trip, no wait). One JSON line: p50/p99 of
 * the first fence, and again_p50_us/again_p99_us of the second;
 * rtts_per_op is 1 (the requests to all targets go out before any reply
 * is read). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "apps/common/bench.h"
#include "apps/common/rundir.h"

struct fb {
	unsigned nodes, rounds;
	char hosts[64], key[64], run_dir[64];
	struct loco_mgr *mgr[4];
};

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int port = -1;
	if (fd >= 0 && !bind(fd, (struct sockaddr *)&sa, sizeof(sa)) &&
	    !getsockname(fd, (struct sockaddr *)&sa, &len))
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* Hosts file (NODES compute nodes on loopback) and cluster key. */
static int files_make(struct fb *f)
{
	unsigned char k[32];
	snprintf(f->hosts, sizeof(f->hosts), "/tmp/loco-fencebench-XXXXXX");
	snprintf(f->key, sizeof(f->key), "/tmp/loco-fencebench-key-XXXXXX");
	int hfd = mkstemp(f->hosts), kfd = mkstemp(f->key);
	int rc = hfd < 0 || kfd < 0 ? -1 : 0;
	for (unsigned i = 0; !rc && i < f->nodes; i++) {
		int port = free_port();
		rc = port < 0 ? -1 : 0;
		dprintf(hfd, "%u 127.0.0.1:%d compute\n", i, port);
	}
	if (!rc && (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k) ||
		    write(kfd, k, sizeof(k)) != (ssize_t)sizeof(k)))
		rc = -1;
	if (hfd >= 0)
		close(hfd);
	if (kfd >= 0)
		close(kfd);
	snprintf(f->run_dir, sizeof(f->run_dir), "/dev/shm/loco-fencebench-%d",
		 (int)getpid());
	setenv("LOCO_RUN_DIR", f->run_dir, 1);
	return rc;
}

static int node_start(struct fb *f, unsigned id, struct loco_mgr **out)
{
	const char *tp = getenv("LOCO_TRANSPORT");
	struct loco_opts o = { .node_id = (int)id, .timeout_ms = 5000,
			       .arena_bytes = 4 << 20 };
	snprintf(o.hosts_path, sizeof(o.hosts_path), "%s", f->hosts);
	snprintf(o.cluster_key, sizeof(o.cluster_key), "%s", f->key);
	snprintf(o.transport, sizeof(o.transport), "%s", tp && *tp ? tp : "shm");
	return loco_mgr_create(&o, out);
}

/* A new incarnation of node 1 that wrote once to node 0. */
static int victim_start(struct fb *f)
{
	struct loco_thread *t;
	struct loco_rregion rr;
	uint64_t v = 1;
	int rc = node_start(f, 1, &f->mgr[1]);
	if (!rc)
		rc = loco_thread_create(f->mgr[1], &t);
	if (rc)
		return rc;
	rc = loco_region_open(f->mgr[1], 0, "fencebench.r", 64, &rr);
	if (!rc)
		rc = loco_write(t, &rr, 0, &v, 8);
	loco_thread_destroy(t);
	return rc;
}

static int rounds_run(struct fb *f, struct bench_lat *first,
		      struct bench_lat *again)
{
	struct loco_mgr *fencer = f->mgr[f->nodes - 1];
	for (unsigned r = 0; r < f->rounds; r++) {
		int rc = victim_start(f);
		uint64_t t0 = loco_now_ns();
		if (!rc)
			rc = loco_fence_node(fencer, 1, -1);
		uint64_t t1 = loco_now_ns();
		if (!rc)
			rc = loco_fence_node(fencer, 1, -1);
		uint64_t t2 = loco_now_ns();
		loco_mgr_destroy(f->mgr[1]);
		f->mgr[1] = NULL;
		if (rc) {
			fprintf(stderr, "loco-fencebench: round %u: %s\n", r,
				loco_strerror(rc));
			return rc;
		}
		bench_lat_add(first, t1 - t0);
		bench_lat_add(again, t2 - t1);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct fb f = { .nodes = argc > 1 ? (unsigned)atoi(argv[1]) : 3,
			.rounds = argc > 2 ? (unsigned)atoi(argv[2]) : 20 };
	if (argc > 3 || f.nodes < 3 || f.nodes > 4 || f.rounds < 1 ||
	    f.rounds > 10000) {
		fprintf(stderr, "usage: loco-fencebench [NODES (3..4) [ROUNDS "
			"(1..10000)]]\n");
		return 2;
	}
	struct bench_lat first, again;
	int rc = files_make(&f) || bench_lat_init(&first, f.rounds) ||
		 bench_lat_init(&again, f.rounds) ? -1 : 0;
	for (unsigned i = 0; !rc && i < f.nodes; i++)
		if (i != 1)
			rc = node_start(&f, i, &f.mgr[i]);
	uint64_t t0 = loco_now_ns();
	if (!rc)
		rc = rounds_run(&f, &first, &again);
	if (!rc) {
		struct bench_result r = {
			.app = "fencebench", .transport = loco_mgr_transport(f.mgr[0]),
			.nodes = f.nodes, .threads = 1,
			.duration_s = (double)(loco_now_ns() - t0) / 1e9,
			.ops = f.rounds, .p50_us = bench_lat_pct_us(&first, 50),
			.p99_us = bench_lat_pct_us(&first, 99),
			.stats = { .rtts = f.rounds },
		};
		bench_json_begin(stdout, &r);
		printf(",\"targets\":%u,\"again_p50_us\":%.1f,\"again_p99_us\":%.1f",
		       f.nodes - 1, bench_lat_pct_us(&again, 50),
		       bench_lat_pct_us(&again, 99));
		bench_json_end(stdout);
	}
	for (unsigned i = 0; i < f.nodes; i++)
		loco_mgr_destroy(f.mgr[i]);
	unlink(f.hosts);
	unlink(f.key);
	rundir_remove_dir(f.run_dir);
	return rc ? 1 : 0;
}
