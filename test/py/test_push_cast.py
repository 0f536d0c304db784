# SPDX-License-Identifier: MIT
"""update_from's dtypes and sources on a host daemon (issue 29): another
float dtype is refused naming the tensor unless cast=True, which casts it
to the served dtype and then serves hash for hash what a disk update of
the same weights serves; cast never turns an integer into a float; a
tensor on a device update_from cannot read is refused naming it; and
libwcache's wc_push_write_dev refuses its wrong arguments with a sentence
(a CUDA source or a stream for a host daemon, a device below -1, no
source address), leaving the session usable."""
import ctypes
import errno
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "layout_ref"))

import daemon  # noqa: E402
import models  # noqa: E402

torch = pytest.importorskip("torch")
wcache = pytest.importorskip("wcache")

from test_push import connect, hashes, hashes_after_disk, new_weights  # noqa: E402


@pytest.fixture
def llama(tmp_path):
    src = models.path("hf", "llama")
    new = new_weights(src, str(tmp_path / "new"), seed=11)
    with daemon.Ranks(src, [["--tp-size", "2", "--tp-rank", "0"]]) as rs:
        yield rs.ranks[0], new, str(tmp_path / "new")


def test_other_float_dtype_refused_without_cast(llama):
    r, new, _ = llama
    first = sorted(new)[0]
    src = dict(new)
    src[first] = new[first].float()
    before = hashes(r)
    with connect(r) as c:
        with pytest.raises(wcache.Error) as e:
            c.update_from(src)
    msg = str(e.value)
    assert first in msg and "BF16" in msg and "F32 was given" in msg, msg
    assert "cast=True" in msg, msg
    assert hashes(r) == before            # the session was aborted: N serves


def test_cast_true_casts_to_the_served_dtype(llama):
    """Every tensor given as float32 (bf16 values, so the cast back is
    exact): served hash for hash as the disk update of the bf16 files."""
    r, new, newdir = llama
    src = {k: v.float() for k, v in new.items()}
    with connect(r) as c:
        res = c.update_from(src, cast=True)
        assert res.version == 2, res
    pushed = hashes(r)
    assert pushed == hashes_after_disk(r, newdir)


def test_torch_helper_passes_cast(llama):
    r, new, newdir = llama
    sd = {k: v.to(torch.float16) if v.dim() == 1 else v for k, v in new.items()}
    with connect(r) as c:
        with pytest.raises(wcache.Error):
            wcache.torch.update_from(c, sd)
        # float16 is not exact for every bf16 value: only the refusal
        # and the acceptance are asserted here, not the bytes
        assert wcache.torch.update_from(c, sd, cast=True).version == 2


def test_cast_never_makes_a_float_of_an_integer(llama):
    r, new, _ = llama
    first = sorted(new)[0]
    src = dict(new)
    src[first] = torch.zeros(new[first].shape, dtype=torch.int16)
    with connect(r) as c:
        with pytest.raises(wcache.Error) as e:
            c.update_from(src, cast=True)
    msg = str(e.value)
    assert first in msg and "float dtypes only" in msg and "I16" in msg, msg


def test_unreadable_device_refused_naming_the_tensor(llama):
    r, new, _ = llama
    first = sorted(new)[0]
    src = dict(new)
    src[first] = torch.empty(new[first].shape, dtype=torch.bfloat16, device="meta")
    with connect(r) as c:
        with pytest.raises(wcache.Error) as e:
            c.update_from(src)
    assert first in str(e.value) and "meta" in str(e.value), str(e.value)


def test_write_dev_argument_checks(llama):
    """wc_push_write_dev through ctypes: each wrong argument refused with
    its errno and a sentence, the tensor still unwritten, and the session
    then commits from host memory (src_device -1, no stream)."""
    from wcache import _lib
    from wcache._lib import lib
    r, new, _ = llama
    name = sorted(new)[0]
    t = new[name].contiguous()
    dims = (ctypes.c_uint64 * t.dim())(*t.shape)
    nbytes = t.numel() * t.element_size()
    before = hashes(r)
    c = connect(r)
    err = _lib.new(_lib.WcError)
    p = ctypes.c_void_p()
    assert lib.wc_push_open(c._ptr(), 2, 0, 0, ctypes.byref(p), ctypes.byref(err)) == 0

    def write(src, dev, stream):
        e = _lib.new(_lib.WcError)
        ret = lib.wc_push_write_dev(p, name.encode(), b"BF16", t.dim(), dims,
                                    ctypes.c_void_p(src), nbytes, dev,
                                    ctypes.c_void_p(stream), ctypes.byref(e))
        return ret, _lib.s(e.msg)

    ret, msg = write(t.data_ptr(), 0, None)
    assert ret == -errno.ENOTSUP and "host memory" in msg and "cpu()" in msg, (ret, msg)
    ret, msg = write(t.data_ptr(), -2, None)
    assert ret == -errno.EINVAL and "-2" in msg, (ret, msg)
    ret, msg = write(t.data_ptr(), -1, 0x1234)
    assert ret == -errno.EINVAL and "stream" in msg, (ret, msg)
    ret, msg = write(None, -1, None)
    assert ret == -errno.EINVAL and "no source address" in msg, (ret, msg)
    ret, msg = write(t.data_ptr(), -1, None)
    assert ret == 0, msg
    res = _lib.new(_lib.WcLifeResult)
    assert lib.wc_push_commit(p, ctypes.byref(res), ctypes.byref(err)) == 0, _lib.s(err.msg)
    assert res.version == 2
    c.close()
    after = hashes(r)
    assert after[name][3] != before[name][3]          # written
    kept = [k for k in new if k != name]
    assert all(after[k] == before[k] for k in kept)   # partial: N's bytes


def test_partial_kept_bytes_are_n_bytes(llama):
    """A partial update of every third tensor: the kept ones (copied from
    N in runs of neighbours, push_keep.c) read back, through an engine's
    attach and its client-side re-hash, as the hashes the manifest
    carries over from N; and the written ones as pushed."""
    r, new, _ = llama
    names = sorted(new)
    changed = {k: new[k] for k in names[::3]}
    before = hashes(r)
    with connect(r) as c:
        assert c.update_from(changed, partial=True).version == 2
    after = hashes(r)
    for k in names:
        assert (after[k] == before[k]) == (k not in changed), k
    with connect(r) as c:
        m = c.attach()
        assert m.verify()
        m.detach()
