#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Sherman's round trips on a durable memory node equal those on a
volatile one (docs/sherman.md, "Durability"): a write-back's FLUSH rides
between its writes and the lock release, in the round trip it makes
anyway.

usage: check_sherman_rtts.py TRANSPORT

Runs loco-ycsb --index sherman (workload A, one compute node with one
thread: no lock is ever contended) under tools/loco-run on one memory
node, volatile and then durable, and checks the cluster lines'
deterministic counts: no failed lock CAS, an update 2 round trips (lock
CAS + leaf READ; write-back + FLUSH + release) and a get 1 in both (up to
0.05 for stale cache entries and lease renewals), the durable update at
most 0.02 above the volatile one, and FLUSHes (at least one per update)
only on the durable node. Exit 0 on success, 1 on failure."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__))))


def run(transport, durable):
    scale = float(os.environ.get("LOCO_TIMEOUT_SCALE") or 1)
    argv = [os.path.join(REPO, "tools", "loco-run"), "-m", "1", "-n", "1",
            "--transport", transport, "--timeout", "60"]
    if durable:
        argv += ["--durable"]
    argv += ["--", "loco-ycsb", "--index", "sherman", "--keys", "5000",
             "--threads", "1", "--duration", "1"]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=120 * scale)
    what = "durable" if durable else "volatile"
    if p.returncode != 0:
        sys.exit("check_sherman_rtts: FAIL: %s: loco-run exited %d: %s"
                 % (what, p.returncode, p.stderr.decode()[-500:]))
    for line in p.stdout.decode(errors="replace").splitlines():
        body = line.split("] ", 1)[1] if line.startswith("[n") else line
        if body.startswith("{") and '"scope":"cluster"' in body:
            return json.loads(body)
    sys.exit("check_sherman_rtts: FAIL: %s: no cluster line" % what)


def expect(what, ok, d):
    if not ok:
        sys.exit("check_sherman_rtts: FAIL: %s (update_rtts %s, get_rtts "
                 "%s, lock_fails %s, flushes_per_op %s)"
                 % (what, d["update_rtts"], d["get_rtts"], d["lock_fails"],
                    d["flushes_per_op"]))


def main(argv):
    if len(argv) != 2:
        sys.exit("check_sherman_rtts: usage: check_sherman_rtts.py TRANSPORT")
    got = {}
    for durable in (False, True):
        d = run(argv[1], durable)
        what = "durable" if durable else "volatile"
        expect("%s: updates ran" % what, d["updates"] > 0, d)
        expect("%s: no lock contended" % what, d["lock_fails"] == 0, d)
        expect("%s: an update 2 round trips" % what,
               2 <= d["update_rtts"] <= 2.05, d)
        expect("%s: a get 1 round trip" % what, 1 <= d["get_rtts"] <= 1.05, d)
        per_update = d["flushes_per_op"] * d["ops"] / d["updates"]
        expect("%s: FLUSHes" % what,
               per_update >= 1 if durable else d["flushes_per_op"] == 0, d)
        got[durable] = d
    expect("durable update at most 0.02 round trips above volatile's %s"
           % got[False]["update_rtts"],
           got[True]["update_rtts"] <= got[False]["update_rtts"] + 0.02,
           got[True])
    print("check_sherman_rtts: ok: update_rtts %s volatile, %s durable"
          % (got[False]["update_rtts"], got[True]["update_rtts"]))


if __name__ == "__main__":
    main(sys.argv)
