/* SPDX-License-Identifier: MIT */
#include <loco/rtx/crash.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <loco/log.h>
#include "rtx/internal.h"

const char *const loco_crash_points[] = {
	"rtx.after_log",        /* log written, no lock taken yet */
	"rtx.mid_log",          /* log WRITE placed up to its state word */
	"rtx.after_lock",       /* write set locked */
	"rtx.after_validate",   /* read set validated, log still INIT */
	"rtx.after_doing",      /* log DOING, nothing installed */
	"rtx.mid_install",      /* first data pointer installed, not the rest */
	"rtx.before_release",   /* everything installed, locks held */
	"rtx.mid_release",      /* first lock released, not the rest */
	"rtx.before_done",      /* locks released, log still DOING */
	"rtx.mid_abort",        /* log ABORT, locks still held */
	"rtx.opt1_after_lock",  /* no-log commit: locked, not installed */
	"rtx.opt1_installed",   /* no-log commit: installed, lock held */
	"rtx.prelock_held",     /* OPT2 pre-lock taken during execution */
	"rtx.repair_after_steal", /* repairer holds a stolen lock */
	"rtx.repair_after_take",  /* repairer took a DOING log's repair lease */
	"rtx.repair_mid_abort",   /* repairer set ABORT, locks still held */
	"rtx.alloc_after_claim",  /* a chunk claimed, its bitmap word not read */
	"rtx.update_locked",    /* read for update: log INIT, locked, new data
				 * not written (the application computes) */
	"rtx.update_data",      /* its commit: new data written, log INIT */
	NULL,
};

#define CRASH_MAX 8
#define CRASH_TABLES 4

/* Point tables: rtx's own, then those of the layers above that register
 * theirs (loco_crash_register). */
static const char *const *tables[CRASH_TABLES] = { loco_crash_points };
static unsigned ntables = 1;

/* One armed point: its name (from loco_crash_points), the hit that
 * crashes, and the hits so far in this process. */
struct crash_arm {
	const char *point;
	long after;
	_Atomic long hits;
};

enum { CRASH_UNREAD, CRASH_NONE, CRASH_SOME };

/* internal.h: 0 once we know no point can act here (the environment
 * read, nothing armed, no hook). */
_Atomic int rtx_crash_gate_ = 1;

static struct {
	pthread_once_t once;
	_Atomic int state;          /* enum: whether any point is armed here */
	unsigned n;
	struct crash_arm arm[CRASH_MAX];
	/* Plain on purpose: set while no transaction runs (see internal.h),
	 * read on every crash point without a barrier. */
	rtx_crash_hook hook;
	void *hook_arg;
	int sig;                    /* SIGKILL or SIGSTOP (crash_init) */
} crash = { .once = PTHREAD_ONCE_INIT, .state = CRASH_UNREAD };

/* The gate from the table and the hook: open while the environment is
 * unread (the next point reads it), a point is armed or a hook is set. */
static void gate_update(void)
{
	/* Relaxed: the table and hook are set before any transaction that
	 * reads the gate (crash_init's release, internal.h's rule for
	 * hooks); a stale 1 only costs a call. */
	int st = atomic_load_explicit(&crash.state, memory_order_relaxed);
	atomic_store_explicit(&rtx_crash_gate_,
			      st != CRASH_NONE || crash.hook != NULL,
			      memory_order_relaxed);
}

void rtx_crash_set_hook(rtx_crash_hook fn, void *arg)
{
	crash.hook = fn;
	crash.hook_arg = arg;
	gate_update();
}

static const char *known_in(const char *const *table, const char *name,
			    size_t len)
{
	for (unsigned i = 0; table[i]; i++)
		if (strlen(table[i]) == len && !strncmp(table[i], name, len))
			return table[i];
	return NULL;
}

static const char *known_point(const char *name, size_t len)
{
	const char *p = NULL;
	for (unsigned t = 0; !p && t < ntables; t++)
		p = known_in(tables[t], name, len);
	return p;
}

int loco_crash_register(const char *const *points)
{
	for (unsigned t = 0; t < ntables; t++)
		if (tables[t] == points)
			return 0;
	if (ntables == CRASH_TABLES)
		return -ENOSPC;
	tables[ntables++] = points;
	return 0;
}

/* True if LIST (node ids separated by SEP) holds this node's id; an
 * empty or absent LIST holds every node. */
static bool node_listed(const char *list, size_t len, char sep)
{
	const char *self = getenv("LOCO_NODE_ID");
	if (!list || !len)
		return true;
	if (!self)
		return false;
	long id = strtol(self, NULL, 10);
	for (const char *p = list, *e = list + len; p < e;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p || end > e)
			return false;
		if (v == id)
			return true;
		p = end < e && *end == sep ? end + 1 : e;
	}
	return false;
}

static long default_after(void)
{
	const char *after = getenv("LOCO_CRASH_AFTER");
	return after && *after ? strtol(after, NULL, 10) : 1;
}

/* Arm one entry POINT[@NODES][:N] (NODES separated by '+'); without @ the
 * nodes are LOCO_CRASH_NODES, without :N the count LOCO_CRASH_AFTER. */
