# SPDX-License-Identifier: MIT
"""wc_push_times (Connection.push_times): the trainer's side of the last
update session, counted as it ran. On wcgen tiny served in 1 MiB pools: a
full update maps every pool and makes one copy a checkpoint tensor (tp 1:
one piece each); a partial update of one tensor maps one pool and makes
one copy, its counts started again at the open; an aborted session counts
its unmap and no commit; a connection that never opened one reads zeros."""
import ctypes
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layout_ref"))

import daemon  # noqa: E402

torch = pytest.importorskip("torch")
wcache = pytest.importorskip("wcache")

from test_push import connect  # noqa: E402

PHASES = ("open_ns", "plan_ns", "map_ns", "copy_ns", "sync_ns", "commit_ns", "unmap_ns")


@pytest.fixture
def tiny(tmp_path):
    m = str(tmp_path / "tiny")
    subprocess.run([os.path.join(daemon.BIN, "wcgen"), "tiny", "--out", m], check=True,
                   capture_output=True)
    with daemon.Ranks(m, [["--pool-size", "1M"]]) as rs:
        yield rs.ranks[0], m


def test_push_times_count_the_session(tiny):
    from wcache import _lib, _push
    from wcache._lib import lib
    r, m = tiny
    with connect(r) as c:
        assert c.push_times() == {k: 0 for k in PHASES + ("maps", "copies")}
        served = c.attach(m)
        pools = {t.pool for t in served.manifest}
        p = _push._open(c, 0, 0, 0)
        try:
            ckpt = list(_push._dtypes(p))
        finally:
            lib.wc_push_abort(p, None)
        sd = {k: served[k].clone() + 1 for k in ckpt}
        served.close()
        assert len(pools) > 4, pools

        c.update_from(sd)
        t = c.push_times()
        assert t["maps"] == len(pools), (t, len(pools))
        assert t["copies"] == len(ckpt), (t, len(ckpt))
        for k in PHASES:
            assert t[k] > 0, (k, t)
        # one tensor: one pool, one copy, counted from this open on
        name = "model.layers.1.mlp.down_proj.weight"
        c.update_from({name: sd[name] + 1}, partial=True)
        t = c.push_times()
        assert (t["maps"], t["copies"]) == (1, 1), t
        assert t["open_ns"] > 0 and t["commit_ns"] > 0 and t["unmap_ns"] > 0

        # aborted after a write: its map, copy and unmap, no commit
        p = _push._open(c, 2, 0, 0)
        _push._write(c, p, name, _push._source(name, sd[name]))
        err = _lib.new(_lib.WcError)
        assert lib.wc_push_abort(p, ctypes.byref(err)) == 0
        t = c.push_times()
        assert (t["maps"], t["copies"], t["commit_ns"], t["sync_ns"]) == (1, 1, 0, 0), t
        assert t["unmap_ns"] > 0 and t["map_ns"] > 0 and t["copy_ns"] > 0
