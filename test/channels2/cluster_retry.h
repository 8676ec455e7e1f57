/* SPDX-License-Identifier: MIT */
/* cluster_start (test/channels/cluster.h) picks free loopback ports by
 * binding port 0 and closing it; a test starting in parallel can take
 * such a port before the manager listens on it (-EADDRINUSE). Retry with
 * fresh ports a few times. */
#ifndef LOCO_TEST_CHANNELS2_CLUSTER_RETRY_H
#define LOCO_TEST_CHANNELS2_CLUSTER_RETRY_H

#include <errno.h>

#include "test/channels/cluster.h"

#define CLUSTER_TRIES 5

static inline int cluster_start_retry(struct cluster *c, unsigned nodes,
				      int timeout_ms)
{
	for (int i = 1;; i++) {
		int rc = cluster_start(c, nodes, 0, timeout_ms);
		if (rc != -EADDRINUSE || i == CLUSTER_TRIES)
			return rc;
		cluster_stop(c);
	}
}

#endif
