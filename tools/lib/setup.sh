# SPDX-License-Identifier: MIT
# shellcheck shell=bash
# Common set-up for tools/run-tests and tools/demo (sourced, bash).
#
#   loco_setup BUILDDIR [MESON_SETUP_OPTION...]
#
# Installs missing packages (tools/install-deps), configures BUILDDIR with
# meson if it is not configured yet (with the options; an already configured
# dir gets them through `meson configure`), then builds it with ninja.
# Returns 0, or the failing step's status (2: packages missing, not root).
# All output goes to stderr except ninja's progress, which goes to stdout.

loco_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

loco_setup() {
	local builddir=$1 rc
	shift

	"$loco_repo/tools/install-deps"
	rc=$?
	if [ "$rc" -ne 0 ]; then
		[ "$rc" -eq 2 ] || echo "loco: tools/install-deps failed ($rc)" >&2
		return "$rc"
	fi

	if [ ! -f "$builddir/build.ninja" ]; then
		if [ -d "$builddir/meson-private" ]; then
			# A setup that did not finish: redo it in place.
			meson setup --reconfigure "$builddir" "$loco_repo" "$@" >&2 ||
				meson setup --wipe "$builddir" "$loco_repo" "$@" >&2
		else
			meson setup "$builddir" "$loco_repo" "$@" >&2
		fi
		rc=$?
		if [ "$rc" -ne 0 ]; then
			echo "loco: meson setup $builddir failed ($rc)" >&2
			return "$rc"
		fi
	elif [ $# -gt 0 ]; then
		meson configure "$builddir" "$@" >&2
		rc=$?
		if [ "$rc" -ne 0 ]; then
			echo "loco: meson configure $builddir failed ($rc)" >&2
			return "$rc"
		fi
	fi

	ninja -C "$builddir"
	rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "loco: build failed in $builddir ($rc)" >&2
		return "$rc"
	fi
	return 0
}
