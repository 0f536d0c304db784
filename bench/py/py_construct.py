#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where the construction of a transformers model on the meta device goes
(issue 13, benchmark 2: the weights part of an engine start), and what
wcache.torch.init_empty's skip_init saves of it. One process, the model of
DIR's config.json (wcgen llama-8b: 32 layers, 291 tensors):

  py_construct.py --model DIR [--device cuda] [-n 5] [--top 25] [--no-profile]

After imports, CUDA start-up and AutoConfig, each variant runs once as a
warm-up, then n rounds of every variant in turn (round-robin, so drift of
the host spreads over all; a fresh deepcopy of the config and gc.collect()
between runs, outside the times). Variants (dtype bfloat16 throughout;
"class" is the architecture's class called directly):

  old from_config     init_empty(buffers_device, skip_init=False) +
                      AutoModelForCausalLM.from_config: what the wcache path
                      did before (every constructor and init, on meta)
  old class           the same, the class called directly
  old class + no_init_weights   ... under transformers' no_init_weights
                      (which also leaves out the tying of tied weights)
  part meta_layers / part skip_torch_init / part hf_buffers_only
                      init_empty with one part of skip_init alone, from_config
  new from_config     init_empty(buffers_device) (skip_init=True, the
                      default): the wcache path now
  new class           the same, the class called directly
  all-meta class      torch.device("meta") (torch >= 2.0): everything on
                      meta, buffers too, so not runnable; transformers
                      skips its init on a meta device by itself
  all-meta class + no_init_weights   the floor py_start.py reported

Then: are the new variant's buffers (rotary inv_freq) those of the old one
and of a rotary module constructed normally, bitwise; are its parameters on
meta and its tied weights tied as the old one's; and cProfile's top entries
(by own time and by cumulative time) of the slowest variant and of the new
one. Prints the environment (torch, transformers, threads, transparent huge
pages) that allocation costs depend on.
"""
import argparse
import contextlib
import copy
import cProfile
import gc
import io
import json
import os
import pstats
import sys
import time

from py_start import find_no_init_weights   # bench/ is the script's directory


def env_lines(torch, transformers):
    thp = "?"
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read().strip()
    except OSError:
        pass
    return ["python %s, torch %s, transformers %s, %d CPUs, %d threads in this process, THP %s"
            % (sys.version.split()[0], torch.__version__, transformers.__version__, os.cpu_count(),
               len(os.listdir("/proc/self/task")), thp)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a model directory (its config.json is enough)")
    ap.add_argument("--device", default="cuda", help="where the buffers go (buffers_device)")
    ap.add_argument("-n", type=int, default=5, help="timed rounds (default 5)")
    ap.add_argument("--top", type=int, default=25, help="cProfile entries shown (default 25)")
    ap.add_argument("--no-profile", action="store_true")
    a = ap.parse_args()

    t0 = time.monotonic()
    import torch
    import transformers
    import wcache.torch as wt
    t_import = time.monotonic() - t0
    if a.device.startswith("cuda"):
        torch.cuda.init()
        torch.empty(1, device=a.device)
        torch.cuda.synchronize()
    cfg0 = transformers.AutoConfig.from_pretrained(a.model)
    cls = getattr(transformers, cfg0.architectures[0])
    cls.__init__  # noqa: B018 (imports the lazy modeling module: not a construction cost)
    where, noinit = find_no_init_weights()
    bd = a.device
    dt = torch.bfloat16

    @contextlib.contextmanager
    def default_dtype(d):
        old = torch.get_default_dtype()
        torch.set_default_dtype(d)
        try:
            yield
        finally:
            torch.set_default_dtype(old)

    def from_config(cfg, **kw):
        with wt.init_empty(buffers_device=bd, **kw) as e:
            m = transformers.AutoModelForCausalLM.from_config(cfg, dtype=dt)
        return m, e

    def klass(cfg, **kw):
        with wt.init_empty(buffers_device=bd, **kw) as e, default_dtype(dt):
            m = cls(cfg)
        return m, e

    def klass_noinit(cfg):
        with wt.init_empty(buffers_device=bd, skip_init=False) as e, noinit(), default_dtype(dt):
            m = cls(cfg)
        return m, e

    def all_meta(cfg, no_init=False):
        with torch.device("meta"), (noinit() if no_init else contextlib.nullcontext()), default_dtype(dt):
            m = cls(cfg)
        return m, None

    variants = [
        ("old from_config", lambda c: from_config(c, skip_init=False)),
        ("old class", lambda c: klass(c, skip_init=False)),
        ("old class + no_init_weights", klass_noinit if noinit else None),
        ("part meta_layers", lambda c: from_config(c, parts=["meta_layers"])),
        ("part skip_torch_init", lambda c: from_config(c, parts=["skip_torch_init"])),
        ("part hf_buffers_only", lambda c: from_config(c, parts=["hf_buffers_only"])),
        ("new from_config", lambda c: from_config(c)),
        ("new class", lambda c: klass(c)),
        ("all-meta class", all_meta if hasattr(torch.device("cpu"), "__enter__") else None),
        ("all-meta class + no_init_weights",
         (lambda c: all_meta(c, True)) if noinit and hasattr(torch.device("cpu"), "__enter__") else None),
    ]
    variants = [(n, f) for n, f in variants if f is not None]
    print("\n".join(env_lines(torch, transformers)))
    print("model %s: %s, %d layers, hidden %d; buffers on %s; imports %.2f s; no_init_weights from %s"
          % (a.model, cls.__name__, cfg0.num_hidden_layers, cfg0.hidden_size, bd, t_import,
             where if noinit else None), flush=True)

    def once(fn):
        cfg = copy.deepcopy(cfg0)
        gc.collect()
        t = time.perf_counter()
        m, e = fn(cfg)
        s = time.perf_counter() - t
        return s, m, e

    times = {n: [] for n, _ in variants}
    infos = {}
    for n, f in variants:  # warm-up
        s, m, e = once(f)
        infos[n] = e
        del m
    for _ in range(a.n):
        for n, f in variants:
            s, m, e = once(f)
            times[n].append(s)
            del m
    med = {n: sorted(ts)[len(ts) // 2] for n, ts in times.items()}
    floor = med.get("all-meta class + no_init_weights") or min(med.values())
    print("\n== construction, %d runs each after a warm-up (ms: median [min, max]; x the all-meta floor)" % a.n)
    for n, _ in variants:
        ts = times[n]
        print("  %-34s %8.1f [%7.1f, %7.1f]  x%.1f  %s" % (n, 1e3 * med[n], 1e3 * min(ts), 1e3 * max(ts),
                                                         med[n] / floor, infos[n] if infos[n] else ""))
    old, new = med["old from_config"], med["new from_config"]
    print("  new from_config saves %.1f ms of %.1f (%.1fx faster); %.1f ms above the all-meta floor"
          % (1e3 * (old - new), 1e3 * old, old / new, 1e3 * (new - floor)), flush=True)

    # correctness of the new construction against the old and a normal rotary
    _, m_old, _ = once(dict(variants)["old from_config"])
    _, m_new, e_new = once(dict(variants)["new from_config"])
    b_old, b_new = dict(m_old.named_buffers()), dict(m_new.named_buffers())
    same = sorted(b_old) == sorted(b_new) and all(
        b_new[k].device == b_old[k].device and b_new[k].dtype == b_old[k].dtype and torch.equal(b_new[k], b_old[k])
        for k in b_old)
    print("\n== the new construction: %s" % e_new)
    print("  buffers (%s) bitwise equal to the old construction's, same device and dtype: %s"
          % (", ".join("%s %s %s" % (k, b_new[k].dtype, b_new[k].device) for k in sorted(b_new)) or "none", same))
    print("  every parameter on meta: %s (old: %s)" % (all(p.is_meta for p in m_new.parameters()),
                                                       all(p.is_meta for p in m_old.parameters())))
    def tied(m):
        out = m.get_output_embeddings() if hasattr(m, "get_output_embeddings") else None
        inp = m.get_input_embeddings() if hasattr(m, "get_input_embeddings") else None
        return out is not None and inp is not None and out.weight is inp.weight
    print("  tie_word_embeddings=%s: head tied to the embedding new %s, old %s"
          % (getattr(cfg0, "tie_word_embeddings", None), tied(m_new), tied(m_old)))
    for name, mod in m_new.named_modules():
        if "RotaryEmbedding" in type(mod).__name__ and hasattr(mod, "inv_freq"):
            try:
                ref = type(mod)(config=copy.deepcopy(cfg0))  # constructed normally, on the CPU
                eq = torch.equal(ref.inv_freq, mod.inv_freq.cpu()) and ref.inv_freq.dtype == mod.inv_freq.dtype
                print("  %s.inv_freq equal to a %s constructed normally (CPU): %s" % (name, type(mod).__name__, eq))
            except Exception as ex:  # informational
                print("  %s: a normal construction of %s failed: %r" % (name, type(mod).__name__, ex))
    del m_old, m_new

    if not a.no_profile:
        slowest = max(med, key=med.get)
        runs = [(slowest, a.top)] + ([("new from_config", min(15, a.top))] if slowest != "new from_config" else [])
        for n, k in runs:
            pr = cProfile.Profile()
            cfg = copy.deepcopy(cfg0)
            gc.collect()
            pr.enable()
            m, _ = dict(variants)[n](cfg)
            pr.disable()
            del m
            for key in ("tottime", "cumulative"):
                s = io.StringIO()
                pstats.Stats(pr, stream=s).sort_stats(key).print_stats(k)
                lines = [l for l in s.getvalue().splitlines() if l.strip()]
                print("\n== cProfile of '%s', top %d by %s" % (n, k, key))
                print("\n".join(lines[:k + 8]))
    print("\njson: " + json.dumps({"median_s": med, "times_s": times,
                                   "new": str(e_new), "buffers_equal_old": same}))


if __name__ == "__main__":
    main()
