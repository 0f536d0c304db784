#!/usr/bin/env bash
# sd_notify (Type=notify units in tools/dist/systemd): wcd sends READY=1
# once it serves (after its ready file), with a STATUS line; wcctl start
# --foreground sends READY=1 once every rank is ready and STOPPING=1 on
# SIGTERM, and its ranks send nothing (NOTIFY_SOCKET is taken out of their
# environment); an abstract socket (@name) works; a bad NOTIFY_SOCKET is
# logged and wcd serves anyway. A python listener stands in for systemd and
# records each datagram with its sender's pid (SCM_CREDENTIALS).
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/wcd.bash"
wcd_init notify
[ -x "$BIN/wcctl" ] || skip "wcctl is not built"
mkdir -m 0700 "$RT"

# listen ADDR OUT: records "pid<TAB>message" lines in OUT (pid in $LISTENER)
listen() {
	/usr/bin/python3 - "$1" "$2" <<'PY' &
import os, socket, struct, sys
addr, out = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind("\0" + addr[1:] if addr.startswith("@") else addr)
open(out + ".up", "w").close()
s.settimeout(60)
while True:
    msg, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(12))
    pid = -1
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            pid = struct.unpack("iII", data[:12])[0]
    with open(out, "a") as f:
        f.write("%d\t%s\n" % (pid, msg.decode().replace("\n", "|")))
PY
	LISTENER=$!
	WCD_PIDS+=("$LISTENER")
	wait_file "$2.up" "$LISTENER" || fail "the listener did not start"
}
# waitfor FILE TEXT: waits until FILE has TEXT (20 s at most)
waitfor() {
	"$WAITFOR" -t 20 -g "$2" "$1" && return 0
	fail "no '$2' in $1: $(cat "$1" 2>/dev/null)"
}

# 1. wcd, a path socket
listen "$W/notify.sock" "$W/n1"
NOTIFY_SOCKET=$W/notify.sock wcd_bg "$W/a.log" --model "$W/model" --device host:nt --runtime-dir "$RT"
a=$LAST
waitfor "$W/n1" "READY=1"
[ -e "$RT/host-nt.ready" ] || fail "READY=1 came before the ready file"
n=$(sed -n 's/^tensors=//p' "$RT/host-nt.ready")
expect_eq "wcd's message" "$(cat "$W/n1")" "$a	READY=1|STATUS=serving $n tensors on host-nt"
kill -TERM "$a"; wait_exit "$a"; expect_eq "wcd exit" "$RC" 0
kill "$LISTENER"

# 2. wcctl start --foreground, an abstract socket: one READY=1 from wcctl
# (none from the ranks), STOPPING=1 on SIGTERM
listen "@wcache-notify-$$" "$W/n2"
NOTIFY_SOCKET=@wcache-notify-$$ "$BIN/wcctl" start --model "$W/model" --tp-size 2 --backend host \
	--runtime-dir "$RT" --foreground >"$W/fg.out" 2>&1 &
f=$!
WCD_PIDS+=("$f")
waitfor "$W/n2" "READY=1"
grep -q "are ready" "$W/fg.out" || fail "READY=1 before wcctl said all are ready: $(cat "$W/fg.out")"
for i in 0 1; do
	p=$(sed -n 's/^pid=//p' "$RT/host-$i.ready")
	WCD_PIDS+=("$p")
	tr '\0' '\n' <"/proc/$p/environ" | grep -q '^NOTIFY_SOCKET=' &&
		fail "rank $i (pid $p) inherited NOTIFY_SOCKET"
done
kill -TERM "$f"; wait_exit "$f"; expect_eq "wcctl --foreground exit" "$RC" 0
waitfor "$W/n2" "STOPPING=1"
expect_eq "wcctl's messages" "$(cat "$W/n2")" "$f	READY=1|STATUS=all weight cache daemons are ready
$f	STOPPING=1"
kill "$LISTENER"

# 3. a NOTIFY_SOCKET that is no socket: logged, and wcd serves anyway
NOTIFY_SOCKET=$W/none wcd_bg "$W/c.log" --model "$W/model" --device host:nt --runtime-dir "$RT"
c=$LAST
wait_file "$RT/host-nt.ready" "$c" || { cat "$W/c.log"; fail "wcd did not serve with a bad NOTIFY_SOCKET"; }
"$WAITFOR" -p "$c" -t 20 -g "cannot tell systemd" "$W/c.log"
expect_has "bad socket" "$(cat "$W/c.log")" "cannot tell systemd that wcd is ready (\$NOTIFY_SOCKET): No such file or directory"
kill -TERM "$c"; wait_exit "$c"; expect_eq "wcd exit" "$RC" 0
echo ok
