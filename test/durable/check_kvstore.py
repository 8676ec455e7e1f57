#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Run loco-kvstore --verify under tools/loco-run and check its cluster line.

usage: check_kvstore.py [--min-outages N] [--checked FIELD] [--no-fence]
           -- LOCO-RUN-ARGS... -- loco-kvstore|loco-ycsb ARGS...

Passes when loco-run exits 0 (every node's read-back found the last
acknowledged write of each of its keys) and the cluster's JSON line says
"lost_writes": 0, FIELD > 0 (the keys read back: "verified", the
default, for loco-kvstore, "checked" for loco-ycsb) and at least
--min-outages waits for a dead memory node (default 1: the restart
happened during the run). With --no-fence, no node may have fenced
another (a live node cut off by the outage keeps its locks).
Exit 0 on success, 1 on failure."""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__))))


def main(argv):
    min_outages = 1
    checked = "verified"
    no_fence = False
    while argv[:1] in (["--min-outages"], ["--checked"], ["--no-fence"]):
        if argv[0] == "--no-fence":
            no_fence = True
            argv = argv[1:]
            continue
        if argv[0] == "--min-outages":
            min_outages = int(argv[1])
        else:
            checked = argv[1]
        argv = argv[2:]
    if argv[:1] != ["--"]:
        sys.exit("check_kvstore: usage: [--min-outages N] [--checked FIELD] "
                 "[--no-fence] -- LOCO-RUN-ARGS")
    scale = float(os.environ.get("LOCO_TIMEOUT_SCALE") or 1)
    p = subprocess.run([os.path.join(REPO, "tools", "loco-run")] + argv[1:],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=300 * scale)
    out = p.stdout.decode(errors="replace")
    err = p.stderr.decode(errors="replace")
    res = None
    for line in out.splitlines():
        body = line.split("] ", 1)[1] if line.startswith("[n") else line
        if body.startswith("{") and '"scope":"cluster"' in body:
            res = json.loads(body)
    bad = []
    if p.returncode != 0:
        bad.append("loco-run exited %d" % p.returncode)
    if res is None:
        bad.append("no cluster line")
    else:
        print(json.dumps(res))
        if res.get("lost_writes", 1) != 0 or res.get(checked, 0) == 0:
            bad.append("%s %s, lost_writes %s" % (
                checked, res.get(checked), res.get("lost_writes")))
        if res.get("outages", 0) < min_outages:
            bad.append("%d outages, want >= %d" % (res.get("outages", 0),
                                                   min_outages))
    if no_fence:
        # loco_fence_node's line on the fencer, loco_fenced_self's on the
        # fenced node, loco-run's on its exit (status 3).
        fenced = [l for l in (out + err).splitlines()
                  if " fenced node " in l or "was fenced by the cluster" in l
                  or "exited with status 3" in l]
        if fenced:
            bad.append("a node was fenced: " + fenced[0].strip())
    if bad:
        sys.stdout.write(out[-3000:])
        sys.stderr.write(err[-3000:])
        print("check_kvstore: FAIL: " + "; ".join(bad))
        return 1
    print("check_kvstore: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
