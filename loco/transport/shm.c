/* SPDX-License-Identifier: MIT */
/* shm transport (synchronous mode): CXL-style shared memory among the
 * processes of one host. Each node's arena is a file in a private run
 * directory under /dev/shm (0700; files 0600), mapped by every peer that
 * says hello. One-sided ops execute at post time as 8-byte release stores,
 * acquire loads and seq_cst read-modify-writes, so the model's per-QP order
 * holds trivially and larger copies may tear only at 8-byte granularity.
 *
 * Durable arenas (--durable DIR, durable.h): the file in the run
 * directory is the volatile layer (what the CPU caches and DRAM are to
 * NVM); DIR/arena.img is the persistence domain. A FLUSH, executed by the
 * posting process as an RDMA NIC would execute it, copies its range from
 * the one into the other. A start loads the image into a fresh volatile
 * layer; a clean stop writes the whole layer back. That is the power-cut
 * emulation (--power-cut): a kill loses what no FLUSH copied.
 *
 * Without --power-cut a process's death loses no memory, so there is no
 * volatile layer: the arena is the image itself (direct, durable.h),
 * which peers map through the link, and a FLUSH only syncs. A start
 * moves the image to a new file (LOCO_DIMG_RENEW), so a peer still
 * writing through its mapping of the dead incarnation never reaches the
 * new one, as with a fresh volatile layer. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <loco/error.h>
#include <loco/log.h>
#include "loco/transport/shm.h"

#define SHM_MAGIC UINT64_C(0x6f636f6c2d6d6873) /* "shm-loco" */

struct shm_desc {
	uint64_t nonce;
	char file[56];
	uint64_t image_id;   /* 0: the arena has no durable image */
	uint64_t epoch;      /* the image's incarnation */
	uint32_t direct;     /* the arena is the image (map it by its link) */
	uint32_t pad;
};
_Static_assert(sizeof(struct shm_desc) <= LOCO_DESC_MAX, "desc fits");

int loco_shm_dir_create(const char *dir)
{
	if (mkdir(dir, 0700) && errno != EEXIST)
		return -errno;
	struct stat st;
	if (lstat(dir, &st))
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 0077)) {
		loco_err("shm", "%s is not a private directory of this user", dir);
		return -EPERM;
	}
	return 0;
}

/* With LOCO_SHM_POPULATE=1, map every page of an arena now, as an RDMA
 * NIC's registration pins them (benchmarks: a first touch costs a page
 * fault, about 2 us in a VM, that a registered region never pays). A
 * kernel without MADV_POPULATE_WRITE (before 5.14) faults them in lazily,
 * as without the option; a /dev/shm too small to hold the arena is an
 * error now rather than a SIGBUS later. */
static int arena_populate(const char *path, void *p, uint64_t len)
{
	const char *v = getenv("LOCO_SHM_POPULATE");
	if (!v || !*v || !strcmp(v, "0"))
		return 0;
	if (strcmp(v, "1")) {
		loco_err("shm", "LOCO_SHM_POPULATE: expected 0 or 1, got '%s'", v);
		return -EINVAL;
	}
	if (!madvise(p, len, MADV_POPULATE_WRITE) || errno == EINVAL)
		return 0;
	int rc = -errno;
	loco_err("shm", "cannot populate the %lu MiB arena %s: %s (is /dev/shm "
		 "full? --arena-mb / LOCO_ARENA_MB)", (unsigned long)(len >> 20),
		 path, loco_strerror(rc));
	return rc == -EFAULT ? -ENOMEM : rc;
}

