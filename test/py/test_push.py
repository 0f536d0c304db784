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
import threading
import time

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


def start_trainer(tmp_path, rank, new, text, *lead, pipe=True):
    """A trainer process: new saved to tmp_path/new.pt, text (a trainer
    script with %(pkg)s for the package's directory) written beside it and
    run as `python3 SCRIPT *lead new.pt DEVICE RUNDIR` against rank; its
    stdout and stderr piped (text) unless pipe is False. The Popen."""
    pt = str(tmp_path / "new.pt")
    torch.save(new, pt)
    script = tmp_path / "trainer.py"
    script.write_text(text % {"pkg": os.path.join(daemon.TOP, "tools", "libwcache", "python")})
    out = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) if pipe else {}
    return subprocess.Popen([sys.executable, str(script)] + list(lead) +
                            [pt, rank.device, rank.rundir], **out)


def session_ended(rank):
    """STATUS's push object once no session is open (the daemon hears of a
    trainer's end through its connection: wait for it, 5 s at most)."""
    for _ in range(500):
        st = status(rank)["push"]
        if st["open"] is None:
            return st
        __import__("time").sleep(0.01)
    raise AssertionError("the session is still open: %s" % st)


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
    raw = Raw(r)
    t, body = raw.call(14, b"")          # METRICS: the Prometheus text
    raw.close()
    text = body[4:].decode()
    import re
    got = dict(re.findall(r'wcache_lifecycle_total\{.*op="push",result="(\w+)"\} (\d+)', text))
    assert got == {"ok": "1", "error": "6"}, text


def test_asleep_level_2_wakes_into_the_push(llama):
    """Asleep at level 2 a session fills N+1 and its commit wakes the
    daemon straight into it, as a disk update asleep does: version 2
    serves, hash for hash what a disk update of the same weights serves;
    one wake, sleep level 0, engines attach version 2."""
    r, new, newdir = llama
    with connect(r) as c:
        c.sleep(2)
        st = c.status()
        assert st["state"] == "sleeping" and st["sleep_level"] == 2, st
        res = c.update_from(new)
        assert res.version == 2 and "woke into it" in res.msg, res
        st = c.status()
        assert st["state"] == "ready" and st["sleep_level"] == 0, st
        assert st["lifecycle"]["wakes"] == 1 and st["push"]["committed"] == 1, st
        assert [v["version"] for v in st["versions"]] == [2], st["versions"]
        c.hello()
        m = c.attach()
        assert m.version == 2
        m.verify()
        m.detach()
    pushed = hashes(r)
    assert pushed == hashes_after_disk(r, newdir)


def test_asleep_session_refusals_and_abort(llama, tmp_path):
    """While a session fills N+1 of a daemon asleep at level 2 the daemon
    is waking: engines are told so, WAKE, SLEEP and UPDATE are refused as
    busy; the trainer killed puts it back to sleep at level 2 with N+1
    freed, and a wake then reloads version 1. At level 1 a session is
    refused with what to do; asleep, a partial update and an in-place one
    are refused (nothing of N is resident to keep or to rewrite)."""
    r, new, newdir = llama
    before = hashes(r)
    pools = pool_fds(r.proc.pid)
    with connect(r) as c:
        c.sleep(1)
        with pytest.raises(wcache.DaemonSleeping) as e:
            c.update_from(new)
        assert "sleeps at level 1" in str(e.value) and "wake it first" in str(e.value), str(e.value)
        c.wake()
        c.sleep(2)
        with pytest.raises(wcache.DaemonSleeping) as e:
            c.update_from(dict(list(new.items())[:1]), partial=True)
        assert "a partial update has none to keep" in str(e.value), str(e.value)
        with pytest.raises(wcache.DaemonSleeping) as e:
            c.update_from(new, in_place=True)
        assert "an in-place update has none to rewrite" in str(e.value), str(e.value)
        assert c.status()["state"] == "sleeping"
    asleep_pools = pool_fds(r.proc.pid)
    p = start_trainer(tmp_path, r, new, TRAINER, "mid")
    try:
        line = p.stdout.readline()
        assert line.strip() == "ready", p.stderr.read()
        with connect(r) as c:
            st = c.status()
            assert st["state"] == "waking" and st["sleep_level"] == 2, st
            assert st["push"]["open"]["pid"] == p.pid, st
            with pytest.raises(wcache.TryAgain) as e:
                c.hello()
            assert "waking up from sleep level 2" in str(e.value), str(e.value)
            for call in (c.wake, lambda: c.sleep(2), lambda: c.update(newdir)):
                with pytest.raises(wcache.Error) as e:
                    call()
                assert "waking up from sleep level 2" in str(e.value), str(e.value)
        assert pool_fds(r.proc.pid) > asleep_pools   # N+1's pools
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    st = session_ended(r)
    assert "sleeps on at level 2 with version 1" in st["last"]["outcome"], st
    assert pool_fds(r.proc.pid) == asleep_pools
    with connect(r) as c:
        st = c.status()
        assert st["state"] == "sleeping" and st["sleep_level"] == 2, st
        c.wake()
        assert c.status()["version"] == 1
    assert hashes(r) == before
    assert pool_fds(r.proc.pid) == pools


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


