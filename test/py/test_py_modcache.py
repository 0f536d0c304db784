# SPDX-License-Identifier: MIT
"""wcache.torch.empty_model's module cache on the CPU (torch 1.13 in CI):
a module kept by one call comes back from the next (in this process and in
a fresh one) as the same module: the same tree of classes, every parameter
on meta with its shape, dtype and requires_grad, tied parameters still one
object, buffers bitwise equal on their device, the non-persistent ones
still non-persistent, other attributes equal; load_into binds it and its
forward equals a normally built module's. The file is not used when its
key, its sources (an edited class) or its bytes (torn) differ, nor when
another user could have written it (directory or file of another uid, or
writable by group or others, symbolic links): the module is then built,
with the reason said. The transformers path (empty_pretrained) runs in
test_gpu_models.py."""
import gc
import hashlib
import importlib
import os
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from conftest import PKG

torch = pytest.importorskip("torch")
import wcache.torch as wt  # noqa: E402

MODEL_SRC = textwrap.dedent('''
    import torch
    nn = torch.nn


    def rope(dim, theta):
        return 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))


    class Cfg:
        def __init__(self, **kw):
            self.__dict__.update(kw)

        def __eq__(self, other):
            return type(other) is Cfg and vars(self) == vars(other)


    class Rotary(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.init_fn = rope                      # a function, by name
            self.register_buffer("inv_freq", rope(cfg.head, cfg.theta), persistent=False)
            self.original_inv_freq = self.inv_freq   # the same tensor under two names
            self.scaling = 1.0


    class Block(nn.Module):
        def __init__(self, cfg, idx):
            super().__init__()
            self.layer_idx = idx
            self.cfg = cfg                           # one object shared by every block
            self.attn = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
            self.mlp = nn.Sequential(nn.Linear(cfg.hidden, 2 * cfg.hidden), nn.SiLU(),
                                     nn.Linear(2 * cfg.hidden, cfg.hidden))
            self.norm = nn.LayerNorm(cfg.hidden)

        def forward(self, x):
            return x + self.mlp(self.norm(self.attn(x)))


    class Net(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.cfg = cfg
            self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
            self.blocks = nn.ModuleList([Block(cfg, i) for i in range(cfg.layers)])
            self.rotary = Rotary(cfg)
            self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
            self.head.weight = self.embed.weight     # tied
            self.gate = nn.Parameter(torch.ones(cfg.hidden, dtype=torch.bfloat16))
            self.frozen = nn.Parameter(torch.zeros(3), requires_grad=False)
            self.register_buffer("counts", torch.arange(6).float())   # persistent
            self.dtype_seen = torch.bfloat16

        def forward(self, ids):
            x = self.embed(ids)
            for b in self.blocks:
                x = b(x)
            x = x * self.gate.float() + self.counts.sum() + self.frozen.sum()
            return self.head(x) * self.rotary.inv_freq.sum()


    def make():
        return Net(Cfg(vocab=40, hidden=8, layers=3, head=8, theta=10000.0))
''')


@pytest.fixture
def mod(tmp_path, monkeypatch):
    """The model's code as a module of its own file (its source checked)."""
    src = tmp_path / "src"
    src.mkdir()
    name = "mc_model_%s" % hashlib.sha1(str(tmp_path).encode()).hexdigest()[:8]
    (src / (name + ".py")).write_text(MODEL_SRC)
    monkeypatch.syspath_prepend(str(src))
    m = importlib.import_module(name)
    yield m
    sys.modules.pop(name, None)


def cached(mod, d, key="net", **kw):
    how = {}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        m = wt.empty_model(mod.make, key, cache=str(d), how=how, **kw)
    how["warnings"] = [str(x.message) for x in w]
    return m, how


def all_params(m):
    """(name, parameter) of every name, tied ones under each (torch 1.13's
    named_parameters has no remove_duplicate)."""
    return [(mn + ("." if mn else "") + n, p) for mn, x in m.named_modules()
            for n, p in x._parameters.items() if p is not None]


