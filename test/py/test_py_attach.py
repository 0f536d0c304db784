# SPDX-License-Identifier: MIT
"""Attach from Python to a real wcd (host backend): a wcgen model, the
transformers-written llama checkpoint and a file of every dtype, as numpy
arrays and as torch CPU tensors, each tensor's bytes equal to the file's and
its XXH3-128 equal to an independent one (Debian's xxhsum; the reference's
hashes.txt, made by Python's xxhash)."""
import os
import shutil

import numpy
import pytest

import wcache
from conftest import REFERENCE, safetensors_files, wcgen, xxh3_128

torch = pytest.importorskip("torch")


def reference_hashes(sub):
    out = {}
    with open(os.path.join(REFERENCE, "hashes.txt")) as f:
        for line in f:
            path, name, dtype, shape, h = line.rstrip("\n").split("\t")
            if path.split("/")[0] == sub or path == sub:
                out[name] = (dtype, tuple(int(x) for x in shape.split(",") if x), h)
    return out


def as_bytes(x):
    if isinstance(x, numpy.ndarray):
        return x.tobytes()
    # torch: through a byte view (bf16, fp8 and bool included)
    return x.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if x.dim() else \
        x.reshape(1).view(torch.uint8).numpy().tobytes()


VIEW, ALIAS = 0x2, 0x4  # wcache.h WC_TENSOR_VIEW, WC_TENSOR_ALIAS


def check_model(m, files, tmp_path, framework, per_tensor):
    """The served checkpoint names are the files' and hold their bytes;
    the other entries are views (fused tensors, aliases) whose bytes equal
    their parts' concatenation; every hash equals xxh3 of the served bytes."""
    info = {t.name: t for t in m.manifest}
    own = {n for n, t in info.items() if not t.flags & VIEW}
    assert own == set(files), "served names differ from the files'"
    got = {n: m.tensor(n, framework) for n in m} if per_tensor else m.tensors(framework)
    assert set(got) == set(info)
    for name, (dtype, shape, data) in files.items():
        x = got[name]
        assert info[name].dtype == dtype and info[name].shape == shape
        assert tuple(x.shape) == shape, (name, x.shape, shape)
        assert as_bytes(x) == data, "%s: served bytes differ from the file's" % name
    for name, t in info.items():
        if not t.flags & VIEW:
            continue
        parts = fused_parts(name)
        if t.flags & ALIAS or not parts:
            continue
        assert as_bytes(got[name]) == b"".join(files[p][2] for p in parts), name
    names = list(info)
    hashes = xxh3_128([as_bytes(got[n]) for n in names], tmp_path)
    for name, h in zip(names, hashes):
        assert info[name].hash == h, (name, info[name].hash, h)
    return got


def fused_parts(name):
    """The checkpoint names a tp=1 fused view concatenates (vLLM's)."""
    for fused, parts in ((".self_attn.qkv_proj.", ("q_proj", "k_proj", "v_proj")),
                         (".mlp.gate_up_proj.", ("gate_proj", "up_proj"))):
        if fused in name:
            pre, suf = name.split(fused)
            sub = fused.split(".")[1]
            return ["%s.%s.%s.%s" % (pre, sub, p, suf) for p in parts]
    return None


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("per_tensor", [False, True], ids=["tensors", "tensor"])
def test_wcgen_model(daemons, tiny, tmp_path, framework, per_tensor):
    d = daemons(tiny, "attach")
    files = safetensors_files(tiny)
    with d.connect() as c:
        with c.attach(model_dir=tiny) as m:
            assert m.device == "cpu" and m.version == 1 and len(m.identity) == 32
            assert m.info["tensors"] == len(m) >= len(files)
            got = check_model(m, files, tmp_path, framework, per_tensor)
            x = got["model.embed_tokens.weight"]
            if framework == "torch":
                assert x.dtype == torch.bfloat16 and x.device.type == "cpu"
            else:
                assert x.dtype == numpy.uint16  # bf16 reaches numpy as uint16
            assert m.verify()


def test_reference_llama(daemons, tmp_path):
    """The transformers-written checkpoint (three shards and an index)."""
    src = os.path.join(REFERENCE, "llama")
    d = daemons(src, "ref")
    files = safetensors_files(src)
    ref = reference_hashes("llama")
    assert set(ref) == set(files)
    with d.connect() as c:
        m = c.attach(model_dir=src)
        for framework in ("numpy", "torch"):
            check_model(m, files, tmp_path, framework, False)
        for t in m.manifest:
            if t.name in ref:
                assert t.hash == ref[t.name][2], t.name
        emb = m["model.embed_tokens.weight"]
        assert isinstance(emb, torch.Tensor) and emb.dtype == torch.bfloat16
        m.detach()


