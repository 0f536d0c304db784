#!/usr/bin/env bash
# wcd --metrics-listen: GET /metrics scraped by a real HTTP client (curl)
# while engines attach, every scrape checked by promtool; the values follow
# what happened (attached clients, requests by type and result, a refusal,
# an identity mismatch, the attach histogram); malformed and slow HTTP
# clients are answered 4xx or cut off by the deadline, connections past the
# limit are rejected, and engines attach meanwhile; the unix: endpoint;
# wcctl metrics over the daemon's socket.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
command -v curl >/dev/null || skip "curl is not installed (make deps)"
command -v promtool >/dev/null || skip "promtool is not installed (Debian package prometheus: make deps)"
command -v python3 >/dev/null || skip "python3 is not installed"
e2e_init metrics
e2e_start_wcd --metrics-listen 127.0.0.1:0
port=$(grep -o 'http://127.0.0.1:[0-9]*/metrics' "$E2E_DIR/wcd.log" | head -1 | cut -d: -f3 | cut -d/ -f1)
[ -n "$port" ] || { cat "$E2E_DIR/wcd.log"; fail "wcd did not log its metrics address"; }
URL=http://127.0.0.1:$port/metrics
n=0
scrape() {  # scrape FILE: curl, then promtool on what came back
	n=$((n + 1))
	curl -sS --max-time 10 -D "$1.head" -o "$1" "$URL" || fail "curl $URL failed"
	grep -q '^HTTP/1.1 200 OK' "$1.head" || fail "scrape $n: $(head -1 "$1.head")"
	grep -qi '^Content-Type: text/plain; version=0.0.4' "$1.head" ||
		fail "scrape $n: wrong Content-Type: $(cat "$1.head")"
	promtool check metrics <"$1" >"$1.lint" 2>&1 ||
		fail "scrape $n: promtool check metrics: $(cat "$1.lint")"
}
# every sample's rank labels (device, rank, tp/pp/ep), left out by val
RANKL='device="[^"]*",rank="[^"]*",tp_rank="[^"]*",tp_size="[^"]*",pp_rank="[^"]*",pp_size="[^"]*",ep_rank="[^"]*",ep_size="[^"]*"'
val() {  # val FILE 'name{labels}': the sample's value (the rank's labels aside)
	awk -v k="$2" -v rl="$RANKL" '{ n = $1; sub(rl, "", n); sub(/\{,/, "{", n); sub(/\{\}/, "", n) } n == k { print $2 }' "$1"
}

scrape "$E2E_DIR/m0"
expect_eq "state ready" "$(val "$E2E_DIR/m0" 'wcache_state{state="ready"}')" 1
expect_eq "tensors" "$(val "$E2E_DIR/m0" wcache_tensors)" 47  # 39 + qkv_proj and gate_up_proj views of 4 layers
expect_eq "version" "$(val "$E2E_DIR/m0" wcache_model_version)" 1
hb=$(val "$E2E_DIR/m0" 'wcache_resident_bytes{memory="host"}')
[ "$hb" -ge 9998848 ] && [ "$hb" -lt 11000000 ] || fail "host bytes: $hb (the pools hold 9998848 bytes of tensors)"
expect_eq "device bytes (host backend)" "$(val "$E2E_DIR/m0" 'wcache_resident_bytes{memory="device"}')" 0
grep -q '^wcache_build_info{device="host-'"$DEVNAME"'",rank="0",tp_rank="0",tp_size="1",pp_rank="0",pp_size="1",ep_rank="0",ep_size="1",version="[0-9.]*",wire_protocol="2",backend="host"} 1$' "$E2E_DIR/m0" ||
	fail "no build info: $(grep build_info "$E2E_DIR/m0")"

# three engines hold leases; more attach and detach while we scrape
for i in 1 2 3; do
	"$BIN/wcattach" --socket "$SOCK" --hold 60 >"$E2E_DIR/hold$i.log" 2>&1 &
	WCD_PIDS+=($!)
done
( for i in $(seq 20); do "$BIN/wcattach" --socket "$SOCK" >/dev/null || exit 1; done ) &
churn=$!
for i in $(seq 10); do scrape "$E2E_DIR/m$i"; done
wait "$churn" || fail "an engine could not attach while we scraped"
for i in $(seq 100); do
	scrape "$E2E_DIR/m"
	[ "$(val "$E2E_DIR/m" 'wcache_clients{state="attached"}')" = 3 ] && break
	sleep 0.1
