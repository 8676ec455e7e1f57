/* SPDX-License-Identifier: MIT */
/* Skipping a test (meson counts exit status 77 as "skipped"), with one
 * line tools/run-tests lists the skipped tests by:
 *   "SKIP(hardware: WHY)"  hardware absent here (an RDMA device): exit 77;
 *   "SKIP(root: WHY)"      root needed: exit 77;
 *   "SKIP(missing: PKG)"   a package not installed: exit 77, but under
 *                          CI=true a failure (exit 1): tools/install-deps
 *                          installs everything the CI tests need.
 * test/common/skip.sh and skip.py are the shell and Python versions. */
#ifndef LOCO_TEST_SKIP_H
#define LOCO_TEST_SKIP_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "test/common/cluster1.h"

#define TEST_SKIP 77

static inline bool test_in_ci(void)
{
	const char *ci = getenv("CI");
	return ci && (!strcasecmp(ci, "true") || !strcmp(ci, "1") ||
		      !strcmp(ci, "yes"));
}

/* The exit status of a test that cannot run for want of package PKG. */
static inline int test_skip_missing(const char *pkg, const char *why)
{
	if (test_in_ci()) {
		fprintf(stderr, "FAIL: SKIP(missing: %s): %s: under CI=true a "
			"missing package fails (tools/install-deps installs "
			"it)\n", pkg, why);
		return 1;
	}
	fprintf(stderr, "SKIP(missing: %s): %s\n", pkg, why);
	return TEST_SKIP;
}

/* The exit status of a test that needs hardware absent here. */
static inline int test_skip_hardware(const char *why)
{
	fprintf(stderr, "SKIP(hardware: %s)\n", why);
	return TEST_SKIP;
}

/* The package a transport needs (test/meson.build lists every transport
 * in every build: one not built fails or skips visibly). */
static inline const char *test_transport_pkg(const char *t)
{
	return !strncmp(t, "ucx", 3) ? "libucx-dev" :
	       "libibverbs-dev librdmacm-dev";
}

/* The exit status of a program whose loco_mgr_create() failed with RC:
 * TEST_SKIP for verbs without a device, test_skip_missing() for a
 * transport this build lacks (LOCO_TRANSPORT names it), else 1. */
static inline int test_mgr_create_status(int rc)
{
	const char *t = getenv("LOCO_TRANSPORT");
	if (rc == -EPROTONOSUPPORT && t)
		return test_skip_missing(test_transport_pkg(t), "this build has "
					 "no such transport");
	if (rc == -LOCO_ENODEV)
		return test_skip_hardware("no RDMA device for the verbs "
					  "transport");
	return 1;
}

/* 0 if the manager of LOCO_TRANSPORT (default shm) starts here; else the
 * exit status of a test that cannot run: TEST_SKIP for verbs without a
 * device, test_skip_missing() for a transport this build lacks. */
static inline int test_transport_skip(void)
{
	const char *t = getenv("LOCO_TRANSPORT");
	if (!t || !strncmp(t, "shm", 3))
		return 0;
	struct cluster1 c;
	int rc = cluster1_start(&c, "", 1000);
	if (!rc)
		cluster1_stop(&c);
	return rc == -EPROTONOSUPPORT || rc == -LOCO_ENODEV ?
	       test_mgr_create_status(rc) : 0;
}

#endif
