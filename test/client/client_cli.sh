#!/usr/bin/env bash
# The client tools' usage and connection errors (no daemon needed):
# wcattach and wcctl manifest exit 2 on bad usage and 1 with the library's
# actionable message when there is no daemon.
. "$(dirname "$0")/../lib/lib.sh"
[ -x "$BIN/wcattach" ] || fail "$BIN/wcattach is not built"
d=$(tmpdir)
trap 'rm -rf "$d"' EXIT

out=$("$BIN/wcattach" 2>&1); rc=$?
expect_eq "wcattach without a device: exit" "$rc" 2
expect_has "wcattach without a device" "$out" "give --device D"

out=$("$BIN/wcattach" --device host --hold soon 2>&1); rc=$?
expect_eq "wcattach --hold soon: exit" "$rc" 2
expect_has "wcattach --hold soon" "$out" "'soon' is not a number"

out=$("$BIN/wcattach" --device host --tp-size -1 2>&1); rc=$?
expect_eq "wcattach --tp-size -1: exit" "$rc" 2

out=$("$BIN/wcattach" --help); rc=$?
expect_eq "wcattach --help: exit" "$rc" 0
expect_has "wcattach --help" "$out" "--verify"

out=$("$BIN/wcattach" --device host:nobody --runtime-dir "$d" 2>&1); rc=$?
expect_eq "wcattach with no daemon: exit" "$rc" 1
expect_has "wcattach with no daemon" "$out" "no wcache daemon for host:nobody"
expect_has "wcattach with no daemon" "$out" "$d/host-nobody.sock"
expect_has "wcattach with no daemon" "$out" "wcctl start"

out=$("$BIN/wcattach" --json --device host:nobody --runtime-dir "$d" 2>/dev/null); rc=$?
expect_eq "wcattach --json with no daemon: exit" "$rc" 1
expect_has "wcattach --json error" "$out" '"event":"error","step":"connect","code":2'

out=$("$BIN/wcattach" --device 'host:no/slash' --runtime-dir "$d" 2>&1); rc=$?
expect_eq "wcattach bad device name: exit" "$rc" 1
expect_has "wcattach bad device name" "$out" "no/slash"

out=$("$BIN/wcctl" manifest 2>&1); rc=$?
expect_eq "wcctl manifest without a device: exit" "$rc" 2
expect_has "wcctl manifest without a device" "$out" "give --device D"
out=$("$BIN/wcctl" manifest --device host:nobody --runtime-dir "$d" 2>&1); rc=$?
expect_eq "wcctl manifest with no daemon: exit" "$rc" 1
expect_has "wcctl manifest with no daemon" "$out" "no wcache daemon"
echo ok