def test_every_dtype(daemons, tmp_path):
    """dtypes.safetensors (every safetensors dtype the reference writer
    makes) served as a model: torch gets bf16, bool, complex64 and, where
    this torch has them, fp8 and unsigned types; numpy gets all, bf16 as
    uint16 and fp8 as uint8."""
    m_dir = tmp_path / "dtypes"
    m_dir.mkdir()
    shutil.copy(os.path.join(REFERENCE, "llama", "config.json"), m_dir / "config.json")
    shutil.copy(os.path.join(REFERENCE, "dtypes.safetensors"), m_dir / "model.safetensors")
    files = safetensors_files(str(m_dir))
    ref = reference_hashes("dtypes.safetensors")
    d = daemons(m_dir, "dtypes")
    want_torch = {"BF16": torch.bfloat16, "BOOL": torch.bool, "C64": torch.complex64,
                  "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
                  "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
                  "I64": torch.int64, "U8": torch.uint8}
    for dt, attr in (("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2"),
                     ("F8_E8M0", "float8_e8m0fnu"), ("U16", "uint16"),
                     ("U32", "uint32"), ("U64", "uint64")):
        if hasattr(torch, attr):
            want_torch[dt] = getattr(torch, attr)
    want_numpy = {"BF16": "uint16", "BOOL": "bool", "C64": "complex64", "F16": "float16",
                  "F32": "float32", "F64": "float64", "I8": "int8", "I16": "int16",
                  "I32": "int32", "I64": "int64", "U8": "uint8", "U16": "uint16",
                  "U32": "uint32", "U64": "uint64", "F8_E4M3": "uint8",
                  "F8_E5M2": "uint8", "F8_E8M0": "uint8"}
    with d.connect() as c:
        m = c.attach(model_dir=str(m_dir))
        assert set(m) == set(files)
        for t in m.manifest:
            assert t.hash == ref[t.name][2], t.name
        arrays = m.tensors("numpy")
        for name, (dtype, shape, data) in files.items():
            for a in (arrays[name], m.tensor(name, "numpy")):
                assert a.dtype == numpy.dtype(want_numpy[dtype]), (name, a.dtype)
                assert a.shape == shape and a.tobytes() == data, name
                assert not a.flags.writeable
        lacking = set(dt for dt, _, _ in files.values()) - set(want_torch)
        if lacking:  # an old torch: the whole dict is refused, naming one
            with pytest.raises(TypeError, match="lacks"):
                m.tensors("torch")
            ts = None
        else:
            ts = m.tensors("torch")
        for name, (dtype, shape, data) in files.items():
            if dtype not in want_torch:
                with pytest.raises(TypeError, match=dtype):
                    m.tensor(name, "torch")
                continue
            for x in ([ts[name]] if ts else []) + [m.tensor(name, "torch")]:
                assert x.dtype == want_torch[dtype], (name, x.dtype)
                assert tuple(x.shape) == shape and as_bytes(x) == data, name
        # values, not only bytes: the dtype is the right one
        assert numpy.array_equal(m.tensor("f32", "numpy"),
                                 m.tensor("f32", "torch").numpy())
        assert torch.equal(m.tensor("bf16").float(),
                           torch.from_numpy((m.tensor("bf16", "numpy").astype("uint32") << 16).view("float32")))
        m.detach()


def test_manifest_views_and_padded(daemons, tiny):
    """Everything the manifest lists is reachable: fused views share their
    parts' memory, and a vocabulary padded to P rows (wcd --vocab-pad) is
    the [P, ...] view over the same pointer with tensor(padded=True): the
    real rows, then zeros."""
    files = safetensors_files(tiny)
    d = daemons(tiny, "padded", "--vocab-pad", "3000")   # 4096 -> 6000 rows
    with d.connect() as c:
        m = c.attach(model_dir=tiny, vocab_pad=3000, framework="numpy")
        info = {t.name: t for t in m.manifest}
        qkv = "model.layers.0.self_attn.qkv_proj.weight"
        assert info[qkv].flags & VIEW
        q = m.tensor("model.layers.0.self_attn.q_proj.weight", "torch")
        assert m.tensor(qkv, "torch").data_ptr() == q.data_ptr()  # no copy
        padded = [t for t in m.manifest if t.padded_rows > t.shape[0]]
        assert padded, [(t.name, t.padded_rows) for t in m.manifest]
        for t in padded:
            x = m.tensor(t.name, padded=True)
            assert x.shape == (t.padded_rows,) + t.shape[1:]
            assert x[:t.shape[0]].tobytes() == files[t.name][2]
            assert not x[t.shape[0]:].any(), "padding rows are not zero"
            y = m.tensor(t.name, "torch", padded=True)
            assert y.data_ptr() == m.tensor(t.name, "torch").data_ptr()
            assert tuple(m.tensor(t.name).shape) == t.shape  # unpadded by default
        e = next(t for t in m.manifest if not t.padded_rows)
        assert m.tensor(e.name, padded=True).shape == e.shape
        with pytest.raises(KeyError, match="no tensor named 'nope'"):
            m["nope"]
        m.detach()


