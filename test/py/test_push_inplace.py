# SPDX-License-Identifier: MIT
"""In-place update sessions (update_from(in_place=True), WC_PUSH_IN_PLACE)
and engines' pause/resume, on the host backend: the served version's pools
are rewritten and become version N+1 on the same mappings; paused engines
read the new bytes after resume without re-attaching, hash for hash what a
disk update of the same weights serves; refused while an engine holding a
lease has not paused (named); while it writes, HELLO, MANIFEST, ATTACH and
resume are refused; a trainer killed after open, mid-write or before commit
leaves the version incomplete (attaches and resumes refused with the
sentence, paused engines told) until a complete update: another in-place
session, or a disk update."""
import ctypes
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layout_ref"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import daemon  # noqa: E402
import models  # noqa: E402

torch = pytest.importorskip("torch")
wcache = pytest.importorskip("wcache")

from test_push import (connect, hashes, new_weights, opens, pool_fds,  # noqa: E402
                       session_ended, start_trainer, status)

from wcache import _lib  # noqa: E402
from wcache._lib import lib  # noqa: E402

IN_PLACE = 4


@pytest.fixture
def llama(tmp_path):
    src = models.path("hf", "llama")
    new = new_weights(src, str(tmp_path / "new"), seed=11)
    with daemon.Ranks(src, [["--tp-size", "2", "--tp-rank", "1"]]) as rs:
        yield rs.ranks[0], new, str(tmp_path / "new")


def engine(rank):
    """A connected, attached engine: (conn, model)."""
    c = connect(rank)
    c.hello()
    return c, c.attach()


