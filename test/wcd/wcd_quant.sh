#!/usr/bin/env bash
# The quantization gate in wcd, before anything is loaded: AWQ and
# per-tensor FP8 are refused with the message (exit 1, nothing published);
# block-wise FP8 starts; --allow-quant overrides loudly.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/wcd.bash"
wcd_init quant

gen() { "$BIN/wcgen" tiny --out "$W/$1" --quant "$2" >"$W/gen-$1.log" 2>&1 ||
	{ cat "$W/gen-$1.log"; fail "wcgen --quant $2"; }; }
gen awq awq
gen fp8t fp8
gen fp8b fp8:128

for m in awq fp8t; do
	out=$("$BIN/wcd" --model "$W/$m" --device host:q --runtime-dir "$RT" 2>&1); rc=$?
	expect_eq "$m exit" "$rc" 1
	expect_has "$m message" "$out" "is refused"
	expect_has "$m message" "$out" "unquantized, fp8 with weight_block_size"
	expect_has "$m message" "$out" "without the weight cache"
	[ ! -e "$RT/host-q.sock" ] && [ ! -e "$RT/host-q.ready" ] || fail "$m: refused start published files"
	case $out in *"phase read"*) fail "$m: loaded before refusing" ;; esac
done
expect_has "awq names the method" "$("$BIN/wcd" --model "$W/awq" --device host:q --runtime-dir "$RT" 2>&1)" "'awq'"
out=$("$BIN/wcd" --model "$W/fp8t" --device host:q --runtime-dir "$RT" 2>&1)
expect_has "per-tensor fp8" "$out" "per-tensor fp8 is not verified"

# Block-wise FP8 is verified: it loads and serves.
wcd_bg "$W/b.log" --model "$W/fp8b" --device host:q --runtime-dir "$RT"; b=$LAST
wait_file "$RT/host-q.ready" "$b" || { cat "$W/b.log"; fail "block-wise fp8 did not start"; }
# 67 + qkv_proj and gate_up_proj views of 4 layers, and of their scales
expect_has "fp8 tensors" "$(cat "$RT/host-q.ready")" "tensors=83"
kill -TERM "$b"; wait_exit "$b"; expect_eq "fp8b exit" "$RC" 0
# tp 2: down_proj's 688 columns split at 344, inside a 128-column block: refused
out=$("$BIN/wcd" --model "$W/fp8b" --device host:q --runtime-dir "$RT" --tp-size 2 --tp-rank 1 2>&1)
expect_eq "fp8 tp 2 exit" "$?" 1
expect_has "fp8 split off the blocks" "$out" "tensor 'model.layers.0.mlp.down_proj.weight_scale_inv': its weight's slice [344, 688) of dim 1 (size 688) is not aligned to the FP8 block of 128"

# --allow-quant: served, with a loud warning in the log.
wcd_bg "$W/o.log" --model "$W/awq" --device host:q --runtime-dir "$RT" --allow-quant awq; o=$LAST
wait_file "$RT/host-q.ready" "$o" || { cat "$W/o.log"; fail "--allow-quant awq did not start"; }
expect_has "override warning" "$(cat "$W/o.log")" "WARN  wcd: QUANTIZATION OVERRIDE: serving 'awq'"
kill -TERM "$o"; wait_exit "$o"; expect_eq "override exit" "$RC" 0
echo ok