done
expect_eq "attached clients" "$(val "$E2E_DIR/m" 'wcache_clients{state="attached"}')" 3
expect_eq "leases" "$(val "$E2E_DIR/m" 'wcache_leases{version="1"}')" 3
expect_eq "attach ok" "$(val "$E2E_DIR/m" 'wcache_requests_total{type="attach",result="ok"}')" 23
expect_eq "attach histogram count" "$(val "$E2E_DIR/m" wcache_attach_duration_seconds_count)" 23
expect_eq "attach histogram +Inf" "$(val "$E2E_DIR/m" 'wcache_attach_duration_seconds_bucket{le="+Inf"}')" 23
served=$(val "$E2E_DIR/m" 'wcache_metrics_scrapes_total{result="served"}')
[ "$served" -ge 11 ] || fail "served scrapes: $served (the one being answered is not counted yet)"

# a refusal (sleep while leases are held) and an identity mismatch
"$BIN/wcctl" sleep --level 2 --socket "$SOCK" >/dev/null 2>&1 && fail "sleep with leases held was accepted"
"$BIN/wcgen" tiny --seed 3 --out "$E2E_DIR/other" >/dev/null 2>&1 || fail "wcgen other"
out=$("$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" --model "$E2E_DIR/other" 2>&1) && fail "a mismatching engine attached"
expect_has "mismatching engine" "$out" "identity mismatch"
scrape "$E2E_DIR/m"
expect_eq "busy refusal" "$(val "$E2E_DIR/m" 'wcache_refusals_total{reason="busy"}')" 1
expect_eq "sleep error" "$(val "$E2E_DIR/m" 'wcache_requests_total{type="sleep",result="error"}')" 1
expect_eq "mismatches" "$(val "$E2E_DIR/m" wcache_identity_mismatches_total)" 1
expect_eq "mismatch refusal" "$(val "$E2E_DIR/m" 'wcache_refusals_total{reason="mismatch"}')" 1

# wcctl metrics: the same families over the daemon's socket
"$BIN/wcctl" metrics --device "host-$DEVNAME" --runtime-dir "$RUNDIR" >"$E2E_DIR/ctl" ||
	fail "wcctl metrics --device"
promtool check metrics <"$E2E_DIR/ctl" >/dev/null 2>&1 || fail "wcctl metrics output fails promtool"
expect_eq "wcctl metrics" "$(val "$E2E_DIR/ctl" wcache_identity_mismatches_total)" 1
out=$("$BIN/wcctl" metrics --all --runtime-dir "$RUNDIR") || fail "wcctl metrics --all"
expect_has "wcctl metrics --all" "$out" "wcache_state{device=\"host-$DEVNAME\","

# HTTP that is not a scrape: answered and closed; HEAD has no body
expect_eq "404" "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/")" 404
expect_eq "405" "$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$URL")" 405
expect_eq "POST with a body: 413" "$(curl -s -o /dev/null -w '%{http_code}' -X POST --data x "$URL")" 413
expect_eq "HEAD" "$(curl -s -I -o /dev/null -w '%{http_code} %{size_download}' "$URL")" "200 0"
python3 - "$port" <<'PY' || fail "raw HTTP clients"
import socket, sys, time
port = int(sys.argv[1])
def talk(data, wait=5.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    s.sendall(data)
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    s.close()
    return out
def status(r):
    return r.split(b"\r\n", 1)[0].decode()
assert status(talk(b"\x16\x03\x01\x00\xa5\x01\x00")) == "HTTP/1.1 400 Bad Request", "binary"
assert status(talk(b"GET /metrics HTTP/2.0\r\n\r\n")) == "HTTP/1.1 505 HTTP Version Not Supported"
assert status(talk(b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"a" * 5000 + b"\r\n\r\n")) == \
    "HTTP/1.1 431 Request Header Fields Too Large"
assert status(talk(b"GET /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")) == "HTTP/1.1 413 Content Too Large"
# a request in bytes one at a time still works
s = socket.create_connection(("127.0.0.1", port), timeout=5)
for ch in b"GET /metrics HTTP/1.0\r\n\r\n":
    s.send(bytes([ch]))
r = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    r += b
assert status(r) == "HTTP/1.1 200 OK" and b"wcache_state" in r, "byte-wise request"
s.close()
# 20 silent clients: 8 slots for one peer, the 12 oldest evicted for the
# later ones; all cut off (evicted, or by the 2 s deadline) without a byte
# of answer
socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(20)]
for s in socks:
    s.send(b"GET /metr")
