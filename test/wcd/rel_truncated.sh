#!/usr/bin/env bash
# A shard truncated between its header's parse and its read: the load must
# fail with a sentence that names the file and both sizes, and nothing of
# it is served. The test hook WCD_TEST_STALL_AT=parsed holds the header
# thread on a FIFO after the parse (WCD_TEST_STALL_DIR/FIFO, as rel_hung);
# opening the FIFO for writing returns once wcd waits there, so the file is
# cut at that point exactly, then the load goes on.
#  - an UPDATE (direct path): refused with that sentence; the daemon still
#    serves the first model (an engine of it attaches and verifies);
#  - the start-up load on the staged path: wcd exits 1, the log says why;
#  - cut while it is read instead (WCD_TEST_STALL_AT=opened: after the
#    size check), with either direct fill (read, splice): wcd exits 1 with
#    "FILE ended early", no ready file.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
e2e_init trunc
"$BIN/wcgen" tiny --out "$E2E_DIR/next" --seed 3 >/dev/null 2>&1 || fail "wcgen next"
mkfifo "$E2E_DIR/stall"
shard=$E2E_DIR/next/model.safetensors
full=$(stat -c %s "$shard")
cut=$((full - 4096))
export WCD_TEST_STALL_DIR=$E2E_DIR/next WCD_TEST_STALL_FIFO=$E2E_DIR/stall
export WCD_TEST_STALL_AT=parsed
# cut_at_parse FILE SIZE: waits (30 s at most) until wcd holds after the
# parse, truncates FILE to SIZE, lets the load go on
cut_at_parse() {
	timeout 30 bash -c 'exec 3>"$1" && truncate -s "$3" "$2" && echo go >&3' \
		_ "$E2E_DIR/stall" "$1" "$2" || fail "wcd did not reach the stall after the parse"
}
e2e_start_wcd
W=(--device "$DEVICE" --runtime-dir "$RUNDIR")

"$BIN/wcctl" update "${W[@]}" --model "$E2E_DIR/next" --timeout 30 >"$E2E_DIR/up.out" 2>&1 &
up=$!
cut_at_parse "$shard" "$cut"
wait "$up"; rc=$?
out=$(cat "$E2E_DIR/up.out")
expect_eq "update of a shard cut after its parse: exit" "$rc" 1
expect_has "the sentence" "$out" "$shard is $cut bytes now but was $full when its header was read"
# still version 1: an engine of the first model attaches and verifies
"$BIN/wcattach" "${W[@]}" --model "$MODEL" --verify >"$E2E_DIR/att.out" 2>&1 ||
	{ cat "$E2E_DIR/att.out"; fail "not serving the first model after the refused update"; }
kill -TERM "$WCD_PID"; wait "$WCD_PID"

# the start-up load, staged path: wcd fails, never serves
"$BIN/wcgen" tiny --out "$E2E_DIR/next" --seed 3 --force >/dev/null 2>&1 || fail "wcgen next again"
rm -f "$READY"
"$BIN/wcd" --model "$E2E_DIR/next" "${W[@]}" --load-path staged >"$E2E_DIR/wcd2.log" 2>&1 &
p=$!
WCD_PIDS+=("$p")
cut_at_parse "$shard" "$cut"
wait "$p"; rc=$?
expect_eq "start-up load of a shard cut after its parse: exit" "$rc" 1
expect_has "the start-up sentence" "$(cat "$E2E_DIR/wcd2.log")" "$shard is $cut bytes now but was $full when its header was read"
[ -e "$READY" ] && fail "wcd wrote its ready file for a load that failed"

# cut while it is read (after the shards were opened and their sizes
# checked: WCD_TEST_STALL_AT=opened): both direct fills fail the start-up
# load naming the file, never serve
export WCD_TEST_STALL_AT=opened WCD_TEST_STALL_DIR=$(realpath "$E2E_DIR/next")
for fill in read splice; do
	"$BIN/wcgen" tiny --out "$E2E_DIR/next" --seed 3 --force >/dev/null 2>&1 || fail "wcgen next ($fill)"
	rm -f "$READY"
	"$BIN/wcd" --model "$E2E_DIR/next" "${W[@]}" --direct-fill $fill >"$E2E_DIR/wcd-$fill.log" 2>&1 &
	p=$!
	WCD_PIDS+=("$p")
	cut_at_parse "$shard" "$cut"
	wait "$p"; rc=$?
	log=$(cat "$E2E_DIR/wcd-$fill.log")
	expect_eq "start-up load ($fill fill) of a shard cut while it is read: exit" "$rc" 1
	case $log in *"is $cut bytes now"*) fail "$fill: the cut came before the size check: $log" ;; esac
	expect_has "the $fill fill's sentence" "$log" "$shard ended early"
	expect_has "the $fill fill's reason" "$log" "was the file truncated while loading?"
	[ -e "$READY" ] && fail "wcd wrote its ready file for a load that failed ($fill)"
done
echo ok
