# SPDX-License-Identifier: MIT
"""Skipping a test, the Python version of test/common/skip.h and skip.sh
(meson counts exit status 77 as "skipped"): skip_missing(pkg, why) for a
package or program not installed ("SKIP(missing: PKG)", exit 77; under
CI=true a failure, exit 1: tools/install-deps installs everything the CI
tests need), skip_hardware(why) for hardware absent here ("SKIP(hardware:
WHY)") and skip_root(why) ("SKIP(root: WHY)")."""

import os
import sys

SKIP = 77


def in_ci():
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def missing_line(pkg, why=""):
    return "SKIP(missing: %s)%s" % (pkg, ": " + why if why else "")


def missing_status(pkg, why=""):
    """Print the line for a missing PKG; the exit status to end with."""
    if in_ci():
        print("FAIL: %s: under CI=true a missing package fails "
              "(tools/install-deps installs it)" % missing_line(pkg, why))
        return 1
    print(missing_line(pkg, why))
    return SKIP


def skip_missing(pkg, why=""):
    sys.stdout.flush()
    sys.exit(missing_status(pkg, why))


def skip_hardware(why):
    print("SKIP(hardware: %s)" % why)
    sys.exit(SKIP)


def skip_root(why):
    print("SKIP(root: %s)" % why)
    sys.exit(SKIP)
