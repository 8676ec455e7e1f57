/* SPDX-License-Identifier: MIT */
/* What each writer knows it wrote, and the end-of-run check.
 *
 * Every worker keeps, for each key it wrote, the id of the value of its
 * last acknowledged write (TRK_ABSENT after a delete). A key with one
 * writer (every key with --writers owner, and fresh keys always) then
 * has an exact expected state: the writer's own later calls must agree
 * with it (a get returns that value, an update or delete finds the key
 * iff it is present, an insert iff it is absent), and after the last
 * barrier of the run the key must hold it. Disagreements count as
 * `missing` (an acknowledged value not found) or `wrong` (another value,
 * or a key present that should not be).
 *
 * With --writers any, several clients write a loaded key and which of
 * their last writes is final depends on their order, which no node
 * knows. The check then verifies what one node can decide exactly: a
 * value found whose id names one of this node's threads must be that
 * thread's last write of the key (a value it overwrote, or never wrote
 * there, is wrong), and without deletes in the mix every key written is
 * present. Which concurrent writer wins is checked by --record and
 * loco-lincheck.
 *
 * A write whose outcome is unknown (a memory node died under it: the
 * worker goes on after the outage; or the error that stopped the worker)
 * leaves its key in either state: the value it wrote (or the absence a
 * delete leaves) is an alternative to the last acknowledged one until the
 * writer's next acknowledged write of that key. Nothing that was
 * acknowledged may be missing; what was not may be either way. */
#include <errno.h>
#include <stdlib.h>

#include "apps/ycsb/ycsb.h"

static bool owner_mode(const struct ycsb *y)
{
	return y->o.writers == W_OWNER;
}

/* Only this worker writes KEY. */
static bool sole_writer(const struct ycsb_worker *w, uint64_t key)
{
	return owner_mode(w->y) || key >= w->y->o.keys;
}

int track_init(struct ycsb_worker *w)
{
	const struct ycsb *y = w->y;
	struct ycsb_track *t = &w->trk;
	uint64_t n = owner_mode(y) ? y->fresh_base / y->clients : y->o.keys;
	t->cur = malloc((n ? n : 1) * sizeof(*t->cur));
	if (!t->cur)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++)
		t->cur[i] = TRK_NONE;
	t->n = t->cap = n;
	t->alt = NULL;
	t->nalt = t->altcap = 0;
	return 0;
}

void track_fini(struct ycsb_worker *w)
{
	free(w->trk.cur);
	free(w->trk.alt);
	w->trk.cur = NULL;
	w->trk.alt = NULL;
	w->trk.n = w->trk.cap = 0;
	w->trk.nalt = w->trk.altcap = 0;
}

/* Whether KEY may hold GOT by a write of unknown outcome. */
static bool alt_has(const struct ycsb_track *t, uint64_t key, uint64_t got)
{
	for (unsigned i = 0; i < t->nalt; i++)
		if (t->alt[i].key == key && t->alt[i].id == got)
			return true;
	return false;
}

/* Whether KEY has a write of unknown outcome that leaves it present
 * (PRESENT) or absent. */
static bool alt_presence(const struct ycsb_track *t, uint64_t key,
			 bool present)
{
	for (unsigned i = 0; i < t->nalt; i++)
		if (t->alt[i].key == key &&
		    (t->alt[i].id != TRK_ABSENT) == present)
			return true;
	return false;
}

static void alt_add(struct ycsb_worker *w, uint64_t key, uint64_t id)
{
	struct ycsb_track *t = &w->trk;
	if (alt_has(t, key, id))
		return;
	if (t->nalt == t->altcap) {
		unsigned cap = t->altcap ? 2 * t->altcap : 16;
		struct ycsb_alt *a = realloc(t->alt, cap * sizeof(*a));
		if (!a) {
			w->rc = w->rc ? w->rc : -ENOMEM;
			return;
		}
		t->alt = a;
		t->altcap = cap;
	}
	t->alt[t->nalt++] = (struct ycsb_alt){ key, id };
}

/* An acknowledged write of KEY: its state is known again. */
static void alt_drop(struct ycsb_track *t, uint64_t key)
{
	for (unsigned i = 0; i < t->nalt;)
		if (t->alt[i].key == key)
			t->alt[i] = t->alt[--t->nalt];
		else
			i++;
}

/* Index of KEY in the table, false if this worker does not track it:
 * owner mode, the keys K = client (mod C) at K / C; any mode, the loaded
 * keys at K and this client's fresh keys after them. */
static bool track_index(const struct ycsb_worker *w, uint64_t key, uint64_t *i)
{
	const struct ycsb *y = w->y;
	if (owner_mode(y) || key >= y->fresh_base) {
		if (key % y->clients != w->client)
			return false;
		*i = owner_mode(y) ? key / y->clients :
		     y->o.keys + (key - y->fresh_base) / y->clients;
		return true;
	}
	*i = key;
	return key < y->o.keys;
}

