# SPDX-License-Identifier: MIT
"""torch's device spellings wherever the package takes a device
(wcache.connect, and through it wcache.transformers.from_pretrained):
"cuda", "cuda:N", an int, torch.device, a GPU UUID, "host:NAME", "cpu";
a bad one is a ValueError naming the value and the spellings. And the
framework names' aliases "pt" and "np"."""
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

import wcache
from wcache import _device
from conftest import BIN, need


def test_spellings():
    P = _device.parse
    assert P(None) == (None, None)
    for d in ("cuda:0", "0", 0):
        assert P(d) == ("0", "cuda:0"), d
    # an integer of another type (numpy's, as an array index gives it)
    np = pytest.importorskip("numpy")
    assert P(np.int64(2)) == ("2", "cuda:2") and P(np.int32(0)) == ("0", "cuda:0")
    assert P("cuda:3") == ("3", "cuda:3") and P(7) == ("7", "cuda:7")
    assert P(b"cuda:1") == ("1", "cuda:1")
    assert P("host") == ("host", "cpu") and P("host:a-1") == ("host:a-1", "cpu")
    assert P("host-a-1") == ("host-a-1", "cpu") and P("cpu") == ("host", "cpu")
    uuid = "GPU-12345678-1234-1234-1234-123456789abc"
    spec, _ = P(uuid)
    assert spec == uuid
    # "cuda": torch's current device; without torch or a GPU, 0
    assert P("cuda")[0] == str(_device._current_ordinal())


def test_torch_devices():
    torch = pytest.importorskip("torch")
    P = _device.parse
    assert P(torch.device("cuda", 2)) == ("2", "cuda:2")
    assert P(torch.device("cuda:0")) == ("0", "cuda:0")
    assert P(torch.device("cuda")) == P("cuda")
    assert P(torch.device("cpu")) == ("host", "cpu")
    if not torch.cuda.is_available():
        assert P("cuda") == ("0", "cuda:0")
    with pytest.raises(ValueError, match=r"device\(type='meta'\).*cuda:N"):
        P(torch.device("meta"))


@pytest.mark.parametrize("bad", ["cuda:x", "gpu0", "mps", "", "cuda:", "GPU-", "cuda:-1", -1, "0x1"])
def test_bad_spelling(bad, tmp_path):
    with pytest.raises(ValueError) as e:
        wcache.connect(device=bad, runtime_dir=str(tmp_path))
    msg = str(e.value)
    assert repr(bad) in msg and '"cuda:N"' in msg and '"host:NAME"' in msg and "GPU-<uuid>" in msg, msg


def test_cuda_spellings_connect_as_the_ordinal(tmp_path):
    """Without a GPU (CI) every spelling of CUDA device 0 fails in
    libwcache exactly as "0" does: the same spec reached it."""
    rd = str(tmp_path)
    with pytest.raises(wcache.Error) as want:
        wcache.connect(device="0", runtime_dir=rd)
    spellings = ["cuda:0", 0, b"cuda:0"]
    try:
        import torch
        spellings.append(torch.device("cuda", 0))
        if not torch.cuda.is_available():
            spellings += ["cuda", torch.device("cuda")]
    except ImportError:
        spellings.append("cuda")
    for d in spellings:
        with pytest.raises(wcache.Error) as got:
            wcache.connect(device=d, runtime_dir=rd)
        assert (type(got.value), got.value.errno, str(got.value)) == \
            (type(want.value), want.value.errno, str(want.value)), d


def _wcd(tmp_path, model, device, rundir):
    """wcd --device DEVICE under rundir, waited for (its ready file)."""
    log = open(str(tmp_path / ("wcd-%s.log" % device.replace(":", "-"))), "wb")
    p = subprocess.Popen([need(os.path.join(BIN, "wcd")), "--model", model, "--device", device,
                          "--runtime-dir", rundir], stdout=log, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    name = "host" if device == "host" else device.replace(":", "-")
    ready = os.path.join(rundir, name + ".ready")
    deadline = time.monotonic() + 30
    while not os.path.exists(ready):
        assert p.poll() is None, "wcd exited %s" % p.returncode
        assert time.monotonic() < deadline, "wcd not ready after 30 s"
        time.sleep(0.01)
    return p


def test_host_and_cpu_reach_the_host_daemon(tiny, tmp_path):
    """"cpu" and torch.device("cpu") are the daemon named host; "host-NAME"
    (as wcctl status prints it) is host:NAME's."""
    rd = str(tmp_path / "run")
    procs = [_wcd(tmp_path, tiny, "host", rd), _wcd(tmp_path, tiny, "host:b", rd)]
    try:
        devs = ["cpu", "host"]
        try:
            import torch
            devs.append(torch.device("cpu"))
        except ImportError:
            pass
        for d in devs:
            with wcache.connect(device=d, runtime_dir=rd) as c:
                assert c.hello()["device"] == "host", d
        for d in ("host:b", "host-b"):
            with wcache.connect(device=d, runtime_dir=rd) as c:
                assert c.hello()["device"] == "host-b", d
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_gpu_uuid_is_its_socket(daemons, tiny):
    """A GPU UUID names its socket itself (no CUDA needed): a daemon's
    socket under GPU-<uuid>.sock is reached by that spelling."""
    d = daemons(tiny, "uuid")
    uuid = "GPU-12345678-1234-1234-1234-123456789abc"
    rd = tempfile.mkdtemp(prefix="wcu.")    # short: a socket path has 107 bytes at most
    try:
        os.symlink(d.sock, os.path.join(rd, uuid + ".sock"))
        with wcache.connect(device=uuid, runtime_dir=rd) as c:
            assert c.hello()["device"] == "host-" + d.name
    finally:
        shutil.rmtree(rd)


def test_framework_aliases(daemons, tiny):
    """framework="pt" is torch's, "np" numpy's (transformers'
    return_tensors, safetensors' framework= names), in attach, tensor and
    tensors; another name is a ValueError naming it, before any attach."""
    d = daemons(tiny, "fw")
    with d.connect() as c:
        m = c.attach(model_dir=tiny, framework="np")
        name = next(iter(m))
        import numpy
        assert m.framework == "numpy" and isinstance(m[name], numpy.ndarray)
        assert isinstance(m.tensor(name, "np"), numpy.ndarray)
        assert all(isinstance(a, numpy.ndarray) for a in m.tensors("np").values())
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            assert isinstance(m.tensor(name, "pt"), torch.Tensor)
            assert isinstance(m.tensors("pt")[name], torch.Tensor)
            m2 = c.attach(model_dir=tiny, framework="pt")
            assert m2.framework == "torch" and isinstance(m2[name], torch.Tensor)
            m2.detach()
        for bad in ("tf", "jax", ""):
            with pytest.raises(ValueError, match=re.escape(repr(bad))):
                m.tensor(name, bad)
            with pytest.raises(ValueError, match="'pt'.*'np'"):
                c.attach(model_dir=tiny, framework=bad)
        m.detach()
