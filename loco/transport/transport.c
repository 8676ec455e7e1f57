/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "loco/transport/transport.h"

static const struct loco_transport_ops *const transports[] = {
	&loco_shm_ops,
	&loco_shm_weak_ops,
#ifdef LOCO_HAVE_VERBS
	&loco_verbs_ops,  /* built with -Dverbs */
#endif
#ifdef LOCO_HAVE_UCX
	&loco_ucx_ops,    /* built with -Ducx */
	&loco_ucx_tcp_ops,
	&loco_ucx_sm_ops,
#endif
};

const struct loco_transport_ops *loco_transport_find(const char *name)
{
	for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
		if (strcmp(transports[i]->name, name) == 0)
			return transports[i];
	return NULL;
}

const char *loco_transport_absent(const char *name)
{
#ifndef LOCO_HAVE_VERBS
	if (strcmp(name, "verbs") == 0)
		return "this loco was built without verbs (libibverbs-dev and "
		       "librdmacm-dev were missing at meson setup, or -Dverbs="
		       "disabled: install them and reconfigure with meson setup "
		       "--reconfigure -Dverbs=enabled)";
#endif
#ifndef LOCO_HAVE_UCX
	if (strncmp(name, "ucx", 3) == 0)
		return "this loco was built without UCX (libucx-dev was missing "
		       "at meson setup, or -Ducx=disabled: install it and "
		       "reconfigure with meson setup --reconfigure -Ducx=enabled)";
#endif
	(void)name;
	return NULL;
}
