#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/lib/ports.py: a port one launcher drew stays reserved while that
launcher lives, so a second launcher drawing at the same moment skips it
(before the reservation, two concurrent clusters could get one port)."""
import os
import subprocess
import sys

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                   "tools", "lib")
sys.path.insert(0, LIB)
import ports  # noqa: E402

OTHER = """
import sys
sys.path.insert(0, %r)
import ports
drawn = [int(a) for a in sys.argv[1:]]
print(sum(ports.reserve(p) for p in drawn), len(set(ports.free_ports(50)) & set(drawn)))
"""


def main():
    drawn = ports.free_ports(20)
    if len(set(drawn)) != 20:
        sys.exit("ports_test: free_ports(20) gave %r" % drawn)
    r = subprocess.run([sys.executable, "-c", OTHER % LIB] +
                       [str(p) for p in drawn], capture_output=True, text=True)
    if r.returncode:
        sys.exit("ports_test: the second launcher failed: " + r.stderr)
    reserved, overlap = (int(x) for x in r.stdout.split())
    if reserved or overlap:
        sys.exit("ports_test: another process reserved %d of our 20 ports "
                 "and drew %d of them" % (reserved, overlap))
    # Ours again once we release them.
    for p in drawn:
        ports.release(p)
    r = subprocess.run([sys.executable, "-c", OTHER % LIB] +
                       [str(p) for p in drawn], capture_output=True, text=True)
    if r.returncode or int(r.stdout.split()[0]) != 20:
        sys.exit("ports_test: released ports not reservable: %r %r" %
                 (r.stdout, r.stderr))
    print("ports_test: 20 drawn ports reserved against another process, "
          "free again once released")


if __name__ == "__main__":
    main()
