# SPDX-License-Identifier: MIT
"""A commit's host hash runs on the daemon's worker pool (issue 29): while
it runs (held by WCD_TEST_PUSH_HASH_GATE) the loop serves STATUS and the
manifest of version N; the commit then publishes what a disk update of the
same weights serves. A trainer killed while its commit hashes, or a
deadline that passes meanwhile, aborts the session once the hash ends: N
serves on and N+1's pools are freed."""
import os
import signal
import sys
import textwrap
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layout_ref"))

import daemon  # noqa: E402
import models  # noqa: E402

torch = pytest.importorskip("torch")
wcache = pytest.importorskip("wcache")

from test_push import (connect, hashes, hashes_after_disk, new_weights,  # noqa: E402
                       pool_fds, session_ended, start_trainer, status)


@pytest.fixture
def gated(tmp_path, monkeypatch):
    gate = str(tmp_path / "gate")
    monkeypatch.setenv("WCD_TEST_PUSH_HASH_GATE", gate)
    src = models.path("hf", "llama")
    new = new_weights(src, str(tmp_path / "new"), seed=5)
    with daemon.Ranks(src, [["--tp-size", "1", "--tp-rank", "0"]]) as rs:
        yield rs.ranks[0], new, str(tmp_path / "new"), gate


def wait_for(path, what):
    for _ in range(3000):
        if os.path.exists(path):
            return
        time.sleep(0.01)
    raise AssertionError("%s: %s never appeared" % (what, path))


def test_loop_serves_while_the_commit_hashes(gated):
    r, new, newdir, gate = gated
    before = hashes(r)
    out = {}

    def push():
        with connect(r) as c:
            try:
                out["res"] = c.update_from(new)
            except Exception as e:  # reported below
                out["err"] = e
    t = threading.Thread(target=push)
    t.start()
    try:
        wait_for(gate + ".held", "the commit's hash")
        st = status(r)["push"]                  # the loop answers meanwhile
        assert st["open"] and not st["open"]["writing"], st
        assert hashes(r) == before              # N's manifest, N's bytes
        assert t.is_alive()                     # the commit waits on the gate
    finally:
        open(gate, "w").close()
        t.join(60)
    assert "err" not in out, out
    assert out["res"].version == 2, out
    assert hashes(r) == hashes_after_disk(r, newdir)


TRAINER = textwrap.dedent("""
    import sys
    sys.path.insert(0, %(pkg)r)
    import torch, wcache
    new = torch.load(sys.argv[1])
    c = wcache.connect(device=sys.argv[2], runtime_dir=sys.argv[3])
    c.update_from(new)
""")


def test_trainer_killed_while_its_commit_hashes(gated, tmp_path):
    r, new, _, gate = gated
    before = hashes(r)
    pools = pool_fds(r.proc.pid)
    p = start_trainer(tmp_path, r, new, TRAINER, pipe=False)
    try:
        wait_for(gate + ".held", "the commit's hash")
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    st = status(r)["push"]
    assert st["open"], st                       # the hash still runs
    open(gate, "w").close()
    st = session_ended(r)
    assert st["aborted"] == 1 and not st["last"]["committed"], st
    assert "connection closed during its commit" in st["last"]["outcome"], st
    assert "version 1 serves on" in st["last"]["outcome"], st
    assert hashes(r) == before
    assert pool_fds(r.proc.pid) == pools
    with connect(r) as c:                       # and the next session opens
        open(gate, "w").close()
        assert c.update_from(new).version == 2


def test_deadline_passed_while_the_commit_hashes(gated):
    """The deadline is a clock: it is given 1.5 s, the gate held 2.5 s."""
    r, new, _, gate = gated
    before = hashes(r)
    out = {}

    def push():
        with connect(r) as c:
            try:
                out["res"] = c.update_from(new, timeout_ms=1500)
            except wcache.Error as e:
                out["err"] = e
    t = threading.Thread(target=push)
    t.start()
    try:
        wait_for(gate + ".held", "the commit's hash")
        time.sleep(2.5)
    finally:
        open(gate, "w").close()
        t.join(60)
    assert "err" in out, out
    assert "not committed within 1500 ms" in str(out["err"]), out
    assert "version 1 serves on" in str(out["err"]), out
    assert hashes(r) == before
