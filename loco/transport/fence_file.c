/* SPDX-License-Identifier: MIT */
/* Fence files (fence_file.h, <loco/guard.h>): shared by shm, shm-weak
 * and ucx-sm. */
#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <loco/error.h>
#include <loco/log.h>
#include "loco/transport/fence_file.h"

/* "lo-fenc2": the layout with own marks (an older file is made anew). */
#define FFILE_MAGIC UINT64_C(0x32636e65662d6f6c)
#define FFILE_SPIN 256     /* busy-mark polls before yielding */
/* An own mark's claim: the claimer's pid (below 2^22, Linux's
 * PID_MAX_LIMIT) and the low bits of its start time above. */
#define CLAIM_PID_BITS 22
#define CLAIM_PID_MASK ((UINT64_C(1) << CLAIM_PID_BITS) - 1)

void loco_ffile_path(char *out, size_t len, const char *dir, uint32_t node)
{
	snprintf(out, len, "%s/node%u.fence", dir, node);
}

/* Its first initialisation is under the file's lock (flock), which
 * every mapper takes too. */
int loco_ffile_map(const char *path, bool create, struct loco_ffile **out)
{
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW |
		      (create ? O_CREAT : 0), 0600);
	if (fd < 0)
		return -errno;
	int rc = flock(fd, LOCK_EX) ? -errno : 0;
	struct stat st;
	if (!rc && fstat(fd, &st))
		rc = -errno;
	if (!rc && (uint64_t)st.st_size != sizeof(struct loco_ffile))
		rc = !create ? -LOCO_EPROTO :
		     ftruncate(fd, sizeof(struct loco_ffile)) ? -errno : 0;
	void *p = rc ? MAP_FAILED : mmap(NULL, sizeof(struct loco_ffile),
					 PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (!rc && p == MAP_FAILED)
		rc = -errno;
	struct loco_ffile *f = p;
	if (!rc && create && f->magic != FFILE_MAGIC) {
		memset(f, 0, sizeof(*f));
		f->magic = FFILE_MAGIC;
	}
	/* Unlocked by hand: the mapping keeps the open file (and a lock on
	 * it) alive after the close. */
	flock(fd, LOCK_UN);
	close(fd);
	if (rc)
		return rc;
	*out = f;
	return 0;
}

void loco_ffile_unmap(struct loco_ffile *f)
{
	if (f)
		munmap(f, sizeof(*f));
}

bool loco_ffile_any(const struct loco_ffile *f)
{
	for (unsigned i = 0; i < LOCO_MAX_NODES; i++)
		/* Relaxed: read at the close, nothing to order. */
		if (atomic_load_explicit(&f->node[i].line[0], memory_order_relaxed))
			return true;
	return false;
}

bool loco_ffile_fenced(const struct loco_ffile *f, uint32_t peer,
		       uint64_t incarnation)
{
	return f && peer < LOCO_MAX_NODES &&
	       loco_guard_refused(f->node[peer].line, incarnation);
}

/* Process PID's start time (clock ticks since boot, /proc/PID/stat field
 * 22), or 0 if it is gone or a zombie (a zombie has no mappings left). */
static uint64_t proc_start(uint64_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%llu/stat", (unsigned long long)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	char state;
	unsigned long long start;
	if (!p || sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
			 "%*s %*s %*s %*s %*s %*s %*s %*s %llu", &state, &start) != 2 ||
	    state == 'Z' || state == 'X')
		return 0;
	return start;
}

/* ---- the guard's mode: own marks with membarrier, or shared ones ------ */

static long membarrier(int cmd)
{
	return syscall(__NR_membarrier, cmd, 0, 0);
}

static pthread_mutex_t mode_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t mode_pid;       /* the process that chose (a fork chooses anew) */
static bool mode_own;        /* its contexts use own marks */

/* Whether this process registered for MEMBARRIER_CMD_GLOBAL_EXPEDITED
 * (LOCO_GUARD_MARKS=shared: not tried). Logs the choice. */
