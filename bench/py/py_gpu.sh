#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 13 on the GPU machine, from a copy of the tree with build/ carried:
#
#   bench/py/py_gpu.sh tests    the Python tests (test/py/test_py_*.py on the
#                            machine's torch and numpy, and the GPU model
#                            tests test_gpu_models.py)
#   bench/py/py_gpu.sh bench    on wcgen llama-8b (291 tensors, 16 GB), one wcd:
#                            Python attach into a dict of CUDA tensors x100
#                            against the C attach (wcbench attach) and torch's
#                            per-tensor CUDA IPC rebuild; engine start
#                            (bench/py/py_start.py) against from_pretrained
#   bench/py/py_gpu.sh all      both
#   bench/py/py_gpu.sh packab   the pools' packing before ($WCD_BASE) and after,
#                            alternated: the Python and the C attach x100
#   bench/py/py_gpu.sh restart  what a restart reads instead of computing: the
#                            module cache's hit against transformers'
#                            construction (bench/py/py_modcache.py) and the
#                            identity on disk against its build
#                            (bench/host/ident_start), fresh processes each
#   bench/py/py_gpu.sh startab  engine start, the steps before and after in one
#                            run (bench/py/py_start.py --variants, --profile)
#   bench/py/py_gpu.sh lazy     the lazy Model (issue 27, item 4): on wcgen
#                            deepseek-v3-shape (45,633 served tensors), then
#                            llama-8b (291 + views), one wcd each: the C attach
#                            (wcbench attach) and bench/py/py_lazy.py's ratios to
#                            it (attach + load_into, tensors() of all, a fresh
#                            process's first attach), then py_attach.py on
#                            llama-8b (the no-regression figures)
#
# PY_TESTS: the CPU test files of `tests` (default test/py/test_py_*.py);
# PY_RUNS, AB_RUNS, SPAN_RUNS: how many times the Python attach runs, the
# A/B runs of the views (py_attach.py --ab) and of the pools back to back
# or apart (--ab-span) repeat (default 2 each); ROUNDS: engine starts
# (bench/py/py_start.py -r; 0 skips them, default 3); PLAIN_RUNS: after all
# that, wcd again without the layouts (no fused views: the 291 checkpoint
# tensors the issue's target counts), the C and the Python attach that
# many times (default 0).
# Logs go to $OUT. libwcache.so needs libjansson.so.4 at run time: put it in
# $BUILD/lib when the machine lacks it (LD_LIBRARY_PATH points there).
set -u
OUT=${OUT:-/tmp/py_gpu_out}
mkdir -p "$OUT"
. "$(dirname "$0")/gpu_env.sh"

tests() {
	date -u
	nvidia-smi -L
	$PY bench/gpu/gpu_peers.py env 2>&1 | grep -v xxhash
	timeout 240 $PY -m pytest -q -rs -s test/py/test_gpu_models.py 2>&1 | tee "$OUT/gpu_models.log" | tail -25
	timeout 200 $PY -m pytest -q -rs ${PY_TESTS:-test/py/test_py_*.py} 2>&1 | tee "$OUT/py_tests.log" | tail -15
}

