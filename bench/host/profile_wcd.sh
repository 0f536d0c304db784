#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Where does wcd's time go per PING? Two views of the same daemon:
#
#   bench/host/profile_wcd.sh [--model DIR] [--out DIR] [-c CONNS] [-n N]
#
#   perf       perf record -e cpu-clock -g on the running daemon while
#              `wcbench rtt` drives it (software clock sampling: this VM has
#              no hardware counters); report: top symbols, user and kernel,
#              with and without children.
#   callgrind  the daemon under valgrind --tool=callgrind for N PINGs over
#              one connection; report: instructions per request by function
#              (user space only), from callgrind_annotate.
#
# Output goes to --out (default /tmp/wcbench-profile); the summaries are
# printed. Needs perf and valgrind; the model defaults to wcgen tiny (the
# request path does not depend on the model's size).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
BIN=$TOP/$BUILD/bin
OUT=/tmp/wcbench-profile
MODEL= CONNS=64 N=300000
while [ $# -gt 0 ]; do
	case $1 in
	--model) MODEL=$2; shift ;;
	--out) OUT=$2; shift ;;
	-c) CONNS=$2; shift ;;
	-n) N=$2; shift ;;
	-h|--help) sed -n '3,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "profile_wcd.sh: unknown option '$1'" >&2; exit 2 ;;
	esac
	shift
done
mkdir -p "$OUT"
T=$(mktemp -d /tmp/wcbench-prof.XXXXXX)
PID=
cleanup() {
	[ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
if [ -z "$MODEL" ]; then
	"$BIN/wcgen" tiny --out "$T/m" >/dev/null
	MODEL=$T/m
fi
wait_ready() {
	for _ in $(seq 3000); do
		[ -f "$T/run/host-prof.ready" ] && return 0
		kill -0 "$PID" 2>/dev/null || { cat "$T/wcd.log" >&2; exit 1; }
		sleep 0.02
	done
	echo "wcd not ready" >&2; exit 1
}
S=$T/run/host-prof.sock

# --- perf ---------------------------------------------------------------------
mkdir -p "$T/run"
"$BIN/wcd" --model "$MODEL" --device host:prof --runtime-dir "$T/run" >"$T/wcd.log" 2>&1 &
PID=$!
wait_ready
"$BIN/wcbench" rtt --socket "$S" -n 20000 -c "$CONNS" -q >/dev/null
perf record -e cpu-clock -F 4999 -g -p "$PID" -o "$OUT/perf.data" -- sleep 4 \
	>/dev/null 2>&1 &
PERF=$!
sleep 0.5
"$BIN/wcbench" rtt --socket "$S" -n "$N" -c "$CONNS" --server-pid "$PID" -q | tee "$OUT/rtt.txt"
wait "$PERF" || true
# (full reports first: a pipe closed early by head would fail the script)
perf report -i "$OUT/perf.data" --stdio --no-children --sort sym \
	>"$OUT/perf-self-full.txt" 2>/dev/null || true
perf report -i "$OUT/perf.data" --stdio --children --sort sym \
	>"$OUT/perf-children-full.txt" 2>/dev/null || true
grep -E '^ +[0-9.]+%' "$OUT/perf-self-full.txt" >"$OUT/perf-self.txt" || true
grep -E '^ +[0-9.]+%' "$OUT/perf-children-full.txt" >"$OUT/perf-children.txt" || true
echo "== perf, wcd, $CONNS connections: self time by symbol (top 25)"
head -25 "$OUT/perf-self.txt" || true
echo "== perf, wcd: with children (top 25)"
head -25 "$OUT/perf-children.txt" || true
kill "$PID"; wait "$PID" || true; PID=

# --- callgrind ------------------------------------------------------------------
rm -rf "$T/run"; mkdir -p "$T/run"
valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out" \
	"$BIN/wcd" --model "$MODEL" --device host:prof --runtime-dir "$T/run" \
	--no-hash >"$T/wcd.log" 2>&1 &
PID=$!
wait_ready
"$BIN/wcbench" rtt --socket "$S" -n 20000 --warmup 0 -q | tee "$OUT/rtt-callgrind.txt"
kill "$PID"; wait "$PID" || true; PID=
callgrind_annotate --inclusive=yes "$OUT/callgrind.out" >"$OUT/callgrind-inclusive.txt" 2>/dev/null || true
callgrind_annotate "$OUT/callgrind.out" >"$OUT/callgrind-self.txt" 2>/dev/null || true
echo "== callgrind, wcd, 20000 PINGs on one connection (plus start-up): inclusive"
head -45 "$OUT/callgrind-inclusive.txt" || true
echo "(full output in $OUT)"
