# SPDX-License-Identifier: MIT
"""The package README's RL loop (examples/rl_loop.py) on the host backend
with torch CPU and no transformers: the README's block is the file's loop,
line for line, and the file runs as written against a wcd serving the
reference Llama, with test_py_torch's small Llama as its module
(--build rl_build:build): a trainer process and an engine process, three
steps of generate, train, update_from, follow; the engine's last tokens
are the trainer's own and every version was published and followed."""
import os
import re
import subprocess
import sys

import pytest

from conftest import PKG, REFERENCE, WC_TOP

torch = pytest.importorskip("torch")

EXAMPLE = os.path.join(PKG, "examples", "rl_loop.py")
LLAMA = os.path.join(REFERENCE, "llama")


def loop_of_file():
    src = open(EXAMPLE).read()
    a = src.index("# --- the loop (the package README's block, line for line) ---\n")
    b = src.index("# --- end of the loop ---")
    return src[a:b].split("\n", 1)[1].rstrip("\n") + "\n"


def readme_block():
    text = open(os.path.join(PKG, "README.md")).read()
    sec = text[text.index("## An RL loop on one GPU: follow"):]
    block = sec[sec.index("```python\n") + 10:]
    return block[:block.index("```")]


def test_readme_block_is_the_example():
    assert readme_block() == loop_of_file()
    top = open(os.path.join(WC_TOP, "README.md")).read()
    assert "README.md#an-rl-loop-on-one-gpu-follow" in top


def run_loop(device, rundir, model_dir, *extra, env=None, timeout=300):
    e = dict(env or os.environ)
    e["PYTHONPATH"] = os.pathsep.join([PKG, os.path.dirname(os.path.abspath(__file__)),
                                       e.get("PYTHONPATH", "")])
    p = subprocess.run([sys.executable, "-W", "ignore::UserWarning", EXAMPLE, model_dir,
                        "--device", device, "--runtime-dir", rundir, "--steps", "3"] + list(extra),
                       env=e, capture_output=True, text=True, timeout=timeout)
    return p


def check_output(p, steps=3):
    assert p.returncode == 0, "exit %d:\n%s\n%s" % (p.returncode, p.stdout, p.stderr[-3000:])
    got = re.findall(r"step (\d+): rollout of version (\d+), loss [-\d.naninf]+, version (\d+) published",
                     p.stdout)
    assert got == [(str(i), str(i + 1), str(i + 2)) for i in range(steps)], p.stdout
    assert "generated again on version %d: equal" % (steps + 1) in p.stdout, p.stdout


def test_rl_loop_on_the_host(daemons):
    d = daemons(LLAMA, "rl")
    p = run_loop(d.device, d.rundir, LLAMA, "--build", "rl_build:build")
    check_output(p)
    st = d.status()
    assert st["version"] == 4 and st["push"]["committed"] == 3, st["push"]
