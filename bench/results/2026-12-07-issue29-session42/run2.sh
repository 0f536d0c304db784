set -u
export BUILD=.dev/c3/new
. bench/py/gpu_env.sh
export PATH=$PWD/$BUILD/bin:$PATH WC_TOP=$PWD
nvidia-smi -L; date -u; nproc; lscpu | grep -E "Model name|NUMA node" | head -4
hashrun() {  # NAME BIN G SEGKIB
  local s=$SECONDS
  WCACHE_CUDA_CHAIN_GROUPS=$3 WCACHE_CUDA_HASH_SEG_KIB=$4 timeout 60 $2 > $OUT/gh-$1.log 2>&1
  echo "== gpu_hash $1 (G=$3 S=$4) rc=$? $((SECONDS-s)) s"
  grep -v "^llama\|^kernel" $OUT/gh-$1.log | grep -v "equal the host" | tail -5
  grep -c "equal the host" $OUT/gh-$1.log
  grep "mix" $OUT/gh-$1.log | sort | awk -F: '{k=$1; split($2,a," "); v[k]=v[k]" "a[1]} END{for(k in v) print k":"v[k]}' | sort
}
hashrun new .dev/c3/new/test/gpu_hash 1 32768
hashrun old .dev/c3/old/test/gpu_hash 1 32768
hashrun g2s16 .dev/c3/new/test/gpu_hash 2 16384
SECONDS=0
export WCACHE_LIB=$PWD/.dev/c3/new/lib/libwcache.so LD_LIBRARY_PATH=$PWD/.dev/c3/new/lib
timeout 100 python3 -m pytest -q -rs test/py/test_gpu_push.py test/py/test_gpu_push_inplace.py 2>&1 | tee $OUT/gpu_py.log | tail -3
echo "py gpu tests ${SECONDS} s"; SECONDS=0
WC_GPU_MODELS=test/data/reference/llama timeout 60 test/run.sh -j 1 .dev/c3/new/test/gpu_[eilp]* 2>&1 | tee $OUT/gpu_c.log | tail -3
echo "C gpu tests ${SECONDS} s"; date -u
m=/root/m8b
SECONDS=0; wcgen llama-8b --out $m >/dev/null || exit 1
cat $m/*.safetensors >/dev/null; echo "wcgen+cat ${SECONDS} s"
bench() {   # bench NAME DIR
  local rd=/tmp/wcrun-$1
  export WCACHE_LIB=$PWD/$2/lib/libwcache.so LD_LIBRARY_PATH=$PWD/$2/lib
  start_wcd $PWD/$2/bin/wcd $m $rd --log-level debug || return 1
  echo "== $1"
  timeout 100 python3 bench/gpu/push_bench.py --model $m --runtime-dir $rd -r 5 --skip save,ipc 2>&1 | tee $OUT/pb-$1.log | grep -v "^floor-\|GB/s"
  grep -E 'device hash' $rd/wcd.log | tail -30 > $OUT/wcd-$1.txt
  kill $pid; wait $pid
}
SECONDS=0
bench new .dev/c3/new
bench old .dev/c3/old
echo "benches ${SECONDS} s"; date -u
