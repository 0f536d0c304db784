#!/usr/bin/env bash
# A shard written while it is loaded, at its size (dd conv=notrunc, a
# touch, a rename over it): after the fill every shard is checked against
# what was seen before its header was read (inode, size, mtime, header
# bytes, ctime) and the path must still name it; any change fails the load
# or the update with a sentence naming the file, what changed and both
# values, and nothing of it is served. The hook WCD_TEST_STALL_AT=filled
# holds the load on a FIFO after its last read and copy, before that
# check (WCD_TEST_STALL_DIR/FIFO, as rel_truncated); opening the FIFO for
# writing returns once wcd waits there, so the file is changed at that
# point exactly, then the load goes on.
#  - an UPDATE (direct path, splice fill) of a shard rewritten: wcctl update
#    exits 1 with the sentence; the first model still serves (an engine of
#    it attaches and verifies); the same update with the shard only read
#    at that point succeeds, and an engine of it verifies;
#  - start-up loads with each fill (splice, read, staged) of a shard
#    rewritten: wcd exits 1 naming the file, no ready file;
#  - what each kind of change is called: the mtime alone (touch), the
#    header rewritten with the old mtime put back, data rewritten with the
#    old mtime put back (rsync --inplace does that: only the ctime tells),
#    a copy renamed over the path, the same before the shards are opened
#    (WCD_TEST_STALL_AT=parsed), data rewritten after the open, before the
#    fill (WCD_TEST_STALL_AT=opened);
#  - a start-up load whose shard is only read at the stall is served.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
e2e_init rewr
mkfifo "$E2E_DIR/stall"
NEXT=$(realpath "$E2E_DIR")/next
export SHARD=$NEXT/model.safetensors OLD=1000000000
export WCD_TEST_STALL_DIR=$NEXT WCD_TEST_STALL_FIFO=$E2E_DIR/stall
export WCD_TEST_STALL_AT=filled
W=(--device "$DEVICE" --runtime-dir "$RUNDIR")
SENT="$SHARD changed while it was loaded: "
TAIL="nothing of this load is served: wait for the writer to finish and load again"

# fresh: a new model in $NEXT whose shard's mtime and atime are $OLD
# exactly (an atime not after the mtime: relatime updates it on the next
# read, which is after the fstat the check compares with)
fresh() {
	"$BIN/wcgen" tiny --out "$NEXT" --seed 3 --force >/dev/null 2>&1 || fail "wcgen next"
	touch -a -m -d "@$OLD" "$SHARD" || fail "touch"
	CT0=$(stat -c %z "$SHARD")
	export CT0
}
# at_stall SNIPPET: waits (30 s at most) until wcd holds at the stall, runs
# the bash SNIPPET, lets the load go on
at_stall() {
	timeout 30 bash -c 'exec 3>"$1" && eval "$2" && echo go >&3' \
		_ "$E2E_DIR/stall" "$1" || fail "wcd did not reach the stall, or '$1' failed"
}
# the rewrites: data bytes in place at the same size (dd conv=notrunc), the
# header's first byte, the old mtime put back; until_ctime: touches until
# the ctime moved off CT0 (one clock tick at most: ctime has the kernel's
# coarse granularity), so that a ctime check has something to see
DATA='printf XXXXXXXXXXXXXXXX | dd of="$SHARD" bs=1 seek=$(( $(stat -c %s "$SHARD") - 4096 )) conv=notrunc status=none'
HEAD='printf " " | dd of="$SHARD" bs=1 seek=8 conv=notrunc status=none'
BACK='touch -m -d "@$OLD" "$SHARD"'
until_ctime='until [ "$(stat -c %z "$SHARD")" != "$CT0" ]; do touch -m -d "@$OLD" "$SHARD"; done'

# ready_or_exit PID: waits (30 s at most) until wcd PID wrote its ready
# file (ENDED=ready) or exited (ENDED=exit, its status in RC)
ready_or_exit() {
	local rc=0
	ENDED=
	"$WAITFOR" -p "$1" -t 30 "$READY" || rc=$?
	[ $rc = 0 ] && { ENDED=ready; return 0; }
	[ $rc = 1 ] && { wait "$1"; RC=$?; ENDED=exit; return 0; }
	fail "wcd $1 neither ready nor gone after 30 s"
}

# start_fails WHAT SNIPPET NEEDLE [wcd args]: a start-up load of $NEXT with
# SNIPPET run at the stall exits 1, its log has the sentence and NEEDLE
start_fails() {
	local what=$1 snip=$2 needle=$3 p log
	shift 3
	fresh
	rm -f "$READY"
	"$BIN/wcd" --model "$NEXT" "${W[@]}" "$@" >"$E2E_DIR/wcd-s.log" 2>&1 &
	p=$!
	WCD_PIDS+=("$p")
	at_stall "$snip"
	ready_or_exit "$p"
	log=$(cat "$E2E_DIR/wcd-s.log")
	[ "$ENDED" = ready ] && { kill -KILL "$p"; wait "$p"; fail "start-up load, $what: served"; }
	expect_eq "start-up load, $what: exit" "$RC" 1
	expect_has "start-up load, $what: the sentence" "$log" "$SENT"
	expect_has "start-up load, $what: what changed" "$log" "$needle"
	expect_has "start-up load, $what: what to do" "$log" "$TAIL"
	[ -e "$READY" ] && fail "wcd wrote its ready file for a load that failed ($what)"
	return 0
}

