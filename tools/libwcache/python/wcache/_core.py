# SPDX-License-Identifier: MIT
"""Connection and Model: libwcache's calls, one Python object each.

Lifetime. A Model is one lease (wc_attach). Every tensor handed out is a
DLPack tensor built by wc_dl_tensor on the Model's wc_dl_owner, so it holds a
reference that its deleter drops when the framework frees the memory's last
view. model.detach() (or garbage collection) only drops the Model's own
reference; the real wc_detach runs when the count reaches 0, from the
release callback, and conn.close() closes the socket only after every lease
on it has ended. So no call and no order of deletions unmaps memory that a
live tensor points at, and the mapping goes away with the last tensor.

Threads. Each connection has one lock around every libwcache call on it
(libwcache's rule: one thread at a time); the release callback takes it too
and may run on any thread that drops a tensor.
"""
import collections
import collections.abc
import ctypes
import errno
import gc
import itertools
import json
import operator
import struct
import os
import atexit
import threading
import time
import warnings

from . import _device, _dtypes, _lib, errors
from ._lib import lib

_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_libc.free.restype = None

TensorInfo = collections.namedtuple(
    "TensorInfo", "name dtype shape nbytes pool offset hash padded_rows flags")
TensorInfo.__doc__ = """One manifest entry: checkpoint names, fused views and
aliases alike (views share bytes with the entries they cover). hash is the
XXH3-128 as 32 hex digits, None when the daemon did not hash; padded_rows is
the padded row count P of a vocabulary-padded tensor (0: none; always 0
with a library that predates it); flags are wcache.h's WC_TENSOR_* (hashed,
and with the engine layouts view and alias)."""
LifeResult = collections.namedtuple(
    "LifeResult", "version level bytes seconds verify_seconds msg")
Notice = collections.namedtuple("Notice", "kind version msg")
NOTICE_SHUTDOWN, NOTICE_VERSION, NOTICE_OTHER, NOTICE_HANDOVER = 1, 2, 3, 4
_NOTICE_NAMES = {1: "shutdown", 2: "version", 3: "other", 4: "handover",
                 5: "in_place", 6: "incomplete"}


def _raise(ret, err, connecting=False):
    code = err.code or -ret
    raise errors.from_code(code, _lib.s(err.msg) or os.strerror(code), connecting)


class _Handle:
    """The C connection. Closed once close() was asked for and no lease on
    it is left."""

    def __init__(self, ptr):
        self.ptr = ptr
        self.lock = threading.RLock()
        self.leases = set()
        self.close_asked = False
        self.pid = os.getpid()

    def forked(self):
        """True in a child forked after the connect: the socket is the
        parent's too, and so are the leases (wcache.h: after fork, one of
        the two processes uses the connection). A child's dropped Model
        must not DETACH the parent's lease, nor its close wc_close (which
        detaches every model of the C connection)."""
        return os.getpid() != self.pid

    def maybe_close(self):
        with self.lock:
            if self.close_asked and not self.leases and self.ptr:
                if not self.forked():
                    lib.wc_close(self.ptr)
                self.ptr = None


# Leases whose memory may still be in use, by key (the release callback's
# argument): kept here, not by the Model, so that they outlive it.
_LEASES = {}
_keys = itertools.count(1)
# Leases taken by an attach's C call that no _Lease holds yet (tokens,
# also among their connection's leases: see Connection._attach_call)
_PENDING = set()


class _Lease:
    def __init__(self, handle, mptr):
        self.handle = handle
        self.m = mptr
        self.key = next(_keys)
        self.detach_error = None
        self.rewritten = 0        # resumes after which its hashes may be new
        _LEASES[self.key] = self
        handle.leases.add(self)
        self.owner = lib.wc_dl_owner_new(_RELEASE, self.key)
        if not self.owner:
            self._end()
            raise MemoryError("wcache: out of memory for a tensor owner")

    def drop(self):
        """The Model is done with it; tensors may still hold it."""
        o, self.owner = self.owner, None
        if o:
            lib.wc_dl_owner_put(o)

    def _end(self):
        h = self.handle
        err = _lib.new(_lib.WcError)
        with h.lock:
            if self.m and h.ptr and not h.forked():
                if lib.wc_detach(self.m, ctypes.byref(err)) < 0:
                    self.detach_error = _lib.s(err.msg)
            self.m = None
            h.leases.discard(self)
        _LEASES.pop(self.key, None)
        h.maybe_close()


def _release(arg):
    # Runs on whichever thread dropped the last reference; never raises.
    try:
        lease = _LEASES.get(arg or 0)
        if lease is not None:
            lease._end()
    except BaseException:  # noqa: a callback must not raise into C
        pass


_RELEASE = _lib.RELEASE_FN(_release)
# An interpreter that exits frees its tensors after its modules: no release
# runs then (the mappings end with the process).
atexit.register(lib.wc_dl_shutdown)


def _info_dict(info):
    return {
        "pid": info.pid, "identity": _lib.s(info.identity),
        "version": info.version, "tensors": info.tensors,
        "bytes": info.bytes, "device": _lib.s(info.device),
        "model": _lib.s(info.model), "tp_size": info.tp_size,
        "tp_rank": info.tp_rank, "pp_size": info.pp_size,
        "pp_rank": info.pp_rank, "protocol": info.protocol,
        "mem": "cuda" if info.mem == _lib.WC_MEM_CUDA else "host",
    }


def _life(r):
    return LifeResult(r.version, r.level, r.bytes, r.seconds,
                      r.verify_seconds, _lib.s(r.msg))


class _Paused:
    """Connection.paused(): pause on entry, resume on exit."""

    def __init__(self, conn):
        self.conn = conn
        self.result = None

    def __enter__(self):
        self.conn.pause()
        return self

    def __exit__(self, *exc):
        self.result = self.conn.resume()
        return False


