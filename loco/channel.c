/* SPDX-License-Identifier: MIT */
/* Channel endpoints and the join protocol (LOCO §4.2).
 *
 * JOIN (from A to B): str channel; u32 n, n x (str region, region
 *   descriptor) offered by A; u32 m, m x (str region, u64 len) A expects
 *   from B.
 * JOIN_ACK: u32 status (0, JOIN_NOCHAN, or a negated error); str message;
 *   u32 n, n x (str region, region descriptor) offered by B.
 * A region descriptor (access.c) is u32 space, u32 access, u32 key, u64
 * off, u64 len. SPACE (enum loco_space) says whether OFF is in the
 * offering node's arena or its device memory (a hot region,
 * loco_channel_add_region_ex); the expecting side does not choose: it uses
 * the region where it is. ACCESS is what the offering node lets peers do
 * to it (LOCO_REGION_REMOTE_*), KEY its transport's key (verbs: rkey).
 * A peer without the endpoint answers JOIN_NOCHAN; it joins us itself when
 * it creates the endpoint, so pairing completes whoever comes second. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loco/internal.h"

#define JOIN_NOCHAN 1
#define JOIN_ATTEMPT_MS 1000
#define JOIN_ROUND_NS 20000000ull

struct offer {
	char name[LOCO_REGION_NAME_MAX];
	struct loco_rdesc d;
};

static bool name_ok(const char *s)
{
	size_t n = strlen(s);
	return n && !strpbrk(s, "/. \t\n");
}

int loco_channel_init(struct loco_channel *ch, struct loco_mgr *mgr,
		      struct loco_channel *parent, const char *name,
		      uint64_t participants, const struct loco_channel_ops *ops)
{
	memset(ch, 0, sizeof(*ch));
	if (!name_ok(name))
		return -EINVAL;
	int n = parent ? snprintf(ch->name, sizeof(ch->name), "%s/%s",
				  parent->name, name) :
			 snprintf(ch->name, sizeof(ch->name), "%s", name);
	if (n < 0 || (size_t)n >= sizeof(ch->name) - LOCO_REGION_NAME_MAX)
		return -EINVAL;
	ch->core = calloc(1, sizeof(*ch->core));
	if (!ch->core)
		return -ENOMEM;
	ch->mgr = mgr;
	ch->parent = parent;
	ch->core->ops = ops;
	if (!participants)
		participants = loco_mgr_compute_peers(mgr);
	ch->participants = participants & ~(UINT64_C(1) << mgr->id);
	if (parent) {
		/* chan_lock: a parent's join op adds children concurrently
		 * with the setting-up thread. */
		pthread_mutex_lock(&mgr->chan_lock);
		ch->core->sibling = parent->core->children;
		parent->core->children = ch;
		pthread_mutex_unlock(&mgr->chan_lock);
	}
	return 0;
}

int loco_channel_add_region(struct loco_channel *ch, const char *name,
			    uint64_t len, struct loco_region **out)
{
	return loco_channel_add_region_ex(ch, name, len, 0, out);
}

int loco_channel_add_region_ex(struct loco_channel *ch, const char *name,
			       uint64_t len, unsigned flags,
			       struct loco_region **out)
{
	if (ch->core->registered || ch->core->nlocal == LOCO_CHAN_REGIONS || !name_ok(name) ||
	    strlen(name) >= LOCO_REGION_NAME_MAX ||
	    !loco_region_flags_ok(flags, LOCO_REGION_FLAGS))
		return -EINVAL;
	char full[LOCO_NAME_MAX + LOCO_REGION_NAME_MAX];
	snprintf(full, sizeof(full), "%s.%s", ch->name, name);
	struct loco_region *reg = &ch->core->local[ch->core->nlocal];
	int rc = loco_region_alloc_ex(ch->mgr, full, len, flags, reg);
	if (rc)
		return rc;
	strcpy(ch->core->local_short[ch->core->nlocal++], name);
	if (out)
		*out = reg;
	return 0;
}