def snapshot(m):
    """{name: (data_ptr, bytes)} of every checkpoint tensor the engine maps."""
    out = {}
    for t in m.manifest:
        x = m.tensor(t.name, "torch")
        out[t.name] = (x.data_ptr(), x.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return out


def notice(conn, kind, timeout_s=5):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        n = conn.read_notice()
        if n and n.kind == kind:
            return n
        if not n:
            time.sleep(0.01)
    raise AssertionError("no %s notice within %d s" % (kind, timeout_s))


def disk_hashes(rank, newdir):
    """The hashes a disk update of the same weights serves (a new
    version beside; the caller's engines have let go of older ones)."""
    with connect(rank) as c:
        c.update(newdir)
    return hashes(rank)


def test_in_place_without_leases(llama):
    """No lease: the session rewrites version 1 in place; version 2 serves
    the new bytes, hash for hash as a disk update serves them; the
    session's own pools are gone after the commit."""
    r, new, newdir = llama
    before = hashes(r)
    pools = pool_fds(r.proc.pid)
    with connect(r) as t:
        res = t.update_from(new, in_place=True)
    assert res.version == 2, res
    assert "in place" in res.msg and "same pools" in res.msg, res.msg
    pushed = hashes(r)
    assert pool_fds(r.proc.pid) == pools
    assert all(pushed[k][3] != before[k][3] for k in before)
    st = status(r)
    assert st["version"] == 2 and st["push"]["incomplete"] is None, st["push"]
    assert st["push"]["last"]["committed"], st["push"]
    ready = [f for f in os.listdir(r.rundir) if f.endswith(".ready")]
    with open(os.path.join(r.rundir, ready[0])) as f:
        assert "version=2\n" in f.read()    # the ready file was rewritten
    assert disk_hashes(r, newdir) == pushed


def test_in_place_two_engines_paused(llama):
    """Two engines pause; the in-place update rewrites their pools; each is
    told (IN_PLACE, version 2), resumes on version 2 and reads the new
    bytes through the same mappings (same pointers, no re-attach); the
    bytes equal a disk update's of the same weights."""
    r, new, newdir = llama
    e1, m1 = engine(r)
    e2, m2 = engine(r)
    old = snapshot(m1)
    assert e1.pause().version == 1
    with e2.paused() as p2:
        st = status(r)["push"]
        assert st["paused"] == 2 and st["leased"] == 2, st
        with connect(r) as t:
            assert t.update_from(new, in_place=True).version == 2
        n = notice(e2, "in_place")
        assert n.version == 2 and "same pools" in n.msg, n
    assert p2.result.version == 2, p2.result
    assert notice(e1, "in_place").version == 2
    assert e1.resume().version == 2
    got1, got2 = snapshot(m1), snapshot(m2)
    assert {k: v[0] for k, v in got1.items()} == {k: v[0] for k, v in old.items()}
    assert {k: v[1] for k, v in got1.items()} == {k: v[1] for k, v in got2.items()}
    assert all(got1[k][1] != old[k][1] for k in old), "a tensor kept its bytes"
    pushed = hashes(r)
    # resume took version 2's hashes: verify checks the new bytes
    assert m1.verify() and m2.verify()
    assert m1.manifest and m1.info["version"] == 2 and m2.version == 2
    assert {t.name: t.hash for t in m1.manifest} == {k: v[3] for k, v in pushed.items()}
    m1.detach()
    m2.detach()
    assert disk_hashes(r, newdir) == pushed
    # the disk update's version 3 serves what the engines read in place
    e3, m3 = engine(r)
    assert m3.info["version"] == 3
    assert {k: v[1] for k, v in snapshot(m3).items()} == {k: v[1] for k, v in got1.items()}
    for c in (e1, e2, e3):
        c.close()


def test_in_place_refused_while_an_engine_reads(llama):
    """An engine holding a lease that has not paused: the open is refused
    naming how many and their pids; once it pauses the session opens."""
    r, new, _ = llama
    e, m = engine(r)
    with connect(r) as t:
        with pytest.raises(wcache.Busy) as ei:
            t.update_from(new, in_place=True)
        msg = str(ei.value)
        assert "1 engine(s) holding a lease have not paused (pids %d)" % os.getpid() in msg, msg
        assert "pause" in msg
        assert status(r)["version"] == 1
        e.pause()
        assert t.update_from(new, in_place=True).version == 2
    assert e.resume().version == 2
    e.close()


def test_in_place_refusals(llama):
    """A layout change cannot be in place; unknown resume is harmless."""
    r, new, _ = llama
    with connect(r) as t:
        with pytest.raises(wcache.OutOfOrder) as ei:
            t.update_from(new, in_place=True, allow_layout_change=True)
        assert "cannot allow a layout change" in str(ei.value)
        assert "not paused" in t.resume().msg


def open_in_place(conn, flags=IN_PLACE):
    err = _lib.new(_lib.WcError)
    p = ctypes.c_void_p()
    assert lib.wc_push_open(conn._ptr(), flags, 0, 0, ctypes.byref(p), ctypes.byref(err)) == 0, \
        err.msg
    return p


def write_all(p, new):
    err = _lib.new(_lib.WcError)
    for n, t in new.items():
        dims = (ctypes.c_uint64 * t.dim())(*t.shape)
        assert lib.wc_push_write(p, n.encode(), b"BF16", t.dim(), dims,
                                 ctypes.c_void_p(t.data_ptr()), t.numel() * 2,
                                 ctypes.byref(err)) == 0, err.msg


def test_refusals_while_writing(llama):
    """While an in-place session is open: HELLO, MANIFEST and ATTACH of
    others are refused with the sentence, and a paused engine cannot
    resume; after the commit all of them work on version 2."""
    r, new, _ = llama
    e, m = engine(r)
    e.pause()
    with connect(r) as t, connect(r) as other:
        p = open_in_place(t)
        with pytest.raises(wcache.Busy) as ei:
            other.hello()
        assert "an in-place update (session" in str(ei.value)
        assert "is writing version 1's pools: retry after it commits" in str(ei.value)
        with pytest.raises(wcache.Busy) as ei:
            e.resume()
        assert "resume refused" in str(ei.value)
        st = status(r)["push"]
        assert st["open"]["in_place"] and st["open"]["writing"], st
        write_all(p, new)
        err = _lib.new(_lib.WcError)
        res = _lib.new(_lib.WcLifeResult)
        assert lib.wc_push_commit(p, ctypes.byref(res), ctypes.byref(err)) == 0, err.msg
        assert res.version == 2
        assert other.hello()["version"] == 2
    assert e.resume().version == 2
    e.close()


def test_partial_in_place(llama):
    """A partial in-place update: the tensors given change, the others keep
    their bytes and hashes; the commit copies into the served pools only
    what was written (the host's session pools hold nothing else: a
    partial update's cost follows what changed, not the model's size).
    A second partial update of the rest then serves, hash for hash, what
    a disk update of all the new weights serves."""
    r, new, newdir = llama
    before = hashes(r)
    names = sorted(new)
    some = {k: new[k] for k in names[:3]}
    with connect(r) as t:
        res = t.update_from(some, in_place=True, partial=True)
    assert res.version == 2, res
    after = hashes(r)
    changed = {k for k in before if before[k][3] != after[k][3]}
    assert changed and all(any(k.startswith(n.rsplit(".", 1)[0]) for n in some)
                           or k in some for k in changed), sorted(changed)
    assert len(changed) < len(before)
    # the bytes copied in: the written entries whole (their alignment
    # padding too), not the pools (before: every byte of every pool)
    copied = int(res.msg.split(" bytes copied into them")[0].rsplit("(", 1)[1])
    assert res.bytes <= copied < res.bytes + 3 * 4096, res.msg
    with connect(r) as t:
        res = t.update_from({k: new[k] for k in names[3:]}, in_place=True, partial=True)
    assert res.version == 3, res
    copied = int(res.msg.split(" bytes copied into them")[0].rsplit("(", 1)[1])
    assert res.bytes <= copied < res.bytes + len(names) * 4096, res.msg
    pushed = hashes(r)
    assert disk_hashes(r, newdir) == pushed


def test_in_place_open_keeps_the_plan(llama):
    """On the host an in-place session writes pools of its own, planned
    as N+1 is: the next in-place open takes that plan, kept at the
    commit, instead of reading every header and planning again (its log
    line says 'kept'; a 45k-tensor rank's open took 310 ms each session
    before, 2 ms since); the bytes served are those pushed."""
    r, new, newdir = llama
    names = sorted(new)
    with connect(r) as t:
        t.update_from(new, in_place=True)
        t.update_from({k: new[k] for k in names[:2]}, in_place=True, partial=True)
        t.update_from({k: new[k] for k in names[2:]}, in_place=True, partial=True)
    assert [", kept," in ln for ln in opens(r)] == [False, True, True], opens(r)
    pushed = hashes(r)
    assert disk_hashes(r, newdir) == pushed


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
    assert lib.wc_push_open(c._ptr(), 4, 0, 0, ctypes.byref(p), ctypes.byref(err)) == 0, err.msg
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


def kill_trainer(r, tmp_path, new, step):
    """Runs a trainer to step of an in-place session, checks it is open,
    and kills it."""
    p = start_trainer(tmp_path, r, new, TRAINER, step)
    try:
        line = p.stdout.readline()
        assert line.strip() == "ready", p.stderr.read()
        st = status(r)
        assert st["push"]["open"]["in_place"] and st["push"]["open"]["pid"] == p.pid, st
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    return p.pid


@pytest.mark.parametrize("clear", ["in_place", "disk"])
@pytest.mark.parametrize("step", ["open", "mid", "commit"])
def test_trainer_killed_in_place(llama, tmp_path, step, clear):
    """A trainer killed after open, mid-write or before commit of an
    in-place session: version 1 is marked incomplete; the paused engine is
    told and cannot resume; a new engine's HELLO is refused with the
    sentence; STATUS says so. A complete in-place session (or a disk
    update) clears it: attaches work again and the engine resumes."""
    r, new, newdir = llama
    e, m = engine(r)
    e.pause()
    pid = kill_trainer(r, tmp_path, new, step)
    st = session_ended(r)
    assert st["aborted"] == 1 and not st["last"]["committed"], st
    assert "version 1 is marked incomplete" in st["last"]["outcome"], st
    n = notice(e, "incomplete")
    assert n.version == 1 and "of pid %d" % pid in n.msg, n
    assert st["incomplete"] == 1 and "ended before its commit" in st["incomplete_why"], st
    with connect(r) as other:
        with pytest.raises(wcache.Busy) as ei:
            other.hello()
        msg = str(ei.value)
        assert "version 1 is incomplete" in msg and "until a complete update" in msg, msg
    with pytest.raises(wcache.Busy) as ei:
        e.resume()
    assert "version 1 is incomplete" in str(ei.value)
    with open(r.log) as f:
        assert "version 1 is incomplete" in f.read()
    with connect(r) as t:
        with pytest.raises(wcache.OutOfOrder) as ei:
            t.update_from(dict(list(new.items())[:1]), in_place=True, partial=True)
        assert "push every tensor" in str(ei.value)
        if clear == "in_place":
            assert t.update_from(new, in_place=True).version == 2
            assert notice(e, "in_place").version == 2
            assert e.resume().version == 2
        else:
            assert t.update(newdir).version == 2
            assert notice(e, "version").version == 2
            assert e.resume().version == 2      # the old lease: its own business
    assert status(r)["push"]["incomplete"] is None
    e2, m2 = engine(r)
    assert m2.info["version"] == 2
    m2.verify()
    e2.close()
    e.close()


def metric(rank, name):
    """A gauge of METRICS (wc_metrics through ctypes: the package has no
    call for it)."""
    L = ctypes.CDLL(os.environ.get("WCACHE_LIB", "libwcache.so.0"))
    L.wc_metrics.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]
    with connect(rank) as c:
        out = ctypes.c_void_p()
        err = _lib.new(_lib.WcError)
        assert L.wc_metrics(c._ptr(), ctypes.byref(out), ctypes.byref(err)) == 0, err.msg
        text = ctypes.string_at(out.value).decode()
        libc.free(out.value)
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(None, 1)[1])
    raise AssertionError("no %s in the metrics" % name)


