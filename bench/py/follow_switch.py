#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An engine's switch to a new version (issue 29, benchmark (c): at most
5 ms): from the version notice's arrival on the engine's socket to the
module re-attached, re-bound (wcache.torch.follow) and its next forward
started.

  follow_switch.py --model DIR --runtime-dir RD --device 0|host:NAME [-n 20]
                   [--partial] [--trainer-device cpu|cuda] [--transformers]
                   [--detach background|now]

A wcd serves DIR on --device. This process is the engine: a module whose
parameters are the checkpoint's tensors by name (built on meta from the
manifest; --transformers: the model transformers builds from DIR's
config.json), bound with follow(). A trainer process (spawned) holds a
copy of the served checkpoint tensors (on --trainer-device: the served
device by default) and, -n times, changes one tensor and pushes every
tensor (update_from; --partial: that one alone). The engine waits in
select() on the notice fd; t0 is select's return (the notice is there),
then poll() (read the notice, attach N+1, re-bind, let N go), then the
forward's first op is launched: t1 (transformers: when its input
embedding's forward hook runs, the first kernel launched, not when every
layer's are). Printed per update: t1 - t0 and its parts (attach, the
re-bind and how: from the last bind's plan or load_into, N's detach),
then the median, min and max; the forward's end (synchronised) is printed
beside, not counted. --detach: N's detach on the follower's thread after
the switch (background, the default: its time read once it ended, after
the forward's end) or inside poll() (now: counted in the switch).
"""
import argparse
import multiprocessing
import select
import statistics
import time

import torch

import wcache
import wcache.torch


def checkpoint_names(model):
    """The manifest's checkpoint entries (no fused view, no alias)."""
    return [t.name for t in model.manifest if not t.flags & 0x6]


def meta_module(model, names):
    """A module tree whose parameters are the named tensors (on meta, the
    served dtype and shape): what load_into binds, for any model."""
    root = torch.nn.Module()
    for name in names:
        t = model.tensor(name)
        *path, leaf = name.split(".")
        m = root
        for p in path:
            if not hasattr(m, p) or not isinstance(getattr(m, p), torch.nn.Module):
                m.add_module(p, torch.nn.Module())
            m = getattr(m, p)
        m.register_parameter(leaf, torch.nn.Parameter(
            torch.empty(t.shape, dtype=t.dtype, device="meta"), requires_grad=False))
        del t
    return root


def trainer(a, pipe):
    conn = wcache.connect(device=a.device, runtime_dir=a.runtime_dir)
    served = conn.attach()
    dev = a.trainer_device
    mine = {n: served.tensor(n).to(dev, copy=True) for n in checkpoint_names(served)}
    served.detach()
    del served
    if dev.startswith("cuda"):
        torch.cuda.synchronize()
    first = sorted(mine)[0]
    pipe.send(len(mine))
    for i in range(a.n):
        pipe.recv()                                 # the engine is on the last version
        mine[first].view(-1)[0] += 1               # a change, so the hashes change
        src = {first: mine[first]} if a.partial else mine
        t0 = time.perf_counter()
        r = wcache.torch.update_from(conn, src, partial=a.partial)
        pipe.send((r.version, time.perf_counter() - t0))
    pipe.recv()


def forward(module, ids):
    """The module's next step: transformers' forward, or one op on the
    first parameter (a real engine's first kernel reads a weight)."""
    if hasattr(module, "config"):
        return module(ids).logits
    p = next(module.parameters())
    return p.view(-1)[:4096].float().sum()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--runtime-dir", required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--partial", action="store_true")
    ap.add_argument("--trainer-device", default=None)
    ap.add_argument("--transformers", action="store_true")
    ap.add_argument("--detach", choices=("background", "now"), default="background")
    a = ap.parse_args()
    cuda = not a.device.startswith("host")
    tdev = "cuda:%s" % a.device if cuda and a.device.isdigit() else ("cuda" if cuda else "cpu")
    a.trainer_device = a.trainer_device or tdev
    conn = wcache.connect(device=a.device, runtime_dir=a.runtime_dir)
    served = conn.attach()
    if a.transformers:
        module = wcache.torch.empty_pretrained(a.model, dtype=torch.bfloat16,
                                               buffers_device=tdev).eval()
    else:
        module = meta_module(served, checkpoint_names(served))
    f = wcache.torch.follow(module, conn, background=a.detach == "background")
    served.detach()
    del served
    ids = torch.tensor([[1, 17, 300, 42, 7]], device=tdev)
    # transformers' forward: started once its first kernel (the input
    # embedding's lookup) is launched, not when every layer's are
    started = []
    if a.transformers:
        module.get_input_embeddings().register_forward_hook(
            lambda *_: started.append(time.perf_counter_ns()))
    with torch.no_grad():
        forward(module, ids)                        # warm
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    p = ctx.Process(target=trainer, args=(a, theirs))
    p.start()
    ntensors = ours.recv()
    print("engine on version %d, %d tensors bound; the trainer holds %d on %s; %s updates; "
          "the old version detached %s"
          % (f.version, len(f.model), ntensors, a.trainer_device, "partial" if a.partial else "full",
             "on the follower's thread" if a.detach == "background" else "inside poll()"))
    rows = []
    for i in range(a.n):
        ours.send("go")
        while True:                                 # the engine waits for a notice
            select.select([f.fileno()], [], [])
            t0 = time.perf_counter_ns()
            if f.poll():
                break
        t1 = time.perf_counter_ns()
        with torch.no_grad():
            del started[:]
            out = forward(module, ids)              # its next forward, launched
            t2 = started[0] if started else time.perf_counter_ns()
            if cuda:
                torch.cuda.synchronize()
            float(out.reshape(-1)[0])
        t3 = time.perf_counter_ns()
        f.released()                                # N's detach, if on the thread
        version, push_s = ours.recv()
        assert f.version == version, (f.version, version)
        t = f.times
        rows.append((t1 - t0, t2 - t0, t["attach_ns"], t["bind_ns"], t["detach_ns"], push_s))
        print("update %2d: version %d, switch %.3f ms (attach %.3f, re-bind %.3f by %s, old "
              "detached %.3f %s), forward started at %.3f ms, done at %.3f ms; update_from %.1f ms"
              % (i, version, (t1 - t0) / 1e6, t["attach_ns"] / 1e6, t["bind_ns"] / 1e6,
                 t["rebind"], t["detach_ns"] / 1e6,
                 "behind" if a.detach == "background" else "inside",
                 (t2 - t0) / 1e6, (t3 - t0) / 1e6, push_s * 1e3),
              flush=True)
    ours.send("done")
    p.join(60)
    for k, label in ((1, "notice -> next forward started"), (0, "notice -> re-bound"),
                     (2, "attach"), (3, "re-bind"), (4, "old version detached")):
        v = [r[k] / 1e6 for r in rows]
        print("%-32s median %.3f ms, min %.3f, max %.3f (n=%d)"
              % (label, statistics.median(v), min(v), max(v), len(v)))
    f.close()


if __name__ == "__main__":
    main()
