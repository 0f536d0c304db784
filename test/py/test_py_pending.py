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
