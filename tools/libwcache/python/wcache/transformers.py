# SPDX-License-Identifier: MIT
"""transformers' from_pretrained, bound to the weights a daemon serves.

    import torch, wcache
    model = wcache.transformers.from_pretrained("Qwen/Qwen3-8B", device="cuda:0",
                                                dtype=torch.bfloat16)
    out = model.generate(ids, max_new_tokens=32)

from_pretrained returns the model transformers' from_pretrained returns
(the class its Auto class chooses, or cls=), in eval mode, its weights
tied as from_pretrained ties them and its generation config read from the
model directory, but with every parameter pointing at the memory the
device's rank daemon serves: no read from disk, no copy (the module is
built empty through the module cache, wcache.torch.empty_pretrained, and
bound by wcache.torch.load_into, strict).

The flow: name_or_path is a directory, or a hub id resolved offline in the
Hugging Face cache (cache_dir=, else $HF_HUB_CACHE, else $HF_HOME/hub, else
$XDG_CACHE_HOME/huggingface/hub or ~/.cache/huggingface/hub:
models--ORG--NAME/refs/<revision or main> -> snapshots/<sha>; a 40-hex
revision directly); the device (torch's spellings, wcache._device) names
the daemon under runtime_dir (else $WCACHE_RUNTIME_DIR, else libwcache's
default: $WCACHE_SOCKET_TEMPLATE, $XDG_RUNTIME_DIR/wcache, /tmp/wcache-$UID);
HELLO carries the identity of that directory, so a daemon serving other
weights, another layout or another rank is never bound (IdentityMismatch).

Where no daemon serves that model there (none runs, another model, a
mismatch, asleep, the directory is not in the hub cache, a kwarg that
cannot be honoured zero-copy, served tensors that do not fit the module)
it falls back to cls.from_pretrained itself, with one
wcache.FallbackWarning saying why; fallback="error" raises
wcache.NotServed instead. A bad device spelling or fallback value is a
ValueError either way (a mistake, not a missing daemon).

Costs: the attach (milliseconds) and the module from the module cache (a
few milliseconds; the first start of a model builds it, tens of ms).
"""
import errno
import os
import re
import warnings

from . import _device, errors
from ._core import connect

# kwargs of from_pretrained that the served path honours: passed to
# from_config (build), to AutoConfig too (both), or with nothing to do
# once the weights are served (local: where and how files are fetched)
_BUILD = ("attn_implementation",)
_BOTH = ("trust_remote_code",)
_LOCAL = ("cache_dir", "local_files_only", "token", "low_cpu_mem_usage", "force_download",
          "proxies", "resume_download")
_SHA = re.compile(r"[0-9a-f]{40}\Z")


def hub_cache(cache_dir=None):
    """The Hugging Face hub cache directory, as huggingface_hub finds it."""
    if cache_dir:
        return os.fspath(cache_dir)
    d = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if d:
        return d
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface")
    return os.path.join(home, "hub")


def resolve(name_or_path, revision=None, cache_dir=None):
    """(model directory, None), or (None, why): name_or_path itself when it
    is a directory, else the hub id's snapshot in the hub cache (offline:
    nothing is downloaded)."""
    p = os.fsdecode(os.fspath(name_or_path))
    if os.path.isdir(p):
        return p, None
    if os.path.exists(p) or p.startswith(("/", ".", "~")) or p.count("/") > 1 or not p:
        return None, "%r is not a model directory%s" % (
            p, " (it is a file)" if os.path.isfile(p) else " nor a hub id (ORG/NAME)")
    hub = hub_cache(cache_dir)
    repo = os.path.join(hub, "models--" + p.replace("/", "--"))
    if not os.path.isdir(repo):
        return None, "%s is not in the Hugging Face cache (no %s; download it first, e.g. " \
            "huggingface-cli download %s)" % (p, repo, p)
    rev = revision or "main"
    sha = rev
    if not _SHA.match(rev):
        ref = os.path.join(repo, "refs", rev)
        try:
            with open(ref) as f:
                sha = f.read().strip()
        except OSError as e:
            return None, "%s has no revision %r in the Hugging Face cache (%s: %s)" % (
                p, rev, ref, e.strerror or e)
    snap = os.path.join(repo, "snapshots", sha)
    if not os.path.isfile(os.path.join(snap, "config.json")):
        return None, "%s revision %r: %s has no config.json (an incomplete download?)" % (p, rev, snap)
    return snap, None


