#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Python attach into a dict of torch tensors, N cycles against a running wcd.

  py_attach.py --runtime-dir DIR --device D [--model DIR] [-n 100] [--warmup 3]
               [--views batched|each] [--cold-plan] [--ab] [--ab-span] [--micro]

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
views (one as_strided per tensor; what the first attach of a layout in a
process makes); --cold-plan forgets the batch plans before every cycle,
so that each cycle pays what the second attach of a layout in a process
pays (it makes the plan, kept per process and layout, and uses it);
--ab alternates the three cycle by cycle in one process (n cycles each),
so that drift between processes does not decide the comparison.
--ab-span alternates the batched views over pools mapped back to back
(one DLPack tensor for all, the default) with the same over pools mapped
apart (WCACHE_TEST_SPREAD=1: one DLPack tensor per pool, as before
wc_model_span; runs then end at each pool). Each result names the pool
count and the torch view calls of its last cycle (as_strided, unbind:
one of each per run of same-shaped tensors at one stride). --micro
also times torch's view calls on the served memory.
"""
import argparse
import json
import os
import time


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def micro(m):
    """torch's cost of one view on this device (the served pool 0 as bf16):
    one as_strided each, a run of k as one as_strided + unbind, one view."""
    import torch
    base = m._pool(0, "torch", torch.bfloat16)
    out = {}

    def t(name, fn, per, k=200):
        ts = []
        for _ in range(k):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        out[name] = pct(ts, 0.5) * 1e6 / per
    f = base.as_strided
    t("as_strided (one each)", lambda: [f((256, 256), (256, 1), 512 * j) for j in range(100)], 100)
    for k in (2, 5, 32):
        t("as_strided + unbind, runs of %d" % k,
          lambda: [f((k, 256, 256), (70000, 256, 1), 512 * j).unbind(0) for j in range(100 // k)], (100 // k) * k)
    v = base[:65536]
    t("view", lambda: [v.view(256, 256) for _ in range(100)], 100)
    return out


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
    ap.add_argument("--ab", action="store_true",
                    help="alternate the three ways cycle by cycle (batched, each, batched with a cold plan)")
    ap.add_argument("--ab-span", action="store_true",
                    help="alternate pools back to back (one DLPack tensor) and apart (one per pool)")
    ap.add_argument("--micro", action="store_true", help="also time torch's view calls on the served memory")
    a = ap.parse_args()
    t_imp = time.perf_counter()
    import torch
    import wcache
    t_imp = time.perf_counter() - t_imp
    import warnings
    warnings.simplefilter("ignore", wcache.ReadOnlyWarning)
    from wcache import _core
    batched, each = _core.Model._torch_tensors, _core.Model._torch_tensors_each
    ways = ["batched", "each", "cold"] if a.ab else ["batched", "apart"] if a.ab_span else \
        ["cold" if a.cold_plan else a.views]
    res = {}
    st = {w: {"att": [], "cyc": [], "c": [], "py": [], "conn": [], "attach": [], "tensors": []} for w in ways}
    n_tensors = 0
    dev = None
    calls = {}
    for i in range(a.warmup * len(ways) + a.n * len(ways)):
        w = ways[i % len(ways)]
        _core.Model._torch_tensors = each if w == "each" else batched
        if w == "cold":  # the layout seen, its plan not made: this cycle makes it
            _core._forget_plans()
        if a.ab_span:  # libwcache reads it at each attach
            os.environ["WCACHE_TEST_SPREAD"] = "1" if w == "apart" else "0"
        t0 = time.perf_counter()
        conn = wcache.connect(device=a.device, runtime_dir=a.runtime_dir)
        tc = time.perf_counter()
        m = conn.attach(model_dir=a.model, framework="torch")
        ta = time.perf_counter()
        d = m.tensors()
        t1 = time.perf_counter()
        n_tensors = len(d)
        dev = next(iter(d.values())).device
        # torch view calls this cycle made: one as_strided per op, one
        # unbind per run (one as_strided a tensor for "each" or a first
        # attach); the runs are cut where the offsets' step breaks
        ops = m._ops if w != "each" and m._ops else None
        calls[w] = (_core.lib.wc_pool_count(m._lease.m),
                    len(ops) if ops else n_tensors, sum(1 for op in ops if op[4]) if ops else 0)
        tm = m.times
        c_ns = tm["connect_ns"] + tm["hello_ns"] + tm["manifest_ns"] + tm["attach_ns"] + tm["map_ns"]
        # The whole teardown inside the cycle: a lease that outlived it
        # (a view the Model kept past detach) would be unmapped at the
        # next cycle's `m = conn.attach()`, inside the next attach's time.
        del d
        m.detach()
        del m
        conn.close()
        del conn
        t2 = time.perf_counter()
        if wcache.live_leases():
            raise SystemExit("py_attach: a lease outlived its cycle (%d left)" % wcache.live_leases())
        if i >= a.warmup * len(ways):
            s_ = st[w]
            s_["att"].append(t1 - t0)
            s_["cyc"].append(t2 - t0)
            s_["c"].append(c_ns / 1e9)
            s_["py"].append(t1 - t0 - c_ns / 1e9 - tm["device_ns"] / 1e9)
            s_["conn"].append(tc - t0)
            s_["attach"].append(ta - tc)
            s_["tensors"].append(t1 - ta)
    _core.Model._torch_tensors = batched
    assert wcache.live_leases() == 0 and wcache.live_tensors() == 0
    if a.micro:
        conn = wcache.connect(device=a.device, runtime_dir=a.runtime_dir)
        m = conn.attach(model_dir=a.model, framework="torch")
        for k, v in micro(m).items():
            print("torch on %s: %s: %.2f us a tensor" % (m.device, k, v))
        m.detach()
        conn.close()
    for w in ways:
        s_ = st[w]
        res = {
            "tensors": n_tensors, "device": str(dev), "cycles": a.n, "identity": bool(a.model),
            "views": {"batched": "batched", "each": "each", "cold": "batched, cold plan",
                      "apart": "batched, pools apart"}[w]
            + (", alternating" if a.ab or a.ab_span else ""),
            "import_s": t_imp, "torch": torch.__version__,
            "attach_p50_ms": pct(s_["att"], 0.5) * 1e3, "attach_p99_ms": pct(s_["att"], 0.99) * 1e3,
            "cycle_p50_ms": pct(s_["cyc"], 0.5) * 1e3, "cycle_p99_ms": pct(s_["cyc"], 0.99) * 1e3,
            "c_phases_p50_ms": pct(s_["c"], 0.5) * 1e3,
            "python_part_p50_ms": pct(s_["py"], 0.5) * 1e3,
            "python_part_per_tensor_us": pct(s_["py"], 0.5) * 1e6 / max(n_tensors, 1),
            "connect_p50_ms": pct(s_["conn"], 0.5) * 1e3,
            "attach_call_p50_ms": pct(s_["attach"], 0.5) * 1e3,
            "tensors_call_p50_ms": pct(s_["tensors"], 0.5) * 1e3,
            "pools": calls[w][0], "as_strided": calls[w][1], "unbind": calls[w][2],
        }
        report(a, res)


def report(a, res):
    if a.json:
        print(json.dumps(res))
        return
    print("python attach into a dict of %d torch tensors on %s x%d (%s identity, views %s): "
          "p50 %.3f ms, p99 %.3f ms; whole cycle with detach p50 %.3f ms, p99 %.3f ms; "
          "of the attach p50: C library phases %.3f ms, Python %.3f ms (%.2f us/tensor); "
          "import torch+wcache %.2f s" % (
              res["tensors"], res["device"], a.n, "with" if a.model else "no", res["views"],
              res["attach_p50_ms"], res["attach_p99_ms"], res["cycle_p50_ms"], res["cycle_p99_ms"],
              res["c_phases_p50_ms"], res["python_part_p50_ms"], res["python_part_per_tensor_us"],
              res["import_s"]))
    print("  p50 of its calls: connect %.3f ms, attach() %.3f ms, tensors() %.3f ms; "
          "%d pools, torch views of the last cycle: %d as_strided, %d unbind"
          % (res["connect_p50_ms"], res["attach_call_p50_ms"], res["tensors_call_p50_ms"],
             res["pools"], res["as_strided"], res["unbind"]))


if __name__ == "__main__":
    main()
