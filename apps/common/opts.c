/* SPDX-License-Identifier: MIT */
#include "apps/common/opts.h"

#include <errno.h>
#include <limits.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The name of option C as given: "--NAME" (long option IDX) or "-C". */
static void opt_name(const struct option *longopts, int idx, int c, char *buf,
		     size_t len)
{
	if (idx >= 0)
		snprintf(buf, len, "--%s", longopts[idx].name);
	else
		snprintf(buf, len, "-%c", c);
}

static void bad_value(const char *prog, const char *name, const char *arg,
		      const char *expect)
{
	fprintf(stderr, "%s: %s: bad value '%s'%s%s%s\n", prog, name,
		arg ? arg : "", *expect ? " (expected " : "", expect,
		*expect ? ")" : "");
}

int bench_getopt(int argc, char **argv, const char *shortopts,
		 const struct option *longopts, bench_opt_fn *one, void *o,
		 const char *prog)
{
	for (;;) {
		char expect[BENCH_EXPECT_MAX] = "", name[64];
		int idx = -1;
		int c = getopt_long(argc, argv, shortopts, longopts, &idx);
		if (c == -1)
			break;
		if (c == 'h')
			return 1;
		if (c == '?')
			return 2;
		if (one(o, c, optarg, expect)) {
			opt_name(longopts, idx, c, name, sizeof(name));
			bad_value(prog, name, optarg, expect);
			return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", prog,
			argv[optind]);
		return 2;
	}
	return 0;
}

int bench_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out,
		    char *expect)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	/* strtoull takes "-1" as a huge value: digits only. */
	if (errno || *end || !*s || *s < '0' || *s > '9' || v < lo || v > hi) {
		if (expect)
			snprintf(expect, BENCH_EXPECT_MAX, "%" PRIu64 "..%" PRIu64,
				 lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

int bench_parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out,
		     char *expect)
{
	uint64_t v;
	if (bench_parse_u64(s, lo, hi, &v, expect))
		return -1;
	*out = (unsigned)v;
	return 0;
}

int bench_parse_double(const char *s, double lo, double hi, double *out,
		       char *expect)
{
	char *end;
	double v = strtod(s, &end);
	if (*end || !*s || !(v >= lo && v <= hi)) {
		if (expect)
			snprintf(expect, BENCH_EXPECT_MAX, "a number in %g..%g",
				 lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

int bench_opt_error(const char *prog, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 2;
}

bool bench_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return true;
	return false;
}

int bench_parse_duration(const char *s, double *out, char *expect)
{
	return bench_parse_double(s, 0.001, 86400, out, expect);
}

static int iters_one(void *arg, int c, const char *s, char *expect)
{
	uint64_t v;
	if (c != 'i' || bench_parse_u64(s, 1, LONG_MAX, &v, expect))
		return -1;
	*(long *)arg = (long)v;
	return 0;
}

int bench_iters_options(int *argc, char **argv, struct loco_opts *opts,
			long *iters, const char *prog, void (*usage)(FILE *))
{
	static const struct option longopts[] = {
		{ "iters", required_argument, NULL, 'i' },
		{ NULL, 0, NULL, 0 },
	};
	char err[512];
	if (bench_wants_help(*argc, argv)) {
		usage(stdout);
		return 0;
	}
	if (loco_opts_parse(opts, argc, argv, err, sizeof(err)))
		return bench_opt_error(prog, "%s", err);
	if (bench_getopt(*argc, argv, "i:", longopts, iters_one, iters, prog)) {
		usage(stderr);
		return 2;
	}
	return -1;
}
