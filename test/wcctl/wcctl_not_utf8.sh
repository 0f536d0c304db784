#!/usr/bin/env bash
# Paths that are not UTF-8 (a Latin-1 "\xe9" in the runtime directory and
# the model's) in wcctl's JSON: start --dry-run --json, start --json,
# status --json and stop --json print JSON (jansson refuses such strings,
# and one refused string emptied the whole object to "{}"), each such
# byte shown as U+FFFD; the daemon started there serves and its status
# says ready.
source "$(dirname "$0")/../lib/lib.sh"
source "$(dirname "$0")/../lib/wcctl_lib.bash"
[ -x "$BIN/wcd" ] && [ -x "$BIN/wcgen" ] || skip "wcd or wcgen not built"
command -v python3 >/dev/null || skip "python3 is needed to check JSON"
E=$(printf '\xe9')
M="$T/model-$E"
R="$T/run-$E"
"$BIN/wcgen" tiny --out "$M" >/dev/null 2>&1 || fail "wcgen tiny failed"
# FILE KEY: the value at KEY (a.b.0.c) of the JSON in FILE, or FAIL
jget() {
	python3 -c 'import json, sys
v = json.load(open(sys.argv[1], encoding="utf-8"))
for k in sys.argv[2].split("."):
    v = v[int(k)] if isinstance(v, list) else v[k]
print(v)' "$1" "$2" || fail "$1 is not JSON with $2: $(cat "$1")"
}
want="$T/run-"$'\xef\xbf\xbd'

"$WCCTL" start --model "$M" --tp-size 1 --backend host --runtime-dir "$R" --dry-run --json >"$T/plan.json"
expect_eq "dry-run runtime_dir" "$(jget "$T/plan.json" runtime_dir)" "$want"
expect_has "dry-run argv" "$(jget "$T/plan.json" ranks.0.argv)" "model-"$'\xef\xbf\xbd'

"$WCCTL" start --model "$M" --tp-size 1 --backend host --runtime-dir "$R" --timeout 60 --json \
	>"$T/start.json" 2>"$T/start.err"; rc=$?
remember_pids "$T/start.err"
for p in $(ls "$R"/*.ready 2>/dev/null); do PIDS+=("$(sed -n 's/^pid=//p' "$p")"); done
expect_eq "start (log: $(cat "$T/start.err"))" "$rc" 0
expect_eq "start ok" "$(jget "$T/start.json" ok)" True
expect_eq "start runtime_dir" "$(jget "$T/start.json" runtime_dir)" "$want"

"$WCCTL" status --runtime-dir "$R" --json >"$T/status.json"; rc=$?
expect_eq "status" "$rc" 0
expect_eq "status state" "$(jget "$T/status.json" 0.state)" ready
expect_eq "status model" "$(jget "$T/status.json" 0.model)" "$T/model-"$'\xef\xbf\xbd'
expect_has "status ready_file" "$(jget "$T/status.json" 0.ready_file)" "$want/"

"$WCCTL" stop --all --runtime-dir "$R" --json >"$T/stop.json"; rc=$?
expect_eq "stop" "$rc" 0
expect_eq "stop ok" "$(jget "$T/stop.json" ok)" True
echo ok
