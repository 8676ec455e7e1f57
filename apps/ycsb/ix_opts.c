/* SPDX-License-Identifier: MIT */
#include "apps/ycsb/ix_opts.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "apps/common/opts.h"

int ix_opt_error(const char *fmt, ...)
{
	va_list ap;
	fputs("loco-ycsb: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return -EINVAL;
}

/* WORDS joined with SEP into BUF. */
static void join(const char *const *words, const char *sep, char *buf,
		 size_t len)
{
	size_t at = 0;
	buf[0] = 0;
	for (unsigned i = 0; words[i] && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? sep : "",
				       words[i]);
}

int ix_opts_known(const struct ycsb_index_cfg *cfg, const char *index,
		  const char *const *known)
{
	char list[256];
	for (unsigned i = 0; i < cfg->nopts; i++) {
		unsigned k = 0;
		while (known[k] && strcmp(known[k], cfg->opt_key[i]))
			k++;
		if (known[k])
			continue;
		join(known, ", ", list, sizeof(list));
		return ix_opt_error("--ix-opt %s=%s: index %s has no option %s "
				    "(it has: %s)", cfg->opt_key[i], cfg->opt_val[i],
				    index, cfg->opt_key[i], list[0] ? list : "none");
	}
	return 0;
}

int ix_opt_u64(const struct ycsb_index_cfg *cfg, unsigned i, const char *index,
	       uint64_t lo, uint64_t hi, uint64_t *out)
{
	char expect[BENCH_EXPECT_MAX];
	if (!bench_parse_u64(cfg->opt_val[i], lo, hi, out, expect))
		return 0;
	return ix_opt_error("--ix-opt %s=%s: bad value for index %s (expected %s)",
			    cfg->opt_key[i], cfg->opt_val[i], index, expect);
}

int ix_opt_word(const struct ycsb_index_cfg *cfg, unsigned i, const char *index,
		const char *const *words, unsigned *out)
{
	char list[256];
	for (unsigned k = 0; words[k]; k++)
		if (!strcmp(words[k], cfg->opt_val[i])) {
			*out = k;
			return 0;
		}
	join(words, " or ", list, sizeof(list));
	return ix_opt_error("--ix-opt %s=%s: bad value for index %s (expected %s)",
			    cfg->opt_key[i], cfg->opt_val[i], index, list);
}
