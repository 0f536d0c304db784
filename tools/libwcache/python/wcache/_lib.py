# SPDX-License-Identifier: MIT
"""ctypes declarations of libwcache.so (tools/libwcache/wcache.h).

The structures mirror wcache.h field for field; test/py/test_abi.py compiles
a C program that prints every offset and compares. The library is found
through $WCACHE_LIB (a path), else installed beside the package (its
directory, its install prefix's lib), else pkg-config's libdir of wcache,
else the loader's "libwcache.so.0" (make install), else "libwcache.so"
(_open).
"""
import ctypes
import os
import subprocess
import sys

WC_ERR_MSG_LEN = 2048
WC_DIMS_MAX = 8
WC_HASH_LEN = 16
WC_HEX_LEN = 33
WC_DEVICE_LEN = 64
WC_PATH_LEN = 4096
WC_MEM_HOST = 1
WC_MEM_CUDA = 2
WC_ATTACH_WRITABLE = 1
WC_TENSOR_HASHED = 1

c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_uint = ctypes.c_uint
c_u32 = ctypes.c_uint32
c_u64 = ctypes.c_uint64
c_void_p = ctypes.c_void_p


class WcError(ctypes.Structure):
    _fields_ = [("code", c_int), ("msg", ctypes.c_char * WC_ERR_MSG_LEN)]


class WcConnectOpts(ctypes.Structure):
    _fields_ = [("device", c_char_p), ("runtime_dir", c_char_p),
                ("socket", c_char_p), ("timeout_ms", c_int),
                ("label", c_char_p), ("trust_uid", c_uint)]


class WcExpect(ctypes.Structure):
    _fields_ = [("model_dir", c_char_p), ("tp_size", c_int),
                ("tp_rank", c_int), ("pp_size", c_int), ("pp_rank", c_int),
                ("rules_file", c_char_p), ("same_path", c_int),
                ("layout_file", c_char_p), ("ep_size", c_int),
                ("ep_rank", c_int), ("vocab_pad", c_int)]


class WcInfo(ctypes.Structure):
    _fields_ = [("pid", c_int), ("identity", ctypes.c_char * WC_HEX_LEN),
                ("version", c_u64), ("tensors", c_u64), ("bytes", c_u64),
                ("device", ctypes.c_char * WC_DEVICE_LEN),
                ("model", ctypes.c_char * WC_PATH_LEN),
                ("tp_size", c_int), ("tp_rank", c_int),
                ("pp_size", c_int), ("pp_rank", c_int),
                ("protocol", c_u32), ("mem", c_int)]


class WcAttachTimes(ctypes.Structure):
    _fields_ = [(n, c_u64) for n in ("connect_ns", "hello_ns", "manifest_ns",
                                     "attach_ns", "map_ns", "device_ns")]


class WcPushTimes(ctypes.Structure):
    _fields_ = [(n, c_u64) for n in ("open_ns", "plan_ns", "map_ns", "copy_ns", "sync_ns",
                                     "commit_ns", "unmap_ns")] + \
        [("maps", c_u32), ("copies", c_u32)]


class WcTensor(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_char_p), ("ndim", c_u32),
                ("shape", c_u64 * WC_DIMS_MAX), ("bytes", c_u64),
                ("ptr", c_void_p), ("pool", c_u32), ("offset", c_u64),
                ("hash", ctypes.c_uint8 * WC_HASH_LEN), ("flags", c_u32)]


class WcTensorPadded(ctypes.Structure):
    """struct wc_tensor with padded_rows (added at the end by the engine
    layouts, protocol 2): used when the library's struct is that long."""
    _fields_ = WcTensor._fields_ + [("padded_rows", c_u64)]


class WcPoolView(ctypes.Structure):
    _fields_ = [("ptr", c_void_p), ("size", c_u64), ("writable", c_int)]


class WcNotice(ctypes.Structure):
    _fields_ = [("kind", c_int), ("version", c_u64),
                ("msg", ctypes.c_char * WC_ERR_MSG_LEN)]


class WcPushTensor(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_char_p), ("ndim", c_u32),
                ("shape", c_u64 * WC_DIMS_MAX), ("bytes", c_u64), ("written", c_int)]


class WcLifeResult(ctypes.Structure):
    _fields_ = [("version", c_u64), ("level", c_uint), ("bytes", c_u64),
                ("seconds", ctypes.c_double),
                ("verify_seconds", ctypes.c_double),
                ("msg", ctypes.c_char * WC_ERR_MSG_LEN)]


# Every struct handed to the library lives in a zeroed buffer with room to
# spare: a newer libwcache that appends fields (wcache.h promises zero means
# the default) reads zeros, and one that writes more fills the spare bytes,
# never the memory beyond.
_SLACK = 1024


_BUF = {}  # cls -> its buffer type (making the array type costs more than the rest)


