# SPDX-License-Identifier: MIT
"""wcache.transformers.from_pretrained on the CPU (torch 1.13 in CI, no
transformers): a stand-in transformers package (written here: an Auto
class that picks the class from config.json's architectures, from_config,
from_pretrained reading the safetensors files, GenerationConfig) and a
host daemon over the reference Llama checkpoint. Served: the class
from_pretrained returns, every parameter in the daemon's memory, eval
mode, tied, the directory's generation config, its state and greedy
generate() equal to from_pretrained's, the module cache used; a hub id
resolved offline in the Hugging Face cache (refs, revisions, HF_HOME,
HF_HUB_CACHE); $WCACHE_RUNTIME_DIR. Fallbacks, each with one
FallbackWarning naming why, and fallback="error"'s NotServed: no daemon,
another model (identity mismatch), a sleeping daemon, a kwarg that
cannot be honoured, a dtype that does not fit, a hub id not in the
cache. The GPU run against real transformers is test_gpu_models.py's."""
import os
import re
import shutil
import sys
import textwrap
import warnings

import pytest

import wcache
from conftest import REFERENCE, pool_mappings

torch = pytest.importorskip("torch")

LLAMA = os.path.join(REFERENCE, "llama")

STANDIN = '''
__version__ = "5.0.0.dev0-standin"
import json
import os
import struct

import torch

CALLS = []     # (path, kwargs) of each from_pretrained call


class GenerationConfig:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    @classmethod
    def from_pretrained(cls, path):
        with open(os.path.join(path, "generation_config.json")) as f:
            return cls(**json.load(f))

    @classmethod
    def from_model_config(cls, cfg):
        return cls(bos_token_id=cfg.bos_token_id, from_model_config=True)


class AutoConfig:
    def __init__(self, d):
        self.__dict__.update(d)
        self._name_or_path = ""

    @classmethod
    def from_pretrained(cls, path, **kw):
        with open(os.path.join(path, "config.json")) as f:
            c = cls(json.load(f))
        c._name_or_path = path
        return c


_DT = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16}


def read_safetensors(path):
    out = {}
    for f in sorted(os.listdir(path)):
        if f.endswith(".safetensors"):
            data = open(os.path.join(path, f), "rb").read()
            (n,) = struct.unpack_from("<Q", data, 0)
            for name, e in json.loads(data[8:8 + n]).items():
                if name != "__metadata__":
                    a, b = e["data_offsets"]
                    buf = bytearray(data[8 + n + a:8 + n + b])
                    out[name] = torch.frombuffer(buf, dtype=_DT[e["dtype"]]).reshape(e["shape"])
    return out


class LlamaForCausalLM(torch.nn.Module):
    """LlamaForCausalLM's parameter names; a small forward over them."""

    def __init__(self, c, attn_implementation=None):
        super().__init__()
        self.config = c
        h, v, inter = c.hidden_size, c.vocab_size, c.intermediate_size
        hd, nh, nkv = c.head_dim, c.num_attention_heads, c.num_key_value_heads
        L = torch.nn.Linear
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(v, h)
        self.model.layers = torch.nn.ModuleList()
        for _ in range(c.num_hidden_layers):
            layer = torch.nn.Module()
            layer.self_attn = torch.nn.Module()
            a = layer.self_attn
            a.q_proj, a.k_proj = L(h, nh * hd, bias=False), L(h, nkv * hd, bias=False)
            a.v_proj, a.o_proj = L(h, nkv * hd, bias=False), L(nh * hd, h, bias=False)
            layer.mlp = torch.nn.Module()
            layer.mlp.gate_proj, layer.mlp.up_proj = L(h, inter, bias=False), L(h, inter, bias=False)
            layer.mlp.down_proj = L(inter, h, bias=False)
            for n in ("input_layernorm", "post_attention_layernorm"):
                m = torch.nn.Module()
                m.weight = torch.nn.Parameter(torch.ones(h))
                setattr(layer, n, m)
            self.model.layers.append(layer)
        self.model.norm = torch.nn.Module()
        self.model.norm.weight = torch.nn.Parameter(torch.ones(h))
        self.lm_head = L(h, v, bias=False)
        self.register_buffer("inv_freq", torch.arange(0, hd, 2).float() / hd, persistent=False)
        self.generation_config = GenerationConfig.from_model_config(c)
        self.attn_implementation = attn_implementation
        self.tie_calls = 0

    def tie_weights(self):
        self.tie_calls += 1
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @classmethod
    def from_config(cls, config, dtype=None, attn_implementation=None):
        m = cls(config, attn_implementation)
        return m.to(dtype) if dtype is not None else m

    @classmethod
    def from_pretrained(cls, path, dtype=None, device_map=None, **kw):
        CALLS.append((path, dict(kw, dtype=dtype, device_map=device_map)))
        if not os.path.isdir(path):
            raise OSError("standin: %s is no directory (this stand-in downloads nothing)" % path)
        m = cls(AutoConfig.from_pretrained(path), kw.get("attn_implementation"))
        if dtype is not None:
            m = m.to(dtype)
        with torch.no_grad():
            files = read_safetensors(path)
            for n, p in m.named_parameters():
                p.copy_(files[n])
        m.tie_weights()
        m.generation_config = GenerationConfig.from_pretrained(path)
        return m.to(device_map or "cpu").eval()

    def forward(self, ids):
        def norm(x, w):
            return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
        x = self.model.embed_tokens(ids).float()
        for layer in self.model.layers:
            a, m = layer.self_attn, layer.mlp
            y = norm(x, layer.input_layernorm.weight.float()).to(a.q_proj.weight.dtype)
            x = x + a.o_proj(a.q_proj(y)).float()
            y = norm(x, layer.post_attention_layernorm.weight.float()).to(m.up_proj.weight.dtype)
            x = x + m.down_proj(torch.nn.functional.silu(m.gate_proj(y)) * m.up_proj(y)).float()
        return self.lm_head(norm(x, self.model.norm.weight.float()).to(self.lm_head.weight.dtype))

    def generate(self, ids, max_new_tokens=6):
        with torch.no_grad():
            for _ in range(max_new_tokens):
                ids = torch.cat([ids, self(ids)[:, -1].argmax(-1, keepdim=True)], 1)
        return ids


class AutoModelForCausalLM:
    """Picks the class from config.json's architectures, as transformers' Auto classes do."""

    @staticmethod
    def _cls(config):
        return {"LlamaForCausalLM": LlamaForCausalLM}[config.architectures[0]]

    @classmethod
    def from_config(cls, config, **kw):
        return cls._cls(config).from_config(config, **kw)

    @classmethod
    def from_pretrained(cls, path, **kw):
        if not os.path.isdir(path):
            CALLS.append((path, kw))
            raise OSError("standin: %s is no directory (this stand-in downloads nothing)" % path)
        return cls._cls(AutoConfig.from_pretrained(path)).from_pretrained(path, **kw)
'''


