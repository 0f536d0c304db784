#!/usr/bin/env bash
# --all for every wcctl command where acting on every rank makes sense
# (issue 26): status, sleep, wake, update, restart, verify, metrics, stop.
# "wcctl update --device host:0 --model NEW --all" was taken as
# --allow-layout-change (a prefix) and published a checkpoint of other
# shapes; now --all is its own option: with --device a usage error, alone
# it updates every rank, and each rank refuses the other shapes. Each
# command under --all runs as with --device NAME for every daemon with a
# ready file; text lines start with the device, --json prints one object
# a line; no daemon at all is exit 3.
. "$(dirname "$0")/../lib/lib.sh"
T=$(tmpdir)
export WCACHE_SOCKET_TEMPLATE=$T/run/{device}
trap '"$BIN/wcctl" stop --all >/dev/null 2>&1; rm -rf "$T"' EXIT
ready() { cat "$T/run/host-$1.ready"; }

"$BIN/wcgen" llama-gqa --out "$T/m" >/dev/null 2>&1 || fail "wcgen llama-gqa"
"$BIN/wcgen" tiny --out "$T/other" >/dev/null 2>&1 || fail "wcgen tiny"
"$BIN/wcgen" llama-gqa --seed 7 --out "$T/m2" >/dev/null 2>&1 || fail "wcgen llama-gqa v2"

# no daemon yet: --all says so (exit 3) in every command
for c in "sleep --level 1" wake update verify restart; do
	out=$("$BIN/wcctl" $c --all 2>&1); rc=$?
	expect_eq "$c --all without daemons (output: $out)" "$rc" 3
	expect_has "$c --all without daemons" "$out" "no wcache daemon found in $T/run"
done

out=$("$BIN/wcctl" start --model "$T/m" --tp-size 2 --backend host --timeout 60 2>&1) ||
	fail "wcctl start: $out"

# the issue's command: not --allow-layout-change, a usage error
out=$("$BIN/wcctl" update --device host:0 --model "$T/other" --all 2>&1); rc=$?
expect_eq "update --device host:0 --model OTHER --all (output: $out)" "$rc" 2
expect_has "update --device --all" "$out" "give --device D, --socket PATH or --all, not two of them"
expect_has "host-0 still serves version 1" "$(ready 0)" "version=1"

# update --all: every rank refuses the other shapes, naming itself
out=$("$BIN/wcctl" update --all --model "$T/other" 2>&1); rc=$?
expect_eq "update --all --model OTHER" "$rc" 1
expect_has "update --all --model OTHER" "$out" "wcctl update: host-0: "
expect_has "update --all --model OTHER" "$out" "wcctl update: host-1: "
expect_has "update --all --model OTHER" "$out" "49 tensor(s) differ in name, dtype or shape"
for r in 0 1; do expect_has "host-$r after the refused update" "$(ready $r)" "version=1"; done

# sleep, wake, update of the same shapes, verify: every rank
out=$("$BIN/wcctl" sleep --level 1 --all 2>&1) || fail "sleep --level 1 --all: $out"
expect_has "sleep --all" "$out" "host-0: sleeping (level 1)"
expect_has "sleep --all" "$out" "host-1: sleeping (level 1)"
for r in 0 1; do expect_has "host-$r after sleep --all" "$(ready $r)" "state=sleeping"; done
out=$("$BIN/wcctl" wake --all --json 2>&1) || fail "wake --all --json: $out"
python3 - "$out" <<'PY' || fail "wake --all --json is not one object a line per rank: $out"
import json, sys
objs = [json.loads(l) for l in sys.argv[1].splitlines()]
assert [o["device"] for o in objs] == ["host-0", "host-1"], objs
assert all(o["ok"] and o["command"] == "wake" for o in objs), objs
PY
out=$("$BIN/wcctl" update --all --model "$T/m2" 2>&1) || fail "update --all --model M2: $out"
expect_has "update --all" "$out" "host-0: updated: version 2"
expect_has "update --all" "$out" "host-1: updated: version 2"
for r in 0 1; do expect_has "host-$r after update --all" "$(ready $r)" "version=2"; done
out=$("$BIN/wcctl" verify --all 2>&1) || fail "verify --all: $out"
expect_has "verify --all" "$out" "tensors of host-0 (version 2)"
expect_has "verify --all" "$out" "tensors of host-1 (version 2)"

# status --all is status; with --device a usage error
out=$("$BIN/wcctl" status --all 2>&1) || fail "status --all: $out"
expect_eq "status --all rows" "$(grep -c '^host-[01] ' <<<"$out")" 2
out=$("$BIN/wcctl" status --all --device host-0 2>&1); rc=$?
expect_eq "status --all --device" "$rc" 2

# restart --all: both handed over to new pids
old0=$(sed -n 's/^pid=//p' "$T/run/host-0.ready"); old1=$(sed -n 's/^pid=//p' "$T/run/host-1.ready")
out=$("$BIN/wcctl" restart --all 2>&1) || fail "restart --all: $out"
expect_has "restart --all" "$out" "device host-0: wcd pid $old0 handed over"
expect_has "restart --all" "$out" "device host-1: wcd pid $old1 handed over"
out=$("$BIN/wcctl" restart --all --device host-0 2>&1); rc=$?
expect_eq "restart --all --device" "$rc" 2

# metrics --all and stop --all (they had it): every rank
out=$("$BIN/wcctl" metrics --all 2>&1) || fail "metrics --all: $out"
expect_has "metrics --all" "$out" 'device="host-0"'
expect_has "metrics --all" "$out" 'device="host-1"'
out=$("$BIN/wcctl" stop --all 2>&1) || fail "stop --all: $out"
expect_has "stop --all" "$out" "stopped wcd pid"
out=$("$BIN/wcctl" wake --all 2>&1); rc=$?
expect_eq "wake --all after stop --all" "$rc" 3
echo ok
