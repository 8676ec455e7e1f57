/* SPDX-License-Identifier: MIT */
/* Command-line parsing of the benchmark programs (their own options; the
 * node options are loco_opts_parse's, see local.h). */
#ifndef LOCO_APPS_OPTS_H
#define LOCO_APPS_OPTS_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

/* Store the value ARG of option C (the val of its struct option) in the
 * program's options O. Returns 0, or -1 if the value is bad or C unknown. */
typedef int bench_opt_fn(void *o, int c, const char *arg);

/* getopt_long over ARGV, each option given to ONE. Returns 0; 1 at 'h'
 * (--help); 2 on an unknown option, a bad value or an argument left over.
 * With PROG, a bad value and a left-over argument are named on stderr
 * after "PROG: "; with NULL nothing is printed (the caller prints its
 * usage). */
int bench_getopt(int argc, char **argv, const char *shortopts,
		 const struct option *longopts, bench_opt_fn *one, void *o,
		 const char *prog);

/* Decimal S in [LO, HI] into *OUT. Returns 0 or -1. */
int bench_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* True if ARGV holds -h or --help. */
bool bench_wants_help(int argc, char **argv);

#endif
