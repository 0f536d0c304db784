set -u
export BUILD=.dev/c2/new
. bench/py/gpu_env.sh
export PATH=$PWD/$BUILD/bin:$PATH WC_TOP=$PWD
nvidia-smi -L; date -u
SECONDS=0
WC_GPU_MODELS=test/data/reference/llama timeout 60 test/run.sh -j 1 .dev/c2/new/test/gpu_* 2>&1 | tee $OUT/gpu_c.log | tail -8
echo "C gpu tests ${SECONDS} s"; SECONDS=0
timeout 130 python3 -m pytest -q -rs test/py/test_gpu_push.py test/py/test_gpu_push_inplace.py test/py/test_gpu_rl_loop.py 2>&1 | tee $OUT/gpu_py.log | tail -4
echo "py gpu tests ${SECONDS} s"; date -u
m=/root/m8b
SECONDS=0; wcgen llama-8b --out $m >/dev/null || exit 1
cat $m/*.safetensors >/dev/null; echo "wcgen+cat ${SECONDS} s"
bench() {   # bench NAME WCD LIBDIR
  local rd=/tmp/wcrun-$1
  export WCACHE_LIB=$PWD/$3/libwcache.so LD_LIBRARY_PATH=$PWD/$3
  start_wcd $PWD/$2 $m $rd --log-level debug || return 1
  echo "== $1"
  timeout 100 python3 bench/gpu/push_bench.py --model $m --runtime-dir $rd -r 5 --skip save,ipc 2>&1 | tee $OUT/pb-$1.log
  grep -E 'update session|kept from before|commit of|device hash|freed|spare' $rd/wcd.log > $OUT/wcd-$1.txt
  kill $pid; wait $pid
}
bench new .dev/c2/new/bin/wcd .dev/c2/new/lib
bench old .dev/c2/old/bin/wcd .dev/c2/old/lib
date -u
