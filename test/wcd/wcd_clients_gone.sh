#!/usr/bin/env bash
# Clients that come and go (wcctl status, as a liveness probe runs it) are
# all freed: a client whose process exit is seen after its disconnect
# (pidfd and EOF in one batch) was kept counted forever, so every stop
# waited out the 1 s flush for it and, after 1024 probes, the daemon refused
# every connection. 8 probes, then SIGTERM: wcd must say 0 clients.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/wcd.bash"
wcd_init clgone
[ -x "$BIN/wcctl" ] || skip "wcctl is not built"
"$BIN/wcctl" start --model "$W/model" --tp-size 1 --backend host --runtime-dir "$RT" \
	>"$W/start.out" 2>&1 || { cat "$W/start.out"; fail "wcctl start"; }
p=$(sed -n 's/^pid=//p' "$RT/host-0.ready")
WCD_PIDS+=("$p")
for i in $(seq 8); do
	"$BIN/wcctl" status --runtime-dir "$RT" >"$W/status.out" 2>&1 ||
		{ cat "$W/status.out"; fail "status $i"; }
done
kill -TERM "$p"
# (not our child: its pidfd tells when it is a zombie or reaped)
"$WAITFOR" -t 20 -x "$p" || fail "wcd (pid $p) did not exit within 20 s of SIGTERM"
log=$(cat "$RT/host-0.log")
expect_has "stop" "$log" "exiting cleanly"
expect_has "clients left at stop" "$log" "telling 0 client(s)"
echo ok