@pytest.fixture
def tf(tmp_path, monkeypatch):
    """The stand-in transformers, imported (and forgotten after)."""
    d = tmp_path / "standin" / "transformers"
    d.mkdir(parents=True)
    (d / "__init__.py").write_text(textwrap.dedent(STANDIN))
    monkeypatch.syspath_prepend(str(d.parent))
    for k in [k for k in sys.modules if k == "transformers" or k.startswith("transformers.")]:
        monkeypatch.delitem(sys.modules, k)
    import transformers
    assert transformers.__file__.startswith(str(d))
    yield transformers
    for k in [k for k in sys.modules if k == "transformers" or k.startswith("transformers.")]:
        del sys.modules[k]


@pytest.fixture
def llama(tmp_path):
    """A copy of the reference Llama whose generation_config.json differs
    from what the model's config makes (so reading it shows)."""
    d = tmp_path / "llama"
    shutil.copytree(LLAMA, str(d))
    gen = (d / "generation_config.json").read_text().replace('"use_cache": true', '"use_cache": true,\n  "max_new_tokens": 7')
    (d / "generation_config.json").write_text(gen)
    return str(d)


def fp(model_dir, d, tmp_path, **kw):
    """from_pretrained with FallbackWarnings recorded: (model, how, warnings)."""
    how = {}
    kw.setdefault("runtime_dir", d.rundir if d is not None else str(tmp_path / "no-daemons"))
    kw.setdefault("device", d.device if d is not None else "host:none")
    kw.setdefault("cache", str(tmp_path / "modcache"))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        m = wcache.transformers.from_pretrained(model_dir, how=how, **kw)
    return m, how, [x for x in w if issubclass(x.category, wcache.FallbackWarning)]


