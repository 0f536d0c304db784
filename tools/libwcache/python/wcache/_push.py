# SPDX-License-Identifier: MIT
"""Connection.update_from: a trainer pushes new weights from its memory
into the daemon as the next version (libwcache's wc_push_*: open, one write
per checkpoint tensor, commit), no file in between.

Sources are torch tensors (CPU, or CUDA on any GPU of the host when the
daemon serves a GPU) or numpy arrays, in the checkpoint's own names, dtypes
and shapes (whole tensors: the daemon's plan cuts this rank's part). A CUDA
source is copied on its device's current torch stream (device to device,
peer to peer from another GPU, host to device from a CPU tensor); the
commit waits for those copies, and every source is held until then. A
non-contiguous source is made contiguous (a copy, on its device). A dtype
is changed only when asked: with cast=True a float source of another float
dtype is cast to the served one on its own device (torch .to), else another
dtype than the served one is refused, naming the tensor. Any error aborts
the session, and the served version stays.
"""
import collections.abc
import ctypes
import errno
import time

from . import _lib, errors
from ._lib import lib

# torch dtype name -> safetensors dtype
_TORCH = {
    "float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64",
    "int8": "I8", "uint8": "U8", "int16": "I16", "int32": "I32",
    "int64": "I64", "bool": "BOOL", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2", "complex64": "C64",
}
# numpy dtype name -> safetensors dtype (numpy has no bfloat16)
_NUMPY = {
    "float32": "F32", "float16": "F16", "float64": "F64", "int8": "I8",
    "uint8": "U8", "int16": "I16", "uint16": "U16", "int32": "I32",
    "uint32": "U32", "int64": "I64", "uint64": "U64", "bool": "BOOL",
    "complex64": "C64",
}


_FLOATS = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}
_ST_TORCH = {v: k for k, v in _TORCH.items()}
_ST_NUMPY = {v: k for k, v in _NUMPY.items()}


def _cast_to(name, st, want, cast):
    """The dtype to cast a source of safetensors dtype st to (None: as it
    is): want, the served dtype, when cast is asked and both are floats.
    Anything else is left for libwcache, which refuses a mismatch naming
    the tensor."""
    if not cast or want is None or st == want:
        return None
    if st not in _FLOATS or want not in _FLOATS:
        raise errors.Error(errno.EINVAL, "wcache: tensor %r is %s and the served layout has %s: "
                           "cast=True casts between float dtypes only; convert it yourself"
                           % (name, st, want))
    return want


def _source(name, t, want=None, cast=False):
    """(safetensors dtype, shape, address, nbytes, what keeps the bytes
    alive, CUDA ordinal or -1, stream handle or None). want: the served
    safetensors dtype (for cast)."""
    mod = type(t).__module__ or ""
    if mod.startswith("torch"):
        dt = str(t.dtype).replace("torch.", "")
        st = _TORCH.get(dt)
        if st is None:
            raise errors.Error(errno.EINVAL, "wcache: tensor %r has the dtype %s, which no "
                               "checkpoint dtype matches" % (name, t.dtype))
        # detached only where a new tensor is made (no autograd graph);
        # a parameter's own bytes are read as they are
        to = _cast_to(name, st, want, cast)
        if to is not None:
            import torch
            t = t.detach().to(getattr(torch, _ST_TORCH[to]))  # on t's own device
            st = to
        if not t.is_contiguous():
            t = t.detach().contiguous()
        dev, stream, where = -1, None, t.device
        if where.type == "cuda":
            dev = where.index if where.index is not None else _cuda_current()
            stream = _raw_stream(dev)
        elif where.type != "cpu":
            raise errors.Error(errno.EINVAL, "wcache: tensor %r is on %s: update_from takes CPU "
                               "and CUDA tensors; move it with .cpu() first" % (name, where))
        return (st, tuple(t.shape), t.data_ptr(), t.numel() * t.element_size(), t, dev,
                stream)
    if hasattr(t, "__array_interface__") or mod.startswith("numpy"):
        import numpy as np
        a = np.ascontiguousarray(t)  # a copy only when not C-contiguous
        st = _NUMPY.get(a.dtype.name)
        if st is None:
            raise errors.Error(errno.EINVAL, "wcache: tensor %r has the numpy dtype %s, which no "
                               "checkpoint dtype matches" % (name, a.dtype))
        to = _cast_to(name, st, want, cast)
        if to is not None:
            if to not in _ST_NUMPY:
                raise errors.Error(errno.EINVAL, "wcache: tensor %r is served as %s, which numpy "
                                   "has no dtype for: pass a torch tensor to cast it" % (name, to))
            a, st = a.astype(_ST_NUMPY[to]), to
        return st, tuple(a.shape), a.ctypes.data, a.nbytes, a, -1, None
    raise errors.Error(errno.EINVAL, "wcache: tensor %r is a %s: pass torch CPU tensors or numpy "
                       "arrays" % (name, type(t).__name__))