def shape_of(m):
    """Everything empty_model must keep, in comparable form."""
    out = {"modules": [(n, type(x).__qualname__, x.training) for n, x in m.named_modules()],
           "params": [(n, tuple(p.shape), p.dtype, p.device.type, p.requires_grad, type(p).__name__)
                      for n, p in all_params(m)],
           "buffers": [(n, b.dtype, str(b.device), b.cpu().tolist()) for n, b in m.named_buffers()],
           "state": sorted(m.state_dict(keep_vars=True)),
           "nonpersistent": sorted(m.rotary._non_persistent_buffers_set)}
    return out


def weights(m):
    g = torch.Generator().manual_seed(7)
    return {n: torch.randn(tuple(t.shape), generator=g).to(t.dtype)
            for n, t in m.state_dict(keep_vars=True).items() if n != "head.weight"}


def test_hit_is_the_same_module(mod, tmp_path):
    d = tmp_path / "cache"
    first, how = cached(mod, d)
    assert how["cache"] == "miss" and how["saved"], how
    assert os.path.exists(how["path"]) and how["path"].startswith(str(d))
    assert oct(os.stat(how["path"]).st_mode & 0o777) == oct(0o600)
    assert oct(os.stat(str(d)).st_mode & 0o777) == oct(0o700)
    again, how2 = cached(mod, d)
    assert how2["cache"] == "hit" and how2["path"] == how["path"], how2
    assert again is not first
    assert shape_of(again) == shape_of(first)
    assert all(p.is_meta for p in again.parameters())
    assert again.head.weight is again.embed.weight
    assert again.rotary.original_inv_freq is again.rotary.inv_freq
    assert again.rotary.init_fn is mod.rope
    assert all(b.cfg is again.cfg for b in again.blocks) and again.cfg == first.cfg
    assert [b.layer_idx for b in again.blocks] == [0, 1, 2]
    assert again.dtype_seen is torch.bfloat16 and again.rotary.scaling == 1.0
    # bound and run: the same output as a module built normally
    w = weights(first)
    ref = mod.make()
    ref.load_state_dict(dict(w, **{"head.weight": w["embed.weight"]}))
    bound = wt.load_into(again, w)
    assert bound.missing == [] and bound.tied == {"head.weight": "embed.weight"}
    ids = torch.tensor([[1, 5, 9, 30]])
    with torch.no_grad():
        assert torch.equal(again(ids), ref(ids))