def test_parameters_and_the_stream_getter(llama, monkeypatch):
    """A trainer's parameters (requires_grad, one a non-contiguous view of
    a parameter) are read as they are, or made contiguous without an
    autograd graph: the result is the disk update's, hash for hash. The
    CUDA stream of a source comes from torch's raw getter where it has
    one (0, the legacy default stream, is None), else torch.cuda's."""
    from wcache import _push
    r, new, _ = llama
    src = {k: torch.nn.Parameter(v.clone()) for k, v in new.items()}
    two = [k for k, v in new.items() if v.dim() == 2][0]
    src[two] = torch.nn.Parameter(new[two].t().contiguous()).t()
    assert src[two].requires_grad and not src[two].is_contiguous()
    with connect(r) as c:
        assert c.update_from(src).version == 2
    assert hashes(r) == hashes_after_disk(r, llama[2])
    seen = []
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream",
                        lambda i: seen.append(i) or 0x5000 + i, raising=False)
    assert _push._raw_stream(3) == 0x5003 and seen == [3]
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda i: 0, raising=False)
    assert _push._raw_stream(0) is None

    class S:
        cuda_stream = 0x77

    def bad(i):
        raise TypeError("a getter of another signature")
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", bad, raising=False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d: S())
    assert _push._raw_stream(1) == 0x77


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


def pool_fds(pid):
    """The daemon's memfd pools (its open descriptors): what N+1 holds."""
    d = "/proc/%d/fd" % pid
    n = 0
    for f in os.listdir(d):
        try:
            n += "wcache-pool" in os.readlink(os.path.join(d, f))
        except OSError:
            pass
    return n


@pytest.mark.parametrize("step", ["open", "mid", "commit"])
def test_trainer_killed(llama, tmp_path, step):
    """A trainer killed after open, mid-write or before commit: N serves
    on untouched, N+1 is freed (the session's bytes leave resident memory,
    the next session opens), and engines saw only N."""
    r, new, _ = llama
    before = hashes(r)
    pools = pool_fds(r.proc.pid)
    p = start_trainer(tmp_path, r, new, TRAINER, step)
    try:
        line = p.stdout.readline()
        assert line.strip() == "ready", p.stderr.read()
        st = status(r)
        assert st["push"]["open"]["writing"] and st["push"]["open"]["pid"] == p.pid, st
        assert hashes(r) == before       # an engine sees N only
        assert pool_fds(r.proc.pid) > pools  # N+1's pools exist
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    st = session_ended(r)
    assert st["aborted"] == 1 and not st["last"]["committed"], st
    assert "connection closed before commit" in st["last"]["outcome"], st
    assert "version 1 serves on" in st["last"]["outcome"], st
    assert hashes(r) == before
    assert pool_fds(r.proc.pid) == pools  # and are gone
    with connect(r) as c:
        assert c.update_from(new).version == 2


