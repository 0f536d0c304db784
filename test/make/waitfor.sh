#!/usr/bin/env bash
# The tests' waits on events (test/lib/t_wait.c through wc_waitfor): a file
# that appears, goes, comes to hold a text or a line that matches; a
# process that ends; each seen when it happens. A watched process ending
# first, a timeout and a usage error each have their exit status. (The
# events come from this script; `sleep infinity` is the process to watch.)
. "$(dirname "$0")/../lib/lib.sh"
W=$WAITFOR
[ -x "$W" ] || fail "$W is not built (make first)"
d=$(tmpdir)
kids=()
trap 'for k in "${kids[@]}"; do kill "$k" 2>/dev/null; done; rm -rf "$d"' EXIT

# bg CMD...: runs CMD in the background, its pid in $BG
bg() { "$@" & BG=$!; kids+=("$BG"); }
# expect_rc WHAT PID WANT: PID (a child) exits with WANT
expect_rc() { wait "$2"; expect_eq "$1" "$?" "$3"; }

bg "$W" -t 10 "$d/sub/f"
mkdir "$d/sub"; touch "$d/sub/f"
expect_rc "a file made in a directory made after the wait began" $BG 0

: >"$d/log"
bg "$W" -t 10 -g "the needle" "$d/log"
echo "hay" >>"$d/log"
echo "a line with the needle in it" >>"$d/log"
expect_rc "a text appended" $BG 0
"$W" -t 0.2 -g "no such text" "$d/log"
expect_eq "a text that never comes: the timeout" "$?" 2
bg "$W" -t 10 -e '^\[tp1\] .*ready$' "$d/log"
echo "[tp0] ready" >>"$d/log"
echo "[tp1] wcd: ready" >>"$d/log"
expect_rc "a line that matches a regular expression" $BG 0
# "aneedle" at bytes 65532..65538: across the first 64 KiB read
{ head -c 65533 /dev/zero | tr '\0' a; echo "needle"; } >"$d/big"
"$W" -t 1 -g "aneedle" "$d/big"
expect_eq "a text across two reads" "$?" 0

bg "$W" -t 10 -d "$d/log"
rm "$d/log"
expect_rc "a file removed" $BG 0

bg sleep infinity; s=$BG
"$W" -t 0.2 -x "$s"
expect_eq "a process that lives on: the timeout" "$?" 2
bg "$W" -t 10 -p "$s" "$d/never"; w=$BG
bg "$W" -t 10 -x "$s"; x=$BG
kill "$s"
expect_rc "the watched process ended first" $w 1
expect_rc "a process ended" $x 0
wait "$s" 2>/dev/null
"$W" -x "$s"
expect_eq "a process gone already" "$?" 0

"$W" -g a -d "$d/x" 2>/dev/null
expect_eq "-g and -d" "$?" 3
"$W" -e '(' "$d/x" 2>/dev/null
expect_eq "a bad regular expression" "$?" 3
"$W" 2>/dev/null
expect_eq "no FILE" "$?" 3
echo "ok"
