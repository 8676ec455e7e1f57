/* SPDX-License-Identifier: MIT */
/* oplog: see oplog.h for the design and the remote layout.
 *
 * Why one persist per apply is enough: batch b goes into area b % 2,
 * overwriting batch b - 2, whose in-place writes were posted after batch
 * b - 2 was durable and before batch b - 1 was written, so the persist of
 * batch b - 1 made them durable. Hence at any crash the data area holds
 * every batch older than the two areas' (or the areas hold them), and
 * redoing the complete areas in number order rebuilds the applied state. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include <loco/channels/oplog.h>
#include <loco/log.h>

#define OPLOG_MAGIC UINT64_C(0x676f6c706f636f6c) /* "locoplog" */
#define OPLOG_VERSION 1u
#define GEN_OFF 64u
#define GEN_LEN 32u
#define MLOG_OFF 128u
#define BATCH_HDR 32u
#define ENT_HDR 16u
#define CHUNK 16384u   /* largest single WRITE or READ (verbs bounces) */

struct geo {
	uint64_t magic;
	uint32_t version, rec_size;
	uint32_t nrec, mlog_len;
	uint64_t data_len;
	uint64_t sum;
	uint64_t zero[3];
};
static_assert(sizeof(struct geo) == 64, "remote layout");

struct gen_blk {
	uint64_t gen, gen_start, sum, zero;
};
static_assert(sizeof(struct gen_blk) == GEN_LEN, "remote layout");

struct rec_hdr {
	uint64_t seq;
	uint32_t gen;
	uint16_t type, len;
	uint64_t sum;
};
static_assert(sizeof(struct rec_hdr) == LOCO_OPLOG_REC_HDR, "remote layout");

struct batch_hdr {
	uint64_t number, upto;
	uint32_t bytes, nent;
	uint64_t sum;
};
static_assert(sizeof(struct batch_hdr) == BATCH_HDR, "remote layout");

struct ent_hdr {
	uint64_t off;
	uint32_t len, zero;
};
static_assert(sizeof(struct ent_hdr) == ENT_HDR, "remote layout");

static uint64_t round8(uint64_t n)
{
	return (n + 7) & ~UINT64_C(7);
}

/* ---- geometry and checksums ----------------------------------------------- */

static uint64_t log_len(const struct loco_oplog_cfg *c)
{
	return MLOG_OFF + 2 * (uint64_t)c->mlog_len +
	       (uint64_t)c->nrec * c->rec_size;
}

static uint64_t ring_off(const struct loco_oplog *l)
{
	return MLOG_OFF + 2 * (uint64_t)l->cfg.mlog_len;
}

static uint64_t area_off(const struct loco_oplog *l, uint64_t batch)
{
	return MLOG_OFF + (batch % 2) * l->cfg.mlog_len;
}

static bool cfg_ok(const struct loco_oplog_cfg *c)
{
	return c->rec_size % 8 == 0 && c->rec_size >= 32 &&
	       c->rec_size <= 4096 && c->nrec >= 2 && c->nrec <= (1u << 24) &&
	       c->mlog_len % 8 == 0 && c->mlog_len >= 256 &&
	       c->page >= 64 && c->page <= 65536 &&
	       !(c->page & (c->page - 1)) && c->data_len &&
	       c->data_len % c->page == 0 && c->cache_pages >= 2 &&
	       c->sample >= 1;
}

static void geo_fill(const struct loco_oplog *l, struct geo *g)
{
	memset(g, 0, sizeof(*g));
	g->magic = OPLOG_MAGIC;
	g->version = OPLOG_VERSION;
	g->rec_size = l->cfg.rec_size;
	g->nrec = l->cfg.nrec;
	g->mlog_len = l->cfg.mlog_len;
	g->data_len = l->cfg.data_len;
	g->sum = XXH3_64bits(g, offsetof(struct geo, sum));
}

static uint64_t gen_sum(const struct gen_blk *b)
{
	return XXH3_64bits_withSeed(b, offsetof(struct gen_blk, sum), 1);
}

static uint64_t rec_sum(const struct rec_hdr *h, const void *params)
{
	uint64_t seed = XXH3_64bits_withSeed(h, offsetof(struct rec_hdr, sum), 2);
	return XXH3_64bits_withSeed(params, h->len, seed);
}

