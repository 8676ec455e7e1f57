#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Tests tools/loco-run itself with fake nodes (fake_node.py); needs neither
# the C library nor loco-memnode. Exit 0 on success, 1 on the first failure.
set -u

here=$(cd "$(dirname "$0")" && pwd)
LR=${LOCO_RUN:-$here/../../tools/loco-run}
work=$(mktemp -d "${TMPDIR:-/tmp}/loco-launcher-test.XXXXXX")
trap 'rm -rf "$work"; [ -z "${PY_PID-}" ] || kill "$PY_PID" 2>/dev/null' EXIT

# Private copy so the test works whatever mode the checkout gave the helper.
FAKE=$work/fake_node.py
cp "$here/fake_node.py" "$FAKE" && chmod +x "$FAKE"
export LOCO_MEMNODE=$FAKE
unset LOCO_SHM_WEAK FAKE_MEMNODE_EXIT

case_name=
fail() {
	echo "launcher_test: FAIL [$case_name]: $*" >&2
	for f in out err; do
		[ -f "$FAKE_DIR/$f" ] && sed "s/^/  $f| /" "$FAKE_DIR/$f" >&2
	done
	exit 1
}

# begin NAME: fresh FAKE_DIR for one case.
begin() {
	case_name=$1
	export FAKE_DIR=$work/$1
	mkdir -p "$FAKE_DIR"
}

# run ARGS...: the launcher (with a safety net); sets rc, secs.
run() {
	local t0=$SECONDS
	timeout -k 5 90 "$LR" "$@" >"$FAKE_DIR/out" 2>"$FAKE_DIR/err"
	rc=$?
	secs=$((SECONDS - t0))
}

expect_rc() {
	[ "$rc" -eq "$1" ] || fail "exit status $rc, expected $1"
}

# has FILE REGEX / lacks FILE REGEX (extended grep on out or err).
has() { grep -Eq -- "$2" "$FAKE_DIR/$1" || fail "$1 lacks /$2/"; }
lacks() { ! grep -Eq -- "$2" "$FAKE_DIR/$1" || fail "$1 has /$2/"; }

