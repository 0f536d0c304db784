#!/usr/bin/env bash
# A client of another uid is refused by the daemon itself (SO_PEERCRED), not
# just by file permissions: the socket is opened up (0666) here on purpose so
# that the connect succeeds and the daemon's check is what stops the client.
# The client runs as uid 65534 through setpriv.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
[ "$(id -u)" = 0 ] || skip "needs root to run a client under another uid"
command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"
setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null ||
	skip "setpriv cannot switch to uid 65534 here"
e2e_init uid
setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$BIN/wcattach" ||
	skip "uid 65534 cannot execute $BIN/wcattach (a parent directory is closed)"
mkdir -m 0711 "$RUNDIR"
e2e_start_wcd
chmod 0666 "$SOCK"

out=$(setpriv --reuid=65534 --regid=65534 --clear-groups \
	"$BIN/wcattach" --socket "$SOCK" 2>&1) && fail "uid 65534 was served: $out"
echo "$out"
expect_has "refusal" "$out" "refused"
expect_has "refusal names the uid" "$out" "65534"
[[ $out == *"ermission denied"* && $out != *"refused"* ]] &&
	fail "the refusal came from the file system, not the daemon: $out"

# the daemon's own uid is still served
out=$("$BIN/wcattach" --socket "$SOCK" 2>&1) || fail "root refused: $out"
expect_has "root attach" "$out" "attached"

# with --allow-uid the other uid is served
kill "$WCD_PID"; wait "$WCD_PID" 2>/dev/null
e2e_start_wcd --allow-uid 65534
chmod 0666 "$SOCK"
out=$(setpriv --reuid=65534 --regid=65534 --clear-groups \
	"$BIN/wcattach" --socket "$SOCK" --verify 2>&1) || fail "--allow-uid 65534 still refused: $out"
expect_has "allowed uid" "$out" "all hashes match"
echo ok