static uint64_t batch_sum(const struct batch_hdr *h, const void *ents)
{
	uint64_t seed = XXH3_64bits_withSeed(h, offsetof(struct batch_hdr, sum),
					     3);
	return XXH3_64bits_withSeed(ents, h->bytes, seed);
}

/* ---- remote I/O ----------------------------------------------------------- */

/* Any op error takes the log out of service until loco_oplog_recover. */
static int failed(struct loco_oplog *l, int rc)
{
	if (rc)
		l->ready = false;
	return rc;
}

/* LEN bytes at OFF of RR in CHUNK pieces: posted WRITEs from BUF (it
 * stays untouched until the next persist completes them), or READs into
 * BUF (synchronous). */
static int chunked(struct loco_thread *thr, const struct loco_rregion *rr,
		   uint64_t off, uint8_t *buf, uint64_t len, bool write)
{
	while (len) {
		uint32_t n = len < CHUNK ? (uint32_t)len : CHUNK;
		int rc = write ? loco_post_write(thr, rr, off, buf, n, NULL) :
				 loco_read(thr, rr, off, buf, n);
		if (rc)
			return rc;
		off += n;
		buf += n;
		len -= n;
	}
	return 0;
}

static int put(struct loco_thread *thr, const struct loco_rregion *rr,
	       uint64_t off, const void *src, uint64_t len)
{
	return chunked(thr, rr, off, (uint8_t *)(uintptr_t)src, len, true);
}

/* A small block (under CHUNK bytes) from a caller's stack: WRITE it and
 * wait, so SRC may go out of scope at once (durable at the next persist,
 * as put's). */
static int put_now(struct loco_thread *thr, const struct loco_rregion *rr,
		   uint64_t off, const void *src, uint32_t len)
{
	return loco_write(thr, rr, off, src, len);
}

static int get(struct loco_thread *thr, const struct loco_rregion *rr,
	       uint64_t off, void *dst, uint64_t len)
{
	return chunked(thr, rr, off, dst, len, false);
}

/* The persistence point: every write THR posted to the back end is
 * durable (and placed) on return. The broken variant only places them. */
static int persist(struct loco_oplog *l, struct loco_thread *thr)
{
	if (l->cfg.no_persist)
		return loco_fence(thr, LOCO_FENCE_PAIR, l->node);
	l->stats.persists++;
	return loco_persist(thr, l->node);
}

/* ---- set-up --------------------------------------------------------------- */

static void oplog_release(struct loco_channel *ch)
{
	struct loco_oplog *l = (struct loco_oplog *)ch;
	loco_fcache_fini(&l->cache);
	free(l->stage);
	free(l->mlog);
	free(l->post);
	free(l->dirty);
	l->stage = l->mlog = l->post = NULL;
	l->dirty = NULL;
}

static const struct loco_channel_ops oplog_ops = {
	.fini = oplog_release,
};

static int buffers_alloc(struct loco_oplog *l)
{
	const struct loco_oplog_cfg *c = &l->cfg;
	uint64_t seed = (uint64_t)loco_channel_self(&l->base) << 32 ^
			XXH3_64bits(l->base.name, strlen(l->base.name));
	int rc = loco_fcache_init(&l->cache, c->page, c->cache_pages,
				  c->sample, seed);
	if (rc)
		return rc;
	l->stage = calloc(c->nrec, c->rec_size);
	l->mlog = calloc(1, c->mlog_len);
	l->post = calloc(1, c->mlog_len);
	l->dirty = calloc(c->cache_pages, sizeof(*l->dirty));
	return l->stage && l->mlog && l->post && l->dirty ? 0 : -ENOMEM;
}

int loco_oplog_init(struct loco_oplog *l, struct loco_mgr *mgr,
		    struct loco_channel *parent, const char *name,
		    uint32_t node, const struct loco_oplog_cfg *cfg)
{
	memset(l, 0, sizeof(*l));
	if (!cfg || !cfg_ok(cfg))
		return -EINVAL;
	l->cfg = *cfg;
	l->node = node;
	int rc = loco_channel_init(&l->base, mgr, parent, name,
				   UINT64_C(1) << loco_mgr_id(mgr), &oplog_ops);
	if (rc)
		return rc;
	rc = buffers_alloc(l);
	if (!rc)
		rc = loco_channel_open_hosted(&l->base, node, "log",
					      log_len(cfg), &l->log);
	if (!rc)
		rc = loco_channel_open_hosted(&l->base, node, "data",
					      cfg->data_len, &l->data);
	if (!rc)
		rc = loco_channel_join(&l->base);
	if (rc)
		loco_channel_fini(&l->base);
	return rc;
}

