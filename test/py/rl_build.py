# SPDX-License-Identifier: MIT
"""The RL example's builder on a CPU without transformers
(rl_loop.py --build rl_build:build): test_py_torch's small Llama, with
the reference checkpoint's module names."""
import torch

from test_py_torch import from_files, meta_llama


def build(model_dir, empty, device):
    assert device == "cpu", device
    if empty:
        return meta_llama(model_dir)
    m = from_files(model_dir)
    for p in m.parameters():
        p.requires_grad_(True)
    return m