# One Python process evaluates the test's expressions (pyeval, json,
# pytrue): a python3 start costs 20-70 ms of CPU, and the test made some
# 40 of them besides the launcher's and the fake nodes' own. A request is
# a line "DUMP<tab>EXPR" (EXPR one line, d bound to the JSON in file
# DUMP, none if empty); the answer "ok N" and the N lines of str(EXPR),
# or "err".
coproc PY { python3 -u -c '
import json, sys
for line in sys.stdin:
    dump, _, expr = line.rstrip("\n").partition("\t")
    try:
        d = json.load(open(dump)) if dump else None
        out = str(eval(expr, {"d": d})).split("\n")
        sys.stdout.write("ok %d\n%s\n" % (len(out), "\n".join(out)))
    except Exception:
        sys.stdout.write("err\n")
    sys.stdout.flush()
'; }
py_in=${PY[1]} py_out=${PY[0]}

# pyeval DUMP EXPR: print str(EXPR); status 1 if it raised (or no answer
# came in 30 s).
pyeval() {
	local head n line
	printf '%s\t%s\n' "$1" "$2" >&"$py_in" || return 1
	IFS=' ' read -r -t 30 -u "$py_out" head n || return 1
	[ "$head" = ok ] || return 1
	while [ "$n" -gt 0 ]; do
		IFS= read -r -t 30 -u "$py_out" line || return 1
		printf '%s\n' "$line"
		n=$((n - 1))
	done
}

# pytrue EXPR: status 0 if EXPR is true.
pytrue() {
	[ "$(pyeval '' "bool($1)")" = True ]
}

# json N EXPR: evaluate python EXPR on node N's dump (bound to d).
json() {
	pyeval "$FAKE_DIR/n$1.json" "$2" || fail "no usable dump for n$1"
}

# counts N: the count lines of node N as "K T" (T its monotonic clock).
counts() {
	sed -n "s/^\[n$1\] count \([0-9]*\) at \([0-9.]*\)$/\1 \2/p" "$FAKE_DIR/out"
}
# fault_at REGEX: the time of the first launcher line matching REGEX.
fault_at() {
	sed -En "s/^\[loco-run\] $1 at ([0-9.]+)s.*/\1/p" "$FAKE_DIR/err" | head -1
}

alive() {
	local state
	state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
	[ "$state" != Z ] && grep -qaE 'fake_node|sleep' "/proc/$1/cmdline" 2>/dev/null
}

# No process whose pid a fake node recorded is still alive (zombies left to
# a non-reaping init count as gone).
pids_gone() {
	[ -s "$FAKE_DIR/pids" ] || fail "no pids recorded"
	local pid
	while read -r pid; do
		for _ in $(seq 20); do
			alive "$pid" || continue 2
			sleep 0.1   # SIGKILLed processes take a moment to go
		done
		fail "pid $pid still alive after the launcher exited"
	done <"$FAKE_DIR/pids"
}

run_dir_gone() {
	local dir
	dir=$(json "$1" 'd["env"]["LOCO_RUN_DIR"]')
	[ -n "$dir" ] || fail "no LOCO_RUN_DIR"
	[ ! -e "$dir" ] || fail "run dir $dir left behind"
	dir=$(dirname "$(json "$1" 'd["env"]["LOCO_HOSTS"]')")
	[ ! -e "$dir" ] || fail "hosts dir $dir left behind"
}

# --- usage -------------------------------------------------------------------
begin usage
run --help
expect_rc 0
has out 'usage: loco-run'
has out 'LOCO_MEMNODE'
# Each bad command line must make loco-run exit 2 with a message. The
# first and the last two run as processes; the others are checked by one
# Python process that loads tools/loco-run as a module and calls its
# main(), which parses, resolves the program and returns 2 before it
# starts anything (a start of loco-run costs ~70 ms of CPU: 50 of them
# were half this test's CPU time).
bad_args=("-- $FAKE" "-n 0 -- $FAKE" "-n 2 --kill 5@1 -- $FAKE" \
	"-n 2 --kill 1 -- $FAKE" "-n 2 --bogus -- $FAKE" "-n 2 --timeout x -- $FAKE" \
	"-n 2 --env NOEQUALS -- $FAKE" "-n 2 --transport tcp -- $FAKE" \
	"-m 1 -n 1 --restart 1@1 -- $FAKE" "-m 1 -n 1 --restart 0@x -- $FAKE" \
	"-m 1 -n 1 --restart 0@1:-5 -- $FAKE" "-m 1 -n 1 --power-cut -- $FAKE" \
	"-m 1 -n 1 --restart 0@1:800 --restart 0@1.5 -- $FAKE" \
	"-m 1 -n 1 --mirror 0 -- $FAKE" "-m 1 -n 1 --durable --mirror 1 -- $FAKE" \
	"-m 1 -n 1 --durable --mirror 0 --mirror 0 -- $FAKE" \
	"-n 2 --kill 1@after:1: -- $FAKE" "-n 2 --kill 1@after:x:y -- $FAKE" \
	"-n 2 --kill 1@after:5:y -- $FAKE" "-n 2 --kill 1@1:5 -- $FAKE" \
	"-n 2 --kill 1@inf -- $FAKE" "-n 2 --kill 1@-1 -- $FAKE" \
	"-m 1 -n 1 --restart 0@after:1:x:4000000 -- $FAKE" \
	"-n 2 --restart 1@after:1:x -- $FAKE" "-n 2 --pause 1@1 -- $FAKE" \
	"-n 2 --pause 1@1:0 -- $FAKE" "-n 2 --pause 1@after:1:x -- $FAKE" \
	"-n 2 --pause 7@1:100 -- $FAKE" "-n 2 --pauses 0:100 -- $FAKE" \
	"-n 2 --pauses 2 -- $FAKE" "-n 2 --pauses 2:100:0.05 -- $FAKE" \
	"-n 2 --pauses 2:x -- $FAKE" "-n 2 --pauses-seed 3 -- $FAKE" \
	"-n 2 --clock-skew 1:1.5 -- $FAKE" "-n 2 --clock-skew 1 -- $FAKE" \
	"-n 2 --clock-skew 1:5 --clock-skew 1:4 -- $FAKE" \
	"-n 2 --clock-skew 9:1 -- $FAKE" "-n 2 --clock-skew 1:5:0 -- $FAKE" \
	"-n 2 --clock-skew 1:5:x -- $FAKE" "-n 2 --clock-skew 1:5:-3 -- $FAKE" \
	"-n 2 --clock-skew 1:5:2.5 -- $FAKE" "-n 2 --clock-skew 1:0:300 -- $FAKE" \
	"-n 2 --clock-skew 1:5:3:4 -- $FAKE" "-n 2 --resume-stopped -1 -- $FAKE" \
	"-n 2 --resume-stopped x -- $FAKE" \
	"-n 2 --env LOCO_CLOCK_SKEW_MS=3 -- $FAKE" \
	"-n 2 --env LOCO_CLOCK_SKEW_FOR_MS=3 -- $FAKE" \
	"-n 1" "-n 1 -- $work/does-not-exist" "-n 1 -- no-such-loco-program")
for bad in "${bad_args[0]}" "${bad_args[@]: -2}"; do
	# shellcheck disable=SC2086
	run $bad
	[ "$rc" -eq 2 ] || fail "'$bad' gave status $rc, expected 2"
	grep -q 'loco-run:' "$FAKE_DIR/err" || fail "'$bad': no error message"
done
printf '%s\n' "${bad_args[@]:1:${#bad_args[@]}-3}" >"$FAKE_DIR/bad"
python3 - "$LR" "$FAKE_DIR/bad" >"$FAKE_DIR/out" 2>"$FAKE_DIR/err" <<'EOF' ||
import contextlib, importlib.machinery, importlib.util, io, sys
loader = importlib.machinery.SourceFileLoader("loco_run", sys.argv[1])
spec = importlib.util.spec_from_loader("loco_run", loader)
lr = importlib.util.module_from_spec(spec)
loader.exec_module(lr)
lines = [l for l in open(sys.argv[2]).read().splitlines() if l]
failed = 0
for line in lines:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = lr.main(line.split())
        except SystemExit as e:
            rc = e.code
    if rc != 2 or "loco-run:" not in err.getvalue():
        print("'%s' gave status %r, expected 2 with a loco-run: message "
              "(stderr: %r)" % (line, rc, err.getvalue()))
        failed = 1
if not failed:
    print("%d bad command lines: exit 2 with a message" % len(lines))
sys.exit(failed)
EOF
	fail "$(cat "$FAKE_DIR/out")"
has out "^$((${#bad_args[@]} - 3)) bad command lines: exit 2 with a message\$"

# --- prefixing, environment, hosts file, run dir ----------------------------
begin env
run -m 1 -n 2 --transport verbs --env FAKE_EXTRA=a=b -- "$FAKE" --lines 300
expect_rc 0
has out '^\[n1\] line 0 of node 1$'
has out '^\[n2\] line 299 of node 2$'
has err '^\[n1\] note from node 1$'
has err '^\[n0\] fake memnode 0 up$'
has err '^\[n0\] fake memnode 0 stopping$'
lacks out 'note from|memnode'
lacks err 'line [0-9]+ of node'
grep -qv '^\[n[0-9]\] ' "$FAKE_DIR/out" && fail "unprefixed line on stdout"
for n in 1 2; do
	grep "^\[n$n\] line " "$FAKE_DIR/out" | sed 's/.* line \([0-9]*\) .*/\1/' \
		>"$FAKE_DIR/seq$n"
	seq 0 299 | cmp -s - "$FAKE_DIR/seq$n" || fail "n$n lines out of order"
done
for n in 0 1 2; do
	[ "$(json $n 'd["env"]["LOCO_NODE_ID"]')" = "$n" ] || fail "n$n: LOCO_NODE_ID"
	[ "$(json $n 'd["env"]["LOCO_TRANSPORT"]')" = verbs ] || fail "n$n: LOCO_TRANSPORT"
	[ "$(json $n 'd["env"].get("FAKE_EXTRA")')" = a=b ] || fail "n$n: --env"
	[ "$(json $n 'd["run_dir_is_dir"]')" = True ] || fail "n$n: no run dir"
	[ "$(json $n 'oct(d["run_dir_mode"])')" = 0o700 ] || fail "n$n: run dir mode"
	case $(json $n 'd["env"]["LOCO_RUN_DIR"]') in
	/dev/shm/loco-*) ;;
	*) fail "n$n: run dir not /dev/shm/loco-*" ;;
	esac
