#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What runs on the GPU machine (the `run` tool), one phase per call, from the
# repository root, with build/ carried from the build machine. Logs go to
# $OUT (at most 8 files come back).
#
#   bench/gpu/gpu_run.sh PHASE, PHASE one of:
#
#   probe          machine facts, the GPU tests, the H2D and hash ceilings
#                  (C and torch), the reference checkpoint
#   e2e            every GPU test, wcd end to end included (and on the
#                  reference checkpoints when present)
#   bench          the load benchmarks on wcgen llama-8b: warm and cold load
#                  against their limits, attach x100 against torch CUDA IPC,
#                  daemon memory
#   handover       wcgen llama-8b, warm: spawn to ready against bytes / H2D
#                  ceiling; wcctl restart with an engine attached (plain and
#                  --verify hash) against stop-and-reload; level-1
#                  sleep/wake against D2H/H2D ceilings, by default and with
#                  wcd --sleep-arena keep
#   sleep_copy     the ways to sleep at copy speed (bench/cuda/sleepcopy),
#                  the daemon's level-1 sleep/wake, restarts with an engine
#   startup        where spawn to ready goes: bench/cuda/startprobe (each
#                  CUDA step alone, with and without a second process
#                  holding the driver), wcd's spawn-to-ready timeline
#                  (--log-level debug), the H2D ceiling; then a level-1
#                  sleep after two stop-and-reloads, with /proc/vmstat
#   startup_ab     first touch of fresh memory (startprobe touch), wcd spawn
#                  to ready against the build before ($WCD_BASE),
#                  interleaved, with the probe's lower bound in the same
#                  run; a small staging sweep; the sleep after two
#                  stop-and-reloads again
#   startup_bound  GPU tests, spawn to ready beside its bound, the load's gap
#                  to H2D
#   wake_wait      a level-1 wake as its client waits for it: wcctl wake's
#                  wall time before ($WCD_BASE), with the free after the
#                  reply ($WCD_FREE) and the build's, alternated
#   hashing        whole tensors hashed side by side: spawn to ready,
#                  restart --verify hash, sleep/wake, before ($WCD_BASE) and
#                  after, alternated
#   sleep_pipeline the sleep's pipeline: bench/cuda/sleepprep QUICK=1 (warms
#                  64 GiB, then ways of preparing and copying 16 GiB beside
#                  the D2H ceiling), then wcd's level-1 sleep of llama-8b
#                  before ($WCD_BASE) and after, alternated
#
# The phases were named after the work that added them until issue 28;
# bench/RESULTS.md's history keeps the old names: handover3 is handover
# (the first handover phase, a subset of it, is gone), handover2
# sleep_copy, startup2 startup_ab, startup3 startup_bound, wake5
# wake_wait, hash6 hashing, sleep4 sleep_pipeline.
set -u
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export BUILD=${BUILD:-build} PYTHONUNBUFFERED=1

probe() {
	{
		date -u
		nvidia-smi
		nvidia-smi -L
		uname -a
		lscpu | grep -E 'Model name|^CPU\(s\)|Thread|NUMA node\(s\)'
		grep -E 'MemTotal|Huge' /proc/meminfo
		ulimit -l
		df -hT /tmp /root . 2>&1
		python3 bench/gpu/gpu_peers.py env
	} >"$OUT/probe.log" 2>&1
	cat "$OUT/probe.log"
	test/run.sh $BUILD/test/gpu_* 2>&1 | tee "$OUT/tests.log"
	for t in $BUILD/test/gpu_*; do echo "== $t"; "$t"; echo "rc=$?"; done >"$OUT/tests_verbose.log" 2>&1
	grep -E '^(mode|  |device|1 GiB|io_uring)|rc=' "$OUT/tests_verbose.log"
	$BUILD/bench/gpu_h2d --gib 16 2>&1 | tee "$OUT/h2d.log"
	python3 bench/gpu/gpu_peers.py h2d --gib 16 2>&1 | tee -a "$OUT/h2d.log"
	reference
}

reference() {
	[ -f test/data/make_reference.py ] || return 0
	if [ ! -d /tmp/ref ]; then
		python3 test/data/make_reference.py /tmp/ref >"$OUT/reference.log" 2>&1 &&
			tar -C /tmp -czf "$OUT/reference.tgz" ref
		tail -5 "$OUT/reference.log"
	fi
}

