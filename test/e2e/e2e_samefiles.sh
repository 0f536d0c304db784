#!/usr/bin/env bash
# The identity is the checkpoint, not its path (issue 15, item 7): the same
# model reached through a bind mount (as in a container), a copy that keeps
# the files' times (cp -a) and a symbolic link is served; the refusal of
# another model still shows both paths; wcattach --same-path (the engine's
# wc_expect.same_path) refuses another path, naming model_path.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
e2e_init samefiles
mounted=
cleanup_mount() { [ -n "$mounted" ] && umount "$mounted" 2>/dev/null; e2e_cleanup; }
trap cleanup_mount EXIT
e2e_start_wcd
attach() { "$BIN/wcattach" --device "$DEVICE" --runtime-dir "$RUNDIR" "$@" 2>&1; }

cp -a "$MODEL" "$E2E_DIR/copy"
out=$(attach --model "$E2E_DIR/copy") || fail "a cp -a copy of the checkpoint was refused: $out"
expect_has "copy attach" "$out" "attached"

ln -s "$MODEL" "$E2E_DIR/link"
out=$(attach --model "$E2E_DIR/link") || fail "a link to the checkpoint was refused: $out"

mkdir "$E2E_DIR/bind"
if mount --bind "$MODEL" "$E2E_DIR/bind" 2>/dev/null; then
	mounted=$E2E_DIR/bind
	out=$(attach --model "$E2E_DIR/bind") || fail "the bind-mounted checkpoint was refused: $out"
	expect_has "bind attach" "$out" "attached"
	umount "$mounted" && mounted=
else
	echo "mount --bind is not allowed here: the bind case is covered by the copy"
fi

out=$(attach --model "$E2E_DIR/copy" --same-path) && fail "--same-path accepted another path: $out"
expect_has "same-path refusal" "$out" "model_path: daemon=$MODEL engine=$E2E_DIR/copy"
out=$(attach --model "$MODEL" --same-path) || fail "--same-path refused the same path: $out"

# a copy whose shard times changed is another checkpoint (the digest covers
# them): refused, with both paths shown
cp -r "$MODEL" "$E2E_DIR/touched"
touch -d '2001-01-01' "$E2E_DIR/touched/"*.safetensors
out=$(attach --model "$E2E_DIR/touched") && fail "a checkpoint with other file times was served: $out"
expect_has "digest refusal" "$out" "ckpt_digest"
expect_has "paths shown" "$out" "it serves $MODEL, this engine expects $E2E_DIR/touched"
echo ok
