# SPDX-License-Identifier: MIT
"""On a GPU: transformers models built on the meta device and bound with
wcache.torch.load_into to the CUDA tensors a real wcd serves give logits
bitwise equal to the same model loaded by from_pretrained onto the same GPU,
and torch.cuda.memory_allocated() shows that the weights were not copied.
The reference LlamaForCausalLM checkpoint (test/data), and a tied-embedding
Qwen3 made here with transformers. Skipped without a GPU or transformers."""
import glob
import os
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import BIN, REFERENCE, need

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
transformers = pytest.importorskip("transformers")

import wcache  # noqa: E402
import wcache.torch  # noqa: E402

IDS = [[1, 17, 300, 42, 7, 411, 2, 99, 5, 250]]


class GpuDaemon:
    def __init__(self, tmp, model):
        # a short directory: a UUID socket under pytest's tmp_path can pass
        # the 107-byte limit of a socket path
        self.rundir = tempfile.mkdtemp(prefix="wg", dir="/tmp")
        self.log = str(tmp / "wcd.log")
        self.proc = subprocess.Popen([need(os.path.join(BIN, "wcd")), "--model", str(model),
                                      "--device", "0", "--runtime-dir", self.rundir],
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not glob.glob(os.path.join(self.rundir, "*.ready")):
            if self.proc.poll() is not None:
                out = open(self.log).read()
                if "CUDA" in out and "not built" in out:
                    pytest.skip("wcd was built without CUDA")
                raise AssertionError("wcd exited (%s):\n%s" % (self.proc.returncode, out))
            assert time.monotonic() < deadline, open(self.log).read()
            time.sleep(0.05)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def served_logits(model_dir, rundir, arch):
    """The package README's example: connect, attach, meta init, load_into, run."""
    conn = wcache.connect(device="0", runtime_dir=rundir)
    served = conn.attach(model_dir=model_dir)              # torch tensors on cuda:0
    cfg = transformers.AutoConfig.from_pretrained(model_dir)
    with wcache.torch.init_empty(buffers_device="cuda"):   # weights on meta, buffers real
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    bound = wcache.torch.load_into(model, served)          # no copy
    with torch.no_grad():
        logits = model.eval()(torch.tensor(IDS, device="cuda")).logits
    return logits, model, served, bound


def check(model_dir, tmp_path, arch, tied):
    d = GpuDaemon(tmp_path, model_dir)
    try:
        torch.cuda.synchronize()
        ref = getattr(transformers, arch).from_pretrained(
            model_dir, dtype=torch.bfloat16, device_map="cuda", attn_implementation="sdpa").eval()
        with torch.no_grad():
            want = ref(torch.tensor(IDS, device="cuda")).logits
        weights = sum(p.numel() * p.element_size() for p in ref.parameters())
        ref_buffers = {n: b.clone() for n, b in ref.named_buffers()}
        del ref
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        want_base = base - want.numel() * want.element_size()
        conn = wcache.connect(device="0", runtime_dir=d.rundir)
        served = conn.attach(model_dir=model_dir)
        assert served.device == "cuda:0"
        x = served["model.norm.weight"]
        assert x.is_cuda and x.dtype == torch.bfloat16
        assert served.verify()
        cfg = transformers.AutoConfig.from_pretrained(model_dir)
        with wcache.torch.init_empty(buffers_device="cuda") as how:
            model = transformers.AutoModelForCausalLM.from_config(
                cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
        # transformers' init ran only for the modules holding buffers (the rotary)
        assert how.transformers and 0 < how.hf_ran < how.hf_skipped, how
        assert all(p.is_meta for p in model.parameters())
        # the buffers (rotary inv_freq, non-persistent) are from_pretrained's, bitwise
        got_buffers = dict(model.named_buffers())
        assert sorted(got_buffers) == sorted(ref_buffers)
        for n, b in ref_buffers.items():
            g = got_buffers[n]
            assert (g.device, g.dtype) == (b.device, b.dtype) and torch.equal(g, b), \
                "%s: init_empty's %s %s, from_pretrained's %s %s" % (n, g.device, g.dtype, b.device, b.dtype)
        bound = wcache.torch.load_into(model, served)
        after_bind = torch.cuda.memory_allocated()
        if tied:
            assert bound.tied == {"lm_head.weight": "model.embed_tokens.weight"}, bound.tied
        assert bound.missing == [] and bound.unexpected == []
        for name, p in model.named_parameters():
            assert p.is_cuda and p.data_ptr() == served[bound.tied.get(name, name)].data_ptr(), name
        with torch.no_grad():
            got = model.eval()(torch.tensor(IDS, device="cuda")).logits
        print("%s: weights %d bytes; memory_allocated: %d before, +%d after load_into "
              "(buffers only), logits %s" % (arch, weights, base, after_bind - base, tuple(got.shape)))
        assert after_bind - base < max(weights // 50, 1 << 16), \
            "load_into allocated %d bytes for %d bytes of weights" % (after_bind - base, weights)
        assert want_base >= 0
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want), "logits differ: max |d| %g" % (got.float() - want.float()).abs().max()
        # the README example gives the same logits
        again, _, s2, _ = served_logits(model_dir, d.rundir, arch)
        assert torch.equal(again, want)
        # and so does the construction with every init run (skip_init=False)
        with wcache.torch.init_empty(buffers_device="cuda", skip_init=False):
            slow = transformers.AutoModelForCausalLM.from_config(
                cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
        wcache.torch.load_into(slow, served)
        with torch.no_grad():
            assert torch.equal(slow.eval()(torch.tensor(IDS, device="cuda")).logits, want)
        check_module_cache(model_dir, d.rundir, tmp_path, served, ref_buffers, want)
        served.detach()
        s2.detach()
    finally:
        d.stop()


RESTART = """
import sys, torch, wcache, wcache.torch
model_dir, rundir, cache, out = sys.argv[1:]
torch.empty(1, device="cuda")
conn = wcache.connect(device="0", runtime_dir=rundir)
# README's quickest start (its module cache from $WCACHE_MODULE_CACHE)
served = conn.attach(model_dir=model_dir, wait=False)  # a PendingModel
model = wcache.torch.empty_pretrained(model_dir, dtype=torch.bfloat16,
                                      buffers_device="cuda", attn_implementation="sdpa")
wcache.torch.load_into(model, served)                  # waits for the attach
# end of README's
with torch.no_grad():
    got = model.eval()(torch.tensor(%r, device="cuda"), output_hidden_states=True)
torch.save(got.logits.cpu(), out)
# what the constructors did outside the module, redone after the hit
hs = got.hidden_states
assert hs is not None and len(hs) == model.config.num_hidden_layers + 1, hs
g = model.generation_config
assert g is None or getattr(g, "_original_object_hash", hash(g)) == hash(g)
""" % (IDS,)


def check_module_cache(model_dir, rundir, tmp_path, served, ref_buffers, want):
    """empty_pretrained's module cache: written by the first call, read by
    the second and by a fresh process (a restart); each module the same:
    parameters on meta, from_pretrained's buffers bitwise, its logits."""
    cache = str(tmp_path / "modcache")
    with wcache.torch.init_empty(buffers_device="cuda"):
        plain = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.from_pretrained(model_dir), dtype=torch.bfloat16,
            attn_implementation="sdpa")
    for expect in ("miss", "hit"):
        how = {}
        m = wcache.torch.empty_pretrained(model_dir, dtype=torch.bfloat16, buffers_device="cuda",
                                          cache=cache, how=how, attn_implementation="sdpa")
        assert how["cache"] == expect and (expect == "hit" or how["saved"]), how
        assert all(p.is_meta for p in m.parameters())
        assert [(n, type(x)) for n, x in m.named_modules()] == \
            [(n, type(x)) for n, x in plain.named_modules()]
        assert m.config.to_dict() == plain.config.to_dict()
        gen = getattr(plain, "generation_config", None)
        assert (gen is None) == (getattr(m, "generation_config", None) is None)
        assert gen is None or m.generation_config.to_dict() == gen.to_dict()
        got = dict(m.named_buffers())
        assert sorted(got) == sorted(ref_buffers)
        for n, b in ref_buffers.items():
            assert got[n].device == b.device and torch.equal(got[n], b), n
        wcache.torch.load_into(m, served)
        with torch.no_grad():
            assert torch.equal(m.eval()(torch.tensor(IDS, device="cuda")).logits, want), expect
    out = str(tmp_path / "restart-logits.pt")
    env = dict(os.environ, WCACHE_MODULE_CACHE=cache, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(wcache.__path__[0])] + [os.environ.get("PYTHONPATH", "")]))
    files = {f: os.stat(os.path.join(cache, f)) for f in os.listdir(cache)}
    # a refusal warns (made an error there); a miss would rewrite the file
    p = subprocess.run([sys.executable, "-W", "error:wcache.torch.empty_model:RuntimeWarning",
                        "-c", RESTART, model_dir, rundir, cache, out],
                       env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    after = {f: os.stat(os.path.join(cache, f)) for f in os.listdir(cache)}
    assert {f: (x.st_ino, x.st_mtime_ns) for f, x in after.items()} == \
        {f: (x.st_ino, x.st_mtime_ns) for f, x in files.items()}, "the restart was not a hit"
    assert torch.equal(torch.load(out).cuda(), want)


def test_reference_llama(tmp_path):
    check(os.path.join(REFERENCE, "llama"), tmp_path, "LlamaForCausalLM", tied=False)


def test_tied_qwen3(tmp_path):
    """A tie_word_embeddings Qwen3 written by transformers (no lm_head in
    the files)."""
    cfg = transformers.Qwen3Config(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=128, tie_word_embeddings=True, dtype="bfloat16")
    torch.manual_seed(0)
    m = transformers.Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    out = tmp_path / "qwen3"
    m.save_pretrained(str(out))
    assert m.lm_head.weight is m.model.embed_tokens.weight
    check(str(out), tmp_path, "Qwen3ForCausalLM", tied=True)


def test_cuda_write_faults(tmp_path):
    """What the README says a write through a read-only CUDA mapping does:
    the kernel faults and the process's CUDA context is unusable after."""
    import sys
    import textwrap
    from conftest import PKG
    d = GpuDaemon(tmp_path, os.path.join(REFERENCE, "llama"))
    try:
        code = textwrap.dedent("""
            import sys, warnings
            sys.path.insert(0, %r)
            import torch, wcache
            warnings.simplefilter("ignore")
            c = wcache.connect(device="0", runtime_dir=%r)
            m = c.attach(model_dir=%r)
            x = m["model.norm.weight"]
            print("read ok", float(x.float().sum()), flush=True)
            try:
                x.add_(1)
                torch.cuda.synchronize()
                print("wrote")
            except RuntimeError as e:
                print("fault:", str(e).splitlines()[0], flush=True)
            try:
                torch.zeros(1, device="cuda").sum().item()
                print("context ok")
            except RuntimeError as e:
                print("context unusable:", str(e).splitlines()[0])
        """) % (PKG, d.rundir, os.path.join(REFERENCE, "llama"))
        p = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120)
        out = p.stdout.decode()
        print(out)
        assert "read ok" in out and "wrote" not in out, out
        assert "fault:" in out or p.returncode != 0, out
    finally:
        d.stop()
