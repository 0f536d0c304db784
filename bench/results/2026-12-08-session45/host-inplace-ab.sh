set -u
export WCACHE_LIB=/work/main/build/lib/libwcache.so PYTHONPATH=/work/main/tools/libwcache/python
for round in 1 2; do
 for which in old new; do
  bin=/tmp/old/build/bin/wcd; [ $which = new ] && bin=/work/main/build/bin/wcd
  pkill -f "wcd --model /tmp/l1/m"; sleep 1; rm -rf /tmp/l1/rd
  ($bin --model /tmp/l1/m --device host --runtime-dir /tmp/l1/rd > /tmp/l1/wcd-$which.out 2>&1 &)
  for i in $(seq 120); do [ -e /tmp/l1/rd/host.ready ] && break; sleep 1; done
  echo "== round $round, $which wcd ($bin)"
  timeout 900 /usr/bin/python3 /work/main/bench/py/push_host.py --runtime-dir /tmp/l1/rd -r 3 2>&1 | grep -v Warning | grep -v "where = "
 done
done
pkill -f "wcd --model /tmp/l1/m"
