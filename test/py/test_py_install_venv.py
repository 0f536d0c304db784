# SPDX-License-Identifier: MIT
"""`pip install tools/libwcache/python` in a fresh venv, offline (the
package's own build backend: nothing to fetch), then make install: the
package attaches with neither WCACHE_LIB nor LD_LIBRARY_PATH set, finding
the library beside it (the venv's prefix) or through pkg-config."""
import os
import shutil
import subprocess
import sys

import pytest

from conftest import WC_TOP


def make_install(tmp_path, prefix, *extra, env=None):
    """make install PREFIX=prefix (no DESTDIR: a real install, there) of
    this build (its sanitizer too); the output."""
    build = os.environ.get("BUILD", "build")
    san = build[len("build-"):].replace("-", ",") if build.startswith("build-") else ""
    env = env or {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    p = subprocess.run(["make", "-C", WC_TOP, "--no-print-directory", "install", "PREFIX=%s" % prefix,
                        "SANITIZE=%s" % san] + list(extra),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=300)
    out = p.stdout.decode()
    assert p.returncode == 0, out
    return out


def fresh_venv(path):
    """A new venv of this python with its own pip (ensurepip: offline)."""
    r = subprocess.run([sys.executable, "-m", "venv", str(path)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    if r.returncode:
        pytest.skip("no venv with pip for this python: %s" % r.stdout.decode()[-300:])
    return str(path / "bin" / "python")


ATTACH = """
import sys, wcache
print(wcache.lib_path)
with wcache.connect(device=sys.argv[1], runtime_dir=sys.argv[2]) as c:
    m = c.attach(model_dir=sys.argv[3])
    print(len(m), m.manifest[0].name)
    m.detach()
"""


def test_pip_install_into_a_fresh_venv(tmp_path, daemons, tiny):
    """`pip install tools/libwcache/python` (the README's command, no
    other flag) in a fresh venv, offline: the package builds with its own
    backend, nothing is downloaded; after make install it attaches with
    neither WCACHE_LIB nor LD_LIBRARY_PATH set: a library installed
    elsewhere is found through pkg-config, one installed under the venv's
    prefix beside the package (first)."""
    if not shutil.which("make"):
        pytest.skip("no make")
    d = daemons(tiny, "venv")
    with d.connect() as c:
        n = len(c.attach(model_dir=tiny))
    env = {k: v for k, v in os.environ.items()
           if k not in ("WCACHE_LIB", "LD_LIBRARY_PATH", "PYTHONPATH", "PKG_CONFIG_PATH",
                        "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    venv = tmp_path / "venv"
    py = fresh_venv(venv)
    r = subprocess.run([py, "-m", "pip", "install", os.path.join(WC_TOP, "tools", "libwcache", "python")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=300,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout.decode()
    where = subprocess.run([py, "-c", "import importlib.util as u; print(u.find_spec('wcache').origin)"],
                           stdout=subprocess.PIPE, env=env, cwd=str(tmp_path), timeout=60).stdout.decode()
    assert where.startswith(str(venv / "lib" / "python")), where
    for prefix, run_env in ((tmp_path / "opt", dict(env, PKG_CONFIG_PATH=str(tmp_path / "opt" / "lib" / "pkgconfig"))),
                            (venv, env)):
        make_install(tmp_path, prefix, env=env)
        r = subprocess.run([py, "-c", ATTACH, d.device, d.rundir, tiny], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, env=run_env, timeout=120, cwd=str(tmp_path))
        out = r.stdout.decode().split("\n")
        assert r.returncode == 0, r.stdout.decode()
        assert out[0] == str(prefix / "lib" / "libwcache.so.0"), (prefix, out)
        assert out[1].split()[0] == str(n), out


def test_library_not_found_says_how(tmp_path):
    """import wcache with no library to load: WCACHE_LIB naming a file
    that is none is an OSError naming it and what to set instead (never
    another library); with nothing set and nothing installed, one naming
    every place looked and how to install."""
    from conftest import PKG
    env = {k: v for k, v in os.environ.items()
           if k not in ("WCACHE_LIB", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH")}
    env.update(PYTHONPATH=PKG, PKG_CONFIG_LIBDIR=str(tmp_path))   # no wcache.pc there

    def imp(**extra):
        r = subprocess.run([sys.executable, "-c", "import wcache; print(wcache.lib_path)"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(env, **extra),
                           timeout=60, cwd=str(tmp_path))
        return r.returncode, r.stdout.decode()
    bad = str(tmp_path / "no-such-libwcache.so")
    rc, out = imp(WCACHE_LIB=bad)
    assert rc != 0 and "OSError" in out, out
    assert "cannot load libwcache from WCACHE_LIB=%s" % bad in out and "unset it" in out, out
    rc, out = imp()
    if rc == 0:
        pytest.skip("a libwcache is installed here (%s)" % out.strip())
    assert "cannot load libwcache: looked" in out and "the loader's libwcache.so.0" in out, out
    assert "no wcache.pc found" in out and "make install" in out, out