def in_pools(model):
    """Every parameter's bytes lie in a mapping of a daemon's pool."""
    spans = []
    for line in pool_mappings():
        a, b = line.split()[0].split("-")
        spans.append((int(a, 16), int(b, 16)))
    return all(any(a <= p.data_ptr() and p.data_ptr() + p.numel() * p.element_size() <= b
                   for a, b in spans) for p in model.parameters())


IDS = torch.tensor([[1, 17, 300, 42, 7]])


def test_served(tf, llama, daemons, tmp_path):
    d = daemons(llama, "dropin")
    m, how, fw = fp(llama, d, tmp_path, dtype=torch.bfloat16)
    assert fw == [] and how["served"] and how["why"] is None, (how, [str(x.message) for x in fw])
    assert type(m) is tf.LlamaForCausalLM and how["path"] == llama and how["device"] == "cpu"
    assert in_pools(m) and not any(p.is_meta for p in m.parameters())
    assert not m.training and m.tie_calls >= 1
    assert m.generation_config.max_new_tokens == 7, vars(m.generation_config)
    assert m.config._name_or_path == llama
    with d.connect() as c:      # the daemon sees our lease
        assert any(x["pid"] == os.getpid() and x["leases"] >= 1 for x in c.status()["clients"])
    ref = tf.AutoModelForCausalLM.from_pretrained(llama, dtype=torch.bfloat16)
    assert type(ref) is type(m)
    sd, rd = m.state_dict(), ref.state_dict()
    assert sorted(sd) == sorted(rd)
    for n in sd:
        assert sd[n].dtype == rd[n].dtype and torch.equal(sd[n], rd[n]), n
    assert torch.equal(m.generate(IDS), ref.generate(IDS))
    # the module cache: the second start reads the module
    assert how["cache"] in ("miss", "hit")
    m2, how2, fw2 = fp(llama, d, tmp_path, dtype="auto")     # the checkpoint's: bfloat16
    assert fw2 == [] and how2["served"] and how2["cache"] == "hit", how2
    assert torch.equal(m2.generate(IDS), ref.generate(IDS))
    # dtype None is transformers 5's "auto"; attn_implementation is honoured
    m3, how3, fw3 = fp(llama, d, tmp_path, attn_implementation="sdpa")
    assert fw3 == [] and how3["served"] and m3.lm_head.weight.dtype == torch.bfloat16
    assert m3.attn_implementation == "sdpa" and torch.equal(m3.generate(IDS), ref.generate(IDS))


def test_wcache_runtime_dir(tf, llama, daemons, tmp_path, monkeypatch):
    d = daemons(llama, "envdir")
    monkeypatch.setenv("WCACHE_RUNTIME_DIR", d.rundir)
    how = {}
    m = wcache.transformers.from_pretrained(llama, device=d.device, how=how, cache=False)
    assert how["served"] and in_pools(m)


