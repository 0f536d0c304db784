#!/usr/bin/env bash
# The splice fill's read-ahead thread (fill.c) where its own reader cannot
# work, through the test hook WCD_TEST_RA_FAIL:
#  - open: the reader cannot be set up; drain: its splice into /dev/null
#    fails (EIO) once the shard side has filled the pipe. Either way the
#    load completes with every hash equal to the file's (the fallback is
#    POSIX_FADV_WILLNEED: the bytes are the workers'), on a model of 4
#    shards and on qwen2-tiny cut into 7 (odd offsets and sizes), and the fallback is logged
#    exactly once, naming why (and for drain, the shard and offset);
#  - thread: the thread cannot be made (as if pthread_create failed): the
#    load completes with the file's hashes on the kernel's read-ahead,
#    logged once;
#  - --read-ahead 0 turns the thread off: with the hook set nothing is
#    logged about it, and the hashes are the file's; --read-ahead 64K
#    (less than a piece) still completes;
#  - --read-ahead values a user can get wrong exit 2 with a sentence that
#    names the flag and the value (not a number, a bad suffix, negative,
#    empty, past 16G, and one whose K/M/G would wrap past 2^64 to 0).
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/wcd.bash"
wcd_init ra
[ -x "$BIN/wcctl" ] || skip "wcctl is not built"

# serve NAME MODEL [ENV...] -- [ARGS...]: loads MODEL on host:NAME, checks
# every hash against the file's, stops it; its log in $W/NAME.log
serve() {
	local name=$1 model=$2 envs=() p
	shift 2
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
	shift
	env "${envs[@]}" "$BIN/wcd" --model "$model" --device "host:$name" \
		--runtime-dir "$RT" "$@" >"$W/$name.log" 2>&1 &
	p=$!
	WCD_PIDS+=("$p")
	wait_file "$RT/host-$name.ready" "$p" || { cat "$W/$name.log"; fail "$name: not ready"; }
	"$BIN/wcctl" manifest --runtime-dir "$RT" --device "host:$name" | grep -v '^#' |
		awk '{print $NF "  " $1}' | sort -k2 |
		grep -v -e '\.qkv_proj\.' -e '\.gate_up_proj\.' >"$W/$name.txt" ||
		fail "$name: wcctl manifest"
	kill -TERM "$p"; wait_exit "$p"
	expect_eq "$name: exit" "$RC" 0
	[ -e "$model.hashes" ] || "$BIN/wcctl" inspect "$model" --hashes | sort -k2 >"$model.hashes"
	cmp -s "$W/$name.txt" "$model.hashes" ||
		{ diff "$W/$name.txt" "$model.hashes"; fail "$name: hashes differ from the file's"; }
	expect_has "$name: splice" "$(cat "$W/$name.log")" "direct into the pools, splice"
}
# ra_lines NAME: the read-ahead lines of NAME's log
ra_lines() { grep -c 'read-ahead: ' "$W/$1.log"; }

"$BIN/wcgen" qwen2-tiny --out "$W/q2" --shard-size 100KB >"$W/q2gen.log" 2>&1 ||
	{ cat "$W/q2gen.log"; fail "wcgen qwen2-tiny"; }
expect_eq "q2 shards" "$(ls "$W"/q2/*.safetensors | wc -l | awk '$1 > 4 {print "many"}')" many

for m in "$W/model" "$W/q2"; do
	t=${m##*/}
	serve "$t-ok" "$m" --
	expect_eq "$t: no fallback without the hook" "$(ra_lines "$t-ok")" 0
	serve "$t-open" "$m" WCD_TEST_RA_FAIL=open --
	expect_eq "$t open: logged once" "$(ra_lines "$t-open")" 1
	expect_has "$t open: the line" "$(cat "$W/$t-open.log")" \
		"read-ahead: cannot set up its reader (WCD_TEST_RA_FAIL=open: Too many open files): POSIX_FADV_WILLNEED instead"
	serve "$t-drain" "$m" WCD_TEST_RA_FAIL=drain --
	expect_eq "$t drain: logged once" "$(ra_lines "$t-drain")" 1
	line=$(grep 'read-ahead: ' "$W/$t-drain.log")
	re="read-ahead: reading ($m/[^ ]+) at offset ([0-9]+) failed \(Input/output error\): POSIX_FADV_WILLNEED for the rest of the load"
	[[ $line =~ $re ]] || fail "$t drain: not the line: $line"
	[ -f "${BASH_REMATCH[1]}" ] || fail "$t drain: ${BASH_REMATCH[1]} is not a shard"
	serve "$t-thread" "$m" WCD_TEST_RA_FAIL=thread --
	expect_eq "$t thread: logged once" "$(ra_lines "$t-thread")" 1
	expect_has "$t thread: the line" "$(cat "$W/$t-thread.log")" \
		"read-ahead: its job cannot be queued on the worker pool (Resource temporarily unavailable): the kernel's read-ahead only"
	serve "$t-off" "$m" WCD_TEST_RA_FAIL=open -- --read-ahead 0
	expect_eq "$t --read-ahead 0: no thread, nothing logged" "$(ra_lines "$t-off")" 0
	serve "$t-small" "$m" WCD_TEST_RA_FAIL=drain -- --read-ahead 64K
	expect_eq "$t --read-ahead 64K: logged once" "$(ra_lines "$t-small")" 1
done

for v in abc 1X -5 " -5" "" 64KQ 17179869184G 18446744073709551616; do
	out=$("$BIN/wcd" --model "$W/model" --device host:bad --runtime-dir "$RT" --read-ahead "$v" 2>&1)
	expect_eq "--read-ahead '$v': exit" "$?" 2
	expect_has "--read-ahead '$v'" "$out" "bad --read-ahead '$v': use a number of bytes with an optional K, M or G (e.g. 256M)"
done
out=$("$BIN/wcd" --model "$W/model" --device host:bad --runtime-dir "$RT" --read-ahead 16G1 2>&1)
expect_eq "--read-ahead 16G1: exit" "$?" 2
out=$("$BIN/wcd" --model "$W/model" --device host:bad --runtime-dir "$RT" --read-ahead 16385M 2>&1)
expect_eq "--read-ahead 16385M: exit" "$?" 2
expect_has "--read-ahead 16385M" "$out" "--read-ahead 16385M is over 16G: use at most 16G (0 turns it off)"
echo ok
