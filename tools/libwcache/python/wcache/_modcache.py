# SPDX-License-Identifier: MIT
"""The module cache of wcache.torch.empty_model: an engine's empty module
(parameters on meta, buffers real: what init_empty builds), kept as a
file, so that a restart unpickles it in a few milliseconds instead of
running the model's constructors (transformers' from_config of an 8B
Llama: 15-28 ms of Python on the H200 host, most of an engine start's
weights part once the weights are served).

The file (one per key, NAME.wcm in the cache directory):
  line 1     JSON: format, the key's digest, the sources (below)
  the rest   a pickle of (tensors, module): every tensor through a
             persistent id (meta tensors as shape, stride, dtype; real
             ones, the buffers, as their bytes and device), the module
             tree pickled as torch pickles modules (its __dict__), then
             the tensors' own attributes (by the same pickler: what they
             name is shared with the module).
A hit needs the same digest and the same sources: every Python file that
defines a class or function the pickle names (the model's modeling code,
transformers', torch's) with the same size, mtime, ctime and inode as when it was
written, so an upgrade or an edit of that code is a miss, never a stale
module (code with no file to stat, a class of a `python -c` script or of
a notebook, is not kept: Uncacheable); a file is not written while a source is younger than 2 s (a
second change within a clock tick could stat the same), the next miss
writes it. What the build reads besides its code (environment, installed
optional packages) is the caller's key to give.

A pickle runs code when loaded, so a cache file is only read where nobody
else could have written it: the directory and the file belong to this
process's user and are writable by nobody else, and the file is not a
symbolic link; otherwise the cache is refused (built fresh, not written,
the reason said). Writes go to a temporary file renamed into place.
"""
import errno
import hashlib
import importlib.util
import io
import json
import os
import pickle
import stat
import sys
import time
import types
import warnings

import torch

# 4: the tensors' attributes follow the module; a module naming code without
# a source file is not kept (3 kept it, unchecked)
FORMAT = "wcache-module-cache/4"
SUFFIX = ".wcm"


class Uncacheable(Exception):
    """The module holds something this cache cannot keep exactly."""


class Unsettled(Exception):
    """A source file changed too recently to be kept now (no warning)."""


def default_dir():
    """$WCACHE_MODULE_CACHE, else $XDG_CACHE_HOME/wcache/modules, else
    ~/.cache/wcache/modules."""
    d = os.environ.get("WCACHE_MODULE_CACHE")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "wcache", "modules")


def _owned_private(st, what, path):
    """None when st (an lstat/fstat) is this user's and writable by nobody
    else; else the sentence saying why not."""
    uid = os.geteuid()
    if st.st_uid != uid:
        return "%s %s belongs to uid %d, not to this process's uid %d" % (what, path, st.st_uid, uid)
    if st.st_mode & 0o022:
        return "%s %s is writable by its group or others (mode %o): chmod go-w it" % (
            what, path, st.st_mode & 0o7777)
    return None


def open_dir(path, create):
    """(fd, None): the cache directory opened (made 0700 when create and
    missing), a directory of this user writable by nobody else, not a
    symbolic link; (-1, why) otherwise. Files are then opened relative to
    fd, so the directory checked is the one used."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        if not create:
            return -1, "the cache directory %s does not exist" % path
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            fd = os.open(path, flags)
        except OSError as e:
            return -1, "cannot make the cache directory %s: %s" % (path, e.strerror or e)
    except OSError as e:
        # a symbolic link fails O_NOFOLLOW with ELOOP, or ENOTDIR under O_DIRECTORY
        hint = "it is a symbolic link: give the directory itself" if os.path.islink(path) else \
            {errno.ENOTDIR: "it, or a part of its path, is not a directory"}.get(e.errno)
        return -1, "cannot open the cache directory %s: %s" % (path, hint or e.strerror or e)
    why = _owned_private(os.fstat(fd), "the cache directory", path)
    if why:
        os.close(fd)
        return -1, why
    return fd, None


def _resolve_device(dev):
    if dev is None:
        return None
    d = torch.device(dev)
    if d.type == "cuda" and d.index is None and torch.cuda.is_available():
        d = torch.device("cuda", torch.cuda.current_device())
    return str(d)


def digest(key, buffers_device, parts):
    """The file's name: what is built (the caller's key), where its buffers
    go, how init_empty built it, and the interpreter and torch it is for."""
    if isinstance(key, bytes):
        key = {"bytes": hashlib.sha256(key).hexdigest()}
    try:
        user = json.dumps(key, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise TypeError("wcache.torch.empty_model: key must be bytes, str or JSON-able "
                        "(lists, dicts, numbers, strings): %s" % e)
    get_dd = getattr(torch, "get_default_device", None)
    whole = json.dumps([FORMAT, user, _resolve_device(buffers_device), sorted(parts),
                        sys.version, torch.__version__, str(torch.get_default_dtype()),
                        str(get_dd()) if get_dd else None])
    return hashlib.sha256(whole.encode()).hexdigest()[:40]


def _source(modname):
    """(module name, file, size, mtime_ns, ctime_ns, inode) of a loaded
    module with a file;
    None for builtins and modules without one."""
    mod = sys.modules.get(modname)
    f = getattr(mod, "__file__", None)
    if not f:
        return None
    try:
        st = os.stat(f)
    except OSError:
        return None
    return [modname, f, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _source_or_package(modname):
    """_source of modname, else of the nearest package above it that has a
    file: a submodule that an extension makes without a file of its own
    (torch._C._nn, whose builtins torch.nn.functional.gelu is one of, as a
    GELU activation keeps it) changes with that package's file."""
    parts = modname.split(".")
    while parts:
        s = _source(".".join(parts))
        if s:
            return s
        parts.pop()
    return None


