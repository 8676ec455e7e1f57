/* SPDX-License-Identifier: MIT */
/* Thread placement for --cpu-bind core. Internal, not installed; hwloc
 * stays inside affinity.c (and the transports' local_cpus op).
 *
 * At manager start the allowed cores are listed: the topology's allowed
 * CPUs that are also in the process's CPU binding, grouped by core, the
 * cores near the transport's device first (verbs: the NIC's local CPUs).
 * Thread k of a node (its k-th loco_thread_create) gets list entry
 * (r + k*n) mod ncores, where n nodes of the hosts file have this node's
 * host string (so share its machine) and r is its rank among them by id:
 * the nodes of one machine take turns over the cores instead of all
 * starting at the first. */
#ifndef LOCO_AFFINITY_H
#define LOCO_AFFINITY_H

#include <stdint.h>

#include <loco/hosts.h>

struct loco_mgr;
struct loco_affinity;

/* Rank by id of node ID among the present nodes of HOSTS whose host
 * string is its own into *RANK, and their count (at least 1) into *COUNT.
 * ID must be present. */
void loco_host_rank(const struct loco_hosts *hosts, uint32_t id,
		    unsigned *rank, unsigned *count);

/* Core index of thread K of the node of RANK among COUNT on its machine,
 * over NCORES (> 0) cores: (RANK + K * COUNT) mod NCORES, without
 * overflow for any K. */
unsigned loco_core_index(unsigned rank, unsigned count, uint64_t k,
			 unsigned ncores);

/* List the cores MGR's threads may use (needs mgr->tp open). Returns 0,
 * or -errno with a warning logged saying why threads will run unbound. */
int loco_affinity_open(struct loco_mgr *mgr, struct loco_affinity **out);
void loco_affinity_close(struct loco_affinity *aff);

/* Bind the calling OS thread to the core of the next thread number.
 * Returns the first CPU of that core, or -1 with a warning logged if the
 * OS refused (the thread keeps its old binding).
 * Caller: any thread, concurrently. */
int loco_affinity_bind(struct loco_affinity *aff);

#endif
