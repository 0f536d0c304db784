#!/usr/bin/env bash
# Runs each test program under a timeout and prints one summary line:
#   N passed, N failed, N skipped
# Exit status: 0 pass, 77 skip, anything else fail. The output of each failed
# test is printed in full. TEST_TIMEOUT (seconds, default 120) bounds each.
set -u
timeout_s=${TEST_TIMEOUT:-120}
export BUILD=${BUILD:-build}
export WC_TOP=$(cd "$(dirname "$0")/.." && pwd)
logdir=$(mktemp -d /tmp/wctest.XXXXXX)
pass=0 fail=0 skip=0
failed=()
for t in "$@"; do
	name=$(basename "$t"); name=${name%.sh}
	log=$logdir/$name.log
	start=${EPOCHREALTIME/./}
	if [[ $t == *.sh ]]; then
		timeout -k 5 "$timeout_s" bash "$t" >"$log" 2>&1 </dev/null
	else
		timeout -k 5 "$timeout_s" "$t" >"$log" 2>&1 </dev/null
	fi
	rc=$?
	us=$(( ${EPOCHREALTIME/./} - start )); secs=$(printf '%d.%02d' $((us / 1000000)) $((us % 1000000 / 10000)))
	case $rc in
	0)  pass=$((pass + 1)); printf '  PASS  %-28s %ss\n' "$name" "$secs" ;;
	77) skip=$((skip + 1)); printf '  SKIP  %-28s %s\n' "$name" "$(tail -n 1 "$log")" ;;
	124|137) fail=$((fail + 1)); failed+=("$name"); printf '  FAIL  %-28s timed out after %ss\n' "$name" "$timeout_s" ;;
	*)  fail=$((fail + 1)); failed+=("$name"); printf '  FAIL  %-28s exit %d\n' "$name" "$rc" ;;
	esac
done
for name in "${failed[@]}"; do
	printf '\n----- %s -----\n' "$name"
	tail -n 80 "$logdir/$name.log"
done
rm -rf "$logdir"
echo
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
