#!/usr/bin/env bash
# wcctl sleep | wake | update against a real wcd (host backend): usage
# errors exit 2 with a hint; refusals exit 1 with the daemon's message
# (sleep with an engine attached names its pid; update while sleeping; wake
# while awake; a relative --model is resolved); successes print the
# daemon's one-line answer, and the ready file follows (state, version).
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
e2e_init lifewcctl
e2e_start_wcd
W=("--device" "$DEVICE" "--runtime-dir" "$RUNDIR")

# usage
out=$("$BIN/wcctl" sleep "${W[@]}" 2>&1); rc=$?
expect_eq "sleep without --level" "$rc" 2
expect_has "sleep without --level" "$out" "give --level 1"
out=$("$BIN/wcctl" sleep --level 3 "${W[@]}" 2>&1); rc=$?
expect_eq "sleep --level 3" "$rc" 2
expect_has "sleep --level 3" "$out" "--level takes 1 or 2"
out=$("$BIN/wcctl" wake 2>&1); rc=$?
expect_eq "wake without a device" "$rc" 2
expect_has "wake without a device" "$out" "give --device D"
out=$("$BIN/wcctl" wake --model x "${W[@]}" 2>&1); rc=$?
expect_eq "wake --model" "$rc" 2
out=$("$BIN/wcctl" update --help); rc=$?
expect_eq "update --help" "$rc" 0
expect_has "update --help" "$out" "usage: wcctl update [--model DIR]"
"$BIN/wcctl" --help | grep -q "^  sleep " || fail "wcctl --help does not list sleep"

# no daemon on another device
out=$("$BIN/wcctl" wake --device host:nobody-$$ --runtime-dir "$RUNDIR" 2>&1); rc=$?
expect_eq "wake without a daemon" "$rc" 1
expect_has "wake without a daemon" "$out" "wcctl wake:"

# wake while awake
out=$("$BIN/wcctl" wake "${W[@]}" 2>&1); rc=$?
expect_eq "wake while awake" "$rc" 1
expect_has "wake while awake" "$out" "the daemon is not sleeping (state ready)"

# sleep with an engine attached: refused, naming its pid
"$BIN/wcattach" "${W[@]}" --hold 20 >"$E2E_DIR/hold.log" 2>&1 &
HOLD=$!
"$WAITFOR" -p "$HOLD" -t 5 -g attached "$E2E_DIR/hold.log"
grep -q attached "$E2E_DIR/hold.log" || fail "wcattach --hold did not attach: $(cat "$E2E_DIR/hold.log")"
out=$("$BIN/wcctl" sleep --level 1 "${W[@]}" 2>&1); rc=$?
expect_eq "sleep with an engine" "$rc" 1
expect_has "sleep with an engine" "$out" "sleep of model weights is not supported while 1 engine(s) are attached (pids: $HOLD): the weights are shared zero-copy, so freeing them would corrupt every attached engine. Detach them first."
kill "$HOLD"; wait "$HOLD" 2>/dev/null
for _ in $(seq 500); do
	"$BIN/wcctl" sleep --level 2 "${W[@]}" >"$E2E_DIR/sleep.out" 2>&1 && break
	sleep 0.01
done
expect_has "sleep 2 after the engine left" "$(cat "$E2E_DIR/sleep.out")" "sleeping (level 2)"
expect_has "ready file while asleep" "$(cat "$READY")" "state=sleeping"

# update while sleeping at level 2 from the same files: nothing new to
# load, refused, still asleep
out=$("$BIN/wcctl" update "${W[@]}" 2>&1); rc=$?
expect_eq "update while sleeping" "$rc" 1
expect_has "update while sleeping" "$out" "already serves (same checkpoint digest)"
expect_has "still asleep" "$(cat "$READY")" "state=sleeping"
out=$("$BIN/wcctl" wake "${W[@]}" 2>&1) || fail "wake: $out"
expect_has "wake" "$out" "awake: version 1 reloaded"
expect_has "ready file after wake" "$(cat "$READY")" "state=ready"

# update with a relative --model
"$BIN/wcgen" tiny --seed 5 --out "$E2E_DIR/v2" >/dev/null 2>&1 || fail "wcgen v2"
out=$(cd "$E2E_DIR" && "$BIN/wcctl" update --model v2 "${W[@]}" 2>&1) || fail "update: $out"
expect_has "update" "$out" "updated: version 2 ($E2E_DIR/v2) serves"
expect_has "ready file after update" "$(cat "$READY")" "version=2"
out=$("$BIN/wcctl" update --model "$E2E_DIR/none" "${W[@]}" 2>&1); rc=$?
expect_eq "update to a missing dir" "$rc" 1
expect_has "update to a missing dir" "$out" "cannot resolve the model directory $E2E_DIR/none"
out=$("$BIN/wcattach" "${W[@]}" --model "$E2E_DIR/v2" --verify 2>&1) || fail "attach v2: $out"
expect_has "attach v2" "$out" "version 2"

# a sleep/update loop (issue 17): at level 1 an update is refused and the
# refusal names the commands; at level 2 it wakes the daemon straight
# from the new checkpoint, in one load
"$BIN/wcgen" tiny --seed 6 --out "$E2E_DIR/v3" >/dev/null 2>&1 || fail "wcgen v3"
out=$("$BIN/wcctl" sleep --level 1 "${W[@]}" 2>&1) || fail "sleep 1: $out"
out=$("$BIN/wcctl" update --model "$E2E_DIR/v3" "${W[@]}" 2>&1); rc=$?
expect_eq "update at level 1" "$rc" 1
expect_has "update at level 1" "$out" "sleeps at level 1: it keeps version 2's host copy to wake from. Run 'wcctl wake --device"
expect_has "update at level 1" "$out" "then 'wcctl update --device"
expect_has "update at level 1" "$out" "--model $E2E_DIR/v3'"
out=$("$BIN/wcctl" wake "${W[@]}" 2>&1) || fail "wake: $out"
out=$("$BIN/wcctl" sleep --level 2 "${W[@]}" 2>&1) || fail "sleep 2: $out"
reads=$(grep -c "phase read" "$E2E_DIR/wcd.log")
out=$("$BIN/wcctl" update --model "$E2E_DIR/v3" "${W[@]}" 2>&1); rc=$?
expect_eq "update at level 2" "$rc" 0
expect_has "update at level 2" "$out" "awake and updated: version 3 ($E2E_DIR/v3) loaded straight from its checkpoint while asleep at level 2"
expect_eq "one load" "$(grep -c "phase read" "$E2E_DIR/wcd.log")" "$((reads + 1))"
expect_has "ready file after" "$(cat "$READY")" "state=ready"
expect_has "ready file after" "$(cat "$READY")" "version=3"
out=$("$BIN/wcattach" "${W[@]}" --model "$E2E_DIR/v3" --verify 2>&1) || fail "attach v3: $out"
expect_has "attach v3" "$out" "all hashes match"
echo ok
