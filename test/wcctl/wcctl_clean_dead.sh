#!/usr/bin/env bash
# wcctl clean then wcctl status (issue 26): a rank that died serving was
# UNREACHABLE (exit 4) until clean removed its files; then status listed
# the live ranks only and exited 0, hiding it. Clean now leaves
# <device>.dead (the ready file's lines, cleaned_at=) and says so; status
# shows the rank DEAD (exit 4, --json "state": "DEAD", "dead_file"); a
# daemon serving the device again removes it (stopped later, the rank is
# not DEAD again), and so does a clean beside a live daemon; clean --forget
# drops it. A daemon stopped on purpose leaves
# no record.
. "$(dirname "$0")/../lib/lib.sh"
T=$(tmpdir)
export WCACHE_SOCKET_TEMPLATE=$T/run/{device}
trap '"$BIN/wcctl" stop --all >/dev/null 2>&1; rm -rf "$T"' EXIT
# SIGKILL pid and wait on its pidfd until it is gone (its lock with it)
kill_wait() {
	python3 -c 'import os, select, signal, sys
pid = int(sys.argv[1]); fd = os.pidfd_open(pid)
os.kill(pid, signal.SIGKILL); select.select([fd], [], [])' "$1" || fail "cannot kill pid $1"
}
"$BIN/wcgen" tiny --out "$T/m" >/dev/null 2>&1 || fail "wcgen tiny"
out=$("$BIN/wcctl" start --model "$T/m" --tp-size 2 --backend host --timeout 60 2>&1) ||
	fail "wcctl start: $out"
pid1=$(sed -n 's/^pid=//p' "$T/run/host-1.ready")
kill_wait "$pid1"
"$BIN/wcctl" status >/dev/null 2>&1; rc=$?
expect_eq "status with host-1 killed" "$rc" 4

out=$("$BIN/wcctl" clean 2>&1) || fail "clean: $out"
expect_has "clean" "$out" "removed 4 files of the dead daemon on host-1 (pid $pid1, pp0/tp1 of $T/m); wcctl status shows it as DEAD"
[ -f "$T/run/host-1.dead" ] || fail "clean left no $T/run/host-1.dead"
[ ! -e "$T/run/host-1.ready" ] || fail "clean left host-1.ready"
out=$("$BIN/wcctl" status 2>&1); rc=$?
expect_eq "status after clean (output: $out)" "$rc" 4
expect_has "status after clean" "$out" "host-1               pp0/tp1    DEAD"
expect_has "status after clean" "$out" "host-1: DEAD: its daemon (pid $pid1, pp0/tp1 of $T/m) died serving; wcctl clean removed its files at"
out=$("$BIN/wcctl" status --json 2>&1); rc=$?
expect_eq "status --json after clean" "$rc" 4
python3 - "$out" "$T/run/host-1.dead" <<'PY' || fail "status --json: $out"
import json, sys
rows = {r["device"]: r for r in json.loads(sys.argv[1])}
assert rows["host-0"]["reachable"] is True, rows
d = rows["host-1"]
assert d["state"] == "DEAD" and d["reachable"] is False, d
assert d["dead_file"] == sys.argv[2] and d["ready"]["tp_rank"] == 1, d
PY
# a second clean keeps the record
out=$("$BIN/wcctl" clean 2>&1) || fail "clean again: $out"
[ -f "$T/run/host-1.dead" ] || fail "a second clean removed the record"

# a daemon serves host-1 again: not DEAD, and the record is gone, so that
# stopping it on purpose later does not bring the old death back
out=$("$BIN/wcctl" stop --all 2>&1) || fail "stop --all: $out"
out=$("$BIN/wcctl" start --model "$T/m" --tp-size 2 --backend host --timeout 60 2>&1) ||
	fail "wcctl start again: $out"
[ ! -e "$T/run/host-1.dead" ] || fail "host-1 serves again and its .dead record stayed"
out=$("$BIN/wcctl" status 2>&1); rc=$?
expect_eq "status with host-1 served again (output: $out)" "$rc" 0
expect_no "status with host-1 served again" "$out" "DEAD"
out=$("$BIN/wcctl" stop --all 2>&1) || fail "stop --all after serving again: $out"
out=$("$BIN/wcctl" status 2>&1); rc=$?
expect_eq "status after host-1 served again and was stopped (output: $out)" "$rc" 3
expect_no "status after host-1 served again and was stopped" "$out" "DEAD"
out=$("$BIN/wcctl" start --model "$T/m" --tp-size 2 --backend host --timeout 60 2>&1) ||
	fail "wcctl start a third time: $out"
# a record beside a live daemon (one of a build that left it): clean drops it
cp "$T/run/host-1.ready" "$T/run/host-1.dead"
out=$("$BIN/wcctl" clean 2>&1) || fail "clean with host-1 live: $out"
[ ! -e "$T/run/host-1.dead" ] || fail "clean kept the record of host-1, which serves again"

# stopped on purpose: no record; killed and cleaned with --forget: none
out=$("$BIN/wcctl" stop --device host-1 2>&1) || fail "stop host-1: $out"
out=$("$BIN/wcctl" clean 2>&1) || fail "clean after stop: $out"
[ ! -e "$T/run/host-1.dead" ] || fail "a stopped daemon left a .dead record"
pid0=$(sed -n 's/^pid=//p' "$T/run/host-0.ready")
kill_wait "$pid0"
out=$("$BIN/wcctl" clean --forget 2>&1) || fail "clean --forget: $out"
[ ! -e "$T/run/host-0.dead" ] || fail "clean --forget left host-0.dead"
out=$("$BIN/wcctl" status 2>&1); rc=$?
expect_eq "status after clean --forget (output: $out)" "$rc" 3
echo ok
