/* SPDX-License-Identifier: MIT */
/* The indexes loco-ycsb drives. Adding one: its adapter file
 * apps/ycsb/ix_NAME.c (defining ycsb_ix_NAME, declared in index.h), a
 * line below, and the file and its library in apps/ycsb/meson.build. The
 * first is the default of --index. */
#include <string.h>

#include "apps/ycsb/ycsb.h"

const struct ycsb_index_ops *const ycsb_indexes[] = {
	&ycsb_ix_local,
	&ycsb_ix_local_ordered,
	&ycsb_ix_kvstore,
	&ycsb_ix_race,
	&ycsb_ix_sherman,
	NULL,
};

const struct ycsb_index_ops *ycsb_index_find(const char *name)
{
	for (unsigned i = 0; ycsb_indexes[i]; i++)
		if (!strcmp(ycsb_indexes[i]->name, name))
			return ycsb_indexes[i];
	return NULL;
}
