#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A program run alone starts a private one-node cluster (apps/common/
# local.c): a hosts file and a key /tmp/loco-local-[key-]PID-* and a run
# directory /dev/shm/loco-local-PID. Whatever way it ends (--help, a bad
# option, a normal run, a transport that cannot start, SIGINT, SIGTERM,
# SIGHUP), all must be gone; after a SIGKILL, the next private cluster
# removes them (and not those of a private cluster that still runs).
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

# Ended by a signal. The program starts with SIGINT, SIGTERM and SIGHUP
# at their defaults, as from a terminal: a background job of a script
# has SIGINT ignored, and a run under nohup SIGHUP (the library leaves an
# ignored signal ignored).
opbench=$build/apps/opbench/loco-opbench
defaults='import os, signal, sys
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])'
# A private cluster's files, by its PID: the run directory, and the hosts
# file and key in /tmp.
files_of() {
	ls -d "/dev/shm/loco-local-$1" /tmp/loco-local-"$1"-* \
	      /tmp/loco-local-key-"$1"-* 2>/dev/null
}
# Start a long private run; its PID in $started once its run directory
# holds the node's fence file (the manager is up), or 0 after 10 s.
start_long() {
	python3 -c "$defaults" "$opbench" --duration 60 --ops read \
		>/dev/null 2>&1 &
	started=$!
	for _ in $(seq 200); do
		[ -e "/dev/shm/loco-local-$started/node0.fence" ] && return
		sleep 0.05
	done
	echo "no_leftovers: loco-opbench $started: no run directory after 10 s"
	kill -KILL "$started"
	fail=1
	started=0
}
# Wait for PID to end, at most 10 s (then it is killed: a failure); its
# exit status in $st.
end_of() {
	for _ in $(seq 200); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$1" 2>/dev/null; then
		echo "no_leftovers: loco-opbench $1 still runs 10 s after the signal"
		kill -KILL "$1"
		fail=1
	fi
	wait "$1"
	st=$?
}
for sig in INT TERM HUP; do
	start_long
	[ "$started" -ne 0 ] || continue
	kill -"$sig" "$started"
	end_of "$started"
	if [ "$st" -ne $((128 + $(kill -l "$sig"))) ]; then
		echo "no_leftovers: SIG$sig: loco-opbench exited $st, not by the signal"
		fail=1
	fi
	if [ -n "$(files_of "$started")" ]; then
		echo "no_leftovers: SIG$sig left:" $(files_of "$started")
		fail=1
	fi
done
# SIGKILL leaves the files; the next private cluster removes them, and
# not those of one that still runs.
start_long
live=$started
start_long
dead=$started
if [ "$live" -ne 0 ] && [ "$dead" -ne 0 ]; then
	kill -KILL "$dead"
	end_of "$dead"
	if [ -z "$(files_of "$dead")" ]; then
		echo "no_leftovers: SIGKILL: nothing left to sweep (test broken)"
		fail=1
	fi
	"$opbench" --duration 0.01 --ops read >/dev/null 2>&1
	if [ -n "$(files_of "$dead")" ]; then
		echo "no_leftovers: the next run left the killed one's:" $(files_of "$dead")
		fail=1
	fi
	if [ ! -e "/dev/shm/loco-local-$live/node0.fence" ]; then
		echo "no_leftovers: the next run removed a running one's files"
		fail=1
	fi
	kill -TERM "$live"
	end_of "$live"
	if [ -n "$(files_of "$live")" ]; then
		echo "no_leftovers: SIGTERM left:" $(files_of "$live")
		fail=1
	fi
fi
[ "$fail" -eq 0 ] && echo "no_leftovers: 11 runs and 5 signalled, nothing left behind"
exit "$fail"