static bool own_marks_choose(void)
{
	const char *env = getenv("LOCO_GUARD_MARKS");
	long cmds = membarrier(MEMBARRIER_CMD_QUERY);
	const char *fencer = cmds < 0 ? "none" :
		cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED ? "GLOBAL_EXPEDITED" :
		cmds & MEMBARRIER_CMD_GLOBAL ? "GLOBAL" : "none";
	if (env && !strcmp(env, "shared")) {
		loco_info("fence", "fence guard: shared marks (LOCO_GUARD_MARKS=shared)");
		return false;
	}
	if (env && strcmp(env, "own"))
		loco_warn("fence", "LOCO_GUARD_MARKS=%s: neither own nor shared; "
			  "taken as own", env);
	bool own = cmds >= 0 &&
		   (cmds & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) &&
		   (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
		   !membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED);
	if (own)
		loco_info("fence", "fence guard: own marks (membarrier registered), "
			  "a fencer's barrier: MEMBARRIER_CMD_%s", fencer);
	else
		loco_info("fence", "fence guard: shared marks (read-modify-writes): "
			  "membarrier's global expedited command is not available "
			  "(query %#lx); a fencer's barrier: %s", (unsigned long)cmds,
			  fencer);
	return own;
}

bool loco_ffile_own_marks(void)
{
	pthread_mutex_lock(&mode_lock);
	pid_t pid = getpid();
	if (mode_pid != pid) {
		mode_own = own_marks_choose();
		mode_pid = pid;
	}
	bool own = mode_own;
	pthread_mutex_unlock(&mode_lock);
	return own;
}

/* The full barrier in every running thread that makes an own mark's
 * relaxed raise visible to the fencer (guard.h): 0 or -errno. */
static int fencer_barrier(void)
{
	if (!membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) ||
	    !membarrier(MEMBARRIER_CMD_GLOBAL))
		return 0;
	return -errno;
}

/* The claim word of process PID as it runs now (its start time packed
 * above it; a gone process's start time reads 0). */
static uint64_t claim_of(uint64_t pid)
{
	return proc_start(pid) << CLAIM_PID_BITS | pid;
}

/* Whether the process that made claim word C is gone. */
static bool claim_gone(uint64_t c)
{
	return claim_of(c & CLAIM_PID_MASK) != c;
}

/* Claim a free own mark of FN for ME (or one whose claimer is gone):
 * its index, or -1 if none. */
static int own_claim(struct loco_ffile_node *fn, uint64_t me)
{
	int slot = -1;
	for (unsigned i = 0; i < LOCO_GUARD_OWN && slot < 0; i++) {
		uint64_t c = 0;
		/* Seq_cst: see the fence below. */
		if (atomic_compare_exchange_strong_explicit(&fn->own[i].owner, &c, me,
							    memory_order_seq_cst,
							    memory_order_relaxed))
			slot = (int)i;
	}
	for (unsigned i = 0; i < LOCO_GUARD_OWN && slot < 0; i++) {
		/* Relaxed: a candidate, confirmed by the exchange below. */
		uint64_t c = atomic_load_explicit(&fn->own[i].owner,
						  memory_order_relaxed);
		/* Seq_cst: as above. */
		if (c && claim_gone(c) &&
		    atomic_compare_exchange_strong_explicit(&fn->own[i].owner, &c, me,
							    memory_order_seq_cst,
							    memory_order_relaxed))
			slot = (int)i;
	}
	if (slot < 0)
		return -1;
	/* Relaxed: a dead claimer's raised mark counts for nothing (nothing
	 * of it runs any more); from now on only we write it. */
	atomic_store_explicit(&fn->own[slot].n, 0, memory_order_relaxed);
	/* Seq_cst: our claim before our first load of the line; pairs with
	 * the fencer's fence before it reads the claims (fence_barrier):
	 * either it sees the claim or we see its fence. */
	atomic_thread_fence(memory_order_seq_cst);
	return slot;
}

