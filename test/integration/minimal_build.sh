#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A library-only build: configure SRCDIR with -Dverbs=disabled
# -Ducx=disabled -Durcu=disabled -Dtests=disabled in a scratch directory
# and build the three libraries and loco-smoke. Asserts that nothing links
# libibverbs, librdmacm, liburcu or UCX, that the pkg-config files name
# none of them (nor check), and that a node asked for the verbs or ucx
# transport says it is not in this build instead of failing some other
# way.
#   minimal_build.sh SRCDIR
set -eu
src=$1
dir=$(mktemp -d /tmp/loco-minimal-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "minimal_build: $*"; exit 1; }

meson setup "$dir" "$src" -Dverbs=disabled -Ducx=disabled -Durcu=disabled -Dtests=disabled \
	>"$dir/setup.log" 2>&1 || { cat "$dir/setup.log"; fail "setup failed"; }
meson compile -C "$dir" loco loco_channels loco_rtx loco-smoke \
	>"$dir/build.log" 2>&1 ||
	{ tail -n 30 "$dir/build.log"; fail "build failed"; }

for so in loco/libloco.so channels/libloco_channels.so rtx/libloco_rtx.so \
	  apps/smoke/loco-smoke; do
	needed=$(readelf -d "$dir/$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
	case $needed in
	*ibverbs*|*rdmacm*|*urcu*|*ucp*|*ucs*) fail "$so needs: $(echo $needed)" ;;
	esac
done
for pc in "$dir"/meson-private/loco.pc "$dir"/meson-private/loco-rtx.pc; do
	[ -f "$pc" ] || fail "no ${pc##*/}"
	if grep -Eq 'ibverbs|rdmacm|urcu|ucx|check' "$pc"; then
		fail "${pc##*/} names an optional dependency: $(grep -E 'Requires|Libs' "$pc")"
	fi
done

echo "0 127.0.0.1:9 compute" >"$dir/hosts"
for t in verbs ucx ucx-tcp; do
	out=$("$dir/apps/smoke/loco-smoke" --id 0 --hosts "$dir/hosts" --insecure \
		--transport $t 2>&1) &&
		fail "loco-smoke --transport $t succeeded without the transport"
	case $t:$out in
	verbs:*"transport 'verbs' is not available: this loco was built without verbs"*) ;;
	ucx*:*"transport '$t' is not available: this loco was built without UCX"*) ;;
	*) fail "loco-smoke --transport $t said: $out" ;;
	esac
done
echo "minimal_build: the libraries build without libibverbs, librdmacm, UCX, liburcu and check; verbs and ucx are refused by name"