def test_batched_views_equal_one_view_each(daemons, tiny, tmp_path, monkeypatch):
    """tensors("torch") makes its views in batches (an as_strided of a run
    of same-shaped tensors, then unbind); every tensor must be the view
    one as_strided of its own gives: the same pointer, shape, strides,
    offset and dtype, and the file's bytes. A small --pool-size spreads
    the layers over many pools (runs go on across pools in the span where
    the step holds: test_py_runs.py); the first attach makes the plan
    (with _PLAN_FIRST False, as before: one view each, the second makes
    it), the next ones reuse it, and a changed layout makes a new one."""
    from wcache import _core
    files = safetensors_files(tiny)
    _core._TABLES.clear()
    for layouts, (name, extra, first) in enumerate((("views1", (), True), ("views2", ("--pool-size", "3M"), True),
                                                    ("views3", ("--pool-size", "5M"), False)), 1):
        monkeypatch.setattr(_core, "_PLAN_FIRST", first)
        d = daemons(tiny, name, *extra)
        with d.connect() as c:
            for n_attach in (1, 2, 3):
                m = c.attach(model_dir=tiny, framework="torch")
                pools = _core.lib.wc_pool_count(m._lease.m)
                assert pools > 1 if extra else pools == 1
                got = m.tensors()
                assert sum(map(len, _core._TABLES.values())) == layouts   # one entry per layout
                plan = m._plan_box[0]
                ops = m._ops
                ref = m._torch_tensors_each()
                assert list(got) == list(ref) == list(m)
                if n_attach == 1 and not first:
                    assert plan is None, "a plan made at the first attach"
                else:
                    assert plan, "no plan made at attach %d" % n_attach
                    runs = [op for op in ops if op[4]]
                    assert runs, "no batched run: the test would not test the batches"
                for n, x in got.items():
                    y = ref[n]
                    assert (x.data_ptr(), tuple(x.shape), x.stride(), x.storage_offset(), x.dtype) == \
                        (y.data_ptr(), tuple(y.shape), y.stride(), y.storage_offset(), y.dtype), n
                for n, (dtype, shape, data) in files.items():
                    assert as_bytes(got[n]) == data, n
                del got, ref, x, y
                m.detach()
            # the bench's --cold-plan: the next attach makes the plan again
            _core._forget_plans()
            m = c.attach(model_dir=tiny, framework="torch")
            assert m._plan_box[0] is None
            got = m.tensors()
            assert m._plan_box[0] and m._ops
            for n, (dtype, shape, data) in files.items():
                assert as_bytes(got[n]) == data, n
            del got
            m.detach()


