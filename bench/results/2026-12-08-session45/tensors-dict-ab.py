import time, wcache, statistics
conn = wcache.connect(device="host", runtime_dir="/tmp/ds/rd2")
for i in range(3):
    m = conn.attach(); t = m.tensors(); del t; m.detach()
ts=[]
for i in range(40):
    m = conn.attach(); t1=time.perf_counter(); x = m.tensors(); t2=time.perf_counter()
    ts.append(t2-t1); del x; m.detach()
print("tensors() p50 %.2f ms, min %.2f" % (statistics.median(ts)*1e3, min(ts)*1e3))