def test_deadline_in_place(llama):
    """An in-place session not committed within its bound: the version is
    incomplete (STATUS, the metrics, the paused engine's notice), then a
    complete in-place session clears it."""
    r, new, _ = llama
    e, m = engine(r)
    e.pause()
    assert metric(r, "wcache_clients_paused") == 1
    with connect(r) as t:
        err = _lib.new(_lib.WcError)
        p = ctypes.c_void_p()
        assert lib.wc_push_open(t._ptr(), IN_PLACE, 0, 200, ctypes.byref(p),
                                ctypes.byref(err)) == 0, err.msg
        n = notice(e, "incomplete")
        assert "not committed within 200 ms" in n.msg, n
        st = session_ended(r)
        assert st["incomplete"] == 1, st
        assert metric(r, "wcache_model_incomplete") == 1
        lib.wc_push_abort(p, ctypes.byref(err))
        assert t.update_from(new, in_place=True).version == 2
    assert metric(r, "wcache_model_incomplete") == 0
    assert e.resume().version == 2
    e.close()


ENGINE = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, %(pkg)r)
    import wcache
    c = wcache.connect(device=sys.argv[1], runtime_dir=sys.argv[2])
    c.hello()
    m = c.attach()
    c.pause()
    print("ready", flush=True); time.sleep(60)
