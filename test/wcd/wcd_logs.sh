#!/usr/bin/env bash
# wcd's logs (issue 16): --log-format json lines that parse, with pid,
# device and a line's own fields (client_pid, lease, version); --log-file
# reopened on SIGHUP after a rename (logrotate without copytruncate; before,
# SIGHUP killed wcd silently); routine per-attach lines at debug, refusals
# at info; 10,000 malformed frames give a bounded number of lines and a
# "suppressed N" count.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
command -v python3 >/dev/null || skip "python3 is not installed"
e2e_init logs
LOG=$E2E_DIR/wcd.jsonl
e2e_start_wcd --log-format json --log-file "$LOG"
[ -s "$E2E_DIR/wcd.log" ] && fail "wcd wrote to stderr with --log-file: $(cat "$E2E_DIR/wcd.log")"

# an attach and a refusal; then rotate: rename, SIGHUP, more lines
"$BIN/wcattach" --socket "$SOCK" >/dev/null || fail "attach"
"$BIN/wcctl" wake --socket "$SOCK" >/dev/null 2>&1 && fail "wake while awake was accepted"
mv "$LOG" "$LOG.1"
kill -HUP "$WCD_PID"
"$WAITFOR" -p "$WCD_PID" -t 20 -e . "$LOG"
kill -0 "$WCD_PID" 2>/dev/null || fail "wcd died of SIGHUP"
[ -s "$LOG" ] || fail "no new log file after SIGHUP"
"$BIN/wcattach" --socket "$SOCK" >/dev/null || fail "attach after the rotation"
grep -q '"msg":"SIGHUP: reopened the log file"' "$LOG" || fail "the reopen is not in the new file: $(cat "$LOG")"
python3 - "$LOG.1" "$LOG" "$DEVNAME" "$WCD_PID" <<'PY' || fail "JSON lines"
import json, sys
old, new, dev, pid = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rows = []
for path in (old, new):
    for n, line in enumerate(open(path), 1):
        try:
            o = json.loads(line)
        except ValueError as e:
            sys.exit("%s:%d is not JSON (%s): %r" % (path, n, e, line))
        for k in ("ts", "level", "prog", "pid", "msg"):
            assert k in o, (path, n, k, line)
        assert o["pid"] == pid and o["prog"] == "wcd", line
        rows.append(o)
assert any(o.get("device") == "host-" + dev for o in rows), "no device field"
msgs = [o["msg"] for o in rows]
assert any(m.startswith("ready: 47 tensors") for m in msgs), msgs  # 39 + 8 views
# routine per-attach lines are debug: not written at the default info
assert not any("hello ok" in m or " lease " in m and "on version" in m for m in msgs), msgs
# a refusal stays at info, with the client's pid as a field
ref = [o for o in rows if "STATE error" in o["msg"] or "is not sleeping" in o["msg"]]
assert ref and ref[0]["level"] == "info" and ref[0].get("client_pid", 0) > 0, ref or msgs
print("%d JSON lines, rotation kept every one" % len(rows))
PY

# at --log-level debug the attach lines carry lease and version fields
kill -TERM "$WCD_PID"; wait "$WCD_PID" 2>/dev/null
DEVICE=host:$DEVNAME-d SOCK=$RUNDIR/host-$DEVNAME-d.sock READY=$RUNDIR/host-$DEVNAME-d.ready
e2e_start_wcd --log-format json --log-level debug --log-file "$E2E_DIR/debug.jsonl"
"$BIN/wcattach" --socket "$SOCK" >/dev/null || fail "attach (debug)"
python3 - "$E2E_DIR/debug.jsonl" <<'PY' || fail "debug fields"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
lease = [o for o in rows if o["level"] == "debug" and " lease " in o["msg"] and "on version" in o["msg"]]
assert lease and lease[0]["lease"] >= 1 and lease[0]["version"] == 1 and lease[0]["client_pid"] > 0, rows
PY

# 10,000 malformed frames, each on its own connection: a bounded log
kill -TERM "$WCD_PID"; wait "$WCD_PID" 2>/dev/null
DEVICE=host:$DEVNAME-m SOCK=$RUNDIR/host-$DEVNAME-m.sock READY=$RUNDIR/host-$DEVNAME-m.ready
: >"$E2E_DIR/wcd.log"
e2e_start_wcd
python3 - "$SOCK" <<'PY' || fail "sending malformed frames"
import socket, sys
for i in range(10000):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sys.argv[1])
    s.sendall(b"\xde\xad\xbe\xef" * 6)   # bad magic, a whole header's worth
    try:
        while s.recv(4096):
            pass
    except ConnectionResetError:
        pass
    s.close()
PY
kill -TERM "$WCD_PID"; wait "$WCD_PID"; rc=$?
expect_eq "wcd after 10,000 malformed frames" "$rc" 0
lines=$(wc -l <"$E2E_DIR/wcd.log")
mal=$(grep -c "MALFORMED error" "$E2E_DIR/wcd.log")
sup=$(grep -o "malformed frames: suppressed [0-9]* similar lines" "$E2E_DIR/wcd.log" |
	awk '{ s += $4 } END { print s + 0 }')
echo "10000 malformed frames: $lines log lines, $mal of them about a frame, $sup suppressed"
[ "$lines" -le 100 ] || fail "$lines log lines for 10,000 malformed frames: $(head -40 "$E2E_DIR/wcd.log")"
[ "$mal" -ge 1 ] && [ "$mal" -le 40 ] || fail "$mal lines about malformed frames"
expect_eq "logged + suppressed" "$((mal + sup))" 10000
