# SPDX-License-Identifier: MIT
"""What a run of tools/loco-run must not leave behind, for the drivers
that kill its nodes (test/crash) and test/integration/ucx_segments_test.py.

UCX's posix transport creates each of its segments as
UCX_POSIX_DIR/ucx_shm_posix_<random hex> (O_CREAT | O_EXCL, /dev/shm by
default), writes it full, then unlinks it at once (peers open it through
/proc/PID/fd/FD; with UCX_POSIX_USE_PROC_LINK=n at its free). The name
holds no pid. A process killed between the create and the unlink leaves
the file, which nobody holds open any more. tools/loco-run points
UCX_POSIX_DIR into its own run directory, so such a file goes with it;
one in UCX's directory of the environment (UCX_POSIX_DIR, else /dev/shm)
that appeared during a run and that no live process holds open is what
a node of the run left (or, rarely, another program's process killed
in the same moments, which loco-run did not start).

Standard library only."""

import os
import tempfile

UCX_PREFIX = "ucx_shm_posix_"
RUN_PREFIX = "loco-run-"


def ucx_dir():
    """Where UCX puts its posix segments when loco-run does not choose."""
    return os.environ.get("UCX_POSIX_DIR") or "/dev/shm"


def ucx_segments(d=None):
    """The names of UCX posix segments in directory D (ucx_dir())."""
    try:
        return {n for n in os.listdir(d or ucx_dir())
                if n.startswith(UCX_PREFIX)}
    except OSError:
        return set()


def held_open(paths):
    """Those of PATHS that a live process has open (its /proc/PID/fd)."""
    held = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        fd_dir = os.path.join("/proc", pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue    # gone, or not ours to see
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target in paths:
                held.add(target)
    return held


def orphans(before, d=None):
    """UCX segments in D (ucx_dir()) that are not in BEFORE (a set of
    names from ucx_segments), still there, and held open by nobody."""
    d = d or ucx_dir()
    new = {os.path.join(d, n) for n in ucx_segments(d) - before}
    held = held_open(new) if new else set()
    return sorted(os.path.basename(p) for p in new - held
                  if os.path.exists(p))


def run_dirs(launcher_pid):
    """Run directories of the loco-run of LAUNCHER_PID still there
    (/dev/shm/loco-run-PID-*, $TMPDIR/loco-run-PID-*)."""
    prefix = "%s%d-" % (RUN_PREFIX, launcher_pid)
    left = []
    for base in (os.environ.get("LOCO_RUN_SHM") or "/dev/shm",
                 tempfile.gettempdir()):
        try:
            left += [os.path.join(base, n) for n in os.listdir(base)
                     if n.startswith(prefix)]
        except OSError:
            pass
    return sorted(left)


def problems(before, launcher_pid):
    """What a finished loco-run (LAUNCHER_PID) left behind, given the UCX
    segments BEFORE it started: [] if nothing."""
    bad = []
    left = orphans(before)
    if left:
        bad.append("UCX segment(s) in %s that nobody holds open (a node "
                   "killed while UCX created them): %s"
                   % (ucx_dir(), " ".join(left)))
    dirs = run_dirs(launcher_pid)
    if dirs:
        bad.append("loco-run's run directory %s" % " ".join(dirs))
    return bad
