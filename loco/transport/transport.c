/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "loco/transport/transport.h"

static const struct loco_transport_ops *const transports[] = {
	&loco_shm_ops,
	&loco_shm_weak_ops,
#ifdef LOCO_HAVE_VERBS
	&loco_verbs_ops,  /* built with -Dverbs */
#endif
};

const struct loco_transport_ops *loco_transport_find(const char *name)
{
	for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++)
		if (strcmp(transports[i]->name, name) == 0)
			return transports[i];
	return NULL;
}
