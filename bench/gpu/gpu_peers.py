#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The peers and limits wcd is measured against, on the GPU machine.

  gpu_peers.py env                 versions of what the benchmarks use
  gpu_peers.py h2d [--gib N]       pinned host-to-device ceiling through torch
  gpu_peers.py st-load DIR         safetensors.torch.load_file(f, device="cuda")
                                   over every *.safetensors in DIR
  gpu_peers.py ipc-attach DIR [-n 100]
                                   torch's per-tensor CUDA IPC: a producer holds
                                   every tensor of DIR on the GPU, a consumer
                                   rebuilds all of them n times (p50/p99)

Rates are 1e9 bytes per second; one line per result, "name: value".
"""
import argparse
import glob
import os
import sys
import time


def cmd_env(_):
    import torch
    import safetensors
    out = {"python": sys.version.split()[0], "torch": torch.__version__,
           "cuda": torch.version.cuda, "safetensors": safetensors.__version__}
    for mod in ("transformers", "xxhash"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as e:  # report, do not fail
            out[mod] = "missing (%s)" % e
    out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    for k, v in out.items():
        print("%s: %s" % (k, v))
    try:
        import xxhash
        buf = bytes(1 << 30)
        t0 = time.perf_counter()
        for off in range(0, len(buf), 64 << 20):
            xxhash.xxh3_128(memoryview(buf)[off:off + (64 << 20)]).digest()
        print("python xxhash xxh3_128 1 thread: %.2f GB/s" % (len(buf) / (time.perf_counter() - t0) / 1e9))
    except Exception as e:
        print("python xxhash: %s" % e)


def h2d_gbps(gib, chunk_mib, streams):
    import torch
    n = (gib << 30) // (chunk_mib << 20)
    src = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    ss = [torch.cuda.Stream() for _ in range(streams)]
    chunk = chunk_mib << 20
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(n):
        s = ss[i % streams]
        so = (i * chunk) % ((1 << 30) - chunk + 1)
        do = (i * chunk) % ((4 << 30) - chunk + 1)
        with torch.cuda.stream(s):
            dst[do:do + chunk].copy_(src[so:so + chunk], non_blocking=True)
    torch.cuda.synchronize()
    return n * chunk / (time.perf_counter() - t0) / 1e9


def cmd_h2d(a):
    h2d_gbps(1, 64, 2)  # warm-up
    best = 0.0
    for chunk in (8, 64, 256):
        for streams in (1, 2, 4):
            r = h2d_gbps(a.gib, chunk, streams)
            print("torch pinned h2d chunk %d MiB, %d stream(s): %.2f GB/s" % (chunk, streams, r))
            best = max(best, r)
    print("torch pinned h2d ceiling: %.2f GB/s" % best)


def shards(d):
    fs = sorted(glob.glob(os.path.join(d, "*.safetensors")))
    if not fs:
        sys.exit("no *.safetensors in %s" % d)
    return fs


def cmd_st_load(a):
    import torch
    from safetensors.torch import load_file
    fs = shards(a.dir)
    nbytes = 0
    t0 = time.perf_counter()
    keep = []
    for f in fs:
        sd = load_file(f, device="cuda")
        nbytes += sum(t.numel() * t.element_size() for t in sd.values())
        keep.append(sd)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print("safetensors load_file cuda: %d bytes in %.3f s: %.2f GB/s" % (nbytes, dt, nbytes / dt / 1e9))


def ipc_consumer(q_in, q_out, n):
    import torch
    from torch.multiprocessing.reductions import shared_cache
    args = q_in.get()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        ts = [fn(*fa) for fn, fa in args]
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        del ts
        shared_cache.clear()
        torch.cuda.ipc_collect()
    q_out.put(times)


def cmd_ipc_attach(a):
    import torch
    import torch.multiprocessing as mp
    from safetensors.torch import load_file
    from torch.multiprocessing.reductions import reduce_tensor
    sd = {}
    for f in shards(a.dir):
        sd.update(load_file(f, device="cuda"))
    torch.cuda.synchronize()
    args = [reduce_tensor(t) for t in sd.values()]
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=ipc_consumer, args=(q_in, q_out, a.n))
    p.start()
    q_in.put(args)
    times = sorted(q_out.get())
    p.join()
    p50 = times[len(times) // 2] * 1e3
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))] * 1e3
    print("torch cuda ipc rebuild of %d tensors x%d: p50 %.2f ms, p99 %.2f ms" % (len(sd), a.n, p50, p99))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("env").set_defaults(fn=cmd_env)
    p = sub.add_parser("h2d")
    p.add_argument("--gib", type=int, default=8)
    p.set_defaults(fn=cmd_h2d)
    p = sub.add_parser("st-load")
    p.add_argument("dir")
    p.set_defaults(fn=cmd_st_load)
    p = sub.add_parser("ipc-attach")
    p.add_argument("dir")
    p.add_argument("-n", type=int, default=100)
    p.set_defaults(fn=cmd_ipc_attach)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