void loco_ffile_mark_get(struct loco_ffile_node *fn, unsigned spread,
			 struct loco_ffile_mark *out)
{
	int slot = loco_ffile_own_marks() ? own_claim(fn, claim_of((uint64_t)getpid())) : -1;
	if (slot >= 0) {
		*out = (struct loco_ffile_mark){
			.m = { .n = &fn->own[slot].n, .own = true },
			.fn = fn, .slot = slot };
		return;
	}
	loco_ffile_owner_take(fn);
	*out = (struct loco_ffile_mark){
		.m = { .n = &fn->mark[spread % LOCO_GUARD_SLOTS].n, .own = false },
		.fn = fn, .slot = -1 };
}

void loco_ffile_mark_put(struct loco_ffile_mark *m)
{
	if (m->slot < 0)
		return;
	/* Release: after our last lower of the mark (release too), before
	 * the next claimer's exchange. */
	atomic_store_explicit(&m->fn->own[m->slot].owner, 0, memory_order_release);
	m->slot = -1;
}

/* ---- fencing ------------------------------------------------------------ */

/* Whether the process recorded as FN's owner is gone. */
static bool owner_gone(const struct loco_ffile_node *fn)
{
	/* Relaxed: the owner changes only when a dead one is replaced. */
	uint64_t pid = atomic_load_explicit(&fn->owner_pid, memory_order_relaxed);
	uint64_t start = atomic_load_explicit(&fn->owner_start, memory_order_relaxed);
	return pid && proc_start(pid) != start;
}

void loco_ffile_owner_take(struct loco_ffile_node *fn)
{
	uint64_t pid = (uint64_t)getpid();
	/* Not cached: a forked child would inherit its parent's, and a fencer
	 * would then take the live child for gone. */
	uint64_t start = proc_start(pid);
	/* Relaxed: see owner_gone. */
	if (atomic_load_explicit(&fn->owner_pid, memory_order_relaxed) == pid &&
	    atomic_load_explicit(&fn->owner_start, memory_order_relaxed) == start)
		return;
	if (owner_gone(fn))
		for (unsigned i = 0; i < LOCO_GUARD_SLOTS; i++)
			/* Relaxed: the owner that raised it is gone; no mark of
			 * ours is up before this returns. */
			atomic_store_explicit(&fn->mark[i].n, 0, memory_order_relaxed);
	/* Relaxed: read by fencers only to ask /proc about the owner. */
	atomic_store_explicit(&fn->owner_start, start, memory_order_relaxed);
	atomic_store_explicit(&fn->owner_pid, pid, memory_order_relaxed);
}

/* Record INC in LINE unless it is there. Fencers in several processes
 * may record in one line: each claims an entry by its count increment,
 * then stores it. An executor that reads the new count before the entry
 * is stored executes, but its mark was raised before (in the seq_cst
 * order for a shared mark; before the membarrier that follows the store
 * for an own one), so the fencer's later reads of the marks see it and
 * wait. */
static void fence_record(uint32_t self, uint32_t target, uint32_t peer,
			 _Atomic uint64_t *line, uint64_t inc)
{
	for (unsigned i = 1; i <= LOCO_GUARD_FENCED; i++)
		/* Relaxed: a duplicate entry from a racing fencer is harmless. */
		if (atomic_load_explicit(&line[i], memory_order_relaxed) == inc)
			return;
	/* Seq_cst read-modify-write: claims the entry, in the single order
	 * with loco_guard_enter's mark RMW and count load. */
	uint64_t n = atomic_fetch_add_explicit(&line[0], 1, memory_order_seq_cst);
	if (n >= LOCO_GUARD_FENCED)
		loco_warn("fence", "node %u: fencing a %lluth incarnation of node %u "
			  "at node %u: the oldest fenced one is no longer "
			  "refused", self, (unsigned long long)n + 1, peer, target);
	/* Seq_cst: before our reads of the marks (fence_barrier's fence and
	 * membarrier, fence_wait); an executor whose mark we miss reads it
	 * (loco_guard_refused). */
	atomic_store_explicit(&line[1 + n % LOCO_GUARD_FENCED], inc,
			      memory_order_seq_cst);
}

/* The StoreLoad barrier between our record of the fence and our loads
 * of FN's marks: a seq_cst fence for the shared marks; for the own ones,
 * if any is claimed, membarrier too (guard.h). 0, or -EOPNOTSUPP if
 * membarrier failed while a live process holds an own mark. */
