# SPDX-License-Identifier: MIT
"""Connection.update_from: a trainer pushes new weights from its memory
into the daemon as the next version (libwcache's wc_push_*: open, one write
per checkpoint tensor, commit), no file in between.

Sources are torch CPU tensors or numpy arrays, in the checkpoint's own
names, dtypes and shapes (whole tensors: the daemon's plan cuts this
rank's part). A non-contiguous source is made contiguous (a copy); a dtype
is never changed: another dtype than the served one is refused, naming the
tensor. Any error aborts the session, and the served version stays.
"""
import collections.abc
import ctypes
import errno

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


def _source(name, t):
    """(safetensors dtype, shape, address, nbytes, what keeps the bytes alive)."""
    mod = type(t).__module__ or ""
    if mod.startswith("torch"):
        if t.device.type != "cpu":
            raise errors.Error(errno.EINVAL,
                               "wcache: tensor %r is on %s: update_from takes CPU tensors in this "
                               "version; move it with .cpu() first" % (name, t.device))
        dt = str(t.dtype).replace("torch.", "")
        st = _TORCH.get(dt)
        if st is None:
            raise errors.Error(errno.EINVAL, "wcache: tensor %r has the dtype %s, which no "
                               "checkpoint dtype matches" % (name, t.dtype))
        t = t.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        return st, tuple(t.shape), t.data_ptr(), t.numel() * t.element_size(), t
    if hasattr(t, "__array_interface__") or mod.startswith("numpy"):
        import numpy as np
        a = np.ascontiguousarray(t)  # a copy only when not C-contiguous
        st = _NUMPY.get(a.dtype.name)
        if st is None:
            raise errors.Error(errno.EINVAL, "wcache: tensor %r has the numpy dtype %s, which no "
                               "checkpoint dtype matches" % (name, a.dtype))
        return st, tuple(a.shape), a.ctypes.data, a.nbytes, a
    raise errors.Error(errno.EINVAL, "wcache: tensor %r is a %s: pass torch CPU tensors or numpy "
                       "arrays" % (name, type(t).__name__))


def _call(conn, fn, *args):
    err = _lib.new(_lib.WcError)
    with conn._h.lock:
        ret = fn(*args, ctypes.byref(err))
    if ret < 0:
        from ._core import _raise
        _raise(ret, err)
    return ret


def update_from(conn, tensors, allow_layout_change=False, timeout_ms=0, partial=False,
                in_place=False):
    """Writes tensors (a mapping or an iterable of (name, tensor)) as the
    next version and publishes it; returns a LifeResult (the version now
    served, the bytes written, the seconds from open to publish). partial:
    only these tensors change, the others keep the served version's bytes.
    in_place: rewrite the served version (every engine paused)."""
    from ._core import _life
    if not _lib.HAVE.get("wc_push_open"):
        raise errors.Error(errno.ENOSYS, "wcache: this libwcache has no update sessions "
                           "(wc_push_open): install a newer one")
    items = tensors.items() if isinstance(tensors, collections.abc.Mapping) else tensors
    p = ctypes.c_void_p()
    flags = (1 if allow_layout_change else 0) | (2 if partial else 0) | (4 if in_place else 0)
    _call(conn, lib.wc_push_open, conn._ptr(), flags, 0,
          int(timeout_ms), ctypes.byref(p))
    done = False
    try:
        for name, t in items:
            st, shape, addr, nbytes, keep = _source(name, t)
            dims = (ctypes.c_uint64 * max(len(shape), 1))(*shape)
            _call(conn, lib.wc_push_write, p, _lib.b(name), _lib.b(st), len(shape), dims,
                  ctypes.c_void_p(addr), nbytes)
            del keep
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

    def __init__(self, conn, flags, timeout_ms):
        self.conn = conn
        self.p = ctypes.c_void_p()
        _call(conn, lib.wc_push_open, conn._ptr(), flags, 0, int(timeout_ms),
              ctypes.byref(self.p))
        self.names = set()
        t = _lib.new(_lib.WcPushTensor)
        for i in range(lib.wc_push_tensor_count(self.p)):
            lib.wc_push_tensor_at(self.p, i, ctypes.byref(t))
            self.names.add(_lib.s(t.name))
        self.open = True

    def abort(self):
        if self.open:
            self.open = False
            err = _lib.new(_lib.WcError)
            with self.conn._h.lock:
                lib.wc_push_abort(self.p, ctypes.byref(err))


def update_ranks(conns, tensors, allow_layout_change=False, timeout_ms=0, partial=False):
    """update_from for every rank of a model at once, from one trainer
    that holds the whole tensors: a session per connection (one per rank
    daemon), each tensor written to every rank whose plan has it (a
    pipeline stage holds its layers only; a name no rank has is refused),
    then every session prepared (checked, sealed, hashed) before any is
    published. A failure up to the last prepare aborts every session: no
    rank publishes. Publishing cannot be refused, only lost with a daemon
    that dies in between: then the error names the ranks that published.
    Returns a LifeResult per connection."""
    from ._core import _life
    if not _lib.HAVE.get("wc_push_prepare"):
        raise errors.Error(errno.ENOSYS, "wcache: this libwcache has no wc_push_prepare: "
                           "install a newer one")
    conns = list(conns)
    flags = (1 if allow_layout_change else 0) | (2 if partial else 0)
    items = tensors.items() if isinstance(tensors, collections.abc.Mapping) else tensors
    sessions = []
    try:
        for c in conns:
            sessions.append(_Session(c, flags, timeout_ms))
        for name, t in items:
            st, shape, addr, nbytes, keep = _source(name, t)
            dims = (ctypes.c_uint64 * max(len(shape), 1))(*shape)
            to = [s for s in sessions if name in s.names]
            if not to:
                raise errors.Error(errno.ENOENT, "wcache: tensor %r is in no rank's plan "
                                   "(%d ranks): write the checkpoint's own names" %
                                   (name, len(sessions)))
            for s in to:
                _call(s.conn, lib.wc_push_write, s.p, _lib.b(name), _lib.b(st), len(shape),
                      dims, ctypes.c_void_p(addr), nbytes)
            del keep
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
