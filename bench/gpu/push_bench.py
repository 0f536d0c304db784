#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Updates from a trainer's memory on the GPU (issue 29), in one run, on
the checkpoint a CUDA wcd serves (wcgen llama-8b: 291 bf16 tensors, 16 GB):

  floor     the D2D copy of the same bytes in one process (torch copy_ of
            every tensor into a buffer of its own shape): what the issue
            measures every way against
  push      beside, conn.update_from(every tensor, CUDA sources) from the
            call to version published (the daemon's device hashes
            included); target <= 3x floor. One more round in phases (open,
            the writes queued, commit: the copies' wait, seal, hash,
            publish) says where the time goes.
  push-spare
            the same with keep_spare=True (an RL loop's setting): each
            open takes the pools the last commit retired
  partial   update_from(partial=True) of ~2% of the bytes (--partial-frac):
            the kept tensors copied from N on the device; target <= 3x the
            floor of those bytes + 2 ms. Two sets: the first layers'
            tensors in name order (layer 0's norm and MLP, so its 224 MiB
            gate_up view is hashed again), and partial-attn: the attention
            projections of the first layers (a merged LoRA on attention)
  partial-spare
            the same with keep_spare=True (an RL loop's setting)
  inplace   update_from(in_place=True) of every tensor, no engine attached
            (the served pools written; hashes included); target <= 2x floor
  inplace-partial
            the same ~2% as partial, in place: only those bytes written and
            hashed; target <= 3x their floor + 2 ms
  ipc-512M, ipc-2G
            the colocated RL frameworks' way (verl, slime): this process,
            the trainer, flattens tensors into buckets of 512 MiB or 2 GiB,
            sends each bucket's CUDA IPC handle (torch's reduce_tensor) to
            an engine process, which rebuilds it and copies every tensor
            into its own parameters; from the first bucket to the last
            bucket's acknowledgement
  save+update
            safetensors save_file of every tensor, then `wcctl update` of
            the saved directory (its page cache warm: the best case)

Rounds: -r (default 3) after one warm-up each; each line gives the best and
the median, the ratio of the median to the floor's median and, for push and
partial, whether the target holds. --json prints one object as well.
Memory: the trainer's 16 GB, the floor's 16 GB (freed before the rest), the
daemon's N and N+1 (32 GB), the engine's 16 GB and a bucket: about 82 GB.
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def load_trainer(model):
    """{name: CUDA tensor} of every *.safetensors of model."""
    import torch
    from safetensors.torch import load_file
    sd = {}
    for f in sorted(glob.glob(os.path.join(model, "*.safetensors"))):
        sd.update(load_file(f, device="cuda"))
    torch.cuda.synchronize()
    return sd


def nbytes(sd, names):
    return sum(sd[k].numel() * sd[k].element_size() for k in names)


def pick(order, sd, want, keep):
    """Whole tensors of order that keep() takes, until want bytes."""
    out, got = [], 0
    for k in order:
        if got >= want:
            break
        if keep(k):
            out.append(k)
            got += nbytes(sd, [k])
    return out


def layer_key(k):
    """Names by layer number (model.layers.10 after model.layers.9)."""
    p = k.split(".")
    return [int(x) if x.isdigit() else x for x in p]


def timed(fn, rounds):
    import torch
    fn()                                   # warm-up
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def floor_of(sd, names, rounds):
    """torch's D2D copy of names' tensors into buffers of their shapes,
    then a wait: seconds per round."""
    import torch
    dst = {k: torch.empty_like(sd[k]) for k in names}

    def run():
        for k in names:
            dst[k].copy_(sd[k], non_blocking=True)
        torch.cuda.synchronize()
    out = timed(run, rounds)
    dst.clear()
    torch.cuda.empty_cache()
    return out


def push_phases(conn, sd, flags=0):
    """update_from's steps one by one (_push.py's own calls): seconds of
    open, of the writes queued (and of that, the Python side's sources:
    dtype, shape, address, device and stream of each tensor), of commit
    (the copies' wait, the daemon's seal, hash and publish), and the
    daemon's seal+hash seconds; with a libwcache that has wc_push_times,
    its own seconds of the same session (lib_*: open, plan, pool maps,
    copy calls, the commit's wait for the copies, its round trip, the
    unmap) and counts (lib_maps, lib_copies). flags:
    wc_push_open's (2: partial, 4: in place, 8: keep_spare)."""
    import ctypes
    import inspect
    from wcache import _lib, _push
    from wcache._lib import lib
    p = ctypes.c_void_p()
    t0 = time.perf_counter()
    _push._call(conn, lib.wc_push_open, conn._ptr(), flags, 0, 0, ctypes.byref(p))
    t1 = time.perf_counter()
    held = []
    err = _lib.new(_lib.WcError)
    # an older package (f463edb and before) makes its own error each call
    werr = (err,) if "err" in inspect.signature(_push._write).parameters else ()
    src_s = 0.0
    for k, v in sd.items():
        ts = time.perf_counter()
        src = _push._source(k, v)
        src_s += time.perf_counter() - ts
        _push._write(conn, p, k, src, *werr)
        held.append(src[4])
    t2 = time.perf_counter()
    r = _lib.new(_lib.WcLifeResult)
    _push._call(conn, lib.wc_push_commit, p, ctypes.byref(r))
    t3 = time.perf_counter()
    out = {"open_s": t1 - t0, "writes_s": t2 - t1, "sources_s": src_s,
           "commit_s": t3 - t2, "daemon_seal_hash_s": r.verify_seconds}
    # libwcache's own count of the same session (an older one has none)
    if hasattr(conn, "push_times") and _lib.HAVE.get("wc_push_times"):
        lt = conn.push_times()
        for k in ("open", "plan", "map", "copy", "sync", "commit", "unmap"):
            out["lib_%s_s" % k] = lt[k + "_ns"] / 1e9
        out["lib_maps"], out["lib_copies"] = lt["maps"], lt["copies"]
    return out


def phases(row, conn, sd, flags=0):
    """One more round in push_phases's steps, printed under row's line
    and kept in it (flags: wc_push_open's: 2 partial, 4 in place, 8
    keep_spare)."""
    ph = push_phases(conn, sd, flags)
    ms = {k[:-2]: v * 1e3 for k, v in ph.items() if k.endswith("_s")}
    counts = {k: v for k, v in ph.items() if not k.endswith("_s")}
    print("             phases: " + ", ".join("%s %.2f ms" % kv for kv in ms.items()) +
          "".join(", %s %d" % kv for kv in counts.items()), flush=True)
    row["phases_ms"] = ms
    row.update(counts)


ENGINE = r"""
import pickle, sys, torch
from multiprocessing.connection import Client
conn = Client(sys.argv[1], authkey=b"push_bench")
shapes = pickle.loads(conn.recv_bytes())
params = {k: torch.empty(s, dtype=getattr(torch, d), device="cuda") for k, (s, d) in shapes.items()}
flat = {k: v.view(-1).view(torch.uint8) for k, v in params.items()}
torch.cuda.synchronize()
conn.send_bytes(b"ready")
while True:
    msg = pickle.loads(conn.recv_bytes())
    if msg is None:
        break
    (fn, args), parts = msg
    bucket = fn(*args)                    # rebuilt from its IPC handle
    for k, off, n in parts:
        flat[k].copy_(bucket[off:off + n], non_blocking=True)
    torch.cuda.synchronize()
    del bucket
    conn.send_bytes(b"done")
"""


def ipc_buckets(sd, bucket_bytes, rounds):
    """verl/slime's colocated update: seconds per round of every bucket
    packed, handed over through CUDA IPC and copied by the engine."""
    import pickle
    import torch
    from multiprocessing.connection import Listener
    from torch.multiprocessing.reductions import reduce_tensor
    addr = os.path.join(tempfile.mkdtemp(prefix="pb"), "sock")
    lst = Listener(addr, authkey=b"push_bench")
    eng = subprocess.Popen([sys.executable, "-c", ENGINE, addr])
    c = lst.accept()
    c.send_bytes(pickle.dumps({k: (tuple(v.shape), str(v.dtype).replace("torch.", ""))
                               for k, v in sd.items()}))
    assert c.recv_bytes() == b"ready"
    groups, cur, size = [], [], 0
    for k, v in sd.items():
        n = v.numel() * v.element_size()
        if cur and size + n > bucket_bytes:
            groups.append(cur)
            cur, size = [], 0
        cur.append((k, n))
        size += n
    groups.append(cur)

    def run():
        for g in groups:
            bucket = torch.cat([sd[k].view(-1).view(torch.uint8) for k, _ in g])
            parts, off = [], 0
            for k, n in g:
                parts.append((k, off, n))
                off += n
            torch.cuda.synchronize()      # packed before the engine reads
            c.send_bytes(pickle.dumps((reduce_tensor(bucket), parts)))
            assert c.recv_bytes() == b"done"
            del bucket
    try:
        return timed(run, rounds)
    finally:
        c.send_bytes(pickle.dumps(None))
        eng.wait(timeout=60)
        lst.close()


def save_update(sd, model, wcctl, rundir, rounds):
    """safetensors save_file then `wcctl update` of that directory:
    [(save seconds, update seconds)] per round (no warm-up: each round
    writes and loads 16 GB)."""
    from safetensors.torch import save_file
    out = []
    for r in range(rounds):
        d = tempfile.mkdtemp(prefix="pbsave", dir=os.environ.get("PUSH_SAVE_DIR", "/tmp"))
        for f in os.listdir(model):
            if not f.endswith(".safetensors") and not f.endswith(".index.json"):
                if os.path.isfile(os.path.join(model, f)):
                    shutil.copy(os.path.join(model, f), d)
        t0 = time.perf_counter()
        save_file({k: v.cpu() for k, v in sd.items()}, os.path.join(d, "model.safetensors"),
                  metadata={"format": "pt"})
        t1 = time.perf_counter()
        p = subprocess.run([wcctl, "update", "--model", d, "--device", "0", "--runtime-dir",
                            rundir, "--json"], capture_output=True, text=True)
        t2 = time.perf_counter()
        assert p.returncode == 0, p.stdout + p.stderr
        out.append((t1 - t0, t2 - t1))
        # serve the benchmark's checkpoint again before the copy goes: a
        # session's open reads the served directory's headers
        p = subprocess.run([wcctl, "update", "--model", model, "--device", "0",
                            "--runtime-dir", rundir], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        shutil.rmtree(d)
    return out


def summary(name, secs, floor=None, target=None):
    best, med = min(secs), statistics.median(secs)
    row = {"name": name, "best_ms": best * 1e3, "median_ms": med * 1e3,
           "rounds_ms": [s * 1e3 for s in secs]}
    line = "%-12s best %9.2f ms  median %9.2f ms" % (name, best * 1e3, med * 1e3)
    if floor:
        row["ratio"] = med / floor
        line += "  %6.2fx floor" % row["ratio"]
    if target is not None:
        row["target_ms"] = target * 1e3
        row["ok"] = med <= target
        line += "  (target <= %.2f ms: %s)" % (target * 1e3, "yes" if row["ok"] else "no")
    print(line, flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="the checkpoint the wcd serves")
    ap.add_argument("--runtime-dir", required=True)
    ap.add_argument("--device", default="0")
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("--partial-frac", type=float, default=0.02)
    ap.add_argument("--wcctl", default="wcctl")
    ap.add_argument("--skip", default="", help="comma list of: ipc, save, inplace")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    import torch
    import wcache
    skip = set(filter(None, a.skip.split(",")))
    sd = load_trainer(a.model)
    names = list(sd)
    total = sum(v.numel() * v.element_size() for v in sd.values())
    # ~frac of the bytes, two ways: "mlp", whole tensors of the first
    # layers in name order (layer 0's norms and MLP: its gate_up fused view
    # is rehashed whole, a 224 MiB chain); "attn", the attention
    # projections (q, k, v, o) of as many layers as make frac (what a
    # merged LoRA adapter on attention changes)
    part = pick(sorted(names), sd, a.partial_frac * total, lambda k: ".layers." in k)
    attn = pick(sorted(names, key=layer_key), sd, a.partial_frac * total,
                lambda k: ".self_attn." in k and k.endswith("_proj.weight"))
    pb = nbytes(sd, part)
    print("model %s: %d tensors, %d bytes; partial (mlp): %d tensors, %d bytes (%.2f%%); "
          "partial (attn): %d tensors, %d bytes (%.2f%%); %s" % (
              a.model, len(names), total, len(part), pb, 100.0 * pb / total,
              len(attn), nbytes(sd, attn), 100.0 * nbytes(sd, attn) / total,
              torch.cuda.get_device_name(0)), flush=True)
    rows = []
    floor = floor_of(sd, names, a.rounds)
    f_med = statistics.median(floor)
    rows.append(summary("floor", floor))
    print("             %.0f GB/s" % (total / min(floor) / 1e9))
    pfloor = floor_of(sd, part, a.rounds)
    pf_med = statistics.median(pfloor)
    rows.append(summary("floor-part", pfloor))
    conn = wcache.connect(device=a.device, runtime_dir=a.runtime_dir)
    push = timed(lambda: conn.update_from(sd), a.rounds)
    rows.append(summary("push", push, f_med, 3 * f_med))
    phases(rows[-1], conn, sd)
    # keep_spare (an RL loop's updates): each open takes the pools the
    # last commit retired, instead of freeing 16 GB then creating 16 GB
    push = timed(lambda: conn.update_from(sd, keep_spare=True), a.rounds)
    rows.append(summary("push-spare", push, f_med, 3 * f_med))
    phases(rows[-1], conn, sd, 8)
    push_phases(conn, sd)            # the last one frees the spare
    afloor = floor_of(sd, attn, a.rounds)
    af_med = statistics.median(afloor)
    rows.append(summary("floor-attn", afloor))
    sets = (("", {k: sd[k] for k in part}, pf_med), ("-attn", {k: sd[k] for k in attn}, af_med))
    for tag, changed, fm in sets:
        partial = timed(lambda: conn.update_from(changed, partial=True), a.rounds)
        rows.append(summary("partial" + tag, partial, fm, 3 * fm + 2e-3))
        phases(rows[-1], conn, changed, 2)
    # the same with keep_spare, as an RL loop that changes a few layers
    # each step runs it: the pools the last commit retired are N+1's
    for tag, changed, fm in sets:
        partial = timed(lambda: conn.update_from(changed, partial=True, keep_spare=True),
                        a.rounds)
        rows.append(summary("partial-spare" + tag, partial, fm, 3 * fm + 2e-3))
        phases(rows[-1], conn, changed, 2 | 8)
    push_phases(conn, sd)            # the last one frees the spare
    if "inplace" not in skip:
        # no engine holds a lease here: the session writes the served pools
        inpl = timed(lambda: conn.update_from(sd, in_place=True), a.rounds)
        rows.append(summary("inplace", inpl, f_med, 2 * f_med))
        phases(rows[-1], conn, sd, 4)
        for tag, changed, fm in sets:
            ipart = timed(lambda: conn.update_from(changed, partial=True, in_place=True),
                          a.rounds)
            rows.append(summary("inplace-partial" + tag, ipart, fm, 3 * fm + 2e-3))
            phases(rows[-1], conn, changed, 2 | 4)
    conn.close()
    if "ipc" not in skip:
        for label, b in (("ipc-512M", 512 << 20), ("ipc-2G", 2 << 30)):
            rows.append(summary(label, ipc_buckets(sd, b, a.rounds), f_med))
    if "save" not in skip:
        su = save_update(sd, a.model, a.wcctl, a.runtime_dir, max(1, min(a.rounds, 2)))
        rows.append(summary("save+update", [s + u for s, u in su], f_med))
        rows[-1]["save_ms"] = [s * 1e3 for s, _ in su]
        rows[-1]["update_ms"] = [u * 1e3 for _, u in su]
        print("             save %s ms, wcctl update %s ms" % (
            ", ".join("%.0f" % (s * 1e3) for s, _ in su),
            ", ".join("%.0f" % (u * 1e3) for _, u in su)))
    if a.json:
        print(json.dumps({"model": a.model, "tensors": len(names), "bytes": total,
                          "partial_bytes": pb, "gpu": torch.cuda.get_device_name(0),
                          "rows": rows}))


if __name__ == "__main__":
    main()