static int fence_barrier(uint32_t self, uint32_t peer,
			 struct loco_ffile_node *fn)
{
	/* Seq_cst: our recording (or an earlier one's) before the loads of
	 * the claims and marks below; pairs with a shared mark's raise (a
	 * seq_cst read-modify-write) and with own_claim's fence. */
	atomic_thread_fence(memory_order_seq_cst);
	bool claimed = false;
	for (unsigned i = 0; i < LOCO_GUARD_OWN && !claimed; i++)
		/* Relaxed: ordered by the fence above (a claim we miss is
		 * made after it, and its claimer then sees our record). */
		claimed = atomic_load_explicit(&fn->own[i].owner,
					       memory_order_relaxed) != 0;
	if (!claimed)
		return 0;
	int rc = fencer_barrier();
	if (!rc)
		return 0;
	for (unsigned i = 0; i < LOCO_GUARD_OWN; i++) {
		/* Relaxed: as above. */
		uint64_t c = atomic_load_explicit(&fn->own[i].owner,
						  memory_order_relaxed);
		if (c && !claim_gone(c)) {
			loco_err("fence", "node %u: cannot fence node %u: "
				 "membarrier failed (%s) and process %llu holds "
				 "an own busy mark", self, peer, loco_strerror(rc),
				 (unsigned long long)(c & CLAIM_PID_MASK));
			return -EOPNOTSUPP;
		}
	}
	return 0;
}

/* Whether busy mark I of FN (shared marks first, then own ones) is down,
 * or held by a process that is gone (POLLED: it was up a while). */
static bool mark_clear(struct loco_ffile_node *fn, unsigned i, bool polled)
{
	if (i < LOCO_GUARD_SLOTS)
		/* Seq_cst (an acquire too): pairs with loco_guard_exit's
		 * release and, in the single order, with the raise's RMW. */
		return !atomic_load_explicit(&fn->mark[i].n, memory_order_seq_cst) ||
		       (polled && owner_gone(fn));
	i -= LOCO_GUARD_SLOTS;
	/* Acquire: pairs with loco_guard_exit's release store (the op's
	 * stores are visible); the raise is ordered by fence_barrier. */
	if (!atomic_load_explicit(&fn->own[i].n, memory_order_acquire))
		return true;
	/* Relaxed: a claim only changes once its claimer is gone. */
	uint64_t c = atomic_load_explicit(&fn->own[i].owner, memory_order_relaxed);
	return polled && (!c || claim_gone(c));
}

/* Wait until FN's marks are all down, or their raisers gone. */
static int fence_wait(struct loco_ffile_node *fn, int timeout_ms)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 0, spins = 0; i < LOCO_GUARD_SLOTS + LOCO_GUARD_OWN;) {
		if (mark_clear(fn, i, false)) {
			i++;
			continue;
		}
		if (++spins < FFILE_SPIN)
			continue;
		if (mark_clear(fn, i, true)) {
			i++;
			continue;
		}
		struct timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 +
		    (t.tv_nsec - t0.tv_nsec) / 1000000 >= timeout_ms)
			return -ETIMEDOUT;
		sched_yield();
	}
	return 0;
}

int loco_ffile_fence(const char *dir, struct loco_ffile *f, uint32_t self,
		     uint32_t target, uint32_t peer, uint64_t incarnation,
		     int timeout_ms)
{
	if (peer >= LOCO_MAX_NODES || target >= LOCO_MAX_NODES || !incarnation)
		return -EINVAL;
	struct loco_ffile *mapped = NULL;
	if (!f) {
		/* Made if missing, so that a target that starts later finds
		 * the fence. */
		char path[LOCO_PATH_MAX + 64];
		loco_ffile_path(path, sizeof(path), dir, target);
		int rc = loco_ffile_map(path, true, &mapped);
		if (rc)
			return rc;
		f = mapped;
	}
	fence_record(self, target, peer, f->node[peer].line, incarnation);
	int rc = fence_barrier(self, peer, &f->node[peer]);
	if (!rc)
		rc = fence_wait(&f->node[peer], timeout_ms);
	loco_ffile_unmap(mapped);
	return rc;
}