static int arena_map(const char *path, uint64_t len, bool create,
		     uint8_t **out, int *fdp)
{
	int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | (create ? O_CREAT | O_EXCL : 0);
	int fd = open(path, flags, 0600);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = 0;
	if (create && ftruncate(fd, (off_t)len))
		rc = -errno;
	else if (!create && (fstat(fd, &st) || (uint64_t)st.st_size != len))
		rc = -LOCO_EPROTO;
	void *p = rc ? MAP_FAILED :
		  mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (!rc && p == MAP_FAILED)
		rc = -errno;
	if (!rc && (rc = arena_populate(path, p, len)))
		munmap(p, len);
	if (rc || !fdp)
		close(fd);
	if (rc)
		return rc;
	if (fdp)
		*fdp = fd;
	*out = p;
	return 0;
}

/* Header words of an arena file: magic, nonce, image id (0 if volatile). */
enum { HDR_MAGIC, HDR_NONCE, HDR_IMAGE };

/* A volatile layer an earlier incarnation left at PATH that may be kept:
 * the same image, and no power cut (a process that dies leaves memory
 * as it was; a power cut does not). Its descriptor, or -1. */
static int survivor_open(const char *path, uint64_t len, uint64_t image_id)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	uint64_t h[3];
	struct stat st;
	if (fd < 0)
		return -1;
	if (pread(fd, h, sizeof(h), 0) == (ssize_t)sizeof(h) && !fstat(fd, &st) &&
	    (uint64_t)st.st_size == len && h[HDR_MAGIC] == SHM_MAGIC &&
	    h[HDR_IMAGE] == image_id)
		return fd;
	close(fd);
	return -1;
}

/* The name peers find this node's image by: <run dir>/<arena file>.img,
 * a link to DIR's image (the run directory is private, like the arena). */
static int image_link(struct loco_tp *tp, const char *dir)
{
	char real[LOCO_PATH_MAX], target[LOCO_PATH_MAX + 16];
	char link[LOCO_PATH_MAX + 80];
	if (!realpath(dir, real))
		return -errno;
	snprintf(target, sizeof(target), "%s/%s", real, LOCO_DIMG_NAME);
	snprintf(link, sizeof(link), "%s.img", tp->path);
	unlink(link);
	return symlink(target, link) ? -errno : 0;
}

/* The volatile layer of a durable arena: a fresh file (new nonce) filled
 * from the image, or from the layer a crash without power cut left. */
static int arena_load(const struct loco_tp_config *cfg, struct loco_tp *tp)
{
	char tmp[LOCO_PATH_MAX + 80];
	int src = cfg->power_cut ? -1 :
		  survivor_open(tp->path, tp->len, tp->img.image_id);
	snprintf(tmp, sizeof(tmp), "%s.new", tp->path);
	unlink(tmp);
	int rc = arena_map(tmp, tp->len, true, &tp->arena, &tp->fd);
	if (!rc)
		rc = loco_dimg_load(src >= 0 ? src : tp->img.fd, tp->len, tp->arena);
	if (!rc && rename(tmp, tp->path))
		rc = -errno;
	if (!rc)
		loco_info("shm", "node %u: arena loaded from %s", tp->id, src >= 0 ?
			  "the memory its last incarnation left (no power cut)" :
			  "its durable image");
	if (src >= 0)
		close(src);
	if (rc && tp->arena) {
		munmap(tp->arena, tp->len);
		tp->arena = NULL;
		unlink(tmp);
	}
	return rc;
}

static int arena_open(const struct loco_tp_config *cfg, struct loco_tp *tp)
{
	if (!cfg->durable_dir) {
		unlink(tp->path); /* a stale file of an earlier run with this id */
		return arena_map(tp->path, tp->len, true, &tp->arena, NULL);
	}
	unsigned how = cfg->power_cut ? 0 : LOCO_DIMG_DIRECT | LOCO_DIMG_RENEW;
	int rc = loco_dimg_own(cfg->durable_dir, tp->len, cfg->dsync, how,
			       cfg->image_id, &tp->img);
	if (rc)
		return rc;
	tp->durable = true;
	tp->direct = !cfg->power_cut;
	if (tp->direct) {
		tp->arena = tp->img.map;
		rc = arena_populate(tp->path, tp->arena, tp->len);
	} else {
		rc = arena_load(cfg, tp);
	}
	if (!rc)
		rc = image_link(tp, cfg->durable_dir);
	if (!rc)
		rc = loco_dimg_ready(&tp->img);
	if (rc)
		loco_dimg_close(&tp->img);
	return rc;
}

