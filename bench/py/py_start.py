#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Engine start: a fresh Python process to its first logits, wcache against
transformers' from_pretrained, in the same run.

  py_start.py --model DIR --runtime-dir RD [--device 0] [-r 3]
              [--variants seq,ov] [--ab 5] [--load-into new|old] [--profile FILE]

Each round starts fresh processes, one after the other (same page cache):
one wcache process per --variants entry, then the hf one. Variants:
  seq     the steps below in order (attach, then construct)
  ov      connect, attach(wait=False) (a PendingModel: the attach on a
          thread), AutoConfig and the construction meanwhile, load_into
          waits for the attach and binds: the same steps, overlapped
  -old    (seq-old, ov-old) the same with bench/py/load_into_old.py
          (load_into before its per-parameter cut)
  -each   (seq-each, ...) the first attach makes one view each instead of
          the plan of batched views (wcache._core._PLAN_FIRST = False, what
          it did before); both for the before/after in one run
  -cache  (seq-cache, ov-cache) the config and the construction replaced
          by wcache.torch.empty_pretrained from the module cache (a
          restart: the file is written by a warm-up process before the
          rounds, in a directory of the driver's; every timed process must
          hit it, or the run stops)
  -swi    (ov-cache-swi, ...) the process's GIL switch interval 0.2 ms
          instead of 5 ms (sys.setswitchinterval, before connect): whether
          the attach thread of ov waits for the GIL behind the main
          thread's Python (an experiment; the library does not set it)
