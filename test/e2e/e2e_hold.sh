#!/usr/bin/env bash
# wcattach --hold as an engine would run: attached to a real wcd, it reports
# a new version's notice (wcctl update) and moves to it (--follow, with the
# identity computed from the new files), the daemon's shutdown notice on
# SIGTERM and the daemon's exit (pidfd), and after a SIGKILL of the daemon
# its mapping still verifies.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
e2e_init hold

# wait_for FILE TEXT: up to 10 s for TEXT to appear in FILE
wait_for() {
	"$WAITFOR" -t 10 -g "$2" "$1" && return 0
	cat "$1"; fail "'$2' did not appear in $1 within 10 s"
}

# 1. an update: a new-version notice; then SIGTERM: a shutdown notice and
#    the exit
e2e_start_wcd
"$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" --json --verify \
	--model "$MODEL" --follow --hold 30 >"$E2E_DIR/a.out" 2>"$E2E_DIR/a.err" &
att=$!
wait_for "$E2E_DIR/a.out" '"event":"attached"'
expect_has "verified at attach" "$(cat "$E2E_DIR/a.out")" '"verified":true'
# new weights in place (another seed), as a trainer would write them
"$BIN/wcgen" tiny --out "$MODEL" --force --seed 5 >/dev/null 2>&1 || fail "wcgen --force"
"$BIN/wcctl" update --device "$DEVICE" --runtime-dir "$RUNDIR" >"$E2E_DIR/u.out" 2>&1 ||
	{ cat "$E2E_DIR/u.out"; fail "wcctl update failed"; }
wait_for "$E2E_DIR/a.out" '"event":"notice","kind":2,"version":2'
# --follow: the engine's identity now comes from the new files; it moves over
wait_for "$E2E_DIR/a.out" '"event":"reattached","version":2,"verified":true'
kill -TERM "$WCD_PID"
wait "$WCD_PID"; rc=$?
expect_eq "wcd exit status on SIGTERM" "$rc" 0
wait_for "$E2E_DIR/a.out" '"event":"daemon-exit"'
out=$(cat "$E2E_DIR/a.out")
expect_has "shutdown notice" "$out" '"event":"notice","kind":1'
expect_has "still verifies after the daemon exited" "$out" '"event":"daemon-exit","daemon_pid":'"$WCD_PID"',"verified":true'
kill "$att"; wait "$att" 2>/dev/null
[ -e "$SOCK" ] && fail "wcd left its socket behind after SIGTERM"

# 2. SIGKILL: no notice, the pidfd still fires and the bytes still verify
e2e_start_wcd
"$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" --verify \
	--hold 30 >"$E2E_DIR/b.out" 2>&1 &
att=$!
wait_for "$E2E_DIR/b.out" "all hashes match"
kill -KILL "$WCD_PID"; wait "$WCD_PID" 2>/dev/null
wait_for "$E2E_DIR/b.out" "exited; the mapping stays valid and still verifies"
kill "$att"; wait "$att" 2>/dev/null
echo ok