def new(cls, *args):
    """cls(*args) in a zeroed buffer _SLACK bytes longer than cls."""
    t = _BUF.get(cls)
    if t is None:
        t = _BUF[cls] = ctypes.c_char * (ctypes.sizeof(cls) + _SLACK)
    obj = cls.from_buffer(t())
    for (name, _), v in zip(cls._fields_, args):
        setattr(obj, name, v)
    return obj


RELEASE_FN = ctypes.CFUNCTYPE(None, c_void_p)
P = ctypes.POINTER
_E = P(WcError)

# name: (restype, argtypes)
_PROTOS = {
    "wc_api_version": (c_int, []),
    "wc_connect": (c_int, [P(WcConnectOpts), P(c_void_p), _E]),
    "wc_close": (None, [c_void_p]),
    "wc_hello": (c_int, [c_void_p, P(WcExpect), P(WcInfo), _E]),
    "wc_attach": (c_int, [c_void_p, c_uint, P(c_void_p), P(WcAttachTimes), _E]),
    "wc_manifest": (c_int, [c_void_p, P(c_void_p), _E]),
    "wc_detach": (c_int, [c_void_p, _E]),
    "wc_model_info": (P(WcInfo), [c_void_p]),
    "wc_tensor_count": (c_u64, [c_void_p]),
    "wc_tensor_at": (P(WcTensor), [c_void_p, c_u64]),
    "wc_tensor_find": (P(WcTensor), [c_void_p, c_char_p]),
    "wc_pool_count": (c_u32, [c_void_p]),
    "wc_pool_at": (c_int, [c_void_p, c_u32, P(WcPoolView)]),
    "wc_model_span": (c_int, [c_void_p, P(WcPoolView), P(c_u64), c_u32]),
    "wc_model_layout": (ctypes.c_size_t, [c_void_p, c_void_p, ctypes.c_size_t]),
    "wc_model_layout_eq": (c_int, [c_void_p, c_char_p, ctypes.c_size_t]),
    "wc_verify": (c_int, [c_void_p, P(c_u64), _E]),
    "wc_verify_tensor": (c_int, [c_void_p, P(WcTensor), _E]),
    "wc_daemon_fd": (c_int, [c_void_p]),
    "wc_daemon_pid": (c_int, [c_void_p]),
    "wc_notice_fd": (c_int, [c_void_p]),
    "wc_notice_read": (c_int, [c_void_p, P(WcNotice), _E]),
    "wc_ping": (c_int, [c_void_p, c_uint, _E]),
    "wc_status": (c_int, [c_void_p, P(c_void_p), _E]),
    "wc_shutdown": (c_int, [c_void_p, _E]),
    "wc_sleep": (c_int, [c_void_p, c_uint, P(WcLifeResult), _E]),
    "wc_wake": (c_int, [c_void_p, P(WcLifeResult), _E]),
    "wc_update": (c_int, [c_void_p, c_char_p, P(WcLifeResult), _E]),
    "wc_update_flags": (c_int, [c_void_p, c_char_p, c_uint, P(WcLifeResult), _E]),
    "wc_times": (None, [c_void_p, P(WcAttachTimes)]),
    "wc_model_device": (c_int, [c_void_p]),
    "wc_tensor_size": (ctypes.c_size_t, []),
    "wc_dl_owner_new": (c_void_p, [RELEASE_FN, c_void_p]),
    "wc_dl_owner_put": (None, [c_void_p]),
    "wc_dl_owner_refs": (ctypes.c_long, [c_void_p]),
    "wc_dl_tensor": (c_int, [c_void_p, c_void_p, c_int, c_int, c_uint, c_uint,
                             c_u32, P(ctypes.c_int64), P(c_void_p), _E]),
    "wc_dl_drop": (None, [c_void_p]),
    "wc_dl_live": (ctypes.c_long, []),
    "wc_dl_python": (None, [c_void_p, c_void_p]),
    "wc_dl_capsule_destructor": (None, [c_void_p]),
    "wc_dl_shutdown": (None, []),
}
_OPTIONAL = {
    # update sessions from a trainer's memory (issue 29)
    "wc_push_open": (c_int, [c_void_p, c_uint, c_u64, c_uint, P(c_void_p), _E]),
    "wc_push_write": (c_int, [c_void_p, c_char_p, c_char_p, c_u32, P(c_u64), c_void_p,
                              c_u64, _E]),
    "wc_push_write_dev": (c_int, [c_void_p, c_char_p, c_char_p, c_u32, P(c_u64), c_void_p,
                                  c_u64, c_int, c_void_p, _E]),
    "wc_push_commit": (c_int, [c_void_p, P(WcLifeResult), _E]),
    "wc_push_abort": (c_int, [c_void_p, _E]),
    "wc_push_prepare": (c_int, [c_void_p, P(WcLifeResult), _E]),
    "wc_pause": (c_int, [c_void_p, P(WcLifeResult), _E]),
    "wc_resume": (c_int, [c_void_p, P(WcLifeResult), _E]),
    "wc_push_tensor_count": (c_u64, [c_void_p]),
    "wc_push_tensor_at": (c_int, [c_void_p, c_u64, P(WcPushTensor)]),
    "wc_push_version": (c_u64, [c_void_p]),
    "wc_push_times": (None, [c_void_p, P(WcPushTimes)]),
    # HELLO and ATTACH in one call (libwcache after 0.1.0's first cut; an
    # older one: the two calls)
    "wc_hello_attach": (c_int, [c_void_p, P(WcExpect), P(WcInfo), c_uint, P(c_void_p),
                                P(WcAttachTimes), _E]),
}