""")


def test_paused_engine_that_dies_counts_as_gone(llama, tmp_path):
    """A paused engine's promise ends with its process: once it is gone it
    is neither paused nor holding a lease, and an engine here that has not
    paused still refuses the in-place open."""
    r, new, _ = llama
    script = tmp_path / "engine.py"
    script.write_text(ENGINE % {"pkg": os.path.join(daemon.TOP, "tools", "libwcache", "python")})
    p = subprocess.Popen([sys.executable, str(script), r.device, r.rundir],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        st = status(r)["push"]
        assert st["paused"] == 1 and st["leased"] == 1, st
        e, m = engine(r)
        with connect(r) as t:
            with pytest.raises(wcache.Busy) as ei:
                t.update_from(new, in_place=True)
            assert "(pids %d)" % os.getpid() in str(ei.value), str(ei.value)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    for _ in range(500):
        st = status(r)["push"]
        if st["leased"] == 1:
            break
        time.sleep(0.01)
    assert st["paused"] == 0 and st["leased"] == 1, st
    e.pause()
    with connect(r) as t:
        assert t.update_from(new, in_place=True).version == 2
    e.close()


def test_deadline_while_other_replies_are_unsent(llama):
    """A trainer whose session passes its deadline while replies that name
    no pool back up (it asked for METRICS and did not read yet; the OPEN
    reply it had read): the session aborts and the connection lives on
    (before, any reply in flight closed it, as if the OPEN reply were
    still unsent: test_push.py's test_deadline_aborts met that when its
    STATUS poll was being sent as the deadline passed)."""
    from test_push import PUSH_OPEN, Raw
    import socket
    import struct
    r, new, _ = llama
    raw = Raw(r)
    t, body = raw.call(PUSH_OPEN, struct.pack("<IQI", 0, 0, 300))
    assert t == PUSH_OPEN, body
    raw.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    frames = b"".join(struct.pack("<IHHIIQ", 0x43414357, 2, 14, 0, 0, 100 + i)
                      for i in range(14))   # METRICS replies (17 KB each), unread
    raw.s.sendall(frames)
    st = session_ended(r)
    assert st["aborted"] == 1 and "not committed within 300 ms" in st["last"]["outcome"], st
    assert "still being sent" not in r.log_text()
    got = 0
    raw.s.settimeout(10)
    while got < 14:                          # every reply comes, then PING works
        hdr = b""
        while len(hdr) < 24:
            k = raw.s.recv(24 - len(hdr))
            assert k, "the daemon closed the connection after %d replies" % got
            hdr += k
        _, _, typ, _, n, _ = struct.unpack("<IHHIIQ", hdr)
        left = n
        while left:
            k = raw.s.recv(min(left, 1 << 16))
            assert k
            left -= len(k)
        assert typ == 14, typ
        got += 1
    t, body = raw.call(5, b"x")                # PING
    assert t == 5 and body == b"x", (t, body)
    raw.close()
