# Helpers for the end-to-end shell tests (test/e2e_*.sh): a temp dir, a
# wcgen model, a wcd on a host device of its own, cleanup on exit.
# Source after lib.sh (not a test itself: no .sh suffix). Sets E2E_DIR,
# MODEL, RUNDIR, DEVICE, DEVNAME, SOCK, READY, WCD_PID.
e2e_init() {
	local name=$1
	[ -x "$BIN/wcd" ] && [ -x "$BIN/wcgen" ] && [ -x "$BIN/wcattach" ] ||
		skip "wcd, wcgen or wcattach is not built"
	E2E_DIR=$(mktemp -d "/tmp/wct-$name.XXXXXX")
	chmod 0711 "$E2E_DIR"
	WCD_PIDS=()
	trap e2e_cleanup EXIT
	trap 'exit 1' INT TERM
	MODEL=$E2E_DIR/model
	RUNDIR=$E2E_DIR/run
	DEVNAME="$name-$$"
	DEVICE="host:$DEVNAME"
	SOCK=$RUNDIR/host-$DEVNAME.sock
	READY=$RUNDIR/host-$DEVNAME.ready
	"$BIN/wcgen" tiny --out "$MODEL" >"$E2E_DIR/wcgen.log" 2>&1 ||
		{ cat "$E2E_DIR/wcgen.log"; fail "wcgen tiny failed"; }
}

e2e_cleanup() {
	local p
	for p in "${WCD_PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	rm -rf "$E2E_DIR"
}

# e2e_start_wcd [extra wcd args...]: starts wcd in the background and waits
# up to 30 s for its ready file.
e2e_start_wcd() {
	rm -f "$READY"
	"$BIN/wcd" --model "$MODEL" --device "$DEVICE" --runtime-dir "$RUNDIR" "$@" \
		>>"$E2E_DIR/wcd.log" 2>&1 &
	WCD_PID=$!
	WCD_PIDS+=("$WCD_PID")
	# the ready file's creation or wcd's end (test/lib/bin/wc_waitfor)
	local rc=0
	"$WAITFOR" -p "$WCD_PID" -t 30 "$READY" || rc=$?
	case $rc in
	0) return 0 ;;
	1) cat "$E2E_DIR/wcd.log"; fail "wcd exited before it was ready" ;;
	*) cat "$E2E_DIR/wcd.log"; fail "wcd not ready after 30 s" ;;
	esac
}