def _builtin(modname):
    """True for a module compiled into the interpreter (or frozen in it):
    it changes with the interpreter only, which the digest names."""
    if modname in sys.builtin_module_names:
        return True
    spec = getattr(sys.modules.get(modname), "__spec__", None)
    return getattr(spec, "origin", None) in ("built-in", "frozen")


# A source changed less than this long ago is not trusted to stat
# differently after its next change (two writes of one size within a tick
# of the file system's clock stat the same: git's "racily clean"), so its
# cache file is written at a later start. Tests shorten it.
_SETTLE_NS = int(float(os.environ.get("WCACHE_TEST_MODCACHE_SETTLE_MS", "2000")) * 1e6)


def unsettled(sources, now_ns=None):
    """The first source changed within _SETTLE_NS of now, or None."""
    now_ns = time.time_ns() if now_ns is None else now_ns
    for s in sources:
        if now_ns - max(s[3], s[4]) < _SETTLE_NS:
            return s[1]
    return None


def sources_match(sources):
    """Every source file stats as it did (size, mtime, ctime, inode: an
    edit, an upgrade or a reinstall changes one of them)."""
    for _, f, size, mtime, ctime, ino in sources:
        try:
            st = os.stat(f)
        except OSError:
            return False
        if st.st_size != size or st.st_mtime_ns != mtime or st.st_ctime_ns != ctime or st.st_ino != ino:
            return False
    return True


def _dtype_name(dt):
    return str(dt).split(".", 1)[1]


# Objects that pickle holds no global for and that are not tensors: their
# persistent_id is None and their module (builtins) has no file. (An
# instance of any other class pickles its class, which notes its module.)
_PLAIN = frozenset((str, int, float, bool, type(None), bytes, tuple, list, dict, set, frozenset))


class _Pickler(pickle.Pickler):
    """Pickles a module with every tensor out of line (its table) and the
    modules of the classes and functions it names recorded."""

    def __init__(self, f):
        super().__init__(f, protocol=4)
        self.table = []
        self.ids = {}
        self.keep = []        # the tensors met: their ids stay unique meanwhile
        self.storages = set()
        self.modnames = set()

    def persistent_id(self, obj):
        if type(obj) in _PLAIN:   # most of a module's objects: nothing to note
            return None
        if isinstance(obj, torch.Tensor):
            i = self.ids.get(id(obj))
            if i is None:
                i = self.ids[id(obj)] = len(self.table)
                self.table.append(self._tensor(obj))
                self.keep.append(obj)
            return i
        # classes and functions are pickled by name: their module's file
        # is a source of the cache file; of an instance, its class's
        if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
            m = getattr(obj, "__module__", None)
        else:
            m = type(obj).__module__
        if m:
            self.modnames.add(m)
        return None

    def _tensor(self, t):
        param = type(t) is torch.nn.Parameter
        if not param and type(t) is not torch.Tensor:
            raise Uncacheable("a tensor of type %s.%s (only torch.Tensor and nn.Parameter are kept)"
                              % (type(t).__module__, type(t).__qualname__))
        if t.grad_fn is not None or (getattr(t, "_backward_hooks", None)):
            raise Uncacheable("a tensor with autograd history or hooks")
        dtype = _dtype_name(t.dtype)
        if t.is_meta:
            return ("meta", param, t.requires_grad, dtype, tuple(t.shape), tuple(t.stride()),
                    t.storage_offset())
        storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        nbytes = storage.nbytes() if hasattr(storage, "nbytes") else storage.size() * t.element_size()
        key = (str(t.device), storage.data_ptr())
        if key in self.storages or not t.is_contiguous() or t.storage_offset() != 0 or \
                nbytes != t.numel() * t.element_size():
            raise Uncacheable("a real tensor (%s %s on %s) that is a view or shares its memory"
                              % (t.dtype, tuple(t.shape), t.device))
        self.storages.add(key)
        data = t.detach().to("cpu").reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        return ("data", param, t.requires_grad, dtype, tuple(t.shape), str(t.device), data)