/* ---- the fence guard (fence_file.h) ---------------------------------------- */

void loco_shm_cq_slot(struct loco_tp *tp, struct loco_tp_cq *cq)
{
	/* Relaxed: a spread of threads over the shared marks, nothing more. */
	cq->slot = atomic_fetch_add_explicit(&tp->cqs, 1, memory_order_relaxed) %
		   LOCO_GUARD_SLOTS;
}

void loco_shm_qp_guard(struct loco_tp *tp, struct loco_tp_cq *cq,
		       struct loco_tp_qp *qp)
{
	/* peer_lock: threads of one process take over one after the other. */
	pthread_mutex_lock(&tp->peer_lock);
	struct loco_ffile_node *fn = &tp->peers[qp->peer].fence->node[tp->id];
	loco_ffile_mark_get(fn, cq->slot, &qp->mark);
	pthread_mutex_unlock(&tp->peer_lock);
	qp->fenced = fn->line;
}

void loco_shm_qp_unguard(struct loco_tp_qp *qp)
{
	loco_ffile_mark_put(&qp->mark);
}

bool loco_shm_guard_enter(struct loco_tp_qp *qp)
{
	return loco_guard_enter(qp->mark.m, qp->fenced, qp->tp->nonce);
}

void loco_shm_guard_exit(struct loco_tp_qp *qp)
{
	loco_guard_exit(qp->mark.m);
}

int loco_shm_fence_at(struct loco_tp *tp, uint32_t target, uint32_t peer,
		      uint64_t incarnation, int timeout_ms)
{
	if (target >= LOCO_MAX_NODES)
		return -EINVAL;
	/* TARGET's fence file: mapped already if it is a peer we met. */
	pthread_mutex_lock(&tp->peer_lock);
	struct loco_ffile *f = target == tp->id ? tp->fence : tp->peers[target].fence;
	pthread_mutex_unlock(&tp->peer_lock);
	return loco_ffile_fence(tp->dir, f, tp->id, target, peer, incarnation,
				timeout_ms);
}

bool loco_shm_fenced_here(struct loco_tp *tp, uint32_t peer,
			  uint64_t incarnation)
{
	return loco_ffile_fenced(tp->fence, peer, incarnation);
}

int loco_shm_fence(struct loco_tp *tp, uint32_t peer, uint64_t incarnation,
		   int timeout_ms)
{
	return loco_shm_fence_at(tp, tp->id, peer, incarnation, timeout_ms);
}

int loco_shm_open_common(const struct loco_tp_config *cfg, struct loco_tp *tp)
{
	int rc = loco_shm_dir_create(cfg->run_dir);
	if (rc)
		return rc;
	pthread_mutex_init(&tp->peer_lock, NULL);
	tp->id = cfg->node_id;
	tp->len = cfg->arena_bytes;
	tp->mirror = cfg->mirror;
	tp->fd = -1;
	tp->img.fd = -1;
	snprintf(tp->file, sizeof(tp->file), "node%u.arena", cfg->node_id);
	snprintf(tp->path, sizeof(tp->path), "%s/%s", cfg->run_dir, tp->file);
	snprintf(tp->dir, sizeof(tp->dir), "%s", cfg->run_dir);
	rc = arena_open(cfg, tp);
	if (rc) {
		loco_err("shm", "cannot create arena %s (%lu bytes): %s", tp->path,
			 (unsigned long)tp->len, loco_strerror(rc));
		return rc;
	}
	loco_ffile_path(tp->fence_path, sizeof(tp->fence_path), tp->dir, tp->id);
	rc = loco_ffile_map(tp->fence_path, true, &tp->fence);
	if (rc) {
		loco_err("shm", "cannot open the fence file %s: %s", tp->fence_path,
			 loco_strerror(rc));
		return rc;
	}
	/* The guard's mode, chosen (membarrier registered) before any mark
	 * is claimed. */
	loco_ffile_own_marks();
	const char *stop = getenv("LOCO_SHM_STOP_IN_POST");
	tp->stop_at = stop ? strtoull(stop, NULL, 10) : 0;
	tp->nonce = cfg->incarnation;
	if (!tp->nonce &&
	    getrandom(&tp->nonce, sizeof(tp->nonce), 0) != sizeof(tp->nonce))
		tp->nonce = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
	uint64_t *hdr = (uint64_t *)tp->arena;
	if (!tp->direct) { /* a direct arena's first bytes are the image's */
		hdr[HDR_MAGIC] = SHM_MAGIC;
		hdr[HDR_NONCE] = tp->nonce;
		hdr[HDR_IMAGE] = tp->durable ? tp->img.image_id : 0;
	}
	tp->peers[tp->id].base = tp->arena;
	tp->peers[tp->id].len = tp->len;
	tp->peers[tp->id].img = tp->durable ? &tp->img : NULL;
	tp->peers[tp->id].fence = tp->fence;
	return 0;
}