done
[ "$(json 1 'd["env"]["LOCO_RUN_DIR"]')" = "$(json 2 'd["env"]["LOCO_RUN_DIR"]')" ] ||
	fail "nodes got different run dirs"
[ "$(json 0 'd["env"]["LOCO_ROLE"]')" = memory ] || fail "n0: LOCO_ROLE"
[ "$(json 2 'd["env"]["LOCO_ROLE"]')" = compute ] || fail "n2: LOCO_ROLE"
json 1 'd["hosts"]' >"$FAKE_DIR/hosts"
python3 - "$FAKE_DIR/hosts" <<'EOF' || fail "bad hosts file: $(cat "$FAKE_DIR/hosts")"
import re, sys
lines = [l.split() for l in open(sys.argv[1]) if l.strip()]
assert [l[0] for l in lines] == ["0", "1", "2"], lines
assert [l[2] for l in lines] == ["memory", "compute", "compute"], lines
ports = set()
for l in lines:
    m = re.fullmatch(r"127\.0\.0\.1:(\d+)", l[1])
    assert m and 0 < int(m.group(1)) < 65536, l
    ports.add(m.group(1))
assert len(ports) == 3, lines
EOF
run_dir_gone 1
pids_gone

# --- shm-weak gets a seed; default transport is shm --------------------------
begin weak
run -m 0 -n 1 --transport shm-weak -- "$FAKE" --lines 1
expect_rc 0
[ "$(json 0 'd["env"]["LOCO_TRANSPORT"]')" = shm-weak ] || fail "transport"
[ -n "$(json 0 'd["env"].get("LOCO_SHM_WEAK") or ""')" ] || fail "no LOCO_SHM_WEAK seed"
has err 'LOCO_SHM_WEAK='
begin default
run -m 0 -n 1 -- "$FAKE" --lines 1
expect_rc 0
[ "$(json 0 'd["env"]["LOCO_TRANSPORT"]')" = shm ] || fail "default transport"

