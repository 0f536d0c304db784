# SPDX-License-Identifier: MIT
"""Runs real wcd ranks (host backend) for the layout tests and reads what
they serve: the manifest through `wcctl manifest --json`, the bytes through
libwcache.so (ctypes: connect, hello, attach, walk the tensors).

Every daemon gets its own host device name and runtime directory and is
killed when its Ranks is closed; nothing outlives a test.
"""
import ctypes
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time

TOP = os.environ.get("WC_TOP") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(TOP, BUILD, "bin")
LIB = os.environ.get("WCACHE_LIB") or os.path.join(TOP, BUILD, "lib", "libwcache.so")
READY_S = 30
_seq = itertools.count()


class Rank:
    def __init__(self, proc, device, rundir, log):
        self.proc, self.device, self.rundir, self.log = proc, device, rundir, log
        self.manifest = None
        self.rc = None

    def log_text(self):
        with open(self.log, errors="replace") as f:
            return f.read()


class Ranks:
    """Starts every rank of one layout at once and waits for each to be
    ready (its ready file) or to exit (refused)."""

    def __init__(self, model, ranks, extra=(), gpu=None):
        """gpu: a CUDA ordinal ("0") to serve the (single) rank from instead
        of a host device of its own."""
        self.dir = tempfile.mkdtemp(prefix="wct-layoutref.")
        os.chmod(self.dir, 0o711)
        self.ranks = []
        for args in ranks:
            n = next(_seq)
            dev = gpu if gpu is not None else f"host:lr{os.getpid()}-{n}"
            rundir = os.path.join(self.dir, f"rt{n}")
            log = os.path.join(self.dir, f"{n}.log")
            with open(log, "w") as lf:
                p = subprocess.Popen(
                    [os.path.join(BIN, "wcd"), "--model", model,
                     "--device", dev, "--runtime-dir", rundir,
                     *(["--hash-threads", "0"] if gpu is None else []), *args, *extra],
                    stdout=lf, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL)
            self.ranks.append(Rank(p, dev, rundir, log))
        deadline = time.monotonic() + READY_S
        for r in self.ranks:
            while not (os.path.isdir(r.rundir) and
                       any(f.endswith(".ready") for f in os.listdir(r.rundir))):
                rc = r.proc.poll()
                if rc is not None:
                    r.rc = rc
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"wcd {r.device} not ready in {READY_S} s:\n"
                                       + r.log_text())
                time.sleep(0.005)

    def manifests(self):
        """Each rank's manifest as `wcctl manifest --json` prints it (read
        through libwcache in this process: no wcctl per rank)."""
        for r in self.ranks:
            if r.rc is None and r.manifest is None:
                r.manifest = manifest_of(r.device, r.rundir)
        return [r.manifest for r in self.ranks]

    def close(self):
        for r in self.ranks:
            if r.proc.poll() is None:
                r.proc.kill()
            r.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


# --- libwcache through ctypes ---------------------------------------------

class _Opts(ctypes.Structure):
    _fields_ = [("device", ctypes.c_char_p), ("runtime_dir", ctypes.c_char_p),
                ("socket", ctypes.c_char_p), ("timeout_ms", ctypes.c_int),
                ("label", ctypes.c_char_p), ("trust_uid", ctypes.c_uint)]


class _Err(ctypes.Structure):
    _fields_ = [("code", ctypes.c_int), ("msg", ctypes.c_char * 2048)]


class _Tensor(ctypes.Structure):
    # struct wc_tensor (wcache.h, protocol 2)
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p),
                ("ndim", ctypes.c_uint32), ("shape", ctypes.c_uint64 * 8),
                ("bytes", ctypes.c_uint64), ("ptr", ctypes.c_void_p),
                ("pool", ctypes.c_uint32), ("offset", ctypes.c_uint64),
                ("hash", ctypes.c_uint8 * 16), ("flags", ctypes.c_uint32),
                ("padded_rows", ctypes.c_uint64)]


class _Pool(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_uint64),
                ("writable", ctypes.c_int)]


_lib = None


