#!/usr/bin/env bash
# An engine that expects another identity than the daemon serves is refused
# with every differing field and both values: wcattach --model with a
# different tensor-parallel setting and another model directory.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
e2e_init mismatch
e2e_start_wcd

# the same identity is accepted
out=$("$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" --model "$MODEL" 2>&1) ||
	fail "attach with the daemon's identity failed: $out"
expect_has "attach with the same identity" "$out" "attached to host-$DEVNAME"

# tp 2 rank 1 of the same model: tp_size and tp_rank differ
out=$("$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" --model "$MODEL" \
	--tp-size 2 --tp-rank 1 2>&1) && fail "a tp 2 engine was served a tp 1 cache: $out"
echo "$out"
expect_has "mismatch" "$out" "identity mismatch"
expect_has "mismatch fields" "$out" "tp_size"
expect_has "mismatch fields" "$out" "tp_rank"
expect_has "tp_size values" "$out" "daemon=1 engine=2"

# the layout tuple: another padding multiple, expert parallelism, another
# layout file (its hash) each differ by name
out=$("$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" --model "$MODEL" \
	--vocab-pad 128 --ep-size 2 --ep-rank 1 2>&1) && fail "another layout tuple was served: $out"
echo "$out"
expect_has "vocab_pad differs" "$out" "vocab_pad: daemon=64 engine=128"
expect_has "ep_size differs" "$out" "ep_size: daemon=1 engine=2"
expect_has "ep_rank differs" "$out" "ep_rank: daemon=0 engine=1"
printf '* replicate\n' >"$E2E_DIR/rep.layout"
out=$("$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" --model "$MODEL" \
	--layout "$E2E_DIR/rep.layout" 2>&1) && fail "another layout was served: $out"
expect_has "layout hash differs" "$out" "rules_hash: daemon="
# the preset's own file given as --layout is the same layout
out=$("$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" --model "$MODEL" \
	--layout "$(dirname "$0")/../../proto/plan/layouts/llama.layout" 2>&1) ||
	fail "the preset given as a file was refused: $out"

# another model (a second wcgen with another seed): the checkpoint differs
"$BIN/wcgen" tiny --out "$E2E_DIR/other" --seed 7 >/dev/null 2>&1 || fail "wcgen other"
out=$("$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" --model "$E2E_DIR/other" 2>&1) &&
	fail "an engine of another model was served: $out"
echo "$out"
expect_has "mismatch" "$out" "identity mismatch"
expect_has "model path values" "$out" "$E2E_DIR/other"
expect_has "model path values" "$out" "$MODEL"

# JSON error for scripts
out=$("$BIN/wcattach" --json --device "$DEVICE" --runtime-dir "$RUNDIR" --model "$MODEL" \
	--tp-size 2 2>/dev/null) && fail "mismatch accepted"
expect_has "json error" "$out" '"step":"hello"'
echo "ok"
