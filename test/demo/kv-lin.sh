#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# kv-lin.sh [--min FIELD=N]... EXPECT LOCO_RUN LINCHECK MIN_OPS -- LOCO-RUN-ARGS... -- PROGRAM ARGS...
# Runs a loco-kvstore (or loco-pmap) cluster with --record into a fresh
# directory, merges the nodes' histories and checks them with
# loco-lincheck --model map.
#   EXPECT=linearizable: passes when the cluster succeeded (every node
#     exit 0: no corrupt value), printed its cluster line, recorded at
#     least MIN_OPS operations and the checker finds the history
#     linearizable;
#   EXPECT=violation (a --broken variant): passes only on the checker's
#     verdict: the recorded history (a node may have failed, e.g. on a
#     value left torn for good; its open operations stay in it) is not
#     linearizable (loco-lincheck exit 1).
# --min FIELD=N: the cluster line's FIELD must be at least N (the faults a
# run injects happened: "outages", "crashes"); with EXPECT=violation too.
set -u
mins=()
while [ "${1:-}" = --min ]; do
	mins+=("$2")
	shift 2
done
expect=$1 loco_run=$2 lincheck=$3 min_ops=$4
shift 5
dir=$(mktemp -d /tmp/loco-kvlin-XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$loco_run" "$@" --record "$dir/node%n.jsonl" >"$dir/out" 2>&1
rc=$?
grep -v '^\[n[0-9]*\] kvstore: node [0-9]*: ' "$dir/out"
if [ "$expect" = linearizable ]; then
	[ "$rc" -eq 0 ] || { echo "kv-lin: cluster failed (loco-run exit $rc)"; exit 1; }
fi
if [ "$expect" = linearizable ] || [ ${#mins[@]} -gt 0 ]; then
	grep -q '"scope":"cluster"' "$dir/out" ||
		{ echo "kv-lin: no cluster result line"; exit 1; }
fi
if [ ${#mins[@]} -gt 0 ]; then
	python3 - "$dir/out" "${mins[@]}" <<'PY' || exit 1
import json, sys
line = None
for raw in open(sys.argv[1], errors="replace"):
    body = raw.split("] ", 1)[1] if raw.startswith("[n") else raw
    if body.startswith("{") and '"scope":"cluster"' in body:
        line = json.loads(body)
bad = []
for m in sys.argv[2:]:
    field, least = m.split("=")
    got = line.get(field)
    if got is None or got < int(least):
        bad.append("%s = %s, want >= %s" % (field, got, least))
for b in bad:
    print("kv-lin: cluster line: " + b)
sys.exit(1 if bad else 0)
PY
fi
cat "$dir"/node*.jsonl >"$dir/all.jsonl"
ops=$(grep -c '"ev":"inv"' "$dir/all.jsonl")
echo "kv-lin: $ops ops recorded (cluster exit $rc)"
if [ "$expect" = linearizable ] && [ "$ops" -lt "$min_ops" ]; then
	echo "kv-lin: expected at least $min_ops ops"
	exit 1
fi
"$lincheck" --model map --timeout 60 "$dir/all.jsonl"
lrc=$?
case "$expect:$lrc" in
	linearizable:0|violation:1) exit 0 ;;
	*) echo "kv-lin: expected $expect, checker exited $lrc"; exit 1 ;;
esac
