# SPDX-License-Identifier: MIT
# Sourced by the GPU machine's scripts (bench/py/py_gpu.sh,
# bench/py/follow_gpu.sh, bench/gpu/push_bench.sh), run from the tree's
# root with build/ carried: the package, libwcache and the binaries of this
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
