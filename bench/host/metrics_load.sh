#!/usr/bin/env bash
# Do scrapers slow the engines? Attach latency (wcbench attach: connect,
# HELLO, MANIFEST, ATTACH, map) against a wcd serving --metrics-listen,
# with no HTTP client and with 64 slow scrapers (each sends its request a
# byte every 0.25 s, is cut off by the 2 s deadline or refused past 16
# connections, and comes back) plus one client sending malformed HTTP in a
# loop, in interleaved rounds of the same run. wcd is pinned to CPU 0, the
# attach client and the scrapers to CPU 1 (on a 2-CPU machine); the ratio
# loaded/quiet of p50 and p99 is the result. Prints a markdown table and
# what the daemon counted (served, rejected, timeouts, 4xx).
#
#   bench/host/metrics_load.sh [ROUNDS (3)] [CYCLES per round (2000)]
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
BIN=$top/$BUILD/bin
rounds=${1:-3}
cycles=${2:-2000}
ncpu=$(nproc)
cpu_d=0 cpu_c=$(( ncpu > 1 ? 1 : 0 ))
W=$(mktemp -d /tmp/wcb-metrics.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT
"$BIN/wcgen" tiny --out "$W/model" >/dev/null
taskset -c $cpu_d "$BIN/wcd" --model "$W/model" --device host:mbench --runtime-dir "$W/run" \
	--metrics-listen 127.0.0.1:0 >"$W/wcd.log" 2>&1 &
pids+=($!)
for i in $(seq 300); do [ -e "$W/run/host-mbench.ready" ] && break; sleep 0.05; done
port=$(grep -o 'http://127.0.0.1:[0-9]*/' "$W/wcd.log" | head -1 | cut -d: -f3 | tr -d /)
cat >"$W/scrapers.py" <<'PY'
import socket, sys, threading, time
port, n = int(sys.argv[1]), int(sys.argv[2])
req = b"GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: slow\r\n\r\n"
stop = False
def slow():
    while not stop:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            for b in req:
                s.send(bytes([b]))
                time.sleep(0.25)
                if stop:
                    break
            while s.recv(65536):
                pass
        except OSError:
            time.sleep(0.05)
        finally:
            try: s.close()
            except Exception: pass
def garbage():
    while not stop:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"\x16\x03\x01\x00\xa5garbage\r\n\r\n")
            while s.recv(65536):
                pass
            s.close()
        except OSError:
            pass
        time.sleep(0.01)
ts = [threading.Thread(target=slow, daemon=True) for _ in range(n)]
ts.append(threading.Thread(target=garbage, daemon=True))
for t in ts:
    t.start()
sys.stdin.read()      # until our parent closes stdin
stop = True
PY
run_attach() {  # run_attach OUT.json
	taskset -c $cpu_c "$BIN/wcbench" attach --device host:mbench --runtime-dir "$W/run" \
		-n "$cycles" -q --json >"$1"
}
la0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$rounds"); do
	run_attach "$W/quiet$r.json"
	mkfifo "$W/hold$r"
	taskset -c $cpu_c python3 "$W/scrapers.py" "$port" 64 <"$W/hold$r" &
	sp=$!; pids+=($sp)
	exec 9>"$W/hold$r"
	sleep 3   # every scraper connected, some already cut off once
	run_attach "$W/loaded$r.json"
	exec 9>&-
	wait "$sp" || true
done
la1=$(cut -d' ' -f1-3 /proc/loadavg)
curl -s "http://127.0.0.1:$port/metrics" >"$W/final.prom"
python3 - "$W" "$rounds" "$cycles" "$la0" "$la1" <<'PY'
import json, re, sys, statistics
w, rounds, cycles = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def get(kind, r):
    s = json.load(open("%s/%s%d.json" % (w, kind, r)))["series"]["cycle (total)"]
    return s["p50_us"], s["p99_us"]
print("| round | quiet p50 us | 64 slow scrapers p50 us | ratio | quiet p99 us | loaded p99 us | ratio |")
print("| --- | --- | --- | --- | --- | --- | --- |")
r50, r99 = [], []
for r in range(1, rounds + 1):
    q, l = get("quiet", r), get("loaded", r)
    r50.append(l[0] / q[0]); r99.append(l[1] / q[1])
    print("| %d | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |" % (r, q[0], l[0], l[0] / q[0], q[1], l[1], l[1] / q[1]))
print("\nmedian ratio loaded/quiet: p50 %.2f, p99 %.2f (%d cycles a round); load average %s -> %s"
      % (statistics.median(r50), statistics.median(r99), cycles, sys.argv[4], sys.argv[5]))
vals = {}
for line in open(w + "/final.prom"):
    if line.startswith("wcache_metrics_scrapes_total"):
        k, v = line.split()
        vals[re.search(r'result="([^"]*)"', k).group(1)] = int(float(v))
print("the daemon counted: %s" % ", ".join("%s %d" % kv for kv in sorted(vals.items())))
PY
