/* SPDX-License-Identifier: MIT */
/* Bootstrap without a hosts file: the hosts table from PMIx (boot_pmix.c).
 * libpmix is loaded at run time (dlopen), as libucp is: a build with
 * PMIx's headers runs where PMIx is not installed, and only a node asked
 * to bootstrap through it fails, with one clear message.
 *
 * Each node binds its own control-plane port (LOCO_LISTEN=HOST[:PORT]
 * chooses the address, an interface name or IPv4; default the address the
 * host name resolves to, else the first interface that is up, else
 * 127.0.0.1), publishes its hosts-file line ("ID HOST:PORT ROLE") and its
 * transport with PMIx_Put/Commit, fences with data collection and parses
 * every rank's line into the table a hosts file gives. The cluster key
 * never travels this way: it stays a file on every host.
 * Internal to the library. */
#ifndef LOCO_BOOT_H
#define LOCO_BOOT_H

#include <stdbool.h>

#pragma GCC visibility push(hidden)

struct loco_mgr;

/* Library loaded unless LOCO_PMIX_LIB names another file. */
#define PMIX_LIB_DEFAULT "libpmix.so.2"

/* Fills MGR->hosts (path "PMIx job NSPACE") and MGR->listen_fd (bound,
 * listening) from the exchange above, waiting at most the node timeout
 * for the other ranks. Checks the rank (PMIx's and --id agree), the
 * job's size against --memory-nodes, the role MGR->opts.role a program
 * asked for against the one --memory-nodes gives, and that every node
 * runs this node's transport. Returns 0, or -errno / -LOCO_EHOSTS
 * (logged). */
int loco_boot_pmix(struct loco_mgr *mgr);

/* The job's end, a fence with every rank after its last remote op:
 * memory nodes start it without blocking (loco_boot_end_start) and stop
 * serving once loco_boot_ended; compute nodes block in it in
 * loco_boot_fini(mgr, true), which then finalises PMIx (FENCE false: a
 * node that failed leaves at once; the launcher ends the others). */
void loco_boot_end_start(struct loco_mgr *mgr);
bool loco_boot_ended(struct loco_mgr *mgr);
void loco_boot_fini(struct loco_mgr *mgr, bool fence);

#pragma GCC visibility pop

#endif