@pytest.mark.parametrize("spread", (False, True))
def test_pools_back_to_back(daemons, tiny, monkeypatch, spread):
    """libwcache maps a lease's pools back to back where the address space
    allows (wc_model_span), and tensors("torch") then makes every view from
    one DLPack tensor over all of them; WCACHE_TEST_SPREAD=1 maps them
    wherever the kernel puts them (as when no stretch fits), and the views
    come from one tensor per pool. Both give every file's bytes, and
    detach() with no tensor alive unmaps at once (the span is the Model's
    own hold too)."""
    import ctypes
    from conftest import pool_mappings
    from wcache import _core, _lib
    files = safetensors_files(tiny)
    if spread:
        monkeypatch.setenv("WCACHE_TEST_SPREAD", "1")
    d = daemons(tiny, "span%d" % spread, "--pool-size", "3M")
    with d.connect() as c:
        for n_attach in range(3):   # one view each, then the plan made, then kept
            m = c.attach(model_dir=tiny, framework="torch")
            mp = m._lease.m
            n = _lib.lib.wc_pool_count(mp)
            assert n > 1
            pv = _lib.new(_lib.WcPoolView)
            offs = (ctypes.c_uint64 * n)()
            ret = _lib.lib.wc_model_span(mp, ctypes.byref(pv), offs, n)
            ptrs = []
            for i in range(n):
                p = _lib.new(_lib.WcPoolView)
                assert _lib.lib.wc_pool_at(mp, i, ctypes.byref(p)) == 0
                ptrs.append((p.ptr, p.size))
            if spread:
                assert ret < 0, "WCACHE_TEST_SPREAD=1 left the pools back to back"
                assert not any(ptrs[i][0] == ptrs[i - 1][0] + ptrs[i - 1][1] for i in range(1, n))
            else:
                assert ret == n, "the pools were not mapped back to back"
                assert pv.ptr == ptrs[0][0] and pv.size == sum(sz for _, sz in ptrs)
                assert [pv.ptr + o for o in offs] == [p for p, _ in ptrs]
            got = m.tensors()
            assert m._span_of() is (not spread)
            for name, (dtype, shape, data) in files.items():
                assert as_bytes(got[name]) == data, name
                assert tuple(got[name].shape) == tuple(shape), name
            del got
            m.detach()
            assert pool_mappings() == [] and wcache.live_leases() == 0, \
                "detach() with no tensor alive left the pools mapped"


def test_table_cache_keeps_no_pointer(daemons, tmp_path):
    """A re-attach of one layout reuses the parse of its table (names,
    dtypes, index, plan: _core._table), never what differs between
    attaches: a Model attached while the first one's tensors still map the
    pools is mapped elsewhere, and its tensor(), tensors() and manifest
    point at its own mapping and carry its own hashes; the next version
    of the same layout (other bytes, other hashes) reuses the parse too
    and serves its own bytes."""
    from wcache import _core
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    wcgen(a, "tiny", "--seed", "1")
    wcgen(b, "tiny", "--seed", "2")
    fa, fb = safetensors_files(a), safetensors_files(b)
    d = daemons(a, "tcache")
    _core._TABLES.clear()
    with d.connect() as c:
        m1 = c.attach(framework="torch")
        t1 = m1.tensors()
        m2 = c.attach(framework="torch")   # t1 keeps the first mapping
        assert m2._names is m1._names, "the second attach parsed the table again"
        assert sum(map(len, _core._TABLES.values())) == 1
        t2 = m2.tensors()
        for i, name in enumerate(m2):
            ptr = _core.lib.wc_tensor_at(m2._lease.m, i).contents.ptr
            assert t2[name].data_ptr() == m2.tensor(name).data_ptr() == ptr, name
            assert t2[name].data_ptr() != t1[name].data_ptr(), name
        for name, (dtype, shape, data) in fa.items():
            assert as_bytes(t2[name]) == data == as_bytes(t1[name]), name
        h1 = {t.name: t.hash for t in m1.manifest}
        del t1, t2
        m1.detach()
        m2.detach()
        c.update(b)
        m3 = c.attach(framework="torch")
        assert m3._names is m1._names, "the next version of one layout parsed again"
        t3 = m3.tensors()
        h3 = {t.name: t.hash for t in m3.manifest}
        for name, (dtype, shape, data) in fb.items():
            assert as_bytes(t3[name]) == data, name
            assert as_bytes(m3.tensor(name)) == data, name
            if data != fa[name][2]:
                assert h3[name] != h1[name], name
        assert h3 != h1
        hashes = xxh3_128([as_bytes(t3[n]) for n in h3], tmp_path)
        assert list(h3.values()) == hashes
        del t3
        m3.detach()


def test_a_quiet_connection_is_opened_again(daemons, tiny):
    """An engine that connects, then builds its model for longer than the
    daemon waits for a first frame (--frame-timeout, 10 s by default:
    `import transformers` alone takes longer) before its first request:
    the daemon dropped the quiet socket, and libwcache opens it again on
    the same descriptor numbers before it speaks (past 1 s quiet, or
    sooner once the daemon has hung up); the request is served."""
    import time
    d = daemons(tiny, "quiet", "--frame-timeout", "0.3")
    for quiet in (1.3, 0.6):    # past the library's 1 s; under it, hung up
        conn = wcache.connect(device=d.device, runtime_dir=d.rundir)
        fd, pfd = conn.notice_fd(), conn.daemon_fd()
        time.sleep(quiet)
        assert conn.hello()["version"] == 1, quiet
        assert (conn.notice_fd(), conn.daemon_fd()) == (fd, pfd)
        m = conn.attach(framework="numpy")
        assert len(m.manifest) > 0
        m.detach()
        conn.close()
