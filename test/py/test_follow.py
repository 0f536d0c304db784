# SPDX-License-Identifier: MIT
"""wcache.torch.follow on the host backend (torch CPU): an engine's module
bound to version N follows a trainer's update_from to N+1 between steps:
its parameters are then N+1's served memory (no copy) and its logits the
trainer's weights'; N is freed once its last lease ends; nothing switches
without a notice; a version whose layout the module cannot bind leaves
the module on N with an error that says what to do."""
import os
import time

import pytest

from conftest import REFERENCE

torch = pytest.importorskip("torch")
import wcache  # noqa: E402
import wcache.torch as wt  # noqa: E402
from test_py_torch import IDS, from_files, meta_llama, tied_llama  # noqa: E402

LLAMA = os.path.join(REFERENCE, "llama")


def versions(d):
    return sorted((v["version"], v["leases"]) for v in d.status()["versions"])


def pools_of(model):
    """(start, end) of every pool the Model maps."""
    out = []
    for t in model.tensors().values():
        a = t.data_ptr()
        out.append((a, a + t.numel() * t.element_size()))
    return out


def inside(ptr, ranges):
    return any(a <= ptr < b for a, b in ranges)


def stepped(mod, seed):
    """The trainer's weights after a step: mod's state dict, each tensor
    moved by a little noise (new bf16 values, the same layout)."""
    g = torch.Generator().manual_seed(seed)
    return {k: (v.float() + 0.05 * torch.randn(v.shape, generator=g)).to(v.dtype)
            for k, v in mod.state_dict().items()}


def wait_for(pred, what):
    for _ in range(500):
        if pred():
            return
        time.sleep(0.01)
    raise AssertionError("not within 5 s: " + what)


def test_follow_switches_in_place(daemons):
    d = daemons(LLAMA, "follow")
    trainer = from_files(LLAMA)
    with d.connect() as tc, d.connect() as ec:
        mod = meta_llama()
        f = wt.follow(mod, ec)
        assert f.version == 1 and f.switches == 0
        assert not f.poll()                       # no notice: nothing switches
        with torch.no_grad():
            before = mod(IDS)
            assert torch.equal(before, trainer(IDS))
        emb = mod.model.embed_tokens
        new = stepped(trainer, 1)
        assert tc.update_from(new).version == 2
        assert versions(d) == [(1, 1), (2, 0)]    # N held by the engine
        wait_for(lambda: f.poll(), "the engine switches to version 2")
        assert f.version == 2 and f.switches == 1 and f.model.version == 2
        assert mod.model.embed_tokens is emb      # the same module objects
        # every parameter is version 2's served memory, equal to the new weights
        pools = pools_of(f.model)
        for name, p in mod.state_dict().items():
            assert inside(p.data_ptr(), pools), name
            assert torch.equal(p, new[name]), name
        del p       # a tensor of version 2 held here would hold its lease
        # version 1 went with its last lease (the module's)
        wait_for(lambda: versions(d) == [(2, 1)], "version 1 freed: %s" % versions(d))
        trainer.load_state_dict(new)
        with torch.no_grad():
            got = mod(IDS)
            assert torch.equal(got, trainer(IDS))
            assert not torch.equal(got, before)
        assert not f.poll()                       # nothing new
        t = f.times
        assert t["switch_ns"] >= t["attach_ns"] + t["bind_ns"] > 0, t
        # a second update: followed again (the slot of version 1 is free)
        new2 = stepped(trainer, 2)
        assert tc.update_from(new2).version == 3
        assert f.wait(timeout=10) and f.version == 3
        assert all(torch.equal(p, new2[n]) for n, p in mod.state_dict().items())
        wait_for(lambda: versions(d) == [(3, 1)], "version 2 freed: %s" % versions(d))
        f.close()
        del mod, f, emb
        __import__("gc").collect()
        wait_for(lambda: versions(d) == [(3, 0)], "the last lease ended: %s" % versions(d))


