#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 29's benchmark (c) on the GPU machine, from a copy of the tree with
# build/ carried: an engine's switch to a new version (notice -> re-attached
# and its next forward started, at most 5 ms) on wcgen llama-8b (291
# tensors, 16 GB), one wcd on GPU 0: bench/py/follow_switch.py with the
# module built from the manifest, then with transformers' LlamaForCausalLM
# (--transformers), each with full updates from a trainer process holding
# the tensors on the GPU (TRAINER_DEVICE=cpu where update_from takes no CUDA
# tensors yet), then partial updates of one tensor (skipped with a line where
# the daemon refuses partial updates on CUDA). The first mode runs again
# with the old version detached inside poll() (--detach now), beside the
# default (on the follower's thread). N: updates per run (default 20).
# Logs go to $OUT.
set -u
OUT=${OUT:-/tmp/follow_gpu_out}
mkdir -p "$OUT"
. "$(dirname "$0")/gpu_env.sh"
export WCACHE_MODULE_CACHE=/tmp/wcmod-follow
m=${MODEL:-/root/m8b}
rd=/tmp/wcrun-follow
td=${TRAINER_DEVICE:+--trainer-device $TRAINER_DEVICE}

date -u
nvidia-smi -L
[ -f $m/config.json ] || $BUILD/bin/wcgen llama-8b --out $m >/dev/null || exit 1
start_wcd $BUILD/bin/wcd $m $rd || exit 1
grep -E '^(bytes|tensors|pools|load_seconds)=' $rd/*.ready
{
	echo "== module from the manifest, full updates"
	timeout 280 $PY -W ignore bench/py/follow_switch.py --model $m --runtime-dir $rd --device 0 -n ${N:-20} $td
	echo "== module from the manifest, full updates, the old version detached inside poll()"
	timeout 280 $PY -W ignore bench/py/follow_switch.py --model $m --runtime-dir $rd --device 0 -n ${N:-20} $td --detach now
	echo "== transformers' LlamaForCausalLM, full updates"
	timeout 280 $PY -W ignore bench/py/follow_switch.py --model $m --runtime-dir $rd --device 0 -n ${N:-20} $td --transformers
	echo "== module from the manifest, partial updates of one tensor"
	timeout 200 $PY -W ignore bench/py/follow_switch.py --model $m --runtime-dir $rd --device 0 -n ${N:-20} $td --partial
} 2>&1 | tee "$OUT/follow.log"
kill $pid
wait $pid
