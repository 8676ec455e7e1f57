#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A clock skew beyond the drift that ends: safety holds, liveness recovers.

usage: skew_check.py [--stopped V] --skewed S [--tries K] -- LOCO-RUN-ARGS...

LOCO-RUN-ARGS go to tools/loco-run as they are: a cluster running
loco-rtx-transfer over two accounts, in which node V stops itself at a
crash point while it holds the locks of both (LOCO_CRASH_AT=
rtx.after_lock@V:N with LOCO_CRASH_SIGNAL=STOP; loco-run resumes it after
--resume-stopped) and node S's lease clock runs far behind for a while
(--clock-skew S:-MS:FOR_MS). The transfer's --timeline argument @TL@ is
replaced by a file of this checker's.

While its clock is behind, S finds V's locks unexpired (their lease lies
MS ahead of its clock): every transfer waits for V, which is stopped. When
the skew ends, S's clock steps forward, V's leases are over, and S repairs
V's transaction online (rTX needs no fence for that: docs/rtx.md, "A
paused owner") and goes on while V is still stopped. V then resumes; its
late CASes fail and it goes on too. Asserted:

  safety    the reporter's line: total conserved, no block leaked or lost,
            no lock held, nobody dead (nobody fenced), at least one repair;
  the skew  S said its lease clock skew ended; V stopped and was resumed;
  the stop  V completed fewer transfers before its gap than the hit N of
            its crash point: it stopped there, holding the locks (each
            transfer locks once at least; a SIGSTOP sent to the process
            instead of the thread let V run on and release them);
  liveness  S completed transfers while V was still stopped: in the
            second half of V's gap in the timeline (between its last
            transfer and its next, up to 100 ms before the next), when V
            has been stopped for a while; only the skew's end lets S take
            V's locks then (with a skew that does not end S waits for V's
            resume, and this fails); and both V and S completed transfers
            after V's resume.

Without --stopped V: S's clock runs ahead (--clock-skew S:MS:FOR_MS), so
S takes the others' live transactions for a stopped owner's and repairs
them online; their late CASes fail and they retry. Asserted: the safety
above, S said its skew ended, and every node completed transfers in the
timeline's last second (after the skew ended).

