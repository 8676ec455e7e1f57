/* SPDX-License-Identifier: MIT */
/* Command-line parsing of the benchmark programs (their own options; the
 * node options are loco_opts_parse's, see local.h). A bad value is named
 * with its option and what was expected, and the program exits 2:
 *
 *	loco-lockbench: --threads: bad value 'x' (expected 1..64) */
#ifndef LOCO_APPS_OPTS_H
#define LOCO_APPS_OPTS_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <loco/loco.h>

/* Room for what an option expected, e.g. "1..64". */
#define BENCH_EXPECT_MAX 96

/* Store the value ARG of option C (the val of its struct option) in the
 * program's options O. Returns 0, or -1 if the value is bad or C unknown;
 * on a bad value it may say what was expected in EXPECT
 * (BENCH_EXPECT_MAX bytes, empty on entry). */
typedef int bench_opt_fn(void *o, int c, const char *arg, char *expect);

/* getopt_long over ARGV, each option given to ONE. Returns 0; 1 at 'h'
 * (--help); 2 on an unknown option (getopt names it), a bad value or an
 * argument left over, named on stderr after "PROG: " as in
 * "PROG: --threads: bad value 'x' (expected 1..64)". */
int bench_getopt(int argc, char **argv, const char *shortopts,
		 const struct option *longopts, bench_opt_fn *one, void *o,
		 const char *prog);

/* Decimal S in [LO, HI] into *OUT. Returns 0, or -1 with "LO..HI" in
 * EXPECT (BENCH_EXPECT_MAX bytes; may be NULL). */
int bench_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out,
		    char *expect);

/* The same into an unsigned (HI <= UINT_MAX). */
int bench_parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out,
		     char *expect);

/* Number S (strtod) in [LO, HI] into *OUT. Returns 0, or -1 with
 * "a number in LO..HI" in EXPECT (BENCH_EXPECT_MAX bytes; may be NULL). */
int bench_parse_double(const char *s, double lo, double hi, double *out,
		       char *expect);

/* A --duration in seconds, 0.001..86400 (a day), into *OUT; as
 * bench_parse_double. */
int bench_parse_duration(const char *s, double *out, char *expect);

/* Print "PROG: " and the message FMT on stderr (options that conflict).
 * Returns 2, the exit status of bad options. */
int bench_opt_error(const char *prog, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Options of a program whose only own option is --iters N (N >= 1, into
 * *ITERS): --help prints USAGE on stdout, then the node options go into
 * *OPTS (loco_opts_parse), then --iters through bench_getopt. Returns -1
 * to run, else the exit status (0 after --help; 2 after a bad option,
 * named on stderr after "PROG: ", with USAGE). */
int bench_iters_options(int *argc, char **argv, struct loco_opts *opts,
			long *iters, const char *prog, void (*usage)(FILE *));

/* True if ARGV holds -h or --help. */
bool bench_wants_help(int argc, char **argv);

#endif
