#!/usr/bin/env bash
# wcd --force against an owner that ignores SIGTERM: after --force-wait
# (0.5 s here; 10 s by default) it gets SIGKILL and the new daemon takes the
# device over. A bad --force-wait is a usage error.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/wcd.bash"
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

for bad in -1 abc 1x 3601; do
	out=$("$BIN/wcd" --model "$W/model" --device host:fk --runtime-dir "$RT" --force --force-wait "$bad" 2>&1)
	expect_eq "--force-wait $bad" "$?" 2
	expect_has "--force-wait $bad" "$out" "bad --force-wait '$bad' (seconds from 0 to 3600"
done
kill -0 "$owner" || fail "a refused start touched the owner"
expect_has "help" "$("$BIN/wcd" --help)" "--force-wait SECONDS"

start=${EPOCHREALTIME/./}
wcd_bg "$W/b.log" --model "$W/model" --device host:fk --runtime-dir "$RT" --force --force-wait 0.5; b=$LAST
wait_file "$RT/host-fk.ready" "$b" || { cat "$W/b.log"; fail "--force did not take over"; }
wait_exit "$owner"
[ "$RC" -eq 137 ] || fail "the stubborn owner ended with status $RC, want 137 (SIGKILL)"
ms=$(( (${EPOCHREALTIME/./} - start) / 1000 ))
[ "$ms" -ge 500 ] || fail "SIGKILL came after $ms ms, before the 0.5 s grace period"
log=$(cat "$W/b.log")
expect_has "log" "$log" "sending SIGTERM to the owner of device host-fk, pid $owner"
expect_has "log" "$log" "did not exit within 0.5 s; sending SIGKILL"
expect_has "ready" "$(cat "$RT/host-fk.ready")" "pid=$b"
kill -TERM "$b"; wait_exit "$b"; expect_eq "exit" "$RC" 0
echo ok