def _cuda_current():
    import torch
    return torch.cuda.current_device()


def _raw_stream(dev):
    """The current stream of CUDA device dev as a cudaStream_t (None: the
    legacy default stream). torch's raw getter where it has one (no
    torch.cuda.Stream object made for each tensor)."""
    import torch
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        try:
            return raw(dev) or None
        except (TypeError, RuntimeError):
            pass  # a torch whose getter differs: the public way below
    return torch.cuda.current_stream(dev).cuda_stream or None


def _call(conn, fn, *args, err=None):
    if err is None:
        err = _lib.new(_lib.WcError)
    with conn._h.lock:
        ret = fn(*args, ctypes.byref(err))
    if ret < 0:
        from ._core import _raise
        _raise(ret, err)
    return ret


def _dtypes(p):
    """{checkpoint name: served safetensors dtype} of session p."""
    out = {}
    t = _lib.new(_lib.WcPushTensor)
    for i in range(lib.wc_push_tensor_count(p)):
        lib.wc_push_tensor_at(p, i, ctypes.byref(t))
        out[_lib.s(t.name)] = _lib.s(t.dtype)
    return out


def _write(conn, p, name, src, err=None):
    """One source (_source's tuple) into session p: wc_push_write_dev
    where the source is on a GPU or libwcache has it, else wc_push_write.
    err: a WcError to reuse (a loop's), else one is made."""
    st, shape, addr, nbytes, _, dev, stream = src
    dims = (ctypes.c_uint64 * max(len(shape), 1))(*shape)
    if dev >= 0 or stream is not None:
        if not _lib.HAVE.get("wc_push_write_dev"):
            raise errors.Error(errno.ENOSYS, "wcache: tensor %r is on CUDA device %d, and this "
                               "libwcache writes from host memory only (no "
                               "wc_push_write_dev): install a newer one" % (name, dev))
        _call(conn, lib.wc_push_write_dev, p, _lib.b(name), _lib.b(st), len(shape), dims,
              ctypes.c_void_p(addr), nbytes, dev, ctypes.c_void_p(stream), err=err)
        return
    _call(conn, lib.wc_push_write, p, _lib.b(name), _lib.b(st), len(shape), dims,
          ctypes.c_void_p(addr), nbytes, err=err)


# The daemon's refusal of an open while the version before the served one
# is still held (it keeps two): its engines were told to re-attach, and
# let it go within milliseconds (wcache.torch.follow detaches it on a
# thread of its own after switching), so the open is tried again.
_HELD = "is still held by"


def _open(conn, flags, timeout_ms, held_wait):
    """wc_push_open; a BUSY refusal because the old version is still held
    is retried every 2 ms for up to held_wait seconds, then raised."""
    p = ctypes.c_void_p()
    end = time.monotonic() + max(0.0, held_wait)
    while True:
        try:
            _call(conn, lib.wc_push_open, conn._ptr(), flags, 0, int(timeout_ms),
                  ctypes.byref(p))
            return p
        except errors.Busy as e:
            if _HELD not in str(e) or time.monotonic() >= end:
                raise
        time.sleep(0.002)


