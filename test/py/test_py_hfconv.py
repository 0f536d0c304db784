# SPDX-License-Identifier: MIT
"""load_into of a transformers-5-style MoE module (fused experts:
experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I], Mixtral's
block_sparse_moe. renamed mlp.) against a real wcd (host backend) serving
the checkpoints transformers wrote (test/data/layouts): bound through the
conversion rules the module's transformers gives, to the daemon's stacked
views, byte for byte the checkpoint's pieces; rules that ask for another
layout are refused. No transformers here: a stand-in package gives the two
functions and five classes wcache/_hfconv.py reads (its rules are data in
the shape transformers 5.17's conversion_mapping.py has them: Mixtral's
w1/w3 and Qwen2-MoE's gate_proj/up_proj merged on dim 0 and concatenated
on dim 1). The GPU test (test_gpu_archs.py) runs the real transformers."""
import os
import re
import sys
import types

import pytest

from conftest import WC_TOP, safetensors_files

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import wcache  # noqa: E402
import wcache.torch  # noqa: E402

LAYOUTS = os.path.join(WC_TOP, "test", "data", "layouts")


# -- the stand-in: transformers' conversion API, as data ---------------------
class Op:
    def __init__(self, dim=0):
        self.dim = dim

    def __repr__(self):
        return "%s(dim=%d)" % (type(self).__name__, self.dim)


class MergeModulelist(Op):
    pass


class Concatenate(Op):
    num_shards_attribute = None


class Transpose(Op):
    pass


def _rx(p):
    return re.escape(p).replace(r"\*", r"\d+")


class WeightTransform:
    def __init__(self, source_patterns, target_patterns):
        self.source_patterns = [source_patterns] if isinstance(source_patterns, str) else source_patterns
        self.target_patterns = [target_patterns] if isinstance(target_patterns, str) else target_patterns

    def rename_source_key(self, key):
        for i, p in enumerate(self.source_patterns):
            m = re.search(_rx(p), key)
            if m:
                return key[:m.start()] + self.target_patterns[0] + key[m.end():], p
        return key, None


class WeightRenaming(WeightTransform):
    pass


class WeightConverter(WeightTransform):
    def __init__(self, source_patterns, target_patterns, operations):
        super().__init__(source_patterns, target_patterns)
        self.operations = operations

    def rename_source_key(self, key):
        for p in self.source_patterns:
            m = re.search(_rx(p), key)
            if m:
                return key[:m.start()] + self.target_patterns[0] + key[m.end():], p
        return key, None


def rename_source_key(key, renamings, converters, base_model_prefix=None, meta_state_dict=None):
    for r in renamings:
        key, _ = r.rename_source_key(key)
    for c in converters:
        key, pat = c.rename_source_key(key)
        if pat is not None:
            return key, pat
    return key, None


def dot_natural_key(s):
    return [(0, int(x)) if x.isdigit() else (1, x) for x in s.split(".")]


def experts_rule(gate, up, down, ops=None):
    return [
        WeightConverter([".experts.*.%s.weight" % gate, ".experts.*.%s.weight" % up],
                        ".experts.gate_up_proj", ops or [MergeModulelist(0), Concatenate(1)]),
        WeightConverter([".experts.*.%s.weight" % down], ".experts.down_proj", [MergeModulelist(0)]),
    ]


RULES = {
    "mixtral": [WeightRenaming(".block_sparse_moe.", ".mlp.")] + experts_rule("w1", "w3", "w2"),
    "qwen3_moe": experts_rule("gate_proj", "up_proj", "down_proj"),
    "deepseek_v3": experts_rule("gate_proj", "up_proj", "down_proj"),
}


@pytest.fixture
def standin(monkeypatch):
    """transformers.conversion_mapping and .core_model_loading in
    sys.modules; rules[model_type] is what get_model_conversion_mapping
    returns."""
    rules = dict(RULES)
    tf = types.ModuleType("transformers")
    cm = types.ModuleType("transformers.conversion_mapping")
    cl = types.ModuleType("transformers.core_model_loading")
    cm.get_model_conversion_mapping = lambda model, **kw: list(rules.get(model.config.model_type, []))
    for k, v in dict(WeightRenaming=WeightRenaming, WeightConverter=WeightConverter,
                     MergeModulelist=MergeModulelist, Concatenate=Concatenate, Transpose=Transpose,
                     rename_source_key=rename_source_key, dot_natural_key=dot_natural_key).items():
        setattr(cl, k, v)
    tf.conversion_mapping, tf.core_model_loading = cm, cl
    for name, mod in (("transformers", tf), ("transformers.conversion_mapping", cm),
                      ("transformers.core_model_loading", cl)):
        monkeypatch.setitem(sys.modules, name, mod)
    return rules


