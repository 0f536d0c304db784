# SPDX-License-Identifier: MIT
"""tensors("torch") over a model of big layers (proto/plan/plan.h: PLAN_LAYER_MIN,
128 MiB) spread over several pools: wcd packs each layer whole on 2 MiB and
cuts pools only between layers, so with the pools back to back in one span
the same weight of every layer lies at one stride, and tensors("torch")
makes one strided view (as_strided + unbind) per kind of tensor across the
pools; with the pools apart (WCACHE_TEST_SPREAD=1) runs end at each pool.
Counted by wrapping torch's as_strided and unbind. Every tensor's bytes are
the file's, and every view is the one its own as_strided would give.

The model: Llama shapes (hidden 1024, intermediate 22016: 134 MiB a layer,
3 layers), written sparse (each tensor's first and last 4 KiB of data, the
rest holes), so the disk holds little; the daemon's memfd holds ~410 MiB
while it runs."""
import json
import mmap
import os
import struct

import pytest

import wcache

torch = pytest.importorskip("torch")

H, I, KV, LAYERS, VOCAB = 1024, 22016, 256, 3, 1024
MIB = 1 << 20
ALIGN = 2 * MIB            # PLAN_LAYER_ALIGN
KINDS = 11                 # 9 weights a layer + qkv_proj and gate_up_proj


def big_model(d):
    os.makedirs(d)
    shapes = {"model.embed_tokens.weight": (VOCAB, H), "lm_head.weight": (VOCAB, H),
              "model.norm.weight": (H,)}
    for l in range(LAYERS):
        p = "model.layers.%d." % l
        shapes.update({
            p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
            p + "self_attn.q_proj.weight": (H, H), p + "self_attn.k_proj.weight": (KV, H),
            p + "self_attn.v_proj.weight": (KV, H), p + "self_attn.o_proj.weight": (H, H),
            p + "mlp.gate_proj.weight": (I, H), p + "mlp.up_proj.weight": (I, H),
            p + "mlp.down_proj.weight": (H, I)})
    header, off, spans = {}, 0, {}
    for name in sorted(shapes):
        n = 2
        for x in shapes[name]:
            n *= x
        header[name] = {"dtype": "BF16", "shape": list(shapes[name]), "data_offsets": [off, off + n]}
        spans[name] = (off, n)
        off += n
    hdr = json.dumps(header).encode()
    hdr += b" " * (-len(hdr) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr)
        base = f.tell()
        for i, name in enumerate(sorted(shapes)):
            a, n = spans[name]
            mark = bytes((i * 37 + j * 11 + 1) & 0xff for j in range(256)) * 16
            f.seek(base + a)
            f.write(mark[:min(n, 4096)])
            if n > 8192:
                f.seek(base + a + n - 4096)
                f.write(mark)
        f.truncate(base + off)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   "hidden_size": H, "intermediate_size": I, "num_hidden_layers": LAYERS,
                   "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
                   "vocab_size": VOCAB, "torch_dtype": "bfloat16",
                   "tie_word_embeddings": False}, f)
    return d, base, spans


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    return big_model(str(tmp_path_factory.mktemp("big") / "model"))


def counting(monkeypatch):
    n = {"as_strided": 0, "unbind": 0}
    for name in n:
        orig = getattr(torch.Tensor, name)

        def wrap(self, *a, _orig=orig, _name=name, **k):
            n[_name] += 1
            return _orig(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, wrap)
    return n


