/* SPDX-License-Identifier: MIT */
/* loco-rbbench: ringbuffer broadcast throughput (LOCO §5.4). The lowest
 * compute node writes messages of random size in [--min, --max] bytes to
 * the ring "rb" for S seconds, posting every --batch messages (the others
 * are staged with LOCO_RB_MORE); every other compute node receives them.
 * Each message carries its number and its send time, so a reader checks
 * the order and measures delivery latency (one host: one clock). The
 * writer ends with a marker message and waits until every reader
 * acknowledged it.
 *
 * JSON, one line per node: the writer's ops are messages sent, p50/p99 the
 * time of one send call; a reader's are messages received, p50/p99 the
 * delivery latency; both with MB/s ("mb_per_s", payload bytes).
 *
 *	tools/loco-run -n 4 -- loco-rbbench --duration 5 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apps/common/bench.h"
#include "apps/common/local.h"
#include "apps/common/opts.h"
#include <loco/channels/barrier.h>
#include <loco/channels/ringbuffer.h>

#define LAT_CAP (1u << 22)
#define HDR_BYTES 16                 /* number, send time */
#define END_MARK UINT64_MAX
#define PROGRESS_NS 1000000000ull

struct opts {
	double duration;
	uint32_t min, max, batch;
	uint64_t ring;
};

struct bench {
	struct opts o;
	struct loco_mgr *mgr;
	struct loco_thread *thr;
	struct loco_ringbuffer rb;
	struct loco_barrier bar;
	unsigned nodes;
	uint64_t msgs, bytes;
	struct bench_lat lat;
	struct loco_stats st;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: loco-rbbench [--duration S] [--min B] [--max B] "
		"[--batch N] [--ring BYTES]\n"
		"  (plus the node options --id/--hosts/--transport/--timeout-ms/\n"
		"  --arena-mb/--cpu-bind)\n"
		"The lowest compute node broadcasts messages of random size in\n"
		"[min, max] (default 16..1024 bytes) for S seconds (default 2)\n"
		"through a ring of BYTES (default 1 MiB), posting every N messages\n"
		"(default 8); the others receive. One JSON line per node.\n");
}

static int parse_one(void *arg, int c, const char *s, char *expect)
{
	struct opts *o = arg;
	switch (c) {
	case 'd':
		return bench_parse_duration(s, &o->duration, expect);
	case 'a':
		return bench_parse_uint(s, HDR_BYTES, UINT32_MAX, &o->min, expect);
	case 'b':
		return bench_parse_uint(s, HDR_BYTES, UINT32_MAX, &o->max, expect);
	case 'n':
		return bench_parse_uint(s, 1, UINT32_MAX, &o->batch, expect);
	case 'r':
		/* loco_ringbuffer_init's sizes. */
		if (!bench_parse_u64(s, LOCO_RB_MIN_SIZE, UINT32_MAX - 7, &o->ring,
				     expect) && o->ring % 8 == 0)
			return 0;
		snprintf(expect, BENCH_EXPECT_MAX, "a multiple of 8 in %u..%u",
			 LOCO_RB_MIN_SIZE, UINT32_MAX - 7);
		return -1;
	default:
		return -1;
	}
}

