#!/bin/sh
# SPDX-License-Identifier: MIT
# shellcheck shell=sh
# Skipping a test, the shell version of test/common/skip.h (sourced by
# POSIX sh and bash tests; meson counts exit status 77 as "skipped"):
#
#   skip_missing PKG [WHY]  a package or program PKG is not installed:
#                           "SKIP(missing: PKG)", exit 77; under CI=true
#                           (tools/install-deps installs everything the CI
#                           tests need) a failure instead, exit 1
#   skip_hardware WHY       hardware absent here (an RDMA device):
#                           "SKIP(hardware: WHY)", exit 77
#   skip_root WHY           root (or a privilege it brings) needed:
#                           "SKIP(root: WHY)", exit 77
#
# Run as a program, `skip.sh missing|hardware|root ARG...` does the same
# (the stand-in meson registers for a test whose dependency is missing).
# tools/run-tests lists every skipped test with the last such line.

loco_ci() {
	case ${CI:-} in
	true|TRUE|True|1|yes) return 0 ;;
	*) return 1 ;;
	esac
}

skip_missing() {
	if loco_ci; then
		echo "FAIL: SKIP(missing: $1)${2:+: $2}: under CI=true a missing package fails (tools/install-deps installs it)"
		exit 1
	fi
	echo "SKIP(missing: $1)${2:+: $2}"
	exit 77
}

skip_hardware() {
	echo "SKIP(hardware: $1)"
	exit 77
}

skip_root() {
	echo "SKIP(root: $1)"
	exit 77
}

case ${0##*/} in
skip.sh)
	what=${1:-}
	[ $# -gt 0 ] && shift
	case $what in
	missing) skip_missing "$@" ;;
	hardware) skip_hardware "$@" ;;
	root) skip_root "$@" ;;
	*) echo "usage: skip.sh missing PKG [WHY] | hardware WHY | root WHY" >&2
	   exit 2 ;;
	esac ;;
esac
