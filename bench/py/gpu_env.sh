# SPDX-License-Identifier: MIT
# Sourced by the GPU machine's scripts (bench/py/py_gpu.sh,
# bench/py/follow_gpu.sh, bench/gpu/push_bench.sh), run from the tree's
# root with build/ carried (start_wcd below is their daemon's start): the package, libwcache and the binaries of this
# tree, and the layouts (fused views, aliases) from this tree, since wcd
# looks in the build tree's absolute path first, which a copied tree does
# not have. libwcache.so needs libjansson.so.4 at run time: put it in
# $BUILD/lib when the machine lacks it (LD_LIBRARY_PATH points there).
export BUILD=${BUILD:-build} PYTHONUNBUFFERED=1
export WC_TOP=$PWD PYTHONPATH=$PWD/tools/libwcache/python
export WCACHE_LAYOUT_DIR=${WCACHE_LAYOUT_DIR:-$PWD/proto/plan/layouts}
export WCACHE_LIB=$PWD/$BUILD/lib/libwcache.so
export LD_LIBRARY_PATH=$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PY=${PY:-python3}

# start_wcd WCD MODEL RUNDIR [OPTION...]: starts the wcd binary WCD on
# GPU 0 (WCD_DEVICE: another device spec) serving MODEL in a fresh RUNDIR
# (its log RUNDIR/wcd.log) and waits for its ready file (up to 2 min);
# the pid in $pid; 1 (the log's tail printed) when it exits or is not
# ready.
start_wcd() {
	local w=$1 m=$2 rd=$3; shift 3
	rm -rf $rd; mkdir -p $rd
	setsid $w --model $m --device ${WCD_DEVICE:-0} --runtime-dir $rd "$@" >$rd/wcd.log 2>&1 </dev/null &
	pid=$!
	for _ in $(seq 600); do
		ls $rd/*.ready >/dev/null 2>&1 && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.2
	done
	ls $rd/*.ready >/dev/null 2>&1 || { tail -20 $rd/wcd.log; return 1; }
}
