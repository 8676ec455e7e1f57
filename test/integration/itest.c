/* SPDX-License-Identifier: MIT */
/* loco-itest: multi-process checks run through tools/loco-run.
 *
 *   two-node [--mismatch]  the lower id offers region t2.data; the other
 *                          joins and does READ, WRITE, CAS and FAA on it.
 *                          --mismatch: the joiner expects another size and
 *                          both must fail (exit 3).
 *   memnode-kill SECS VICTIM
 *                          every compute node but the highest writes
 *                          committed records to its region on the memory
 *                          node, each holding a lock file in LOCO_RUN_DIR
 *                          while it lives. It prints `committed 64
 *                          records` once (the launcher kills VICTIM at
 *                          that line: --kill VICTIM@after:VICTIM:...);
 *                          VICTIM writes until it is killed (60 s at
 *                          most), the others for SECS seconds, then mark
 *                          their log done. The highest attaches once
 *                          every writer's lock is free (all ended) and
 *                          checks every writer's records: VICTIM's log
 *                          has no done mark (it was killed) and every
 *                          record it committed is intact.
 *   durable-log SECS [--skip-persist]
 *                          every compute node appends records to its log
 *                          on a durable memory node: the record, a
 *                          persist, the commit word, a persist, then it
 *                          counts the record acknowledged. Once every
 *                          node has 64 records acknowledged, the lowest
 *                          prints `every writer has 64 records
 *                          acknowledged` (the launcher's restart is aimed
 *                          at that line); each goes on for SECS seconds
 *                          and until it has seen the memory node go down
 *                          (60 s at most). When
 *                          the memory node dies (the launcher restarts
 *                          it) operations fail with -LOCO_EDOWN; the node
 *                          waits for it, checks that the durable commit
 *                          word is at least its last acknowledged record
 *                          and every committed record is intact, and goes
 *                          on from there. --skip-persist leaves out the
 *                          commit's persist point (the deliberate bug): a
 *                          power cut then loses acknowledged records.
 *
 * Exit 0 on success, 1 on a failed check, 3 on a join error. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <loco/channel.h>

#define DATA_LEN 4096
#define DONE_OFF 4088
#define LOG_DONE_OFF 8       /* memnode-kill: a writer that ended on its own */
#define VICTIM_MAX_S 60.0
#define WRITER_WAIT_S 60.0
#define LOG_SLOTS 1000
#define LOG_LEN (64 + LOG_SLOTS * 64)

#define CHECK(cond, ...)                                                    \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "itest: check failed: %s: ", #cond); \
			fprintf(stderr, __VA_ARGS__);                       \
			fputc('\n', stderr);                                \
			return 1;                                           \
		}                                                           \
	} while (0)

struct ctx {
	bool late;
	struct loco_opts opts;
	struct loco_mgr *mgr;
	struct loco_thread *thr;
};

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* ---- two-node ------------------------------------------------------------ */

static int owner_side(struct ctx *c, struct loco_channel *ch)
{
	uint64_t *data = loco_channel_local(ch, "data")->base;
	uint64_t deadline = loco_now_ns() + 10000000000ull;
	/* Acquire pairs with the joiner's release WRITE of the done mark. */
	while (!__atomic_load_n(&data[DONE_OFF / 8], __ATOMIC_ACQUIRE)) {
		CHECK(loco_now_ns() < deadline, "joiner never finished");
		sleep_ms(1);
	}
	CHECK(memcmp((char *)data + 1024, "written by the joiner", 22) == 0,
	      "WRITE not visible at the owner");
	CHECK(data[0] == 1000 + 5, "FAA result at owner: %llu",
	      (unsigned long long)data[0]);
	CHECK(data[1] == 77, "CAS result at owner: %llu",
	      (unsigned long long)data[1]);
	printf("itest: node %u (owner): region updated correctly\n",
	       loco_mgr_id(c->mgr));
	return 0;
}

