#!/usr/bin/env bash
# wcctl start with a fake wcd (test/wcctl/wcctl_fakewcd.py): ranks become ready;
# a rank that exits with code 3, one killed with SIGKILL, one that never
# becomes ready (deadline, with a stale ready file that must not count);
# --foreground teardown and SIGTERM relay; a busy device; a bad --wcd.
# The test waits on events (wcctl's output, the ranks' logs and ready files),
# not on fixed sleeps; the exit-to-report latency is printed, not judged.
source "$(dirname "$0")/../lib/lib.sh"
source "$(dirname "$0")/../lib/wcctl_lib.bash"
[ -x "$WCCTL" ] || fail "no $WCCTL"
command -v python3 >/dev/null || skip "python3 is needed for the fake wcd"
# Ranks load for 0.05 s unless a case says otherwise.
export FAKE_LOAD_S=0.05
start() { "$WCCTL" start --model "$T/model" --backend host --runtime-dir "$RUN" --wcd "$FAKE" "$@"; }

# --help and a layout that does not fit
out=$("$WCCTL" start --help) || fail "start --help failed"
expect_has "help" "$out" "--tp-size"
out=$(start --tp-size 3 --nnodes 2 2>&1); rc=$?
expect_eq "layout error status" "$rc" 2
expect_has "layout error" "$out" "--tp-size 3 is not divisible by the 2 nodes"

# 1. four ranks become ready, each with its own device
start --tp-size 4 >"$T/ok.out" 2>&1; rc=$?
remember_pids "$T/ok.out"
expect_eq "4 ranks status" "$rc" 0
expect_has "4 ranks" "$(cat "$T/ok.out")" "All 4 weight cache daemons on node 0 are ready (pp_ranks=0..0, tp_ranks=0..3)"
for i in 0 1 2 3; do
	p=$(ready_pid "$RUN" host-$i)
	alive "$p" || fail "host-$i's daemon $p is not running after start"
done

# 2. a busy device is refused before anything starts; the owner is untouched
p0=$(ready_pid "$RUN" host-0)
out=$(start --tp-size 2 2>&1); rc=$?
expect_eq "busy status" "$rc" 1
expect_has "busy" "$out" "device host-0 already has a running daemon (pid $p0"
expect_has "busy hint" "$out" "wcctl stop --device host-0"
alive "$p0" || fail "the running daemon was disturbed"
[ -f "$RUN/host-0.ready" ] || fail "the running daemon's ready file is gone"
for p in "${PIDS[@]}"; do kill "$p"; done
for f in "$RUN"/*.ready; do
	[ ! -e "$f" ] || "$WAITFOR" -t 5 -d "$f" || fail "$f outlived its daemon's kill"
done
rm -rf "$RUN"

# 2b. tp 2 x pp 2 on one node: GPU = (pp_rank % 2) * 2 + tp_rank, and
# each wcd gets its ranks
start --tp-size 2 --pp-size 2 >"$T/pp.out" 2>&1; rc=$?
remember_pids "$T/pp.out"
expect_eq "tp2 pp2 status" "$rc" 0
expect_has "tp2 pp2" "$(cat "$T/pp.out")" "All 4 weight cache daemons on node 0 are ready (pp_ranks=0..1, tp_ranks=0..1)"
expect_eq "host-2 ranks" "$(grep -E '^(pp|tp)_(rank|size)=' "$RUN/host-2.ready" | sort | tr '\n' ' ')" \
	"pp_rank=1 pp_size=2 tp_rank=0 tp_size=2 "
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
for f in "$RUN"/*.ready; do
	[ ! -e "$f" ] || "$WAITFOR" -t 5 -d "$f" || fail "$f outlived its daemon's kill"
done
rm -rf "$RUN"

# 3. a rank exits with code 3 while loading: reported with pid and code,
# siblings stopped, no file left. The latency from the dying process's own
# clock to the report is printed (bench/ is where it is measured).
rm -rf "$T/times" "$RUN"; mkdir -p "$T/times"
FAKE_FAIL=2:exit:3 FAKE_FAIL_AFTER=0 FAKE_LOAD_S=30 FAKE_TIME_DIR=$T/times WCCTL_DEBUG=times \
	start --tp-size 4 >"$T/exit3.out" 2>&1; rc=$?
remember_pids "$T/exit3.out"
expect_eq "exit 3 status" "$rc" 1
f=$(ls "$T/times"); pid=${f#exit-}
[ -n "$pid" ] || fail "the failing rank wrote no exit time"
expect_has "exit 3" "$(cat "$T/exit3.out")" "Weight cache daemon for pp_rank=0 tp_rank=2 (pid=$pid) exited prematurely with code 3"
expect_has "exit 3 log tail" "$(cat "$T/exit3.out")" "error: simulated failure"
died=$(cat "$T/times/$f")
reported=$(sed -n "s/.*debug: pid=$pid exit_seen_ns=[0-9]* reported_ns=\([0-9]*\).*/\1/p" "$T/exit3.out")
[ -n "$reported" ] || fail "no debug time for pid $pid"
seen=$(sed -n "s/.*debug: pid=$pid exit_seen_ns=\([0-9]*\).*/\1/p" "$T/exit3.out")
lat_us=$(( (reported - died) / 1000 ))
echo "exit-to-report latency: ${lat_us} us (exit seen after $(( (seen - died) / 1000 )) us)"
[ "$lat_us" -ge 0 ] || fail "reported before the exit? ($lat_us us)"
expect_gone "$T/exit3.out"
expect_empty "$RUN"

