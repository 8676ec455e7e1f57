/* SPDX-License-Identifier: MIT */
/* Named regions carved from this node's registered arena (first fit over
 * an offset-sorted list), and create-or-open of regions on memory nodes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loco/internal.h"

#define ARENA_ALIGN 64
#define ARENA_FIRST 64   /* offset 0 is reserved: raddr 0 means null */

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static struct loco_alloc *alloc_find(struct loco_mgr *mgr, const char *name)
{
	for (struct loco_alloc *a = mgr->allocs; a; a = a->next)
		if (strcmp(a->name, name) == 0)
			return a;
	return NULL;
}

/* First gap of LEN bytes; *PREV is the record to link after (or NULL). */
static int alloc_gap(struct loco_mgr *mgr, uint64_t len, uint64_t *off,
		     struct loco_alloc **prev)
{
	uint64_t at = ARENA_FIRST;
	struct loco_alloc *p = NULL;
	for (struct loco_alloc *a = mgr->allocs; a; p = a, a = a->next) {
		if (a->off - at >= len)
			break;
		at = align_up(a->off + a->len, ARENA_ALIGN);
	}
	if (at > mgr->arena_len || mgr->arena_len - at < len)
		return -ENOMEM;
	*off = at;
	*prev = p;
	return 0;
}

int loco_arena_alloc(struct loco_mgr *mgr, const char *name, uint64_t len,
		     uint64_t *off)
{
	if (!len || strlen(name) >= LOCO_NAME_MAX)
		return -EINVAL;
	struct loco_alloc *rec = calloc(1, sizeof(*rec));
	if (!rec)
		return -ENOMEM;
	pthread_mutex_lock(&mgr->alloc_lock);
	struct loco_alloc *prev;
	int rc = alloc_find(mgr, name) ? -EEXIST :
		 alloc_gap(mgr, align_up(len, ARENA_ALIGN), &rec->off, &prev);
	if (rc) {
		pthread_mutex_unlock(&mgr->alloc_lock);
		free(rec);
		return rc;
	}
	strcpy(rec->name, name);
	rec->len = len;
	rec->next = prev ? prev->next : mgr->allocs;
	if (prev)
		prev->next = rec;
	else
		mgr->allocs = rec;
	memset(mgr->arena + rec->off, 0, len);
	*off = rec->off;
	pthread_mutex_unlock(&mgr->alloc_lock);
	return 0;
}

int loco_arena_lookup(struct loco_mgr *mgr, const char *name, uint64_t *off,
		      uint64_t *len)
{
	pthread_mutex_lock(&mgr->alloc_lock);
	struct loco_alloc *a = alloc_find(mgr, name);
	if (a) {
		*off = a->off;
		*len = a->len;
	}
	pthread_mutex_unlock(&mgr->alloc_lock);
	return a ? 0 : -ENOENT;
}

void loco_arena_free(struct loco_mgr *mgr, uint64_t off)
{
	pthread_mutex_lock(&mgr->alloc_lock);
	for (struct loco_alloc **pp = &mgr->allocs; *pp; pp = &(*pp)->next) {
		if ((*pp)->off == off) {
			struct loco_alloc *a = *pp;
			*pp = a->next;
			free(a);
			break;
		}
	}
	pthread_mutex_unlock(&mgr->alloc_lock);
}

/* Hosted regions of this node's own channels: create-or-open like
 * REGION_OPEN, but counted, so that the region goes with the last channel
 * of this process holding it (a later channel of that name starts from
 * zeroed memory) instead of living as long as the manager. */
int loco_arena_hold(struct loco_mgr *mgr, const char *name, uint64_t len,
		    uint64_t *off, char *msg, size_t msglen)
{
	pthread_mutex_lock(&mgr->alloc_lock);  /* recursive: lookup+alloc is one step */
	struct loco_alloc *a = alloc_find(mgr, name);
	int rc = 0;
	if (!a) {
		uint64_t at;
		rc = loco_arena_alloc(mgr, name, len, &at);
		if (!rc) {
			a = alloc_find(mgr, name);
			a->shared = true;
		} else if (msg) {
			snprintf(msg, msglen, "region '%s': %s", name,
				 loco_strerror(rc));
		}
	} else if (!a->shared) {
		rc = -EEXIST;
		if (msg)
			snprintf(msg, msglen, "region '%s' exists as a private "
				 "region", name);
	} else if (a->len != len) {
		rc = -LOCO_EMISMATCH;
		if (msg)
			snprintf(msg, msglen, "region '%s' exists with %lu bytes, "
				 "asked for %lu", name, (unsigned long)a->len,
				 (unsigned long)len);
	}
	if (!rc) {
		a->holds++;
		*off = a->off;
	}
	pthread_mutex_unlock(&mgr->alloc_lock);
	return rc;
}

void loco_arena_unhold(struct loco_mgr *mgr, uint64_t off)
{
	pthread_mutex_lock(&mgr->alloc_lock);
	for (struct loco_alloc *a = mgr->allocs; a; a = a->next) {
		if (a->off != off)
			continue;
		if (a->holds && --a->holds == 0)
			loco_arena_free(mgr, off);
		break;
	}
	pthread_mutex_unlock(&mgr->alloc_lock);
}

void loco_arena_free_all(struct loco_mgr *mgr)
{
	while (mgr->allocs) {
		struct loco_alloc *a = mgr->allocs;
		mgr->allocs = a->next;
		free(a);
	}
}

