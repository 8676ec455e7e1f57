#!/bin/sh
# SPDX-License-Identifier: MIT
# include-tree.sh SRCDIR OUTDIR: make OUTDIR/loco/ map the installed header
# names onto the source tree, as rdma-core's build/include does, so sources
# include <loco/loco.h>, <loco/channels/sst.h>, <loco/rtx/rtx.h> exactly as
# a user does after `meson install`. Run by meson at every (re)configure.
set -eu
src=$1
out=$2/loco
rm -rf "$out"
mkdir -p "$out"
for h in "$src"/loco/*.h; do
	ln -s "$h" "$out/${h##*/}"
done
ln -s "$src/channels" "$out/channels"
ln -s "$src/rtx" "$out/rtx"
