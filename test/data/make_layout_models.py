#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the tiny checkpoints of test/data/layouts/ with transformers'
save_pretrained, one per architecture the engine layouts cover, and the
logits of each as transformers computes them, for test/layout_ref/.

Needs torch, safetensors and transformers (the GPU machine has them; the
build machine does not). Run from the repository root:

    python3 test/data/make_layout_models.py test/data/layouts

Every model is random (fixed seed), bf16, with shapes small enough to keep
the whole directory well under 1 MB, yet chosen to exercise the rules:
8 query heads of dim 4 and 2 KV heads (KV heads replicated at tp 4 and 8),
a vocabulary of 300 (padded to 320: tp 8 pads its last rank), 6 experts for
Qwen3-MoE and 5 for DeepSeek-V3 (ep 4 leaves a remainder). Weights are
re-drawn after init at scales that give logits of order 1, so that the
tensor-parallel forward is compared on numbers that vary.

transformers 5 keeps MoE experts fused in memory (mlp.experts.gate_up_proj
[E, 2I, H]); where its save_pretrained writes that fused form instead of the
hub's per-expert tensors, this script splits it back into the hub names
(block_sparse_moe.experts.N.w1/w2/w3 for Mixtral, mlp.experts.N.gate_proj/
up_proj/down_proj otherwise) and checks that from_pretrained of the result
gives the same logits. Each model directory gets logits.npy: float32 logits
of from_pretrained(dir, float32) on the token ids in tokens.json (bf16
weights upcast, eager attention), and logits_bf16.npy: the same in bf16.
"""
import json
import os
import struct
import sys
import traceback

import numpy as np
import torch
import safetensors.torch
import transformers

TOKENS = [[3, 17, 250, 299, 42, 7, 128, 64]]
COMMON = dict(vocab_size=300, hidden_size=32, num_hidden_layers=2,
              num_attention_heads=8, num_key_value_heads=2, head_dim=4,
              max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
              eos_token_id=2)


def configs():
    T = transformers
    c = COMMON
    return {
        "llama": lambda: T.LlamaConfig(**c, intermediate_size=64,
                                       tie_word_embeddings=False),
        "qwen2": lambda: T.Qwen2Config(**c, intermediate_size=64,
                                       tie_word_embeddings=False),
        "qwen3": lambda: T.Qwen3Config(**c, intermediate_size=64,
                                       tie_word_embeddings=True),
        "mixtral": lambda: T.MixtralConfig(**c, intermediate_size=32,
                                           num_local_experts=4,
                                           num_experts_per_tok=2,
                                           tie_word_embeddings=False),
        "qwen3_moe": lambda: T.Qwen3MoeConfig(**c, intermediate_size=64,
                                              moe_intermediate_size=16,
                                              num_experts=6,
                                              num_experts_per_tok=2,
                                              decoder_sparse_step=1,
                                              mlp_only_layers=[],
                                              norm_topk_prob=True,
                                              tie_word_embeddings=False),
        "deepseek_v3": lambda: T.DeepseekV3Config(
            **{k: v for k, v in c.items()
               if k not in ("head_dim", "num_key_value_heads")},
            num_key_value_heads=8,  # MLA: every head has its own k and v
            intermediate_size=64, moe_intermediate_size=16,
            n_routed_experts=5, n_shared_experts=1, num_experts_per_tok=2,
            n_group=1, topk_group=1, first_k_dense_replace=1,
            q_lora_rank=16, kv_lora_rank=16, qk_nope_head_dim=4,
            qk_rope_head_dim=4, v_head_dim=4, tie_word_embeddings=False),
        "gemma2": lambda: T.Gemma2Config(**c, intermediate_size=64,
                                         query_pre_attn_scalar=4,
                                         sliding_window=4),
        "gemma3": lambda: T.Gemma3TextConfig(**c, intermediate_size=64,
                                             query_pre_attn_scalar=4,
                                             sliding_window=4),
        "phi3": lambda: T.Phi3Config(**c, intermediate_size=64,
                                     tie_word_embeddings=False),
    }


def redraw(model, gen):
    """Weights of order 1/sqrt(fan_in), norms near their identity."""
    zero_centred = model.config.model_type.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.ndim >= 2:
                p.copy_(r / (p.shape[-1] ** 0.5) if "embed" not in name else r)
            elif "norm" in name or "layernorm" in name:
                p.copy_(0.1 * r + (0.0 if zero_centred else 1.0))
            else:
                p.copy_(0.1 * r)  # biases, score correction


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def saved_tensors(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(safetensors.torch.load_file(os.path.join(d, f)))
    return out


def unfuse(model_type, sd, cfg):
    """The hub's per-expert names from transformers 5's fused experts."""
    out = {}
    mixtral = model_type == "mixtral"
    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            pre = k[: -len("mlp.experts.gate_up_proj")]
            two_i = v.shape[1] if v.shape[2] == cfg.hidden_size else v.shape[2]
            if v.shape[2] != cfg.hidden_size:
                v = v.transpose(1, 2)
            i = two_i // 2
            for e in range(v.shape[0]):
                if mixtral:
                    base = f"{pre}block_sparse_moe.experts.{e}."
                    out[base + "w1.weight"] = v[e, :i].contiguous()
                    out[base + "w3.weight"] = v[e, i:].contiguous()
                else:
                    base = f"{pre}mlp.experts.{e}."
                    out[base + "gate_proj.weight"] = v[e, :i].contiguous()
                    out[base + "up_proj.weight"] = v[e, i:].contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            pre = k[: -len("mlp.experts.down_proj")]
            if v.shape[1] != cfg.hidden_size:
                v = v.transpose(1, 2)
            for e in range(v.shape[0]):
                name = (f"{pre}block_sparse_moe.experts.{e}.w2.weight" if mixtral
                        else f"{pre}mlp.experts.{e}.down_proj.weight")
                out[name] = v[e].contiguous()
        elif mixtral and ".mlp.gate." in k:
            out[k.replace(".mlp.gate.", ".block_sparse_moe.gate.")] = v
        else:
            out[k] = v
    return out


def logits_of(d, dtype):
    m = transformers.AutoModelForCausalLM.from_pretrained(
        d, dtype=dtype, attn_implementation="eager")
    m.eval()
    with torch.no_grad():
        return m(torch.tensor(TOKENS)).logits.float().numpy()


def make(name, mk, out):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.unlink(os.path.join(d, f))
    cfg = mk()
    gen = torch.Generator().manual_seed(14)
    torch.manual_seed(14)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    redraw(model, gen)
    model = model.to(torch.bfloat16)
    model.save_pretrained(d)
    sd = saved_tensors(d)
    fused = any(k.endswith(("experts.gate_up_proj", "experts.down_proj")) for k in sd)
    note = "save_pretrained"
    if fused:
        hub = unfuse(cfg.model_type, sd, cfg)
        for f in os.listdir(d):
            if f.endswith(".safetensors") or f.endswith(".index.json"):
                os.unlink(os.path.join(d, f))
        safetensors.torch.save_file(hub, os.path.join(d, "model.safetensors"),
                                    metadata={"format": "pt"})
        note = "save_pretrained, experts split back to the hub names"
    for f in ("generation_config.json",):
        if os.path.exists(os.path.join(d, f)):
            os.unlink(os.path.join(d, f))
    # the in-memory model and the files on disk must agree
    model.eval()
    with torch.no_grad():
        model.config._attn_implementation = "eager"
        mem = model.float()(torch.tensor(TOKENS)).logits.float().numpy()
    l32 = logits_of(d, torch.float32)
    err = float(np.abs(l32 - mem).max())
    if err > 1e-3 * max(1.0, float(np.abs(mem).max())):
        raise RuntimeError(f"{name}: from_pretrained logits differ from the "
                           f"saved model's by {err}")
    np.save(os.path.join(d, "logits.npy"), l32)
    np.save(os.path.join(d, "logits_bf16.npy"), logits_of(d, torch.bfloat16))
    with open(os.path.join(d, "tokens.json"), "w") as f:
        json.dump({"tokens": TOKENS, "written_by": note,
                   "logits": "float32, eager attention"}, f)
    names = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            for k, v in header(os.path.join(d, f)).items():
                if k != "__metadata__":
                    names[k] = (v["dtype"], v["shape"])
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"== {name}: {len(names)} tensors, {size} bytes, {note}, "
          f"logits std {l32.std():.3f}, reload err {err:.2e}")
    for k in sorted(names):
        print(f"   {k} {names[k][0]} {names[k][1]}")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "test/data/layouts"
    only = sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    failed = []
    for name, mk in configs().items():
        if only and name not in only:
            continue
        try:
            make(name, mk, out)
        except Exception:  # noqa: BLE001 - report, go on with the others
            traceback.print_exc()
            failed.append(name)
    with open(os.path.join(out, "versions.txt"), "w") as f:
        f.write(f"torch {torch.__version__}\ntransformers {transformers.__version__}\n"
                f"safetensors {safetensors.__version__}\nnumpy {np.__version__}\n")
    total = sum(os.path.getsize(os.path.join(dp, f))
                for dp, _, fs in os.walk(out) for f in fs)
    print(f"wrote {out}: {total} bytes; failed: {failed or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
