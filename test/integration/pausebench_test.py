#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""pausebench_test.py PAUSEBENCH: tools/bench/pausebench's analysis of a
small hand-written history (docs/ordering.md, "What a pause costs").

Nodes 1 and 3 survive, node 2 is paused twice: A = [1000, 1500) ms and
B = [1900, 2000) ms. The history holds what the analysis must leave out:
the victim's own ops, a slow op that returned before A, one that ran
only 10 ms inside A, an op ended by `info`, a slow op invoked after A's
end, a fast op during A, and two threads of node 3 with the same op id
(ops are keyed by pid, tid and id).
Expected, with --blocked-ms 100: A's taker is node 3 thread 1's op
(1001-1300 ms): takeover 300 ms; before [500, 1000): 51 returns, 102/s;
during: 18, 36/s; after [1500, 1900) (cut at B): 81, 202.5/s. B has no
taker; during 10 returns, 100/s. With --blocked-ms 320 only node 1's
1002-1350 op is slow enough: takeover 350 ms. The nearest-rank percentile
is checked on its own. Exit 0 when all hold, 1 when not."""
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

BASE = 7_000_000_000    # ns: a CLOCK_MONOTONIC-like origin
MS = 1_000_000


def ev(t_ms, kind, pid, tid, oid):
    e = {"t": BASE + round(t_ms * MS), "ev": kind, "pid": pid, "tid": tid,
         "id": oid}
    if kind == "inv":
        e.update(op="get", key=1, args=[])
    elif kind == "ret":
        e["res"] = [None]
    return json.dumps(e, separators=(",", ":"))


def history():
    """{node: [lines]}, each op as (tid, id, inv ms, end ms, end event)."""
    n1 = [(0, k + 1, 500 + 10 * k, 501 + 10 * k, "ret") for k in range(50)]
    n1 += [(0, 51, 1002, 1350, "ret")]
    n1 += [(0, 52 + k, 1360 + 10 * k, 1361 + 10 * k, "ret") for k in range(14)]
    n1 += [(0, 66 + k, 1500 + 5 * k, 1501 + 5 * k, "ret") for k in range(80)]
    n1 += [(0, 146 + k, 1900 + 10 * k, 1901 + 10 * k, "ret")
           for k in range(10)]
    n1 += [(0, 156 + k, 2000 + 5 * k, 2001 + 5 * k, "ret") for k in range(10)]
    n1 += [(0, 166, 2047, 2049.999999, "ret")]
    n1 += [(1, 1, 800, 1010, "ret")]        # slow, but 10 ms inside A
    n3 = [(2, 1, 700, 950, "ret"),         # slow, but over before A
          (1, 1, 1001, 1300, "ret"),       # A's taker
          (0, 1, 1003, 1004, "ret"),       # same id, other thread: fast
          (0, 2, 1005, 1400, "info"),      # slow, but no return
          (0, 3, 1600, 1850, "ret"),       # slow, invoked after A
          (1, 2, 1950, 2040, "ret")]       # under --blocked-ms
    n2 = [(0, 1, 990, 1600, "ret"), (0, 2, 1601, 1602, "ret"),
          (0, 3, 2010, 2011, "ret"), (0, 4, 2400, 2500, "ret")]
    out = {}
    for node, ops in ((1, n1), (2, n2), (3, n3)):
        evs = []
        for tid, oid, t0, t1, end in ops:
            evs.append((t0, ev(t0, "inv", node, tid, oid)))
            evs.append((t1, ev(t1, end, node, tid, oid)))
        out[node] = [line for _, line in sorted(evs)] + [""]
    return out


def analyze(tool, d, blocked):
    pauses = ["%d:%d" % (BASE + a * MS, BASE + b * MS)
              for a, b in ((1000, 1500), (1900, 2000))]
    cmd = [tool, "--analyze", d, "--victim", "2", "--blocked-ms",
           str(blocked), "-v"]
    for p in pauses:
        cmd += ["--pause", p]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=30)
    if r.returncode:
        print(r.stderr)
        raise SystemExit("pausebench exited %d" % r.returncode)
    per = [json.loads(x) for x in r.stderr.splitlines() if x.startswith("{")]
    return json.loads(r.stdout.splitlines()[-1]), per


def check(name, got, want, failures):
    ok = got is not None and abs(got - want) < 1e-6
    print("%-28s %-10s (expected %s)%s" % (name, got, want,
                                          "" if ok else "  WRONG"))
    if not ok:
        failures.append(name)


def main():
    tool = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory(prefix="loco-pausebench-test-") as d:
        for node, lines in history().items():
            with open(os.path.join(d, "node%d.jsonl" % node), "w") as f:
                f.write("\n".join(lines) + "\n\n")
        s, per = analyze(tool, d, 100)
        a, b = per
        b_takeover = -1 if b["takeover_ms"] is None else b["takeover_ms"]
        for name, got, want in (
                ("pauses", s["pauses"], 2),
                ("takeovers", s["takeovers"], 1),
                ("A takeover_ms", a["takeover_ms"], 300.0),
                ("A ops_before", a["ops_before"], 102.0),
                ("A ops_during", a["ops_during"], 36.0),
                ("A ops_after", a["ops_after"], 202.5),
                ("B takeover (none: -1)", b_takeover, -1),
                ("B ops_before", b["ops_before"], 210.0),
                ("B ops_during", b["ops_during"], 100.0),
                ("B ops_after", b["ops_after"], 240.0),
                ("takeover_p50_ms", s["takeover_p50_ms"], 300.0),
                ("takeover_p99_ms", s["takeover_p99_ms"], 300.0),
                ("ops_before (taken)", s["ops_before"], 102.0),
                ("untaken_ops_during", s["untaken_ops_during"], 100.0)):
            check(name, got, want, failures)
        s, per = analyze(tool, d, 320)
        check("A takeover, blocked 320", per[0]["takeover_ms"], 350.0,
              failures)
    loader = importlib.machinery.SourceFileLoader("pausebench", tool)
    spec = importlib.util.spec_from_loader("pausebench", loader)
    pb = importlib.util.module_from_spec(spec)
    loader.exec_module(pb)
    v = list(range(100, 0, -1))     # 1..100, shuffled order
    check("pct(1..100, 0.5)", pb.pct(v, 0.5), 50, failures)
    check("pct(1..100, 0.99)", pb.pct(v, 0.99), 99, failures)
    check("pct(1..7, 0.99)", pb.pct(range(1, 8), 0.99), 7, failures)
    check("pct(1..7, 0.5)", pb.pct(range(7, 0, -1), 0.5), 4, failures)
    check("pct(1..4, 0.5)", pb.pct([3, 1, 4, 2], 0.5), 2, failures)
    if failures:
        print("pausebench_test: wrong: %s" % ", ".join(failures))
        return 1
    print("pausebench_test: all figures as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
