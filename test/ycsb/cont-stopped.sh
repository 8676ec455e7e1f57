#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# cont-stopped.sh MS MIN LOCO_RUN LOCO-RUN-ARGS...
# Runs `LOCO_RUN --resume-stopped MS LOCO-RUN-ARGS...`: a node that stops
# itself (SIGSTOP at an exact place: LOCO_RACE_STOP_AT) is resumed by
# loco-run MS milliseconds later. Prints the run's output and exits with
# its status, or 1 if fewer than MIN nodes stopped themselves (loco-run's
# line "node N stopped itself": the pause the test names did not
# happen), 2 on bad arguments.
set -u
usage() {
	echo "usage: cont-stopped.sh MS MIN LOCO_RUN LOCO-RUN-ARGS..." >&2
	exit 2
}
[ $# -ge 3 ] || usage
ms=$1 min=$2 loco_run=$3
case $ms in ''|*[!0-9]*) echo "cont-stopped: MS: bad value '$ms' (expected milliseconds)" >&2; usage ;; esac
case $min in ''|*[!0-9]*) echo "cont-stopped: MIN: bad value '$min' (expected a count)" >&2; usage ;; esac
shift 3
out=$(mktemp /tmp/loco-cont-stopped-XXXXXX)
trap 'rm -f "$out"' EXIT

"$loco_run" --resume-stopped "$ms" "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
stops=$(grep -c '^\[loco-run\] node [0-9]* stopped itself' "$out")
echo "cont-stopped: $stops node(s) stopped themselves and were resumed after $ms ms"
if [ "$stops" -lt "$min" ]; then
	echo "cont-stopped: expected at least $min pause(s)"
	exit 1
fi
exit "$rc"
