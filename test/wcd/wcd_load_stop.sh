#!/usr/bin/env bash
# SIGTERM while the splice fill runs: the workers stop at their next
# claim, the load ends there (no read phase is logged), wcd says
# "stopped while loading" and exits 0 without writing its ready file. The test hook
# WCD_TEST_STALL_AT=fill holds the fill's workers before their first claim
# until the loop asks them to stop; its first worker writes a byte to
# WCD_TEST_STALL_FIFO first, so the signal is sent once the fill has begun.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/wcd.bash"
wcd_init loadstop
mkfifo "$W/stall"
WCD_TEST_STALL_AT=fill WCD_TEST_STALL_FIFO=$W/stall \
	wcd_bg "$W/wcd.log" --model "$W/model" --device host:stop --runtime-dir "$RT"
p=$LAST
timeout 30 head -c 1 "$W/stall" >/dev/null || { cat "$W/wcd.log"; fail "the fill did not begin"; }
kill -TERM "$p"; wait_exit "$p"
log=$(cat "$W/wcd.log")
expect_eq "exit after SIGTERM during the fill (a clean stop)" "$RC" 0
expect_has "the reason" "$log" "stopped while loading"
case $log in *"phase read"*) fail "the fill ran to its end after SIGTERM: $log" ;; esac
[ -e "$RT/host-stop.ready" ] && fail "wcd wrote its ready file for a load it stopped"
echo ok
