# SPDX-License-Identifier: MIT
"""make install runs ldconfig (as root) when it installs into one of the
loader's directories, so that libwcache.so.0 loads at once; elsewhere, or
under DESTDIR, it runs none (tools/dist/ldconfig.sh)."""
import os
import shutil

import pytest

from test_py_install_venv import make_install


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
