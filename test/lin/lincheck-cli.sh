#!/bin/sh
# loco-lincheck as a program: exit codes, the verdict line, file:line errors
# on bad input, the failure report and the --html page.
# usage: lincheck-cli.sh LOCO-LINCHECK
set -u
lc=$1
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0

# expect EXIT FILE... : runs the counter model, checks the exit status
expect() {
	want=$1
	shift
	"$lc" --model counter "$@" >"$tmp/out" 2>"$tmp/err"
	got=$?
	if [ "$got" -ne "$want" ]; then
		echo "exit $got, expected $want, for $*:"
		cat "$tmp/out" "$tmp/err"
		fail=1
	fi
}

# expect_text FILE TEXT : FILE contains TEXT
expect_text() {
	grep -qF -- "$2" "$1" || { echo "'$2' missing in:"; cat "$1"; fail=1; }
}

cat >"$tmp/ok.jsonl" <<'END'
{"t":10,"ev":"inv","pid":0,"tid":1,"id":1,"op":"faa","key":"c","args":[1]}
{"t":11,"ev":"inv","pid":1,"tid":0,"id":1,"op":"faa","key":"c","args":[1]}
{"t":20,"ev":"ret","pid":0,"tid":1,"id":1,"res":[1]}
{"t":21,"ev":"ret","pid":1,"tid":0,"id":1,"res":[0]}
{"t":30,"ev":"inv","pid":1,"tid":0,"id":2,"op":"read","key":"c"}
{"t":31,"ev":"ret","pid":1,"tid":0,"id":2,"res":[2]}
END
# a lost update: both increments saw 0
sed 's/"res":\[1\]/"res":[0]/' "$tmp/ok.jsonl" >"$tmp/lost.jsonl"
# a return without its invocation
sed '1d' "$tmp/ok.jsonl" >"$tmp/bad.jsonl"
: >"$tmp/empty.jsonl"

expect 0 "$tmp/ok.jsonl" "$tmp/empty.jsonl"
expect_text "$tmp/out" "ok.jsonl: linearizable (3 ops,"
expect_text "$tmp/out" "empty.jsonl: linearizable (0 ops,"
expect_text "$tmp/err" "empty.jsonl: note: empty history"

expect 1 "$tmp/ok.jsonl" "$tmp/lost.jsonl"
expect_text "$tmp/out" "lost.jsonl: not linearizable (3 ops,"
expect_text "$tmp/err" "longest linearizable prefix: 1 of 3 ops on key \"c\""
expect_text "$tmp/err" "cannot linearize next: "

expect 2 "$tmp/ok.jsonl" "$tmp/bad.jsonl"
expect_text "$tmp/err" "bad.jsonl:2: return of op 1 of process 0/1 without an invocation"
expect 2 "$tmp/nonexistent.jsonl"
expect 1 "$tmp/bad.jsonl" "$tmp/lost.jsonl"
expect 2 --format jepsen "$tmp/ok.jsonl"
expect 2 --model nosuch "$tmp/ok.jsonl"
expect 2

expect 1 --html "$tmp/page.html" "$tmp/ok.jsonl" "$tmp/lost.jsonl"
expect_text "$tmp/page.html" "<svg"
expect_text "$tmp/page.html" "stroke=\"#c00\""
if grep -qiE "<script|https?://[a-z]|@import|<link" "$tmp/page.html"; then
	echo "the HTML page loads or runs something"
	fail=1
fi
[ ! -e "$tmp/page.html.tmp" ] || { echo "page.html.tmp left behind"; fail=1; }

[ "$fail" -eq 0 ] && echo "loco-lincheck behaves"
exit "$fail"
