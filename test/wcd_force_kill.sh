#!/usr/bin/env bash
# wcd --force against an owner that ignores SIGTERM: after 10 s it gets
# SIGKILL and the new daemon takes the device over (takes about 10 s).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/wcd.bash"
wcd_init forcekill
mkdir -m 0700 "$RT"
lock=$RT/host-fk.lock
# A stubborn owner: holds the flock, names itself in the lock file, and
# ignores SIGTERM.
/usr/bin/python3 - "$lock" "$W/owner.ok" <<'PY' &
import fcntl, os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
f = open(sys.argv[1], "w")
fcntl.flock(f, fcntl.LOCK_EX)
f.write("%d\n" % os.getpid()); f.flush()
open(sys.argv[2], "w").close()
time.sleep(120)
PY
owner=$!
WCD_PIDS+=("$owner")
wait_file "$W/owner.ok" "$owner" || fail "the fake owner did not start"

out=$("$BIN/wcd" --model "$W/model" --device host:fk --runtime-dir "$RT" 2>&1)
expect_eq "without --force" "$?" 1
expect_has "refusal" "$out" "already served by wcd pid $owner"

start=$SECONDS
wcd_bg "$W/b.log" --model "$W/model" --device host:fk --runtime-dir "$RT" --force; b=$LAST
wait_file "$RT/host-fk.ready" "$b" || { cat "$W/b.log"; fail "--force did not take over"; }
wait_exit "$owner"
[ "$RC" -eq 137 ] || fail "the stubborn owner ended with status $RC, want 137 (SIGKILL)"
[ $((SECONDS - start)) -ge 9 ] || fail "SIGKILL came before the 10 s grace period"
log=$(cat "$W/b.log")
expect_has "log" "$log" "sending SIGTERM to the owner of device host-fk, pid $owner"
expect_has "log" "$log" "did not exit within 10 s; sending SIGKILL"
expect_has "ready" "$(cat "$RT/host-fk.ready")" "pid=$b"
kill -TERM "$b"; wait_exit "$b"; expect_eq "exit" "$RC" 0
echo ok
