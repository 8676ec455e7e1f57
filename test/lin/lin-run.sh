#!/usr/bin/env bash
# lin-run.sh MODEL EXPECT LOCO_RUN LINCHECK -- LOCO-RUN-ARGS...
# Runs a cluster with LOCO_HISTORY pointing at a fresh directory, merges
# the nodes' histories and checks them with loco-lincheck --model MODEL.
# EXPECT: "linearizable" (checker exit 0) or "violation" (exit 1).
set -u
model=$1 expect=$2 loco_run=$3 lincheck=$4
shift 5
dir=$(mktemp -d /tmp/loco-lin-XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$loco_run" --env "LOCO_HISTORY=$dir" "$@" || { echo "lin-run: cluster failed"; exit 1; }
cat "$dir"/node*.jsonl > "$dir/all.jsonl"
echo "lin-run: $(grep -c '"ev":"inv"' "$dir/all.jsonl") ops recorded"
"$lincheck" --model "$model" --timeout 60 "$dir/all.jsonl"
rc=$?
case "$expect:$rc" in
	linearizable:0|violation:1) exit 0 ;;
	*) echo "lin-run: expected $expect, checker exited $rc"; exit 1 ;;
esac