# --- updates: the first model serves, the update to $NEXT is held ---------
e2e_start_wcd
fresh
"$BIN/wcctl" update "${W[@]}" --model "$NEXT" --timeout 30 >"$E2E_DIR/up.out" 2>&1 &
up=$!
at_stall "$DATA"
wait "$up"; rc=$?
out=$(cat "$E2E_DIR/up.out")
expect_eq "update of a shard rewritten while loaded: exit" "$rc" 1
expect_has "the update's sentence" "$out" "update to version 2 failed: $SENT"
expect_has "the update's change" "$out" "its modification time is "
expect_has "the update's change, the old value" "$out" "was $OLD.000000000 when its header was read"
expect_has "the update's tail" "$out" "version 1 keeps serving, untouched"
"$BIN/wcattach" "${W[@]}" --model "$MODEL" --verify >"$E2E_DIR/att.out" 2>&1 ||
	{ cat "$E2E_DIR/att.out"; fail "not serving the first model after the failed update"; }
# the same update, the shard only read at the stall: it succeeds
fresh
"$BIN/wcctl" update "${W[@]}" --model "$NEXT" --timeout 30 >"$E2E_DIR/up2.out" 2>&1 &
up=$!
at_stall 'cat "$SHARD" >/dev/null'
wait "$up"; rc=$?
[ "$rc" = 0 ] || { cat "$E2E_DIR/up2.out"; fail "update with the shard only read: exit $rc"; }
"$BIN/wcattach" "${W[@]}" --model "$NEXT" --verify >"$E2E_DIR/att2.out" 2>&1 ||
	{ cat "$E2E_DIR/att2.out"; fail "an engine of the updated model does not verify"; }
kill -TERM "$WCD_PID"; wait "$WCD_PID"

# --- start-up loads, each fill, data rewritten ----------------------------
start_fails "splice fill, data rewritten" "$DATA" "its modification time is " --direct-fill splice
start_fails "read fill, data rewritten" "$DATA" "its modification time is " --direct-fill read
start_fails "staged path, data rewritten" "$DATA" "its modification time is " --load-path staged

# --- what each change is called -------------------------------------------
start_fails "touch (mtime only)" 'touch -m -d @2000000000 "$SHARD"' \
	"its modification time is 2000000000.000000000 now, was $OLD.000000000 when its header was read"
start_fails "header rewritten, mtime put back" "$HEAD && $BACK" \
	"bytes (the header) differ from those parsed"
start_fails "data rewritten, mtime put back" "$DATA && $BACK && $until_ctime" \
	"its status-change time (ctime) is "
start_fails "a copy renamed over it" 'cp -p "$SHARD" "$SHARD.new" && mv "$SHARD.new" "$SHARD"' \
	"the path now names another file (inode "
start_fails "no longer there" 'mv "$SHARD" "$SHARD.gone"' \
	"the path no longer names a file (No such file or directory)"
# renamed over between the header read and the shards' open: the path and
# the file read agree with each other, not with the header read
export WCD_TEST_STALL_AT=parsed WCD_TEST_STALL_DIR=$NEXT
start_fails "a copy renamed over it before the open" \
	'cp -p "$SHARD" "$SHARD.new" && mv "$SHARD.new" "$SHARD"' \
	"the path now names another file (inode "
# rewritten after the shards' open and size check, before the fill: every
# byte read is the new one, consistent, but not what the header read saw
export WCD_TEST_STALL_AT=opened
start_fails "data rewritten before the fill" "$DATA" "its modification time is "
export WCD_TEST_STALL_AT=filled

# --- no change: the shard only read at the stall, the load is served ------
for path in "--direct-fill splice" "--load-path staged"; do
	fresh
	rm -f "$READY"
	# shellcheck disable=SC2086
	"$BIN/wcd" --model "$NEXT" "${W[@]}" $path >"$E2E_DIR/wcd-r.log" 2>&1 &
	p=$!
	WCD_PIDS+=("$p")
	at_stall 'cat "$SHARD" >/dev/null'
	ready_or_exit "$p"
	[ "$ENDED" = ready ] ||
		{ cat "$E2E_DIR/wcd-r.log"; fail "$path: wcd exited ($RC) for a shard only read"; }
	# the reads moved the atime (not the ctime): the check let that be
	[ "$(stat -c %X "$SHARD")" != "$OLD" ] ||
		fail "$path: the shard's atime did not move: this file system does not show reads, the case proves nothing here"
	"$BIN/wcattach" "${W[@]}" --model "$NEXT" --verify >"$E2E_DIR/att3.out" 2>&1 ||
		{ cat "$E2E_DIR/att3.out"; fail "$path: an engine of the model only read does not verify"; }
	kill -TERM "$p"; wait "$p"
done
echo ok