static int joiner_side(struct ctx *c, const struct loco_rregion *rr)
{
	uint64_t v[2], old;
	char text[32] = "written by the joiner";
	CHECK(loco_read(c->thr, rr, 0, v, 16) == 0, "read");
	CHECK(v[0] == 1000 && v[1] == 2000, "initial contents %llu %llu",
	      (unsigned long long)v[0], (unsigned long long)v[1]);
	CHECK(loco_write(c->thr, rr, 1024, text, sizeof(text)) == 0, "write");
	CHECK(loco_faa(c->thr, rr, 0, 5, &old) == 0 && old == 1000, "faa old %llu",
	      (unsigned long long)old);
	CHECK(loco_cas(c->thr, rr, 8, 1, 77, &old) == 0 && old == 2000,
	      "failing cas");
	CHECK(loco_cas(c->thr, rr, 8, 2000, 77, &old) == 0 && old == 2000,
	      "cas old %llu", (unsigned long long)old);
	CHECK(loco_read(c->thr, rr, 8, v, 8) == 0 && v[0] == 77, "read back");
	CHECK(loco_write(c->thr, rr, DATA_LEN, v, 8) == -EINVAL, "bounds");
	uint64_t one = 1;
	/* Fence, then the done mark: the owner sees everything before it. */
	CHECK(loco_fence(c->thr, LOCO_FENCE_PAIR, rr->node) == 0, "fence");
	CHECK(loco_write(c->thr, rr, DONE_OFF, &one, 8) == 0, "done mark");
	CHECK(loco_fence(c->thr, LOCO_FENCE_PAIR, rr->node) == 0, "fence");
	printf("itest: node %u (joiner): READ, WRITE, CAS, FAA ok\n",
	       loco_mgr_id(c->mgr));
	return 0;
}

static int two_node(struct ctx *c, bool mismatch)
{
	uint64_t peers = loco_mgr_compute_peers(c->mgr);
	uint32_t self = loco_mgr_id(c->mgr);
	CHECK(__builtin_popcountll(peers) == 1, "needs exactly 2 compute nodes");
	uint32_t other = (uint32_t)__builtin_ctzll(peers);
	bool owner = self < other;
	struct loco_channel ch;
	struct loco_region *reg;
	int idx = -1, rc = loco_channel_init(&ch, c->mgr, NULL, "t2", 0, NULL);
	if (!rc && owner)
		rc = loco_channel_add_region(&ch, "data", DATA_LEN, &reg);
	if (!rc && owner) {
		((uint64_t *)reg->base)[0] = 1000;
		((uint64_t *)reg->base)[1] = 2000;
	}
	if (!rc && !owner)
		rc = idx = loco_channel_expect(&ch, "data",
					       DATA_LEN + (mismatch ? 8 : 0),
					       UINT64_C(1) << other);
	if (rc >= 0)
		rc = loco_channel_join(&ch);
	if (!rc)
		rc = loco_mgr_wait_ready(c->mgr, -1);
	if (rc) {
		fprintf(stderr, "itest: node %u: join failed: %s\n", self,
			loco_strerror(rc));
		loco_channel_fini(&ch);
		return rc == -LOCO_EMISMATCH ? 3 : 1;
	}
	rc = owner ? owner_side(c, &ch) :
		     joiner_side(c, loco_channel_remote(&ch, (unsigned)idx, other));
	loco_channel_fini(&ch);
	return rc;
}

/* ---- memory node ---------------------------------------------------------- */

static void record_fill(uint64_t rec[8], uint64_t seq)
{
	for (int k = 0; k < 8; k++)
		rec[k] = seq * 8 + (uint64_t)k;
}

