/* SPDX-License-Identifier: MIT */
/* loco-memnode: a passive memory node. Hosts its arena, answers hellos,
 * joins and create-or-open requests for named regions, runs no
 * application code. Stops on SIGTERM or SIGINT. With --durable DIR the
 * arena and the region names live in DIR and survive restarts; with
 * --mirror-of ID too, it keeps a copy of memory node ID's image and
 * serves it after a fail-over (docs/durability.md). */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <loco/loco.h>

static void usage(FILE *f)
{
	fprintf(f, "usage: loco-memnode [--id N] [--hosts FILE] [--transport T]\n"
		   "                    [--arena-mb MB] [--timeout-ms MS]\n"
		   "                    [--cluster-key FILE | --insecure]\n"
		   "                    [--durable DIR [--power-cut] [--mirror-of ID]]\n"
		   "                    [--memory-nodes M]\n"
		   "Serves this node's memory until SIGTERM/SIGINT (started by a PMIx\n"
		   "launcher without a hosts file: until every node of the job is\n"
		   "done). Without --id, the rank is the launcher's (mpirun, srun;\n"
		   "docs/cluster.md). Options fall\n"
		   "back to LOCO_NODE_ID, LOCO_HOSTS, LOCO_TRANSPORT, LOCO_ARENA_MB,\n"
		   "LOCO_CLUSTER_KEY, LOCO_INSECURE, LOCO_DURABLE_DIR, LOCO_POWER_CUT,\n"
		   "LOCO_MIRROR_OF, LOCO_MEMORY_NODES.\n"
		   "Without a cluster key (32 random bytes, mode 0600; loco-run makes\n"
		   "one) it refuses to start unless --insecure.\n"
		   "--durable DIR: the arena and its region names live in DIR and\n"
		   "survive restarts: a restarted node serves the same regions at the\n"
		   "same offsets; what compute nodes persisted (loco_persist) survives\n"
		   "its death. A clean stop (SIGTERM) writes everything back.\n"
		   "--power-cut (shm): a kill is a power cut: what was written but\n"
		   "not persisted is lost at the restart. LOCO_DURABLE_SYNC=fdatasync\n"
		   "(default), msync or none: how persisted bytes reach the disk;\n"
		   "LOCO_DURABLE_SYNCS=1..4 (default 4): fdatasyncs in flight at most.\n"
		   "--mirror-of ID (a node of role mirror; shm, shm-weak): keep a\n"
		   "copy of memory node ID's durable image, which every persist to ID\n"
		   "reaches too; when ID dies, compute nodes fail over to this node,\n"
		   "which then serves ID's regions with everything persisted.\n");
}

int main(int argc, char **argv)
{
	struct loco_opts opts;
	char err[512];
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		}
	}
	if (loco_opts_parse(&opts, &argc, argv, err, sizeof(err))) {
		fprintf(stderr, "loco-memnode: %s\n", err);
		return 2;
	}
	if (argc > 1) {
		fprintf(stderr, "loco-memnode: unexpected argument '%s'\n", argv[1]);
		usage(stderr);
		return 2;
	}
	struct loco_mgr *mgr;
	opts.role = opts.mirror ? LOCO_ROLE_MIRROR : LOCO_ROLE_MEMORY;
	int rc = loco_mgr_create(&opts, &mgr);
	if (rc)
		return 1;
	const struct loco_host *self = &loco_mgr_hosts(mgr)->node[opts.node_id];
	bool serves = self->role == LOCO_ROLE_MEMORY || self->role == LOCO_ROLE_MIRROR;
	if (!serves && opts.launch.launcher) {
		/* Started by a launcher: a compute rank would wait for a
		 * program that never runs. */
		loco_err("memnode", "rank %d is a %s node in %s, not a memory "
			 "node: start loco-memnode on ranks 0..M-1 only (mpirun "
			 "-np M loco-memnode : -np N PROGRAM)", opts.node_id,
			 loco_role_name(self->role), loco_mgr_hosts(mgr)->path);
		loco_mgr_destroy(mgr);
		return 2;
	}
	if (!serves)
		loco_warn("memnode", "node %d has role %s in %s; serving anyway",
			  opts.node_id, loco_role_name(self->role),
			  loco_mgr_hosts(mgr)->path);
	loco_info("memnode", "serving %s:%u (%s)", self->host, self->port,
		  loco_mgr_transport(mgr));
	loco_mgr_serve(mgr, -1);
	loco_mgr_destroy(mgr);
	return 0;
}
