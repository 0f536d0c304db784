#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A/B of PING servers with one client, interleaved in rounds so that a noisy
# shared machine hits every side alike: the socketpair floor, wcd, and
# bench/host/uring_pingd (the smallest io_uring PING server) in several modes.
#
#   bench/host/ping_ab.sh [-r ROUNDS] [-n N] [-N N64] [--modes "0 8 1 9 2 4"]
#
# WCD_B=PATH (and WCD_C=PATH) add candidate wcd builds as "wcd-B" ("wcd-C"),
# started with the environment WCD_B_ENV (WCD_C_ENV: "NAME=value ...").
# Prints, per server and placement, the median over rounds of the
# one-connection p50 and p99 (blocking client) and of requests/s at 64
# connections (io_uring client). Servers run pinned to CPU 1; the client
# runs on CPU 0 ("cross") and on CPU 1 ("same"), the floor placed alike. Modes: see bench/host/uring_pingd.c (1 DEFER_TASKRUN, 2 POLL_FIRST,
# 4 multishot recv, 8 recvmsg/sendmsg as the reactor).
set -euo pipefail
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
BIN=$TOP/$BUILD/bin BB=$TOP/$BUILD/bench
ROUNDS=5 N=50000 N64=300000 MODES="0 8 9 11 12"
while [ $# -gt 0 ]; do
	case $1 in
	-r) ROUNDS=$2; shift ;;
	-n) N=$2; shift ;;
	-N) N64=$2; shift ;;
	--modes) MODES=$2; shift ;;
	-h|--help) sed -n '3,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "ping_ab.sh: unknown option '$1'" >&2; exit 2 ;;
	esac
	shift
done
T=$(mktemp -d /tmp/wcbench-ab.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$T"
}
trap cleanup EXIT
"$BIN/wcgen" tiny --out "$T/m" >/dev/null
mkdir -p "$T/run"
PIN=(taskset -c 1)
"${PIN[@]}" "$BIN/wcd" --model "$T/m" --device host:ab --runtime-dir "$T/run" >"$T/wcd.log" 2>&1 &
PIDS+=($!)
# candidates: wcd-B from WCD_B (+ WCD_B_ENV), wcd-C from WCD_C (+ WCD_C_ENV)
cands=
for k in B C; do
	bin_var=WCD_$k env_var=WCD_${k}_ENV
	[ -n "${!bin_var:-}" ] || continue
	mkdir -p "$T/run$k"
	env ${!env_var:-} "${PIN[@]}" "${!bin_var}" --model "$T/m" --device host:ab \
		--runtime-dir "$T/run$k" >"$T/wcd$k.log" 2>&1 &
	PIDS+=($!)
	cands+=" $k"
done
for m in $MODES; do
	"${PIN[@]}" "$BB/uring_pingd" "$T/pingd$m.sock" -m "$m" &
	PIDS+=($!)
done
for _ in $(seq 500); do [ -f "$T/run/host-ab.ready" ] && break; sleep 0.02; done
servers="wcd:$T/run/host-ab.sock"
for k in $cands; do
	for _ in $(seq 500); do [ -f "$T/run$k/host-ab.ready" ] && break; sleep 0.02; done
	servers+=" wcd-$k:$T/run$k/host-ab.sock"
done
for m in $MODES; do servers+=" pingd-m$m:$T/pingd$m.sock"; done
q='import json,sys; r=json.load(sys.stdin); s=r["series"]["ping"]; print(s["p50_us"], s["p99_us"], r["metrics"]["requests_per_s"])'
: >"$T/res"
echo "load before: $(cat /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
	for pl in cross same; do
		[ $pl = cross ] && c=0 || c=1
		one=$("$BB/pingpong_floor" -n "$N" --cpus $c,1 --json | python3 -c "$q")
		echo "$pl floor ${one% *} 0" >>"$T/res"
		for s in $servers; do
			name=${s%%:*} sock=${s#*:}
			one=$(timeout 120 "$BIN/wcbench" rtt --socket "$sock" -n "$N" --cpu $c -q --json | python3 -c "$q")
			many=0
			if [ $pl = cross ]; then
				many=$(timeout 120 "$BIN/wcbench" rtt --socket "$sock" -n "$N64" -c 64 --cpu $c -q --json | python3 -c "$q")
				many=${many##* }
			fi
			echo "$pl $name ${one% *} $many" >>"$T/res"
		done
	done
	echo "round $r/$ROUNDS done" >&2
done
echo "load after: $(cat /proc/loadavg)"
python3 - "$T/res" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    pl, name, p50, p99, rps = line.split()
    rows.setdefault((pl, name), []).append((float(p50), float(p99), float(rps)))
print(f"{'placement':<9} {'server':<12} {'p50 us':>8} {'x floor':>8} {'p99 us':>8} {'64-conn req/s':>14}   (medians of {len(rows[('cross', 'floor')])} rounds)")
for (pl, name), v in rows.items():
    floor = statistics.median(r[0] for r in rows[(pl, "floor")])
    p50 = statistics.median(r[0] for r in v)
    p99 = statistics.median(r[1] for r in v)
    rps = statistics.median(r[2] for r in v)
    print(f"{pl:<9} {name:<12} {p50:8.2f} {p50 / floor:8.2f} {p99:8.2f} {rps:14,.0f}")
PY
