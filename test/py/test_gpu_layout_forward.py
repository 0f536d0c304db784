# SPDX-License-Identifier: MIT
"""Issue 14's forward on a GPU (skips without torch and a CUDA device): a
tiny GQA Llama (8 heads, 2 KV heads) at tp 2, 4, 8 and a tiny Mixtral (4
experts) at tp 2, 4, computed in one process on the GPU from the per-rank
tensors real wcd ranks serve (test/layout_ref/torch_forward.py: each rank
a thread, the row-parallel partial sums and the vocab-parallel embedding
added, the LM head's shards gathered), against transformers' model of the
same directory run on the same GPU in float32 in this process.

Two sources: host-backend ranks (all at once), and CUDA-backend ranks on
the one GPU, one after the other (a GPU holds one wcd), each read in
place through its device pointers. Tolerance as in test_layout_forward.py:
max |diff| <= 1e-4 x max(1, max |logit|) and under 1/100 of transformers'
own bf16-vs-float32 difference on these logits."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layout_ref"))

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
transformers = pytest.importorskip("transformers")

import daemon  # noqa: E402
import landed  # noqa: E402
import models  # noqa: E402
import torch_forward as tf  # noqa: E402

TOKENS = [3, 17, 250, 299, 42, 7, 128, 64]
CASES = [("llama", tp) for tp in (2, 4, 8)] + [("mixtral", tp) for tp in (2, 4)]
_hf = {}


def hf_logits(name):
    if name not in _hf:
        d = models.path("hf", name)
        out = []
        for dt in (torch.float32, torch.bfloat16):
            m = transformers.AutoModelForCausalLM.from_pretrained(
                d, dtype=dt, attn_implementation="eager").cuda().eval()
            with torch.no_grad():
                out.append(m(torch.tensor([TOKENS], device="cuda")).logits[0].float())
        _hf[name] = out
    return _hf[name]


def pads_of(rs):
    return [{t["name"]: t.get("padded_rows") or t["shape"][0] for t in man["tensors"]}
            for man in rs.manifests()]


@pytest.mark.parametrize("source", ["host", "cuda"])
@pytest.mark.parametrize("name,tp", CASES)
def test_gpu_forward(name, tp, source):
    ck = models.checkpoint("hf", name)
    if tp not in landed.ARCHS.get(ck.arch, ()) or not (landed.VIEWS and landed.PADDED_ROWS):
        pytest.skip(f"{ck.arch} at tp {tp} with fused views and padded rows is not on main yet")
    path = models.path("hf", name)
    args = [["--tp-size", str(tp), "--tp-rank", str(r)] for r in range(tp)]
    ranks, pads = [], []
    if source == "host":
        with daemon.Ranks(path, args) as rs:
            for r in rs.ranks:
                assert r.rc is None, r.log_text()[-2000:]
            pads = pads_of(rs)
            ranks = [tf.attach(r.device, r.rundir) for r in rs.ranks]
    else:
        for a in args:
            with daemon.Ranks(path, [a], gpu="0") as rs:
                r = rs.ranks[0]
                assert r.rc is None, r.log_text()[-2000:]
                pads += pads_of(rs)
                ranks.append(tf.attach(r.device, r.rundir))
    logits = tf.run_threads(ranks, pads, ck.config)
    ref32, ref16 = hf_logits(name)
    err = (logits - ref32).abs().max().item()
    gap = (ref16 - ref32).abs().max().item()
    tol = min(1e-4 * max(1.0, ref32.abs().max().item()), gap / 100)
    print(f"{name} tp {tp} from {source} ranks: max |logits - transformers float32| {err:.3g}, "
          f"tolerance {tol:.3g}, transformers bf16 vs float32 {gap:.3g}")
    assert err <= tol
