#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Issue 29's benchmark (b): an in-place update with the engine paused,
against a device-to-device copy of the same bytes measured in the same run.

One running wcd (start it first), one process: an engine connection
attaches and pauses; a trainer connection pushes new weights with
update_from(in_place=True) (open, the copies, commit: the daemon's hashes
included) while the engine is paused; the engine waits for the "in_place"
notice and resumes on the same mappings. The D2D baseline copies the same
tensors into a second set of device buffers (torch copy_ on one stream,
synchronized). Target: in place at most 2x the copy. Every run checks that
the engine's tensors equal the sources after resume (same pointers).

On the H200 (the tree with build/ carried, env as bench/py/py_gpu.sh sets it):

    wcgen llama-8b --out /root/m8b
    build/bin/wcd --model /root/m8b --device 0 --runtime-dir /tmp/wcip &
    python3 bench/gpu/push_inplace.py --device 0 --runtime-dir /tmp/wcip -n 5

Here (host backend, CPU sources, to check the script): --device host:NAME
--source cpu. Prints one line per run and a JSON summary last.
"""
import argparse
import json
import statistics
import sys
import time
import warnings

import torch
import wcache

# the engine's tensors are read here, never written
warnings.simplefilter("ignore", wcache.ReadOnlyWarning)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def wait_notice(conn, kind, timeout_s=30):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        n = conn.read_notice()
        if n and n.kind == kind:
            return n
        if not n:
            time.sleep(0.0005)
    sys.exit("no %s notice within %d s" % (kind, timeout_s))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", required=True, help="as wcache.connect takes it")
    ap.add_argument("--runtime-dir", required=True)
    ap.add_argument("-n", type=int, default=5, help="runs of each")
    ap.add_argument("--source", choices=("cuda", "cpu"), default="cuda",
                    help="where the trainer's tensors live (cuda needs update_from "
                    "with CUDA sources)")
    a = ap.parse_args()
    dev = torch.device("cuda:0" if a.source == "cuda" else "cpu")

    engine = wcache.connect(device=a.device, runtime_dir=a.runtime_dir)
    engine.hello()
    m = engine.attach(framework="torch")
    ck = [t for t in m.manifest if not t.flags & 0x2]   # checkpoint entries, no views
    nbytes = sum(t.nbytes for t in ck)
    torch.manual_seed(29)
    srcs = {}
    for t in ck:
        x = m.tensor(t.name, "torch")
        if x.dtype.is_floating_point:
            srcs[t.name] = torch.randn(tuple(x.shape), dtype=x.dtype, device=dev)
        else:
            srcs[t.name] = torch.zeros(tuple(x.shape), dtype=x.dtype, device=dev)
    print("%d tensors, %.2f GB, sources on %s, served on %s" %
          (len(ck), nbytes / 1e9, dev, m.device), flush=True)

    # the floor: the same bytes copied device to device in this process
    dst = {k: torch.empty_like(v) for k, v in srcs.items()}
    copy_s = []
    for i in range(a.n + 1):
        sync(dev)
        t0 = time.perf_counter()
        for k, v in srcs.items():
            dst[k].copy_(v, non_blocking=True)
        sync(dev)
        if i:                                       # the first warms up
            copy_s.append(time.perf_counter() - t0)
    del dst

    trainer = wcache.connect(device=a.device, runtime_dir=a.runtime_dir)
    ptrs = {t.name: m.tensor(t.name, "torch").data_ptr() for t in ck}
    push_s, resume_s = [], []
    for i in range(a.n):
        for v in srcs.values():                     # new weights each run
            if v.dtype.is_floating_point:
                v.mul_(-1.0)
        sync(dev)
        engine.pause()
        t0 = time.perf_counter()
        r = trainer.update_from(srcs, in_place=True)
        t1 = time.perf_counter()
        wait_notice(engine, "in_place")
        res = engine.resume()
        t2 = time.perf_counter()
        assert res.version == r.version, (res, r)
        bad = [t.name for t in ck
               if m.tensor(t.name, "torch").data_ptr() != ptrs[t.name] or
               not torch.equal(m.tensor(t.name, "torch").to(dev), srcs[t.name])]
        assert not bad, "after resume the engine reads other bytes in %s" % bad[:3]
        push_s.append(t1 - t0)
        resume_s.append(t2 - t1)
        print("run %d: update_from(in_place) %.2f ms (daemon: %.2f ms, hash %.2f ms), "
              "notice + resume %.2f ms, version %d" %
              (i, (t1 - t0) * 1e3, r.seconds * 1e3, r.verify_seconds * 1e3,
               (t2 - t1) * 1e3, r.version), flush=True)
    cp, ip = statistics.median(copy_s), statistics.median(push_s)
    out = {"bench": "push_inplace", "tensors": len(ck), "bytes": nbytes,
           "source": str(dev), "served": m.device,
           "d2d_copy_ms_median": cp * 1e3, "d2d_copy_ms": [x * 1e3 for x in copy_s],
           "in_place_ms_median": ip * 1e3, "in_place_ms": [x * 1e3 for x in push_s],
           "resume_ms_median": statistics.median(resume_s) * 1e3,
           "ratio": ip / cp if cp else None, "target_ratio_max": 2.0,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    out["pass"] = out["ratio"] is not None and out["ratio"] <= 2.0
    print(json.dumps(out), flush=True)
    m.detach()
    trainer.close()
    engine.close()


if __name__ == "__main__":
    main()
