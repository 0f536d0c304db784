#!/usr/bin/env bash
# CLI conventions (issue 16) with real daemons: --json on start, stop,
# sleep, wake and update (the outcome as one object, failures too); device
# names round-trip (host-N, as status prints it, accepted by every command);
# --timeout in seconds with decimals; wcctl start names an unwritable
# runtime directory as the cause; --foreground copies the ranks' log lines
# to stderr prefixed by rank; --ep-size/--ep-rank are passed to the ranks.
source "$(dirname "$0")/../lib/lib.sh"
source "$(dirname "$0")/../lib/wcctl_lib.bash"
[ -x "$BIN/wcd" ] && [ -x "$BIN/wcgen" ] || skip "wcd or wcgen not built"
command -v python3 >/dev/null || skip "python3 is needed to check JSON"
"$BIN/wcgen" tiny --out "$T/model" >/dev/null 2>&1 || fail "wcgen tiny failed"
ctl() { "$WCCTL" "$1" --runtime-dir "$RUN" "${@:2}"; }
# jget JSON EXPR: evaluates EXPR over d = the parsed object
jget() { python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"; }

# start --json: one object on stdout, the log lines stay on stderr
out=$(ctl start --model "$T/model" --tp-size 2 --backend host --timeout 60.5 --json 2>"$T/start.err"); rc=$?
remember_pids "$T/start.err"
expect_eq "start --json" "$rc" 0
expect_eq "start --json" "$(jget "$out" 'd["ok"], d["ready"], d["exit"], [r["device"] for r in d["ranks"]], all(r["pid"] > 0 and r["ready"] for r in d["ranks"])')" \
	"(True, 2, 0, ['host:0', 'host:1'], True)"

# every command takes back the name status prints (host-1)
name=$(ctl status | awk 'NR == 3 {print $1}')
expect_eq "status's second device" "$name" "host-1"
ctl status --device "$name" >/dev/null || fail "status --device $name"
ctl manifest --device "$name" >/dev/null || fail "manifest --device $name"
"$BIN/wcattach" --device "$name" --runtime-dir "$RUN" >/dev/null || fail "wcattach --device $name"

# sleep / wake / update --json, by that name; a refusal is an object too
out=$(ctl wake --device "$name" --json 2>/dev/null); rc=$?
expect_eq "wake while awake --json" "$rc" 1
expect_eq "wake while awake --json" "$(jget "$out" 'd["command"], d["ok"], bool(d["error"])')" "('wake', False, True)"
out=$(ctl sleep --level 2 --device "$name" --timeout 30 --json); rc=$?
expect_eq "sleep --json" "$rc" 0
expect_eq "sleep --json" "$(jget "$out" 'd["command"], d["ok"], d["level"], d["bytes"] > 0')" "('sleep', True, 2, True)"
out=$(ctl update --device "$name" --json 2>/dev/null); rc=$?
expect_eq "update while asleep --json" "$rc" 1
expect_has "update while asleep --json" "$(jget "$out" 'd["error"]')" "already serves (same checkpoint digest)"
out=$(ctl wake --device "$name" --timeout 30.5 --json); rc=$?
expect_eq "wake --json" "$rc" 0
expect_eq "wake --json" "$(jget "$out" 'd["ok"], d["level"], d["bytes"] > 0')" "(True, 2, True)"
"$BIN/wcgen" tiny --seed 7 --out "$T/model2" >/dev/null 2>&1 || fail "wcgen tiny --seed 7"
out=$(ctl update --device "$name" --model "$T/model2" --json); rc=$?; echo "$out"
expect_eq "update --json" "$rc" 0
expect_eq "update --json" "$(jget "$out" 'd["ok"], d["version"]')" "(True, 2)"
out=$(ctl update --device host:1 --timeout 1e9 2>&1); rc=$?
expect_eq "update --timeout 1e9" "$rc" 2
expect_has "update --timeout 1e9" "$out" "takes seconds"

# stop --json by the file name; then nothing runs: exit 3, still an object
out=$(ctl stop --device host-0 --timeout 5.5 --json 2>/dev/null); rc=$?
expect_eq "stop --json" "$rc" 0
expect_eq "stop --json" "$(jget "$out" 'd["ok"], [(s["device"], s["killed"]) for s in d["stopped"]]')" "(True, [('host-0', False)])"
out=$(ctl stop --all --json 2>/dev/null); rc=$?
expect_eq "stop --all --json" "$rc" 0
expect_eq "stop --all --json" "$(jget "$out" '[s["device"] for s in d["stopped"]]')" "['host-1']"
out=$(ctl stop --all --json 2>/dev/null); rc=$?
expect_eq "stop --all --json with none" "$rc" 3
expect_eq "stop --all --json with none" "$(jget "$out" 'd["ok"], d["stopped"], d["exit"]')" "(False, [], 3)"

# a failed start --json: the object says which rank and why (exit 1)
out=$(ctl start --model "$T/nomodel" --tp-size 1 --backend host --timeout 30 --json 2>"$T/bad.err"); rc=$?
remember_pids "$T/bad.err"
expect_eq "failed start --json" "$rc" 1
expect_eq "failed start --json" "$(jget "$out" 'd["ok"], d["exit"], d["ready"], d["ranks"][0]["ready"]')" "(False, 1, 0, False)"

# --metrics-listen for the node: rank k gets PORT + k, or its own socket
out=$(ctl start --model "$T/model" --tp-size 2 --backend host --metrics-listen 127.0.0.1:19400 --dry-run)
expect_has "metrics ports" "$out" "--tp-rank 1 --pp-size 1 --pp-rank 0 --metrics-listen 127.0.0.1:19401"
out=$(ctl start --model "$T/model" --tp-size 2 --backend host --metrics-listen 127.0.0.1 2>&1); rc=$?
expect_eq "start --metrics-listen without a port" "$rc" 2
ctl start --model "$T/model" --tp-size 2 --backend host --metrics-listen "unix:$T/" \
	>"$T/ms.out" 2>&1 || fail "start with unix: metrics: $(cat "$T/ms.out")"
remember_pids "$T/ms.out"
for r in 0 1; do
	[ -S "$T/host-$r.metrics.sock" ] || fail "no metrics socket for rank $r"
done
if command -v curl >/dev/null; then
	curl -sS --unix-socket "$T/host-1.metrics.sock" http://x/metrics | grep -q '^wcache_state{device="host-1",rank="1",tp_rank="1",tp_size="2",.*,state="ready"} 1$' ||
		fail "rank 1's metrics socket"
fi
ctl stop --all >/dev/null 2>&1 || fail "stop --all (metrics)"
[ -e "$T/host-0.metrics.sock" ] && fail "wcd left its metrics socket"

# --ep-size/--ep-rank reach the ranks (issue 14): tp rank t gets ep rank
# (R + t) % E, checked as wcd checks it; rank 1 of a tp 2 / ep 2 Mixtral
# serves only its block of the experts, whole
"$BIN/wcgen" mixtral-tiny --out "$T/moe" >/dev/null 2>&1 || fail "wcgen mixtral-tiny failed"
out=$(ctl start --model "$T/moe" --tp-size 4 --backend host --expert-parallel-size 4 --ep-rank 2 --dry-run)
expect_has "ep dry-run rank 0" "$out" "--tp-rank 0 --pp-size 1 --pp-rank 0 --ep-size 4 --ep-rank 2"
expect_has "ep dry-run rank 3" "$out" "--tp-rank 3 --pp-size 1 --pp-rank 0 --ep-size 4 --ep-rank 1"
out=$(ctl start --model "$T/moe" --tp-size 2 --backend host --dry-run)
expect_no "no ep options without --ep-size" "$out" "--ep-"
out=$(ctl start --model "$T/moe" --tp-size 2 --backend host --ep-size 2 --dry-run --json)
expect_eq "ep dry-run --json" "$(jget "$out" '[r["ep_rank"] for r in d["ranks"]]')" "[0, 1]"
out=$(ctl start --model "$T/moe" --tp-size 2 --backend host --ep-size 2 --ep-rank 2 2>&1); rc=$?
expect_eq "--ep-rank not below --ep-size" "$rc" 2
expect_has "--ep-rank not below --ep-size" "$out" "--ep-rank 2 must be below --ep-size 2"
out=$(ctl start --model "$T/moe" --tp-size 2 --backend host --ep-size 0 2>&1); rc=$?
expect_eq "--ep-size 0" "$rc" 2
expect_has "--ep-size 0" "$out" "--ep-size '0' is not a whole number in 1..1024"
ctl start --model "$T/moe" --tp-size 2 --backend host --ep-size 2 >"$T/ep.out" 2>&1 ||
	fail "start --ep-size 2: $(cat "$T/ep.out")"
remember_pids "$T/ep.out"
m=$(ctl manifest --device host-1)
expect_has "ep rank 1 serves its experts" "$m" "model.layers.0.block_sparse_moe.experts.2.w1.weight  BF16  [128, 128]"
expect_no "ep rank 1 serves only its experts" "$m" "block_sparse_moe.experts.0.w1.weight"
m=$(ctl manifest --device host-0)
expect_has "ep rank 0 serves its experts" "$m" "model.layers.0.block_sparse_moe.experts.0.w1.weight  BF16  [128, 128]"
expect_no "ep rank 0 serves only its experts" "$m" "block_sparse_moe.experts.2.w1.weight"
ctl stop --all >/dev/null 2>&1 || fail "stop --all (ep)"

# --foreground: the ranks' lines reach wcctl's stderr, prefixed by rank
"$WCCTL" start --runtime-dir "$RUN" --model "$T/model" --tp-size 2 --backend host \
	--foreground >"$T/fg.out" 2>"$T/fg.err" &
fg=$!; PIDS+=($fg)
# (each rank's "ready" line, whatever its count of tensors)
for r in 1 0; do
	"$WAITFOR" -p "$fg" -t 30 -e "\[pp0/tp$r\] .*wcd: ready: [0-9]+ tensors" "$T/fg.err" ||
		fail "rank tp$r's ready line was not relayed: $(cat "$T/fg.err")"
done
remember_pids "$T/fg.err"
expect_has "foreground relay" "$(cat "$T/fg.err")" "[pp0/tp1] "
expect_has "foreground relay" "$(cat "$T/fg.err")" "[pp0/tp0] "
kill -TERM "$fg"; wait "$fg"; rc=$?
expect_eq "foreground stopped on request" "$rc" 0
grep -q '^\[pp0/tp0\] .*exiting cleanly' "$T/fg.err" ||
	fail "foreground did not relay the daemons' last lines: $(cat "$T/fg.err")"

# an unwritable runtime directory is named as the cause (not the binary)
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null &&
   setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$WCCTL"; then
	chmod 0755 "$T"
	mkdir -m 0755 "$T/ro"
	out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$WCCTL" start \
		--model "$T/model" --tp-size 1 --backend host --runtime-dir "$T/ro" 2>&1); rc=$?
	expect_eq "start in an unwritable runtime dir" "$rc" 1
	expect_has "start in an unwritable runtime dir" "$out" "the runtime directory $T/ro is not writable: Permission denied"
	expect_no "start in an unwritable runtime dir" "$out" "--wcd"
else
	echo "note: the unwritable-directory case needs root and setpriv; not run"
fi