int loco_channel_expect(struct loco_channel *ch, const char *name,
			uint64_t len, uint64_t from)
{
	if (ch->core->registered || ch->core->nexpect == LOCO_CHAN_REGIONS || !name_ok(name) ||
	    strlen(name) >= LOCO_REGION_NAME_MAX || !len)
		return -EINVAL;
	struct loco_chan_expect *e = &ch->core->expect[ch->core->nexpect];
	strcpy(e->name, name);
	e->len = len;
	e->from = from ? from : ch->participants;
	return (int)ch->core->nexpect++;
}

static int local_find(const struct loco_channel *ch, const char *name)
{
	for (unsigned i = 0; i < ch->core->nlocal; i++)
		if (strcmp(ch->core->local_short[i], name) == 0)
			return (int)i;
	return -1;
}

static int hosted_find(const struct loco_channel *ch, const char *name)
{
	for (unsigned i = 0; i < ch->core->nhosted; i++)
		if (strcmp(ch->core->hosted[i].name, name) == 0)
			return (int)i;
	return -1;
}

int loco_channel_open_hosted_ex(struct loco_channel *ch, uint32_t node,
				const char *name, uint64_t len, unsigned flags,
				struct loco_rregion *out)
{
	if (ch->core->nhosted == LOCO_CHAN_HOSTED || !name_ok(name) ||
	    strlen(name) >= LOCO_REGION_NAME_MAX || !len ||
	    !loco_region_flags_ok(flags, LOCO_REGION_HOT |
				  LOCO_REGION_REMOTE_ALL)) {
		loco_err(ch->name, "hosted region '%s' of %lu bytes: bad name, "
			 "size or flags (%#x), or more than %d", name,
			 (unsigned long)len, flags, LOCO_CHAN_HOSTED);
		return -EINVAL;
	}
	if (local_find(ch, name) >= 0 || hosted_find(ch, name) >= 0) {
		loco_err(ch->name, "region '%s' exists already", name);
		return -EEXIST;
	}
	char full[LOCO_NAME_MAX];
	snprintf(full, sizeof(full), "%s.%s", ch->name, name);
	struct loco_chan_hosted *h = &ch->core->hosted[ch->core->nhosted];
	int rc;
	if (node == ch->mgr->id) {
		char msg[LOCO_NAME_MAX + 96];
		uint64_t off;
		uint32_t space;
		rc = loco_region_hold(ch->mgr, full, len, flags, &space, &off,
				      msg, sizeof(msg));
		if (rc) {
			loco_err(ch->name, "%s", msg);
			return rc;
		}
		h->rr = (struct loco_rregion){ .node = node, .space = space,
					       .off = off, .len = len,
					       .access = loco_access_of(flags) };
		h->held = true;
	} else {
		rc = loco_region_open_ex(ch->mgr, node, full, len, flags,
					 &h->rr); /* logs */
		if (rc)
			return rc;
		h->held = false;
	}
	strcpy(h->name, name);
	ch->core->nhosted++;
	*out = h->rr;
	return 0;
}

int loco_channel_open_hosted(struct loco_channel *ch, uint32_t node,
			     const char *name, uint64_t len,
			     struct loco_rregion *out)
{
	return loco_channel_open_hosted_ex(ch, node, name, len, 0, out);
}

const struct loco_region *loco_channel_local(const struct loco_channel *ch,
					     const char *name)
{
	int l = local_find(ch, name);
	return l < 0 ? NULL : &ch->core->local[l];
}