class Connection:
    """One connection to one rank daemon (wcache.connect)."""

    def __init__(self, device=None, runtime_dir=None, socket=None,
                 timeout_ms=0, label=None, trust_uid=0):
        # torch's spellings ("cuda:0", torch.device, 0) to libwcache's ("0")
        device = _device.parse(device, "wcache.connect's device").spec
        self._device = device
        o = _lib.new(_lib.WcConnectOpts, _lib.b(device), _lib.b(runtime_dir),
                     _lib.b(socket), int(timeout_ms),
                     _lib.b(label or "python pid %d" % os.getpid()),
                     int(trust_uid))
        ptr = ctypes.c_void_p()
        err = _lib.new(_lib.WcError)
        ret = lib.wc_connect(ctypes.byref(o), ctypes.byref(ptr), ctypes.byref(err))
        if ret < 0:
            _raise(ret, err, connecting=True)
        self._h = _Handle(ptr.value)
        self.info = None

    # -- plumbing ---------------------------------------------------------
    def _ptr(self):
        p = self._h.ptr
        if not p or self._h.close_asked:
            raise errors.Error(errno.EBADF, "wcache: the connection is closed")
        return p

    def _call(self, fn, *args):
        err = _lib.new(_lib.WcError)
        with self._h.lock:
            ret = fn(self._ptr(), *args, ctypes.byref(err))
        if ret < 0:
            _raise(ret, err)
        return ret

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def close(self):
        """Closes the connection once every Model on it and every tensor of
        those Models is gone (until then the leases stay held)."""
        h = getattr(self, "_h", None)
        if h is not None:
            h.close_asked = True
            h.maybe_close()

    @property
    def closed(self):
        return self._h.close_asked

    # -- requests ---------------------------------------------------------
    @staticmethod
    def _expect(model_dir, tp_size, tp_rank, pp_size, pp_rank, rules_file, same_path,
                layout_file, ep_size, ep_rank, vocab_pad):
        if model_dir is None:
            return None
        return ctypes.byref(_lib.new(_lib.WcExpect, _lib.b(model_dir), tp_size, tp_rank,
                                     pp_size, pp_rank, _lib.b(rules_file),
                                     1 if same_path else 0, _lib.b(layout_file),
                                     ep_size, ep_rank, vocab_pad))

    def hello(self, model_dir=None, tp_size=1, tp_rank=0, pp_size=1,
              pp_rank=0, rules_file=None, same_path=False, layout_file=None,
              ep_size=0, ep_rank=0, vocab_pad=0):
        """HELLO with the engine's identity (model_dir None: accept what is
        served, for tools); returns what the daemon serves (a dict).
        IdentityMismatch lists every differing field. The identity is the
        content; same_path also requires the daemon's model path. The
        layout arguments are wcd's --layout, --ep-size/--ep-rank and
        --vocab-pad (0: the preset's, none, the layout's)."""
        info = _lib.new(_lib.WcInfo)
        x = self._expect(model_dir, tp_size, tp_rank, pp_size, pp_rank, rules_file, same_path,
                         layout_file, ep_size, ep_rank, vocab_pad)
        self._call(lib.wc_hello, x, ctypes.byref(info))
        self.info = _info_dict(info)
        return self.info

    def _attach_call(self, model_dir, tp_size, tp_rank, pp_size, pp_rank, rules_file,
                     writable, same_path, layout_file, ep_size, ep_rank, vocab_pad):
        """The HELLO and ATTACH of attach() as a call with every argument
        made here: call() (under the connection's lock) runs them in C, as
        one call where the library has wc_hello_attach (a thread that does
        not come back to the interpreter between the two does not wait for
        the GIL there), and returns what _attach_end takes."""
        x = self._expect(model_dir, tp_size, tp_rank, pp_size, pp_rank, rules_file, same_path,
                         layout_file, ep_size, ep_rank, vocab_pad)
        info = _lib.new(_lib.WcInfo)
        m = ctypes.c_void_p()
        times = _lib.new(_lib.WcAttachTimes)
        flags = _lib.WC_ATTACH_WRITABLE if writable else 0
        err = _lib.new(_lib.WcError)
        self._ptr()   # a closed connection fails here, at once
        args = (ctypes.byref(info), flags, ctypes.byref(m), ctypes.byref(times), ctypes.byref(err))

        def call():
            # under the connection's lock: closed meanwhile (while a
            # PendingModel's thread waited for the lock), EBADF here
            ptr = self._ptr()
            if _lib.HAVE["wc_hello_attach"]:
                ret = lib.wc_hello_attach(ptr, x, *args)
            else:
                ret = lib.wc_hello(ptr, x, args[0], args[4])
                if ret >= 0:
                    ret = lib.wc_attach(ptr, *args[1:])
            # nothing else here: another ctypes call (the lease's owner)
            # would wait for the GIL once more on a thread. A token among
            # the connection's leases until the lease is made, so that a
            # close() meanwhile waits for it
            token = None
            if ret >= 0:
                token = object()
                self._h.leases.add(token)
                _PENDING.add(token)
            return ret, err, info, m.value, times, token
        return call

    def _lease_of(self, done):
        """The _Lease of a successful call()'s model, its token gone."""
        try:
            return _Lease(self._h, done[3])
        finally:
            self._h.leases.discard(done[5])
            _PENDING.discard(done[5])
            self._h.maybe_close()

    def _attach_end(self, done, writable, framework):
        """The Model of a call() of _attach_call, or its error raised."""
        ret, err, info, _, times, _ = done
        if ret < 0:
            _raise(ret, err)
        lease = self._lease_of(done)
        self.info = _info_dict(info)
        try:
            return Model(lease, writable, framework, times)
        except BaseException:
            lease.drop()
            raise

    def _attach_drop(self, done):
        """A call()'s lease that no Model will take: ended (detached)."""
        if done[0] >= 0 and done[3]:
            self._lease_of(done).drop()

    def attach(self, model_dir=None, tp_size=1, tp_rank=0, pp_size=1,
               pp_rank=0, rules_file=None, writable=False, framework=None,
               same_path=False, layout_file=None, ep_size=0, ep_rank=0,
               vocab_pad=0, wait=True):
        """HELLO (with the identity these arguments describe) and ATTACH:
        returns a Model, a mapping from tensor name to a tensor of
        framework ("torch" or "pt", "numpy" or "np"; None: torch when
        importable).

        wait=False: returns at once a PendingModel whose thread does the
        same (see PendingModel): an engine builds its module meanwhile and
        hands the PendingModel to wcache.torch.load_into, which waits."""
        if framework is not None:   # a bad name fails here, before the attach
            framework = _framework_name(framework)
        # a closed connection fails here (_ptr), not in a thread
        call = self._attach_call(model_dir, tp_size, tp_rank, pp_size, pp_rank, rules_file,
                                 writable, same_path, layout_file, ep_size, ep_rank, vocab_pad)
        if not wait:
            return PendingModel(self, call, writable, framework)
        with self._h.lock:
            done = call()
        return self._attach_end(done, writable, framework)

    def ping(self, depth=1):
        self._call(lib.wc_ping, depth)

    def status(self):
        """The daemon's STATUS object (a dict)."""
        p = ctypes.c_void_p()
        self._call(lib.wc_status, ctypes.byref(p))
        try:
            return json.loads(ctypes.string_at(p.value).decode())
        finally:
            _libc.free(p.value)

    def shutdown(self):
        """Asks the daemon to stop (as SIGTERM does)."""
        self._call(lib.wc_shutdown)

    def sleep(self, level=1):
        """SLEEP level 1 (host copy) or 2 (drop). Busy while leases are
        held (the message names the pids)."""
        r = _lib.new(_lib.WcLifeResult)
        self._call(lib.wc_sleep, level, ctypes.byref(r))
        return _life(r)

    def wake(self):
        r = _lib.new(_lib.WcLifeResult)
        self._call(lib.wc_wake, ctypes.byref(r))
        return _life(r)

    def pause(self):
        """Tells the daemon this engine will not read its pools until
        resume(), so that an in-place update (update_from(in_place=True))
        may rewrite them. The promise ends with the connection. Returns a
        LifeResult (the version the pools hold)."""
        self._need("wc_pause")
        r = _lib.new(_lib.WcLifeResult)
        self._call(lib.wc_pause, ctypes.byref(r))
        return _life(r)

    def resume(self):
        """Reads again: returns a LifeResult whose version is what the
        same mappings hold now (after an in-place update, the new version:
        no re-attach). Busy while an in-place update writes, or while the
        served version is incomplete (its trainer died): stay paused until
        the notice of a complete update."""
        self._need("wc_resume")
        r = _lib.new(_lib.WcLifeResult)
        self._call(lib.wc_resume, ctypes.byref(r))
        with self._h.lock:
            for lease in self._h.leases:
                if isinstance(lease, _Lease):
                    lease.rewritten += 1   # the Models re-read hashes and version
        return _life(r)

    def paused(self):
        """A context manager: pause() on entry, resume() on exit (with
        paused(): ... while the trainer updates in place). The exit's
        LifeResult is the manager's .result."""
        return _Paused(self)

    def _need(self, name):
        if not _lib.HAVE.get(name):
            raise errors.Error(errno.ENOSYS, "wcache: this libwcache has no %s: install a "
                               "newer one" % name)

    def update(self, model_dir=None, allow_layout_change=False):
        """UPDATE: load model_dir (None: the served directory again) as
        the next version; DaemonSleeping while the daemon sleeps,
        IdentityMismatch when a tensor's name, dtype or shape would change
        (unless allow_layout_change)."""
        r = _lib.new(_lib.WcLifeResult)
        self._call(lib.wc_update_flags, _lib.b(model_dir),
                   1 if allow_layout_change else 0, ctypes.byref(r))
        return _life(r)

    def update_from(self, tensors, allow_layout_change=False, timeout_ms=0, partial=False,
                    cast=False, in_place=False, held_wait=2.0, keep_spare=False):
        """Pushes new weights from this process's memory as the next
        version (no disk): tensors is a mapping or an iterable of (name,
        tensor), torch CPU or CUDA tensors (any GPU of the host; copied
        on the device on its current stream) or numpy arrays, in the
        checkpoint's names, dtypes and shapes. Every checkpoint tensor
        must be given once; another shape or an unknown name is refused
        naming the tensor, and so is another dtype unless cast=True (a
        float cast to the served float dtype on the tensor's device).
        Engines get a version notice as after update(). partial: only
        the tensors given change (the layers a step touched), the others
        keep the served version's bytes. in_place: rewrite the served
        version's pools instead of a second copy (every engine holding a
        lease must have paused; an abort leaves the version incomplete
        until a complete update). held_wait: the daemon keeps two
        versions, so an open while engines still hold the one before the
        served one (they were told to re-attach) is refused BUSY; it is
        tried again for up to held_wait seconds (0: raise at once).
        keep_spare (an RL loop's updates, beside, on a GPU): the replaced
        version's device memory is kept once no engine holds it, and the
        next update takes it instead of allocating (a second copy of the
        weights stays on the device meanwhile; an update without it frees
        it). Returns a LifeResult; on any error the session is aborted and
        the served version stays. See _push.py."""
        from . import _push
        return _push.update_from(self, tensors, allow_layout_change, timeout_ms, partial,
                                 cast, in_place, held_wait, keep_spare)

    def notice_fd(self):
        """Readable when a notice (or EOF) waits: for select/poll or
        asyncio's loop.add_reader; then call read_notice()."""
        return lib.wc_notice_fd(self._ptr())

    def daemon_fd(self):
        """The daemon's pidfd: readable once the daemon has exited (-1
        when its pid is not visible here)."""
        return lib.wc_daemon_fd(self._ptr())

    @property
    def daemon_pid(self):
        return lib.wc_daemon_pid(self._ptr())

    def read_notice(self):
        """A Notice(kind, version, msg) when one is waiting, else None
        (never blocks); DaemonGone once the daemon closed the connection."""
        n = _lib.new(_lib.WcNotice)
        ret = self._call(lib.wc_notice_read, ctypes.byref(n))
        if ret == 0:
            return None
        return Notice(_NOTICE_NAMES.get(n.kind, "other"), n.version, _lib.s(n.msg))

    def times(self):
        """Nanoseconds of each phase of the last connect/hello/attach."""
        t = _lib.new(_lib.WcAttachTimes)
        with self._h.lock:
            lib.wc_times(self._ptr(), ctypes.byref(t))
        return {n: getattr(t, n) for n, _ in t._fields_}

    def push_times(self):
        """The trainer's side of this connection's last update session
        (update_from): nanoseconds of its open, plan, pool maps, copies,
        the commit's wait for them, the commit's round trip and the
        unmap, and how many pools were mapped and copies made (wcache.h's
        wc_push_times)."""
        if not _lib.HAVE.get("wc_push_times"):
            raise errors.Error(errno.ENOSYS, "wcache: this libwcache has no wc_push_times: "
                               "install a newer one")
        t = _lib.new(_lib.WcPushTimes)
        with self._h.lock:
            lib.wc_push_times(self._ptr(), ctypes.byref(t))
        return {n: getattr(t, n) for n, _ in t._fields_}