int loco_region_alloc(struct loco_mgr *mgr, const char *name, uint64_t len,
		      struct loco_region *out)
{
	uint64_t off;
	int rc = loco_arena_alloc(mgr, name, len, &off);
	if (rc)
		return rc;
	strcpy(out->name, name);
	out->base = mgr->arena + off;
	out->off = off;
	out->len = len;
	return 0;
}

void loco_region_free(struct loco_mgr *mgr, struct loco_region *reg)
{
	if (!reg->base)
		return;
	loco_arena_free(mgr, reg->off);
	reg->base = NULL;
}

void loco_region_desc(const struct loco_mgr *mgr, const struct loco_region *reg,
		      struct loco_rregion *out)
{
	out->node = mgr->id;
	out->pad = 0;
	out->off = reg->off;
	out->len = reg->len;
}

/* ---- create-or-open on a memory node ------------------------------------
 * REGION_OPEN: str name, u64 len.
 * REGION_ACK:  u32 status (negated errno), str message, u64 off, u64 len. */

static void region_ack(struct loco_wbuf *reply, int status, const char *msg,
		       uint64_t off, uint64_t len)
{
	loco_put_u32(reply, (uint32_t)-status);
	loco_put_str(reply, msg);
	loco_put_u64(reply, off);
	loco_put_u64(reply, len);
}

void loco_region_handle_open(struct loco_mgr *mgr, uint32_t from,
			     const uint8_t *req, size_t len,
			     struct loco_wbuf *reply)
{
	char name[LOCO_NAME_MAX], msg[LOCO_NAME_MAX + 96];
	struct loco_rbuf r;
	loco_rbuf_init(&r, req, len);
	loco_get_str(&r, name, sizeof(name));
	uint64_t want = loco_get_u64(&r);
	if (loco_rbuf_done(&r) || !name[0] || !want) {
		region_ack(reply, -LOCO_EPROTO, "malformed REGION_OPEN", 0, 0);
		return;
	}
	uint64_t off, have;
	pthread_mutex_lock(&mgr->alloc_lock);  /* lookup+alloc is one step */
	int rc = loco_arena_lookup(mgr, name, &off, &have);
	if (rc == -ENOENT) {
		rc = loco_arena_alloc(mgr, name, want, &off);
		have = want;
		if (!rc) {
			alloc_find(mgr, name)->shared = true;
			loco_dbg("region", "created %s (%lu bytes) for node %u",
				 name, (unsigned long)want, from);
		}
	}
	pthread_mutex_unlock(&mgr->alloc_lock);
	if (!rc && have != want) {
		snprintf(msg, sizeof(msg), "region '%s' exists with %lu bytes, "
			 "node %u asked for %lu", name, (unsigned long)have, from,
			 (unsigned long)want);
		loco_err("region", "%s", msg);
		region_ack(reply, -LOCO_EMISMATCH, msg, 0, 0);
		return;
	}
	snprintf(msg, sizeof(msg), "%s", rc ? loco_strerror(rc) : "");
	region_ack(reply, rc, msg, off, have);
}

/* Send REQ to NODE's REGION_OPEN handler (called directly for this node,
 * whose server does not call itself); *REP (malloc'd) gets the reply. */
static int open_request(struct loco_mgr *mgr, uint32_t node,
			const struct loco_wbuf *req, uint8_t **rep, size_t *rlen)
{
	if (node != mgr->id)
		return loco_ctrl_request(mgr, node, LOCO_MSG_REGION_OPEN, req->p,
					 req->len, LOCO_MSG_REGION_ACK, rep, rlen, -1);
	struct loco_wbuf reply;
	loco_wbuf_init(&reply);
	loco_region_handle_open(mgr, node, req->p, req->len, &reply);
	int rc = reply.err;
	if (rc) {
		loco_wbuf_fini(&reply);
		return rc;
	}
	*rep = reply.p;
	*rlen = reply.len;
	return 0;
}

int loco_region_open(struct loco_mgr *mgr, uint32_t node, const char *name,
		     uint64_t len, struct loco_rregion *out)
{
	if (node >= LOCO_MAX_NODES || !mgr->hosts.node[node].present ||
	    !len || strlen(name) >= LOCO_NAME_MAX)
		return -EINVAL;
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_str(&w, name);
	loco_put_u64(&w, len);
	uint8_t *rep = NULL;
	size_t rlen = 0;
	int rc = w.err ? w.err : open_request(mgr, node, &w, &rep, &rlen);
	loco_wbuf_fini(&w);
	if (rc) {
		loco_err("region", "open '%s' on node %u: %s", name, node,
			 loco_strerror(rc));
		return rc;
	}
	char msg[LOCO_NAME_MAX + 96];
	struct loco_rbuf r;
	loco_rbuf_init(&r, rep, rlen);
	int status = -(int)loco_get_u32(&r);
	loco_get_str(&r, msg, sizeof(msg));
	uint64_t off = loco_get_u64(&r), got = loco_get_u64(&r);
	rc = loco_rbuf_done(&r);
	free(rep);
	if (!rc && status) {
		loco_err("region", "open '%s' on node %u: %s", name, node,
			 msg[0] ? msg : loco_strerror(status));
		return status;
	}
	if (rc)
		return rc;
	uint64_t alen = atomic_load_explicit(&mgr->peer_arena_len[node],
					     memory_order_acquire); /* pairs with loco_peer_add */
	if (got != len || off < ARENA_FIRST || off > alen || got > alen - off)
		return -LOCO_EPROTO;
	*out = (struct loco_rregion){ .node = node, .off = off, .len = got };
	return 0;
}