# 4. a rank killed by SIGKILL
FAKE_FAIL=1:kill FAKE_FAIL_AFTER=0 start --tp-size 2 >"$T/kill.out" 2>&1; rc=$?
remember_pids "$T/kill.out"
expect_eq "sigkill status" "$rc" 1
expect_has "sigkill" "$(cat "$T/kill.out")" "tp_rank=1 (pid="
expect_has "sigkill" "$(cat "$T/kill.out")" "was killed by signal 9 (SIGKILL); this is often the kernel's OOM killer"
expect_gone "$T/kill.out"
expect_empty "$RUN"

# 5. the deadline, with a stale ready file for the hanging rank (a pid that
# is not ours) that must not count as ready
mkdir -p "$RUN"
printf 'pid=1\nsocket=%s/host-0.sock\ndevice=host-0\nstate=ready\n' "$RUN" >"$RUN/host-0.ready"
FAKE_FAIL=0:hang FAKE_LOAD_S=0.01 start --tp-size 2 --timeout 0.5 --grace 1 >"$T/dl.out" 2>&1; rc=$?
remember_pids "$T/dl.out"
expect_eq "deadline status" "$rc" 1
expect_has "deadline" "$(cat "$T/dl.out")" "Weight cache daemon for pp_rank=0 tp_rank=0 did not become ready within 0.5 s"
[[ $(cat "$T/dl.out") == *"are ready"* ]] && fail "the stale ready file counted"
expect_gone "$T/dl.out"
expect_empty "$RUN"

# waitfor WHAT PID TEXT FILE...: waits (20 s at most, on each write) until
# every FILE holds TEXT while PID lives, else fails naming WHAT.
waitfor() {
	local what=$1 pid=$2 text=$3 f; shift 3
	for f in "$@"; do
		"$WAITFOR" -p "$pid" -t 20 -g "$text" "$f" || fail "$what never happened"
	done
}

# 6. --foreground: a daemon that dies after all are ready tears all down
# (rank 3 exits with code 0 when the test sends it SIGUSR1)
FAKE_FAIL=3:die_after_ready:0 start --tp-size 4 --foreground >"$T/fg.out" 2>&1 &
wpid=$!
waitfor "foreground start ready" $wpid "are ready" "$T/fg.out"
remember_pids "$T/fg.out"
kill -USR1 "$(ready_pid "$RUN" host-3)"
wait $wpid; rc=$?
expect_eq "foreground death status" "$rc" 1
expect_has "foreground ready" "$(cat "$T/fg.out")" "All 4 weight cache daemons on node 0 are ready"
expect_has "foreground death" "$(cat "$T/fg.out")" "tp_rank=3 (pid="
expect_has "foreground death" "$(cat "$T/fg.out")" "exited with code 0"
expect_gone "$T/fg.out"
expect_empty "$RUN"

# 7. --foreground relays SIGTERM and exits 0 once the daemons are gone
"$WCCTL" start --model "$T/model" --backend host --runtime-dir "$RUN" --wcd "$FAKE" \
	--tp-size 2 --foreground >"$T/fgt.out" 2>&1 &
wpid=$!
waitfor "foreground start ready" $wpid "are ready" "$T/fgt.out"
remember_pids "$T/fgt.out"
kill -TERM $wpid
wait $wpid; rc=$?
expect_eq "foreground SIGTERM status" "$rc" 0
expect_has "relay" "$(cat "$T/fgt.out")" "got SIGTERM; stopping 2 daemons"
expect_gone "$T/fgt.out"
expect_empty "$RUN"

# 7b. SIGTERM while starting: every daemon stopped, files removed, 128+15
FAKE_FAIL=0:hang "$WCCTL" start --model "$T/model" --backend host --runtime-dir "$RUN" \
	--wcd "$FAKE" --tp-size 2 >"$T/int.out" 2>&1 &
wpid=$!
# both ranks are loading (their SIGTERM handlers are in place)
waitfor "two ranks loading" $wpid " wcd: loading " "$RUN/host-0.log" "$RUN/host-1.log"
remember_pids "$T/int.out"
kill -TERM $wpid
wait $wpid; rc=$?
expect_eq "SIGTERM while starting status" "$rc" 143
expect_has "SIGTERM while starting" "$(cat "$T/int.out")" "got SIGTERM while starting; stopping 2 daemons"
expect_gone "$T/int.out"
expect_empty "$RUN"

# 8. a daemon that cannot be executed
out=$("$WCCTL" start --model "$T/model" --backend host --runtime-dir "$RUN" --tp-size 2 --wcd "$T/no-such-wcd" 2>&1); rc=$?
expect_eq "bad --wcd status" "$rc" 1
expect_has "bad --wcd" "$out" "cannot start $T/no-such-wcd for pp_rank=0 tp_rank=0"
expect_empty "$RUN"
# 9. on a terminal: a progress line per rank, redrawn in place
if command -v script >/dev/null; then
	FAKE_LOAD_S=1.2 script -qfec "$WCCTL start --model $T/model --backend host --runtime-dir $RUN --wcd $FAKE --tp-size 2" \
		"$T/tty.out" >/dev/null 2>&1; rc=$?
	remember_pids "$T/tty.out"
	expect_eq "tty start status" "$rc" 0
	grep -q $'\e\[2A' "$T/tty.out" || fail "no redraw on a terminal: $(cat -v "$T/tty.out")"
	expect_has "tty progress" "$(cat "$T/tty.out")" "pp_rank=0 tp_rank=1 host-1"
	expect_has "tty progress" "$(cat "$T/tty.out")" " GB ("
	for p in $(grep -o 'started wcd pid=[0-9]*' "$T/tty.out" | cut -d= -f2); do kill "$p"; done
fi
echo "ok"
