# SPDX-License-Identifier: MIT
"""On a GPU, with transformers: wcache.transformers.from_pretrained over a
real wcd on CUDA device 0 returns from_pretrained's class with its weights
served (no copy), and greedy generate() gives from_pretrained's tokens,
token for token; with no daemon it is from_pretrained itself, after one
FallbackWarning. README's one-line drop-in runs as written (a hub id
resolved in a Hugging Face cache made here). Skipped without a GPU or
transformers; the CPU cases are test_py_dropin.py's."""
import ast
import os
import subprocess
import sys
import warnings

import pytest

from conftest import PKG, REFERENCE, WC_TOP

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
transformers = pytest.importorskip("transformers")

import wcache  # noqa: E402
import wcache.transformers  # noqa: E402
from test_gpu_models import GpuDaemon  # noqa: E402

IDS = [[1, 17, 300, 42, 7, 411, 2, 99]]


def tiny_qwen3(out):
    """A tie_word_embeddings Qwen3, small, written by transformers."""
    cfg = transformers.Qwen3Config(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=128, tie_word_embeddings=True, dtype="bfloat16")
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(str(out))
    return str(out)


def greedy(model):
    with torch.no_grad():
        return model.generate(torch.tensor(IDS, device="cuda:0"), max_new_tokens=16,
                              do_sample=False).tolist()


@pytest.mark.parametrize("which", ["llama", "qwen3"])
def test_generate_equals_from_pretrained(which, tmp_path):
    model_dir = os.path.join(REFERENCE, "llama") if which == "llama" else tiny_qwen3(tmp_path / "qwen3")
    ref = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16,
                                                            device_map="cuda:0")
    want = greedy(ref)
    d = GpuDaemon(tmp_path, model_dir)
    try:
        for device in ("cuda:0", 0, torch.device("cuda", 0)):
            how = {}
            with warnings.catch_warnings():
                warnings.simplefilter("error", wcache.FallbackWarning)
                m = wcache.transformers.from_pretrained(model_dir, device=device, dtype=torch.bfloat16,
                                                        runtime_dir=d.rundir, how=how,
                                                        cache=str(tmp_path / "modcache"))
            assert how["served"] and how["device"] == "cuda:0", how
            assert type(m) is type(ref) and not m.training
            assert all(p.is_cuda for p in m.parameters())
            if which == "qwen3":
                assert m.lm_head.weight is m.model.embed_tokens.weight
            assert greedy(m) == want, device
        d.stop()
        with pytest.warns(wcache.FallbackWarning, match="no daemon serves device 0|the daemon on 0 .* closed the connection"):
            m = wcache.transformers.from_pretrained(model_dir, device="cuda:0", dtype=torch.bfloat16,
                                                    runtime_dir=d.rundir)
        assert type(m) is type(ref) and greedy(m) == want
    finally:
        d.stop()


def readme_block():
    text = open(os.path.join(WC_TOP, "README.md")).read()
    sec = text[text.index("## From Python / PyTorch"):]
    block = sec[sec.index("```python\n") + 10:]
    return block[:block.index("```")]


def test_readme_dropin_runs_as_written(tmp_path):
    """The first example of README's "From Python / PyTorch" runs as it is
    written, served: its hub id is a tiny Qwen3 in a Hugging Face cache
    of its own, its daemon found through $WCACHE_RUNTIME_DIR."""
    block = readme_block()
    assert "wcache.transformers.from_pretrained(" in block
    repo = block.split('from_pretrained("')[1].split('"')[0]
    sha = "c" * 40
    hub = tmp_path / "hub" / ("models--" + repo.replace("/", "--"))
    snap = tiny_qwen3(hub / "snapshots" / sha)
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text(sha)
    d = GpuDaemon(tmp_path, snap)
    try:
        env = dict(os.environ, HF_HUB_CACHE=str(tmp_path / "hub"), WCACHE_RUNTIME_DIR=d.rundir,
                   PYTHONPATH=os.pathsep.join([PKG, os.environ.get("PYTHONPATH", "")]),
                   HF_HUB_OFFLINE="1")
        # as written, after a filter that makes a fallback fail the run
        strict = "import warnings, wcache\nwarnings.simplefilter('error', wcache.FallbackWarning)\n"
        p = subprocess.run([sys.executable, "-c", strict + block],
                           env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        ref = transformers.AutoModelForCausalLM.from_pretrained(snap, dtype=torch.bfloat16,
                                                                device_map="cuda:0")
        ids = block.split("torch.tensor(")[1].split(", device")[0]
        new = int(block.split("max_new_tokens=")[1].split(",")[0].split(")")[0])
        with torch.no_grad():
            want = ref.generate(torch.tensor(ast.literal_eval(ids), device="cuda:0"), max_new_tokens=new,
                                do_sample=False).tolist()
        assert p.stdout.strip().splitlines()[-1] == str(want), (p.stdout, want)
    finally:
        d.stop()
