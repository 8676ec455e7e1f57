#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ycsb-check.py EXPECT -- COMMAND...

Runs COMMAND (loco-ycsb alone, or tools/loco-run ... -- loco-ycsb ...) and
checks its cluster result line (the line with "scope":"cluster"; loco-run's
[nID] prefixes are cut):

  EXPECT=ok      exit 0; every field of the result line is there with its
                 type (the usual ones, then loco-ycsb's); app "ycsb"; the
                 index, workload, writers and keys asked for; ops > 0 and
                 ops = the calls of each kind minus the read-modify-writes;
                 loaded = --keys; checked > 0; missing = wrong = corrupt =
                 0; the mix of the workload (A: gets and updates, B: a few
                 updates, C: gets only, D: gets and inserts, E: scans and
                 inserts, F: read-modify-writes, each with its get and
                 update); a local index makes no round trips, a
                 distributed one at least one per get that found its key.
                 With --verify: verify_failed = 0. The memory fields:
                 kvstore's, and race's and sherman's with --verify, in a
                 run without inserts or deletes: mem_keys = the loaded
                 keys, at least 16 bytes each, reserved >= used.
                 With --dead-ms: dead = [] (no node was taken for dead).
                 A run with --dead-ms in which nodes were fenced (a lock
                 holder descheduled past its lease on a loaded host is
                 fenced by the node that takes its lock over: it exits 3,
                 the others finish without it) proved less than asked:
                 the fenced nodes' keys went unchecked. It passes no
                 test, but its survivors' line is checked as above, save
                 that loaded and mem_keys may fall short of --keys (not
                 below the survivors' loaded keys) and dead names only
                 fenced nodes; a failure there (a missing value, a
                 --verify that failed, ...) fails at once, and a run
                 without one is run again, up to 3 runs in all.
  EXPECT=caught  (a broken index) exit 1, and the line shows missing or
                 wrong > 0: the end-of-run check caught it.
  EXPECT=verify-fails  exit 1 and verify_failed = 1: --verify's walk of
                 the index found it broken.
Exit 0 if all holds, 1 if not, 2 on usage."""
import json
import re
import subprocess
import sys

USUAL = {"app": str, "transport": str, "nodes": int, "threads": int,
         "duration_s": float, "ops": int, "ops_per_s": float, "p50_us": float,
         "p99_us": float, "verbs_per_op": float, "rtts_per_op": float,
         "scope": str}
OWN = {"index": str, "ordered": bool, "distributed": bool, "workload": str, "zipf": float, "keys": int,
       "value_size": int, "window": int, "writers": str, "scan_max": int,
       "delete_ratio": float, "recorded": bool, "gets": int, "inserts": int,
       "updates": int, "deletes": int, "scans": int, "rmws": int, "hits": int,
       "scanned": int, "not_done": int, "get_rtts": float,
       "insert_rtts": float, "update_rtts": float, "delete_rtts": float,
       "scan_rtts": float, "resizes": int, "retries": int,
       "cache_misses": int, "repairs": int, "lock_fails": int,
       "loaded": int, "checked": int,
       "missing": int, "wrong": int, "corrupt": int}
RUNS = 3        # at most, when nodes were fenced (EXPECT=ok)
CALLS = ("gets", "inserts", "updates", "deletes", "scans")
MEMORY = ("mem_used_bytes", "mem_reserved_bytes", "mem_keys",
          "used_bytes_per_key", "reserved_bytes_per_key")


def fail(msg):
    print("ycsb-check: FAIL: " + msg)
    sys.exit(1)


def option(cmd, name, default):
    """The value of loco-ycsb's option NAME in CMD (after the last '--')."""
    i = len(cmd) - 1 - cmd[::-1].index("--") if "--" in cmd else 0
    args = cmd[i:]
    for k, a in enumerate(args[:-1]):
        if a == name:
            return args[k + 1]
    return default


def result_line(out):
    for line in out.splitlines():
        i = line.find("{")
        if i >= 0 and '"scope":"cluster"' in line:
            return json.loads(line[i:])
    fail("no cluster result line")


def check_fields(r):
    for name, typ in list(USUAL.items()) + list(OWN.items()):
        if name not in r:
            fail("no field " + name)
        v = r[name]
        ok = isinstance(v, bool) if typ is bool else \
            isinstance(v, (int, float)) and not isinstance(v, bool) \
            if typ is float else isinstance(v, typ) and not isinstance(v, bool)
        if not ok:
            fail("field %s is %r, expected a %s" % (name, v, typ.__name__))


def check_mix(r, w):
    n = {k: r[k] for k in CALLS + ("rmws",)}
    want = {
        "a": n["gets"] > 0 and n["updates"] > 0,
        "b": n["gets"] > 10 * n["updates"] > 0,
        "c": n["gets"] == r["ops"],
        "d": n["gets"] > 0 and n["inserts"] > 0,
        "e": n["scans"] > 0 and n["inserts"] > 0 and r["scanned"] > 0,
        "f": n["rmws"] > 0 and n["gets"] >= n["rmws"] and
             n["updates"] >= n["rmws"],
    }[w]
    if not want:
        fail("the calls %s do not fit workload %s" % (n, w))
    if r["delete_ratio"] == 0 and n["deletes"]:
        fail("deletes without --delete-ratio")
    if w != "e" and n["scans"]:
        fail("scans in workload " + w)


def check_memory(r, cmd, fenced):
    """The memory fields: kvstore counts its slots, race and sherman
    their structures in --verify's walk; with no insert or delete in the
    run the keys they hold are the loaded ones (FENCED: at least the
    survivors' and at most --keys: a node fenced while loading may have
    inserted part of its share), in at least 8 + 8 bytes each, within
    what their regions reserve."""
    for k in MEMORY:
        if not isinstance(r.get(k), (int, float)) or isinstance(r[k], bool):
            fail("field %s is %r, expected a number" % (k, r.get(k)))
    measured = r["index"] == "kvstore" or \
        (r["index"] in ("race", "sherman") and "--verify" in cmd)
    if not measured or r["inserts"] or r["deletes"]:
        return
    if fenced and not r["loaded"] <= r["mem_keys"] <= r["keys"]:
        fail("mem_keys %d, expected %d (the survivors' loaded keys) to %d" %
             (r["mem_keys"], r["loaded"], r["keys"]))
    if not fenced and r["mem_keys"] != r["loaded"]:
        fail("mem_keys %d, expected the %d loaded" % (r["mem_keys"],
                                                      r["loaded"]))
    if r["mem_used_bytes"] < 16 * r["mem_keys"]:
        fail("mem_used_bytes %d: under 16 bytes a key" % r["mem_used_bytes"])
    reserved = r["mem_reserved_bytes"]
    rtx = r["index"] == "sherman" and option(cmd, "--resize", "plain") == "rtx"
    if not rtx and reserved < r["mem_used_bytes"]:
        fail("mem_reserved_bytes %d < mem_used_bytes %d" %
             (reserved, r["mem_used_bytes"]))


def check_ok(r, cmd, fenced=()):
    """The line of an EXPECT=ok run; FENCED: the nodes fenced in it (the
    line is then the survivors')."""
    check_fields(r)
    want = {"app": "ycsb", "index": option(cmd, "--index", "local"),
            "workload": option(cmd, "--workload", "a"),
            "writers": option(cmd, "--writers", "owner"),
            "keys": int(option(cmd, "--keys", "100000"))}
    for k, v in want.items():
        if r[k] != v:
            fail("%s is %r, expected %r" % (k, r[k], v))
    if r["ops"] <= 0:
        fail("no operations")
    if r["ops"] != sum(r[k] for k in CALLS) - r["rmws"]:
        fail("ops %d != calls %d - read-modify-writes %d" %
             (r["ops"], sum(r[k] for k in CALLS), r["rmws"]))
    if fenced and not 0 < r["loaded"] <= r["keys"]:
        fail("the survivors loaded %d of %d keys" % (r["loaded"], r["keys"]))
    if not fenced and r["loaded"] != r["keys"]:
        fail("loaded %d of %d keys" % (r["loaded"], r["keys"]))
    if r["checked"] <= 0:
        fail("the end check read nothing back")
    for k in ("missing", "wrong", "corrupt"):
        if r[k]:
            fail("%s = %d" % (k, r[k]))
    check_mix(r, r["workload"])
    if "--verify" in cmd and r.get("verify_failed") != 0:
        fail("verify_failed is %r, expected 0" % r.get("verify_failed"))
    if "--dead-ms" in cmd:
        if not isinstance(r.get("dead"), list):
            fail("field dead is %r, expected a list" % r.get("dead"))
        if not set(r["dead"]) <= set(fenced):
            fail("dead is %r: nodes %s were taken for dead but not fenced "
                 "(fenced: %s)" % (r["dead"],
                                   sorted(set(r["dead"]) - set(fenced)),
                                   sorted(fenced) or "none"))
    check_memory(r, cmd, bool(fenced))
    local = not r["distributed"]
    if local and (r["rtts_per_op"] or r["verbs_per_op"]):
        fail("the local index made round trips")
    if not local and r["get_rtts"] * r["gets"] < r["hits"] * 0.999:
        fail("get_rtts %g x %d gets < %d hits: a distributed index reads "
             "a value found remotely" % (r["get_rtts"], r["gets"], r["hits"]))


def fenced_nodes(out):
    """The nodes of loco-run's output OUT that were fenced (exited 3), if
    every node that failed was, and nothing else went wrong (a timeout, a
    memory node's death); else None."""
    exits = re.findall(r"^\[loco-run\] n(\d+) exited with status (\d+) ",
                       out, re.M)
    if not exits or any(st != "3" for _, st in exits) or \
            re.search(r"^\[loco-run\] (timeout|memory node)", out, re.M):
        return None
    return tuple(sorted(int(n) for n, _ in exits))


def run_ok(cmd, attempt):
    """One run of EXPECT=ok: 0 passed, or the fenced nodes of a run whose
    survivors' line passed (the run proved less than asked). Fails (exit
    1) on anything else."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    print(p.stdout[-6000:])
    fenced = ()
    if p.returncode == 3 and "--dead-ms" in cmd:
        fenced = fenced_nodes(p.stdout) or ()
    if p.returncode and not fenced:
        fail("exit status %d" % p.returncode)
    r = result_line(p.stdout)
    check_ok(r, cmd, fenced)
    if fenced:
        print("ycsb-check: run %d of %d: node(s) %s fenced (exit 3), the "
              "survivors' line passed: %d ops, %d of %d keys loaded, %d "
              "checked, missing 0, wrong 0; the fenced nodes' keys went "
              "unchecked%s" % (attempt, RUNS, ", ".join(map(str, fenced)),
                               r["ops"], r["loaded"], r["keys"], r["checked"],
                               ": again" if attempt < RUNS else ""))
        return fenced
    print("ycsb-check: ok: %d ops, %d keys checked, missing 0, wrong 0" %
          (r["ops"], r["checked"]))
    return 0


def main(argv):
    if len(argv) < 3 or argv[1] != "--" or \
            argv[0] not in ("ok", "caught", "verify-fails"):
        print(__doc__.splitlines()[0], file=sys.stderr)
        return 2
    expect, cmd = argv[0], argv[2:]
    if expect == "ok":
        for attempt in range(1, RUNS + 1):
            if not run_ok(cmd, attempt):
                return 0
        fail("nodes were fenced in each of %d runs: none ran the whole "
             "workload" % RUNS)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    print(p.stdout[-6000:])
    if p.returncode != 1:
        fail("exit status %d, expected 1" % p.returncode)
    r = result_line(p.stdout)
    if expect == "verify-fails":
        if r.get("verify_failed") != 1:
            fail("verify_failed is %r, expected 1" % r.get("verify_failed"))
        print("ycsb-check: --verify found the index broken")
        return 0
    if r["missing"] + r["wrong"] == 0:
        fail("the broken index was not caught (missing 0, wrong 0)")
    print("ycsb-check: caught: missing %d, wrong %d" % (r["missing"], r["wrong"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
