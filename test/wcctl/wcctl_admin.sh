#!/usr/bin/env bash
# wcctl start/status/stop/clean with the real wcd on a `wcgen tiny` model:
# 4 host ranks become ready and status shows them; status as a table and as
# JSON with one live and one dead daemon and its exit codes (0/3/4); stop
# (SIGTERM, and SIGKILL after --timeout) only signals a pid that holds the
# device's lock; clean never touches a live daemon's files; a wcd that
# fails (no model) is reported with its exit code and log.
source "$(dirname "$0")/../lib/lib.sh"
source "$(dirname "$0")/../lib/wcctl_lib.bash"
[ -x "$BIN/wcd" ] && [ -x "$BIN/wcgen" ] || skip "wcd or wcgen not built"
command -v python3 >/dev/null || skip "python3 is needed to check JSON"
"$BIN/wcgen" tiny --out "$T/model" >/dev/null 2>&1 || fail "wcgen tiny failed"
ctl() { "$WCCTL" "$1" --runtime-dir "$RUN" "${@:2}"; }

# nothing there yet: 3
out=$(ctl status); rc=$?
expect_eq "status with no daemon" "$rc" 3
expect_has "status with no daemon" "$out" "no wcache daemon found"

# 4 ranks of the real wcd, then the table shows all four ready
"$WCCTL" start --model "$T/model" --tp-size 4 --backend host --runtime-dir "$RUN" \
	--timeout 60 >"$T/start.out" 2>&1 7>"$T/inherited-fd"; rc=$?
remember_pids "$T/start.out"
expect_eq "start 4 real ranks" "$rc" 0
expect_has "start 4 real ranks" "$(cat "$T/start.out")" "All 4 weight cache daemons on node 0 are ready (pp_ranks=0..0, tp_ranks=0..3)"
# a descriptor the caller left open does not reach the daemons
for i in 0 1 2 3; do
	p=$(ready_pid "$RUN" host-$i)
	ls -l /proc/$p/fd | grep -q inherited-fd && fail "wcd $p inherited the caller's fd 7"
done
out=$(ctl status); rc=$?
expect_eq "status 4 live" "$rc" 0
for i in 0 1 2 3; do
	expect_has "status row $i" "$out" "host-$i               pp0/tp$i    ready        model"
done
ctl status --json >"$T/s4.json"
python3 -m json.tool "$T/s4.json" >/dev/null || fail "status --json is not JSON"
n=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(1 for x in d if x["reachable"] and x["state"]=="ready" and x["tensors"]==47))' "$T/s4.json")
expect_eq "reachable ready daemons in JSON" "$n" 4