static uint64_t track_key(const struct ycsb_worker *w, uint64_t i)
{
	const struct ycsb *y = w->y;
	if (owner_mode(y))
		return i * y->clients + w->client;
	return i < y->o.keys ? i :
	       y->fresh_base + (i - y->o.keys) * y->clients + w->client;
}

static int track_grow(struct ycsb_track *t, uint64_t i)
{
	uint64_t cap = t->cap * 2 > i + 1 ? t->cap * 2 : i + 1;
	uint64_t *p = realloc(t->cur, cap * sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (uint64_t k = t->cap; k < cap; k++)
		p[k] = TRK_NONE;
	t->cur = p;
	t->cap = cap;
	return 0;
}

uint64_t *track_at(struct ycsb_worker *w, uint64_t key)
{
	struct ycsb_track *t = &w->trk;
	uint64_t i;
	if (!track_index(w, key, &i))
		return NULL;
	if (i >= t->cap && track_grow(t, i)) {
		w->rc = w->rc ? w->rc : -ENOMEM;
		return NULL;
	}
	t->n = i >= t->n ? i + 1 : t->n;
	return &t->cur[i];
}

/* KEY's expected state E (a value id or TRK_ABSENT) against what a call
 * saw: GOT (an id, or TRK_ABSENT). */
static void expect(struct ycsb_worker *w, uint64_t key, uint64_t e, uint64_t got)
{
	if (got == e || e == TRK_NONE || alt_has(&w->trk, key, got))
		return;
	if (got == TRK_ABSENT)
		w->n[X_MISSING]++;
	else
		w->n[X_WRONG]++;
}

/* A sole writer's call on KEY with state *E saw the key present (or
 * not): PRESENT. */
static void expect_presence(struct ycsb_worker *w, uint64_t key, uint64_t e,
			    bool present)
{
	bool was = e != TRK_ABSENT && e != TRK_NONE;
	if (present == was || alt_presence(&w->trk, key, present))
		return;
	if (was)
		w->n[X_MISSING]++;
	else
		w->n[X_WRONG]++;
}

/* A write of KEY whose outcome is unknown. A key never written before
 * counts as written: its read-back must find either state. */
static void track_write_unknown(struct ycsb_worker *w, enum ycsb_kind k,
				uint64_t key, uint64_t id)
{
	if (k != K_INSERT && k != K_UPDATE && k != K_DELETE)
		return;
	uint64_t *e = track_at(w, key);
	if (!e)
		return;
	if (*e == TRK_NONE)
		*e = TRK_ABSENT;
	alt_add(w, key, k == K_DELETE ? TRK_ABSENT : id);
}

void track_result(struct ycsb_worker *w, enum ycsb_kind k, uint64_t key,
		  uint64_t id, int rc, uint64_t got)
{
	if (rc < 0 || rc == YCSB_UNKNOWN) {
		track_write_unknown(w, k, key, id);
		return;
	}
	bool sole = sole_writer(w, key);
	if (k == K_INSERT && rc && w->loading && !sole)
		w->n[X_WRONG]++;        /* a key nobody inserted yet */
	uint64_t *e = track_at(w, key);
	if (!e)
		return;
	switch (k) {
	case K_GET:
		if (sole)
			expect(w, key, *e, got);
		return;
	case K_INSERT:
	case K_UPDATE:
		if (sole)
			expect_presence(w, key, *e, k == K_INSERT ? rc : !rc);
		if (!rc) {
			*e = id;
			alt_drop(&w->trk, key);
		}
		return;
	default:
		if (sole)
			expect_presence(w, key, *e, !rc);
		if (!rc) {
			*e = TRK_ABSENT;
			alt_drop(&w->trk, key);
		}
		return;
	}
}

/* --writers any, a loaded key this worker wrote last as E, found as GOT. */
static void check_shared(struct ycsb_worker *w, uint64_t key, uint64_t e,
			 uint64_t got)
{
	const struct ycsb *y = w->y;
	if (got == TRK_ABSENT) {
		if (e != TRK_ABSENT && y->o.delete_ratio == 0)
			expect(w, key, e, got);
		return;
	}
	if (value_node(got) == y->self && value_thread(got) == w->idx)
		expect(w, key, e, got);
}

int track_check(struct ycsb_worker *w)
{
	struct ycsb_track *t = &w->trk;
	for (uint64_t i = 0; i < t->n; i++) {
		uint64_t e = t->cur[i], key = track_key(w, i), got;
		if (e == TRK_NONE)
			continue;
		int rc;
		do   /* an outage: the read goes again (a get changes nothing) */
			rc = ycsb_call(w, K_GET, key, 0, &got);
		while (rc == YCSB_UNKNOWN);
		if (rc < 0)
			return rc;
		w->n[X_CHECKED]++;
		if (rc != YCSB_CORRUPT && !sole_writer(w, key))
			check_shared(w, key, e, got);
	}
	return 0;
}
