#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Python attach into a dict of torch tensors, N cycles against a running wcd.

  py_attach.py --runtime-dir DIR --device D [--model DIR] [-n 100] [--warmup 3]
               [--views batched|each] [--cold-plan]

One cycle is what a Python engine waits for: wcache.connect, attach (HELLO
with the identity of --model when given, MANIFEST, ATTACH, map every pool),
then Model.tensors("torch"): a dict of every served tensor as a torch
tensor on the served device. Then (not in the attach time, in the cycle
time) the dict is dropped, the model detached (the pools unmapped) and the
connection closed. Prints p50/p99 of the attach and the cycle, the C
library's own phases (wcache.h's wc_attach_times) and the Python part
(attach minus the C phases). Compare with `wcbench attach` (the C cycle)
and `gpu_peers.py ipc-attach` (torch's per-tensor CUDA IPC) in the same run.

--views each makes the dict the way the package did before the batched
views (one as_strided per tensor); --cold-plan forgets the batch plans
before every cycle, so that each cycle pays what the first attach of a
layout in a process pays (the plan is kept per process and layout).
"""
import argparse
import json
import time


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime-dir", required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--model")
    ap.add_argument("-n", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--views", choices=("batched", "each"), default="batched")
    ap.add_argument("--cold-plan", action="store_true")
    a = ap.parse_args()
    t_imp = time.perf_counter()
    import torch
    import wcache
    t_imp = time.perf_counter() - t_imp
    import warnings
    warnings.simplefilter("ignore", wcache.ReadOnlyWarning)
    from wcache import _core
    if a.views == "each":
        _core.Model._torch_tensors = _core.Model._torch_tensors_each
    att, cyc, c_part, py_part = [], [], [], []
    n_tensors = 0
    dev = None
    for i in range(a.warmup + a.n):
        if a.cold_plan:
            _core._PLANS.clear()
        t0 = time.perf_counter()
        conn = wcache.connect(device=a.device, runtime_dir=a.runtime_dir)
        m = conn.attach(model_dir=a.model, framework="torch")
        d = m.tensors()
        t1 = time.perf_counter()
        n_tensors = len(d)
        dev = next(iter(d.values())).device
        tm = m.times
        c_ns = tm["connect_ns"] + tm["hello_ns"] + tm["manifest_ns"] + tm["attach_ns"] + tm["map_ns"]
        del d
        m.detach()
        conn.close()
        t2 = time.perf_counter()
        if i >= a.warmup:
            att.append(t1 - t0)
            cyc.append(t2 - t0)
            c_part.append(c_ns / 1e9)
            py_part.append(t1 - t0 - c_ns / 1e9 - tm["device_ns"] / 1e9)
    assert wcache.live_leases() == 0 and wcache.live_tensors() == 0
    res = {
        "tensors": n_tensors, "device": str(dev), "cycles": a.n, "identity": bool(a.model),
        "views": a.views + (", cold plan" if a.cold_plan else ""),
        "import_s": t_imp, "torch": torch.__version__,
        "attach_p50_ms": pct(att, 0.5) * 1e3, "attach_p99_ms": pct(att, 0.99) * 1e3,
        "cycle_p50_ms": pct(cyc, 0.5) * 1e3, "cycle_p99_ms": pct(cyc, 0.99) * 1e3,
        "c_phases_p50_ms": pct(c_part, 0.5) * 1e3,
        "python_part_p50_ms": pct(py_part, 0.5) * 1e3,
        "python_part_per_tensor_us": pct(py_part, 0.5) * 1e6 / max(n_tensors, 1),
    }
    if a.json:
        print(json.dumps(res))
        return
    print("python attach into a dict of %d torch tensors on %s x%d (%s identity, views %s): "
          "p50 %.3f ms, p99 %.3f ms; whole cycle with detach p50 %.3f ms, p99 %.3f ms; "
          "of the attach p50: C library phases %.3f ms, Python %.3f ms (%.2f us/tensor); "
          "import torch+wcache %.2f s" % (
              n_tensors, dev, a.n, "with" if a.model else "no", res["views"],
              res["attach_p50_ms"], res["attach_p99_ms"], res["cycle_p50_ms"], res["cycle_p99_ms"],
              res["c_phases_p50_ms"], res["python_part_p50_ms"], res["python_part_per_tensor_us"],
              t_imp))


if __name__ == "__main__":
    main()
