#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# netdelay_test.sh LOCO_NETDELAY
# Tests loco-run --netns with the delay made by loco-netdelay over TUN
# devices (--net-delay-via tun; the fallback on kernels without netem).
# Run through `netns_test.sh --wrap`, which skips (77) without root or
# network namespaces; skips itself without /dev/net/tun.
#  - a 20 ms delay: a TCP round trip between two nodes takes >= 40 ms
#    (a lower bound: load cannot break it), the forwarder delivers
#    everything (dropped 0), its CPU time and counters are printed;
#  - delay 0 (the forwarder's own cost): node 0 reaches nodes 1 and 2,
#    each packet to the node its address names;
#  - --netem-delay-ms alone (auto): netem if the kernel has it, else
#    loco-netdelay, and the message says which; the round trip bound holds
#    either way;
#  - loco's data path across it: loco-transfer on ucx-tcp (a memory node,
#    two compute nodes, 0.2 ms per packet) conserves the total;
#  - loco-netdelay exiting under the nodes fails the run (exit 1, named);
#    a SIGKILLed loco-run takes loco-netdelay and its devices with it;
#  - nothing is left behind: no namespace, device or loco-netdelay of a
#    run afterwards;
#  - loco-netdelay refuses bad input with exit 2 and the reason.
set -u

here=$(cd "$(dirname "$0")" && pwd)
LR=${LOCO_RUN:-$here/../../tools/loco-run}
ND=${1:?usage: netdelay_test.sh LOCO_NETDELAY}

# shellcheck source=../common/skip.sh
. "$here/../common/skip.sh"
[ -c /dev/net/tun ] || skip_hardware "no /dev/net/tun (TUN device)"

