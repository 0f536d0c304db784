#!/usr/bin/env bash
# Files written by the reference writers (safetensors.torch/numpy save_file,
# transformers save_pretrained with an index; see test/data/make_reference.py)
# parse under our strict rules, and every tensor's XXH3-128 from
# `wcctl inspect --hashes` equals Python xxhash's over the bytes the
# reference loader returns, with the same dtype and shape. Skips until the
# reference data has been generated (it needs torch).
. "$(dirname "$0")/../lib/lib.sh"
ref=$WC_TOP/test/data/reference
[ -f "$ref/hashes.txt" ] || skip "no $ref/hashes.txt: run test/data/make_reference.py where torch is installed"
[ -x "$BIN/wcctl" ] || skip "wcctl not built"
d=$(tmpdir); trap 'rm -rf "$d"' EXIT

n=0
for f in "$ref"/*.safetensors; do
	"$BIN/wcctl" inspect "$f" --json --hashes >"$d/$(basename "$f").json" ||
		fail "$f rejected"
	n=$((n + 1))
done
[ -d "$ref/llama" ] || fail "no $ref/llama (save_pretrained output)"
[ -f "$ref/llama/model.safetensors.index.json" ] || fail "llama/ has no index"
"$BIN/wcctl" inspect "$ref/llama" --json --hashes >"$d/llama.json" || fail "llama/ rejected"

python3 - "$ref" "$d" <<'PY' || fail "hash comparison failed"
import json, os, sys
ref, d = sys.argv[1], sys.argv[2]
want = {}
for line in open(os.path.join(ref, "hashes.txt")):
    rel, name, dtype, shape, h = line.rstrip("\n").split("\t")
    want[(rel, name)] = (dtype, [int(x) for x in shape.split(",") if x], h)
got = {}
for f in os.listdir(d):
    j = json.load(open(os.path.join(d, f)))
    prefix = "llama/" if f == "llama.json" else ""
    for t in j["tensors"]:
        rel = prefix + j["shards"][t["shard"]]["file"]
        got[(rel, t["name"])] = (t["dtype"], t["shape"], t["xxh3_128"])
missing = sorted(set(want) - set(got))
extra = sorted(set(got) - set(want))
assert not missing, f"not parsed: {missing[:5]}"
assert not extra, f"not in hashes.txt: {extra[:5]}"
bad = [(k, want[k], got[k]) for k in want if want[k] != got[k]]
assert not bad, f"differ (want, got): {bad[:5]}"
print(f"{len(want)} tensors match: dtype, shape and XXH3-128")
PY
echo "ok: $n files + llama/"
