#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One rank of a real tensor-parallel forward across GPUs (issue 18): this
process sees one GPU (CUDA_VISIBLE_DEVICES, as engines set it), attaches its
rank's served tensors from its wcd by the GPU's UUID (libwcache through
ctypes: device pointers wrapped with __cuda_array_interface__, no copy),
converted to float32, and runs a tiny Llama or Mixtral with torch.distributed (NCCL): the
column-parallel layers (qkv_proj, gate_up_proj, experts.w13_weight) give
this rank's heads and slice, the row-parallel ones (o_proj, down_proj,
w2_weight) partial sums that all_reduce adds; the vocab-parallel embedding
is all-reduced, the LM head's shards all-gathered. Rank 0 compares the
logits with transformers' own model (from_pretrained of the same directory,
float32, on its GPU): max |diff| <= 1e-4 x max(1, max |logit|), and under
1/100 of transformers' own bf16-vs-float32 difference.

    RANK=r WORLD_SIZE=N MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 \\
    CUDA_VISIBLE_DEVICES=g python3 bench/gpu/gpu_tp_nccl.py --model DIR \\
        --device GPU-<uuid> --runtime-dir RD [--lib build/lib/libwcache.so]

bench/gpu/gpu_multi.sh starts one per GPU. Exit 0 when the logits agree.
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "test", "layout_ref"))
import torch_forward as tf  # noqa: E402

TOKENS = tf.TOKENS


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--runtime-dir", required=True)
    ap.add_argument("--lib", default="build/lib/libwcache.so")
    a = ap.parse_args()
    dist.init_process_group("nccl")
    rank, tp = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(0)
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    w = tf.attach(a.device, a.runtime_dir, a.lib)
    man = json.loads(os.popen(f"{os.path.dirname(a.lib)}/../bin/wcctl manifest --device {a.device} "
                              f"--runtime-dir {a.runtime_dir} --json").read())
    pad = {t["name"]: t.get("padded_rows") or t["shape"][0] for t in man["tensors"]}
    with torch.no_grad():
        logits = tf.forward(w, pad, cfg, tp, rank, dist)
    rc = 0
    if rank == 0:
        import transformers
        m = transformers.AutoModelForCausalLM.from_pretrained(
            a.model, dtype=torch.float32, attn_implementation="eager").cuda().eval()
        mb = transformers.AutoModelForCausalLM.from_pretrained(
            a.model, dtype=torch.bfloat16, attn_implementation="eager").cuda().eval()
        with torch.no_grad():
            ref = m(torch.tensor([TOKENS], device="cuda")).logits[0].float()
            refb = mb(torch.tensor([TOKENS], device="cuda")).logits[0].float()
        err = (logits - ref).abs().max().item()
        gap = (refb - ref).abs().max().item()
        tol = min(1e-4 * max(1.0, ref.abs().max().item()), gap / 100)
        ok = err <= tol
        print(f"{os.path.basename(a.model.rstrip('/'))} tp {tp} on {tp} GPU(s), NCCL: max |logits - "
              f"transformers float32| = {err:.3g} (tolerance {tol:.3g}; transformers bf16 vs "
              f"float32 {gap:.3g}): {'ok' if ok else 'DIFFERENT'}", flush=True)
        rc = 0 if ok else 1
    flag = torch.tensor([rc], device="cuda")
    dist.all_reduce(flag)
    dist.destroy_process_group()
    sys.exit(1 if flag.item() else 0)


if __name__ == "__main__":
    main()
