#!/usr/bin/env bash
# wcd --metrics-listen unix:PATH (issue 26, defect 5): a socket another
# daemon serves on is left alone (the second wcd fails, naming the path,
# and the first stays reachable); a socket file nobody answers on (its
# daemon was killed) is replaced; a hot handover (wcctl restart) keeps the
# endpoint (the new daemon waits while the old one's listener answers, and
# the old one removes only its own socket file on its way out). Before, the
# second daemon unlinked the live socket and bound its own.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
command -v curl >/dev/null || skip "curl is not installed (make deps)"
e2e_init munix
MSOCK=$E2E_DIR/m.sock
scrape() {  # scrape OUT: GET /metrics over the unix socket
	curl -sS --max-time 10 --unix-socket "$MSOCK" -o "$1" http://wcd/metrics
}
val() {  # val FILE NAME: the value of the first sample of NAME
	awk -v k="$2" '$1 == k || index($1, k "{") == 1 { print $2; exit }' "$1"
}
e2e_start_wcd --metrics-listen "unix:$MSOCK"
scrape "$E2E_DIR/a" || fail "the first daemon's endpoint does not answer"
t_a=$(val "$E2E_DIR/a" wcache_start_time_seconds)

# a second daemon (another device) on the same path: refused, the first
# one's socket untouched
out=$(timeout 60 "$BIN/wcd" --model "$MODEL" --device "host:$DEVNAME-2" \
	--runtime-dir "$RUNDIR" --metrics-listen "unix:$MSOCK" 2>&1); rc=$?
expect_eq "second wcd on a live metrics socket: exit status" "$rc" 1
expect_has "second wcd on a live metrics socket" "$out" \
	"--metrics-listen 'unix:$MSOCK': another process serves on $MSOCK"
expect_has "second wcd on a live metrics socket: what to do" "$out" "give this daemon another path"
scrape "$E2E_DIR/a2" || fail "the first daemon's endpoint is gone after the second daemon's attempt"
expect_eq "the endpoint is still the first daemon's" "$(val "$E2E_DIR/a2" wcache_start_time_seconds)" "$t_a"

# a hot handover: the new daemon takes the path once the old one lets go,
# and the old one's exit leaves the new one's socket
old=$WCD_PID
"$BIN/wcctl" restart --device "$DEVICE" --runtime-dir "$RUNDIR" >"$E2E_DIR/restart.out" 2>&1 ||
	fail "wcctl restart: $(cat "$E2E_DIR/restart.out")"
new=$(sed -n 's/^pid=//p' "$READY")
WCD_PIDS+=("$new")
wait "$old"  # the old daemon is our child: its exit is the event
# the new daemon binds within 20 ms of the old one's close (its retry);
# give it that, then its endpoint must answer
for i in $(seq 250); do
	[ -S "$MSOCK" ] && scrape "$E2E_DIR/b" 2>/dev/null &&
		[ "$(val "$E2E_DIR/b" wcache_start_time_seconds)" != "$t_a" ] && break
	sleep 0.02
done
[ -S "$MSOCK" ] || fail "after the handover $MSOCK is gone (the old daemon removed the new one's socket): $(grep metrics "$RUNDIR"/*.log "$E2E_DIR/wcd.log" | tail -5)"
scrape "$E2E_DIR/b" || fail "after the handover the endpoint does not answer"
[ "$(val "$E2E_DIR/b" wcache_start_time_seconds)" != "$t_a" ] ||
	fail "after the handover the endpoint is still the old daemon's"

# a daemon killed leaves its socket file; the next one replaces it
kill -KILL "$new"
"$WAITFOR" -t 20 -x "$new"
[ -S "$MSOCK" ] || fail "the killed daemon left no socket file (the test needs one)"
scrape "$E2E_DIR/c" 2>/dev/null && fail "a killed daemon's endpoint answered"
e2e_start_wcd --force --metrics-listen "unix:$MSOCK"
scrape "$E2E_DIR/c" || fail "the stale socket file was not replaced: $(tail -3 "$E2E_DIR/wcd.log")"
grep -q '^wcache_state' "$E2E_DIR/c" || fail "no metrics from the new daemon: $(head -3 "$E2E_DIR/c")"
echo ok
