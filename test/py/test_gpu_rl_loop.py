# SPDX-License-Identifier: MIT
"""On a GPU: the package README's RL loop (examples/rl_loop.py) runs as
written with transformers' LlamaForCausalLM (the reference checkpoint) on
CUDA: a wcd on GPU 0, a trainer process that trains on the engine's
rollouts and pushes its CUDA weights with update_from, an engine process
that follows each version and generates again; its last tokens are the
trainer's own, from the trainer's weights. Skipped without a GPU or
transformers."""
import os

import pytest

from conftest import REFERENCE

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
pytest.importorskip("transformers")

from test_gpu_models import GpuDaemon  # noqa: E402
from test_rl_loop import check_output, run_loop  # noqa: E402

LLAMA = os.path.join(REFERENCE, "llama")


def test_gpu_rl_loop(tmp_path):
    d = GpuDaemon(tmp_path, LLAMA)
    try:
        env = dict(os.environ, WCACHE_MODULE_CACHE=str(tmp_path / "modcache"))
        p = run_loop("0", d.rundir, LLAMA, env=env)
        print(p.stdout)
        check_output(p)
    finally:
        d.stop()
