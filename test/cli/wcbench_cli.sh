#!/usr/bin/env bash
# wcbench's command line: --help everywhere, errors that name the bad value,
# and a tiny liveness run whose table, JSON and SVG are well formed. No
# timings are asserted (benchmarks live in bench/).
source "$(dirname "$0")/../lib/lib.sh"
W=$BIN/wcbench
[ -x "$W" ] || fail "$W is not built"
d=$(tmpdir)
trap 'rm -rf "$d"' EXIT

out=$("$W" --help) || fail "wcbench --help exited $?"
for c in rtt attach load liveness; do
	expect_has "wcbench --help" "$out" "$c"
	h=$("$W" $c --help) || fail "wcbench $c --help exited $?"
	expect_has "wcbench $c --help" "$h" "usage: wcbench $c"
	expect_has "wcbench $c --help" "$h" "--json"
	expect_has "wcbench $c --help" "$h" "--svg FILE"
done

"$W" frobnicate >/dev/null 2>"$d/err"; rc=$?
expect_eq "unknown command exit" "$rc" 2
expect_has "unknown command message" "$(cat "$d/err")" "'frobnicate'"

"$W" rtt --socket "$d/none.sock" -c 0 >/dev/null 2>"$d/err"; rc=$?
expect_eq "rtt -c 0 exit" "$rc" 1
expect_has "rtt -c 0 message" "$(cat "$d/err")" "--connections '0'"

"$W" rtt --socket "$d/none.sock" -n 10 >/dev/null 2>"$d/err"; rc=$?
expect_eq "rtt without a daemon exit" "$rc" 1
expect_has "rtt without a daemon message" "$(cat "$d/err")" "cannot connect to $d/none.sock"

"$W" liveness --delay-ms 9,1 >/dev/null 2>"$d/err"; rc=$?
expect_eq "liveness --delay-ms 9,1 exit" "$rc" 1
expect_has "liveness --delay-ms message" "$(cat "$d/err")" "'9,1'"

"$W" load >/dev/null 2>"$d/err"; rc=$?
expect_eq "load without --model exit" "$rc" 2
expect_has "load without --model message" "$(cat "$d/err")" "--model DIR is required"

"$W" liveness -n 4 --svg /nonexistent/dir/x.svg --no-poll -q >/dev/null 2>"$d/err"; rc=$?
expect_eq "liveness --svg into a missing dir exit" "$rc" 1
expect_has "--svg error" "$(cat "$d/err")" "/nonexistent/dir/x.svg"

# A tiny liveness run: the table, then JSON + SVG.
out=$("$W" liveness -n 12 -c 4 --delay-ms 1,3 --poll-children 3 \
	--poll-interval 0.01 -q) || fail "liveness exited $?"
expect_has "liveness table" "$out" "reactor (pidfd)"
expect_has "liveness table" "$out" "p99.9"
"$W" liveness -n 12 -c 4 --delay-ms 1,3 --poll-children 3 \
	--poll-interval 0.01 -q --json --svg "$d/lv.svg" >"$d/lv.json" ||
	fail "liveness --json exited $?"
python3 - "$d/lv.json" "$d/lv.svg" <<'PY' || fail "liveness JSON/SVG malformed"
import json, sys, xml.etree.ElementTree as ET
r = json.load(open(sys.argv[1]))
assert r["bench"] == "liveness", r
s = r["series"]["reactor (pidfd)"]
assert s["n"] == 12, s
assert 0 < s["p50_us"] <= s["p99_us"] <= s["max_us"], s
c = s["cdf_us"]
assert len(c) == 103 and c == sorted(c) and c[-1] == s["max_us"], c
p = r["series"]["poll every 0.01 s"]
assert p["n"] == 3, p
f = r["series"]["floor: blocking waitpid"]
assert f["n"] == 12, f
svg = ET.parse(sys.argv[2]).getroot()
lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
assert len(lines) == 3, len(lines)
PY

# attach with no daemon: every worker fails, wcbench exits 1 and frees
# what it holds first (under SANITIZE=address LeakSanitizer used to report
# the 8 bytes of the pid table here; issue 15, item 9)
"$W" attach --socket "$d/none.sock" -n 2 -p 1 -q >/dev/null 2>"$d/err"; rc=$?
expect_eq "attach without a daemon exit" "$rc" 1
expect_has "attach without a daemon message" "$(cat "$d/err")" "processes failed"
[[ $(cat "$d/err") == *LeakSanitizer* ]] && { cat "$d/err"; fail "wcbench attach leaked"; }

# The floor program, when built.
F=$WC_TOP/$BUILD/bench/pingpong_floor
if [ -x "$F" ]; then
	"$F" -n 200 --warmup 10 --json >"$d/pp.json" || fail "pingpong_floor exited $?"
	python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); s=r["series"]["ping"]; assert s["n"]==200 and len(s["cdf_us"])==103' \
		"$d/pp.json" || fail "pingpong_floor JSON malformed"
fi
exit 0
