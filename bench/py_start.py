#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Engine start: a fresh Python process to its first logits, wcache against
transformers' from_pretrained, in the same run.

  py_start.py --model DIR --runtime-dir RD [--device 0] [-r 3]

Each round starts two fresh processes, one after the other (same page cache):
  wcache  import torch, transformers (and the model's class), wcache;
          connect; attach (identity of DIR); AutoModelForCausalLM.from_config on
          the meta device (wcache.torch.init_empty, buffers on cuda);
          wcache.torch.load_into; one forward of 8 tokens (synchronized)
  hf      import torch, transformers (and the class); from_pretrained(DIR,
          dtype=bfloat16, device_map="cuda"); the same forward
The driver takes the time at fork; each child reports CLOCK_MONOTONIC stamps
(shared by every process of the host). Reported per round: process start to
first logits, the import part, the weights part (wcache: connect through
load_into; hf: from_pretrained) and the forward. Run a wcd on DIR first
(the driver does not start one) and read the files once so that
from_pretrained reads from a warm page cache.
"""
import argparse
import json
import os
import subprocess
import sys
import time

IDS = [[1, 306, 4658, 278, 6593, 310, 2834, 338]]


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


def child_wcache(a):
    t = {"start": time.monotonic()}
    import torch
    import transformers
    t["import_torch_tf"] = time.monotonic()
    import wcache
    import wcache.torch
    arch = model_class(a.model)
    t["import"] = time.monotonic()
    conn = wcache.connect(device=a.device, runtime_dir=a.runtime_dir)
    served = conn.attach(model_dir=a.model)
    t["attach"] = time.monotonic()
    cfg = transformers.AutoConfig.from_pretrained(a.model)
    t["config"] = time.monotonic()
    with wcache.torch.init_empty(buffers_device="cuda"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    t["meta_init"] = time.monotonic()
    r = wcache.torch.load_into(model, served)
    t["load_into"] = time.monotonic()
    with torch.no_grad():
        logits = model.eval()(torch.tensor(IDS, device="cuda")).logits
    torch.cuda.synchronize()
    t["logits"] = time.monotonic()
    t["tensors"] = len(r.bound)
    t["mem_allocated"] = torch.cuda.memory_allocated()
    t["logits_shape"] = list(logits.shape)
    return t


def child_hf(a):
    t = {"start": time.monotonic()}
    import torch
    import transformers
    arch = model_class(a.model)
    t["import"] = time.monotonic()
    model = arch.from_pretrained(
        a.model, dtype=torch.bfloat16, device_map="cuda")
    torch.cuda.synchronize()
    t["load"] = time.monotonic()
    with torch.no_grad():
        logits = model.eval()(torch.tensor(IDS, device="cuda")).logits
    torch.cuda.synchronize()
    t["logits"] = time.monotonic()
    t["mem_allocated"] = torch.cuda.memory_allocated()
    t["logits_shape"] = list(logits.shape)
    return t


def run_child(kind, a):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--model", a.model,
           "--runtime-dir", a.runtime_dir, "--device", a.device]
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
    a = ap.parse_args()
    if a.child:
        import warnings
        warnings.simplefilter("ignore")
        t = child_wcache(a) if a.child == "wcache" else child_hf(a)
        print(json.dumps(t))
        return
    rows = []
    for i in range(a.r):
        w = run_child("wcache", a)
        h = run_child("hf", a)
        row = {
            "round": i,
            "wcache_total_s": w["logits"] - w["fork"],
            "wcache_import_s": w["import"] - w["start"],
            "wcache_weights_s": w["load_into"] - w["import"],
            "wcache_attach_s": w["attach"] - w["import"],
            "wcache_config_s": w["config"] - w["attach"],
            "wcache_meta_init_s": w["meta_init"] - w["config"],
            "wcache_load_into_s": w["load_into"] - w["meta_init"],
            "wcache_forward_s": w["logits"] - w["load_into"],
            "wcache_interp_start_s": w["start"] - w["fork"],
            "wcache_mem_allocated": w["mem_allocated"],
            "hf_total_s": h["logits"] - h["fork"],
            "hf_import_s": h["import"] - h["start"],
            "hf_weights_s": h["load"] - h["import"],
            "hf_forward_s": h["logits"] - h["load"],
            "hf_mem_allocated": h["mem_allocated"],
            "tensors": w["tensors"],
        }
        rows.append(row)
        print("round %d: fresh process to first logits: wcache %.3f s (import %.3f s, weights %.4f s "
              "[attach %.4f, meta init %.4f, load_into %.4f], forward %.3f s; memory_allocated %d) | "
              "from_pretrained %.3f s (import %.3f s, weights %.3f s, forward %.3f s; memory_allocated %d) | "
              "weights part ratio %.0fx (config.json %.4f s)" % (
                  i, row["wcache_total_s"], row["wcache_import_s"], row["wcache_weights_s"],
                  row["wcache_attach_s"], row["wcache_meta_init_s"], row["wcache_load_into_s"],
                  row["wcache_forward_s"], row["wcache_mem_allocated"], row["hf_total_s"],
                  row["hf_import_s"], row["hf_weights_s"], row["hf_forward_s"], row["hf_mem_allocated"],
                  row["hf_weights_s"] / row["wcache_weights_s"], row["wcache_config_s"]), flush=True)
    med = lambda k: sorted(r[k] for r in rows)[len(rows) // 2]  # noqa: E731
    print("median of %d: wcache %.3f s to first logits (weights %.4f s), from_pretrained %.3f s "
          "(weights %.3f s): weights part %.0fx faster, whole start %.2fx" % (
              len(rows), med("wcache_total_s"), med("wcache_weights_s"), med("hf_total_s"),
              med("hf_weights_s"), med("hf_weights_s") / med("wcache_weights_s"),
              med("hf_total_s") / med("wcache_total_s")))
    print("json: " + json.dumps(rows))


if __name__ == "__main__":
    main()
