#!/usr/bin/env bash
# Runs the test programs, up to N at a time, each under a timeout, and prints
# one line per test in the order given, then one summary line:
#   N passed, N failed, N skipped
#
#   test/run.sh [-j N] [--not-built FILE]... TEST...
#
# A TEST is a program (exit 0 pass, 77 skip, anything else fail; the last
# line of a skipped test's output says why), a bash script (*.sh, the same
# exit codes), or a pytest file (*.py, run with `$PYTHON -m pytest`,
# default /usr/bin/python3): each of
# its test cases counts as one passed, failed or skipped test. A pytest file
# that collects no test at all (pytest's exit 5) is one failure: a test file
# that tests nothing is a mistake. --not-built FILE reports FILE as one
# failure (the Makefile passes what the build could not make); a TEST that
# does not exist fails the same way, so a failed build never runs an old
# binary. The output of each failed test is printed in full after the list
# (at most 1000 lines: the first 200 and the last 800). TEST_TIMEOUT
# (seconds, default 120) bounds each test; a pytest file as a whole.
# WC_PYTEST_PRELOAD (the Makefile's, in an ASan build): the sanitizer
# runtime that pytest's interpreter preloads, with leak checks off.
# WCACHE_IDENT_CACHE is set to a fresh directory of the run (removed after).
#
# Tests run in parallel (-j, default 1), so each must keep its files in its
# own temporary directory and never wait on another test.
set -u
timeout_s=${TEST_TIMEOUT:-120}
jobs=1
not_built=()
args=()
while [ $# -gt 0 ]; do
	case $1 in
	-j) jobs=${2:?"-j needs a number"}; shift 2 ;;
	-j*) jobs=${1#-j}; shift ;;
	--not-built) not_built+=("${2:?"--not-built needs a file"}"); shift 2 ;;
	--) shift; args+=("$@"); break ;;
	-*) echo "run.sh: unknown option '$1' (use -j N, --not-built FILE)" >&2; exit 2 ;;
	*) args+=("$1"); shift ;;
	esac
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: -j '$jobs' is not a positive number" >&2; exit 2; }
export BUILD=${BUILD:-build}
# Debian's python3, where the packages of `make deps` are (PATH may lead to
# another one first).
if [ -z "${PYTHON:-}" ]; then
	PYTHON=python3
	[ -x /usr/bin/python3 ] && PYTHON=/usr/bin/python3
fi
export PYTHON
export WC_TOP=$(cd "$(dirname "$0")/.." && pwd)
logdir=$(mktemp -d /tmp/wctest.XXXXXX)
trap 'rm -rf "$logdir"' EXIT
# libwcache's identity cache on disk (identdisk.c) in a directory of this
# run's own: no test reads what an earlier run (or the user) left there.
export WCACHE_IDENT_CACHE=$logdir/ident
pass=0 fail=0 skip=0
failed=()

# Counts a junit XML report: prints "passed failed skipped" and, on the next
# lines, the ids of the failed cases.
junit_count() {
	"$PYTHON" - "$1" <<'PY'
import sys
import xml.etree.ElementTree as ET
p = f = s = 0
bad = []
try:
	root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
	root = None
for case in ([] if root is None else root.iter("testcase")):
	kinds = {child.tag for child in case}
	name = case.get("classname", "") + "::" + case.get("name", "")
	if kinds & {"failure", "error"}:
		f += 1
		bad.append(name)
	elif "skipped" in kinds:
		s += 1
	else:
		p += 1
print(p, f, s)
for b in bad:
	print(b)
PY
}

# Runs test $2 (index $1) and leaves "rc microseconds" in $logdir/$1.rc.
run_one() {
	local i=$1 t=$2 log=$logdir/$1.log start rc
	start=${EPOCHREALTIME/./}
	case $t in
	*.sh) timeout -k 5 "$timeout_s" bash "$t" >"$log" 2>&1 </dev/null; rc=$?
		# bash goes on past a command it cannot find (a helper not
		# sourced, a typo): such a test may pass without checking anything
		if [ "$rc" = 0 ] && grep -qE "^$t: line [0-9]+: .*: command not found$" "$log"; then
			echo "(bash could not find a command the test runs: it fails)" >>"$log"
			rc=1
		fi ;;
	*.py) env ${WC_PYTEST_PRELOAD:+LD_PRELOAD=$WC_PYTEST_PRELOAD \
		ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}} \
		timeout -k 5 "$timeout_s" "$PYTHON" -m pytest -q -rs -p no:cacheprovider \
		--junitxml="$logdir/$i.xml" "$t" >"$log" 2>&1 </dev/null; rc=$?
		[ -s "$logdir/$i.xml" ] ||
			echo "(pytest exited $rc and wrote no report: it died before it could)" >>"$log" ;;
	*) timeout -k 5 "$timeout_s" "$t" >"$log" 2>&1 </dev/null; rc=$? ;;
	esac
	echo "$rc $(( ${EPOCHREALTIME/./} - start ))" >"$logdir/$i.tmp"
	mv "$logdir/$i.tmp" "$logdir/$i.rc"
}

