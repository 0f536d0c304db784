#!/usr/bin/env bash
# wcctl restart keeps every option of the old daemon's that shapes what is
# served or who may attach (issue 26), whether it hands over or reloads.
# A daemon started by wcctl start with --ep-size 2 --ep-rank 1 and, after
# --, --rules, --vocab-pad, --allow-uid 65534, --allow-updater 65533 (which
# serves its uid too) and --log-format json records
# them in its ready file (serve_args); killed in the middle of the handover
# (WCD_HANDOVER_KILL=old:1, after its pause), the new daemon loads from
# disk with exactly those: the same identity (rules hash, ep rank, vocab
# padding), the serve_args again, ep rank 1's experts only, uid 65534
# still served, JSON log lines; and wcctl says "reloaded (<why>)", exit 0,
# not "handed over". A second restart of that daemon is a real handover
# (the new daemon's own parse, given the options, meets the identity):
# "handed over", --json outcome "handed over", the same identity. A ready
# file whose serve_args cannot be decoded makes restart refuse (exit 1).
source "$(dirname "$0")/../lib/lib.sh"
source "$(dirname "$0")/../lib/wcctl_lib.bash"
[ -x "$BIN/wcd" ] && [ -x "$BIN/wcgen" ] || skip "wcd or wcgen not built"
"$BIN/wcgen" mixtral-tiny --out "$T/moe" >/dev/null 2>&1 || fail "wcgen mixtral-tiny failed"
printf 'lm_head.weight replicate\n' >"$T/extra.rules"
chmod 0711 "$T"
mkdir -m 0711 "$RUN"
ctl() { "$WCCTL" "$1" --runtime-dir "$RUN" "${@:2}"; }
key() { sed -n "s/^$2=//p" "$RUN/$1.ready"; }

WCD_HANDOVER_KILL=old:1 "$WCCTL" start --model "$T/moe" --tp-size 1 \
	--ep-size 2 --ep-rank 1 --backend host --runtime-dir "$RUN" --timeout 60 \
	-- --rules "$T/extra.rules" --vocab-pad 128 --allow-uid 65534 --allow-updater 65533 --allow-gid 4242 --socket-mode 0666 \
	--log-format json >"$T/start.out" 2>&1 || fail "wcctl start: $(cat "$T/start.out")"
remember_pids "$T/start.out"
p0=$(ready_pid "$RUN" host-0)
id0=$(key host-0 identity)
args0=$(key host-0 serve_args)

out=$(ctl restart --device host-0 2>&1); rc=$?
echo "$out"
expect_eq "restart, old killed mid-handover" "$rc" 0
expect_has "restart says reloaded" "$out" "reloaded (the old daemon died in the middle of the handover"
expect_no "restart says no handover" "$out" "handed over to"
p1=$(ready_pid "$RUN" host-0)
PIDS+=("$p1")
[ "$p1" != "$p0" ] || fail "the ready file still names the old daemon $p0"
alive "$p0" && fail "the old daemon $p0 is still running"
expect_eq "identity after the reload" "$(key host-0 identity)" "$id0"
for w in "--rules $T/extra.rules" "--ep-size 2 --ep-rank 1" "--vocab-pad 128" \
	"--allow-uid 65534" "--allow-uid 65533" "--allow-updater 65533" "--allow-gid 4242" \
	"--socket-mode 0666" "--log-format json"; do
	expect_has "serve_args" "$args0" "$w"
done
expect_eq "serve_args after the reload" "$(key host-0 serve_args)" "$args0"
expect_has "ready file: reloaded" "$(key host-0 reloaded)" "died in the middle of the handover"
m=$(ctl manifest --device host-0)
expect_has "ep rank 1's experts" "$m" "model.layers.0.block_sparse_moe.experts.2.w1.weight"
expect_no "ep rank 1's experts only" "$m" "block_sparse_moe.experts.0.w1.weight"
grep -q "^{\"ts\":.*\"pid\":$p1," "$RUN/host-0.log" ||
	fail "the reloaded daemon $p1 does not log JSON: $(tail -3 "$RUN/host-0.log")"

if command -v setpriv >/dev/null && [ "$(id -u)" = 0 ] &&
	setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$BIN/wcattach" 2>/dev/null; then
	chmod 0666 "$RUN/host-0.sock"
	out=$(setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$BIN/wcattach" --socket "$RUN/host-0.sock" --verify 2>&1) ||
		fail "--allow-uid 65534 lost in the reload: $out"
	expect_has "uid 65534 still served" "$out" "all hashes match"
else
	echo "(uid 65534 not checked: setpriv, root or an executable $BIN/wcattach for it missing)"
fi

# the reloaded daemon handed over for real: its options meet the new
# daemon's parse
out=$(ctl restart --device host-0 --json 2>"$T/r2.err"); rc=$?
expect_eq "restart 2" "$rc" 0
expect_has "restart 2 --json" "$out" '"outcome": "handed over"'
expect_has "restart 2 said" "$(cat "$T/r2.err")" "handed over to pid"
p2=$(ready_pid "$RUN" host-0)
PIDS+=("$p2")
expect_eq "identity after the handover" "$(key host-0 identity)" "$id0"
expect_eq "serve_args after the handover" "$(key host-0 serve_args)" "$args0"
expect_eq "no reloaded after a handover" "$(key host-0 reloaded)" ""

# serve_args that cannot be decoded (a damaged ready file, or another
# build's): restart refuses before starting anything; the daemon serves on
cp "$RUN/host-0.ready" "$T/ready.bak"
sed -i 's/^serve_args=.*/serve_args=--rules %ZZ/' "$RUN/host-0.ready"
out=$(ctl restart --device host-0 2>&1); rc=$?
expect_eq "restart with damaged serve_args (output: $out)" "$rc" 1
expect_has "restart with damaged serve_args" "$out" "device host-0: the ready file's serve_args cannot be read (Invalid argument): it is damaged or from another build; not restarting"
alive "$p2" || fail "the daemon $p2 died of a restart that refused"
cp "$T/ready.bak" "$RUN/host-0.ready"
expect_eq "served by after the refused restart" "$(ready_pid "$RUN" host-0)" "$p2"
ctl stop --device host-0 >/dev/null 2>&1 || fail "stop"
echo "ok"
