/* SPDX-License-Identifier: MIT */
#include <loco/log.h>

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int log_node = -1;
static atomic_int log_level = -1;

static const char *const level_names[] = { "error", "warning", "info", "debug" };

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
	char who[16] = "";
	if (node >= 0)
		snprintf(who, sizeof(who), "n%d ", node);
	/* One fprintf per message so lines from threads do not interleave. */
	fprintf(stderr, "loco %s%s: %s: %s (%s:%d)\n", who, level_names[lvl],
		ctx ? ctx : "loco", msg, func, line);
}
