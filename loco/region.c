/* SPDX-License-Identifier: MIT */
/* Named regions carved from this node's registered arena or its device
 * memory (first fit over offset-sorted lists), each registered with the
 * transport for the remote access it declares (LOCO_REGION_REMOTE_*) and
 * recorded in this node's own region table (access.c), and create-or-open,
 * find and drop of regions on memory nodes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loco/internal.h"

#define ARENA_ALIGN 64
#define DM_ALIGN 8       /* device memory is scarce: 8-byte units (atomics need 8) */

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* The allocator of one memory space: its offset-sorted record list, its
 * size, first usable offset and unit. */
struct space_ref {
	struct loco_alloc **list;
	uint64_t cap, first, align;
};

static struct space_ref space_of(struct loco_mgr *mgr, uint32_t space)
{
	if (space == LOCO_SPACE_DM)
		return (struct space_ref){ &mgr->dm_allocs, mgr->dm_len, 0, DM_ALIGN };
	return (struct space_ref){ &mgr->allocs, mgr->arena_len, LOCO_ARENA_FIRST,
				   ARENA_ALIGN };
}

static struct loco_alloc *alloc_find(struct loco_alloc *list, const char *name)
{
	for (struct loco_alloc *a = list; a; a = a->next)
		if (strcmp(a->name, name) == 0)
			return a;
	return NULL;
}

/* Region names are unique across both spaces. */
static bool name_taken(struct loco_mgr *mgr, const char *name)
{
	return alloc_find(mgr->allocs, name) || alloc_find(mgr->dm_allocs, name);
}

/* First gap of LEN bytes; *PREV is the record to link after (or NULL). */
static int alloc_gap(const struct space_ref *sp, uint64_t len, uint64_t *off,
		     struct loco_alloc **prev)
{
	uint64_t at = sp->first;
	struct loco_alloc *p = NULL;
	for (struct loco_alloc *a = *sp->list; a; p = a, a = a->next) {
		if (a->off - at >= len)
			break;
		at = align_up(a->off + a->len, sp->align);
	}
	if (at > sp->cap || sp->cap - at < len)
		return -ENOMEM;
	*off = at;
	*prev = p;
	return 0;
}

/* Let peers reach A (in SPACE) with its access, and record it as this
 * node's (alloc_lock held). A region without access is recorded too, so
 * that a refusal names it. */
static int region_publish(struct loco_mgr *mgr, uint32_t space,
			  struct loco_alloc *a)
{
	const struct loco_transport_ops *ops = mgr->tp_ops;
	int rc = 0;
	if (a->access && ops->mem_reg)
		rc = ops->mem_reg(mgr->tp, space, a->off, a->len, a->access,
				  &a->mr, &a->key);
	struct loco_rdesc d = { .space = space, .access = a->access,
				.key = a->key, .off = a->off, .len = a->len };
	if (!rc && (rc = loco_rtab_put(mgr, mgr->id, a->name, &d)) && a->mr) {
		ops->mem_dereg(mgr->tp, a->mr);
		a->mr = NULL;
	}
	return rc;
}

/* Unlink and free the record *PP points to, of SPACE: no peer reaches it
 * any more. */
static void alloc_remove(struct loco_mgr *mgr, uint32_t space,
			 struct loco_alloc **pp)
{
	struct loco_alloc *a = *pp;
	*pp = a->next;
	loco_rtab_del(mgr, mgr->id, space, a->off);
	if (a->mr)
		mgr->tp_ops->mem_dereg(mgr->tp, a->mr);
	free(a);
}

static void alloc_unlink(struct loco_mgr *mgr, uint32_t space, uint64_t off)
{
	for (struct loco_alloc **pp = space_of(mgr, space).list; *pp;
	     pp = &(*pp)->next) {
		if ((*pp)->off == off) {
			alloc_remove(mgr, space, pp);
			return;
		}
	}
}

/* Zero a new piece: plain stores in the arena, the transport's dm_zero
 * in device memory (the CPU cannot store there). Ordering: both are done
 * before the piece's descriptor leaves this node (JOIN or REGION_ACK over
 * the control plane's TCP, and the peer's ops follow those messages). */
static int space_zero(struct loco_mgr *mgr, uint32_t space, uint64_t off,
		      uint64_t len)
{
	if (space == LOCO_SPACE_ARENA) {
		memset(mgr->arena + off, 0, len);
		return 0;
	}
	return mgr->tp_ops->dm_zero(mgr->tp, off, align_up(len, DM_ALIGN));
}

/* Reserve LEN zeroed bytes of SPACE under NAME that peers reach with
 * ACCESS (alloc_lock held by the caller); *OUT: its record, valid while
 * the lock is held. */
