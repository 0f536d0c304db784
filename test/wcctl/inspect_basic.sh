#!/usr/bin/env bash
# wcctl inspect: summary of a directory and of a single file, JSON output,
# --hashes equal to `xxhsum -H2` over each tensor's bytes, the quantization
# verdict, and a rejection with exit 1 and the parser's message.
. "$(dirname "$0")/../lib/lib.sh"
[ -x "$BIN/wcgen" ] && [ -x "$BIN/wcctl" ] || skip "wcgen/wcctl not built"
command -v xxhsum >/dev/null || skip "xxhsum not installed (package xxhash)"
d=$(tmpdir); trap 'rm -rf "$d"' EXIT
"$BIN/wcgen" tiny --out "$d/m" --shard-size 4MB --seed 3 >/dev/null || fail "wcgen"

out=$("$BIN/wcctl" inspect "$d/m") || fail "inspect exit $?: $out"
expect_has "summary" "$out" "architecture:  LlamaForCausalLM"
expect_has "summary" "$out" "tensors:       39"
expect_has "summary" "$out" "bytes:         9998848"
expect_has "summary" "$out" "shards:        3"
expect_has "summary" "$out" "verdict:       unquantized (verified)"
expect_has "summary" "$out" "BF16         39 tensors, 9998848 bytes"

# JSON parses and carries the layout; hashes equal xxhsum over the bytes.
"$BIN/wcctl" inspect "$d/m" --json --hashes >"$d/j.json" || fail "json exit $?"
python3 - "$d" <<'PY' || fail "json/hash check failed"
import json, subprocess, sys
d = sys.argv[1]
j = json.load(open(d + "/j.json"))
assert j["tensor_count"] == 39 and len(j["tensors"]) == 39, j["tensor_count"]
assert j["quantization"]["verified"] is True
shards = [s["file"] for s in j["shards"]]
checked = 0
for t in j["tensors"][::4]:
    with open(d + "/m/" + shards[t["shard"]], "rb") as f:
        f.seek(t["offset"])
        raw = f.read(t["bytes"])
    open(d + "/t.bin", "wb").write(raw)
    want = subprocess.run(["xxhsum", "-H2", d + "/t.bin"], capture_output=True,
                          text=True, check=True).stdout.split()[0]
    assert want == t["xxh3_128"], (t["name"], want, t["xxh3_128"])
    checked += 1
print("checked", checked, "tensor hashes against xxhsum -H2")
PY
# Text --hashes: one line per tensor, "HEX  NAME", same values as JSON.
"$BIN/wcctl" inspect "$d/m" --hashes >"$d/h.txt" || fail "hashes exit $?"
expect_eq "hash lines" "$(wc -l <"$d/h.txt")" "39"
h=$(grep '  lm_head.weight$' "$d/h.txt" | cut -d' ' -f1)
expect_has "json hash" "$(cat "$d/j.json")" "$h"

# A single shard file.
out=$("$BIN/wcctl" inspect "$d/m/model-00003-of-00003.safetensors") || fail "file: $out"
expect_has "file" "$out" "(file)"
expect_has "file" "$out" "tensors:       1"

# Llama-3-8B shapes (headers only, sparse data): 291 tensors, ~16 GB.
"$BIN/wcgen" llama-8b --out "$d/l8" --headers-only >/dev/null || fail "wcgen llama-8b"
out=$("$BIN/wcctl" inspect "$d/l8") || fail "llama-8b inspect exit $?: $out"
expect_has "llama-8b" "$out" "tensors:       291"
expect_has "llama-8b" "$out" "bytes:         16060522496"
expect_has "llama-8b" "$out" "shards:        4"

# The quantization verdict.
"$BIN/wcgen" tiny --out "$d/q" --quant awq --headers-only >/dev/null || fail "wcgen awq"
out=$("$BIN/wcctl" inspect "$d/q"); rc=$?
expect_eq "awq inspect exits 1 (REFUSED)" "$rc" 1
expect_has "awq" "$out" "verdict:       REFUSED: quantization method 'awq' is refused"
"$BIN/wcgen" tiny --out "$d/f" --quant fp8:128 --headers-only >/dev/null || fail "wcgen fp8"
out=$("$BIN/wcctl" inspect "$d/f") || fail "fp8 inspect exit $?"
expect_has "fp8" "$out" "verdict:       fp8 block-wise (verified)"
expect_has "fp8" "$out" "F8_E4M3"

# A rejection: exit 1 and the message naming the file.
printf '\x04\x00\x00\x00\x00\x00\x00\x00[1] ' >"$d/bad.safetensors"
out=$("$BIN/wcctl" inspect "$d/bad.safetensors" 2>&1); rc=$?
expect_eq "reject exit" "$rc" "1"
expect_has "reject" "$out" "bad.safetensors: header is an array, not a JSON object"
out=$("$BIN/wcctl" inspect "$d/none" 2>&1) && fail "missing path accepted"
expect_has "missing" "$out" "No such file or directory"
out=$("$BIN/wcctl" inspect 2>&1); expect_eq "usage exit" "$?" "2"
echo ok