# -- a module with transformers 5's names and shapes, on meta ---------------
def meta(*shape):
    return torch.nn.Parameter(torch.empty(*shape, device="meta", dtype=torch.bfloat16),
                              requires_grad=False)


def module_like_transformers5(model_type, files):
    """Every checkpoint name of files, but the experts fused as
    transformers 5 holds them (and renamed as its rules say)."""
    root = torch.nn.Module()
    root.config = types.SimpleNamespace(model_type=model_type)
    root.base_model_prefix = "model"
    experts = {}
    for name, (dt, shape, _) in files.items():
        m = re.match(r"(model\.layers\.\d+)\.(block_sparse_moe|mlp)\.experts\.(\d+)\.(\w+)\.weight$", name)
        if m:
            experts.setdefault(m.group(1), {}).setdefault(m.group(4), {})[int(m.group(3))] = shape
            continue
        if model_type == "mixtral":
            name = name.replace(".block_sparse_moe.", ".mlp.")
        put(root, name, meta(*shape))
    for layer, parts in experts.items():
        gate = parts.get("w1") or parts.get("gate_proj")
        down = parts.get("w2") or parts.get("down_proj")
        n = len(gate)
        i, h = gate[0]
        put(root, layer + ".mlp.experts.gate_up_proj", meta(n, 2 * i, h))
        put(root, layer + ".mlp.experts.down_proj", meta(n, *down[0]))
    return root


def put(root, name, p):
    *path, leaf = name.split(".")
    mod = root
    for k in path:
        if not hasattr(mod, k) or not isinstance(getattr(mod, k), torch.nn.Module):
            mod.add_module(k, torch.nn.Module())
        mod = getattr(mod, k)
    mod.register_parameter(leaf, p)


def as_bytes(t):
    return t.contiguous().view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("arch", ["mixtral", "qwen3_moe", "deepseek_v3"])
def test_fused_experts_bind_to_the_stacked_views(arch, standin, daemons):
    d = daemons(os.path.join(LAYOUTS, arch), arch[:3])
    files = safetensors_files(os.path.join(LAYOUTS, arch))
    served = d.connect().attach(model_dir=os.path.join(LAYOUTS, arch), framework="torch")
    m = module_like_transformers5(arch, files)
    bound = wcache.torch.load_into(m, served)
    assert bound.missing == [] and bound.unexpected == [], bound
    sd = dict(m.named_parameters())
    fused = [n for n in sd if n.endswith("experts.gate_up_proj")]
    assert fused, "the module has no fused experts"
    gate, up, down = ("w1", "w3", "w2") if arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    src = "block_sparse_moe" if arch == "mixtral" else "mlp"
    for n in fused:
        layer = n[:-len(".mlp.experts.gate_up_proj")]
        gu, dn = sd[n], sd[layer + ".mlp.experts.down_proj"]
        i = gu.shape[1] // 2
        for e in range(gu.shape[0]):
            want = [files["%s.%s.experts.%d.%s.weight" % (layer, src, e, w)][2] for w in (gate, up, down)]
            assert as_bytes(gu[e, :i]) == want[0] and as_bytes(gu[e, i:]) == want[1], (n, e)
            assert as_bytes(dn[e]) == want[2], (n, e)
        # no copy: the fused parameter is the served stack
        assert gu.data_ptr() == served["%s.%s.experts.w13_weight" % (layer, src)].data_ptr()
    if arch == "mixtral":   # renamed: the router
        assert sd["model.layers.0.mlp.gate.weight"].data_ptr() == \
            served["model.layers.0.block_sparse_moe.gate.weight"].data_ptr()


def refused(m, served, *words):
    before = {n: p.device.type for n, p in m.named_parameters()}
    with pytest.raises(wcache.torch.LoadError) as e:
        wcache.torch.load_into(m, served)
    for w in words:
        assert w in str(e.value), str(e.value)
    assert {n: p.device.type for n, p in m.named_parameters()} == before, "a LoadError bound something"
    return str(e.value)


