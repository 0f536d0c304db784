# SPDX-License-Identifier: MIT
"""make python-install installs the package offline (pip and the package's
own build backend, no index) where Debian's python3 finds it; the
installed copy loads libwcache and reports a missing daemon as
wcache.NoDaemon. pip install into a fresh venv, and make install's
ldconfig, so that the package loads libwcache without WCACHE_LIB."""
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


def test_install_runs_ldconfig(tmp_path):
    """make install into one of the loader's directories runs ldconfig
    (as root), so that libwcache.so.0 loads at once; into another it runs
    none and says how the library is found; under DESTDIR (a package's
    staging) it runs none. A stand-in ldconfig lists the directories
    (-v -N) and records the real call."""
    if not shutil.which("make"):
        pytest.skip("no make")
    fake = tmp_path / "ldconfig"
    log = tmp_path / "calls"
    fake.write_text('#!/bin/sh\nif [ "$1" = -v ]; then echo "$LISTED: (from a stand-in)"; exit 0; fi\n'
                    'echo "ldconfig $*" >>%s\n' % log)
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    prefix = tmp_path / "usr"
    out = make_install(tmp_path, prefix, "LDCONFIG=%s" % fake, env=dict(env, LISTED=str(prefix / "lib")))
    if os.geteuid() == 0:
        assert "ran ldconfig: the loader finds %s/lib/libwcache.so.0" % prefix in out, out
        assert log.read_text() == "ldconfig \n", log.read_text()
    else:
        assert "run ldconfig as root" in out and not log.exists(), out
    log.unlink(missing_ok=True)
    out = make_install(tmp_path, tmp_path / "opt", "LDCONFIG=%s" % fake, env=dict(env, LISTED="/elsewhere"))
    assert "is not among the loader's directories" in out and "PKG_CONFIG_PATH=%s/opt/lib/pkgconfig" % tmp_path in out, out
    assert not log.exists()
    out = make_install(tmp_path, "/usr", "DESTDIR=%s" % (tmp_path / "stage"), "LDCONFIG=%s" % fake,
                       env=dict(env, LISTED="/usr/lib"))
    assert not log.exists() and "make install:" not in out, out


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
    neither WCACHE_LIB nor LD_LIBRARY_PATH set: the library installed
    under the venv's prefix is found beside the package, one installed
    elsewhere through pkg-config."""
    if not shutil.which("make"):
        pytest.skip("no make")
    d = daemons(tiny, "venv")
    with d.connect() as c:
        n = len(c.attach(model_dir=tiny))
    env = {k: v for k, v in os.environ.items()
           if k not in ("WCACHE_LIB", "LD_LIBRARY_PATH", "PYTHONPATH", "PKG_CONFIG_PATH",
                        "MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    cases = [("venv", None), ("venv2", tmp_path / "opt")]
    for name, prefix in cases:
        py = fresh_venv(tmp_path / name)
        r = subprocess.run([py, "-m", "pip", "install", os.path.join(WC_TOP, "tools", "libwcache", "python")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=300,
                           cwd=str(tmp_path))
        assert r.returncode == 0, r.stdout.decode()
        where = prefix or tmp_path / name
        make_install(tmp_path, where, env=env)
        run_env = dict(env, PKG_CONFIG_PATH=str(where / "lib" / "pkgconfig")) if prefix else env
        r = subprocess.run([py, "-c", ATTACH, d.device, d.rundir, tiny], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, env=run_env, timeout=120, cwd=str(tmp_path))
        out = r.stdout.decode().split("\n")
        assert r.returncode == 0, r.stdout.decode()
        assert out[0] == str(where / "lib" / "libwcache.so.0"), (name, out)
        assert out[1].split()[0] == str(n), out
        assert "/%s/lib/python" % name in subprocess.run(
            [py, "-c", "import wcache; print(wcache.__file__)"], stdout=subprocess.PIPE, env=run_env,
            cwd=str(tmp_path), timeout=60).stdout.decode()
