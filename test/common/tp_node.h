/* SPDX-License-Identifier: MIT */
/* For tests that open a transport through its ops table: a one-node
 * configuration (id 0 at 127.0.0.1:7000, a 1 MiB arena). */
#ifndef LOCO_TEST_TP_NODE_H
#define LOCO_TEST_TP_NODE_H

#include <string.h>

#include <loco/hosts.h>
#include "loco/transport/transport.h"

/* HOSTS gets the one-node cluster; the configuration points at it. */
static inline struct loco_tp_config tp_one_node(struct loco_hosts *hosts,
						int timeout_ms)
{
	memset(hosts, 0, sizeof(*hosts));
	hosts->node[0] = (struct loco_host){ .id = 0, .port = 7000, .present = 1,
					     .host = "127.0.0.1" };
	hosts->count = 1;
	return (struct loco_tp_config){ .node_id = 0, .arena_bytes = 1 << 20,
					.hosts = hosts, .timeout_ms = timeout_ms,
					.incarnation = 1 };
}

#endif
