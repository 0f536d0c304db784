#!/usr/bin/env bash
# wcd's metrics include the process_* families Prometheus' client
# libraries export (issue 26, Operations: Metrics): process_cpu_seconds_total,
# process_resident_memory_bytes, process_virtual_memory_bytes,
# process_open_fds, process_max_fds, process_start_time_seconds, each with
# the rank's labels, and each matching what /proc says of the daemon.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
command -v curl >/dev/null || skip "curl is not installed (make deps)"
e2e_init mproc
MSOCK=$E2E_DIR/m.sock
e2e_start_wcd --metrics-listen "unix:$MSOCK"
curl -sS --max-time 10 --unix-socket "$MSOCK" -o "$E2E_DIR/m" http://wcd/metrics ||
	fail "GET /metrics over $MSOCK"
val() {  # val NAME: the value of NAME's sample (labels aside)
	awk -v k="$1" 'index($1, k "{") == 1 { print $2; exit }' "$E2E_DIR/m"
}
for f in process_cpu_seconds_total process_resident_memory_bytes \
	process_virtual_memory_bytes process_open_fds process_max_fds \
	process_start_time_seconds; do
	[ -n "$(val "$f")" ] || fail "no $f: $(grep -c . "$E2E_DIR/m") lines, none of it"
	grep -q "^# TYPE $f $( [ $f = process_cpu_seconds_total ] && echo counter || echo gauge)\$" "$E2E_DIR/m" ||
		fail "$f has no TYPE line or the wrong type: $(grep "TYPE $f" "$E2E_DIR/m")"
	grep -q "^$f{device=\"host-$DEVNAME\",rank=\"0\"," "$E2E_DIR/m" || fail "$f without the rank's labels"
done
python3 - "$E2E_DIR/m" "$WCD_PID" <<'PY' || fail "process_* against /proc"
import os, sys
path, pid = sys.argv[1], int(sys.argv[2])
v = {}
for line in open(path):
    if not line.startswith("#"):
        name, value = line.split("{", 1)[0], float(line.split()[-1])
        v.setdefault(name, value)
fds = len(os.listdir("/proc/%d/fd" % pid))
# the scrape's own connection is open in wcd while it renders
assert abs(v["process_open_fds"] - fds) <= 2, (v["process_open_fds"], fds)
soft = [l.split()[3] for l in open("/proc/%d/limits" % pid) if l.startswith("Max open files")][0]
assert str(int(v["process_max_fds"])) == soft, (v["process_max_fds"], soft)
rss = [int(l.split()[1]) * 1024 for l in open("/proc/%d/status" % pid) if l.startswith("VmRSS:")][0]
assert rss / 2 <= v["process_resident_memory_bytes"] <= rss * 2, (v["process_resident_memory_bytes"], rss)
assert v["process_virtual_memory_bytes"] >= v["process_resident_memory_bytes"]
assert abs(v["process_start_time_seconds"] - v["wcache_start_time_seconds"]) < 2, \
    (v["process_start_time_seconds"], v["wcache_start_time_seconds"])
assert 0 <= v["process_cpu_seconds_total"] < 600, v["process_cpu_seconds_total"]
print("process_*: fds %d/%d, rss %d, started %.2f" % (v["process_open_fds"], v["process_max_fds"],
      v["process_resident_memory_bytes"], v["process_start_time_seconds"]))
PY
if command -v promtool >/dev/null; then
	promtool check metrics <"$E2E_DIR/m" >"$E2E_DIR/lint" 2>&1 ||
		fail "promtool check metrics: $(cat "$E2E_DIR/lint")"
fi
echo ok
