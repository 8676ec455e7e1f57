#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run loco-rtx-transfer under tools/loco-run and check its JSON result.

usage: check_transfer.py [--min-dead N] [--max-dead N] [--min-repairs N]
                         [--min-outages N] [--min-reclaimed N] [--tries K]
                         -- LOCO-RUN-ARGS... -- loco-rtx-transfer ARGS...

Everything after the first "--" goes to tools/loco-run as is. The run
passes when the reporter's JSON line has "conserved": true,
"locks_held": 0, "leaked_blocks": 0, "lost_blocks": 0, at least
--min-repairs repairs for the dead (default 1: "dead_repairs", the repairs
of slots of nodes found dead; a takeover from a slow live holder does not
count) and at least --min-dead dead nodes
(default 1), and at most --max-dead (default: any; a node that stopped on
an error, such as a full data pool, never finishes and counts as dead; a
live node suspected on a busy host and fenced, exit status 3, does not),
"lost_commits": 0 when the line has it (--count-commits: no acknowledged
transfer missing after memory nodes' restarts), and at least
--min-outages recoveries from a memory node's death (default 0), and at
least --min-reclaimed dead nodes reclaimed during the run (default 0:
loco-rtx-transfer --reclaim-dead, its "reclaimed" list; each one must
be among the dead, which the end of the run finds fenced).
A node killed by a crash point makes loco-run exit non-zero, so its
status is not used; a missing JSON line fails.

--tries K: a run whose kill or crash point hit no transaction state (it
is possible for a plain --kill to land between transactions: repairs 0)
is repeated up to K times; every run must still be conserved with no
lock held. Exit status 0 on success, 1 on failure."""

import sys

import crashrun


def parse(argv):
    return crashrun.parse(argv, "check_transfer",
                          {"min_dead": 1, "max_dead": None, "min_repairs": 1,
                           "tries": 1, "min_outages": 0, "min_reclaimed": 0},
                          {"--min-dead": "min_dead", "--max-dead": "max_dead",
                           "--min-repairs": "min_repairs", "--tries": "tries",
                           "--min-outages": "min_outages",
                           "--min-reclaimed": "min_reclaimed"})


def problems(res, opts, final):
    bad = []
    if not res["conserved"]:
        bad.append("total %d != %d" % (res["total"], res["expected"]))
    for key in ("locks_held", "leaked_blocks", "lost_blocks", "lost_commits"):
        if res.get(key, 0) != 0:
            bad.append("%s = %d" % (key, res[key]))
    if res.get("outages", 0) < opts["min_outages"]:
        bad.append("%d outages, want >= %d" % (res.get("outages", 0),
                                               opts["min_outages"]))
    unfenced = set(res["dead"]) - set(res.get("fenced_nodes", []))
    if opts["max_dead"] is not None and len(unfenced) > opts["max_dead"]:
        bad.append("dead nodes %s (fenced %s), want at most %d"
                   % (res["dead"], res.get("fenced_nodes", []),
                      opts["max_dead"]))
    reclaimed = res.get("reclaimed", [])
    if set(reclaimed) - set(res["dead"]):
        bad.append("reclaimed %s but dead %s: a node reclaimed during the "
                   "run must be found dead at its end"
                   % (reclaimed, res["dead"]))
    if final and len(reclaimed) < opts["min_reclaimed"]:
        bad.append("%d nodes reclaimed during the run (%s), want >= %d"
                   % (len(reclaimed), reclaimed, opts["min_reclaimed"]))
    if final and len(res["dead"]) < opts["min_dead"]:
        bad.append("%d dead nodes, want >= %d" % (len(res["dead"]),
                                                  opts["min_dead"]))
    if final and res["dead_repairs"] < opts["min_repairs"]:
        bad.append("%d repairs for the dead (of %d), want >= %d"
                   % (res["dead_repairs"], res["repairs"],
                      opts["min_repairs"]))
    return bad


def main(argv):
    opts, run_args = parse(argv)
    return crashrun.attempts("check_transfer", opts, run_args, '"conserved"',
                             problems)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