work=$(mktemp -d "${TMPDIR:-/tmp}/loco-netdelay-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() {
	echo "netdelay_test: FAIL: $*" >&2
	for f in "$work"/*.out; do
		[ -f "$f" ] && sed "s|^|  $(basename "$f")| |" "$f" | tail -20 >&2
	done
	exit 1
}

# gone PID: nothing of the loco-run with that pid is left: namespaces,
# TUN devices (named lnd<pid>n<id>) or its loco-netdelay. The forwarder
# of a SIGKILLed run dies by its parent-death signal: allow it 5 s.
gone() {
	local i
	for i in $(seq 50); do
		if ! pgrep -f "loco-netdelay .*lnd$1n0=" >/dev/null &&
			! ip -o link show | grep -q "lnd$1n"; then
			break
		fi
		sleep 0.1
	done
	! ls /run/netns 2>/dev/null | grep -q "^loco-run-$1-" ||
		fail "namespaces of loco-run $1 left behind"
	! pgrep -f "loco-netdelay .*lnd$1n0=" >/dev/null ||
		fail "loco-netdelay of loco-run $1 still runs"
	! ip -o link show | grep -q "lnd$1n" ||
		fail "TUN devices of loco-run $1 left in the host's namespace"
}

# Node 0 opens a TCP connection to each other node (which echo) and prints
# the smallest of 5 round trips per peer: `rtt ADDR MS`.
cat >"$work/echo.py" <<'EOF'
import os, socket, sys, time
me = int(os.environ["LOCO_NODE_ID"])
peers = int(sys.argv[1])
if me:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.77.0.%d" % (me + 1), 9000))
    s.listen()
    s.settimeout(20)
    c, _ = s.accept()
    c.settimeout(20)
    while True:
        d = c.recv(64)
        if not d:
            break
        c.sendall(d)
    sys.exit(0)
for peer in range(1, peers + 1):
    addr = "10.77.0.%d" % (peer + 1)
    for _ in range(200):
        try:
            s = socket.create_connection((addr, 9000), timeout=20)
            break
        except OSError:
            time.sleep(0.05)
    else:
        sys.exit("node 0: cannot connect to " + addr)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    best = None
    for i in range(5):
        t = time.monotonic()
        s.sendall(b"%d" % i)
        if s.recv(64) != b"%d" % i:
            sys.exit("node 0: wrong echo from " + addr)
        rtt = (time.monotonic() - t) * 1e3
        best = rtt if best is None else min(best, rtt)
    s.close()
    print("rtt %s %.3f" % (addr, best))
EOF

# rtt_at_least FILE ADDR MS: node 0's best round trip to ADDR >= MS.
rtt_at_least() {
	local got
	got=$(sed -n "s/^\[n0\] rtt $2 //p" "$1")
	[ -n "$got" ] || fail "no round trip to $2 in $1"
	python3 -c "import sys; sys.exit(0 if float('$got') >= $3 else 1)" ||
		fail "round trip to $2 took $got ms, expected >= $3 ms"
	echo "netdelay_test: round trip to $2: $got ms (>= $3)"
}

# 1. 20 ms per packet over TUN: every round trip >= 40 ms.
"$LR" --netns --net-delay-via tun --netem-delay-ms 20 -n 2 --timeout 30 -- \
	python3 "$work/echo.py" 1 >"$work/tun20.out" 2>&1 &
pid=$!
wait $pid || fail "echo over loco-netdelay with 20 ms failed"
grep -q "delay 20 ms per packet by loco-netdelay over TUN (--net-delay-via tun)" \
	"$work/tun20.out" || fail "no netns message naming loco-netdelay"
rtt_at_least "$work/tun20.out" 10.77.0.2 40
grep -Eq "^loco-netdelay: delay 20 ms, .*forwarded [1-9][0-9]* packets .*dropped 0 " \
	"$work/tun20.out" || fail "loco-netdelay's counters: not all delivered"
gone $pid

# 2. Delay 0: node 0 reaches nodes 1 and 2 through the forwarder.
"$LR" --netns --net-delay-via tun -n 3 --timeout 30 -- \
	python3 "$work/echo.py" 2 >"$work/tun0.out" 2>&1 &
pid=$!
wait $pid || fail "echo over loco-netdelay with delay 0 failed"
grep -q "^\[n0\] rtt 10.77.0.2 " "$work/tun0.out" || fail "node 0 did not reach node 1"
grep -q "^\[n0\] rtt 10.77.0.3 " "$work/tun0.out" || fail "node 0 did not reach node 2"
grep -q "delay 0 ms per packet by loco-netdelay" "$work/tun0.out" ||
	fail "no netns message for delay 0"
gone $pid

# 3. auto: netem where the kernel has it, else loco-netdelay; said so.
"$LR" --netns --netem-delay-ms 20 -n 2 --timeout 30 -- \
	python3 "$work/echo.py" 1 >"$work/auto.out" 2>&1 &
pid=$!
wait $pid || fail "echo with --netem-delay-ms 20 (auto) failed"
grep -Eq "netem delay 20 ms per packet|delay 20 ms per packet by loco-netdelay over TUN \(this kernel has no netem\)" \
	"$work/auto.out" || fail "the netns message does not say what made the delay"
rtt_at_least "$work/auto.out" 10.77.0.2 40
gone $pid

# 4. loco across the forwarder: the transfers conserve the total.
"$LR" --netns --net-delay-via tun --netem-delay-ms 0.2 -m 1 -n 2 \
	--transport ucx-tcp --timeout 60 -- loco-transfer --duration 2 \
	>"$work/transfer.out" 2>&1 &
pid=$!
wait $pid || fail "loco-transfer over loco-netdelay failed"
grep -q '"scope":"cluster".*"conserved":true' "$work/transfer.out" ||
	fail "loco-transfer: total not conserved"
gone $pid

# 5. loco-netdelay exiting under the nodes fails the run: the node (a
#    child of loco-run: its $PPID is loco-run's pid) stops it.
"$LR" --netns --net-delay-via tun -n 1 --timeout 30 -- sh -c \
	'kill $(pgrep -f "loco-netdelay .*lnd${PPID}n0=") && sleep 1' \
	>"$work/fwd-exit.out" 2>&1 &
pid=$!
wait $pid
rc=$?
[ "$rc" -eq 1 ] || fail "loco-netdelay gone under the nodes: exit $rc, expected 1"
grep -q "loco-netdelay exited before the end (status 0): the nodes lost their network" \
	"$work/fwd-exit.out" || fail "loco-netdelay's early exit not reported"
gone $pid

# 6. A SIGKILLed loco-run: its forwarder and devices go with it.
"$LR" --netns --net-delay-via tun -n 2 --timeout 60 -- sleep 30 \
	>"$work/killed.out" 2>&1 &
pid=$!
for _ in $(seq 100); do
	pgrep -f "loco-netdelay .*lnd${pid}n0=" >/dev/null &&
		grep -q "netns:" "$work/killed.out" && break
	sleep 0.1
done
pgrep -f "loco-netdelay .*lnd${pid}n0=" >/dev/null || fail "no loco-netdelay to orphan"
kill -9 $pid
wait $pid 2>/dev/null
"$LR" --netns -n 1 --timeout 30 -- true >"$work/gc.out" 2>&1 ||
	fail "the run after a SIGKILLed one failed"
gone $pid

# 7. Bad input.
"$ND" --delay-ms -1 x=10.77.0.1 >"$work/bad.out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "loco-netdelay --delay-ms -1: exit $rc, expected 2"
grep -q "^loco-netdelay: --delay-ms: expected 0..10000 milliseconds, got '-1'$" \
	"$work/bad.out" || fail "loco-netdelay --delay-ms -1: no reason given"
"$ND" x=10.77.0.1 y=10.77.0.1 >"$work/bad2.out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "loco-netdelay with an address twice: exit $rc"
grep -q "given twice" "$work/bad2.out" || fail "duplicate address: no reason"
echo "netdelay_test: ok"
