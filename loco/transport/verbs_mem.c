/* SPDX-License-Identifier: MIT */
/* verbs transport: registered memory. The arena (huge pages where
 * available) with one MR for local use only and a read-only fence MR over
 * its first bytes; a registration per region with exactly the access the
 * region declares (mem_reg: the NIC enforces it); the optional NIC device
 * memory (ibv_alloc_dm), whose hot regions register their pieces the same
 * way; and the pool of registered bounce buffers for local buffers
 * outside the arena. */
#include "loco/transport/verbs_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <loco/error.h>
#include <loco/log.h>

#define VERBS_LOG "verbs"

#define VERBS_MIB(x) ((x) >> 20)

static uint64_t verbs_round_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

/* ---- arena -------------------------------------------------------------- */

/* Huge pages, largest first; normal pages with one warning otherwise.
 * Anonymous mappings are zeroed by the kernel. */
static int verbs_arena_map(struct loco_tp *tp, uint64_t bytes)
{
	uint64_t sizes[2];
	unsigned n = verbs_arena_page_sizes(bytes, sizes);
	for (unsigned i = 0; i < n; i++) {
		size_t len = verbs_round_up(bytes, sizes[i]);
		int huge = (int)__builtin_ctzll(sizes[i]) << MAP_HUGE_SHIFT;
		void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | huge, -1, 0);
		if (p != MAP_FAILED) {
			tp->arena = p;
			tp->map_len = len;
			loco_info(VERBS_LOG, "arena: %" PRIu64 " MiB on %" PRIu64 " MiB huge pages",
				  VERBS_MIB(bytes), VERBS_MIB(sizes[i]));
			return 0;
		}
	}
	size_t len = verbs_round_up(bytes, (uint64_t)sysconf(_SC_PAGESIZE));
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		loco_err(VERBS_LOG, "arena of %" PRIu64 " bytes: mmap: %s", bytes, strerror(e));
		return -e;
	}
	loco_warn(VERBS_LOG, "no huge pages free for the %" PRIu64 " MiB arena (tried %s2 MiB): "
		  "using normal pages, expect more NIC translation misses; see docs/verbs.md",
		  VERBS_MIB(bytes), n > 1 ? "1 GiB, " : "");
	tp->arena = p;
	tp->map_len = len;
	return 0;
}

/* A durable arena is the shared mapping of its image (durable.h): a
 * placed WRITE is in the image's page cache (or, on a DAX file system over
 * persistent memory, in the persistence domain itself), which survives
 * the node's process; the persist op and a clean stop msync it. The
 * FLUSH a peer sends is a READ (verbs_wr.c) and needs no code here. */
static int verbs_arena_durable(struct loco_tp *tp, const struct loco_tp_config *cfg)
{
	int r = loco_dimg_arena_open(cfg, VERBS_LOG, &tp->img);
	if (r)
		return r;
	tp->durable = true;
	tp->arena = tp->img.map;
	tp->map_len = cfg->arena_bytes;
	return 0;
}

static void verbs_arena_unmap(struct loco_tp *tp)
{
	if (!tp->durable) {
		munmap(tp->arena, tp->map_len);
		return;
	}
	if (msync(tp->img.map, tp->img.len, MS_SYNC))
		loco_err(VERBS_LOG, "msync of the durable arena: %s", strerror(errno));
	loco_dimg_close(&tp->img);
}

static const char *verbs_reg_hint(int e)
{
	return e == ENOMEM || e == EPERM ?
	       " (raise the locked-memory limit: ulimit -l unlimited)" : "";
}

/* The arena's registrations: local write only (WRITE sources and READ
 * destinations in it need an lkey; peers get nothing from it), and the
 * fence target, read-only. */
static int verbs_arena_reg(struct loco_tp *tp, uint64_t bytes)
{
	tp->arena_mr = ibv_reg_mr(tp->pd, tp->arena, bytes, IBV_ACCESS_LOCAL_WRITE);
	if (!tp->arena_mr) {
		int e = errno;
		loco_err(VERBS_LOG, "registering the %" PRIu64 " MiB arena: %s%s",
			 VERBS_MIB(bytes), strerror(e), verbs_reg_hint(e));
		return -e;
	}
	tp->fence_mr = ibv_reg_mr(tp->pd, tp->arena, LOCO_FENCE_LEN,
				  verbs_mr_access(LOCO_REGION_REMOTE_READ, tp->atomics));
	if (!tp->fence_mr) {
		int e = errno;
		loco_err(VERBS_LOG, "registering the arena's fence target: %s%s",
			 strerror(e), verbs_reg_hint(e));
		ibv_dereg_mr(tp->arena_mr);
		return -e;
	}
	return 0;
}

