#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# kv-lin.sh EXPECT LOCO_RUN LINCHECK MIN_OPS -- LOCO-RUN-ARGS... -- LOCO-KVSTORE ARGS...
# Runs a loco-kvstore cluster with --record into a fresh directory,
# merges the nodes' histories and checks them with loco-lincheck --model
# map.
#   EXPECT=linearizable: passes when the cluster succeeded (every node
#     exit 0: no corrupt value), printed its cluster line, recorded at
#     least MIN_OPS operations and the history is linearizable;
#   EXPECT=violation (a --broken variant): passes when the checker finds
#     the history not linearizable (a node may also have failed, e.g. on
#     a value left torn for good; its open operations stay in the history).
set -u
expect=$1 loco_run=$2 lincheck=$3 min_ops=$4
shift 5
dir=$(mktemp -d /tmp/loco-kvlin-XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$loco_run" "$@" --record "$dir/node%n.jsonl" >"$dir/out" 2>&1
rc=$?
grep -v '^\[n[0-9]*\] kvstore: node [0-9]*: ' "$dir/out"
if [ "$expect" = linearizable ]; then
	[ "$rc" -eq 0 ] || { echo "kv-lin: cluster failed (loco-run exit $rc)"; exit 1; }
	grep -q '"scope":"cluster"' "$dir/out" ||
		{ echo "kv-lin: no cluster result line"; exit 1; }
fi
cat "$dir"/node*.jsonl >"$dir/all.jsonl"
ops=$(grep -c '"ev":"inv"' "$dir/all.jsonl")
echo "kv-lin: $ops ops recorded (cluster exit $rc)"
if [ "$ops" -lt "$min_ops" ]; then
	# A broken variant whose nodes stopped on a slot left torn for good
	# (two writers' pieces interleaved: only a missing fence does that;
	# a correct run fails on it above) has shown its bug early.
	if [ "$expect" = violation ] &&
	   grep -q 'value still torn after the retry limit' "$dir/out"; then
		echo "kv-lin: a value was left torn for good: the violation shown"
		exit 0
	fi
	echo "kv-lin: expected at least $min_ops ops"
	exit 1
fi
"$lincheck" --model map --timeout 60 "$dir/all.jsonl"
lrc=$?
case "$expect:$lrc" in
	linearizable:0|violation:1) exit 0 ;;
	*) echo "kv-lin: expected $expect, checker exited $lrc"; exit 1 ;;
esac