A run in which S's skew ended before V stopped (a slow start of V), or V
did not stop inside the measured phase's timeline (no gap of at least
1 s), tested nothing: it is repeated (--tries K, default 3). Exit 0 on success,
1 on failure."""

import csv
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__))))
MIN_GAP_MS = 1000   # V's stop, as the timeline shows it
EDGE_MS = 100       # S's progress counts only this far before V's resume
LAST_MS = 1000      # without a stopped node: the end of the run



def parse(argv):
    opts = {"stopped": None, "skewed": None, "tries": 3}
    i = 0
    while i < len(argv) and argv[i] != "--":
        key = argv[i].lstrip("-")
        if key not in opts or i + 1 >= len(argv):
            sys.exit("skew_check: bad argument %s" % argv[i])
        opts[key] = int(argv[i + 1])
        i += 2
    if opts["skewed"] is None or i >= len(argv):
        sys.exit(__doc__)
    return opts, argv[i + 1:]


def result(lines):
    for line in lines:
        body = line.split("] ", 1)[1] if line.startswith("[n") else line
        if body.startswith("{") and '"app":"rtx-transfer"' in body:
            return json.loads(body)
    return None


def timeline(path, node):
    """Transfers per ms of NODE (its column of the CSV)."""
    with open(path) as f:
        return [int(r["n%d" % node]) for r in csv.DictReader(f)]


def gap(ops):
    """The longest run of ms without a transfer between two with one:
    (first ms without, first ms with after it), or None."""
    best, last = None, None
    for ms, n in enumerate(ops):
        if not n:
            continue
        if last is not None and ms - last - 1 > 0 and \
                (best is None or ms - last > best[1] - best[0] + 1):
            best = (last + 1, ms)
        last = ms
    return best


def first(lines, pred):
    """The index of the first line that PRED accepts, or None."""
    return next((i for i, l in enumerate(lines) if pred(l)), None)


def safety(res):
    bad = []
    if res.get("conserved") is not True:
        bad.append("total %s != %s" % (res.get("total"), res.get("expected")))
    for key in ("leaked_blocks", "lost_blocks", "locks_held"):
        if res.get(key) != 0:
            bad.append("%s = %s" % (key, res.get(key)))
    if res.get("dead"):
        bad.append("dead %s: nobody may be taken for dead (or fenced)"
                   % res.get("dead"))
    if not res.get("repairs"):
        bad.append("no repair")
    return bad


def check_ahead(s, lines, tl):
    """Without a stopped node: every node's transfers in the timeline's
    last LAST_MS (after S's skew ended)."""
    with open(tl) as f:
        rows = list(csv.DictReader(f))
    nodes = [k for k in rows[0] if k.startswith("n")] if rows else []
    end = max((i for i, r in enumerate(rows)
               if any(int(r[k]) for k in nodes)), default=0)
    bad = []
    for k in nodes:
        n = sum(int(r[k]) for r in rows[end - LAST_MS:end + 1])
        print("skew_check: node %s completed %d transfers in the last %d ms"
              % (k[1:], n, LAST_MS))
        if not n:
            bad.append("node %s completed no transfer in the last %d ms "
                       "(after node %d's skew ended)" % (k[1:], LAST_MS, s))
    return bad


def stop_hit(run_args, v):
    """N of LOCO_CRASH_AT=POINT@V:N among the loco-run arguments (node V
    stops at the Nth hit of POINT), or None."""
    for a in run_args:
        if not a.startswith("LOCO_CRASH_AT="):
            continue
        for ent in a.split("=", 1)[1].split(","):
            point, _, rest = ent.partition("@")
            nodes, _, n = rest.partition(":")
            if str(v) in nodes.split("+") and n.isdigit():
                return int(n)
    return None


def check(opts, rc, lines, tl, hit):
    """(problems, retry): what is wrong; whether to run again. HIT: the
    crash point hit at which V stops."""
    v, s = opts["stopped"], opts["skewed"]
    bad = [] if rc == 0 else ["loco-run exit status %d" % rc]
    res = result(lines)
    if res is None:
        return bad + ["no result line"], False
    bad += safety(res)
    if v is None:
        if first(lines, lambda l: l.startswith("[n%d] " % s) and
                 "lease clock skew" in l and "ended" in l) is None:
            bad.append("node %d never said its lease clock skew ended" % s)
        return bad + check_ahead(s, lines, tl), False
    stop = first(lines, lambda l: l.startswith("[n%d] " % v) and
                 "SIGSTOP" in l)
    end = first(lines, lambda l: l.startswith("[n%d] " % s) and
                "lease clock skew" in l and "ended" in l)
    if stop is None:
        bad.append("node %d never stopped at its crash point" % v)
    if end is None:
        bad.append("node %d never said its lease clock skew ended" % s)
    elif stop is not None and end < stop and not bad:
        return ["node %d's skew ended before node %d stopped: nothing was "
                "tested" % (s, v)], True
    ov, os_ = timeline(tl, v), timeline(tl, s)
    g = gap(ov)
    if g is None or g[1] - g[0] < MIN_GAP_MS:
        return bad + ["node %d's stop is not in the timeline (gap %s)"
                      % (v, g)], not bad
    # Every transfer takes its locks (rtx.after_lock) at least once: a V
    # that completed HIT of them before its gap ran on past the point (it
    # did not stop there holding the locks: nothing was tested).
    before = sum(ov[:g[0]])
    if hit is not None and before >= hit:
        bad.append("node %d completed %d transfers before it stopped, not "
                   "fewer than its crash point's hit %d: it did not stop at "
                   "the point, holding the locks" % (v, before, hit))
    # The gap's second half: V may have retried a while after its last
    # transfer before it stopped holding the locks, never that long.
    lo = (g[0] + g[1]) // 2
    during = sum(os_[lo:g[1] - EDGE_MS])
    if not during:
        bad.append("node %d completed no transfer while node %d was stopped "
                   "holding the locks (ms %d..%d, from its last transfer "
                   "at ms %d): liveness did not recover when the skew ended"
                   % (s, v, lo, g[1] - EDGE_MS, g[0] - 1))
    for node, ops in ((v, ov), (s, os_)):
        if not sum(ops[g[1]:]):
            bad.append("node %d completed no transfer after node %d resumed "
                       "(ms %d on)" % (node, v, g[1]))
    print("skew_check: node %d's last transfer at ms %d (%d before it), "
          "next at ms %d; node %d completed %d transfers from ms %d to %d, "
          "the first at ms %s; after: %d and %d"
          % (v, g[0] - 1, before, g[1], s, during, lo, g[1] - EDGE_MS,
             next((lo + i for i, n in enumerate(os_[lo:g[1]]) if n), None),
             sum(ov[g[1]:]), sum(os_[g[1]:])))
    return bad, False


def main():
    opts, run_args = parse(sys.argv[1:])
    fd, tl = tempfile.mkstemp(prefix="loco-skew-tl-", suffix=".csv")
    os.close(fd)
    try:
        for attempt in range(1, opts["tries"] + 1):
            cmd = [os.path.join(REPO, "tools", "loco-run")] + \
                [tl if a == "@TL@" else a for a in run_args]
            p = subprocess.run(cmd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
            lines = p.stdout.decode(errors="replace").splitlines()
            bad, retry = check(opts, p.returncode, lines, tl,
                               stop_hit(run_args, opts["stopped"]))
            if not bad:
                print(json.dumps(result(lines)))
                print("skew_check: ok (attempt %d)" % attempt)
                return 0
            if not retry:
                print("\n".join(lines[-60:]))
                print("skew_check: FAIL (attempt %d): %s" %
                      (attempt, "; ".join(bad)))
                return 1
            print("\n".join(l for l in lines if "SIGSTOP" in l or
                            "stopped itself" in l or "lease clock" in l))
            print("skew_check: attempt %d: %s" % (attempt, "; ".join(bad)))
        print("skew_check: FAIL: no usable run in %d" % opts["tries"])
        return 1
    finally:
        os.unlink(tl)


if __name__ == "__main__":
    sys.exit(main())
