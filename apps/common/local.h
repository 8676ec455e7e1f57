/* SPDX-License-Identifier: MIT */
/* Start a program's manager either in a cluster (LOCO_HOSTS/--hosts given,
 * e.g. under tools/loco-run) or, when no hosts file is given, as a private
 * one-node cluster on a free loopback port with its own run directory. */
#ifndef LOCO_APPS_LOCAL_H
#define LOCO_APPS_LOCAL_H

#include <stdio.h>

#include <loco/loco.h>

struct local_node {
	struct loco_mgr *mgr;
	char hosts[64];     /* temporary hosts file, "" if not ours */
	char run_dir[64];   /* temporary run directory, "" if not ours */
	char key[64];       /* temporary cluster key, "" if not ours */
	uint64_t arena_bytes; /* this node's arena (--arena-mb / LOCO_ARENA_MB) */
};

/* ARGC/ARGV: loco options are parsed and removed. DEFAULT_TRANSPORT is
 * used for the private cluster when none was given. Returns 0, or 2 after
 * printing a usage error, or 1 if the manager did not start. */
int local_node_start(struct local_node *ln, int *argc, char **argv,
		     const char *prog, const char *default_transport);
void local_node_stop(struct local_node *ln);

/* A program run on a local_node. */
struct local_prog {
	const char *name;           /* "loco-<app>", of the error lines */
	const char *transport;      /* of a private cluster (NULL: shm) */
	void (*usage)(FILE *f);
	/* The program's options into ARG: 0 to run, 1 for --help, 2 if bad. */
	int (*parse)(void *arg, int argc, char **argv);
	/* The whole run on MGR. Returns 0 or -errno. */
	int (*run)(void *arg, struct loco_mgr *mgr);
};

/* main() of P: start the node, parse (on 1 or 2 the usage goes to stdout
 * or stderr), run, name a failure on stderr, stop the node. Returns the
 * exit status: 0; 1 if the node did not start or the run failed; 2 on
 * bad options. */
int local_main(const struct local_prog *p, void *arg, int argc, char **argv);

#endif