/* $LOCO_RUN_DIR/itest.alive.ID: the lock file of writer ID (LEN bytes). */
static int alive_path(uint32_t id, const char *suffix, char *path, size_t len)
{
	const char *dir = getenv("LOCO_RUN_DIR");
	if (!dir || !*dir) {
		fprintf(stderr, "itest: memnode-kill needs LOCO_RUN_DIR "
			"(run it under tools/loco-run)\n");
		return -EINVAL;
	}
	snprintf(path, len, "%s/itest.alive.%u%s", dir, id, suffix);
	return 0;
}

/* Writer ID takes its lock file and holds it while it lives: made under
 * another name and locked before the rename, so that the reader never
 * finds it unlocked before the writer ends. */
static int alive_hold(uint32_t id)
{
	char tmp[4200], path[4200];
	if (alive_path(id, ".tmp", tmp, sizeof(tmp)) ||
	    alive_path(id, "", path, sizeof(path)))
		return -EINVAL;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0, "%s: %s", tmp, strerror(errno));
	CHECK(flock(fd, LOCK_EX) == 0, "lock %s: %s", tmp, strerror(errno));
	CHECK(rename(tmp, path) == 0, "rename to %s: %s", path, strerror(errno));
	return 0;           /* fd stays open (and locked) until the end */
}

/* Until writer ID has ended (its lock file exists and is free). */
static int alive_wait_gone(uint32_t id)
{
	char path[4200];
	if (alive_path(id, "", path, sizeof(path)))
		return 1;
	uint64_t deadline = loco_now_ns() + (uint64_t)(WRITER_WAIT_S * 1e9);
	for (;;) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			int rc = flock(fd, LOCK_EX | LOCK_NB);
			close(fd);
			if (!rc)
				return 0;
		}
		CHECK(loco_now_ns() < deadline, "writer %u still running after "
		      "%g s", id, WRITER_WAIT_S);
		sleep_ms(10);
	}
}

static int memnode_writer(struct ctx *c, double secs, uint32_t victim)
{
	char name[64];
	struct loco_rregion log;
	uint32_t self = loco_mgr_id(c->mgr);
	bool killed = self == victim;
	snprintf(name, sizeof(name), "itest.log%u", self);
	int mem = loco_mgr_first_memnode(c->mgr);
	CHECK(mem >= 0, "no memory node in the hosts file");
	CHECK(loco_region_open(c->mgr, (uint32_t)mem, name, LOG_LEN, &log) == 0,
	      "open %s", name);
	if (alive_hold(self))
		return 1;
	uint64_t end = loco_now_ns() + (uint64_t)((killed ? VICTIM_MAX_S : secs) *
						  1e9), seq = 0;
	while (loco_now_ns() < end) {
		uint64_t rec[8];
		seq++;
		record_fill(rec, seq);
		uint64_t slot = 64 + (seq % LOG_SLOTS) * 64;
		CHECK(loco_write(c->thr, &log, slot, rec, 64) == 0, "record");
		/* Record placed before the commit word that publishes it. */
		CHECK(loco_fence(c->thr, LOCO_FENCE_PAIR, log.node) == 0, "fence");
		CHECK(loco_write(c->thr, &log, 0, &seq, 8) == 0, "commit");
		if (seq == 64) {
			/* The launcher's kill is aimed at this line. */
			printf("itest: node %u committed 64 records\n", self);
			fflush(stdout);
		}
	}
	CHECK(!killed, "node %u was never killed (%g s)", self, VICTIM_MAX_S);
	uint64_t one = 1;
	/* Fence: every commit placed before the done mark. */
	CHECK(loco_fence(c->thr, LOCO_FENCE_PAIR, log.node) == 0, "fence");
	CHECK(loco_write(c->thr, &log, LOG_DONE_OFF, &one, 8) == 0, "done mark");
	CHECK(loco_fence(c->thr, LOCO_FENCE_PAIR, log.node) == 0, "fence");
	printf("itest: node %u wrote %llu records\n", self,
	       (unsigned long long)seq);
	return 0;
}