def test_no_switch_without_notice(daemons):
    """poll() and wait() switch nothing while no version was published:
    an attach of another connection, a ping, a status are no notices."""
    d = daemons(LLAMA, "quiet")
    with d.connect() as ec, d.connect() as other:
        mod = meta_llama()
        f = wt.follow(mod, ec)
        w = mod.lm_head.weight
        other.attach().detach()
        other.ping()
        d.status()
        assert not f.poll() and not f.wait(timeout=0.2)
        assert f.version == 1 and f.switches == 0 and mod.lm_head.weight is w
        assert f.pending() == 0


def test_follow_takes_a_bound_model(daemons):
    """follow(module, conn, model=served): a module already bound by
    load_into follows from that Model's version; name_map is used at the
    switch as load_into uses it; the re-attach's HELLO carries the
    engine's identity (model_dir=), which a pushed version still has."""
    d = daemons(LLAMA, "bound")
    trainer = from_files(LLAMA)
    with d.connect() as tc, d.connect() as ec:
        mod = meta_llama()
        mod.output = mod.lm_head
        del mod.lm_head
        name_map = {"output.weight": "lm_head.weight"}
        served = ec.attach(model_dir=LLAMA)
        wt.load_into(mod, served, name_map=name_map)
        f = wt.follow(mod, ec, model=served, name_map=name_map, model_dir=LLAMA)
        new = stepped(trainer, 3)
        tc.update_from(new)
        assert f.wait(timeout=10) and f.version == 2
        assert torch.equal(mod.output.weight, new["lm_head.weight"])
        assert inside(mod.output.weight.data_ptr(), pools_of(f.model))


