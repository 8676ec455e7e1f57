/* SPDX-License-Identifier: MIT */
/* Fence files (fence_file.h, <loco/guard.h>): shared by shm, shm-weak
 * and ucx-sm. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <loco/error.h>
#include <loco/log.h>
#include "loco/transport/fence_file.h"

#define FFILE_MAGIC UINT64_C(0x65636e65662d6f6c) /* "lo-fence" */
#define FFILE_SPIN 256     /* busy-mark polls before yielding */

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
 * is stored executes, but its mark was raised before (seq_cst order), so
 * the fencer's later reads of the marks see it and wait. */
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
	/* Seq_cst: before our reads of the marks (fence_wait); an executor
	 * whose mark we miss reads it (loco_guard_refused). */
	atomic_store_explicit(&line[1 + n % LOCO_GUARD_FENCED], inc,
			      memory_order_seq_cst);
}

/* Wait until FN's marks are all down, or their owner is gone. */
static int fence_wait(struct loco_ffile_node *fn, int timeout_ms)
{
	/* Seq_cst: our recording (or an earlier one's) before the reads of
	 * the marks, in the single order with loco_guard_enter's RMW. */
	atomic_thread_fence(memory_order_seq_cst);
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (unsigned i = 0, spins = 0; i < LOCO_GUARD_SLOTS;) {
		/* Seq_cst (an acquire too): pairs with loco_guard_exit's
		 * release and, in the single order, with the enter's RMW. */
		if (!atomic_load_explicit(&fn->mark[i].n, memory_order_seq_cst)) {
			i++;
			continue;
		}
		if (++spins < FFILE_SPIN)
			continue;
		if (owner_gone(fn))
			return 0;
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
	int rc = fence_wait(&f->node[peer], timeout_ms);
	loco_ffile_unmap(mapped);
	return rc;
}
