#!/usr/bin/env bash
# The splice fill's failures that are not a refusal (fill.c), injected at
# one piece by the test hook WCD_TEST_FILL_FAIL=PIECE:ERRNO (the memfd side
# of the splice fails after the shard side moved bytes; with
# WCD_TEST_NO_SPLICE=1, the pread):
#  - at start-up, EIO, ENOSPC, ENOMEM and a splice that moves nothing: wcd
#    exits 1 with one sentence that names the tensor, the shard, an offset
#    inside that tensor's bytes in that shard, and the errno; no ready file;
#  - the same through pread (splice refused), and on splice's shard side
#    (P:E:shard): "reading SHARD at offset"; no bytes: "SHARD ended early";
#  - worker threads that cannot be made (WCD_TEST_FILL_THREADS=K): with 1,
#    and with none (the loop thread fills alone), the load completes with
#    the file's hashes and says so; with none, a failure still fails it;
#  - the event loop cannot watch the workers (WCD_TEST_FILL_POLL_FAIL=1):
#    the load completes with the file's hashes, said in a warning;
#  - no eventfd (WCD_TEST_FILL_EVENTFD_FAIL=1, EMFILE): the load completes,
#    the loop waits for the workers, said once;
#  - a worker whose pipe cannot be made (WCD_TEST_FILL_PIPE_FAIL=K): it
#    preads, said once naming it; the load completes with the hashes;
#  - a refusal (EINVAL) on the memfd side mid-fill, after other pieces were
#    spliced and with bytes in the pipe: pread takes over, said once, and
#    every hash equals the file's;
#  - an UPDATE whose fill fails (WCD_TEST_FILL_FAIL_DIR: only the new
#    model's loads), three times: refused with the sentence and "version 1
#    keeps serving"; the daemon's descriptors (memfds included) are the
#    same before and after, it still serves version 1 with the first
#    model's hashes, an engine attaches and verifies; then an update to
#    another directory publishes version 2 with that model's hashes (the
#    failed one's slot was freed), and the daemon stops cleanly.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/wcd.bash"
wcd_init fillfail
[ -x "$BIN/wcctl" ] && [ -x "$BIN/wcattach" ] || skip "wcctl or wcattach is not built"
M=$(realpath "$W/model")
PIECE=10

# in_tensor SHARD NAME OFFSET: OFFSET lies inside NAME's bytes in SHARD
in_tensor() {
	/usr/bin/python3 - "$@" <<'PY'
import json, struct, sys
shard, name, off = sys.argv[1], sys.argv[2], int(sys.argv[3])
f = open(shard, "rb")
n = struct.unpack("<Q", f.read(8))[0]
b, e = json.loads(f.read(n))[name]["data_offsets"]
sys.exit(0 if 8 + n + b <= off < 8 + n + e else 1)
PY
}

# fails NAME ENV...: a start-up load with ENV that must fail; its log in
# $W/NAME.log, the error line in $LINE
fails() {
	local name=$1; shift
	env "$@" "$BIN/wcd" --model "$M" --device "host:$name" --runtime-dir "$RT" \
		>"$W/$name.log" 2>&1 &
	local p=$!
	WCD_PIDS+=("$p")
	wait_exit "$p"
	expect_eq "$name: exit" "$RC" 1
	[ -e "$RT/host-$name.ready" ] && fail "$name: ready file for a load that failed"
	expect_no "$name: served" "$(cat "$W/$name.log")" "ready:"
	LINE=$(grep ' ERROR ' "$W/$name.log")
	expect_eq "$name: one error line" "$(grep -c ' ERROR ' "$W/$name.log")" 1
}

