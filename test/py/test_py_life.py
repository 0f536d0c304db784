# SPDX-License-Identifier: MIT
"""Lifetime and read-only safety of the Python package, against a real wcd.

Lifetime: tensors outlive every wcache object (Model and Connection closed,
deleted, collected); the pool mappings (/proc/self/maps) and the lease (the
daemon's STATUS) go away exactly when the last tensor dies, not before.
Read-only: numpy arrays are not writeable (and cannot be made so); torch
warns; a write through torch kills the process (PROT_READ), as documented;
a writable attach of the host backend's sealed pools is refused."""
import gc
import os
import subprocess
import sys
import textwrap

import numpy
import pytest

import wcache
from conftest import PKG, pool_mappings

torch = pytest.importorskip("torch")


def same(a, b):
    """Byte equality (wcgen's random bf16 holds NaNs)."""
    if isinstance(a, numpy.ndarray):
        return a.tobytes() == b.tobytes()
    return torch.equal(a.contiguous().view(torch.int16), b.contiguous().view(torch.int16))


def leases_of(d, pid):
    s = d.status()
    return sum(c["leases"] for c in s["clients"] if c["pid"] == pid)


def test_tensors_outlive_model_and_connection(daemons, tiny):
    d = daemons(tiny, "life")
    assert pool_mappings() == []
    c = d.connect()
    m = c.attach(model_dir=tiny)
    n_maps = len(pool_mappings())
    assert n_maps > 0
    x = m.tensor("model.norm.weight")                   # one DLPack tensor
    arr = m.tensors("numpy")["lm_head.weight"]          # a view of a pool
    emb = m.tensors("torch")["model.embed_tokens.weight"]
    derived = torch.nn.Parameter(emb, requires_grad=False)[3:5]  # a view of a view
    want = (x.clone(), arr.copy(), derived.clone())
    # every wcache object goes: detach, close, delete, collect
    m.detach()
    c.close()
    del m, c
    gc.collect()
    assert wcache.live_leases() == 1
    assert leases_of(d, os.getpid()) == 1, "the lease ended under live tensors"
    assert len(pool_mappings()) == n_maps
    assert same(x, want[0]) and same(arr, want[1])
    assert same(derived, want[2])
    # the last tensor of each kind goes: the mapping stays until the last
    del x
    gc.collect()
    assert len(pool_mappings()) == n_maps and wcache.live_leases() == 1
    del arr
    gc.collect()
    assert len(pool_mappings()) == n_maps and wcache.live_leases() == 1
    del emb
    gc.collect()
    assert same(derived, want[2])   # the Parameter view still holds it
    assert len(pool_mappings()) == n_maps
    del derived
    gc.collect()
    assert pool_mappings() == []
    assert wcache.live_tensors() == 0 and wcache.live_leases() == 0
    assert leases_of(d, os.getpid()) == 0


def test_detach_without_tensors_unmaps_at_once(daemons, tiny):
    d = daemons(tiny, "life2")
    with d.connect() as c:
        m = c.attach(model_dir=tiny)
        assert pool_mappings()
        m.detach()
        assert pool_mappings() == [] and wcache.live_leases() == 0
        assert leases_of(d, os.getpid()) == 0
        with pytest.raises(wcache.Error, match="detached"):
            m.tensor("model.norm.weight")
        # a Model dropped by the garbage collector alone ends its lease too
        m2 = c.attach(model_dir=tiny)
        x = m2["model.norm.weight"]
        del m2
        gc.collect()
        assert pool_mappings() and leases_of(d, os.getpid()) == 1
        del x
        gc.collect()
        assert pool_mappings() == [] and leases_of(d, os.getpid()) == 0
        c.ping()  # the connection itself carries on


def test_numpy_is_read_only(daemons, tiny):
    d = daemons(tiny, "ro")
    with d.connect() as c:
        m = c.attach(model_dir=tiny)
        for a in (m.tensor("model.norm.weight", "numpy"),
                  m.tensors("numpy")["model.norm.weight"]):
            assert not a.flags.writeable
            with pytest.raises(ValueError, match="read-only"):
                a[0] = 1
            with pytest.raises(ValueError):
                a.flags.writeable = True
        m.detach()


def test_torch_warns_read_only(daemons, tiny):
    d = daemons(tiny, "rot")
    with d.connect() as c:
        m = c.attach(model_dir=tiny)
        with pytest.warns(wcache.ReadOnlyWarning, match="SIGSEGV"):
            m.tensor("model.norm.weight", "torch")
        m.detach()


