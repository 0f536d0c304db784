#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The engine layouts' run on the GPU machine (issue 14; issue 18 at N = 1):
# from the repository root with build/ carried, logs to $OUT.
#   1. test/data/make_layout_models.py for the named checkpoints (default
#      none), tarred into $OUT/models.tgz
#   2. the layout tests here: the GPU forward (test_gpu_layout_forward.py:
#      tp 2/4/8 from host- and CUDA-backend ranks against transformers on the
#      GPU), the numpy forward and wcd against the reference
#   3. bench/gpu/gpu_multi.sh with every GPU this machine has (MODEL, PRESET as
#      there; default wcgen llama-1b in /root/m1b)
set -u
OUT=${OUT:-/tmp/gpu_layouts}
mkdir -p "$OUT"
export BUILD=${BUILD:-build} PYTHONUNBUFFERED=1 OUT
# wcd reads its layout presets from here when run from a checkout
[ -d proto/plan/layouts ] && export WCACHE_LAYOUT_DIR=${WCACHE_LAYOUT_DIR:-$PWD/proto/plan/layouts}
rc=0
if [ $# -gt 0 ]; then
	python3 test/data/make_layout_models.py /tmp/layouts "$@" >"$OUT/models.log" 2>&1 || rc=1
	tail -3 "$OUT/models.log"
	tar -C /tmp -czf "$OUT/models.tgz" layouts
fi
python3 -m pytest -q -rs -s -p no:cacheprovider test/py/test_gpu_layout_forward.py \
	test/py/test_layout_forward.py test/py/test_layout_daemon.py test/py/test_layout_daemon_wcgen.py 2>&1 |
	tee "$OUT/layout_tests.log" | grep -vE '^\s*$' | tail -40
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
MODEL=${MODEL:-/root/m1b} PRESET=${PRESET:-llama-1b} bench/gpu/gpu_multi.sh all >/dev/null 2>&1 || rc=1
cat "$OUT"/ceilings.log "$OUT"/load.log "$OUT"/forward.log 2>/dev/null | grep -vE '^\s*$' | tail -60
exit $rc
