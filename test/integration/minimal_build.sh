#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A library-only build: configure SRCDIR with -Dverbs=disabled
# -Durcu=disabled -Dtests=disabled in a scratch directory and build the
# three libraries and loco-smoke. Asserts that nothing links libibverbs,
# librdmacm or liburcu, that the pkg-config files name none of them (nor
# check), and that a node asked for the verbs transport says it is not in
# this build instead of failing some other way.
#   minimal_build.sh SRCDIR
set -eu
src=$1
dir=$(mktemp -d /tmp/loco-minimal-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "minimal_build: $*"; exit 1; }

meson setup "$dir" "$src" -Dverbs=disabled -Durcu=disabled -Dtests=disabled \
	>"$dir/setup.log" 2>&1 || { cat "$dir/setup.log"; fail "setup failed"; }
meson compile -C "$dir" loco loco_channels loco_rtx loco-smoke \
	>"$dir/build.log" 2>&1 ||
	{ tail -n 30 "$dir/build.log"; fail "build failed"; }

for so in loco/libloco.so channels/libloco_channels.so rtx/libloco_rtx.so \
	  apps/smoke/loco-smoke; do
	needed=$(readelf -d "$dir/$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
	case $needed in
	*ibverbs*|*rdmacm*|*urcu*) fail "$so needs: $(echo $needed)" ;;
	esac
done
for pc in "$dir"/meson-private/loco.pc "$dir"/meson-private/loco-rtx.pc; do
	[ -f "$pc" ] || fail "no ${pc##*/}"
	if grep -Eq 'ibverbs|rdmacm|urcu|check' "$pc"; then
		fail "${pc##*/} names an optional dependency: $(grep -E 'Requires|Libs' "$pc")"
	fi
done

echo "0 127.0.0.1:9 compute" >"$dir/hosts"
out=$("$dir/apps/smoke/loco-smoke" --id 0 --hosts "$dir/hosts" --insecure \
	--transport verbs 2>&1) &&
	fail "loco-smoke --transport verbs succeeded without the transport"
case $out in
*"transport 'verbs' is not available in this build"*) ;;
*) fail "loco-smoke --transport verbs said: $out" ;;
esac
echo "minimal_build: the libraries build without libibverbs, librdmacm, liburcu and check; verbs is refused by name"