def test_fresh_process_hit(mod, tmp_path):
    """What a restart sees: a fresh interpreter unpickles the module."""
    d = tmp_path / "cache"
    first, how = cached(mod, d)
    assert how["cache"] == "miss"
    code = textwrap.dedent('''
        import json, sys, torch
        import wcache.torch as wt
        import %s as mod
        how = {}
        m = wt.empty_model(mod.make, "net", cache=sys.argv[1], how=how)
        print(json.dumps([how["cache"], [(n, list(p.shape), str(p.dtype), p.device.type)
                          for n, p in m.named_parameters()],
                          m.rotary.inv_freq.tolist(), m.head.weight is m.embed.weight]))
    ''' % mod.__name__)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PKG, os.path.dirname(mod.__file__)]))
    p = subprocess.run([sys.executable, "-c", code, str(d)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    import json
    hit, params, inv, tied = json.loads(p.stdout.strip().splitlines()[-1])
    assert hit == "hit"
    assert params == [[n, list(x.shape), str(x.dtype), "meta"]
                      for n, x in first.named_parameters()]
    assert inv == first.rotary.inv_freq.tolist() and tied


def test_misses(mod, tmp_path):
    d = tmp_path / "cache"
    _, how = cached(mod, d)
    assert how["cache"] == "miss" and how["why"] == "no cache file"
    # another key, another file
    _, other = cached(mod, d, key={"config": 2})
    assert other["cache"] == "miss" and other["path"] != how["path"]
    # another buffers device or init_empty's parts: another file
    _, bd = cached(mod, d, buffers_device="cpu")
    assert bd["path"] not in (how["path"], other["path"])
    _, slow = cached(mod, d, skip_init=False)
    assert slow["cache"] == "miss" and slow["path"] != how["path"]
    assert cached(mod, d)[1]["cache"] == "hit"
    # the model's source edited (or upgraded): a miss, then the new file
    st = os.stat(mod.__file__)
    os.utime(mod.__file__, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))
    _, edited = cached(mod, d)
    assert edited["cache"] == "miss" and "source file" in edited["why"] and edited["saved"], edited
    assert cached(mod, d)[1]["cache"] == "hit"
    # rewritten with the same size and mtime (a reinstall): its ctime and inode say so
    st = os.stat(mod.__file__)
    text = open(mod.__file__, "rb").read()
    os.unlink(mod.__file__)
    with open(mod.__file__, "wb") as f:
        f.write(text)
    os.utime(mod.__file__, ns=(st.st_atime_ns, st.st_mtime_ns))
    _, same = cached(mod, d)
    assert same["cache"] == "miss" and "source file" in same["why"], same
    assert cached(mod, d)[1]["cache"] == "hit"
    # a torn file: a miss that writes it anew
    with open(how["path"], "r+b") as f:
        f.truncate(os.path.getsize(how["path"]) // 2)
    _, torn = cached(mod, d)
    assert torn["cache"] == "miss" and "unpickled" in torn["why"] and torn["saved"], torn
    assert cached(mod, d)[1]["cache"] == "hit"
    with open(how["path"], "wb") as f:
        f.write(b"not a cache file")
    _, junk = cached(mod, d)
    assert junk["cache"] == "miss" and "header" in junk["why"], junk
    assert cached(mod, d)[1]["cache"] == "hit"


def test_off(mod, tmp_path, monkeypatch):
    monkeypatch.setenv("WCACHE_MODULE_CACHE", str(tmp_path / "env"))
    how = {}
    m = wt.empty_model(mod.make, "net", cache=False, how=how)
    assert how["cache"] == "off" and how["path"] is None
    assert all(p.is_meta for p in m.parameters())
    assert not (tmp_path / "env").exists()
    # cache=True: the default directory, from the environment
    assert wt.module_cache_dir() == str(tmp_path / "env")
    how = {}
    wt.empty_model(mod.make, "net", how=how)
    assert how["cache"] == "miss" and how["path"].startswith(str(tmp_path / "env") + os.sep)
    monkeypatch.delenv("WCACHE_MODULE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert wt.module_cache_dir() == os.path.join(str(tmp_path / "xdg"), "wcache", "modules")


def refused(mod, d, what):
    m, how = cached(mod, d)
    assert how["cache"] == "refused", (what, how)
    assert any("not used" in w for w in how["warnings"]), how
    assert all(p.is_meta for p in m.parameters()) and m.head.weight is m.embed.weight
    return how


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_refuses_what_another_user_could_write(mod, tmp_path):
    d = tmp_path / "cache"
    _, how = cached(mod, d)
    path = how["path"]
    # a file of another user
    os.chown(path, 65534, 65534)
    why = refused(mod, d, "file of uid 65534")["why"]
    assert "belongs to uid 65534" in why and path in why
    assert os.stat(path).st_uid == 65534   # not written over
    os.chown(path, 0, 0)
    # a file others may write
    os.chmod(path, 0o622)
    assert "writable by its group or others" in refused(mod, d, "file 0622")["why"]
    os.chmod(path, 0o600)
    assert cached(mod, d)[1]["cache"] == "hit"
    # a symbolic link in place of the file
    real = str(tmp_path / "elsewhere.wcm")
    os.rename(path, real)
    os.symlink(real, path)
    assert "symbolic link" in refused(mod, d, "file symlink")["why"]
    assert os.path.islink(path)
    os.unlink(path)
    os.rename(real, path)
    # the directory: another user's, writable by others, a symbolic link
    os.chown(str(d), 65534, 65534)
    assert "belongs to uid 65534" in refused(mod, d, "dir of uid 65534")["why"]
    os.chown(str(d), 0, 0)
    os.chmod(str(d), 0o777)
    assert "writable by its group or others" in refused(mod, d, "dir 0777")["why"]
    os.chmod(str(d), 0o700)
    link = tmp_path / "link"
    os.symlink(str(d), str(link))
    assert "symbolic link" in refused(mod, link, "dir symlink")["why"]
    assert cached(mod, d)[1]["cache"] == "hit"
    before = sorted(os.listdir(str(d)))
    os.chmod(str(d), 0o777)
    refused(mod, d, "dir 0777 again")
    assert sorted(os.listdir(str(d))) == before   # nothing written in a refused directory
    os.chmod(str(d), 0o700)


def test_uncacheable_is_built_and_said(mod, tmp_path):
    d = tmp_path / "cache"

    def with_lambda():
        m = mod.make()
        m.hook = lambda x: x            # cannot be pickled by name
        return m

    how = {}
    with pytest.warns(RuntimeWarning, match="not cached"):
        m = wt.empty_model(with_lambda, "lambda", cache=str(d), how=how)
    assert how["cache"] == "miss" and not how["saved"] and "cannot be kept" in how["why"]
    assert callable(m.hook) and not os.path.exists(how["path"])

    def with_view():
        m = mod.make()
        m.half_freq = m.rotary.inv_freq[:2]   # a view of a buffer: not kept exactly
        return m

    how = {}
    with pytest.warns(RuntimeWarning, match="view or shares its memory"):
        wt.empty_model(with_view, "view", cache=str(d), how=how)
    assert not how["saved"] and not os.path.exists(how["path"])
    assert [f for f in os.listdir(str(d)) if f.startswith(".tmp")] == []
    with pytest.raises(TypeError, match="key must be"):
        wt.empty_model(mod.make, object(), cache=str(d))


def test_init_empty_pauses_gc(mod):
    assert gc.isenabled()
    with wt.init_empty():
        assert not gc.isenabled()
        mod.make()
    assert gc.isenabled()
    gc.disable()
    try:
        with wt.init_empty():
            mod.make()
        assert not gc.isenabled()   # left as it was
    finally:
        gc.enable()
    with pytest.raises(ZeroDivisionError):
        with wt.init_empty():
            1 / 0
    assert gc.isenabled()


STANDIN = {
    "__init__.py": '''
__version__ = "0.0-standin"
from .modeling_utils import PreTrainedModel, _CAN_RECORD_REGISTRY  # noqa: F401
from .standin import AutoConfig, AutoModelForCausalLM, StandinForCausalLM  # noqa: F401
''',
    "modeling_utils.py": '''
import json
import torch

_CAN_RECORD_REGISTRY = {}   # filled by constructors, as transformers 5's


class GenerationConfig:
    def __init__(self, cfg):
        self.max_length = 20
        self.bos_token_id = cfg.bos_token_id
        self._from_model_config = True
        self._original_object_hash = hash(self)

    def to_json_string(self, ignore_metadata=False):
        return json.dumps({k: v for k, v in vars(self).items()
                           if not (ignore_metadata and k.startswith("_"))}, sort_keys=True)

    def __hash__(self):
        return hash(self.to_json_string(ignore_metadata=True))


class PreTrainedModel(torch.nn.Module):
    _can_record_outputs = None

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.generation_config = GenerationConfig(config)
        _CAN_RECORD_REGISTRY[str(self.__class__)] = self._can_record_outputs
''',
    "standin.py": '''
import json
import os
import torch
from .modeling_utils import PreTrainedModel


class AutoConfig:
    def __init__(self, d):
        self.__dict__.update(d)

    @classmethod
    def from_pretrained(cls, path):
        with open(os.path.join(path, "config.json")) as f:
            return cls(json.load(f))


class StandinForCausalLM(PreTrainedModel):
    _can_record_outputs = {"hidden_states": "Block"}

    def __init__(self, config):
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.proj = torch.nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.register_buffer("inv_freq", torch.arange(4).float(), persistent=False)

    @classmethod
    def from_config(cls, config, dtype=None, **kw):
        m = cls(config)
        return m.to(dtype) if dtype is not None else m


AutoModelForCausalLM = StandinForCausalLM
''',
}

STANDIN_CHILD = '''
import json, sys, torch, transformers
import wcache.torch as wt
how = {}
m = wt.empty_pretrained(sys.argv[1], dtype=torch.bfloat16, cache=sys.argv[2], how=how)
g = m.generation_config
print(json.dumps({"cache": how["cache"], "saved": how["saved"], "why": how["why"],
                  "registry": transformers._CAN_RECORD_REGISTRY.get(str(type(m))),
                  "hash_ok": g._original_object_hash == hash(g),
                  "meta": all(p.is_meta for p in m.parameters()),
                  "dtype": str(m.proj.weight.dtype), "vocab": m.config.vocab_size,
                  "inv_freq": m.inv_freq.tolist()}))
'''


def test_pretrained_with_a_standin(tmp_path):
    """empty_pretrained against a stand-in of transformers (fresh processes
    each, with different string hashes): the key is config.json, the class,
    the dtype and transformers' environment; a hit redoes what the
    constructors did outside the module (the output-capture registry, the
    generation config's per-process hash)."""
    tf = tmp_path / "standin" / "transformers"
    tf.mkdir(parents=True)
    for name, text in STANDIN.items():
        (tf / name).write_text(textwrap.dedent(text))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"vocab_size": 16, "hidden_size": 8, "bos_token_id": 1}')
    cache = tmp_path / "cache"

    def child(seed, **env):
        e = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tf.parent), PKG]),
                 PYTHONHASHSEED=str(seed), **env)
        p = subprocess.run([sys.executable, "-c", STANDIN_CHILD, str(model), str(cache)],
                           env=e, capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        import json
        return json.loads(p.stdout.strip().splitlines()[-1])

    first = child(1)
    assert first["cache"] == "miss" and first["saved"], first
    hit = child(2)
    assert hit["cache"] == "hit", hit
    assert hit["registry"] == {"hidden_states": "Block"}      # no constructor ran here
    assert hit["hash_ok"], "the generation config's hash is another process's"
    assert hit["meta"] and hit["dtype"] == "torch.bfloat16" and hit["vocab"] == 16
    assert hit["inv_freq"] == [0.0, 1.0, 2.0, 3.0]
    # transformers' environment is part of the key
    assert child(3, TRANSFORMERS_STANDIN_FLAG="1")["cache"] == "miss"
    assert child(4, TRANSFORMERS_STANDIN_FLAG="1")["cache"] == "hit"
    # another config.json: another module
    (model / "config.json").write_text('{"vocab_size": 32, "hidden_size": 8, "bos_token_id": 1}')
    other = child(5)
    assert other["cache"] == "miss" and other["vocab"] == 32
    assert child(6)["vocab"] == 32

    # python -m wcache prepare writes it ahead of the engine's first start
    def prepare(*args, path=tf.parent):
        e = dict(os.environ, PYTHONPATH=os.pathsep.join([str(path), PKG]))
        return subprocess.run([sys.executable, "-m", "wcache", "prepare", str(model), "--cache", str(cache)]
                              + list(args), env=e, capture_output=True, text=True, timeout=120)

    (model / "config.json").write_text('{"vocab_size": 24, "hidden_size": 8, "bos_token_id": 1}')
    p = prepare()
    assert p.returncode == 0 and p.stdout.startswith("written: " + str(cache)), (p.stdout, p.stderr)
    first = child(7)
    assert first["cache"] == "hit" and first["vocab"] == 24, first
    p = prepare()
    assert p.returncode == 0 and p.stdout.startswith("hit: "), p.stdout
    p = prepare("--dtype", "bogus")
    assert p.returncode == 2 and "not a torch dtype" in p.stderr, p.stderr
    broken = tmp_path / "broken" / "transformers"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("no transformers here")\n')
    p = prepare(path=broken.parent)
    assert p.returncode == 2 and "no transformers here" in p.stderr, p.stderr


def test_on_hit(mod, tmp_path):
    seen = []
    how = {}
    m = wt.empty_model(mod.make, "net", cache=str(tmp_path / "c"), how=how, on_hit=seen.append)
    assert how["cache"] == "miss" and seen == []
    m2 = wt.empty_model(mod.make, "net", cache=str(tmp_path / "c"), how=how, on_hit=seen.append)
    assert how["cache"] == "hit" and seen == [m2] and m2 is not m


def test_directory_is_bounded(mod, tmp_path):
    """A miss's write keeps at most ENTRIES_MAX cache files (the oldest
    written go) and removes temporary files of writers dead for a minute."""
    from wcache import _modcache
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    n = _modcache.ENTRIES_MAX + 5
    for i in range(n):
        f = d / ("%040x.wcm" % i)
        f.write_bytes(b"x")
        os.utime(str(f), (1000 + i, 1000 + i))       # i = 0 is the oldest
    old_tmp, new_tmp = d / ".tmp-1-a.wcm", d / ".tmp-2-b.wcm"
    old_tmp.write_bytes(b"t")
    os.utime(str(old_tmp), (1000, 1000))
    new_tmp.write_bytes(b"t")
    _, how = cached(mod, d)
    assert how["saved"], how
    names = sorted(os.listdir(str(d)))
    kept = [x for x in names if not x.startswith(".")]
    assert len(kept) == _modcache.ENTRIES_MAX and os.path.basename(how["path"]) in kept
    # the oldest went, the newest stayed
    assert "%040x.wcm" % 0 not in kept and "%040x.wcm" % (n - 1) in kept
    assert "%040x.wcm" % (n - _modcache.ENTRIES_MAX + 1) in kept
    assert "%040x.wcm" % (n - _modcache.ENTRIES_MAX) not in kept
    assert old_tmp.name not in names and new_tmp.name in names
    # a hit writes nothing and removes nothing
    assert cached(mod, d)[1]["cache"] == "hit"
    assert sorted(os.listdir(str(d))) == names


def test_young_sources_are_kept_later(mod, tmp_path, monkeypatch):
    """A source changed less than 2 s ago: built, not kept (two writes of
    one size within a clock tick would stat the same), kept once settled."""
    from wcache import _modcache
    monkeypatch.setattr(_modcache, "_SETTLE_NS", 2 * 10**9)
    d = tmp_path / "cache"
    m, how = cached(mod, d)          # the fixture wrote the model's code just now
    assert how["cache"] == "miss" and not how["saved"], how
    assert "changed less than 2 s ago" in how["why"] and mod.__file__ in how["why"], how
    assert how["warnings"] == [] and not os.path.exists(how["path"])
    assert all(p.is_meta for p in m.parameters())
    monkeypatch.setattr(_modcache, "_SETTLE_NS", 0)
    assert cached(mod, d)[1]["saved"]
    assert cached(mod, d)[1]["cache"] == "hit"


def test_directory_that_cannot_be_made(mod, tmp_path):
    """cache= under a regular file: refused with the reason (not the
    symbolic link's), built, and nothing raised."""
    f = tmp_path / "afile"
    f.write_bytes(b"x")
    m, how = cached(mod, f / "cache")
    assert how["cache"] == "refused" and "a part of its path, is not a directory" in how["why"], how
    assert any("not used" in w for w in how["warnings"])
    assert all(p.is_meta for p in m.parameters())


def test_write_that_fails_leaves_nothing(mod, tmp_path):
    """A write that fails part-way (here the file-size limit, EFBIG, in a
    fresh process; a full disk is the same path): the module is built and
    returned, a RuntimeWarning says why, no temporary file or cache file is
    left and no descriptor leaks; the next process without the limit
    writes the file and the one after hits."""
    d = tmp_path / "cache"
    code = textwrap.dedent('''
        import json, os, resource, signal, sys, warnings
        import torch
        import wcache.torch as wt
        import %s as mod
        limit = int(sys.argv[2])
        if limit:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        fds = len(os.listdir("/proc/self/fd"))
        how = {}
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            m = wt.empty_model(mod.make, "net", cache=sys.argv[1], how=how)
        print(json.dumps({"how": how, "warnings": [str(x.message) for x in w],
                          "leaked": len(os.listdir("/proc/self/fd")) - fds,
                          "meta": all(p.is_meta for p in m.parameters()),
                          "inv": m.rotary.inv_freq.tolist()}))
    ''' % mod.__name__)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PKG, os.path.dirname(mod.__file__)]),
               PYTHONDONTWRITEBYTECODE="1")

    def run(limit):
        p = subprocess.run([sys.executable, "-c", code, str(d), str(limit)], env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        import json
        return json.loads(p.stdout.strip().splitlines()[-1])

    want_inv = mod.make().rotary.inv_freq.tolist()
    r = run(1024)
    how = r["how"]
    assert how["cache"] == "miss" and not how["saved"], how
    assert how["why"].startswith("cannot write %s: " % how["path"]) and "too large" in how["why"], how
    assert r["warnings"] == ["wcache.torch.empty_model: module not cached: " + how["why"]], r
    assert r["leaked"] == 0 and r["meta"] and r["inv"] == want_inv, r
    assert os.listdir(str(d)) == [], os.listdir(str(d))
    r = run(0)
    assert r["how"]["cache"] == "miss" and r["how"]["saved"] and r["warnings"] == [], r
    assert os.listdir(str(d)) == [os.path.basename(r["how"]["path"])]
    r = run(0)
    assert r["how"]["cache"] == "hit" and r["inv"] == want_inv, r


def test_code_without_a_source_file_is_not_kept(tmp_path):
    """A class defined where no file holds it (a script given with -c, an
    interactive session, a notebook: __main__ without __file__) has no
    source to stat, so an edit of it could not be seen: such a module is
    built and not kept (a RuntimeWarning says why), never served stale to
    the next process whose class builds another module."""
    code = textwrap.dedent('''
        import json, sys, warnings
        import torch
        import wcache.torch as wt
        N = %d
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(N)])
        how = {}
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            m = wt.empty_model(Net, "net", cache=sys.argv[1], how=how)
        print(json.dumps({"cache": how["cache"], "saved": how["saved"], "why": how["why"],
                          "layers": len(m.layers), "warnings": [str(x.message) for x in w]}))
    ''')
    env = dict(os.environ, PYTHONPATH=PKG)

    def run(n):
        p = subprocess.run([sys.executable, "-c", code % n, str(tmp_path / "cache")], env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        import json
        return json.loads(p.stdout.strip().splitlines()[-1])

    first = run(3)
    assert first["layers"] == 3 and not first["saved"], first
    assert "__main__" in first["why"] and "no source file" in first["why"], first
    assert any("not cached" in w for w in first["warnings"]), first
    edited = run(4)     # the class edited: 4 layers, never the 3 of before
    assert edited["layers"] == 4 and edited["cache"] == "miss", edited


def test_builtin_of_an_extension_submodule_is_kept(tmp_path):
    """A module keeping one of torch's builtins, which live in submodules
    the extension makes without a file (torch.nn.functional.gelu is
    torch._C._nn.gelu; transformers' GELU activation keeps it): kept, with
    the nearest package's file (torch._C's) as its source, and a hit in a
    fresh process. (The rule for code without a source file refused it, so
    no GELU model was ever cached.)"""
    src = tmp_path / "src"
    src.mkdir()
    (src / "gelu_net.py").write_text(textwrap.dedent('''
        import torch


        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 4)
                self.act = torch.nn.functional.gelu
    '''))
    old = time.time() - 60
    os.utime(str(src / "gelu_net.py"), (old, old))
    code = textwrap.dedent('''
        import json, sys, warnings
        import torch
        import wcache.torch as wt
        from wcache import _modcache
        import gelu_net
        how = {}
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            m = wt.empty_model(gelu_net.Net, "gelu", cache=sys.argv[1], how=how)
        srcs = []
        if how["saved"]:
            with open(how["path"], "rb") as f:
                srcs = [s[0] for s in json.loads(f.readline())["sources"]]
        print(json.dumps({"cache": how["cache"], "saved": how["saved"], "why": how["why"],
                          "gelu": m.act is torch.nn.functional.gelu, "sources": srcs,
                          "warnings": [str(x.message) for x in w]}))
    ''')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PKG, str(src)]))

    def run():
        p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "cache")], env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        import json
        return json.loads(p.stdout.strip().splitlines()[-1])

    assert torch.nn.functional.gelu.__module__ == "torch._C._nn"
    first = run()
    assert first["saved"] and first["warnings"] == [] and first["gelu"], first
    assert "torch._C" in first["sources"] and "gelu_net" in first["sources"], first
    again = run()
    assert again["cache"] == "hit" and again["gelu"], again


