#!/usr/bin/env bash
# A FIFO where a checkpoint file should be is refused at once, never opened
# blocking (issue 15, item 4, files): wcd and wcctl inspect on a model
# whose config.json, shard or rules file is a FIFO with no writer exit with
# a message naming the file; before, open() waited for a writer for good.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/wcd.bash"
wcd_init secfifo
cp -r "$W/model" "$W/cfg"
rm "$W/cfg/config.json"
mkfifo "$W/cfg/config.json"
cp -r "$W/model" "$W/shard"
first=$(cd "$W/shard" && ls *.safetensors | head -n 1)
rm "$W/shard/$first"
mkfifo "$W/shard/$first"
mkfifo "$W/rules.fifo"

# bounded: a hang is exit 124 (or 137: before, wcd blocked in open() ignored SIGTERM), reported as such
run() { timeout -k 2 20 "$@" 2>&1; }
out=$(run "$BIN/wcd" --model "$W/cfg" --device host:fifo1 --runtime-dir "$RT"); rc=$?
echo "$out"
[ "$rc" = 124 ] || [ "$rc" = 137 ] && fail "wcd hung on a FIFO config.json"
expect_eq "wcd on a FIFO config.json: exit" "$rc" 1
expect_has "config refusal" "$out" "config.json: not a regular file (a FIFO)"

out=$(run "$BIN/wcd" --model "$W/shard" --device host:fifo2 --runtime-dir "$RT"); rc=$?
echo "$out"
[ "$rc" = 124 ] || [ "$rc" = 137 ] && fail "wcd hung on a FIFO shard"
expect_eq "wcd on a FIFO shard: exit" "$rc" 1
expect_has "shard refusal" "$out" "$first: not a regular file"

out=$(run "$BIN/wcctl" inspect "$W/shard"); rc=$?
[ "$rc" = 124 ] || [ "$rc" = 137 ] && fail "wcctl inspect hung on a FIFO shard"
[ "$rc" != 0 ] || fail "wcctl inspect accepted a FIFO shard: $out"
expect_has "inspect refusal" "$out" "not a regular file"

out=$(run "$BIN/wcd" --model "$W/model" --rules "$W/rules.fifo" --device host:fifo3 --runtime-dir "$RT"); rc=$?
echo "$out"
[ "$rc" = 124 ] || [ "$rc" = 137 ] && fail "wcd hung on a FIFO rules file"
expect_eq "wcd on a FIFO rules file: exit" "$rc" 1
expect_has "rules refusal" "$out" "not a regular file"
echo ok
