#!/bin/sh
# SPDX-License-Identifier: MIT
# check-guide.sh GUIDE DIR: every code block of GUIDE preceded by the line
# "<!-- example: FILE -->" equals DIR/FILE, so the guide shows the code that
# is compiled and run.
set -eu
guide=$1
dir=$2
tmp=$(mktemp -d /tmp/loco-guide-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
awk -v out="$tmp" '
	/^<!-- example: .* -->$/ { name = $3; next }
	name != "" && /^```c$/ { file = out "/" name; printf "" > file; next }
	file != "" && /^```$/ { close(file); print name; file = ""; name = ""; next }
	file != "" { print >> file }
' "$guide" >"$tmp/list"
[ -s "$tmp/list" ] || { echo "check-guide: no example blocks in $guide"; exit 1; }
while read -r f; do
	if ! diff -u "$dir/$f" "$tmp/$f"; then
		echo "check-guide: $guide's $f differs from $dir/$f"
		exit 1
	fi
done <"$tmp/list"
echo "check-guide: $(wc -l <"$tmp/list") examples match"
