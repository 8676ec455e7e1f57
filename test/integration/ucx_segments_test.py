#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A UCX segment of a node killed while UCX creates it goes with
loco-run's run directory, never into /dev/shm (test/common/leftovers.py).

usage: ucx_segments_test.py BUILDDIR

The compute node (ucx-sm) runs under a file-size limit of 512 KiB (sh's
ulimit -f 1024: 512-byte blocks in dash, 1 KiB in bash), above loco's
own files but below UCX's multi-MiB receive segments: UCX's write of its
first large segment kills it with SIGXFSZ between the segment's create
and its unlink, every time (what a --kill or a crash point's SIGKILL does
once in a while). Two runs:

1. as loco-run sets it up: the node dies (exit status 153); loco-run
   reports removing the segment from its run directory; nothing is left
   in UCX's directory of the environment (/dev/shm), nor the run directory;
2. with UCX_POSIX_DIR set to a private directory (loco-run leaves a
   variable set by the user alone: no cleanup then): the segment is left
   there, and leftovers.orphans finds it, so the check of the crash
   drivers (test/crash/crashrun.py) can fail. The directory is removed.
"""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.realpath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "test", "common"))
import leftovers  # noqa: E402

SIGXFSZ_STATUS = 128 + 25
REMOVED = "UCX shared-memory segment(s) that nodes killed"


def run(build, env):
    """One loco-run: its exit status, stderr, pid."""
    smoke = os.path.join(build, "apps", "smoke", "loco-smoke")
    node = "ulimit -f 1024 && exec %s --iters 1000" % smoke
    cmd = [os.path.join(REPO, "tools", "loco-run"), "--transport", "ucx-sm",
           "-m", "1", "-n", "1", "--timeout", "60", "--", "sh", "-c", node]
    with subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE) as p:
        _, err = p.communicate(timeout=120)
    return p.returncode, err.decode(errors="replace"), p.pid


def main(build):
    env = dict(os.environ, LOCO_BUILD_DIR=build)
    env.pop("UCX_POSIX_DIR", None)
    fail = []

    before = leftovers.ucx_segments("/dev/shm")
    rc, err, pid = run(build, env)
    if rc != SIGXFSZ_STATUS:
        fail.append("run 1: exit status %d, want %d (the node killed by "
                    "SIGXFSZ in UCX's segment)" % (rc, SIGXFSZ_STATUS))
    if REMOVED not in err:
        fail.append("run 1: loco-run removed no UCX segment from its run "
                    "directory")
    left = leftovers.orphans(before, "/dev/shm")
    if left:
        fail.append("run 1: left in /dev/shm: %s" % " ".join(left))
    if leftovers.run_dirs(pid):
        fail.append("run 1: run directory left: %s"
                    % " ".join(leftovers.run_dirs(pid)))
    if fail:
        sys.stderr.write(err)

    own = tempfile.mkdtemp(prefix="loco-ucxseg-", dir="/dev/shm")
    try:
        rc2, err2, _ = run(build, dict(env, UCX_POSIX_DIR=own))
        left = leftovers.orphans(set(), own)
        if rc2 != SIGXFSZ_STATUS or not left or REMOVED in err2:
            sys.stderr.write(err2)
            fail.append("run 2 (UCX_POSIX_DIR=%s): exit status %d, left %s: "
                        "want %d and a segment the check finds"
                        % (own, rc2, left, SIGXFSZ_STATUS))
    finally:
        shutil.rmtree(own, ignore_errors=True)

    for f in fail:
        print("ucx_segments: FAIL: %s" % f)
    if not fail:
        print("ucx_segments: ok: the killed node's segment went with the run "
              "directory; outside it, the check finds it")
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
