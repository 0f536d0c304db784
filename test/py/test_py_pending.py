# SPDX-License-Identifier: MIT
"""Connection.attach(wait=False): the attach on a thread of its own while
the engine builds its module, against a real wcd (host backend). The
PendingModel gives the same Model as a plain attach (names, dtypes, shapes),
load_into waits for it and binds; errors reach result() and load_into as
the plain attach raises them; the thread holds the connection's lock
(result(timeout) names the wait); a PendingModel dropped unused ends its
lease when collected; a closed connection fails at once."""
import errno
import gc
import os
import threading
import time

import pytest

import wcache
from conftest import pool_mappings

torch = pytest.importorskip("torch")
import wcache.torch as wt  # noqa: E402
from test_py_torch import LLAMA, meta_llama  # noqa: E402


def test_pending_model(daemons):
    d = daemons(LLAMA, "pend")
    with d.connect() as c:
        plain = c.attach(model_dir=LLAMA)
        want = {n: (t.dtype, tuple(t.shape)) for n, t in plain.tensors("torch").items()}
        plain.detach()
        p = c.attach(model_dir=LLAMA, wait=False)
        assert isinstance(p, wcache.PendingModel)
        mod = meta_llama()     # built while the attach runs
        r = wt.load_into(mod, p)
        assert p.done() and p.finished >= p.started
        m = p.result()
        assert m is p.result(), "result() is one Model"
        assert isinstance(m, wcache.Model) and m.identity == plain.identity
        ts = m.tensors("torch")
        assert {n: (t.dtype, tuple(t.shape)) for n, t in ts.items()} == want
        assert r.missing == [] and r.unexpected == []
        assert mod.lm_head.weight.data_ptr() == ts["lm_head.weight"].data_ptr()
        assert mod.model.norm.weight.data_ptr() == ts["model.norm.weight"].data_ptr()
        c.ping()   # the connection serves the next request
        m.detach()
        del mod, r, ts


def test_pending_errors(daemons, tiny):
    d = daemons(tiny, "perr")
    with d.connect() as c:
        p = c.attach(model_dir=tiny, tp_size=2, tp_rank=1, wait=False)
        with pytest.raises(wcache.IdentityMismatch) as e:
            p.result()
        assert e.value.fields["tp_size"] == ("1", "2"), e.value.fields
        with pytest.raises(wcache.IdentityMismatch):
            p.result()     # asked again: the same error
        with pytest.raises(wcache.IdentityMismatch):
            wt.load_into(torch.nn.Linear(2, 2), p)
        assert "failed" in repr(p)
        c.attach(model_dir=tiny).detach()   # the connection is still good
    c.close()
    with pytest.raises(wcache.Error) as e:
        c.attach(model_dir=tiny, wait=False)
    assert e.value.errno == errno.EBADF


def test_pending_lock(daemons, tiny):
    d = daemons(tiny, "plock")
    with d.connect() as c:
        with c._h.lock:     # held here: the thread cannot begin
            p = c.attach(model_dir=tiny, wait=False)
            with pytest.raises(wcache.Timeout) as e:
                p.result(timeout=0.05)
            assert "0.05 s" in str(e.value) and e.value.errno == errno.ETIMEDOUT
            assert not p.done() and "running" in repr(p)
        m = p.result()      # now it runs
        assert len(m) > 0
        m.detach()


def test_pending_drop(daemons, tiny):
    d = daemons(tiny, "pdrop")
    c = d.connect()
    p = c.attach(model_dir=tiny, wait=False)
    p._thread.join()     # done, never asked for
    assert wcache.live_leases() == 1
    del p
    gc.collect()
    assert wcache.live_leases() == 0
    assert pool_mappings() == []
    s = d.status()
    assert sum(x["leases"] for x in s["clients"] if x["pid"] == os.getpid()) == 0
    c.close()


