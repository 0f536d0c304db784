# SPDX-License-Identifier: MIT
"""wcd against the reference: every rank of every layout the reference
plans (tp 1, 2, 4, 8; ep 2, 4 for MoE) is started on the host backend, and
its manifest must equal the reference's: the same names (checkpoint names
and fused views), dtypes, shapes, padded row counts and XXH3-128 of every
tensor. A layout the reference refuses must be refused by wcd (it exits
before it is ready). Models: the transformers checkpoints of
test/data/layouts (test_layout_daemon_wcgen.py: the wcgen presets)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layout_ref"))

import checks  # noqa: E402
import models  # noqa: E402

CASES = [(k, n) for k, n in models.ALL if k == "hf"]


@pytest.mark.parametrize("kind,name", CASES)
def test_served_equals_reference(kind, name):
    checks.served_equals_reference(kind, name)


@pytest.mark.parametrize("kind,name", CASES)
def test_views_share_bytes_and_pads_are_zero(kind, name):
    checks.views_share_bytes_and_pads_are_zero(kind, name)


def test_compare_catches_wrong_layouts():
    """The comparison is not vacuous: rank 1's manifest against rank 0's
    reference, a changed hash, a dropped view, a wrong padded_rows and an
    extra tensor each fail it."""
    import copy

    import daemon  # noqa: E402
    import ref  # noqa: E402

    ck = models.checkpoint("hf", "llama")
    want = ref.plan_all(ck, 2)
    args = [["--tp-size", "2", "--tp-rank", str(r)] for r in range(2)]
    with daemon.Ranks(models.path("hf", "llama"), args) as rs:
        mans = rs.manifests()
    checks.compare(ck, want[0], mans[0], "rank 0")  # the real one passes
    bad = [mans[1]]
    for n, edit in (("model.layers.0.self_attn.k_proj.weight", lambda t: t.update(xxh3_128="0" * 32)),
                    ("model.embed_tokens.weight", lambda t: t.update(padded_rows=0))):
        m = copy.deepcopy(mans[0])
        edit(next(t for t in m["tensors"] if t["name"] == n))
        bad.append(m)
    m = copy.deepcopy(mans[0])
    m["tensors"] = [t for t in m["tensors"] if ".qkv_proj." not in t["name"]]
    bad.append(m)
    m = copy.deepcopy(mans[0])
    m["tensors"].append(dict(m["tensors"][0], name="model.layers.0.extra.weight"))
    bad.append(m)
    for i, m in enumerate(bad):
        with pytest.raises(AssertionError):
            checks.compare(ck, want[0], m, f"bad {i}")