def test_tensor_attributes_are_kept(mod, tmp_path):
    """Attributes an engine sets on its parameters and buffers (vLLM-style
    weight_loader, output_dim) come back on a hit as the miss built them,
    what they name shared with the module (the bound method's module is
    the module's own)."""
    def build():
        m = mod.make()
        w = m.blocks[0].attn.weight
        w.output_dim = 0
        w.weight_loader = m.blocks[0].forward          # names the module itself
        m.counts.tag = {"kind": "counts"}
        return m
    d = tmp_path / "cache"
    how = {}
    first = wt.empty_model(build, "attrs", cache=str(d), how=how)
    assert how["saved"], how
    again = wt.empty_model(build, "attrs", cache=str(d), how=how)
    assert how["cache"] == "hit", how
    w = again.blocks[0].attn.weight
    assert w.output_dim == 0 and again.counts.tag == {"kind": "counts"}
    assert w.weight_loader.__self__ is again.blocks[0]
    assert vars(again.blocks[1].attn.weight) == vars(first.blocks[1].attn.weight) == {}


def test_leftover_temporary_file_of_this_pid(mod, tmp_path):
    """A temporary file left by a dead writer that had this process's pid
    (a container's engine is pid 1 at every start; pids wrap) does not keep
    this process from writing the cache file: the names of temporary files
    are not the pid alone."""
    d = tmp_path / "cache"
    _, how = cached(mod, d)
    name = os.path.basename(how["path"])
    os.unlink(how["path"])
    left = d / (".tmp-%d-%s" % (os.getpid(), name))
    left.write_bytes(b"half a file")
    _, how = cached(mod, d)
    assert how["cache"] == "miss" and how["saved"] and how["warnings"] == [], how
    assert cached(mod, d)[1]["cache"] == "hit"


