/* SPDX-License-Identifier: MIT */
/* Thread placement with hwloc (see affinity.h). */
#include <errno.h>
#include <hwloc.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "loco/affinity.h"
#include "loco/internal.h"

#define AFF_LOG "affinity"

struct loco_affinity {
	hwloc_topology_t topo;
	hwloc_cpuset_t *core;   /* allowed CPUs of each core, near ones first */
	unsigned ncores;
	unsigned near;          /* how many of them are near the device */
	bool device;            /* the transport told where its device is */
	unsigned rank, count;   /* this node among the nodes of its machine */
	_Atomic uint64_t next;  /* number of the next thread to bind */
};

void loco_host_rank(const struct loco_hosts *hosts, uint32_t id,
		    unsigned *rank, unsigned *count)
{
	const char *self = hosts->node[id].host;
	unsigned r = 0, n = 0;

	for (uint32_t i = 0; i <= hosts->max_id; i++) {
		if (!hosts->node[i].present || strcmp(hosts->node[i].host, self))
			continue;
		if (i < id)
			r++;
		n++;
	}
	*rank = r;
	*count = n ? n : 1;
}

unsigned loco_core_index(unsigned rank, unsigned count, uint64_t k,
			 unsigned ncores)
{
	uint64_t m = ncores;

	return (unsigned)((rank % m + (k % m) * (count % m)) % m);
}

/* -errno after a failed hwloc call (which may leave errno 0). */
static int errno_or_eio(void)
{
	return errno ? -errno : -EIO;
}

/* This machine's topology, discovered without ever rebinding a thread
 * (the application's threads may already run). */
static int topo_load(hwloc_topology_t *out)
{
	hwloc_topology_t topo;

	errno = 0;
	if (hwloc_topology_init(&topo))
		return errno_or_eio();
	if (hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_DONT_CHANGE_BINDING) ||
	    hwloc_topology_load(topo)) {
		int rc = errno_or_eio();

		hwloc_topology_destroy(topo);
		return rc;
	}
	*out = topo;
	return 0;
}

/* The allowed CPUs that are also in the process's binding (all of its
 * threads', so a thread this manager bound earlier does not shrink it)
 * into SET. */
static int allowed_cpus(hwloc_topology_t topo, hwloc_cpuset_t set)
{
	hwloc_cpuset_t proc = hwloc_bitmap_alloc();

	if (!proc)
		return -ENOMEM;
	if (hwloc_bitmap_copy(set, hwloc_topology_get_allowed_cpuset(topo)))
		goto nomem;
	/* No binding support: the allowed set alone. */
	if (!hwloc_get_cpubind(topo, proc, HWLOC_CPUBIND_PROCESS) &&
	    hwloc_bitmap_and(set, set, proc))
		goto nomem;
	hwloc_bitmap_free(proc);
	return 0;
nomem:
	hwloc_bitmap_free(proc);
	return -ENOMEM;
}

/* The CPUs near the transport's device into SET and true; all CPUs and
 * false when the transport has no device or does not know. */
static bool device_cpus(struct loco_mgr *mgr, hwloc_topology_t topo,
			hwloc_cpuset_t set)
{
	const struct loco_transport_ops *ops = mgr->tp_ops;

	if (ops->local_cpus && !ops->local_cpus(mgr->tp, topo, set) &&
	    !hwloc_bitmap_iszero(set))
		return true;
	hwloc_bitmap_fill(set);
	return false;
}

/* Appends the cores whose allowed CPUs are (NEAR) or are not (!NEAR)
 * within reach of LOCAL; returns 0 or -ENOMEM. */
static int cores_add(struct loco_affinity *aff, hwloc_obj_type_t type,
		     hwloc_const_cpuset_t allowed, hwloc_const_cpuset_t local,
		     bool near)
{
	int n = hwloc_get_nbobjs_by_type(aff->topo, type);

	for (int i = 0; i < n; i++) {
		hwloc_obj_t obj = hwloc_get_obj_by_type(aff->topo, type, (unsigned)i);
		hwloc_cpuset_t set = hwloc_bitmap_alloc();

		if (!set)
			return -ENOMEM;
		if (hwloc_bitmap_and(set, obj->cpuset, allowed)) {
			hwloc_bitmap_free(set);
			return -ENOMEM;
		}
		if (hwloc_bitmap_iszero(set) ||
		    hwloc_bitmap_intersects(set, local) != near) {
			hwloc_bitmap_free(set);
			continue;
		}
		aff->core[aff->ncores++] = set;
	}
	return 0;
}

