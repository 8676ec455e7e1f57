#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# transfer-check.sh LOCO_RUN -- LOCO-RUN-ARGS... -- LOCO-TRANSFER ARGS...
# Runs a loco-transfer cluster. Passes when every node exited 0, every
# result line (one per node and the cluster's) says "conserved":true with
# the final total equal to the initial one, and some transfers ran.
set -u
loco_run=$1
shift 2
out=$("$loco_run" "$@" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -v '^\[n[0-9]*\] transfer: node'
lines=$(printf '%s\n' "$out" | grep '"app":"transfer"')
[ "$rc" -eq 0 ] || { echo "transfer-check: cluster failed (loco-run exit $rc)"; exit 1; }
printf '%s\n' "$lines" | grep -q '"scope":"cluster"' ||
	{ echo "transfer-check: no cluster result line"; exit 1; }
python3 - "$lines" <<'PY'
import json, sys
bad = 0
for line in sys.argv[1].splitlines():
    r = json.loads(line[line.index('{'):])
    ok = (r["conserved"] is True and r["final_total"] == r["initial_total"]
          == r["expected_total"] and r["conflicts"] == 0 and r["ops"] > 0)
    if not ok:
        print("transfer-check: not conserved:", line)
        bad += 1
sys.exit(1 if bad else 0)
PY
