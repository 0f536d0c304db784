# SPDX-License-Identifier: MIT
"""In-place updates on a GPU (skips without torch and a CUDA device): wcd
serves test/data's llama (tp 2, rank 1) from GPU 0; an engine attaches and
pauses; a trainer's update_from(in_place=True) writes the served device
pools themselves (no second copy); the engine is told, resumes and reads
the new bytes through the same device pointers; the hashes equal a disk
update's of the same weights; a trainer killed mid-session leaves the
version incomplete until a complete in-place update."""
import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layout_ref"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
wcache = pytest.importorskip("wcache")

import daemon  # noqa: E402
import models  # noqa: E402
from test_push import connect, hashes, new_weights, session_ended, start_trainer  # noqa: E402
from test_push_inplace import TRAINER, notice  # noqa: E402


@pytest.fixture
def gpu_llama(tmp_path):
    src = models.path("hf", "llama")
    new = new_weights(src, str(tmp_path / "new"), seed=13)
    with daemon.Ranks(src, [["--tp-size", "2", "--tp-rank", "1"]], gpu="0") as rs:
        r = rs.ranks[0]
        assert r.rc is None, open(r.log).read()
        yield r, new, str(tmp_path / "new")


def device_bytes(m):
    return {t.name: (m.tensor(t.name, "torch").data_ptr(),
                     m.tensor(t.name, "torch").cpu().contiguous().view(-1)
                     .view(torch.uint8).numpy().tobytes())
            for t in m.manifest}


def test_gpu_in_place_engine_paused(gpu_llama):
    r, new, newdir = gpu_llama
    e = connect(r)
    e.hello()
    m = e.attach(framework="torch")
    assert m.device.startswith("cuda"), m.device
    old = device_bytes(m)
    with e.paused() as p:
        with connect(r) as t:
            res = t.update_from(new, in_place=True)
            assert res.version == 2, res
        assert notice(e, "in_place").version == 2
    assert p.result.version == 2
    got = device_bytes(m)
    assert {k: v[0] for k, v in got.items()} == {k: v[0] for k, v in old.items()}
    assert all(got[k][1] != old[k][1] for k in old)
    assert m.verify()
    pushed = hashes(r)
    m.detach()
    e.close()
    with connect(r) as c:
        assert c.update(newdir).version == 3
    assert hashes(r) == pushed


def test_gpu_in_place_partial(gpu_llama):
    """A partial in-place update on the device: the tensors given are
    rewritten in the served pools, the others keep their bytes (nothing
    copied) and their hashes; every hash matches the bytes after."""
    r, new, _ = gpu_llama
    e = connect(r)
    e.hello()
    m = e.attach(framework="torch")
    old = device_bytes(m)
    some = dict(sorted(new.items())[: len(new) // 2])
    with e.paused() as p:
        with connect(r) as t:
            assert t.update_from(some, in_place=True, partial=True).version == 2
        assert notice(e, "in_place").version == 2
    assert p.result.version == 2
    got = device_bytes(m)
    for k in old:
        assert got[k][0] == old[k][0], k
    ck = {t.name for t in m.manifest if not t.flags & 0x2}
    changed = [k for k in ck if got[k][1] != old[k][1]]
    assert set(changed) == set(some) & ck, (sorted(changed)[:4], sorted(some)[:4])
    assert m.verify()
    m.detach()
    e.close()


def test_gpu_in_place_trainer_killed(gpu_llama, tmp_path):
    r, new, _ = gpu_llama
    e = connect(r)
    e.hello()
    m = e.attach(framework="torch")      # held: a dropped Model detaches
    e.pause()
    p = start_trainer(tmp_path, r, new, TRAINER, "mid")
    try:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    st = session_ended(r)
    assert st["incomplete"] == 1, st
    assert notice(e, "incomplete").version == 1
    with connect(r) as t:
        with pytest.raises(wcache.Busy):
            t.hello()
        assert t.update_from(new, in_place=True).version == 2
    assert e.resume().version == 2
    m.detach()
    e.close()
