/* SPDX-License-Identifier: MIT */
#include <loco/history.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loco/internal.h"

#define CHUNK (1u << 20)
#define LINE_MAX_LEN 1024

struct loco_history {
	int fd;
	pthread_mutex_t lock;     /* file growth */
	uint64_t size;            /* bytes reserved so far */
	_Atomic uint32_t next_tid;
	char path[LOCO_PATH_MAX];
};

struct loco_hist_buf {
	char *chunk;              /* current mapping, CHUNK bytes */
	uint32_t used;
	uint32_t tid;
	uint64_t next_id;
};

static int path_expand(const struct loco_mgr *mgr, const char *path, char *out,
		       size_t len)
{
	struct stat st;
	const char *pct = strstr(path, "%n");
	int n;
	if (!stat(path, &st) && S_ISDIR(st.st_mode))
		n = snprintf(out, len, "%s/node%u.jsonl", path, mgr->id);
	else if (pct)
		n = snprintf(out, len, "%.*s%u%s", (int)(pct - path), path,
			     mgr->id, pct + 2);
	else
		n = snprintf(out, len, "%s", path);
	return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

int loco_history_open(struct loco_mgr *mgr, const char *path)
{
	if (mgr->history)
		return -EBUSY;
	struct loco_history *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	int rc = path_expand(mgr, path, h->path, sizeof(h->path));
	h->fd = rc ? -1 : open(h->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (h->fd < 0) {
		rc = rc ? rc : -errno;
		loco_err("history", "cannot create %s: %s", h->path, loco_strerror(rc));
		free(h);
		return rc;
	}
	pthread_mutex_init(&h->lock, NULL);
	mgr->history = h;
	loco_info("history", "recording to %s", h->path);
	return 0;
}

bool loco_history_enabled(const struct loco_mgr *mgr)
{
	return mgr->history != NULL;
}

void loco_history_close(struct loco_mgr *mgr)
{
	struct loco_history *h = mgr->history;
	if (!h)
		return;
	close(h->fd);
	pthread_mutex_destroy(&h->lock);
	free(h);
	mgr->history = NULL;
}

/* Map a fresh chunk at the end of the file, filled with newlines. */
static int chunk_new(struct loco_history *h, struct loco_hist_buf *b)
{
	pthread_mutex_lock(&h->lock);
	uint64_t off = h->size;
	int rc = ftruncate(h->fd, (off_t)(off + CHUNK)) ? -errno : 0;
	if (!rc)
		h->size += CHUNK;
	pthread_mutex_unlock(&h->lock);
	if (rc)
		return rc;
	void *p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_SHARED, h->fd,
		       (off_t)off);
	if (p == MAP_FAILED)
		return -errno;
	memset(p, '\n', CHUNK);
	if (b->chunk)
		munmap(b->chunk, CHUNK);
	b->chunk = p;
	b->used = 0;
	return 0;
}

static struct loco_hist_buf *buf_get(struct loco_thread *thr)
{
	struct loco_history *h = thr->mgr->history;
	if (!h)
		return NULL;
	if (!thr->hist) {
		struct loco_hist_buf *b = calloc(1, sizeof(*b));
		if (!b)
			return NULL;
		/* Relaxed: a unique number is all that is needed. */
		b->tid = atomic_fetch_add_explicit(&h->next_tid, 1,
						  memory_order_relaxed);
		thr->hist = b;
	}
	return thr->hist;
}

void loco_hist_buf_free(struct loco_thread *thr)
{
	struct loco_hist_buf *b = thr->hist;
	if (!b)
		return;
	if (b->chunk)
		munmap(b->chunk, CHUNK);
	free(b);
	thr->hist = NULL;
}

/* Append one line (without its newline: the chunk holds newlines). */
static void emit(struct loco_thread *thr, const char *line, int n)
{
	struct loco_hist_buf *b = thr->hist;
	if (n <= 0 || n >= LINE_MAX_LEN) {
		loco_warn("history", "event dropped (too long)");
		return;
	}
	if (!b->chunk || CHUNK - b->used < (uint32_t)n + 1) {
		int rc = chunk_new(thr->mgr->history, b);
		if (rc) {
			loco_err("history", "cannot grow the file: %s",
				 loco_strerror(rc));
			return;
		}
	}
	memcpy(b->chunk + b->used, line, (size_t)n);
	b->used += (uint32_t)n + 1;
}

uint64_t loco_hist_inv(struct loco_thread *thr, const char *op,
		       const char *key, const char *args)
{
	struct loco_hist_buf *b = buf_get(thr);
	if (!b)
		return 0;
	char line[LINE_MAX_LEN];
	uint64_t id = ++b->next_id;
	int n = snprintf(line, sizeof(line),
			 "{\"t\":%llu,\"ev\":\"inv\",\"pid\":%u,\"tid\":%u,"
			 "\"id\":%llu,\"op\":\"%s\",\"key\":%s,\"args\":%s}",
			 (unsigned long long)loco_now_ns(), thr->mgr->id, b->tid,
			 (unsigned long long)id, op, key ? key : "null",
			 args ? args : "[]");
	emit(thr, line, n);
	return id;
}

uint64_t loco_hist_inv_u64(struct loco_thread *thr, const char *op,
			   uint64_t key, const char *args)
{
	char k[24];
	if (!thr->mgr->history)
		return 0;
	snprintf(k, sizeof(k), "%llu", (unsigned long long)key);
	return loco_hist_inv(thr, op, k, args);
}

static void end_event(struct loco_thread *thr, uint64_t id, const char *ev,
		      const char *res)
{
	struct loco_hist_buf *b = thr->hist;
	if (!b || !id)
		return;
	char line[LINE_MAX_LEN];
	int n = snprintf(line, sizeof(line),
			 "{\"t\":%llu,\"ev\":\"%s\",\"pid\":%u,\"tid\":%u,"
			 "\"id\":%llu%s%s}", (unsigned long long)loco_now_ns(),
			 ev, thr->mgr->id, b->tid, (unsigned long long)id,
			 res ? ",\"res\":" : "", res ? res : "");
	emit(thr, line, n);
}

void loco_hist_ret(struct loco_thread *thr, uint64_t id, const char *res)
{
	end_event(thr, id, "ret", res ? res : "[]");
}

void loco_hist_info(struct loco_thread *thr, uint64_t id)
{
	end_event(thr, id, "info", NULL);
}

void loco_hist_fail(struct loco_thread *thr, uint64_t id)
{
	end_event(thr, id, "fail", NULL);
}