static int shm_tp_open(const struct loco_tp_config *cfg, struct loco_tp **out)
{
	struct loco_tp *tp = calloc(1, sizeof(*tp));
	if (!tp)
		return -ENOMEM;
	int rc = loco_shm_open_common(cfg, tp);
	if (rc) {
		free(tp);
		return rc;
	}
	*out = tp;
	return 0;
}

/* A clean stop writes the whole volatile layer back (every extent of the
 * arena file): only a kill loses what was not persisted. A direct arena
 * is the image: its sync is the write-back. */
static void arena_write_back(struct loco_tp *tp)
{
	off_t at = LOCO_DIMG_HDR;
	struct loco_drange all = { LOCO_DIMG_HDR, tp->len - LOCO_DIMG_HDR };
	int rc = tp->direct ? loco_dimg_flush(&tp->img, tp->arena, &all, 1) : 0;
	while (!tp->direct && !rc && (uint64_t)at < tp->len) {
		off_t data = lseek(tp->fd, at, SEEK_DATA);
		off_t hole = data < 0 ? data : lseek(tp->fd, data, SEEK_HOLE);
		if (hole < 0)
			break;
		struct loco_drange r = { (uint64_t)data, (uint64_t)(hole - data) };
		if (r.off + r.len > tp->len)
			r.len = tp->len - r.off;
		rc = loco_dimg_flush(&tp->img, tp->arena, &r, 1);
		at = hole;
	}
	if (rc)
		loco_err("shm", "node %u: writing the arena back to its image: %s",
			 tp->id, loco_strerror(rc));
}

static void peer_image_free(struct loco_dimg *img)
{
	if (img) {
		loco_dimg_close(img);
		free(img);
	}
}

/* Unmap P's incarnation and every older one. */
static void peer_unmap(struct shm_peer *p)
{
	for (struct shm_peer *older = p->older, *next; older; older = next) {
		next = older->older;
		munmap(older->base, older->len);
		peer_image_free(older->img);
		free(older);
	}
	if (p->base)
		munmap(p->base, p->len);
	peer_image_free(p->img);
}

void loco_shm_close_common(struct loco_tp *tp)
{
	for (unsigned i = 0; i < LOCO_MAX_NODES; i++) {
		if (i == tp->id)
			continue;
		peer_unmap(&tp->peers[i]);
		loco_ffile_unmap(tp->peers[i].fence);
	}
	if (tp->fence) {
		if (!loco_ffile_any(tp->fence))
			unlink(tp->fence_path);
		loco_ffile_unmap(tp->fence);
	}
	pthread_mutex_destroy(&tp->peer_lock);
	if (tp->durable && tp->arena && !tp->mirror)
		arena_write_back(tp);
	if (tp->arena && !tp->direct) {
		munmap(tp->arena, tp->len);
		unlink(tp->path);
	}
	if (tp->durable) {
		char link[LOCO_PATH_MAX + 80];
		snprintf(link, sizeof(link), "%s.img", tp->path);
		unlink(link);
		loco_dimg_close(&tp->img);
	}
	if (tp->fd >= 0)
		close(tp->fd);
}

