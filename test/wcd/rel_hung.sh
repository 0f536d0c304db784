#!/usr/bin/env bash
# Header reads that never return (issue 15, item 4): wcd reads config.json,
# the index and the shard headers on a thread of its own, with a deadline
# (--read-timeout), while its loop keeps serving. The hung file system is a
# pipe-backed stand-in: WCD_TEST_STALL_DIR/WCD_TEST_STALL_FIFO make the
# header reads of one directory block on a FIFO nobody writes.
#  - an UPDATE to the stalled directory: STATUS answers meanwhile (state
#    "updating"); after --read-timeout the update fails, saying why, and the
#    state is "ready" again, not "updating" forever;
#  - SIGTERM during such an update ends the daemon at once (exit 0);
#  - SIGTERM while the start-up load is stalled ends it too.
# And the real thing that froze every client before: an UPDATE to a
# directory whose config.json is a FIFO is refused at once.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
e2e_init hung
cp -r "$MODEL" "$E2E_DIR/next"
"$BIN/wcgen" tiny --out "$E2E_DIR/next" --seed 3 --force >/dev/null 2>&1 || fail "wcgen next"
mkfifo "$E2E_DIR/stall"
export WCD_TEST_STALL_DIR=$E2E_DIR/next WCD_TEST_STALL_FIFO=$E2E_DIR/stall
e2e_start_wcd --read-timeout 3
W=(--device "$DEVICE" --runtime-dir "$RUNDIR")
# the state from STATUS (no python per call: this runs in a loop, under load)
state() {
	local j
	j=$("$BIN/wcctl" status "${W[@]}" --json --timeout 10) || return 1
	j=${j#*\"state\":}; j=${j#*\"}; echo "${j%%\"*}"
}

"$BIN/wcctl" update "${W[@]}" --model "$E2E_DIR/next" >"$E2E_DIR/up.out" 2>&1 &
up=$!
for ((i = 0; i < 3000; i++)); do
	s=$(state) || fail "STATUS did not answer during the stalled update"
	[ "$s" = updating ] && break
	kill -0 "$up" 2>/dev/null || break
	sleep 0.01
done
expect_eq "state during the stalled update" "$s" updating
wait "$up"; rc=$?
cat "$E2E_DIR/up.out"
expect_eq "stalled update: exit" "$rc" 1
expect_has "why" "$(cat "$E2E_DIR/up.out")" "did not finish within 3 s (--read-timeout)"
expect_eq "state after it" "$(state)" ready
"$BIN/wcattach" "${W[@]}" >/dev/null 2>&1 || fail "not serving after the failed update"

# SIGTERM in the middle of another stalled update
"$BIN/wcctl" update "${W[@]}" --model "$E2E_DIR/next" >/dev/null 2>&1 &
up=$!
for ((i = 0; i < 3000; i++)); do
	[ "$(state)" = updating ] && break
	kill -0 "$up" 2>/dev/null || fail "the second update ended before SIGTERM"
	sleep 0.01
done
kill -TERM "$WCD_PID"
t0=${EPOCHREALTIME/./}
timeout 10 tail --pid="$WCD_PID" -f /dev/null || fail "wcd did not exit within 10 s of SIGTERM during a stalled update"
wait "$WCD_PID"; rc=$?
echo "exited $rc after $(( (${EPOCHREALTIME/./} - t0) / 1000 )) ms"
expect_eq "wcd exit after SIGTERM" "$rc" 0
wait "$up"

# SIGTERM while the start-up load is stalled (no --read-timeout: 60 s)
"$BIN/wcd" --model "$E2E_DIR/next" --device "host:hung2-$$" --runtime-dir "$RUNDIR" \
	>"$E2E_DIR/w2.log" 2>&1 &
w2=$!
WCD_PIDS+=("$w2")
"$WAITFOR" -p "$w2" -t 5 -g "owns device" "$E2E_DIR/w2.log"
kill -TERM "$w2"
timeout 10 tail --pid="$w2" -f /dev/null || fail "wcd did not exit within 10 s of SIGTERM during a stalled start"
wait "$w2"; echo "stalled start: exit $?"
unset WCD_TEST_STALL_DIR WCD_TEST_STALL_FIFO

# a FIFO config.json in the update's directory (real, no stand-in)
e2e_start_wcd
cp -r "$MODEL" "$E2E_DIR/fifo"
rm "$E2E_DIR/fifo/config.json"; mkfifo "$E2E_DIR/fifo/config.json"
out=$(timeout -k 2 20 "$BIN/wcctl" update "${W[@]}" --model "$E2E_DIR/fifo" 2>&1); rc=$?
[ "$rc" = 124 ] || [ "$rc" = 137 ] && fail "the update to a FIFO config.json hung"
expect_eq "FIFO update: exit" "$rc" 1
expect_has "FIFO refusal" "$out" "not a regular file (a FIFO)"
expect_eq "state after the FIFO update" "$(state)" ready
echo ok