# --- exit status: the first failure in time; others run to completion -------
begin status
run -m 1 -n 3 -- "$FAKE" --sleep 1:0.2 --exit 1:5 --sleep 2:1.2 --exit 2:3 \
	--sleep 3:1.5
expect_rc 5
if [ ! -e "$FAKE_DIR/done.2" ] || [ ! -e "$FAKE_DIR/done.3" ]; then
	fail "other nodes were not left to finish"
fi
has err 'n1 exited with status 5'
run_dir_gone 1
pids_gone

begin signalled
run -m 0 -n 2 -- "$FAKE" --sleep 1:0.3 --signal 1:10
expect_rc 138

# --- --fail-fast --------------------------------------------------------------
begin failfast
run -m 1 -n 2 --fail-fast -- "$FAKE" --exit 1:4 --sleep 2:60
expect_rc 4
[ "$secs" -lt 20 ] || fail "took ${secs}s; fail-fast did not kill n2"
[ ! -e "$FAKE_DIR/done.2" ] || fail "n2 finished"
pids_gone

# --- --kill: the killed node's status is ignored ----------------------------
begin kill
run -m 1 -n 2 --kill 1@0.5 -- "$FAKE" --sleep 1:60 --sleep 2:1.5
expect_rc 0
has err '^\[loco-run\] fault: SIGKILL node 1 at [0-9]+\.[0-9]{2}s \(--kill 1@0\.5\)$'
t=$(sed -n 's/^\[loco-run\] fault: SIGKILL node 1 at \([0-9.]*\)s .*/\1/p' "$FAKE_DIR/err")
pytrue "0.5 <= float('$t') < 5" ||
	fail "killed at ${t}s, expected 0.5s"
[ "$secs" -lt 20 ] || fail "took ${secs}s"
[ -e "$FAKE_DIR/done.2" ] || fail "n2 did not finish"
[ ! -e "$FAKE_DIR/done.1" ] || fail "n1 finished"
pids_gone

# --- --restart: killed, started again with the same durable directory -------
begin restart
# Aimed at n1's readiness line: a restart before it would test nothing.
run -m 2 -n 1 --durable --power-cut --restart 1@after:1:'memnode 1 up:300' -- \
	"$FAKE" --sleep 2:1.5
expect_rc 0
has err '^\[loco-run\] fault: SIGKILL node 1 at [0-9.]+s, restart in 300 ms \(--restart 1@after:1:memnode 1 up:300, seen at [0-9.]+s\)$'
has err '^\[loco-run\] fault: restarted node 1 at [0-9.]+s$'
[ "$(grep -c '^\[n1\] fake memnode 1 up$' "$FAKE_DIR/err")" -eq 2 ] ||
	fail "n1 did not start twice"
