# SPDX-License-Identifier: MIT
"""Free TCP ports on 127.0.0.1 for a test's own hosts file.

A port found by binding to port 0 comes from the kernel's ephemeral range,
the same range every connect() in the suite draws its source port from: a
test running beside it can take that port between our close and the
node's listen ("Address already in use"). Ports are drawn below the
ephemeral range instead, as tools/loco-run does."""
import random
import socket


def ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_free(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_ports(count):
    """COUNT distinct ports that bind now, below the ephemeral range (port
    0's choice only when that range leaves too little room)."""
    lo = ephemeral_low()
    rng = random.SystemRandom()
    ports = []
    for _ in range(200 * count):
        if len(ports) == count or lo <= 11000:
            break
        p = rng.randrange(10000, lo)
        if p not in ports and port_free(p):
            ports.append(p)
    while len(ports) < count:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if p not in ports:
            ports.append(p)
    return ports
