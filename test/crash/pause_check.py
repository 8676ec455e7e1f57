#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""loco-rtx-transfer or loco-ycsb --dead-ms with a compute node paused
(SIGSTOP, then SIGCONT): a paused node is not a dead one.

usage: pause_check.py [--victim ID] [--tries K] MODE -- LOCO-RUN-ARGS...

LOCO-RUN-ARGS go to tools/loco-run as they are (a cluster running
loco-rtx-transfer, or loco-ycsb with --dead-ms). Node ID (default the
highest compute node) is paused once it said it is running (the
transfer's "node ID: measured phase begins", loco-ycsb's first progress line), a
moment later (its operations in flight). MODE:

  adopt        the pause lasts until a node says node ID is dead (past
               --dead-ms, after the others finished): the victim is then
               resumed at once, while the reporter repairs, adopts its
               slots and audits. Or until a node says it could not fence
               node ID: on shm a node stopped inside an operation cannot be
               fenced before it resumes (docs/ordering.md), so the pause
               ends then (the fence completes after it). Taken for dead, the victim must have been
               fenced first: it ends with exit status 3 and a message
               saying it was fenced. A run whose victim was not taken for
               dead is repeated (--tries K, default 3).
  reclaim      loco-rtx-transfer --reclaim-dead with a --duration long
               enough for the others to run on past the victim's
               --dead-ms: the pause lasts until a node says it reclaimed
               node ID during the run (fenced, then its slots adopted
               while it is still stopped), or that it could not fence it
               (shm: resumed then, the fence completes after), or that it
               found it dead at the end of the run (which fails: it was
               not reclaimed during the run). As in adopt mode, the victim
               must exit 3 saying it was fenced, and the result's
               "reclaimed" list must be exactly [ID].
  pauses:N:MS  N pauses of MS milliseconds each (longer than the rTX
               lease, shorter than --dead-ms), a moment apart: the others
               repair what the victim held (online, no fence), the victim
               goes on; nobody may be taken for dead. A run in which no
               pause caught the victim holding a lock (no repair) is
               repeated (--tries K).

Either way the reporter's line must say the total is conserved, no data
block leaked or was lost and no lock is held (loco-ycsb: the cluster
line has missing = wrong = corrupt = 0 and verify_failed = 0, and RACE's
verify line nothing leaked, lost, locked or pending), and the dead are at
most the victim. Every attempt is checked. Exit 0 on success, 1 on
failure."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__))))
IN_FLIGHT_S = 0.2       # after "running": transfers are in flight
GAP_S = 0.05            # between two pauses
NEVER_RESUME_MS = 3000000  # loco-run's --resume-stopped: not within a run


def parse(argv):
    opts = {"victim": None, "tries": 3, "mode": None}
    i = 0
    while i < len(argv) and argv[i] != "--":
        key = {"--victim": "victim", "--tries": "tries"}.get(argv[i])
        if key is None and opts["mode"] is None:
            opts["mode"] = argv[i]
            i += 1
            continue
        if key is None or i + 1 >= len(argv):
            sys.exit("pause_check: bad argument %s" % argv[i])
        opts[key] = int(argv[i + 1])
        i += 2
    mode = opts["mode"] or ""
    if mode.startswith("pauses:"):
        try:
            n, ms = (int(x) for x in mode.split(":")[1:])
        except ValueError:
            sys.exit("pause_check: MODE pauses:N:MS, got %s" % mode)
        opts["pauses"] = (n, ms)
    elif mode not in ("adopt", "reclaim"):
        sys.exit("pause_check: MODE is adopt, reclaim or pauses:N:MS")
    if i >= len(argv):
        sys.exit("pause_check: no loco-run arguments after --")
    return opts, argv[i + 1:]


def node_pid(parent, node):
    """The pid of loco-run PARENT's child with LOCO_NODE_ID=NODE."""
    want = b"LOCO_NODE_ID=%d" % node
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open("/proc/%s/environ" % name, "rb") as f:
                if want in f.read().split(b"\0"):
                    return int(name)
        except (OSError, ValueError, IndexError):
            continue
    return None


def signal_node(pid, signo):
    """Send SIGNO to node process PID, which may have exited meanwhile."""
    try:
        os.kill(pid, signo)
    except ProcessLookupError:
        pass


def victim_of(run_args):
    """The highest compute node id of loco-run's -m/-n arguments."""
    m = n = 0
    for i, a in enumerate(run_args[:-1]):
        if a in ("-m", "--memory"):
            m = int(run_args[i + 1])
        elif a in ("-n", "--nodes"):
            n = int(run_args[i + 1])
    return m + n - 1


class Pauser:
    """Pauses of the victim, from the run's output lines."""

    def __init__(self, opts, victim):
        self.opts, self.victim, self.pid = opts, victim, None
        self.stopped = self.resumed = False
        self.done = 0
        self.running = re.compile(r"^\[n%d\] (.*: node %d: measured phase begins|ycsb: "
                                  r"node %d: \d+ s, )" % (victim, victim, victim))
        if opts["mode"] == "reclaim":
            self.dead = re.compile(r"^\[n\d+\] .*: node \d+: node %d (reclaimed"
                                   r" during the run|is silent but not fenced|"
                                   r"is dead \(no heartbeat for \d+ ms; "
                                   r"fenced\)$)" % victim)
        else:
            self.dead = re.compile(r"^\[n\d+\] .*: node \d+: node %d is (dead|"
                                   r"silent but not fenced)" % victim)
        self.thread = None

    def pauses(self, n, ms):
        for _ in range(n):
            time.sleep(GAP_S)
            signal_node(self.pid, signal.SIGSTOP)
            time.sleep(ms / 1000.0)
            signal_node(self.pid, signal.SIGCONT)
            self.done += 1

    def line(self, parent, line):
        if self.pid is None and self.running.match(line):
            time.sleep(IN_FLIGHT_S)
            self.pid = node_pid(parent, self.victim)
            if self.pid and "pauses" in self.opts:
                self.thread = threading.Thread(target=self.pauses,
                                               args=self.opts["pauses"])
                self.thread.start()
            elif self.pid:
                signal_node(self.pid, signal.SIGSTOP)
                self.stopped = True
        elif self.stopped and not self.resumed and self.dead.match(line):
            signal_node(self.pid, signal.SIGCONT)
            self.resumed = True

    def end(self):
        if self.thread:
            self.thread.join()
        elif self.stopped and not self.resumed:
            signal_node(self.pid, signal.SIGCONT)