@pytest.mark.parametrize("spread", (False, True))
def test_one_run_per_kind(daemons, big, monkeypatch, spread):
    from wcache import _core
    d, base, spans = big
    if spread:
        monkeypatch.setenv("WCACHE_TEST_SPREAD", "1")
    _core._TABLES.clear()
    leases = wcache.live_leases()
    wcd = daemons(d, "runs%d" % spread, "--pool-size", "150M")
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        file = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    with wcd.connect() as c:
        for n_attach in range(3):   # the plan made (_PLAN_FIRST), then kept
            m = c.attach(model_dir=d, framework="torch")
            assert _core.lib.wc_pool_count(m._lease.m) == LAYERS, "one layer a pool"
            man = {t.name: t for t in m.manifest}
            for l in range(LAYERS):   # each layer whole, on 2 MiB
                p = "model.layers.%d." % l
                first = min((t for t in man.values() if t.name.startswith(p)),
                            key=lambda t: t.offset)
                assert first.offset % ALIGN == 0, first
                assert {t.pool for t in man.values() if t.name.startswith(p)} == {first.pool}
            with monkeypatch.context() as mp:
                n = counting(mp)
                got = m.tensors()
            assert m._span_of() is (not spread)
            if n_attach == 0 and not _core._PLAN_FIRST:
                assert n == {"as_strided": len(man), "unbind": 0}
            elif spread:   # runs end at pools: one layer a pool, no run
                assert n == {"as_strided": len(man), "unbind": 0}, n
            else:          # one run per kind, then embed, lm_head, norm
                assert n == {"as_strided": KINDS + 3, "unbind": KINDS}, n
                assert sorted(op[4] for op in m._ops if op[4]) == [LAYERS] * KINDS
            ref = m._torch_tensors_each()
            for name, x in got.items():
                y = ref[name]
                assert (x.data_ptr(), tuple(x.shape), x.stride(), x.storage_offset(), x.dtype) == \
                    (y.data_ptr(), tuple(y.shape), y.stride(), y.storage_offset(), y.dtype), name
            for name, (a, nbytes) in spans.items():
                want = torch.frombuffer(file, dtype=torch.uint8, count=nbytes, offset=base + a)
                assert torch.equal(got[name].reshape(-1).view(torch.uint8), want), name
            for l in range(LAYERS):
                p = "model.layers.%d." % l
                assert torch.equal(got[p + "self_attn.qkv_proj.weight"].view(torch.uint8),  # NaNs
                                   torch.cat([got[p + "self_attn.%s_proj.weight" % k] for k in "qkv"]).view(torch.uint8))
            del got, ref, x, y, want
            m.detach()
    file.close()
    assert wcache.live_leases() == leases


def test_handover_from_other_packing(daemons, big, monkeypatch, tmp_path):
    """A daemon that packs the layers tensor by tensor (WCD_TEST_PACK=flat:
    the builds before big layers were packed whole) and a new one that
    packs them whole plan other pools for the same model: the new one's
    check of the pools refuses the handover (exit 1, naming why), and the
    old one serves on, its engine's tensors intact."""
    import subprocess
    from conftest import BIN
    d, base, spans = big
    with monkeypatch.context() as mp:
        mp.setenv("WCD_TEST_PACK", "flat")
        old = daemons(d, "hoflat", "--pool-size", "150M")
    pid = old.proc.pid
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        head = f.read(base + 4096)[base:]
    with old.connect() as c:
        m = c.attach(model_dir=d, framework="torch")
        flat = {t.name: (t.pool, t.offset) for t in m.manifest}
        first = m.tensors()["lm_head.weight"]
        p = subprocess.run([os.path.join(BIN, "wcd"), "--takeover", "--device", old.device,
                            "--runtime-dir", old.rundir], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        out = p.stdout.decode()
        assert p.returncode == 1, out
        assert "the old daemon packs the model otherwise" in out, out
        assert "restart with a reload" in out, out
        assert "wcd pid %d serves on" % pid in out, out
        assert old.proc.poll() is None, "the old daemon exited"
        c.ping()   # raises when it is not served
        assert c.status()["pid"] == pid
        assert first.reshape(-1).view(torch.uint8)[:4096].numpy().tobytes() == head
        m2 = c.attach(model_dir=d, framework="torch")
        assert {t.name: (t.pool, t.offset) for t in m2.manifest} == flat
        m2.detach()
        del first
        m.detach()
