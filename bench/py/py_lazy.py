#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The lazy Model on a big rank (issue 27, item 4): the Python attach
against the C attach, in one run, against a running wcd.

  py_lazy.py --runtime-dir DIR --device D --model DIR [-n 20] [--warmup 2]
             [-r 5] [--wcbench PATH] [--json]

Made for wcgen deepseek-v3-shape (45,633 served tensors: DeepSeek-V3's
names with tiny dimensions), it runs on any model (llama-8b's 291 for the
no-regression figures), on the host backend or CUDA. It prints, with the
ratio of each to the C attach:

  C attach      wcbench attach's cycle (connect, hello with --model's
                identity, manifest, attach, map), p50 of -n, when --wcbench
                is given; and the C library's phases of the Python cycles
                below (wcache.h's wc_attach_times), which the ratios use
  engine        connect + attach + wcache.torch.load_into of a meta module
                that binds what a vLLM-style engine binds: every fused or
                stacked view (w13_weight, w2_weight, fused_qkv_a_proj,
                gate_up_proj) and every entry outside all views, no alias
                (for DeepSeek-V3 about 1,100 of the 45,633); Model.made
                says how many tensors were made (target: at most 2x)
  tensors()     connect + attach + tensors() of every entry (3x)
  first attach  a fresh process's first connect + attach, the identity read
                from the disk cache (a process before the timed ones writes
                it), p50 of -r processes (50 ms)

The cycles alternate (engine, tensors()) in one process, each torn down
(detach, close) inside its cycle time, so drift between them does not
decide the comparison. The model's files must be older than 2 s, or the
identity is not written to disk (libwcache's identdisk.c) and every fresh
process builds it.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] if xs else float("nan")


def engine_names(m):
    """What a vLLM-style engine binds: the views (fused, stacked) and every
    entry whose bytes no view covers; no alias (a tied name)."""
    view, alias = 0x2, 0x4     # wcache.h's WC_TENSOR_VIEW, WC_TENSOR_ALIAS
    man = m.manifest
    spans = sorted((t.pool, t.offset, t.offset + t.nbytes) for t in man
                   if t.flags & view and not t.flags & alias)
    import bisect
    keys = [(p, a) for p, a, _ in spans]
    out = []
    for t in man:
        if t.flags & alias:
            continue
        if t.flags & view:
            out.append(t)
            continue
        i = bisect.bisect_right(keys, (t.pool, t.offset)) - 1
        if i >= 0 and spans[i][0] == t.pool and t.offset + t.nbytes <= spans[i][2]:
            continue      # a part of a view
        out.append(t)
    return out


def module_of(entries, dtype_of):
    """A module with a meta Parameter for each manifest entry."""
    import torch
    root = torch.nn.Module()
    for t in entries:
        *path, leaf = t.name.split(".")
        mod = root
        for p in path:
            nxt = mod._modules.get(p)
            if nxt is None:
                nxt = torch.nn.Module()
                mod.add_module(p, nxt)
            mod = nxt
        mod.register_parameter(leaf, torch.nn.Parameter(
            torch.empty(tuple(t.shape), dtype=dtype_of(t.dtype), device="meta"), requires_grad=False))
    return root


def c_phases(m):
    tm = m.times
    return (tm["connect_ns"] + tm["hello_ns"] + tm["manifest_ns"] + tm["attach_ns"] + tm["map_ns"]) / 1e9


def child(a):
    """One fresh process: its first connect + attach, as JSON."""
    import torch  # noqa: F401 (imported before the clock, as an engine has)
    import wcache
    ctx = 0.0
    if a.ctx and torch.cuda.is_available():
        # an engine has its CUDA context before it loads weights: made
        # before the clock (0.1-0.2 s on an H200), timed apart
        c0 = time.perf_counter()
        torch.empty(1, device="cuda")
        torch.cuda.synchronize()
        ctx = time.perf_counter() - c0
    t0 = time.perf_counter()
    conn = wcache.connect(device=a.device, runtime_dir=a.runtime_dir)
    m = conn.attach(model_dir=a.model, framework="torch")
    t1 = time.perf_counter()
    print(json.dumps({"attach_s": t1 - t0, "c_s": c_phases(m), "hello_s": m.times["hello_ns"] / 1e9,
                      "made": m.made, "ctx_s": ctx}))
    m.detach()
    conn.close()


def fresh(a, runs):
    env = dict(os.environ)
    args = [sys.executable, os.path.abspath(__file__), "--child", "--runtime-dir", a.runtime_dir,
            "--device", a.device, "--model", a.model] + (["--ctx"] if a.ctx else [])
    out = []
    for i in range(runs + 1):   # the first writes the identity to disk (same code)
        r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
        if r.returncode:
            raise SystemExit("py_lazy: the fresh process failed:\n" + r.stderr[-2000:])
        if i:
            out.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return out


def wcbench(a):
    if not a.wcbench:
        return None
    r = subprocess.run([a.wcbench, "attach", "--runtime-dir", a.runtime_dir, "--device", a.device,
                        "--model", a.model, "-n", str(a.n), "-q", "--json"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode:
        raise SystemExit("py_lazy: wcbench attach failed:\n" + r.stderr[-2000:])
    s = json.loads(r.stdout)["series"]
    return {k: s[k]["p50_us"] / 1e3 for k in ("cycle (total)", "manifest") if k in s}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime-dir", required=True)
    ap.add_argument("--device", required=True, help="as wcache.connect takes it (0, host:NAME)")
    ap.add_argument("--model", required=True, help="the served model's directory (the identity)")
    ap.add_argument("-n", type=int, default=20, help="cycles of each kind (default 20)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("-r", type=int, default=5, help="fresh processes (default 5)")
    ap.add_argument("--ctx", action="store_true",
                    help="fresh processes make their CUDA context before the clock, as an engine has it")
    ap.add_argument("--wcbench", help="wcbench's path: also time the C cycle by itself")
    ap.add_argument("--wcbench-device", help="wcbench's --device when it differs (a GPU's UUID)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    a.model = os.path.abspath(a.model)
    import torch
    import warnings
    import wcache
    import wcache.torch
    from wcache import _dtypes
    warnings.simplefilter("ignore", wcache.ReadOnlyWarning)

    with wcache.connect(device=a.device, runtime_dir=a.runtime_dir) as conn:
        m = conn.attach(model_dir=a.model, framework="torch")
        entries = engine_names(m)
        n_all = len(m)
        dev = m.device
        m.detach()
        del m

    def dtype_of(dt):
        return _dtypes.torch_dtype(dt, torch)
    st = {k: [] for k in ("eng", "eng_c", "all", "all_c", "made", "load", "tens")}
    for i in range(a.warmup + a.n):
        for kind in ("eng", "all"):
            mod = module_of(entries, dtype_of) if kind == "eng" else None
            t0 = time.perf_counter()
            conn = wcache.connect(device=a.device, runtime_dir=a.runtime_dir)
            m = conn.attach(model_dir=a.model, framework="torch")
            ta = time.perf_counter()
            if kind == "eng":
                b = wcache.torch.load_into(mod, m)
                made = m.made
            else:
                d = m.tensors()
            t1 = time.perf_counter()
            c = c_phases(m)
            if kind == "eng":
                assert not b.missing and not b.unexpected, (b.missing[:3], b.unexpected[:3])
                del b, mod
            else:
                assert len(d) == n_all
                del d
            m.detach()
            del m
            conn.close()
            del conn
            if wcache.live_leases():
                raise SystemExit("py_lazy: a lease outlived its cycle")
            if i >= a.warmup:
                st[kind].append(t1 - t0)
                st[kind + "_c"].append(c)
                if kind == "eng":
                    st["made"].append(made)
                    st["load"].append(t1 - ta)
                else:
                    st["tens"].append(t1 - ta)
    first = fresh(a, a.r)
    if a.wcbench_device:
        a.device = a.wcbench_device
    wb = wcbench(a)
    c_eng, c_all = pct(st["eng_c"], 0.5), pct(st["all_c"], 0.5)
    res = {
        "model": a.model, "tensors": n_all, "device": dev, "cycles": a.n, "torch": torch.__version__,
        "c_phases_p50_ms": pct(st["eng_c"] + st["all_c"], 0.5) * 1e3,
        "wcbench_cycle_p50_ms": wb and wb.get("cycle (total)"),
        "wcbench_manifest_p50_ms": wb and wb.get("manifest"),
        "engine_bound": len(entries), "engine_made": max(st["made"]),
        "engine_p50_ms": pct(st["eng"], 0.5) * 1e3, "engine_c_p50_ms": c_eng * 1e3,
        "engine_load_into_p50_ms": pct(st["load"], 0.5) * 1e3,
        "engine_ratio": pct([x / y for x, y in zip(st["eng"], st["eng_c"])], 0.5),
        "all_p50_ms": pct(st["all"], 0.5) * 1e3, "all_c_p50_ms": c_all * 1e3,
        "all_tensors_p50_ms": pct(st["tens"], 0.5) * 1e3,
        "all_ratio": pct([x / y for x, y in zip(st["all"], st["all_c"])], 0.5),
        "first_attach_p50_ms": pct([f["attach_s"] for f in first], 0.5) * 1e3,
        "first_c_p50_ms": pct([f["c_s"] for f in first], 0.5) * 1e3,
        "first_hello_p50_ms": pct([f["hello_s"] for f in first], 0.5) * 1e3,
        "first_runs": len(first),
        "first_ctx_p50_ms": pct([f.get("ctx_s", 0.0) for f in first], 0.5) * 1e3,
    }
    if a.json:
        print(json.dumps(res))
        return
    print("%s: %d tensors on %s, %d cycles each, alternating; torch %s" % (
        os.path.basename(a.model), n_all, dev, a.n, res["torch"]))
    if wb:
        print("  C attach (wcbench attach -n %d, identity): cycle p50 %.3f ms, manifest %.3f ms"
              % (a.n, wb["cycle (total)"], wb["manifest"]))
    print("  engine: connect + attach + load_into of %d bound (%d made): p50 %.3f ms (load_into %.3f), "
          "C phases of the same cycles %.3f ms: %.2fx the C attach (target <= 2x)" % (
              res["engine_bound"], res["engine_made"], res["engine_p50_ms"], res["engine_load_into_p50_ms"],
              res["engine_c_p50_ms"], res["engine_ratio"]))
    print("  tensors(): connect + attach + all %d: p50 %.3f ms (tensors() %.3f), C phases %.3f ms: "
          "%.2fx (target <= 3x)" % (n_all, res["all_p50_ms"], res["all_tensors_p50_ms"], res["all_c_p50_ms"],
                                    res["all_ratio"]))
    print("  first attach of a fresh process (identity from disk: hello %.3f ms), %d processes: "
          "p50 %.3f ms, its C phases %.3f ms (target <= 50 ms)%s" % (
              res["first_hello_p50_ms"], res["first_runs"], res["first_attach_p50_ms"], res["first_c_p50_ms"],
              "; its CUDA context made before the clock: %.1f ms" % res["first_ctx_p50_ms"] if a.ctx else
              "; the CUDA context made inside it"))


if __name__ == "__main__":
    main()
