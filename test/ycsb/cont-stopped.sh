#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cont-stopped.sh MS MIN COMMAND...
# Runs COMMAND (e.g. tools/loco-run ...) and watches its descendants: a
# process that stopped itself (state T: LOCO_RACE_STOP_AT's SIGSTOP at an
# exact place) is resumed with SIGCONT MS milliseconds after it was first
# seen stopped. Exits with COMMAND's status, or 1 if fewer than MIN
# processes were stopped and resumed (the pause the test names did not
# happen), 2 on bad arguments. Only this command's own descendants are
# signalled, by PID.
set -u
usage() {
	echo "usage: cont-stopped.sh MS MIN COMMAND..." >&2
	exit 2
}
[ $# -ge 3 ] || usage
ms=$1 min=$2
case $ms in ''|*[!0-9]*) echo "cont-stopped: MS: bad value '$ms' (expected milliseconds)" >&2; usage ;; esac
case $min in ''|*[!0-9]*) echo "cont-stopped: MIN: bad value '$min' (expected a count)" >&2; usage ;; esac
shift 2

"$@" &
top=$!

# Every descendant of PID $1, one a line.
descendants() {
	local kids k
	kids=$(cat /proc/"$1"/task/*/children 2>/dev/null)
	for k in $kids; do
		echo "$k"
		descendants "$k"
	done
}

declare -A since
resumed=0
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
while kill -0 "$top" 2>/dev/null; do
	t=$(now_ms)
	for p in $(descendants "$top"); do
		state=$(awk '{print $3}' /proc/"$p"/stat 2>/dev/null)
		if [ "$state" = T ]; then
			[ -n "${since[$p]:-}" ] || since[$p]=$t
			if [ $((t - since[$p])) -ge "$ms" ]; then
				kill -CONT "$p" 2>/dev/null
				echo "cont-stopped: resumed pid $p after $((t - since[$p])) ms" >&2
				resumed=$((resumed + 1))
				unset "since[$p]"
			fi
		fi
	done
	sleep 0.02
done
wait "$top"
rc=$?
echo "cont-stopped: $resumed stopped process(es) resumed" >&2
if [ "$rc" -eq 0 ] && [ "$resumed" -lt "$min" ]; then
	echo "cont-stopped: expected at least $min pause(s)" >&2
	exit 1
fi
exit "$rc"
