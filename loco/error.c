/* SPDX-License-Identifier: MIT */
#include <loco/error.h>

#include <stdlib.h>
#include <string.h>

static const char *const loco_msgs[] = {
	[LOCO_EVERSION - LOCO_EBASE] = "peer speaks another loco control-plane version",
	[LOCO_EMISMATCH - LOCO_EBASE] = "channel regions disagree between peers (name or size)",
	[LOCO_EPROTO - LOCO_EBASE] = "malformed control-plane message",
	[LOCO_EHOSTS - LOCO_EBASE] = "invalid hosts file",
	[LOCO_ENODEV - LOCO_EBASE] = "no RDMA device found",
	[LOCO_EQP - LOCO_EBASE] = "queue pair in error state",
	[LOCO_ETRANSPORT - LOCO_EBASE] = "peer uses a different transport",
	[LOCO_ETORN - LOCO_EBASE] = "value still torn after the retry limit",
	[LOCO_EAUTH - LOCO_EBASE] = "cluster authentication failed",
	[LOCO_EDOWN - LOCO_EBASE] = "node is down (its process died or is restarting)",
	[LOCO_ELOST - LOCO_EBASE] = "node came back without the memory it held",
	[LOCO_EFENCED - LOCO_EBASE] = "this node's incarnation was fenced by the "
		"cluster: its remote operations are refused (restart it to rejoin "
		"as a new incarnation)",
};

const char *loco_strerror(int err)
{
	if (err < 0)
		err = -err;
	if (err > LOCO_EBASE && err < LOCO_ELAST)
		return loco_msgs[err - LOCO_EBASE];
	return strerror(err);
}