def _unhonoured(kwargs):
    """The first kwarg the served path cannot honour without a copy (or a
    different module: quantization_config, device_map, a subfolder...),
    as the sentence saying so; None when every one can be."""
    for k, v in kwargs.items():
        if k in _BUILD or k in _BOTH or k in _LOCAL:
            continue
        if k == "use_safetensors" and v in (None, True):
            continue
        return "%s=%r cannot be honoured over served weights (wcache serves the checkpoint's " \
            "tensors as they are, one device)" % (k, v)
    return None


def _version(transformers):
    """transformers' (major, minor) as ints ((0, 0) when not a number)."""
    m = re.match(r"(\d+)\.(\d+)", getattr(transformers, "__version__", ""))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _dtype(dtype, path, served, transformers):
    """The torch dtype the module is built with: dtype itself, a torch
    dtype's name, or "auto" (config.json's dtype/torch_dtype, else the
    first floating served tensor's); None is transformers' default ("auto"
    from transformers 5 on, torch's default dtype before)."""
    import json
    import torch
    if dtype is None:
        dtype = "auto" if _version(transformers) >= (5, 0) else torch.get_default_dtype()
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        try:
            with open(os.path.join(path, "config.json")) as f:
                cfg = json.load(f)
        except (OSError, ValueError):
            cfg = {}
        name = cfg.get("dtype") or cfg.get("torch_dtype")
        if name is None:
            for t in served.manifest:
                if t.dtype in ("BF16", "F16", "F32", "F64"):
                    name = {"BF16": "bfloat16", "F16": "float16", "F32": "float32",
                            "F64": "float64"}[t.dtype]
                    break
        dtype = name or "float32"
    got = getattr(torch, str(dtype), None)
    if not isinstance(got, torch.dtype):
        raise ValueError("wcache.transformers.from_pretrained: dtype %r is not a torch dtype (torch.bfloat16, "
                         "\"bfloat16\", \"auto\")" % (dtype,))
    return got


def _finish(model, path, name_or_path, transformers):
    """What from_pretrained does after loading: tie, eval, the generation
    config of the directory, the name it was asked for."""
    tie = getattr(model, "tie_weights", None)
    if callable(tie):
        tie()
    model.eval()
    gc_cls = getattr(transformers, "GenerationConfig", None)
    if gc_cls is not None and os.path.isfile(os.path.join(path, "generation_config.json")) \
            and hasattr(model, "generation_config"):
        model.generation_config = gc_cls.from_pretrained(path)
    cfg = getattr(model, "config", None)
    if cfg is not None and hasattr(cfg, "_name_or_path"):
        cfg._name_or_path = os.fsdecode(os.fspath(name_or_path))
    return model


def _served(cls, path, name_or_path, dev, dtype, runtime_dir, cache, timeout_ms, kwargs,
            transformers, how):
    """The served model, or (None, why, the wcache error behind it)."""
    from . import torch as wt
    rd = runtime_dir if runtime_dir is not None else os.environ.get("WCACHE_RUNTIME_DIR") or None
    where = "%s%s" % (dev.spec, " under %s" % rd if rd else "")
    try:
        conn = connect(device=dev.spec, runtime_dir=rd, timeout_ms=timeout_ms,
                       label="wcache.transformers pid %d" % os.getpid())
    except errors.Error as e:
        return None, "no daemon serves device %s: %s" % (where, e), e
    with conn:     # closed once the module's parameters, which hold the lease, are gone
        try:
            served = conn.attach(model_dir=path)
        except errors.IdentityMismatch as e:
            return None, "the daemon on %s serves another model, layout or rank (%s differ): %s" % (
                where, ", ".join(sorted(e.fields)) or "identity", e), e
        except errors.DaemonSleeping as e:
            return None, "the daemon on %s sleeps (wake it: wcctl wake): %s" % (where, e), e
        except errors.Error as e:
            return None, "the daemon on %s does not serve %s: %s" % (where, path, e), e
        try:
            want = _dtype(dtype, path, served, transformers)
            build = {k: kwargs[k] for k in _BUILD + _BOTH if k in kwargs}
            cfg_kw = {k: kwargs[k] for k in _BOTH if k in kwargs}
            mc = {}
            model = wt.empty_pretrained(path, cls=cls, dtype=want, buffers_device=served.device,
                                        cache=cache, how=mc, config_kwargs=cfg_kw, **build)
            how.update(cache=mc.get("cache"), device=served.device)
            try:
                wt.load_into(model, served, strict=True)
            except wt.LoadError as e:
                hint = "" if dtype is not None else \
                    " (no dtype given: transformers' default %s; pass dtype=\"auto\" or the served one)" % want
                return None, "the tensors the daemon on %s serves do not fit %s: %s%s" % (
                    where, type(model).__name__, e, hint), None
        finally:
            served.detach()    # the bound parameters keep the lease
    return _finish(model, path, name_or_path, transformers), None, None