class _Recording:
    """libwcache through a proxy that notes each function called and the
    thread that called it."""

    def __init__(self, real):
        self.real = real
        self.calls = []

    def __getattr__(self, name):
        fn = getattr(self.real, name)
        if not callable(fn):
            return fn

        def call(*args):
            self.calls.append((threading.current_thread().name, name))
            return fn(*args)
        return call


def test_pending_thread_returns_once(daemons, tiny, monkeypatch):
    """The attach thread makes one call into libwcache (HELLO and ATTACH
    together) and nothing else: each return of a thread from C to Python
    waits for the GIL (up to the 5 ms switch interval) while the engine's
    thread runs Python, so the three and more calls it made before (HELLO,
    ATTACH, the lease's owner, the table) made it 11-16 ms against 0.7 ms
    beside busy Python here. The Model is made by result(), on the caller's
    thread, and is the same."""
    import wcache._core as core
    if not core._lib.HAVE["wc_hello_attach"]:
        pytest.skip("this libwcache has no wc_hello_attach")
    d = daemons(tiny, "pone")
    with d.connect() as c:
        rec = _Recording(core.lib)
        monkeypatch.setattr(core, "lib", rec)
        p = c.attach(model_dir=tiny, wait=False)
        p._thread.join()
        on_thread = [n for t, n in rec.calls if t == "wcache attach"]
        assert on_thread == ["wc_hello_attach"], rec.calls
        assert wcache.live_leases() == 1          # held by the PendingModel
        m = p.result()
        assert [n for t, n in rec.calls if t == "wcache attach"] == ["wc_hello_attach"]
        assert m.identity == c.info["identity"] and len(m.tensors("torch")) > 0
        monkeypatch.undo()
        plain = c.attach(model_dir=tiny)
        assert sorted(plain.tensors("torch")) == sorted(m.tensors("torch"))
        plain.detach()
        m.detach()


def test_pending_closed_meanwhile(daemons, tiny):
    """The connection closed while the thread waits for its lock: the
    thread finds it closed (EBADF from result()), never calls the library
    with the freed connection."""
    d = daemons(tiny, "pclose")
    c = d.connect()
    with c._h.lock:     # the thread waits here
        p = c.attach(model_dir=tiny, wait=False)
        c.close()       # no lease: the connection is freed now
        assert c._h.ptr is None
    with pytest.raises(wcache.Error) as e:
        p.result()
    assert e.value.errno == errno.EBADF, e.value
    assert wcache.live_leases() == 0


def test_pending_close_before_result(daemons, tiny):
    """close() after the thread's attach but before result(): the lease
    it holds keeps the connection (as a Model's would) until the Model and
    its tensors are gone; the Model works meanwhile."""
    d = daemons(tiny, "pcl2")
    c = d.connect()
    p = c.attach(model_dir=tiny, wait=False)
    p._thread.join()
    c.close()
    assert c._h.ptr is not None, "closed under a pending lease"
    m = p.result()
    ts = m.tensors("torch")
    assert len(ts) > 0 and all(t.numel() >= 0 for t in ts.values())
    assert m.verify()
    m.detach()
    del m, ts, p
    gc.collect()
    assert c._h.ptr is None and wcache.live_leases() == 0
    assert pool_mappings() == []


def test_result_from_two_threads(daemons, tiny):
    """result() asked from two threads at once (two engines' loaders
    waiting on one attach): both get the one Model, neither an error, and
    one lease is held. The Model is made once, under a lock (here its
    making is slowed so that the second asks meanwhile)."""
    d = daemons(tiny, "p2thr")
    with d.connect() as c:
        p = c.attach(model_dir=tiny, wait=False)
        p._thread.join()
        make = c._attach_end

        def slow(*a):
            time.sleep(0.2)
            return make(*a)
        c._attach_end = slow
        got = [None, None]

        def ask(i):
            try:
                got[i] = p.result()
            except BaseException as e:   # noqa: reported below
                got[i] = e
        ts = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert all(isinstance(g, wcache.Model) for g in got), got
        assert got[0] is got[1]
        assert wcache.live_leases() == 1
        got[0].detach()
        del got
