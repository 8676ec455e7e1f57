#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# netns_test.sh [--wrap COMMAND...]
# Tests tools/loco-run --netns (root only: skips with 77 and the reason
# otherwise):
#  - each node runs in its own network namespace, sees lo and loco0 only,
#    with address 10.77.0.(ID+1), and reaches every other node over it;
#  - ucx over TCP between namespaces (loco-smoke, a memory node and two
#    compute nodes; UCX's worker address carries loco0 only);
#  - --netem-delay-ms: a round trip grows by 2 x the delay (by netem, or
#    on a kernel without it by loco-netdelay: netdelay_test.sh tests that
#    path); --net-delay-via netem works or, without netem, is refused
#    with exit 2 and the reason;
#  - an unreachable peer: the memory node's interface taken down under a
#    busy ucx-tcp client, whose requests then fail after --timeout-ms with
#    a message naming the node (no hang);
#  - nothing is left behind: the run's namespaces are gone afterwards,
#    and those of a loco-run that was SIGKILLed are removed by the next;
#  - --netns without root is refused (checked through setpriv when it
#    exists).
# With --wrap, only checks that namespaces work here (else skip 77) and
# then runs COMMAND (a test of some program under loco-run --netns).
set -u

here=$(cd "$(dirname "$0")" && pwd)
LR=${LOCO_RUN:-$here/../../tools/loco-run}
probe=loco-netns-probe-$$

# shellcheck source=../common/skip.sh
. "$here/../common/skip.sh"
[ "$(id -u)" -eq 0 ] || skip_root "--netns needs root (network namespaces)"
command -v ip >/dev/null || skip_missing iproute2 "no ip command"
ip netns add "$probe" 2>/dev/null ||
	skip_root "cannot create a network namespace here (root without CAP_SYS_ADMIN)"
ip netns del "$probe"

