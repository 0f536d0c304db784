#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 29 (updates from a trainer's memory) on the GPU machine, from a copy
# of the tree with build/ carried:
#
#   bench/gpu/push_bench.sh tests   the session tests: test/py/test_gpu_push.py
#                                (a trainer process pushes a transformers
#                                model's changed weights from CUDA tensors,
#                                the engine that follows gives from_pretrained's
#                                logits bitwise) and the CPU ones
#                                (test_push.py, test_push_cast.py,
#                                test_push_commit.py) on this
#                                machine's torch
#   bench/gpu/push_bench.sh bench   wcgen llama-8b (291 tensors, 16 GB) served
#                                by one CUDA wcd; bench/gpu/push_bench.py
#                                --json: the D2D floor, update_from beside,
#                                a 2% partial update, in place (every tensor,
#                                the same 2%), torch CUDA IPC buckets
#                                (512 MiB, 2 GiB), save + wcctl update
#   bench/gpu/push_bench.sh all     both
#
# ROUNDS (default 3): rounds of each measure. Logs go to $OUT. The env is
# bench/py/gpu_env.sh's (and its start_wcd).
set -u
OUT=${OUT:-/tmp/push_bench_out}
mkdir -p "$OUT"
. "$(dirname "$0")/../py/gpu_env.sh"
export PATH=$PWD/$BUILD/bin:$PATH

tests() {
	date -u
	nvidia-smi -L
	timeout 300 $PY -m pytest -q -rs -s test/py/test_gpu_push.py 2>&1 |
		tee "$OUT/gpu_push.log" | tail -25
	timeout 240 $PY -m pytest -q -rs test/py/test_push.py \
		test/py/test_push_cast.py test/py/test_push_commit.py 2>&1 | tee "$OUT/push_tests.log" | tail -8
}

bench() {
	local m=${MODEL:-/root/m8b} rd=/tmp/wcrun-push pid
	date -u
	[ -f $m/config.json ] || wcgen llama-8b --out $m >/dev/null || return 1
	cat $m/*.safetensors >/dev/null
	start_wcd wcd $m $rd || return 1
	grep -E '^(bytes|tensors|load_seconds)=' $rd/*.ready
	timeout 540 $PY bench/gpu/push_bench.py --model $m --runtime-dir $rd \
		-r ${ROUNDS:-3} --json 2>&1 | tee "$OUT/push_bench.log"
	grep -E 'update session|updated from memory' $rd/wcd.log | tail -6
	cp $rd/wcd.log "$OUT/wcd.log"
	kill $pid 2>/dev/null && wait $pid
}

case ${1:-all} in
tests) tests ;;
bench) bench ;;
all) tests; bench ;;
*) echo "usage: $0 tests|bench|all" >&2; exit 2 ;;
esac
