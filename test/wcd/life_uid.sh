#!/usr/bin/env bash
# SLEEP, WAKE and UPDATE are admin requests: an engine of another uid that
# the daemon serves (--allow-uid) may attach but not sleep, wake or update
# the daemon; the refusal names both uids. The client runs as uid 65534
# through setpriv; the socket is opened up (0666) so that the daemon's own
# check is what stops it.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
[ "$(id -u)" = 0 ] || skip "needs root to run a client under another uid"
command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"
setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null ||
	skip "setpriv cannot switch to uid 65534 here"
e2e_init lifeuid
setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$BIN/wcctl" ||
	skip "uid 65534 cannot execute $BIN/wcctl (a parent directory is closed)"
mkdir -m 0711 "$RUNDIR"
e2e_start_wcd --allow-uid 65534
chmod 0666 "$SOCK"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

out=$(as_nobody "$BIN/wcattach" --socket "$SOCK" 2>&1) || fail "uid 65534 not served: $out"
for cmd in "sleep --level 2" wake update; do
	# shellcheck disable=SC2086
	out=$(as_nobody "$BIN/wcctl" $cmd --socket "$SOCK" 2>&1) &&
		fail "uid 65534 could $cmd: $out"
	name=$(echo "${cmd%% *}" | tr a-z A-Z)
	expect_has "$cmd by uid 65534" "$out" "$name is only accepted from the daemon's own uid 0 (you are uid 65534)"
done
out=$("$BIN/wcctl" sleep --level 2 --socket "$SOCK" 2>&1) || fail "root could not sleep: $out"
out=$("$BIN/wcctl" wake --socket "$SOCK" 2>&1) || fail "root could not wake: $out"
echo ok