def test_n_freed_after_the_reply(llama):
    """A beside update with no lease on N: N is freed after the commit's
    reply is out (the trainer does not wait for it), and freed it is: its
    pools are gone by the next request, and the next session opens; the
    ready file, also rewritten after the reply, names N+1 by then. With
    an engine's lease N stays until that engine detaches."""
    r, new, _ = llama
    pools = pool_fds(r.proc.pid)
    with connect(r) as c:
        res = c.update_from(new)
        assert res.version == 2 and "version 1 is freed (no lease held it)" in res.msg, res
        assert c.status()["version"] == 2
        ready = [f for f in os.listdir(r.rundir) if f.endswith(".ready")]
        with open(os.path.join(r.rundir, ready[0])) as f:
            assert "version=2\n" in f.read()
        assert pool_fds(r.proc.pid) == pools   # N's pools: gone
        engine = connect(r)
        m = engine.attach()                     # an engine's lease on 2
        res = c.update_from(new)
        assert res.version == 3 and "version 2 stays until its engines detach" in res.msg, res
        assert pool_fds(r.proc.pid) > pools
        m.close()
        engine.close()
        for _ in range(200):                    # its detach frees 2
            if pool_fds(r.proc.pid) == pools:
                break
            time.sleep(0.01)
        assert pool_fds(r.proc.pid) == pools
        assert c.update_from(new).version == 4


def test_keep_spare_on_the_host_backend(llama):
    """keep_spare (an RL loop's setting, for a GPU daemon's device pools):
    the host backend keeps nothing (a pool lent writable is sealed for
    good), the reply says so and N is freed as without it; with in_place
    the flag is refused, naming both, and nothing changes."""
    r, new, _ = llama
    pools = pool_fds(r.proc.pid)
    with connect(r) as c:
        res = c.update_from(new, keep_spare=True)
        assert res.version == 2, res
        assert "version 1 is freed (no lease held it)" in res.msg, res
        assert "the host backend keeps no spare" in res.msg, res
        # N is freed after the reply: the next request comes after it
        st = c.status()
        assert st["push"]["spare_bytes"] == 0, st["push"]
        assert pool_fds(r.proc.pid) == pools
        with pytest.raises(wcache.Error, match="keep_spare.*in-place"):
            c.update_from(new, keep_spare=True, in_place=True)
        assert c.status()["version"] == 2
        assert c.update_from(new).version == 3


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
        # version 1 is still held: no slot for version 3 until it goes
        # (held_wait=0: refused at once; held_wait: tried again that long)
        with pytest.raises(wcache.Busy) as e:
            trainer.update_from(new, held_wait=0)
        assert "version 1 is still held by 1 engine(s) (first pid %d)" % os.getpid() \
            in str(e.value), str(e.value)
        t0 = time.monotonic()
        with pytest.raises(wcache.Busy):
            trainer.update_from(new, held_wait=0.3)
        assert time.monotonic() - t0 >= 0.3
        # the engine lets version 1 go while the trainer's open is retried
        threading.Timer(0.3, m.detach).start()
        t0 = time.monotonic()
        assert trainer.update_from(new).version == 3
        assert time.monotonic() - t0 >= 0.25
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


# --- the daemon's own checks, through raw frames ------------------------------

import socket  # noqa: E402
import struct  # noqa: E402

PUSH_OPEN, PUSH_PLAN, PUSH_COMMIT, PUSH_ABORT, ERROR = 16, 17, 18, 19, 9


class Raw:
    """A bare connection that speaks the wire protocol itself (wire.h),
    to send what libwcache never would."""

    def __init__(self, rank):
        sock = [f for f in os.listdir(rank.rundir) if f.endswith(".sock")][0]
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(os.path.join(rank.rundir, sock))
        self.id = 0

    def call(self, typ, payload):
        self.id += 1
        self.s.sendall(struct.pack("<IHHIIQ", 0x43414357, 2, typ, 0, len(payload), self.id)
                       + payload)
        hdr, fds, _, _ = socket.recv_fds(self.s, 24, 253)
        for fd in fds:
            os.close(fd)
        if not hdr:
            return None, None
        _, _, t, _, n, _ = struct.unpack("<IHHIIQ", hdr)
        body = b""
        while len(body) < n:
            body += self.s.recv(n - len(body))
        if t == ERROR:
            code, ln = struct.unpack("<II", body[:8])
            return "error", body[8:8 + ln].decode()
        return t, body

    def close(self):
        self.s.close()


def commit_runs(session, runs, flags=0):
    return struct.pack("<QII", session, flags, len(runs)) + b"".join(struct.pack("<II", *r) for r in runs)


