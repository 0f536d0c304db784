#!/usr/bin/env bash
# wcd --metrics-listen under one peer holding 200 trickling connections
# (issue 26, defect 5): each sends half a request and waits; whenever the
# daemon closes one, the peer opens it again. Every scrape made meanwhile
# is answered: a connection past the 16-slot limit takes the slot of the
# oldest one that has not sent a whole request (counted as evicted). Before,
# connections past the limit were closed at accept, so the peer's 16 held
# every slot and the scrapes were refused.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/e2e_lib.bash"
command -v python3 >/dev/null || skip "python3 is not installed"
e2e_init mevict
e2e_start_wcd --metrics-listen 127.0.0.1:0
port=$(sed -n 's/^metrics_listen=127.0.0.1://p' "$READY")
[ -n "$port" ] || fail "no metrics_listen in the ready file: $(cat "$READY")"
python3 - "$port" <<'PY' || fail "scrapes under 200 trickling connections"
import selectors, socket, sys, threading
port = int(sys.argv[1])
HALF = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"   # no blank line: never whole
stop = threading.Event()
opened = [0]
held = threading.Event()

def trickler():
    sel = selectors.DefaultSelector()
    def open_one():
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        try:
            s.send(HALF)
        except OSError:
            pass
        sel.register(s, selectors.EVENT_READ)
        opened[0] += 1
    for _ in range(200):
        open_one()
    held.set()
    while not stop.is_set():
        for key, _ in sel.select(timeout=0.2):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if data:
                continue
            sel.unregister(s)
            s.close()
            if not stop.is_set():
                open_one()   # the peer keeps its 200
    for key in list(sel.get_map().values()):
        key.fileobj.close()

def scrape():
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    out = b""
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:
            break
        if not b:
            break
        out += b
    s.close()
    return out

t = threading.Thread(target=trickler)
t.start()
held.wait(60)
ok = 0
last = b""
for i in range(40):
    r = scrape()
    if r.startswith(b"HTTP/1.1 200 OK") and b"wcache_state" in r:
        ok += 1
        last = r
stop.set()
t.join()
print("%d of 40 scrapes answered; the peer opened %d connections" % (ok, opened[0]))
assert ok == 40, "%d of 40 scrapes failed" % (40 - ok)
ev = [l for l in last.split(b"\n") if l.startswith(b"wcache_metrics_scrapes_total") and b'result="evicted"' in l]
assert ev and int(ev[0].split()[-1]) >= 184, ev   # 200 - 16 at least
PY
# the engines' side is untouched
"$BIN/wcattach" --socket "$SOCK" >/dev/null || fail "attach after the trickling peer"
echo ok
