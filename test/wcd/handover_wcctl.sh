#!/usr/bin/env bash
# wcctl restart on the real wcd (host backend, wcgen tiny): an engine
# (wcattach --hold --verify) attached through two restarts (one with
# --verify hash) is told of each (a HANDOVER notice), never sees its daemon
# exit and still verifies; the ready file and the lock name the new pid, so
# status and stop recognise the new daemon; a new wcd of another handover
# protocol is refused (exit 1) and the old one serves on; a new one killed
# before SERVING exits 1 with the old one serving on, killed right after
# SERVING exits 1 saying that none serves (the old one had exited); a
# restart with nothing running exits 3; --json reports both pids.
source "$(dirname "$0")/../lib/lib.sh"
source "$(dirname "$0")/../lib/wcctl_lib.bash"
[ -x "$BIN/wcd" ] && [ -x "$BIN/wcgen" ] || skip "wcd or wcgen not built"
"$BIN/wcgen" tiny --out "$T/model" >/dev/null 2>&1 || fail "wcgen tiny failed"
ctl() { "$WCCTL" "$1" --runtime-dir "$RUN" "${@:2}"; }

"$WCCTL" start --model "$T/model" --tp-size 1 --backend host --runtime-dir "$RUN" \
	--timeout 60 >"$T/start.out" 2>&1 || fail "wcctl start: $(cat "$T/start.out")"
remember_pids "$T/start.out"
p0=$(ready_pid "$RUN" host-0)

# an engine holds a lease (until we end it)
"$BIN/wcattach" --device host:0 --runtime-dir "$RUN" --verify --hold 600 \
	>"$T/att.out" 2>&1 &
att=$!
PIDS+=("$att")
"$WAITFOR" -p "$att" -t 5 -g "all hashes match" "$T/att.out"
expect_has "engine attached" "$(cat "$T/att.out")" "all hashes match"

out=$(ctl restart --device host:0 --json 2>"$T/r1.err"); rc=$?
expect_eq "restart 1" "$rc" 0
p1=$(ready_pid "$RUN" host-0)
PIDS+=("$p1")
expect_has "restart 1 --json" "$out" "\"old_pid\": $p0, \"new_pid\": $p1"
alive "$p0" && fail "the old daemon $p0 is still running"
expect_has "lock names the new pid" "$(cat /proc/locks)" " $p1 "

out=$(ctl restart --device host-0 --verify hash 2>&1); rc=$?
expect_eq "restart 2 (--verify hash)" "$rc" 0
p2=$(ready_pid "$RUN" host-0)
PIDS+=("$p2")
expect_has "restart 2" "$out" "wcd pid $p1 handed over to pid $p2"
expect_has "restart 2 re-hashed" "$(cat "$RUN/host-0.log")" "hashed again"

out=$(WCD_TEST_HO_PROTO=7:7 ctl restart --device host-0 2>&1); rc=$?
expect_eq "restart to another protocol" "$rc" 1
expect_has "restart to another protocol" "$out" "the old daemon serves on"
expect_has "restart to another protocol" "$out" "takes 7 to 7"
expect_eq "still served by" "$(ready_pid "$RUN" host-0)" "$p2"

out=$(ctl status); rc=$?
expect_eq "status after restarts" "$rc" 0
expect_has "status after restarts" "$out" "ready"
out=$(ctl status --json)
expect_has "status: the engine's lease" "$out" "\"leases\": 1"

# the engine saw two handovers and no daemon exit, and still verifies
kill -TERM "$att" 2>/dev/null
wait "$att"
a=$(cat "$T/att.out")
expect_has "engine told" "$a" "handed device host-0 over to wcd pid $p1"
expect_has "engine told" "$a" "handed device host-0 over to wcd pid $p2"
expect_no "engine saw no exit" "$a" "exited"

# (after the engine's checks: it follows the new pid, then back) the new
# daemon killed after its set-up, before SERVING: the old one takes
# everything back and serves on, and wcctl says so
out=$(WCD_HANDOVER_KILL=new:6 ctl restart --device host-0 2>&1); rc=$?
expect_eq "restart, new killed before SERVING" "$rc" 1
expect_has "restart, new killed before SERVING" "$out" "before serving; the old daemon serves on"
expect_eq "still served by" "$(ready_pid "$RUN" host-0)" "$p2"
alive "$p2" || fail "the old daemon $p2 died"

out=$(ctl stop --device host-0 2>&1); rc=$?
expect_eq "stop the handed-over daemon" "$rc" 0
expect_has "stop the handed-over daemon" "$out" "stopped wcd pid $p2"
out=$(ctl restart --device host-0 2>&1); rc=$?
expect_eq "restart with nothing running" "$rc" 3
expect_has "restart with nothing running" "$out" "no daemon serves device host-0"

# the new daemon killed right after SERVING (the old one has exited on it):
# a crash of the daemon that serves; wcctl must not say the old one serves
"$WCCTL" start --model "$T/model" --tp-size 1 --backend host --runtime-dir "$RUN" \
	--timeout 60 >"$T/start2.out" 2>&1 || fail "wcctl start again: $(cat "$T/start2.out")"
remember_pids "$T/start2.out"
p3=$(ready_pid "$RUN" host-0)
# (the old one reads what the new one sent before its end: SERVING, so it
# exits, never taking the clients back)
out=$(WCD_HANDOVER_KILL=new:7 ctl restart --device host-0 2>&1); rc=$?
expect_eq "restart, new killed after SERVING" "$rc" 1
st=$(ctl status 2>&1)
alive "$p3" && fail "the old daemon $p3 took the device back from a new one that had sent SERVING"
expect_no "restart, new killed after SERVING" "$out" "the old daemon serves on"
expect_has "restart, new killed after SERVING" "$out" "the old daemon pid $p3 had handed over and exited: none serves"
expect_has "status: none serves" "$st" "UNREACHABLE"
echo "ok"