def update_from(conn, tensors, allow_layout_change=False, timeout_ms=0, partial=False,
                cast=False, in_place=False, held_wait=2.0, keep_spare=False):
    """Writes tensors (a mapping or an iterable of (name, tensor)) as the
    next version and publishes it; returns a LifeResult (the version now
    served, the bytes written, the seconds from open to publish). partial:
    only these tensors change, the others keep the served version's bytes.
    cast: a float source of another float dtype is cast to the served one
    on its device (else refused, naming the tensor). in_place: rewrite the
    served version (every engine paused). held_wait: seconds an open
    refused because engines still hold the version before the served one
    (they were told to re-attach) is tried again (0: raise Busy at once).
    keep_spare: for a trainer that updates again and again (an RL loop),
    the daemon keeps the replaced version's device memory, once no engine
    holds it, and the next update takes it instead of allocating (a second
    copy of the weights stays on the device meanwhile; an update without
    keep_spare, a disk update or a sleep frees it; a GPU daemon's beside
    updates only)."""
    from ._core import _life
    if not _lib.HAVE.get("wc_push_open"):
        raise errors.Error(errno.ENOSYS, "wcache: this libwcache has no update sessions "
                           "(wc_push_open): install a newer one")
    items = tensors.items() if isinstance(tensors, collections.abc.Mapping) else tensors
    flags = (1 if allow_layout_change else 0) | (2 if partial else 0) | (4 if in_place else 0) | \
        (8 if keep_spare else 0)
    p = _open(conn, flags, timeout_ms, held_wait)
    done = False
    held = []  # every source until commit: the device copies are queued
    try:
        want = _dtypes(p) if cast else {}
        err = _lib.new(_lib.WcError)
        for name, t in items:
            src = _source(name, t, want.get(name), cast)
            _write(conn, p, name, src, err)
            held.append(src[4])
        r = _lib.new(_lib.WcLifeResult)
        done = True  # commit frees the session whatever it answers
        _call(conn, lib.wc_push_commit, p, ctypes.byref(r))
        return _life(r)
    finally:
        if not done:
            err = _lib.new(_lib.WcError)
            with conn._h.lock:
                lib.wc_push_abort(p, ctypes.byref(err))


class _Session:
    """One rank's open session in update_ranks."""

    def __init__(self, conn, flags, timeout_ms, held_wait):
        self.conn = conn
        self.p = _open(conn, flags, timeout_ms, held_wait)
        self.open = True
        self.names = _dtypes(self.p)

    def abort(self):
        if self.open:
            self.open = False
            err = _lib.new(_lib.WcError)
            with self.conn._h.lock:
                lib.wc_push_abort(self.p, ctypes.byref(err))


def update_ranks(conns, tensors, allow_layout_change=False, timeout_ms=0, partial=False,
                 cast=False, held_wait=2.0, keep_spare=False):
    """update_from for every rank of a model at once, from one trainer
    that holds the whole tensors: a session per connection (one per rank
    daemon), each tensor written to every rank whose plan has it (a
    pipeline stage holds its layers only; a name no rank has is refused),
    then every session prepared (checked, sealed, hashed) before any is
    published. A failure up to the last prepare aborts every session: no
    rank publishes. Publishing cannot be refused, only lost with a daemon
    that dies in between: then the error names the ranks that published.
    held_wait, keep_spare: update_from's, for each rank. Returns a
    LifeResult per connection."""
    from ._core import _life
    if not _lib.HAVE.get("wc_push_prepare"):
        raise errors.Error(errno.ENOSYS, "wcache: this libwcache has no wc_push_prepare: "
                           "install a newer one")
    conns = list(conns)
    flags = (1 if allow_layout_change else 0) | (2 if partial else 0) | (8 if keep_spare else 0)
    items = tensors.items() if isinstance(tensors, collections.abc.Mapping) else tensors
    sessions, held = [], []
    try:
        for c in conns:
            sessions.append(_Session(c, flags, timeout_ms, held_wait))
        for name, t in items:
            to = [s for s in sessions if name in s.names]
            if not to:
                raise errors.Error(errno.ENOENT, "wcache: tensor %r is in no rank's plan "
                                   "(%d ranks): write the checkpoint's own names" %
                                   (name, len(sessions)))
            src = _source(name, t, to[0].names[name], cast)
            for s in to:
                _write(s.conn, s.p, name, src)
            held.append(src[4])
        for i, s in enumerate(sessions):
            r = _lib.new(_lib.WcLifeResult)
            try:
                _call(s.conn, lib.wc_push_prepare, s.p, ctypes.byref(r))
            except errors.Error as e:
                raise type(e)(e.errno, "wcache: rank %d of %d refused the update, so no rank "
                              "publishes it: %s" % (i, len(sessions), e)) from None
    except BaseException:
        for s in sessions:
            s.abort()
        raise
    out, failed = [], None
    for i, s in enumerate(sessions):
        r = _lib.new(_lib.WcLifeResult)
        s.open = False           # commit frees the session whatever it answers
        try:
            _call(s.conn, lib.wc_push_commit, s.p, ctypes.byref(r))
            out.append(_life(r))
        except errors.Error as e:
            out.append(None)
            failed = failed or (i, e)
    if failed:
        i, e = failed
        done = [k for k, r in enumerate(out) if r]
        raise type(e)(e.errno, "wcache: rank %d lost its prepared update (%s); ranks %s "
                      "published it" % (i, e, done or "none"))
    return out