if [ "${1:-}" = --wrap ]; then
	shift
	exec "$@"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/loco-netns-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() {
	echo "netns_test: FAIL: $*" >&2
	for f in "$work"/*.out; do
		[ -f "$f" ] && sed "s|^|  $(basename "$f"): |" "$f" | tail -20 >&2
	done
	exit 1
}

# left PID: namespaces of the loco-run with that pid still present.
left() { ip netns list | grep -c "^loco-run-$1-" ; }

# 1. Addresses and reachability: every node prints its interfaces and
#    pings the others' addresses once.
cat >"$work/node.sh" <<'EOF'
#!/bin/sh
ip -o link show | awk -F': ' '{print "link", $2}' | sed 's/@.*//'
ip -o -4 addr show dev loco0 | awk '{print "addr", $4}'
for a in 10.77.0.1 10.77.0.2 10.77.0.3; do
	python3 -c "
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect(('$a', 9))
print('route', '$a', s.getsockname()[0])"
done
EOF
chmod +x "$work/node.sh"
"$LR" --netns -n 3 --timeout 30 -- "$work/node.sh" \
	>"$work/addr.out" 2>&1 &
pid=$!
wait $pid || fail "loco-run --netns with a shell script failed"
for id in 0 1 2; do
	want=10.77.0.$((id + 1))
	grep -q "^\[n$id\] addr $want/24$" "$work/addr.out" ||
		fail "node $id has not address $want"
	links=$(grep -c "^\[n$id\] link " "$work/addr.out")
	[ "$links" -eq 2 ] || fail "node $id sees $links interfaces, expected lo and loco0"
	grep -q "^\[n$id\] link loco0$" "$work/addr.out" || fail "node $id has no loco0"
	for a in 1 2 3; do
		grep -q "^\[n$id\] route 10.77.0.$a $want$" "$work/addr.out" ||
			fail "node $id does not route 10.77.0.$a through loco0"
	done
done
[ "$(left $pid)" -eq 0 ] || fail "namespaces of loco-run $pid left behind"

# 2. ucx over TCP between the namespaces.
"$LR" --netns -m 1 -n 2 --transport ucx --timeout 90 -- \
	loco-smoke --iters 2000 >"$work/smoke.out" 2>&1 &
pid=$!
wait $pid || fail "loco-smoke on ucx under --netns failed"
[ "$(grep -c '"ok":true' "$work/smoke.out")" -eq 2 ] || fail "loco-smoke: not ok"
grep -q "UCX_TLS=tcp" "$work/smoke.out" || fail "ucx did not default to UCX_TLS=tcp"
[ "$(left $pid)" -eq 0 ] || fail "namespaces of loco-run $pid left behind"

# 3. A delay of 2 ms per packet makes a round trip >= 4 ms (netem, or
#    loco-netdelay where the kernel has no netem: the message says which).
"$LR" --netns --netem-delay-ms 2 -n 2 --transport ucx \
	--timeout 90 -- loco-smoke --iters 200 >"$work/netem.out" 2>&1 &
pid=$!
wait $pid || fail "loco-smoke with a 2 ms delay failed"
grep -Eq "netem delay 2 ms per packet|delay 2 ms per packet by loco-netdelay" \
	"$work/netem.out" || fail "the netns message does not say what made the delay"
# The counter lives on node 0 (the lowest compute node): node 1's FAAs
# each cross the network.
p50=$(grep '^\[n1\] {' "$work/netem.out" | grep -o '"p50_us":[0-9.]*' | cut -d: -f2)
[ -n "$p50" ] || fail "no result line of node 1"
python3 -c "import sys; sys.exit(0 if float('$p50') >= 4000 else 1)" ||
	fail "node 1's p50 $p50 us with a 2 ms delay each way"
[ "$(left $pid)" -eq 0 ] || fail "namespaces of loco-run $pid left behind"
#    --net-delay-via netem: netem, or a clear refusal.
"$LR" --netns --net-delay-via netem --netem-delay-ms 2 -n 1 --timeout 30 -- \
	true >"$work/netem-only.out" 2>&1 &
pid=$!
wait $pid
rc=$?
if grep -q "no netem qdisc" "$work/netem-only.out"; then
	[ "$rc" -eq 2 ] || fail "netem missing: exit $rc, expected 2"
	echo "netns_test: this kernel has no netem: refusal checked"
else
	[ "$rc" -eq 0 ] || fail "--net-delay-via netem failed (exit $rc)"
	grep -q "netem delay 2 ms per packet" "$work/netem-only.out" ||
		fail "--net-delay-via netem: no netem message"
fi
[ "$(left $pid)" -eq 0 ] || fail "namespaces of loco-run $pid left behind"

# 4. Unreachable: node 0's link goes down under loco-probe's reads.
"$LR" --netns -m 1 -n 1 --transport ucx-tcp --timeout 60 -- \
	loco-probe --timeout-ms 1000 loop 7 30 >"$work/down.out" 2>&1 &
pid=$!
ns=
# The link goes down once the probe said it reads in a loop (its first
# round trip done), within 30 s.
for _ in $(seq 300); do
	ns=$(ip netns list | awk '{print $1}' | grep "^loco-run-$pid-.*-n0$")
	[ -n "$ns" ] && grep -q "loco-probe: looping" "$work/down.out" 2>/dev/null &&
		break
	sleep 0.1
done
[ -n "$ns" ] || fail "no namespace of node 0"
grep -q "loco-probe: looping" "$work/down.out" ||
	fail "the probe never began its loop: $(cat "$work/down.out")"
t0=$SECONDS
ip -n "$ns" link set loco0 down || fail "cannot take loco0 down in $ns"
wait $pid
rc=$?
[ "$rc" -ne 0 ] || fail "the client went on with its memory node unreachable"
[ $((SECONDS - t0)) -le 15 ] || fail "the client took $((SECONDS - t0)) s to give up"
grep -q "no answer from node 0 in time" "$work/down.out" ||
	fail "no clear message about the unreachable node"
[ "$(left $pid)" -eq 0 ] || fail "namespaces of loco-run $pid left behind"

# 5. A SIGKILLed loco-run leaves its namespaces; the next run removes them.
"$LR" --netns -n 2 --timeout 60 -- sleep 30 >"$work/killed.out" 2>&1 &
pid=$!
for _ in $(seq 100); do
	[ "$(left $pid)" -ge 3 ] && break
	sleep 0.1
done
[ "$(left $pid)" -ge 3 ] || fail "loco-run $pid made no namespaces"
kill -9 $pid
wait $pid 2>/dev/null
# Its nodes die with it (parent-death signal): wait (10 s at most) until
# no process of its namespaces is left.
for _ in $(seq 100); do
	busy=0
	for n in $(ip netns list | awk '{print $1}' | grep "^loco-run-$pid-"); do
		[ -n "$(ip netns pids "$n" 2>/dev/null)" ] && busy=1
	done
	[ "$busy" -eq 0 ] && break
	sleep 0.1
done
[ "$busy" -eq 0 ] || fail "nodes of the SIGKILLed loco-run $pid still run"
[ "$(left $pid)" -ge 3 ] || fail "expected the killed run's namespaces to remain"
"$LR" --netns -n 1 --timeout 30 -- true >"$work/gc.out" 2>&1 ||
	fail "the run after a SIGKILLed one failed"
[ "$(left $pid)" -eq 0 ] || fail "stale namespaces of loco-run $pid not removed"

# 6. Without root: refused with the reason.
if command -v setpriv >/dev/null; then
	setpriv --reuid=65534 --regid=65534 --clear-groups "$LR" --netns -n 1 \
		-- true >"$work/user.out" 2>&1
	rc=$?
	[ "$rc" -eq 2 ] || fail "--netns as nobody: exit $rc, expected 2"
	grep -q -- "--netns needs root" "$work/user.out" ||
		fail "--netns as nobody: no reason given"
fi
echo "netns_test: ok"
