/* SPDX-License-Identifier: MIT */
/* The log hook: a handler gets every message that passes the level with
 * its fields, stderr gets nothing meanwhile, NULL brings the stderr line
 * back, a failing loco call's message reaches the handler, and once
 * loco_log_set_handler returns no thread is still in the old handler
 * (threads logging while the main thread swaps handlers). */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <loco/loco.h>
#include "test/common/capture.h"

struct seen {
	unsigned n;
	struct loco_log_msg last;
	char text[256], ctx[64], func[64];
};

static void record(const struct loco_log_msg *m, void *arg)
{
	struct seen *s = arg;
	s->n++;
	s->last = *m;
	snprintf(s->text, sizeof(s->text), "%s", m->text);
	snprintf(s->ctx, sizeof(s->ctx), "%s", m->ctx);
	snprintf(s->func, sizeof(s->func), "%s", m->func);
}

START_TEST(handler_gets_fields)
{
	struct seen s = { 0 };
	struct capture cap;
	char out[512];
	loco_log_set_level(LOCO_LOG_INFO);
	capture_start(&cap);
	loco_log_set_handler(record, &s);
	int line = __LINE__ + 1;
	loco_err("chan/x", "value %d of %s", 42, "seven");
	loco_log_set_handler(NULL, NULL);
	capture_end(&cap, out, sizeof(out));
	ck_assert_uint_eq(s.n, 1);
	ck_assert_int_eq(s.last.level, LOCO_LOG_ERR);
	ck_assert_str_eq(s.text, "value 42 of seven");
	ck_assert_str_eq(s.ctx, "chan/x");
	ck_assert_str_eq(s.func, "handler_gets_fields_fn");
	ck_assert_int_eq(s.last.line, line);
	ck_assert_str_eq(out, "");  /* nothing went to stderr */
}
END_TEST

START_TEST(level_filters_and_null_restores)
{
	struct seen s = { 0 };
	struct capture cap;
	char out[512];
	loco_log_set_level(LOCO_LOG_WARN);
	loco_log_set_handler(record, &s);
	loco_info("m", "dropped");
	loco_warn("m", "kept");
	loco_warn(NULL, "no context");
	ck_assert_uint_eq(s.n, 2);
	ck_assert_str_eq(s.text, "no context");
	ck_assert_str_eq(s.ctx, "loco");
	loco_log_set_handler(NULL, NULL);
	capture_start(&cap);
	loco_warn("m", "to stderr");
	capture_end(&cap, out, sizeof(out));
	ck_assert_uint_eq(s.n, 2);
	ck_assert_ptr_nonnull(strstr(out, "warning: m: to stderr ("));
	loco_log_set_level(LOCO_LOG_INFO);
}
END_TEST

/* A loco call that fails logs why: the handler gets it. */
START_TEST(library_messages_routed)
{
	struct seen s = { 0 };
	struct loco_opts o = { .node_id = 0, .timeout_ms = 1000,
			       .insecure = true };
	struct loco_mgr *mgr = NULL;
	snprintf(o.hosts_path, sizeof(o.hosts_path), "/nonexistent/loco-hosts");
	snprintf(o.transport, sizeof(o.transport), "shm");
	loco_log_set_handler(record, &s);
	int rc = loco_mgr_create(&o, &mgr);
	loco_log_set_handler(NULL, NULL);
	ck_assert_int_lt(rc, 0);
	ck_assert_ptr_null(mgr);
	ck_assert_uint_ge(s.n, 1);
	ck_assert_int_eq(s.last.level, LOCO_LOG_ERR);
	ck_assert_ptr_nonnull(strstr(s.text, "/nonexistent/loco-hosts"));
}
END_TEST

/* Handlers counting how many threads are inside them right now. */
struct inside {
	atomic_uint now;
	atomic_ulong calls;
};

static void counted(const struct loco_log_msg *m, void *arg)
{
	struct inside *in = arg;
	(void)m;
	/* Relaxed: counters; the rwlock in loco_log orders the test. */
	atomic_fetch_add_explicit(&in->now, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&in->calls, 1, memory_order_relaxed);
	for (volatile int i = 0; i < 200; i++)
		;
	atomic_fetch_sub_explicit(&in->now, 1, memory_order_relaxed);
}

#define LOGGERS 4
#define PER_LOGGER 20000

static void *logger(void *arg)
{
	(void)arg;
	for (int i = 0; i < PER_LOGGER; i++)
		loco_warn("t", "message %d", i);
	return NULL;
}

START_TEST(swap_while_logging)
{
	static struct inside a, b;
	struct capture cap;
	static char out[1 << 16];
	pthread_t t[LOGGERS];
	capture_start(&cap);  /* the messages sent while no handler is set */
	loco_log_set_handler(counted, &a);
	for (int i = 0; i < LOGGERS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, logger, NULL), 0);
	for (int k = 0; k < 200; k++) {
		struct inside *cur = k % 2 ? &a : &b;
		struct inside *old = k % 2 ? &b : &a;
		loco_log_set_handler(counted, cur);
		ck_assert_uint_eq(atomic_load(&old->now), 0);
	}
	for (int i = 0; i < LOGGERS; i++)
		pthread_join(t[i], NULL);
	loco_log_set_handler(NULL, NULL);
	ck_assert_uint_eq(atomic_load(&a.now) + atomic_load(&b.now), 0);
	capture_end(&cap, out, sizeof(out));
	ck_assert_uint_eq(atomic_load(&a.calls) + atomic_load(&b.calls),
			  (unsigned long)LOGGERS * PER_LOGGER);
	ck_assert_str_eq(out, "");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("handler");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, handler_gets_fields);
	tcase_add_test(tc, level_filters_and_null_restores);
	tcase_add_test(tc, library_messages_routed);
	tcase_add_test(tc, swap_while_logging);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