Every variant is timed from connect to load_into's return (CUDA start-up
apart), each step inside; each line also shows the first attach's phases
in C (Model.times: connect, hello with the identity of DIR, manifest,
attach, map, device), the same again later in the process, and after the
logits the old and the new load_into alternated --ab times on fresh
modules and fresh attaches (warm). The first variant's process also gives
the figures below (as before). --device host: a host-backend wcd, no CUDA
(a smoke run without a GPU; the steps' shape only). --profile FILE: after
the rounds, one more seq process under cProfile (connect to load_into),
its top functions to FILE (its times are not used).
The first variant's process, the steps:
  wcache  import torch, transformers (and the model's class), wcache;
          CUDA start-up (torch.cuda.init, set_device, one allocation: what
          an engine does before loading); connect; attach (identity of DIR);
          AutoModelForCausalLM.from_config on the meta device
          (wcache.torch.init_empty, buffers on cuda, skip_init=True: no
          weight memory, no weight init); wcache.torch.load_into;
          one forward of 8 tokens (synchronized)
  hf      import torch, transformers (and the class); the same CUDA
          start-up; from_pretrained(DIR, dtype=bfloat16, device_map="cuda");
          the same forward
After the logits (outside every figure above) the wcache process attaches
and constructs again, constructs the old way (init_empty(skip_init=False):
every constructor and init run on meta, what the wcache path did before:
the figure "construction, old way"), calls the class directly, and the hf process
constructs the module the wcache way: from_pretrained builds one too, so
"construction apart" subtracts that from from_pretrained's time.
The driver takes the time at fork; each child reports CLOCK_MONOTONIC stamps
(shared by every process of the host). Reported per round: process start to
first logits, the import part, the CUDA start-up, the weights part three
ways (as before: CUDA start-up through load_into / from_pretrained; CUDA
start-up apart; construction apart too) and the forward. Run a wcd on DIR first
(the driver does not start one) and read the files once so that
from_pretrained reads from a warm page cache.
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

IDS = [[1, 306, 4658, 278, 6593, 310, 2834, 338]]


def find_no_init_weights():
    """(module name, transformers' no_init_weights) where this transformers
    has it (5.x: transformers.initialization; 4.x: modeling_utils), else
    (None, None)."""
    for where in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            return where, getattr(__import__(where, fromlist=["x"]), "no_init_weights")
        except (ImportError, AttributeError):
            pass
    return None, None


def model_class(model_dir):
    """The transformers class of model_dir, imported (transformers imports
    its modeling code lazily, seconds of it: an import cost of both paths,
    not a weights cost of either)."""
    import transformers
    with open(os.path.join(model_dir, "config.json")) as f:
        arch = json.load(f)["architectures"][0]
    cls = getattr(transformers, arch)
    cls.__init__  # noqa: B018 (resolves the lazy module)
    return cls


# "cuda", or "cpu" for --device host (a host-backend wcd: a smoke run of
# this script on a machine without a GPU; no CUDA start-up, numbers only
# for the steps' shape)
DEV = "cuda"


def sync():
    if DEV == "cuda":
        import torch
        torch.cuda.synchronize()


def mem_allocated():
    import torch
    return torch.cuda.memory_allocated() if DEV == "cuda" else 0


def cuda_start(device):
    """What an engine does before it loads weights (vLLM and SGLang set
    their device and allocate first): the CUDA runtime, the device, its
    primary context (one allocation). Both paths do it, timed apart."""
    import torch
    if DEV != "cuda":
        return
    torch.cuda.init()
    torch.cuda.set_device(int(device))
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()


def construct(cfg, skip_init=True):
    """The module on the meta device (buffers on cuda), as both paths'
    extra construction: the same code the wcache path builds with
    (skip_init=False: the old way, every init run on meta)."""
    import torch
    import transformers
    import wcache.torch
    with wcache.torch.init_empty(buffers_device=DEV, skip_init=skip_init):
        return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)


def child_wcache(a):
    """a.child "wcache": attach, then construct (sequential); "wcache_ov":
    attach(wait=False), construct meanwhile, load_into waits (overlapped).
    a.load_into "old": bench/py/load_into_old.py (before its per-parameter
    cut) instead of wcache.torch.load_into. Both timed from connect to
    load_into's return, every step in the window."""
    t = {"start": time.monotonic()}
    import torch
    import transformers
    t["import_torch_tf"] = time.monotonic()
    import wcache
    import wcache.torch
    load_into = wcache.torch.load_into
    wcache._core._PLAN_FIRST = a.first_views == "plan"
    if a.switch_interval:
        sys.setswitchinterval(a.switch_interval)
    if a.load_into == "old":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import load_into_old
        load_into = load_into_old.load_into
    arch = model_class(a.model)
    t["import"] = time.monotonic()
    cuda_start(a.device)
    t["cuda"] = time.monotonic()
    overlap = a.child == "wcache_ov"
    prof = None
    if a.profile_child:    # not timed: a process of its own (--profile)
        import cProfile
        prof = cProfile.Profile(time.perf_counter_ns, 1.0)   # in ns (pstats prints 3 decimals)
        prof.enable()
    conn = wcache.connect(device=a.device, runtime_dir=a.runtime_dir)
    t["connect"] = time.monotonic()
    served = conn.attach(model_dir=a.model, wait=not overlap)
    t["attach"] = time.monotonic()
    if a.module_cache:
        how = {}
        model = wcache.torch.empty_pretrained(a.model, dtype=torch.bfloat16, buffers_device=DEV,
                                              cache=a.module_cache, how=how)
        t["config"] = t["attach"]    # inside the next step
        t["module_cache"] = how["cache"]
        t["module_cache_why"] = how["why"] if how["cache"] != "hit" and not how["saved"] else None
        cfg = model.config
    else:
        cfg = transformers.AutoConfig.from_pretrained(a.model)
        t["config"] = time.monotonic()
        model = construct(cfg)
    t["meta_init"] = time.monotonic()
    if overlap:
        t["pending_done_before_load_into"] = served.done()
        pending = served
    # the old load_into takes no PendingModel: the wait, in the same step
    r = load_into(model, served.result() if overlap and a.load_into == "old" else served)
    t["load_into"] = time.monotonic()
    if prof is not None:
        prof.disable()
        import io
        import pstats
        for key in ("tottime", "cumulative"):
            f = io.StringIO()
            pstats.Stats(prof, stream=f).sort_stats(key).print_stats(45)
            t["profile_" + key] = f.getvalue()
    if overlap:
        served = pending.result()
        t["pending_thread_s"] = pending.finished - pending.started
        t["pending_finished"] = pending.finished
    t["attach_c_ns"] = served.times
    with torch.no_grad():
        logits = model.eval()(torch.tensor(IDS, device=DEV)).logits
    sync()
    t["logits"] = time.monotonic()
    t["tensors"] = len(r.bound)
    t["mem_allocated"] = mem_allocated()
    t["logits_shape"] = list(logits.shape)
    # after the first logits, not in them: the same steps again in this
    # process (what the first ones paid once: libwcache's own CUDA start,
    # lazy imports) and the class constructor called directly
    t0 = time.monotonic()
    c2 = wcache.connect(device=a.device, runtime_dir=a.runtime_dir)
    m2 = c2.attach(model_dir=a.model)
    t["attach_again_s"] = time.monotonic() - t0
    t["attach_again_c_ns"] = m2.times
    t0 = time.monotonic()
    construct(cfg)
    t["meta_init_again_s"] = time.monotonic() - t0
    # load_into old and new in this process, alternated on fresh modules
    # and fresh re-attaches (warm: the plan of tensors() is made by now)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import load_into_old
    ab = {"old": [], "new": []}
    for _ in range(a.ab):
        for k, fn in (("old", load_into_old.load_into), ("new", wcache.torch.load_into)):
            mod = construct(cfg)
            m3 = c2.attach(model_dir=a.model)
            t0 = time.monotonic()
            fn(mod, m3)
            ab[k].append(time.monotonic() - t0)
            del mod
            m3.detach()
    t["load_into_ab_s"] = ab
    m2.detach()
    c2.close()
    t0 = time.monotonic()
    construct(cfg, skip_init=False)
    t["meta_init_old_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    try:
        with wcache.torch.init_empty(buffers_device=DEV):
            arch(cfg)
        t["meta_init_class_s"] = time.monotonic() - t0
    except Exception as e:  # informational only: report, do not fail
        sys.stderr.write("the class called directly: %r\n" % (e,))
        t["meta_init_class_s"] = float("nan")
    # everything on meta (buffers too: not runnable as it is) under
    # transformers' no-init-weights: what constructing the modules costs
    t0 = time.monotonic()
    try:
        where, noinit = find_no_init_weights()
        t["no_init_weights"] = where
        with torch.device("meta"), (noinit() if noinit else contextlib.nullcontext()):
            arch(cfg)
        t["meta_init_all_meta_s"] = time.monotonic() - t0
    except Exception as e:
        sys.stderr.write("all on meta: %r\n" % (e,))
        t["meta_init_all_meta_s"] = float("nan")
    return t


def child_hf(a):
    t = {"start": time.monotonic()}
    import torch
    import transformers
    arch = model_class(a.model)
    t["import"] = time.monotonic()
    cuda_start(a.device)
    t["cuda"] = time.monotonic()
    model = arch.from_pretrained(
        a.model, dtype=torch.bfloat16, device_map=DEV)
    sync()
    t["load"] = time.monotonic()
    with torch.no_grad():
        logits = model.eval()(torch.tensor(IDS, device=DEV)).logits
    sync()
    t["logits"] = time.monotonic()
    t["mem_allocated"] = mem_allocated()
    t["logits_shape"] = list(logits.shape)
    # from_pretrained builds the module too: the wcache path's construction
    # (same code), timed here after it, is subtracted in the "construction
    # apart" figure (an estimate of from_pretrained's own; it ran first,
    # so this one is the warm figure)
    cfg = transformers.AutoConfig.from_pretrained(a.model)
    t0 = time.monotonic()
    construct(cfg)
    t["meta_init_same_s"] = time.monotonic() - t0
    return t


def run_child(kind, a, profile=False):
    kind, *flags = kind.split("-")
    old = "old" in flags
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--model", a.model,
           "--first-views", "each" if "each" in flags else "plan",
           "--switch-interval", "0.0002" if "swi" in flags else "0",
           "--runtime-dir", a.runtime_dir, "--device", a.device, "--ab", str(a.ab),
           "--profile-child", "1" if profile else "0",
           "--module-cache", a.module_cache if "cache" in flags else "",
           "--load-into", "old" if old else a.load_into]
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode:
        sys.stderr.write(p.stderr.decode()[-4000:])
        raise SystemExit("%s child failed (exit %d)" % (kind, p.returncode))
    t = json.loads(p.stdout.decode().strip().splitlines()[-1])
    t["fork"] = t0
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--runtime-dir", required=True)
    ap.add_argument("--device", default="0")
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--child")
    ap.add_argument("--load-into", default="new", choices=("new", "old"),
                    help="the wcache children's load_into (old: bench/py/load_into_old.py)")
    ap.add_argument("--variants", default="seq,ov",
                    help="wcache processes per round, in order: seq (attach, then construct), "
                         "ov (attach(wait=False) while constructing), each with -old (the old "
                         "load_into) and/or -each (the first attach makes one view each, not "
                         "the plan: wcache._core._PLAN_FIRST False); default seq,ov")
    ap.add_argument("--first-views", default="plan", choices=("plan", "each"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--profile", metavar="FILE",
                    help="after the rounds, one more seq process under cProfile from connect to "
                         "load_into (its times not used): the top functions to FILE")
    ap.add_argument("--profile-child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--switch-interval", type=float, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--module-cache", default="",
                    help="the -cache variants' module cache directory (default: a new one, removed after)")
    ap.add_argument("--ab", type=int, default=5,
                    help="after the logits, old and new load_into alternated this many times")
    a = ap.parse_args()
    global DEV
    DEV = "cpu" if a.device.startswith("host") else "cuda"
    if a.child:
        import warnings
        warnings.simplefilter("ignore")
        t = child_wcache(a) if a.child.startswith("wcache") else child_hf(a)
        print(json.dumps(t))
        return
    variants = a.variants.split(",")
    kinds = {}
    for v in variants:
        base, *flags = v.split("-")
        if base not in ("seq", "ov") or not set(flags) <= {"old", "each", "cache", "swi"}:
            raise SystemExit("--variants: unknown %r (seq or ov, then any of -old, -each, -cache, -swi)" % v)
        kinds[v] = "-".join(["wcache" if base == "seq" else "wcache_ov"] + flags)
    made_cache = None
    if any("cache" in v.split("-") for v in variants):
        if not a.module_cache:
            import tempfile
            a.module_cache = made_cache = tempfile.mkdtemp(prefix="wcache-modcache-")
        # the restart's file, written by a process of its own (not timed)
        w = run_child(next(k for k in kinds.values() if "cache" in k.split("-")), a)
        if w["module_cache_why"]:   # not kept: say why, run the other variants
            print("module cache %s: not written (%s): the -cache variants are left out"
                  % (a.module_cache, w["module_cache_why"]), flush=True)
            variants = [v for v in variants if "cache" not in v.split("-")]
            if not variants:
                raise SystemExit("no variant left")
        else:
            print("module cache %s: the warm-up process %s it (construction %.4f s)" % (
                a.module_cache, "wrote" if w["module_cache"] == "miss" else "found",
                w["meta_init"] - w["config"]), flush=True)
    rows = []
    for i in range(a.r):
        ws = {v: run_child(kinds[v], a) for v in variants}
        for v, x in ws.items():
            if "cache" in v.split("-") and x["module_cache"] != "hit":
                raise SystemExit("%s: the module cache was a %s, not a hit" % (v, x["module_cache"]))
        h = run_child("hf", a)
        w = ws[variants[0]]
        row = {
            "round": i,
            "variant": variants[0],
            "wcache_total_s": w["logits"] - w["fork"],
            "wcache_import_s": w["import"] - w["start"],
            "wcache_cuda_s": w["cuda"] - w["import"],
            "wcache_attach_s": w["attach"] - w["cuda"],
            "wcache_config_s": w["config"] - w["attach"],
            "wcache_meta_init_s": w["meta_init"] - w["config"],
            "wcache_load_into_s": w["load_into"] - w["meta_init"],
            "wcache_forward_s": w["logits"] - w["load_into"],
            "wcache_interp_start_s": w["start"] - w["fork"],
            "wcache_attach_again_s": w["attach_again_s"],
            "wcache_meta_init_again_s": w["meta_init_again_s"],
            "wcache_meta_init_old_s": w["meta_init_old_s"],
            "wcache_meta_init_class_s": w["meta_init_class_s"],
            "wcache_meta_init_all_meta_s": w["meta_init_all_meta_s"],
            "no_init_weights": w.get("no_init_weights"),
            "wcache_mem_allocated": w["mem_allocated"],
            "hf_total_s": h["logits"] - h["fork"],
            "hf_import_s": h["import"] - h["start"],
            "hf_cuda_s": h["cuda"] - h["import"],
            "hf_load_s": h["load"] - h["cuda"],
            "hf_forward_s": h["logits"] - h["load"],
            "hf_meta_init_same_s": h["meta_init_same_s"],
            "hf_mem_allocated": h["mem_allocated"],
            "tensors": w["tensors"],
        }
        # the weights part three ways (README/RESULTS say which is which):
        # as before (CUDA start-up and construction inside), CUDA start-up
        # apart (both do it first), and construction apart too
        row["wcache_weights_s"] = w["load_into"] - w["import"]
        row["hf_weights_s"] = h["load"] - h["import"]
        row["wcache_weights_nocuda_s"] = w["load_into"] - w["cuda"]
        row["hf_weights_nocuda_s"] = row["hf_load_s"]
        row["wcache_weights_bind_s"] = row["wcache_weights_nocuda_s"] - row["wcache_meta_init_s"]
        row["hf_weights_bind_s"] = row["hf_load_s"] - row["hf_meta_init_same_s"]
        for k in ("weights", "weights_nocuda", "weights_bind"):
            row["ratio_" + k] = row["hf_%s_s" % k] / row["wcache_%s_s" % k]
        # every variant (fresh processes of their own, this round): its
        # steps and the weights part with CUDA start-up apart (connect to
        # load_into's return)
        row["variants"] = {}
        for v, x in ws.items():
            d = {
                "weights_nocuda_s": x["load_into"] - x["cuda"],
                "connect_s": x["connect"] - x["cuda"],
                "attach_s": x["attach"] - x["connect"],
                "config_s": x["config"] - x["attach"],
                "meta_init_s": x["meta_init"] - x["config"],
                "load_into_s": x["load_into"] - x["meta_init"],
                "forward_s": x["logits"] - x["load_into"],
                "attach_c_us": {k: round(n / 1e3) for k, n in x["attach_c_ns"].items()},
                "attach_again_s": x["attach_again_s"],
                "attach_again_c_us": {k: round(n / 1e3) for k, n in x["attach_again_c_ns"].items()},
                "meta_init_again_s": x["meta_init_again_s"],
                "load_into_ab_s": x["load_into_ab_s"],
                "mem_allocated": x["mem_allocated"],
            }
            if "pending_thread_s" in x:
                d["pending_thread_s"] = x["pending_thread_s"]
                d["pending_done_before_load_into"] = x["pending_done_before_load_into"]
                # how far into load_into the attach thread ended (<= 0: before)
                d["pending_end_after_meta_init_s"] = x["pending_finished"] - x["meta_init"]
            d["ratio_weights_nocuda"] = row["hf_weights_nocuda_s"] / d["weights_nocuda_s"]
            row["variants"][v] = d
        rows.append(row)
        print("round %d: fresh process to first logits: wcache %.3f s (import %.3f s, CUDA start %.4f s, "
              "attach %.4f, config %.4f, meta init %.4f, load_into %.4f, forward %.3f s; memory_allocated %d) | "
              "from_pretrained %.3f s (import %.3f s, CUDA start %.4f s, from_pretrained %.3f s, forward %.3f s; "
              "memory_allocated %d)" % (
                  i, row["wcache_total_s"], row["wcache_import_s"], row["wcache_cuda_s"],
                  row["wcache_attach_s"], row["wcache_config_s"], row["wcache_meta_init_s"],
                  row["wcache_load_into_s"], row["wcache_forward_s"], row["wcache_mem_allocated"],
                  row["hf_total_s"], row["hf_import_s"], row["hf_cuda_s"], row["hf_load_s"],
                  row["hf_forward_s"], row["hf_mem_allocated"]), flush=True)
        print("  weights part, CUDA start-up and construction inside (as before): wcache %.4f s, "
              "from_pretrained %.3f s: %.1fx" % (row["wcache_weights_s"], row["hf_weights_s"], row["ratio_weights"]))
        print("  weights part, CUDA start-up apart: wcache %.4f s, from_pretrained %.3f s: %.1fx"
              % (row["wcache_weights_nocuda_s"], row["hf_weights_nocuda_s"], row["ratio_weights_nocuda"]))
        print("  weights part, CUDA start-up and construction apart (construction: wcache %.4f s, "
              "the same code in the from_pretrained process after it %.4f s): wcache %.4f s, "
              "from_pretrained %.3f s: %.1fx" % (
                  row["wcache_meta_init_s"], row["hf_meta_init_same_s"], row["wcache_weights_bind_s"],
                  row["hf_weights_bind_s"], row["ratio_weights_bind"]))
        print("  again in the wcache process after its logits: attach %.4f s (first %.4f s), construction "
              "%.4f s (first %.4f s), construction the old way (skip_init=False) %.4f s, the class called "
              "directly %.4f s, everything on meta under %s %.4f s" % (
                  row["wcache_attach_again_s"], row["wcache_attach_s"], row["wcache_meta_init_again_s"],
                  row["wcache_meta_init_s"], row["wcache_meta_init_old_s"], row["wcache_meta_init_class_s"],
                  row["no_init_weights"] and row["no_init_weights"] + ".no_init_weights",
                  row["wcache_meta_init_all_meta_s"]), flush=True)
        for v, d in row["variants"].items():
            ab = d["load_into_ab_s"]
            med_ab = lambda k: statistics.median(ab[k]) if ab[k] else float("nan")  # noqa: E731
            print("  %-7s weights part (connect to load_into done, CUDA start-up apart) %.4f s: %.1fx "
                  "(connect %.4f, attach%s %.4f, config %.4f, meta init %.4f, load_into %.4f%s); "
                  "attach in C, us: %s; again %.4f s, C: %s; after the logits, load_into old/new "
                  "x%d, median %.4f / %.4f s" % (
                      v, d["weights_nocuda_s"], d["ratio_weights_nocuda"], d["connect_s"],
                      "(wait=False)" if "pending_thread_s" in d else "", d["attach_s"], d["config_s"],
                      d["meta_init_s"], d["load_into_s"],
                      ", attach thread %.4f s, %s" % (
                          d["pending_thread_s"],
                          "done before load_into" if d["pending_done_before_load_into"] else
                          "ended %.4f s into load_into" % d["pending_end_after_meta_init_s"])
                      if "pending_thread_s" in d else "",
                      d["attach_c_us"], d["attach_again_s"], d["attach_again_c_us"],
                      len(ab["new"]), med_ab("old"), med_ab("new")), flush=True)
    # the median of each column (of an even count: the mean of the middle
    # two, not the upper one, which favoured the ratios)
    med = lambda k: statistics.median(r[k] for r in rows)  # noqa: E731
    print("median of %d: wcache %.3f s to first logits, from_pretrained %.3f s (whole start %.2fx); "
          "weights part %.1fx as before, %.1fx with CUDA start-up apart, %.1fx with construction apart too"
          % (len(rows), med("wcache_total_s"), med("hf_total_s"), med("hf_total_s") / med("wcache_total_s"),
             med("ratio_weights"), med("ratio_weights_nocuda"), med("ratio_weights_bind")))
    for v in variants:
        vm = lambda k: statistics.median(r["variants"][v][k] for r in rows)  # noqa: E731
        print("median of %d, %s: weights part (CUDA start-up apart) %.4f s against from_pretrained's "
              "%.3f s: %.1fx (attach %.4f, meta init %.4f, load_into %.4f)" % (
                  len(rows), v, vm("weights_nocuda_s"), med("hf_weights_nocuda_s"),
                  vm("ratio_weights_nocuda"), vm("attach_s"), vm("meta_init_s"), vm("load_into_s")))
    if a.profile:
        x = run_child("wcache", a, profile=True)
        with open(a.profile, "w") as f:
            f.write("cProfile of a fresh wcache process (seq), connect to load_into's return "
                    "(%.4f s under the profiler); times in ns, not s\n\n%s\n%s" % (
                        x["load_into"] - x["cuda"], x["profile_tottime"], x["profile_cumulative"]))
        print("profile of one more seq process: %s" % a.profile)
    if made_cache:
        import shutil
        shutil.rmtree(made_cache, ignore_errors=True)
    print("json: " + json.dumps(rows))


if __name__ == "__main__":
    main()
