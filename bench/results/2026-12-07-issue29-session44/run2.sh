set -u
export BUILD=.dev/c4/new
. bench/py/gpu_env.sh
export PATH=$PWD/$BUILD/bin:$PATH WC_TOP=$PWD
nvidia-smi -L; date -u
SECONDS=0
timeout 90 $BUILD/test/gpu_hash > $OUT/gh.log 2>&1; echo "gpu_hash rc=$? ${SECONDS} s"
grep -c "equal the host" $OUT/gh.log; grep -i "fail\|mismatch\|assert" $OUT/gh.log | head -5
grep "mix" $OUT/gh.log | sed 's/ (queued.*//' | sort | awk -F': ' '{v[$1]=v[$1]" "$2} END{for(k in v) print k":"v[k]}' | sed 's/ ms//g' | sort
m=/root/m8b
SECONDS=0; wcgen llama-8b --out $m >/dev/null || exit 1
cat $m/*.safetensors >/dev/null; echo "wcgen+cat ${SECONDS} s"
export WCACHE_LIB=$PWD/$BUILD/lib/libwcache.so LD_LIBRARY_PATH=$PWD/$BUILD/lib PYTHONPATH=$PWD/tools/libwcache/python
bench() {   # bench NAME SUMS
  local rd=/tmp/wcrun-$1
  WCACHE_CUDA_SUMS=$2 start_wcd $PWD/$BUILD/bin/wcd $m $rd --log-level debug || return 1
  echo "== $1 (WCACHE_CUDA_SUMS=$2)"
  timeout 100 python3 bench/gpu/push_bench.py --model $m --runtime-dir $rd -r 5 --skip save,ipc 2>&1 | tee $OUT/pb-$1.log | grep -v "^floor-\|GB/s" | sed 's/, sources.*daemon_seal_hash/, seal_hash/; s/, lib_open.*//'
  grep -E 'device hash|commit of session' $rd/wcd.log | tail -40 > $OUT/wcd-$1.txt
  kill $pid; wait $pid
}
SECONDS=0
bench s4a 4
bench thr thread
bench s4b 4
echo "benches ${SECONDS} s"; date -u