const struct loco_rregion *loco_channel_remote(struct loco_channel *ch,
					       unsigned idx, uint32_t peer)
{
	if (idx >= ch->core->nexpect || peer >= LOCO_MAX_NODES)
		return NULL;
	struct loco_rregion *rr = &ch->core->remote[idx][peer];
	if (peer == ch->mgr->id) {
		if (ch->core->registered)  /* filled at join, no name lookup */
			return ch->core->self_expect & (1u << idx) ? rr : NULL;
		int l = local_find(ch, ch->core->expect[idx].name);
		if (l < 0)
			return NULL;
		if (!ch->core->registered)  /* before join; filled once at join */
			loco_region_desc(ch->mgr, &ch->core->local[l], rr);
		return rr;
	}
	/* Acquire pairs with the release in mark_joined: the descriptor was
	 * written before the peer's bit. */
	uint64_t known = atomic_load_explicit(&ch->core->known, memory_order_acquire);
	return known & (UINT64_C(1) << peer) ? rr : NULL;
}

bool loco_channel_ready(struct loco_channel *ch, int *err)
{
	int e = atomic_load_explicit(&ch->core->error, memory_order_relaxed); /* flag only */
	if (err)
		*err = e;
	uint64_t joined = atomic_load_explicit(&ch->core->joined, memory_order_acquire); /* pairs with mark_joined */
	return !e && (joined & ch->participants) == ch->participants;
}

