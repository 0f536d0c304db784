# SPDX-License-Identifier: MIT
"""On a GPU (issue 29): a transformers model served by a CUDA wcd, its
weights changed by a trainer process and pushed with update_from from CUDA
tensors; an engine process that follows (the version notice, a fresh
attach, load_into again) gives logits bitwise equal to from_pretrained of
the changed weights saved to disk with safetensors. Three pushes in turn:
every tensor (from a side stream, one source a CPU tensor, one a
non-contiguous view; keep_spare), a partial update of two tensors (into
the spare: version 1's pools, kept at the engine's detach), and float32
sources with cast=True (an update without keep_spare, into the spare
too). Every version the engine binds passes its client-side
re-hash (the commit's hashes were taken on the device), and the last one's
hashes equal those of a disk update of the same files. Skipped without
CUDA, transformers or safetensors."""
import os
import select
import subprocess
import sys
import textwrap

import pytest

from conftest import REFERENCE

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU (torch.cuda.is_available() is False)", allow_module_level=True)
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

import wcache  # noqa: E402
from test_gpu_models import IDS, GpuDaemon  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layout_ref"))
import daemon as layout_daemon  # noqa: E402

MODEL = os.path.join(REFERENCE, "llama")

ENGINE = textwrap.dedent("""
    import gc, os, select, sys, torch, transformers, wcache, wcache.torch
    model_dir, rundir, outdir, n = sys.argv[1:]
    IDS = %r
    torch.empty(1, device="cuda")
    conn = wcache.connect(device="0", runtime_dir=rundir)
    cfg = transformers.AutoConfig.from_pretrained(model_dir)
    with wcache.torch.init_empty(buffers_device="cuda"):
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    served = conn.attach(model_dir=model_dir)

    def bind_and_run(served):
        assert served.verify()           # the commit's device hashes
        wcache.torch.load_into(model, served)
        with torch.no_grad():
            lg = model.eval()(torch.tensor(IDS, device="cuda")).logits
        torch.save(lg.cpu(), os.path.join(outdir, "logits-%%d.pt" %% served.version))
        print("bound", served.version, flush=True)

    bind_and_run(served)
    for _ in range(int(n)):
        while True:                      # the next version's notice
            nt = conn.read_notice()      # queued during a request, or read now
            if nt is not None and nt.kind == "version":
                break
            if nt is None:
                r, _, _ = select.select([conn.notice_fd()], [], [], 120)
                assert r, "no version notice within 120 s"
        new = conn.attach(model_dir=model_dir)
        bind_and_run(new)
        served.detach()                  # N goes once its tensors are gone
        del served
        gc.collect()
        served = new
    served.detach()
""" % (IDS,))

TRAINER = textwrap.dedent("""
    import glob, json, os, shutil, sys, torch, wcache
    from safetensors.torch import load_file, save_file
    step, prev, out, rundir = sys.argv[1:]
    sd = {}
    for f in sorted(glob.glob(os.path.join(prev, "*.safetensors"))):
        sd.update(load_file(f, device="cuda"))
    g = torch.Generator(device="cuda").manual_seed(len(step))

    def noisy(t):
        return t.float() + 0.02 * torch.randn(t.shape, device="cuda", generator=g)

    conn = wcache.connect(device="0", runtime_dir=rundir)
    names = sorted(sd)
    if step == "full":
        new = {k: noisy(v).to(torch.bfloat16) for k, v in sd.items()}
        push = dict(new)
        push[names[0]] = new[names[0]].cpu()               # host to device
        two = [k for k in names if new[k].dim() == 2][0]
        push[two] = new[two].t().contiguous().t()          # not contiguous
        assert not push[two].is_contiguous()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):                         # the caller's stream
            r = conn.update_from(push, keep_spare=True)
        # the engine holds version 1: its pools become the spare at its detach
        assert "then is kept as the spare" in r.msg, r
    elif step == "partial":
        pick = [k for k in names if "q_proj" in k][:1] + [k for k in names if "norm" in k][:1]
        changed = {k: noisy(sd[k]).to(torch.bfloat16) for k in pick}
        new = dict(sd, **changed)
        r = conn.update_from(changed, partial=True, keep_spare=True)
        assert "a partial update" in r.msg, r
        # version 1's pools, the kept tensors copied into them from 2
        assert "into the spare's pools" in r.msg, r
        assert r.bytes == sum(v.numel() * 2 for v in changed.values()), r
    elif step == "cast":
        f32 = {k: noisy(v) for k, v in sd.items()}
        try:
            conn.update_from(f32)
            raise AssertionError("float32 sources were taken without cast=True")
        except wcache.Error as e:
            assert "cast=True" in str(e), e
        r = conn.update_from(f32, cast=True)
        # a session without keep_spare takes the spare too (and keeps none)
        assert "into the spare's pools" in r.msg, r
        new = {k: v.to(torch.bfloat16) for k, v in f32.items()}  # the same cast
    os.makedirs(out)
    for f in ("config.json", "generation_config.json"):
        if os.path.exists(os.path.join(prev, f)):
            shutil.copy(os.path.join(prev, f), out)
    save_file({k: v.cpu().contiguous() for k, v in new.items()},
              os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    print(json.dumps({"version": r.version, "bytes": r.bytes, "msg": r.msg}), flush=True)
""")


