# SPDX-License-Identifier: MIT
"""make python-install installs the package offline (pip and the package's
own build backend, no index) where Debian's python3 finds it; the
installed copy loads libwcache and reports a missing daemon as
wcache.NoDaemon. (pip install into a fresh venv: test_py_install_venv.py;
make install's ldconfig: test_py_install_ldconfig.py.)"""
import glob
import os
import shutil
import subprocess
import sys

import pytest

from conftest import WC_TOP


def installed(dest):
    """Every wcache/__init__.py under dest, hidden directories included (a
    venv's site-packages: the GPU machine's python is /opt/torch/.venv's,
    which glob's ** does not enter)."""
    return sorted(os.path.join(d, "__init__.py") for d, _, files in os.walk(str(dest))
                  if os.path.basename(d) == "wcache" and "__init__.py" in files)


def python_install(tmp_path, path_first=None, python=None):
    """make python-install into tmp_path/root with this python (python: an
    interpreter instead; path_first: a directory put first on PATH); (the
    installed __init__.py files, env, the output)."""
    python = python or sys.executable
    if not shutil.which("make"):
        pytest.skip("no make")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTHONPATH")}
    if path_first:
        env["PATH"] = "%s:%s" % (path_first, env.get("PATH", ""))
    dest = tmp_path / "root"
    p = subprocess.run(["make", "-C", WC_TOP, "--no-print-directory", "python-install",
                        "DESTDIR=%s" % dest, "PYTHON=%s" % python],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=110)
    out = p.stdout.decode()
    assert p.returncode == 0, out
    # Debian's python3: usr/local/lib/python3.X/dist-packages; another
    # (a venv's): its own site-packages, under dest too
    pkgs = installed(dest)
    assert len(pkgs) == 1, (pkgs, out)
    if python == sys.executable and sys.prefix == "/usr":
        assert glob.glob(str(dest / "usr" / "local" / "lib" / "python3*" / "dist-packages" / "wcache")), pkgs
    return pkgs, env, out


def test_make_python_install(tmp_path):
    pkgs, env, out = python_install(tmp_path)
    site = os.path.dirname(os.path.dirname(pkgs[0]))
    code = ("import wcache\n"
            "print(wcache.__file__)\n"
            "try:\n"
            "    wcache.connect(device='host:none', runtime_dir=%r)\n"
            "except wcache.NoDaemon as e:\n"
            "    print('NoDaemon', e.errno)\n" % str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=dict(env, PYTHONPATH=site), timeout=60)
    got = r.stdout.decode()
    assert r.returncode == 0, got
    assert got.splitlines() == [pkgs[0], "NoDaemon 2"], got


def test_python_install_without_apt(tmp_path):
    """On a machine whose dpkg knows none of the build and test packages
    and whose apt cannot install any (the GPU machine: its own python3,
    no Debian sources), make python-install still works when that python
    has pip: it needs nothing else."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "dpkg-query").write_text("#!/bin/sh\nexit 1\n")
    (fake / "apt-get").write_text("#!/bin/sh\necho 'E: Unable to locate package' \"$@\" >&2\nexit 100\n")
    for f in fake.iterdir():
        f.chmod(0o755)
    _, _, out = python_install(tmp_path, path_first=fake)
    assert "Unable to locate" not in out and "installing:" not in out, out


def test_python_install_into_hidden_venv(tmp_path):
    """A venv under a directory whose name starts with a dot (the GPU
    machine's /opt/torch/.venv): make python-install with its python puts
    the package in that venv's site-packages under DESTDIR, and the venv
    imports it from there. (Found on the H200: the lookup of the installed
    file skipped hidden directories.)"""
    venv = tmp_path / ".venv"
    r = subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    if r.returncode:
        pytest.skip("no venv for this python: %s" % r.stdout.decode()[-300:])
    py = str(venv / "bin" / "python3")
    probe = subprocess.run([py, "-c", "import pip"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=60)
    if probe.returncode:
        pytest.skip("the venv sees no pip: %s" % probe.stdout.decode()[-300:])
    pkgs, env, out = python_install(tmp_path, python=py)
    site = os.path.dirname(os.path.dirname(pkgs[0]))
    want = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          stdout=subprocess.PIPE, timeout=60).stdout.decode().strip()
    assert site == str(tmp_path / "root") + want, (site, want)
    assert "/.venv/" in site, site
    r = subprocess.run([py, "-c", "import wcache; print(wcache.__file__)"], cwd=str(tmp_path),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(env, PYTHONPATH=site),
                       timeout=60)
    assert r.returncode == 0 and r.stdout.decode().split() == [pkgs[0]], r.stdout.decode()

