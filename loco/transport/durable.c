/* SPDX-License-Identifier: MIT */
/* Durable images of arenas (see durable.h). */
#include "loco/transport/durable.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <loco/error.h>
#include <loco/log.h>
#include "loco/transport/transport.h"
#include "loco/transport/shm.h"

#define DIMG_MAGIC UINT64_C(0x676d692d6f636f6c) /* "loco-img" */
#define DIMG_VERSION 1
#define DIMG_SYNC_MASK 3u
#define DIMG_DIRECT 4u            /* flags: the owner's arena is the image */
#define MIRROR_JOINING (UINT32_C(1) << 31) /* mirror word: copy in progress */
#define ALIVE_LEN 8
#define GC_MAGIC UINT64_C(0x636e79732d6f636f) /* "oco-sync" */
/* A group-commit waiter whose sync has not finished after this long
 * (its syncer paused, or a very slow disk) syncs by itself. */
#define GC_WAIT_NS UINT64_C(200000000)
#define GC_NAP_NS 1000000
/* A sync slot held this long is taken back: its syncer died or is paused
 * (a sync takes 0.1-1 ms on the development VM, its p99 5-12 ms under
 * load); with LOCO_DURABLE_SYNCS=1 nobody syncs until it is free. */
#define GC_STALE_NS UINT64_C(20000000)

struct dimg_hdr {
	uint64_t magic;
	uint32_t version, flags;
	uint64_t len;
	uint64_t image_id;
	_Atomic uint64_t epoch;
	_Atomic uint32_t mirror;   /* node id + 1 (| MIRROR_JOINING), 0: none */
	_Atomic uint32_t taken_by; /* node id + 1, 0: none */
	uint64_t mirror_epoch;
	uint64_t mirror_gen;
};
_Static_assert(sizeof(struct dimg_hdr) == LOCO_DIMG_HDR, "image header");

/* A handle's own path, and the mirror its FLUSHes copy into. */
struct dimg_mirror {
	/* Orders this process's FLUSHes through the handle: the span lock
	 * (an OFD lock) excludes other processes only, not other threads
	 * on the same open file description. */
	pthread_mutex_t flush;
	pthread_mutex_t lock;
	char path[LOCO_PATH_MAX];   /* the image's real path */
	struct loco_dimg img;       /* the mirror's image (fd -1: none) */
	uint64_t gen;               /* the header's mirror_gen at its attach */
	int gc_fd;                  /* "<image>.sync" (-1: not mapped) */
	struct loco_dimg_gc *gc;
};

int loco_dsyncs_from_env(void)
{
	const char *v = getenv("LOCO_DURABLE_SYNCS");
	if (!v || !*v)
		return LOCO_DIMG_GC_SLOTS;
	char *end;
	unsigned long n = strtoul(v, &end, 10);
	if (*end || n < 1 || n > LOCO_DIMG_GC_SLOTS) {
		loco_err("durable", "LOCO_DURABLE_SYNCS='%s': expected 1 to %d",
			 v, LOCO_DIMG_GC_SLOTS);
		return -EINVAL;
	}
	return (int)n;
}

int loco_dsync_from_env(void)
{
	static const char *const names[] = {
		[LOCO_DSYNC_MSYNC] = "msync", [LOCO_DSYNC_FDATASYNC] = "fdatasync",
		[LOCO_DSYNC_NONE] = "none",
	};
	const char *v = getenv("LOCO_DURABLE_SYNC");
	if (!v || !*v)
		return LOCO_DSYNC_FDATASYNC;
	for (int i = 0; i < 3; i++)
		if (!strcmp(v, names[i]))
			return i;
	loco_err("durable", "LOCO_DURABLE_SYNC='%s': expected msync, fdatasync "
		 "or none", v);
	return -1;
}

/* An open-file-description lock of TYPE on [OFF, OFF+LEN); WAIT blocks.
 * 0, -EAGAIN (held elsewhere, not waiting) or -errno. */
static int ofd_lock(int fd, short type, uint64_t off, uint64_t len, bool wait)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET,
			    .l_start = (off_t)off, .l_len = (off_t)len };
	while (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl)) {
		if (errno != EINTR)
			return errno == EACCES ? -EAGAIN : -errno;
	}
	return 0;
}

/* Whether some process holds a lock on the liveness bytes: the owner. */
static int owner_alive(int fd)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET,
			    .l_start = 0, .l_len = ALIVE_LEN };
	if (fcntl(fd, F_OFD_GETLK, &fl))
		return -errno;
	return fl.l_type != F_UNLCK;
}

static struct dimg_hdr *hdr_of(const struct loco_dimg *d)
{
	return (struct dimg_hdr *)(void *)d->map;
}

static int mx_new(struct loco_dimg *d, const char *path)
{
	struct dimg_mirror *mx = calloc(1, sizeof(*mx));
	if (!mx)
		return -ENOMEM;
	if (!realpath(path, mx->path))
		snprintf(mx->path, sizeof(mx->path), "%s", path);
	pthread_mutex_init(&mx->lock, NULL);
	pthread_mutex_init(&mx->flush, NULL);
	mx->img.fd = -1;
	mx->gc_fd = -1;
	d->mx = mx;
	return 0;
}

static int map_file(int fd, uint64_t len, uint8_t **out)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}

