# SPDX-License-Identifier: MIT
"""Issue 14's tensor-parallel forward: a tiny GQA Llama (8 heads, 2 KV
heads: replicated at tp 4 and 8) at tp 1, 2, 4, 8 and a tiny Mixtral (4
experts) at tp 1, 2, 4, 8 and ep 2, 4, computed in one process from the
per-rank tensors (test/layout_ref/forward.py: column-parallel qkv_proj /
gate_up_proj / w13, row-parallel o_proj / down_proj / w2 with the partial
sums added, vocab-parallel embedding and LM head), must give the logits of
the tp 1 model, and the tp 1 model those of transformers (logits.npy, made
by test/data/make_layout_models.py: from_pretrained in float32 of the same
bf16 checkpoint).

Tolerance: the weights are the same bf16 numbers on every path and the
arithmetic is float32, so only the order of additions differs: max |diff|
<= 1e-4 x max(1, max |logit|), and under 1/100 of the bf16 rounding of the
model itself (max |transformers bf16 - transformers float32| logits, in
logits_bf16.npy; 4e-2 for these models). Seen: about 1.5e-6.

Two sources of the per-rank tensors: the reference's plan (always), and
real wcd ranks read through libwcache (host backend), once the layouts are
on main (landed.py)."""
import json
import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layout_ref"))

import daemon
import forward
import landed
import models
import ref

CASES = [("llama", tp, 1) for tp in (1, 2, 4, 8)] + \
        [("mixtral", tp, 1) for tp in (1, 2, 4, 8)] + \
        [("mixtral", 1, ep) for ep in (2, 4)]


def expected(name):
    d = os.path.join(models.LAYOUTS, name)
    toks = json.load(open(os.path.join(d, "tokens.json")))["tokens"][0]
    f32 = np.load(os.path.join(d, "logits.npy"))[0]
    bf16 = np.load(os.path.join(d, "logits_bf16.npy"))[0]
    return toks, f32, float(np.abs(bf16 - f32).max())


def check(name, ranks, cfg, tp, ep):
    toks, hf, bf16_gap = expected(name)
    tol = min(1e-4 * max(1.0, float(np.abs(hf).max())), bf16_gap / 100)
    got = forward.forward(ranks, cfg, toks, ep)
    assert got.shape == hf.shape
    err = float(np.abs(got - hf).max())
    assert err <= tol, f"{name} tp {tp} ep {ep}: max |logits - transformers| {err:.3g} > {tol:.3g}"
    print(f"{name} tp {tp} ep {ep}: max |diff| {err:.3g} (tolerance {tol:.3g}, bf16 rounding {bf16_gap:.3g})")


@pytest.mark.parametrize("name,tp,ep", CASES)
def test_forward_from_reference(name, tp, ep):
    ck = models.checkpoint("hf", name)
    plans = ref.plan_all(ck, tp, ep)
    e0 = None
    if ep > 1:
        e0 = [ref.expert_block(ck.c("num_local_experts"), ep, i)[0] for i in range(ep)]
    check(name, forward.from_reference(plans, e0), ck.config, tp, ep)


def served(rs):
    """Per-rank tensors read from the daemons, with padded_rows from the
    manifest and each rank's first expert from the expert names it serves."""
    out = []
    for r, man in zip(rs.ranks, rs.manifests()):
        pad = {t["name"]: t.get("padded_rows") for t in man["tensors"]}
        got = daemon.read_rank(r.device, r.rundir)
        experts = [int(m.group(1)) for n in got for m in [re.search(r"\.experts\.(\d+)\.", n)] if m]
        d = {}
        for n, (dtype, shape, b, _) in got.items():
            if dtype not in ("BF16", "F32", "F16"):
                continue
            words = np.frombuffer(b, dtype={"BF16": "<u2", "F16": "<u2", "F32": "<u4"}[dtype])
            d[n] = {"a": forward.f32(words, dtype).reshape(shape), "padded_rows": pad.get(n),
                    "first_expert": min(experts) if experts else 0}
        out.append(d)
    return out


@pytest.mark.parametrize("name,tp,ep", CASES)
def test_forward_from_wcd(name, tp, ep):
    ck = models.checkpoint("hf", name)
    if tp not in landed.ARCHS.get(ck.arch, ()) or (ep > 1 and not landed.EP) or \
            not (landed.VIEWS and landed.PADDED_ROWS):
        pytest.skip(f"{ck.arch} at tp {tp} ep {ep} with fused views and padded rows is not on main yet")
    if ep > 1:
        args = [["--ep-size", str(ep), "--ep-rank", str(i)] for i in range(ep)]
    else:
        args = [["--tp-size", str(tp), "--tp-rank", str(r)] for r in range(tp)]
    with daemon.Ranks(models.path("hf", name), args) as rs:
        for r in rs.ranks:
            assert r.rc is None, r.log_text()[-2000:]
        check(name, served(rs), ck.config, tp, ep)
