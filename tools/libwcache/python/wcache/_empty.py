# SPDX-License-Identifier: MIT
"""Construct an nn.Module with its parameters on the meta device and its
buffers real, for wcache.torch.load_into to bind (wcache.torch.init_empty).

Not torch.device("meta"): that puts on meta the buffers a constructor
computes too (a rotary inv_freq: never served, so never bound), and it is
torch >= 2.0 only. Here, for any torch >= 1.10 (CI: 1.13):

  always     Module.register_parameter moves a parameter made elsewhere to
             meta (a new Parameter sharing the attributes of the old one),
             Module.register_buffer moves a buffer to buffers_device.
  skip_init  (default) leaves out what only makes values that load_into
             replaces anyway:
   meta_layers      torch's own layers (Linear, Embedding, the norms, the
                    convolutions: modules whose state is parameters only)
                    are built with device="meta", so their weights are
                    never allocated on the CPU, copied to meta and
                    re-wrapped (a 16 GB model's worth of allocations and
                    frees otherwise);
   skip_torch_init  torch.nn.init's in-place initialisers return at once
                    for a meta tensor (there they compute nothing; a real
                    tensor, a buffer say, is still initialised);
   hf_buffers_only  transformers' per-module init (PreTrainedModel.
                    _initialize_weights, which post_init runs on every
                    module) runs only for modules that hold buffers:
                    transformers 5 recomputes buffers there (the rotary
                    inv_freq from the config), so they come out as
                    from_pretrained makes them, while the other modules'
                    parameters are meta and load_into replaces them. Tying
                    (tie_weights) is not touched.
Transformers is never imported from here: its patch is made when
transformers.modeling_utils is in sys.modules, at entry or at the first
parameter or buffer registered after it was imported (its model classes
import it before they build anything).

The patches are class and module attributes, so process-wide: one block at
a time in a process (a second one, nested or from another thread, raises
RuntimeError), undone on exit even when the constructor raises. Code
imported inside a block that copies a patched name (`from torch.nn.init
import normal_`) keeps the wrapper, which only differs on meta tensors.
"""
import contextlib
import functools
import gc
import inspect
import sys
import threading
import types

import torch

PARTS = ("meta_layers", "skip_torch_init", "hf_buffers_only")

# torch.nn classes whose constructors make parameters only (no buffers)
# from factory kwargs: safe to build on meta whole
_LAYERS = ("Linear", "Bilinear", "Embedding", "EmbeddingBag", "LayerNorm", "GroupNorm", "RMSNorm",
           "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")
_INITS = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
          "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
          "sparse_")
# modules that bind torch.nn.init's functions under their own names (as
# transformers' no_init_weights lists them)
_INIT_USERS = ("torch.nn.init", "torch.nn.modules.activation", "torch.nn.modules.transformer",
               "torch.nn.modules.linear", "torch.nn.modules.loss", "torch.nn.modules.batchnorm",
               "torch.nn.modules.conv", "torch.nn.modules.normalization", "torch.nn.modules.rnn",
               "torch.nn.modules.sparse")
_MISSING = object()
_busy = threading.Lock()


class Empty:
    """What an init_empty block did (yielded by it): parts (the skip_init
    parts in force), transformers (True once transformers' per-module init
    was patched), hf_ran / hf_skipped (modules whose transformers init ran,
    for holding buffers, or was left out)."""

    def __init__(self, parts):
        self.parts = frozenset(parts)
        self.transformers = False
        self.hf_ran = 0
        self.hf_skipped = 0

    def __repr__(self):
        return "Empty(parts=%s, transformers=%s, hf_ran=%d, hf_skipped=%d)" % (
            sorted(self.parts), self.transformers, self.hf_ran, self.hf_skipped)


class _Patches:
    """Attribute replacements, undone in reverse order."""

    def __init__(self):
        self.undo = []

    def set(self, obj, name, value):
        self.undo.append((obj, name, vars(obj).get(name, _MISSING)))
        setattr(obj, name, value)

    def restore(self):
        while self.undo:
            obj, name, old = self.undo.pop()
            if old is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, old)


def _on_meta(init, pos):
    """cls.__init__ with device="meta" (pos: the index of device among the
    positional arguments after self)."""
    @functools.wraps(init)
    def build_on_meta(self, *args, **kwargs):
        if len(args) > pos:
            args = args[:pos] + ("meta",) + args[pos + 1:]
        else:
            kwargs["device"] = "meta"
        init(self, *args, **kwargs)
    return build_on_meta


def _skip_meta(fn):
    @functools.wraps(fn)
    def init_unless_meta(tensor, *args, **kwargs):
        if getattr(tensor, "is_meta", False):
            return tensor
        return fn(tensor, *args, **kwargs)
    return init_unless_meta


# the wrappers, made once per original (finding the device argument costs
# more than the rest of a block's entry); None: no device argument
_wrappers = {}


def _wrapper(key, make):
    if key not in _wrappers:
        _wrappers[key] = make()
    return _wrappers[key]