# ranks 2 and 3 stop; rank 1 is SIGKILLed: one live, one dead
out=$(ctl stop --device host:2 2>&1); rc=$?
expect_eq "stop host:2" "$rc" 0
expect_has "stop host:2" "$out" "stopped wcd pid"
[ -e "$RUN/host-2.ready" ] && fail "host-2's ready file is still there after stop"
ctl stop --device host:3 >/dev/null 2>&1 || fail "stop host:3"
out=$(ctl stop --device host:3 2>&1); rc=$?
expect_eq "stop a stopped device" "$rc" 3
expect_has "stop a stopped device" "$out" "no daemon is running on device host-3"
p1=$(ready_pid "$RUN" host-1)
kill -9 "$p1"
"$WAITFOR" -t 5 -x "$p1"
# any unreachable daemon makes status fail (4), so a probe can trust it;
# --device asks about one, by the name the table prints or by its spec
out=$(ctl status); rc=$?
expect_eq "status live+dead" "$rc" 4
ctl status --device host-0 >/dev/null; rc=$?
expect_eq "status --device host-0 (live)" "$rc" 0
ctl status --device host:0 >/dev/null; rc=$?
expect_eq "status --device host:0 (live)" "$rc" 0
out=$(ctl status --device host-1); rc=$?
expect_eq "status --device host-1 (dead)" "$rc" 4
expect_has "status --device host-1 (dead)" "$out" "host-1: UNREACHABLE"
expect_no "status --device host-1 (dead)" "$out" "host-0"
expect_has "status --device host-6 (none)" "$(ctl status --device host-6)" "no wcache daemon found for device host-6"
ctl status --device host-6 >/dev/null; rc=$?
expect_eq "status --device host-6 (none)" "$rc" 3
out=$(ctl status); rc=$?
expect_has "status live row" "$out" "host-0               pp0/tp0    ready"
expect_has "status dead row" "$out" "host-1               pp0/tp1    UNREACHABLE  model"
expect_has "status dead why" "$out" "says pid $p1"
ctl status --json >"$T/s2.json"; rc=$?
expect_eq "status --json live+dead" "$rc" 4
python3 -m json.tool "$T/s2.json" >/dev/null || fail "status --json (live+dead) is not JSON"
got=$(python3 -c '
import json, sys
d = {x["device"]: x for x in json.load(open(sys.argv[1]))}
a, b = d["host-0"], d["host-1"]
print(a["reachable"], a["state"], a["tp_rank"], b["reachable"], b["state"], b["ready"]["pid"], bool(b["error"]))' "$T/s2.json")
expect_eq "status --json live+dead" "$got" "True ready 0 False UNREACHABLE $p1 True"

# a stopped (SIGSTOP) daemon does not answer: UNREACHABLE after the
# timeout; with no other answer, exit 4. A locked device without a ready
# file is STARTING.
p0=$(ready_pid "$RUN" host-0)
kill -STOP "$p0"
# (the holder under the lock says so with a file: the wait's event)
flock "$RUN/host-4.lock" sh -c 'touch "$0"; exec sleep 30' "$T/held4" & s4=$!; PIDS+=($s4)
"$WAITFOR" -p "$s4" -t 5 "$T/held4" || fail "the lock holder of host-4 did not start"
PIDS+=($(pgrep -P $s4))
out=$(ctl status --timeout 0.3); rc=$?
kill -CONT "$p0"
expect_eq "status with a stopped daemon" "$rc" 4
expect_has "stopped daemon row" "$out" "host-0               pp0/tp0    UNREACHABLE"
expect_has "stopped daemon why" "$out" "within 300 ms"
expect_has "starting row" "$out" "host-4               -          STARTING"
ctl status --device host-4 >/dev/null; rc=$?
expect_eq "status --device of a STARTING daemon" "$rc" 5
kill $(pgrep -P $s4) "$s4" 2>/dev/null; wait "$s4" 2>/dev/null
rm -f "$RUN/host-4.lock"

# clean removes the dead daemon's files and never the live one's
ctl clean >"$T/clean.out" 2>&1 || fail "clean failed: $(cat "$T/clean.out")"
for s in lock ready sock log; do
	[ -e "$RUN/host-1.$s" ] && fail "clean left the dead daemon's .$s"
	[ -e "$RUN/host-0.$s" ] || fail "clean removed the live daemon's .$s"
done
expect_has "clean" "$(cat "$T/clean.out")" "kept host-0"
# ... and leaves a record: status still shows the dead rank (DEAD, 4)
# until clean --forget
out=$(ctl status); rc=$?
expect_eq "status after clean" "$rc" 4
expect_has "status after clean" "$out" "host-1: DEAD: "
ctl clean --forget >/dev/null 2>&1 || fail "clean --forget"
out=$(ctl status); rc=$?
expect_eq "status after clean --forget" "$rc" 0
# the names clean and status print are accepted back by stop (round trip)
ctl stop --device host-77 >/dev/null 2>&1; rc=$?
expect_eq "stop --device host-77 (by file name, none running)" "$rc" 3

# the live one stopped: its ready file gone; a dead one's left by hand: 4
p0=$(ready_pid "$RUN" host-0)
printf 'pid=%s\nsocket=%s/host-7.sock\ndevice=host-7\nstate=ready\n' "$p1" "$RUN" >"$RUN/host-7.ready"
ctl stop --all >/dev/null 2>&1 || fail "stop --all"
alive "$p0" && fail "stop --all left pid $p0"
out=$(ctl status); rc=$?
expect_eq "status with only a dead daemon" "$rc" 4
ctl clean --forget >/dev/null 2>&1
out=$(ctl status); rc=$?
expect_eq "status after the last clean --forget" "$rc" 3

# stop signals only a pid that holds the lock: a ready file naming a live
# process that holds no lock, and one whose lock another process holds
sleep 60 & s1=$!; PIDS+=($s1)
printf 'pid=%s\nsocket=%s/host-8.sock\ndevice=host-8\nstate=ready\n' "$s1" "$RUN" >"$RUN/host-8.ready"
out=$(ctl stop --device host:8 2>&1); rc=$?
expect_eq "stop of an unlocked ready file" "$rc" 3
alive "$s1" || fail "stop signalled pid $s1, which holds no lock"
flock "$RUN/host-9.lock" sh -c 'touch "$0"; exec sleep 60' "$T/held9" & s2=$!; PIDS+=($s2)
"$WAITFOR" -p "$s2" -t 5 "$T/held9" || fail "the lock holder of host-9 did not start"
PIDS+=($(pgrep -P $s2))
printf 'pid=%s\nsocket=%s/host-9.sock\ndevice=host-9\nstate=ready\n' "$s1" "$RUN" >"$RUN/host-9.ready"
out=$(ctl stop --device host:9 2>&1); rc=$?
expect_eq "stop when another pid holds the lock" "$rc" 1
expect_has "stop when another pid holds the lock" "$out" "names pid $s1 but pid"
alive "$s1" || fail "stop signalled pid $s1, which does not hold the lock"
kill "$s1" "$s2" $(pgrep -P $s2) 2>/dev/null; wait 2>/dev/null
ctl clean --forget >/dev/null 2>&1

# a daemon that ignores SIGTERM is SIGKILLed after --timeout, files removed
FAKE_IGNORE_TERM=1 "$WCCTL" start --model "$T/model" --tp-size 1 --backend host --base-gpu-id 5 \
	--runtime-dir "$RUN" --wcd "$FAKE" >"$T/ign.out" 2>&1 || fail "start of the fake: $(cat "$T/ign.out")"
remember_pids "$T/ign.out"
pf=$(ready_pid "$RUN" host-5)
out=$(ctl stop --device host:5 --timeout 0.5 2>&1); rc=$?
expect_eq "stop with SIGKILL" "$rc" 0
expect_has "stop with SIGKILL" "$out" "did not stop within 0.5 s; sending SIGKILL"
expect_has "stop with SIGKILL" "$out" "stopped wcd pid $pf on device host-5 (SIGKILL)"
alive "$pf" && fail "pid $pf survived stop"
[ -e "$RUN/host-5.ready" ] && fail "the killed daemon's ready file is left"
[ -e "$RUN/host-5.log" ] || fail "stop removed the killed daemon's log"
ctl clean --forget >/dev/null 2>&1

# a daemon that dies of SIGTERM without cleaning up: stop says so and
# removes what it left (keeping the log)
FAKE_TERM_DIRTY=1 "$WCCTL" start --model "$T/model" --tp-size 1 --backend host --base-gpu-id 6 \
	--runtime-dir "$RUN" --wcd "$FAKE" >"$T/dirty.out" 2>&1 || fail "start of the fake: $(cat "$T/dirty.out")"
remember_pids "$T/dirty.out"
pf=$(ready_pid "$RUN" host-6)
out=$(ctl stop --device host:6 2>&1); rc=$?
expect_eq "stop of an unclean daemon" "$rc" 0
expect_has "stop of an unclean daemon" "$out" "wcd pid $pf on host-6 exited without removing its ready file"
[ -e "$RUN/host-6.ready" ] && fail "the unclean daemon's ready file is left"
[ -e "$RUN/host-6.sock" ] && fail "the unclean daemon's socket is left"
ctl clean --forget >/dev/null 2>&1

# --foreground with the real wcd: one rank SIGKILLed after all are ready
# is reported as signal 9 and the others are stopped, files removed
"$WCCTL" start --model "$T/model" --tp-size 2 --backend host --runtime-dir "$RUN" \
	--foreground >"$T/fg.out" 2>&1 &
wpid=$!
"$WAITFOR" -p "$wpid" -t 10 -g "are ready" "$T/fg.out"
remember_pids "$T/fg.out"
grep -q "are ready" "$T/fg.out" || { kill $wpid; fail "foreground start never became ready"; }
pk=$(ready_pid "$RUN" host-1)
kill -9 "$pk"
wait $wpid; rc=$?
expect_eq "foreground after SIGKILL" "$rc" 1
expect_has "foreground after SIGKILL" "$(cat "$T/fg.out")" "Weight cache daemon for pp_rank=0 tp_rank=1 (pid=$pk) was killed by signal 9 (SIGKILL)"
expect_gone "$T/fg.out"
expect_empty "$RUN"

# a real wcd that fails while starting: its code and its log's last lines
"$WCCTL" start --model "$T/no-model" --tp-size 2 --backend host --runtime-dir "$RUN" \
	>"$T/bad.out" 2>&1; rc=$?
remember_pids "$T/bad.out"
expect_eq "start on a missing model" "$rc" 1
expect_has "start on a missing model" "$(cat "$T/bad.out")" "exited prematurely with code 1"
expect_has "start on a missing model log" "$(cat "$T/bad.out")" "  | "
expect_gone "$T/bad.out"
ctl clean --forget >/dev/null 2>&1
expect_empty "$RUN"
echo ok
