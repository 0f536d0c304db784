#!/usr/bin/env bash
# wcd ownership of a device: a second wcd is refused with the owner's pid
# and how to stop it or take over; --force takes over a live daemon; a
# SIGKILLed daemon's stale .sock/.ready are cleaned by the next start;
# SIGTERM leaves no .sock/.ready and exits 0.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/wcd.bash"
wcd_init own
dev=host:own
sock=$RT/host-own.sock ready=$RT/host-own.ready
args=(--model "$W/model" --device "$dev" --runtime-dir "$RT")

wcd_bg "$W/a.log" "${args[@]}"; a=$LAST
wait_file "$ready" "$a" || { cat "$W/a.log"; fail "first wcd not ready"; }
[ "$(stat -c %a "$RT")" = 700 ] || fail "runtime dir mode $(stat -c %a "$RT"), want 700"
[ "$(stat -c %a "$sock")" = 600 ] || fail "socket mode $(stat -c %a "$sock"), want 600"
expect_has "ready file" "$(cat "$ready")" "pid=$a"

# A second daemon on the same device is refused, naming the owner.
out=$("$BIN/wcd" "${args[@]}" 2>&1); rc=$?
expect_eq "second wcd exit" "$rc" 1
expect_has "refusal" "$out" "already served by wcd pid $a"
expect_has "refusal" "$out" "$ready"
expect_has "refusal" "$out" "wcctl stop --device $dev --runtime-dir $RT"
expect_has "refusal" "$out" "--force"
kill -0 "$a" || fail "the refused start hurt the owner"
[ -S "$sock" ] || fail "the refused start removed the owner's socket"

# Another device in the same directory is independent.
wcd_bg "$W/o.log" --model "$W/model" --device host:other --runtime-dir "$RT"; o=$LAST
wait_file "$RT/host-other.ready" "$o" || { cat "$W/o.log"; fail "other device not ready"; }

# --force: the old owner gets SIGTERM (exits 0), the new one takes over.
wcd_bg "$W/b.log" "${args[@]}" --force; b=$LAST
wait_exit "$a"
expect_eq "forced-out owner exit" "$RC" 0
"$WAITFOR" -p "$b" -t 20 -e "^pid=$b$" "$ready"
[ $? = 1 ] && { cat "$W/b.log"; fail "forcing wcd died"; }
expect_has "ready after --force" "$(cat "$ready")" "pid=$b"
expect_has "force log" "$(cat "$W/b.log")" "--force: sending SIGTERM to the owner of device host-own, pid $a"
expect_has "old owner log" "$(cat "$W/a.log")" "exiting cleanly"

# SIGKILL leaves stale files; the next start removes them and serves.
kill -KILL "$b"; wait "$b" 2>/dev/null
[ -e "$sock" ] && [ -e "$ready" ] || fail "SIGKILL should leave stale files behind"
wcd_bg "$W/c.log" "${args[@]}"; c=$LAST
"$WAITFOR" -p "$c" -t 20 -e "^pid=$c$" "$ready"
[ $? = 1 ] && { cat "$W/c.log"; fail "wcd after SIGKILL died"; }
expect_has "stale cleanup" "$(cat "$W/c.log")" "removed stale $sock"
expect_has "stale cleanup" "$(cat "$W/c.log")" "removed stale $ready"

# SIGTERM: clean exit, nothing published left.
kill -TERM "$c"; wait_exit "$c"
expect_eq "SIGTERM exit" "$RC" 0
[ ! -e "$sock" ] || fail "SIGTERM left $sock"
[ ! -e "$ready" ] || fail "SIGTERM left $ready"
kill -INT "$o"; wait_exit "$o"
expect_eq "SIGINT exit" "$RC" 0
[ ! -e "$RT/host-other.sock" ] && [ ! -e "$RT/host-other.ready" ] || fail "SIGINT left files"
echo "ok"
