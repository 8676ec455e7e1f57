/* SPDX-License-Identifier: MIT */
/* Faults a node injects into itself, read at loco_mgr_create, so that
 * they work under every launcher (mpirun, srun, ssh), which can start a
 * node with an environment but not signal it on a schedule:
 *   LOCO_KILL_AT=S           SIGKILL S seconds after the manager started
 *   LOCO_PAUSE_AT=S:MS[,...] SIGSTOP at S seconds, SIGCONT MS later (by a
 *                            forked helper: a stopped process cannot wake
 *                            itself)
 * S may be fractional. Each fault is announced on stderr first. */
#include "loco/fault.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loco/internal.h"

#define FAULTS_MAX 16

struct fault {
	uint64_t at_ns;        /* after the manager's start */
	uint64_t pause_ns;     /* 0: a kill */
};

struct loco_faults {
	struct fault f[FAULTS_MAX];
	unsigned n;
	uint64_t t0;
	uint32_t node;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;   /* CLOCK_MONOTONIC */
	bool stop;
};

/* "S" or "S:MS" (PAUSE) into *F; false if malformed. */
static bool fault_parse(const char *s, bool pause, struct fault *f)
{
	char *end;
	double at = strtod(s, &end), ms = 0;
	if (end == s || !(at >= 0 && at < 1e6))
		return false;
	if (pause) {
		if (*end != ':')
			return false;
		const char *m = end + 1;
		ms = strtod(m, &end);
		if (end == m || !(ms > 0 && ms < 3.6e6))
			return false;
	}
	if (*end)
		return false;
	f->at_ns = (uint64_t)(at * 1e9);
	f->pause_ns = (uint64_t)(ms * 1e6);
	return true;
}

/* Every comma-separated fault of variable NAME into FS. */
static int faults_parse(struct loco_faults *fs, const char *name, bool pause)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return 0;
	char buf[512];
	snprintf(buf, sizeof(buf), "%s", v);
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (fs->n == FAULTS_MAX || (!pause && fs->n) ||
		    !fault_parse(tok, pause, &fs->f[fs->n])) {
			loco_err("fault", "%s: bad value '%s' (expected %s)", name,
				 v, pause ? "S:MS[,S:MS...], at most 16, S "
				 "seconds after start, MS > 0" : "S, seconds "
				 "after start");
			return -EINVAL;
		}
		fs->n++;
	}
	return 0;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u),
			       (long)(ns % 1000000000u) };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* SIGSTOP this process, SIGCONT it PAUSE_NS later, from a child: it only
 * calls async-signal-safe functions (this process has threads). */
static void pause_self(uint64_t pause_ns)
{
	pid_t self = getpid();
	pid_t c = fork();
	if (c == 0) {
		kill(self, SIGSTOP);
		sleep_ns(pause_ns);
		kill(self, SIGCONT);
		_exit(0);
	}
	if (c < 0)
		loco_err("fault", "cannot fork the pause helper: %s",
			 strerror(errno));
	else
		waitpid(c, NULL, 0);
}

static void fire(struct loco_faults *fs, const struct fault *f)
{
	double at = (double)f->at_ns / 1e9;
	if (!f->pause_ns) {
		loco_info("fault", "node %u kills itself at %.2f s (LOCO_KILL_AT)",
			  fs->node, at);
		raise(SIGKILL);
	}
	loco_info("fault", "node %u pauses itself at %.2f s for %.0f ms "
		  "(LOCO_PAUSE_AT)", fs->node, at, (double)f->pause_ns / 1e6);
	pause_self(f->pause_ns);
}

static void *fault_main(void *arg)
{
	struct loco_faults *fs = arg;
	pthread_mutex_lock(&fs->lock);
	for (unsigned i = 0; i < fs->n && !fs->stop; ) {
		uint64_t due = fs->t0 + fs->f[i].at_ns, now = loco_now_ns();
		if (now < due) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			uint64_t ns = (uint64_t)ts.tv_nsec + (due - now);
			ts.tv_sec += (time_t)(ns / 1000000000u);
			ts.tv_nsec = (long)(ns % 1000000000u);
			pthread_cond_timedwait(&fs->cond, &fs->lock, &ts);
			continue;
		}
		pthread_mutex_unlock(&fs->lock);
		fire(fs, &fs->f[i++]);
		pthread_mutex_lock(&fs->lock);
	}
	pthread_mutex_unlock(&fs->lock);
	return NULL;
}

static int by_time(const void *a, const void *b)
{
	const struct fault *x = a, *y = b;
	return (x->at_ns > y->at_ns) - (x->at_ns < y->at_ns);
}

int loco_faults_start(struct loco_mgr *mgr)
{
	struct loco_faults *fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	fs->t0 = loco_now_ns();
	fs->node = mgr->id;
	int rc = faults_parse(fs, "LOCO_KILL_AT", false);
	if (!rc)
		rc = faults_parse(fs, "LOCO_PAUSE_AT", true);
	if (rc || !fs->n) {
		free(fs);
		return rc;
	}
	qsort(fs->f, fs->n, sizeof(fs->f[0]), by_time);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&fs->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&fs->lock, NULL);
	rc = -pthread_create(&fs->thread, NULL, fault_main, fs);
	if (rc) {
		loco_err("fault", "cannot start the fault thread: %s",
			 strerror(-rc));
		pthread_cond_destroy(&fs->cond);
		pthread_mutex_destroy(&fs->lock);
		free(fs);
		return rc;
	}
	mgr->faults = fs;
	return 0;
}

void loco_faults_stop(struct loco_mgr *mgr)
{
	struct loco_faults *fs = mgr->faults;
	if (!fs)
		return;
	pthread_mutex_lock(&fs->lock);
	fs->stop = true;
	pthread_cond_signal(&fs->cond);
	pthread_mutex_unlock(&fs->lock);
	pthread_join(fs->thread, NULL);
	pthread_cond_destroy(&fs->cond);
	pthread_mutex_destroy(&fs->lock);
	free(fs);
	mgr->faults = NULL;
}