void loco_oplog_fini(struct loco_oplog *l, struct loco_thread *thr)
{
	if (thr && l->base.mgr)
		(void)loco_fence(thr, LOCO_FENCE_PAIR, l->node);
	loco_channel_fini(&l->base);
}

/* ---- staging -------------------------------------------------------------- */

/* Forget everything staged and cached (a recovery starts from the log). */
static void local_reset(struct loco_oplog *l)
{
	loco_fcache_clear(&l->cache);
	l->nstaged = 0;
	l->mlog_used = BATCH_HDR;
	l->mlog_nent = 0;
	l->ndirty = 0;
}

static bool over_half(const struct loco_oplog *l)
{
	return l->mlog_used > l->cfg.mlog_len / 2 ||
	       l->ndirty >= l->cfg.cache_pages / 2;
}

/* Room for one more operation: its record in the ring, its writes in the
 * batch and the cache; if not, apply first. */
static int make_room(struct loco_oplog *l, struct loco_thread *thr)
{
	bool ring_full = l->next_seq - l->applied >= l->cfg.nrec;
	return ring_full || over_half(l) ? loco_oplog_apply(l, thr) : 0;
}

int loco_oplog_append(struct loco_oplog *l, struct loco_thread *thr,
		      uint16_t type, const void *params, uint16_t len,
		      uint64_t *seq)
{
	if (len > l->cfg.rec_size - LOCO_OPLOG_REC_HDR)
		return -EINVAL;
	if (!l->ready || l->replaying)
		return -ENOTCONN;
	int rc = make_room(l, thr);
	if (rc)
		return rc;
	uint8_t *r = l->stage + (size_t)l->nstaged * l->cfg.rec_size;
	struct rec_hdr h = {
		.seq = l->next_seq, .gen = (uint32_t)l->gen, .type = type,
		.len = len,
	};
	memset(r, 0, l->cfg.rec_size);
	memcpy(r, &h, sizeof(h));
	if (len)
		memcpy(r + sizeof(h), params, len);
	h.sum = rec_sum(&h, r + sizeof(h));
	memcpy(r + offsetof(struct rec_hdr, sum), &h.sum, sizeof(h.sum));
	l->nstaged++;
	l->stats.appended++;
	if (seq)
		*seq = l->next_seq;
	l->next_seq++;
	return 0;
}

/* The frame of data page PAGE, read in on a miss. */
static int page_get(struct loco_oplog *l, struct loco_thread *thr,
		    uint64_t page, uint8_t **out)
{
	uint8_t *f = loco_fcache_get(&l->cache, page);
	if (!f) {
		f = loco_fcache_add(&l->cache, page);
		if (!f)
			return -ENOSPC;
		int rc = get(thr, &l->data, page * l->cfg.page, f, l->cfg.page);
		if (rc) {
			loco_fcache_drop(&l->cache, page);
			return failed(l, rc);
		}
	}
	*out = f;
	return 0;
}

static bool in_data(const struct loco_oplog *l, uint64_t off, uint64_t len)
{
	return off <= l->cfg.data_len && len <= l->cfg.data_len - off;
}

int loco_oplog_read(struct loco_oplog *l, struct loco_thread *thr,
		    uint64_t off, void *dst, uint32_t len)
{
	if (!in_data(l, off, len))
		return -EINVAL;
	if (!l->ready)
		return -ENOTCONN;
	uint8_t *d = dst;
	while (len) {
		uint64_t page = off / l->cfg.page, in = off % l->cfg.page;
		uint32_t n = (uint32_t)(l->cfg.page - in < len ?
					l->cfg.page - in : len);
		uint8_t *f;
		int rc = page_get(l, thr, page, &f);
		if (rc)
			return rc;
		memcpy(d, f + in, n);
		d += n;
		off += n;
		len -= n;
	}
	return 0;
}

