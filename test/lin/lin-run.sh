#!/usr/bin/env bash
# lin-run.sh --nodes K --min-ops N [--tries T] MODEL EXPECT LOCO_RUN LINCHECK -- LOCO-RUN-ARGS...
# Runs a cluster with LOCO_HISTORY pointing at a fresh directory, checks
# that it recorded K node histories holding at least N operations each
# (so a recording that silently failed fails the test), merges them and
# checks them with loco-lincheck --model MODEL.
# EXPECT: "linearizable" (checker exit 0) or "violation" (exit 1).
# --tries T (violation only, default 1): a broken variant's violation
# needs an interleaving that a busy host can starve; up to T runs, the
# first violation found passes (every run must still record enough).
# Exit 2 on bad arguments.
set -u
usage() {
	echo "usage: lin-run.sh --nodes K --min-ops N [--tries T] MODEL EXPECT LOCO_RUN LINCHECK -- LOCO-RUN-ARGS..." >&2
	exit 2
}
nodes= min_ops= tries=1
while [ $# -ge 2 ]; do
	case $1 in
	--nodes) nodes=$2; shift 2 ;;
	--min-ops) min_ops=$2; shift 2 ;;
	--tries) tries=$2; shift 2 ;;
	*) break ;;
	esac
done
case $nodes in ''|*[!0-9]*|0) echo "lin-run: --nodes: bad value '$nodes' (expected a count >= 1)" >&2; usage ;; esac
case $min_ops in ''|*[!0-9]*|0) echo "lin-run: --min-ops: bad value '$min_ops' (expected a count >= 1)" >&2; usage ;; esac
case $tries in ''|*[!0-9]*|0) echo "lin-run: --tries: bad value '$tries' (expected a count >= 1)" >&2; usage ;; esac
[ $# -ge 5 ] && [ "$5" = "--" ] || usage
model=$1 expect=$2 loco_run=$3 lincheck=$4
shift 5
[ "$expect" = violation ] || [ "$tries" -eq 1 ] || {
	echo "lin-run: --tries is for EXPECT violation only (a run that must be linearizable runs once)" >&2
	usage
}
dir=$(mktemp -d /tmp/loco-lin-XXXXXX)
trap 'rm -rf "$dir"' EXIT

# One recorded run and its verdict: the checker's exit status (0, 1), or
# 3 when the recording failed (cluster failed, a node missing or short).
run_once() {
	rm -f "$dir"/node*.jsonl "$dir/all.jsonl"
	"$loco_run" --env "LOCO_HISTORY=$dir" "$@" || { echo "lin-run: cluster failed"; return 3; }

	# Every node recorded, and enough.
	found=0 short=0
	for f in "$dir"/node*.jsonl; do
		[ -e "$f" ] || continue
		found=$((found + 1))
		n=$(grep -c '"ev":"inv"' "$f")
		echo "lin-run: $(basename "$f"): $n ops recorded"
		if [ "$n" -lt "$min_ops" ]; then
			echo "lin-run: $(basename "$f"): $n ops, expected at least $min_ops"
			short=1
		fi
	done
	if [ "$found" -ne "$nodes" ]; then
		echo "lin-run: $found node histories, expected $nodes"
		return 3
	fi
	[ "$short" -eq 0 ] || return 3

	cat "$dir"/node*.jsonl > "$dir/all.jsonl"
	"$lincheck" --model "$model" --timeout 60 "$dir/all.jsonl"
}

for try in $(seq "$tries"); do
	run_once "$@"
	rc=$?
	case "$expect:$rc" in
	linearizable:0|violation:1) exit 0 ;;
	violation:0) [ "$try" -lt "$tries" ] &&
		echo "lin-run: run $try of $tries: no violation found; again" ;;
	*) echo "lin-run: expected $expect, checker exited $rc"; exit 1 ;;
	esac
done
echo "lin-run: expected $expect, checker exited 0 in $tries run(s)"
exit 1
