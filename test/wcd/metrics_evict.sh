#!/usr/bin/env bash
# wcd --metrics-listen under one peer holding 200 trickling connections
# (issue 26, defect 5): each sends half a request and waits. A scrape
# after them is answered, from the same address too: a connection past the
# 16-slot limit, or past the 8 of one peer, takes the slot of the oldest
# one that has not sent a whole request (of its own peer at the peer's
# limit), counted as evicted. Then the peer reopens every connection the
# daemon closes, and each of 40 scrapes from another address (127.0.0.2)
# is answered: the peer's reconnects evict only its own. Before,
# connections past the limit were closed at accept, so the peer's 16 held
# every slot and the scrapes were refused.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
command -v python3 >/dev/null || skip "python3 is not installed"
e2e_init mevict
e2e_start_wcd --metrics-listen 127.0.0.1:0
port=$(sed -n 's/^metrics_listen=127.0.0.1://p' "$READY")
[ -n "$port" ] || fail "no metrics_listen in the ready file: $(cat "$READY")"
python3 - "$port" <<'PY' || fail "scrapes under 200 trickling connections"
import selectors, socket, sys, threading
port = int(sys.argv[1])
HALF = b"GET /metrics HTTP/1.1\r\nHost: x\r\n"   # no blank line: never whole
PEER, OTHER = "127.0.0.1", "127.0.0.2"

def connect(src):
    return socket.create_connection(("127.0.0.1", port), timeout=10,
                                    source_address=(src, 0))

def scrape(src):
    s = connect(src)
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

def answered(r):
    return r.startswith(b"HTTP/1.1 200 OK") and b"wcache_state" in r

def counter(r, result):
    for l in r.split(b"\n"):
        if l.startswith(b"wcache_metrics_scrapes_total") and (b"result=\"" + result + b"\"") in l:
            return int(l.split()[-1])
    raise AssertionError("no %s counter" % result)

# 1. 200 half-sent requests held, then a scrape from the same address
held = []
for _ in range(200):
    s = connect(PEER)
    s.send(HALF)
    held.append(s)
r = scrape(PEER)
assert answered(r), "a scrape after 200 trickling connections of its address: %r" % r[:80]
assert counter(r, b"evicted") >= 192, counter(r, b"evicted")   # 200 - 8 at least
assert answered(scrape(OTHER)), "a scrape from another address"
for s in held:
    s.close()

# 2. the peer keeps its 200: every one the daemon closes is opened again
stop = threading.Event()
ready = threading.Event()
opened = [0]

def trickler():
    sel = selectors.DefaultSelector()
    def open_one():
        s = connect(PEER)
        s.setblocking(False)
        try:
            s.send(HALF)
        except OSError:
            pass
        sel.register(s, selectors.EVENT_READ)
        opened[0] += 1
    for _ in range(200):
        open_one()
    ready.set()
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
                open_one()
    for key in list(sel.get_map().values()):
        key.fileobj.close()

t = threading.Thread(target=trickler)
t.start()
ready.wait(60)
bad = []
for i in range(40):
    r = scrape(OTHER)
    if not answered(r):
        bad.append(r[:80])
stop.set()
t.join()
print("%d of 40 scrapes answered; the peer opened %d connections" % (40 - len(bad), opened[0]))
assert not bad, "%d of 40 scrapes failed: %r" % (len(bad), bad)
PY
# the engines' side is untouched
"$BIN/wcattach" --socket "$SOCK" >/dev/null || fail "attach after the trickling peer"
echo ok
