#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `meson install` into a scratch DESTDIR, then, as an outside user would:
# every installed header compiles on its own (included as <loco/...>), a
# program built with `pkg-config --cflags --libs loco-race` (which pulls
# in loco-rtx and loco) links and runs, one built with `pkg-config
# loco-sherman` (which requires loco-rtx) too,
# and the channel of docs/write-your-own-channel.md (docs/examples) builds
# with `pkg-config loco` alone, warnings as errors.
#   install_test.sh BUILDDIR [SANITIZE [SRCDIR]]
# SANITIZE: the build's b_sanitize (none, address,undefined, thread): an
# instrumented library needs the program built with the same runtime.
set -eu
build=$1
san=${2:-none}
src=${3:-$(cd "$(dirname "$0")/../.." && pwd)}
sanflags=
[ "$san" = none ] || sanflags=-fsanitize=$san
dest=$(mktemp -d /tmp/loco-install-XXXXXX)
trap 'rm -rf "$dest"' EXIT

meson install -C "$build" --no-rebuild --quiet --destdir "$dest" >/dev/null
pc=$(dirname "$(find "$dest" -name loco.pc | head -n1)")
[ -f "$pc/loco.pc" ] || { echo "install_test: no loco.pc installed"; exit 1; }
[ -f "$pc/loco-rtx.pc" ] || { echo "install_test: no loco-rtx.pc installed"; exit 1; }
[ -f "$pc/loco-race.pc" ] || { echo "install_test: no loco-race.pc installed"; exit 1; }
[ -f "$pc/loco-sherman.pc" ] || { echo "install_test: no loco-sherman.pc installed"; exit 1; }
export PKG_CONFIG_PATH=$pc PKG_CONFIG_SYSROOT_DIR=$dest
cflags=$(pkg-config --cflags loco-race)
libs=$(pkg-config --libs loco-race)
case " $libs " in
*" -lloco_race "*"-lloco_rtx "*) ;;
*) echo "install_test: pkg-config loco-race does not link race and rtx: $libs"; exit 1 ;;
esac
case " $cflags " in
*/include/loco" "*) echo "install_test: pkg-config puts include/loco on the path: $cflags"; exit 1 ;;
esac
# Every installed library has a versioned soname and exports only loco_*.
for so in $(find "$dest" -name 'libloco*.so' | sort); do
	soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
	case $soname in
	"${so##*/}".[0-9]*) ;;
	*) echo "install_test: ${so##*/} has no versioned soname ('$soname')"; exit 1 ;;
	esac
	extra=$(nm -D --defined-only "$so" | awk '$3 !~ /^loco_/ && $2 ~ /[TDB]/ {print $3}')
	[ -z "$extra" ] || { echo "install_test: ${so##*/} exports non-loco symbols: $extra"; exit 1; }
done
inc=$(find "$dest" -type d -path '*/include/loco' | head -n1)

n=0
while read -r h; do
	rel=${h#"$inc"/}
	printf '#include <loco/%s>\nint loco_header_check_%d;\n' "$rel" "$n" >"$dest/h.c"
	cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror $cflags -c "$dest/h.c" \
		-o "$dest/h.o" || { echo "install_test: <loco/$rel> does not compile alone"; exit 1; }
	n=$((n + 1))
done < <(find "$inc" -name '*.h' | sort)
[ "$n" -ge 10 ] || { echo "install_test: only $n headers installed"; exit 1; }

cat >"$dest/user.c" <<'C'
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <loco/loco.h>
#include <loco/channels/atomic_var.h>
#include <loco/rtx/rtx.h>
#include <loco/channels/race/race.h>

int main(void)
{
	const char *s = loco_strerror(-ETIMEDOUT);
	/* Linked from libloco_race (and through it libloco_rtx). */
	int (*create)(struct loco_mgr *, const struct loco_race_opts *,
		      struct loco_race **) = loco_race_create;
	printf("%s\n", s);
	return s && *s && create ? 0 : 1;
}
C
cc -std=c11 $sanflags $cflags "$dest/user.c" -o "$dest/user" $libs
libdir=$(dirname "$(find "$dest" -name 'libloco.so' | head -n1)")
out=$(LD_LIBRARY_PATH=$libdir "$dest/user")
[ -n "$out" ] || { echo "install_test: the program printed nothing"; exit 1; }

# Sherman: its header under <loco/channels/sherman/>, its pkg-config file
# pulling in loco-rtx and loco.
[ -f "$inc/channels/sherman/sherman.h" ] ||
	{ echo "install_test: <loco/channels/sherman/sherman.h> not installed"; exit 1; }
cat >"$dest/tree.c" <<'C'
#include <stdio.h>
#include <loco/channels/sherman/sherman.h>

int main(void)
{
	struct loco_sherman_opts o = { .node_size = 1024 };
	int (*create)(struct loco_mgr *, const struct loco_sherman_opts *,
		      struct loco_sherman **) = loco_sherman_create;
	printf("%u %d\n", o.node_size / LOCO_SHERMAN_NODE_MIN, create != NULL);
	return 0;
}
C
cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror $sanflags \
	$(pkg-config --cflags loco-sherman) "$dest/tree.c" -o "$dest/tree" \
	$(pkg-config --libs loco-sherman) ||
	{ echo "install_test: a pkg-config loco-sherman build fails"; exit 1; }
[ "$(LD_LIBRARY_PATH=$libdir "$dest/tree")" = "8 1" ] ||
	{ echo "install_test: the loco-sherman program does not run"; exit 1; }

# The guide's channel, from the installed headers only.
cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror $sanflags \
	$(pkg-config --cflags loco) "$src/docs/examples/my_flag.c" \
	"$src/docs/examples/my_flag_main.c" -o "$dest/my-flag-pingpong" \
	$(pkg-config --libs loco) ||
	{ echo "install_test: docs/examples does not build against the installed headers"; exit 1; }
echo "install_test: $n headers compile alone; pkg-config builds (loco-race, loco-sherman) link and run ($out); docs/examples builds"
