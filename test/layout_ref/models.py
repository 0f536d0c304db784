# SPDX-License-Identifier: MIT
"""The checkpoints the layout tests run on: transformers' save_pretrained
ones under test/data/layouts and wcgen's presets (written once per session
into a temporary directory)."""
import atexit
import os
import shutil
import subprocess
import tempfile

import daemon
import ref

LAYOUTS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "data", "layouts"))
HF = sorted(d for d in os.listdir(LAYOUTS) if os.path.isdir(os.path.join(LAYOUTS, d)))
WCGEN = ["tiny", "llama-gqa", "qwen2-tiny", "qwen3-tiny", "mixtral-tiny",
         "qwen3-moe-tiny", "deepseek-v3-tiny", "gemma2-tiny", "gemma3-tiny",
         "phi3-tiny"]
ALL = [("hf", n) for n in HF] + [("wcgen", n) for n in WCGEN]

_tmp = None
_cks = {}


def path(kind, name):
    global _tmp
    if kind == "hf":
        return os.path.join(LAYOUTS, name)
    if _tmp is None:
        _tmp = tempfile.mkdtemp(prefix="wct-layoutref-gen.")
        atexit.register(shutil.rmtree, _tmp, True)
    out = os.path.join(_tmp, name)
    if not os.path.exists(os.path.join(out, "config.json")):
        subprocess.run([os.path.join(daemon.BIN, "wcgen"), name, "--out", out],
                       check=True, capture_output=True)
    return out


def checkpoint(kind, name):
    key = (kind, name)
    if key not in _cks:
        _cks[key] = ref.Checkpoint(path(kind, name))
    return _cks[key]
