#!/usr/bin/env bash
# wcctl verify (issue 15, item 8): a shard rewritten in place with the same
# size, header and mtime is not seen by the identity (its checkpoint digest
# covers names, sizes, mtimes and headers, not bytes), so the daemon keeps
# serving the bytes it loaded and engines accept them; wcctl verify re-reads
# the files and reports the tensors that differ (exit 1), and all-match
# (exit 0) before the rewrite.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
e2e_init verify
e2e_start_wcd
V=(--device "$DEVICE" --runtime-dir "$RUNDIR")
out=$("$BIN/wcctl" verify "${V[@]}" 2>&1) || fail "verify of an untouched checkpoint: $out"
expect_has "all match" "$out" "every hash matches the files"
out=$("$BIN/wcctl" verify "${V[@]}" --json 2>&1) || fail "verify --json: $out"
expect_has "json" "$out" '"ok":true'

shard=$(ls "$MODEL"/*.safetensors | head -n 1)
cp -p "$shard" "$E2E_DIR/times"
python3 - "$shard" <<'PY'
import struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    f.seek(8 + n + 64)
    b = f.read(16)
    f.seek(8 + n + 64)
    f.write(bytes(x ^ 0xff for x in b))   # same size, same header
PY
touch -r "$E2E_DIR/times" "$shard"           # same mtime, to the ns
[ "$(stat -c %Y.%y "$shard")" = "$(stat -c %Y.%y "$E2E_DIR/times")" ] || fail "mtime not restored"

# the identity does not see it: an engine with the model is served
out=$("$BIN/wcattach" "${V[@]}" --model "$MODEL" --verify 2>&1) ||
	fail "the engine was refused (the digest saw the rewrite after all?): $out"

out=$("$BIN/wcctl" verify "${V[@]}" 2>&1); rc=$?
echo "$out"
expect_eq "verify after the rewrite: exit" "$rc" 1
expect_has "mismatch reported" "$out" "differ from the files in $MODEL"
out=$("$BIN/wcctl" verify "${V[@]}" --json 2>&1)
expect_has "json mismatch" "$out" '"mismatched":1'
echo ok
