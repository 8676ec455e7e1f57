#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fault_test.py CASE: faults a node injects into itself (loco/fault.c),
on a private one-node loco-smoke.

  pause  LOCO_PAUSE_AT=0:4000 (loco-transfer --duration 6): the process
         is seen stopped (state T in /proc) after its "pauses itself"
         line, and it still finishes (exit 0): SIGSTOP, then SIGCONT from
         the helper.
  kill   LOCO_KILL_AT=0.1 (loco-transfer --duration 30): killed by SIGKILL
         after its "kills itself" line.
  bad    LOCO_PAUSE_AT=1 and LOCO_KILL_AT=x: refused with the variable
         named, exit 1, nothing run.

Exit 0 if all holds, 1 if not, 2 on usage. LOCO_BUILD_DIR: the build."""
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tools", "lib"))
from ports import free_ports  # noqa: E402

BUILD = os.environ.get("LOCO_BUILD_DIR", "build")
SMOKE = os.path.join(BUILD, "apps", "smoke", "loco-smoke")
TRANSFER = os.path.join(BUILD, "apps", "transfer", "loco-transfer")
LIMIT_S = 60
WORK = tempfile.mkdtemp(prefix="loco-fault-test-")


def fail(text):
    print("fault_test: FAIL: " + text)
    sys.exit(1)


def node_env():
    """A one-node cluster of the test's own (hosts file, key, run
    directory in WORK), so that a killed node leaves nothing elsewhere."""
    port = free_ports(1)[0]
    hosts = os.path.join(WORK, "hosts")
    with open(hosts, "w") as f:
        f.write("0 127.0.0.1:%d compute\n" % port)
    key = os.path.join(WORK, "key")
    if not os.path.exists(key):
        fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, os.urandom(32))
        os.close(fd)
    return {"LOCO_HOSTS": hosts, "LOCO_NODE_ID": "0", "LOCO_CLUSTER_KEY": key,
            "LOCO_RUN_DIR": os.path.join(WORK, "run")}


def start(argv=(SMOKE, "--iters", "1000"), **env):
    return subprocess.Popen(list(argv), env=dict(
        os.environ, **node_env(), **env), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)


def wait_line(p, text):
    """Reads P's stderr until a line holding TEXT (at most LIMIT_S)."""
    end = time.monotonic() + LIMIT_S
    buf = b""
    while text.encode() not in buf:
        left = end - time.monotonic()
        if left <= 0 or not select.select([p.stderr], [], [], left)[0]:
            p.kill()
            fail("no line '%s' within %d s: %s" % (text, LIMIT_S, buf))
        chunk = os.read(p.stderr.fileno(), 4096)
        if not chunk:
            fail("exited (%s) before '%s': %s" % (p.wait(), text, buf))
        buf += chunk
    return buf


def state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def case_pause():
    # A run of a fixed length, not of a number of operations: on a busy
    # host 1000 smoke iterations ended before the fault thread fired.
    p = start((TRANSFER, "--duration", "6"), LOCO_PAUSE_AT="0:4000")
    wait_line(p, "pauses itself at 0.00 s for 4000 ms")
    end = time.monotonic() + 3.0
    while state(p.pid) != "T":
        if time.monotonic() > end:
            p.kill()
            fail("never seen stopped after its pause line")
        time.sleep(0.01)
    print("fault_test: seen stopped (T)")
    try:
        rc = p.wait(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("not continued: still running after %d s" % LIMIT_S)
    p.communicate()
    if rc != 0:
        fail("exit %d after the pause, expected 0" % rc)


def case_kill():
    p = start((TRANSFER, "--duration", "30"), LOCO_KILL_AT="0.1")
    wait_line(p, "kills itself at 0.10 s (LOCO_KILL_AT)")
    try:
        rc = p.wait(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("still running after its kill line")
    if rc != -9:
        fail("exit %d, expected death by SIGKILL" % rc)


def case_bad():
    for var, val, says in (
            ("LOCO_PAUSE_AT", "1", "LOCO_PAUSE_AT: bad value '1' (expected "
             "S:MS[,S:MS...]"),
            ("LOCO_KILL_AT", "x", "LOCO_KILL_AT: bad value 'x' (expected S, "
             "seconds after start)")):
        p = start(**{var: val})
        out, err = p.communicate(timeout=LIMIT_S)
        if p.returncode != 1 or says.encode() not in err or out:
            fail("%s=%s: exit %d, stderr %s, stdout %s" % (
                var, val, p.returncode, err, out))


def main(argv):
    cases = {"pause": case_pause, "kill": case_kill, "bad": case_bad}
    if len(argv) != 1 or argv[0] not in cases:
        print(__doc__)
        return 2
    try:
        cases[argv[0]]()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    print("fault_test: ok: " + argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