[ "$(wc -l <"$FAKE_DIR/pids")" -eq 4 ] || fail "expected 4 recorded pids"
t0=$(sed -n 's/^\[loco-run\] fault: SIGKILL node 1 at \([0-9.]*\)s.*/\1/p' "$FAKE_DIR/err")
t1=$(sed -n 's/^\[loco-run\] fault: restarted node 1 at \([0-9.]*\)s$/\1/p' "$FAKE_DIR/err")
pytrue "0.29 <= $t1 - $t0 < 5" ||
	fail "restarted ${t1}s after a kill at ${t0}s, expected 0.3s later"
d0=$(json 0 'd["env"]["LOCO_DURABLE_DIR"]')
d1=$(json 1 'd["env"]["LOCO_DURABLE_DIR"]')
[ "$d0" != "$d1" ] || fail "memory nodes share a durable directory"
case $d1 in */durable-n1) ;; *) fail "durable dir $d1" ;; esac
[ "$(json 1 'd["env"]["LOCO_POWER_CUT"]')" = 1 ] || fail "no LOCO_POWER_CUT"
[ "$(json 2 'd["env"].get("LOCO_DURABLE_DIR")')" = None ] ||
	fail "a compute node got a durable directory"
[ ! -e "$d1" ] || fail "durable dir $d1 left behind"
pids_gone

# --- --mirror: a mirror node after the memory nodes, its own directory ------
begin mirror
run -m 2 -n 1 --durable --mirror 1 --kill 1@after:1:'memnode 1 up' -- "$FAKE" \
	--sleep 3:1
expect_rc 0
[ "$(json 2 'd["env"]["LOCO_ROLE"]')" = mirror ] || fail "node 2 is no mirror"
has err '^\[loco-run\] fault: SIGKILL node 1 at [0-9.]+s '
[ "$(json 2 'd["env"]["LOCO_MIRROR_OF"]')" = 1 ] || fail "LOCO_MIRROR_OF"
case $(json 2 'd["env"]["LOCO_DURABLE_DIR"]') in
*/durable-n2) ;; *) fail "the mirror has no durable directory of its own" ;;
esac
[ "$(json 3 'd["env"]["LOCO_ROLE"]')" = compute ] || fail "node 3 is not compute"
[ "$(json 0 'd["env"].get("LOCO_MIRROR_OF")')" = None ] ||
	fail "a memory node got LOCO_MIRROR_OF"
pids_gone

# --- faults aimed at events: after the line, never before ---------------------

begin kill_event
run -m 1 -n 2 --kill 1@after:1:'count 5 at' -- "$FAKE" --count 1:200:20 \
	--sleep 2:0.5
expect_rc 0
has out '^\[n1\] count 5 at '
has err '^\[loco-run\] fault: SIGKILL node 1 at [0-9.]+s \(--kill 1@after:1:count 5 at, seen at [0-9.]+s\)$'
lacks out '^\[n1\] count 200 at '
[ ! -e "$FAKE_DIR/done.1" ] || fail "n1 finished"
[ -e "$FAKE_DIR/done.2" ] || fail "n2 did not finish"
pids_gone

# +S: S seconds after the line, the node printing all the while.
begin kill_delay
run -n 1 --kill 0@after:0:'count 3 at+0.6' -- "$FAKE" --count 0:400:10
expect_rc 0
seen=$(sed -En 's/.*--kill 0@after:0:count 3 at\+0\.6, seen at ([0-9.]+)s\)$/\1/p' \
	"$FAKE_DIR/err")
hit=$(fault_at 'fault: SIGKILL node 0')
[ -n "$seen" ] && [ -n "$hit" ] || fail "no fault line"
pytrue "$hit - $seen >= 0.59" ||
	fail "killed at ${hit}s, the line seen at ${seen}s: expected 0.6 s later"
# The node ran on after its line and was killed before its end; how far
# its own clock got by then depends on how a loaded host scheduled it
# (loco-run's delay is judged above, on loco-run's clock).
counts 0 | python3 -c '
import sys
t = {int(k): float(v) for k, v in (l.split() for l in sys.stdin)}
sys.exit(not (3 in t and max(t) > 3 and 400 not in t))' ||
	fail "n0 did not run on after its line (or was not killed)"

