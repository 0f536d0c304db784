#!/usr/bin/env bash
# wcbench against a real wcd on a tiny wcgen model: rtt (blocking and
# io_uring clients, pipelined), attach from two processes, and load each
# run and print well-formed tables and JSON. No timings are asserted.
source "$(dirname "$0")/../lib/lib.sh"
W=$BIN/wcbench
for b in wcbench wcd wcgen; do
	[ -x "$BIN/$b" ] || skip "$BIN/$b is not built"
done
d=$(tmpdir)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$d"
}
trap cleanup EXIT

"$BIN/wcgen" tiny --out "$d/m" >/dev/null || fail "wcgen tiny failed"
mkdir -p "$d/run"
"$BIN/wcd" --model "$d/m" --device host:wcb --runtime-dir "$d/run" \
	>"$d/wcd.log" 2>&1 &
pid=$!
"$WAITFOR" -p "$pid" -t 10 "$d/run/host-wcb.ready"
[ $? = 1 ] && fail "wcd exited: $(cat "$d/wcd.log")"
[ -f "$d/run/host-wcb.ready" ] || fail "wcd not ready after 10 s: $(cat "$d/wcd.log")"
S=$d/run/host-wcb.sock

out=$("$W" rtt --socket "$S" -n 500 --warmup 10 -q) || fail "rtt exited $?"
expect_has "rtt table" "$out" "blocking client"
expect_has "rtt table" "$out" "requests_per_s"
# --runtime-dir/--device find the same socket.
"$W" rtt --runtime-dir "$d/run" --device host:wcb -n 100 -q >/dev/null ||
	fail "rtt through --runtime-dir/--device exited $?"
"$W" rtt --socket "$S" -n 2000 -c 8 -d 4 --payload 32 --server-pid "$pid" \
	--json -q --svg "$d/rtt.svg" >"$d/rtt.json" || fail "rtt -c 8 -d 4 exited $?"
"$W" attach --socket "$S" --model "$d/m" -n 20 -p 2 --warmup 1 --json -q \
	>"$d/attach.json" || fail "attach exited $?"
"$W" load --model "$d/m" --device host:wcb-load --json -q >"$d/load.json" ||
	fail "load exited $?"
python3 - "$d" <<'PY' || fail "malformed JSON or SVG"
import json, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
r = json.load(open(d + "/rtt.json"))
s = r["series"]["ping"]
assert s["n"] == 2000 and 0 < s["p50_us"] <= s["max_us"], s
m = r["metrics"]
assert m["requests_per_s"] > 0 and m["server_rss_after_kib"] > 0, m
ET.parse(d + "/rtt.svg")
a = json.load(open(d + "/attach.json"))
for k in ("cycle (total)", "connect", "hello", "manifest", "attach", "map"):
    assert a["series"][k]["n"] == 20, (k, a["series"][k])
assert a["metrics"]["tensors"] > 0, a["metrics"]
l = json.load(open(d + "/load.json"))
assert l["series"]["spawn to ready"]["n"] == 1, l
assert l["metrics"]["bytes"] > 0, l["metrics"]
PY
kill "$pid"; wait "$pid"; rc=$?
pid=
expect_eq "wcd exit after the benchmarks" "$rc" 0
exit 0
