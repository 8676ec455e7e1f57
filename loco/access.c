/* SPDX-License-Identifier: MIT */
/* Remote access of regions (docs/security.md, "What a member can do").
 *
 * Every region declares what peers may do to it (LOCO_REGION_REMOTE_*:
 * READ, WRITE, ATOMIC, or nothing). A node keeps, for each node it talks
 * to and for itself, a table of the regions it knows there: space, bounds,
 * access and the transport's key (verbs: the rkey of the region's own
 * memory registration). The control plane fills it: JOIN and JOIN_ACK (a
 * channel's regions), REGION_ACK (create-or-open), REGION_FIND_ACK (the
 * create-or-open region holding an address read from remote memory); the
 * allocator fills this node's own.
 *
 * Every out-of-line operation is checked here: it must lie inside one
 * region that allows it, else -EACCES (logged once per region and kind of
 * op), and then carries that region's key. An address in no known region
 * of a peer is asked for once (REGION_FIND) before it is refused. The
 * inline path (loco.h) checks the access a descriptor carries, which the
 * core set from the same declaration. Each thread keeps copies of the last
 * few regions it used at each node, valid while the table's generation
 * stays: an op on one of them takes no lock. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loco/internal.h"

static const char *const op_names[] = { "READ", "WRITE", "CAS", "FAA" };

const char *loco_access_str(unsigned access, char buf[4])
{
	buf[0] = access & LOCO_REGION_REMOTE_READ ? 'r' : '-';
	buf[1] = access & LOCO_REGION_REMOTE_WRITE ? 'w' : '-';
	buf[2] = access & LOCO_REGION_REMOTE_ATOMIC ? 'a' : '-';
	buf[3] = 0;
	return buf;
}

/* ---- wire ------------------------------------------------------------------ */

void loco_put_rdesc(struct loco_wbuf *w, const struct loco_rdesc *d)
{
	loco_put_u32(w, d->space);
	loco_put_u32(w, d->access);
	loco_put_u32(w, d->key);
	loco_put_u64(w, d->off);
	loco_put_u64(w, d->len);
}

void loco_get_rdesc(struct loco_rbuf *r, struct loco_rdesc *d)
{
	d->space = loco_get_u32(r);
	d->access = loco_get_u32(r);
	d->key = loco_get_u32(r);
	d->off = loco_get_u64(r);
	d->len = loco_get_u64(r);
	if (d->space > LOCO_SPACE_DM || (d->access & ~LOCO_REGION_REMOTE_ALL))
		r->err = -LOCO_EPROTO;
}

/* ---- tables ------------------------------------------------------------------ */

void loco_rtab_init(struct loco_mgr *mgr)
{
	for (unsigned i = 0; i < LOCO_MAX_NODES; i++) {
		struct loco_rtab *t = &mgr->rtab[i];
		pthread_rwlock_init(&t->lock, NULL);
		/* Relaxed: before any other thread exists. */
		atomic_init(&t->gen, 1);
		atomic_init(&t->outside_logged, false);
	}
}

void loco_rtab_fini(struct loco_mgr *mgr)
{
	for (unsigned i = 0; i < LOCO_MAX_NODES; i++) {
		free(mgr->rtab[i].ent);
		pthread_rwlock_destroy(&mgr->rtab[i].lock);
	}
}

/* (SPACE, OFF) before E's start. */
static bool before(uint32_t space, uint64_t off, const struct loco_rent *e)
{
	return space < e->space || (space == e->space && off < e->off);
}

