#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 18 on one host with N GPUs (N = all it has, or $N): run from the
# repository root on the GPU machine with build/ carried (the `run` tool,
# kind nvidia-h200-x2/-x4/-x8). Logs go to $OUT (at most 8 files come back).
#
#   bench/gpu/gpu_multi.sh all        everything below, in this order
#   bench/gpu/gpu_multi.sh ceilings   single-GPU H2D ceiling (GPU 0), the N GPUs'
#                                 H2D at once, and the page cache read by N
#                                 readers at once (the host's limit when every
#                                 daemon loads from the page cache)
#   bench/gpu/gpu_multi.sh load       `wcctl start --tp-size N` on $MODEL (default
#                                 wcgen llama-8b in /root/m8b): warm, then cold
#                                 (drop_caches); aggregate GB/s = the ranks'
#                                 bytes / wall time to "all ready", against
#                                 N x the single-GPU ceiling and the page-cache
#                                 rate (MODEL=DIR PRESET=llama-1b: another wcgen
#                                 preset); wcctl status; one engine process per
#                                 GPU (CUDA_VISIBLE_DEVICES=g) attaches its
#                                 rank by UUID and verifies every hash
#   bench/gpu/gpu_multi.sh forward    the tensor-parallel forward across the GPUs
#                                 with torch.distributed (NCCL) from the
#                                 served shards (bench/gpu/gpu_tp_nccl.py), tiny
#                                 GQA Llama and Mixtral of test/data/layouts,
#                                 against transformers' logits
#
# Not here (issue 18, to do on a multi-GPU machine): staging and read
# settings at N = 8 (pass them after `--` in WCD_OPTS), NUMA placement of
# each daemon's staging (numactl), peer copies between daemons, and a
# llama-8b-shaped forward (wcgen's data are random bits, not a model).
set -u
OUT=${OUT:-/tmp/gpu_multi}
mkdir -p "$OUT"
export BUILD=${BUILD:-build} PYTHONUNBUFFERED=1
B=$PWD/$BUILD/bin
N=${N:-$(nvidia-smi -L | wc -l)}
MODEL=${MODEL:-/root/m8b}
PRESET=${PRESET:-llama-8b}
RD=${RD:-/tmp/wcmulti}
WCD_OPTS=${WCD_OPTS:-}
mapfile -t UUIDS < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
now() { date +%s.%N; }

