set -u
export BUILD=.dev/c3/new
. bench/py/gpu_env.sh
export PATH=$PWD/$BUILD/bin:$PATH WC_TOP=$PWD
nvidia-smi -L; date -u
SECONDS=0
( timeout 60 .dev/c3/ov 8 0; timeout 60 .dev/c3/ov 8 1 ) > /tmp/ov.log 2>&1; echo "ov ${SECONDS} s"
SECONDS=0
timeout 60 .dev/c3/new/test/gpu_hash > $OUT/gh-new.log 2>&1; echo "gpu_hash rc=$? ${SECONDS} s"
grep -c "equal the host" $OUT/gh-new.log; grep -i "fail\|mismatch" $OUT/gh-new.log | head -5
grep "mix" $OUT/gh-new.log | sort | awk -F: '{k=$1; split($2,a," "); v[k]=v[k]" "a[1]} END{for(k in v) print k":"v[k]}' | sort
SECONDS=0
export WCACHE_LIB=$PWD/.dev/c3/new/lib/libwcache.so LD_LIBRARY_PATH=$PWD/.dev/c3/new/lib PYTHONPATH=$PWD/tools/libwcache/python
timeout 200 python3 -m pytest -q -rs test/py/test_gpu_push.py test/py/test_gpu_push_inplace.py test/py/test_gpu_rl_loop.py 2>&1 | tee $OUT/gpu_py.log | tail -4
echo "py gpu tests ${SECONDS} s"; SECONDS=0
WC_GPU_MODELS=test/data/reference/llama timeout 60 test/run.sh -j 1 .dev/c3/new/test/gpu_[eilp]* 2>&1 | tee $OUT/gpu_c.log | tail -3
echo "C gpu tests ${SECONDS} s"; date -u
m=/root/m8b
SECONDS=0; wcgen llama-8b --out $m >/dev/null || exit 1
cat $m/*.safetensors >/dev/null; echo "wcgen+cat ${SECONDS} s"
bench() {   # bench NAME DIR PYDIR
  local rd=/tmp/wcrun-$1
  export WCACHE_LIB=$PWD/$2/lib/libwcache.so LD_LIBRARY_PATH=$PWD/$2/lib PYTHONPATH=$PWD/$3
  start_wcd $PWD/$2/bin/wcd $m $rd --log-level debug || return 1
  echo "== $1"
  timeout 100 python3 bench/gpu/push_bench.py --model $m --runtime-dir $rd -r 5 --skip save,ipc 2>&1 | tee $OUT/pb-$1.log | grep -v "^floor-\|GB/s"
  [ $1 = new ] && grep -E 'device hash|commit of session' $rd/wcd.log | tail -80 > $OUT/wcd-$1.txt
  kill $pid; wait $pid
}
SECONDS=0
bench new .dev/c3/new tools/libwcache/python
bench old .dev/c3/old .dev/c3/old/python
echo "benches ${SECONDS} s"; date -u
SECONDS=0
rd=/tmp/wcrun-inst
export WCACHE_LIB=$PWD/.dev/c3/new/lib/libwcache.so LD_LIBRARY_PATH=$PWD/.dev/c3/new/lib PYTHONPATH=$PWD/tools/libwcache/python
start_wcd $PWD/.dev/c3/new/bin/wcd $m $rd --log-level debug && {
timeout 100 python3 .dev/c3/phases.py $m $rd > $OUT/inst.log 2>&1; echo "inst rc=$?"
grep -E 'device hash|commit of session' $rd/wcd.log | tail -60 > $OUT/wcd-inst.txt
kill $pid; wait $pid; }
grep "^P " $OUT/inst.log | tail -50
echo "inst ${SECONDS} s"; date -u

echo "== ov"; cat /tmp/ov.log