def _rebuild(e):
    kind, param, grad, dtype, shape = e[:5]
    dt = getattr(torch, dtype)
    if kind == "meta":
        t = torch.empty_strided(shape, e[5], dtype=dt, device="meta")
    else:
        dev, data = e[5], e[6]
        if data:
            t = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dt).reshape(shape)
        else:
            t = torch.empty(shape, dtype=dt)
        if dev != "cpu":
            t = t.to(dev)
    if param:   # what nn.Parameter(t, grad) does for a plain tensor, without its frame
        return _make_subclass(torch.nn.Parameter, t, grad)
    return t.requires_grad_(grad) if grad else t


_make_subclass = torch.Tensor._make_subclass


def dump(module, digest_hex, extra=None):
    """The cache file's bytes for module (and extra, handed back with it
    on a hit); raises Uncacheable, or whatever pickling raised (a lambda,
    a lock... in the module)."""
    buf = io.BytesIO()
    p = _Pickler(buf)
    p.dump((module, extra))
    # the tensors' own attributes (an engine's weight_loader, output_dim),
    # then those of tensors they name: pickled after the module by the same
    # pickler (its memo), so that what they name is the module's own
    done = 0
    while done < len(p.keep):
        attrs = [(i, t.__dict__) for i, t in enumerate(p.keep[done:], done) if t.__dict__]
        done = len(p.keep)
        if attrs:
            p.dump(attrs)
    srcs = []
    for m in sorted(p.modnames):
        s = _source_or_package(m)
        if s:
            if s not in srcs:
                srcs.append(s)
        elif m in sys.modules and not _builtin(m):
            raise Uncacheable("it names code of the module %s, which has no source file to check "
                              "(a script given with -c, an interactive session, a notebook?): an "
                              "edit of it could not be seen; define the classes in a file" % m)
    young = unsettled(srcs)
    if young:
        raise Unsettled("its source %s changed less than %.0f s ago: it is kept at a later start"
                        % (young, _SETTLE_NS / 1e9))
    table = pickle.dumps(p.table, protocol=4)
    head = json.dumps({"format": FORMAT, "digest": digest_hex, "sources": srcs}).encode()
    return head + b"\n" + len(table).to_bytes(8, "little") + table + buf.getvalue()


def load_bytes(blob, digest_hex):
    """((module, extra), None) from blob, or (None, why) when it is not for
    this digest or its sources changed."""
    nl = blob.find(b"\n")
    try:
        head = json.loads(blob[:nl])
    except ValueError:
        return None, "its header is not JSON"
    if head.get("format") != FORMAT or head.get("digest") != digest_hex:
        return None, "it is of another format or key"
    if not sources_match(head.get("sources", [])):
        return None, "a source file it names changed (an upgrade or an edit)"
    n = int.from_bytes(blob[nl + 1:nl + 9], "little")
    made = [_rebuild(e) for e in pickle.loads(blob[nl + 9:nl + 9 + n])]
    body = io.BytesIO(blob[nl + 9 + n:])
    end = len(blob) - (nl + 9 + n)
    u = pickle.Unpickler(body)
    u.persistent_load = made.__getitem__   # a persistent id is the tensor's index
    got = u.load()
    while body.tell() < end:   # the tensors' attributes (dump)
        for i, attrs in u.load():
            made[i].__dict__.update(attrs)
    return got, None


