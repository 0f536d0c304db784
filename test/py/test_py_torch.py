# SPDX-License-Identifier: MIT
"""wcache.torch.load_into on the CPU (torch 1.13 in CI, no transformers): a
small Llama written here in plain torch, with the module names of the
transformers-written reference checkpoint, is built with empty (meta)
parameters, bound to the served tensors without a copy, and its logits equal
the same module loaded from the files. Tied embeddings, missing/unexpected
names, name maps and mismatched shapes. And `python -m wcache status`."""
import json
import os
import shutil
import struct
import subprocess
import sys

import pytest

import wcache
from conftest import BIN, PKG, REFERENCE, safetensors_files

torch = pytest.importorskip("torch")
import wcache.torch as wt  # noqa: E402

LLAMA = os.path.join(REFERENCE, "llama")


class Llama(torch.nn.Module):
    """LlamaForCausalLM's computation and parameter names (RMSNorm, RoPE,
    grouped-query attention, SwiGLU), small enough to read."""

    def __init__(self, c, tie=False):
        super().__init__()
        self.c = c
        h, v = c["hidden_size"], c["vocab_size"]
        self.hd = c.get("head_dim") or h // c["num_attention_heads"]
        nh, nkv, inter = c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"]
        L = torch.nn.Linear
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(v, h)
        self.model.layers = torch.nn.ModuleList()
        for _ in range(c["num_hidden_layers"]):
            layer = torch.nn.Module()
            layer.self_attn = torch.nn.Module()
            a = layer.self_attn
            a.q_proj, a.k_proj = L(h, nh * self.hd, bias=False), L(h, nkv * self.hd, bias=False)
            a.v_proj, a.o_proj = L(h, nkv * self.hd, bias=False), L(nh * self.hd, h, bias=False)
            layer.mlp = torch.nn.Module()
            layer.mlp.gate_proj, layer.mlp.up_proj = L(h, inter, bias=False), L(h, inter, bias=False)
            layer.mlp.down_proj = L(inter, h, bias=False)
            layer.input_layernorm = torch.nn.Module()
            layer.input_layernorm.weight = torch.nn.Parameter(torch.ones(h))
            layer.post_attention_layernorm = torch.nn.Module()
            layer.post_attention_layernorm.weight = torch.nn.Parameter(torch.ones(h))
            self.model.layers.append(layer)
        self.model.norm = torch.nn.Module()
        self.model.norm.weight = torch.nn.Parameter(torch.ones(h))
        self.lm_head = L(h, v, bias=False)
        if tie:
            self.lm_head.weight = self.model.embed_tokens.weight
        theta = c.get("rope_parameters", {}).get("rope_theta", 10000.0)
        inv = 1.0 / (theta ** (torch.arange(0, self.hd, 2).float() / self.hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    def norm(self, x, w):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.c["rms_norm_eps"])
        return w * x32.to(x.dtype)

    def forward(self, ids):
        c = self.c
        x = self.model.embed_tokens(ids)
        T = ids.shape[1]
        f = torch.outer(torch.arange(T).float(), self.inv_freq)
        cos, sin = torch.cat([f, f], -1).cos().to(x.dtype), torch.cat([f, f], -1).sin().to(x.dtype)

        def rope(q):
            q1, q2 = q[..., : self.hd // 2], q[..., self.hd // 2:]
            return q * cos + torch.cat([-q2, q1], -1) * sin
        nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
        mask = torch.full((T, T), float("-inf")).triu(1).to(x.dtype)
        for layer in self.model.layers:
            a = layer.self_attn
            y = self.norm(x, layer.input_layernorm.weight)
            q = a.q_proj(y).view(1, T, nh, self.hd).transpose(1, 2)
            k = a.k_proj(y).view(1, T, nkv, self.hd).transpose(1, 2)
            v = a.v_proj(y).view(1, T, nkv, self.hd).transpose(1, 2)
            q, k = rope(q), rope(k)
            k = k.repeat_interleave(nh // nkv, 1)
            v = v.repeat_interleave(nh // nkv, 1)
            att = torch.softmax((q @ k.transpose(-1, -2)) / self.hd ** 0.5 + mask, -1)
            x = x + a.o_proj((att @ v).transpose(1, 2).reshape(1, T, nh * self.hd))
            y = self.norm(x, layer.post_attention_layernorm.weight)
            m = layer.mlp
            x = x + m.down_proj(torch.nn.functional.silu(m.gate_proj(y)) * m.up_proj(y))
        return self.lm_head(self.norm(x, self.model.norm.weight))


def config(d=LLAMA):
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f)


def from_files(model_dir, tie=False):
    """The reference path: the module with its weights copied in from the
    safetensors files (bf16)."""
    mod = Llama(config(model_dir), tie).to(torch.bfloat16)
    sd = {}
    for name, (dtype, shape, data) in safetensors_files(model_dir).items():
        sd[name] = torch.frombuffer(bytearray(data), dtype=torch.bfloat16).reshape(shape)
    mod.load_state_dict(sd, strict=not tie)
    return mod


def meta_llama(model_dir=LLAMA, tie=False):
    with wt.init_empty():
        mod = Llama(config(model_dir), tie).to(torch.bfloat16)
    assert all(p.device.type == "meta" for p in mod.parameters())
    assert mod.inv_freq.device.type == "cpu"  # buffers stay real
    return mod


IDS = torch.tensor([[1, 17, 300, 42, 7, 511, 2, 99]])


def test_load_into_reference_llama(daemons):
    d = daemons(LLAMA, "torch")
    with d.connect() as c:
        served = c.attach(model_dir=LLAMA, framework="torch")
        mod = meta_llama()
        r = wt.load_into(mod, served)
        assert r.missing == [] and r.unexpected == [] and r.tied == {}
        views = [t.name for t in served.manifest if t.flags & 0x2]  # fused qkv/gate_up
        assert len(views) == 4 and len(r.bound) == len(served) - len(views)
        sd = mod.state_dict()
        ts = served.tensors()
        for name, t in ts.items():  # no copy: the module's tensors are the served memory
            if name in sd:
                assert sd[name].data_ptr() == t.data_ptr(), name
                assert not sd[name].requires_grad
        with torch.no_grad():
            got = mod(IDS)
            want = from_files(LLAMA)(IDS)
        assert got.dtype == torch.bfloat16 and got.shape == (1, IDS.shape[1], 512)
        assert torch.equal(got, want), "logits on served weights differ from the files'"
        served.detach()
        # the module keeps the lease: it still runs after detach and close
    with torch.no_grad():
        assert torch.equal(mod(IDS), want)


def write_safetensors(path, tensors):
    """A safetensors file from {name: (dtype, shape, bytes)}."""
    header, off, blobs = {}, 0, []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def tied_llama(tmp_path):
    """The reference Llama as a tie_word_embeddings checkpoint (no
    lm_head.weight) in tmp_path/tied."""
    tied = tmp_path / "tied"
    tied.mkdir()
    cfg = config()
    cfg["tie_word_embeddings"] = True
    (tied / "config.json").write_text(json.dumps(cfg))
    files = safetensors_files(LLAMA)
    del files["lm_head.weight"]
    write_safetensors(str(tied / "model.safetensors"), files)
    return tied


def test_load_into_tied(daemons, tmp_path):
    """A tie_word_embeddings checkpoint has no lm_head.weight: the tied
    module binds it through model.embed_tokens.weight."""
    tied = tied_llama(tmp_path)
    d = daemons(tied, "tied")
    with d.connect() as c:
        served = c.attach(model_dir=str(tied))
        # the daemon serves the tied head as an alias of the embedding
        head = {t.name: t for t in served.manifest}["lm_head.weight"]
        assert head.flags & 0x4
        assert served["lm_head.weight"].data_ptr() == served["model.embed_tokens.weight"].data_ptr()
        mod = meta_llama(str(tied), tie=True)
        r = wt.load_into(mod, served)
        assert r.tied == {"lm_head.weight": "model.embed_tokens.weight"}, r.tied
        assert r.missing == [] and r.unexpected == []
        assert mod.lm_head.weight is mod.model.embed_tokens.weight
        assert mod.lm_head.weight.data_ptr() == served["model.embed_tokens.weight"].data_ptr()
        with torch.no_grad():
            assert torch.equal(mod(IDS), from_files(str(tied), tie=True)(IDS))
        served.detach()


def test_load_into_names_and_errors(daemons):
    d = daemons(LLAMA, "names")
    with d.connect() as c:
        served = c.attach(model_dir=LLAMA)
        # an engine's own name for a tensor: name_map
        mod = meta_llama()
        mod.output = mod.lm_head
        del mod.lm_head
        with pytest.raises(wt.LoadError) as e:
            wt.load_into(mod, served)
        assert "output.weight" in str(e.value) and "lm_head.weight" in str(e.value)
        r = wt.load_into(mod, served, name_map={"output.weight": "lm_head.weight"})
        assert r.missing == [] and r.unexpected == []
        assert mod.output.weight.data_ptr() == served["lm_head.weight"].data_ptr()
        # strict=False binds what matches and reports the rest
        mod = meta_llama()
        with wt.init_empty():
            mod.extra = torch.nn.Linear(2, 2)
        r = wt.load_into(mod, served, strict=False)
        assert sorted(r.missing) == ["extra.bias", "extra.weight"]
        assert mod.extra.weight.device.type == "meta"
        # a shape that does not fit is an error in any mode (no conversion)
        mod = meta_llama()
        with wt.init_empty():
            mod.model.norm.weight = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
        with pytest.raises(wt.LoadError, match="model.norm.weight"):
            wt.load_into(mod, served, strict=False)
        served.detach()


def test_load_into_keeps_parameter_attributes():
    """load_into's new Parameter over the served memory keeps what the
    engine set on the one it replaces (vLLM-style output_dim,
    weight_loader), as param.data = served_tensor, which the README
    offers as the same, would; tied names share the one Parameter."""
    with wt.init_empty():
        m = torch.nn.Sequential(torch.nn.Embedding(6, 4), torch.nn.Linear(4, 6, bias=False))
    m[1].weight = m[0].weight
    m[0].weight.output_dim = 0
    m[0].weight.weight_loader = m[0].forward
    served = {"0.weight": torch.arange(24.0).reshape(6, 4)}
    r = wt.load_into(m, served)
    assert r.tied == {"1.weight": "0.weight"}
    w = m[0].weight
    assert w.data_ptr() == served["0.weight"].data_ptr() and m[1].weight is w
    assert w.output_dim == 0 and w.weight_loader == m[0].forward
    assert vars(served["0.weight"]) == {}, "the served tensor itself is left alone"


def test_load_into_error_binds_nothing():
    """A load_into that raises LoadError (a shape that does not fit, or
    strict with a missing name) leaves the module as it was: no parameter
    points at served memory (which would hold the lease, and so refuse
    the daemon's sleep, while the failed module lives)."""
    def build():
        with wt.init_empty():
            return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    good = {"0.weight": torch.zeros(3, 4), "0.bias": torch.zeros(3),
            "1.weight": torch.zeros(2, 3), "1.bias": torch.zeros(2)}
    for served, strict in ((dict(good, **{"1.weight": torch.zeros(3, 3)}), False),
                           ({k: v for k, v in good.items() if k != "1.bias"}, True)):
        m = build()
        with pytest.raises(wt.LoadError):
            wt.load_into(m, served, strict=strict)
        assert [n for n, p in m.named_parameters() if not p.is_meta] == [], served.keys()
    m = build()
    assert wt.load_into(m, good).missing == []
    assert not any(p.is_meta for p in m.parameters())


def test_slots_walk_is_named_modules():
    """load_into's one-pass walk (_slots) finds what named_modules
    (remove_duplicate=False) and state_dict's rules find, in the same
    order: a submodule shared under two names (its slots once, under the
    first), a None child, a None parameter and buffer, a non-persistent
    buffer, tied parameters under each name."""
    def reference(module):
        out, seen = [], set()
        for prefix, mod in module.named_modules(remove_duplicate=False):
            pre = prefix + "." if prefix else ""
            skip = getattr(mod, "_non_persistent_buffers_set", set())
            for name, p in mod._parameters.items():
                if p is not None and (id(mod), name) not in seen:
                    seen.add((id(mod), name))
                    out.append((id(mod), name, id(p), True, pre + name))
            for name, b in mod._buffers.items():
                if b is not None and name not in skip and (id(mod), name) not in seen:
                    seen.add((id(mod), name))
                    out.append((id(mod), name, id(b), False, pre + name))
        return out
    m = meta_llama(tie=True)
    shared = torch.nn.Linear(2, 3)
    m.a = torch.nn.Module()
    m.a.shared = shared
    m.a.none = None
    m.b = torch.nn.Sequential(torch.nn.Linear(3, 3), shared)
    m.b[0].register_parameter("gone", None)
    m.b[0].register_buffer("nothing", None)
    m.b[0].register_buffer("kept", torch.zeros(2))
    m.b[0].register_buffer("scratch", torch.zeros(2), persistent=False)
    got = [(id(s[0]), s[1], id(s[2]), s[3], s[4]) for s in wt._slots(m)]
    assert got == reference(m)
    names = [s[4] for s in got]
    assert "a.shared.weight" in names and "b.1.weight" not in names
    assert "b.0.kept" in names and "b.0.scratch" not in names
    assert "lm_head.weight" in names and "model.embed_tokens.weight" in names


def test_python_m_wcache_status(daemons, tiny):
    """python -m wcache status prints wcctl status's table."""
    d = daemons(tiny, "status")
    env = dict(os.environ, PYTHONPATH=PKG)
    py = subprocess.run([sys.executable, "-m", "wcache", "status", "--runtime-dir", d.rundir],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=60)
    out = py.stdout.decode()
    assert py.returncode == 0, out
    wc = subprocess.run([os.path.join(BIN, "wcctl"), "status", "--runtime-dir", d.rundir],
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60).stdout.decode()
    a, b = out.splitlines(), wc.splitlines()
    assert a[0] == b[0], (out, wc)  # the header
    # every column but UPTIME (the two ran a moment apart)
    assert [l.split()[:-1] for l in a[1:]] == [l.split()[:-1] for l in b[1:]], (out, wc)
    assert d.device.replace(":", "-") in out and "ready" in out
    empty = subprocess.run([sys.executable, "-m", "wcache", "status", "--runtime-dir", d.rundir + "-none"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=60)
    assert empty.returncode == 3, empty.stdout.decode()


def test_python_m_wcache_status_odd_runtime_dir(tiny, tmp_path):
    """A runtime directory whose name has glob's characters ([, ], *, ?)
    is a directory like any other: python -m wcache status finds its
    daemon, as wcctl status does (the path is not a pattern)."""
    from conftest import Daemon
    odd = tmp_path / "rt[1]*?"
    odd.mkdir()
    d = Daemon(odd, tiny, "odd-%d" % os.getpid())
    try:
        env = dict(os.environ, PYTHONPATH=PKG)
        py = subprocess.run([sys.executable, "-m", "wcache", "status", "--json", "--runtime-dir", d.rundir],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=60)
        out = py.stdout.decode()
        assert py.returncode == 0, out
        import json
        got = json.loads(out)
        assert [(r["device"], r["reachable"]) for r in got] == [(d.device.replace(":", "-"), True)], got
        env["WCACHE_SOCKET_TEMPLATE"] = os.path.join(d.rundir, "{device}")
        py = subprocess.run([sys.executable, "-m", "wcache", "status", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=60)
        assert py.returncode == 0 and len(json.loads(py.stdout.decode())) == 1, py.stdout.decode()
    finally:
        d.kill()


def test_python_m_wcache_status_model_path_not_utf8(daemons, tiny, tmp_path):
    """A daemon serving a model whose path is not UTF-8 (a Latin-1 name):
    python -m wcache status lists it, in the table and in --json, and does
    not die on its ready file (the bytes of a path, not text)."""
    import json
    odd = os.fsdecode(os.fsencode(str(tmp_path)) + b"/model-\xe9t\xe9")
    shutil.copytree(tiny, odd)
    d = daemons(odd, "latin")
    env = dict(os.environ, PYTHONPATH=PKG, PYTHONIOENCODING="utf-8")
    for args in ([], ["--json"]):
        py = subprocess.run([sys.executable, "-m", "wcache", "status", "--runtime-dir", d.rundir] + args,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=60)
        out, err = py.stdout.decode(), py.stderr.decode()
        assert "Traceback" not in err and py.returncode in (0, 4), (py.returncode, err)
        assert d.device.replace(":", "-") in out, out
    got = json.loads(out)
    assert len(got) == 1 and got[0]["device"] == d.device.replace(":", "-"), got


def test_status_of_a_model_path_not_utf8(daemons, tiny, tmp_path):
    """The daemon's STATUS for a model whose path is not UTF-8 (a Latin-1
    name): answered, the path's other bytes shown as U+FFFD (JSON is
    UTF-8; the daemon refused STATUS with INTERNAL 'cannot build the
    status', so wcctl and python -m wcache status saw it unreachable), the
    model attaches as before; wcctl status --json and python -m wcache
    status both list it ready."""
    import json
    odd = os.fsdecode(os.fsencode(str(tmp_path)) + b"/model-\xe9t\xe9")
    shutil.copytree(tiny, odd)
    d = daemons(odd, "latin1")
    with d.connect() as c:
        st = c.status()
        assert st["state"] == "ready", st
        assert st["model"] == str(tmp_path) + "/model-\ufffdt\ufffd", st["model"]
        m = c.attach(model_dir=odd, framework="numpy")
        assert len(m) > 0
        m.detach()
    ctl = subprocess.run([os.path.join(BIN, "wcctl"), "status", "--json",
                          "--runtime-dir", d.rundir], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         timeout=60)
    assert ctl.returncode == 0, ctl.stderr.decode()
    assert "\ufffdt\ufffd" in ctl.stdout.decode("utf-8"), ctl.stdout
    env = dict(os.environ, PYTHONPATH=PKG, PYTHONIOENCODING="utf-8")
    py = subprocess.run([sys.executable, "-m", "wcache", "status", "--runtime-dir", d.rundir, "--json"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=60)
    assert py.returncode == 0, (py.returncode, py.stderr.decode())
    got = json.loads(py.stdout.decode())
    assert len(got) == 1 and got[0].get("state") == "ready", got


def test_ctypes_mirrors_wcache_h(tmp_path):
    """The ctypes structures have wcache.h's offsets and sizes (a C
    program prints them)."""
    from wcache import _lib
    if not shutil.which("cc"):
        pytest.skip("no C compiler")
    structs = {"wc_error": _lib.WcError, "wc_connect_opts": _lib.WcConnectOpts,
               "wc_expect": _lib.WcExpect, "wc_info": _lib.WcInfo,
               "wc_attach_times": _lib.WcAttachTimes, "wc_tensor": _lib.TENSOR_STRUCT,
               "wc_pool_view": _lib.WcPoolView, "wc_notice": _lib.WcNotice,
               "wc_life_result": _lib.WcLifeResult, "wc_push_times": _lib.WcPushTimes}
    lines = []
    for cname, py in structs.items():
        lines.append('printf("%s %%zu\\n", sizeof(struct %s));' % (cname, cname))
        for f, _ in py._fields_:
            lines.append('printf("%s.%s %%zu\\n", offsetof(struct %s, %s));' % (cname, f, cname, f))
    src = tmp_path / "abi.c"
    src.write_text('#include <stdio.h>\n#include <stddef.h>\n#include "wcache.h"\nint main(void) {\n%s\nreturn 0; }\n'
                   % "\n".join(lines))
    exe = str(tmp_path / "abi")
    subprocess.run(["cc", "-I", os.path.join(os.path.dirname(PKG)), "-o", exe, str(src)], check=True)
    got = dict(l.split() for l in subprocess.run([exe], stdout=subprocess.PIPE, check=True).stdout.decode().splitlines())
    for cname, py in structs.items():
        assert int(got[cname]) == __import__("ctypes").sizeof(py), cname
        for f, _ in py._fields_:
            assert int(got["%s.%s" % (cname, f)]) == getattr(py, f).offset, (cname, f)


def python_readme():
    from conftest import WC_TOP
    return open(os.path.join(WC_TOP, "tools", "libwcache", "python", "README.md")).read()


def python_blocks(text):
    return [b[:b.index("```")] for b in text.split("```python\n")[1:]]


def test_readme_dropin_is_the_packages():
    """The top-level README's Python one-liner (the block that
    test_gpu_dropin.py runs as written) is the package README's drop-in,
    its first example, character for character."""
    from conftest import WC_TOP
    top = open(os.path.join(WC_TOP, "README.md")).read()
    sec = top[top.index("## From Python / PyTorch"):]
    want = python_blocks(sec)[0]
    assert "wcache.transformers.from_pretrained(" in want
    sec = python_readme()
    sec = sec[sec.index("## Drop-in: wcache.transformers.from_pretrained"):]
    assert python_blocks(sec)[0] == want


def test_readme_example_is_the_gpu_test():
    """The package README's load_into example is the code that
    test_gpu_models.py runs (served_logits), line for line."""
    import textwrap
    from conftest import WC_TOP
    readme = python_readme()
    sec = readme[readme.index("## Binding a module built on meta: load_into"):]
    block = next(b for b in python_blocks(sec) if "wcache.torch.init_empty" in b)
    src = open(os.path.join(WC_TOP, "test", "py", "test_gpu_models.py")).read()
    body = src[src.index("def served_logits"):]
    body = body[body.index("\n") + 1:body.index("    return ")]
    body = "\n".join(l for l in body.splitlines() if not l.strip().startswith('"""'))
    assert textwrap.dedent(body).strip() == block.strip()


def test_readme_quickest_start_is_the_gpu_test():
    """The package README's quickest engine start (under the module cache)
    is what test_gpu_models.py's restart process runs, line for line."""
    from conftest import WC_TOP
    readme = python_readme()
    sec = readme[readme.index("## Module cache (restarts)"):]
    block = python_blocks(sec)[0]
    src = open(os.path.join(WC_TOP, "test", "py", "test_gpu_models.py")).read()
    body = src[src.index("# README's quickest start"):src.index("# end of README's")]
    body = body[body.index("\n") + 1:]
    assert [l.strip() for l in block.strip().splitlines()] == \
        [l.strip() for l in body.strip().splitlines()]

