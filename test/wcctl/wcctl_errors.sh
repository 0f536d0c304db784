#!/usr/bin/env bash
# Every wcctl start/status/stop/clean error a user can hit without a running
# daemon: each names the wrong value and what to do, with its exit status.
source "$(dirname "$0")/../lib/lib.sh"
source "$(dirname "$0")/../lib/wcctl_lib.bash"
[ -x "$WCCTL" ] || fail "no $WCCTL"

# check WHAT WANT_STATUS NEEDLE -- CMD...
check() {
	local what=$1 want=$2 needle=$3 out rc
	shift 4
	out=$("$@" 2>&1); rc=$?
	expect_eq "$what: status" "$rc" "$want"
	expect_has "$what" "$out" "$needle"
}
S=("$WCCTL" start --model "$T/m" --backend host --runtime-dir "$RUN" --wcd "$FAKE")

for c in start status stop clean; do
	out=$("$WCCTL" $c --help) || fail "$c --help failed"
	expect_has "$c --help" "$out" "usage: wcctl $c"
done
check "unknown command" 2 "unknown command 'bogus'" -- "$WCCTL" bogus
check "no --model" 2 "--model DIR and --tp-size T are required" -- "$WCCTL" start --tp-size 2
check "bad --tp-size" 2 "--tp-size 'x' is not a whole number in 1..4096" -- "${S[@]}" --tp-size x
check "zero --tp-size" 2 "--tp-size '0' is not a whole number" -- "${S[@]}" --tp-size 0
check "bad --timeout" 2 "--timeout '-1' is not a number of seconds above 0" -- "${S[@]}" --tp-size 1 --timeout -1
check "bad --backend" 2 "--backend 'tpu' is not cuda or host" -- "${S[@]}" --tp-size 1 --backend tpu
check "stray argument" 2 "unexpected argument 'extra'; put wcd options after --" -- "${S[@]}" --tp-size 1 extra
check "prefix without host" 2 "--device-prefix applies to --backend host only" -- \
	"$WCCTL" start --model "$T/m" --tp-size 1 --device-prefix x
check "node rank past nnodes" 2 "--node-rank 2 does not exist with --nnodes 2; use 0..1" -- \
	"${S[@]}" --tp-size 2 --nnodes 2 --node-rank 2
check "more ranks than GPUs" 2 "would run 4 ranks (1 pp x 4 tp) but has 2 GPUs" -- \
	"${S[@]}" --tp-size 4 --num-gpus 2
check "bad --device-prefix" 2 "--device-prefix 'a/b' must be at most 24 characters of A-Z" -- "${S[@]}" --tp-size 1 --device-prefix 'a/b'
if ! command -v nvidia-smi >/dev/null; then
	check "no GPU" 1 "no GPU found" -- "$WCCTL" start --model "$T/m" --tp-size 1 --runtime-dir "$RUN"
fi
touch "$T/file"
check "runtime dir is a file" 1 "cannot create the runtime directory $T/file/x" -- \
	"$WCCTL" start --model "$T/m" --backend host --tp-size 1 --runtime-dir "$T/file/x"
check "template without {device}" 1 "must contain {device} exactly once" -- \
	env WCACHE_SOCKET_TEMPLATE=/tmp/nodevice "$WCCTL" start --model "$T/m" --backend host --tp-size 1
check "template with {device} in a directory" 2 "must be an absolute path with {device} in its file name" -- \
	env WCACHE_SOCKET_TEMPLATE=/tmp/{device}/x "$WCCTL" status
check "stop without a target" 2 "give exactly one of --device D or --all" -- "$WCCTL" stop --runtime-dir "$RUN"
check "stop with both" 2 "give exactly one of --device D or --all" -- "$WCCTL" stop --all --device host --runtime-dir "$RUN"
check "stop bad device" 2 "unknown device 'gpu0'" -- "$WCCTL" stop --device 'gpu0' --runtime-dir "$RUN"
check "stop bad timeout" 2 "--timeout 'soon' is not a number of seconds" -- "$WCCTL" stop --all --timeout soon
check "stop nothing" 3 "no daemon is running" -- "$WCCTL" stop --all --runtime-dir "$RUN"
check "status bad timeout" 2 "--timeout-ms '0' is not 1..600000" -- "$WCCTL" status --timeout-ms 0
check "status nothing" 3 "no wcache daemon found" -- "$WCCTL" status --runtime-dir "$RUN"
check "clean nothing" 0 "removed 0 files of 0 dead daemons" -- "$WCCTL" clean --runtime-dir "$RUN"
echo ok
