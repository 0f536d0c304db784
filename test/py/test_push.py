# SPDX-License-Identifier: MIT
"""Updates from a trainer's memory (conn.update_from, libwcache's wc_push_*,
wcd's push/): version N+1 pushed from torch tensors is served hash for hash
as a disk update of the same weights (wcctl update of them written as
safetensors) serves it, for every rank of tp 1, 2 and 4 of the layouts of
test/data/layouts; every refusal says which tensor and what to do; a
trainer that dies at any step leaves N serving and N+1 freed; an engine
attached during a session reads N's bytes only."""
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layout_ref"))

import daemon  # noqa: E402
import models  # noqa: E402
import ref  # noqa: E402

torch = pytest.importorskip("torch")
wcache = pytest.importorskip("wcache")

HF = models.HF


def new_weights(src, dst, seed):
    """dst: src's checkpoint with every tensor's bytes replaced (the same
    headers, so the same layout); returns {name: torch tensor} of them."""
    shutil.copytree(src, dst)
    out = {}
    rng = np.random.default_rng(seed)
    for f in sorted(os.listdir(dst)):
        if not f.endswith(".safetensors"):
            continue
        path = os.path.join(dst, f)
        with open(path, "rb") as fh:
            raw = bytearray(fh.read())
        n = int.from_bytes(raw[:8], "little")
        hdr = __import__("json").loads(bytes(raw[8:8 + n]))
        base = 8 + n
        for name, info in hdr.items():
            if name == "__metadata__":
                continue
            b, e = info["data_offsets"]
            assert info["dtype"] == "BF16", info["dtype"]
            # finite bf16 values: random float32 rounded down to bf16
            vals = rng.standard_normal((e - b) // 2).astype(np.float32)
            words = (vals.view(np.uint32) >> 16).astype(np.uint16)
            raw[base + b:base + e] = words.tobytes()
            t = torch.from_numpy(words.view(np.int16).copy()).view(torch.bfloat16)
            out[name] = t.reshape(info["shape"])
        with open(path, "wb") as fh:
            fh.write(raw)
    return out


def hashes(rank):
    man = daemon.manifest_of(rank.device, rank.rundir)
    return {t["name"]: (t["dtype"], tuple(t["shape"]), t["padded_rows"], t["xxh3_128"])
            for t in man["tensors"]}


def connect(rank):
    return wcache.connect(device=rank.device, runtime_dir=rank.rundir)


@pytest.mark.parametrize("name", HF)
def test_push_equals_disk_update(name, tmp_path):
    """For tp 1, 2, 4: update_from(new weights) then a disk update of the
    same weights: every entry (checkpoint names and views) has the same
    dtype, shape, padding and hash in both; and the hashes changed."""
    src = models.path("hf", name)
    new = new_weights(src, str(tmp_path / "new"), seed=len(name))
    ran = 0
    for tp in (1, 2, 4):
        args = [["--tp-size", str(tp), "--tp-rank", str(r)] for r in range(tp)]
        with daemon.Ranks(src, args) as rs:
            for i, r in enumerate(rs.ranks):
                if r.rc is not None:   # the layout refuses this tp
                    continue
                before = hashes(r)
                with connect(r) as c:
                    res = c.update_from(new)
                    assert res.version == 2, res
                    pushed = hashes(r)
                    res = c.update(str(tmp_path / "new"))
                    assert res.version == 3, res
                disk = hashes(r)
                assert pushed == disk, "%s tp %d rank %d: pushed and loaded differ in %s" % (
                    name, tp, i, sorted(k for k in disk if pushed.get(k) != disk[k])[:5])
                changed = [k for k in before if before[k][3] != pushed[k][3]]
                assert len(changed) == len(before), "%s: unchanged: %s" % (
                    name, sorted(set(before) - set(changed))[:5])
                ran += 1
    assert ran, "no rank of %s served" % name


@pytest.fixture
def llama(tmp_path):
    src = models.path("hf", "llama")
    new = new_weights(src, str(tmp_path / "new"), seed=7)
    with daemon.Ranks(src, [["--tp-size", "2", "--tp-rank", "1"]]) as rs:
        yield rs.ranks[0], new, str(tmp_path / "new")


def status(rank):
    with connect(rank) as c:
        return c.status()


def test_refusals_name_the_tensor(llama):
    r, new, _ = llama
    before = hashes(r)
    first = sorted(new)[0]
    bad = [
        ({**new, "model.no_such.weight": new[first]}, "is not a checkpoint tensor",
         "model.no_such.weight"),
        ({**new, first: new[first].float()}, "is BF16 in the served layout, and F32 was given",
         first),
        ({**new, first: new[first].reshape(-1)}, "has the shape", first),
        ({k: v for k, v in new.items() if k != first}, "1 tensor(s) not written", first),
    ]
    with connect(r) as c:
        for tensors, what, tname in bad:
            with pytest.raises(wcache.Error) as e:
                c.update_from(tensors)
            assert what in str(e.value) and tname in str(e.value), str(e.value)
        # a duplicate: the same name twice in an iterable
        with pytest.raises(wcache.Error) as e:
            c.update_from(list(new.items()) + [(first, new[first])])
        assert "already written" in str(e.value) and first in str(e.value)
        # not a tensor
        with pytest.raises(wcache.Error) as e:
            c.update_from({first: [1, 2]})
        assert first in str(e.value)
    assert hashes(r) == before
    st = status(r)["push"]
    assert st["open"] is None and st["aborted"] == 6 and st["committed"] == 0, st
    assert "version 1 serves on" in st["last"]["outcome"], st
    # the slot is free again: a good push goes through
    with connect(r) as c:
        assert c.update_from(new).version == 2


def test_refused_while_sleeping(llama):
    r, new, _ = llama
    with connect(r) as c:
        c.sleep(2)
        with pytest.raises(wcache.DaemonSleeping) as e:
            c.update_from(new)
        assert "wake it first" in str(e.value)
        c.wake()
        assert c.update_from(new).version == 2


def test_numpy_sources_and_noncontiguous(llama):
    """numpy arrays (of a dtype numpy has) and transposed views are
    accepted: made contiguous, never cast. The llama layout is all BF16,
    which numpy lacks: the numpy arrays go in as F32 and are refused."""
    r, new, _ = llama
    first = sorted(new)[0]
    src = {k: v for k, v in new.items()}
    src[first] = new[first].float().numpy()
    with connect(r) as c:
        with pytest.raises(wcache.Error) as e:
            c.update_from(src)
        assert "F32 was given" in str(e.value)
        two = [k for k, v in new.items() if v.dim() == 2][0]
        src = dict(new)
        src[two] = new[two].t().contiguous().t()  # same values, not contiguous
        assert not src[two].is_contiguous()
        assert c.update_from(src).version == 2
    assert hashes(r) == hashes_after_disk(r, llama[2])


def hashes_after_disk(rank, newdir):
    with connect(rank) as c:
        c.update(newdir)
    return hashes(rank)


TRAINER = textwrap.dedent("""
    import ctypes, os, sys, time
    sys.path.insert(0, %(pkg)r)
    import torch, wcache
    from wcache import _lib
    from wcache._lib import lib
    step = sys.argv[1]
    new = torch.load(sys.argv[2])
    c = wcache.connect(device=sys.argv[3], runtime_dir=sys.argv[4])
    err = _lib.new(_lib.WcError)
    p = ctypes.c_void_p()
    assert lib.wc_push_open(c._ptr(), 0, 0, 0, ctypes.byref(p), ctypes.byref(err)) == 0, err.msg
    if step == "open":
        print("ready", flush=True); time.sleep(60)
    for i, (n, t) in enumerate(sorted(new.items())):
        if step == "mid" and i == len(new) // 2:
            print("ready", flush=True); time.sleep(60)
        dims = (ctypes.c_uint64 * t.dim())(*t.shape)
        assert lib.wc_push_write(p, n.encode(), b"BF16", t.dim(), dims,
                                 ctypes.c_void_p(t.data_ptr()),
                                 t.numel() * 2, ctypes.byref(err)) == 0, err.msg
    print("ready", flush=True); time.sleep(60)
""")


@pytest.mark.parametrize("step", ["open", "mid", "commit"])
def test_trainer_killed(llama, tmp_path, step):
    """A trainer killed after open, mid-write or before commit: N serves
    on untouched, N+1 is freed (the session's bytes leave resident memory,
    the next session opens), and engines saw only N."""
    r, new, _ = llama
    before = hashes(r)
    pt = str(tmp_path / "new.pt")
    torch.save(new, pt)
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER % {"pkg": os.path.join(daemon.TOP, "tools", "libwcache", "python")})
    p = subprocess.Popen([sys.executable, str(script), step, pt, r.device, r.rundir],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.strip() == "ready", p.stderr.read()
        st = status(r)
        assert st["push"]["open"]["writing"] and st["push"]["open"]["pid"] == p.pid, st
        assert hashes(r) == before       # an engine sees N only
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    # the daemon hears of it through the connection's end (a pidfd watch)
    for _ in range(500):
        st = status(r)
        if st["push"]["open"] is None:
            break
        __import__("time").sleep(0.01)
    assert st["push"]["open"] is None, st
    assert st["push"]["aborted"] == 1 and not st["push"]["last"]["committed"], st
    assert "connection closed before commit" in st["push"]["last"]["outcome"], st
    assert st["version"] == 1 if "version" in st else True
    assert hashes(r) == before
    with connect(r) as c:
        assert c.update_from(new).version == 2


def test_engine_attached_during_session_reads_n(llama):
    """An engine that attaches while a session is open (everything
    written, not committed) gets version N and N's bytes; after the commit
    it is told of N+1 and a new attach gets N+1."""
    import ctypes
    from wcache import _lib
    from wcache._lib import lib
    r, new, _ = llama
    before = hashes(r)
    with connect(r) as trainer, connect(r) as engine:
        err = _lib.new(_lib.WcError)
        p = ctypes.c_void_p()
        assert lib.wc_push_open(trainer._ptr(), 0, 0, 0, ctypes.byref(p), ctypes.byref(err)) == 0
        for n, t in new.items():
            dims = (ctypes.c_uint64 * t.dim())(*t.shape)
            assert lib.wc_push_write(p, n.encode(), b"BF16", t.dim(), dims,
                                     ctypes.c_void_p(t.data_ptr()), t.numel() * 2,
                                     ctypes.byref(err)) == 0, err.msg
        engine.hello()
        m = engine.attach()
        assert m.info["version"] == 1
        m.verify()                      # N's bytes, N's hashes
        got = {t.name: t.hash for t in m.manifest}
        r2 = _lib.new(_lib.WcLifeResult)
        assert lib.wc_push_commit(p, ctypes.byref(r2), ctypes.byref(err)) == 0, err.msg
        assert r2.version == 2
        m.verify()                      # the lease on N stays valid
        n = None
        for _ in range(200):
            n = engine.read_notice()
            if n:
                break
            __import__("time").sleep(0.01)
        assert n and n.kind == "version" and n.version == 2, n
        assert got == {k: v[3] for k, v in before.items()}
        m.detach()
    assert hashes(r) != before


def test_deadline_aborts(llama):
    import ctypes
    import time
    from wcache import _lib
    from wcache._lib import lib
    r, new, _ = llama
    with connect(r) as c:
        err = _lib.new(_lib.WcError)
        p = ctypes.c_void_p()
        assert lib.wc_push_open(c._ptr(), 0, 0, 200, ctypes.byref(p), ctypes.byref(err)) == 0
        for _ in range(500):
            st = c.status()["push"]
            if st["open"] is None:
                break
            time.sleep(0.01)
        assert st["open"] is None and "not committed within 200 ms" in st["last"]["outcome"], st
        r2 = _lib.new(_lib.WcLifeResult)
        assert lib.wc_push_commit(p, ctypes.byref(r2), ctypes.byref(err)) < 0
        assert "without an open update session" in err.msg.decode(), err.msg
        assert c.update_from(new).version == 2