def test_daemon_refuses_doubled_missing_and_foreign_runs(llama):
    """The daemon's coverage check (libwcache refuses a second write
    itself): a commit naming a tensor twice, none at all, or past the
    plan is refused with the names; a malformed commit closes the
    connection; the session, still open, aborts."""
    r, new, _ = llama
    before = hashes(r)
    raw = Raw(r)
    t, body = raw.call(PUSH_OPEN, struct.pack("<IQI", 0, 0, 0))
    assert t == PUSH_OPEN, body
    session, version, base, ntensors = struct.unpack("<QQQI", body[:28])
    assert (version, base) == (2, 1)
    names = sorted(new)
    t, msg = raw.call(PUSH_COMMIT, commit_runs(session, [(0, ntensors), (0, 1)]))
    assert t == "error" and "1 written more than once (%s)" % names[0] in msg, msg
    t, msg = raw.call(PUSH_COMMIT, commit_runs(session, [(1, ntensors - 1)]))
    assert t == "error" and "1 tensor(s) not written (%s)" % names[0] in msg, msg
    t, msg = raw.call(PUSH_COMMIT, commit_runs(session, [(0, ntensors + 1)]))
    assert t == "error" and "but the session writes %d" % ntensors in msg, msg
    t, msg = raw.call(PUSH_COMMIT, commit_runs(session + 1, [(0, ntensors)]))
    assert t == "error" and "this connection's session is %d" % session in msg, msg
    t, msg = raw.call(PUSH_ABORT, struct.pack("<Q", session))
    assert t == PUSH_ABORT, msg
    t, msg = raw.call(PUSH_COMMIT, commit_runs(session, [(0, ntensors)]))
    assert t == "error" and "without an open update session" in msg, msg
    t, msg = raw.call(PUSH_COMMIT, struct.pack("<QII", session, 0, 5))  # runs missing
    assert t == "error" and "past the end" in msg, msg
    try:                                  # and the connection is closed
        assert raw.call(PUSH_ABORT, struct.pack("<Q", session)) == (None, None)
    except (ConnectionResetError, BrokenPipeError):
        pass
    raw.close()
    st = status(r)["push"]
    assert st["open"] is None and st["aborted"] == 1, st
    assert hashes(r) == before


def test_one_session_at_a_time(llama):
    r, new, _ = llama
    a, b = Raw(r), Raw(r)
    t, body = a.call(PUSH_OPEN, struct.pack("<IQI", 0, 0, 0))
    assert t == PUSH_OPEN
    t, msg = b.call(PUSH_OPEN, struct.pack("<IQI", 0, 0, 0))
    assert t == "error" and "one session at a time" in msg, msg
    with connect(r) as c:
        with pytest.raises(wcache.Busy) as e:
            c.update(llama[2])
        assert "is loading" in str(e.value) or "update" in str(e.value), str(e.value)
    t, msg = b.call(PUSH_OPEN, struct.pack("<IQI", 0, 5, 0))
    assert t == "error", msg
    a.close()
    for _ in range(500):
        t, body = b.call(PUSH_OPEN, struct.pack("<IQI", 0, 5, 0))
        if "one session at a time" not in str(body):
            break
        __import__("time").sleep(0.01)
    # against a version that does not serve
    assert t == "error" and "would replace version 5, but version 1 serves" in body, body
    b.close()


RAW_OPEN = """
import os, socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall(struct.pack("<IHHIIQ", 0x43414357, 2, 16, 0, 16, 1) + struct.pack("<IQI", 0, 0, 0))
hdr, fds, _, _ = socket.recv_fds(s, 24, 253)
_, _, t, _, n, _ = struct.unpack("<IHHIIQ", hdr)
body = b""
while len(body) < n:
    body += s.recv(n - len(body))
print("type", t, "fds", len(fds), body[8:].decode(errors="replace") if t == 9 else "")
"""