int verbs_arena_create(struct loco_tp *tp, const struct loco_tp_config *cfg)
{
	uint64_t bytes = cfg->arena_bytes;
	int r = cfg->durable_dir ? verbs_arena_durable(tp, cfg) :
		verbs_arena_map(tp, bytes);
	if (r < 0)
		return r;
	tp->arena_len = bytes;
	r = bytes < LOCO_FENCE_LEN ? -EINVAL : verbs_arena_reg(tp, bytes);
	if (r < 0)
		verbs_arena_unmap(tp);
	return r;
}

void verbs_arena_destroy(struct loco_tp *tp)
{
	struct ibv_mr *mrs[] = { tp->fence_mr, tp->arena_mr };
	for (unsigned i = 0; i < 2; i++) {
		int r = ibv_dereg_mr(mrs[i]);
		if (r)
			loco_err(VERBS_LOG, "ibv_dereg_mr(arena%s): %s",
				 i ? "" : " fence", strerror(r));
	}
	verbs_arena_unmap(tp);
}

/* ---- a registration per region ------------------------------------------ */

int verbs_mem_reg(struct loco_tp *tp, uint32_t space, uint64_t off,
		  uint64_t len, unsigned access, struct loco_tp_mr **mr,
		  uint32_t *key)
{
	const char *where = space == LOCO_SPACE_DM ? "device memory" : "arena";
	uint64_t cap = space == LOCO_SPACE_DM ? tp->dm_len : tp->arena_len;
	if (space > LOCO_SPACE_DM || off > cap || len > cap - off || !len)
		return -EINVAL;
	if (tp->nmr >= (unsigned)tp->attr.orig_attr.max_mr) {
		loco_err(VERBS_LOG, "%s: no memory registration left for a region of %"
			 PRIu64 " bytes (%s offset %" PRIu64 "): the device allows %d "
			 "(max_mr) and %u regions hold one", tp->devname, len, where,
			 off, tp->attr.orig_attr.max_mr, tp->nmr);
		return -ENOSPC;
	}
	struct loco_tp_mr *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	int flags = verbs_mr_access(access, tp->atomics);
	m->mr = space == LOCO_SPACE_DM ?
		ibv_reg_dm_mr(tp->pd, tp->dm, off, len,
			      (unsigned)flags | IBV_ACCESS_ZERO_BASED) :
		ibv_reg_mr(tp->pd, (uint8_t *)tp->arena + off, len, flags);
	if (!m->mr) {
		int e = errno ? errno : EIO;
		loco_err(VERBS_LOG, "registering a region of %" PRIu64 " bytes at %s offset %"
			 PRIu64 " (access flags %#x, %u regions registered): %s%s",
			 len, where, off, (unsigned)flags, tp->nmr, strerror(e),
			 verbs_reg_hint(e));
		free(m);
		return -e;
	}
	tp->nmr++;
	*mr = m;
	*key = m->mr->rkey;
	return 0;
}

void verbs_mem_dereg(struct loco_tp *tp, struct loco_tp_mr *mr)
{
	int r = ibv_dereg_mr(mr->mr);
	if (r)
		loco_err(VERBS_LOG, "ibv_dereg_mr(region): %s", strerror(r));
	tp->nmr--;
	free(mr);
}

int verbs_persist(struct loco_tp *tp, uint64_t off, uint64_t len)
{
	struct loco_drange rg = { off, len };
	return tp->durable && len ? loco_dimg_flush(&tp->img, tp->img.map, &rg, 1) : 0;
}

/* ---- device memory (optional) ------------------------------------------- */

void verbs_dm_release(struct loco_tp *tp)
{
	if (tp->dm)
		ibv_free_dm(tp->dm);
	tp->dm = NULL;
	tp->dm_len = 0;
}

