# SPDX-License-Identifier: MIT
"""The reference's own checks, without wcd: its safetensors reader against
the hashes the reference loaders recorded, hand-derived answers for the
rules, every refusal, and coverage (every checkpoint element served as many
times as its rule says, across the ranks of a layout)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layout_ref"))

import models
import ref

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")


def ck_of(name):
    return models.checkpoint("wcgen" if name in models.WCGEN else "hf", name)


def test_reader_matches_reference_loaders():
    """Every tensor of test/data/reference (torch, numpy and transformers
    writers, every dtype) hashes as safetensors' own loaders recorded."""
    base = os.path.join(DATA, "reference")
    seen = 0
    files = {}
    for line in open(os.path.join(base, "hashes.txt")):
        f, name, dtype, shape, h = line.rstrip("\n").split("\t")
        if f not in files:
            files[f] = ref.read_safetensors(os.path.join(base, f))
        t = files[f][name]
        assert t.dtype == dtype, name
        assert t.shape == [int(x) for x in shape.split(",") if x], name
        assert t.hash() == h, f"{f} {name}: {t.hash()} != {h}"
        seen += 1
    assert seen >= 40


def test_hash_is_canonical():
    assert ref.xxh3_128(b"abc") == "06b05ab6733a618578af5f94892f3950"


