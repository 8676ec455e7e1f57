/* SPDX-License-Identifier: MIT */
/* The region table of a durable node (--durable DIR): the names, offsets
 * and lengths of its create-or-open regions, in DIR/regions, so that a
 * restarted node serves the same regions at the same offsets (region
 * descriptors and remote addresses stay valid, AsymNVM's "well-known
 * location" of the metadata). Rewritten whole on every change: a new
 * file, fsync'd, renamed over the old one, the directory fsync'd; a crash
 * at any point leaves the old table or the new one.
 *
 * Format (little-endian): u64 magic "loco-reg", u32 version (2), u32
 * count, u64 identity (the durable image's, durable.h), u64 arena length;
 * count records {u64 off, u64 len, u32 remote access (LOCO_REGION_REMOTE_*),
 * u16 name length, name bytes}; u64 FNV-1a of everything before it.
 * Version 1 (no access field) is read with every access, as such regions
 * had. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loco/internal.h"
#include "loco/transport/durable.h"

#define REG_MAGIC UINT64_C(0x6765722d6f636f6c) /* "loco-reg" */
#define REG_VERSION 2
#define REG_VERSION_NOACCESS 1
#define REG_NAME "regions"
#define REG_MAX_BYTES (64u << 20)

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static void table_path(const struct loco_mgr *mgr, const char *name,
		       char *out, size_t len)
{
	snprintf(out, len, "%s/%s", mgr->opts.durable_dir, name);
}

/* ---- writing -------------------------------------------------------------- */

static int encode(struct loco_mgr *mgr, struct loco_wbuf *w)
{
	uint32_t n = 0;
	for (struct loco_alloc *a = mgr->allocs; a; a = a->next)
		n += a->durable;
	loco_put_u64(w, REG_MAGIC);
	loco_put_u32(w, REG_VERSION);
	loco_put_u32(w, n);
	loco_put_u64(w, mgr->image_id);
	loco_put_u64(w, mgr->opts.arena_bytes);
	for (struct loco_alloc *a = mgr->allocs; a; a = a->next) {
		if (!a->durable)
			continue;
		loco_put_u64(w, a->off);
		loco_put_u64(w, a->len);
		loco_put_u32(w, a->access);
		loco_put_str(w, a->name);
	}
	if (!w->err)
		loco_put_u64(w, fnv1a(w->p, w->len));
	return w->err;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) ? -errno : 0;
	close(fd);
	return rc;
}

int loco_regions_save(struct loco_mgr *mgr)
{
	char tmp[LOCO_PATH_MAX + 16], path[LOCO_PATH_MAX + 16];
	table_path(mgr, REG_NAME ".new", tmp, sizeof(tmp));
	table_path(mgr, REG_NAME, path, sizeof(path));
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	int rc = encode(mgr, &w);
	int fd = rc ? -1 : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC |
				O_NOFOLLOW, 0600);
	if (!rc && fd < 0)
		rc = -errno;
	if (!rc)
		rc = write_all(fd, w.p, w.len);
	if (!rc && fsync(fd))
		rc = -errno;
	if (fd >= 0)
		close(fd);
	if (!rc && rename(tmp, path))
		rc = -errno;
	if (!rc)
		rc = fsync_dir(mgr->opts.durable_dir);
	loco_wbuf_fini(&w);
	if (rc)
		loco_err("region", "cannot write the region table %s: %s", path,
			 loco_strerror(rc));
	return rc;
}

/* ---- reading -------------------------------------------------------------- */