static int check_log(struct ctx *c, const struct loco_rregion *log,
		     uint64_t *committed)
{
	uint64_t seq, rec[8], want[8];
	int rc = loco_read(c->thr, log, 0, &seq, 8);
	CHECK(rc == 0, "read commit: %s", loco_strerror(rc));
	uint64_t first = seq > LOG_SLOTS - 2 ? seq - (LOG_SLOTS - 2) : 1;
	for (uint64_t s = first; s <= seq; s++) {
		rc = loco_read(c->thr, log, 64 + (s % LOG_SLOTS) * 64, rec, 64);
		CHECK(rc == 0, "read record: %s", loco_strerror(rc));
		record_fill(want, s);
		CHECK(memcmp(rec, want, 64) == 0, "record %llu of %llu is corrupt",
		      (unsigned long long)s, (unsigned long long)seq);
	}
	*committed = seq;
	return 0;
}

/* Every writer has ended: each committed records, all intact; VICTIM's
 * log has no done mark (it was killed), the others' have one. */
static int memnode_late(struct ctx *c, int uid_self, uint32_t victim)
{
	const struct loco_hosts *h = loco_mgr_hosts(c->mgr);
	int mem = loco_mgr_first_memnode(c->mgr);
	CHECK(mem >= 0, "no memory node");
	unsigned checked = 0;
	for (uint32_t id = 0; id <= h->max_id; id++) {
		if (!h->node[id].present || h->node[id].role != LOCO_ROLE_COMPUTE ||
		    (int)id == uid_self)
			continue;
		char name[64];
		struct loco_rregion log;
		uint64_t n, done;
		snprintf(name, sizeof(name), "itest.log%u", id);
		CHECK(loco_region_open(c->mgr, (uint32_t)mem, name, LOG_LEN,
				       &log) == 0, "open %s", name);
		CHECK(check_log(c, &log, &n) == 0, "log of node %u", id);
		CHECK(n > 0, "node %u never committed a record", id);
		CHECK(loco_read(c->thr, &log, LOG_DONE_OFF, &done, 8) == 0, "read");
		CHECK((done != 0) == (id != victim), "node %u %s", id, done ?
		      "finished: it was not killed" : "ended without its done mark");
		printf("itest: node %u %s at %llu records, all intact\n", id,
		       id == victim ? "killed" : "finished",
		       (unsigned long long)n);
		checked++;
	}
	CHECK(checked > 1, "no writer besides the victim");
	return 0;
}

/* memnode-kill: the reader attaches once every other compute node (a
 * writer) has ended. */
static int wait_writers(struct ctx *c)
{
	struct loco_hosts h;
	char err[512];
	CHECK(loco_hosts_load(c->opts.hosts_path, &h, err, sizeof(err)) == 0,
	      "%s", err);
	for (uint32_t id = 0; id <= h.max_id; id++)
		if (h.node[id].present && h.node[id].role == LOCO_ROLE_COMPUTE &&
		    (int)id != c->opts.node_id && alive_wait_gone(id))
			return 1;
	return 0;
}

/* ---- durable memory node ----------------------------------------------------- */

struct dlog {
	struct ctx *c;
	struct loco_rregion log;
	uint64_t acked;           /* last record acknowledged */
	unsigned outages;
	bool skip_persist;
};

/* The persistence point (--skip-persist: only a fence, the bug). */
static int dlog_persist(struct dlog *d)
{
	struct loco_thread *t = d->c->thr;
	return d->skip_persist ? loco_fence(t, LOCO_FENCE_PAIR, d->log.node) :
	       loco_persist(t, d->log.node);
}

/* Append record SEQ and commit it; 0, or the error of the op that failed
 * (the record is then not acknowledged). */
static int dlog_append(struct dlog *d, uint64_t seq)
{
	uint64_t rec[8];
	struct loco_thread *t = d->c->thr;
	record_fill(rec, seq);
	int rc = loco_write(t, &d->log, 64 + (seq % LOG_SLOTS) * 64, rec, 64);
	if (!rc)
		rc = dlog_persist(d);
	if (!rc)
		rc = loco_write(t, &d->log, 0, &seq, 8);
	return rc ? rc : dlog_persist(d);
}

