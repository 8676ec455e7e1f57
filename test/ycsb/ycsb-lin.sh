#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ycsb-lin.sh INDEX MODEL EXPECT MIN_OPS LOCO_RUN LINCHECK LOCO_YCSB
#             -- LOCO-RUN-ARGS... -- LOCO-YCSB-ARGS...
# Runs `LOCO_RUN LOCO-RUN-ARGS -- LOCO_YCSB --index INDEX --record DIR/node%n.jsonl
# LOCO-YCSB-ARGS` (a cluster, or -n 1 for a local index), merges the
# nodes' histories and checks them with `LINCHECK --model MODEL` (map, or
# ordered-map for runs with scans).
#   EXPECT=linearizable: passes when every node exited 0 (no missing or
#     wrong value in the end check, no corrupt read) or 3 (fenced: the
#     others took over its work while it was paused; it counts as a
#     killed node, its unfinished operations stay open in the history),
#     the cluster line was printed, at least MIN_OPS operations were
#     recorded and the history is linearizable; a run with a fenced node
#     that recorded fewer than MIN_OPS (a holder descheduled past its
#     lease on a loaded host is fenced: safe, but the run tested less
#     than asked) is run again, up to 3 runs, if what it recorded is
#     linearizable (a violation fails at once);
#   EXPECT=violation (a broken index): passes when the checker finds the
#     history not linearizable (the nodes may fail too: their end check
#     may catch the same fault), also in a run shorter than MIN_OPS (a
#     broken index may stall its clients until their operation timeout);
#     up to 3 runs, since hitting the broken window depends on timing.
#   EXPECT=caught: as violation, or a node's --verify failed (its line
#     "loco-ycsb: node N: --verify: ..."): the checker or the walk of the
#     index caught the broken variant.
# Exit 0 when it passes, 1 when not, 2 on bad arguments.
set -u
usage() {
	echo "usage: ycsb-lin.sh INDEX MODEL EXPECT MIN_OPS LOCO_RUN LINCHECK LOCO_YCSB -- LOCO-RUN-ARGS... -- LOCO-YCSB-ARGS..." >&2
	exit 2
}
[ $# -ge 9 ] || usage
index=$1 model=$2 expect=$3 min_ops=$4 loco_run=$5 lincheck=$6 ycsb=$7
shift 7
case $expect in linearizable|violation|caught) ;; *) echo "ycsb-lin: EXPECT: bad value '$expect' (expected linearizable, violation or caught)" >&2; usage ;; esac
case $min_ops in ''|*[!0-9]*) echo "ycsb-lin: MIN_OPS: bad value '$min_ops' (expected a count)" >&2; usage ;; esac
[ "$1" = "--" ] || usage
shift
run_args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
	run_args+=("$1")
	shift
done
[ $# -gt 0 ] || usage
shift
dir=$(mktemp -d /tmp/loco-ycsblin-XXXXXX)
trap 'rm -rf "$dir"' EXIT

# Did every node that failed in loco-run's output $1 exit 3 (fenced)?
only_fenced() {
	grep -q '^\[loco-run\] n[0-9]* exited with status 3 ' "$1" &&
	! grep '^\[loco-run\] n[0-9]* exited with ' "$1" |
		grep -vq ' exited with status 3 ' &&
	! grep -q '^\[loco-run\] \(timeout\|memory node\)' "$1"
}

# One recorded run and its check: 0 passed, 1 failed, 3 a node was
# fenced and the run recorded too few operations, all linearizable.
run_once() {
	rm -f "$dir"/node*.jsonl "$dir/all.jsonl"
	"$loco_run" "${run_args[@]}" -- "$ycsb" --index "$index" \
		--record "$dir/node%n.jsonl" "$@" >"$dir/out" 2>&1
	local rc=$? fenced=0
	[ "$rc" -eq 3 ] && only_fenced "$dir/out" && rc=0 fenced=1
	grep -v '^\[n[0-9]*\] ycsb: node [0-9]*: [0-9]* s, ' "$dir/out" | tail -n 40
	if [ "$expect" = linearizable ]; then
		[ "$rc" -eq 0 ] || { echo "ycsb-lin: cluster failed (loco-run exit $rc)"; return 1; }
		grep -q '"scope":"cluster"' "$dir/out" ||
			{ echo "ycsb-lin: no cluster result line"; return 1; }
	fi
	cat "$dir"/node*.jsonl >"$dir/all.jsonl" 2>/dev/null
	local ops short=0 lrc
	ops=$(grep -c '"ev":"inv"' "$dir/all.jsonl")
	echo "ycsb-lin: $ops ops recorded (cluster exit $rc)"
	if [ "$ops" -lt "$min_ops" ]; then
		echo "ycsb-lin: expected at least $min_ops ops"
		# A correct index must run the whole workload. A broken one may
		# stall its clients (timed-out operations) before the minimum;
		# a violation in what was recorded is still one, so the checker
		# runs on it. So it does on a correct index's run cut short
		# by a fenced node: run again if linearizable (below).
		[ "$expect" != linearizable ] || [ "$fenced" -eq 1 ] || return 1
		short=1
	fi
	"$lincheck" --model "$model" --timeout 60 "$dir/all.jsonl"
	lrc=$?
	if [ "$expect" = caught ] && [ "$lrc" -ne 1 ] &&
	   grep -q 'loco-ycsb: node [0-9]*: --verify: ' "$dir/out"; then
		echo "ycsb-lin: --verify caught it"
		return 0
	fi
	if [ "$expect" = linearizable ] && [ "$fenced" -eq 1 ] &&
	   [ "$ops" -lt "$min_ops" ] && [ "$lrc" -eq 0 ]; then
		echo "ycsb-lin: a node was fenced and the run recorded $ops of $min_ops ops (linearizable)"
		return 3
	fi
	if [ "$short" -eq 1 ] && [ "$lrc" -ne 1 ]; then
		echo "ycsb-lin: short run and no violation found (checker exited $lrc)"
		return 1
	fi
	case "$expect:$lrc" in
		linearizable:0|violation:1|caught:1) return 0 ;;
		*) echo "ycsb-lin: expected $expect, checker exited $lrc"; return 1 ;;
	esac
}

# A correct index gets one run: any failure fails the test, but a run
# cut short by a fenced node (above) is run again, up to 3 runs. A broken
# one gets up to 3: the checker is sound (a violation it finds is one),
# but whether a run hits the broken window depends on the host's timing.
tries=3
for try in $(seq 1 "$tries"); do
	run_once "$@"
	rc=$?
	[ "$rc" -eq 0 ] && exit 0
	[ "$expect" = linearizable ] && [ "$rc" -ne 3 ] && exit 1
	[ "$try" -lt "$tries" ] && echo "ycsb-lin: run $try of $tries proved nothing, again"
done
exit 1