static int space_alloc_locked(struct loco_mgr *mgr, uint32_t space,
			      const char *name, uint64_t len, unsigned access,
			      struct loco_alloc **out)
{
	if (!len || strlen(name) >= LOCO_NAME_MAX)
		return -EINVAL;
	struct loco_alloc *rec = calloc(1, sizeof(*rec));
	if (!rec)
		return -ENOMEM;
	struct space_ref sp = space_of(mgr, space);
	struct loco_alloc *prev;
	/* A length past the space would wrap in align_up (a peer's
	 * REGION_OPEN may ask for anything). */
	int rc = name_taken(mgr, name) ? -EEXIST :
		 len > sp.cap ? -ENOMEM :
		 alloc_gap(&sp, align_up(len, sp.align), &rec->off, &prev);
	if (rc) {
		free(rec);
		return rc;
	}
	strcpy(rec->name, name);
	rec->len = len;
	rec->access = access;
	rec->next = prev ? prev->next : *sp.list;
	if (prev)
		prev->next = rec;
	else
		*sp.list = rec;
	rc = space_zero(mgr, space, rec->off, len);
	if (!rc)
		rc = region_publish(mgr, space, rec);
	if (rc)
		alloc_unlink(mgr, space, rec->off);
	else
		*out = rec;
	return rc;
}

/* Bytes of SPACE in use, in its allocation units (alloc_lock held). */
static uint64_t space_used_locked(struct loco_mgr *mgr, uint32_t space)
{
	struct space_ref sp = space_of(mgr, space);
	uint64_t n = 0;
	for (struct loco_alloc *a = *sp.list; a; a = a->next)
		n += align_up(a->len, sp.align);
	return n;
}

/* A hot region went to the arena: say so once per node, with why
 * (alloc_lock held). */
static void hot_fallback_warn(struct loco_mgr *mgr, const char *name,
			      uint64_t len, int why)
{
	/* Relaxed: a once-flag; nothing is published with it. */
	if (atomic_exchange_explicit(&mgr->hot_warned, true, memory_order_relaxed))
		return;
	if (!mgr->dm_len)
		loco_warn("region", "hot region %s (%lu bytes) is in host memory: transport "
			  "%s offers no device memory (verbs: LOCO_VERBS_DM_BYTES); later "
			  "hot regions of this node fall back silently", name,
			  (unsigned long)len, mgr->tp_ops->name);
	else
		loco_warn("region", "hot region %s (%lu bytes) is in host memory: device "
			  "memory %s (%lu of %lu bytes in use); later hot regions of this "
			  "node fall back silently", name, (unsigned long)len,
			  why == -ENOMEM ? "is full" : loco_strerror(why),
			  (unsigned long)space_used_locked(mgr, LOCO_SPACE_DM),
			  (unsigned long)mgr->dm_len);
}

/* A new region of LEN bytes under NAME (alloc_lock held): with
 * LOCO_REGION_HOT in device memory, else (no device memory, or full:
 * warned once) in the arena; without it in the arena; peers reach it as
 * FLAGS' access says. *OUT: its record, *SPACE: where it went. Errors
 * that are the caller's (-EEXIST, -EINVAL) come back as they are. */
static int region_new_locked(struct loco_mgr *mgr, const char *name,
			     uint64_t len, unsigned flags,
			     struct loco_alloc **out, uint32_t *space)
{
	unsigned access = loco_access_of(flags);
	*space = LOCO_SPACE_ARENA;
	if (!(flags & LOCO_REGION_HOT))
		return space_alloc_locked(mgr, LOCO_SPACE_ARENA, name, len,
					  access, out);
	int rc = mgr->dm_len ?
		 space_alloc_locked(mgr, LOCO_SPACE_DM, name, len, access, out) :
		 -ENODEV;
	if (!rc)
		*space = LOCO_SPACE_DM;
	if (rc == -EEXIST || rc == -EINVAL || !rc)
		return rc;
	hot_fallback_warn(mgr, name, len, rc);
	return space_alloc_locked(mgr, LOCO_SPACE_ARENA, name, len, access, out);
}

/* A new create-or-open region of a durable node: its zeros reach the
 * image (and its mirror's) before its name reaches the table, and the
 * table is on disk (and at the mirror) before anyone is told the region
 * exists (alloc_lock held). */
static int durable_record(struct loco_mgr *mgr, struct loco_alloc *a)
{
	int rc = mgr->tp_ops->persist(mgr->tp, a->off, a->len);
	a->durable = !rc;
	if (!rc && (rc = loco_regions_save(mgr)))
		a->durable = false;
	if (rc)
		alloc_unlink(mgr, LOCO_SPACE_ARENA, a->off);
	else
		loco_mirror_table_changed(mgr);
	return rc;
}