/* Copy N bytes of SRC into data page PAGE at IN and pin the page. */
static int page_put(struct loco_oplog *l, struct loco_thread *thr,
		    uint64_t page, uint64_t in, const uint8_t *src, uint32_t n)
{
	uint8_t *f;
	if (!loco_fcache_pinned_page(&l->cache, page) &&
	    l->ndirty >= l->cfg.cache_pages - 1)
		return -ENOSPC;   /* keep a frame for reads */
	int rc = page_get(l, thr, page, &f);
	if (rc)
		return rc;
	memcpy(f + in, src, n);
	if (loco_fcache_pin(&l->cache, page))
		l->dirty[l->ndirty++] = page;
	return 0;
}

int loco_oplog_write(struct loco_oplog *l, struct loco_thread *thr,
		     uint64_t off, const void *src, uint32_t len)
{
	if (!in_data(l, off, len))
		return -EINVAL;
	if (!l->ready)
		return -ENOTCONN;
	uint64_t need = ENT_HDR + round8(len);
	if (need > l->cfg.mlog_len - l->mlog_used)
		return -ENOSPC;
	struct ent_hdr e = { .off = off, .len = len };
	uint8_t *p = l->mlog + l->mlog_used;
	memcpy(p, &e, sizeof(e));
	memcpy(p + ENT_HDR, src, len);
	memset(p + ENT_HDR + len, 0, round8(len) - len);
	const uint8_t *s = src;
	while (len) {
		uint64_t page = off / l->cfg.page, in = off % l->cfg.page;
		uint32_t n = (uint32_t)(l->cfg.page - in < len ?
					l->cfg.page - in : len);
		int rc = page_put(l, thr, page, in, s, n);
		if (rc)
			return rc;
		s += n;
		off += n;
		len -= n;
	}
	l->mlog_used += (uint32_t)need;
	l->mlog_nent++;
	return 0;
}

/* ---- commit and apply ----------------------------------------------------- */

/* Post the staged records' WRITEs (split where the ring wraps). */
static int records_post(struct loco_oplog *l, struct loco_thread *thr)
{
	uint64_t first = l->next_seq - l->nstaged;
	uint32_t done = 0;
	while (done < l->nstaged) {
		uint64_t slot = (first + done) % l->cfg.nrec;
		uint32_t n = (uint32_t)(l->cfg.nrec - slot);
		if (n > l->nstaged - done)
			n = l->nstaged - done;
		int rc = put(thr, &l->log, ring_off(l) + slot * l->cfg.rec_size,
			     l->stage + (size_t)done * l->cfg.rec_size,
			     (uint64_t)n * l->cfg.rec_size);
		if (rc)
			return rc;
		done += n;
	}
	l->stats.commits += l->nstaged > 0;
	l->stats.committed += l->nstaged;
	return 0;
}

int loco_oplog_commit(struct loco_oplog *l, struct loco_thread *thr)
{
	if (!l->ready)
		return -ENOTCONN;
	if (!l->nstaged)
		return 0;
	int rc = records_post(l, thr);
	if (!rc)
		rc = persist(l, thr);
	if (rc)
		return failed(l, rc);
	l->nstaged = 0;
	l->committed = l->next_seq;
	return 0;
}

/* Seal the staged batch: number, mark, checksum. */
static void batch_seal(struct loco_oplog *l)
{
	struct batch_hdr h = {
		.number = l->batch, .upto = l->next_seq,
		.bytes = l->mlog_used - BATCH_HDR, .nent = l->mlog_nent,
	};
	h.sum = batch_sum(&h, l->mlog + BATCH_HDR);
	memcpy(l->mlog, &h, sizeof(h));
}

/* Post the in-place WRITEs of the sealed batch in BUF. */
static int batch_place(struct loco_oplog *l, struct loco_thread *thr,
		       const uint8_t *buf)
{
	struct batch_hdr h;
	memcpy(&h, buf, sizeof(h));
	const uint8_t *p = buf + BATCH_HDR;
	for (uint32_t i = 0; i < h.nent; i++) {
		struct ent_hdr e;
		memcpy(&e, p, sizeof(e));
		int rc = put(thr, &l->data, e.off, p + ENT_HDR, e.len);
		if (rc)
			return rc;
		p += ENT_HDR + round8(e.len);
	}
	return 0;
}

