# SPDX-License-Identifier: MIT
"""wcache.torch.init_empty on the CPU (torch 1.13 in CI, no transformers):
a plain-torch module with Linear, Embedding, LayerNorm and Conv1d layers, a
parameter of its own, a persistent buffer and a rotary-like non-persistent
buffer computed in __init__. Under init_empty every parameter is on meta
and never allocated elsewhere, no weight initialiser runs, the buffers are
real, equal to a normal construction's and on buffers_device; load_into
binds everything; the patches are undone after the block, also when the
constructor raises; a second block while one is active is refused.
transformers' part is checked against a stand-in with transformers 5's call
structure (post_init -> init_weights -> _initialize_weights ->
_init_weights, tie_weights); the real one runs in test_gpu_models.py."""
import os
import subprocess
import sys
import threading
import types

import pytest

from conftest import PKG

torch = pytest.importorskip("torch")
import wcache.torch as wt  # noqa: E402
from wcache import _empty  # noqa: E402

nn = torch.nn


def inv_freq(dim, theta=10000.0):
    return 1.0 / (theta ** (torch.arange(0, dim, 2).float() / dim))


class Rotary(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("inv_freq", inv_freq(dim), persistent=False)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(64, 16, padding_idx=0)
        self.proj = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.conv = nn.Conv1d(32, 8, 3, padding=1)
        self.scale = nn.Parameter(torch.ones(8))
        self.rotary = Rotary(8)
        self.register_buffer("counts", torch.arange(5).float())  # persistent

    def forward(self, ids):
        x = self.norm(self.proj(self.embed(ids)))
        y = self.conv(x.transpose(1, 2)).transpose(1, 2) * self.scale
        return y * self.rotary.inv_freq.repeat(2) + self.counts.sum()


def devices():
    return [None, "cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("skip_init", [True, False])
@pytest.mark.parametrize("where", devices())
def test_params_meta_buffers_real(skip_init, where):
    ref = Net()
    with wt.init_empty(buffers_device=where, skip_init=skip_init) as e:
        net = Net()
    assert e.parts == (set(_empty.PARTS) if skip_init else set())
    assert [n for n, _ in net.named_parameters()] == [n for n, _ in ref.named_parameters()]
    for n, p in net.named_parameters():
        assert p.is_meta and isinstance(p, nn.Parameter), n
        assert p.shape == dict(ref.named_parameters())[n].shape, n
    want = torch.device(where or "cpu")
    for n, b in ref.named_buffers():
        got = dict(net.named_buffers())[n]
        assert got.device.type == want.type, (n, got.device)
        assert got.dtype == b.dtype and torch.equal(got.cpu(), b), n
    assert "rotary.inv_freq" not in net.state_dict()  # the non-persistent one


def test_load_into_binds_everything():
    torch.manual_seed(1)
    ref = Net()
    served = {n: t.detach().clone() for n, t in ref.state_dict().items()}
    with wt.init_empty():
        net = Net()
    r = wt.load_into(net, served)
    assert r.missing == [] and r.unexpected == [] and r.tied == {}
    assert sorted(r.bound) == sorted(served)
    for n, t in net.state_dict().items():
        assert t.data_ptr() == served[n].data_ptr(), n  # bound, not copied
    ids = torch.tensor([[0, 3, 9, 63]])
    with torch.no_grad():
        assert torch.equal(net(ids), ref(ids))


class Counter:
    """Counts calls of torch.nn.init's initialisers and of the tensor
    methods they end in, wrapped before init_empty is entered (so that
    init_empty's own wrappers sit on top of them)."""

    def __init__(self, monkeypatch):
        self.calls = []
        for name in _empty._INITS:
            fn = getattr(nn.init, name, None)
            if fn is not None:
                monkeypatch.setattr(nn.init, name, self.wrap(name, fn))
        for name in ("uniform_", "normal_"):  # the random ones
            monkeypatch.setattr(torch.Tensor, name, self.wrap("Tensor." + name, getattr(torch.Tensor, name)))
        self.empty = []
        real_empty = torch.empty

        def empty(*a, **k):
            self.empty.append(str(k.get("device")))
            return real_empty(*a, **k)
        monkeypatch.setattr(torch, "empty", empty)

    def wrap(self, name, fn):
        def counted(*a, **k):
            self.calls.append(name)
            return fn(*a, **k)
        return counted


def test_no_weight_init_runs(monkeypatch):
    c = Counter(monkeypatch)
    with wt.init_empty(skip_init=False):
        Net()
    # the counters see what the layers' reset_parameters do otherwise
    assert "kaiming_uniform_" in c.calls and "normal_" in c.calls, c.calls
    assert "None" in c.empty  # and their weights made on the CPU first
    c.calls[:], c.empty[:] = [], []
    with wt.init_empty() as e:
        net = Net()
        # a real tensor (a buffer, say) is still initialised inside
        real = nn.init.constant_(torch.zeros(3), 2.0)
    assert c.calls == ["constant_"], c.calls
    assert torch.equal(real, torch.full((3,), 2.0))
    assert c.empty and set(c.empty) == {"meta"}, c.empty  # torch's layers: on meta directly
    assert all(p.is_meta for p in net.parameters())
    # (transformers is patched only where another test file imported it)
    assert e.transformers == ("transformers.modeling_utils" in sys.modules)
    # a layer too large for any host is no cost
    with wt.init_empty():
        huge = nn.Linear(1 << 20, 1 << 20, False, "cpu")  # device positional: still meta
    assert huge.weight.is_meta and huge.weight.shape == (1 << 20, 1 << 20)


def targets():
    """Every attribute init_empty may patch, with its value now."""
    out = {("Module", n): getattr(nn.Module, n) for n in ("register_parameter", "register_buffer")}
    for name in _empty._LAYERS:
        cls = getattr(nn, name, None)
        if cls is not None:
            out[(name, "__init__")] = vars(cls).get("__init__")
    for modname in _empty._INIT_USERS:
        mod = sys.modules.get(modname)
        for name in _empty._INITS:
            if mod is not None and hasattr(mod, name):
                out[(modname, name)] = getattr(mod, name)
    return out


class Boom(Exception):
    pass


def test_patches_undone_even_on_error():
    before = targets()
    with wt.init_empty():
        assert targets() != before
    assert targets() == before

    class Bad(Net):
        def __init__(self):
            super().__init__()
            raise Boom("constructor failed")
    for skip in (True, False):
        with pytest.raises(Boom):
            with wt.init_empty(skip_init=skip):
                Bad()
        assert targets() == before
    # and the block can be entered again
    with wt.init_empty():
        assert Net().proj.weight.is_meta
    assert not Net().proj.weight.is_meta


def test_one_block_at_a_time():
    with wt.init_empty():
        with pytest.raises(RuntimeError, match="already active"):
            with wt.init_empty():
                pass
        assert Net().proj.weight.is_meta  # the first block is intact
    inside, leave = threading.Event(), threading.Event()

    def holder():
        with wt.init_empty():
            inside.set()
            leave.wait(60)
    t = threading.Thread(target=holder)
    t.start()
    try:
        assert inside.wait(60)
        with pytest.raises(RuntimeError, match="another thread"):
            with wt.init_empty():
                pass
    finally:
        leave.set()
        t.join(60)
    with wt.init_empty():
        pass
    with pytest.raises(ValueError, match="unknown part"):
        with wt.init_empty(parts=["meta_layers", "bogus"]):
            pass


def fake_transformers(recompute):
    """A stand-in for transformers.modeling_utils with transformers 5's
    structure: post_init -> init_weights -> (each module, children first)
    _initialize_weights -> _init_weights, then tie_weights. _init_weights
    counts its calls and recomputes Rotary's buffer (as transformers 5 does
    for its rotary modules)."""
    mu = types.ModuleType("transformers.modeling_utils")
    calls = []

    class PreTrainedModel(nn.Module):
        def post_init(self):
            self.init_weights()

        def init_weights(self):
            for m in reversed(list(self.modules())):
                self._initialize_weights(m)
            self.tie_weights()

        def _initialize_weights(self, module, is_remote_code=False):
            if getattr(module, "_is_hf_initialized", False):
                return
            self._init_weights(module)
            module._is_hf_initialized = True

        def _init_weights(self, module):
            calls.append(type(module).__name__)
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight)
            if isinstance(module, Rotary):
                module.inv_freq.copy_(recompute(module.inv_freq.numel() * 2))

        def tie_weights(self):
            self.head.weight = self.net.embed.weight

    class Inner(PreTrainedModel):  # a sub-model: its post_init runs first
        def __init__(self):
            super().__init__()
            self.rotary = Rotary(8)
            self.post_init()

        def tie_weights(self):
            pass

    class Model(PreTrainedModel):
        def __init__(self):
            super().__init__()
            self.net = Net()
            self.inner = Inner()
            self.head = nn.Linear(16, 64, bias=False)
            self.post_init()

    mu.PreTrainedModel = PreTrainedModel
    return mu, Model, calls


@pytest.mark.parametrize("late", [False, True])
def test_transformers_init_only_for_buffers(monkeypatch, late):
    """late: transformers.modeling_utils imported inside the block (as
    from_config does in a fresh process), not before it."""
    mu, Model, calls = fake_transformers(inv_freq)
    orig = mu.PreTrainedModel._initialize_weights
    # a process where the real transformers was imported before (the GPU
    # machine runs test_gpu_models first in one pytest process): "late"
    # means not imported yet when the block begins, as in a fresh process
    monkeypatch.delitem(sys.modules, "transformers.modeling_utils", raising=False)
    with torch.no_grad():
        if not late:
            monkeypatch.setitem(sys.modules, "transformers.modeling_utils", mu)
        with wt.init_empty() as e:
            if late:
                monkeypatch.setitem(sys.modules, "transformers.modeling_utils", mu)
            m = Model()
    assert mu.PreTrainedModel._initialize_weights is orig  # undone
    # the modules that hold buffers (the rotaries' non-persistent ones, Net's persistent one),
    # each once
    assert e.transformers and sorted(calls) == ["Net", "Rotary", "Rotary"], calls
    assert e.hf_ran == 3 and e.hf_skipped == len(list(m.modules())) - 3
    assert all(getattr(x, "_is_hf_initialized", False) for x in m.modules())
    assert m.head.weight is m.net.embed.weight  # tying still runs
    assert torch.equal(m.net.rotary.inv_freq, inv_freq(8))
    # what transformers recomputes is what the buffer ends up as
    mu, Model, calls = fake_transformers(lambda d: inv_freq(d) * 2)
    monkeypatch.setitem(sys.modules, "transformers.modeling_utils", mu)
    with torch.no_grad(), wt.init_empty():
        m = Model()
    assert torch.equal(m.net.rotary.inv_freq, inv_freq(8) * 2)
    assert torch.equal(m.inner.rotary.inv_freq, inv_freq(8) * 2)
    # skip_init=False: transformers' init of every module, as before
    mu, Model, calls = fake_transformers(inv_freq)
    monkeypatch.setitem(sys.modules, "transformers.modeling_utils", mu)
    with torch.no_grad(), wt.init_empty(skip_init=False) as e:
        m = Model()
    assert not e.transformers and len(calls) == len(list(m.modules()))


def test_never_imports_transformers(tmp_path):
    """A transformers on the path that the program did not import stays
    unimported (a package here that would say so)."""
    fake = tmp_path / "transformers"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise SystemExit('wcache imported transformers')\n")
    code = ("import sys, torch, wcache.torch as wt\n"
            "with wt.init_empty() as e:\n"
            "    m = torch.nn.Linear(4, 4)\n"
            "assert m.weight.is_meta and not e.transformers\n"
            "print('transformers' in sys.modules)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), PKG]))
    p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       env=env, timeout=120)
    assert p.returncode == 0 and p.stdout.decode().strip().splitlines()[-1] == "False", p.stdout.decode()


def test_param_names_as_inspect_says():
    """_param_names (a plain function's code object, not inspect.signature:
    the first block's entry) gives inspect.signature's names in its order,
    for every torch layer it patches and the shapes a signature takes;
    wrapped functions and builtins go through inspect itself."""
    import functools
    import inspect

    def pos(self, a, b=1, device=None, dtype=None):
        pass

    def kwonly(self, a, *, device=None, dtype=None):
        pass

    def varargs(self, a, *rest, device=None, **kw):
        pass

    def posonly(self, a, /, b, device=None):
        pass

    def nodev(self, *args, **kwargs):
        pass

    @functools.wraps(pos)
    def wrapped(*args, **kwargs):
        pass

    fns = [pos, kwonly, varargs, posonly, nodev, wrapped, object.__init__]
    fns += [getattr(nn, n).__init__ for n in _empty._LAYERS if hasattr(nn, n)]
    for fn in fns:
        assert _empty._param_names(fn) == list(inspect.signature(fn).parameters), fn
    assert _empty._param_names(wrapped)[3] == "device"   # through __wrapped__
    # the position given to _on_meta: device among the arguments after self
    assert _empty._layer_wrapper(nodev) is None
    assert _empty._layer_wrapper(getattr(nn.Linear, "__init__")) is not None
    assert "device" in _empty._param_names(nn.Linear.__init__)


def test_missing_layer_is_skipped(monkeypatch):
    """A layer this torch lacks (RMSNorm before 2.4) is skipped, not looked
    up as None.__init__ (a builtin's signature: the slowest of the lot)."""
    seen = []
    real = _empty._param_names
    monkeypatch.setattr(_empty, "_param_names", lambda f: seen.append(f) or real(f))
    monkeypatch.setattr(_empty, "_wrappers", {})
    monkeypatch.setattr(_empty, "_LAYERS", ("Linear", "NoSuchLayer"))
    with wt.init_empty():
        pass
    assert seen == [nn.Linear.__init__], seen


def test_parameter_attributes_kept():
    """An engine's layer that sets attributes on its Parameter before and
    after registering it (vLLM's set_weight_attrs: output_dim, then
    weight_loader) finds them all on the meta parameter the block puts in
    its place."""
    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            w = nn.Parameter(torch.empty(4, 3), requires_grad=False)
            w.output_dim = 0
            self.register_parameter("weight", w)
            w.weight_loader = self.load     # on the engine's own reference
            self.bias = nn.Parameter(torch.zeros(4))
            self.bias.tag = "b"

        def load(self, *a):
            pass
    for skip in (True, False):
        with wt.init_empty(skip_init=skip):
            m = Layer()
        assert m.weight.is_meta and not m.weight.requires_grad
        assert m.weight.output_dim == 0 and m.weight.weight_loader == m.load
        assert m.bias.is_meta and m.bias.tag == "b"