/* Create-or-open NAME (alloc_lock held by the caller, so that lookup and
 * creation are one step) in either space: an existing region is found
 * whatever FLAGS say; a new one goes where FLAGS (LOCO_REGION_HOT) put it,
 * with the access they declare, and is zeroed and marked shared; with
 * DURABLE on a durable node, a new arena region is recorded in its region
 * table (device memory does not outlive a restart). *OUT: its record,
 * also when it exists with another size or access (the caller names the
 * mismatch), *SPACE its space; -EEXIST if it exists as a private region
 * and PRIVATE_OK is false. */
static int shared_open_locked(struct loco_mgr *mgr, const char *name,
			      uint64_t len, unsigned flags, bool private_ok,
			      bool durable, struct loco_alloc **out,
			      uint32_t *space)
{
	struct loco_alloc *a = alloc_find(mgr->allocs, name);
	*space = LOCO_SPACE_ARENA;
	if (!a && (a = alloc_find(mgr->dm_allocs, name)))
		*space = LOCO_SPACE_DM;
	if (a) {
		*out = a;
		return a->shared || private_ok ? 0 : -EEXIST;
	}
	int rc = region_new_locked(mgr, name, len, flags, &a, space);
	if (rc)
		return rc;
	a->shared = true;
	if (durable && *space == LOCO_SPACE_ARENA && mgr->opts.durable_dir[0] &&
	    (rc = durable_record(mgr, a)))
		return rc;
	*out = a;
	return 0;
}

/* Why an existing create-or-open region A does not match what node FROM
 * asked for (LEN bytes, ACCESS), into MSG: -LOCO_EMISMATCH, or 0. */
static int open_mismatch(const struct loco_alloc *a, uint64_t len,
			 unsigned access, uint32_t from, char *msg,
			 size_t msglen)
{
	char have[4], want[4];
	if (a->len != len)
		snprintf(msg, msglen, "region '%s' exists with %lu bytes, node "
			 "%u asked for %lu", a->name, (unsigned long)a->len, from,
			 (unsigned long)len);
	else if (a->access != access)
		snprintf(msg, msglen, "region '%s' exists with remote access %s, "
			 "node %u asked for %s", a->name,
			 loco_access_str(a->access, have), from,
			 loco_access_str(access, want));
	else
		return 0;
	return -LOCO_EMISMATCH;
}

/* Hosted regions of this node's own channels: create-or-open like
 * REGION_OPEN, but counted, so that the region goes with the last channel
 * of this process holding it (a later channel of that name starts from
 * zeroed memory) instead of living as long as the manager. */
int loco_region_hold(struct loco_mgr *mgr, const char *name, uint64_t len,
		     unsigned flags, uint32_t *space, uint64_t *off, char *msg,
		     size_t msglen)
{
	struct loco_alloc *a = NULL;
	char why[LOCO_NAME_MAX + 96];
	pthread_mutex_lock(&mgr->alloc_lock);
	int rc = shared_open_locked(mgr, name, len, flags, false, false, &a,
				    space);
	if (!rc)
		rc = open_mismatch(a, len, loco_access_of(flags), mgr->id, why,
				   sizeof(why));
	if (!rc) {
		a->holds++;
		*off = a->off;
	} else if (msg && rc == -LOCO_EMISMATCH) {
		snprintf(msg, msglen, "%s", why);
	} else if (msg) {
		snprintf(msg, msglen, "region '%s': %s", name, rc == -EEXIST ?
			 "exists as a private region" : loco_strerror(rc));
	}
	pthread_mutex_unlock(&mgr->alloc_lock);
	return rc;
}

void loco_region_unhold(struct loco_mgr *mgr, uint32_t space, uint64_t off)
{
	pthread_mutex_lock(&mgr->alloc_lock);
	for (struct loco_alloc **pp = space_of(mgr, space).list; *pp;
	     pp = &(*pp)->next) {
		if ((*pp)->off != off)
			continue;
		/* A region of the durable table outlives its holders. */
		if ((*pp)->holds && --(*pp)->holds == 0 && !(*pp)->durable)
			alloc_remove(mgr, space, pp);
		break;
	}
	pthread_mutex_unlock(&mgr->alloc_lock);
}

int loco_region_place(struct loco_mgr *mgr, const char *name, uint64_t off,
		      uint64_t len, uint32_t access)
{
	struct loco_alloc *prev = NULL, *next = mgr->allocs;
	while (next && next->off < off) {
		prev = next;
		next = next->next;
	}
	bool fits = off >= LOCO_ARENA_FIRST && len && off <= mgr->arena_len &&
		    len <= mgr->arena_len - off &&
		    (!next || off + len <= next->off) &&
		    (!prev || prev->off + prev->len <= off);
	if (!fits || strlen(name) >= LOCO_NAME_MAX || name_taken(mgr, name) ||
	    !access || (access & ~LOCO_REGION_REMOTE_ALL))
		return -LOCO_EPROTO;
	struct loco_alloc *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	strcpy(a->name, name);
	a->off = off;
	a->len = len;
	a->access = access;
	a->shared = a->durable = true;
	a->next = next;
	if (prev)
		prev->next = a;
	else
		mgr->allocs = a;
	int rc = region_publish(mgr, LOCO_SPACE_ARENA, a);
	if (rc)
		alloc_unlink(mgr, LOCO_SPACE_ARENA, off);
	return rc;
}

