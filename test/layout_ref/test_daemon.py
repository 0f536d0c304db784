# SPDX-License-Identifier: MIT
"""wcd against the reference: every rank of every layout the reference
plans (tp 1, 2, 4, 8; ep 2, 4 for MoE) is started on the host backend, and
its manifest must equal the reference's: the same names (checkpoint names
and fused views), dtypes, shapes, padded row counts and XXH3-128 of every
tensor. A layout the reference refuses must be refused by wcd (it exits
before it is ready). Models: the transformers checkpoints of
test/data/layouts and the wcgen presets."""
import os
import subprocess

import pytest

import daemon
import ref

LAYOUTS = os.path.join(os.path.dirname(__file__), "..", "data", "layouts")
HF = sorted(d for d in os.listdir(LAYOUTS) if os.path.isdir(os.path.join(LAYOUTS, d)))
WCGEN = ["tiny"]

# Architectures whose layouts wcd serves on main, with the tp (and ep) sizes.
LANDED = {
    "LlamaForCausalLM": (1,),
    "Qwen2ForCausalLM": (1,),
    "Qwen3ForCausalLM": (1,),
    "MistralForCausalLM": (1,),
}
# The manifest announces padded_rows on vocabulary tensors.
REQUIRE_PADDED_ROWS = False


@pytest.fixture(scope="session")
def wcgen_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("wcgen")


def model_path(kind, name, wcgen_dir):
    if kind == "hf":
        return os.path.abspath(os.path.join(LAYOUTS, name))
    out = os.path.join(str(wcgen_dir), name)
    if not os.path.exists(os.path.join(out, "config.json")):
        subprocess.run([os.path.join(daemon.BIN, "wcgen"), name, "--out", out],
                       check=True, capture_output=True)
    return out


def cases():
    for kind, names in (("hf", HF), ("wcgen", WCGEN)):
        for name in names:
            yield kind, name


_cks = {}


def checkpoint(path):
    if path not in _cks:
        _cks[path] = ref.Checkpoint(path)
    return _cks[path]


def compare(ck, want, man, where):
    got = {t["name"]: t for t in man["tensors"]}
    problems = []
    for n in sorted(set(got) - set(want)):
        problems.append(f"{n}: served, not in the reference")
    for n in sorted(set(want) - set(got)):
        if not ref.is_view(ck, n):
            problems.append(f"{n}: a checkpoint tensor the reference serves is missing")
    for n in sorted(set(got) & set(want)):
        w, g = want[n], got[n]
        if g["dtype"] != w.dtype or g["shape"] != w.shape:
            problems.append(f"{n}: served {g['dtype']} {g['shape']}, reference {w.dtype} {w.shape}")
        elif g["xxh3_128"] != w.hash():
            problems.append(f"{n}: served hash {g['xxh3_128']}, reference {w.hash()}")
        if REQUIRE_PADDED_ROWS or "padded_rows" in g:
            if g.get("padded_rows") != w.padded_rows and \
                    not (w.padded_rows is None and not g.get("padded_rows")):
                problems.append(f"{n}: padded_rows {g.get('padded_rows')}, reference {w.padded_rows}")
    assert not problems, f"{where}:\n  " + "\n  ".join(problems[:40])


def run_layout(path, tp, ep):
    ck = checkpoint(path)
    if ep > 1:
        args = [["--ep-size", str(ep), "--ep-rank", str(i)] for i in range(ep)]
    else:
        args = [["--tp-size", str(tp), "--tp-rank", str(r)] for r in range(tp)]
    try:
        want = ref.plan_all(ck, tp, ep)
        refused = None
    except ref.Refused as e:
        want, refused = None, str(e)
    with daemon.Ranks(path, args) as rs:
        if refused:
            for r in rs.ranks:
                assert r.rc not in (None, 0), \
                    f"{path} tp {tp} ep {ep}: the reference refuses ({refused}) but {r.device} serves"
            return
        for r in rs.ranks:
            assert r.rc is None, f"{path} tp {tp} ep {ep}: wcd exited {r.rc}:\n{r.log_text()[-2000:]}"
        for i, man in enumerate(rs.manifests()):
            compare(ck, want[i], man, f"{os.path.basename(path)} tp {tp} ep {ep} rank {i}")


@pytest.mark.parametrize("kind,name", list(cases()))
def test_served_equals_reference(kind, name, wcgen_dir):
    path = model_path(kind, name, wcgen_dir)
    ck = checkpoint(path)
    sizes = LANDED.get(ck.arch)
    if not sizes:
        pytest.skip(f"{ck.arch}: its layouts have not landed")
    ran = 0
    for tp, ep in ref.layouts(ck):
        if (tp if ep == 1 else ep) in sizes:
            run_layout(path, tp, ep)
            ran += 1
    assert ran
