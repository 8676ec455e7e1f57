#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ycsb-check-self.sh YCSB_CHECK DATA_DIR
# Tests ycsb-check.py's handling of fenced nodes (EXPECT=ok with --dead-ms)
# on recorded outputs of loco-run: DATA_DIR/clean.out (a Sherman run of
# 1 memory + 2 compute nodes that passed) and DATA_DIR/fenced.out (the
# same run with node 2 stopped at its sherman.write_back past its 1 s
# lease: node 1 took its lock over and fenced it, node 2 exited 3 and
# node 1 finished alone, dead [2]). A fake command prints them in turn,
# as changed here, so each case is exact: a run with a fenced node is
# run again and passes no test by itself; any fault in the survivors'
# line, or a failure other than a fence, fails at once; three fenced runs
# in a row fail. Exit 0 if every case holds, 1 if not.
set -u
[ $# -eq 2 ] || { echo "usage: ycsb-check-self.sh YCSB_CHECK DATA_DIR" >&2; exit 2; }
check=$1 data=$2
dir=$(mktemp -d /tmp/loco-ycsbcheck-XXXXXX)
trap 'rm -rf "$dir"' EXIT
for f in clean fenced; do
	[ -s "$data/$f.out" ] || { echo "ycsb-check-self: no $data/$f.out" >&2; exit 2; }
done

# The fake run: its Nth call prints OUT_N and exits RC_N (the last pair
# again past the end); the calls are counted in $dir/calls.
cat >"$dir/fake" <<'EOF'
#!/usr/bin/env bash
calls=$1/calls
shift
n=$(($(cat "$calls" 2>/dev/null || echo 0) + 1))
echo "$n" >"$calls"
pairs=()
while [ "$1" != -- ]; do pairs+=("$1"); shift; done
i=$(( (n - 1) * 2 ))
[ "$i" -lt ${#pairs[@]} ] || i=$(( ${#pairs[@]} - 2 ))
cat "${pairs[$i]}"
exit "${pairs[$((i + 1))]}"
EOF
chmod +x "$dir/fake"
# loco-ycsb's options as the Sherman tests give them (ycsb-check.py reads
# them after the last --).
ycsb_args=(-- --index sherman --workload a --keys 1000 --threads 2 --ops 600
	--ix-opt node=256 --verify --ix-opt lease-ms=1000 --dead-ms 5000)

# variant NAME FROM SED-SCRIPT: $dir/NAME.out, FROM.out changed by SED-SCRIPT.
variant() {
	sed "$3" "$data/$2.out" >"$dir/$1.out"
}
variant clean clean ''
variant fenced fenced ''
variant fenced_missing fenced 's/"missing":0/"missing":1/g'
variant fenced_corrupt fenced 's/"corrupt":0/"corrupt":2/g'
variant fenced_verify fenced 's/"verify_failed":0/"verify_failed":1/g'
variant fenced_mem fenced 's/"mem_keys":915/"mem_keys":1001/g'
# shellcheck disable=SC2016  # sed's $a (append), not a variable
variant fenced_timeout fenced '$a [loco-run] timeout after 90 s'
# shellcheck disable=SC2016
variant fenced_also_1 fenced '$a [loco-run] n1 exited with status 1 at 7.70s'
variant fenced_dead1 fenced 's/"dead":\[2\]/"dead":[1,2]/g'
variant clean_dead clean 's/"dead":\[\]/"dead":[2]/g'
variant clean_short clean 's/"loaded":1000/"loaded":915/g'

failed=0
# case NAME WANT_RC WANT_CALLS PATTERN OUT RC [OUT RC]...: ycsb-check.py
# exits WANT_RC after WANT_CALLS runs, its output matching PATTERN.
case_() {
	local name=$1 want=$2 calls=$3 pattern=$4 rc got
	shift 4
	local pairs=()
	while [ $# -gt 0 ]; do pairs+=("$dir/$1.out" "$2"); shift 2; done
	rm -f "$dir/calls"
	"$check" ok -- "$dir/fake" "$dir" "${pairs[@]}" "${ycsb_args[@]}" \
		>"$dir/log" 2>&1
	rc=$?
	got=$(cat "$dir/calls" 2>/dev/null || echo 0)
	if [ "$rc" -ne "$want" ] || [ "$got" -ne "$calls" ] ||
	   ! grep -Eq -- "$pattern" "$dir/log"; then
		echo "ycsb-check-self: FAIL [$name]: exit $rc after $got runs," \
			"expected $want after $calls, output matching /$pattern/:"
		grep '^ycsb-check' "$dir/log" | sed 's/^/  | /'
		failed=1
	else
		echo "ycsb-check-self: ok [$name]: exit $rc after $got runs"
	fi
}

case_ clean 0 1 '^ycsb-check: ok: 2400 ops' clean 0
case_ fenced_then_clean 0 2 'run 1 of 3: node\(s\) 2 fenced .*: again$' \
	fenced 3 clean 0
case_ fenced_twice_then_clean 0 3 'run 2 of 3: node\(s\) 2 fenced' \
	fenced 3 fenced 3 clean 0
case_ fenced_three_times 1 3 'FAIL: nodes were fenced in each of 3 runs' \
	fenced 3
case_ fenced_missing 1 1 'FAIL: missing = 1' fenced_missing 3 clean 0
case_ fenced_corrupt 1 1 'FAIL: corrupt = 2' fenced_corrupt 3 clean 0
case_ fenced_verify 1 1 'FAIL: verify_failed is 1' fenced_verify 3 clean 0
case_ fenced_mem_keys 1 1 'FAIL: mem_keys 1001, expected 500 \(the survivors' \
	fenced_mem 3 clean 0
case_ fenced_and_timeout 1 1 'FAIL: exit status 3' fenced_timeout 3 clean 0
case_ fenced_and_failed 1 1 'FAIL: exit status 3' fenced_also_1 3 clean 0
case_ dead_not_fenced 1 1 'FAIL: dead is \[1, 2\]: nodes \[1\] were taken' \
	fenced_dead1 3 clean 0
case_ clean_with_dead 1 1 'FAIL: dead is \[2\]' clean_dead 0
case_ clean_short_load 1 1 'FAIL: loaded 915 of 1000 keys' clean_short 0
# Without --dead-ms the others cannot finish without a fenced node: a
# status 3 is a failure like any other.
ycsb_args=("${ycsb_args[@]:0:${#ycsb_args[@]}-2}")
case_ fenced_no_dead_ms 1 1 'FAIL: exit status 3' fenced 3 clean 0
exit "$failed"