int loco_regions_publish(struct loco_mgr *mgr)
{
	int rc = 0;
	pthread_mutex_lock(&mgr->alloc_lock);
	for (struct loco_alloc *a = mgr->allocs; a && !rc; a = a->next)
		rc = region_publish(mgr, LOCO_SPACE_ARENA, a);
	pthread_mutex_unlock(&mgr->alloc_lock);
	return rc;
}

void loco_arena_free_all(struct loco_mgr *mgr)
{
	struct loco_alloc **lists[] = { &mgr->allocs, &mgr->dm_allocs };
	for (unsigned i = 0; i < 2; i++)
		while (*lists[i])
			alloc_remove(mgr, i ? LOCO_SPACE_DM : LOCO_SPACE_ARENA,
				     lists[i]);
}

bool loco_region_flags_ok(unsigned flags, unsigned allowed)
{
	return !(flags & ~allowed) &&
	       !((flags & LOCO_REGION_REMOTE_NONE) &&
		 (flags & LOCO_REGION_REMOTE_ALL));
}

int loco_region_alloc_ex(struct loco_mgr *mgr, const char *name, uint64_t len,
			 unsigned flags, struct loco_region *out)
{
	if (!loco_region_flags_ok(flags, LOCO_REGION_FLAGS))
		return -EINVAL;
	uint32_t space;
	struct loco_alloc *rec;
	pthread_mutex_lock(&mgr->alloc_lock);
	int rc = region_new_locked(mgr, name, len, flags, &rec, &space);
	uint64_t off = rc ? 0 : rec->off;
	pthread_mutex_unlock(&mgr->alloc_lock);
	if (rc)
		return rc;
	snprintf(out->name, sizeof(out->name), "%s", name);
	out->base = space == LOCO_SPACE_ARENA ? mgr->arena + off : NULL;
	out->off = off;
	out->len = len;
	out->space = space;
	out->access = loco_access_of(flags);
	return 0;
}

int loco_region_alloc(struct loco_mgr *mgr, const char *name, uint64_t len,
		      struct loco_region *out)
{
	return loco_region_alloc_ex(mgr, name, len, 0, out);
}

void loco_region_free(struct loco_mgr *mgr, struct loco_region *reg)
{
	if (!reg->len)
		return;
	pthread_mutex_lock(&mgr->alloc_lock);
	alloc_unlink(mgr, reg->space, reg->off);
	pthread_mutex_unlock(&mgr->alloc_lock);
	reg->base = NULL;
	reg->len = 0;
}

void loco_mgr_dm_usage(struct loco_mgr *mgr, uint64_t *total, uint64_t *used)
{
	pthread_mutex_lock(&mgr->alloc_lock);
	uint64_t n = space_used_locked(mgr, LOCO_SPACE_DM);
	pthread_mutex_unlock(&mgr->alloc_lock);
	*total = mgr->dm_len;
	*used = n;
}

void loco_region_desc(const struct loco_mgr *mgr, const struct loco_region *reg,
		      struct loco_rregion *out)
{
	*out = (struct loco_rregion){ .node = mgr->id, .space = reg->space,
				      .off = reg->off, .len = reg->len,
				      .access = reg->access };
}

/* ---- create-or-open on a memory node ------------------------------------
 * REGION_OPEN: str name, u64 len, u32 flags (LOCO_REGION_HOT and the
 *              LOCO_REGION_REMOTE_* access).
 * REGION_ACK:  u32 status (negated errno), str message, u64 off, u64 len,
 *              u64 space, u64 access, u64 key (the region's transport key).
 * REGION_FIND: u32 space, u64 off, u64 len: which create-or-open region
 *              holds that range?
 * REGION_FIND_ACK: as REGION_ACK, the message being the region's name;
 *              status ENOENT if none does. */

/* A reply of REGION_OPEN, REGION_FIND or REGION_DROP: status, message, N
 * values (what region_call reads). */
static void region_reply(struct loco_wbuf *reply, int status, const char *msg,
			 const uint64_t *vals, unsigned n)
{
	loco_put_u32(reply, (uint32_t)-status);
	loco_put_str(reply, msg);
	for (unsigned i = 0; i < n; i++)
		loco_put_u64(reply, vals[i]);
}

