/* SPDX-License-Identifier: MIT */
/* verbs transport on this machine: the ops table is complete, and open()
 * fails cleanly, with one message, without an RDMA device or with a bad
 * setting. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include <loco/error.h>
#include <loco/hosts.h>
#include <loco/log.h>
#include "loco/transport/transport.h"
#include "test/common/capture.h"
#include "test/common/tp_node.h"

/* ---- the ops table on this machine -------------------------------------- */

START_TEST(ops_table)
{
	const struct loco_transport_ops *o = &loco_verbs_ops;
	ck_assert_str_eq(o->name, "verbs");
	ck_assert(o->open && o->close && o->arena_base && o->arena_len &&
		  o->arena_desc && o->peer_add && o->dm_len && o->dm_zero &&
		  o->cq_create && o->cq_destroy && o->qp_create && o->qp_destroy &&
		  o->post && o->poll && o->qp_abort);
}
END_TEST

static struct loco_hosts hosts;

static bool have_rdma_device(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	if (l)
		ibv_free_device_list(l);
	return l && n > 0;
}

/* Run open with stderr captured; returns its result and the log text. */
static int open_captured(const struct loco_tp_config *cfg, struct loco_tp **tp,
			 char *log, size_t len)
{
	struct capture cap;
	capture_start(&cap);
	int r = loco_verbs_ops.open(cfg, tp);
	capture_end(&cap, log, len);
	return r;
}

START_TEST(open_without_device)
{
	if (have_rdma_device())
		return; /* covered by the device tests */
	struct loco_tp_config cfg = tp_one_node(&hosts, 0);
	struct loco_tp *tp = NULL;
	char log[2048];
	loco_log_set_level(LOCO_LOG_INFO);
	ck_assert_int_eq(open_captured(&cfg, &tp, log, sizeof(log)), -LOCO_ENODEV);
	ck_assert_ptr_null(tp);
	ck_assert_msg(strstr(log, "no RDMA device found (ibv_get_device_list: ") &&
		      strstr(log, "use --transport shm"), "log: %s", log);
	unsigned msgs = 0;
	for (const char *p = log; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		msgs += !strncmp(p, "loco ", 5);
	ck_assert_msg(msgs == 1, "exactly one message, got: %s", log);
	/* And again: nothing was left half-open. */
	ck_assert_int_eq(open_captured(&cfg, &tp, log, sizeof(log)), -LOCO_ENODEV);
}
END_TEST

START_TEST(open_bad_env)
{
	struct loco_tp_config cfg = tp_one_node(&hosts, 0);
	struct loco_tp *tp = NULL;
	char log[2048];
	setenv("LOCO_VERBS_MTU", "3000", 1);
	int r = open_captured(&cfg, &tp, log, sizeof(log));
	unsetenv("LOCO_VERBS_MTU");
	ck_assert_int_eq(r, -EINVAL);
	ck_assert_msg(strstr(log, "LOCO_VERBS_MTU=3000"), "log: %s", log);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("verbs open");
	TCase *t;
	t = tcase_create("open");
	tcase_add_test(t, ops_table);
	tcase_add_test(t, open_without_device);
	tcase_add_test(t, open_bad_env);
	suite_add_tcase(s, t);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
