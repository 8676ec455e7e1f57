#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A program run alone starts a private one-node cluster (apps/common/
# local.c): a hosts file /tmp/loco-local-* and a run directory
# /dev/shm/loco-local-PID. Whatever way it ends (--help, a bad option, a
# normal run, a transport that cannot start), both must be gone.
#   no_leftovers.sh BUILDDIR
set -u
build=$1
fail=0
check() {
	local before after pid
	before=$(ls /tmp | grep -c '^loco-local-')
	"$@" >/dev/null 2>&1 &
	pid=$!
	wait "$pid"
	after=$(ls /tmp | grep -c '^loco-local-')
	if [ -e "/dev/shm/loco-local-$pid" ]; then
		echo "no_leftovers: '$*' left /dev/shm/loco-local-$pid"
		fail=1
	fi
	if [ "$after" -gt "$before" ]; then
		echo "no_leftovers: '$*' left a /tmp/loco-local-* hosts file"
		fail=1
	fi
}
window=$build/apps/window/loco-window
litmus=$build/apps/litmus/loco-litmus
kvstore=$build/apps/kvstore/loco-kvstore
ycsb=$build/apps/ycsb/loco-ycsb
check "$window" --help
check "$window" --windows 0
check "$window" --windows 4 --duration 0.05
check env LOCO_TRANSPORT=verbs "$window" --duration 0.05
check "$litmus" --help
check "$litmus" wr --trials 10
check "$kvstore" --help
check "$kvstore" --threads x
check "$ycsb" --help
check "$ycsb" --workload g
check "$ycsb" --keys 100 --ops 10
[ "$fail" -eq 0 ] && echo "no_leftovers: 11 runs, nothing left behind"
exit "$fail"