ceilings() {
	{
		echo "== $N GPU(s): ${UUIDS[*]:0:$N}"
		nvidia-smi topo -m 2>/dev/null | head -20
		lscpu | grep -E 'Model name|NUMA node'
		echo "-- single GPU (GPU 0) H2D"
		CUDA_VISIBLE_DEVICES=0 $BUILD/bench/gpu_h2d --gib 4 | grep -E 'ceiling'
		echo "-- $N GPUs' H2D at once (each line one GPU)"
		for ((g = 0; g < N; g++)); do
			CUDA_VISIBLE_DEVICES=$g $BUILD/bench/gpu_h2d --gib 4 >"$RD.h2d.$g" 2>&1 &
		done
		wait
		for ((g = 0; g < N; g++)); do echo "GPU $g: $(grep ceiling "$RD.h2d.$g")"; done
		rm -f "$RD".h2d.*
		prepare_model
		echo "-- page cache read by $N readers at once (gpu_dread --buffered, each"
		echo "   reading every shard with io_uring at queue depth 32, as wcd does)"
		cat "$MODEL"/*.safetensors >/dev/null
		local t0 t1 bytes
		bytes=$(du -cb "$MODEL"/*.safetensors | tail -1 | cut -f1)
		t0=$(now)
		for ((g = 0; g < N; g++)); do
			$BUILD/bench/gpu_dread --buffered --qd 32 --chunk 4 "$MODEL"/*.safetensors >"$RD.dread.$g" 2>&1 &
		done
		wait
		t1=$(now)
		tail -qn 1 "$RD".dread.*; rm -f "$RD".dread.*
		awk -v b="$bytes" -v n="$N" -v t="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
			'BEGIN { printf "%d readers x %.2f GB in %.2f s: %.1f GB/s aggregate\n", n, b/1e9, t, n*b/1e9/t }'
	} 2>&1 | tee "$OUT/ceilings.log"
}

prepare_model() {
	[ -f "$MODEL/config.json" ] || $B/wcgen "$PRESET" --out "$MODEL" >/dev/null || exit 1
}

# start_all LABEL: wcctl start --tp-size N, timed; prints the aggregate.
start_all() {
	local t0 t1 bytes=0 f
	rm -rf "$RD"; mkdir -p "$RD"
	t0=$(now)
	$B/wcctl start --model "$MODEL" --tp-size "$N" --runtime-dir "$RD" --timeout 900 \
		${WCD_OPTS:+-- $WCD_OPTS} 2>&1 | tail -3
	t1=$(now)
	for f in "$RD"/*.ready; do
		bytes=$((bytes + $(grep -m1 '^bytes=' "$f" | cut -d= -f2)))
		echo "$(basename "$f"): $(grep -E '^(tp_rank|load_seconds)=' "$f" | tr '\n' ' ')"
	done
	awk -v b="$bytes" -v t="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" -v l="$1" -v n="$N" \
		'BEGIN { printf "%s: %d ranks, %.2f GB in %.2f s to all ready: %.1f GB/s aggregate\n", l, n, b/1e9, t, b/1e9/t }'
	grep -h 'phase' "$RD"/*.log | sed 's/^[^ ]* //' | sort | uniq -c | sort -rn | head -12
}

load() {
	prepare_model
	{
		echo "== warm (page cache)"
		cat "$MODEL"/*.safetensors >/dev/null
		start_all warm
		$B/wcctl status --runtime-dir "$RD"
		echo "-- one engine process per GPU attaches its rank by UUID, --verify"
		for ((g = 0; g < N; g++)); do
			CUDA_VISIBLE_DEVICES=$g $B/wcattach --device "${UUIDS[g]}" --runtime-dir "$RD" \
				--model "$MODEL" --tp-size "$N" --tp-rank "$g" --verify >"$RD/attach.$g" 2>&1 &
		done
		wait
		for ((g = 0; g < N; g++)); do echo "GPU $g: $(tail -1 "$RD/attach.$g")"; done
		$B/wcctl stop --all --runtime-dir "$RD"
		echo "== cold (drop_caches)"
		sync; echo 3 >/proc/sys/vm/drop_caches
		start_all cold
		$B/wcctl stop --all --runtime-dir "$RD"
	} 2>&1 | tee "$OUT/load.log"
}

forward() {
	local m port=29511 rc=0 g
	{
		for m in test/data/layouts/llama test/data/layouts/mixtral; do
			rm -rf "$RD"; mkdir -p "$RD"
			$B/wcctl start --model "$PWD/$m" --tp-size "$N" --runtime-dir "$RD" --timeout 120 2>&1 | tail -1
			for ((g = 0; g < N; g++)); do
				CUDA_VISIBLE_DEVICES=$g RANK=$g WORLD_SIZE=$N MASTER_ADDR=127.0.0.1 \
					MASTER_PORT=$port python3 bench/gpu/gpu_tp_nccl.py --model "$PWD/$m" \
					--device "${UUIDS[g]}" --runtime-dir "$RD" --lib "$PWD/$BUILD/lib/libwcache.so" \
					>"$RD/nccl.$g" 2>&1 &
			done
			wait || true
			for ((g = 0; g < N; g++)); do
				grep -q . "$RD/nccl.$g" && { echo "-- rank $g"; tail -5 "$RD/nccl.$g"; }
			done
			grep -q ': ok$' "$RD/nccl.0" || rc=1
			$B/wcctl stop --all --runtime-dir "$RD"
			port=$((port + 1))
		done
		echo "forward rc=$rc"
	} 2>&1 | tee "$OUT/forward.log"
	return $rc
}

all() {
	ceilings
	load
	forward
}

"${@:-all}"