static void shm_tp_close(struct loco_tp *tp)
{
	loco_shm_close_common(tp);
	free(tp);
}

static void *shm_arena_base(struct loco_tp *tp) { return tp->arena; }
static uint64_t shm_arena_len(struct loco_tp *tp) { return tp->len; }

static int shm_arena_desc(struct loco_tp *tp, void *desc, size_t *len)
{
	struct shm_desc d = { .nonce = tp->nonce };
	snprintf(d.file, sizeof(d.file), "%s", tp->file);
	if (tp->durable) {
		d.image_id = tp->img.image_id;
		d.epoch = tp->img.epoch;
		d.direct = tp->direct;
	}
	memcpy(desc, &d, sizeof(d));
	*len = sizeof(d);
	return 0;
}

/* A durable peer's image, mapped to flush into (peer_add). */
static int peer_image(struct loco_tp *tp, const struct shm_desc *d,
		      uint64_t len, struct loco_dimg **out)
{
	char path[LOCO_PATH_MAX + 80];
	struct loco_dimg *img = calloc(1, sizeof(*img));
	if (!img)
		return -ENOMEM;
	snprintf(path, sizeof(path), "%s/%s.img", tp->dir, d->file);
	int rc = loco_dimg_attach(path, len, d->image_id, d->epoch, img);
	if (rc) {
		free(img);
		return rc;
	}
	*out = img;
	return 0;
}

/* A direct peer's arena: its image (the epoch checked, -ESTALE if it
 * moved on), and a mapping of it as the arena. */
static int peer_direct(struct loco_tp *tp, const struct shm_desc *d,
		       uint64_t len, uint8_t **base, struct loco_dimg **img)
{
	int rc = peer_image(tp, d, len, img);
	if (rc)
		return rc;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, (*img)->fd, 0);
	if (p == MAP_FAILED) {
		rc = -errno;
		peer_image_free(*img);
		*img = NULL;
		return rc;
	}
	*base = p;
	return 0;
}

