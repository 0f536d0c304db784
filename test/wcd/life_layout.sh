#!/usr/bin/env bash
# An update keeps the layout the engines bound (issue 15, item 6): a daemon
# serving wcgen tiny refuses `wcctl update --model` of a wcgen llama-1b
# directory (same architecture and dtype, other tensors and shapes), listing
# the first differences, and keeps serving version 1; a re-generated tiny
# (other weights, same layout) is accepted; --allow-layout-change publishes
# llama-1b on purpose.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
e2e_init layout
# headers only (sparse holes): the refusal comes before any byte is read
"$BIN/wcgen" llama-1b --headers-only --out "$E2E_DIR/big" >/dev/null 2>&1 || fail "wcgen llama-1b"
"$BIN/wcgen" llama-gqa --out "$E2E_DIR/gqa" >/dev/null 2>&1 || fail "wcgen llama-gqa"
"$BIN/wcgen" tiny --out "$E2E_DIR/tiny2" --seed 9 >/dev/null 2>&1 || fail "wcgen tiny --seed 9"
e2e_start_wcd
W=(--device "$DEVICE" --runtime-dir "$RUNDIR")
version() { "$BIN/wcctl" status "${W[@]}" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["version"])'; }

out=$("$BIN/wcctl" update "${W[@]}" --model "$E2E_DIR/big" 2>&1); rc=$?
echo "$out"
expect_eq "layout-changing update: exit" "$rc" 1
expect_has "refusal" "$out" "changes the layout the engines bound"
expect_has "refusal names a tensor" "$out" "model.embed_tokens.weight: BF16["
expect_has "refusal says how" "$out" "--allow-layout-change"
expect_eq "still version 1" "$(version)" 1

out=$("$BIN/wcctl" update "${W[@]}" --model "$E2E_DIR/tiny2" 2>&1) ||
	fail "an update with the same layout was refused: $out"
expect_eq "version 2" "$(version)" 2

# (a small model of other shapes: llama-1b would load 2.5 GB)
out=$("$BIN/wcctl" update "${W[@]}" --model "$E2E_DIR/gqa" 2>&1) && fail "llama-gqa was published: $out"
expect_has "gqa refusal" "$out" "changes the layout the engines bound"
out=$("$BIN/wcctl" update "${W[@]}" --model "$E2E_DIR/gqa" --allow-layout-change 2>&1) ||
	fail "--allow-layout-change was refused: $out"
expect_eq "version 3" "$(version)" 3
out=$("$BIN/wcctl" sleep --level 1 --allow-layout-change "${W[@]}" 2>&1); rc=$?
expect_eq "--allow-layout-change on sleep: exit" "$rc" 2
echo ok