int loco_oplog_apply(struct loco_oplog *l, struct loco_thread *thr)
{
	if (!l->ready)
		return -ENOTCONN;
	/* A batch without writes still moves the mark (frees ring slots). */
	if (!l->mlog_nent && l->next_seq == l->applied)
		return loco_oplog_commit(l, thr);
	batch_seal(l);
	int rc = records_post(l, thr);
	if (!rc)
		rc = put(thr, &l->log, area_off(l, l->batch), l->mlog,
			 l->mlog_used);
	/* Also completes the previous batch's in-place WRITEs from POST. */
	if (!rc)
		rc = persist(l, thr);
	if (rc)
		return failed(l, rc);
	l->stats.applies++;
	l->stats.mlog_bytes += l->mlog_used;
	l->nstaged = 0;
	l->committed = l->next_seq;
	l->applied = l->next_seq;
	l->batch++;
	uint8_t *b = l->post;
	l->post = l->mlog;
	l->mlog = b;
	rc = batch_place(l, thr, l->post);
	for (uint32_t i = 0; i < l->ndirty; i++)
		loco_fcache_unpin(&l->cache, l->dirty[i]);
	l->ndirty = 0;
	l->mlog_used = BATCH_HDR;
	l->mlog_nent = 0;
	return failed(l, rc);
}

int loco_oplog_sync(struct loco_oplog *l, struct loco_thread *thr)
{
	int rc = loco_oplog_apply(l, thr);
	return rc ? rc : failed(l, persist(l, thr));
}

/* ---- recovery ------------------------------------------------------------- */

/* Check the geometry block; format a log that was never used. */
static int geo_check(struct loco_oplog *l, struct loco_thread *thr)
{
	struct geo g, want;
	int rc = get(thr, &l->log, 0, &g, sizeof(g));
	if (rc)
		return rc;
	geo_fill(l, &want);
	if (g.magic == 0 && g.sum == 0)
		return put_now(thr, &l->log, 0, &want, sizeof(want));
	if (g.magic != OPLOG_MAGIC || g.sum != XXH3_64bits(&g, offsetof(struct geo, sum))) {
		loco_err(l->base.name, "log geometry block damaged");
		return -EIO;
	}
	if (memcmp(&g, &want, sizeof(g))) {
		loco_err(l->base.name, "log has another geometry");
		return -LOCO_EMISMATCH;
	}
	return 0;
}

/* The newest complete generation block into L->gen, L->gen_start (0, 0
 * when there is none). */
static int gen_load(struct loco_oplog *l, struct loco_thread *thr)
{
	struct gen_blk b[2];
	int rc = get(thr, &l->log, GEN_OFF, b, sizeof(b));
	if (rc)
		return rc;
	l->gen = l->gen_start = 0;
	for (unsigned i = 0; i < 2; i++) {
		if (b[i].gen > l->gen && b[i].sum == gen_sum(&b[i])) {
			l->gen = b[i].gen;
			l->gen_start = b[i].gen_start;
		}
	}
	return 0;
}

/* Start generation L->gen + 1 at GEN_START; durable at the next persist. */
static int gen_next(struct loco_oplog *l, struct loco_thread *thr,
		    uint64_t gen_start)
{
	struct gen_blk b = { .gen = l->gen + 1, .gen_start = gen_start };
	b.sum = gen_sum(&b);
	l->gen = b.gen;
	l->gen_start = gen_start;
	return put_now(thr, &l->log, GEN_OFF + (b.gen % 2) * GEN_LEN, &b,
		       sizeof(b));
}

/* Whether BUF (an area) holds a complete batch. */
static bool batch_valid(const struct loco_oplog *l, const uint8_t *buf)
{
	struct batch_hdr h;
	memcpy(&h, buf, sizeof(h));
	return h.number && h.bytes <= l->cfg.mlog_len - BATCH_HDR &&
	       h.sum == batch_sum(&h, buf + BATCH_HDR);
}

static uint64_t batch_field(const uint8_t *buf, size_t off)
{
	uint64_t v;
	memcpy(&v, buf + off, 8);
	return v;
}

/* Redo the complete batches of both areas, older first, and persist:
 * sets L->applied and L->batch. The areas go into L->mlog and L->post. */
