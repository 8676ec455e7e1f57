# SPDX-License-Identifier: MIT
"""What the crash checkers share (check_transfer.py, check_sherman.py):
their own options before a "--", one tools/loco-run of a cluster whose
reporter prints a JSON result line, and the attempts at it."""

import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__))))
sys.path.insert(0, os.path.join(REPO, "test", "common"))
import leftovers  # noqa: E402


def parse(argv, prog, opts, keys):
    """Integer options KEYS (flag -> name in OPTS) before the first "--";
    the rest (loco-run's arguments) is returned with OPTS."""
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] not in keys or i + 1 >= len(argv):
            sys.exit("%s: bad argument %s" % (prog, argv[i]))
        opts[keys[argv[i]]] = int(argv[i + 1])
        i += 2
    if i >= len(argv):
        sys.exit("%s: no loco-run arguments after --" % prog)
    return opts, argv[i + 1:]


def run_once(run_args, marker):
    """Run loco-run with RUN_ARGS; the first JSON line holding MARKER
    (None if there is none), stdout, stderr and what the run left behind
    (leftovers.problems: UCX segments of nodes killed while creating one,
    loco-run's run directory)."""
    cmd = [os.path.join(REPO, "tools", "loco-run")] + run_args
    # loco-run's own --timeout ends a hung cluster first; this is a backstop
    # (scaled like loco-run's in sanitizer builds).
    scale = float(os.environ.get("LOCO_TIMEOUT_SCALE") or 1)
    before = leftovers.ucx_segments()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as p:
        try:
            raw_out, raw_err = p.communicate(timeout=300 * scale)
        except subprocess.TimeoutExpired:
            p.kill()
            raise
    left = leftovers.problems(before, p.pid)
    out = raw_out.decode(errors="replace")
    err = raw_err.decode(errors="replace")
    for line in out.splitlines():
        body = line.split("] ", 1)[1] if line.startswith("[n") else line
        if body.startswith("{") and marker in body:
            return json.loads(body), out, err, left
    return None, out, err, left


# tools/loco-run's lines for a node that died by a fault: its --kill, or
# the node's own SIGKILL at a crash point, or exit status 3 (fenced, which
# counts as a kill).
KILLED = re.compile(r"^\[loco-run\] (?:fault: SIGKILL node (\d+) at |n(\d+) "
                    r"exited with (?:signal 9|status 3) )", re.M)


def killed(err):
    """The node ids loco-run's stderr ERR shows killed."""
    return {int(a or b) for a, b in KILLED.findall(err)}


FENCED = re.compile(r"^\[loco-run\] n(\d+) exited with status 3 ", re.M)


def fenced(err):
    """The node ids loco-run's stderr ERR shows exited fenced (a live
    node suspected on a busy host and fenced: the safe outcome of a
    suspicion, which a --max-dead bound does not count)."""
    return {int(a) for a in FENCED.findall(err)}


def unkilled_dead(res, err):
    """What is wrong with the result's dead nodes: one that nobody killed
    (a live node declared dead, or one that stopped on an error) means the
    run did not test what it names."""
    gone = killed(err)
    dead = res.get("dead")
    if isinstance(dead, list):
        odd = sorted(set(dead) - gone)
        return ["node(s) %s found dead but not killed (killed: %s)"
                % (odd, sorted(gone))] if odd else []
    if isinstance(dead, int) and dead > len(gone):
        return ["%d nodes found dead, %d killed (%s)" % (dead, len(gone),
                                                        sorted(gone))]
    return []


# What loco-run says of a fault aimed at an event that did not happen (its
# event never came, its node was gone, the run ended first): the run
# tested nothing of what it names.
FAULT_MISSED = re.compile(r"^\[loco-run\] --(kill|restart|pause) .*: "
                          r"(event never seen|event seen at .* but the run "
                          r"ended|node \d+ was not running)", re.M)


def attempts(prog, opts, run_args, marker, problems):
    """Run the cluster (RUN_ARGS) up to OPTS["tries"] times and judge its
    result line: PROBLEMS(res, opts, final) lists what is wrong with it,
    the hard problems (FINAL false) failing the run at once, the rest
    (FINAL true) making another attempt. A node found dead that loco-run
    did not kill is a hard problem, and so is anything the run left
    behind (leftovers: a UCX segment of a killed node outside loco-run's
    run directory, the run directory). Prints each line and the
    verdict as PROG; returns the exit status (0: passed)."""
    for attempt in range(1, opts["tries"] + 1):
        res, out, err, left = run_once(run_args, marker)
        if left:
            sys.stderr.write(err)
            print("%s: FAIL: the run left %s" % (prog, "; ".join(left)))
            return 1
        missed = FAULT_MISSED.findall(err)
        if missed:
            sys.stdout.write(out)
            sys.stderr.write(err)
            print("%s: FAIL: %d fault(s) aimed at events did not happen"
                  % (prog, len(missed)))
            return 1
        if res is None:
            sys.stdout.write(out)
            sys.stderr.write(err)
            print("%s: no result line" % prog)
            return 1
        print(json.dumps(res))
        res["fenced_nodes"] = sorted(fenced(err))
        hard = unkilled_dead(res, err) + problems(res, opts, False)
        if hard:
            sys.stderr.write(err)
            print("%s: FAIL: %s" % (prog, "; ".join(hard)))
            return 1
        soft = problems(res, opts, True)
        if not soft:
            print("%s: ok (attempt %d)" % (prog, attempt))
            return 0
        print("%s: attempt %d: %s" % (prog, attempt, "; ".join(soft)))
    print("%s: FAIL after %d attempts" % (prog, opts["tries"]))
    return 1
