/* SPDX-License-Identifier: MIT */
/* The ucx transport's progress thread, one per node:
 *  - it progresses the target worker, the one every peer's endpoints
 *    connect to (application threads lend a hand while they poll:
 *    ucx_target_help). On TCP peers' READs, WRITEs and atomics are
 *    messages that this worker's handler executes (ucx_am.c), and every
 *    transport needs it for connection set-up: without it a node would
 *    only serve requests while one of its own threads happened to call
 *    UCX. It spins for LOCO_UCX_SPIN_US (default 20) after any activity,
 *    then sleeps on the worker's event fd (ucp_worker_arm);
 *  - it progresses, as a safety net, the worker of an application thread
 *    that has posted recently or has requests outstanding but has not
 *    polled for a tick (1 ms): UCX moves data (TCP sends, connection
 *    set-up) only inside a progress call, and a thread that posted a
 *    WRITE and went off to compute must not hold the data back the way an
 *    RDMA NIC never would. It takes the CQ's lock with trylock only: a
 *    polling owner never waits for it. */
#include "loco/transport/ucx_int.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <loco/error.h>
#include <loco/log.h>

#define TICK_NS 1000000u         /* safety-net period while a CQ is watched */
#define WATCH_NS 1000000000u     /* a CQ is watched this long after a post */
#define IDLE_SLEEP_MS 100        /* nothing watched: sleep at most this */
#define SPIN_US_DEFAULT 20
#define QUIET_NS 100000000u      /* stop: the target quiet this long, */
#define LINGER_NS 1000000000u    /* but at most this long */

/* A CQ whose owner posted within WATCH_NS or has requests outstanding, and
 * has not progressed it for a tick. Relaxed: hints only; the CQ's lock
 * orders the worker's state. */
static bool cq_watched(struct loco_tp_cq *cq, uint64_t now, bool *stale)
{
	uint64_t posted = atomic_load_explicit(&cq->posted_ns, memory_order_relaxed);
	uint64_t polled = atomic_load_explicit(&cq->polled_ns, memory_order_relaxed);
	bool busy = atomic_load_explicit(&cq->busy, memory_order_relaxed);
	*stale = now > polled + TICK_NS;
	return busy || now < posted + WATCH_NS;
}

/* Progress the watched CQs whose owners have not; returns whether any CQ
 * is watched (and so the next tick matters). */
static bool tick_cqs(struct loco_tp *tp)
{
	bool watched = false;
	uint64_t now = ucx_now_ns();
	pthread_mutex_lock(&tp->cq_lock);
	for (struct loco_tp_cq *cq = tp->cqs; cq; cq = cq->next) {
		bool stale;
		if (!cq_watched(cq, now, &stale))
			continue;
		watched = true;
		if (stale && pthread_mutex_trylock(&cq->lock) == 0) {
			while (tp->api->worker_progress(cq->worker))
				;
			pthread_mutex_unlock(&cq->lock);
		}
	}
	pthread_mutex_unlock(&tp->cq_lock);
	return watched;
}

/* Progress the target worker with its lock held (by whoever holds it). */
static unsigned target_progress(struct loco_tp *tp)
{
	unsigned did = tp->api->worker_progress(tp->target);
	if (did)
		/* Relaxed: a hint for the stop's linger. */
		atomic_store_explicit(&tp->served_ns, ucx_now_ns(), memory_order_relaxed);
	return did;
}

unsigned ucx_target_help(struct loco_tp *tp)
{
	if (pthread_mutex_trylock(&tp->target_lock))
		return 0;
	unsigned did = target_progress(tp);
	pthread_mutex_unlock(&tp->target_lock);
	return did;
}

/* Sleep until the target worker has an event, WAKE_FD is written or
 * TIMEOUT_MS pass. The worker must be armed first: if it is busy (events
 * already pending), return at once. An application thread that progresses
 * the worker after the arm may take the event that would have woken us:
 * it only helps while it polls, i.e. while its CQ is watched, and then
 * the sleep ends at the next tick. */
