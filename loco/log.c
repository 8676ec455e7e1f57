/* SPDX-License-Identifier: MIT */
#include <loco/log.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int log_node = -1;
static atomic_int log_level = -1;

static const char *const level_names[] = { "error", "warning", "info", "debug" };

/* The handler and its argument change together under the write lock;
 * every message is delivered under the read lock, so a set returns only
 * once no thread is still in the old handler. */
static pthread_rwlock_t handler_lock = PTHREAD_RWLOCK_INITIALIZER;
static loco_log_fn handler;
static void *handler_arg;

void loco_log_set_handler(loco_log_fn fn, void *arg)
{
	pthread_rwlock_wrlock(&handler_lock);
	handler = fn;
	handler_arg = arg;
	pthread_rwlock_unlock(&handler_lock);
}

void loco_log_set_node(int id)
{
	atomic_store_explicit(&log_node, id, memory_order_relaxed); /* plain config */
}

void loco_log_set_level(enum loco_log_level lvl)
{
	atomic_store_explicit(&log_level, (int)lvl, memory_order_relaxed); /* plain config */
}

static int current_level(void)
{
	int lvl = atomic_load_explicit(&log_level, memory_order_relaxed); /* plain config */
	if (lvl >= 0)
		return lvl;
	const char *env = getenv("LOCO_LOG");
	lvl = LOCO_LOG_INFO;
	static const char *const aliases[] = { "err", "warn", "info", "dbg" };
	for (int i = 0; env && i < 4; i++)
		if (!strcmp(env, level_names[i]) || !strcmp(env, aliases[i]))
			lvl = i;
	atomic_store_explicit(&log_level, lvl, memory_order_relaxed); /* plain config */
	return lvl;
}

static void emit_stderr(const struct loco_log_msg *m)
{
	char who[16] = "";
	if (m->node >= 0)
		snprintf(who, sizeof(who), "n%d ", m->node);
	/* One fprintf per message so lines from threads do not interleave. */
	fprintf(stderr, "loco %s%s: %s: %s (%s:%d)\n", who,
		level_names[m->level], m->ctx, m->text, m->func, m->line);
}

void loco_log(enum loco_log_level lvl, const char *ctx, const char *func,
	      int line, const char *fmt, ...)
{
	if ((int)lvl > current_level())
		return;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	int node = atomic_load_explicit(&log_node, memory_order_relaxed); /* plain config */
	struct loco_log_msg m = { .level = lvl, .node = node,
				  .ctx = ctx ? ctx : "loco", .text = msg,
				  .func = func, .line = line };
	pthread_rwlock_rdlock(&handler_lock);
	if (handler)
		handler(&m, handler_arg);
	else
		emit_stderr(&m);
	pthread_rwlock_unlock(&handler_lock);
}
