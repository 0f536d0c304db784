#!/usr/bin/env bash
# An update plans off the loop's thread (issue 26, item 4): a layout whose
# plan took minutes (a rule glob that backtracked) kept the serving daemon
# at 100% CPU through 'wcctl update', answering no client and deaf to
# SIGTERM. The long plan is a stand-in here: WCD_TEST_STALL_AT=plan makes
# the plan of one directory wait on a FIFO (the hook's open of the FIFO is
# the event that says the plan has begun).
#  - while the update's plan waits: PINGs are answered (wcbench rtt), STATUS
#    says "updating"; released, the update publishes version 2;
#  - SIGTERM while another update's plan waits ends the daemon (exit 0).
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
[ -x "$BIN/wcbench" ] && [ -x "$BIN/wcctl" ] || skip "wcbench or wcctl not built"
e2e_init plan
cp -r "$MODEL" "$E2E_DIR/next"
"$BIN/wcgen" tiny --out "$E2E_DIR/next" --seed 3 --force >/dev/null 2>&1 || fail "wcgen next"
mkfifo "$E2E_DIR/stall"
export WCD_TEST_STALL_DIR=$E2E_DIR/next WCD_TEST_STALL_FIFO=$E2E_DIR/stall WCD_TEST_STALL_AT=plan
e2e_start_wcd
W=(--device "$DEVICE" --runtime-dir "$RUNDIR")

# holds the FIFO's writing end: says "planning" once the daemon's planner
# opened it, writes the byte that releases the plan when told to
hold_plan() {
	coproc HOLD { exec 3>"$E2E_DIR/stall"; echo planning; read -r _; echo x >&3; }
	# bash drops HOLD and HOLD_PID once the coprocess ends: copies
	HOLDER=$HOLD_PID
	exec {HR}<&"${HOLD[0]}" {HW}>&"${HOLD[1]}"
	local line
	read -r -t 60 line <&"$HR" || fail "the update's plan did not begin within 60 s"
	expect_eq "the plan waits" "$line" planning
}
release_plan() {
	echo go >&"$HW" 2>/dev/null
	exec {HR}<&- {HW}>&-
	wait "$HOLDER" 2>/dev/null
}

"$BIN/wcctl" update "${W[@]}" --model "$E2E_DIR/next" >"$E2E_DIR/up.out" 2>&1 &
up=$!
hold_plan
out=$(timeout 20 "$BIN/wcbench" rtt --socket "$SOCK" -n 20 2>&1); rc=$?
[ "$rc" = 124 ] && fail "PING got no reply within 20 s while an update was planning"
expect_eq "wcbench rtt while planning: exit" "$rc" 0
j=$(timeout 20 "$BIN/wcctl" status "${W[@]}" --json --timeout 10) || fail "STATUS did not answer while planning"
expect_has "state while planning" "$j" '"state": "updating"'
release_plan
wait "$up"; rc=$?
cat "$E2E_DIR/up.out"
expect_eq "the update after its plan: exit" "$rc" 0
expect_has "version 2 serves" "$(cat "$E2E_DIR/up.out")" "version 2"

# SIGTERM while another update's plan waits (its planner thread is left)
"$BIN/wcctl" update "${W[@]}" --model "$E2E_DIR/next" >/dev/null 2>&1 &
up=$!
hold_plan
kill -TERM "$WCD_PID"
timeout 20 tail --pid="$WCD_PID" -f /dev/null || fail "wcd did not exit within 20 s of SIGTERM during a plan"
wait "$WCD_PID"; rc=$?
expect_eq "wcd exit after SIGTERM during a plan" "$rc" 0
wait "$up"
release_plan
grep -q "stopped while planning" "$E2E_DIR/wcd.log" || { cat "$E2E_DIR/wcd.log"; fail "the log does not say the plan was given up"; }
echo ok