def test_writable_attach_of_sealed_pools_is_refused(daemons, tiny):
    d = daemons(tiny, "rw")
    with d.connect() as c:
        with pytest.raises(wcache.ReadOnly) as e:
            c.attach(model_dir=tiny, writable=True)
        assert e.value.errno == 30  # EROFS
        assert "sealed" in str(e.value) or "read" in str(e.value)


def test_torch_write_faults(daemons, tiny):
    """What the docs say a write does on the host backend: the page is
    PROT_READ, the process dies with SIGSEGV (torch cannot refuse it)."""
    d = daemons(tiny, "segv")
    code = textwrap.dedent("""
        import sys, warnings
        sys.path.insert(0, %r)
        import wcache
        warnings.simplefilter("ignore")
        c = wcache.connect(device=%r, runtime_dir=%r)
        m = c.attach(model_dir=%r)
        x = m.tensor("model.norm.weight", "torch")
        print("writing", flush=True)
        x.add_(1)
        print("wrote")
    """) % (PKG, d.device, d.rundir, tiny)
    p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    assert p.stdout.decode() == "writing\n", p.stderr.decode()
    # under ASan (make test SANITIZE=address) its handler reports the SEGV
    asan = b"AddressSanitizer: SEGV" in p.stderr and p.returncode != 0
    assert p.returncode == -11 or asan, (p.returncode, p.stderr.decode())


def test_batched_view_lives(daemons, tiny):
    """A tensor that tensors("torch") made in a batch (one of a run's
    unbind results) holds the lease alone once the rest are gone."""
    from wcache import _core
    d = daemons(tiny, "lifeb")
    c = d.connect()
    for _ in range(2):  # the plan made (by the first attach, or the second without _PLAN_FIRST)
        with c.attach(model_dir=tiny) as m:
            m.tensors("torch")
    m = c.attach(model_dir=tiny)
    ts = m.tensors("torch")
    assert m._plan_box[0] is not None
    q = ts["model.layers.1.self_attn.q_proj.weight"]
    want = q.clone()
    del ts
    m.detach()
    c.close()
    del m, c
    gc.collect()
    assert wcache.live_leases() == 1 and leases_of(d, os.getpid()) == 1
    assert same(q, want)
    del q
    gc.collect()
    assert pool_mappings() == []
    assert wcache.live_tensors() == 0 and wcache.live_leases() == 0


def test_attach_cycle_leaves_no_garbage(daemons, tiny):
    """An attach, its tensors (numpy and torch, batched views and one view
    each) and the detach free everything by reference counting: nothing
    for the cyclic collector to find (before the array types were kept,
    each attach made two ctypes array types that only it freed, about
    18 us each to make, and the collector's passes besides)."""
    d = daemons(tiny, "nogc", "--pool-size", "3M")
    with d.connect() as c:
        def cycle():
            m = c.attach(model_dir=tiny, framework="torch")
            t = m.tensors()
            n = m.tensors("numpy")
            x = m.tensor("model.norm.weight")
            del t, n, x
            m.detach()
        for _ in range(3):      # the first attaches of a layout make its plan
            cycle()
        gc.collect()
        was = gc.isenabled()
        gc.disable()
        try:
            for _ in range(3):
                cycle()
            assert gc.collect() == 0, "an attach cycle left garbage for the collector"
        finally:
            if was:
                gc.enable()
        assert wcache.live_leases() == 0 and wcache.live_tensors() == 0


def test_forked_child_leaves_the_parents_lease(daemons, tiny):
    """A child forked after the attach (a DataLoader worker, a preforking
    server) shares the connection's socket: when it drops its copy of the
    Model (and its tensors), the parent's lease must stay, and the parent's
    connection must still answer. The child ends nothing over the shared
    socket (wcache.h: after fork, one of the two processes uses it)."""
    d = daemons(tiny, "fork")
    c = d.connect()
    m = c.attach(model_dir=tiny)
    t = m.tensor(next(iter(m)))
    assert leases_of(d, os.getpid()) == 1
    pid = os.fork()
    if pid == 0:   # the child: drops everything, as a worker that reloads would
        code = 0
        try:
            del t
            m.detach()
            c.close()
            gc.collect()
        except BaseException:   # noqa: reported through the exit code
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert leases_of(d, os.getpid()) == 1, "the child ended the parent's lease"
    c.ping()
    assert m.verify() and t.numel() > 0
    del t
    m.detach()
    assert leases_of(d, os.getpid()) == 0
    c.close()