def test_prepare_without_a_model(tmp_path):
    """python -m wcache prepare of a path that is no model directory (none
    there, a file, a directory without config.json) is a usage error
    (exit 2) that names the path, not a traceback."""
    tf = tmp_path / "standin" / "transformers"
    tf.mkdir(parents=True)
    for name, text in STANDIN.items():
        (tf / name).write_text(textwrap.dedent(text))
    afile = tmp_path / "afile"
    afile.write_text("x")
    empty = tmp_path / "empty"
    empty.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tf.parent), PKG]))
    for bad in (tmp_path / "none", afile, empty):
        p = subprocess.run([sys.executable, "-m", "wcache", "prepare", str(bad), "--cache", str(tmp_path / "c")],
                           env=env, capture_output=True, text=True, timeout=120)
        assert p.returncode == 2, (bad, p.returncode, p.stderr)
        assert "Traceback" not in p.stderr and str(bad) in p.stderr and "config.json" in p.stderr, p.stderr
    # a buffers device torch cannot parse: usage too, naming it. Not under
    # make test SANITIZE=address: torch's parse throws a C++ exception,
    # which the libasan preloaded into python cannot intercept (its
    # __cxa_throw check aborts the process); the plain run checks it
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        return
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"vocab_size": 16, "hidden_size": 8, "bos_token_id": 1}')
    p = subprocess.run([sys.executable, "-m", "wcache", "prepare", str(model), "--cache", str(tmp_path / "c"),
                        "--buffers-device", "gpu0"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "gpu0" in p.stderr, (p.returncode, p.stderr)


def test_cache_path_as_bytes(mod, tmp_path):
    """cache= takes what os takes for a path: bytes too (here not UTF-8),
    the same directory and file as the str that names it."""
    d = os.fsdecode(os.fsencode(str(tmp_path)) + b"/cache-\xff")
    how = {}
    wt.empty_model(mod.make, "net", cache=os.fsencode(d), how=how)
    assert how["cache"] == "miss" and how["saved"] and how["path"].startswith(d + os.sep), how
    _, again = cached(mod, d)
    assert again["cache"] == "hit" and again["path"] == how["path"], again