def read(dfd, name, path):
    """(bytes, None): the cache file name in the directory dfd (path: its
    name in messages); (None, None) when there is none; (None, why) when it
    is not fit to be trusted (see the module's comment)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dfd)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, "cannot open %s: %s (it must be a regular file, not a symbolic link)" % (
            path, e.strerror or e)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, "%s is not a regular file" % path
        why = _owned_private(st, "the cache file", path)
        if why:
            return None, why
        return f.read(), None


ENTRIES_MAX = 64     # cache files a directory keeps (the oldest written go)
TMP_AGE_S = 60       # a writer's temporary file, at most (older: a dead writer's)


def prune(dfd, name, keep=ENTRIES_MAX, now=None):
    """Before name is written into the directory dfd: removes temporary
    files of writers dead for TMP_AGE_S, and the oldest-written other cache
    files beyond keep - 1 (room for name). Returns the names removed."""
    now = time.time() if now is None else now
    entries, gone = [], []
    for de in os.scandir(dfd):
        try:
            st = de.stat(follow_symlinks=False)
        except OSError:
            continue
        if de.name.startswith(".tmp-") and de.name.endswith(SUFFIX):
            if now - st.st_mtime > TMP_AGE_S:
                gone.append(de.name)
        elif de.name.endswith(SUFFIX) and de.name != name and stat.S_ISREG(st.st_mode):
            entries.append((st.st_mtime_ns, de.name))
    entries.sort()
    gone += [n for _, n in entries[:max(0, len(entries) - (keep - 1))]]
    for n in gone:
        try:
            os.unlink(n, dir_fd=dfd)
        except OSError:
            pass
    return gone


def write(dfd, name, path, blob):
    """Writes blob as name in the directory dfd, through a temporary file
    renamed into place (a reader sees the old file or the new one); None,
    or why it could not."""
    # the pid and random bytes: a dead writer of the same pid (a container's
    # pid 1 at its next start) may have left its file (prune removes it later)
    tmp = ".tmp-%d-%s-%s" % (os.getpid(), os.urandom(6).hex(), name)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW |
                     getattr(os, "O_CLOEXEC", 0), 0o600, dir_fd=dfd)
    except OSError as e:
        return "cannot write in the directory of %s: %s" % (path, e.strerror or e)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        return None
    except OSError as e:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        return "cannot write %s: %s" % (path, e.strerror or e)


def empty_model(build, key, buffers_device=None, cache=True, skip_init=True, how=None,
                on_hit=None, _extra=None):
    """build() under wcache.torch.init_empty(buffers_device, skip_init), or
    the same module from the cache when it holds one for key.

    key: what build makes, as bytes, a string or JSON-able data (for a
    transformers model, the config.json's bytes and the class and dtype:
    see wcache.torch.empty_pretrained); the interpreter, torch, the
    buffers' device and the init_empty parts are added to it, and the
    source files of the module's classes are checked on each hit.
    cache: True (the default directory: $WCACHE_MODULE_CACHE, else
    $XDG_CACHE_HOME/wcache/modules, else ~/.cache/wcache/modules), a
    directory path, or False (build every time). A cache that cannot be
    used (a directory or file of another user, or writable by others; a
    module holding something that cannot be pickled) never fails the
    call: the module is built and the reason is in how and in a
    RuntimeWarning.
    how: a dict to fill: "cache" ("hit", "miss", "off" or "refused"),
    "path" (the cache file), "why" (a miss's or refusal's reason),
    "saved" (a miss: whether the file was written).
    on_hit: called with the module after a hit, to redo what build does
    outside the module (a constructor that fills a registry of its own:
    a hit runs no constructor). _extra: (save, restore) for
    empty_pretrained: save(module) -> data kept in the file, restore(module,
    data) after a hit."""
    from ._empty import PARTS, init_empty, no_gc
    how = how if how is not None else {}
    how.update(cache="off", path=None, why=None, saved=False)

    def fresh():
        with init_empty(buffers_device=buffers_device, skip_init=skip_init):
            return build()
    if cache is False or cache is None:
        return fresh()
    d = default_dir() if cache is True else os.fsdecode(cache)   # str, bytes or path-like
    hexd = digest(key, buffers_device, PARTS if skip_init else ())
    name = hexd + SUFFIX
    how["path"] = path = os.path.join(d, name)
    dfd, why = open_dir(d, create=True)
    try:
        if why is None:
            blob, why = read(dfd, name, path)
            if blob is not None:
                try:
                    with no_gc():
                        module, miss = load_bytes(blob, hexd)
                    if module is not None:
                        module, data = module
                        if _extra:
                            _extra[1](module, data)
                except Exception as e:   # noqa: BLE001 (a torn or foreign file: build anew)
                    module, miss = None, "it cannot be unpickled (%s: %s)" % (type(e).__name__, e)
                if module is not None:
                    if on_hit:
                        on_hit(module)
                    how["cache"] = "hit"
                    return module
                how["why"] = miss
        if why is not None:   # refused: build, never write there
            how.update(cache="refused", why=why)
            warnings.warn("wcache.torch.empty_model: module cache not used: %s" % why, RuntimeWarning, 2)
            return fresh()
        how["cache"] = "miss"
        how["why"] = how["why"] or "no cache file"
        module = fresh()
        try:
            blob = dump(module, hexd, _extra[0](module) if _extra else None)
            prune(dfd, name)
            err = write(dfd, name, path, blob)
        except Unsettled as e:
            how["why"] = str(e)
            return module
        except Exception as e:   # noqa: BLE001 (anything pickle raises: a lambda, a lock)
            err = "the module cannot be kept: %s: %s" % (type(e).__name__, e)
        if err:
            how["why"] = err
            warnings.warn("wcache.torch.empty_model: module not cached: %s" % err, RuntimeWarning, 2)
        else:
            how["saved"] = True
        return module
    finally:
        if dfd >= 0:
            os.close(dfd)


def empty_pretrained(model_dir, cls=None, dtype=None, buffers_device=None, cache=True,
                     skip_init=True, how=None, config_kwargs=None, **kwargs):
    """A transformers model of model_dir built empty (as empty_model):
    cls.from_config(AutoConfig.from_pretrained(model_dir, **config_kwargs),
    dtype=dtype, **kwargs) under init_empty, cls defaulting to
    AutoModelForCausalLM (config_kwargs: trust_remote_code=True, say); the
    key is config.json's bytes, cls, dtype and both kwargs, with
    transformers' version and environment (a hit skips the AutoConfig
    too), and a hit redoes what transformers' constructors do outside the
    module (_hf_restore)."""
    import transformers
    if cls is None:
        cls = transformers.AutoModelForCausalLM
    with open(os.path.join(model_dir, "config.json"), "rb") as f:
        cfg_bytes = f.read()
    key = {"transformers": transformers.__version__,
           "config.json": hashlib.sha256(cfg_bytes).hexdigest(),
           "class": "%s.%s" % (cls.__module__, cls.__qualname__),
           "dtype": str(dtype), "kwargs": repr(sorted(kwargs.items())),
           "config_kwargs": repr(sorted((config_kwargs or {}).items())),
           # what transformers' construction reads besides its code: its
           # environment, and optional packages that change the modules
           # (hub kernels, flash attention)
           "env": sorted((k, v) for k, v in os.environ.items() if k.startswith(_HF_ENV)),
           "optional": [m for m in _HF_OPTIONAL if importlib.util.find_spec(m) is not None]}

    def build():
        cfg = transformers.AutoConfig.from_pretrained(model_dir, **(config_kwargs or {}))
        if dtype is not None:
            kwargs["dtype"] = dtype
        make = getattr(cls, "from_config", None) or getattr(cls, "_from_config")
        return make(cfg, **kwargs)
    return empty_model(build, key, buffers_device=buffers_device, cache=cache,
                       skip_init=skip_init, how=how, _extra=(_hf_save, _hf_restore))


_HF_ENV = ("TRANSFORMERS_", "HF_", "USE_HUB_KERNELS", "USE_TORCH", "USE_TF", "USE_FLAX")
_HF_OPTIONAL = ("kernels", "flash_attn", "flash_attn_interface")


def _hf_save(model):
    """What transformers' constructors leave outside the module, or keep
    valid for this process only, to redo after a hit, kept with it (the
    objects themselves: the pickle shares them with the module):
    "pretrained", the PreTrainedModels of the tree (each __init__ puts its
    _can_record_outputs into transformers' registry), and "hashes", each
    generation config with the JSON string its _original_object_hash is
    the hash() of (per process: Python's string hashes are salted), None
    where that string is not known (hash() it after the hit), where it
    was unmodified."""
    mu = sys.modules.get("transformers.modeling_utils")
    base = getattr(mu, "PreTrainedModel", None)
    out = {"pretrained": [], "hashes": []}
    for m in model.modules():
        if base is not None and isinstance(m, base):
            out["pretrained"].append(m)
        g = getattr(m, "generation_config", None)
        h = getattr(g, "_original_object_hash", None)
        if h is None or h != hash(g):
            continue
        try:
            text = g.to_json_string(ignore_metadata=True)
        except Exception:   # noqa: BLE001 (another transformers: hash() it after the hit)
            text = None
        out["hashes"].append((g, text if text is not None and hash(text) == h else None))
    return out


def _hf_restore(model, data):
    """After a hit, what _hf_save kept: each PreTrainedModel's
    _can_record_outputs back in transformers' registry (the output capture
    of hidden states and attentions reads it), each generation config's
    hash made in this process. No walk of the module."""
    reg = getattr(sys.modules.get("transformers.modeling_utils"), "_CAN_RECORD_REGISTRY", None)
    if isinstance(reg, dict):
        for m in data["pretrained"]:
            reg[str(type(m))] = getattr(m, "_can_record_outputs", None)
    for g, text in data["hashes"]:
        g._original_object_hash = hash(text) if text is not None else hash(g)