/* The node is back: what it kept must hold every acknowledged record,
 * and no more than the one record that was IN_FLIGHT (made durable, its
 * acknowledgement cut off by the outage: durable, it counts from now). */
static int dlog_recover(struct dlog *d, bool in_flight, uint64_t *seq)
{
	uint64_t commit = 0;
	int rc = loco_peer_wait(d->c->mgr, d->log.node, 30000);
	CHECK(rc == 0, "memory node %u did not come back: %s", d->log.node,
	      loco_strerror(rc));
	CHECK(check_log(d->c, &d->log, &commit) == 0, "log after the restart");
	CHECK(commit >= d->acked, "acknowledged record %llu lost: the durable "
	      "commit word says %llu", (unsigned long long)d->acked,
	      (unsigned long long)commit);
	CHECK(commit <= d->acked + in_flight, "the durable commit word says "
	      "%llu after %llu records acknowledged (%s in flight)",
	      (unsigned long long)commit, (unsigned long long)d->acked,
	      in_flight ? "one" : "none");
	d->outages++;
	d->acked = commit;
	*seq = commit;
	return 0;
}

/* The memory node went down while this node looks at the others' logs
 * (the restart is aimed at the lowest node's line, and a slower node may
 * still be here): the outage this node must see, checked as one seen by
 * an append (its own records all kept; none was in flight). */
static int dlog_wait_up(struct dlog *d)
{
	uint64_t commit;
	return dlog_recover(d, false, &commit);
}

/* Until every compute node's log on the memory node commits 64 records;
 * then the lowest node says so (the launcher's restart waits for it). */
static int dlog_all_running(struct dlog *d)
{
	const struct loco_hosts *h = loco_mgr_hosts(d->c->mgr);
	uint32_t self = loco_mgr_id(d->c->mgr), lowest = self;
	uint64_t deadline = loco_now_ns() + 30000000000ull;
	for (uint32_t id = 0; id <= h->max_id; id++) {
		if (!h->node[id].present || h->node[id].role != LOCO_ROLE_COMPUTE ||
		    id == self)
			continue;
		char name[64];
		struct loco_rregion log;
		uint64_t seq = 0;
		lowest = id < lowest ? id : lowest;
		snprintf(name, sizeof(name), "itest.dlog%u", id);
		int rc;
		while ((rc = loco_region_open(d->c->mgr, d->log.node, name,
					      LOG_LEN, &log)) == -LOCO_EDOWN)
			CHECK(dlog_wait_up(d) == 0, "open %s", name);
		CHECK(rc == 0, "open %s: %s", name, loco_strerror(rc));
		while (seq < 64) {
			while ((rc = loco_read(d->c->thr, &log, 0, &seq, 8)) ==
			       -LOCO_EDOWN)
				CHECK(dlog_wait_up(d) == 0, "read %s", name);
			CHECK(rc == 0, "read %s: %s", name, loco_strerror(rc));
			CHECK(loco_now_ns() < deadline, "node %u has not committed "
			      "64 records in 30 s", id);
			sleep_ms(1);
		}
	}
	if (self == lowest) {
		printf("itest: every writer has 64 records acknowledged\n");
		fflush(stdout);
	}
	return 0;
}

