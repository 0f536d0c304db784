# SPDX-License-Identifier: MIT
"""The lazy Model: an attach parses nothing of the C table in Python, a
name asked for is looked up in libwcache's index, and load_into makes only
the tensors the module binds (an engine that binds DeepSeek-V3's stacked
expert views touches a few hundred of a rank's 45,633). The tensors made
are counted twice: by Model.made, and independently by wrapping torch's
as_strided and unbind (how every tensors() view is made), so that the
count does not rest on the code it checks. Model: wcgen deepseek-v3-shape
(the real model's 45,395 names, tiny dimensions; headers only), served
with the DeepSeek-V3 layout's views (fused_qkv_a_proj, shared and dense
gate_up_proj, the stacked w13_weight/w2_weight per layer): 45,633 tensors,
one daemon for the file."""
import os
import re

import pytest

from conftest import Daemon, wcgen

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ds3")
    model = wcgen(tmp / "model", "deepseek-v3-shape", "--headers-only")
    d = Daemon(tmp, model, "lazy-%d" % os.getpid())
    yield d
    d.kill()


@pytest.fixture
def views_made(monkeypatch):
    """How many tensor views torch made since (as_strided: one each; an
    unbind of k: k - 1 more, the run's view split)."""
    n = [0]
    strided, unbind = torch.Tensor.as_strided, torch.Tensor.unbind

    def as_strided(self, *a, **k):
        n[0] += 1
        return strided(self, *a, **k)

    def unbind_(self, *a, **k):
        out = unbind(self, *a, **k)
        n[0] += len(out) - 1
        return out
    monkeypatch.setattr(torch.Tensor, "as_strided", as_strided)
    monkeypatch.setattr(torch.Tensor, "unbind", unbind_)
    return n


def module_of(specs):
    """An nn.Module with a meta Parameter of each (name: (shape, dtype))."""
    root = torch.nn.Module()
    for name, (shape, dtype) in specs.items():
        *path, leaf = name.split(".")
        mod = root
        for p in path:
            if p not in mod._modules:
                mod.add_module(p, torch.nn.Module())
            mod = mod._modules[p]
        mod.register_parameter(leaf, torch.nn.Parameter(
            torch.empty(shape, dtype=dtype, device="meta"), requires_grad=False))
    return root


def engine_specs(m, drop=()):
    """What a vLLM-style engine binds: everything but the per-expert
    checkpoint names (their bytes lie inside the stacked views)."""
    return {t.name: (tuple(t.shape), getattr(torch, {"BF16": "bfloat16", "F32": "float32"}[t.dtype]))
            for t in m.manifest if not re.search(r"\.experts\.\d+\.", t.name) and t.name not in drop}


def test_attach_reads_no_table(served):
    with served.connect() as c:
        m = c.attach(framework="torch")
        assert m._tab is None and m.made == 0, "the attach parsed the table or made tensors"
        name = "model.layers.3.mlp.experts.w13_weight"
        assert name in m and "model.layers.3.mlp.experts.nope" not in m
        assert "model.norm.weight\0x" not in m and 7 not in m
        t = m[name]
        assert m.made == 1 and m._tab is None
        assert t.data_ptr() == m.tensors(names=[name])[name].data_ptr()
        with pytest.raises(KeyError, match=r"serves no tensor named 'nope' \(45633 tensors, e.g. "):
            m["nope"]
        with pytest.raises(KeyError, match="nope"):
            m.tensors(names=["model.norm.weight", "nope"])
        # one name as a str is not its characters (KeyError for 'm')
        with pytest.raises(TypeError, match=r"takes a list of served names.*pass \['model.norm.weight'\]"):
            m.tensors(names="model.norm.weight")
        assert m._tab is None, "a lookup parsed the whole table"
        assert len(m) == len(m.manifest) == len(list(m))


def test_load_into_makes_only_what_it_binds(served, views_made):
    import wcache.torch
    with served.connect() as c:
        m = c.attach(framework="torch")
        specs = engine_specs(m)
        assert "model.layers.1.mlp.experts.w13_weight" not in specs   # layer 1 is dense
        assert "model.layers.3.mlp.experts.w13_weight" in specs and len(specs) < 1100 < 45000 < len(m)
        m2 = c.attach(framework="torch")   # a Model of its own: nothing parsed
        views_made[0] = 0
        b = wcache.torch.load_into(module_of(specs), m2)
        assert sorted(b.bound) == sorted(specs) and not b.missing and not b.unexpected
        assert views_made[0] == len(specs), "torch made %d views to bind %d" % (views_made[0], len(specs))
        assert m2.made == len(specs), "made %d tensors to bind %d" % (m2.made, len(specs))
        assert m2._tab is None, "load_into parsed the whole table"


@pytest.mark.parametrize("drop", [(), ("model.layers.3.mlp.experts.w2_weight",),
                                  ("model.layers.0.self_attn.fused_qkv_a_proj.weight",
                                   "model.layers.0.self_attn.q_a_proj.weight"),
                                  ("lm_head.weight", "model.embed_tokens.weight")])