/* Called with the manager's peer lock held (one caller at a time). */
int loco_shm_peer_add(struct loco_tp *tp, uint32_t peer, const void *desc,
		      size_t len, uint64_t arena_len, uint64_t dm_len)
{
	struct shm_desc d;
	if (len != sizeof(d) || peer >= LOCO_MAX_NODES || dm_len)
		return -LOCO_EPROTO;
	memcpy(&d, desc, sizeof(d));
	if (!memchr(d.file, 0, sizeof(d.file)) || strchr(d.file, '/') ||
	    d.file[0] == '.' || !d.file[0])
		return -LOCO_EPROTO;
	struct shm_peer *p = &tp->peers[peer];
	if (p->base && p->nonce == d.nonce)
		return 0;
	if (peer == tp->id)
		return d.nonce == tp->nonce ? 0 : -LOCO_EPROTO;
	char path[LOCO_PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/%s", tp->dir, d.file);
	uint8_t *base;
	struct loco_dimg *img = NULL;
	int rc = d.direct ? peer_direct(tp, &d, arena_len, &base, &img) :
		 arena_map(path, arena_len, false, &base, NULL);
	if (rc)
		return rc;
	const uint64_t *hdr = (const uint64_t *)base;
	if (!d.direct && (hdr[HDR_MAGIC] != SHM_MAGIC || hdr[HDR_NONCE] != d.nonce))
		rc = -ESTALE;
	if (!rc && d.image_id && !d.direct)
		rc = peer_image(tp, &d, arena_len, &img);
	struct loco_ffile *fence = p->fence;
	if (!rc && !fence) {
		/* Beside its arena file: node<ID>.arena -> node<ID>.fence. */
		char fpath[LOCO_PATH_MAX + 64];
		size_t n = strlen(d.file);
		if (n > 6 && !strcmp(d.file + n - 6, ".arena"))
			n -= 6;
		snprintf(fpath, sizeof(fpath), "%s/%.*s.fence", tp->dir, (int)n,
			 d.file);
		rc = loco_ffile_map(fpath, false, &fence);
	}
	if (rc) {
		munmap(base, arena_len);
		peer_image_free(img);
		return rc;
	}
	/* A restarted peer (new nonce) gets a fresh mapping (and image
	 * handle); the old ones stay until the close because other threads
	 * may be copying from them right now. */
	struct shm_peer *old = p->base ? malloc(sizeof(*old)) : NULL;
	if (p->base && !old) {
		munmap(base, arena_len);
		peer_image_free(img);
		return -ENOMEM;
	}
	pthread_mutex_lock(&tp->peer_lock);
	if (old) {
		*old = *p;
		p->older = old;
	}
	p->base = base;
	p->len = arena_len;
	p->nonce = d.nonce;
	p->img = img;
	p->fence = fence;
	pthread_mutex_unlock(&tp->peer_lock);
	return 0;
}

int loco_shm_qp_peer(struct loco_tp *tp, uint32_t peer, struct loco_tp_qp *qp)
{
	if (peer >= LOCO_MAX_NODES)
		return -ENOTCONN;
	pthread_mutex_lock(&tp->peer_lock);
	const struct shm_peer *p = &tp->peers[peer];
	qp->base = p->base;
	qp->len = p->len;
	qp->img = p->img;
	pthread_mutex_unlock(&tp->peer_lock);
	return qp->base ? 0 : -ENOTCONN;
}

uint64_t loco_shm_dm_len(struct loco_tp *tp)
{
	(void)tp;
	return 0;
}

int loco_shm_dm_zero(struct loco_tp *tp, uint64_t off, uint64_t len)
{
	(void)tp;
	(void)off;
	(void)len;
	return -EOPNOTSUPP;
}

static int shm_cq_create(struct loco_tp *tp, struct loco_tp_cq **out)
{
	struct loco_tp_cq *cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -ENOMEM;
	loco_shm_cq_slot(tp, cq);
	*out = cq;
	return 0;
}

static void shm_cq_destroy(struct loco_tp_cq *cq)
{
	free(cq);
}

static int shm_qp_create(struct loco_tp *tp, struct loco_tp_cq *cq,
			 uint32_t peer, struct loco_tp_qp **out)
{
	struct loco_tp_qp *qp = calloc(1, sizeof(*qp));
	if (!qp)
		return -ENOMEM;
	int rc = loco_shm_qp_peer(tp, peer, qp);
	if (rc) {
		free(qp);
		return rc;
	}
	qp->tp = tp;
	qp->peer = peer;
	loco_shm_qp_guard(tp, cq, qp);
	cq->qps[cq->nqp++] = qp;
	qp->cq = cq;
	*out = qp;
	return 0;
}

static void shm_qp_destroy(struct loco_tp_qp *qp)
{
	struct loco_tp_cq *cq = qp->cq;
	for (unsigned i = 0; i < cq->nqp; i++) {
		if (cq->qps[i] == qp) {
			cq->qps[i] = cq->qps[--cq->nqp];
			break;
		}
	}
	loco_shm_qp_unguard(qp);
	free(qp);
}

/* ---- data movement --------------------------------------------------------- */


/* Execute one request against BASE (the target arena). */
void loco_shm_execute(uint8_t *base, const struct loco_wr *wr)
{
	uint8_t *at = base + wr->remote_off;
	_Atomic uint64_t *word = (_Atomic uint64_t *)at;
	uint64_t old;
	switch (wr->opcode) {
	case LOCO_OP_READ:
		loco_tp_copy_in(wr->local, at, wr->len);
		break;
	case LOCO_OP_WRITE:
		loco_tp_copy_out(at, wr->local, wr->len);
		break;
	case LOCO_OP_CAS:
		old = wr->compare;
		/* seq_cst: remote atomics are totally ordered among themselves. */
		atomic_compare_exchange_strong_explicit(word, &old, wr->operand,
							memory_order_seq_cst,
							memory_order_seq_cst);
		memcpy(wr->local, &old, 8);
		break;
	case LOCO_OP_FAA:
		/* seq_cst: as for CAS. */
		old = atomic_fetch_add_explicit(word, wr->operand,
						memory_order_seq_cst);
		memcpy(wr->local, &old, 8);
		break;
	}
}

/* The core executes 8-byte requests on the mapping itself (loco.h),
 * as loco_shm_execute would. */
static uint8_t *shm_qp_direct(struct loco_tp_qp *qp, uint64_t *len,
			      struct loco_guard_mark *mark,
			      const _Atomic uint64_t **fenced)
{
	*len = qp->len;
	*mark = qp->mark.m;
	*fenced = qp->fenced;
	return qp->base;
}

/* Requests execute at post time: nothing is left to stop. */
static void shm_qp_abort(struct loco_tp_qp *qp)
{
	(void)qp;
}

#define FLUSH_RUN 32

int loco_shm_flush(struct loco_tp_qp *qp, const struct loco_wr *wr, unsigned n)
{
	struct loco_drange r[FLUSH_RUN];
	if (!qp->img)
		return 0;
	while (n) {
		unsigned k = 0;
		for (; n && k < FLUSH_RUN; wr++, n--)
			if (wr->len)
				r[k++] = (struct loco_drange){ wr->remote_off, wr->len };
		int rc = k ? loco_dimg_flush(qp->img, qp->base, r, k) : 0;
		if (rc)
			return rc;
	}
	return 0;
}

/* PEER's current durable image (another node's), or NULL. */
static struct loco_dimg *peer_img(struct loco_tp *tp, uint32_t peer)
{
	if (peer >= LOCO_MAX_NODES || peer == tp->id)
		return NULL;
	pthread_mutex_lock(&tp->peer_lock);
	struct loco_dimg *img = tp->peers[peer].img;
	pthread_mutex_unlock(&tp->peer_lock);
	return img;
}

int loco_shm_mirror_set(struct loco_tp *tp, uint32_t peer)
{
	if (!tp->durable)
		return -EINVAL;
	if (peer >= LOCO_MAX_NODES) {
		loco_dimg_mirror_drop(&tp->img);
		return 0;
	}
	struct loco_dimg *m = peer_img(tp, peer);
	return m ? loco_dimg_mirror_add(&tp->img, m, peer) : -EINVAL;
}

int loco_shm_take_over(struct loco_tp *tp, uint32_t peer)
{
	struct loco_dimg *p = peer_img(tp, peer);
	if (!tp->durable || !p)
		return -EINVAL;
	int rc = loco_dimg_take_over(p, tp->id, tp->img.epoch);
	if (rc || !tp->mirror)
		return rc;
	if (tp->direct) { /* the arena is the image, which holds the copy */
		tp->mirror = false;
		return 0;
	}
	/* The arena held nothing of PEER's: it becomes the image's copy
	 * (emptied by punching its pages out, not by touching them all). */
	if (fallocate(tp->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      LOCO_DIMG_HDR, (off_t)(tp->len - LOCO_DIMG_HDR)))
		memset(tp->arena + LOCO_DIMG_HDR, 0, tp->len - LOCO_DIMG_HDR);
	rc = loco_dimg_load(tp->img.fd, tp->len, tp->arena);
	if (!rc)
		tp->mirror = false;
	return rc;
}

int loco_shm_persist(struct loco_tp *tp, uint64_t off, uint64_t len)
{
	struct loco_drange r = { off, len };
	return tp->durable && len ? loco_dimg_flush(&tp->img, tp->arena, &r, 1) : 0;
}

/* Consecutive FLUSH requests from WR[I] on: their count. */
static unsigned flush_run(const struct loco_wr *wr, unsigned i, unsigned n)
{
	unsigned k = i;
	while (k < n && wr[k].opcode == LOCO_OP_FLUSH)
		k++;
	return k - i;
}

/* LOCO_SHM_STOP_IN_POST: a process stopped inside an op, its busy mark
 * up (what a fence must wait for). */
static void stop_in_post(struct loco_tp *tp)
{
	/* Relaxed: a count. */
	if (tp->stop_at &&
	    atomic_fetch_add_explicit(&tp->posts, 1, memory_order_relaxed) + 1 ==
	    tp->stop_at)
		raise(SIGSTOP);
}

/* A failed FLUSH stops the post there: the requests before it executed,
 * it and those after it did not (the core fails the post). */
static int shm_post(struct loco_tp_qp *qp, const struct loco_wr *wr, unsigned n)
{
	if (!loco_shm_guard_enter(qp))
		return -LOCO_EFENCED;
	stop_in_post(qp->tp);
	int rc = 0;
	for (unsigned i = 0; i < n && !rc;) {
		unsigned k = flush_run(wr, i, n);
		if (k) {
			rc = loco_shm_flush(qp, &wr[i], k);
			if (rc)
				break;
		} else {
			loco_shm_execute(qp->base, &wr[i]);
			k = 1;
		}
		for (unsigned j = i; j < i + k; j++)
			if (wr[j].signaled)
				qp->done = wr[j].wr_id;
		i += k;
	}
	loco_shm_guard_exit(qp);
	return rc;
}

/* N FLUSHes of the ranges R as one doorbell, as shm_post runs FLUSH
 * requests: under the fence guard, through the peer's image. */
static int shm_flush(struct loco_tp_qp *qp, const struct loco_drange *r,
		     unsigned n)
{
	if (!loco_shm_guard_enter(qp))
		return -LOCO_EFENCED;
	stop_in_post(qp->tp);
	int rc = qp->img && n ? loco_dimg_flush(qp->img, qp->base, r, n) : 0;
	loco_shm_guard_exit(qp);
	return rc;
}

/* Report, per QP, its latest signalled completion: it implies the earlier. */
static int shm_poll(struct loco_tp_cq *cq, struct loco_cqe *out, unsigned max)
{
	unsigned n = 0;
	for (unsigned i = 0; i < cq->nqp && n < max; i++) {
		struct loco_tp_qp *qp = cq->qps[i];
		if (qp->done == qp->reported)
			continue;
		out[n++] = (struct loco_cqe){ .wr_id = qp->done, .peer = qp->peer };
		qp->reported = qp->done;
	}
	return (int)n;
}

const struct loco_transport_ops loco_shm_ops = {
	.name = "shm",
	.sync = true,
	.open = shm_tp_open,
	.close = shm_tp_close,
	.arena_base = shm_arena_base,
	.arena_len = shm_arena_len,
	.arena_desc = shm_arena_desc,
	.peer_add = loco_shm_peer_add,
	.dm_len = loco_shm_dm_len,
	.dm_zero = loco_shm_dm_zero,
	.persist = loco_shm_persist,
	.mirror_set = loco_shm_mirror_set,
	.take_over = loco_shm_take_over,
	.cq_create = shm_cq_create,
	.cq_destroy = shm_cq_destroy,
	.qp_create = shm_qp_create,
	.qp_destroy = shm_qp_destroy,
	.post = shm_post,
	.flush = shm_flush,
	.qp_direct = shm_qp_direct,
	.poll = shm_poll,
	.qp_abort = shm_qp_abort,
	.fence = loco_shm_fence,
	.fence_at = loco_shm_fence_at,
	.fenced_here = loco_shm_fenced_here,
};
