#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The module cache against the construction it replaces, in fresh
processes alternated (what an engine's start pays: the first construction
of a process).

  py_modcache.py [--model DIR] [-n 10] [--device cpu|cuda]

--model DIR: a transformers checkpoint directory: AutoConfig +
AutoModelForCausalLM.from_config under wcache.torch.init_empty ("build")
against wcache.torch.empty_pretrained's hit ("hit"), bf16, buffers on
--device (CUDA started and the model's class imported before the clock,
as in bench/py/py_start.py). Without
--model: a plain-torch module of Llama-3-8B's shapes
(32 layers, 291 parameters; no transformers needed) built under init_empty
against empty_model's hit. Each process imports what it needs first
(not timed), then times the one step. The cache file is written by a
process of its own first, in a new directory (removed after).
Prints each process's time, then the medians and their ratio.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PLAIN = '''
import torch
nn = torch.nn


class Norm(nn.Module):
    def __init__(s, h):
        super().__init__()
        s.weight = nn.Parameter(torch.ones(h))
        s.eps = 1e-5


class Attn(nn.Module):
    def __init__(s, h, kv, i):
        super().__init__()
        s.layer_idx = i
        s.q_proj = nn.Linear(h, h, bias=False)
        s.k_proj = nn.Linear(h, kv, bias=False)
        s.v_proj = nn.Linear(h, kv, bias=False)
        s.o_proj = nn.Linear(h, h, bias=False)


class MLP(nn.Module):
    def __init__(s, h, f):
        super().__init__()
        s.gate_proj = nn.Linear(h, f, bias=False)
        s.up_proj = nn.Linear(h, f, bias=False)
        s.down_proj = nn.Linear(f, h, bias=False)
        s.act_fn = nn.SiLU()


class Layer(nn.Module):
    def __init__(s, i):
        super().__init__()
        s.self_attn = Attn(4096, 1024, i)
        s.mlp = MLP(4096, 14336)
        s.input_layernorm = Norm(4096)
        s.post_attention_layernorm = Norm(4096)


class Rotary(nn.Module):
    def __init__(s):
        super().__init__()
        inv = 1.0 / (500000.0 ** (torch.arange(0, 128, 2).float() / 128))
        s.register_buffer("inv_freq", inv, persistent=False)


class Inner(nn.Module):
    def __init__(s):
        super().__init__()
        s.embed_tokens = nn.Embedding(128256, 4096)
        s.layers = nn.ModuleList([Layer(i) for i in range(32)])
        s.norm = Norm(4096)
        s.rotary_emb = Rotary()


class Llama8B(nn.Module):
    def __init__(s):
        super().__init__()
        s.model = Inner()
        s.lm_head = nn.Linear(4096, 128256, bias=False)
'''


def child(a):
    import torch
    import wcache.torch as wt
    if a.device.startswith("cuda"):   # CUDA's start-up apart, as an engine's (py_start's cuda_start)
        torch.cuda.init()
        torch.empty(1, device=a.device)
        torch.cuda.synchronize()
    if a.model:
        import transformers
        # transformers imports its modeling code lazily (0.3 s for Llama on
        # the H200): an import cost of both kinds, not what either times
        # (py_start's model_class does the same)
        with open(os.path.join(a.model, "config.json")) as f:
            getattr(transformers, json.load(f)["architectures"][0]).__init__  # noqa: B018
        transformers.AutoModelForCausalLM  # noqa: B018
        t0 = time.perf_counter()
        how = {}
        if a.child == "build":
            cfg = transformers.AutoConfig.from_pretrained(a.model)
            with wt.init_empty(buffers_device=a.device):
                m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        else:
            m = wt.empty_pretrained(a.model, dtype=torch.bfloat16, buffers_device=a.device,
                                    cache=a.cache, how=how)
    else:
        ns = {}
        exec(compile(PLAIN, "<plain llama-8b>", "exec"), ns)
        import __main__
        __main__.Llama8B = ns["Llama8B"]   # pickled by name: findable in every process
        for k in ("Norm", "Attn", "MLP", "Layer", "Rotary", "Inner"):
            setattr(__main__, k, ns[k])
            ns[k].__module__ = "__main__"
        ns["Llama8B"].__module__ = "__main__"
        t0 = time.perf_counter()
        how = {}
        if a.child == "build":
            with wt.init_empty(buffers_device=a.device):
                m = ns["Llama8B"]()
        else:
            m = wt.empty_model(ns["Llama8B"], "plain-llama-8b", buffers_device=a.device,
                               cache=a.cache, how=how)
    dt = time.perf_counter() - t0
    n = sum(1 for _ in m.parameters())
    print(json.dumps({"s": dt, "cache": how.get("cache"), "why": how.get("why"), "params": n}))


def run(a, kind):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--cache", a.cache,
           "--device", a.device] + (["--model", a.model] if a.model else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.stderr.write(p.stderr[-3000:])
        raise SystemExit("%s child failed (exit %d)" % (kind, p.returncode))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a transformers checkpoint directory (default: a plain-torch Llama-3-8B)")
    ap.add_argument("-n", type=int, default=10, help="fresh processes of each kind (default 10)")
    ap.add_argument("--device", default="cpu", help="the buffers' device (default cpu)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    made = a.cache = tempfile.mkdtemp(prefix="wcache-modcache-bench-")
    try:
        w = run(a, "hit")
        if w["cache"] != "miss" or w["why"] != "no cache file":
            raise SystemExit("the first process did not write the cache: %s" % w)
        print("cache written by a process of its own: %.4f s (build and save)" % w["s"])
        res = {"build": [], "hit": []}
        for i in range(a.n):
            for kind in ("build", "hit"):
                x = run(a, kind)
                if kind == "hit" and x["cache"] != "hit":
                    raise SystemExit("process %d: %s, not a hit (%s)" % (i, x["cache"], x["why"]))
                res[kind].append(x["s"])
            print("%2d: build %.4f s, hit %.4f s (%d parameters)" % (i, res["build"][-1], res["hit"][-1],
                                                                     x["params"]), flush=True)
        b, h = statistics.median(res["build"]), statistics.median(res["hit"])
        print("median of %d fresh processes each (%s): build %.4f s [%.4f, %.4f], hit %.4f s [%.4f, %.4f]: "
              "%.1fx" % (a.n, a.model or "plain-torch Llama-3-8B shapes", b, min(res["build"]),
                         max(res["build"]), h, min(res["hit"]), max(res["hit"]), b / h))
    finally:
        shutil.rmtree(made, ignore_errors=True)


if __name__ == "__main__":
    main()
