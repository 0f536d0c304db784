set -u
export BUILD=.dev/c3/new
. bench/py/gpu_env.sh
export PATH=$PWD/$BUILD/bin:$PATH WC_TOP=$PWD
nvidia-smi -L; date -u; nproc; lscpu | grep -E "Model name" | head -1
T0=$SECONDS
hashrun() {  # NAME G SEGKIB
  local s=$SECONDS
  WCACHE_CUDA_CHAIN_GROUPS=$2 WCACHE_CUDA_HASH_SEG_KIB=$3 timeout 100 .dev/c3/new/test/gpu_hash > $OUT/gh-$1.log 2>&1
  echo "== gpu_hash $1 (G=$2 S=$3) rc=$? $((SECONDS-s)) s"
  grep -E "mix|rounds|parts|host chains:|FAIL|fail|Assert" $OUT/gh-$1.log | grep -v "^kernel" | tail -22
}
hashrun base 1 32768
hashrun g4s32 4 32768
hashrun g4s16 4 16384
hashrun g1s16 1 16384
hashrun g2s16 2 16384
best=$(for f in $OUT/gh-*.log; do n=${f##*/gh-}; n=${n%.log}; v=$(grep "mix, all.*host chains" $f | awk '{print $(NF-1)}' | sort -n | head -1); echo "$v $n"; done | sort -n | head -1)
echo "best by mix/all host chains: $best"
bn=${best#* }
case $bn in g4s32) G=4 S=32768;; g4s16) G=4 S=16384;; g4s8) G=4 S=8192;; g1s16) G=1 S=16384;; g2s16) G=2 S=16384;; *) G=1 S=32768;; esac
echo "hash phase $((SECONDS-T0)) s"; SECONDS=0
m=/root/m8b
wcgen llama-8b --out $m >/dev/null || exit 1
cat $m/*.safetensors >/dev/null; echo "wcgen+cat ${SECONDS} s"
bench() {   # bench NAME
  local rd=/tmp/wcrun-$1
  export WCACHE_LIB=$PWD/.dev/c3/new/lib/libwcache.so LD_LIBRARY_PATH=$PWD/.dev/c3/new/lib
  start_wcd $PWD/.dev/c3/new/bin/wcd $m $rd --log-level debug || return 1
  echo "== $1 G=${WCACHE_CUDA_CHAIN_GROUPS:-1} S=${WCACHE_CUDA_HASH_SEG_KIB:-32768}"
  timeout 100 python3 bench/gpu/push_bench.py --model $m --runtime-dir $rd -r 5 --skip save,ipc 2>&1 | tee $OUT/pb-$1.log
  grep -E 'device hash|commit of' $rd/wcd.log | gzip > $OUT/wcd-$1.txt.gz
  kill $pid; wait $pid
}
SECONDS=0
bench base
benchold() {
  local rd=/tmp/wcrun-old
  export WCACHE_LIB=$PWD/.dev/c3/old/lib/libwcache.so LD_LIBRARY_PATH=$PWD/.dev/c3/old/lib
  start_wcd $PWD/.dev/c3/old/bin/wcd $m $rd --log-level debug || return 1
  echo "== old (f463edb)"
  timeout 100 python3 bench/gpu/push_bench.py --model $m --runtime-dir $rd -r 5 --skip save,ipc 2>&1 | tee $OUT/pb-old.log
  kill $pid; wait $pid
}
benchold
export WCACHE_CUDA_CHAIN_GROUPS=$G WCACHE_CUDA_HASH_SEG_KIB=$S
bench best
unset WCACHE_CUDA_CHAIN_GROUPS WCACHE_CUDA_HASH_SEG_KIB
echo "benches ${SECONDS} s"; date -u; SECONDS=0
export BUILD=.dev/c3/new WCACHE_LIB=$PWD/.dev/c3/new/lib/libwcache.so LD_LIBRARY_PATH=$PWD/.dev/c3/new/lib; . bench/py/gpu_env.sh
timeout 100 python3 -m pytest -q -rs test/py/test_gpu_push.py test/py/test_gpu_push_inplace.py 2>&1 | tee $OUT/gpu_py.log | tail -4
echo "py gpu tests ${SECONDS} s"; date -u