# An event that never comes, one that comes too late, a target gone: the run
# fails, saying so; nothing is hit.
begin event_never
run -m 1 -n 2 --kill 1@after:2:'no such line' -- "$FAKE" --count '*:3:10'
expect_rc 1
has err '^\[loco-run\] --kill 1@after:2:no such line: event never seen \(no output line of n2 held .no such line.\)$'
lacks err 'fault: SIGKILL'
[ -e "$FAKE_DIR/done.1" ] || fail "n1 did not finish"
begin event_late
run -n 2 --pause 1@after:0:'count 2 at+30:100' -- "$FAKE" --count '*:3:10'
expect_rc 1
has err '^\[loco-run\] --pause 1@after:0:count 2 at\+30:100: event seen at [0-9.]+s, but the run ended before the fault was due at [0-9.]+s$'
lacks err 'fault: SIGSTOP'
begin event_gone
run -n 2 --kill 1@after:0:'count 1 at' --kill 1@after:0:'count 3 at' -- \
	"$FAKE" --count 0:10:20 --sleep 1:30
expect_rc 1
has err '^\[loco-run\] fault: SIGKILL node 1 at [0-9.]+s \(--kill 1@after:0:count 1 at, '
has err '^\[loco-run\] fault not done: --kill 1@after:0:count 3 at: node 1 was not running at [0-9.]+s$'
has err '^\[loco-run\] --kill 1@after:0:count 3 at: node 1 was not running at '

# --- --restart aimed at an event ---------------------------------------------
begin restart_event
run -m 1 -n 1 --durable --restart 0@after:1:'count 5 at:200' -- "$FAKE" \
	--count 1:60:20
expect_rc 0
has err '^\[loco-run\] fault: SIGKILL node 0 at [0-9.]+s, restart in 200 ms \(--restart 0@after:1:count 5 at:200, seen at [0-9.]+s\)$'
has err '^\[loco-run\] fault: restarted node 0 at [0-9.]+s$'
[ "$(grep -c '^\[n0\] fake memnode 0 up$' "$FAKE_DIR/err")" -eq 2 ] ||
	fail "n0 did not start twice"
pids_gone

# --- --pause: no progress while stopped, then on again -------------------------
begin pause
run -n 1 --pause 0@after:0:'count 10 at:800' -- "$FAKE" --count 0:60:10
expect_rc 0
has err '^\[loco-run\] fault: SIGSTOP node 0 at [0-9.]+s for 800 ms \(--pause 0@after:0:count 10 at:800, seen at [0-9.]+s\)$'
has err '^\[loco-run\] fault: SIGCONT node 0 at [0-9.]+s$'
lacks err 'stopped itself'
t0=$(fault_at 'fault: SIGSTOP node 0')
t1=$(fault_at 'fault: SIGCONT node 0')
# The times are printed to 0.01 s: their difference may read 0.01 short.
pytrue "0.79 <= $t1 - $t0 < 5" ||
	fail "SIGCONT ${t1}s after a SIGSTOP at ${t0}s, expected 0.8 s later"
# Counting 10 ms apart, n0 shows one gap of at least 0.7 s, after its
# 10th line, and counts to the end after it.
counts 0 | python3 -c '
import sys
t = sorted((int(k), float(v)) for k, v in (l.split() for l in sys.stdin))
gaps = [(b[1] - a[1], a[0]) for a, b in zip(t, t[1:])]
gap, after = max(gaps)
sys.exit(not (gap >= 0.7 and after >= 10 and t[-1][0] == 60))' ||
	fail "no 0.8 s stop after count 10 in n0's counting (or no resumption)"
[ -e "$FAKE_DIR/done.0" ] || fail "n0 did not finish"

# A memory node paused to the end gets SIGCONT before its SIGTERM: it stops
# at once, not after the 5 s grace.
begin pause_cleanup
run -m 1 -n 1 --pause 0@after:0:'memnode 0 up:60000' -- "$FAKE" --sleep 1:0.3
expect_rc 0
has err '^\[loco-run\] fault: SIGSTOP node 0 at '
has err '^\[n0\] fake memnode 0 stopping$'
lacks err 'ignored SIGTERM'
[ "$secs" -lt 20 ] || fail "took ${secs}s"
pids_gone
# A timeout with a node (and its grandchild) paused: nothing stays stopped.
begin pause_timeout
run -m 1 -n 2 --timeout 8 --pause 1@after:1:'count 2 at:60000' -- "$FAKE" \
	--grandchild --count '*:3000:10'
expect_rc 124
has err '^\[loco-run\] fault: SIGSTOP node 1 at '
[ "$(wc -l <"$FAKE_DIR/pids")" -eq 5 ] || fail "expected 5 recorded pids"
pids_gone

