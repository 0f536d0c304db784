# SPDX-License-Identifier: MIT
"""Every wcache.Error class, raised by a real daemon in a real failure: no
daemon (and a stale socket), identity mismatch, sleeping, busy, refused uid
(the client runs as uid 65534), daemon killed mid-session. And the lifecycle
an RL loop drives from Python: detach, sleep, wake, update, notice, re-attach
the new version."""
import errno
import gc
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import wcache
from conftest import PKG, REFERENCE, Daemon, pool_mappings, wcgen


def test_no_daemon(tmp_path):
    with pytest.raises(wcache.NoDaemon) as e:
        wcache.connect(device="host:nobody", runtime_dir=str(tmp_path))
    assert e.value.errno == errno.ENOENT
    assert "no wcache daemon for host:nobody" in str(e.value)
    assert isinstance(e.value, wcache.Error) and isinstance(e.value, OSError)


def test_missing_file_is_not_no_daemon(daemons, tiny, tmp_path):
    """ENOENT means "no daemon" only from connect: a model directory, rules
    file or update directory that does not exist, with the daemon there and
    answering, is a plain wcache.Error (ENOENT, the library's sentence),
    not NoDaemon, which an engine catches to wait for its daemon."""
    d = daemons(tiny, "enoent")
    gone = str(tmp_path / "no-such-model")
    with d.connect() as c:
        for call in (lambda: c.attach(model_dir=gone),
                     lambda: c.attach(model_dir=gone, wait=False).result(),
                     lambda: c.hello(model_dir=gone),
                     lambda: c.attach(model_dir=tiny, rules_file=str(tmp_path / "no-rules")),
                     lambda: c.update(gone)):
            with pytest.raises(wcache.Error) as e:
                call()
            assert e.value.errno == errno.ENOENT, e.value
            assert not isinstance(e.value, wcache.NoDaemon), (type(e.value), str(e.value))
            assert "no-such" in str(e.value) or "no-rules" in str(e.value), str(e.value)
        c.ping()    # the daemon was there all along
        assert c.status()["state"] == "ready"


def test_device_as_a_number(tmp_path):
    """device=0 (what torch.cuda.current_device() returns) is the CUDA
    ordinal "0", the same connect; a device of another type is a TypeError
    that names the argument."""
    rd = str(tmp_path)
    with pytest.raises(wcache.Error) as want:
        wcache.connect(device="0", runtime_dir=rd)
    with pytest.raises(wcache.Error) as got:
        wcache.connect(device=0, runtime_dir=rd)
    assert (type(got.value), got.value.errno, str(got.value)) == \
        (type(want.value), want.value.errno, str(want.value))
    for bad in (True, 1.5, ["host"]):
        with pytest.raises(TypeError, match="device"):
            wcache.connect(device=bad, runtime_dir=rd)


def test_stale_socket(daemons, tiny):
    d = daemons(tiny, "stale")
    d.kill()  # SIGKILL: the socket file stays, nobody listens
    assert os.path.exists(d.sock)
    # the kernel tears a dead process's io_uring (which holds the listening
    # socket) down asynchronously: connects may succeed, then see EOF,
    # for a moment after the kill
    for _ in range(500):
        try:
            d.connect().close()
        except wcache.NoDaemon as e:
            assert e.errno == errno.ECONNREFUSED and "stale socket" in str(e)
            break
        time.sleep(0.02)
    else:
        raise AssertionError("connects to a killed daemon's socket still succeed after 10 s")


def test_identity_mismatch(daemons, tiny):
    d = daemons(tiny, "ident")
    with d.connect() as c:
        with pytest.raises(wcache.IdentityMismatch) as e:
            c.attach(model_dir=tiny, tp_size=2, tp_rank=1)
        assert e.value.errno == errno.ESTALE
        assert e.value.fields["tp_size"] == ("1", "2"), e.value.fields
        assert e.value.fields["tp_rank"] == ("0", "1")
        assert "tp_size: daemon=1 engine=2" in str(e.value)
        with pytest.raises(wcache.IdentityMismatch) as e:
            c.attach(model_dir=os.path.join(REFERENCE, "llama"))
        assert "ckpt_digest" in e.value.fields, str(e.value)  # another checkpoint
        # the connection is still good for the right identity
        c.attach(model_dir=tiny).detach()


