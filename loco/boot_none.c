/* SPDX-License-Identifier: MIT */
/* A build without PMIx's headers: no bootstrap without a hosts file. */
#include "loco/boot.h"

#include <errno.h>

#include "loco/internal.h"

int loco_boot_pmix(struct loco_mgr *mgr)
{
	(void)mgr;
	loco_err("boot", "no hosts file, and this build has no PMIx support to "
		 "find the other nodes (libpmix-dev at build time): pass "
		 "--hosts FILE");
	return -EPROTONOSUPPORT;
}

void loco_boot_end_start(struct loco_mgr *mgr)
{
	(void)mgr;
}

bool loco_boot_ended(struct loco_mgr *mgr)
{
	(void)mgr;
	return false;
}

void loco_boot_fini(struct loco_mgr *mgr, bool fence)
{
	(void)mgr;
	(void)fence;
}