int loco_channel_wait(struct loco_channel *ch, int timeout_ms)
{
	struct loco_wait w;
	int err = 0;
	loco_wait_init(&w, ch->mgr, timeout_ms);
	while (!loco_channel_ready(ch, &err)) {
		int rc = err ? err : loco_wait_step(&w);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- registry ------------------------------------------------------------ */

static struct loco_channel *chan_find(struct loco_mgr *mgr, const char *name)
{
	for (struct loco_channel *c = mgr->channels; c; c = c->core->next)
		if (strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

void loco_channel_fail(struct loco_channel *ch, int err, const char *msg)
{
	int none = 0;
	/* Relaxed: the error is a flag; readers need no other data with it. */
	atomic_compare_exchange_strong_explicit(&ch->core->error, &none, err,
						memory_order_relaxed,
						memory_order_relaxed);
	loco_err(ch->name, "%s", msg);
}

/* Record PEER as joined (chan_lock held): its regions become readable,
 * the join op runs the first time, and only then is the peer counted as
 * joined, so a ready channel has run it for every peer. */
static void mark_joined(struct loco_channel *ch, uint32_t peer)
{
	uint64_t bit = UINT64_C(1) << peer;
	/* Release: remote[][peer] was written before the bit is published. */
	uint64_t old = atomic_fetch_or_explicit(&ch->core->known, bit,
						memory_order_release);
	if (old & bit)
		return;
	if (ch->core->ops && ch->core->ops->join)
		ch->core->ops->join(ch, peer);
	/* Release: what the join op built is visible to ready's acquire. */
	atomic_fetch_or_explicit(&ch->core->joined, bit, memory_order_release);
}

/* Check that OFFERED (from PEER) holds every region CH expects from PEER,
 * with the right size, then record them. MSG explains a mismatch. */
static int apply_offer(struct loco_channel *ch, uint32_t peer,
		       const struct offer *offered, unsigned n, char *msg,
		       size_t msglen)
{
	struct loco_rregion found[LOCO_CHAN_REGIONS];
	struct loco_rdesc foundd[LOCO_CHAN_REGIONS];
	for (unsigned i = 0; i < ch->core->nexpect; i++) {
		const struct loco_chan_expect *e = &ch->core->expect[i];
		if (!(e->from & (UINT64_C(1) << peer)))
			continue;
		unsigned j = 0;
		while (j < n && strcmp(offered[j].name, e->name) != 0)
			j++;
		if (j == n) {
			snprintf(msg, msglen, "channel %s: node %u expects region "
				 "'%s' of %lu bytes from node %u, which has none",
				 ch->name, ch->mgr->id, e->name,
				 (unsigned long)e->len, peer);
			return -LOCO_EMISMATCH;
		}
		const struct loco_rdesc *d = &offered[j].d;
		if (d->len != e->len) {
			snprintf(msg, msglen, "channel %s: node %u expects region "
				 "'%s' of %lu bytes from node %u, which has %lu "
				 "bytes", ch->name, ch->mgr->id, e->name,
				 (unsigned long)e->len, peer, (unsigned long)d->len);
			return -LOCO_EMISMATCH;
		}
		int rc = loco_peer_span(ch->mgr, peer, d->space, d->off, d->len);
		if (rc && rc != -EINVAL) {
			snprintf(msg, msglen, "channel %s: node %u: %s", ch->name,
				 peer, loco_strerror(rc));
			return rc;
		}
		if (rc) {
			snprintf(msg, msglen, "channel %s: node %u offered region "
				 "'%s' outside its %s", ch->name, peer, e->name,
				 d->space == LOCO_SPACE_ARENA ? "arena" :
				 "device memory");
			return -LOCO_EPROTO;
		}
		found[i] = (struct loco_rregion){ .node = peer, .space = d->space,
			.off = d->off, .len = d->len, .access = d->access };
		foundd[i] = *d;
	}
	/* Record once: a second join with the same peer (both sides joined
	 * each other) only validates, since threads may be reading these. */
	uint64_t known = atomic_load_explicit(&ch->core->known, memory_order_relaxed); /* chan_lock held */
	if (known & (UINT64_C(1) << peer))
		return 0;
	for (unsigned i = 0; i < ch->core->nexpect; i++) {
		const struct loco_chan_expect *e = &ch->core->expect[i];
		if (!(e->from & (UINT64_C(1) << peer)))
			continue;
		char full[LOCO_NAME_MAX + LOCO_REGION_NAME_MAX];
		snprintf(full, sizeof(full), "%s.%s", ch->name, e->name);
		int rc = loco_rtab_put(ch->mgr, peer, full, &foundd[i]);
		if (rc) {
			snprintf(msg, msglen, "channel %s: out of memory", ch->name);
			return rc;
		}
		ch->core->remote[i][peer] = found[i];
	}
	return 0;
}

/* Check that this endpoint has every region PEER expects, sizes equal. */
static int check_wants(struct loco_channel *ch, uint32_t peer,
		       const struct offer *wants, unsigned n, char *msg,
		       size_t msglen)
{
	for (unsigned i = 0; i < n; i++) {
		int l = local_find(ch, wants[i].name);
		if (l >= 0 && ch->core->local[l].len == wants[i].d.len)
			continue;
		if (l < 0)
			snprintf(msg, msglen, "channel %s: node %u expects region "
				 "'%s' of %lu bytes from node %u, which has none",
				 ch->name, peer, wants[i].name,
				 (unsigned long)wants[i].d.len, ch->mgr->id);
		else
			snprintf(msg, msglen, "channel %s: node %u expects region "
				 "'%s' of %lu bytes from node %u, which has %lu bytes",
				 ch->name, peer, wants[i].name,
				 (unsigned long)wants[i].d.len, ch->mgr->id,
				 (unsigned long)ch->core->local[l].len);
		return -LOCO_EMISMATCH;
	}
	return 0;
}

/* ---- encoding --------------------------------------------------------------- */

/* The local regions, with their keys (looked up in this node's own
 * table, where the allocator put them). */
static void put_local(struct loco_wbuf *w, const struct loco_channel *ch)
{
	struct loco_mgr *mgr = ch->mgr;
	loco_put_u32(w, ch->core->nlocal);
	for (unsigned i = 0; i < ch->core->nlocal; i++) {
		const struct loco_region *reg = &ch->core->local[i];
		loco_put_str(w, ch->core->local_short[i]);
		loco_put_rdesc(w, &(struct loco_rdesc){ .space = reg->space,
			.access = reg->access, .key = loco_region_key(mgr, reg),
			.off = reg->off, .len = reg->len });
	}
}

/* Read a list of (name, descriptor) or, without WITH_DESC, (name, len). */
static unsigned get_list(struct loco_rbuf *r, struct offer *out, bool with_desc)
{
	uint32_t n = loco_get_u32(r);
	if (n > LOCO_CHAN_REGIONS) {
		r->err = -LOCO_EPROTO;
		return 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		loco_get_str(r, out[i].name, sizeof(out[i].name));
		out[i].d = (struct loco_rdesc){ .space = LOCO_SPACE_ARENA };
		if (with_desc)
			loco_get_rdesc(r, &out[i].d);
		else
			out[i].d.len = loco_get_u64(r);
	}
	return r->err ? 0 : n;
}

static void join_ack(struct loco_wbuf *reply, int status, const char *msg,
		     const struct loco_channel *ch)
{
	loco_put_u32(reply, (uint32_t)(status < 0 ? -status : status));
	loco_put_str(reply, msg);
	if (ch && !status)
		put_local(reply, ch);
	else
		loco_put_u32(reply, 0);
}

/* Server side: a JOIN from FROM. */
void loco_channel_handle_join(struct loco_mgr *mgr, uint32_t from,
			      const uint8_t *req, size_t len,
			      struct loco_wbuf *reply)
{
	char name[LOCO_NAME_MAX], msg[LOCO_NAME_MAX * 2 + 128] = "";
	struct offer offered[LOCO_CHAN_REGIONS], wants[LOCO_CHAN_REGIONS];
	struct loco_rbuf r;
	loco_rbuf_init(&r, req, len);
	loco_get_str(&r, name, sizeof(name));
	unsigned n = get_list(&r, offered, true);
	unsigned m = get_list(&r, wants, false);
	if (loco_rbuf_done(&r)) {
		join_ack(reply, -LOCO_EPROTO, "malformed JOIN", NULL);
		return;
	}
	pthread_mutex_lock(&mgr->chan_lock);
	struct loco_channel *ch = chan_find(mgr, name);
	int rc = 0;
	if (!ch) {
		join_ack(reply, JOIN_NOCHAN, "", NULL);
		goto unlock;
	}
	rc = check_wants(ch, from, wants, m, msg, sizeof(msg));
	if (!rc)
		rc = apply_offer(ch, from, offered, n, msg, sizeof(msg));
	if (rc)
		loco_channel_fail(ch, rc, msg);
	join_ack(reply, rc, msg, ch);
	if (!rc)
		mark_joined(ch, from);
unlock:
	pthread_mutex_unlock(&mgr->chan_lock);
}

static int join_encode(struct loco_channel *ch, uint32_t peer,
		       struct loco_wbuf *w)
{
	loco_put_str(w, ch->name);
	put_local(w, ch);
	uint32_t m = 0;
	for (unsigned i = 0; i < ch->core->nexpect; i++)
		m += !!(ch->core->expect[i].from & (UINT64_C(1) << peer));
	loco_put_u32(w, m);
	for (unsigned i = 0; i < ch->core->nexpect; i++) {
		if (!(ch->core->expect[i].from & (UINT64_C(1) << peer)))
			continue;
		loco_put_str(w, ch->core->expect[i].name);
		loco_put_u64(w, ch->core->expect[i].len);
	}
	return w->err;
}

/* Handle PEER's JOIN_ACK (chan_lock held). */
static void join_reply(struct loco_channel *ch, uint32_t peer,
		       const uint8_t *rep, size_t len)
{
	char msg[LOCO_NAME_MAX * 2 + 128];
	struct offer offered[LOCO_CHAN_REGIONS];
	struct loco_rbuf r;
	loco_rbuf_init(&r, rep, len);
	uint32_t status = loco_get_u32(&r);
	loco_get_str(&r, msg, sizeof(msg));
	unsigned n = get_list(&r, offered, true);
	if (loco_rbuf_done(&r)) {
		snprintf(msg, sizeof(msg), "channel %s: malformed JOIN_ACK "
			 "from node %u", ch->name, peer);
		loco_channel_fail(ch, -LOCO_EPROTO, msg);
		return;
	}
	if (status == JOIN_NOCHAN)
		return;
	int rc = status ? -(int)status :
		 apply_offer(ch, peer, offered, n, msg, sizeof(msg));
	if (rc) {
		char full[sizeof(msg) + 64];
		snprintf(full, sizeof(full), "join with node %u failed: %s", peer,
			 msg[0] ? msg : loco_strerror(rc));
		loco_channel_fail(ch, rc, full);
		return;
	}
	mark_joined(ch, peer);
}

/* Send one JOIN; 0 when the peer answered (whatever it said). */
static int join_send(struct loco_channel *ch, uint32_t peer)
{
	struct loco_mgr *mgr = ch->mgr;
	struct loco_wbuf w;
	uint8_t *rep = NULL;
	size_t len = 0;
	loco_wbuf_init(&w);
	pthread_mutex_lock(&mgr->chan_lock);
	int rc = join_encode(ch, peer, &w);
	pthread_mutex_unlock(&mgr->chan_lock);
	if (!rc)
		rc = loco_ctrl_request(mgr, peer, LOCO_MSG_JOIN, w.p, w.len,
				       LOCO_MSG_JOIN_ACK, &rep, &len,
				       JOIN_ATTEMPT_MS);
	loco_wbuf_fini(&w);
	if (rc)
		return rc;
	pthread_mutex_lock(&mgr->chan_lock);
	join_reply(ch, peer, rep, len);
	pthread_mutex_unlock(&mgr->chan_lock);
	free(rep);
	return 0;
}

/* ---- join worker -------------------------------------------------------------- */

/* Descriptors of this node's own copies of the expected regions: written
 * once here, before the endpoint is visible to other threads. */
static void self_regions(struct loco_channel *ch)
{
	for (unsigned i = 0; i < ch->core->nexpect; i++) {
		int l = local_find(ch, ch->core->expect[i].name);
		if (l < 0)
			continue;
		loco_region_desc(ch->mgr, &ch->core->local[l],
				 &ch->core->remote[i][ch->mgr->id]);
		ch->core->self_expect |= 1u << i;
	}
}

int loco_channel_join(struct loco_channel *ch)
{
	struct loco_mgr *mgr = ch->mgr;
	struct loco_join_job *job = NULL;
	if (ch->participants && !(job = calloc(1, sizeof(*job))))
		return -ENOMEM;
	pthread_mutex_lock(&mgr->chan_lock);
	if (chan_find(mgr, ch->name)) {
		pthread_mutex_unlock(&mgr->chan_lock);
		free(job);
		loco_err(ch->name, "a channel with this name exists already");
		return -EEXIST;
	}
	self_regions(ch);
	ch->core->registered = true;
	ch->core->next = mgr->channels;
	mgr->channels = ch;
	pthread_mutex_unlock(&mgr->chan_lock);
	if (!job)  /* nobody to join: ready already */
		return 0;
	job->ch = ch;
	job->pending = ch->participants;
	job->deadline_ns = loco_deadline(mgr->opts.timeout_ms);
	pthread_mutex_lock(&mgr->job_lock);
	job->next = mgr->jobs;
	mgr->jobs = job;
	pthread_cond_broadcast(&mgr->job_cond);
	pthread_mutex_unlock(&mgr->job_lock);
	return 0;
}

/* One pass over JOB's pending peers (no locks held). */
static void job_run(struct loco_join_job *job)
{
	/* A peer that joined us (its JOIN reached our server) needs none. */
	job->pending &= ~atomic_load_explicit(&job->ch->core->joined,
					      memory_order_relaxed); /* hint only */
	for (uint64_t m = job->pending; m; m &= m - 1) {
		uint32_t peer = (uint32_t)__builtin_ctzll(m);
		int rc = join_send(job->ch, peer);
		if (!rc)
			job->pending &= ~(UINT64_C(1) << peer);
		else if (rc != -ETIMEDOUT && rc != -ECONNREFUSED &&
			 rc != -ECONNRESET)
			loco_dbg(job->ch->name, "join to node %u: %s", peer,
				 loco_strerror(rc));
	}
}

static struct loco_join_job *job_take(struct loco_mgr *mgr)
{
	struct loco_join_job *job = mgr->jobs;
	if (job)
		mgr->jobs = job->next;
	return job;
}

static void *joiner_main(void *arg)
{
	struct loco_mgr *mgr = arg;
	pthread_mutex_lock(&mgr->job_lock);
	while (!atomic_load_explicit(&mgr->stopping, memory_order_relaxed)) { /* flag only */
		struct loco_join_job *job = job_take(mgr);
		if (!job) {
			pthread_cond_wait(&mgr->job_cond, &mgr->job_lock);
			continue;
		}
		mgr->job_current = job->ch;
		pthread_mutex_unlock(&mgr->job_lock);
		uint64_t start = loco_now_ns();
		job_run(job);
		bool again = job->pending && loco_now_ns() < job->deadline_ns;
		if (again && loco_now_ns() - start < JOIN_ROUND_NS) {
			struct timespec ts = { 0, (long)JOIN_ROUND_NS };
			nanosleep(&ts, NULL);
		}
		pthread_mutex_lock(&mgr->job_lock);
		if (mgr->job_cancel == job->ch)
			again = false;
		mgr->job_current = mgr->job_cancel = NULL;
		pthread_cond_broadcast(&mgr->job_cond);
		if (again) {
			struct loco_join_job **pp = &mgr->jobs;
			while (*pp)
				pp = &(*pp)->next;
			job->next = NULL;
			*pp = job;
		} else {
			free(job);
		}
	}
	pthread_mutex_unlock(&mgr->job_lock);
	return NULL;
}

int loco_joiner_start(struct loco_mgr *mgr)
{
	int rc = -pthread_create(&mgr->joiner, NULL, joiner_main, mgr);
	mgr->joiner_started = !rc;
	return rc;
}

void loco_joiner_stop(struct loco_mgr *mgr)
{
	if (!mgr->joiner_started)
		return;
	pthread_mutex_lock(&mgr->job_lock);
	/* Relaxed: the flag is read under job_lock by the worker. */
	atomic_store_explicit(&mgr->stopping, true, memory_order_relaxed);
	pthread_cond_broadcast(&mgr->job_cond);
	pthread_mutex_unlock(&mgr->job_lock);
	pthread_join(mgr->joiner, NULL);
	mgr->joiner_started = false;
	while (mgr->jobs)
		free(job_take(mgr));
}

/* Drop CH's queued job and wait until the worker is not running it. */
static void jobs_forget(struct loco_mgr *mgr, struct loco_channel *ch)
{
	pthread_mutex_lock(&mgr->job_lock);
	for (struct loco_join_job **pp = &mgr->jobs; *pp;) {
		struct loco_join_job *job = *pp;
		if (job->ch == ch) {
			*pp = job->next;
			free(job);
		} else {
			pp = &job->next;
		}
	}
	if (mgr->job_current == ch)
		mgr->job_cancel = ch;
	while (mgr->job_current == ch)
		pthread_cond_wait(&mgr->job_cond, &mgr->job_lock);
	pthread_mutex_unlock(&mgr->job_lock);
}

/* Take CH out of its parent's children (chan_lock held). */
static void child_unlink(struct loco_channel *ch)
{
	if (!ch->parent)
		return;
	for (struct loco_channel **pp = &ch->parent->core->children; *pp;
	     pp = &(*pp)->core->sibling) {
		if (*pp == ch) {
			*pp = ch->core->sibling;
			break;
		}
	}
	ch->core->sibling = NULL;
}

/* Unregister CH: after this no join op or JOIN reply runs for it (both
 * run under chan_lock on registered channels or from its join job). */
static void unregister(struct loco_mgr *mgr, struct loco_channel *ch)
{
	if (!ch->core->registered)
		return;
	jobs_forget(mgr, ch);
	pthread_mutex_lock(&mgr->chan_lock);
	for (struct loco_channel **pp = &mgr->channels; *pp; pp = &(*pp)->core->next) {
		if (*pp == ch) {
			*pp = ch->core->next;
			break;
		}
	}
	ch->core->registered = false;
	pthread_mutex_unlock(&mgr->chan_lock);
}

/* Finish CH's children, newest first (CH is unregistered: none is added).
 * Each is taken out of the list before its fini, so a child that was
 * finished or zeroed meanwhile cannot stay in it. */
static void children_fini(struct loco_mgr *mgr, struct loco_channel *ch)
{
	for (;;) {
		pthread_mutex_lock(&mgr->chan_lock);
		struct loco_channel *c = ch->core->children;
		if (c) {
			ch->core->children = c->core->sibling;
			c->core->sibling = NULL;
		}
		pthread_mutex_unlock(&mgr->chan_lock);
		if (!c)
			return;
		loco_channel_fini(c);
	}
}

void loco_channel_fini(struct loco_channel *ch)
{
	struct loco_mgr *mgr = ch->mgr;
	if (!mgr)
		return;
	pthread_mutex_lock(&mgr->chan_lock);
	child_unlink(ch);
	pthread_mutex_unlock(&mgr->chan_lock);
	unregister(mgr, ch);
	children_fini(mgr, ch);
	if (ch->core->ops && ch->core->ops->fini)
		ch->core->ops->fini(ch);
	for (unsigned i = 0; i < ch->core->nlocal; i++)
		loco_region_free(mgr, &ch->core->local[i]);
	for (unsigned i = 0; i < ch->core->nhosted; i++)
		if (ch->core->hosted[i].held)
			loco_region_unhold(mgr, ch->core->hosted[i].rr.space,
					   ch->core->hosted[i].rr.off);
	free(ch->core);
	ch->core = NULL;
	ch->mgr = NULL;
}

/* Names of channels not yet ready, for the wait_ready timeout message. */
static void report_missing(struct loco_mgr *mgr)
{
	pthread_mutex_lock(&mgr->chan_lock);
	for (struct loco_channel *c = mgr->channels; c; c = c->core->next) {
		uint64_t joined = atomic_load_explicit(&c->core->joined,
						       memory_order_relaxed); /* report only */
		uint64_t missing = c->participants & ~joined;
		char ids[LOCO_MAX_NODES * 4] = "";
		size_t at = 0;
		for (uint64_t m = missing; m && at < sizeof(ids) - 4; m &= m - 1)
			at += (size_t)snprintf(ids + at, sizeof(ids) - at, " %d",
					       __builtin_ctzll(m));
		if (missing)
			loco_err(c->name, "not joined by node(s)%s", ids);
	}
	pthread_mutex_unlock(&mgr->chan_lock);
}

/* 1 if every channel is ready, 0 if not, or the first channel error. */
static int all_ready(struct loco_mgr *mgr)
{
	int rc = 1, err = 0;
	pthread_mutex_lock(&mgr->chan_lock);
	for (struct loco_channel *c = mgr->channels; c && rc > 0; c = c->core->next) {
		if (!loco_channel_ready(c, &err))
			rc = err ? err : 0;
	}
	pthread_mutex_unlock(&mgr->chan_lock);
	return rc;
}

int loco_mgr_wait_ready(struct loco_mgr *mgr, int timeout_ms)
{
	if (timeout_ms < 0)
		timeout_ms = mgr->opts.timeout_ms;
	uint64_t deadline = loco_deadline(timeout_ms);
	for (;;) {
		int rc = all_ready(mgr);
		if (rc)
			return rc < 0 ? rc : 0;
		if (loco_now_ns() > deadline) {
			report_missing(mgr);
			loco_err("mgr", "not ready after %d ms", timeout_ms);
			return -ETIMEDOUT;
		}
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}
