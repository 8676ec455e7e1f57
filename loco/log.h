/* SPDX-License-Identifier: MIT */
/* Logging: level, node id, context (channel name or module), function and
 * line. By default a message is one line on stderr; an application routes
 * loco's messages elsewhere with loco_log_set_handler. loco_dbg compiles
 * out unless LOCO_DEBUG_LOG. */
#ifndef LOCO_LOG_H
#define LOCO_LOG_H

enum loco_log_level { LOCO_LOG_ERR, LOCO_LOG_WARN, LOCO_LOG_INFO, LOCO_LOG_DBG };

/* One message, as a handler receives it. Every pointer is valid only
 * during the call. */
struct loco_log_msg {
	enum loco_log_level level;
	int node;             /* this node's id, -1 before a manager set it */
	const char *ctx;      /* channel name or module ("loco" if none) */
	const char *text;     /* the formatted message, no newline */
	const char *func;     /* where it was logged */
	int line;
};

/* A log handler: gets every message that passes the level (see
 * loco_log_set_level: errors always, debug only when asked for). */
typedef void (*loco_log_fn)(const struct loco_log_msg *msg, void *arg);

void loco_log(enum loco_log_level lvl, const char *ctx, const char *func,
	      int line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* Node id printed in every line; set by the manager. */
void loco_log_set_node(int id);
/* Messages above this level are dropped (LOCO_LOG env: err|warn|info|dbg). */
void loco_log_set_level(enum loco_log_level lvl);

/* Send every message that passes the level to FN(msg, ARG) instead of
 * stderr; FN NULL restores the stderr line. Process-wide.
 * Caller: any thread. FN runs on whichever thread logs (application
 * threads, the control-plane and join threads), possibly on several at
 * once: it must be thread-safe, must not block for long and must not
 * call loco (loco_log_set_handler included). When this returns, no thread
 * runs the previous handler any more, so its ARG may be freed. */
void loco_log_set_handler(loco_log_fn fn, void *arg);

#define loco_err(ctx, ...)  loco_log(LOCO_LOG_ERR, ctx, __func__, __LINE__, __VA_ARGS__)
#define loco_warn(ctx, ...) loco_log(LOCO_LOG_WARN, ctx, __func__, __LINE__, __VA_ARGS__)
#define loco_info(ctx, ...) loco_log(LOCO_LOG_INFO, ctx, __func__, __LINE__, __VA_ARGS__)
#ifdef LOCO_DEBUG_LOG
#define loco_dbg(ctx, ...)  loco_log(LOCO_LOG_DBG, ctx, __func__, __LINE__, __VA_ARGS__)
#else
#define loco_dbg(ctx, ...)  ((void)(ctx))
#endif

#endif
