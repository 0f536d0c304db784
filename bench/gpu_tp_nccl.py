#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One rank of a real tensor-parallel forward across GPUs (issue 18): this
process sees one GPU (CUDA_VISIBLE_DEVICES, as engines set it), attaches its
rank's served tensors from its wcd by the GPU's UUID (libwcache through
ctypes: device pointers wrapped with __cuda_array_interface__, no copy),
and runs a tiny Llama or Mixtral with torch.distributed (NCCL): the
column-parallel layers (qkv_proj, gate_up_proj, experts.w13_weight) give
this rank's heads and slice, the row-parallel ones (o_proj, down_proj,
w2_weight) partial sums that all_reduce adds; the vocab-parallel embedding
is all-reduced, the LM head's shards all-gathered. Rank 0 compares the
logits with transformers' own model (from_pretrained of the same directory,
float32, on its GPU): max |diff| <= 1e-4 x max(1, max |logit|), and under
1/100 of transformers' own bf16-vs-float32 difference.

    RANK=r WORLD_SIZE=N MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 \\
    CUDA_VISIBLE_DEVICES=g python3 bench/gpu_tp_nccl.py --model DIR \\
        --device GPU-<uuid> --runtime-dir RD [--lib build/lib/libwcache.so]

bench/gpu_multi.sh starts one per GPU. Exit 0 when the logits agree.
"""
import argparse
import ctypes
import json
import os
import re
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "layout_ref"))
import daemon  # noqa: E402  (the ctypes structs of wcache.h)

TOKENS = [3, 17, 250, 299, 42, 7, 128, 64]


class CAI:
    def __init__(self, ptr, shape, typestr):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, True), "version": 3, "strides": None}


def attach(device, rundir, lib):
    """{name: (torch tensor on this GPU over the served bytes, padded_rows)}."""
    os.environ["WCACHE_LIB"] = lib
    daemon.LIB = lib
    L = daemon.lib()
    err = daemon._Err()
    conn = ctypes.c_void_p()
    opts = daemon._Opts(device.encode(), rundir.encode(), None, 0, b"gpu_tp_nccl")
    if L.wc_connect(ctypes.byref(opts), ctypes.byref(conn), ctypes.byref(err)) or \
       L.wc_hello(conn, None, None, ctypes.byref(err)):
        raise SystemExit("wcache: " + err.msg.decode())
    model = ctypes.c_void_p()
    if L.wc_attach(conn, 0, ctypes.byref(model), None, ctypes.byref(err)):
        raise SystemExit("wcache attach: " + err.msg.decode())
    out = {}
    words = {"BF16": ("<u2", torch.bfloat16), "F32": ("<f4", None), "F16": ("<f2", None)}
    for i in range(L.wc_tensor_count(model)):
        t = L.wc_tensor_at(model, i).contents
        dt = t.dtype.decode()
        if dt not in words or not t.bytes:
            continue
        shape = [t.shape[d] for d in range(t.ndim)]
        typestr, view = words[dt]
        x = torch.as_tensor(CAI(t.ptr, shape, typestr), device="cuda")
        if view is not None:
            x = x.view(view)
        out[t.name.decode()] = x.float()
    return out, (conn, model)


def rms(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    T, _, hd = x.shape
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64, device=x.device) / hd))
    ang = torch.outer(torch.arange(T, dtype=torch.float64, device=x.device), inv)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos().float()[:, None], emb.sin().float()[:, None]
    h = hd // 2
    return x * cos + torch.cat([-x[..., h:], x[..., :h]], -1) * sin


def attention(q, k, v):
    T, nq, hd = q.shape
    g = nq // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = torch.einsum("qhd,khd->hqk", q, k) / hd ** 0.5
    s = s + torch.full((T, T), float("-inf"), device=q.device).triu(1)
    return torch.einsum("hqk,khd->qhd", s.softmax(-1), v)


def forward(w, pad, cfg, tp, rank):
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or H // nh
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta") or cfg.get("rope_theta", 10000.0)
    moe = cfg["architectures"][0] == "MixtralForCausalLM"
    nh_r, nkv_r = nh // tp, max(1, nkv // tp)
    tok = torch.tensor(TOKENS, device="cuda")
    T = len(TOKENS)
    e = w["model.embed_tokens.weight"]
    local = tok - rank * pad["model.embed_tokens.weight"]
    hit = (local >= 0) & (local < e.shape[0])
    x = torch.zeros(T, H, device="cuda")
    x[hit] = e[local[hit]]
    dist.all_reduce(x)
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        qkv = h @ w[p + "self_attn.qkv_proj.weight"].T
        q = qkv[:, :nh_r * hd].reshape(T, nh_r, hd)
        k = qkv[:, nh_r * hd:(nh_r + nkv_r) * hd].reshape(T, nkv_r, hd)
        v = qkv[:, (nh_r + nkv_r) * hd:].reshape(T, nkv_r, hd)
        a = attention(rope(q, theta), rope(k, theta), v).reshape(T, -1)
        out = a @ w[p + "self_attn.o_proj.weight"].T
        dist.all_reduce(out)
        x = x + out
        h = rms(x, w[p + "post_attention_layernorm.weight"], eps)
        if moe:
            base = p + "block_sparse_moe."
            prob = (h @ w[base + "gate.weight"].T).softmax(-1)
            wt, top = prob.topk(cfg["num_experts_per_tok"], -1)
            gate = torch.zeros_like(prob).scatter(-1, top, wt / wt.sum(-1, keepdim=True))
            w13, w2 = w[base + "experts.w13_weight"], w[base + "experts.w2_weight"]
            i_r = w13.shape[1] // 2
            out = torch.zeros_like(x)
            for j in range(w13.shape[0]):  # tp: every expert, I / tp of each
                gu = h @ w13[j].T
                out += gate[:, j:j + 1] * ((torch.nn.functional.silu(gu[:, :i_r]) * gu[:, i_r:]) @ w2[j].T)
        else:
            gu = h @ w[p + "mlp.gate_up_proj.weight"].T
            i_r = gu.shape[1] // 2
            out = (torch.nn.functional.silu(gu[:, :i_r]) * gu[:, i_r:]) @ w[p + "mlp.down_proj.weight"].T
        dist.all_reduce(out)
        x = x + out
    x = rms(x, w["model.norm.weight"], eps)
    head = "lm_head.weight" if "lm_head.weight" in w else "model.embed_tokens.weight"
    part = x @ w[head].T
    # shards differ in rows (the last rank may hold fewer): pad to P, gather
    P = pad[head]
    full = torch.zeros(T, P, device="cuda")
    full[:, :part.shape[1]] = part
    parts = [torch.zeros_like(full) for _ in range(tp)]
    dist.all_gather(parts, full)
    # rank r's columns are the tokens [rP, rP + rows): in order, zeros past V
    return torch.cat(parts, -1)[:, :cfg["vocab_size"]]


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
    w, keep = attach(a.device, a.runtime_dir, a.lib)
    man = json.loads(os.popen(f"{os.path.dirname(a.lib)}/../bin/wcctl manifest --device {a.device} "
                              f"--runtime-dir {a.runtime_dir} --json").read())
    pad = {t["name"]: t.get("padded_rows") or t["shape"][0] for t in man["tensors"]}
    with torch.no_grad():
        logits = forward(w, pad, cfg, tp, rank)
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