@pytest.mark.parametrize("allowed", ["none", "uid", "updater", "updater-name"])
def test_uid_not_allowed(tmp_path, allowed):
    """A connection the daemon serves (--allow-gid, or --allow-uid) but
    whose uid is neither the daemon's nor an --allow-updater may not open
    a session (--allow-uid attaches, never updates); with --allow-updater
    65534 (or its user name) it may, and it is served without an
    --allow-uid of its own."""
    if os.getuid() != 0:
        pytest.skip("needs root to run a client under another uid")
    if not shutil.which("setpriv") or subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "true"]).returncode:
        pytest.skip("setpriv cannot switch to uid 65534 here")
    import pwd
    extra = {"none": ["--allow-gid", "65534"], "uid": ["--allow-uid", "65534"],
             "updater": ["--allow-updater", "65534"],
             "updater-name": ["--allow-updater", pwd.getpwuid(65534).pw_name]}[allowed]
    ok = allowed.startswith("updater")
    with daemon.Ranks(models.path("hf", "llama"), [extra]) as rs:
        r = rs.ranks[0]
        sock = [os.path.join(r.rundir, f) for f in os.listdir(r.rundir) if f.endswith(".sock")][0]
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              sys.executable, "-c", RAW_OPEN, sock],
                             capture_output=True, text=True, timeout=60)
        if "Permission denied" in out.stderr:
            pytest.skip("uid 65534 cannot reach the socket here: " + out.stderr[-200:])
        assert out.returncode == 0, out.stderr
        if ok:
            assert out.stdout.startswith("type 16 fds 1"), out.stdout
        else:
            assert ("type 9" in out.stdout and
                    "only accepted from the daemon's own uid 0 or an allowed updater (you are uid 65534)"
                    in out.stdout and "--allow-updater 65534" in out.stdout and
                    "--allow-uid lets a uid attach, not update" in out.stdout), out.stdout
        st = session_ended(r)
        assert st["opened"] == (1 if ok else 0), st
        if ok:      # kept for a restart: the uid served, and an updater
            ready = [f for f in os.listdir(r.rundir) if f.endswith(".ready")][0]
            text = open(os.path.join(r.rundir, ready)).read()
            assert "--allow-uid 65534" in text and "--allow-updater 65534" in text, text


