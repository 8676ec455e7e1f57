#!/bin/sh
# Checks loco-lincheck against the Porcupine test histories
# (../shared/testdata/porcupine): every etcd log must get its known verdict,
# the kv logs -ok linearizable and -bad not, and all 102 etcd histories must
# be checked in under 10 s in total. Exits 77 (skip) without the data, a
# failure under CI=true (test/common/skip.sh).
# usage: porcupine-verdicts.sh LOCO-LINCHECK DATA-DIR
set -u
lc=$1
dir=$2
if [ ! -d "$dir/jepsen" ] || [ ! -d "$dir/kv" ]; then
	. "$(dirname "$0")/../common/skip.sh"
	skip_missing ../shared/testdata/porcupine "no test histories in $dir"
fi

# 000-049 as given in the data's README; 050-102 found by loco-lincheck and
# confirmed by an independent just-in-time linearization checker.
# 095 is empty (the cluster never started): linearizable with 0 ops.
etcd="000:N 001:N 002:L 003:N 004:N 005:L 006:N 007:L 008:N 009:N 010:N 011:N
012:N 013:N 014:N 015:N 016:N 017:N 018:L 019:N 020:N 021:N 022:N 023:N
024:N 025:L 026:N 027:N 028:N 029:N 030:N 031:L 032:N 033:N 034:N 035:N
036:N 037:N 038:L 039:N 040:N 041:N 042:N 043:N 044:N 045:L 046:N 047:N
048:L 049:L 050:N 051:L 052:N 053:L 054:N 055:N 056:L 057:N 058:N 059:N
060:N 061:N 062:N 063:N 064:N 065:N 066:N 067:L 068:N 069:N 070:N 071:N
072:N 073:N 074:N 075:L 076:L 077:N 078:N 079:N 080:L 081:N 082:N 083:N
084:N 085:N 086:N 087:L 088:N 089:N 090:N 091:N 092:L 093:N 094:N 095:L
096:N 097:N 098:L 099:N 100:L 101:L 102:L"

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0

# "PATH: verdict (...)" -> "NNN:L|N|U"
verdicts() {
	sed -n 's/^.*[_/]\([0-9a-z-]*\)\.[a-z]*: \(linearizable\|not linearizable\|unknown\) (.*$/\1 \2/p' |
		sed 's/ not linearizable$/:N/; s/ linearizable$/:L/; s/ unknown$/:U/'
}

"$lc" --model cas-register --bench "$dir"/jepsen/etcd_*.log >"$tmp/etcd.out" 2>"$tmp/etcd.err"
rc=$?
[ "$rc" -eq 1 ] || { echo "etcd: exit $rc, expected 1"; fail=1; }
verdicts <"$tmp/etcd.out" | sort >"$tmp/got"
echo "$etcd" | tr ' ' '\n' | sed '/^$/d' | sort >"$tmp/want"
if ! diff "$tmp/want" "$tmp/got" >"$tmp/diff"; then
	echo "etcd verdicts differ (< expected, > got):"
	cat "$tmp/diff"
	fail=1
fi
grep -q 'etcd_095.log: linearizable (0 ops' "$tmp/etcd.out" ||
	{ echo "etcd_095 should be an empty, linearizable history"; fail=1; }
bench=$(grep '"app":"lincheck-bench"' "$tmp/etcd.out")
echo "$bench"
total=$(echo "$bench" | sed -n 's/.*"total_ms":\([0-9]*\).*/\1/p')
files=$(echo "$bench" | sed -n 's/.*"files":\([0-9]*\).*/\1/p')
nfiles=$(ls "$dir"/jepsen/etcd_*.log | wc -l)
[ "${files:-0}" -eq "$nfiles" ] || { echo "bench: ${files:-?} files, expected $nfiles"; fail=1; }
[ "${total:-99999}" -lt 10000 ] || { echo "etcd: ${total:-?} ms, over 10 s"; fail=1; }

for f in "$dir"/kv/*.txt; do
	case $f in
	*-ok.txt) want=0 ;;
	*) want=1 ;;
	esac
	"$lc" --model append-map "$f" >>"$tmp/kv.out" 2>/dev/null
	rc=$?
	[ "$rc" -eq "$want" ] || { echo "$f: exit $rc, expected $want"; fail=1; }
done
cat "$tmp/kv.out"

[ "$fail" -eq 0 ] && echo "all verdicts as expected"
exit "$fail"
