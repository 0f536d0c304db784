# Helpers for the daemon's shell tests (test/wcd_*.sh); not a test itself.
# Source after lib.sh. wcd_init NAME makes a temp dir ($W), a wcgen tiny
# model ($W/model) and cleans up every wcd it started on exit.
wcd_init() {
	[ -x "$BIN/wcd" ] && [ -x "$BIN/wcgen" ] || skip "wcd or wcgen is not built"
	W=$(mktemp -d "/tmp/wct-$1.XXXXXX")
	RT=$W/rt
	WCD_PIDS=()
	trap wcd_cleanup EXIT
	trap 'exit 1' INT TERM
	"$BIN/wcgen" tiny --out "$W/model" --shard-size 3MB >"$W/wcgen.log" 2>&1 ||
		{ cat "$W/wcgen.log"; fail "wcgen tiny failed"; }
}

wcd_cleanup() {
	local p
	for p in "${WCD_PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	rm -rf "$W"
}

# wcd_bg LOG ARGS...: starts wcd in the background (pid in $!... and LAST).
wcd_bg() {
	local log=$1; shift
	"$BIN/wcd" "$@" >"$log" 2>&1 &
	LAST=$!
	WCD_PIDS+=("$LAST")
}

# wait_file PATH PID: waits up to 20 s for PATH while PID lives: on the
# file's creation (inotify) or PID's end (its pidfd), test/lib/bin/wc_waitfor.
wait_file() {
	"$WAITFOR" -p "$2" -t 20 "$1"
}

# wait_exit PID: waits for PID (a child of this shell) to exit; its status
# in $RC. Bounded by run.sh's timeout of the test.
wait_exit() {
	wait "$1"
	RC=$?
}
