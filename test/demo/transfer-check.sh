#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# transfer-check.sh [--hot-fallback N] [--counts] [--expect-lost write|cas]
#                   LOCO_RUN -- LOCO-RUN-ARGS... -- LOCO-TRANSFER ARGS...
# Runs a loco-transfer cluster. Passes when every node exited 0, every
# result line (one per node and the cluster's) says "conserved":true with
# the final total equal to the initial one, and some transfers ran.
# --hot-fallback N (a --hot-locks run on a transport without device
# memory): also every line says "hot_locks":true with no device memory
# used, and each of the N nodes warned exactly once that its hot lock
# words are in host memory.
# --counts (one node, one thread, nobody else taking its locks): the
# protocol's verbs and round trips per transfer exactly: 8 verbs and 2
# round trips with two locks (the higher one tried in the lower one's
# round), 6 and 2 when one lock guards both accounts (docs/demos.md).
# --expect-lost MODE (a loco-transfer --unlocked run: no lock, so updates
# get lost): passes only when the checks caught it: the cluster failed,
# every result line says "conserved":false with transfers run, and with
# MODE cas (--cas-balances) the CASes also counted conflicts.
set -u
hot=0
counts=0
lost=
if [ "$1" = --hot-fallback ]; then
	hot=$2
	shift 2
fi
if [ "$1" = --counts ]; then
	counts=1
	shift
fi
if [ "$1" = --expect-lost ]; then
	lost=$2
	shift 2
fi
loco_run=$1
shift 2
out=$("$loco_run" "$@" 2>&1)
rc=$?
printf '%s\n' "$out" | grep -v '^\[n[0-9]*\] transfer: node'
lines=$(printf '%s\n' "$out" | grep '"app":"transfer"')
printf '%s\n' "$lines" | grep -q '"scope":"cluster"' ||
	{ echo "transfer-check: no cluster result line"; exit 1; }
if [ -n "$lost" ]; then
	[ "$rc" -ne 0 ] || { echo "transfer-check: an unlocked run passed its checks"; exit 1; }
	python3 - "$lines" "$lost" <<'PY'
import json, sys
bad = 0
for line in sys.argv[1].splitlines():
    r = json.loads(line[line.index('{'):])
    caught = r["conserved"] is False and r["final_total"] != r["expected_total"]
    if sys.argv[2] == "cas":
        caught = caught and r["conflicts"] > 0 and r["balances"] == "cas"
    else:
        caught = caught and r["balances"] == "write"
    if not (caught and r["locked"] is False and r["ops"] > 0):
        print("transfer-check: lost updates not caught:", line)
        bad += 1
sys.exit(1 if bad else 0)
PY
	exit
fi
[ "$rc" -eq 0 ] || { echo "transfer-check: cluster failed (loco-run exit $rc)"; exit 1; }
if [ "$hot" -gt 0 ]; then
	warned=$(printf '%s\n' "$out" | grep 'warning: region: hot region xfer/locks/' |
		 grep -c 'is in host memory')
	[ "$warned" -eq "$hot" ] ||
		{ echo "transfer-check: $warned hot-region warnings, want $hot (one per node)"; exit 1; }
fi
python3 - "$lines" "$hot" "$counts" <<'PY'
import json, sys
bad = 0
hot = int(sys.argv[2]) > 0
counts = sys.argv[3] == "1"
for line in sys.argv[1].splitlines():
    r = json.loads(line[line.index('{'):])
    ok = (r["conserved"] is True and r["final_total"] == r["initial_total"]
          == r["expected_total"] and r["conflicts"] == 0 and r["ops"] > 0)
    if not ok:
        print("transfer-check: not conserved:", line)
        bad += 1
    if r["hot_locks"] is not hot or r["dm_used"] != 0:
        print("transfer-check: hot_locks/dm_used not as asked:", line)
        bad += 1
    if counts:
        n, same = r["ops"], r["same_lock"]
        want = {"verbs_per_op": 8 * n - 2 * same, "rtts_per_op": 2 * n}
        for k, v in want.items():
            if abs(r[k] * n - v) > 0.0005 * n + 1:
                print("transfer-check: %s %.3f, want %.3f" % (k, r[k], v / n))
                bad += 1
sys.exit(1 if bad else 0)
PY
