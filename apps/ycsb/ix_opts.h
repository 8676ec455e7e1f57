/* SPDX-License-Identifier: MIT */
/* Helpers of the index adapters for their --ix-opt KEY=VALUE options
 * (struct ycsb_index_cfg): each bad one is named on stderr, as
 *
 *	loco-ycsb: --ix-opt locks=x: bad value for index kvstore (expected 1..4096)
 *
 * and the adapter's open returns -EINVAL (the driver then exits 2). */
#ifndef LOCO_APPS_YCSB_IX_OPTS_H
#define LOCO_APPS_YCSB_IX_OPTS_H

#include <stdint.h>

#include "apps/ycsb/index.h"

/* Every key of CFG's options is in KNOWN (NULL-terminated). 0, or
 * -EINVAL naming the first unknown one and the known keys of INDEX. */
int ix_opts_known(const struct ycsb_index_cfg *cfg, const char *index,
		  const char *const *known);

/* Option I of CFG as an integer in LO..HI into *OUT: 0 or -EINVAL. */
int ix_opt_u64(const struct ycsb_index_cfg *cfg, unsigned i, const char *index,
	       uint64_t lo, uint64_t hi, uint64_t *out);

/* Option I of CFG as one of WORDS (NULL-terminated): its position into
 * *OUT, 0; or -EINVAL. */
int ix_opt_word(const struct ycsb_index_cfg *cfg, unsigned i, const char *index,
		const char *const *words, unsigned *out);

/* "loco-ycsb: " and the message on stderr; returns -EINVAL. */
int ix_opt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