def _connect(L, device, rundir, err):
    """A libwcache connection to the rank daemon of device under rundir."""
    conn = ctypes.c_void_p()
    opts = _Opts(device.encode(), rundir.encode(), None, 0, b"layoutref")
    if L.wc_connect(ctypes.byref(opts), ctypes.byref(conn), ctypes.byref(err)):
        raise RuntimeError("wc_connect: " + err.msg.decode())
    return conn


def lib():
    global _lib
    if _lib is None:
        L = ctypes.CDLL(LIB)
        L.wc_connect.argtypes = [ctypes.POINTER(_Opts), ctypes.POINTER(ctypes.c_void_p),
                                 ctypes.POINTER(_Err)]
        L.wc_hello.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.POINTER(_Err)]
        L.wc_attach.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p),
                                ctypes.c_void_p, ctypes.POINTER(_Err)]
        L.wc_tensor_count.argtypes = [ctypes.c_void_p]
        L.wc_tensor_count.restype = ctypes.c_uint64
        L.wc_tensor_at.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        L.wc_tensor_at.restype = ctypes.POINTER(_Tensor)
        L.wc_pool_at.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(_Pool)]
        L.wc_detach.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Err)]
        L.wc_manifest.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                  ctypes.POINTER(_Err)]
        L.wc_close.argtypes = [ctypes.c_void_p]
        _lib = L
    return _lib


def read_rank(device, rundir, extra_bytes=None, with_places=False):
    """Attaches to a host-backend rank and returns {name: (dtype, shape,
    bytes, more)}: extra_bytes(name, nbytes) says how many bytes past the
    tensor to read as well (its padded rows) into more. with_places: also
    {name: (pool, offset, bytes)}."""
    L = lib()
    err = _Err()
    conn = _connect(L, device, rundir, err)
    model = ctypes.c_void_p()
    try:
        if L.wc_hello(conn, None, None, ctypes.byref(err)) or \
           L.wc_attach(conn, 0, ctypes.byref(model), None, ctypes.byref(err)):
            raise RuntimeError("wc_hello/attach: " + err.msg.decode())
        out = {}
        places = {}
        for i in range(L.wc_tensor_count(model)):
            t = L.wc_tensor_at(model, i).contents
            name = t.name.decode()
            shape = [t.shape[d] for d in range(t.ndim)]
            b = ctypes.string_at(t.ptr, t.bytes) if t.bytes else b""
            more = b""
            if extra_bytes:
                n = extra_bytes(name, t.bytes)
                if n:
                    pool = _Pool()
                    if L.wc_pool_at(model, t.pool, ctypes.byref(pool)):
                        raise RuntimeError(f"wc_pool_at {t.pool}")
                    if t.offset + t.bytes + n > pool.size:
                        raise AssertionError(f"{name}: {n} padded bytes past its pool's end")
                    more = ctypes.string_at(pool.ptr + t.offset + t.bytes, n)
            out[name] = (t.dtype.decode(), shape, b, more)
            places[name] = (t.pool, t.offset, t.bytes)
        L.wc_detach(model, ctypes.byref(err))
        if with_places:
            return out, places
        return out
    finally:
        L.wc_close(conn)


def manifest_of(device, rundir):
    """{"tensors": [{name, dtype, shape, bytes, pool, offset, padded_rows,
    xxh3_128}]} of a running rank, from MANIFEST (no lease)."""
    L = lib()
    err = _Err()
    conn = _connect(L, device, rundir, err)
    model = ctypes.c_void_p()
    try:
        if L.wc_hello(conn, None, None, ctypes.byref(err)) or \
           L.wc_manifest(conn, ctypes.byref(model), ctypes.byref(err)):
            raise RuntimeError("wc_hello/manifest: " + err.msg.decode())
        out = []
        for i in range(L.wc_tensor_count(model)):
            t = L.wc_tensor_at(model, i).contents
            out.append({"name": t.name.decode(), "dtype": t.dtype.decode(),
                        "shape": [t.shape[d] for d in range(t.ndim)], "bytes": t.bytes,
                        "pool": t.pool, "offset": t.offset, "padded_rows": t.padded_rows,
                        "xxh3_128": bytes(t.hash).hex()})
        L.wc_detach(model, ctypes.byref(err))
        return {"tensors": out}
    finally:
        L.wc_close(conn)