@pytest.mark.parametrize("arch", ["mixtral", "qwen3_moe"])
def test_other_fused_layouts_are_refused(arch, standin, daemons):
    """gate and up swapped in the rule (the bytes would be a view, in the
    wrong order), a transpose in the rule, the parameter transposed."""
    d = daemons(os.path.join(LAYOUTS, arch), arch[:3])
    files = safetensors_files(os.path.join(LAYOUTS, arch))
    served = d.connect().attach(model_dir=os.path.join(LAYOUTS, arch), framework="torch")
    names = ("w1", "w3", "w2") if arch == "mixtral" else ("gate_proj", "up_proj", "down_proj")
    rename = [r for r in RULES[arch] if type(r) is WeightRenaming]

    standin[arch] = rename + experts_rule(names[1], names[0], names[2])
    msg = refused(module_like_transformers5(arch, files), served, "gate_up_proj", "right after")
    print(msg[:300])

    standin[arch] = rename + experts_rule(*names, ops=[MergeModulelist(0), Concatenate(1), Transpose(1)])
    refused(module_like_transformers5(arch, files), served, "gate_up_proj", "Transpose")

    # the parameter transposed: a shape that differs (in this Qwen3-MoE
    # 2I == H, where only the rule can tell: the case above)
    standin[arch] = RULES[arch]
    m = module_like_transformers5(arch, files)
    g = getattr(m.model.layers, "0").mlp.experts
    e, rows, cols = g.gate_up_proj.shape
    if rows != cols:
        g.gate_up_proj = meta(e, cols, rows)
        refused(m, served, "gate_up_proj", "do not fit")


def test_without_rules_names_stay_missing(standin, daemons):
    """A module that is no transformers model (no config) is bound by name
    only: the fused names are missing, as before."""
    arch = "qwen3_moe"
    d = daemons(os.path.join(LAYOUTS, arch), arch[:3])
    files = safetensors_files(os.path.join(LAYOUTS, arch))
    served = d.connect().attach(model_dir=os.path.join(LAYOUTS, arch), framework="torch")
    m = module_like_transformers5(arch, files)
    del m.config
    refused(m, served, "have no served tensor", "experts.gate_up_proj")


def test_float32_kept_where_transformers_keeps_it(standin, daemons, tmp_path):
    """DeepSeek-V3's e_score_correction_bias is float32 in the checkpoint
    (wcgen writes it so) and transformers keeps it float32
    (_keep_in_fp32_modules_strict) where from_config under bfloat16 made
    it bfloat16: bound as served, float32, no copy. Another name whose
    dtype differs is still refused."""
    from conftest import wcgen
    model_dir = wcgen(tmp_path / "ds", "deepseek-v3-tiny", "--quant", "none")
    d = daemons(model_dir, "ds3f")
    files = safetensors_files(model_dir)
    served = d.connect().attach(model_dir=model_dir, framework="torch")
    name = "model.layers.1.mlp.gate.e_score_correction_bias"
    assert files[name][0] == "F32"
    m = module_like_transformers5("deepseek_v3", files)
    assert dict(m.named_parameters())[name].dtype == torch.bfloat16
    refused(m, served, "do not fit", name)
    m._keep_in_fp32_modules_strict = ["e_score_correction_bias"]
    bound = wcache.torch.load_into(m, served)
    assert bound.missing == [] and bound.unexpected == []
    p = dict(m.named_parameters())[name]
    assert p.dtype == torch.float32 and p.data_ptr() == served[name].data_ptr()


def test_tied_name_beside_a_served_one_resolves_nothing(standin, daemons, monkeypatch):
    """A tied name that is not served (lm_head.weight tied to a served
    model.embed_tokens.weight) binds through its served twin: no
    conversion is looked for (resolve renames every served name and reads
    the whole manifest, which the lazy Model spares)."""
    arch = "qwen3_moe"
    d = daemons(os.path.join(LAYOUTS, arch), arch[:3])
    files = safetensors_files(os.path.join(LAYOUTS, arch))
    served = d.connect().attach(model_dir=os.path.join(LAYOUTS, arch), framework="torch")
    m = torch.nn.Module()
    m.config = types.SimpleNamespace(model_type=arch)
    for name, (dt, shape, _) in files.items():
        put(m, name, meta(*shape))
    tied = next(n for n in files if n.endswith("embed_tokens.weight"))
    put(m, "alias.weight", dict(m.named_parameters())[tied])
    from wcache import _hfconv
    calls = []
    real = _hfconv.resolve
    monkeypatch.setattr(_hfconv, "resolve", lambda *a: calls.append(a) or real(*a))
    bound = wcache.torch.load_into(m, served)
    assert bound.missing == [] and bound.unexpected == [], bound
    assert bound.tied == {"alias.weight": tied}, bound.tied
    assert calls == [], "resolve ran for a tied name whose twin is served"