#define REGION_ACK_VALS 5   /* off, len, space, access, key */

static void region_ack(struct loco_wbuf *reply, int status, const char *msg,
		       const struct loco_rdesc *d)
{
	region_reply(reply, status, msg, (const uint64_t[]){ d->off, d->len,
		     d->space, d->access, d->key }, REGION_ACK_VALS);
}

/* The descriptor of A, a region of this node's SPACE. */
static struct loco_rdesc alloc_desc(const struct loco_alloc *a, uint32_t space)
{
	return (struct loco_rdesc){ .space = space, .access = a->access,
				    .key = a->key, .off = a->off, .len = a->len };
}

/* Flags a create-or-open may carry: a region for peers has some access. */
#define OPEN_FLAGS (LOCO_REGION_HOT | LOCO_REGION_REMOTE_ALL)

/* Why a REGION_OPEN of WANT bytes found no room: the arena's size and
 * use, and the option that sets its size. */
static void arena_full_msg(struct loco_mgr *mgr, uint64_t want, char *msg,
			   size_t msglen)
{
	pthread_mutex_lock(&mgr->alloc_lock);
	uint64_t used = space_used_locked(mgr, LOCO_SPACE_ARENA);
	pthread_mutex_unlock(&mgr->alloc_lock);
	snprintf(msg, msglen, "arena full: %lu MiB asked, %lu of %lu MiB in "
		 "use (--arena-mb / LOCO_ARENA_MB)", (unsigned long)(want >> 20),
		 (unsigned long)(used >> 20), (unsigned long)(mgr->arena_len >> 20));
}

void loco_region_handle_open(struct loco_mgr *mgr, uint32_t from,
			     const uint8_t *req, size_t len,
			     struct loco_wbuf *reply)
{
	char name[LOCO_NAME_MAX], msg[LOCO_NAME_MAX + 96] = "";
	struct loco_rdesc d = { 0 };
	struct loco_rbuf r;
	loco_rbuf_init(&r, req, len);
	loco_get_str(&r, name, sizeof(name));
	uint64_t want = loco_get_u64(&r);
	uint32_t flags = loco_get_u32(&r);
	if (loco_rbuf_done(&r) || !name[0] || !want ||
	    !loco_region_flags_ok(flags, OPEN_FLAGS)) {
		region_ack(reply, -LOCO_EPROTO, "malformed REGION_OPEN", &d);
		return;
	}
	if (!loco_mirror_serves(mgr, msg, sizeof(msg))) {
		region_ack(reply, -EPERM, msg, &d);
		return;
	}
	uint32_t space = LOCO_SPACE_ARENA;
	struct loco_alloc *a;
	pthread_mutex_lock(&mgr->alloc_lock);
	int rc = shared_open_locked(mgr, name, want, flags, true, true, &a,
				    &space);
	if (!rc)
		rc = open_mismatch(a, want, loco_access_of(flags), from, msg,
				   sizeof(msg));
	if (!rc)
		d = alloc_desc(a, space);
	pthread_mutex_unlock(&mgr->alloc_lock);
	if (rc == -LOCO_EMISMATCH)
		loco_err("region", "%s", msg);
	else if (rc == -ENOMEM)
		arena_full_msg(mgr, want, msg, sizeof(msg));
	else if (rc)
		snprintf(msg, sizeof(msg), "%s", loco_strerror(rc));
	region_ack(reply, rc, msg, &d);
}

/* The create-or-open region of SPACE holding [OFF, OFF+LEN) (alloc_lock
 * held), or NULL: a member may learn it by an address as by its name. */
static const struct loco_alloc *shared_holding(struct loco_mgr *mgr,
					       uint32_t space, uint64_t off,
					       uint64_t len)
{
	for (const struct loco_alloc *a = *space_of(mgr, space).list; a;
	     a = a->next)
		if (a->shared && off >= a->off && off - a->off <= a->len &&
		    len <= a->len - (off - a->off))
			return a;
	return NULL;
}

void loco_region_handle_find(struct loco_mgr *mgr, uint32_t from,
			     const uint8_t *req, size_t len,
			     struct loco_wbuf *reply)
{
	struct loco_rdesc d = { 0 };
	char name[LOCO_NAME_MAX] = "";
	struct loco_rbuf r;
	loco_rbuf_init(&r, req, len);
	uint32_t space = loco_get_u32(&r);
	uint64_t off = loco_get_u64(&r), n = loco_get_u64(&r);
	(void)from;
	if (loco_rbuf_done(&r) || space > LOCO_SPACE_DM) {
		region_ack(reply, -LOCO_EPROTO, "malformed REGION_FIND", &d);
		return;
	}
	pthread_mutex_lock(&mgr->alloc_lock);
	const struct loco_alloc *a = shared_holding(mgr, space, off, n);
	if (a) {
		d = alloc_desc(a, space);
		snprintf(name, sizeof(name), "%s", a->name);
	}
	pthread_mutex_unlock(&mgr->alloc_lock);
	region_ack(reply, a ? 0 : -ENOENT, name, &d);
}

