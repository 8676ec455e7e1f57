#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run loco-sherman-crash under tools/loco-run and check its JSON line.

usage: check_sherman.py [--min-dead N] [--min-repairs N] [--min-links N]
                        [--tries K]
                        -- LOCO-RUN-ARGS... -- loco-sherman-crash ARGS...

Everything after the first "--" goes to tools/loco-run as is. Every run
must report "missing", "wrong", "scan_mismatch", "verify_errors" and
"locks_held" 0 (the reporter repaired every lock a dead client held,
verified every level of the tree, and found every acknowledged key with
its value). A run also needs at least --min-dead dead nodes (default 1),
--min-repairs repairs (default 1: a dead client left a lock a survivor
had to take over) and --min-links links (default 0: parent entries a
dead splitter left missing that survivors added); one that has fewer (a kill that landed
between two operations, a crash point reached by a client that was then
not the last to hold anything) is repeated, up to --tries K times, with
the hard checks above made on every attempt. A node killed by a crash
point makes loco-run exit non-zero, so its status is not used; a missing
JSON line fails. Exit status 0 on success, 1 on failure."""

import sys

import crashrun

HARD = ("missing", "wrong", "scan_mismatch", "verify_errors", "locks_held")


def parse(argv):
    return crashrun.parse(argv, "check_sherman",
                          {"min_dead": 1, "min_repairs": 1, "min_links": 0,
                           "tries": 1},
                          {"--min-dead": "min_dead",
                           "--min-repairs": "min_repairs",
                           "--min-links": "min_links", "--tries": "tries"})


def problems(res, opts, final):
    bad = ["%s = %d" % (k, res[k]) for k in HARD if res[k] != 0]
    if not final:
        return bad
    for key, least in (("dead", "min_dead"), ("repairs", "min_repairs"),
                       ("links", "min_links")):
        if res[key] < opts[least]:
            bad.append("%d %s, want >= %d" % (res[key], key, opts[least]))
    return bad


def main(argv):
    opts, run_args = parse(argv)
    return crashrun.attempts("check_sherman", opts, run_args,
                             '"sherman-crash"', problems)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
