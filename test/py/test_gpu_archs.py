# SPDX-License-Identifier: MIT
"""On a GPU, with transformers 5: every architecture of test/data/layouts
(checkpoints written by transformers itself: Llama, Mixtral, Qwen2,
Qwen3, Qwen3-MoE, Phi-3, Gemma 2, Gemma 3, DeepSeek-V3) served by a real
wcd on the CUDA backend and bound with wcache.torch.load_into into the
model AutoModelForCausalLM.from_config builds under init_empty: every
parameter is served memory (memory_allocated grows by no weight), the
logits are bitwise from_pretrained's on the same GPU and greedy
generate() gives the same tokens. MoE models bind transformers 5's fused
experts (experts.gate_up_proj, experts.down_proj) to the daemon's stacked
views through transformers' own conversion rules (wcache/_hfconv.py); a
module whose conversion asks for another layout (gate and up swapped, a
transpose) is refused with LoadError, never bound to wrong bytes.
Skipped without a GPU or transformers."""
import os

import pytest

from conftest import WC_TOP, wcgen

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
transformers = pytest.importorskip("transformers")

import wcache  # noqa: E402
import wcache.torch  # noqa: E402
import wcache.transformers  # noqa: E402
from test_gpu_models import GpuDaemon  # noqa: E402

LAYOUTS = os.path.join(WC_TOP, "test", "data", "layouts")
ARCHS = sorted(d for d in os.listdir(LAYOUTS) if os.path.isdir(os.path.join(LAYOUTS, d)))
TOKENS = [[3, 17, 250, 299, 42, 7, 128, 64]]
# wcgen's presets that transformers builds (synthetic weights: NaN-free
# is not promised, so the comparison takes NaN as equal to NaN)
WCGEN = ["llama-gqa", "qwen2-tiny", "qwen3-tiny", "mixtral-tiny", "qwen3-moe-tiny",
         "deepseek-v3-tiny", "gemma2-tiny", "gemma3-tiny", "phi3-tiny"]


def reference(model_dir):
    try:
        ref = transformers.AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.bfloat16, device_map="cuda", attn_implementation="sdpa").eval()
    except Exception as e:    # a wcgen config this transformers does not build
        if "/test/data/" in model_dir:
            raise
        pytest.skip("transformers cannot build it: %s: %s" % (type(e).__name__, e))
    ids = torch.tensor(TOKENS, device="cuda")
    with torch.no_grad():
        logits = ref(ids).logits
        gen = ref.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
    weights = sum(p.numel() * p.element_size() for p in ref.parameters())
    buffers = {n: (b.dtype, tuple(b.shape)) for n, b in ref.named_buffers()}
    return logits, gen, weights, buffers, type(ref).__name__


def empty(model_dir, cls=None):
    cfg = transformers.AutoConfig.from_pretrained(model_dir)
    with wcache.torch.init_empty(buffers_device="cuda"):
        if cls is None:
            return transformers.AutoModelForCausalLM.from_config(
                cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
        return cls._from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")


def same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and \
        bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all())