/* Fills aff->core: the allowed cores (PUs if the topology has no cores),
 * those near the device first. */
static int cores_list(struct loco_mgr *mgr, struct loco_affinity *aff)
{
	hwloc_obj_type_t type = HWLOC_OBJ_CORE;
	hwloc_cpuset_t allowed = hwloc_bitmap_alloc();
	hwloc_cpuset_t local = hwloc_bitmap_alloc();
	int rc = -ENOMEM;

	if (hwloc_get_nbobjs_by_type(aff->topo, type) <= 0)
		type = HWLOC_OBJ_PU;
	int n = hwloc_get_nbobjs_by_type(aff->topo, type);
	aff->core = calloc(n > 0 ? (size_t)n : 1, sizeof(*aff->core));
	if (!allowed || !local || !aff->core)
		goto free_sets;
	rc = allowed_cpus(aff->topo, allowed);
	if (rc)
		goto free_sets;
	aff->device = device_cpus(mgr, aff->topo, local);
	rc = cores_add(aff, type, allowed, local, true);
	aff->near = aff->ncores;
	if (!rc)
		rc = cores_add(aff, type, allowed, local, false);
	if (!rc && aff->ncores == 0)
		rc = -ENODEV;
free_sets:
	hwloc_bitmap_free(allowed);
	hwloc_bitmap_free(local);
	return rc;
}

void loco_affinity_close(struct loco_affinity *aff)
{
	if (!aff)
		return;
	for (unsigned i = 0; i < aff->ncores; i++)
		hwloc_bitmap_free(aff->core[i]);
	free(aff->core);
	if (aff->topo)
		hwloc_topology_destroy(aff->topo);
	free(aff);
}

/* One line saying where this node's threads will go. */
static void affinity_report(struct loco_mgr *mgr, const struct loco_affinity *aff)
{
	const char *host = mgr->hosts.node[mgr->id].host;

	if (aff->device)
		loco_info(AFF_LOG, "binding each thread to one of %u cores (%u "
			  "near the %s device); rank %u of %u nodes on %s",
			  aff->ncores, aff->near, mgr->tp_ops->name, aff->rank,
			  aff->count, host);
	else
		loco_info(AFF_LOG, "binding each thread to one of %u cores; "
			  "rank %u of %u nodes on %s", aff->ncores, aff->rank,
			  aff->count, host);
}

int loco_affinity_open(struct loco_mgr *mgr, struct loco_affinity **out)
{
	struct loco_affinity *aff = calloc(1, sizeof(*aff));
	int rc = aff ? topo_load(&aff->topo) : -ENOMEM;

	if (rc) {
		loco_warn(AFF_LOG, "--cpu-bind core: cannot read this machine's "
			  "topology (hwloc: %s): threads run unbound", strerror(-rc));
		goto close;
	}
	rc = cores_list(mgr, aff);
	if (rc) {
		loco_warn(AFF_LOG, "--cpu-bind core: %s: threads run unbound",
			  rc == -ENODEV ? "no allowed core" : strerror(-rc));
		goto close;
	}
	loco_host_rank(&mgr->hosts, mgr->id, &aff->rank, &aff->count);
	affinity_report(mgr, aff);
	*out = aff;
	return 0;
close:
	loco_affinity_close(aff);
	return rc;
}

int loco_affinity_bind(struct loco_affinity *aff)
{
	/* Relaxed: the counter only hands out distinct thread numbers. */
	uint64_t k = atomic_fetch_add_explicit(&aff->next, 1, memory_order_relaxed);
	hwloc_const_cpuset_t set =
		aff->core[loco_core_index(aff->rank, aff->count, k, aff->ncores)];

	if (hwloc_set_cpubind(aff->topo, set, HWLOC_CPUBIND_THREAD)) {
		char cpus[64];
		int e = errno;

		hwloc_bitmap_list_snprintf(cpus, sizeof(cpus), set);
		loco_warn(AFF_LOG, "cannot bind thread %llu to CPUs %s: %s; it "
			  "keeps its CPUs", (unsigned long long)k, cpus, strerror(e));
		return -1;
	}
	return hwloc_bitmap_first(set);
}