e2e() {
	reference
	local extra=""
	for d in /tmp/ref/*/ test/data/reference/*/; do
		[ -f "$d/config.json" ] && extra="$extra ${d%/}"
	done
	echo "reference models: ${extra:-none}"
	WC_GPU_MODELS="$extra" test/run.sh $BUILD/test/gpu_* 2>&1 | tee "$OUT/e2e.log"
	WC_GPU_MODELS="$extra" $BUILD/test/gpu_e2e >"$OUT/e2e_verbose.log" 2>&1
	echo "gpu_e2e rc=$?"; tail -n 20 "$OUT/e2e_verbose.log"
}

# Starts wcd on $1 in runtime dir $2 (extra options after), waits for ready.
wcd_up() {
	local m=$1 rd=$2; shift 2
	rm -rf "$rd"; mkdir -p "$rd"
	setsid ${BUILD_WCD:-$BUILD/bin/wcd} --model "$m" --device 0 --runtime-dir "$rd" "$@" \
		>"$rd/wcd.log" 2>&1 </dev/null &
	WCD_PID=$!
	for _ in $(seq 600); do
		ls "$rd"/*.ready >/dev/null 2>&1 && return 0
		kill -0 $WCD_PID 2>/dev/null || break
		sleep 0.2
	done
	echo "wcd did not get ready:"; tail -20 "$rd/wcd.log"; return 1
}

# Loader tuning: the daemon's loader against a candidate ($WCD_ALT, a wcd
# built from a modified tools/wcd/load.c), warm and cold, over slot counts
# and hash threads; then attach and memory on the candidate.
tune() {
	local m=/root/m8b rd=/tmp/wcrun alt=${WCD_ALT:-$BUILD/bin/wcd} uuid
	gpu_env
	{
		$BUILD/bench/gpu_h2d --mem
		WCACHE_CUDA_KEEP_LIMITS=1 $BUILD/bench/gpu_h2d --mem
		[ -f $m/config.json ] || $BUILD/bin/wcgen llama-8b --out $m >/dev/null
		echo "== warm"
		cat $m/*.safetensors >/dev/null
		$BUILD/bench/gpu_h2d --gib 8 | grep ceiling
		for q in 4 8 16 32; do $BUILD/bench/gpu_dread --buffered --qd $q --chunk 16 $m/*.safetensors; done
		echo "-- daemon's loader"; wcbench load --model $m --device $uuid -r 1
		for cfg in "8 8" "32 8" "64 8" "32 4" "32 12" "64 12"; do
			set -- $cfg
			echo "-- candidate: --slots $1, $2 hash threads"
			WCD_HASH_THREADS=$2 wcbench load --model $m --device $uuid --wcd $alt -r 2 -- --slots $1
		done
		echo "-- candidate, --no-hash"
		wcbench load --model $m --device $uuid --wcd $alt -r 1 -- --slots 32 --no-hash
		python3 bench/gpu/gpu_peers.py st-load $m
		echo "== cold"
		sync; echo 3 >/proc/sys/vm/drop_caches
		$BUILD/bench/gpu_dread $m/*.safetensors
		WCD_HASH_THREADS=8 wcbench load --model $m --device $uuid --wcd $alt --drop-caches -r 1 -- --slots 32
		echo "== attach and memory (candidate, warm)"
		cat $m/*.safetensors >/dev/null
		WCD_HASH_THREADS=8 BUILD_WCD=$alt wcd_up $m $rd --slots 32 && {
			grep -E '^(bytes|tensors|load_seconds)=' $rd/*.ready
			grep -E 'VmRSS|VmHWM' /proc/$WCD_PID/status
			nvidia-smi --query-compute-apps=pid,used_memory --format=csv
			wcbench attach --runtime-dir $rd --device $uuid -n 100
			python3 bench/gpu/gpu_peers.py ipc-attach $m -n 100
			grep -E 'phase|ready' $rd/wcd.log
			kill $WCD_PID
		}
	} 2>&1 | tee "$OUT/tune.log"
}

# The load benchmarks on wcgen llama-8b: warm load (hashes on the device,
# on CPU threads, none) against the H2D ceiling, the page-cache read rate
# and safetensors; a staging sweep; daemon memory (host: peak RSS by kind
# while loading, sampled; device: the GPU's used memory before and after,
# with the context released and kept); cold load against raw O_DIRECT;
# attach x100 against torch CUDA IPC; level-1 sleep and wake.
bench() {
	local m=/root/m8b rd=/tmp/wcrun t0 uuid cfg
	local sweep=${SWEEP:-"16x4:1M 24x4:1M 8x8:1M 16x8:1M 8x16:2M 12x8:0"}
	gpu_env
	nproc; free -g | head -2
	m8b $m || return 1
	{
		echo "== warm (page cache)"
		cat $m/*.safetensors >/dev/null
		$BUILD/bench/gpu_h2d --gib 8 | grep -E 'ceiling|chunk  *(2|8) MiB'
		$BUILD/bench/gpu_dread --buffered --qd 32 --chunk 4 $m/*.safetensors
		echo "-- wcd defaults (hashes on the device)"
		wcbench load --model $m --device $uuid -r 5
		echo "-- --hash-on cpu"
		wcbench load --model $m --device $uuid -r 2 -- --hash-on cpu
		echo "-- --no-hash"
		wcbench load --model $m --device $uuid -r 3 -- --no-hash
		for cfg in $sweep; do
			local n=${cfg%%x*} r=${cfg#*x}
			echo "-- --slots $n --slot-size ${r%%:*}M --read-part ${r#*:}"
			wcbench load --model $m --device $uuid -r 3 -- --slots $n \
				--slot-size ${r%%:*}M --read-part ${r#*:}
		done
		echo "-- wcd defaults again"
		wcbench load --model $m --device $uuid -r 3
		python3 bench/gpu/gpu_peers.py st-load $m
		echo "== daemon memory (wcd defaults, warm)"
		memwatch $m $rd
		memwatch $m $rd --keep-context
		echo "== attach, sleep/wake (wcd defaults, warm)"
		wcd_up $m $rd && {
			wcbench attach --runtime-dir $rd --device $uuid -n 100
			python3 bench/gpu/gpu_peers.py ipc-attach $m -n 100
			wcctl sleep --level 1 --device $uuid --runtime-dir $rd
			nvidia-smi --query-gpu=memory.used --format=csv,noheader
			wcctl wake --device $uuid --runtime-dir $rd
			grep -iE 'sleep|wake|restor|idle' $rd/wcd.log | tail -6
			grep -E 'VmRSS|VmHWM' /proc/$WCD_PID/status
			kill $WCD_PID; wait $WCD_PID
		}
		echo "== cold (drop_caches before each)"
		sync; echo 3 >/proc/sys/vm/drop_caches
		$BUILD/bench/gpu_dread $m/*.safetensors
		wcbench load --model $m --device $uuid --drop-caches -r 1
	} 2>&1 | tee "$OUT/bench.log"
}

# wcgen llama-8b into $1 unless a model is there (saying how long it took).
# A phase's set-up: the built binaries first on PATH, uuid the GPU's UUID
# (the calling phase's local: bash scopes dynamically), /tmp/who for logs.
gpu_env() {
	export PATH=$PWD/$BUILD/bin:$PATH
	uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
	mkdir -p /tmp/who
}

m8b() {
	local t0=$(date +%s.%N)

	[ -f $1/config.json ] || $BUILD/bin/wcgen llama-8b --out $1 >/dev/null || return 1
	echo "wcgen llama-8b: $(awk "BEGIN{print $(date +%s.%N) - $t0}") s, $(du -sb $1 | cut -f1) bytes"
}

# The device-to-host ceiling: torch's copies of 2 GiB into pinned memory
# (and what torch's pin_memory of them cost).
d2h_ceiling() {
	python3 - <<'PY'
import time, torch
n = 2 << 30
src = torch.empty(n, dtype=torch.uint8, device="cuda")
t = time.time(); dst = torch.empty(n, dtype=torch.uint8, pin_memory=True)
print("torch pin_memory 2 GiB: %.3f s" % (time.time() - t))
for i in range(4):
    torch.cuda.synchronize(); t = time.time(); dst.copy_(src, non_blocking=True); torch.cuda.synchronize()
    print("D2H pinned 2 GiB: %.2f GB/s" % (n / (time.time() - t) / 1e9))
PY
}

# Spawn to ready of wcd on $1 in $2 (extra options after), polled every
# 2 ms; prints the seconds; WCD_PID is the daemon.
spawn_ready() {
	local m=$1 rd=$2 t0 t1; shift 2
	rm -rf "$rd"; mkdir -p "$rd"
	t0=$(date +%s.%N)
	setsid ${BUILD_BIN_WCD:-$BUILD/bin/wcd} --model "$m" --device 0 --runtime-dir "$rd" "$@" \
		>>"$rd/../wcd-$(basename "$rd").log" 2>&1 </dev/null &
	WCD_PID=$!
	while ! ls "$rd"/*.ready >/dev/null 2>&1; do
		kill -0 $WCD_PID 2>/dev/null || { echo "wcd died"; return 1; }
		sleep 0.002
	done
	t1=$(date +%s.%N)
	echo "spawn to ready: $(awk "BEGIN{print $t1 - $t0}") s (spawned at $(date -u -d @$t0 +%H:%M:%S.%3N))"
}

# Issue 17, second call: the ways to sleep at copy speed (bench/cuda/
# sleepcopy, built by hand on the build machine into $BUILD/bench), then
# the daemon's level-1 sleep with prefaulted staging, and restarts again.
sleep_copy() {
	local m=/root/m8b rd=/tmp/who/rt uuid att
	gpu_env
	m8b $m || return 1
	{
		date -u
		cat $m/*.safetensors >/dev/null
		$BUILD/bench/gpu_h2d --gib 8 | grep -E 'ceiling'
		echo "== sleepcopy 16 GiB, 16 threads"
		$BUILD/bench/sleepcopy 16 16
		echo "== the daemon's level-1 sleep (prefaulted staging) and wake"
		spawn_ready $m $rd || return 1
		for i in 1 2 3; do
			wcctl sleep --level 1 --device $uuid --runtime-dir $rd --json
			grep -E 'MemAvailable' /proc/meminfo
			wcctl wake --device $uuid --runtime-dir $rd --json
		done
		echo "== restart with an engine attached (context released 0.2 s after)"
		wcattach --device $uuid --runtime-dir $rd --hold 300 >/tmp/who/att.log 2>&1 &
		att=$!
		for i in $(seq 500); do grep -q attached /tmp/who/att.log && break; sleep 0.01; done
		for i in 1 2 3 4; do wcctl restart --device $uuid --runtime-dir $rd --json; done
		wcctl restart --device $uuid --runtime-dir $rd --verify hash --json
		sleep 0.5
		nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
		cat /tmp/who/att.log
		kill $att
		wcctl stop --device $uuid --runtime-dir $rd
		kill $WCD_PID 2>/dev/null
	} 2>&1 | tee "$OUT/sleep_copy.log"
}

# Issue 17, third call (perf17): the same figures after the context moved
# to a thread (spawn to ready), off the --takeover path (restart), and the
# sleep's pinning overlapped with its copy; then --sleep-arena keep.
handover() {
	local m=/root/m8b rd=/tmp/who/rt uuid att t0
	gpu_env
	m8b $m || return 1
	{
		date -u; nvidia-smi -L
		cat $m/*.safetensors >/dev/null
		$BUILD/bench/gpu_h2d --gib 8 | grep -E 'ceiling'
		d2h_ceiling
		echo "== start-up: spawn to ready (warm), 3 times"
		for i in 1 2 3; do
			spawn_ready $m $rd || return 1
			grep -E '^(bytes|load_seconds)=' $rd/*.ready | tr '\n' ' '; echo
			kill $WCD_PID; wait $WCD_PID
		done
		grep -E 'device open|phase|ready:' /tmp/who/wcd-rt.log | tail -10
		echo "== handover with an engine attached"
		spawn_ready $m $rd || return 1
		wcattach --device $uuid --runtime-dir $rd --hold 300 >/tmp/who/att.log 2>&1 &
		att=$!
		for i in $(seq 500); do grep -q attached /tmp/who/att.log && break; sleep 0.01; done
		head -2 /tmp/who/att.log
		for i in 1 2 3 4; do wcctl restart --device $uuid --runtime-dir $rd --json; done
		for i in 1 2; do wcctl restart --device $uuid --runtime-dir $rd --verify hash --json; done
		grep -E 'device open|handover|hashed again|idle|took' $rd/*.log | tail -16
		wcctl status --device $uuid --runtime-dir $rd | head -20
		nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
		cat /tmp/who/att.log
		echo "== stop and reload, 2 times"
		for i in 1 2; do
			t0=$(date +%s.%N)
			wcctl stop --device $uuid --runtime-dir $rd >/dev/null
			spawn_ready $m $rd || return 1
			echo "stop + spawn to ready: $(awk "BEGIN{print $(date +%s.%N) - $t0}") s"
		done
		kill $att 2>/dev/null
		echo "== level-1 sleep / wake, default (pinning overlapped with the copy)"
		for i in 1 2 3; do
			wcctl sleep --level 1 --device $uuid --runtime-dir $rd --json
			grep -E 'MemAvailable' /proc/meminfo
			wcctl wake --device $uuid --runtime-dir $rd --json
		done
		kill $WCD_PID; wait $WCD_PID
		echo "== level-1 sleep / wake, wcd --sleep-arena keep"
		spawn_ready $m $rd --sleep-arena keep || return 1
		for i in 1 2 3; do
			wcctl sleep --level 1 --device $uuid --runtime-dir $rd --json
			wcctl wake --device $uuid --runtime-dir $rd --json
			grep -E 'MemAvailable' /proc/meminfo
		done
		wcctl status --device $uuid --runtime-dir $rd --json | grep -oE '"sleep_arena_bytes": *[0-9]+'
		nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
		kill $WCD_PID; wait $WCD_PID
		tail -12 /tmp/who/wcd-rt.log
	} 2>&1 | tee "$OUT/handover.log"
}

# Issue 17, whole tensors hashed side by side (hash_batch): wcd before
# ($WCD_BASE, a wcd binary) and after ($BUILD/bin/wcd), alternated: spawn
# to ready (the fused views are hashed after the last copy), wcctl restart
# --verify hash with an engine attached (every tensor hashed again), and
# level-1 sleep/wake (each pool hashed as its copy lands).
hashing() {
	local m=/root/m8b rd=/tmp/who/rt uuid att r w i
	gpu_env
	m8b $m || return 1
	{
		date -u; nvidia-smi -L
		cat $m/*.safetensors >/dev/null
		$BUILD/bench/gpu_h2d --gib 8 | grep -E 'ceiling'
		for r in 1 2; do
			for w in "$WCD_BASE" $BUILD/bin/wcd; do
				echo "== round $r: $w"
				for i in 1 2; do
					BUILD_BIN_WCD=$w spawn_ready $m $rd || return 1
					grep -E '^(load_seconds)=' $rd/*.ready
					[ $i = 2 ] || { kill $WCD_PID; wait $WCD_PID; }
				done
				wcattach --device $uuid --runtime-dir $rd --hold 300 >/tmp/who/att.log 2>&1 &
				att=$!
				for i in $(seq 500); do grep -q attached /tmp/who/att.log && break; sleep 0.01; done
				for i in 1 2 3; do
					wcctl restart --device $uuid --runtime-dir $rd --wcd $w --verify hash --json
				done
				grep -E 'hashed again' $rd/*.log /tmp/who/wcd-rt.log 2>/dev/null | tail -3
				kill $att 2>/dev/null; wait $att 2>/dev/null
				for i in 1 2; do
					wcctl sleep --level 1 --device $uuid --runtime-dir $rd --json
					sleep 1
					wcctl wake --device $uuid --runtime-dir $rd --json
				done
				wcctl stop --device $uuid --runtime-dir $rd >/dev/null
			done
		done
	} 2>&1 | tee "$OUT/hashing.log"
}

# Issue 17, the sleep's pipeline (host buffers mapped on a thread, pinned
# and their copies queued on the loop's thread): the probe's ways on memory
# touched before (bench/cuda/sleepprep, built by hand into $BUILD/bench),
# then the daemon's level-1 sleep before ($WCD_BASE, a wcd binary) and
# after ($BUILD/bin/wcd), alternated, two sleeps each, three rounds.
sleep_pipeline() {
	local m=/root/m8b rd=/tmp/who/rt uuid r w i
	gpu_env
	m8b $m || return 1
	{
		date -u; nvidia-smi -L
		cat $m/*.safetensors >/dev/null
		QUICK=1 $BUILD/bench/sleepprep 16
		d2h_ceiling
		for r in 1 2 3; do
			for w in "$WCD_BASE" $BUILD/bin/wcd; do
				echo "== round $r: $w"
				BUILD_BIN_WCD=$w spawn_ready $m $rd --log-level debug || return 1
				for i in 1 2; do
					wcctl sleep --level 1 --device $uuid --runtime-dir $rd --json
					wcctl wake --device $uuid --runtime-dir $rd --json
				done
				kill $WCD_PID; wait $WCD_PID
			done
		done
		grep -E 'sleep: ' /tmp/who/wcd-rt.log | tail -24
	} 2>&1 | tee "$OUT/sleep_pipeline.log"
}

# Issue 17, what a client waits for at a level-1 wake: the wall time of
# `wcctl wake` (spawn to exit, as an RL loop calling it sees it) and of a
# `wcctl status` right after, for $WCD_BASE (before: the host copy freed
# and the device re-hashed after the copies, both before the reply),
# $WCD_FREE (the free after the reply) and $BUILD/bin/wcd (also the hashes
# queued with the copies), alternated, two sleep/wakes each, three rounds;
# the H2D ceiling in the same run.
wake_wait() {
	local m=/root/m8b rd=/tmp/who/rt uuid r w i t0 t1 t2
	gpu_env
	m8b $m || return 1
	{
		date -u; nvidia-smi -L
		cat $m/*.safetensors >/dev/null
		$BUILD/bench/gpu_h2d --gib 8 | grep -E 'ceiling'
		for r in 1 2 3; do
			for w in "$WCD_BASE" "$WCD_FREE" $BUILD/bin/wcd; do
				echo "== round $r: $w"
				BUILD_BIN_WCD=$w spawn_ready $m $rd || return 1
				for i in 1 2; do
					wcctl sleep --level 1 --device $uuid --runtime-dir $rd --json | grep -oE '"seconds": *[0-9.]+' | head -1
					t0=$(date +%s%N)
					wcctl wake --device $uuid --runtime-dir $rd --json >/tmp/who/wake.json
					t1=$(date +%s%N)
					wcctl status --device $uuid --runtime-dir $rd --json >/tmp/who/status.json
					t2=$(date +%s%N)
					echo "wake: wcctl wake $(( (t1 - t0) / 1000000 )) ms, wcctl status after it $(( (t2 - t1) / 1000000 )) ms; $(grep -oE '"host_freeing_bytes": *[0-9]+' /tmp/who/status.json)"
					tr -d '\n' </tmp/who/wake.json | cut -c1-400; echo
					sleep 1
				done
				kill $WCD_PID; wait $WCD_PID
			done
		done
		grep -E 'host copy|idle' /tmp/who/wcd-rt.log | tail -16
	} 2>&1 | tee "$OUT/wake_wait.log"
}

# /proc/vmstat counters that a slow first touch of fresh memory shows in.
vmstat_snap() {
	grep -E '^(compact_(stall|fail|success)|thp_fault_(alloc|fallback)|pgfault|pgmajfault|thp_collapse_alloc|pgscan_direct|pgsteal_direct|allocstall_normal|allocstall_movable) ' /proc/vmstat | tr '\n' ' '
	grep -E '^(MemFree|MemAvailable|Cached|AnonHugePages):' /proc/meminfo | tr -s ' \n' '  '; echo
}

# Issue 17's start-up (and the slow sleep after stop-and-reloads): where the
# time from spawn to ready goes. Needs $BUILD/bench/startprobe (built by hand:
# bench/cuda/startprobe.c has the line).
startup() {
	local m=/root/m8b rd=/tmp/who/rt uuid hold i
	gpu_env
	{
		date -u; nvidia-smi -L
		nvidia-smi -q | grep -iE 'persistence|driver version|cuda version' | head -4
		cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag
		nproc; grep -E 'MemTotal' /proc/meminfo
		m8b $m || return 1
		cat $m/*.safetensors >/dev/null
		$BUILD/bench/gpu_h2d --gib 8 | grep -E 'ceiling'
		for i in 1 2; do
			echo "== startprobe, nothing else on the GPU ($i)"
			SPAWN_NS=$(date +%s%N) $BUILD/bench/startprobe
		done
		echo "== startprobe, a second process holding the driver (cuInit only)"
		$BUILD/bench/startprobe hold >/tmp/who/hold.log 2>&1 &
		hold=$!
		for i in $(seq 500); do grep -q holding /tmp/who/hold.log && break; sleep 0.01; done
		SPAWN_NS=$(date +%s%N) $BUILD/bench/startprobe
		echo "== wcd spawn to ready, holder still running, 2 times"
		for i in 1 2; do
			spawn_ready $m $rd --log-level debug || return 1
			kill $WCD_PID; wait $WCD_PID
		done
		grep -E 'starting|device open|phase|step|ready:' /tmp/who/wcd-rt.log | tail -14
		kill $hold; wait $hold 2>/dev/null
		sleep 1
		echo "== wcd spawn to ready, nothing else on the GPU, 3 times"
		: >/tmp/who/wcd-rt.log
		for i in 1 2 3; do
			spawn_ready $m $rd --log-level debug || return 1
			grep -E '^(load_seconds)=' $rd/*.ready
			kill $WCD_PID; wait $WCD_PID
			sleep 0.5
		done
		grep -E 'starting|device open|phase|step|ready:' /tmp/who/wcd-rt.log | tail -42
		echo "== level-1 sleep after two stop-and-reloads"
		: >/tmp/who/wcd-rt.log
		spawn_ready $m $rd --log-level debug || return 1
		for i in 1 2; do
			wcctl stop --device $uuid --runtime-dir $rd >/dev/null
			spawn_ready $m $rd --log-level debug || return 1
		done
		for i in 1 2 3; do
			vmstat_snap
			wcctl sleep --level 1 --device $uuid --runtime-dir $rd --json
			vmstat_snap
			wcctl wake --device $uuid --runtime-dir $rd --json | cut -c1-200
		done
		kill $WCD_PID; wait $WCD_PID
		grep -E 'sleep' /tmp/who/wcd-rt.log | tail -40
	} 2>&1 | tee "$OUT/startup.log"
}

startup_ab() {
	local m=/root/m8b rd=/tmp/who/rt uuid hold i cfg base=${WCD_BASE:-$BUILD/bin/wcd.base}
	gpu_env
	{
		date -u; nvidia-smi -L
		lscpu | grep -iE 'hypervisor|virtualization type' ; ls /sys/class/iommu 2>&1 | head -3
		grep -E 'MemTotal|MemFree' /proc/meminfo
		m8b $m || return 1
		cat $m/*.safetensors >/dev/null
		echo "== first touch of fresh memory, 16 GiB, three rounds"
		vmstat_snap
		$BUILD/bench/startprobe touch 16
		vmstat_snap
		$BUILD/bench/gpu_h2d --gib 8 | grep -E 'ceiling'
		echo "== startprobe, nothing else on the GPU"
		SPAWN_NS=$(date +%s%N) $BUILD/bench/startprobe
		echo "== spawn to ready, before ($base) and after, interleaved"
		: >/tmp/who/wcd-rt.log
		for i in 1 2 3 4; do
			echo "-- before"
			BUILD_BIN_WCD=$base spawn_ready $m $rd --log-level debug || return 1
			kill $WCD_PID; wait $WCD_PID; sleep 0.3
			echo "-- after"
			spawn_ready $m $rd --log-level debug || return 1
			grep -E '^(load_seconds)=' $rd/*.ready
			kill $WCD_PID; wait $WCD_PID; sleep 0.3
		done
		grep -E 'starting|device open|phase (parse|read)|step|ready:' /tmp/who/wcd-rt.log | tail -24
		echo "== after, with a second process holding the driver (cuInit only)"
		$BUILD/bench/startprobe hold >/tmp/who/hold.log 2>&1 &
		hold=$!
		for i in $(seq 500); do grep -q holding /tmp/who/hold.log && break; sleep 0.01; done
		SPAWN_NS=$(date +%s%N) $BUILD/bench/startprobe | grep -E 'cuInit|cudaSetDevice|ceiling'
		for i in 1 2 3; do
			spawn_ready $m $rd --log-level debug || return 1
			kill $WCD_PID; wait $WCD_PID; sleep 0.3
		done
		grep -E 'starting|device open|step|ready:' /tmp/who/wcd-rt.log | tail -10
		kill $hold; wait $hold 2>/dev/null
		echo "== staging sweep (wcbench load, 3 runs each)"
		for cfg in "" "--slots 16" "--slots 24 --slot-size 4M" "--slots 8 --slot-size 16M --read-part 2M"; do
			echo "-- ${cfg:-defaults}"
			wcbench load --model $m --device $uuid -r 3 ${cfg:+-- $cfg} 2>&1 | grep -vE 'copy_|publish_'
		done
		echo "== level-1 sleep after two stop-and-reloads (after)"
		: >/tmp/who/wcd-rt.log
		spawn_ready $m $rd --log-level debug || return 1
		for i in 1 2; do
			wcctl stop --device $uuid --runtime-dir $rd >/dev/null
			spawn_ready $m $rd --log-level debug || return 1
		done
		for i in 1 2; do
			vmstat_snap
			wcctl sleep --level 1 --device $uuid --runtime-dir $rd --json | cut -c1-220
			wcctl wake --device $uuid --runtime-dir $rd --json | cut -c1-200
		done
		kill $WCD_PID; wait $WCD_PID
		grep -E 'sleep: pool' /tmp/who/wcd-rt.log | tail -16
	} 2>&1 | tee "$OUT/startup_ab.log"
	echo "== GPU tests"
	WC_GPU_MODELS=test/data/reference/llama test/run.sh $BUILD/test/gpu_* 2>&1 | tee "$OUT/tests.log"
}

# Issue 17, the final figures on the merged build: the GPU tests, spawn to
# ready beside the probe's lower bound and the H2D ceiling, the load's gap
# to H2D (page-cache reads alone, --no-hash, a staging sweep).
startup_bound() {
	local m=/root/m8b rd=/tmp/who/rt uuid i cfg
	gpu_env
	WC_GPU_MODELS=test/data/reference/llama test/run.sh $BUILD/test/gpu_* 2>&1 | tee "$OUT/tests.log"
	{
		date -u; nvidia-smi -L
		m8b $m || return 1
		cat $m/*.safetensors >/dev/null
		$BUILD/bench/gpu_h2d --gib 8 | grep -E 'ceiling'
		SPAWN_NS=$(date +%s%N) $BUILD/bench/startprobe | grep -E 'spawn|cuInit|cudaSetDevice|ceiling'
		echo "== spawn to ready, 5 times"
		: >/tmp/who/wcd-rt.log
		for i in 1 2 3 4 5; do
			spawn_ready $m $rd --log-level debug || return 1
			grep -E '^(load_seconds)=' $rd/*.ready
			kill $WCD_PID; wait $WCD_PID; sleep 0.3
		done
		grep -E 'starting|device open|phase (parse|read)|step|ready:' /tmp/who/wcd-rt.log | tail -12
		SPAWN_NS=$(date +%s%N) $BUILD/bench/startprobe | grep -E 'spawn|cuInit|cudaSetDevice|ceiling'
		echo "== the load's gap to H2D"
		$BUILD/bench/gpu_dread --buffered --qd 32 --chunk 4 $m/*.safetensors
		for cfg in "" "--no-hash" "--slots 16" "--slots 8" "--slots 24 --slot-size 4M" "--slots 8 --slot-size 16M --read-part 2M"; do
			echo "-- ${cfg:-defaults}"
			wcbench load --model $m --device $uuid -r 3 ${cfg:+-- $cfg} 2>&1 | grep -vE 'copy_|publish_'
		done
	} 2>&1 | tee "$OUT/startup_bound.log"
}

# Starts wcd on $1 in runtime dir $2 (extra options after) and samples its
# /proc status until ready: the peak of each kind of resident memory while
# loading, then the GPU's used memory (before/after) and the log's phases.
memwatch() {
	local m=$1 rd=$2 pid before; shift 2
	rm -rf "$rd"; mkdir -p "$rd"
	sleep 1
	before=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits)
	setsid $BUILD/bin/wcd --model "$m" --device 0 --runtime-dir "$rd" "$@" \
		>"$rd/wcd.log" 2>&1 </dev/null &
	pid=$!
	while kill -0 $pid 2>/dev/null && ! ls "$rd"/*.ready >/dev/null 2>&1; do
		grep -E 'VmRSS|RssAnon|RssFile|RssShmem' /proc/$pid/status 2>/dev/null
	done >"$rd/samples"
	sleep 1
	echo "-- wcd $* ($(wc -l <"$rd/samples") samples while loading)"
	awk '{if ($2 > m[$1]) m[$1] = $2} END {printf "peak while loading:"; for (k in m) printf " %s %d kB", k, m[k]; print ""}' "$rd/samples"
	grep -E 'VmHWM|VmRSS|RssAnon|RssFile|RssShmem' /proc/$pid/status | tr -s '\t\n' '  '; echo
	echo "GPU memory used: $before MiB before, $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits) MiB serving"
	nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
	grep -E 'phase|ready:|idle' "$rd/wcd.log" | sed 's/^[^ ]* //'
	kill $pid; wait $pid
}

"$@"