typedef void region_handler(struct loco_mgr *mgr, uint32_t from,
			    const uint8_t *req, size_t len,
			    struct loco_wbuf *reply);

/* Send REQ (of TYPE, answered by ACK) to NODE, served by HANDLER (called
 * directly for this node, whose server does not call itself); *REP
 * (malloc'd) gets the reply. */
static int region_request(struct loco_mgr *mgr, uint32_t node, uint16_t type,
			  uint16_t ack, region_handler *handler,
			  const struct loco_wbuf *req, uint8_t **rep,
			  size_t *rlen)
{
	if (node != mgr->id)
		return loco_ctrl_request(mgr, node, type, req->p, req->len, ack,
					 rep, rlen, -1);
	struct loco_wbuf reply;
	loco_wbuf_init(&reply);
	handler(mgr, node, req->p, req->len, &reply);
	int rc = reply.err;
	if (rc) {
		loco_wbuf_fini(&reply);
		return rc;
	}
	*rep = reply.p;
	*rlen = reply.len;
	return 0;
}

/* NODE is in the hosts file and NAME fits a region name. */
static bool region_target_ok(const struct loco_mgr *mgr, uint32_t node,
			     const char *name)
{
	return node < LOCO_MAX_NODES && mgr->hosts.node[node].present &&
	       strlen(name) < LOCO_NAME_MAX;
}

/* Send W (a request of TYPE about NAME, answered by ACK) to NODE and read
 * the reply: u32 status (negated errno), str message (into MSGOUT, MSGLEN
 * bytes, if not NULL), then NVALS u64s into VALS. Returns 0, the status or
 * the transport's error; an error is logged with WHAT ("open", "drop")
 * and the node's message, but for a status of QUIET. Finishes W. */
static int region_call_ex(struct loco_mgr *mgr, uint32_t node,
			  const char *what, const char *name, uint16_t type,
			  uint16_t ack, region_handler *handler,
			  struct loco_wbuf *w, uint64_t *vals, unsigned nvals,
			  char *msgout, size_t msglen, int quiet)
{
	uint8_t *rep = NULL;
	size_t rlen = 0;
	int rc = w->err ? w->err :
		 region_request(mgr, node, type, ack, handler, w, &rep, &rlen);
	loco_wbuf_fini(w);
	if (rc) {
		loco_err("region", "%s '%s' on node %u: %s", what, name, node,
			 loco_strerror(rc));
		return rc;
	}
	char msg[LOCO_NAME_MAX + 96];
	struct loco_rbuf r;
	loco_rbuf_init(&r, rep, rlen);
	int status = -(int)loco_get_u32(&r);
	loco_get_str(&r, msg, sizeof(msg));
	for (unsigned i = 0; i < nvals; i++)
		vals[i] = loco_get_u64(&r);
	rc = loco_rbuf_done(&r);
	free(rep);
	if (!rc && status && status != quiet)
		loco_err("region", "%s '%s' on node %u: %s", what, name, node,
			 msg[0] ? msg : loco_strerror(status));
	if (!rc && msgout)
		snprintf(msgout, msglen, "%s", msg);
	return rc ? rc : status;
}

static int region_call(struct loco_mgr *mgr, uint32_t node, const char *what,
		       const char *name, uint16_t type, uint16_t ack,
		       region_handler *handler, struct loco_wbuf *w,
		       uint64_t *vals, unsigned nvals)
{
	return region_call_ex(mgr, node, what, name, type, ack, handler, w,
			      vals, nvals, NULL, 0, 0);
}

/* The descriptor of region ACK values V (off, len, space, access, key):
 * 0, or -LOCO_EPROTO for a space or access that cannot be. */
static int ack_desc(const uint64_t v[REGION_ACK_VALS], struct loco_rdesc *d)
{
	*d = (struct loco_rdesc){ .off = v[0], .len = v[1],
				  .space = (uint32_t)v[2],
				  .access = (uint32_t)v[3],
				  .key = (uint32_t)v[4] };
	return v[2] > LOCO_SPACE_DM || (v[3] & ~(uint64_t)LOCO_REGION_REMOTE_ALL) ||
	       v[4] > UINT32_MAX ? -LOCO_EPROTO : 0;
}

/* A node that is down is not asked: the caller learns at once, the
 * keeper reconnects (peers.c). One that came back without its memory is:
 * opening a region there starts afresh (loco_peer_fresh). */