def test_left_over_as_the_tensors_say(served, drop):
    """unexpected (served names not bound, nor inside bound bytes) from the
    manifest's pointers equals what the tensors' data_ptr ranges give (a
    plain dict: the path of any mapping)."""
    import wcache.torch
    with served.connect() as c:
        m = c.attach(framework="torch")
        specs = engine_specs(m, drop)
        lazy = wcache.torch.load_into(module_of(specs), m, strict=False)
        eager = wcache.torch.load_into(module_of(specs), dict(m.tensors()), strict=False)
        assert lazy == eager
        if drop[:1] == ("model.layers.3.mlp.experts.w2_weight",):
            assert len(lazy.unexpected) == 257 and all(
                n.startswith("model.layers.3.mlp.experts.") and n.endswith(("down_proj.weight", "w2_weight"))
                for n in lazy.unexpected), lazy.unexpected[:4]
        if "lm_head.weight" in drop:
            assert "lm_head.weight" in lazy.unexpected
        with pytest.raises(wcache.torch.LoadError, match="served tensor") if lazy.unexpected else _nothing():
            wcache.torch.load_into(module_of(specs), m)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_tensors_still_all_with_runs(served, views_made):
    """tensors() makes every entry, runs of one weight across layers and
    experts together (one as_strided and an unbind a run), the same views
    as tensors(names=...) makes one by one."""
    with served.connect() as c:
        m = c.attach(framework="torch")
        views_made[0] = 0
        every = m.tensors()
        assert list(every) == list(m) and m.made == len(m) == views_made[0]
        runs = [op for op in m._ops if op[4] > 1]
        assert runs and len(m._ops) < len(m) / 100, "no runs: %d ops for %d tensors" % (len(m._ops), len(m))
        some = list(every)[::7]
        one = m.tensors(names=some)
        assert m.made == len(m) + len(some)
        for n in some:
            a, b = every[n], one[n]
            assert (a.data_ptr(), a.shape, a.stride(), a.dtype) == (b.data_ptr(), b.shape, b.stride(), b.dtype), n
        m.detach()
        with pytest.raises(Exception, match="detached"):
            m.tensors(names=some)


def test_views_of_bases_that_are_no_views(served):
    """Every view tensors() (of all, by runs, and by name) and load_into
    make is a view of a base that is itself no view: a dtype view of the
    pool's bytes is detached first (_core._unchained), because torch 2.x
    composes a dtype view's replay function into every view made of it
    (half again the cost of each of the 45k views on the H200). The base
    still shares the pool's storage, so the lease lives while a view does
    (test_py_life.py)."""
    with served.connect() as c:
        m = c.attach(framework="torch")
        every = m.tensors()
        some = list(every)[::97]
        one = m.tensors(names=some)
        for name in some:
            for t in (every[name], one[name]):
                assert t._base is not None and not t._base._is_view(), name
                assert t._base.dtype == t.dtype, name
        m.detach()


def test_tensors_leave_the_collector_as_it_was(served):
    """tensors() pauses the cyclic collector while it makes the views (45k
    objects, no cycle) and leaves it as it found it: on, or off."""
    import gc
    with served.connect() as c:
        m = c.attach(framework="torch")
        assert gc.isenabled()
        d = m.tensors()
        assert gc.isenabled() and list(d) == list(m)
        gc.disable()
        try:
            d = m.tensors(names=["model.norm.weight"])
            assert not gc.isenabled() and list(d) == ["model.norm.weight"]
        finally:
            gc.enable()
        with pytest.raises(KeyError):
            m.tensors(names=["nope"])
        assert gc.isenabled()


@pytest.mark.parametrize("which", ["checkpoint names", "all but every 97th"])
def test_most_of_the_table_in_runs(served, views_made, monkeypatch, which):
    """tensors(names) of most of the table (an HF-style engine binds the
    checkpoint names, no view) makes the plan's runs batched: each view as
    tensors() of all makes it, in far fewer as_strided calls than views; a
    run asked for in part (more than half) is made whole, the rest dropped
    and counted in made."""
    calls = [0]
    strided = torch.Tensor.as_strided

    def count(self, *a, **k):
        calls[0] += 1
        return strided(self, *a, **k)
    with served.connect() as c:
        m = c.attach(framework="torch")
        every = m.tensors()
        if which == "checkpoint names":
            names = [t.name for t in m.manifest if not t.flags & 0x2]
        else:
            names = [n for j, n in enumerate(every) if j % 97 != 5]
        monkeypatch.setattr(torch.Tensor, "as_strided", count)
        views_made[0] = 0
        made = m.made
        some = m.tensors(names=iter(names))
        assert list(some) == names and m.made - made == views_made[0]
        if which == "checkpoint names":
            assert views_made[0] == len(names) == 45395
        else:
            assert len(names) <= views_made[0] <= len(every)
        assert calls[0] < len(names) / 100, "%d as_strided for %d views" % (calls[0], len(names))
        for n in names:
            a, b = every[n], some[n]
            assert (a.data_ptr(), a.shape, a.stride(), a.dtype) == (b.data_ptr(), b.shape, b.stride(), b.dtype), n