static void sleep_armed(struct loco_tp *tp, int timeout_ms)
{
	pthread_mutex_lock(&tp->target_lock);
	ucs_status_t st = tp->api->worker_arm(tp->target);
	pthread_mutex_unlock(&tp->target_lock);
	if (st == UCS_ERR_BUSY)
		return;
	if (st != UCS_OK) {
		/* Cannot arm (should not happen): poll at the tick instead. */
		timeout_ms = 1;
	}
	struct epoll_event ev[4];
	int n = epoll_wait(tp->epoll_fd, ev, 4, timeout_ms);
	for (int i = 0; i < n; i++) {
		if (ev[i].data.fd == tp->wake_fd) {
			uint64_t v;
			if (read(tp->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				loco_warn(UCX_LOG, "progress thread: reading its eventfd: %s",
					  strerror(errno));
		}
	}
}

static void *progress_main(void *arg)
{
	struct loco_tp *tp = arg;
	uint64_t last_work = 0, next_tick = 0;
	bool watched = false;
	/* Acquire: pairs with the release in ucx_progress_stop. */
	while (!atomic_load_explicit(&tp->stopping, memory_order_acquire)) {
		pthread_mutex_lock(&tp->target_lock);
		unsigned did = target_progress(tp);
		pthread_mutex_unlock(&tp->target_lock);
		uint64_t now = ucx_now_ns();
		if (now >= next_tick) {
			watched = tick_cqs(tp);
			next_tick = now + TICK_NS;
		}
		if (did) {
			last_work = now;
			continue;
		}
		if (now < last_work + tp->spin_ns) {
			sched_yield();
			continue;
		}
		int ms = watched ? (int)((next_tick - now) / 1000000u) + 1 : IDLE_SLEEP_MS;
		sleep_armed(tp, ms);
	}
	return NULL;
}

static uint64_t spin_ns_get(void)
{
	const char *v = getenv("LOCO_UCX_SPIN_US");
	if (!v || !*v)
		return SPIN_US_DEFAULT * 1000u;
	char *end;
	unsigned long us = strtoul(v, &end, 10);
	if (*end || us > 1000000) {
		loco_warn(UCX_LOG, "ignoring LOCO_UCX_SPIN_US='%s' (expected 0..1000000)", v);
		return SPIN_US_DEFAULT * 1000u;
	}
	return (uint64_t)us * 1000u;
}

static int epoll_add(int epfd, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

static void fds_close(struct loco_tp *tp)
{
	if (tp->epoll_fd >= 0)
		close(tp->epoll_fd);
	if (tp->wake_fd >= 0)
		close(tp->wake_fd);
	tp->epoll_fd = tp->wake_fd = -1;
}

int ucx_progress_start(struct loco_tp *tp)
{
	int efd, rc;
	ucs_status_t st = tp->api->worker_get_efd(tp->target, &efd);
	if (st != UCS_OK) {
		loco_err(UCX_LOG, "ucp_worker_get_efd: %s", tp->api->status_string(st));
		return ucx_errno(st);
	}
	tp->spin_ns = spin_ns_get();
	tp->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	tp->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	rc = tp->wake_fd < 0 || tp->epoll_fd < 0 ? -errno : 0;
	if (!rc)
		rc = epoll_add(tp->epoll_fd, efd);
	if (!rc)
		rc = epoll_add(tp->epoll_fd, tp->wake_fd);
	atomic_init(&tp->stopping, false);
	atomic_init(&tp->served_ns, ucx_now_ns());
	if (!rc)
		rc = -pthread_create(&tp->progress, NULL, progress_main, tp);
	if (!rc)  /* for top and perf; a failure only loses the name */
		pthread_setname_np(tp->progress, "loco-ucx-prog");
	if (rc) {
		loco_err(UCX_LOG, "cannot start the progress thread: %s", loco_strerror(rc));
		fds_close(tp);
		return rc;
	}
	tp->progress_started = true;
	return 0;
}

/* Wait (at most LINGER_NS) until the target worker served nothing for
 * QUIET_NS. */
static void linger(struct loco_tp *tp)
{
	uint64_t end = ucx_now_ns() + LINGER_NS;
	for (;;) {
		uint64_t now = ucx_now_ns();
		/* Relaxed: a hint; a late event only lengthens the wait. */
		uint64_t served = atomic_load_explicit(&tp->served_ns,
						       memory_order_relaxed);
		if (now >= end || now >= served + QUIET_NS)
			return;
		struct timespec ts = { 0, 10000000 };
		nanosleep(&ts, NULL);
	}
}

void ucx_progress_stop(struct loco_tp *tp)
{
	if (!tp->progress_started)
		return;
	linger(tp);
	/* Release: pairs with the acquire in progress_main. */
	atomic_store_explicit(&tp->stopping, true, memory_order_release);
	uint64_t one = 1;
	if (write(tp->wake_fd, &one, sizeof(one)) < 0)
		loco_warn(UCX_LOG, "waking the progress thread: %s", strerror(errno));
	pthread_join(tp->progress, NULL);
	tp->progress_started = false;
	fds_close(tp);
}
