# SPDX-License-Identifier: MIT
"""Shared fixtures of the Python tests: a real wcd on the host backend (a
runtime dir of its own), wcgen models, the reference checkpoint.

test/run.sh exports BUILD, WC_TOP, PYTHONPATH and WCACHE_LIB; run by hand,
`pytest test/py` finds them from this file's place.
"""
import gc
import json
import os
import signal
import struct
import subprocess
import sys
import time

import pytest

WC_TOP = os.environ.get("WC_TOP") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(WC_TOP, BUILD, "bin")
PKG = os.path.join(WC_TOP, "tools", "libwcache", "python")
os.environ.setdefault("WCACHE_LIB", os.path.join(WC_TOP, BUILD, "lib", "libwcache.so"))
# libwcache's identity cache on disk: test/run.sh gives each run a fresh
# directory; run by hand, one of this session's own (never ~/.cache's).
if not os.environ.get("WCACHE_IDENT_CACHE"):
    import atexit, shutil, tempfile
    _ident = tempfile.mkdtemp(prefix="wctest-ident.")
    atexit.register(shutil.rmtree, _ident, True)
    os.environ["WCACHE_IDENT_CACHE"] = os.path.join(_ident, "ident")
# the module cache's settling time (a source changed within 2 s is not
# kept): the tests write their model code just before they cache it;
# test_py_modcache's settling test sets it back
os.environ.setdefault("WCACHE_TEST_MODCACHE_SETTLE_MS", "0")
if PKG not in sys.path:
    sys.path.insert(0, PKG)
REFERENCE = os.path.join(WC_TOP, "test", "data", "reference")


def need(path):
    if not os.path.exists(path):
        pytest.skip("%s is not built" % path)
    return path


class Daemon:
    """One wcd --device host:NAME --runtime-dir DIR over a model."""

    def __init__(self, tmp, model, name, *extra):
        self.model = str(model)
        self.name = name
        self.device = "host:" + name
        self.rundir = str(tmp / ("run-" + name))
        self.sock = os.path.join(self.rundir, "host-%s.sock" % name)
        self.ready = os.path.join(self.rundir, "host-%s.ready" % name)
        self.log = str(tmp / ("wcd-%s.log" % name))
        self.extra = list(extra)
        self.proc = None
        self.start()

    def start(self, *extra):
        if os.path.exists(self.ready):
            os.unlink(self.ready)
        args = [need(os.path.join(BIN, "wcd")), "--model", self.model,
                "--device", self.device, "--runtime-dir", self.rundir]
        self.proc = subprocess.Popen(args + self.extra + list(extra),
                                     stdout=open(self.log, "ab"),
                                     stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.ready):
            if self.proc.poll() is not None:
                raise AssertionError("wcd exited (%s) before it was ready:\n%s"
                                     % (self.proc.returncode, open(self.log).read()))
            if time.monotonic() > deadline:
                raise AssertionError("wcd not ready after 30 s:\n" + open(self.log).read())
            time.sleep(0.01)

    def connect(self, **kw):
        import wcache
        return wcache.connect(device=self.device, runtime_dir=self.rundir, **kw)

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(20)

    def status(self):
        with self.connect() as c:
            return c.status()


@pytest.fixture
def daemons(tmp_path):
    """daemons(model, name, *wcd_args) -> Daemon; all are killed after."""
    started = []

    def make(model, name, *extra):
        d = Daemon(tmp_path, model, "%s-%d" % (name, os.getpid()), *extra)
        started.append(d)
        return d
    yield make
    for d in started:
        d.kill()


def wcgen(out, kind="tiny", *extra):
    subprocess.run([need(os.path.join(BIN, "wcgen")), kind, "--out", str(out)] + list(extra),
                   check=True, stdout=subprocess.DEVNULL)
    return str(out)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """A wcgen tiny model (3 MB shards: several files)."""
    return wcgen(tmp_path_factory.mktemp("tiny") / "model", "tiny", "--shard-size", "3MB")


def safetensors_files(model_dir):
    """name -> (dtype, shape, bytes) read from the checkpoint's files
    themselves (the safetensors format: u64 header length, JSON, data)."""
    out = {}
    for f in sorted(os.listdir(model_dir)):
        if not f.endswith(".safetensors"):
            continue
        with open(os.path.join(model_dir, f), "rb") as fh:
            data = fh.read()
        (n,) = struct.unpack_from("<Q", data, 0)
        header = json.loads(data[8:8 + n])
        for name, e in header.items():
            if name == "__metadata__":
                continue
            a, b = e["data_offsets"]
            out[name] = (e["dtype"], tuple(e["shape"]), data[8 + n + a:8 + n + b])
    return out


def xxh3_128(blobs, tmp):
    """XXH3-128 of each blob as 32 hex digits, by an implementation
    independent of ours: Python's xxhash (python3-xxhash), else Debian's
    xxhsum -H2."""
    try:
        import xxhash
        return [xxhash.xxh3_128(b).hexdigest() for b in blobs]
    except ImportError:
        pass
    paths = []
    for i, blob in enumerate(blobs):
        p = os.path.join(str(tmp), "blob%d" % i)
        with open(p, "wb") as fh:
            fh.write(blob)
        paths.append(p)
    if not paths:
        return []
    out = subprocess.run(["xxhsum", "-H2"] + paths, check=True,
                         stdout=subprocess.PIPE).stdout.decode().split("\n")
    by_path = {}
    for line in out:
        if line.strip():
            h, p = line.split(None, 1)
            by_path[p.strip()] = h.split("_")[-1]  # "XXH3_<hex>" on some versions
    return [by_path[p] for p in paths]


def pool_mappings():
    """Lines of /proc/self/maps that map a wcache host pool (memfd)."""
    with open("/proc/self/maps") as f:
        return [l for l in f if "wcache-pool" in l]


@pytest.fixture(autouse=True)
def _earlier_tests_garbage_collected():
    """Tests that assert no pool is mapped in this process (pool_mappings)
    must not see an earlier test's garbage: pytest.raises keeps the
    exception, whose traceback's frames hold that test's tensors in a
    reference cycle until the cyclic collector runs (test_py_torch's
    LoadError, then test_py_attach in one process on the H200). Collected
    before each test, so a test's own objects are still freed (or not) by
    their references alone."""
    gc.collect()
    yield


def pytest_configure(config):
    # Every torch hand-out of a read-only attach warns once per Model; the
    # test of that warning catches it with pytest.warns all the same.
    config.addinivalue_line("filterwarnings", "ignore::wcache.ReadOnlyWarning")