def test_kv_replication_by_hand():
    """8 heads, 2 KV heads of dim 4: at tp 4 ranks 0, 1 hold KV head 0 and
    ranks 2, 3 KV head 1; q by 2 heads; o_proj by the same columns."""
    ck = ck_of("llama")
    k = ck.tensors["model.layers.0.self_attn.k_proj.weight"].a
    q = ck.tensors["model.layers.0.self_attn.q_proj.weight"].a
    o = ck.tensors["model.layers.0.self_attn.o_proj.weight"].a
    for r in range(4):
        p = ref.plan(ck, 4, r)
        got = p["model.layers.0.self_attn.k_proj.weight"].a
        assert np.array_equal(got, k[(r // 2) * 4:(r // 2) * 4 + 4]), r
        assert np.array_equal(p["model.layers.0.self_attn.q_proj.weight"].a, q[r * 8:r * 8 + 8])
        assert np.array_equal(p["model.layers.0.self_attn.o_proj.weight"].a, o[:, r * 8:r * 8 + 8])
        qkv = p["model.layers.0.self_attn.qkv_proj.weight"]
        assert qkv.shape == [8 + 4 + 4, 32]
    p8 = ref.plan(ck, 8, 7)
    assert np.array_equal(p8["model.layers.0.self_attn.v_proj.weight"].a,
                          ck.tensors["model.layers.0.self_attn.v_proj.weight"].a[4:8])


def test_vocab_padding_by_hand():
    """V 300 pads to 320: tp 2 gives 160 rows a rank, rank 1 holds the real
    rows 160..299 (140) and announces 160; tp 8 gives 40, rank 7 holds 20."""
    ck = ck_of("llama")
    e = ck.tensors["model.embed_tokens.weight"].a
    p = ref.plan(ck, 2, 1)["model.embed_tokens.weight"]
    assert p.shape == [140, 32] and p.padded_rows == 160
    assert np.array_equal(p.a, e[160:300])
    p = ref.plan(ck, 8, 7)["lm_head.weight"]
    assert p.shape == [20, 32] and p.padded_rows == 40
    p = ref.plan(ck, 1, 0)["lm_head.weight"]
    assert p.shape == [300, 32] and p.padded_rows == 320


def test_phi3_fused_checkpoint_by_hand():
    """Phi-3's qkv_proj [48, 32] = q 32 rows, k 8, v 8 on disk: at tp 4
    rank 3 serves [q rows 24..31; k head 1; v head 1]."""
    ck = ck_of("phi3")
    w = ck.tensors["model.layers.1.self_attn.qkv_proj.weight"].a
    got = ref.plan(ck, 4, 3)["model.layers.1.self_attn.qkv_proj.weight"].a
    want = np.concatenate([w[24:32], w[32 + 4:32 + 8], w[40 + 4:40 + 8]])
    assert np.array_equal(got, want)
    gu = ck.tensors["model.layers.0.mlp.gate_up_proj.weight"].a  # [128, 32]
    got = ref.plan(ck, 2, 1)["model.layers.0.mlp.gate_up_proj.weight"].a
    assert np.array_equal(got, np.concatenate([gu[32:64], gu[96:128]]))


def test_moe_fused_by_hand():
    ck = ck_of("mixtral")
    p = ref.plan(ck, 2, 1)
    w13 = p["model.layers.1.block_sparse_moe.experts.w13_weight"]
    w2 = p["model.layers.1.block_sparse_moe.experts.w2_weight"]
    assert w13.shape == [4, 32, 32] and w2.shape == [4, 32, 16]
    t = ck.tensors
    w1 = t["model.layers.1.block_sparse_moe.experts.2.w1.weight"].a
    w3 = t["model.layers.1.block_sparse_moe.experts.2.w3.weight"].a
    assert np.array_equal(w13.a[2], np.concatenate([w1[16:32], w3[16:32]]))
    assert np.array_equal(w2.a[2], t["model.layers.1.block_sparse_moe.experts.2.w2.weight"].a[:, 16:32])


def test_expert_parallel_remainder():
    """vLLM's linear expert map: the first E % ep ranks hold one more."""
    assert [ref.expert_block(6, 4, r) for r in range(4)] == [(0, 2), (2, 2), (4, 1), (5, 1)]
    assert [ref.expert_block(5, 4, r) for r in range(4)] == [(0, 2), (2, 1), (3, 1), (4, 1)]
    assert [ref.expert_block(4, 2, r) for r in range(2)] == [(0, 2), (2, 2)]
    ck = ck_of("qwen3_moe")
    p = ref.plan(ck, 1, 0, 4, 2)
    w13 = p["model.layers.0.mlp.experts.w13_weight"]
    assert w13.shape == [1, 32, 32]
    t = ck.tensors
    assert np.array_equal(w13.a[0], np.concatenate(
        [t["model.layers.0.mlp.experts.4.gate_proj.weight"].a,
         t["model.layers.0.mlp.experts.4.up_proj.weight"].a]))
    assert "model.layers.0.mlp.experts.3.up_proj.weight" not in p


def test_mla_by_hand():
    """q_b_proj by heads of nope + rope (8), kv_b_proj by heads of nope + v
    (8), o_proj by heads of v (4) on dim 1; q_a/kv_a replicated."""
    ck = ck_of("deepseek_v3")
    t = ck.tensors
    p = ref.plan(ck, 4, 1)
    assert np.array_equal(p["model.layers.0.self_attn.q_b_proj.weight"].a,
                          t["model.layers.0.self_attn.q_b_proj.weight"].a[16:32])
    assert np.array_equal(p["model.layers.0.self_attn.o_proj.weight"].a,
                          t["model.layers.0.self_attn.o_proj.weight"].a[:, 8:16])
    assert np.array_equal(p["model.layers.1.self_attn.kv_a_proj_with_mqa.weight"].a,
                          t["model.layers.1.self_attn.kv_a_proj_with_mqa.weight"].a)
    sh = p["model.layers.1.mlp.shared_experts.gate_up_proj.weight"]
    assert sh.shape == [2 * 16 // 4, 32]


@pytest.mark.parametrize("name,tp,why", [
    ("llama", 3, "does not divide by 3"),
    ("llama", 16, "8 heads over tp: 8 does not divide by 16"),
    ("qwen3_moe", 32, "down_proj.weight: 16 over tp"),
    ("deepseek-v3-tiny", 8, "o_proj.weight: columns \\[0, 64\\) are not on 128-blocks"),
    ("qwen2-tiny", 5, "576 padded rows over tp: 576 does not divide by 5"),
])
def test_refusals(name, tp, why):
    with pytest.raises(ref.Refused, match=why):
        ref.plan(ck_of(name), tp, 0)


def test_unknown_architecture():
    ck = ck_of("llama")
    odd = ref.Checkpoint.__new__(ref.Checkpoint)
    odd.__dict__.update(ck.__dict__)
    odd.arch = "FalconForCausalLM"
    assert len(ref.plan(odd, 1, 0)) == len(ck.tensors)
    with pytest.raises(ref.Refused, match="no layout at tp 2"):
        ref.plan(odd, 2, 0)


def expected_count(ck, name, tp, ep):
    """How many ranks hold each element of a checkpoint tensor: derived from
    the tensor's kind alone (not from the plan)."""
    n = name
    ranks = ep if ep > 1 else tp
    nkv = ck.config.get("num_key_value_heads") or ck.config["num_attention_heads"]
    kv_rep = max(1, tp // nkv) if ck.arch not in ref.MLA else 1
    if ".experts." in n and ".shared_experts." not in n:
        return 1  # an expert's elements: split by tp, or on one ep rank
    if n in ("model.embed_tokens.weight", "lm_head.weight"):
        return 1 if ep == 1 else ranks
    if ep > 1:
        return ranks  # tp 1 on every ep rank: all but experts replicated
    if any(s in n for s in (".k_proj.", ".v_proj.")):
        return kv_rep
    if any(s in n for s in (".q_proj.", ".o_proj.", ".q_b_proj.", ".kv_b_proj.",
                            ".gate_proj.", ".up_proj.", ".down_proj.", ".gate_up_proj.")):
        return 1
    if ".qkv_proj." in n:  # Phi-3: per part
        return None
    return ranks


def layout_cases():
    for kind, name in models.ALL:
        for tp in (1, 2, 4, 8):
            yield kind, name, tp, 1
        if "moe" in name or "mixtral" in name or "deepseek" in name:
            for ep in (2, 4):
                yield kind, name, 1, ep


@pytest.mark.parametrize("kind,name,tp,ep", list(layout_cases()))
def test_coverage(kind, name, tp, ep):
    ck = models.checkpoint(kind, name)
    try:
        counts, pads = ref.coverage(ck, tp, ep)
    except ref.Refused as e:
        # the only refused ones: off the FP8 blocks, 4 heads over 8
        assert (name, tp) in (("deepseek-v3-tiny", 8), ("tiny", 8)), e
        return
    assert set(counts) == set(ck.tensors)
    for n, c in counts.items():
        want = expected_count(ck, n, tp, ep)
        if want is None:  # Phi-3's fused qkv: q rows once, k and v replicated
            hd = ck.config.get("head_dim") or ck.config["hidden_size"] // ck.config["num_attention_heads"]
            q = ck.config["num_attention_heads"] * hd
            rep = max(1, tp // ck.config["num_key_value_heads"])
            per_row = np.repeat(c.reshape(ck.tensors[n].a.shape[0], -1), 1, 0)
            assert (per_row[:q] == 1).all() and (per_row[q:] == rep).all(), n
            continue
        assert c.min() == c.max() == want, f"{n}: served {c.min()}..{c.max()} times, want {want}"
    ranks = ep if ep > 1 else tp
    for n, zeros in pads.items():
        V = ck.tensors[n].a.shape[0]
        padded = -(-V // 64) * 64
        assert zeros == (padded - V) * (1 if ep == 1 else ranks), n


@pytest.mark.parametrize("kind,name", models.ALL)
def test_views_are_their_parts(kind, name):
    """Every fused view is its parts' bytes back to back (so a daemon can
    lay the parts out in that order and list the view over them)."""
    ck = models.checkpoint(kind, name)
    tp = 4 if name != "tiny" else 2
    plans = ref.plan_all(ck, tp)
    nviews = 0
    for p in plans:
        for v, parts in ref.view_parts(ck, p).items():
            assert p[v].tobytes() == b"".join(p[x].tobytes() for x in parts), v
            nviews += 1
    assert nviews or name.startswith("phi3")
