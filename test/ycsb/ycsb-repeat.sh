#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ycsb-repeat.sh RUNS COMMAND...
# Runs COMMAND (e.g. ycsb-check.py ok -- loco-run ... -- loco-ycsb ...) RUNS
# times in a row, for races that a single short run hits only sometimes
# (issue 27: a directory hole seen once in a whole CI run). Prints the
# output of the first failing run and how many passed before it.
# Exit 0 when every run passed, 1 at the first failure, 2 on bad arguments.
set -u
usage() {
	echo "usage: ycsb-repeat.sh RUNS COMMAND..." >&2
	exit 2
}
[ $# -ge 2 ] || usage
runs=$1
shift
case $runs in ''|*[!0-9]*|0) echo "ycsb-repeat: RUNS: bad value '$runs' (expected a count > 0)" >&2; usage ;; esac
out=$(mktemp /tmp/loco-ycsbrep-XXXXXX)
trap 'rm -f "$out"' EXIT
for i in $(seq 1 "$runs"); do
	if ! "$@" >"$out" 2>&1; then
		tail -n 60 "$out"
		echo "ycsb-repeat: run $i of $runs failed ($((i - 1)) passed)"
		exit 1
	fi
done
echo "ycsb-repeat: $runs of $runs runs passed"