def line_of(proc, what, timeout=180):
    r, _, _ = select.select([proc.stdout], [], [], timeout)
    assert r, "%s: nothing within %d s" % (what, timeout)
    out = proc.stdout.readline()
    assert out, "%s ended: rc %s" % (what, proc.wait())
    return out.strip()


def reference_logits(model_dir):
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.bfloat16, device_map="cuda", attn_implementation="sdpa").eval()
    with torch.no_grad():
        out = ref(torch.tensor(IDS, device="cuda")).logits.cpu()
    del ref
    torch.cuda.empty_cache()
    return out


def test_trainer_pushes_engine_follows(tmp_path):
    d = GpuDaemon(tmp_path, MODEL)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(wcache.__path__[0])] + [os.environ.get("PYTHONPATH", "")]))
    steps = ["full", "partial", "cast"]
    engine = subprocess.Popen([sys.executable, "-c", ENGINE, MODEL, d.rundir, str(tmp_path),
                               str(len(steps))], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert line_of(engine, "the engine") == "bound 1"
        want = reference_logits(MODEL)
        assert torch.equal(torch.load(str(tmp_path / "logits-1.pt")), want)
        prev = MODEL
        for k, step in enumerate(steps):
            out = str(tmp_path / step)
            t = subprocess.run([sys.executable, "-c", TRAINER, step, prev, out, d.rundir],
                               capture_output=True, text=True, env=env, timeout=300)
            assert t.returncode == 0, "trainer %s: %s" % (step, t.stderr[-3000:])
            version = k + 2
            assert '"version": %d' % version in t.stdout, t.stdout
            assert line_of(engine, "the engine") == "bound %d" % version
            got = torch.load(str(tmp_path / ("logits-%d.pt" % version)))
            want_k = reference_logits(out)
            assert not torch.equal(want_k, want), "%s changed nothing" % step
            assert got.dtype == want_k.dtype and got.shape == want_k.shape
            assert torch.equal(got, want_k), "%s: logits differ: max |d| %g" % (
                step, (got.float() - want_k.float()).abs().max())
            want, prev = want_k, out
        assert engine.wait(timeout=60) == 0
        # the device hashes of the last push are a disk load's
        pushed = {t["name"]: t["xxh3_128"]
                  for t in layout_daemon.manifest_of("0", d.rundir)["tensors"]}
        with wcache.connect(device="0", runtime_dir=d.rundir) as c:
            assert c.update(prev).version == len(steps) + 2
        disk = {t["name"]: t["xxh3_128"]
                for t in layout_daemon.manifest_of("0", d.rundir)["tensors"]}
        assert pushed == disk, sorted(k for k in disk if pushed.get(k) != disk[k])[:5]
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
        d.stop()