static int parse(void *arg, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "duration", required_argument, NULL, 'd' },
		{ "min", required_argument, NULL, 'a' },
		{ "max", required_argument, NULL, 'b' },
		{ "batch", required_argument, NULL, 'n' },
		{ "ring", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts *o = &((struct bench *)arg)->o;
	/* The ring's largest message (ringbuffer.h): a quarter, less a
	 * record header. */
	uint64_t fit;
	int rc = bench_getopt(argc, argv, "d:h", lo, parse_one, o,
			      "loco-rbbench");
	if (rc)
		return rc;
	if (o->min > o->max)
		return bench_opt_error("loco-rbbench", "--min %u is above --max %u",
				       o->min, o->max);
	fit = loco_ringbuffer_max_msg_for(o->ring);
	if (o->max > fit)
		return bench_opt_error("loco-rbbench", "--max %u does not fit a "
				       "--ring of %" PRIu64 " bytes (messages "
				       "up to %" PRIu64 " bytes)", o->max,
				       o->ring, fit);
	return 0;
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* ---- writer ------------------------------------------------------------- */

static int send_one(struct bench *b, uint8_t *buf, uint64_t n, uint32_t len,
		    unsigned flags, uint64_t *pos)
{
	uint64_t t0 = loco_now_ns();
	memcpy(buf, &n, 8);
	memcpy(buf + 8, &t0, 8);
	int rc = loco_ringbuffer_send(&b->rb, b->thr, buf, len, flags, pos, -1);
	bench_lat_add(&b->lat, loco_now_ns() - t0);
	return rc;
}

static int write_all(struct bench *b)
{
	uint8_t *buf = calloc(1, b->o.max);
	uint64_t s = 88172645463325252ull, end = loco_now_ns() +
		     (uint64_t)(b->o.duration * 1e9), pos, last = loco_now_ns();
	int rc = buf ? 0 : -ENOMEM;
	for (uint64_t n = 0; !rc && loco_now_ns() < end; n++) {
		uint32_t len = b->o.min + (uint32_t)(rnd(&s) % (b->o.max - b->o.min + 1));
		unsigned flags = (n + 1) % b->o.batch ? LOCO_RB_MORE : 0;
		rc = send_one(b, buf, n, len, flags, NULL);
		b->msgs++;
		b->bytes += len;
		if (loco_now_ns() - last >= PROGRESS_NS) {
			last = loco_now_ns();
			fprintf(stderr, "rbbench: %llu messages\n",
				(unsigned long long)b->msgs);
		}
	}
	if (!rc)
		rc = send_one(b, buf, END_MARK, HDR_BYTES, 0, &pos);
	if (!rc)
		rc = loco_ringbuffer_wait_acked(&b->rb, b->thr, pos, -1);
	free(buf);
	return rc;
}

/* ---- reader ------------------------------------------------------------- */

static int read_all(struct bench *b)
{
	uint8_t *buf = malloc(b->o.max);
	int rc = buf ? 0 : -ENOMEM;
	for (uint64_t want = 0; !rc; want++) {
		uint32_t len;
		uint64_t n, sent;
		rc = loco_ringbuffer_recv(&b->rb, b->thr, buf, b->o.max, &len, -1);
		if (rc)
			break;
		memcpy(&n, buf, 8);
		memcpy(&sent, buf + 8, 8);
		if (n == END_MARK)
			break;
		if (n != want) {
			fprintf(stderr, "rbbench: message %llu, expected %llu\n",
				(unsigned long long)n, (unsigned long long)want);
			rc = -EPROTO;
		}
		bench_lat_add(&b->lat, loco_now_ns() - sent);
		b->msgs++;
		b->bytes += len;
	}
	if (!rc)
		rc = loco_ringbuffer_ack(&b->rb, b->thr);
	free(buf);
	return rc;
}

/* ---- main ---------------------------------------------------------------- */

static void report(struct bench *b, double secs)
{
	bool writer = loco_ringbuffer_is_writer(&b->rb);
	struct bench_result r = {
		.app = "rbbench", .transport = loco_mgr_transport(b->mgr),
		.nodes = b->nodes, .threads = 1, .duration_s = secs,
		.ops = b->msgs, .p50_us = bench_lat_pct_us(&b->lat, 50),
		.p99_us = bench_lat_pct_us(&b->lat, 99), .stats = b->st,
	};
	bench_json_begin(stdout, &r);
	printf(",\"node\":%u,\"role\":\"%s\",\"mb_per_s\":%.1f,\"min\":%u,"
	       "\"max\":%u,\"batch\":%u,\"ring\":%llu,\"posts\":%llu,"
	       "\"full\":%llu,\"retried\":%llu", loco_mgr_id(b->mgr),
	       writer ? "writer" : "reader", (double)b->bytes / 1e6 / secs,
	       b->o.min, b->o.max, b->o.batch, (unsigned long long)b->o.ring,
	       (unsigned long long)b->rb.st.posts,
	       (unsigned long long)b->rb.st.full,
	       (unsigned long long)b->rb.st.torn);
	bench_json_end(stdout);
}

static int run(struct bench *b)
{
	struct loco_stats s0;
	int rc = loco_mgr_wait_ready(b->mgr, -1);
	if (!rc)
		rc = loco_barrier_wait(&b->bar, b->thr, -1);
	if (rc)
		return rc;
	loco_thread_stats(b->thr, &s0);
	uint64_t t0 = loco_now_ns();
	rc = loco_ringbuffer_is_writer(&b->rb) ? write_all(b) : read_all(b);
	double secs = (double)(loco_now_ns() - t0) / 1e9;
	loco_thread_stats(b->thr, &b->st);
	bench_stats_sub(&b->st, &s0);
	if (!rc)
		report(b, secs);
	/* Nobody leaves while others still use its memory. */
	int brc = loco_barrier_wait(&b->bar, b->thr, -1);
	return rc ? rc : brc;
}

static int bench_run(void *arg, struct loco_mgr *mgr)
{
	struct bench *b = arg;
	uint64_t members = bench_members(mgr);
	b->mgr = mgr;
	b->nodes = (unsigned)__builtin_popcountll(members);
	int rc = loco_thread_create(b->mgr, &b->thr);
	if (rc)
		return rc;
	rc = bench_lat_init(&b->lat, LAT_CAP);
	if (!rc)
		rc = loco_ringbuffer_init(&b->rb, b->mgr, NULL, "rb",
					  (uint32_t)__builtin_ctzll(members),
					  b->o.ring, 0);
	if (rc)
		goto destroy_thr;
	rc = loco_barrier_init(&b->bar, b->mgr, NULL, "bar", 0);
	if (!rc) {
		rc = run(b);
		/* Posts and pushes complete before the channels go. */
		int frc = loco_fence(b->thr, LOCO_FENCE_THREAD, 0);
		rc = rc ? rc : frc;
		loco_barrier_fini(&b->bar);
	}
	loco_ringbuffer_fini(&b->rb);
destroy_thr:
	bench_lat_fini(&b->lat);
	loco_thread_destroy(b->thr);
	return rc;
}

static const struct local_prog prog = {
	.name = "loco-rbbench", .usage = usage, .parse = parse, .run = bench_run,
};

int main(int argc, char **argv)
{
	struct bench b = { .o = { .duration = 2, .min = HDR_BYTES, .max = 1024,
				  .batch = 8, .ring = 1 << 20 } };
	return local_main(&prog, &b, argc, argv);
}