static int durable_log(struct ctx *c, double secs, bool skip_persist)
{
	char name[64];
	struct dlog d = { .c = c, .skip_persist = skip_persist };
	int mem = loco_mgr_first_memnode(c->mgr);
	CHECK(mem >= 0, "no memory node in the hosts file");
	snprintf(name, sizeof(name), "itest.dlog%u", loco_mgr_id(c->mgr));
	CHECK(loco_region_open(c->mgr, (uint32_t)mem, name, LOG_LEN, &d.log) == 0,
	      "open %s", name);
	CHECK(loco_peer_durable(c->mgr, (uint32_t)mem), "node %d is not durable",
	      mem);
	uint64_t t0 = loco_now_ns(), seq = 0;
	uint64_t end = t0 + (uint64_t)(secs * 1e9), last = t0 + 60000000000ull;
	while (loco_now_ns() < end || (!d.outages && loco_now_ns() < last)) {
		int rc = dlog_append(&d, seq + 1);
		if (!rc) {
			d.acked = ++seq;
			if (seq == 64 && !d.outages && dlog_all_running(&d))
				return 1;
			continue;
		}
		CHECK(rc == -LOCO_EDOWN, "record %llu: %s", (unsigned long long)seq + 1,
		      loco_strerror(rc));
		if (dlog_recover(&d, true, &seq))
			return 1;
	}
	uint64_t commit = 0;
	CHECK(check_log(c, &d.log, &commit) == 0 && commit == d.acked,
	      "final log: commit %llu, acknowledged %llu",
	      (unsigned long long)commit, (unsigned long long)d.acked);
	printf("itest: node %u: %llu records acknowledged, %u outage(s), all "
	       "durable\n", loco_mgr_id(c->mgr), (unsigned long long)d.acked,
	       d.outages);
	CHECK(d.outages > 0, "the memory node never went down");
	return 0;
}

/* ---- main ------------------------------------------------------------------ */

static int start(struct ctx *c)
{
	if (loco_mgr_create(&c->opts, &c->mgr))
		return 1;
	if (loco_thread_create(c->mgr, &c->thr)) {
		loco_mgr_destroy(c->mgr);
		return 1;
	}
	return 0;
}

static int dispatch(struct ctx *c, int argc, char **argv)
{
	const char *cmd = argv[1];
	if (!strcmp(cmd, "two-node"))
		return two_node(c, argc > 2 && !strcmp(argv[2], "--mismatch"));
	if (!strcmp(cmd, "durable-log"))
		return durable_log(c, atof(argv[2]), argc > 3 &&
				   !strcmp(argv[3], "--skip-persist"));
	uint32_t victim = (uint32_t)atoi(argv[3]);
	if (c->late)
		return memnode_late(c, (int)loco_mgr_id(c->mgr), victim);
	return memnode_writer(c, atof(argv[2]), victim);
}

/* memnode-kill: the highest compute id is the late reader. */
static int late_reader(struct ctx *c)
{
	struct loco_hosts h;
	char err[512];
	if (loco_hosts_load(c->opts.hosts_path, &h, err, sizeof(err)))
		return 0;
	int top = -1;
	for (uint32_t id = 0; id <= h.max_id; id++)
		if (h.node[id].present && h.node[id].role == LOCO_ROLE_COMPUTE)
			top = (int)id;
	return top == c->opts.node_id;
}

int main(int argc, char **argv)
{
	struct ctx c = { .late = false };
	char err[512];
	if (loco_opts_parse(&c.opts, &argc, argv, err, sizeof(err))) {
		fprintf(stderr, "itest: %s\n", err);
		return 2;
	}
	bool two = argc >= 2 && !strcmp(argv[1], "two-node");
	bool kill = argc == 4 && !strcmp(argv[1], "memnode-kill");
	bool dlog = argc >= 3 && !strcmp(argv[1], "durable-log");
	if (!two && !kill && !dlog) {
		fprintf(stderr, "usage: loco-itest two-node [--mismatch] | "
			"memnode-kill SECS VICTIM | durable-log SECS "
			"[--skip-persist]\n");
		return 2;
	}
	c.late = kill && late_reader(&c);
	if (c.late && wait_writers(&c))
		return 1;           /* attach late, after the kill, on purpose */
	if (start(&c))
		return 1;
	int rc = dispatch(&c, argc, argv);
	loco_thread_destroy(c.thr);
	loco_mgr_destroy(c.mgr);
	return rc;
}