_SONAMES = ("libwcache.so.0", "libwcache.so")


def _beside():
    """Directories where an install put the library beside this package:
    the package's own directory, the lib directory of the prefix it is
    installed under (PREFIX/lib/python3.X/site-packages/wcache ->
    PREFIX/lib: make install PREFIX=/usr/local, or PREFIX=$VIRTUAL_ENV for
    a venv's), and this interpreter's prefix's (an editable install)."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = [here]
    d = here
    while os.path.dirname(d) != d:
        d = os.path.dirname(d)
        if os.path.basename(d) in ("lib", "lib64"):
            out.append(d)
            break
    out.append(os.path.join(sys.prefix, "lib"))
    return out


def _pkg_config():
    """libdir of pkg-config's wcache.pc (make install writes it), or None."""
    try:
        r = subprocess.run(["pkg-config", "--variable=libdir", "wcache"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    d = r.stdout.decode("utf-8", "surrogateescape").strip() if r.returncode == 0 else ""
    root = os.environ.get("PKG_CONFIG_SYSROOT_DIR")
    if d and root and not os.path.isdir(d):
        d = root.rstrip("/") + d
    return d or None


def _open():
    """(the library, where it was found): $WCACHE_LIB alone when set; else
    the first of: beside the package (_beside), pkg-config's libdir, the
    loader's libwcache.so.0 (make install ran ldconfig) or libwcache.so."""
    path = os.environ.get("WCACHE_LIB")
    if path:
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            raise OSError("wcache: cannot load libwcache from WCACHE_LIB=%s (%s): set it to the "
                          "library (<build>/lib/libwcache.so), or unset it to use an installed one" % (path, e))
    tried, errors = [], []

    def files(dirs):
        return [os.path.join(d, n) for d in dirs for n in _SONAMES]
    for f in files(_beside()):
        tried.append(f)
        if os.path.isfile(f):
            try:
                return ctypes.CDLL(f), f
            except OSError as e:
                errors.append(str(e))
    pc = _pkg_config()
    tried.append("pkg-config wcache's libdir (%s)" % (pc or "no wcache.pc found"))
    for f in files([pc] if pc else []):
        if os.path.isfile(f):
            try:
                return ctypes.CDLL(f), f
            except OSError as e:
                errors.append(str(e))
    for name in _SONAMES:
        tried.append("the loader's " + name)
        try:
            return ctypes.CDLL(name), name
        except OSError as e:
            errors.append(str(e))
    raise OSError("wcache: cannot load libwcache: looked %s (%s). Install it with make install "
                  "(as root: the loader finds it; PREFIX=<this venv> puts it beside the package; "
                  "or PKG_CONFIG_PATH=<PREFIX>/lib/pkgconfig), or set "
                  "WCACHE_LIB=<build>/lib/libwcache.so" % (", ".join(tried), "; ".join(errors)))


lib, lib_path = _open()
for _name, (_res, _args) in _PROTOS.items():
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args
HAVE = {}
for _name, (_res, _args) in _OPTIONAL.items():
    _f = getattr(lib, _name, None)
    HAVE[_name] = _f is not None
    if _f is not None:
        _f.restype = _res
        _f.argtypes = _args

# The library's struct wc_tensor: its size steps through the table; a
# library with padded_rows (at the end) has the longer one.
TENSOR_SIZE = lib.wc_tensor_size()
HAVE_PADDED_ROWS = TENSOR_SIZE >= ctypes.sizeof(WcTensorPadded)
TENSOR_STRUCT = WcTensorPadded if HAVE_PADDED_ROWS else WcTensor

# PyCapsule through the interpreter's own API (ctypes.pythonapi holds the GIL).
_py = ctypes.pythonapi
_py.PyCapsule_New.restype = ctypes.py_object
_py.PyCapsule_New.argtypes = [c_void_p, c_char_p, c_void_p]
lib.wc_dl_python(ctypes.cast(_py.PyCapsule_IsValid, c_void_p),
                 ctypes.cast(_py.PyCapsule_GetPointer, c_void_p))
CAPSULE_DESTRUCTOR = ctypes.cast(lib.wc_dl_capsule_destructor, c_void_p)


def s(b):
    """C string (bytes) to str."""
    return b.decode("utf-8", "replace") if b is not None else None


def b(x):
    """str (or path-like) to C string, None stays NULL."""
    if x is None:
        return None
    return os.fsencode(x)