def hub(tmp_path, repo_id, model_dir, sha, refs=("main",)):
    """A Hugging Face cache entry of model_dir as huggingface_hub writes
    it: blobs, a snapshot of links to them, refs naming the snapshot."""
    base = tmp_path / "hf" / "hub" / ("models--" + repo_id.replace("/", "--"))
    (base / "blobs").mkdir(parents=True, exist_ok=True)
    snap = base / "snapshots" / sha
    snap.mkdir(parents=True)
    for i, f in enumerate(sorted(os.listdir(model_dir))):
        blob = base / "blobs" / ("%s%04d" % (sha[:8], i))
        shutil.copy2(os.path.join(model_dir, f), str(blob))   # the times too: they are in the identity
        os.symlink(os.path.relpath(str(blob), str(snap)), str(snap / f))
    (base / "refs").mkdir(exist_ok=True)
    for r in refs:
        (base / "refs" / r).write_text(sha)
    return str(snap)


def test_hub_id(tf, llama, daemons, tmp_path, monkeypatch):
    """A hub id resolves offline to its snapshot in the HF cache (refs/main,
    refs/<revision>, a 40-hex revision; HF_HUB_CACHE, else HF_HOME/hub);
    the daemon serves the same weights from another path (the identity is
    the content), so the snapshot is served."""
    d = daemons(llama, "hub")
    main = hub(tmp_path, "org/tiny-llama", llama, "a" * 40)
    other = hub(tmp_path, "org/tiny-llama", LLAMA, "b" * 40, refs=("v1",))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    m, how, fw = fp("org/tiny-llama", d, tmp_path)
    assert fw == [], "; ".join(str(x.message)[:600] for x in fw)
    assert how["served"] and how["path"] == main, how
    assert m.config._name_or_path == "org/tiny-llama"
    assert m.generation_config.max_new_tokens == 7
    # revision v1 is the unchanged reference (no max_new_tokens): the same weights
    m, how, fw = fp("org/tiny-llama", d, tmp_path, revision="v1")
    assert how["served"] and how["path"] == other
    assert not hasattr(m.generation_config, "max_new_tokens")
    _, how, _ = fp("org/tiny-llama", d, tmp_path, revision="b" * 40)
    assert how["served"] and how["path"] == other
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "elsewhere"))
    _, how, _ = fp("org/tiny-llama", d, tmp_path)
    assert how["served"] and how["path"] == main
    # no daemon for it: from_pretrained is called as the caller called it
    # (the hub id and revision, not the snapshot)
    del tf.CALLS[:]
    with pytest.raises(OSError, match="standin"):
        fp("org/tiny-llama", None, tmp_path, revision="v1")
    assert [c[0] for c in tf.CALLS] == ["org/tiny-llama"] and tf.CALLS[0][1]["revision"] == "v1"
    # not in the cache, or no such revision: transformers' own loading
    # (here the stand-in, which downloads nothing), with the reason
    for name, rev, why in (("org/absent", None, "is not in the Hugging Face cache"),
                           ("org/tiny-llama", "v9", "has no revision 'v9'")):
        del tf.CALLS[:]
        with pytest.raises(OSError, match="standin"):
            fp(name, d, tmp_path, revision=rev)
        assert tf.CALLS and tf.CALLS[0][0] == name and tf.CALLS[0][1].get("revision") == rev, tf.CALLS
        with pytest.raises(wcache.NotServed, match=re.escape(why)):
            fp(name, d, tmp_path, revision=rev, fallback="error")


def fallback_case(tf, model_dir, d, tmp_path, why, **kw):
    """The fallback: from_pretrained's model on the device, one
    FallbackWarning naming why; fallback="error": NotServed naming it."""
    del tf.CALLS[:]
    m, how, fw = fp(model_dir, d, tmp_path, **kw)
    assert len(fw) == 1 and why in str(fw[0].message), [str(x.message) for x in fw]
    assert "from_pretrained" in str(fw[0].message)
    assert not how["served"] and why in how["why"]
    assert type(m) is tf.LlamaForCausalLM and not in_pools(m)
    assert len(tf.CALLS) == 1 and tf.CALLS[0][0] == model_dir and tf.CALLS[0][1]["device_map"] == "cpu"
    with pytest.raises(wcache.NotServed, match=re.escape(why)) as e:
        fp(model_dir, d, tmp_path, fallback="error", **kw)
    assert isinstance(e.value, wcache.Error)
    return m, e.value


