# SPDX-License-Identifier: MIT
"""The tensor-parallel forward of a tiny Llama or Mixtral in torch, one rank
of it: comm is torch.distributed (bench/gpu/gpu_tp_nccl.py, one process per
GPU, NCCL) or ThreadComm (test/py/test_gpu_layout_forward.py: every rank a
thread of one process). attach() reads a rank's served tensors from a wcd
through libwcache (ctypes); on the CUDA backend its device pointers are
wrapped with __cuda_array_interface__, on the host backend the CPU bytes
are copied to the GPU; either is then converted to float32."""
import ctypes
import os
import threading

import torch

import daemon

DEVICE = os.environ.get("WC_TORCH_DEVICE", "cuda")
# the token ids of test/data/layouts/*/tokens.json
TOKENS = [3, 17, 250, 299, 42, 7, 128, 64]


class CAI:
    def __init__(self, ptr, shape, typestr):
        # torch refuses the read-only flag (it cannot mark a tensor read-only);
        # the mapping is read-only all the same and nothing writes to it
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, False), "version": 3, "strides": None}


def attach(device, rundir, lib=None):
    """{name: float32 torch tensor on this GPU} for the rank served at
    device: the served bytes (CUDA: wrapped in place) converted to float32
    (a copy), then the lease is ended."""
    if lib:
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
    words = {"BF16": ("<i2", torch.bfloat16), "F32": ("<f4", None), "F16": ("<f2", None)}
    for i in range(L.wc_tensor_count(model)):
        t = L.wc_tensor_at(model, i).contents
        dt = t.dtype.decode()
        if dt not in words or not t.bytes:
            continue
        shape = [t.shape[d] for d in range(t.ndim)]
        typestr, view = words[dt]
        if device.startswith("host"):
            b = ctypes.string_at(t.ptr, t.bytes)
            x = torch.frombuffer(bytearray(b), dtype={"<i2": torch.int16, "<f4": torch.float32,
                                                    "<f2": torch.float16}[typestr])
            x = x.reshape(shape).to(DEVICE)
        else:
            x = torch.as_tensor(CAI(t.ptr, shape, typestr), device=DEVICE)
        if view is not None:
            x = x.view(view)
        out[t.name.decode()] = x.float() if x.dtype != torch.float32 else x.clone()
    L.wc_detach(model, ctypes.byref(err))
    L.wc_close(conn)
    return out


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


def forward(w, pad, cfg, tp, rank, comm):
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or H // nh
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta") or cfg.get("rope_theta", 10000.0)
    moe = cfg["architectures"][0] == "MixtralForCausalLM"
    nh_r, nkv_r = nh // tp, max(1, nkv // tp)
    tok = torch.tensor(TOKENS, device=DEVICE)
    T = len(TOKENS)
    e = w["model.embed_tokens.weight"]
    local = tok - rank * pad["model.embed_tokens.weight"]
    hit = (local >= 0) & (local < e.shape[0])
    x = torch.zeros(T, H, device=DEVICE)
    x[hit] = e[local[hit]]
    comm.all_reduce(x)
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        qkv = h @ w[p + "self_attn.qkv_proj.weight"].T
        q = qkv[:, :nh_r * hd].reshape(T, nh_r, hd)
        k = qkv[:, nh_r * hd:(nh_r + nkv_r) * hd].reshape(T, nkv_r, hd)
        v = qkv[:, (nh_r + nkv_r) * hd:].reshape(T, nkv_r, hd)
        a = attention(rope(q, theta), rope(k, theta), v).reshape(T, -1)
        out = a @ w[p + "self_attn.o_proj.weight"].T
        comm.all_reduce(out)
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
        comm.all_reduce(out)
        x = x + out
    x = rms(x, w["model.norm.weight"], eps)
    head = "lm_head.weight" if "lm_head.weight" in w else "model.embed_tokens.weight"
    part = x @ w[head].T
    # shards differ in rows (the last rank may hold fewer): pad to P, gather
    P = pad[head]
    full = torch.zeros(T, P, device=DEVICE)
    full[:, :part.shape[1]] = part
    parts = [torch.zeros_like(full) for _ in range(tp)]
    comm.all_gather(parts, full)
    # rank r's columns are the tokens [rP, rP + rows): in order, zeros past V
    return torch.cat(parts, -1)[:, :cfg["vocab_size"]]




class ThreadComm:
    """all_reduce / all_gather among n threads of one process (sums in
    rank order, so every rank sees the same result)."""

    def __init__(self, n):
        self.n = n
        self.bar = threading.Barrier(n)
        self.slots = [None] * n
        self.local = threading.local()

    def all_reduce(self, x):
        r = self.local.rank
        self.slots[r] = x.clone()
        self.bar.wait()
        total = self.slots[0].clone()
        for s in self.slots[1:]:
            total += s
        self.bar.wait()
        x.copy_(total)

    def all_gather(self, out, x):
        r = self.local.rank
        self.slots[r] = x.clone()
        self.bar.wait()
        for i in range(self.n):
            out[i].copy_(self.slots[i])
        self.bar.wait()


def run_threads(ranks, pads, cfg):
    """Logits of tp = len(ranks) ranks, each a thread, rank 0's result."""
    comm = ThreadComm(len(ranks))
    out = [None] * len(ranks)
    errs = []

    def one(r):
        comm.local.rank = r
        try:
            with torch.no_grad():
                out[r] = forward(ranks[r], pads[r], cfg, len(ranks), r, comm)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            errs.append(e)
            comm.bar.abort()

    th = [threading.Thread(target=one, args=(r,)) for r in range(len(ranks))]
    for t in th:
        t.start()
    for t in th:
        t.join()
    if errs:
        raise errs[0]
    return out[0]
