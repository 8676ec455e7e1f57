/* SPDX-License-Identifier: MIT */
#include "apps/common/opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bench_getopt(int argc, char **argv, const char *shortopts,
		 const struct option *longopts, bench_opt_fn *one, void *o,
		 const char *prog)
{
	int c;
	while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		if (c == 'h')
			return 1;
		if (c == '?')
			return 2;
		if (one(o, c, optarg)) {
			if (prog)
				fprintf(stderr, "%s: bad value '%s'\n", prog, optarg);
			return 2;
		}
	}
	if (optind != argc) {
		if (prog)
			fprintf(stderr, "%s: unexpected '%s'\n", prog, argv[optind]);
		return 2;
	}
	return 0;
}

int bench_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || !*s || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

bool bench_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return true;
	return false;
}
