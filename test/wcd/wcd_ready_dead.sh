#!/usr/bin/env bash
# A daemon serving a device again removes wcctl clean's record of the one
# that died on it (<device>.dead) before its ready file appears: whoever
# waits for that file (wcctl start, then wcctl status) reads the device's
# state as soon as it does. The record used to go just after the ready
# file, and wcctl_clean_dead.sh failed now and then in CI ("host-1 serves
# again and its .dead record stayed"). WCD_TEST_READY_GATE holds the
# daemon right after its ready file, so the order is seen every time.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
e2e_init readydead
mkdir -p "$RUNDIR" && chmod 0700 "$RUNDIR"
dead=$RUNDIR/host-$DEVNAME.dead
printf 'pid=1\ncleaned_at=1\n' >"$dead"
export WCD_TEST_READY_GATE=$E2E_DIR/gate
e2e_start_wcd
"$WAITFOR" -p "$WCD_PID" -t 30 "$E2E_DIR/gate.held" || fail "wcd did not reach the gate after its ready file"
[ -e "$dead" ] && fail "the ready file is there and $dead is still there"
touch "$E2E_DIR/gate"
"$WAITFOR" -t 30 -d "$E2E_DIR/gate.held" || fail "wcd did not pass the gate"
"$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" --model "$MODEL" --verify \
	>"$E2E_DIR/att.out" 2>&1 || { cat "$E2E_DIR/att.out"; fail "no attach after the gate"; }
echo ok