static int region_node_gone(struct loco_mgr *mgr, uint32_t node)
{
	/* Relaxed: a state word (the keeper's); nothing else is read. */
	int st = atomic_load_explicit(&mgr->peer_state[node], memory_order_relaxed);
	return st == LOCO_PEER_DOWN ? -LOCO_EDOWN : 0;
}

/* REGION_OPEN NAME (LEN bytes, FLAGS) on NODE: *D gets its descriptor,
 * which a peer's region table records (this node's own has it already). */
static int region_open_call(struct loco_mgr *mgr, uint32_t node,
			    const char *name, uint64_t len, unsigned flags,
			    struct loco_rdesc *d)
{
	uint64_t v[REGION_ACK_VALS] = { 0 };
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_str(&w, name);
	loco_put_u64(&w, len);
	loco_put_u32(&w, flags);
	int rc = region_call(mgr, node, "open", name, LOCO_MSG_REGION_OPEN,
			     LOCO_MSG_REGION_ACK, loco_region_handle_open, &w,
			     v, REGION_ACK_VALS);
	if (!rc)
		rc = ack_desc(v, d);
	if (!rc && (d->len != len || d->access != loco_access_of(flags)))
		rc = -LOCO_EPROTO;
	if (!rc && node != mgr->id)
		rc = loco_rtab_put(mgr, node, name, d);
	return rc;
}

int loco_region_reopen(struct loco_mgr *mgr, uint32_t node, const char *name,
		       uint64_t len, unsigned flags, uint64_t *off)
{
	struct loco_rdesc d;
	int rc = region_open_call(mgr, node, name, len, flags, &d);
	if (!rc)
		*off = d.off;
	return rc;
}

int loco_region_open_ex(struct loco_mgr *mgr, uint32_t node, const char *name,
			uint64_t len, unsigned flags, struct loco_rregion *out)
{
	if (!region_target_ok(mgr, node, name) || !len ||
	    !loco_region_flags_ok(flags, OPEN_FLAGS))
		return -EINVAL;
	int rc = region_node_gone(mgr, node);
	struct loco_rdesc d;
	if (!rc)
		rc = region_open_call(mgr, node, name, len, flags, &d);
	if (rc)
		return rc;
	loco_peer_fresh(mgr, node);
	/* The node may have gone down since it answered: -LOCO_EDOWN (or
	 * -LOCO_ELOST) then, as for an open that found it down. */
	rc = loco_peer_span(mgr, node, d.space, d.off, d.len);
	if (rc)
		return rc == -EINVAL ? -LOCO_EPROTO : rc;
	/* Reopened after the node's restart: arena regions only (device
	 * memory does not outlive it). */
	if (node != mgr->id && d.space == LOCO_SPACE_ARENA)
		loco_ropen_add(mgr, node, name, d.off, d.len,
			       flags & LOCO_REGION_REMOTE_MASK);
	*out = (struct loco_rregion){ .node = node, .space = d.space,
				      .off = d.off, .len = d.len,
				      .access = d.access };
	return 0;
}

int loco_region_open(struct loco_mgr *mgr, uint32_t node, const char *name,
		     uint64_t len, struct loco_rregion *out)
{
	return loco_region_open_ex(mgr, node, name, len, 0, out);
}

int loco_region_find(struct loco_mgr *mgr, uint32_t node, uint32_t space,
		     uint64_t off, uint64_t len)
{
	char name[LOCO_NAME_MAX];
	uint64_t v[REGION_ACK_VALS] = { 0 };
	struct loco_rdesc d;
	int rc = region_node_gone(mgr, node);
	if (rc)
		return rc;
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_u32(&w, space);
	loco_put_u64(&w, off);
	loco_put_u64(&w, len);
	rc = region_call_ex(mgr, node, "find", "(by address)",
			    LOCO_MSG_REGION_FIND, LOCO_MSG_REGION_FIND_ACK,
			    loco_region_handle_find, &w, v, REGION_ACK_VALS,
			    name, sizeof(name), -ENOENT);
	if (!rc)
		rc = ack_desc(v, &d);
	/* The answer must hold what was asked, where the node has memory
	 * (unless the node went down since it answered). */
	if (!rc && (!name[0] || d.space != space || off < d.off ||
		    off - d.off > d.len || len > d.len - (off - d.off)))
		rc = -LOCO_EPROTO;
	if (!rc)
		rc = loco_peer_span(mgr, node, d.space, d.off, d.len);
	if (rc == -EINVAL)
		rc = -LOCO_EPROTO;
	return rc ? rc : loco_rtab_put(mgr, node, name, &d);
}

/* ---- drop on a memory node ----------------------------------------------
 * REGION_DROP:     str name, u32 flags.
 * REGION_DROP_ACK: u32 status (negated errno), str message, u64 count. */

