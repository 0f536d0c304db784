#!/usr/bin/env bash
# wcctl manifest against a real wcd agrees with the files on disk: every
# tensor's name, dtype, shape, bytes and XXH3-128 equal what `wcctl inspect
# --hashes --json` reads from the safetensors files, and for a few tensors
# the hash equals `xxhsum -H2` of the bytes cut out of the shard at the
# offset inspect reports.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
e2e_init manifest
e2e_start_wcd

"$BIN/wcctl" manifest --device "$DEVICE" --runtime-dir "$RUNDIR" --json \
	>"$E2E_DIR/served.json" || fail "wcctl manifest --json failed"
"$BIN/wcctl" manifest --device "$DEVICE" --runtime-dir "$RUNDIR" \
	>"$E2E_DIR/served.txt" || fail "wcctl manifest failed"
"$BIN/wcctl" inspect "$MODEL" --hashes --json >"$E2E_DIR/files.json" ||
	fail "wcctl inspect --hashes --json failed"

python3 - "$E2E_DIR" "$MODEL" <<'PY' || fail "the served manifest differs from the files"
import json, subprocess, sys
d, model = sys.argv[1], sys.argv[2]
served = json.load(open(d + "/served.json"))
files = json.load(open(d + "/files.json"))
s = {t["name"]: t for t in served["tensors"] if not t["view"]}
views = [t for t in served["tensors"] if t["view"]]
f = {t["name"]: t for t in files["tensors"]}
assert set(s) == set(f), "names differ: %s" % sorted(set(s) ^ set(f))
# each fused view: the stored tensors of its range, in offset order, tile
# it, and its hash is xxhsum of their file bytes concatenated
def file_bytes(n):
    t = f[n]
    with open(model + "/" + files["shards"][t["shard"]]["file"], "rb") as fh:
        fh.seek(t["offset"])
        return fh.read(t["bytes"])
for v in views:
    parts = sorted((t for t in s.values() if t["pool"] == v["pool"] and
                    v["offset"] <= t["offset"] < v["offset"] + v["bytes"]),
                   key=lambda t: t["offset"])
    at = v["offset"]
    for t in parts:
        assert t["offset"] == at, "%s: hole or overlap at %s" % (v["name"], t["name"])
        at += t["bytes"]
    assert at == v["offset"] + v["bytes"], v["name"]
    b = b"".join(file_bytes(t["name"]) for t in parts)
    out = subprocess.run(["xxhsum", "-H2", "-"], input=b, capture_output=True,
                         check=True).stdout.decode().split()[0]
    assert out == v["xxh3_128"], "%s: xxhsum of its parts %s, served %s" % (v["name"], out, v["xxh3_128"])
assert len(views) == 8, "tiny has qkv_proj and gate_up_proj on 4 layers: %d views" % len(views)
for n, t in f.items():
    h = t["xxh3_128"]
    for k in ("dtype", "shape", "bytes"):
        assert s[n][k] == t[k], "%s %s: served %r, file %r" % (n, k, s[n][k], t[k])
    assert s[n]["xxh3_128"] == h, "%s hash: served %s, file %s" % (n, s[n]["xxh3_128"], h)
# the text form carries the same hashes in its last column
txt = [l.split("  ") for l in open(d + "/served.txt") if not l.startswith("#")]
assert len(txt) == len(s) + len(views), "text lists %d tensors, json %d" % (len(txt), len(s) + len(views))
for cols in txt:
    assert cols[-1].strip() == {t["name"]: t for t in served["tensors"]}[cols[0]]["xxh3_128"], cols
# an independent hash of the raw bytes for the first, a middle and the last
shards = files["shards"]
names = sorted(f)
for n in (names[0], names[len(names) // 2], names[-1]):
    t = f[n]
    with open(model + "/" + shards[t["shard"]]["file"], "rb") as fh:
        fh.seek(t["offset"])
        b = fh.read(t["bytes"])
    out = subprocess.run(["xxhsum", "-H2", "-"], input=b, capture_output=True,
                         check=True).stdout.decode().split()[0]
    assert out == s[n]["xxh3_128"], "%s: xxhsum %s, served %s" % (n, out, s[n]["xxh3_128"])
print("manifest of %d tensors and %d views matches the files" % (len(s), len(views)))
PY
echo ok