/* fsync the directory holding PATH (a rename there must last). */
static int dir_sync(const char *path)
{
	char dir[LOCO_PATH_MAX + 24];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	int fd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) ? -errno : 0;
	close(fd);
	return rc;
}

/* ---- group commit ------------------------------------------------------ */

static void gc_path(const struct loco_dimg *d, char *out, size_t len)
{
	snprintf(out, len, "%s.sync", d->mx->path);
}

static int gc_map(struct loco_dimg *d, int fd)
{
	void *p = mmap(NULL, sizeof(struct loco_dimg_gc), PROT_READ | PROT_WRITE,
		       MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	d->mx->gc_fd = fd;
	d->mx->gc = p;
	return 0;
}

/* The owner's start (start lock held): a fresh state for D's epoch, a
 * new file renamed over the last one, so flushers of an earlier
 * incarnation keep theirs and never mark this one's tickets synced. */
static int gc_create(struct loco_dimg *d)
{
	char path[LOCO_PATH_MAX + 16], tmp[LOCO_PATH_MAX + 24];
	gc_path(d, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	unlink(tmp);
	int syncs = loco_dsyncs_from_env();
	if (syncs < 0)
		return syncs;
	int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	struct loco_dimg_gc g = { .magic = GC_MAGIC, .epoch = d->epoch,
				  .syncs_max = (uint32_t)syncs };
	int rc = pwrite(fd, &g, sizeof(g), 0) == (ssize_t)sizeof(g) ? 0 :
		 errno ? -errno : -EIO;
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (rc) {
		close(fd);
		unlink(tmp);
		return rc;
	}
	return gc_map(d, fd);
}

/* A flusher's handle: the state of D's incarnation (-ESTALE: another). */
static int gc_attach(struct loco_dimg *d)
{
	char path[LOCO_PATH_MAX + 16];
	struct stat st;
	gc_path(d, path, sizeof(path));
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESTALE : -errno;
	if (fstat(fd, &st) || (uint64_t)st.st_size < sizeof(struct loco_dimg_gc)) {
		close(fd);
		return -ESTALE;
	}
	int rc = gc_map(d, fd);
	if (!rc && (d->mx->gc->magic != GC_MAGIC || d->mx->gc->epoch != d->epoch))
		rc = -ESTALE;
	return rc;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The histogram bucket of a sync of NS: 4 a power of two of µs. */
static unsigned lat_bucket(uint64_t ns)
{
	uint64_t us = ns / 1000;
	if (!us)
		return 0;
	unsigned l = 63u - (unsigned)__builtin_clzll(us);
	unsigned frac = (unsigned)(l >= 2 ? us >> (l - 2) : us << (2 - l)) & 3u;
	unsigned b = 4 * l + frac + 1;
	return b < LOCO_DIMG_GC_LAT ? b : LOCO_DIMG_GC_LAT - 1;
}

/* The upper bound of bucket B in µs. */
static double lat_bound_us(unsigned b)
{
	if (!b)
		return 1;
	unsigned l = (b - 1) / 4, frac = (b - 1) % 4;
	return (double)(5 + frac) * (double)(UINT64_C(1) << l) / 4;
}

/* A completed sync of NS, for the report. */
static void gc_count(struct loco_dimg_gc *g, uint64_t ns)
{
	/* Relaxed: counters read for a report. */
	atomic_fetch_add_explicit(&g->syncs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&g->lat[lat_bucket(ns)], 1,
				  memory_order_relaxed);
}

/* A sync moved done by N tickets: the most, for the report. */
static void gc_covered(struct loco_dimg_gc *g, uint64_t n)
{
	/* Relaxed: a report's maximum. */
	uint64_t cur = atomic_load_explicit(&g->covered_max,
					    memory_order_relaxed);
	while (cur < n &&
	       !atomic_compare_exchange_weak_explicit(&g->covered_max, &cur, n,
						      memory_order_relaxed,
						      memory_order_relaxed))
		;
}

/* Free sync slot I (-1: none) claimed at CLAIMED, unless reclaimed. */
static void gc_free(struct loco_dimg_gc *g, int i, uint64_t claimed)
{
	/* Relaxed: the slot only bounds the syncs in flight; done (release)
	 * publishes what they cover. */
	if (i >= 0)
		atomic_compare_exchange_strong_explicit(&g->slot[i], &claimed, 0,
							memory_order_relaxed,
							memory_order_relaxed);
}

/* The futex bit a FLUSH with ticket T sleeps on (FUTEX_WAIT_BITSET). */
static uint32_t gc_bit(uint64_t t)
{
	return UINT32_C(1) << (t % 32);
}

/* The bits to wake when done moved from FROM to TO: the FLUSHes now
 * covered, and the first one not covered (it may take the slot a sync
 * freed). The others sleep on: waking every waiter at every sync's end
 * cost a transfer 20 context switches at 31 threads a node. */
static uint32_t gc_wake_bits(uint64_t from, uint64_t to)
{
	if (to - from >= 31)
		return UINT32_MAX;
	uint32_t bits = gc_bit(to + 1);
	for (uint64_t t = from + 1; t <= to; t++)
		bits |= gc_bit(t);
	return bits;
}

/* Sync D's image: publish the ticket count read before it as started
 * and, once it completed, as done; free slot I (claimed at CLAIMED)
 * before the waiters wake. */
static int gc_sync(struct loco_dimg *d, struct loco_dimg_gc *g, int i,
		   uint64_t claimed)
{
	/* seq_cst: a ticket taken before this load belongs to a FLUSH whose
	 * bytes were in the page cache before it (group_sync), so the sync
	 * below writes them. */
	uint64_t upto = atomic_load(&g->req);
	uint64_t cur = atomic_load_explicit(&g->started, memory_order_relaxed);
	/* Relaxed: a waiter that trusts it waits for done (acquire), and
	 * syncs by itself if that never comes. */
	while (cur < upto &&
	       !atomic_compare_exchange_weak_explicit(&g->started, &cur, upto,
						      memory_order_relaxed,
						      memory_order_relaxed))
		;
	uint64_t t0 = mono_ns();
	if (fdatasync(d->fd)) {
		int rc = -errno;
		gc_free(g, i, claimed);
		return rc;
	}
	gc_count(g, mono_ns() - t0);
	cur = atomic_load_explicit(&g->done, memory_order_relaxed);
	/* Release: pairs with group_sync's acquire: a waiter that sees its
	 * ticket covered returns after this sync completed. */
	while (cur < upto &&
	       !atomic_compare_exchange_weak_explicit(&g->done, &cur, upto,
						      memory_order_release,
						      memory_order_relaxed))
		;
	gc_covered(g, cur < upto ? upto - cur : 0);
	gc_free(g, i, claimed);
	/* Release: pairs with the waiters' acquire of the word (a waiter
	 * that read it before this bump does not sleep, whatever its bit). */
	atomic_fetch_add_explicit(&g->wake, 1, memory_order_release);
	syscall(SYS_futex, &g->wake, FUTEX_WAKE_BITSET, INT32_MAX, NULL, NULL,
		cur < upto ? gc_wake_bits(cur, upto) : gc_wake_bits(cur, cur));
	return 0;
}

/* Claim a slot for a sync starting at NOW: a free one, or one whose
 * sync began more than GC_STALE_NS ago (its syncer died, or is paused).
 * Returns its index, or -1 when every slot holds a live sync. */
static int gc_claim(struct loco_dimg_gc *g, uint64_t now)
{
	int n = g->syncs_max >= 1 && g->syncs_max <= LOCO_DIMG_GC_SLOTS ?
		(int)g->syncs_max : LOCO_DIMG_GC_SLOTS;
	for (int i = 0; i < n; i++) {
		/* Relaxed: the slot only bounds the syncs in flight; done
		 * (release) publishes what they cover. */
		uint64_t v = atomic_load_explicit(&g->slot[i],
						  memory_order_relaxed);
		if ((!v || (int64_t)(now - v) > (int64_t)GC_STALE_NS) &&
		    atomic_compare_exchange_strong_explicit(&g->slot[i], &v, now,
							    memory_order_relaxed,
							    memory_order_relaxed))
			return i;
	}
	return -1;
}

/* Sync in slot I (claimed at NOW) for ticket T, unless a sync that began
 * while it claimed covers T (then free the slot and wait for that one:
 * returns 1). */
static int gc_slot_sync(struct loco_dimg *d, struct loco_dimg_gc *g, int i,
			uint64_t now, uint64_t t)
{
	/* Relaxed: a hint, as in group_sync. */
	if (atomic_load_explicit(&g->started, memory_order_relaxed) >= t) {
		gc_free(g, i, now);
		return 1;
	}
	return gc_sync(d, g, i, now);
}

/* fdatasync by group commit, as a database's log flush with a bounded
 * number of syncs in flight (the owner's LOCO_DURABLE_SYNCS, default
 * LOCO_DIMG_GC_SLOTS): returns once a sync that began after this FLUSH's
 * bytes reached the page cache has completed. A FLUSH that a sync in
 * flight covers (it began after the ticket) waits for it; one that is
 * not covered starts a sync at once if a slot is free (the kernel merges
 * concurrent fdatasyncs of a file), else waits for a sync to end (futex
 * naps of 1 ms on its ticket's bit: a syncer that dies wakes nobody,
 * and one that lives wakes only the FLUSHes it covered and the next) and
 * tries again, so the
 * next sync covers every FLUSH that came while the slots were busy. A
 * slot held past GC_STALE_NS is taken back, and a waiter whose sync has
 * not ended after the handle's wait (the syncer paused or killed, a
 * stalled disk) syncs by itself. docs/durability.md measures this
 * against a sync per FLUSH and for 1, 2 and 4 syncs in flight. */
static int group_sync(struct loco_dimg *d)
{
	struct loco_dimg_gc *g = d->mx ? d->mx->gc : NULL;
	if (!g)
		return fdatasync(d->fd) ? -errno : 0;
	/* seq_cst: after the FLUSH's bytes were placed in the image (the
	 * copy's stores, or flush_direct's fence after the writers'), before
	 * a syncer's read of the count. */
	uint64_t t = atomic_fetch_add(&g->req, 1) + 1;
	uint64_t start = mono_ns();
	uint64_t wait = d->group_wait_ns ? d->group_wait_ns : GC_WAIT_NS;
	for (;;) {
		/* Acquire: pairs with the syncers' bump; read before done, so
		 * a sync that ends after the check changes it (no sleep). */
		uint32_t seen = atomic_load_explicit(&g->wake,
						     memory_order_acquire);
		/* Acquire: pairs with the syncers' release. */
		if (atomic_load_explicit(&g->done, memory_order_acquire) >= t)
			return 0;
		uint64_t now = mono_ns();
		/* Relaxed: a hint; done decides. */
		if (atomic_load_explicit(&g->started, memory_order_relaxed) < t) {
			int i = gc_claim(g, now);
			int rc = i < 0 ? 1 : gc_slot_sync(d, g, i, now, t);
			if (rc <= 0)
				return rc;
		}
		if (now - start > wait)
			return gc_sync(d, g, -1, 0);
		/* FUTEX_WAIT_BITSET's timeout is absolute (CLOCK_MONOTONIC). */
		uint64_t until = now + GC_NAP_NS;
		struct timespec nap = { (time_t)(until / 1000000000u),
					(long)(until % 1000000000u) };
		syscall(SYS_futex, &g->wake, FUTEX_WAIT_BITSET, seen, &nap, NULL,
			gc_bit(t));
	}
}

int loco_dimg_group_counts(const struct loco_dimg *d, uint64_t *tickets,
			   uint64_t *syncs)
{
	const struct loco_dimg_gc *g = d->mx ? d->mx->gc : NULL;
	if (!g)
		return -ENOENT;
	/* Relaxed: counters read for a report. */
	*tickets = atomic_load_explicit(&g->req, memory_order_relaxed);
	*syncs = atomic_load_explicit(&g->syncs, memory_order_relaxed);
	return 0;
}

/* The duration below which a share Q of the histogram's syncs ran. */
static double lat_quantile(const struct loco_dimg_gc *g, uint64_t total,
			   double q)
{
	uint64_t seen = 0;
	for (unsigned b = 0; b < LOCO_DIMG_GC_LAT; b++) {
		/* Relaxed: counters read for a report. */
		seen += atomic_load_explicit(&g->lat[b], memory_order_relaxed);
		if (total && (double)seen >= q * (double)total)
			return lat_bound_us(b);
	}
	return 0;
}

int loco_dimg_group_stats(const struct loco_dimg *d,
			  struct loco_dimg_gc_stats *out)
{
	const struct loco_dimg_gc *g = d->mx ? d->mx->gc : NULL;
	struct loco_dimg_gc_stats s;
	int rc = loco_dimg_group_counts(d, &s.tickets, &s.syncs);
	if (rc)
		return rc;
	/* Relaxed: a report's maximum. */
	s.covered_max = atomic_load_explicit(&g->covered_max,
					     memory_order_relaxed);
	s.sync_p50_us = lat_quantile(g, s.syncs, 0.5);
	s.sync_p99_us = lat_quantile(g, s.syncs, 0.99);
	*out = s;
	return 0;
}

/* Make the N ranges R of D's image reach stable storage by MODE. */
static int dimg_sync(struct loco_dimg *d, int mode, const struct loco_drange *r,
		     unsigned n)
{
	if (mode == LOCO_DSYNC_NONE)
		return 0;
	if (mode == LOCO_DSYNC_FDATASYNC)
		return group_sync(d);
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	for (unsigned i = 0; i < n; i++) {
		uint64_t lo = r[i].off & ~(page - 1);
		if (msync(d->map + lo, r[i].off + r[i].len - lo, MS_SYNC))
			return -errno;
	}
	return 0;
}

/* A fresh header: identity ID, epoch 0 (bumped by the caller). */
static int hdr_create(struct loco_dimg *d, uint64_t len, uint64_t id)
{
	struct dimg_hdr *h = hdr_of(d);
	*h = (struct dimg_hdr){ .magic = DIMG_MAGIC, .version = DIMG_VERSION,
				.len = len, .image_id = id };
	return 0;
}

static int hdr_check(const struct loco_dimg *d, const char *path, uint64_t len,
		     uint64_t id)
{
	const struct dimg_hdr *h = hdr_of(d);
	if (h->magic != DIMG_MAGIC || h->version != DIMG_VERSION) {
		loco_err("durable", "%s is not a loco arena image (version %u)",
			 path, DIMG_VERSION);
		return -LOCO_EPROTO;
	}
	if (h->len != len) {
		loco_err("durable", "%s holds an arena of %lu bytes, this node's "
			 "is %lu (--arena-mb must not change across restarts)",
			 path, (unsigned long)h->len, (unsigned long)len);
		return -LOCO_EMISMATCH;
	}
	if (h->image_id != id) {
		loco_err("durable", "%s (image %016llx) does not belong to the "
			 "region table beside it (%016llx)", path,
			 (unsigned long long)h->image_id, (unsigned long long)id);
		return -LOCO_EMISMATCH;
	}
	if (h->taken_by) {
		loco_err("durable", "%s was taken over by node %u, its mirror, "
			 "after a fail-over: its data lives there now (start this "
			 "node with another --durable directory)", path,
			 h->taken_by - 1);
		return -ESTALE;
	}
	return 0;
}

/* Whether PATH still names FD's file (a renewing start replaces it). */
static bool still_named(int fd, const char *path)
{
	struct stat a, b;
	return !fstat(fd, &a) && !stat(path, &b) && a.st_ino == b.st_ino &&
	       a.st_dev == b.st_dev;
}

/* Open or create the image file and take the liveness and start locks. */
static int own_open(const char *path, uint64_t len, bool *fresh, int *fdp)
{
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = fstat(fd, &st) ? -errno : 0;
	if (!rc && (rc = ofd_lock(fd, F_WRLCK, 0, ALIVE_LEN, false)) == -EAGAIN)
		loco_err("durable", "%s is served by another running node", path);
	if (!rc)
		rc = ofd_lock(fd, F_WRLCK, LOCO_DIMG_HDR, len - LOCO_DIMG_HDR, true);
	if (!rc && !still_named(fd, path))
		rc = -EAGAIN; /* a start renewed the file under us: it serves */
	*fresh = !rc && st.st_size == 0;
	if (!rc && *fresh && ftruncate(fd, (off_t)len))
		rc = -errno;
	if (!rc && !*fresh && (uint64_t)st.st_size != len) {
		loco_err("durable", "%s has %lu bytes, this node's arena %lu "
			 "(--arena-mb must not change across restarts)", path,
			 (unsigned long)st.st_size, (unsigned long)len);
		rc = -LOCO_EMISMATCH;
	}
	if (rc) {
		close(fd);
		return rc == -EAGAIN ? -EBUSY : rc;
	}
	*fdp = fd;
	return 0;
}

/* Retire the image D holds (the earlier incarnation's, start lock held)
 * and move its contents to a new file renamed over it at PATH, whose
 * header gets epoch EPOCH: a mapping of the earlier incarnation never
 * reaches the new one. D then holds the new file, locked as the old. */
static int own_renew(struct loco_dimg *d, const char *path, uint64_t epoch,
		     int sync)
{
	char tmp[LOCO_PATH_MAX + 24];
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	/* seq_cst, then the fence: the old incarnation's direct FLUSHes
	 * either see the epoch move (and fail) or placed their bytes before
	 * the copy below reads them (flush_direct's fence). */
	atomic_store(&hdr_of(d)->epoch, epoch);
	atomic_thread_fence(memory_order_seq_cst);
	unlink(tmp);
	struct loco_dimg n = { .fd = open(tmp, O_RDWR | O_CREAT | O_EXCL |
					  O_CLOEXEC | O_NOFOLLOW, 0600),
			       .len = d->len };
	int rc = n.fd < 0 ? -errno : ftruncate(n.fd, (off_t)d->len) ? -errno : 0;
	if (!rc)
		rc = ofd_lock(n.fd, F_WRLCK, 0, ALIVE_LEN, false);
	if (!rc)
		rc = ofd_lock(n.fd, F_WRLCK, LOCO_DIMG_HDR,
			      d->len - LOCO_DIMG_HDR, false);
	if (!rc)
		rc = map_file(n.fd, d->len, &n.map);
	if (!rc) {
		memcpy(n.map, d->map, LOCO_DIMG_HDR);
		rc = loco_dimg_load(d->fd, d->len, n.map);
	}
	if (!rc && sync != LOCO_DSYNC_NONE && fdatasync(n.fd))
		rc = -errno;
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (!rc && sync != LOCO_DSYNC_NONE)
		rc = dir_sync(path);
	if (rc) {
		if (n.fd >= 0)
			unlink(tmp);
		loco_dimg_close(&n);
		return rc;
	}
	munmap(d->map, d->len);
	close(d->fd);
	d->fd = n.fd;
	d->map = n.map;
	return 0;
}

int loco_dimg_own(const char *dir, uint64_t len, int sync, unsigned how,
		  uint64_t image_id, struct loco_dimg *out)
{
	char path[LOCO_PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/%s", dir, LOCO_DIMG_NAME);
	if (mkdir(dir, 0700) && errno != EEXIST) {
		int e = errno;
		loco_err("durable", "cannot create %s: %s", dir, strerror(e));
		return -e;
	}
	if (len <= LOCO_DIMG_HDR || sync < 0)
		return -EINVAL;
	struct loco_dimg d = { .fd = -1, .len = len, .own = true };
	bool fresh = false;
	int rc = own_open(path, len, &fresh, &d.fd);
	if (!rc)
		rc = mx_new(&d, path);
	if (!rc)
		rc = map_file(d.fd, len, &d.map);
	if (!rc)
		rc = fresh ? hdr_create(&d, len, image_id) :
		     hdr_check(&d, path, len, image_id);
	/* Relaxed: under the start lock, which every epoch writer holds. */
	uint64_t epoch = rc ? 0 : atomic_load_explicit(&hdr_of(&d)->epoch,
						       memory_order_relaxed) + 1;
	if (!rc && !fresh && (how & LOCO_DIMG_RENEW))
		rc = own_renew(&d, path, epoch, sync);
	if (!rc) {
		struct dimg_hdr *h = hdr_of(&d);
		/* Relaxed: under the start lock; flushers attach after the
		 * hello, which follows. */
		atomic_store_explicit(&h->epoch, epoch, memory_order_relaxed);
		d.direct = how & LOCO_DIMG_DIRECT;
		h->flags = ((uint32_t)sync & DIMG_SYNC_MASK) |
			   (d.direct ? DIMG_DIRECT : 0);
		d.image_id = h->image_id;
		d.epoch = epoch;
		/* The epoch reaches the disk before anyone flushes for it. */
		rc = msync(d.map, LOCO_DIMG_HDR, MS_SYNC) ? -errno : 0;
	}
	if (!rc)
		rc = gc_create(&d);
	if (rc) {
		if (rc != -EBUSY && rc != -LOCO_EMISMATCH &&
		    rc != -LOCO_EPROTO && rc != -ESTALE)
			loco_err("durable", "%s: %s", path, loco_strerror(rc));
		loco_dimg_close(&d);
		return rc;
	}
	loco_info("durable", "%s: %s image %016llx, epoch %llu", path,
		  fresh ? "new" : "existing", (unsigned long long)d.image_id,
		  (unsigned long long)d.epoch);
	*out = d;
	return 0;
}

int loco_dimg_ready(struct loco_dimg *d)
{
	int rc = ofd_lock(d->fd, F_UNLCK, LOCO_DIMG_HDR, d->len - LOCO_DIMG_HDR,
			  false);
	return rc ? rc : ofd_lock(d->fd, F_RDLCK, 0, ALIVE_LEN, false);
}

int loco_dimg_arena_open(const struct loco_tp_config *cfg, const char *who,
			 struct loco_dimg *out)
{
	if (cfg->power_cut) {
		loco_err(who, "--power-cut emulates a power cut on the shm "
			 "transports only; on %s the hardware decides what a "
			 "power cut loses", who);
		return -EOPNOTSUPP;
	}
	int rc = loco_dimg_own(cfg->durable_dir, cfg->arena_bytes, cfg->dsync,
			       LOCO_DIMG_DIRECT, cfg->image_id, out);
	if (rc)
		return rc;  /* *OUT untouched */
	rc = loco_dimg_ready(out);
	if (rc)
		loco_dimg_close(out);
	return rc;
}

int loco_dimg_attach(const char *path, uint64_t len, uint64_t image_id,
		     uint64_t epoch, struct loco_dimg *out)
{
	struct loco_dimg d = { .fd = open(path, O_RDWR | O_CLOEXEC), .len = len,
			       .image_id = image_id, .epoch = epoch };
	if (d.fd < 0)
		return -errno;
	struct stat st;
	int rc = fstat(d.fd, &st) ? -errno :
		 (uint64_t)st.st_size != len ? -LOCO_EPROTO : 0;
	if (!rc)
		rc = mx_new(&d, path);
	if (!rc)
		rc = map_file(d.fd, len, &d.map);
	if (!rc && (hdr_of(&d)->magic != DIMG_MAGIC ||
		    (image_id && hdr_of(&d)->image_id != image_id)))
		rc = -LOCO_EPROTO;
	/* Relaxed: the owner published the epoch before its hello. */
	if (!rc && atomic_load_explicit(&hdr_of(&d)->epoch,
					memory_order_relaxed) != epoch)
		rc = -ESTALE;
	if (!rc)
		rc = gc_attach(&d);
	d.direct = !rc && (hdr_of(&d)->flags & DIMG_DIRECT);
	if (rc) {
		loco_dimg_close(&d);
		return rc;
	}
	*out = d;
	return 0;
}

/* The smallest span holding the N ranges. */
static void span_of(const struct loco_drange *r, unsigned n, uint64_t *lo,
		    uint64_t *hi)
{
	*lo = UINT64_MAX;
	*hi = 0;
	for (unsigned i = 0; i < n; i++) {
		if (r[i].off < *lo)
			*lo = r[i].off;
		if (r[i].off + r[i].len > *hi)
			*hi = r[i].off + r[i].len;
	}
}

/* Under the span lock: the owner lives, still is D's incarnation, and
 * its image was not taken over by a mirror. */
static int flush_allowed(const struct loco_dimg *d, bool own)
{
	if (!own) {
		int alive = owner_alive(d->fd);
		if (alive <= 0)
			return alive < 0 ? alive : -LOCO_EDOWN;
	}
	/* Relaxed: under the span lock, which the writers of both hold
	 * (their start lock). */
	const struct dimg_hdr *h = hdr_of(d);
	return atomic_load_explicit(&h->epoch, memory_order_relaxed) == d->epoch &&
	       !atomic_load_explicit(&h->taken_by, memory_order_relaxed) ? 0 :
	       -LOCO_EDOWN;
}

/* ---- mirrors ---------------------------------------------------------- */

static void side_path(const struct loco_dimg *d, char *out, size_t len)
{
	snprintf(out, len, "%s.mirror", d->mx->path);
}

/* D's mirror, attached as the header names it now (mx->lock held). */
static int mirror_attach(struct loco_dimg *d)
{
	struct dimg_mirror *mx = d->mx;
	const struct dimg_hdr *h = hdr_of(d);
	if (mx->img.fd >= 0 && mx->gen == h->mirror_gen)
		return 0;
	loco_dimg_close(&mx->img);
	char side[LOCO_PATH_MAX + 16], path[LOCO_PATH_MAX];
	side_path(d, side, sizeof(side));
	int fd = open(side, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, path, sizeof(path) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -LOCO_EPROTO;
	path[n] = '\0';
	int rc = loco_dimg_attach(path, d->len, 0, h->mirror_epoch, &mx->img);
	if (!rc)
		mx->gen = h->mirror_gen;
	return rc;
}

/* Under D's span lock, after the copy into D: the same ranges of D into
 * its mirror, synced as the mirror syncs. A mirror that is dead or
 * restarted (or cannot be reached) is dropped from the header: it missed
 * this FLUSH, so it may not take the image over any more. */
static void mirror_copy(struct loco_dimg *d, const struct loco_drange *r,
			unsigned n)
{
	struct dimg_hdr *h = hdr_of(d);
	/* Acquire: pairs with the join's release: the header's epoch,
	 * generation and the sidecar are those of this mirror. */
	uint32_t m = atomic_load_explicit(&h->mirror, memory_order_acquire);
	if (!m)
		return;
	struct dimg_mirror *mx = d->mx;
	pthread_mutex_lock(&mx->lock);
	int rc = mirror_attach(d);
	if (!rc)
		rc = flush_allowed(&mx->img, false);
	for (unsigned i = 0; !rc && i < n; i++)
		memcpy(mx->img.map + r[i].off, d->map + r[i].off, r[i].len);
	int mode = rc ? 0 : (int)(hdr_of(&mx->img)->flags & DIMG_SYNC_MASK);
	if (!rc)
		rc = dimg_sync(&mx->img, mode, r, n);
	pthread_mutex_unlock(&mx->lock);
	/* seq_cst: one of the racing flushers drops it, once. */
	if (rc && atomic_compare_exchange_strong(&h->mirror, &m, 0))
		loco_warn("durable", "%s: mirror node %u dropped (%s): it missed "
			  "a FLUSH and cannot take over", d->mx->path, m - 1,
			  loco_strerror(rc));
}

/* "<image>.mirror" names the mirror's image (new file, synced, renamed). */
static int side_write(const struct loco_dimg *own, const char *mpath)
{
	char side[LOCO_PATH_MAX + 16], tmp[LOCO_PATH_MAX + 24];
	side_path(own, side, sizeof(side));
	snprintf(tmp, sizeof(tmp), "%s.new", side);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	size_t len = strlen(mpath);
	int rc = write(fd, mpath, len) == (ssize_t)len && !fsync(fd) ? 0 :
		 errno ? -errno : -EIO;
	close(fd);
	if (!rc && rename(tmp, side))
		rc = -errno;
	return rc;
}

int loco_dimg_mirror_add(struct loco_dimg *own, struct loco_dimg *m,
			 uint32_t node)
{
	uint64_t span = own->len - LOCO_DIMG_HDR;
	if (m->len != own->len)
		return -LOCO_EMISMATCH;
	int rc = ofd_lock(own->fd, F_WRLCK, LOCO_DIMG_HDR, span, true);
	if (rc)
		return rc;
	struct dimg_hdr *h = hdr_of(own);
	if (fallocate(m->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      LOCO_DIMG_HDR, (off_t)span))
		rc = -errno;
	if (!rc)
		rc = side_write(own, m->mx->path);
	if (!rc) {
		/* Relaxed: the mirror published it before its join request. */
		h->mirror_epoch = atomic_load_explicit(&hdr_of(m)->epoch,
						       memory_order_relaxed);
		h->mirror_gen++;
		/* seq_cst, then the fence: named (joining, so no take-over
		 * yet) before the copy reads the image. A direct FLUSH whose
		 * check missed the name placed its bytes before it
		 * (flush_direct's fence): the copy has them; one that sees
		 * it copies under the span lock, which waits for this join. */
		atomic_store(&h->mirror, (node + 1) | MIRROR_JOINING);
		atomic_thread_fence(memory_order_seq_cst);
		rc = loco_dimg_load(own->fd, own->len, m->map);
	}
	if (!rc && fdatasync(m->fd))
		rc = -errno;
	/* Release: pairs with mirror_copy's acquire (none on failure). */
	atomic_store_explicit(&h->mirror, rc ? 0 : node + 1, memory_order_release);
	if (!rc)
		rc = msync(own->map, LOCO_DIMG_HDR, MS_SYNC) ? -errno : 0;
	int urc = ofd_lock(own->fd, F_UNLCK, LOCO_DIMG_HDR, span, false);
	return rc ? rc : urc;
}

void loco_dimg_mirror_drop(struct loco_dimg *own)
{
	/* Relaxed: a FLUSH that still sees it copies to a mirror nobody
	 * will take over from (its take-over checks the word). */
	atomic_store_explicit(&hdr_of(own)->mirror, 0, memory_order_relaxed);
	if (msync(own->map, LOCO_DIMG_HDR, MS_SYNC))
		loco_warn("durable", "%s: header sync: %s", own->mx->path,
			  strerror(errno));
}

int loco_dimg_take_over(struct loco_dimg *p, uint32_t me, uint64_t my_epoch)
{
	uint64_t span = p->len - LOCO_DIMG_HDR;
	int rc = ofd_lock(p->fd, F_WRLCK, LOCO_DIMG_HDR, span, true);
	if (rc)
		return rc;
	struct dimg_hdr *h = hdr_of(p);
	/* Relaxed: FLUSHes, which write them, are excluded by the lock. */
	uint32_t taken = atomic_load_explicit(&h->taken_by, memory_order_relaxed);
	int alive = taken == me + 1 ? 0 : owner_alive(p->fd);
	uint32_t m = atomic_load_explicit(&h->mirror, memory_order_relaxed);
	if (taken == me + 1)
		rc = 0;
	else if (alive)
		rc = alive < 0 ? alive : -EBUSY;
	else if (m != me + 1 || h->mirror_epoch != my_epoch)
		rc = -ESTALE;
	else {
		atomic_store_explicit(&h->taken_by, me + 1, memory_order_relaxed);
		/* Release: pairs with flush_direct's acquire: a FLUSH that
		 * sees no mirror any more sees the image taken. */
		atomic_store_explicit(&h->mirror, 0, memory_order_release);
		rc = msync(p->map, LOCO_DIMG_HDR, MS_SYNC) ? -errno : 0;
	}
	int urc = ofd_lock(p->fd, F_UNLCK, LOCO_DIMG_HDR, span, false);
	return rc ? rc : urc;
}

/* A FLUSH of a direct image (the owner's arena is the image: the bytes
 * are there already): 0 if D's incarnation still serves it, -LOCO_EDOWN
 * if not, -EAGAIN if a mirror must get a copy (flush_copy). No lock: a
 * dead owner loses nothing that is in the image (no power cut), and a
 * restart retires the epoch before it moves the image (own_renew). */
static int flush_direct(const struct loco_dimg *d)
{
	const struct dimg_hdr *h = hdr_of(d);
	/* seq_cst: the flushed bytes, stored before, against a restart's
	 * epoch move and a join's naming of a mirror, each followed by a
	 * fence and a copy of the image: either this check sees the move,
	 * or that copy sees the bytes. */
	atomic_thread_fence(memory_order_seq_cst);
	/* Acquire: pairs with take-over's release (then the image is taken). */
	if (atomic_load_explicit(&h->mirror, memory_order_acquire))
		return -EAGAIN;
	/* Relaxed: ordered by the fence and the acquire above. */
	return atomic_load_explicit(&h->epoch, memory_order_relaxed) == d->epoch &&
	       !atomic_load_explicit(&h->taken_by, memory_order_relaxed) ? 0 :
	       -LOCO_EDOWN;
}

/* Copy D's ranges R[0..N) (span [LO, HI)) from SRC into the image and its
 * mirror under the span lock, this process's other flushes excluded. */
static int flush_copy(struct loco_dimg *d, const uint8_t *src,
		      const struct loco_drange *r, unsigned n, uint64_t lo,
		      uint64_t hi)
{
	int rc = ofd_lock(d->fd, F_WRLCK, lo, hi - lo, true);
	if (rc)
		return rc;
	rc = flush_allowed(d, d->own);
	for (unsigned i = 0; !rc && !d->direct && i < n; i++)
		/* Acquire loads of the live bytes (writers race with us);
		 * the image side is ours under the locks. */
		loco_tp_copy_in(d->map + r[i].off, src + r[i].off,
				 (uint32_t)r[i].len);
	if (!rc)
		mirror_copy(d, r, n);
	int urc = ofd_lock(d->fd, F_UNLCK, lo, hi - lo, false);
	return rc ? rc : urc;
}

int loco_dimg_flush(struct loco_dimg *d, const uint8_t *src,
		    const struct loco_drange *r, unsigned n)
{
	uint64_t lo, hi;
	span_of(r, n, &lo, &hi);
	if (!n || lo < LOCO_DIMG_HDR || hi > d->len)
		return n ? -EINVAL : 0;
	int rc = d->direct ? flush_direct(d) : -EAGAIN;
	if (rc == -EAGAIN) {
		if (d->mx)
			pthread_mutex_lock(&d->mx->flush);
		rc = flush_copy(d, src, r, n, lo, hi);
		if (d->mx)
			pthread_mutex_unlock(&d->mx->flush);
	}
	int mode = (int)(hdr_of(d)->flags & DIMG_SYNC_MASK);
	return rc ? rc : dimg_sync(d, mode, r, n);
}

int loco_dimg_load(int fd, uint64_t len, uint8_t *dst)
{
	off_t at = LOCO_DIMG_HDR;
	while ((uint64_t)at < len) {
		off_t data = lseek(fd, at, SEEK_DATA);
		if (data < 0)
			return errno == ENXIO ? 0 : -errno;
		off_t hole = lseek(fd, data, SEEK_HOLE);
		if (hole < 0)
			return -errno;
		if ((uint64_t)hole > len)
			hole = (off_t)len;
		for (off_t p = data; p < hole;) {
			ssize_t n = pread(fd, dst + p, (size_t)(hole - p), p);
			if (n <= 0)
				return n < 0 ? -errno : -EIO;
			p += n;
		}
		at = hole;
	}
	return 0;
}

void loco_dimg_close(struct loco_dimg *d)
{
	struct loco_dimg_gc_stats s;
	if (d->own && !loco_dimg_group_stats(d, &s) && s.tickets)
		loco_info("durable", "%s: group commit: %llu FLUSHes synced by "
			  "%llu fdatasyncs (%.2f a sync, at most %llu; "
			  "fdatasync p50 %.0f us, p99 %.0f us)", d->mx->path,
			  (unsigned long long)s.tickets,
			  (unsigned long long)s.syncs,
			  s.syncs ? (double)s.tickets / (double)s.syncs : 0.0,
			  (unsigned long long)s.covered_max, s.sync_p50_us,
			  s.sync_p99_us);
	if (d->mx) {
		loco_dimg_close(&d->mx->img);
		if (d->mx->gc)
			munmap(d->mx->gc, sizeof(*d->mx->gc));
		if (d->mx->gc_fd >= 0)
			close(d->mx->gc_fd);
		pthread_mutex_destroy(&d->mx->lock);
		pthread_mutex_destroy(&d->mx->flush);
		free(d->mx);
		d->mx = NULL;
	}
	if (d->map)
		munmap(d->map, d->len);
	if (d->fd >= 0)
		close(d->fd);
	d->map = NULL;
	d->fd = -1;
}