def test_sleeping_and_busy(daemons, tiny):
    d = daemons(tiny, "sleep")
    with d.connect() as c:
        m = c.attach(model_dir=tiny)
        with pytest.raises(wcache.Busy) as e:
            c.sleep(1)
        assert e.value.errno == errno.EBUSY
        assert str(os.getpid()) in str(e.value), "the refusal names the lease holder"
        m.detach()
        r = c.sleep(1)
        assert r.level == 1 and "sleeping" in r.msg
        with pytest.raises(wcache.DaemonSleeping) as e:
            c.attach(model_dir=tiny)
        assert e.value.errno == errno.EAGAIN and "wake it first" in str(e.value)
        assert isinstance(e.value, wcache.TryAgain)
        with pytest.raises(wcache.DaemonSleeping, match="wake"):
            c.update()
        r = c.wake()
        assert r.version == 1
        m = c.attach(model_dir=tiny)
        assert m.verify()
        m.detach()


def test_refused_uid(daemons, tiny):
    if os.getuid() != 0:
        pytest.skip("needs root to run a client under another uid")
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is not installed")
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    lib = os.environ["WCACHE_LIB"]
    probe = subprocess.run(as_nobody + [sys.executable, "-c",
                                        "import sys; sys.path.insert(0, %r); import wcache" % PKG],
                           env=dict(os.environ, WCACHE_LIB=lib), stderr=subprocess.PIPE)
    if probe.returncode:
        pytest.skip("uid 65534 cannot import the package here (a parent directory "
                    "is closed): %s" % probe.stderr.decode()[-200:])
    top = tempfile.mkdtemp(prefix="wct-pyuid.")
    try:
        os.chmod(top, 0o711)
        from pathlib import Path
        d = Daemon(Path(top), tiny, "uid-%d" % os.getpid())
        os.chmod(d.rundir, 0o711)
        os.chmod(d.sock, 0o666)  # so that the daemon's own check is what refuses
        code = textwrap.dedent("""
            import sys
            sys.path.insert(0, %r)
            import wcache
            try:
                c = wcache.connect(socket=%r)
                c.attach()
                print("served")
            except wcache.Error as e:
                print(type(e).__name__, e.errno, e)
        """) % (PKG, d.sock)
        try:
            out = subprocess.run(as_nobody + [sys.executable, "-c", code], timeout=60,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout.decode()
        finally:
            d.kill()
        assert out.startswith("Refused 13 "), out
        assert "65534" in out, out
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_daemon_killed_mid_session(daemons, tiny):
    d = daemons(tiny, "death")
    c = d.connect()
    m = c.attach(model_dir=tiny)
    x = m.tensors("numpy")["model.norm.weight"]
    want = x.copy()
    pid_fd = c.daemon_fd()
    assert pid_fd >= 0 and c.daemon_pid == d.proc.pid
    assert select.select([pid_fd], [], [], 0)[0] == []
    d.kill(signal.SIGKILL)
    assert select.select([pid_fd], [], [], 10)[0] == [pid_fd], "pidfd did not fire"
    assert select.select([c.notice_fd()], [], [], 10)[0], "no EOF on the socket"
    with pytest.raises(wcache.DaemonGone) as e:
        c.ping()
    assert e.value.errno == errno.EPIPE
    with pytest.raises(wcache.DaemonGone):
        c.read_notice()
    # the memfd mapping keeps the weights: the engine is told, not killed
    assert x.tobytes() == want.tobytes()
    m.detach()
    c.close()
    assert pool_mappings()  # x still holds it
    del x
    gc.collect()
    assert pool_mappings() == [] and wcache.live_leases() == 0


def test_lifecycle_update_and_notice(daemons, tiny, tmp_path):
    """The RL loop: attached to v1, an update publishes v2 (a notice
    arrives), the engine re-attaches v2, detaches v1, sleeps, wakes."""
    v2 = wcgen(tmp_path / "step2", "tiny", "--shard-size", "3MB", "--seed", "7")
    d = daemons(tiny, "update")
    with d.connect(timeout_ms=60000) as admin, d.connect() as eng:
        old = eng.attach(model_dir=tiny)
        before = old.tensors("numpy")["model.norm.weight"].tobytes()
        assert eng.read_notice() is None
        r = admin.update(v2)
        assert r.version == 2, r
        assert select.select([eng.notice_fd()], [], [], 10)[0], "no notice"
        n = eng.read_notice()
        assert n.kind == "version" and n.version == 2, n
        # v1 stays mapped and unchanged until we let it go
        assert old.tensors("numpy")["model.norm.weight"].tobytes() == before
        new = eng.attach(model_dir=v2)
        assert new.version == 2 and new.identity != old.identity
        assert new.tensors("numpy")["model.norm.weight"].tobytes() != before
        assert new.verify()
        old.detach()
        new.detach()
        admin.sleep(2)
        with pytest.raises(wcache.DaemonSleeping):
            eng.attach(model_dir=v2)
        admin.wake()
        eng.attach(model_dir=v2).detach()