def run_once(run_args, pz):
    """One run: its output lines."""
    # The pauses are ours: loco-run must not resume a node it sees
    # stopped (it would take it for one that stopped itself).
    cmd = [os.path.join(REPO, "tools", "loco-run"), "--resume-stopped",
           str(NEVER_RESUME_MS)] + run_args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    scale = float(os.environ.get("LOCO_TIMEOUT_SCALE") or 1)
    timer = threading.Timer(300 * scale, lambda: os.killpg(p.pid,
                                                           signal.SIGKILL))
    timer.start()
    lines = []
    try:
        for raw in p.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            lines.append(line)
            pz.line(p.pid, line)
    finally:
        pz.end()
        p.wait()
        timer.cancel()
    return lines


def result(lines):
    """The reporter's line: the transfer's, or loco-ycsb's cluster line."""
    for line in lines:
        body = line.split("] ", 1)[1] if line.startswith("[n") else line
        if body.startswith("{") and ('"app":"rtx-transfer"' in body or
                                     '"scope":"cluster"' in body):
            return json.loads(body)
    return None


RACE_VERIFY = re.compile(r"race: verify: .* (\d+) leaked, (\d+) lost, \d+ "
                         r"reclaimed, \d+ repaired, (\d+) locks held, (\d+) "
                         r"logs pending")


def app_problems(res, lines):
    """What the app's own line says is wrong."""
    bad = []
    if res.get("app") == "ycsb":
        for key in ("missing", "wrong", "corrupt", "verify_failed"):
            if res.get(key, 0) != 0:
                bad.append("%s = %s" % (key, res.get(key)))
        for line in lines:
            m = RACE_VERIFY.search(line)
            if m and any(int(x) for x in m.groups()):
                bad.append("race verify: %s" % m.group(0))
        return bad
    if res.get("conserved") is not True:
        bad.append("total %s != %s" % (res.get("total"), res.get("expected")))
    for key in ("leaked_blocks", "lost_blocks", "locks_held"):
        if res.get(key) != 0:
            bad.append("%s = %s" % (key, res.get(key)))
    return bad


def problems(res, lines, pz):
    v = pz.victim
    if pz.pid is None:
        return ["node %d never said it was running" % v]
    if res is None:
        return ["no result line"]
    bad = app_problems(res, lines)
    dead = res.get("dead", [])
    if [d for d in dead if d != v]:
        bad.append("dead %s: only node %d was paused" % (dead, v))
    if "pauses" in pz.opts:
        if dead:
            bad.append("node %d was taken for dead after pauses shorter "
                       "than --dead-ms" % v)
        if pz.done != pz.opts["pauses"][0]:
            bad.append("%d of %d pauses done (the victim ended first)" %
                       (pz.done, pz.opts["pauses"][0]))
        return bad
    fenced = any(re.match(r"^\[loco-run\] n%d exited with status 3" % v, l)
                 for l in lines)
    said = any(l.startswith("[n%d] " % v) and "fenced" in l for l in lines)
    if v in dead and not (fenced and said):
        bad.append("node %d was taken for dead and its slots adopted, but "
                   "it was not fenced (no exit status 3 saying so)" % v)
    reclaimed = res.get("reclaimed", [])
    if pz.opts["mode"] == "reclaim" and pz.resumed and reclaimed != [v]:
        bad.append("reclaimed during the run: %s, want [%d]" % (reclaimed, v))
    if pz.opts["mode"] == "reclaim" and reclaimed and v not in dead:
        bad.append("node %d reclaimed during the run but not found dead at "
                   "its end (dead %s)" % (v, dead))
    return bad


def main():
    opts, run_args = parse(sys.argv[1:])
    victim = opts["victim"]
    if victim is None:
        victim = victim_of(run_args)
    for attempt in range(1, opts["tries"] + 1):
        pz = Pauser(opts, victim)
        lines = run_once(run_args, pz)
        res = result(lines)
        bad = problems(res, lines, pz)
        if bad:
            print("\n".join(lines[-60:]))
            print("pause_check: FAIL (attempt %d): %s" %
                  (attempt, "; ".join(bad)))
            return 1
        print(json.dumps(res))
        if "pauses" in opts and res.get("app") != "ycsb" and \
                not res.get("repairs"):
            print("pause_check: attempt %d: no pause caught node %d "
                  "holding a lock (no repair)" % (attempt, victim))
            continue
        if "pauses" in opts or pz.resumed:
            print("pause_check: ok (attempt %d): node %d %s" %
                  (attempt, victim, "paused %d times" % pz.done
                   if "pauses" in opts else "reclaimed during the run, fenced"
                   if opts["mode"] == "reclaim" else "taken for dead, fenced"))
            return 0
        print("pause_check: attempt %d: node %d was never taken for "
              "dead" % (attempt, victim))
    print("pause_check: FAIL: node %d never %s in %d runs" %
          (victim, "repaired" if "pauses" in opts else "taken for dead",
           opts["tries"]))
    return 1


if __name__ == "__main__":
    sys.exit(main())