t0 = time.monotonic()
closed = 0
for s in socks:
    try:
        got = s.recv(1)
    except ConnectionResetError:   # evicted, our bytes unread
        got = b""
    closed += got == b""
took = time.monotonic() - t0
assert closed == 20, closed
assert took < 8, took
print("raw HTTP ok; silent clients cut off after %.2f s" % took)
PY
scrape "$E2E_DIR/m"
r=$(val "$E2E_DIR/m" 'wcache_metrics_scrapes_total{result="rejected"}')
v=$(val "$E2E_DIR/m" 'wcache_metrics_scrapes_total{result="evicted"}')
t=$(val "$E2E_DIR/m" 'wcache_metrics_scrapes_total{result="timeout"}')
e=$(val "$E2E_DIR/m" 'wcache_metrics_scrapes_total{result="error"}')
# 8 slots for one peer: 12 of the 20 evicted (none rejected: none of the
# peer's was answering); every other one cut off by the deadline (a slot
# still draining the byte-wise client's close may make it 13 evicted)
[ $((v + r)) -ge 12 ] && [ $((v + r)) -le 13 ] || fail "evicted $v + rejected $r past 8 connections of one peer"
[ $((v + r + t)) -ge 20 ] || fail "evicted $v + rejected $r + cut off $t < the 20 silent clients"
[ "$e" -ge 6 ] || fail "error answers: $e"
# the engines kept their leases through all of it
expect_eq "still attached" "$(val "$E2E_DIR/m" 'wcache_clients{state="attached"}')" 3
"$BIN/wcattach" --socket "$SOCK" >/dev/null || fail "attach after the HTTP abuse"

# a hot handover (wcctl restart) keeps the endpoint: the new daemon gets
# the address from the ready file (port 0 resolved) and serves it once the
# old one has let go
expect_eq "ready file names the bound port" "$(sed -n 's/^metrics_listen=//p' "$READY")" "127.0.0.1:$port"
t_old=$(val "$E2E_DIR/m" wcache_start_time_seconds)
"$BIN/wcctl" restart --device "$DEVICE" --runtime-dir "$RUNDIR" >"$E2E_DIR/restart.out" 2>&1 ||
	fail "wcctl restart: $(cat "$E2E_DIR/restart.out")"
WCD_PIDS+=($(sed -n 's/^pid=//p' "$READY"))
for i in $(seq 250); do
	if curl -s --max-time 2 -o "$E2E_DIR/mr" "$URL" && [ "$(val "$E2E_DIR/mr" wcache_start_time_seconds)" != "$t_old" ]; then
		break
	fi
	sleep 0.02
done
t_new=$(val "$E2E_DIR/mr" wcache_start_time_seconds)
[ -n "$t_new" ] && [ "$t_new" != "$t_old" ] || fail "after the handover the endpoint is not the new daemon's ($t_old -> $t_new): $(grep metrics "$RUNDIR"/*.log "$E2E_DIR/wcd.log" | tail -5)"
promtool check metrics <"$E2E_DIR/mr" >/dev/null 2>&1 || fail "the new daemon's metrics fail promtool"
expect_eq "engines kept across the handover" "$(val "$E2E_DIR/mr" 'wcache_clients{state="attached"}')" 3

# a unix: endpoint, on a second daemon
DEVICE2=host:$DEVNAME-u
"$BIN/wcd" --model "$MODEL" --device "$DEVICE2" --runtime-dir "$RUNDIR" \
	--metrics-listen "unix:$E2E_DIR/m.sock" >"$E2E_DIR/wcd2.log" 2>&1 &
WCD_PIDS+=($!)
"$WAITFOR" -p $! -t 15 "$RUNDIR/host-$DEVNAME-u.ready" ||
	{ cat "$E2E_DIR/wcd2.log"; fail "the second wcd (unix: metrics) was not ready"; }
curl -sS --unix-socket "$E2E_DIR/m.sock" -o "$E2E_DIR/mu" http://wcd/metrics || fail "curl over unix:"
promtool check metrics <"$E2E_DIR/mu" >/dev/null 2>&1 || fail "unix: scrape fails promtool"
expect_eq "unix: state" "$(val "$E2E_DIR/mu" 'wcache_state{state="ready"}')" 1
out=$("$BIN/wcd" --model "$MODEL" --device host:x --runtime-dir "$RUNDIR" --metrics-listen nonsense 2>&1); rc=$?
expect_eq "bad --metrics-listen" "$rc" 1
expect_has "bad --metrics-listen" "$out" "is not host:port"
echo "$n scrapes, all checked by promtool"