# Prints test $1's line and adds it to the counts.
report() {
	local i=$1 t=${tests[$1]} name rc us secs n
	name=$(basename "$t"); name=${name%.sh}
	read -r rc us <"$logdir/$i.rc"
	secs=$(printf '%d.%02d' $((us / 1000000)) $((us % 1000000 / 10000)))
	if [ "$rc" = notbuilt ]; then
		[ "$i" -lt "${#not_built[@]}" ] && name=$t
		fail=$((fail + 1)); failed+=("$i")
		printf '  FAIL  %-28s not built (the build failed above; its old file is not used)\n' "$name"
		return
	fi
	if [[ $t == *.py ]]; then
		local counts p f s
		mapfile -t counts < <(junit_count "$logdir/$i.xml")
		read -r p f s <<<"${counts[0]}"
		# pytest: 0 all passed, 1 some failed, 5 none collected; anything
		# else (usage, internal error, timeout) is a failure of the file.
		case $rc in
		0|1) ;;
		5) [ $((p + f + s)) -eq 0 ] && f=$((f + 1)) counts+=("no test collected in $t") ;;
		124|137) f=$((f + 1)) counts+=("timed out after ${timeout_s}s") ;;
		*) [ "$f" -eq 0 ] && f=1 counts+=("pytest exit $rc") ;;
		esac
		[ "$rc" = 1 ] && [ "$f" -eq 0 ] && f=1 counts+=("pytest exit 1 with no failed case in its report")
		pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
		if [ "$f" -gt 0 ]; then
			failed+=("$i")
			printf '  FAIL  %-28s %d passed, %d failed, %d skipped, %ss\n' "$name" "$p" "$f" "$s" "$secs"
			for n in "${counts[@]:1}"; do printf '        %s\n' "$n"; done
		elif [ "$p" -eq 0 ]; then
			printf '  SKIP  %-28s %d skipped: %s\n' "$name" "$s" "$(grep -m1 -o 'SKIPPED.*' "$logdir/$i.log")"
		else
			printf '  PASS  %-28s %d passed, %d skipped, %ss\n' "$name" "$p" "$s" "$secs"
		fi
		return
	fi
	case $rc in
	0)  pass=$((pass + 1)); printf '  PASS  %-28s %ss\n' "$name" "$secs" ;;
	77) skip=$((skip + 1)); printf '  SKIP  %-28s %s\n' "$name" "$(tail -n 1 "$logdir/$i.log")" ;;
	124|137) fail=$((fail + 1)); failed+=("$i"); printf '  FAIL  %-28s timed out after %ss\n' "$name" "$timeout_s" ;;
	*)  fail=$((fail + 1)); failed+=("$i"); printf '  FAIL  %-28s exit %d\n' "$name" "$rc" ;;
	esac
}

tests=("${not_built[@]}" "${args[@]}")
for i in "${!not_built[@]}"; do echo "notbuilt 0" >"$logdir/$i.rc"; done
next=0 running=0
# Prints every finished test whose predecessors are all printed.
flush() {
	while [ "$next" -lt "${#tests[@]}" ] && [ -e "$logdir/$next.rc" ]; do
		report "$next"
		next=$((next + 1))
	done
}
for ((i = ${#not_built[@]}; i < ${#tests[@]}; i++)); do
	t=${tests[$i]}
	if [ ! -e "$t" ]; then
		echo "notbuilt 0" >"$logdir/$i.rc"
		continue
	fi
	while [ "$running" -ge "$jobs" ]; do
		wait -n
		running=$((running - 1))
		flush
	done
	run_one "$i" "$t" &
	running=$((running + 1))
done
wait
flush

for i in "${failed[@]}"; do
	[ "$(cut -d' ' -f1 "$logdir/$i.rc")" = notbuilt ] && continue
	printf '\n----- %s -----\n' "${tests[$i]}"
	n=$(wc -l <"$logdir/$i.log")
	if [ "$n" -le 1000 ]; then
		cat "$logdir/$i.log"
	else
		head -n 200 "$logdir/$i.log"
		printf '[... %d lines left out ...]\n' $((n - 1000))
		tail -n 800 "$logdir/$i.log"
	fi
done
echo
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
