set -u
export BUILD=.dev/c3/new
. bench/py/gpu_env.sh
export PATH=$PWD/$BUILD/bin:$PATH WC_TOP=$PWD
nvidia-smi -L; date -u; nproc
SECONDS=0
timeout 120 .dev/c3/new/test/gpu_hash 2>&1 | tee $OUT/gpu_hash-new.log | tail -16
echo "gpu_hash rc=${PIPESTATUS[0]} ${SECONDS} s"; SECONDS=0
m=/root/m8b
wcgen llama-8b --out $m >/dev/null || exit 1
cat $m/*.safetensors >/dev/null; echo "wcgen+cat ${SECONDS} s"
bench() {   # bench NAME WCD LIBDIR
  local rd=/tmp/wcrun-$1
  export WCACHE_LIB=$PWD/$3/libwcache.so LD_LIBRARY_PATH=$PWD/$3
  start_wcd $PWD/$2 $m $rd --log-level debug || return 1
  echo "== $1"
  timeout 100 python3 bench/gpu/push_bench.py --model $m --runtime-dir $rd -r 5 --skip save,ipc 2>&1 | tee $OUT/pb-$1.log
  grep -E 'update session|kept from before|commit of|device hash|freed|spare|hash' $rd/wcd.log > $OUT/wcd-$1.txt
  kill $pid; wait $pid
}
SECONDS=0
bench new .dev/c3/new/bin/wcd .dev/c3/new/lib
bench old .dev/c3/old/bin/wcd .dev/c3/old/lib
echo "benches ${SECONDS} s"; SECONDS=0
export BUILD=.dev/c3/new; . bench/py/gpu_env.sh
timeout 130 python3 -m pytest -q -rs test/py/test_gpu_push.py test/py/test_gpu_push_inplace.py test/py/test_gpu_rl_loop.py 2>&1 | tee $OUT/gpu_py.log | tail -4
echo "py gpu tests ${SECONDS} s"; SECONDS=0
WC_GPU_MODELS=test/data/reference/llama timeout 90 test/run.sh -j 1 .dev/c3/new/test/gpu_[eilp]* 2>&1 | tee $OUT/gpu_c.log | tail -6
echo "C gpu tests ${SECONDS} s"; SECONDS=0
export WCACHE_CUDA_HOST_CHAINS=0
bench nohc .dev/c3/new/bin/wcd .dev/c3/new/lib
unset WCACHE_CUDA_HOST_CHAINS
bench new2 .dev/c3/new/bin/wcd .dev/c3/new/lib
date -u