int verbs_dm_fill_zero(struct loco_tp *tp, uint64_t off, uint64_t len)
{
	static const uint8_t zero[4096];
	static _Atomic unsigned drain;
	while (len) {
		size_t n = len < sizeof(zero) ? (size_t)len : sizeof(zero);
		int r = ibv_memcpy_to_dm(tp->dm, off, zero, n);
		if (r)
			return r;
		off += n;
		len -= n;
	}
	atomic_fetch_add_explicit(&drain, 1, memory_order_seq_cst);
	return 0;
}

void verbs_dm_create(struct loco_tp *tp)
{
	uint64_t len = verbs_round_up(tp->cfg.dm_bytes, 64);
	if (!len)
		return;
	if (len > tp->attr.max_dm_size) {
		loco_warn(VERBS_LOG, "device memory: %s offers %" PRIu64 " bytes, LOCO_VERBS_DM_BYTES "
			  "asks %" PRIu64 ": using host memory only", tp->devname,
			  (uint64_t)tp->attr.max_dm_size, len);
		return;
	}
	struct ibv_alloc_dm_attr a = { .length = len, .log_align_req = 6 };
	const char *step = "ibv_alloc_dm";
	int e = 0;
	tp->dm = ibv_alloc_dm(tp->ctx, &a);
	if (!tp->dm)
		e = errno;
	if (!e) {
		/* A probe that host writes reach it: the core zeroes each
		 * piece it hands out (dm_zero), so nothing more here. */
		step = "ibv_memcpy_to_dm";
		e = verbs_dm_fill_zero(tp, 0, 8);
	}
	if (e) {
		loco_warn(VERBS_LOG, "device memory: %s of %" PRIu64 " bytes on %s: %s; using host memory only",
			  step, len, tp->devname, strerror(e));
		verbs_dm_release(tp);
		return;
	}
	tp->dm_len = len;
	loco_info(VERBS_LOG, "device memory: %" PRIu64 " bytes on %s", len,
		  tp->devname);
}

/* ---- bounce buffer pool ------------------------------------------------- */

static int verbs_slab_add(struct loco_tp *tp)
{
	size_t bytes = (size_t)VERBS_SLAB_CHUNKS * VERBS_BOUNCE_BYTES;
	struct verbs_slab *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->mem = aligned_alloc(4096, bytes);
	if (!s->mem)
		goto free_slab;
	s->mr = ibv_reg_mr(tp->pd, s->mem, bytes, IBV_ACCESS_LOCAL_WRITE);
	if (!s->mr) {
		loco_err(VERBS_LOG, "registering bounce buffers: %s", strerror(errno));
		goto free_mem;
	}
	for (unsigned i = 0; i < VERBS_SLAB_CHUNKS; i++) {
		struct verbs_chunk *c = &s->chunk[i];
		c->buf = (uint8_t *)s->mem + (size_t)i * VERBS_BOUNCE_BYTES;
		c->lkey = s->mr->lkey;
		c->next = tp->free_chunks;
		tp->free_chunks = c;
	}
	s->next = tp->slabs;
	tp->slabs = s;
	return 0;
free_mem:
	free(s->mem);
free_slab:
	free(s);
	return -ENOMEM;
}

int verbs_pool_get(struct loco_tp *tp, struct verbs_chunk **out)
{
	int r = 0;
	pthread_mutex_lock(&tp->pool_lock);
	if (!tp->free_chunks)
		r = verbs_slab_add(tp);
	if (!r) {
		*out = tp->free_chunks;
		tp->free_chunks = (*out)->next;
	}
	pthread_mutex_unlock(&tp->pool_lock);
	return r;
}

void verbs_pool_put(struct loco_tp *tp, struct verbs_chunk *c)
{
	pthread_mutex_lock(&tp->pool_lock);
	c->next = tp->free_chunks;
	tp->free_chunks = c;
	pthread_mutex_unlock(&tp->pool_lock);
}

void verbs_pool_destroy(struct loco_tp *tp)
{
	while (tp->slabs) {
		struct verbs_slab *s = tp->slabs;
		tp->slabs = s->next;
		ibv_dereg_mr(s->mr);
		free(s->mem);
		free(s);
	}
}
