#!/usr/bin/env bash
# `make run`: generate a small model with wcgen, serve it with wcd (the host
# backend where there is no GPU, or no CUDA build), attach and verify every
# tensor with wcattach, list the manifest, stop the daemon with SIGTERM.
# Prints what happened at each step; exits non-zero on any failure.
set -u
BUILD=${BUILD:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
bin=$top/$BUILD/bin
dir=$(mktemp -d /tmp/wcache-demo.XXXXXX)
run=$dir/run
pid=

cleanup() {
	if [ -n "$pid" ]; then
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

step() { printf '\n==> %s\n' "$*"; }
show_log() { [ -s "$dir/wcd.log" ] && sed 's/^/    wcd | /' "$dir/wcd.log"; }
fail() {
	printf '\nmake run: FAILED: %s\n' "$*" >&2
	show_log >&2
	exit 1
}

for t in wcgen wcd wcattach wcctl; do
	[ -x "$bin/$t" ] || fail "$bin/$t is not built (run make)"
done

# start_wcd DEVICE: starts wcd, waits up to 60 s for its ready file.
# Returns 1 if it exited first.
start_wcd() {
	: >"$dir/wcd.log"
	"$bin/wcd" --model "$dir/model" --device "$1" --runtime-dir "$run" \
		>"$dir/wcd.log" 2>&1 &
	pid=$!
	for ((i = 0; i < 6000; i++)); do
		ls "$run"/*.ready >/dev/null 2>&1 && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid"
			echo "    wcd exited with status $? before it was ready"
			pid=
			return 1
		fi
		sleep 0.01
	done
	fail "wcd was not ready after 60 s"
}

step "generating a tiny model with wcgen (into $dir/model)"
"$bin/wcgen" tiny --out "$dir/model" --shard-size 3MB || fail "wcgen tiny failed"

device=host:demo
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
	echo "    a GPU is present ($(nvidia-smi -L | head -n 1)); trying the CUDA backend"
	device=0
fi

step "starting wcd on device $device"
if ! start_wcd "$device"; then
	[ "$device" = host:demo ] && fail "wcd did not start"
	show_log
	echo "    falling back to the host backend"
	device=host:demo
	rm -rf "$run"
	start_wcd "$device" || fail "wcd did not start on the host backend"
fi
ready=$(ls "$run"/*.ready)
echo "    wcd pid $pid is ready: $ready"
sed 's/^/    ready | /' "$ready"

step "attaching with wcattach --verify (maps every pool, rechecks every hash)"
"$bin/wcattach" --runtime-dir "$run" --device "$device" --verify ||
	fail "wcattach --verify failed"

step "wcctl manifest (the first 8 lines)"
"$bin/wcctl" manifest --runtime-dir "$run" --device "$device" >"$dir/manifest.txt" ||
	fail "wcctl manifest failed"
head -n 8 "$dir/manifest.txt"
echo "    ... $(grep -vc '^#' "$dir/manifest.txt") tensors in all"

step "stopping wcd with SIGTERM"
kill -TERM "$pid"
wait "$pid"
rc=$?
p=$pid
pid=
[ "$rc" -eq 0 ] || fail "wcd exited with status $rc after SIGTERM"
left=$(ls "$run"/*.sock "$run"/*.ready 2>/dev/null)
[ -z "$left" ] || fail "wcd left files behind: $left"
echo "    wcd pid $p exited 0 and removed its socket and ready file"

step "wcd's log"
show_log
printf '\nmake run: OK (device %s)\n' "$device"
