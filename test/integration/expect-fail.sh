#!/usr/bin/env bash
# expect-fail.sh STATUS PATTERN COUNT -- COMMAND...
# Passes when COMMAND exits with STATUS and PATTERN (grep -E) matches at
# least COUNT lines of its combined output.
set -u
want=$1 pattern=$2 count=$3
shift 4
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
got=$(printf '%s\n' "$out" | grep -cE -- "$pattern")
if [ "$rc" -ne "$want" ]; then
	echo "expect-fail: exit status $rc, expected $want"
	exit 1
fi
if [ "$got" -lt "$count" ]; then
	echo "expect-fail: '$pattern' matched $got lines, expected at least $count"
	exit 1
fi
exit 0
