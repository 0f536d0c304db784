#!/usr/bin/env bash
# The soak (bench/host/soak, issue 15) in CI, short: 24 clients for 15 s against
# a host-backend wcd, a client SIGKILLed and replaced every 200 ms and the
# daemon handed over (wcctl restart) every 4 s. Passes when no request of
# any kind failed, every handover succeeded, at least two ran and the
# daemon's descriptors at the end are not more than at the start plus the
# clients' (no leak). The full soak (minutes, 256 clients) is bench/host/soak.
. "$(dirname "$0")/../lib/lib.sh"
soak=$WC_TOP/$BUILD/bench/soak
[ -x "$soak" ] || skip "$soak is not built"
d=$(tmpdir)
trap '"$BIN/wcctl" stop --all --runtime-dir "$d/run" >/dev/null 2>&1; rm -rf "$d"' EXIT
"$BIN/wcgen" tiny --out "$d/model" >/dev/null || fail "wcgen"
"$BIN/wcctl" start --model "$d/model" --tp-size 1 --backend host --runtime-dir "$d/run" \
	--timeout 60 >/dev/null 2>"$d/start.err" || fail "wcctl start: $(cat "$d/start.err")"
"$soak" --socket "$d/run/host-0.sock" --device host:0 --runtime-dir "$d/run" \
	--clients 24 --seconds 15 --kill-ms 200 --restart-s 4 --wcctl "$BIN/wcctl" \
	>"$d/out.json" 2>"$d/soak.err" || fail "soak exited $?: $(tail -5 "$d/soak.err")"
python3 - "$d/out.json" <<'PY' || fail "soak: $(cat "$d/out.json" | head -c 600)"
import json, sys
r = json.load(open(sys.argv[1]))
errs = {k: v["errors"] for k, v in r["requests"].items() if v["errors"]}
total = sum(v["count"] for v in r["requests"].values())
print("soak: %d requests, %d kills, %d handovers, errors %s, fds %d -> %d"
      % (total, r["kills"], r["restarts"], errs or 0, r["samples"][0]["fds"], r["samples"][-1]["fds"]))
assert not errs, errs
assert r["restart_failures"] == 0 and r["restarts"] >= 2, r
assert r["kills"] >= 10 and total > 1000, r
assert r["samples"][-1]["fds"] <= r["samples"][0]["fds"] + r["clients"] + 8, r["samples"]
PY
