# The 45k-tensor rank (wcgen deepseek-v3-shape) on the host backend: a
# partial in-place update of two small tensors, old (923f3b7: the open
# plans the model again each session) / new (b25ff58: the plan kept at
# the commit) wcd alternated twice; bench/py/push_host.py -r 5.
set -u
m=${M:-/tmp/ds/m}
export WCACHE_LIB=/work/main/build/lib/libwcache.so PYTHONPATH=/work/main/tools/libwcache/python
for round in 1 2; do
 for which in old new; do
  bin=/tmp/old/build/bin/wcd; [ $which = new ] && bin=/work/main/build/bin/wcd
  pkill -f "wcd --model $m"; sleep 1; rm -rf /tmp/ds/rdab
  ($bin --model $m --device host --runtime-dir /tmp/ds/rdab > /tmp/ds/wcd-$which.out 2>&1 &)
  for i in $(seq 120); do [ -e /tmp/ds/rdab/host.ready ] && break; sleep 1; done
  echo "== round $round, $which wcd ($bin)"
  timeout 900 /usr/bin/python3 /work/main/bench/py/push_host.py --runtime-dir /tmp/ds/rdab --frac 0.0001 -r 5 2>&1 | grep -v Warning | grep -v "where = "
  grep "open:" /tmp/ds/wcd-$which.out | tail -1 | sed 's/.*opened in/  the last open: opened in/'
 done
done
pkill -f "wcd --model $m"
