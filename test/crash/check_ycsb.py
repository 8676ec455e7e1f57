#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run loco-ycsb --dead-ms under tools/loco-run with dying nodes and check
what the survivors report.

usage: check_ycsb.py [--min-dead N] [--point NAME]... [--tries K]
                     -- LOCO-RUN-ARGS... -- loco-ycsb ARGS...

Everything after the first "--" goes to tools/loco-run as is; loco-ycsb's
arguments must include --dead-ms and --verify. The run passes when the
cluster line (printed by the lowest surviving node) has missing = wrong =
corrupt = 0 and verify_failed = 0, lists at least --min-dead dead nodes
(default 1), each of them killed (by loco-run or at its crash point: a
live node declared dead fails), and the index's verify line says nothing
is left behind: 0
leaked and 0 lost KV blocks, 0 locks held, 0 logs pending (race's
loco_race_verify). With --point NAME (repeatable) each such crash point
must have been reached ("crash point NAME reached" in the output): a run
where an armed node never got there (it did no such step before the end)
is repeated up to --tries times (default 1), every attempt checked the
same way. A node
killed by a crash point makes loco-run exit non-zero, so its status is
not used. Exit 0 on success, 1 on failure."""

import json
import os
import re
import subprocess
import sys

import crashrun

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__))))
VERIFY = re.compile(r"race: verify: .* (\d+) leaked, (\d+) lost, (\d+) "
                    r"reclaimed, (\d+) repaired, (\d+) locks held, (\d+) logs "
                    r"pending")


def parse(argv):
    opts = {"min_dead": 1, "points": [], "tries": 1}
    i = 0
    while i < len(argv) and argv[i] != "--":
        key = {"--min-dead": "min_dead", "--point": "points",
               "--tries": "tries"}.get(argv[i])
        if key is None or i + 1 >= len(argv):
            sys.exit("check_ycsb: bad argument %s" % argv[i])
        if key == "points":
            opts[key].append(argv[i + 1])
        else:
            opts[key] = int(argv[i + 1])
        i += 2
    if i >= len(argv):
        sys.exit("check_ycsb: no loco-run arguments after --")
    return opts, argv[i + 1:]


def run_once(run_args):
    cmd = [os.path.join(REPO, "tools", "loco-run")] + run_args
    scale = float(os.environ.get("LOCO_TIMEOUT_SCALE") or 1)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=300 * scale)
    out = p.stdout.decode(errors="replace")
    line = None
    for raw in out.splitlines():
        body = raw.split("] ", 1)[1] if raw.startswith("[n") else raw
        if body.startswith("{") and '"scope":"cluster"' in body:
            line = json.loads(body)
    return line, out


def problems(res, out, opts):
    if res is None:
        return ["no cluster result line"]
    bad = []
    for key in ("missing", "wrong", "corrupt", "verify_failed"):
        if res.get(key) != 0:
            bad.append("%s = %s" % (key, res.get(key)))
    bad += crashrun.unkilled_dead(res, out)
    if len(res.get("dead", [])) < opts["min_dead"]:
        bad.append("dead %s, want at least %d" % (res.get("dead"),
                                                  opts["min_dead"]))
    m = VERIFY.search(out)
    if not m:
        bad.append("no verify line")
    else:
        leaked, lost, _, _, locks, logs = (int(x) for x in m.groups())
        for name, v in (("leaked", leaked), ("lost", lost),
                        ("locks held", locks), ("logs pending", logs)):
            if v:
                bad.append("%s %d after verify" % (name, v))
    return bad


def main():
    opts, run_args = parse(sys.argv[1:])
    for attempt in range(1, opts["tries"] + 1):
        res, out = run_once(run_args)
        bad = problems(res, out, opts)
        missed = [p for p in opts["points"]
                  if ("crash point %s reached" % p) not in out]
        if bad:
            sys.stdout.write(out[-6000:])
            print("check_ycsb: FAIL (attempt %d): %s" % (attempt,
                                                         "; ".join(bad)))
            return 1
        m = VERIFY.search(out)
        print("check_ycsb: attempt %d: dead %s, %s ops, verify: %s%s" %
              (attempt, res["dead"], res["ops"], m.group(0),
               " (not reached: %s)" % ", ".join(missed) if missed else ""))
        if not missed:
            return 0
    print("check_ycsb: FAIL: crash points %s not reached in %d runs" %
          (", ".join(missed), opts["tries"]))
    return 1


if __name__ == "__main__":
    sys.exit(main())
