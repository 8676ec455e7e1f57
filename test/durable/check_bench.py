#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run loco-durable-bench's three modes briefly and check their JSON lines'
deterministic counts (not their times).

usage: check_bench.py LOCO-DURABLE-BENCH

persist: one line per mode (volatile, none, msync, fdatasync), each op one
WRITE and one FLUSH (durable) or fence READ (volatile): 2 verbs, 2 round
trips, FLUSHes per op 1 (0 on the volatile node). restart and failover:
one line each, as many operations as rounds, a positive time to the
first operation. Exit 0 on success, 1 on failure."""

import json
import subprocess
import sys


def lines(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=240)
    if p.returncode != 0:
        sys.exit("check_bench: FAIL: %s exited %d: %s"
                 % (" ".join(argv[1:]), p.returncode, p.stderr.decode()[-500:]))
    return [json.loads(l) for l in p.stdout.decode().splitlines()
            if l.startswith("{")]


def expect(what, ok):
    if not ok:
        sys.exit("check_bench: FAIL: " + what)


def main(argv):
    exe = argv[1]
    got = lines([exe, "persist", "--ops", "40"])
    expect("4 persist lines", [d["sync"] for d in got] ==
           ["volatile", "none", "msync", "fdatasync"])
    for d in got:
        durable = d["sync"] != "volatile"
        expect("%s: 40 ops" % d["sync"], d["ops"] == 40)
        expect("%s: 2 verbs and 2 round trips per op" % d["sync"],
               d["verbs_per_op"] == 2 and d["rtts_per_op"] == 2)
        expect("%s: FLUSHes per op" % d["sync"],
               d["flushes_per_op"] == (1 if durable else 0))
        expect("%s: durable flag" % d["sync"], d["durable"] == durable)
    for mode in ("restart", "failover"):
        got = lines([exe, mode, "--rounds", "2"])
        expect("one %s line" % mode, len(got) == 1)
        d = got[0]
        expect("%s: 2 rounds" % mode, d["rounds"] == 2 and d["ops"] == 2)
        expect("%s: a time to the first op" % mode,
               d["first_op_p50_ms"] > 0 and d["detect_p50_ms"] > 0)
    print("check_bench: ok")


if __name__ == "__main__":
    main(sys.argv)
