# SPDX-License-Identifier: MIT
"""Free TCP ports on 127.0.0.1: for loco-run's local hosts files and for
the tests that write their own.

A port found by binding to port 0 comes from the kernel's ephemeral range,
the same range every connect() on the host draws its source port from: a
process running beside us can take that port between our close and the
node's listen ("Address already in use"). Ports are drawn below the
ephemeral range instead.

Two launchers drawing at the same moment (meson runs tests in parallel)
could still both find a port free before either node listens: a fresh
CI run had one cluster's node 2 lose its port to another cluster's node
0, whose cluster key then refused the first cluster's hellos. So a
drawn port is also reserved, with a lock on its byte of one shared lock
file, held by this process until it exits (the launcher outlives its
nodes' listens); other launchers skip reserved ports."""
import fcntl
import os
import random
import socket
import tempfile

_LOCK_PATH = os.path.join(tempfile.gettempdir(), "loco-ports.lock")
_lock_fd = None   # kept open: closing any fd of the file drops our locks


def reserve(port):
    """Lock byte PORT of the shared lock file for this process's life:
    False if another process holds it."""
    global _lock_fd
    if _lock_fd is None:
        try:
            _lock_fd = os.open(_LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:   # another user's file: no reservations, as before
            _lock_fd = -1
    if _lock_fd < 0:
        return True
    try:
        fcntl.lockf(_lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
        return True
    except OSError:
        return False


def release(port):
    if _lock_fd >= 0:
        fcntl.lockf(_lock_fd, fcntl.LOCK_UN, 1, port)


def ephemeral_range():
    """The kernel's ephemeral port range (connect() source ports)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def port_free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_ports(count):
    """COUNT distinct free TCP ports on 127.0.0.1. Drawn at random below
    the ephemeral range, so that no connect() of another process takes one
    between now and the node's listen (bind-to-port-0 ports come from the
    ephemeral range); port 0 binds only if that range is crowded."""
    lo, _ = ephemeral_range()
    ports = []
    rng = random.SystemRandom()
    for _ in range(200 * count):
        if len(ports) == count or lo <= 11000:
            break
        p = rng.randrange(10000, lo)
        if p in ports or not reserve(p):
            continue
        if port_free(p):
            ports.append(p)
        else:
            release(p)
    socks = []
    try:
        while len(ports) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports
    finally:
        for s in socks:
            s.close()
