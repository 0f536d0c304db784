#!/bin/bash
# Old and new binaries alternated on one GPU (a restructure's "behaviour
# and speed unchanged"): for each of ROUNDS rounds, old then new, a wcd on
# GPU 0 loads MODEL (wcgen llama-8b by default, page cache warm), then the
# ready file's load_seconds, `wcbench attach -n 50`'s cycle p50, and the
# wall time of `wcctl restart` (the process's start included, no engine
# attached).
#
#   OLD_BIN=DIR [OLD_LAYOUTS=DIR] [MODEL=DIR] [ROUNDS=3] bench/gpu/ab_bins.sh
#
# OLD_BIN holds the old wcd, wcctl and wcbench (e.g. build/bin of a
# worktree at the old commit, carried to the GPU machine); OLD_LAYOUTS the
# old tree's layout presets (default: this tree's). New: $BUILD/bin.
set -u
: "${OLD_BIN:?set OLD_BIN to the old build/bin}"
BUILD=${BUILD:-build}
NEW_LAYOUTS=$PWD/proto/plan/layouts
OLD_LAYOUTS=${OLD_LAYOUTS:-$NEW_LAYOUTS}
export LD_LIBRARY_PATH=$PWD/$BUILD/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
m=${MODEL:-/root/m8b}; rd=/tmp/wcab.$$
[ -f $m/config.json ] || $BUILD/bin/wcgen llama-8b --out $m >/dev/null || exit 1
cat $m/*.safetensors >/dev/null
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
for round in $(seq ${ROUNDS:-3}); do
	for which in old new; do
		if [ $which = old ]; then B=$OLD_BIN; L=$OLD_LAYOUTS; else B=$PWD/$BUILD/bin; L=$NEW_LAYOUTS; fi
		rm -rf $rd; mkdir -p $rd
		WCACHE_LAYOUT_DIR=$L setsid $B/wcd --model $m --device 0 --runtime-dir $rd >$rd/wcd.log 2>&1 </dev/null &
		for _ in $(seq 1200); do ls $rd/*.ready >/dev/null 2>&1 && break; sleep 0.1; done
		ls=$(sed -n 's/^load_seconds=//p' $rd/*.ready)
		at=$($B/wcbench attach --runtime-dir $rd --device $uuid --model $m -n 50 -q 2>&1 |
			awk '/cycle \(total\)/ {print $4, $5}')
		t0=$(date +%s%N)
		WCACHE_LAYOUT_DIR=$L $B/wcctl restart --device $uuid --runtime-dir $rd --wcd $B/wcd >/dev/null 2>$rd/rs.err
		rc=$?
		t1=$(date +%s%N)
		echo "round $round $which: load_seconds $ls, attach p50 $at, restart $(( (t1 - t0) / 1000000 )) ms rc $rc"
		pid=$(sed -n 's/^pid=//p' $rd/*.ready)
		kill $pid 2>/dev/null
		while kill -0 $pid 2>/dev/null; do sleep 0.1; done
	done
done
rm -rf $rd