def _param_names(init):
    """The names of inspect.signature(init).parameters, in its order
    (positional, *args, keyword-only, **kwargs). A plain function's code
    object says them in about 1 us; inspect.signature costs 30-100 us a
    class, 13 classes in the first block of a process. Anything else (a
    builtin, a wrapped function, one with __signature__) goes through
    inspect. None when inspect cannot say."""
    code = getattr(init, "__code__", None)
    if type(init) is types.FunctionType and code is not None and \
            not hasattr(init, "__wrapped__") and not hasattr(init, "__signature__"):
        v, n, k = code.co_varnames, code.co_argcount, code.co_kwonlyargcount
        names, i = list(v[:n]), n + k
        if code.co_flags & inspect.CO_VARARGS:
            names.append(v[i])
            i += 1
        names.extend(v[n:n + k])
        if code.co_flags & inspect.CO_VARKEYWORDS:
            names.append(v[i])
        return names
    try:
        return list(inspect.signature(init).parameters)
    except (TypeError, ValueError):
        return None


def _layer_wrapper(init):
    params = _param_names(init)
    if params is None or "device" not in params:
        return None
    return _on_meta(init, params.index("device") - 1)


def _patch_layers(patches):
    for name in _LAYERS:
        cls = getattr(torch.nn, name, None)
        if cls is None:    # a layer this torch lacks (not None.__init__)
            continue
        init = cls.__init__
        wrapper = _wrapper(("layer", init), lambda: _layer_wrapper(init))
        if wrapper is not None:
            patches.set(cls, "__init__", wrapper)


def _patch_inits(patches):
    import torch.nn.init as nn_init
    wrapped = {}
    for name in _INITS:
        fn = getattr(nn_init, name, None)
        if fn is not None:
            wrapped[name] = (fn, _wrapper(("init", fn), lambda: _skip_meta(fn)))
    for modname in _INIT_USERS:
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        for name, (fn, wrapper) in wrapped.items():
            if getattr(mod, name, None) is fn:
                patches.set(mod, name, wrapper)


def _patch_transformers(patches, state):
    """True when done with (patched, or nothing to patch); False while
    transformers.modeling_utils is not imported."""
    mu = sys.modules.get("transformers.modeling_utils")
    if mu is None:
        return False
    base = getattr(mu, "PreTrainedModel", None)
    orig = getattr(base, "_initialize_weights", None)
    if orig is None:
        return True

    def initialize_if_buffers(self, module, *args, **kwargs):
        if getattr(module, "_is_hf_initialized", False):
            return None  # done already (by a sub-model's post_init)
        if any(b is not None for b in module._buffers.values()):
            state.hf_ran += 1
            return orig(self, module, *args, **kwargs)
        # what the original does besides _init_weights
        state.hf_skipped += 1
        module._is_hf_initialized = True
        return None

    patches.set(base, "_initialize_weights", initialize_if_buffers)
    state.transformers = True
    return True


@contextlib.contextmanager
def no_gc():
    """The cyclic garbage collector paused inside, restored after (when it
    was on at entry). A model's construction or unpickling makes thousands
    of containers and no garbage cycles; the collections they trigger
    (each scanning every young object, now and then all of them: tens of
    milliseconds once transformers is imported) find nothing."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def init_empty(buffers_device=None, skip_init=True, parts=None):
    """Inside, nn.Module constructors put parameters on the meta device
    (no memory) and buffers on buffers_device (None: where the
    constructor put them), so that non-persistent buffers (rotary
    inv_freq) are real while the weights wait for load_into.

    skip_init (default True): leave out the weight initialisation that
    load_into makes moot (torch's layers built on meta, torch.nn.init on
    meta tensors, transformers' init of modules without buffers; see the
    module's comment). skip_init=False: every constructor and init runs,
    on meta (what init_empty did before: slower, same result).
    parts: a subset of PARTS instead of skip_init (benchmarks, to time
    each part). Yields an Empty saying what was done.

    The cyclic garbage collector is paused inside the block (no_gc):
    construction makes no garbage cycles to find.

    One block at a time per process: entering a second (nested, or from
    another thread) raises RuntimeError."""
    if parts is None:
        parts = PARTS if skip_init else ()
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError("wcache.torch.init_empty: unknown part(s) %s: pass a subset of %s"
                         % (sorted(unknown), list(PARTS)))
    if not _busy.acquire(blocking=False):
        raise RuntimeError("wcache.torch.init_empty: a block is already active in this process "
                           "(nested, or in another thread); its patches are process-wide: "
                           "build all modules inside one block, or leave it first")
    state = Empty(parts)
    patches = _Patches()
    hf_pending = ["hf_buffers_only" in parts]
    orig_param = torch.nn.Module.register_parameter
    orig_buf = torch.nn.Module.register_buffer

    def hf_check():
        if hf_pending[0] and _patch_transformers(patches, state):
            hf_pending[0] = False

    def register_parameter(module, name, param):
        hf_check()
        orig_param(module, name, param)
        if param is not None and not param.is_meta:
            p = module._parameters[name]
            q = module._parameters[name] = type(p)(p.to("meta"), requires_grad=p.requires_grad)
            # the attributes, one dict: what the engine set on its Parameter
            # before and sets after (vLLM's weight_loader, output_dim)
            q.__dict__ = p.__dict__

    def register_buffer(module, name, tensor, persistent=True):
        hf_check()
        if tensor is not None and buffers_device is not None:
            tensor = tensor.to(buffers_device)
        orig_buf(module, name, tensor, persistent)

    try:
        patches.set(torch.nn.Module, "register_parameter", register_parameter)
        patches.set(torch.nn.Module, "register_buffer", register_buffer)
        if "meta_layers" in parts:
            _patch_layers(patches)
        if "skip_torch_init" in parts:
            _patch_inits(patches)
        hf_check()
        with no_gc():
            yield state
    finally:
        patches.restore()
        _busy.release()