static int read_file(const char *path, uint8_t **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	struct stat st;
	int rc = fstat(fd, &st) ? -errno :
		 st.st_size < 8 || st.st_size > REG_MAX_BYTES ? -LOCO_EPROTO : 0;
	uint8_t *p = rc ? NULL : malloc((size_t)st.st_size);
	if (!rc && !p)
		rc = -ENOMEM;
	for (size_t got = 0; !rc && got < (size_t)st.st_size;) {
		ssize_t k = read(fd, p + got, (size_t)st.st_size - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			rc = k < 0 ? -errno : -EIO;
		else
			got += (size_t)k;
	}
	close(fd);
	if (rc) {
		free(p);
		return rc;
	}
	*out = p;
	*len = (size_t)st.st_size;
	return 0;
}

/* A record must lie in the arena after the previous one (offset order). */
static int record_add(struct loco_mgr *mgr, struct loco_alloc ***tail,
		      uint64_t *end, uint64_t off, uint64_t len, uint32_t access,
		      const char *name)
{
	uint64_t cap = mgr->opts.arena_bytes;
	if (!name[0] || !len || off < *end || off < LOCO_ARENA_FIRST ||
	    off > cap || len > cap - off || !access ||
	    (access & ~LOCO_REGION_REMOTE_ALL))
		return -LOCO_EPROTO;
	struct loco_alloc *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	snprintf(a->name, sizeof(a->name), "%s", name);
	a->off = off;
	a->len = len;
	a->access = access;
	a->shared = a->durable = true;
	**tail = a;
	*tail = &a->next;
	*end = off + len;
	return 0;
}

static int decode(struct loco_mgr *mgr, const uint8_t *p, size_t len,
		  char *why, size_t whylen)
{
	struct loco_rbuf r;
	uint64_t sum;
	memcpy(&sum, p + len - 8, 8);
	loco_rbuf_init(&r, p, len - 8);
	uint64_t magic = loco_get_u64(&r);
	uint32_t version = loco_get_u32(&r), n = loco_get_u32(&r);
	mgr->image_id = loco_get_u64(&r);
	uint64_t alen = loco_get_u64(&r);
	if (magic != REG_MAGIC || r.err || sum != fnv1a(p, len - 8) ||
	    (version != REG_VERSION && version != REG_VERSION_NOACCESS)) {
		snprintf(why, whylen, "not a loco region table (version %u) or "
			 "damaged", REG_VERSION);
		return -LOCO_EPROTO;
	}
	if (alen != mgr->opts.arena_bytes) {
		snprintf(why, whylen, "written for an arena of %lu bytes, this "
			 "node's is %lu (--arena-mb must not change)",
			 (unsigned long)alen, (unsigned long)mgr->opts.arena_bytes);
		return -LOCO_EMISMATCH;
	}
	struct loco_alloc **tail = &mgr->allocs;
	uint64_t end = 0;
	int rc = 0;
	for (uint32_t i = 0; i < n && !rc; i++) {
		char name[LOCO_NAME_MAX];
		uint64_t off = loco_get_u64(&r), rlen = loco_get_u64(&r);
		uint32_t access = version == REG_VERSION_NOACCESS ?
				  LOCO_REGION_REMOTE_ALL : loco_get_u32(&r);
		loco_get_str(&r, name, sizeof(name));
		rc = r.err ? -LOCO_EPROTO :
		     record_add(mgr, &tail, &end, off, rlen, access, name);
		if (rc)
			snprintf(why, whylen, "record %u is malformed or overlaps "
				 "another", i + 1);
	}
	if (!rc && loco_rbuf_done(&r)) {
		snprintf(why, whylen, "trailing bytes");
		rc = -LOCO_EPROTO;
	}
	return rc;
}

/* A table names regions whose bytes are in the image beside it. */
static int image_present(struct loco_mgr *mgr)
{
	char img[LOCO_PATH_MAX + 16];
	table_path(mgr, LOCO_DIMG_NAME, img, sizeof(img));
	if (access(img, F_OK) == 0 || !mgr->allocs)
		return 0;
	loco_err("region", "%s/%s names regions but %s is missing",
		 mgr->opts.durable_dir, REG_NAME, img);
	return -ENOENT;
}

/* A first start: an empty table with a new identity, on disk before the
 * image that will carry the same identity is made. */
static int table_create(struct loco_mgr *mgr)
{
	const char *dir = mgr->opts.durable_dir;
	if (mkdir(dir, 0700) && errno != EEXIST) {
		int e = errno;
		loco_err("region", "cannot create %s: %s", dir, strerror(e));
		return -e;
	}
	if (getrandom(&mgr->image_id, sizeof(mgr->image_id), 0) !=
	    sizeof(mgr->image_id))
		return -EIO;
	mgr->image_id |= 1;
	return loco_regions_save(mgr);
}

int loco_regions_load(struct loco_mgr *mgr)
{
	char path[LOCO_PATH_MAX + 16], why[128] = "";
	uint8_t *p = NULL;
	size_t len = 0;
	table_path(mgr, REG_NAME, path, sizeof(path));
	int rc = read_file(path, &p, &len);
	if (rc == -ENOENT)
		return table_create(mgr);
	if (!rc) {
		rc = decode(mgr, p, len, why, sizeof(why));
		free(p);
	}
	if (rc) {
		loco_err("region", "region table %s: %s", path,
			 why[0] ? why : loco_strerror(rc));
		loco_arena_free_all(mgr);
		return rc;
	}
	unsigned n = 0;
	for (struct loco_alloc *a = mgr->allocs; a; a = a->next)
		n++;
	loco_info("region", "node %u serves %u region(s) of %s again", mgr->id,
		  n, path);
	return image_present(mgr);
}