bench() {
	local m=/root/m8b rd=/tmp/wcrun-py t0 uuid pid
	export PATH=$PWD/$BUILD/bin:$PATH
	uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
	t0=$(date +%s.%N)
	[ -f $m/config.json ] || wcgen llama-8b --out $m >/dev/null || return 1
	echo "wcgen llama-8b: $(awk "BEGIN{print $(date +%s.%N) - $t0}") s, $(du -sb $m | cut -f1) bytes"
	cat $m/*.safetensors >/dev/null
	start_wcd wcd $m $rd || return 1
	grep -E '^(bytes|tensors|load_seconds)=' $rd/*.ready
	{
		echo "== attach x100: C (wcbench attach), identity checked, then without"
		wcbench attach --runtime-dir $rd --device $uuid --model $m -n 100 -q
		wcbench attach --runtime-dir $rd --device $uuid -n 100 -q
		echo "== attach x100: Python into a dict of CUDA torch tensors, identity checked, then without"
		for _ in $(seq ${PY_RUNS:-2}); do
			timeout 120 $PY bench/py/py_attach.py --runtime-dir $rd --device 0 --model $m -n 100
			timeout 120 $PY bench/py/py_attach.py --runtime-dir $rd --device 0 -n 100
		done
		echo "== the views three ways in one process, cycle by cycle: batched, one as_strided per tensor (before the batches), batched with the plan made every cycle"
		for _ in $(seq ${AB_RUNS:-2}); do
			timeout 120 $PY bench/py/py_attach.py --runtime-dir $rd --device 0 --model $m -n 100 --ab
			timeout 120 $PY bench/py/py_attach.py --runtime-dir $rd --device 0 -n 100 --ab
		done
		echo "== pools back to back (one DLPack tensor for all) or apart (one per pool), cycle by cycle"
		for _ in $(seq ${SPAN_RUNS:-2}); do
			timeout 120 $PY bench/py/py_attach.py --runtime-dir $rd --device 0 --model $m -n 100 --ab-span
			timeout 120 $PY bench/py/py_attach.py --runtime-dir $rd --device 0 -n 100 --ab-span
		done
		timeout 120 $PY bench/py/py_attach.py --runtime-dir $rd --device 0 -n 20 --micro
		echo "== C again after the Python runs (the spread of the C cycle in this run)"
		wcbench attach --runtime-dir $rd --device $uuid --model $m -n 100 -q
		wcbench attach --runtime-dir $rd --device $uuid -n 100 -q
		echo "== attach x100: torch per-tensor CUDA IPC rebuild of the same tensors"
		timeout 180 $PY bench/gpu/gpu_peers.py ipc-attach $m -n 100
		if [ "${ROUNDS:-3}" -gt 0 ]; then
			echo "== engine start: fresh process to first logits (warm page cache)"
			cat $m/*.safetensors >/dev/null
			timeout 240 $PY bench/py/py_start.py --model $m --runtime-dir $rd --device 0 -r ${ROUNDS:-3}
		fi
		if [ "${PLAIN_RUNS:-0}" -gt 0 ]; then
			# this block is a subshell (the pipe to tee): no wait for $pid here
			kill $pid
			while kill -0 $pid 2>/dev/null; do sleep 0.1; done
			echo "== wcd without the layouts (the checkpoint's 291 tensors, no fused views): C, then Python"
			# both sides: the engine's identity counts the layout too
			export WCACHE_LAYOUT_DIR=/nonexistent
			start_wcd wcd $m $rd || exit 1
			grep -E '^(bytes|tensors|load_seconds)=' $rd/*.ready
			for _ in $(seq $PLAIN_RUNS); do
				wcbench attach --runtime-dir $rd --device $uuid -n 100 -q
				timeout 120 $PY bench/py/py_attach.py --runtime-dir $rd --device 0 -n 100
				timeout 120 $PY bench/py/py_attach.py --runtime-dir $rd --device 0 --model $m -n 100
			done
			kill $pid
			while kill -0 $pid 2>/dev/null; do sleep 0.1; done
		fi
	} 2>&1 | tee "$OUT/bench.log"
	kill $pid 2>/dev/null && wait $pid
}

# Engine start, the steps before and after in one run: one wcd on wcgen
# llama-8b, then bench/py/py_start.py -r $ROUNDS (default 2) over $VARIANTS
# (default seq,ov,seq-cache,ov-cache: now sequential, now overlapped
# (attach(wait=False)), each again with the construction read from the
# module cache (a restart: wcache.torch.empty_pretrained); seq-each and
# seq-old-each give the first views and load_into of before), and one more
# process under cProfile
# ($OUT/start_profile.txt).
startab() {
	local m=/root/m8b rd=/tmp/wcrun-start pid
	export PATH=$PWD/$BUILD/bin:$PATH
	[ -f $m/config.json ] || wcgen llama-8b --out $m >/dev/null || return 1
	cat $m/*.safetensors >/dev/null
	start_wcd wcd $m $rd || return 1
	grep -E '^(bytes|tensors|pools|load_seconds)=' $rd/*.ready
	cat $m/*.safetensors >/dev/null
	timeout 540 $PY bench/py/py_start.py --model $m --runtime-dir $rd --device 0 \
		-r ${ROUNDS:-2} --variants ${VARIANTS:-seq,ov,seq-cache,ov-cache} \
		--profile "$OUT/start_profile.txt" 2>&1 | tee "$OUT/startab.log"
	kill $pid 2>/dev/null && wait $pid
}

# The pools' packing, before ($WCD_BASE: a wcd that cuts pools in the middle
# of layers) and after (this build's: whole layers on 2 MiB, so that a kind
# of tensor is one run across every pool), alternated, PACK_ROUNDS times
# (default 2): the same client (this tree's libwcache and package), the
# Python attach x100 with the C phases of the same cycles, and the C attach.
packab() {
	local m=/root/m8b rd=/tmp/wcrun-pack uuid pid w r
	export PATH=$PWD/$BUILD/bin:$PATH
	uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
	[ -f $m/config.json ] || wcgen llama-8b --out $m >/dev/null || return 1
	cat $m/*.safetensors >/dev/null
	{
		for r in $(seq ${PACK_ROUNDS:-2}); do
			for w in "$WCD_BASE" $BUILD/bin/wcd; do
				echo "== round $r: $w"
				start_wcd $w $m $rd || return 1
				grep -E '^(bytes|tensors|pools|load_seconds)=' $rd/*.ready
				grep -oE '[0-9]+ pools' $rd/wcd.log | head -1
				wcbench attach --runtime-dir $rd --device $uuid --model $m -n 100 -q
				timeout 120 $PY bench/py/py_attach.py --runtime-dir $rd --device 0 --model $m -n 100
				timeout 120 $PY bench/py/py_attach.py --runtime-dir $rd --device 0 -n 100
				kill $pid
				while kill -0 $pid 2>/dev/null; do sleep 0.1; done
			done
		done
	} 2>&1 | tee "$OUT/packab.log"
}

lazy() {
	local ds=/root/ds3 m8=/root/m8b rd=/tmp/wcrun-lazy uuid m
	export PATH=$PWD/$BUILD/bin:$PATH
	# a fresh identity cache: py_lazy.py's first fresh process writes it
	export WCACHE_IDENT_CACHE=/tmp/wcident-lazy
	rm -rf $WCACHE_IDENT_CACHE
	uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
	[ -f $ds/config.json ] || wcgen deepseek-v3-shape --out $ds || return 1
	[ -f $m8/config.json ] || wcgen llama-8b --out $m8 >/dev/null || return 1
	# identdisk.c writes no entry while a file it read is younger than 2 s
	sleep 2
	{
		for m in $ds $m8; do
			echo "== $m"
			cat $m/*.safetensors >/dev/null
			start_wcd wcd $m $rd || return 1
			grep -E '^(bytes|tensors|load_seconds)=' $rd/*.ready
			for _ in $(seq ${LAZY_RUNS:-2}); do
				wcbench attach --runtime-dir $rd --device $uuid --model $m -n ${LAZY_N:-20} -q
				timeout 300 $PY bench/py/py_lazy.py --runtime-dir $rd --device 0 --model $m \
					-n ${LAZY_N:-20} -r 5 --wcbench $BUILD/bin/wcbench --wcbench-device $uuid
			done
			if [ $m = $m8 ]; then
				timeout 120 $PY bench/py/py_attach.py --runtime-dir $rd --device 0 --model $m -n 100
				wcbench attach --runtime-dir $rd --device $uuid --model $m -n 100 -q
			fi
			kill $pid
			while kill -0 $pid 2>/dev/null; do sleep 0.1; done
		done
	} 2>&1 | tee "$OUT/lazy.log"
}

restart() {
	local m=/root/m8b
	export PATH=$PWD/$BUILD/bin:$PATH
	[ -f $m/config.json ] || wcgen llama-8b --out $m >/dev/null || return 1
	{
		echo "== module cache: empty_pretrained's hit against AutoConfig + from_config"
		timeout 300 $PY bench/py/py_modcache.py --model $m --device cuda -n ${RESTART_RUNS:-10}
		echo "== the same for a plain-torch module of Llama-3-8B's shapes"
		timeout 200 $PY bench/py/py_modcache.py --device cuda -n ${RESTART_RUNS:-10}
		echo "== the first HELLO's identity: built, written, read from disk"
		timeout 120 $BUILD/bench/ident_start --model $m -n ${RESTART_RUNS:-10}
	} 2>&1 | tee "$OUT/restart.log"
}

case ${1:-all} in
tests) tests ;;
bench) bench ;;
packab) packab ;;
startab) startab ;;
restart) restart ;;
lazy) lazy ;;
all) tests; bench ;;
*) echo "usage: bench/py/py_gpu.sh tests|bench|packab|startab|restart|lazy|all" >&2; exit 2 ;;
esac
