/* SPDX-License-Identifier: MIT */
#include "rtx/crash.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loco/log.h"

const char *const loco_crash_points[] = {
	"rtx.after_log",        /* log written, no lock taken yet */
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
	"rtx.alloc_after_claim",  /* a chunk claimed, bitmap not written */
	NULL,
};

static struct {
	pthread_once_t once;
	const char *armed;      /* one of loco_crash_points, or NULL */
	long after;
	_Atomic long hits;
} crash = { .once = PTHREAD_ONCE_INIT };

static const char *known_point(const char *name)
{
	for (unsigned i = 0; loco_crash_points[i]; i++)
		if (!strcmp(loco_crash_points[i], name))
			return loco_crash_points[i];
	return NULL;
}

/* True if LOCO_CRASH_NODES is unset or lists LOCO_NODE_ID. */
static bool node_selected(void)
{
	const char *list = getenv("LOCO_CRASH_NODES");
	const char *self = getenv("LOCO_NODE_ID");
	if (!list || !*list)
		return true;
	if (!self)
		return false;
	long id = strtol(self, NULL, 10);
	for (const char *p = list; *p;) {
		char *end;
		long v = strtol(p, &end, 10);
		if (end == p)
			return false;
		if (v == id)
			return true;
		p = *end == ',' ? end + 1 : end;
	}
	return false;
}

static void crash_init(void)
{
	const char *at = getenv("LOCO_CRASH_AT");
	if (!at || !*at)
		return;
	const char *p = known_point(at);
	if (!p) {
		loco_warn("crash", "LOCO_CRASH_AT=%s: no such point (ignored)", at);
		return;
	}
	const char *after = getenv("LOCO_CRASH_AFTER");
	crash.after = after && *after ? strtol(after, NULL, 10) : 1;
	if (crash.after < 1)
		crash.after = 1;
	if (node_selected())
		crash.armed = p;
}

bool loco_crash_armed(const char *name)
{
	pthread_once(&crash.once, crash_init);
	return crash.armed && !strcmp(crash.armed, name);
}

void loco_crash_point(const char *name)
{
	if (!loco_crash_armed(name))
		return;
	/* Relaxed: a counter; the kill below orders nothing. */
	long n = atomic_fetch_add_explicit(&crash.hits, 1, memory_order_relaxed);
	if (n + 1 == crash.after) {
		loco_info("crash", "crash point %s reached (%ld): SIGKILL", name,
			  n + 1);
		kill(getpid(), SIGKILL);
		pause();
	}
}
