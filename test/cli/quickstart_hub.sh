#!/usr/bin/env bash
# The README's quick start, on a Hugging Face hub cache snapshot: a
# snapshots/<rev>/ directory whose files are symlinks into blobs/ (as
# huggingface_hub lays them out), made here from a wcgen model. inspect,
# start, attach with the engine's identity and verify, metrics, stop.
. "$(dirname "$0")/../lib/lib.sh"
for b in wcgen wcctl wcd wcattach; do [ -x "$BIN/$b" ] || skip "$b not built"; done
T=$(tmpdir)
trap '"$BIN/wcctl" stop --all --runtime-dir "$T/run" >/dev/null 2>&1; rm -rf "$T"' EXIT
"$BIN/wcgen" tiny --out "$T/gen" --shard-size 3MB >/dev/null || fail "wcgen"
HUB=$T/hub/models--acme--tiny
mkdir -p "$HUB/blobs" "$HUB/snapshots/0123abcd" "$HUB/refs"
echo 0123abcd >"$HUB/refs/main"
for f in "$T"/gen/*; do
	h=$(sha256sum "$f" | cut -c1-64)
	mv "$f" "$HUB/blobs/$h"
	ln -s "../../blobs/$h" "$HUB/snapshots/0123abcd/$(basename "$f")"
done
M=$HUB/snapshots/$(cat "$HUB/refs/main")
[ -L "$M/config.json" ] || fail "the snapshot is not made of links"

out=$("$BIN/wcctl" inspect "$M") || fail "inspect of a hub snapshot: $out"
expect_has "inspect" "$out" "verdict:       unquantized (verified)"
"$BIN/wcctl" start --model "$M" --tp-size 2 --backend host --runtime-dir "$T/run" \
	--timeout 60 >"$T/start.out" 2>&1 || fail "start: $(cat "$T/start.out")"
for r in 0 1; do
	out=$("$BIN/wcattach" --device host:$r --runtime-dir "$T/run" --model "$M" \
		--tp-size 2 --tp-rank $r --verify) || fail "attach rank $r: $out"
	expect_has "attach rank $r" "$out" "attached to host-$r"
done
"$BIN/wcctl" metrics --device host-1 --runtime-dir "$T/run" | grep -q '^wcache_state{device="host-1",rank="1",.*,state="ready"} 1$' ||
	fail "metrics of rank 1"
"$BIN/wcctl" stop --all --runtime-dir "$T/run" >/dev/null 2>&1 || fail "stop"