# --- --pauses: seeded plan of random pauses of compute nodes -------------------
begin pauses
for i in 1 2; do
	run -m 1 -n 2 --pauses 3:300:1.5 --pauses-seed 42 -- "$FAKE" \
		--count '*:100:20'
	expect_rc 0
	grep '^\[loco-run\] --pauses 3:300:1.5: seed 42 ' "$FAKE_DIR/err" \
		>"$FAKE_DIR/plan$i" || fail "no plan line"
done
cmp -s "$FAKE_DIR/plan1" "$FAKE_DIR/plan2" || fail "seed 42 gave two plans"
grep -Eq '^\[loco-run\] --pauses 3:300:1\.5: seed 42 \(--pauses-seed\): n[12] at [0-9.]+s, n[12] at [0-9.]+s, n[12] at [0-9.]+s$' \
	"$FAKE_DIR/plan1" || fail "plan: $(cat "$FAKE_DIR/plan1")"
[ "$(grep -Ec '^\[loco-run\] fault: SIGSTOP node [12] at [0-9.]+s for 300 ms \(--pauses 3:300:1\.5\)$' "$FAKE_DIR/err")" -eq 3 ] ||
	fail "expected 3 SIGSTOPs"
[ "$(grep -c 'fault: SIGCONT node' "$FAKE_DIR/err")" -eq 3 ] ||
	fail "expected 3 SIGCONTs"
has err '^\[loco-run\] --pauses 3:300:1\.5: 3 of 3 pauses done \(seed 42\)$'
# The pauses of one node do not overlap: 8 pauses of 250 ms in 2 s on 2 nodes.
run -m 0 -n 2 --pauses 8:250:2 -- "$FAKE" --count '*:100:20'
expect_rc 0
python3 - "$FAKE_DIR/err" <<'EOF' || fail "overlapping pauses: $(grep 'seed' "$FAKE_DIR/err")"
import re, sys
plan = re.search(r"\): (.*)$", [l for l in open(sys.argv[1])
                                if "(--pauses-seed)" in l][0]).group(1)
starts = {}
for node, t in re.findall(r"n(\d+) at ([0-9.]+)s", plan):
    starts.setdefault(node, []).append(float(t))
assert set(starts) <= {"0", "1"} and sum(map(len, starts.values())) == 8
for ts in starts.values():
    ts.sort()
    assert all(b - a >= 0.249 for a, b in zip(ts, ts[1:])), ts
EOF

# --- --clock-skew: the node's environment, no one else's ----------------------
begin skew
LOCO_CLOCK_SKEW_MS=7 LOCO_CLOCK_SKEW_FOR_MS=9 run -m 1 -n 2 \
	--clock-skew 2:-250 --clock-skew 0:40:1500 -- "$FAKE" --lines 1
expect_rc 0
[ "$(json 2 'd["env"].get("LOCO_CLOCK_SKEW_MS")')" = -250 ] || fail "n2's skew"
[ "$(json 2 'd["env"].get("LOCO_CLOCK_SKEW_FOR_MS")')" = None ] ||
	fail "n2's skew got an end"
[ "$(json 0 'd["env"].get("LOCO_CLOCK_SKEW_MS")')" = 40 ] || fail "n0's skew"
[ "$(json 0 'd["env"].get("LOCO_CLOCK_SKEW_FOR_MS")')" = 1500 ] ||
	fail "n0's skew end"
[ "$(json 1 'd["env"].get("LOCO_CLOCK_SKEW_MS")')" = None ] ||
	fail "n1 got a skew"
[ "$(json 1 'd["env"].get("LOCO_CLOCK_SKEW_FOR_MS")')" = None ] ||
	fail "n1 got a skew end"

# --- a node that stops itself is resumed after --resume-stopped --------------
begin stop_self
run -n 2 --resume-stopped 400 -- "$FAKE" --stop-self 1:0.1 --sleep 0:0.2
expect_rc 0
has err '^\[loco-run\] node 1 stopped itself at [0-9.]+s; SIGCONT in 400 ms \(--resume-stopped\)$'
has err '^\[loco-run\] fault: SIGCONT node 1 at [0-9.]+s \(it stopped itself\)$'
has out '^\[n1\] continued$'
t0=$(fault_at 'node 1 stopped itself')
t1=$(fault_at 'fault: SIGCONT node 1')
pytrue "0.39 <= $t1 - $t0 < 5" ||
	fail "SIGCONT ${t1}s after the stop at ${t0}s, expected 0.4 s later"