/* Index of the first entry not before (SPACE, OFF) (lock held). */
static unsigned lower(const struct loco_rtab *t, uint32_t space, uint64_t off)
{
	unsigned lo = 0, hi = t->n;
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		if (before(space, off, &t->ent[mid]) ||
		    (space == t->ent[mid].space && off == t->ent[mid].off))
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* The entry holding [AT, AT+LEN) of SPACE, or NULL (lock held). */
static const struct loco_rent *find(const struct loco_rtab *t, uint32_t space,
				    uint64_t at, uint64_t len)
{
	unsigned i = lower(t, space, at);
	if (i < t->n && t->ent[i].space == space && t->ent[i].off == at)
		return len <= t->ent[i].len ? &t->ent[i] : NULL;
	if (i == 0)
		return NULL;
	const struct loco_rent *e = &t->ent[i - 1];
	return e->space == space && at - e->off <= e->len &&
	       len <= e->len - (at - e->off) ? e : NULL;
}

static bool overlaps(const struct loco_rent *e, uint32_t space, uint64_t off,
		     uint64_t len)
{
	return e->space == space && off < e->off + e->len && e->off < off + len;
}

/* Entries are moved with memmove: their atomic is a plain word. */
static void ent_remove(struct loco_rtab *t, unsigned i, unsigned k)
{
	memmove(&t->ent[i], &t->ent[i + k], (t->n - i - k) * sizeof(*t->ent));
	t->n -= k;
	/* Release: pairs with the acquire in cache_hit; copies made before
	 * no longer match. Under the write lock. */
	atomic_fetch_add_explicit(&t->gen, 1, memory_order_release);
}

int loco_rtab_put(struct loco_mgr *mgr, uint32_t node, const char *name,
		  const struct loco_rdesc *d)
{
	struct loco_rtab *t = &mgr->rtab[node];
	int rc = 0;
	pthread_rwlock_wrlock(&t->lock);
	unsigned i = lower(t, d->space, d->off);
	if (i > 0 && overlaps(&t->ent[i - 1], d->space, d->off, d->len))
		i--;
	unsigned k = 0;
	while (i + k < t->n && overlaps(&t->ent[i + k], d->space, d->off, d->len))
		k++;
	if (k)
		ent_remove(t, i, k);
	if (t->n == t->cap) {
		unsigned cap = t->cap ? 2 * t->cap : 16;
		struct loco_rent *p = realloc(t->ent, cap * sizeof(*p));
		if (p) {
			t->ent = p;
			t->cap = cap;
		} else {
			rc = -ENOMEM;
		}
	}
	if (!rc) {
		memmove(&t->ent[i + 1], &t->ent[i], (t->n - i) * sizeof(*t->ent));
		struct loco_rent *e = &t->ent[i];
		e->off = d->off;
		e->len = d->len;
		e->space = d->space;
		e->access = d->access;
		e->key = d->key;
		/* Relaxed: under the write lock. */
		atomic_store_explicit(&e->logged, 0, memory_order_relaxed);
		snprintf(e->name, sizeof(e->name), "%s", name);
		t->n++;
	}
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

void loco_rtab_del(struct loco_mgr *mgr, uint32_t node, uint32_t space,
		   uint64_t off)
{
	struct loco_rtab *t = &mgr->rtab[node];
	pthread_rwlock_wrlock(&t->lock);
	unsigned i = lower(t, space, off);
	if (i < t->n && t->ent[i].space == space && t->ent[i].off == off)
		ent_remove(t, i, 1);
	pthread_rwlock_unlock(&t->lock);
}

void loco_rtab_clear(struct loco_mgr *mgr, uint32_t node)
{
	struct loco_rtab *t = &mgr->rtab[node];
	pthread_rwlock_wrlock(&t->lock);
	if (t->n)
		ent_remove(t, 0, t->n);
	pthread_rwlock_unlock(&t->lock);
}

uint32_t loco_region_key(struct loco_mgr *mgr, const struct loco_region *reg)
{
	struct loco_rtab *t = &mgr->rtab[mgr->id];
	pthread_rwlock_rdlock(&t->lock);
	const struct loco_rent *e = find(t, reg->space, reg->off, reg->len);
	uint32_t key = e && e->off == reg->off ? e->key : 0;
	pthread_rwlock_unlock(&t->lock);
	return key;
}

/* ---- the check ------------------------------------------------------------------ */

static bool cache_holds(const struct loco_rcache *c, uint64_t gen,
			uint32_t space, uint64_t at, uint64_t len)
{
	return c->gen == gen && c->space == space && at - c->off <= c->len &&
	       len <= c->len - (at - c->off);
}

/* The entry of THR's cache for NODE that holds [AT, AT+LEN) of SPACE,
 * swapped to the front, or NULL. */
static const struct loco_rcache *cache_hit(struct loco_thread *thr,
					   uint32_t node, uint32_t space,
					   uint64_t at, uint64_t len)
{
	struct loco_rcache *c = thr->rcache[node];
	/* Acquire: pairs with the release in ent_remove: an unchanged
	 * generation means the copied entries are still in the table. */
	uint64_t gen = atomic_load_explicit(&thr->mgr->rtab[node].gen,
					    memory_order_acquire);
	if (cache_holds(&c[0], gen, space, at, len))
		return &c[0];
	for (unsigned i = 1; i < LOCO_RCACHE_WAYS; i++) {
		if (!cache_holds(&c[i], gen, space, at, len))
			continue;
		struct loco_rcache hit = c[i];
		c[i] = c[0];
		c[0] = hit;
		return &c[0];
	}
	return NULL;
}

/* Put a copy of E (table generation GEN) first in THR's cache for NODE. */
static const struct loco_rcache *cache_fill(struct loco_thread *thr,
					    uint32_t node,
					    const struct loco_rent *e,
					    uint64_t gen)
{
	struct loco_rcache *c = thr->rcache[node];
	memmove(&c[1], &c[0], (LOCO_RCACHE_WAYS - 1) * sizeof(*c));
	c[0] = (struct loco_rcache){ .gen = gen, .off = e->off, .len = e->len,
				     .space = e->space, .access = e->access,
				     .key = e->key };
	return &c[0];
}

/* Log a refused OPCODE on E at NODE once per kind of op (read lock held). */
static void refuse_log(uint32_t node, struct loco_rent *e, unsigned opcode,
		       uint64_t at, uint64_t len)
{
	/* Relaxed: a once-flag; nothing is published with it. */
	if (atomic_fetch_or_explicit(&e->logged, 1u << opcode,
				     memory_order_relaxed) & (1u << opcode))
		return;
	char a[4];
	loco_err("access", "%s of %lu bytes at offset %lu of region '%s' on "
		 "node %u refused: the region allows remote %s (%s); later "
		 "refusals of %s there are not logged", op_names[opcode],
		 (unsigned long)len, (unsigned long)(at - e->off), e->name, node,
		 e->access ? "access" : "access to nobody",
		 loco_access_str(e->access, a), op_names[opcode]);
}

static void outside_log(struct loco_mgr *mgr, uint32_t node, uint32_t space,
			unsigned opcode, uint64_t at, uint64_t len)
{
	/* Relaxed: a once-flag. */
	if (atomic_exchange_explicit(&mgr->rtab[node].outside_logged, true,
				     memory_order_relaxed))
		return;
	loco_err("access", "%s of %lu bytes at %s offset %lu of node %u "
		 "refused: no region this node knows there holds it (later "
		 "such refusals at node %u are not logged)", op_names[opcode],
		 (unsigned long)len, space == LOCO_SPACE_DM ? "device-memory" :
		 "arena", (unsigned long)at, node, node);
}

/* Look [AT, AT+LEN) of SPACE at NODE up for OPCODE (OPCODE > FAA: only
 * find the region): 0 and *OUT the copy put first in THR's cache, -EACCES
 * if the region does not allow it (LOG: say so once), -ENOENT if no known
 * region holds it. */
static int lookup(struct loco_thread *thr, uint32_t node, uint32_t space,
		  uint64_t at, uint64_t len, unsigned opcode, bool log,
		  const struct loco_rcache **out)
{
	struct loco_rtab *t = &thr->mgr->rtab[node];
	int rc = -ENOENT;
	pthread_rwlock_rdlock(&t->lock);
	const struct loco_rent *e = find(t, space, at, len);
	if (e && opcode <= LOCO_OP_FAA && !(e->access & loco_op_access(opcode))) {
		if (log)
			refuse_log(node, (struct loco_rent *)e, opcode, at, len);
		rc = -EACCES;
	} else if (e) {
		/* Relaxed: read under the lock that orders it. */
		*out = cache_fill(thr, node, e, atomic_load_explicit(
			&t->gen, memory_order_relaxed));
		rc = 0;
	}
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

/* The region holding [AT, AT+LEN) of NODE's SPACE, from THR's cache or the
 * table (asking NODE for it if this node knows none there) into *OUT; LOG:
 * refusals are logged. 0 or -EACCES. */
static int resolve(struct loco_thread *thr, uint32_t node, uint32_t space,
		   uint64_t at, uint64_t len, unsigned opcode, bool log,
		   const struct loco_rcache **out)
{
	if ((*out = cache_hit(thr, node, space, at, len)))
		return 0;
	int rc = lookup(thr, node, space, at, len, opcode, log, out);
	if (rc == -ENOENT && node != thr->mgr->id &&
	    !loco_region_find(thr->mgr, node, space, at, len))
		rc = lookup(thr, node, space, at, len, opcode, log, out);
	if (rc == -ENOENT && log)
		outside_log(thr->mgr, node, space, opcode, at, len);
	return rc ? -EACCES : 0;
}

int loco_access_check(struct loco_thread *thr, uint32_t node, uint32_t space,
		      uint64_t at, uint64_t len, unsigned opcode,
		      uint32_t *key, uint64_t *key_off)
{
	const struct loco_rcache *c;
	int rc = resolve(thr, node, space, at, len, opcode, true, &c);
	if (rc)
		return rc;
	if (!(c->access & loco_op_access(opcode)))
		return lookup(thr, node, space, at, len, opcode, true, &c);
	*key = c->key;
	*key_off = c->off;
	return 0;
}

/* The descriptor of NODE's region holding [AT, AT+LEN) of SPACE, from the
 * table: 0 or -ENOENT. */
static int table_region(struct loco_mgr *mgr, uint32_t node, uint32_t space,
			uint64_t at, uint64_t len, struct loco_rregion *out)
{
	struct loco_rtab *t = &mgr->rtab[node];
	pthread_rwlock_rdlock(&t->lock);
	const struct loco_rent *e = find(t, space, at, len);
	if (e)
		*out = (struct loco_rregion){ .node = node, .space = e->space,
					      .off = e->off, .len = e->len,
					      .access = e->access };
	pthread_rwlock_unlock(&t->lock);
	return e ? 0 : -ENOENT;
}

int loco_region_at(struct loco_mgr *mgr, uint32_t node, uint32_t space,
		   uint64_t off, uint64_t len, struct loco_rregion *out)
{
	if (node >= LOCO_MAX_NODES || !mgr->hosts.node[node].present ||
	    space > LOCO_SPACE_DM)
		return -EINVAL;
	int rc = table_region(mgr, node, space, off, len, out);
	if (rc == -ENOENT && node != mgr->id &&
	    !(rc = loco_region_find(mgr, node, space, off, len)))
		rc = table_region(mgr, node, space, off, len, out);
	return rc == -ENOENT ? -EACCES : rc;
}

int loco_access_region(struct loco_thread *thr, uint32_t node, uint64_t at,
		       uint64_t len, struct loco_rregion *out)
{
	const struct loco_rcache *c;
	int rc = resolve(thr, node, LOCO_SPACE_ARENA, at, len, LOCO_OP_FLUSH,
			 false, &c);
	if (rc)
		return rc;
	*out = (struct loco_rregion){ .node = node, .space = c->space,
				      .off = c->off, .len = c->len,
				      .access = c->access };
	return 0;
}