static bool drop_matches(const char *rname, const char *name, unsigned flags)
{
	size_t n = strlen(name);
	if (!strcmp(rname, name))
		return true;
	return (flags & LOCO_DROP_TREE) && !strncmp(rname, name, n) &&
	       (rname[n] == '.' || rname[n] == '/');
}

/* Regions NAME matches, in both spaces (alloc_lock held): *FREE of them
 * may go, *BUSY are held by this process's channels or private to one. */
static void drop_count(struct loco_mgr *mgr, const char *name, unsigned flags,
		       unsigned *free_n, unsigned *busy)
{
	*free_n = *busy = 0;
	struct loco_alloc *lists[] = { mgr->allocs, mgr->dm_allocs };
	for (unsigned i = 0; i < 2; i++)
		for (struct loco_alloc *a = lists[i]; a; a = a->next)
			if (drop_matches(a->name, name, flags)) {
				if (a->shared && !a->holds)
					(*free_n)++;
				else
					(*busy)++;
			}
}

/* Free what NAME matches; a durable node's table forgets them (a crash
 * before it is rewritten keeps them, which only delays the drop). */
static int drop_free(struct loco_mgr *mgr, const char *name, unsigned flags)
{
	bool durable = false;
	struct loco_alloc **lists[] = { &mgr->allocs, &mgr->dm_allocs };
	for (unsigned i = 0; i < 2; i++)
		for (struct loco_alloc **pp = lists[i]; *pp;) {
			struct loco_alloc *a = *pp;
			if (drop_matches(a->name, name, flags)) {
				durable |= a->durable;
				alloc_remove(mgr, i ? LOCO_SPACE_DM :
					     LOCO_SPACE_ARENA, pp);
			} else {
				pp = &a->next;
			}
		}
	int rc = durable ? loco_regions_save(mgr) : 0;
	if (durable && !rc)
		loco_mirror_table_changed(mgr);
	return rc;
}

static void drop_ack(struct loco_wbuf *reply, int status, const char *msg,
		     uint64_t count)
{
	region_reply(reply, status, msg, &count, 1);
}

void loco_region_handle_drop(struct loco_mgr *mgr, uint32_t from,
			     const uint8_t *req, size_t len,
			     struct loco_wbuf *reply)
{
	char name[LOCO_NAME_MAX], msg[LOCO_NAME_MAX + 96] = "";
	struct loco_rbuf r;
	loco_rbuf_init(&r, req, len);
	loco_get_str(&r, name, sizeof(name));
	uint32_t flags = loco_get_u32(&r);
	if (loco_rbuf_done(&r) || !name[0] || (flags & ~LOCO_DROP_TREE)) {
		drop_ack(reply, -LOCO_EPROTO, "malformed REGION_DROP", 0);
		return;
	}
	if (!loco_mirror_serves(mgr, msg, sizeof(msg))) {
		drop_ack(reply, -EPERM, msg, 0);
		return;
	}
	unsigned n, busy;
	int rc = 0;
	pthread_mutex_lock(&mgr->alloc_lock);
	drop_count(mgr, name, flags, &n, &busy);
	if (!busy && n)
		rc = drop_free(mgr, name, flags);
	pthread_mutex_unlock(&mgr->alloc_lock);
	if (!rc)
		rc = busy ? -EBUSY : n ? 0 : -ENOENT;
	if (busy)
		snprintf(msg, sizeof(msg), "%u region(s) of '%s' belong to "
			 "channels of node %u", busy, name, mgr->id);
	else if (!n)
		snprintf(msg, sizeof(msg), "no region '%s'%s", name,
			 flags & LOCO_DROP_TREE ? " (tree)" : "");
	else
		loco_info("region", "node %u dropped %u region(s) of '%s'",
			  from, n, name);
	drop_ack(reply, rc, msg, rc ? 0 : n);
}

int loco_region_drop(struct loco_mgr *mgr, uint32_t node, const char *name,
		     unsigned flags, unsigned *count)
{
	if (!region_target_ok(mgr, node, name) || !name[0] ||
	    (flags & ~LOCO_DROP_TREE))
		return -EINVAL;
	int rc = region_node_gone(mgr, node);
	if (rc)
		return rc;
	struct loco_wbuf w;
	loco_wbuf_init(&w);
	loco_put_str(&w, name);
	loco_put_u32(&w, flags);
	uint64_t n = 0;
	rc = region_call(mgr, node, "drop", name, LOCO_MSG_REGION_DROP,
			 LOCO_MSG_REGION_DROP_ACK, loco_region_handle_drop,
			 &w, &n, 1);
	if (!rc && node != mgr->id)
		loco_ropen_drop(mgr, node, name, flags);
	if (!rc && count)
		*count = (unsigned)n;
	return rc;
}