# the memfd side: "writing N bytes of NAME (SHARD at offset O) into its
# pool failed: WHY"
for c in "5 Input/output error (EIO)" "28 No space left on device (ENOSPC); the host has no memory left for the pools" \
	"12 Cannot allocate memory (ENOMEM); the host has no memory left for the pools" \
	"0 the pool's memfd took no bytes (EIO)"; do
	e=${c%% *} why=${c#* }
	fails "w$e" WCD_TEST_FILL_FAIL=$PIECE:$e
	re="writing ([0-9]+) bytes of ([^ ]+) \(($M/[^ ]+) at offset ([0-9]+)\) into its pool failed: (.*)"
	[[ $LINE =~ $re ]] || fail "errno $e: not the sentence: $LINE"
	name=${BASH_REMATCH[2]} shard=${BASH_REMATCH[3]} off=${BASH_REMATCH[4]}
	expect_has "errno $e: the reason" "${BASH_REMATCH[5]}" "$why"
	in_tensor "$shard" "$name" "$off" || fail "errno $e: offset $off is not in $name's bytes in $shard"
done

# through pread (splice refused from the start)
fails r5 WCD_TEST_NO_SPLICE=1 WCD_TEST_FILL_FAIL=$PIECE:5
re="reading ($M/[^ ]+) at offset ([0-9]+) \(([^ ]+)\) failed: Input/output error \(EIO\)"
[[ $LINE =~ $re ]] || fail "pread EIO: not the sentence: $LINE"
in_tensor "${BASH_REMATCH[1]}" "${BASH_REMATCH[3]}" "${BASH_REMATCH[2]}" ||
	fail "pread EIO: offset ${BASH_REMATCH[2]} is not in ${BASH_REMATCH[3]}'s bytes"
expect_has "pread EIO: refused first" "$(cat "$W/r5.log")" "splice into the pools was refused"
fails r0 WCD_TEST_NO_SPLICE=1 WCD_TEST_FILL_FAIL=$PIECE:0
expect_has "pread of nothing" "$LINE" "ended early: no bytes of"
expect_has "pread of nothing: the shard" "$LINE" "$M/model-0000"
# splice's shard side
fails s5 WCD_TEST_FILL_FAIL=$PIECE:5:shard
[[ $LINE =~ $re ]] || fail "shard side EIO: not the sentence: $LINE"
in_tensor "${BASH_REMATCH[1]}" "${BASH_REMATCH[3]}" "${BASH_REMATCH[2]}" ||
	fail "shard side EIO: offset ${BASH_REMATCH[2]} is not in ${BASH_REMATCH[3]}'s bytes"
expect_no "shard side EIO: no refusal" "$(cat "$W/s5.log")" "refused"
fails s0 WCD_TEST_FILL_FAIL=$PIECE:0:shard
expect_has "shard side nothing" "$LINE" "ended early: no bytes of"
# no worker thread at all: the loop thread's fill fails the same way
fails t0 WCD_TEST_FILL_THREADS=0 WCD_TEST_FILL_FAIL=$PIECE:28
expect_has "no threads: the sentence" "$LINE" "into its pool failed: No space left on device (ENOSPC)"
expect_has "no threads: said" "$(cat "$W/t0.log")" "fill: 0 of "

# serves NAME ENV...: a start-up load with ENV that must complete; every
# hash equals the file's; its log in $W/NAME.log
"$BIN/wcctl" inspect "$M" --hashes | sort -k2 >"$W/file.txt"
serves() {
	local name=$1 p; shift
	env "$@" "$BIN/wcd" --model "$M" --device "host:$name" --runtime-dir "$RT" \
		>"$W/$name.log" 2>&1 &
	p=$!
	WCD_PIDS+=("$p")
	wait_file "$RT/host-$name.ready" "$p" || { cat "$W/$name.log"; fail "$name: not ready"; }
	"$BIN/wcctl" manifest --runtime-dir "$RT" --device "host:$name" | grep -v '^#' |
		awk '{print $NF "  " $1}' | sort -k2 | grep -v -e '\.qkv_proj\.' -e '\.gate_up_proj\.' >"$W/$name.txt"
	kill -TERM "$p"; wait_exit "$p"
	expect_eq "$name: exit" "$RC" 0
	cmp -s "$W/$name.txt" "$W/file.txt" || { diff "$W/$name.txt" "$W/file.txt"; fail "$name: hashes differ from the file's"; }
}

# a refusal mid-fill: pread takes over, the bytes are right
serves einval WCD_TEST_FILL_FAIL=$PIECE:22
expect_eq "EINVAL mid-fill: said once" "$(grep -c 'splice into the pools was refused' "$W/einval.log")" 1
expect_has "EINVAL mid-fill: pread" "$(cat "$W/einval.log")" "pread: splice refused"

# worker threads that cannot be made: 1, then none
for k in 1 0; do
	serves th$k WCD_TEST_FILL_THREADS=$k
	expect_has "$k threads: said" "$(cat "$W/th$k.log")" "fill: $k of "
done
expect_has "no threads: the loop fills" "$(cat "$W/th0.log")" "worker jobs queued on the worker pool (Resource temporarily unavailable): the loop thread fills alone"

# the loop cannot watch the fill: the workers go on (they were told to stop,
# and the pools were published with holes: 25 to 37 of 39 hashes wrong)
serves poll WCD_TEST_FILL_POLL_FAIL=1
expect_has "poll: said" "$(cat "$W/poll.log")" "fill: cannot watch its workers from the event loop (Device or resource busy): waiting for them"
expect_has "poll: every byte" "$(cat "$W/poll.log")" "(9998848 bytes read for 9998848,"

# no eventfd for the loop to watch the workers (EMFILE): the load does
# not fail for it; the workers fill, the loop waits for them, said once
serves efd WCD_TEST_FILL_EVENTFD_FAIL=1
expect_has "eventfd: said" "$(cat "$W/efd.log")" "fill: cannot watch its workers from the event loop (no eventfd: Too many open files): waiting for them"
expect_eq "eventfd: said once" "$(grep -c 'cannot watch its workers' "$W/efd.log")" 1
expect_has "eventfd: every byte" "$(cat "$W/efd.log")" "(9998848 bytes read for 9998848,"

# a worker without a pipe (pipe2 fails: EMFILE): it preads instead, said
# once, naming the worker; the others splice; every hash the file's
serves nopipe WCD_TEST_FILL_PIPE_FAIL=1
expect_has "no pipe: said" "$(cat "$W/nopipe.log")" "fill: worker 1 has no pipe (Too many open files): it reads its pieces with pread"
expect_eq "no pipe: said once" "$(grep -c 'has no pipe' "$W/nopipe.log")" 1
expect_has "no pipe: every byte" "$(cat "$W/nopipe.log")" "(9998848 bytes read for 9998848,"

# an UPDATE whose fill fails: version 1 serves on, nothing leaks
"$BIN/wcgen" tiny --out "$W/next" --shard-size 3MB --seed 3 >/dev/null 2>&1 || fail "wcgen next"
NEXT=$(realpath "$W/next")
WCD_TEST_FILL_FAIL=$PIECE:28 WCD_TEST_FILL_FAIL_DIR=$NEXT \
	wcd_bg "$W/up.log" --model "$M" --device host:up --runtime-dir "$RT"
p=$LAST
U=(--runtime-dir "$RT" --device host:up)
wait_file "$RT/host-up.ready" "$p" || { cat "$W/up.log"; fail "update: the first load failed"; }
# before any client: the daemon's own descriptors
fds0=$(ls /proc/$p/fd | wc -l)
memfds0=$(ls -l /proc/$p/fd | grep -c memfd)
"$BIN/wcctl" manifest "${U[@]}" >"$W/up1.txt" || fail "update: manifest before"
# fds_settle: waits (5 s at most) until the daemon is back to fds0
# descriptors: it closes a client's connection once it sees the EOF
fds_settle() {
	local i
	for ((i = 0; i < 500; i++)); do
		[ "$(ls /proc/$p/fd | wc -l)" = "$fds0" ] && return
		sleep 0.01
	done
}
for i in 1 2 3; do
	out=$(timeout 60 "$BIN/wcctl" update "${U[@]}" --model "$NEXT" --timeout 30 2>&1); rc=$?
	expect_eq "update $i: exit" "$rc" 1
	expect_has "update $i: the sentence" "$out" "update to version 2 failed: writing"
	expect_has "update $i: the shard" "$out" "($NEXT/model-0000"
	expect_has "update $i: the errno" "$out" "into its pool failed: No space left on device (ENOSPC)"
	expect_has "update $i: what serves" "$out" "version 1 keeps serving"
	fds_settle
	expect_eq "update $i: descriptors" "$(ls /proc/$p/fd | wc -l)" "$fds0"
	expect_eq "update $i: memfds" "$(ls -l /proc/$p/fd | grep -c memfd)" "$memfds0"
done
"$BIN/wcctl" manifest "${U[@]}" >"$W/up2.txt" || fail "update: manifest after"
cmp -s "$W/up1.txt" "$W/up2.txt" || { diff "$W/up1.txt" "$W/up2.txt"; fail "update: the manifest changed after failed updates"; }
expect_has "update: still version 1" "$(head -2 "$W/up2.txt")" "version 1,"
"$BIN/wcattach" "${U[@]}" --model "$M" --verify >"$W/att.out" 2>&1 ||
	{ cat "$W/att.out"; fail "update: the first model does not attach and verify after the failed updates"; }
# and the next update (of another model directory) is published whole
"$BIN/wcgen" tiny --out "$W/third" --shard-size 3MB --seed 4 >/dev/null 2>&1 || fail "wcgen third"
"$BIN/wcctl" update "${U[@]}" --model "$W/third" --timeout 30 >"$W/up3.out" 2>&1 ||
	{ cat "$W/up3.out"; fail "update: a good update after the failed ones"; }
"$BIN/wcctl" manifest "${U[@]}" >"$W/up3.txt" || fail "update: manifest of version 2"
expect_has "update: version 2" "$(head -2 "$W/up3.txt")" "version 2,"
grep -v '^#' "$W/up3.txt" | awk '{print $NF "  " $1}' | sort -k2 |
	grep -v -e '\.qkv_proj\.' -e '\.gate_up_proj\.' >"$W/up3.hashes"
"$BIN/wcctl" inspect "$W/third" --hashes | sort -k2 >"$W/third.txt"
cmp -s "$W/up3.hashes" "$W/third.txt" || { diff "$W/up3.hashes" "$W/third.txt"; fail "update: version 2's hashes differ from the file's"; }
kill -TERM "$p"; wait_exit "$p"
expect_eq "update: exit" "$RC" 0
echo ok
