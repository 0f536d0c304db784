#!/usr/bin/env bash
# wcctl inspect --tp-size: the per-rank layout without loading (KV heads
# replicated at tp 4, the fused views, padding), its refusals; wcd's own
# refusals of a layout: an unknown architecture at tp > 1, the vocabulary
# with padding off (--vocab-pad 0), heads that do not split.
. "$(dirname "$0")/../lib/lib.sh"
[ -x "$BIN/wcgen" ] && [ -x "$BIN/wcctl" ] && [ -x "$BIN/wcd" ] || skip "wcgen/wcctl/wcd not built"
d=$(tmpdir); trap 'rm -rf "$d"' EXIT
"$BIN/wcgen" tiny --out "$d/m" --headers-only >/dev/null || fail "wcgen"

out=$("$BIN/wcctl" inspect "$d/m" --tp-size 4 --rank 3) || fail "inspect exit $?: $out"
expect_has "rank line" "$out" "# rank 3: tp 3/4"
expect_has "47 entries" "$out" "47 tensors (8 views)"
expect_has "KV head 1 on rank 3" "$out" "model.layers.2.self_attn.k_proj.weight  BF16  [64, 256]"
expect_has "KV rows" "$out" "dim0  rows 64..128"
expect_has "o_proj by heads" "$out" "model.layers.0.self_attn.o_proj.weight  BF16  [256, 64]"
expect_has "o_proj cols" "$out" "dim1  cols 192..256"
expect_has "fused view" "$out" "model.layers.2.self_attn.qkv_proj.weight  BF16  [192, 256]"
expect_has "view parts" "$out" "view of 3: model.layers.2.self_attn.q_proj.weight .. model.layers.2.self_attn.v_proj.weight"
expect_has "padded" "$out" "rows 3072..4096  padded_rows 1024"
n=$("$BIN/wcctl" inspect "$d/m" --tp-size 2 | grep -c '^# rank')
expect_eq "every rank without --rank" "$n" 2

out=$("$BIN/wcctl" inspect "$d/m" --tp-size 8 2>&1); rc=$?
expect_eq "tp 8 exit" "$rc" 1
expect_has "tp 8" "$out" "4 heads (num_attention_heads) do not split over tp size 8"
out=$("$BIN/wcctl" inspect "$d/m" --ep-size 2 2>&1); rc=$?
expect_eq "ep on a dense model exit" "$rc" 1
expect_has "ep on a dense model" "$out" "ep size 2 but the layout names no expert count"

# wcd refuses before loading
rt=$d/rt; mkdir -p "$rt"
# (qwen2-tiny: 8 heads, 2 KV heads, tp 2 splits them, not its 515 rows;
# tiny's 4096 rows split wherever its heads do)
"$BIN/wcgen" qwen2-tiny --out "$d/q2" --headers-only >/dev/null || fail "wcgen qwen2-tiny"
out=$("$BIN/wcd" --model "$d/q2" --device host:lt --runtime-dir "$rt" --tp-size 2 --tp-rank 0 --vocab-pad 0 2>&1); rc=$?
expect_eq "vocab-pad 0 exit" "$rc" 1
expect_has "vocab-pad 0" "$out" "515 vocabulary rows do not split over tp size 2 and padding is off"
sed -i 's/"LlamaForCausalLM"/"GPT2LMHeadModel"/' "$d/m/config.json"
out=$("$BIN/wcd" --model "$d/m" --device host:lt --runtime-dir "$rt" --tp-size 2 --tp-rank 1 2>&1); rc=$?
expect_eq "unknown architecture exit" "$rc" 1
expect_has "unknown architecture" "$out" "no sharding preset for architecture 'GPT2LMHeadModel'"
expect_has "unknown architecture: the fix" "$out" "give a layout file"
# ... which a layout file fixes
cp "$(dirname "$0")/../../proto/plan/layouts/llama.layout" "$d/my.layout"
out=$("$BIN/wcctl" inspect "$d/m" --tp-size 2 --rank 1 --layout "$d/my.layout") || fail "inspect --layout: $out"
expect_has "--layout" "$out" "model.layers.0.self_attn.qkv_proj.weight  BF16  [256, 256]"
echo ok