class PendingModel:
    """An attach on a thread of its own (Connection.attach(wait=False)).

    Most of an attach is libwcache's (the identity of the model directory,
    the manifest, the mappings), during which ctypes lets go of the GIL:
    an engine that builds its module meanwhile (Python) hides the attach
    behind the construction. The thread makes one C call (HELLO and ATTACH
    together, every argument made before it starts) and returns to the
    interpreter only at its end: each return of a thread to Python waits
    for the GIL, up to its switch interval (5 ms), while the engine's
    thread runs Python. The Model is then made by the first result(), on
    the caller's thread. result() waits and returns the Model, or raises
    what attach raised (the same exception each time it is asked). The
    thread holds the connection's lock from HELLO to the lease, so other
    calls on the connection wait for it. Lifetime is the Model's: a
    PendingModel dropped before result() ends its lease when collected
    (after the thread's end). The thread is not a daemon thread: an
    interpreter that exits waits for the attach (bounded by the
    connection's timeout_ms)."""

    def __init__(self, conn, call, writable, framework):
        self._conn = conn
        self._end = (writable, framework)
        self._done = None        # what call() returned
        self._model = None
        self._error = None
        self._making = threading.Lock()
        self.started = time.monotonic()
        self.finished = None    # time.monotonic() when the thread ended
        self._thread = threading.Thread(target=self._run, args=(call,),
                                        name="wcache attach")
        self._thread.start()

    def _run(self, call):
        try:
            with self._conn._h.lock:
                self._done = call()
        except BaseException as e:  # noqa: handed to result()
            self._error = e
        self.finished = time.monotonic()

    def done(self):
        """True once the attach has finished (result() will not wait)."""
        return not self._thread.is_alive()

    def result(self, timeout=None):
        """The Model (waits for it; timeout in seconds, None: as long as
        the attach takes). Raises what the attach raised, or Timeout when
        timeout passed first (call again to wait longer)."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise errors.Timeout(errno.ETIMEDOUT, "wcache: the attach did not finish within %s s; "
                                 "call result() again to wait longer" % (timeout,))
        with self._making:   # one Model, also when two threads ask at once
            if self._error is None and self._model is None:
                done, self._done = self._done, None
                try:
                    self._model = self._conn._attach_end(done, *self._end)
                except BaseException as e:  # noqa: kept, raised each time
                    self._error = e
        if self._error is not None:
            raise self._error
        return self._model

    def __del__(self):
        # dropped before result(): the lease the thread took ends here
        done = getattr(self, "_done", None)
        if done is not None:
            self._done = None
            try:
                self._conn._attach_drop(done)
            except Exception:   # noqa: BLE001 (interpreter shutdown: the process's end frees it)
                pass

    def __repr__(self):
        return "<wcache.PendingModel %s>" % (
            "running" if self._thread.is_alive() else
            "failed: %s" % (self._error,) if self._error is not None else "done")


def connect(device=None, runtime_dir=None, socket=None, timeout_ms=0,
            label=None, trust_uid=0):
    """Connects to the rank daemon of device (torch's spellings: "cuda:0",
    "cuda", 0, torch.device("cuda", 0); "GPU-<uuid>", "host", "host:NAME",
    "cpu": see wcache._device) under runtime_dir (default: $WCACHE_SOCKET_TEMPLATE, else
    $XDG_RUNTIME_DIR/wcache, else /tmp/wcache-$UID), or to socket. A context
    manager. NoDaemon when none serves; Refused when the daemon runs as
    another uid than ours, root, the 'wcache' account, $WCACHE_TRUST_UID or
    trust_uid."""
    return Connection(device, runtime_dir, socket, timeout_ms, label, trust_uid)


# framework names: the package's and their short forms ("pt", "np": what
# transformers' return_tensors and safetensors' framework= say)
_FRAMEWORKS = {"torch": "torch", "pt": "torch", "numpy": "numpy", "np": "numpy"}


def _framework_name(f):
    """"torch" or "numpy" for f (an alias too); ValueError naming f else."""
    got = _FRAMEWORKS.get(f) if isinstance(f, str) else None
    if got is None:
        raise ValueError("wcache: framework must be 'torch' (or 'pt') or 'numpy' (or 'np'), not %r" % (f,))
    return got


def _default_framework():
    try:
        import torch  # noqa: F401
        return "torch"
    except ImportError:
        return "numpy"


class _Exporter:
    """What numpy.from_dlpack wants: __dlpack__ and __dlpack_device__."""

    def __init__(self, capsule, device):
        self._capsule = capsule
        self._device = device

    def __dlpack__(self, stream=None, **kw):
        c, self._capsule = self._capsule, None
        return c

    def __dlpack_device__(self):
        return self._device


class Model(collections.abc.Mapping):
    """One attached model version: name -> tensor (the default framework),
    plus .tensor(name, framework, padded), .tensors(framework, names),
    .manifest, .version, .identity, .info, .device, verify(), detach().

    Lazy: the attach reads nothing of the C table in Python. A name asked
    for (model[name], name in model, tensors(names=...)) is looked up in
    libwcache's index (wc_tensor_find) and its one row read; the whole
    table is parsed (_table) only by what needs every entry: iteration,
    .manifest, tensors() of all. A tensor is made when it is asked for, so
    an engine that binds a few hundred of a DeepSeek-V3 rank's 45,633
    tensors (the stacked expert views: load_into asks for the names the
    module binds) makes those alone. made counts the tensors this Model
    has made (tests, bench/py/py_lazy.py)."""

    def __init__(self, lease, writable, framework, times):
        self._lease = lease
        self._writable = bool(writable)
        self._framework = framework
        self._pools = {}
        self._warned = False
        m = lease.m
        info = lib.wc_model_info(m).contents
        self.info = _info_dict(info)
        self.version = self.info["version"]
        self.identity = self.info["identity"]
        self.times = {n: getattr(times, n) for n, _ in times._fields_}
        self.ordinal = lib.wc_model_device(m)
        self.device = "cuda:%d" % self.ordinal if self.ordinal >= 0 else "cpu"
        n = lib.wc_tensor_count(m)
        self._n = n
        self.made = 0             # tensors made (tensor, tensors: counted by entry)
        self._tab = None          # _table's parse, read when first needed (_table_of)
        self._found = {}          # name -> index, as _find found them in C
        self._raw_ = None         # _raw
        self._rows_ = None
        self._addr = None
        self._pools_off = None    # _span_of: () pools apart, else offsets
        self._span = None
        self._ops = ()            # the ops of the last tensors("torch") (_plan)
        if n:
            first = lib.wc_tensor_at(m, 0)
            self._addr = ctypes.addressof(first.contents)
        self._manifest = None
        self._rewritten = lease.rewritten

    def _fresh(self):
        """After a resume (an in-place update may have rewritten the pools:
        wc_resume took the new hashes into the C table), the rows, the
        manifest and the version are read again; the names, dtypes and
        places are the same."""
        if self._rewritten == self._lease.rewritten or not self._lease.m:
            return
        self._rewritten = self._lease.rewritten
        self._rows_ = None
        self._manifest = None
        self.info = _info_dict(lib.wc_model_info(self._lease.m).contents)
        self.version = self.info["version"]

    def _table_of(self):
        """(fields, names, dtypes, columns, index, plan box): the whole
        table parsed (_table: kept per layout in the process), read the
        first time something needs every entry (a 45k-entry rank: tens of
        ms, most of a first attach before the Model was lazy)."""
        if self._tab is None:
            self._check()
            self._tab = _table(self._lease.m, self._addr, self._n) if self._n else \
                ((), [], [], [()] * _ROW_FIELDS, {}, [0])
        return self._tab

    def _same_layout(self, other):
        """True when other (a Model) has this one's layout byte for byte
        (names, dtypes, shapes, pools, offsets, flags: _table's
        comparison), so a module bound to one binds the other's tensors
        at the same places: the next version of an update that kept the
        layout."""
        return self._n == other._n and self._table_of() is other._table_of()

    @property
    def _names(self):
        return self._table_of()[1]

    @property
    def _index(self):
        return self._table_of()[4]

    @property
    def _plan_box(self):
        return self._table_of()[5]   # shared by the Models of one table (_table)

    @property
    def _rows(self):
        """The table as tuples (_rows_of), built when first asked for."""
        self._fresh()
        if self._rows_ is None:
            # the current table's pointers and hashes (fields may be a
            # cached table's), read while the lease keeps the table
            tab = self._table_of()
            raw = ctypes.string_at(self._addr, self._n * _ROW.size) if self._n else b""
            self._rows_ = _rows_of(list(_ROW.iter_unpack(raw)), tab[1], tab[2])
        return self._rows_

    def _find(self, name):
        """The index of name, None when not served: the parsed table's
        index when there is one, else libwcache's (a hash lookup in C)."""
        if self._tab is not None:
            return self._tab[4].get(name)
        i = self._found.get(name)
        if i is not None or not isinstance(name, str) or "\0" in name or not self._n:
            return i
        try:
            b = name.encode()
        except UnicodeEncodeError:
            return None
        p = _tensor_find(self._lease.m, b)
        if not p:
            return None
        i = self._found[name] = (p - self._addr) // _ROW.size
        return i

    def _raw(self):
        """The C table's bytes in place (a ctypes array over them: valid
        while the lease holds the table), made once."""
        if self._raw_ is None:
            self._raw_ = _array(ctypes.c_char, self._n * _ROW.size).from_address(self._addr)
        return self._raw_

    def _row(self, i, name=None):
        """Entry i (named name, when the caller knows) as _rows_of's
        tuple, read from the current table (one row, while the table is
        not parsed whole)."""
        if self._rows_ is not None:
            return self._rows_[i]
        self._check()
        f = _ROW.unpack_from(self._raw(), i * _ROW.size)
        return _rows_of((f,), (name or ctypes.string_at(f[0]).decode(),),
                        (ctypes.string_at(f[1]).decode(),))[0]

    # -- mapping ------------------------------------------------------------
    def __getitem__(self, name):
        return self.tensor(name)

    def __iter__(self):
        return iter(self._index)

    def __len__(self):
        return self._n

    def __contains__(self, name):
        self._check()
        return self._find(name) is not None

    def __repr__(self):
        return "<wcache.Model %s v%d: %d tensors on %s%s>" % (
            self.info["model"], self.version, self._n, self.device,
            "" if self._lease.owner else ", detached")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()

    def __del__(self):
        try:
            self.detach()
        except Exception:
            pass

    def _check(self):
        if not self._lease.owner:
            raise errors.Error(errno.EBADF, "wcache: the model was detached; attach again")

    def _entry(self, name):
        """The index of name (the C table is only read while attached)."""
        self._check()
        i = self._find(name)
        if i is None:
            raise KeyError("wcache: the daemon serves no tensor named %r (%d tensors, e.g. %s)"
                           % (name, self._n, ", ".join(self._row(j)[0] for j in range(min(3, self._n)))))
        return i

    @property
    def manifest(self):
        """Every served name as a TensorInfo, in manifest order."""
        self._fresh()
        if self._manifest is None:
            self._check()
            self._manifest = [
                TensorInfo(r[0], r[1], r[2], r[3], r[5], r[6],
                           r[7].hex() if r[8] & _lib.WC_TENSOR_HASHED else None,
                           r[10], r[8])
                for r in self._rows]
        return self._manifest

    @property
    def framework(self):
        if self._framework is None:
            self._framework = _default_framework()
        return self._framework

    # -- tensors --------------------------------------------------------------
    def _framework_or(self, framework):
        f = _framework_name(framework) if framework is not None else self.framework
        if f == "numpy" and self.ordinal >= 0:
            raise ValueError("wcache: numpy arrays live on the CPU; this model is on %s: use framework='torch'"
                             % self.device)
        return f

    def _capsule(self, ptr, code, bits, shape):
        self._check()
        nd = len(shape)
        dims = _array(ctypes.c_int64, max(nd, 1))(*shape)
        out = ctypes.c_void_p()
        err = _lib.new(_lib.WcError)
        dev = (2, self.ordinal) if self.ordinal >= 0 else (1, 0)
        ret = lib.wc_dl_tensor(self._lease.owner, ptr, dev[0], dev[1], code,
                               bits, nd, dims, ctypes.byref(out), ctypes.byref(err))
        if ret < 0:
            _raise(ret, err)
        try:
            return _lib._py.PyCapsule_New(out.value, b"dltensor", _lib.CAPSULE_DESTRUCTOR)
        except BaseException:
            lib.wc_dl_drop(out.value)
            raise

    def _import(self, capsule, framework):
        if framework == "torch":
            import torch.utils.dlpack
            _warn_torch(self)
            return torch.utils.dlpack.from_dlpack(capsule)
        import numpy
        a = numpy.from_dlpack(_Exporter(capsule, (1, 0)))
        if not self._writable:
            a.flags.writeable = False
        return a

    def tensor(self, name, framework=None, padded=False):
        """The served tensor name as a framework tensor over the daemon's
        memory (no copy). padded=True: the [P, ...] view of a tensor the
        layout padded to P rows (the same pointer; P = padded_rows), the
        plain tensor when it was not padded."""
        f = self._framework_or(framework)
        i = self._entry(name)
        row = self._row(i)
        name, dt, shape, nbytes, ptr, pool, off = row[:7]
        if dt not in _dtypes.TABLE:
            raise TypeError("wcache: tensor %r has dtype %s, which this package does not know" % (name, dt))
        shape = list(shape)
        if padded:
            p = row[10]
            if p and shape:
                row = nbytes // shape[0] if shape[0] else 0
                pv = _lib.new(_lib.WcPoolView)
                lib.wc_pool_at(self._lease.m, pool, ctypes.byref(pv))
                if p < shape[0] or off + p * row > pv.size:
                    raise errors.BadReply(errno.EBADMSG, "wcache: tensor %r: padded_rows %d does not fit (%d rows, pool %d of %d bytes)"
                                          % (name, p, shape[0], pool, pv.size))
                shape[0] = p
        if dt in _dtypes.SUB_BYTE:
            shape = [nbytes]
        if f == "torch":
            import torch
            _dtypes.torch_dtype(dt, torch)  # refuses what this torch lacks
        code, bits = _dtypes.dlpack_for(dt, f)
        x = self._import(self._capsule(ptr, code, bits, shape), f)
        self.made += 1
        return _retype(x, dt, f)

    def _pool(self, i, framework, dtype=None):
        """Pool i as one framework tensor of bytes (one DLPack tensor),
        and its views as dtype (1-D, the whole pool), cached."""
        key = (i, framework, dtype)
        p = self._pools.get(key)
        if p is None:
            if dtype is not None:
                base = self._pool(i, framework)
                p = base.view(dtype) if base.numel() % _esize(dtype) == 0 else \
                    base[:base.numel() - base.numel() % _esize(dtype)].view(dtype)
                p = _unchained(p)
            else:
                pv = _lib.new(_lib.WcPoolView)
                if lib.wc_pool_at(self._lease.m, i, ctypes.byref(pv)) < 0:
                    raise errors.BadReply(errno.EBADMSG, "wcache: no pool %d" % i)
                if framework == "torch" and self._span_of():
                    o = self._pools_off[i]
                    p = self._span[o:o + pv.size]
                else:
                    p = self._import(self._capsule(pv.ptr, _dtypes.UINT, 8, [pv.size]), framework)
            self._pools[key] = p
        return p

    def tensors(self, framework=None, names=None):
        """Every served tensor, as a dict name -> tensor; names (an
        iterable of served names): those alone, in that order (KeyError
        for a name not served), made one by one without parsing the whole
        table, or, a quarter of the table or more, through the plan's
        runs as tensors() of all (_torch_runs). They are strided views of
        one DLPack tensor per pool, which keeps its pool (and so the
        lease) alive while any of them lives; the same views either way."""
        f = self._framework_or(framework)
        self._check()
        # thousands of tensors and no garbage cycle: the collections their
        # making triggers (each scanning the young objects, now and then
        # every object) find nothing; a third of tensors() of 45k
        was = gc.isenabled()
        gc.disable()
        try:
            if names is not None:
                if isinstance(names, (str, bytes)):
                    raise TypeError("wcache: tensors(names=) takes a list of served names, not one "
                                    "name (%r): pass [%r], or use model[name]" % (names, names))
                names = list(names)
                idx = [self._entry(nm) for nm in names]
                if f == "torch" and 4 * len(idx) >= self._n and _PLAN_FIRST:
                    # most of the table: parsed as tensors() of all would
                    # (kept per layout), the plan's runs batched
                    vals = self._torch_runs(idx)
                    out = {nm: vals[i] for nm, i in zip(names, idx)}
                else:
                    rows = [self._row(i, nm) for nm, i in zip(names, idx)]
                    out = self._torch_tensors_each(rows) if f == "torch" else self._numpy_tensors(rows)
            elif f == "torch":
                out = self._torch_tensors()
            else:
                out = self._numpy_tensors(self._rows)
        finally:
            if was:
                gc.enable()
        self.made += len(out)
        return out

    def _numpy_tensors(self, rows):
        import numpy
        out = {}
        for r in rows:
            name, dt, shape, nbytes, _, pool, off = r[:7]
            x = self._pool(pool, "numpy")[off:off + nbytes]
            if dt not in _dtypes.SUB_BYTE:
                x = x.view(numpy.dtype(_dtypes.TABLE[dt][4])).reshape(shape)
            out[name] = x
        return out

    def _left_over(self, used):
        """Served names not in used (a set of served names) whose bytes
        do not lie inside the union of used's bytes (fused views and
        aliases of bound memory lie inside): sorted. Read from the C
        table's pointer and length columns as torch tensors (one pass in
        C over a 45k-entry rank, no Python object per entry but the
        names returned)."""
        import torch
        self._check()
        n = self._n
        if not n:
            return []
        idx = sorted(i for i in map(self._find, used) if i is not None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # frombuffer of C memory: copied below
            tab = torch.frombuffer(self._raw(), dtype=torch.int64).view(n, _ROW.size // 8)
        a = tab[:, _COL_PTR].clone()
        e = a + tab[:, _COL_BYTES]
        left = torch.ones(n, dtype=torch.bool)
        if idx:
            ui = torch.tensor(idx, dtype=torch.int64)
            us, order = a[ui].sort()
            ue = e[ui][order]
            reach = ue.cummax(0).values
            new = torch.ones(len(idx), dtype=torch.bool)   # a merged range starts
            new[1:] = us[1:] > reach[:-1]
            last = torch.ones(len(idx), dtype=torch.bool)  # and ends
            last[:-1] = new[1:]
            starts, ends = us[new], reach[last]
            g = torch.searchsorted(starts, a, right=True) - 1
            left = (g < 0) | (e > ends[g.clamp(min=0)])
            left[ui] = False
        return sorted(self._row(i)[0] for i in left.nonzero().flatten().tolist())

    def _torch_tensors(self):
        """tensors("torch"). torch's cost of one view (as_strided: about
        2 us, most of it argument parsing and the autograd view record) is
        most of an attach, so views are made in batches (_plan): one
        as_strided [k, *shape] view split by one unbind (about 0.5 us a
        tensor) for each run of same-shaped tensors at evenly stepped
        offsets. With the pools in one span (_span_of) a run goes on across
        pools wherever the step holds (wcd packs big layers so that it
        does over the whole model: plan_pack in proto/plan/plan.h); with the
        pools apart runs end at pool boundaries. Every result has the
        shape, strides and offset that its own as_strided would give. The
        plans depend only on the table's dtypes, shapes, pools and offsets
        (and the pools' places in the span) and are kept with the table
        (_table), one per placement. Warm, in a loop of attaches, making
        one costs more than the batches save once (on the H200, torch
        2.11: 1.13 ms against 0.83 for one as_strided each and 0.71
        batched, bench/RESULTS.md); in a fresh process, where the first
        attach of a layout is, the views cost more and the plan less than
        that (here, torch 1.13, llama-1b's 179 tensors: 1.4-1.6 ms made
        and used against 1.9-2.1 one each), so the first attach makes the
        plan (_PLAN_FIRST; False: one view each at the first, the plan at
        the second, as before: bench/py/py_start.py's -each variants), and
        the later ones (a re-attach, the next version after an update)
        use it."""
        box = self._plan_box    # shared by the Models of one table (_table)
        if box[0] == 0 and not _PLAN_FIRST:   # a layout first seen: no plan yet
            box[0] = None
            return self._torch_tensors_each()
        plan, bases = self._plan_bases()
        ops, names_op, tmpl = plan[1], plan[5], plan[6]
        self._ops = ops
        vals = []
        put, put_all = vals.append, vals.extend
        for b, shape, st, off, k in ops:
            if k:
                put_all(bases[b].as_strided(shape, st, off).unbind(0))
            else:
                put(bases[b].as_strided(shape, st, off))
        # manifest order: a copy of the plan's dict of every name (its
        # order, its size: no resize as it fills), its values set in op
        # order by one update (40% less than picking the views in table
        # order with an itemgetter and building the dict of 45k pairs)
        out = tmpl.copy()
        out.update(zip(names_op, vals))
        return out

    def _plan_bases(self):
        """The plan of this table and placement (_plan, made when first
        asked for) and its base views."""
        import torch
        fields, names, dts = self._table_of()[:3]
        box = self._plan_box
        plans = box[0]
        if not plans:
            plans = box[0] = {}
        where = self._pools_off if self._span_of() else None
        plan = plans.get(where)
        if plan is None:
            plan = plans[where] = _plan(fields, dts, names, where)
        pools = plan[0]
        if where is not None:   # one view of the span per dtype
            span = self._span
            bases = [span if dt in _dtypes.SUB_BYTE else _unchained(span.view(_dtypes.torch_dtype(dt, torch)))
                     for dt, _ in pools]
        else:
            bases = [self._pool(pool, "torch") if dt in _dtypes.SUB_BYTE else
                     self._pool(pool, "torch", _dtypes.torch_dtype(dt, torch))
                     for dt, pool in pools]
        return plan, bases

    def _torch_runs(self, idx):
        """tensors("torch", names) for a large share of the table: the
        plan's ops that hold an entry of idx (indices), a run at least
        half of which is asked for as one as_strided + unbind (the views
        not asked for dropped, counted in made), a smaller part of a run
        one as_strided per entry asked; {index: view}. Where an
        engine binds most of a model (llama-8b's 291 checkpoint names of
        355) this keeps the batched views that tensors() of all has."""
        plan, bases = self._plan_bases()
        ops, where = plan[1], plan[4]
        if where[0] is None:    # entry -> (op, place in its run), made once
            by_op = [(j, q) for j, op in enumerate(ops) for q in range(op[4] or 1)]
            where[0] = plan[3](by_op) if len(by_op) > 1 else by_op   # in table order
        at = where[0]
        want = {}
        for i in idx:
            j, q = at[i]
            w = want.get(j)
            if w is None:
                want[j] = [(i, q)]
            else:
                w.append((i, q))
        vals = {}
        for j, asked in want.items():
            b, shape, st, off, k = ops[j]
            if not k:
                vals[asked[0][0]] = bases[b].as_strided(shape, st, off)
            elif 2 * len(asked) >= k:   # the run whole, the rest dropped
                views = bases[b].as_strided(shape, st, off).unbind(0)
                self.made += k - len(asked)
                for i, q in asked:
                    vals[i] = views[q]
            else:
                f = bases[b].as_strided
                for i, q in asked:
                    vals[i] = f(shape[1:], st[1:], off + q * st[0])
        return vals

    def _span_of(self):
        """True when every pool is in one torch tensor of bytes (self._span,
        pool i at self._pools_off[i]): libwcache mapped them back to back."""
        if self._pools_off is None:
            self._pools_off = ()
            n = lib.wc_pool_count(self._lease.m)
            pv = _lib.new(_lib.WcPoolView)
            offs = _array(ctypes.c_uint64, max(n, 1))()
            if n and lib.wc_model_span(self._lease.m, ctypes.byref(pv), offs, n) == n:
                self._span = self._import(self._capsule(pv.ptr, _dtypes.UINT, 8, [pv.size]), "torch")
                self._pools_off = tuple(offs[:n])
        return self._span is not None

    def _torch_tensors_each(self, rows=None):
        """tensors("torch") with one as_strided per tensor (no batches):
        what _torch_tensors replaced, kept to compare with (bench), and
        how tensors(names=...) makes the rows it asks for."""
        import torch
        out = {}
        # dtype -> {pool: (1-D view of the pool, element size, its storage
        # offset: as_strided's offset is the storage's, and a pool's view
        # starts inside the span's storage where there is one)}
        views = {}
        for r in self._rows if rows is None else rows:
            v = views.get(r[1])
            if v is None:
                v = views[r[1]] = {}
            pv = v.get(r[5])
            if pv is None:
                if r[1] in _dtypes.SUB_BYTE:
                    pv = (self._pool(r[5], "torch"), 0, 0)
                else:
                    d = _dtypes.torch_dtype(r[1], torch)
                    b = self._pool(r[5], "torch", d)
                    pv = (b, _esize(d), b.storage_offset())
                v[r[5]] = pv
            if pv[1]:
                out[r[0]] = pv[0].as_strided(r[2], r[9], r[6] // pv[1] + pv[2])
            else:
                out[r[0]] = pv[0][r[6]:r[6] + r[3]]
        return out

    # -- the rest ---------------------------------------------------------
    def verify(self):
        """Recomputes every tensor's XXH3-128 from the mapped bytes and
        compares with the manifest: HashMismatch names the first bad one."""
        self._check()
        bad = ctypes.c_uint64()
        err = _lib.new(_lib.WcError)
        with self._lease.handle.lock:
            ret = lib.wc_verify(self._lease.m, ctypes.byref(bad), ctypes.byref(err))
        if ret < 0:
            _raise(ret, err)
        return True

    def detach(self):
        """Gives up this Model's hold on the lease. The lease ends (and the
        memory is unmapped) now if no tensor of it is alive, else when the
        last one dies. Tensors handed out stay valid."""
        lease = getattr(self, "_lease", None)
        if lease is None:
            return
        self._pools = {}    # its own views hold the lease too
        self._span = None
        lease.drop()

    close = detach

    @property
    def detached(self):
        return not self._lease.owner


# struct wc_tensor as the library lays it out: the fields of WcTensor, then
# padded_rows where the library has it, then whatever a newer one added.
_BASE = "<QQI4x8QQQI4xQ16sI4x" + ("Q" if _lib.HAVE_PADDED_ROWS else "")
_ROW = struct.Struct(_BASE + "%dx" % (_lib.TENSOR_SIZE - struct.calcsize(_BASE)))
_ROW_FIELDS = len(_ROW.unpack(bytes(_ROW.size)))
assert _ROW.size == _lib.TENSOR_SIZE and _ROW.size % 8 == 0
# wc_tensor_find returning the entry's address as an int (Model._find):
# lib's prototype makes a pointer object and its contents' struct for each
_tensor_find = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ctypes.cast(lib.wc_tensor_find, ctypes.c_void_p).value)
# the data pointer's and the length's 64-bit words in a row (Model._left_over)
_COL_PTR = _lib.WcTensor.ptr.offset // 8
_COL_BYTES = _lib.WcTensor.bytes.offset // 8


def _read_table(addr, n):
    """The C tensor table: (fields, names, dtypes, columns), fields one
    tuple of _ROW per entry, columns the same by field. One copy and one unpack of the table, one copy and one
    decode of the names: libwcache keeps every name and dtype in one block,
    in table order ("name\0dtype\0..."); the pointers are checked against
    that order, and read one by one when they do not follow it."""
    raw = ctypes.string_at(addr, n * _ROW.size)
    fields = list(_ROW.iter_unpack(raw))
    base = fields[0][0]
    last = fields[-1][1]
    blk = ctypes.string_at(base, last - base + len(ctypes.string_at(last)))
    parts = blk.split(b"\0")
    # where each string starts: base + the lengths before it + one NUL each
    ptrs = list(map(operator.add, itertools.accumulate(map(len, parts), initial=base),
                    itertools.count()))
    cols = list(zip(*fields))
    if len(parts) >= 2 * n and cols[0] == tuple(ptrs[0:2 * n:2]) \
            and cols[1] == tuple(ptrs[1:2 * n:2]):
        strs = blk.decode().split("\0")
        return fields, strs[0:2 * n:2], strs[1:2 * n:2], cols
    at = ctypes.string_at
    return fields, [at(p).decode() for p in cols[0]], [at(p).decode() for p in cols[1]], cols


# Whether the first attach of a layout in a process makes its plan of
# views (True) or one view each (False, the plan at the second attach):
# see Model._torch_tensors.
_PLAN_FIRST = True

# Tables read before (_table): a re-attach of the same layout in a process
# (the next engine start, the next version after an update) reuses the
# parse, the index and the plan of _torch_tensors. By (entries, length of
# wc_model_layout's bytes), the most recent last, at most _TABLES_MAX of
# each such size.
_TABLES = {}
_TABLES_MAX = 8


def _table(m, addr, n):
    """(fields, names, dtypes, columns, index, plan box) of the C table at
    addr (of model m): _read_table's, from the cache when the same layout
    was read before. The same means: wc_model_layout's bytes equal (every
    field but the data pointer and the hash, the names and dtypes as
    places in the names block, and the names block), compared byte for
    byte in place (wc_model_layout_eq), not hashed. The data pointers and
    hashes are never taken from the cache (Model._rows reads them from the
    table itself); what is (names, dtypes, shapes, pools, offsets, flags,
    padded rows, the plan) is the same in both."""
    size = lib.wc_model_layout(m, None, 0)
    key = (n, size)
    for hit in reversed(_TABLES.get(key, ())):   # compared in place, not hashed
        if lib.wc_model_layout_eq(m, hit[0], size):
            return hit[1]
    buf = ctypes.create_string_buffer(size)
    lib.wc_model_layout(m, buf, size)
    lay = buf.raw
    fields, names, dts, cols = _read_table(addr, n)
    got = (fields, names, dts, cols, dict(zip(names, range(n))), [0])
    same = _TABLES.setdefault(key, [])
    same.append((lay, got))
    del same[:-_TABLES_MAX]
    return got


def _contiguous(shape):
    """Row-major strides of shape (a dimension of 0 counts as 1)."""
    nd = len(shape)
    if nd == 2:
        return (shape[1] or 1, 1)
    if nd == 1:
        return (1,)
    st = [1] * nd
    acc = 1
    for j in range(nd - 1, -1, -1):
        st[j] = acc
        acc *= shape[j] or 1
    return tuple(st)


def _rows_of(fields, names, dts):
    """The table as tuples (name, dtype, shape, nbytes, ptr, pool, offset,
    hash, flags, strides, padded_rows)."""
    padded = _lib.HAVE_PADDED_ROWS
    rows = []
    for f, name, dt in zip(fields, names, dts):
        shape = f[3:3 + f[2]]
        rows.append((name, dt, shape, f[11], f[12], f[13], f[14], f[15], f[16],
                     _contiguous(shape), f[17] if padded else 0))
    return rows


def _parse_table(addr, n):
    """_rows_of the table at addr (kept for tests and tools)."""
    return _rows_of(*_read_table(addr, n)[:3])


def _forget_plans():
    """Every table read before keeps its parse, not its plan: the next
    attach of each makes the plan again (for the bench and the tests)."""
    for same in _TABLES.values():
        for _, got in same:
            box = got[5]
            if box[0] != 0:
                box[0] = None


def _plan(fields, dts, names, pools_off=None):
    """How _torch_tensors makes every tensor: (pools, ops, names,
    order, at, names_op, tmpl). pools: the (dtype, pool) of each 1-D base view, pool None
    for the span (pools_off: pool i at byte pools_off[i] of it; None: the
    pools apart, one base per pool); ops: (base, shape, strides, offset, k)
    in elements of the dtype, k == 0 one as_strided, else a run of k
    tensors at offset + j * step as one as_strided (shape and strides with
    the run's dimension in front: k, step) and unbind; names: every name
    in table order (the dict's order); order: an itemgetter that puts the
    views, made in op order, in table order; at: a box for
    Model._torch_runs' index of each entry's op; names_op: the names in
    op order; tmpl: a dict of every name (to None) in table order, which
    tensors() copies and fills in op order. Runs are found among entries of one dtype,
    shape, next-to-last name part ("q_proj" of
    "model.layers.7.self_attn.q_proj.weight": the same weight of
    consecutive layers, or experts) and base (pools apart: their pool),
    sorted by offset, cut where the step changes; the grouping only
    decides how many views one call makes, never where a view points.
    Sub-byte dtypes are byte views of their nbytes."""
    import torch
    groups = {}
    span = pools_off is not None
    for i, r, dt, nm in zip(range(len(fields)), fields, dts, names):
        k = (dt, None if span else r[13], r[3:3 + r[2]], nm.rpartition(".")[0].rpartition(".")[2])
        g = groups.get(k)
        if g is None:
            groups[k] = [i]
        else:
            g.append(i)
    pools, ops, order = {}, [], []
    for (dt, pool, shape, _), idx in groups.items():
        if dt in _dtypes.SUB_BYTE:
            es, shape = 1, (fields[idx[0]][11],)  # one nbytes per shape
        else:
            es = _esize(_dtypes.torch_dtype(dt, torch))
        b = pools.setdefault((dt, pool), len(pools))
        st = _contiguous(shape)
        offs = [fields[i][14] + pools_off[fields[i][13]] for i in idx] if span else \
            [fields[i][14] for i in idx]
        if len(idx) > 1 and offs != sorted(offs):
            by = sorted(range(len(idx)), key=offs.__getitem__)
            idx = [idx[j] for j in by]
            offs = [offs[j] for j in by]
        j, m = 0, len(idx)
        while j < m:
            k = j + 1
            if k < m:
                step = offs[k] - offs[j]
                while k < m and offs[k] - offs[k - 1] == step:
                    k += 1
            if k - j == 1 or offs[j] % es or step % es:
                ops.append((b, shape, st, offs[j] // es, 0))
                order.append(idx[j])
                j += 1
            else:
                ops.append((b, (k - j,) + shape, (step // es,) + st, offs[j] // es, k - j))
                order.extend(idx[j:k])
                j = k
    where = [0] * len(order)    # entry i's place among the views
    for j, i in enumerate(order):
        where[i] = j
    return (list(pools), ops, list(names), operator.itemgetter(*where) if len(where) > 1 else None,
            [None], [names[i] for i in order], dict.fromkeys(names))


_ESIZE = {}
_ARRAYS = {}


def _array(t, n):
    """ctypes' t * n, kept: ctypes holds array types only while an array
    of them lives, so each attach made (and the collector freed) new ones."""
    a = _ARRAYS.get((t, n))
    if a is None:
        a = _ARRAYS[(t, n)] = t * n
    return a


def _esize(d):
    """Bytes per element of a torch dtype (torch 1.13 has no .itemsize)."""
    e = _ESIZE.get(d)
    if e is None:
        import torch
        e = _ESIZE[d] = torch.empty((), dtype=d).element_size()
    return e


class ReadOnlyWarning(UserWarning):
    """torch has no read-only tensors: served memory is read-only anyway."""


def _warn_torch(model):
    # Once per Model: torch cannot mark a tensor read-only, so say it.
    if model._writable or model._warned:
        return
    model._warned = True
    warnings.warn(
        "wcache: torch has no read-only tensors; these point at read-only memory "
        "(%s): a write %s. Use .clone() for a private copy, or attach(writable=True) "
        "where the backend allows it" % (
            model.device, "kills the process with SIGSEGV" if model.ordinal < 0
            else "faults the engine's CUDA context (every later CUDA call fails)"),
        ReadOnlyWarning, stacklevel=4)


def _unchained(x):
    """x, a dtype view of a pool's bytes, as a tensor of the same storage
    that is no view (detach): torch 2.x records how to replay a dtype view
    (a view function), and every view made of a view inherits and composes
    it, which made each of tensors()'s views of the 45k rank cost half again
    as much (H200, torch 2.11: the views of its 399 ops 45.8 ms on the
    dtype views against 30.9 on bases of their own, bench/RESULTS.md). The
    storage, and with it the DLPack capsule that holds the lease, lives
    while any view of it does, as before. numpy arrays pass through."""
    d = getattr(x, "detach", None)
    return d() if d is not None else x


def _retype(x, dt, framework):
    """.view() to the dtype DLPack 0.6 could not carry."""
    after = _dtypes.TABLE[dt][3]
    if framework == "torch":
        if after is not None and dt not in _dtypes.SUB_BYTE:
            import torch
            return x.view(_dtypes.torch_dtype(dt, torch))
        return x
    if dt == "BOOL":
        import numpy
        return x.view(numpy.bool_)
    return x


def live_tensors():
    """DLPack tensors made by this process and not yet freed (tests)."""
    return lib.wc_dl_live()


def live_leases():
    """Leases still held: by a Model, by tensors that outlived it, or by a
    PendingModel done but not asked for its Model yet."""
    return len(_LEASES) + len(_PENDING)