[ -e "$FAKE_DIR/done.1" ] || fail "n1 did not finish"
pids_gone

# --- a memory node dying on its own is a failure -----------------------------
begin memdies
FAKE_MEMNODE_EXIT=7 run -m 1 -n 1 -- "$FAKE" --sleep '*:1'
expect_rc 7
has err 'memory node n0 died'

# --- timeout: 124, every process gone, no run dir ----------------------------
begin timeout
run -m 1 -n 2 --timeout 1 -- "$FAKE" --grandchild --sleep '*:60'
expect_rc 124
# loco-run multiplies --timeout by LOCO_TIMEOUT_SCALE (sanitizer builds).
has err "^\[loco-run\] timeout after $(pyeval '' "'%g' % (1 * float('${LOCO_TIMEOUT_SCALE:-1}'))") s\$"
[ "$secs" -lt 20 ] || fail "took ${secs}s"
[ "$(wc -l <"$FAKE_DIR/pids")" -eq 5 ] || fail "expected 5 recorded pids"
pids_gone
run_dir_gone 1

# --- SIGTERM to the launcher: 143, every process gone, no run dir ------------
begin sigterm
"$LR" -m 1 -n 2 -- "$FAKE" --grandchild --sleep '*:60' \
	>"$FAKE_DIR/out" 2>"$FAKE_DIR/err" &
lr_pid=$!
# Every process is up once the 3 nodes and the 2 grandchildren recorded
# their pids (10 s at most).
for _ in $(seq 100); do
	[ "$(wc -l <"$FAKE_DIR/pids" 2>/dev/null || echo 0)" -ge 5 ] && break
	sleep 0.1
done
kill -TERM "$lr_pid"
wait "$lr_pid"
rc=$?
expect_rc 143
pids_gone
run_dir_gone 1

# --- SIGKILL to the launcher: its run dirs stay; the next loco-run removes them
# (private bases: any other loco-run on the machine, e.g. a test beside
# this one, would remove them too, before the check that they stay)
begin sigkill
mkdir -p "$FAKE_DIR/shm" "$FAKE_DIR/tmp"
saved_tmpdir=${TMPDIR-}
export LOCO_RUN_SHM=$FAKE_DIR/shm TMPDIR=$FAKE_DIR/tmp
"$LR" -n 2 -- "$FAKE" --sleep '*:60' >"$FAKE_DIR/out" 2>"$FAKE_DIR/err" &
lr_pid=$!
for _ in $(seq 100); do
	[ -e "$FAKE_DIR/n1.json" ] && [ -e "$FAKE_DIR/n0.json" ] && break
	sleep 0.1
done
kill -KILL "$lr_pid"
wait "$lr_pid" 2>/dev/null
killed_run=$(json 1 'd["env"]["LOCO_RUN_DIR"]')
killed_hosts=$(dirname "$(json 1 'd["env"]["LOCO_HOSTS"]')")
case "$killed_run" in "$FAKE_DIR"/shm/loco-run-"$lr_pid"-*) ;;
*) fail "run dir $killed_run is not named for loco-run $lr_pid" ;; esac
[ -d "$killed_run" ] && [ -d "$killed_hosts" ] ||
	fail "expected the SIGKILLed run's dirs to remain"
pids_gone   # its nodes die with it (parent-death signal)
run -n 1 -- "$FAKE" --lines 1
expect_rc 0
[ ! -e "$killed_run" ] || fail "run dir $killed_run of the killed run left"
[ ! -e "$killed_hosts" ] || fail "hosts dir $killed_hosts of the killed run left"
unset LOCO_RUN_SHM
if [ -n "$saved_tmpdir" ]; then export TMPDIR=$saved_tmpdir; else unset TMPDIR; fi

# --- bare program names are looked up in the build dir -----------------------
begin lookup
bd=$FAKE_DIR/build
mkdir -p "$bd/apps/x/fake-app.p" "$bd/apps/x"
printf '#!/bin/sh\nexit 9\n' >"$bd/apps/x/fake-app.p/fake-app"
# shellcheck disable=SC2016
printf '#!/bin/sh\necho found $LOCO_NODE_ID\n' >"$bd/apps/x/fake-app"
chmod +x "$bd/apps/x/fake-app.p/fake-app" "$bd/apps/x/fake-app"
LOCO_BUILD_DIR=$bd run -m 0 -n 2 -- fake-app
expect_rc 0
has out '^\[n1\] found 1$'

echo "launcher_test: all passed"
exit 0
