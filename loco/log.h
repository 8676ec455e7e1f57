/* SPDX-License-Identifier: MIT */
/* Logging to stderr: level, node id, context (channel name or module),
 * function and line. loco_dbg compiles out unless LOCO_DEBUG_LOG. */
#ifndef LOCO_LOG_H
#define LOCO_LOG_H

enum loco_log_level { LOCO_LOG_ERR, LOCO_LOG_WARN, LOCO_LOG_INFO, LOCO_LOG_DBG };

void loco_log(enum loco_log_level lvl, const char *ctx, const char *func,
	      int line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* Node id printed in every line; set by the manager. */
void loco_log_set_node(int id);
/* Messages above this level are dropped (LOCO_LOG env: err|warn|info|dbg). */
void loco_log_set_level(enum loco_log_level lvl);

#define loco_err(ctx, ...)  loco_log(LOCO_LOG_ERR, ctx, __func__, __LINE__, __VA_ARGS__)
#define loco_warn(ctx, ...) loco_log(LOCO_LOG_WARN, ctx, __func__, __LINE__, __VA_ARGS__)
#define loco_info(ctx, ...) loco_log(LOCO_LOG_INFO, ctx, __func__, __LINE__, __VA_ARGS__)
#ifdef LOCO_DEBUG_LOG
#define loco_dbg(ctx, ...)  loco_log(LOCO_LOG_DBG, ctx, __func__, __LINE__, __VA_ARGS__)
#else
#define loco_dbg(ctx, ...)  ((void)(ctx))
#endif

#endif
