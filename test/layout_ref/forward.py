# SPDX-License-Identifier: MIT
"""A tensor-parallel forward pass of a tiny Llama or Mixtral in numpy
(float32), from per-rank tensors as an engine binds them: the fused views
qkv_proj, gate_up_proj and experts.w13_weight / w2_weight, the vocabulary
shards. Column-parallel layers (qkv, gate_up, w13) produce this rank's
heads or intermediate slice; row-parallel layers (o_proj, down_proj, w2)
produce partial sums that are added over the ranks, as an all-reduce
would; the vocab-parallel embedding looks up only this rank's rows (zero
elsewhere) and is summed; the LM head's shards are concatenated.

The same code at tp 1 is the single-GPU model, and it is checked against
transformers' own logits (test/data/layouts/*/logits.npy).

ranks: a list (one per rank) of {name: numpy array of the served dtype's
words} as ref.Tensor.a or daemon.read_rank give them; cfg: config.json.
With ep > 1 every rank holds the whole attention (tp 1) and its block of
experts, whole.
"""
import numpy as np


def f32(words, dtype):
    if dtype == "BF16":
        return (words.astype(np.uint32) << 16).view(np.float32)
    if dtype == "F32":
        return words.view(np.float32)
    if dtype == "F16":
        return words.view(np.float16).astype(np.float32)
    raise ValueError(f"no float view of {dtype}")


def rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps) * w


def rope(x, pos, theta):
    # x [T, heads, hd]: HF's rotate_half convention
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    ang = np.outer(pos, inv)
    cos = np.cos(np.concatenate([ang, ang], -1)).astype(np.float32)[:, None, :]
    sin = np.sin(np.concatenate([ang, ang], -1)).astype(np.float32)[:, None, :]
    h = hd // 2
    rot = np.concatenate([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin


def silu(x):
    return x / (1.0 + np.exp(-x))


def attention(q, k, v):
    # q [T, nq, hd], k/v [T, nk, hd]; each q head uses kv head j // (nq / nk)
    T, nq, hd = q.shape
    g = nq // k.shape[1]
    k = np.repeat(k, g, 1)
    v = np.repeat(v, g, 1)
    s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd)
    s = s + np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", p, v)


def forward(ranks, cfg, tokens, ep=1):
    tp = 1 if ep > 1 else len(ranks)
    H = cfg["hidden_size"]
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or H // nh
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta") or cfg.get("rope_theta", 10000.0)
    moe = cfg["architectures"][0] == "MixtralForCausalLM"
    L = cfg["num_hidden_layers"]
    tokens = np.asarray(tokens)
    T = len(tokens)
    pos = np.arange(T)
    nh_r = nh // tp
    nkv_r = max(1, nkv // tp)

    def w(r, name):
        return ranks[r][name]

    # vocab-parallel embedding: rank r holds rows [rP, rP + rows), P = the
    # padded rows it announces (the rows past its shape are zeros)
    x = np.zeros((T, H), np.float32)
    for r in range(tp):
        e = w(r, "model.embed_tokens.weight")
        local = tokens - r * e["padded_rows"]
        hit = (local >= 0) & (local < e["a"].shape[0])
        x[hit] += e["a"][local[hit]]
    for layer in range(L):
        p = f"model.layers.{layer}."
        h = rms(x, w(0, p + "input_layernorm.weight")["a"], eps)
        out = np.zeros_like(x)
        for r in range(tp):
            qkv = h @ w(r, p + "self_attn.qkv_proj.weight")["a"].T
            q = qkv[:, :nh_r * hd].reshape(T, nh_r, hd)
            k = qkv[:, nh_r * hd:(nh_r + nkv_r) * hd].reshape(T, nkv_r, hd)
            v = qkv[:, (nh_r + nkv_r) * hd:].reshape(T, nkv_r, hd)
            a = attention(rope(q, pos, theta), rope(k, pos, theta), v)
            out += a.reshape(T, nh_r * hd) @ w(r, p + "self_attn.o_proj.weight")["a"].T
        x = x + out
        h = rms(x, w(0, p + "post_attention_layernorm.weight")["a"], eps)
        out = np.zeros_like(x)
        if moe:
            base = p + "block_sparse_moe."
            logits = h @ w(0, base + "gate.weight")["a"].T
            prob = np.exp(logits - logits.max(-1, keepdims=True))
            prob /= prob.sum(-1, keepdims=True)
            k = cfg["num_experts_per_tok"]
            top = np.argsort(-prob, -1, kind="stable")[:, :k]
            wt = np.take_along_axis(prob, top, -1)
            wt /= wt.sum(-1, keepdims=True)
            gate = np.zeros_like(prob)
            np.put_along_axis(gate, top, wt, -1)
            for r in range(len(ranks)):
                w13 = w(r, base + "experts.w13_weight")["a"]
                w2 = w(r, base + "experts.w2_weight")["a"]
                e0 = w(r, base + "experts.w13_weight")["first_expert"]
                i_r = w13.shape[1] // 2
                for j in range(w13.shape[0]):
                    gu = h @ w13[j].T
                    y = (silu(gu[:, :i_r]) * gu[:, i_r:]) @ w2[j].T
                    out += gate[:, e0 + j:e0 + j + 1] * y
        else:
            for r in range(tp):
                gu = h @ w(r, p + "mlp.gate_up_proj.weight")["a"].T
                i_r = gu.shape[1] // 2
                out += (silu(gu[:, :i_r]) * gu[:, i_r:]) @ w(r, p + "mlp.down_proj.weight")["a"].T
        x = x + out
    x = rms(x, w(0, "model.norm.weight")["a"], eps)
    head = "lm_head.weight" if "lm_head.weight" in ranks[0] else "model.embed_tokens.weight"
    parts = [x @ w(r, head)["a"].T for r in range(tp)]
    return np.concatenate(parts, -1)


def from_reference(plans, e0s=None):
    """Per-rank {name: {"a": float32, "padded_rows", "first_expert"}} from
    ref.plan outputs."""
    out = []
    for i, p in enumerate(plans):
        d = {}
        for n, t in p.items():
            try:
                a = f32(t.a, t.dtype)
            except ValueError:
                continue
            d[n] = {"a": a, "padded_rows": t.padded_rows,
                    "first_expert": e0s[i] if e0s else 0}
        out.append(d)
    return out
