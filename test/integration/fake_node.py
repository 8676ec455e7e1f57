#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Stand-in node for launcher_test.sh (no loco library needed).

Without arguments it is a fake memory node: serves until SIGTERM/SIGINT and
exits 0 (or exits $FAKE_MEMNODE_EXIT after 0.2 s if that is set).
With arguments it is a compute node; it first waits (as real compute nodes
do) until every memory node in the hosts file is up, then:

  --lines K        print K numbered lines on stdout, one line on stderr
  --count ID:N:MS  node ID prints `count K at T` (K 1..N, T its monotonic
                   clock) on stdout, one line every MS milliseconds
  --stop-self ID:S node ID stops itself (SIGSTOP) after S seconds, then
                   goes on once continued
  --sleep ID:S     node ID sleeps S seconds (any id: `*:S`)
  --exit ID:CODE   node ID exits with CODE after its sleep
  --signal ID:SIG  node ID kills itself with signal SIG after its sleep
  --grandchild     start a child process that sleeps (records its pid too)

Every node appends its pid (and a grandchild's) to $FAKE_DIR/pids, writes
its environment and what it sees of the cluster to $FAKE_DIR/nID.json, and
touches $FAKE_DIR/done.ID when it finishes normally."""

import json
import os
import signal
import stat
import subprocess
import sys
import time

FAKE_DIR = os.environ["FAKE_DIR"]
NODE = int(os.environ.get("LOCO_NODE_ID", "-1"))


def record_pid(pid):
    with open(os.path.join(FAKE_DIR, "pids"), "a") as f:
        f.write("%d\n" % pid)


def dump():
    run_dir = os.environ.get("LOCO_RUN_DIR", "")
    hosts = os.environ.get("LOCO_HOSTS", "")
    info = {
        "pid": os.getpid(),
        "env": {k: v for k, v in os.environ.items()
                if k.startswith("LOCO_") or k.startswith("FAKE_")},
        "hosts": open(hosts).read() if hosts else None,
        "run_dir_is_dir": os.path.isdir(run_dir),
        "run_dir_mode": stat.S_IMODE(os.stat(run_dir).st_mode)
        if os.path.isdir(run_dir) else None,
    }
    path = os.path.join(FAKE_DIR, "n%d.json" % NODE)
    with open(path + ".tmp", "w") as f:
        json.dump(info, f)
    os.rename(path + ".tmp", path)


def per_id(args, flag, conv):
    """Value of FLAG for this node from `--flag ID:VALUE` pairs."""
    val = None
    for i, a in enumerate(args):
        if a == flag:
            who, _, v = args[i + 1].partition(":")
            if who == "*" or int(who) == NODE:
                val = conv(v)
    return val


def memnode():
    # Handlers first: the dump below tells compute nodes that we are up,
    # and from then on a SIGTERM must reach the handler.
    stop = []
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda signo, _f: stop.append(signo))
    record_pid(os.getpid())
    dump()
    print("fake memnode %d up" % NODE, file=sys.stderr, flush=True)
    code = os.environ.get("FAKE_MEMNODE_EXIT")
    if code:
        time.sleep(0.2)
        sys.exit(int(code))
    while not stop:
        signal.pause()
    print("fake memnode %d stopping" % NODE, file=sys.stderr, flush=True)
    sys.exit(0)


def wait_for_memory_nodes(timeout=30.0):
    """Like a real compute node's wait for readiness: return once every
    memory node in the hosts file has written its dump."""
    hosts = os.environ.get("LOCO_HOSTS", "")
    if not hosts:
        return
    ids = [l.split()[0] for l in open(hosts)
           if l.split() and l.split()[-1] == "memory"]
    deadline = time.monotonic() + timeout
    for i in ids:
        path = os.path.join(FAKE_DIR, "n%s.json" % i)
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                sys.exit("fake node %d: memory node %s not up" % (NODE, i))
            time.sleep(0.01)


def compute(args):
    record_pid(os.getpid())
    wait_for_memory_nodes()
    dump()
    if "--grandchild" in args:
        child = subprocess.Popen(["sleep", "300"])
        record_pid(child.pid)
    lines = int(args[args.index("--lines") + 1]) if "--lines" in args else 0
    for k in range(lines):
        print("line %d of node %d" % (k, NODE))
    if lines:
        sys.stdout.flush()
        print("note from node %d" % NODE, file=sys.stderr, flush=True)
    count = per_id(args, "--count", str)
    if count:
        n, _, ms = count.partition(":")
        for k in range(1, int(n) + 1):
            print("count %d at %.3f" % (k, time.monotonic()), flush=True)
            time.sleep(float(ms) / 1000)
    stop = per_id(args, "--stop-self", float)
    if stop is not None:
        time.sleep(stop)
        print("stopping myself", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        print("continued", flush=True)
    secs = per_id(args, "--sleep", float)
    if secs:
        time.sleep(secs)
    sig = per_id(args, "--signal", int)
    if sig:
        os.kill(os.getpid(), sig)
    code = per_id(args, "--exit", int) or 0
    open(os.path.join(FAKE_DIR, "done.%d" % NODE), "w").close()
    sys.exit(code)


if __name__ == "__main__":
    if len(sys.argv) == 1:
        memnode()
    else:
        compute(sys.argv[1:])
