#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""pause-lin.py: a recorded cluster run whose nodes are paused (SIGSTOP,
then SIGCONT) longer than a lease or timeout, checked by loco-lincheck.

usage: pause-lin.py [options] -- LOCO-RUN-ARGS... -- PROGRAM ARGS...

Runs `LOCO_RUN LOCO-RUN-ARGS -- PROGRAM ARGS --record DIR/node%n.jsonl`.
Once node VICTIM printed a line containing --after TEXT (the event the
pauses wait for), it stops VICTIM (found by its LOCO_NODE_ID among
loco-run's children) for --pause-ms, lets it run --gap-ms, and again,
--pauses times in all (fewer if the run ends first; at least one is
required; --pauses 0: none, for runs whose fault is elsewhere, e.g. a
node's lease clock skewed through its environment). Then the nodes' histories are merged and checked by
`LINCHECK --model MODEL`.

A node that exits with status 3 (fenced: another node took over its
work while it was paused, or descheduled past a lease on a busy host,
and it noticed) counts as a killed node: its unfinished operations stay
open in the history. Any other non-zero exit of a node fails a
linearizable run.

  --expect linearizable: passes when no node failed (status 3 allowed),
    the survivors' --cluster-line TEXT was printed,
    at least --min-ops operations were recorded, every pause happened
    and the history is linearizable (a run whose victim was fenced
    before its first pause tested nothing: it runs again, up to 3 times);
  --safety-only: for runs whose nodes may fail on a timeout (liveness)
    while what they recorded must stay linearizable (safety): node exits
    and the cluster line are reported, not required;
  --expect violation (a broken variant): passes when the checker finds
    the history not linearizable, or when a node's own check (its output
    contains --caught TEXT) failed; up to --tries runs.

--takeover-ms MS (a lease, or a timeout) adds a JSON line: for each pause
that started at P, the first return, after P, of an operation of
another node that was still open at P + MS (one that waited for the
paused node: a taker), and the time from P to it; p50 and p99 over the
pauses (ms). Times are CLOCK_MONOTONIC, as the history's.
Exit 0 when it passes, 1 when not, 2 on bad arguments.
"""
import argparse
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

EXITED = re.compile(r"^\[loco-run\] n(\d+) exited with (status|signal) (\d+)")


def parse():
    p = argparse.ArgumentParser(prog="pause-lin.py", usage=__doc__)
    p.add_argument("--loco-run", required=True)
    p.add_argument("--lincheck", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--expect", required=True,
                   choices=["linearizable", "violation"])
    p.add_argument("--min-ops", type=int, default=1)
    p.add_argument("--victim", type=int, required=True)
    p.add_argument("--pauses", type=int, default=20)
    p.add_argument("--pause-ms", type=int, required=True)
    p.add_argument("--gap-ms", type=int, default=100)
    p.add_argument("--after", required=True)
    p.add_argument("--cluster-line", default='"scope":"cluster"')
    p.add_argument("--caught", action="append", default=[])
    p.add_argument("--tries", type=int, default=0)
    p.add_argument("--safety-only", action="store_true")
    p.add_argument("--takeover-ms", type=float)
    p.add_argument("rest", nargs=argparse.REMAINDER)
    a = p.parse_args()
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    if "--" not in rest or not rest[rest.index("--") + 1:]:
        p.error("expected -- LOCO-RUN-ARGS... -- PROGRAM ARGS...")
    i = rest.index("--")
    a.run_args, a.prog = rest[:i], rest[i + 1:]
    if a.pauses < 0 or a.pause_ms < 1 or a.gap_ms < 0:
        p.error("--pauses must be >= 0, --pause-ms >= 1, --gap-ms >= 0")
    if not a.tries:
        a.tries = 3 if a.expect == "violation" else 1
    return a


def node_pid(parent, node_id):
    """PID of loco-run PARENT's child with LOCO_NODE_ID=NODE_ID, or None."""
    want = b"LOCO_NODE_ID=%d" % node_id
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d, "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open("/proc/%s/environ" % d, "rb") as f:
                if want in f.read().split(b"\0"):
                    return int(d)
        except (OSError, ValueError, IndexError):
            continue
    return None


class Pauser(threading.Thread):
    """Pauses the victim once started, until done or the run ends."""

    def __init__(self, a, launcher):
        super().__init__(daemon=True)
        self.a, self.launcher = a, launcher
        self.go = threading.Event()
        self.end = threading.Event()
        self.done = 0
        self.starts = []        # CLOCK_MONOTONIC ns of each SIGSTOP
        self.stopped_pid = None

    def run(self):
        self.go.wait()
        a = self.a
        pid = node_pid(self.launcher.pid, a.victim)
        if pid is None:
            if not self.end.is_set():
                print("pause-lin: node %d not found" % a.victim, flush=True)
            return
        for _ in range(a.pauses):
            if self.end.is_set():
                return
            t = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                return
            self.starts.append(t)
            self.stopped_pid = pid
            self.end.wait(a.pause_ms / 1000)
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                return
            self.stopped_pid = None
            self.done += 1
            self.end.wait(a.gap_ms / 1000)

    def resume(self):
        self.end.set()
        pid = self.stopped_pid
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def pct(v, q):
    return v[min(len(v) - 1, int(q * len(v)))] if v else None


def takeover(a, hist, starts):
    """Print the takeover figure (see --takeover-ms) as a JSON line."""
    inv, ops = {}, []
    with open(hist) as h:
        for line in h:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            # An op's id counts per thread (loco/history.c).
            k = (e.get("pid"), e.get("tid"), e.get("id"))
            if e.get("ev") == "inv":
                inv[k] = e["t"]
            elif e.get("ev") == "ret" and k in inv and k[0] != a.victim:
                ops.append((inv.pop(k), e["t"]))
    wait = int(a.takeover_ms * 1e6)
    ms = []
    for p in starts:
        ends = [r for i, r in ops if i <= p + wait < r]
        if ends:
            ms.append((min(ends) - p) / 1e6)
    ms.sort()
    r = lambda x: None if x is None else round(x, 3)
    print(json.dumps({"app": "pause-lin", "victim": a.victim,
                      "pause_ms": a.pause_ms, "pauses": len(starts),
                      "takeover_ms_after": a.takeover_ms,
                      "takeovers": len(ms), "p50_ms": r(pct(ms, 0.5)),
                      "p99_ms": r(pct(ms, 0.99))},
                     separators=(",", ":")), flush=True)


def live_ok(a, rc, bad, fenced, out):
    """Every node finished (the paused one may be fenced instead)."""
    ok = True
    if bad:
        print("pause-lin: nodes failed: %s" % bad)
        ok = False
    if [n for n in fenced if n != a.victim]:
        # A node descheduled past a lease on a busy host is fenced too:
        # liveness, not safety.
        print("pause-lin: note: a node that was not paused was fenced")
    if rc not in (0, 3) or (rc == 3 and not fenced):
        print("pause-lin: loco-run exit %d" % rc)
        ok = False
    if not any(a.cluster_line in x for x in out):
        print("pause-lin: no cluster line (%s)" % a.cluster_line)
        ok = False
    return ok


# run_once's verdict on a run whose victim ended (fenced, say) before its
# first pause, all else as expected: run it again, up to AGAIN_MAX times.
AGAIN = "again"
AGAIN_MAX = 3


def run_once(a, d):
    for f in glob.glob(os.path.join(d, "node*.jsonl")):
        os.unlink(f)
    cmd = [a.loco_run] + a.run_args + ["--"] + a.prog + \
        ["--record", os.path.join(d, "node%n.jsonl")]
    launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
    pauser = Pauser(a, launcher)
    pauser.start()
    tag = "[n%d] " % a.victim
    out, failed = [], {}
    for raw in launcher.stdout:
        line = raw.decode(errors="replace").rstrip("\n")
        out.append(line)
        if line.startswith(tag) and a.after in line:
            pauser.go.set()
        m = EXITED.match(line)
        if m:
            failed[int(m.group(1))] = (m.group(2), int(m.group(3)))
    rc = launcher.wait()
    pauser.resume()
    pauser.go.set()
    pauser.join()
    progress = re.compile(r"^\[n\d+\] \w+: node \d+: \d+ s, ")
    for line in [x for x in out if not progress.match(x)][-40:]:
        print(line)
    print("pause-lin: %d pauses of node %d for %d ms, loco-run exit %d"
          % (pauser.done, a.victim, a.pause_ms, rc), flush=True)
    fenced = [n for n, s in failed.items() if s == ("status", 3)]
    bad = {n: s for n, s in failed.items() if n not in fenced}
    if fenced:
        print("pause-lin: fenced (status 3), taken for killed: %s" % fenced)
    caught = [c for c in a.caught if any(c in x for x in out)]
    hist = os.path.join(d, "all.jsonl")
    with open(hist, "wb") as h:
        for f in sorted(glob.glob(os.path.join(d, "node*.jsonl"))):
            with open(f, "rb") as src:
                h.write(src.read())
    with open(hist, "rb") as h:
        ops = h.read().count(b'"ev":"inv"')
    print("pause-lin: %d ops recorded" % ops, flush=True)
    if a.takeover_ms is not None:
        takeover(a, hist, pauser.starts)
    lrc = subprocess.call([a.lincheck, "--model", a.model, "--timeout", "60",
                           hist])
    if a.expect == "violation":
        if lrc == 1:
            return True
        if caught:
            print("pause-lin: the nodes' own check caught it: %s" % caught)
            return True
        print("pause-lin: expected a violation, checker exited %d" % lrc)
        return False
    ok = True
    if a.safety_only:
        if bad:
            print("pause-lin: nodes failed (liveness, not checked): %s" % bad)
    elif not live_ok(a, rc, bad, fenced, out):
        ok = False
    if ops < a.min_ops:
        print("pause-lin: expected at least %d ops" % a.min_ops)
        ok = False
    if lrc != 0:
        print("pause-lin: expected linearizable, checker exited %d" % lrc)
        ok = False
    if a.pauses and pauser.done < 1:
        # Fenced or gone before its first pause (a lease it held ran out
        # early): a run that tested nothing, not a violation.
        print("pause-lin: the victim was never paused")
        return AGAIN if ok and a.victim in failed else False
    return ok


def main():
    a = parse()
    with tempfile.TemporaryDirectory(prefix="loco-pauselin-") as d:
        t = again = 0
        while t < a.tries:
            r = run_once(a, d)
            if r is True:
                return 0
            if r is AGAIN and again < AGAIN_MAX:
                again += 1
                print("pause-lin: the victim left before its first pause: "
                      "run again (%d of %d)" % (again, AGAIN_MAX))
                continue
            t += 1
            if t < a.tries:
                print("pause-lin: run %d of %d failed, again" % (t, a.tries))
    return 1


if __name__ == "__main__":
    sys.exit(main())
