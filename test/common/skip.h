/* SPDX-License-Identifier: MIT */
/* Skipping tests whose transport cannot run here: the verbs transport
 * without an RDMA device. Meson counts exit status 77 as "skipped". */
#ifndef LOCO_TEST_SKIP_H
#define LOCO_TEST_SKIP_H

#include "test/common/cluster1.h"

#define TEST_SKIP 77

/* TEST_SKIP if LOCO_TRANSPORT names a transport whose manager cannot
 * start on this machine for want of a device, else 0. */
static inline int test_transport_skip(void)
{
	const char *t = getenv("LOCO_TRANSPORT");
	if (!t || strcmp(t, "verbs"))
		return 0;
	struct cluster1 c;
	int rc = cluster1_start(&c, "", 1000);
	if (!rc)
		cluster1_stop(&c);
	else
		unlink(c.hosts);
	if (rc != -LOCO_ENODEV)
		return 0;
	fprintf(stderr, "skipped: no RDMA device for the verbs transport\n");
	return TEST_SKIP;
}

#endif