static void arm_one(const char *ent, size_t len)
{
	const char *at = memchr(ent, '@', len), *colon = memchr(ent, ':', len);
	const char *name_end = at ? at : colon ? colon : ent + len;
	const char *point = known_point(ent, (size_t)(name_end - ent));
	if (!point) {
		loco_warn("crash", "LOCO_CRASH_AT: no such point '%.*s' (ignored)",
			  (int)(name_end - ent), ent);
		return;
	}
	bool here;
	if (at) {
		const char *nodes_end = colon && colon > at ? colon : ent + len;
		here = node_listed(at + 1, (size_t)(nodes_end - at - 1), '+');
	} else {
		const char *list = getenv("LOCO_CRASH_NODES");
		here = node_listed(list, list ? strlen(list) : 0, ',');
	}
	long after = colon ? strtol(colon + 1, NULL, 10) : default_after();
	if (!here)
		return;
	if (crash.n == CRASH_MAX) {
		loco_warn("crash", "LOCO_CRASH_AT: more than %d points armed here; "
			  "'%.*s' ignored", CRASH_MAX, (int)len, ent);
		return;
	}
	crash.arm[crash.n].point = point;
	crash.arm[crash.n].after = after < 1 ? 1 : after;
	crash.n++;
}

/* LOCO_CRASH_SIGNAL: KILL (the default) or STOP (the point stops the
 * process; whoever resumes it with SIGCONT lets it go on from there). */
static int crash_signal(void)
{
	const char *v = getenv("LOCO_CRASH_SIGNAL");
	if (!v || !*v || !strcmp(v, "KILL"))
		return SIGKILL;
	if (!strcmp(v, "STOP"))
		return SIGSTOP;
	loco_err("crash", "LOCO_CRASH_SIGNAL='%s': expected KILL or STOP; "
		 "armed points kill", v);
	return SIGKILL;
}

static void crash_init(void)
{
	const char *spec = getenv("LOCO_CRASH_AT");
	crash.sig = crash_signal();
	for (const char *p = spec; p && *p;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		if (len)
			arm_one(p, len);
		p = comma ? comma + 1 : p + len;
	}
	/* Release: pairs with crash_some's acquire; the table is complete. */
	atomic_store_explicit(&crash.state, crash.n ? CRASH_SOME : CRASH_NONE,
			      memory_order_release);
	gate_update();
}

/* Whether any point is armed on this node: after the first call, one
 * load (a point costs next to nothing when crash tests are off). */
static bool crash_some(void)
{
	/* Acquire: pairs with crash_init's release. */
	int st = atomic_load_explicit(&crash.state, memory_order_acquire);
	if (st == CRASH_UNREAD) {
		pthread_once(&crash.once, crash_init);
		/* Acquire: as above (pthread_once orders it too). */
		st = atomic_load_explicit(&crash.state, memory_order_acquire);
	}
	return st == CRASH_SOME;
}

static struct crash_arm *armed(const char *name)
{
	if (!crash_some())
		return NULL;
	for (unsigned i = 0; i < crash.n; i++)
		if (!strcmp(crash.arm[i].point, name))
			return &crash.arm[i];
	return NULL;
}

bool loco_crash_armed(const char *name)
{
	return armed(name) != NULL;
}

/* LOCO_CRASH_STAMP=FILE: write the CLOCK_REALTIME of the crash (ns) to
 * FILE just before the kill, so a benchmark can time the recovery from
 * the death itself. */
static void crash_stamp(void)
{
	const char *path = getenv("LOCO_CRASH_STAMP");
	if (!path || !*path)
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%llu\n",
			 (unsigned long long)ts.tv_sec * 1000000000ull +
			 (unsigned long long)ts.tv_nsec);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (write(fd, buf, (size_t)n) != n)
		loco_warn("crash", "LOCO_CRASH_STAMP=%s: short write", path);
	close(fd);
}

/* One hit of arm A of point NAME: the signal at its count. */
static void hit(struct crash_arm *a, const char *name)
{
	/* Relaxed: a counter; the kill below orders nothing. */
	long n = atomic_fetch_add_explicit(&a->hits, 1, memory_order_relaxed);
	if (n + 1 != a->after)
		return;
	bool stop = crash.sig == SIGSTOP;
	loco_info("crash", "crash point %s reached (%ld): %s", name, n + 1,
		  stop ? "SIGSTOP" : "SIGKILL");
	crash_stamp();
	/* To this thread, not kill(getpid()): the kernel hands a signal sent
	 * to the process to some thread (mostly the main one), which starts
	 * the group stop; the caller would run on meanwhile (finish its
	 * transaction, release its locks) until the stop reaches it, ms later
	 * on a busy host. Sent to the caller, SIGSTOP stops it before raise()
	 * returns, and the other threads with it. */
	raise(crash.sig);
	if (stop)
		loco_info("crash", "crash point %s: resumed", name);
	else
		pause();
}

/* Every arm of the point counts its hits: a point armed twice on a node
 * (P@N:10,P@N:20) stops it twice with LOCO_CRASH_SIGNAL=STOP. */
void loco_crash_point(const char *name)
{
	if (crash.hook)
		crash.hook(name, crash.hook_arg);
	if (!crash_some())
		return;
	for (unsigned i = 0; i < crash.n; i++)
		if (!strcmp(crash.arm[i].point, name))
			hit(&crash.arm[i], name);
}
