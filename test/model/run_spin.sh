#!/bin/sh
# SPDX-License-Identifier: MIT
# Check a Promela model with spin: run_spin.sh MODEL pass|fail [-DNAME=VALUE]...
#   pass: the exhaustive safety search must report "errors: 0" and have
#         completed (pan exits 0 even on a violation, hence the grep);
#   fail: it must report errors > 0 (a broken variant is caught).
# Exit 77 (skip) when spin is not installed (a failure under CI=true:
# test/common/skip.sh).
# SPIN_OPT: the C compiler's optimisation of pan (default -O0: for a
# search of a few million states, or one that stops at its first error,
# compiling pan.c at -O2 costs more than it saves; the long searches of
# suite stress set -O2).
set -eu
model=$1 expect=$2
shift 2
. "$(dirname "$0")/../common/skip.sh"
command -v spin >/dev/null || skip_missing spin "cannot check $(basename "$model")"
dir=$(mktemp -d /tmp/loco-spin-XXXXXX)
trap 'rm -rf "$dir"' EXIT
cp "$model" "$dir/model.pml"
cd "$dir"
spin -a "$@" model.pml >spin.out 2>&1 || { cat spin.out; exit 1; }
cc "${SPIN_OPT:--O0}" -w -DSAFETY -DCOLLAPSE -DMEMLIM=3000 -o pan pan.c
./pan -m200000 >pan.out 2>&1 || true
grep -E "errors:|states, stored|assertion violated|search depth|Search not" pan.out || true
errors=$(sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' pan.out | head -n1)
[ -n "$errors" ] || { cat pan.out; echo "run_spin: no result"; exit 1; }
case $expect in
pass)
	if [ "$errors" -ne 0 ] || grep -q "Search not completed\|max search depth too small\|out of memory" pan.out; then
		echo "run_spin: FAIL: expected a complete search with no errors"
		exit 1
	fi ;;
fail)
	if [ "$errors" -eq 0 ]; then
		echo "run_spin: FAIL: the broken variant was not caught"
		exit 1
	fi ;;
*)
	echo "usage: run_spin.sh MODEL pass|fail [-Dname=value]..."
	exit 2 ;;
esac
echo "run_spin: ok ($expect, errors: $errors)"
