# SPDX-License-Identifier: MIT
"""`wcctl inspect DIR --tp-size N [--ep-size N]` (the per-rank layout
without loading) against the reference and against a real wcd: every rank
lists the tensors the reference serves, with their dtypes, shapes and
padded rows (an alias's line may leave them out), and places each in the pool and at the offset the daemon
then serves it from."""
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layout_ref"))

import daemon  # noqa: E402
import landed  # noqa: E402
import models  # noqa: E402
import ref  # noqa: E402

WCCTL = os.path.join(daemon.BIN, "wcctl")


def has_layout_inspect():
    out = subprocess.run([WCCTL, "inspect", "--help"], capture_output=True, text=True)
    return "--tp-size" in out.stdout + out.stderr


LINE = re.compile(r"^(\S+)  (\S+)  (\[[0-9, ]*\])  pool (\d+) \+(\d+)(.*)$")


def inspect(path, tp, ep, rank):
    args = ["--tp-size", str(tp)] if ep == 1 else ["--ep-size", str(ep)]
    out = subprocess.run([WCCTL, "inspect", path, *args, "--rank", str(rank)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    got = {}
    for line in out.stdout.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = LINE.match(line)
        assert m, f"unparsed line: {line!r}"
        name, dtype, shape, pool, off, rest = m.groups()
        pad = re.search(r"padded_rows (\d+)", rest)
        got[name] = (dtype, [int(x) for x in shape.strip("[]").split(",") if x.strip()],
                     int(pool), int(off), int(pad.group(1)) if pad else None)
    return got


@pytest.mark.parametrize("kind,name", models.ALL)
def test_inspect_is_what_wcd_serves(kind, name):
    ck = models.checkpoint(kind, name)
    sizes = landed.ARCHS.get(ck.arch, ())
    if not has_layout_inspect():
        pytest.skip("wcctl inspect has no --tp-size yet")
    if not (landed.VIEWS and landed.PADDED_ROWS) or max(sizes, default=1) < 2:
        pytest.skip(f"{ck.arch}: its layouts at tp > 1 have not landed")
    path = models.path(kind, name)
    cases = [(tp, 1) for tp in (2, 4) if tp in sizes]
    if landed.EP and (ck.arch in ref.MOE or ck.arch in ref.MLA):
        cases.append((1, 2))
    for tp, ep in cases:
        try:
            want = ref.plan_all(ck, tp, ep)
        except ref.Refused:
            continue
        n = ep if ep > 1 else tp
        args = [["--tp-size", str(tp), "--tp-rank", str(r)] if ep == 1 else
                ["--ep-size", str(ep), "--ep-rank", str(r)] for r in range(n)]
        with daemon.Ranks(path, args) as rs:
            for r in rs.ranks:
                assert r.rc is None, r.log_text()[-2000:]
            for i, r in enumerate(rs.ranks):
                got = inspect(path, tp, ep, i)
                _, places = daemon.read_rank(r.device, r.rundir, None, True)
                where = f"{name} tp {tp} ep {ep} rank {i}"
                assert set(got) == set(places), \
                    f"{where}: inspect and wcd differ in {sorted(set(got) ^ set(places))[:10]}"
                for t, (dtype, shape, pool, off, pad) in got.items():
                    assert (pool, off) == places[t][:2], f"{where} {t}: inspect {pool}+{off}, wcd {places[t][:2]}"
                    if t in want[i]:
                        w = want[i][t]
                        assert (dtype, shape) == (w.dtype, w.shape), f"{where} {t}: {dtype} {shape}"
                        if pad is not None or not ref.is_view(ck, t):  # an alias may omit it
                            assert pad == w.padded_rows, \
                                f"{where} {t}: padded_rows {pad}, reference {w.padded_rows}"
