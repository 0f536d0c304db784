#!/usr/bin/env bash
# The engine's identity agrees with wcd's beyond tp 1: a tp 2 / pp 2 rank
# and a rules file are accepted when the engine expects the same and refused
# (naming the field) when it does not; a daemon started with --no-hash
# serves, and verify says there is nothing to check against.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
e2e_init ranks

# tp 2, rank 1 (the llama preset splits q/k/v/o/gate/up/down, embeddings)
e2e_start_wcd --tp-size 2 --tp-rank 1
out=$("$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" --verify \
	--model "$MODEL" --tp-size 2 --tp-rank 1 2>&1) || fail "tp 2 rank 1 refused: $out"
expect_has "tp 2 rank 1" "$out" "all hashes match"
out=$("$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" \
	--model "$MODEL" --tp-size 2 --tp-rank 0 2>&1) && fail "rank 0 served rank 1: $out"
expect_has "rank mismatch" "$out" "tp_rank: daemon=1 engine=0"
kill "$WCD_PID"; wait "$WCD_PID" 2>/dev/null

# pp 2, rank 1 with a rules file that keeps everything replicated
printf 'model.layers.*.mlp.* replicate\n' >"$E2E_DIR/rules"
e2e_start_wcd --pp-size 2 --pp-rank 1 --rules "$E2E_DIR/rules"
out=$("$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" --verify \
	--model "$MODEL" --pp-size 2 --pp-rank 1 --rules "$E2E_DIR/rules" 2>&1) ||
	fail "pp 2 rank 1 with rules refused: $out"
expect_has "pp 2 rank 1" "$out" "all hashes match"
out=$("$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" \
	--model "$MODEL" --pp-size 2 --pp-rank 1 2>&1) && fail "served without the rules: $out"
expect_has "rules mismatch" "$out" "rules_hash"
kill "$WCD_PID"; wait "$WCD_PID" 2>/dev/null

# --no-hash: attach works, verify has nothing to compare with
e2e_start_wcd --no-hash
out=$("$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" 2>&1) ||
	fail "attach to a --no-hash daemon failed: $out"
out=$("$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" --verify 2>&1) &&
	fail "verify passed without hashes: $out"
expect_has "verify without hashes" "$out" "--no-hash"
out=$("$BIN/wcctl" manifest --device "$DEVICE" --runtime-dir "$RUNDIR" --json) ||
	fail "wcctl manifest of a --no-hash daemon failed"
expect_has "manifest without hashes" "$out" '"xxh3_128":null'
echo ok