@pytest.mark.parametrize("arch", ARCHS + ["wcgen:" + p for p in WCGEN])
def test_arch_binds_bitwise(arch, tmp_path):
    if arch.startswith("wcgen:"):
        model_dir = wcgen(tmp_path / "m", arch[6:], "--quant", "none")
    else:
        model_dir = os.path.join(LAYOUTS, arch)
    want, want_gen, weights, ref_buffers, want_cls = reference(model_dir)
    torch.cuda.empty_cache()
    d = GpuDaemon(tmp_path, model_dir)
    try:
        conn = wcache.connect(device="cuda:0" if _spellings() else "0", runtime_dir=d.rundir)
        served = conn.attach(model_dir=model_dir)
        model = empty(model_dir)
        base = torch.cuda.memory_allocated()
        bound = wcache.torch.load_into(model, served)
        grew = torch.cuda.memory_allocated() - base
        assert bound.missing == [] and bound.unexpected == [], bound
        # the buffers from_pretrained has, in its dtypes, but for those
        # transformers keeps in float32 (DeepSeek-V3's
        # e_score_correction_bias: _keep_in_fp32_modules_strict), which
        # from_pretrained upcasts (a copy) and load_into binds as the
        # checkpoint has them (the logits below are bitwise all the same:
        # the sum they enter promotes to float32, and the upcast is exact)
        got_buffers = {n: (b.dtype, tuple(b.shape)) for n, b in model.named_buffers()}
        assert sorted(got_buffers) == sorted(ref_buffers)
        fp32 = getattr(model, "_keep_in_fp32_modules_strict", None) or []
        for n, (dt, shape) in ref_buffers.items():
            if got_buffers[n] != (dt, shape):
                assert shape == got_buffers[n][1] and dt == torch.float32 and \
                    any(k in n for k in fp32), (n, got_buffers[n], (dt, shape))
                print("%s: %s bound as the checkpoint's %s (from_pretrained upcasts it to float32)"
                      % (arch, n, got_buffers[n][0]))
        ptrs = {t.data_ptr() for t in served.tensors().values()}
        for name, p in model.named_parameters():
            assert p.is_cuda and p.data_ptr() in ptrs, "%s is not served memory" % name
        assert grew <= 0, "load_into allocated %d bytes (weights %d)" % (grew, weights)
        ids = torch.tensor(TOKENS, device="cuda")
        with torch.no_grad():
            got = model.eval()(ids).logits
            gen = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
        print("%s: %d parameters bound, %d renamed or converted, logits %s, generated %s"
              % (arch, len(bound.bound), _converted(model, served), tuple(got.shape),
                 gen[0, len(TOKENS[0]):].tolist()))
        assert same(got, want), "logits differ: max |d| %g" % (got.float() - want.float()).abs().max()
        assert torch.equal(gen, want_gen), (gen.tolist(), want_gen.tolist())
        served.detach()
        del model
        # the one-line drop-in: the same class, logits and tokens, no copy
        base = torch.cuda.memory_allocated()
        how = {}
        m = wcache.transformers.from_pretrained(
            model_dir, device="cuda:0", dtype=torch.bfloat16, runtime_dir=d.rundir,
            fallback="error", how=how, attn_implementation="sdpa")
        grew = torch.cuda.memory_allocated() - base
        assert type(m).__name__ == want_cls, (type(m), want_cls)
        # what it allocates is the module's own buffers (rotary inv_freq)
        bufs = sum(-(-b.numel() * b.element_size() // 512) * 512 for b in m.buffers())   # 512-byte blocks
        assert grew <= bufs, "from_pretrained allocated %d bytes (weights %d, buffers %d)" \
            % (grew, weights, bufs)
        with torch.no_grad():
            got = m(ids).logits
            gen = m.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)
        print("%s: wcache.transformers.from_pretrained %s, %s" % (arch, type(m).__name__, how))
        assert same(got, want), "drop-in logits differ: max |d| %g" % (got.float() - want.float()).abs().max()
        assert torch.equal(gen, want_gen), (gen.tolist(), want_gen.tolist())
    finally:
        d.stop()


def _spellings():
    """connect() takes torch's device spellings (issue 27's item 3)."""
    try:
        wcache.connect(device="cuda:0", runtime_dir="/nonexistent-wcache-spelling-probe")
    except Exception as e:
        return "unknown device" not in str(e)
    return True


def _converted(model, served):
    return sum(1 for n, _ in model.named_parameters() if n not in served)


def _moe(arch):
    return arch in ("mixtral", "qwen3_moe", "deepseek_v3")


def _swapped_mapping(model, op=None):
    """The model's conversions with gate and up swapped (op None) or op
    appended to the experts' converter."""
    from transformers import conversion_mapping as cm
    from transformers import core_model_loading as cl
    out = []
    for t in cm.get_model_conversion_mapping(model, add_legacy=False):
        if isinstance(t, cl.WeightConverter) and len(t.source_patterns) == 2:
            src = list(t.source_patterns)
            ops = list(t.operations)
            if op is None:
                src = src[::-1]
            else:
                ops.append(op)
            t = cl.WeightConverter(source_patterns=src, target_patterns=t.target_patterns,
                                   operations=ops)
        out.append(t)
    return out


@pytest.mark.parametrize("how", ["swapped", "transposed-op", "transposed-shape"])
@pytest.mark.parametrize("arch", [a for a in ARCHS if _moe(a)])
def test_other_fused_layout_is_refused(arch, how, tmp_path, monkeypatch):
    """A transformers whose rule for the fused experts differs from the
    served view (gate and up in the other order, a transpose in the rule:
    its get_model_conversion_mapping patched to say so; or the parameter
    transposed) gets LoadError, and nothing is bound."""
    from transformers import conversion_mapping as cm
    from transformers import core_model_loading as cl
    model_dir = os.path.join(LAYOUTS, arch)
    d = GpuDaemon(tmp_path, model_dir)
    try:
        served = wcache.connect(device="0", runtime_dir=d.rundir).attach(model_dir=model_dir)
        model = empty(model_dir)
        if how == "transposed-shape":
            for mod in model.modules():
                p = mod._parameters.get("gate_up_proj")
                if p is not None:
                    if p.shape[1] == p.shape[2]:
                        pytest.skip("2I == H in this checkpoint: a transposed parameter has the same shape")
                    mod._parameters["gate_up_proj"] = torch.nn.Parameter(
                        torch.empty(p.shape[0], p.shape[2], p.shape[1], device="meta", dtype=p.dtype),
                        requires_grad=False)
        else:
            mapping = _swapped_mapping(model, None if how == "swapped" else cl.Transpose(1, 2))
            monkeypatch.setattr(cm, "get_model_conversion_mapping", lambda m, *a, **kw: list(mapping))
        before = {n: p.device.type for n, p in model.named_parameters()}
        with pytest.raises(wcache.torch.LoadError) as e:
            wcache.torch.load_into(model, served)
        print("%s %s: %s" % (arch, how, str(e.value)[:300]))
        assert "gate_up_proj" in str(e.value)
        assert {n: p.device.type for n, p in model.named_parameters()} == before
        served.detach()
    finally:
        d.stop()
