#!/usr/bin/env python3
"""power-check.py [--drop NODE] [--converters N] [--mode M] LOCO_RUN -- LOCO-RUN-ARGS...

Runs a loco-power cluster through tools/loco-run and asserts the control
outcome from the controller's JSON line (docs/demos.md):
  - the summed output settled: "settled" true, every segment after the
    last event settled, final_v and the steady-state error within the
    band (1% of vref unless --band is passed to loco-power);
  - the initial settling time and every event's recovery time are known
    (the output entered the band and stayed there until the next event);
  - one converter line per live converter;
  - with --drop NODE: NODE was dropped (a "drop" event naming it), it is
    not live at the end, and the others regulated the sum back to vref;
  - with --mode M: every node ran in mode M (lockstep or free).
Timings (periods, jitter, missed deadlines, sample ages) are printed,
never asserted: in lockstep the simulation advances in simulated time, so
the outcome does not depend on the machine's speed; in free mode it does,
and the tests are sized (periods of 1 ms of wall time or more) so that a
loaded host still regulates. Exit 0 if all holds, 1 if not, 2 on usage.
"""
import json
import subprocess
import sys


def fail(msg):
    print("power-check: FAIL: " + msg)
    sys.exit(1)


def parse_args(argv):
    drop, conv, mode = None, None, None
    while argv and argv[0] != "--" and argv[0].startswith("--"):
        if len(argv) < 2:
            sys.exit(2)
        if argv[0] == "--drop":
            drop = int(argv[1])
        elif argv[0] == "--converters":
            conv = int(argv[1])
        elif argv[0] == "--mode":
            mode = argv[1]
        else:
            print("power-check: unknown option " + argv[0])
            sys.exit(2)
        argv = argv[2:]
    if len(argv) < 3 or argv[1] != "--":
        print(__doc__.splitlines()[0])
        sys.exit(2)
    return drop, conv, mode, argv[0], argv[2:]


def run(loco_run, args):
    p = subprocess.run([loco_run] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        fail("loco-run exited %d" % p.returncode)
    lines = []
    for line in p.stdout.splitlines():
        brace = line.find("{")
        if brace >= 0 and '"app":"power"' in line:
            lines.append(json.loads(line[brace:]))
    return lines


def check_controller(c, drop, conv):
    vref, band = c["vref"], c["band_pct"] / 100
    if conv is not None and c["converters"] != conv:
        fail("%d converters, expected %d" % (c["converters"], conv))
    if c["settling_ms"] is None:
        fail("the output never settled after the start")
    if not c["settled"]:
        fail("the output did not settle after the last event")
    if abs(c["final_v"] - vref) > band * vref:
        fail("final_v %.4f not within %.1f%% of vref %.4f"
             % (c["final_v"], band * 100, vref))
    if c["ss_error_pct"] > band * 100:
        fail("steady-state error %.4f%% over the band" % c["ss_error_pct"])
    for e in c["events"]:
        if e["recovery_ms"] is None:
            fail("no recovery after event %s" % json.dumps(e))
    if drop is not None:
        if not any(e["kind"] == "drop" and e["node"] == drop
                   for e in c["events"]):
            fail("node %d was never dropped" % drop)
        if c["live_end"] != c["converters"] - 1:
            fail("%d converters live at the end, expected %d"
                 % (c["live_end"], c["converters"] - 1))
    elif c["live_end"] != c["converters"]:
        fail("%d converters live at the end, expected all %d"
             % (c["live_end"], c["converters"]))


def main():
    drop, conv, mode, loco_run, args = parse_args(sys.argv[1:])
    lines = run(loco_run, args)
    if mode is not None:
        for j in lines:
            if j.get("mode") != mode:
                fail("node %s ran in mode %s, expected %s"
                     % (j.get("node"), j.get("mode"), mode))
    ctl = [j for j in lines if j.get("role") == "controller"]
    if len(ctl) != 1:
        fail("%d controller result lines, expected 1" % len(ctl))
    c = ctl[0]
    check_controller(c, drop, conv)
    convs = [j for j in lines if j.get("role") == "converter"]
    if len(convs) < c["live_end"]:
        fail("%d converter lines for %d live converters"
             % (len(convs), c["live_end"]))
    print("power-check: ok: %s, settling %.3f ms, overshoot %.2f%%, "
          "events %s; period jitter p50 %.1f us p99 %.1f us, %d missed "
          "deadlines in %d steps, sample age p50/p99/max %.2f/%.2f/%.2f "
          "periods (not asserted)"
          % (c["mode"], c["settling_ms"], c["overshoot_pct"],
             [(e["kind"], e["step"], e["recovery_ms"]) for e in c["events"]],
             c["jitter_p50_us"], c["jitter_p99_us"],
             c["missed_deadlines"], c["steps"], c["age_p50_periods"],
             c["age_p99_periods"], c["age_max_periods"]))


if __name__ == "__main__":
    main()