def test_allow_updater_refusals(tmp_path):
    """--allow-updater with a user that does not exist, or a bad number,
    is refused at start with a sentence naming it."""
    wcd = os.path.join(daemon.BIN, "wcd")
    for bad, want in (("no-such-user-wc", "bad --allow-updater 'no-such-user-wc': no such user"),
                      ("12x", "bad --allow-updater '12x' (a uid or a user name)")):
        p = subprocess.run([wcd, "--model", models.path("hf", "llama"), "--device", "host:u",
                            "--runtime-dir", str(tmp_path / "run"), "--allow-updater", bad],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and want in p.stderr, p.stderr


def test_deadline_while_the_open_reply_is_unsent(llama):
    """A trainer that stops reading: its replies back up behind a full
    socket, the session's deadline passes while the OPEN reply (which
    names N+1's pools by descriptor number) is still queued. The daemon
    closes that connection and keeps the pools until the connection is
    freed (no descriptor number is reused under a pending send), then
    frees them; N serves on."""
    r, new, _ = llama
    before = hashes(r)
    pools = pool_fds(r.proc.pid)
    raw = Raw(r)
    raw.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    frames = b""
    for i in range(14):     # METRICS replies (17 KB each), unread, fill the socket
        frames += struct.pack("<IHHIIQ", 0x43414357, 2, 14, 0, 0, 100 + i)
    frames += struct.pack("<IHHIIQ", 0x43414357, 2, PUSH_OPEN, 0, 16, 200) + \
        struct.pack("<IQI", 0, 0, 300)
    raw.s.sendall(frames)
    for _ in range(500):
        if status(r)["push"]["opened"]:
            break
        __import__("time").sleep(0.01)
    st = session_ended(r)
    assert st["aborted"] == 1 and "not committed within 300 ms" in st["last"]["outcome"], st
    log = r.log_text()
    stuck = "still being sent" in log
    raw.close()
    for _ in range(500):
        if pool_fds(r.proc.pid) == pools:
            break
        __import__("time").sleep(0.01)
    assert pool_fds(r.proc.pid) == pools
    assert hashes(r) == before
    with connect(r) as c:
        assert c.update_from(new).version == 2
    if not stuck:
        pytest.skip("the replies did not back up here (the socket took them all)")


def test_torch_update_from_module(llama):
    """wcache.torch.update_from(conn, module, name_map): a module holding
    the checkpoint's tensors (one under another name, one extra buffer
    skipped with None) pushes as its state_dict; the result is the disk
    update's, hash for hash."""
    import wcache.torch as wt
    r, new, newdir = llama
    m = torch.nn.Module()
    for i, (k, v) in enumerate(sorted(new.items())):
        m.register_buffer("b%d" % i, v.clone())
    m.register_buffer("extra", torch.zeros(3))
    name_map = {"b%d" % i: k for i, k in enumerate(sorted(new))}
    name_map["extra"] = None
    with connect(r) as c:
        with pytest.raises(wcache.Error) as e:   # the extra buffer, not skipped
            wt.update_from(c, m, name_map={k: v for k, v in name_map.items() if v})
        assert "'extra' is not a checkpoint tensor" in str(e.value), str(e.value)
        assert wt.update_from(c, m, name_map=name_map).version == 2
    pushed = hashes(r)
    assert pushed == hashes_after_disk(r, newdir)


def partial_dir(src, dst, changed):
    """dst: src's checkpoint with only the tensors of changed ({name:
    torch bf16 tensor}) replaced."""
    import json
    shutil.copytree(src, dst)
    for f in sorted(os.listdir(dst)):
        if not f.endswith(".safetensors"):
            continue
        path = os.path.join(dst, f)
        with open(path, "rb") as fh:
            raw = bytearray(fh.read())
        n = int.from_bytes(raw[:8], "little")
        hdr = json.loads(bytes(raw[8:8 + n]))
        for name, info in hdr.items():
            if name in changed:
                b, e = info["data_offsets"]
                raw[8 + n + b:8 + n + e] = changed[name].view(torch.int16).numpy().tobytes()
        with open(path, "wb") as fh:
            fh.write(raw)


@pytest.mark.parametrize("name", ["llama", "qwen3_moe", "gemma3"])
def test_partial_equals_disk_update(name, tmp_path):
    """A partial update of two tensors (one inside a fused view where the
    layout has one) serves what a disk update of the checkpoint with just
    those two changed serves, hash for hash, on every rank of tp 2; the
    other tensors keep N's hashes; the reply counts the written bytes."""
    src = models.path("hf", name)
    new = new_weights(src, str(tmp_path / "all"), seed=3)
    names = sorted(new)
    pick = [n for n in names if "q_proj" in n][:1] + [n for n in names if "norm" in n][:1]
    assert len(pick) == 2, names
    changed = {k: new[k] for k in pick}
    partial_dir(src, str(tmp_path / "part"), changed)
    args = [["--tp-size", "2", "--tp-rank", str(r)] for r in range(2)]
    with daemon.Ranks(src, args) as rs:
        for r in rs.ranks:
            before = hashes(r)
            with connect(r) as c:
                res = c.update_from(changed, partial=True)
                assert res.version == 2 and "a partial update" in res.msg, res
                man = daemon.manifest_of(r.device, r.rundir)["tensors"]
                assert res.bytes == sum(t["bytes"] for t in man if t["name"] in pick), res
                pushed = hashes(r)
                with pytest.raises(wcache.Error) as e:   # twice is still refused
                    c.update_from(list(changed.items()) * 2, partial=True)
                assert "already written" in str(e.value)
            assert pushed == hashes_after_disk(r, str(tmp_path / "part"))
            same = [k for k in before if before[k] == pushed[k]]
            assert set(pick) - set(same) == set(pick)
            assert len(same) >= len(before) - 2 - sum(1 for k in before if ".qkv_proj" in k
                                                       or "gate_up" in k), (same, before)


def test_update_ranks_all_or_none(tmp_path):
    """wcache.update_ranks over the two stages of pp 2: each tensor goes to
    the stage that holds it, both publish, each equal to a disk update;
    with a tensor of the last stage missing, that stage refuses at prepare
    and neither publishes (the first stage was prepared, then aborted)."""
    src = models.path("hf", "llama")
    new = new_weights(src, str(tmp_path / "new"), seed=11)
    args = [["--pp-size", "2", "--pp-rank", str(r)] for r in range(2)]
    with daemon.Ranks(src, args) as rs:
        before = [hashes(r) for r in rs.ranks]
        last_only = sorted(set(before[1]) - set(before[0]))
        assert "model.norm.weight" in last_only, last_only
        conns = [connect(r) for r in rs.ranks]
        try:
            short = {k: v for k, v in new.items() if k != "model.norm.weight"}
            with pytest.raises(wcache.Error) as e:
                wcache.update_ranks(conns, short)
            assert "rank 1 of 2 refused the update, so no rank publishes it" in str(e.value)
            assert "model.norm.weight" in str(e.value), str(e.value)
            assert [hashes(r) for r in rs.ranks] == before
            assert [status(r)["push"]["aborted"] for r in rs.ranks] == [1, 1]
            with pytest.raises(wcache.Error) as e:
                wcache.update_ranks(conns, {**new, "x.weight": new["model.norm.weight"]})
            assert "'x.weight' is in no rank's plan" in str(e.value)
            res = wcache.update_ranks(conns, new)
            assert [x.version for x in res] == [2, 2], res
            pushed = [hashes(r) for r in rs.ranks]
        finally:
            for c in conns:
                c.close()
        for r, h in zip(rs.ranks, pushed):
            assert h == hashes_after_disk(r, str(tmp_path / "new"))


def opens(rank):
    """The daemon's log lines of the sessions opened, oldest first."""
    return [ln for ln in rank.log_text().splitlines() if "update session" in ln and " open: " in ln]


def test_open_keeps_the_plan_while_the_files_are_unchanged(tmp_path):
    """The plan of the version a session's commit retired is N+1's plan at
    the next open while the served directory's files are as they were (no
    header read again: the open's log line says 'kept'); once a file has
    changed (a shard touched: same layout) the open reads every header
    again, and so does the one after it (the version that the first
    retires was planned from the files before the change); the update is
    served hash for hash as before."""
    src = str(tmp_path / "served")
    shutil.copytree(models.path("hf", "llama"), src)
    dirs = [str(tmp_path / ("new%d" % k)) for k in range(5)]
    new = [new_weights(src, dirs[k], seed=10 + k) for k in range(5)]
    with daemon.Ranks(src, [["--tp-size", "1"]]) as rs:
        r = rs.ranks[0]
        with connect(r) as c:
            c.update_from(new[0])            # nothing retired before: read
            c.update_from(new[1])            # version 1's plan, kept
        shard = sorted(x for x in os.listdir(src) if x.endswith(".safetensors"))[0]
        os.utime(os.path.join(src, shard))   # times change, the layout not
        with connect(r) as c:
            c.update_from(new[2])            # read again: a file changed
            c.update_from(new[3])            # version 3's plan: the old files
            got = c.update_from(new[4])      # version 4's: kept again
        assert got.version == 6
        lines = opens(r)
        assert len(lines) == 5, lines
        kept = [", kept," in ln for ln in lines]
        assert kept == [False, True, False, False, True], lines
        assert "is not reused: %s changed (its times)" % os.path.join(src, shard) in r.log_text()
        served = hashes(r)
    with daemon.Ranks(dirs[4], [["--tp-size", "1"]]) as rs:
        assert served == hashes(rs.ranks[0])


def test_open_reads_again_after_a_disk_update_elsewhere(tmp_path):
    """A disk update to another directory makes that one the served
    directory: the next session's open does not take the plan kept from
    the old one (it says why: the path), reads the new one's headers, and
    the update is served as a disk load of the same weights serves it."""
    src = str(tmp_path / "served")
    shutil.copytree(models.path("hf", "llama"), src)
    new = new_weights(src, str(tmp_path / "new"), seed=31)
    other = str(tmp_path / "other")
    new_weights(src, other, seed=32)
    last = str(tmp_path / "last")
    pushed = new_weights(src, last, seed=33)
    with daemon.Ranks(src, [["--tp-size", "1"]]) as rs:
        r = rs.ranks[0]
        with connect(r) as c:
            c.update_from(new)       # version 1 retired: its plan kept
            c.update(other)          # from disk: version 2 retired
            c.update_from(pushed)
        assert [", kept," in ln for ln in opens(r)] == [False, False]
        assert "is not reused: the model's path names %s now, not %s" % (
            os.path.realpath(other), os.path.realpath(src)) in r.log_text()
        served = hashes(r)
    with daemon.Ranks(last, [["--tp-size", "1"]]) as rs:
        assert served == hashes(rs.ranks[0])


def memfd_maps():
    """This process's mappings of a daemon's memfd pools."""
    with open("/proc/self/maps") as f:
        return sum("wcache-pool" in ln for ln in f)


def test_a_session_maps_only_the_pools_it_writes(tmp_path):
    """The trainer maps a pool of N+1 at the first write into it: a partial
    update of one tensor maps one of wcgen tiny's 1 MiB pools, not all of
    them (open mapped every pool before), and unmaps it at the commit."""
    import ctypes
    from wcache import _lib, _push
    from wcache._lib import lib
    m = str(tmp_path / "tiny")
    subprocess.run([os.path.join(daemon.BIN, "wcgen"), "tiny", "--out", m], check=True,
                   capture_output=True)
    with daemon.Ranks(m, [["--pool-size", "1M"]]) as rs:
        r = rs.ranks[0]
        with connect(r) as c:
            served = c.attach(m)
            name = "model.layers.1.mlp.down_proj.weight"
            new = served[name].clone() + 1
            npools = len({t.pool for t in served.manifest})
            served.close()
            assert npools > 4, npools
            assert memfd_maps() == 0
            p = _push._open(c, 2, 0, 0)           # partial
            try:
                assert memfd_maps() == 0
                _push._write(c, p, name, _push._source(name, new))
                assert memfd_maps() == 1
            except BaseException:
                lib.wc_push_abort(p, None)
                raise
            res = _lib.new(_lib.WcLifeResult)
            _push._call(c, lib.wc_push_commit, p, ctypes.byref(res))
            assert memfd_maps() == 0
            after = c.attach(m)
            assert torch.equal(after[name].view(torch.int16), new.view(torch.int16))
            after.close()


def test_open_reads_again_when_the_layout_file_changed(tmp_path):
    """The kept plan is only as good as the layout it was made with: wcd
    --layout FILE edited between two sessions (the padding multiple) makes
    the next open read and plan again, and log why."""
    src = str(tmp_path / "served")
    shutil.copytree(models.path("hf", "llama"), src)
    layout = tmp_path / "my.layout"
    text = open(os.path.join(daemon.TOP, "proto", "plan", "layouts", "llama.layout")).read()
    layout.write_text(text)
    new = new_weights(src, str(tmp_path / "new"), seed=21)
    with daemon.Ranks(src, [["--tp-size", "1", "--layout", str(layout)]]) as rs:
        r = rs.ranks[0]
        with connect(r) as c:
            c.update_from(new)
            c.update_from(new)
            layout.write_text(text + "\nvocab_pad 32\n")
            c.update_from(new, allow_layout_change=True)
        kept = [", kept," in ln for ln in opens(r)]
        assert kept == [False, True, False], opens(r)
        assert "is not reused: the layout's files changed" in r.log_text()


def test_refused_when_the_served_headers_changed(tmp_path):
    """A session plans N+1 from the served directory's headers: when they
    no longer give the served layout (a tensor renamed on disk since the
    load) the open is refused naming what differs (version_layout_diff,
    the same wording an UPDATE's refusal has), and N serves on."""
    import json
    src = str(tmp_path / "served")
    shutil.copytree(models.path("hf", "llama"), src)
    new = new_weights(src, str(tmp_path / "new"), seed=3)
    with daemon.Ranks(src, [["--tp-size", "1"]]) as rs:
        r = rs.ranks[0]
        # two sessions first: the plan of the version the second retires
        # is kept, and must not stand in for the headers changed below
        with connect(r) as c:
            c.update_from(new)
            c.update_from(new)
        before = hashes(r)
        f = sorted(x for x in os.listdir(src) if x.endswith(".safetensors"))[0]
        path = os.path.join(src, f)
        with open(path, "rb") as fh:
            raw = fh.read()
        n = int.from_bytes(raw[:8], "little")
        hdr = json.loads(raw[8:8 + n])
        old = sorted(k for k in hdr if k != "__metadata__")[0]
        hdr[old + "_renamed"] = hdr.pop(old)
        enc = json.dumps(hdr).encode()
        enc += b" " * (-len(enc) % 8)
        with open(path, "wb") as fh:
            fh.write(len(enc).to_bytes(8, "little") + enc + raw[8 + n:])
        with connect(r) as c:
            with pytest.raises(wcache.Error) as e:
                c.update_from(new)
        msg = str(e.value)
        assert "no longer give the served layout" in msg, msg
        assert "%s is gone" % old in msg and "%s_renamed is new" % old in msg, msg
        assert "version 3 serves on" in msg, msg
        assert hashes(r) == before