static int batches_redo(struct loco_oplog *l, struct loco_thread *thr)
{
	uint8_t *a[2] = { l->mlog, l->post };
	int rc = get(thr, &l->log, MLOG_OFF, a[0], l->cfg.mlog_len);
	if (!rc)
		rc = get(thr, &l->log, MLOG_OFF + l->cfg.mlog_len, a[1],
			 l->cfg.mlog_len);
	if (rc)
		return rc;
	bool ok[2] = { batch_valid(l, a[0]), batch_valid(l, a[1]) };
	uint64_t num[2] = { batch_field(a[0], 0), batch_field(a[1], 0) };
	unsigned order[2] = { 0, 1 };
	if (ok[0] && ok[1] && num[0] > num[1]) {
		order[0] = 1;
		order[1] = 0;
	}
	l->applied = 0;
	l->batch = 1;
	for (unsigned k = 0; k < 2; k++) {
		unsigned i = order[k];
		if (!ok[i])
			continue;
		rc = batch_place(l, thr, a[i]);
		if (rc)
			return rc;
		l->applied = batch_field(a[i], offsetof(struct batch_hdr, upto));
		l->batch = num[i] + 1;
		l->stats.redone++;
	}
	return persist(l, thr);
}

/* Whether ring record REC is operation SEQ, committed whole. */
static bool rec_valid(const struct loco_oplog *l, const uint8_t *rec,
		      uint64_t seq)
{
	struct rec_hdr h;
	memcpy(&h, rec, sizeof(h));
	return h.seq == seq && h.gen &&
	       (seq < l->gen_start || h.gen == l->gen) &&
	       h.len <= l->cfg.rec_size - LOCO_OPLOG_REC_HDR &&
	       h.sum == rec_sum(&h, rec + sizeof(h));
}

/* The committed operations past the applied mark: read the ring into
 * RING (nrec records); *END gets the first seq that is not one. */
static int ring_scan(struct loco_oplog *l, struct loco_thread *thr,
		     uint8_t *ring, uint64_t *end)
{
	int rc = get(thr, &l->log, ring_off(l), ring,
		     (uint64_t)l->cfg.nrec * l->cfg.rec_size);
	if (rc)
		return rc;
	uint64_t s = l->applied;
	while (s - l->applied < l->cfg.nrec &&
	       rec_valid(l, ring + (s % l->cfg.nrec) * l->cfg.rec_size, s))
		s++;
	*end = s;
	return 0;
}

/* Replay operations [L->applied, END) of RING through REPLAY. */
static int replay_all(struct loco_oplog *l, struct loco_thread *thr,
		      const uint8_t *ring, uint64_t end,
		      loco_oplog_replay_fn *replay, void *arg)
{
	int rc = 0;
	l->replaying = true;
	for (uint64_t s = l->applied; s < end && !rc; s++) {
		const uint8_t *r = ring + (s % l->cfg.nrec) * l->cfg.rec_size;
		struct rec_hdr h;
		memcpy(&h, r, sizeof(h));
		l->next_seq = s;
		rc = over_half(l) ? loco_oplog_apply(l, thr) : 0;
		if (!rc && !replay) {
			loco_err(l->base.name, "operations to replay, no replay function");
			rc = -EINVAL;
		}
		if (!rc)
			rc = replay(arg, l, thr, s, h.type, r + sizeof(h), h.len);
		l->stats.replayed += !rc;
	}
	l->replaying = false;
	l->next_seq = end;
	return rc;
}

int loco_oplog_recover(struct loco_oplog *l, struct loco_thread *thr,
		       loco_oplog_replay_fn *replay, void *arg,
		       uint64_t *replayed)
{
	uint64_t end = 0, before = l->stats.replayed;
	uint8_t *ring = malloc((size_t)l->cfg.nrec * l->cfg.rec_size);
	if (!ring)
		return -ENOMEM;
	l->ready = false;
	local_reset(l);
	/* Writes THR made to a dead incarnation of the back end are reported
	 * lost once, at the first persist; that loss is what we recover from. */
	int rc = persist(l, thr);
	if (rc == -LOCO_EDOWN)
		rc = 0;
	if (!rc)
		rc = geo_check(l, thr);
	if (!rc)
		rc = gen_load(l, thr);
	if (!rc)
		rc = batches_redo(l, thr);
	if (!rc)
		rc = ring_scan(l, thr, ring, &end);
	/* The new generation is durable before any record of it is written. */
	if (!rc)
		rc = gen_next(l, thr, end);
	if (!rc)
		rc = persist(l, thr);
	l->stats.recoveries++;
	if (!rc) {
		l->ready = true;
		local_reset(l);
		rc = replay_all(l, thr, ring, end, replay, arg);
	}
	free(ring);
	l->committed = end;
	if (replayed)
		*replayed = l->stats.replayed - before;
	if (rc)
		l->ready = false;
	return rc;
}
