#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What runs on the GPU machine (the `run` tool), one phase per call, from the
# repository root, with build/ carried from the build machine. Logs go to
# $OUT (at most 8 files come back).
#
#   bench/gpu_run.sh probe     machine facts, the GPU tests, the H2D and hash
#                              ceilings (C and torch), the reference checkpoint
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
		python3 bench/gpu_peers.py env
	} >"$OUT/probe.log" 2>&1
	cat "$OUT/probe.log"
	test/run.sh $BUILD/test/gpu_* 2>&1 | tee "$OUT/tests.log"
	for t in $BUILD/test/gpu_*; do echo "== $t"; "$t"; echo "rc=$?"; done >"$OUT/tests_verbose.log" 2>&1
	grep -E '^(mode|  |device|1 GiB|io_uring)|rc=' "$OUT/tests_verbose.log"
	$BUILD/bench/gpu_h2d --gib 16 2>&1 | tee "$OUT/h2d.log"
	python3 bench/gpu_peers.py h2d --gib 16 2>&1 | tee -a "$OUT/h2d.log"
	if [ -f test/data/make_reference.py ]; then
		python3 test/data/make_reference.py /tmp/ref >"$OUT/reference.log" 2>&1 &&
			tar -C /tmp -czf "$OUT/reference.tgz" ref
		tail -5 "$OUT/reference.log"; ls -la "$OUT"
	fi
}

"$@"