def test_fallback_no_daemon(tf, llama, tmp_path):
    m, e = fallback_case(tf, llama, None, tmp_path, "no daemon serves device host:none",
                         dtype=torch.bfloat16)
    assert tf.CALLS[0][1]["dtype"] == torch.bfloat16
    assert isinstance(e.__cause__, wcache.NoDaemon)
    assert m.generation_config.max_new_tokens == 7


def test_fallback_another_model(tf, llama, daemons, tiny, tmp_path):
    """A daemon serving other weights on the device: never bound."""
    d = daemons(tiny, "other")
    _, e = fallback_case(tf, llama, d, tmp_path, "serves another model")
    assert isinstance(e.__cause__, wcache.IdentityMismatch) and e.__cause__.fields
    assert ", ".join(sorted(e.__cause__.fields)) in str(e)


def test_fallback_sleeping(tf, llama, daemons, tmp_path):
    d = daemons(llama, "asleep")
    with d.connect() as c:
        c.sleep(1)
    _, e = fallback_case(tf, llama, d, tmp_path, "sleeps (wake it")
    assert isinstance(e.__cause__, wcache.DaemonSleeping)


def test_fallback_kwarg(tf, llama, daemons, tmp_path):
    """A kwarg that changes what is loaded falls back naming it (and is
    passed to from_pretrained); the daemon is not even asked."""
    d = daemons(llama, "kwarg")
    q = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    fallback_case(tf, llama, d, tmp_path, "quantization_config=", quantization_config=q)
    assert tf.CALLS[0][1]["quantization_config"] == q
    fallback_case(tf, llama, d, tmp_path, "subfolder=", subfolder="x")


def test_fallback_dtype_does_not_fit(tf, llama, daemons, tmp_path):
    """dtype=float32 over bfloat16 served tensors would be a conversion (a
    copy): from_pretrained converts, the drop-in falls back naming it."""
    d = daemons(llama, "dtype")
    m, _ = fallback_case(tf, llama, d, tmp_path, "do not fit LlamaForCausalLM", dtype=torch.float32)
    assert m.lm_head.weight.dtype == torch.float32
    with d.connect() as c:      # nothing of ours holds a lease
        assert not [x for x in c.status()["clients"] if x.get("pid") == os.getpid() and x.get("leases")]


def test_usage_errors(tf, llama, tmp_path):
    """A bad device spelling or fallback value is a mistake to fix, not a
    missing daemon: ValueError, no fallback."""
    for kw, msg in (({"device": "cuda:x"}, "'cuda:x'.*cuda:N"), ({"device": "mps"}, "'mps'"),
                    ({"fallback": "quiet"}, "fallback must be")):
        with pytest.raises(ValueError, match=msg):
            fp(llama, None, tmp_path, **kw)


def test_without_transformers(tmp_path, monkeypatch):
    """No transformers: an ImportError that says what to install."""
    d = tmp_path / "broken" / "transformers"
    d.mkdir(parents=True)
    (d / "__init__.py").write_text('raise ImportError("no transformers here")\n')
    monkeypatch.syspath_prepend(str(d.parent))
    for k in [k for k in sys.modules if k == "transformers" or k.startswith("transformers.")]:
        monkeypatch.delitem(sys.modules, k)
    with pytest.raises(ImportError, match="no transformers here.*pip install transformers"):
        wcache.transformers.from_pretrained(LLAMA, device="host:none", runtime_dir=str(tmp_path))
    sys.modules.pop("transformers", None)