def test_layout_change_leaves_the_old_version(daemons, tmp_path):
    """A version whose tensors no longer fit the module (an update with
    allow_layout_change that drops a tensor): FollowError says so and what
    to do, the module stays bound to version 1 (its logits unchanged), the
    version is not tried again at the next poll."""
    d = daemons(LLAMA, "layout")
    trainer = from_files(LLAMA)
    with d.connect() as tc, d.connect() as ec:
        mod = meta_llama()
        f = wt.follow(mod, ec)
        with torch.no_grad():
            before = mod(IDS)
        ptrs = {n: p.data_ptr() for n, p in mod.state_dict().items()}
        new = stepped(trainer, 4)
        # a layout change: the checkpoint's headers give a new shape
        import json
        import shutil
        import struct
        changed = tmp_path / "changed"
        shutil.copytree(LLAMA, changed)
        name = "model.norm.weight"
        for fn in sorted(os.listdir(changed)):
            if not fn.endswith(".safetensors"):
                continue
            path = changed / fn
            raw = path.read_bytes()
            (n,) = struct.unpack_from("<Q", raw, 0)
            hdr = json.loads(raw[8:8 + n])
            if name in hdr:
                # the same bytes as a [2, h/2] tensor: a new shape
                h = hdr[name]["shape"][0]
                hdr[name]["shape"] = [2, h // 2]
                js = json.dumps(hdr).encode()
                js += b" " * (-len(js) % 8)
                path.write_bytes(struct.pack("<Q", len(js)) + js + raw[8 + n:])
                new[name] = new[name].reshape(2, h // 2)
        assert tc.update(str(changed), allow_layout_change=True).version == 2
        with pytest.raises(wt.FollowError) as e:
            f.wait(timeout=10)
        msg = str(e.value)
        assert "version 2 does not fit the module" in msg and name in msg, msg
        assert "stays on version 1" in msg and "Build a module for the new layout" in msg, msg
        assert e.value.version == 1 and e.value.refused == 2
        assert f.version == 1 and f.switches == 0 and f.model.version == 1
        assert {n: p.data_ptr() for n, p in mod.state_dict().items()} == ptrs
        with torch.no_grad():
            assert torch.equal(mod(IDS), before)
        assert not f.poll()                       # not retried
        assert versions(d) == [(1, 1), (2, 0)]    # N held by the engine, N+1 served
        f.close()


def test_refused_reattach_is_retried(daemons):
    """A re-attach the daemon refuses (here: Busy, once) raises FollowError
    saying the module stays on its version and poll() tries again; the
    module is untouched, and the next poll() switches."""
    d = daemons(LLAMA, "retry")
    trainer = from_files(LLAMA)
    with d.connect() as tc, d.connect() as ec:
        mod = meta_llama()
        f = wt.follow(mod, ec)
        ptrs = {n: p.data_ptr() for n, p in mod.state_dict().items()}
        real = ec.attach
        calls = []

        def refuse_once(**kw):
            calls.append(kw)
            if len(calls) == 1:
                raise wcache.Busy(16, "the daemon is busy (a test's refusal)")
            return real(**kw)
        ec.attach = refuse_once
        new = stepped(trainer, 5)
        tc.update_from(new)
        with pytest.raises(wt.FollowError) as e:
            f.wait(timeout=10)
        msg = str(e.value)
        assert "published version 2, but the re-attach failed" in msg and "busy" in msg, msg
        assert "stays on version 1; poll() tries again" in msg, msg
        assert isinstance(e.value.__cause__, wcache.Busy)
        assert f.version == 1 and f.pending() == 2
        assert {n: p.data_ptr() for n, p in mod.state_dict().items()} == ptrs
        assert f.poll() and f.version == 2 and len(calls) == 2
        assert torch.equal(mod.lm_head.weight, new["lm_head.weight"])


def test_rebind_plan(daemons):
    """A version of the same layout is re-bound from the last bind's plan
    (times["rebind"] "plan"): every parameter then holds the new weights,
    keeps the attributes an engine set on it; a Parameter the engine replaced between switches makes
    the follower bind with load_into again (the replacement is bound,
    not skipped); the garbage collector's state is the caller's after
    each switch."""
    import gc
    d = daemons(LLAMA, "fplan")
    trainer = from_files(LLAMA)
    with d.connect() as tc, d.connect() as ec:
        mod = meta_llama()
        f = wt.follow(mod, ec)
        assert f.times == {}
        mod.model.layers[0].self_attn.q_proj.weight.output_dim = 0   # an engine's attribute
        new = stepped(trainer, 11)
        assert tc.update_from(new).version == 2
        assert f.wait(timeout=10) and f.times["rebind"] == "plan"
        assert gc.isenabled()
        sd = mod.state_dict()
        assert all(torch.equal(p, new[n]) for n, p in sd.items())
        assert mod.model.layers[0].self_attn.q_proj.weight.output_dim == 0
        del sd
        # the engine swaps one Parameter for its own between steps
        own = torch.nn.Parameter(torch.zeros_like(mod.model.norm.weight), requires_grad=False)
        mod.model.norm.weight = own
        new2 = stepped(trainer, 12)
        gc.disable()
        try:
            assert tc.update_from(new2).version == 3
            assert f.wait(timeout=10) and f.times["rebind"] == "load_into"
            assert not gc.isenabled()             # left as the caller had it
        finally:
            gc.enable()
        assert mod.model.norm.weight is not own
        assert torch.equal(mod.model.norm.weight, new2["model.norm.weight"])
        assert inside(mod.model.norm.weight.data_ptr(), pools_of(f.model))
        # and the plan of that bind serves the next switch
        new3 = stepped(trainer, 13)
        assert tc.update_from(new3).version == 4
        assert f.wait(timeout=10) and f.times["rebind"] == "plan"
        assert all(torch.equal(p, new3[n]) for n, p in mod.state_dict().items())
        f.close()


@pytest.mark.parametrize("background", [True, False])
def test_old_detach(daemons, background):
    """The old version's detach: inside poll() (background=False: N's
    lease is gone when poll() returns, detach_ns counted in switch_ns) or
    on the follower's thread (the default: released() waits for it, then
    the daemon holds no lease of N, and detach_ns is set)."""
    d = daemons(LLAMA, "fbg%d" % background)
    trainer = from_files(LLAMA)
    with d.connect() as tc, d.connect() as ec:
        mod = meta_llama()
        f = wt.follow(mod, ec, background=background)
        for v in (2, 3):
            assert tc.update_from(stepped(trainer, v)).version == v
            assert f.wait(timeout=10) and f.version == v
            if background:
                assert f.released(timeout=10)
            t = f.times
            assert t["detach_ns"] > 0, t
            if background:
                assert t["switch_ns"] >= t["attach_ns"] + t["bind_ns"], t
            else:
                assert t["switch_ns"] >= t["attach_ns"] + t["bind_ns"] + t["detach_ns"], t
            # the Model's lease of v - 1 is gone (the module holds only v's)
            assert versions(d) == [(v, 1)], versions(d)
        f.close()
        assert f.released()


def test_rebind_plan_tied(daemons, tmp_path):
    """Tied names (lm_head.weight the embedding's Parameter, served as an
    alias) stay one Parameter through a re-bind from the plan, over the
    new version's embedding."""
    tied = tied_llama(tmp_path)
    d = daemons(tied, "ftied")
    trainer = from_files(str(tied), tie=True)
    with d.connect() as tc, d.connect() as ec:
        mod = meta_llama(str(tied), tie=True)
        f = wt.follow(mod, ec)
        new = {k: v for k, v in stepped(trainer, 21).items() if k != "lm_head.weight"}
        assert tc.update_from(new).version == 2
        assert f.wait(timeout=10) and f.times["rebind"] == "plan"
        assert mod.lm_head.weight is mod.model.embed_tokens.weight
        assert torch.equal(mod.lm_head.weight, new["model.embed_tokens.weight"])
        assert inside(mod.lm_head.weight.data_ptr(), pools_of(f.model))
        trainer.load_state_dict(new, strict=False)
        with torch.no_grad():
            assert torch.equal(mod(IDS), trainer(IDS))
        f.close()


def test_failed_detach_warns(daemons):
    """A detach of the old version that fails on the detach thread is
    told at released() (a RuntimeWarning naming it); the follower goes on
    switching."""
    d = daemons(LLAMA, "fdet")
    trainer = from_files(LLAMA)
    with d.connect() as tc, d.connect() as ec:
        mod = meta_llama()
        f = wt.follow(mod, ec)
        old = f.model
        real = old.detach

        def broken():
            raise RuntimeError("unmap failed (test)")
        old.detach = broken
        assert tc.update_from(stepped(trainer, 31)).version == 2
        assert f.wait(timeout=10)
        with pytest.warns(RuntimeWarning, match="detach failed: unmap failed"):
            assert f.released(timeout=10)
        assert f.released()                      # told once
        real()
        assert tc.update_from(stepped(trainer, 32)).version == 3
        assert f.wait(timeout=10) and f.version == 3
        f.close()


EXIT_SCRIPT = """
import sys
sys.path.insert(0, %(py)r)
import wcache, wcache.torch as wt
from test_follow import LLAMA, stepped, versions
from test_py_torch import from_files, meta_llama
tc = wcache.connect(device=%(dev)r, runtime_dir=%(rd)r)
ec = wcache.connect(device=%(dev)r, runtime_dir=%(rd)r)
f = wt.follow(meta_llama(), ec)
trainer = from_files(LLAMA)
for v in (2, 3):
    assert tc.update_from(stepped(trainer, v)).version == v
    assert f.wait(timeout=10)
print("on", f.version, flush=True)
# ends without close(), a detach perhaps still running on the thread
"""


def test_exit_without_close(daemons):
    """A process that ends while its follower's detach thread lives (no
    close()) exits cleanly: the thread is joined before Python finalises
    (a thread woken during finalisation killed the GPU RL loop's engine
    with std::terminate), and the daemon sees every lease end."""
    import subprocess
    import sys
    d = daemons(LLAMA, "fexit")
    code = EXIT_SCRIPT % {"py": os.path.dirname(os.path.abspath(__file__)),
                          "dev": d.device, "rd": d.rundir}
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "on 3" in r.stdout, (r.returncode, r.stdout, r.stderr)
    assert "terminate" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    wait_for(lambda: versions(d) == [(3, 0)], "every lease ended: %s" % versions(d))