def _fallback(cls, name_or_path, dev, dtype, revision, kwargs, transformers):
    """cls.from_pretrained as the caller would have called it (the same
    name, a hub id too, and revision), on the device."""
    kw = dict(kwargs)
    if dtype is not None:
        kw["dtype" if _version(transformers) >= (4, 56) else "torch_dtype"] = dtype
    if revision is not None:
        kw["revision"] = revision
    target = dev.torch
    if target is None:
        raise ValueError("wcache.transformers.from_pretrained: device %s is a GPU UUID that no torch CUDA "
                         "device here has; pass device=\"cuda:N\"" % dev.spec)
    import importlib.util
    place = "device_map" not in kw and (_version(transformers) >= (5, 0) or
                                        importlib.util.find_spec("accelerate") is not None)
    if place:
        kw["device_map"] = target
    model = cls.from_pretrained(name_or_path, **kw)
    if not place and "device_map" not in kwargs:
        model = model.to(target)
    return model


def from_pretrained(name_or_path, device="cuda", dtype=None, *, cls=None, runtime_dir=None,
                    revision=None, fallback="warn", cache=True, timeout_ms=0, how=None, **kwargs):
    """The model cls.from_pretrained(name_or_path, dtype=dtype, **kwargs)
    returns, on device, bound to the weights device's daemon serves (see
    the module's text); where none serves them, that call itself (on
    device), after one wcache.FallbackWarning naming why, or
    wcache.NotServed with fallback="error".

    device: "cuda", "cuda:N", N, torch.device, "GPU-<uuid>", "host:NAME".
    dtype: a torch dtype, its name, "auto" (the checkpoint's) or None
    (transformers' default). cls: the class (default
    transformers.AutoModelForCausalLM). revision: of a hub id. cache: the
    module cache (wcache.torch.empty_pretrained's cache=). how: a dict that
    receives served (bool), why (None when served), path (the directory),
    device (the torch device of the weights), cache (the module cache's
    hit/miss). kwargs: from_pretrained's; attn_implementation and
    trust_remote_code are honoured, one that changes what is loaded
    (quantization_config, device_map, subfolder, variant...) falls back."""
    if fallback not in ("warn", "error"):
        raise ValueError("wcache.transformers.from_pretrained: fallback must be \"warn\" or \"error\", not %r"
                         % (fallback,))
    dev = _device.parse(device, "wcache.transformers.from_pretrained's device")
    if dev.spec is None:
        raise ValueError("wcache.transformers.from_pretrained: device is None; pass the GPU (\"cuda:0\") "
                         "or \"host:NAME\"")
    try:
        import transformers
    except ImportError as e:
        raise ImportError("wcache.transformers.from_pretrained needs transformers (%s): pip install "
                          "transformers, or bind your own module with wcache.torch.load_into" % e) from e
    if cls is None:
        cls = transformers.AutoModelForCausalLM
    if "torch_dtype" in kwargs and dtype is None:   # transformers 4's name of dtype
        dtype = kwargs.pop("torch_dtype")
    how = how if how is not None else {}
    how.update(served=False, why=None, path=None, device=dev.torch, cache=None)
    path, why = resolve(name_or_path, revision, kwargs.get("cache_dir"))
    how["path"] = path
    cause = None
    if why is None:
        why = _unhonoured(kwargs)
    if why is None:
        model, why, cause = _served(cls, path, name_or_path, dev, dtype, runtime_dir, cache,
                                    timeout_ms, kwargs, transformers, how)
        if model is not None:
            how["served"] = True
            return model
    how["why"] = why
    if fallback == "error":
        raise errors.NotServed(getattr(cause, "errno", None) or errno.ENOENT,
                               "wcache.transformers.from_pretrained: %s (fallback=\"error\": not loading "
                               "it with transformers instead)" % why) from cause
    warnings.warn("wcache.transformers.from_pretrained: %s; loading it with transformers' own "
                  "from_pretrained instead (from disk, a copy)" % why, errors.FallbackWarning, stacklevel=2)
    how["device"] = dev.torch
    return _fallback(cls, name_or_path, dev, dtype, revision, kwargs, transformers)
