/* SPDX-License-Identifier: MIT */
/* Error codes: functions return 0 or a negative errno; library-specific
 * conditions use the codes below (all above 256), negated likewise. */
#ifndef LOCO_ERROR_H
#define LOCO_ERROR_H

enum loco_errcode {
	LOCO_EBASE = 256,
	LOCO_EVERSION,   /* peer speaks another control-plane version */
	LOCO_EMISMATCH,  /* join: region names or sizes disagree */
	LOCO_EPROTO,     /* malformed control-plane message */
	LOCO_EHOSTS,     /* hosts file invalid */
	LOCO_ENODEV,     /* no RDMA device found */
	LOCO_EQP,        /* queue pair entered the error state */
	LOCO_ETRANSPORT, /* peers use different transports */
	LOCO_ETORN,      /* value still torn after the retry limit */
	LOCO_EAUTH,      /* cluster authentication failed */
	LOCO_EDOWN,      /* the peer is down (died or restarting): retry
			  * after loco_peer_wait */
	LOCO_ELOST,      /* the peer came back without the memory it held */
	LOCO_EFENCED,    /* this node's incarnation was fenced (loco_fence_node):
			  * its remote operations are refused for good */
	LOCO_ELAST
};

/* Text for a negative (or positive) errno or library code. Never NULL. */
const char *loco_strerror(int err);

#endif
