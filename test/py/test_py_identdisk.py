# SPDX-License-Identifier: MIT
"""libwcache's identity cache on disk (identdisk.c) through the Python
package, that is through libwcache.so (whose own file the entry names):
a fresh Python process's HELLO to a real wcd writes the entry; the next
fresh process's HELLO reads it (the file is not replaced: the same inode
and mtime; a build would have renamed a new one over it); a truncated
entry is replaced by a whole one; WCACHE_IDENT_CACHE=off makes none."""
import os
import subprocess
import sys
import time

from conftest import PKG, wcgen

CHILD = r"""
import sys
import wcache
with wcache.connect(device=sys.argv[1], runtime_dir=sys.argv[2]) as c:
    c.hello(model_dir=sys.argv[3])
"""


def hello(d, model, cache, **extra):
    env = dict(os.environ, WCACHE_IDENT_CACHE=str(cache),
               PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra)
    p = subprocess.run([sys.executable, "-c", CHILD, d.device, d.rundir, model],
                       env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    assert p.returncode == 0, p.stdout.decode(errors="replace")


def entries(cache):
    if not os.path.isdir(cache):
        return []
    return [os.path.join(cache, f) for f in os.listdir(cache) if f.endswith(".ident")]


def settle(model):
    """An entry is not written while a file it names is younger than 2 s."""
    newest = max(os.stat(os.path.join(model, f)).st_ctime for f in os.listdir(model))
    newest = max(newest, os.stat(model).st_ctime)
    time.sleep(max(0.0, newest + 2.2 - time.time()))


def test_second_process_reads_the_entry(tmp_path, daemons):
    model = wcgen(tmp_path / "model")
    d = daemons(model, "idisk")
    settle(model)
    cache = str(tmp_path / "ident")

    hello(d, model, cache)
    (entry,) = entries(cache)
    st = os.stat(entry)
    assert st.st_mode & 0o777 == 0o600
    assert os.stat(cache).st_mode & 0o777 == 0o700
    with open(entry, "rb") as f:
        whole = f.read()
    assert whole.startswith(b"wcache-ident 1\n")
    assert b"libwcache.so" in whole          # the code's file: the library

    hello(d, model, cache)
    again = os.stat(entry)
    assert (again.st_ino, again.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)

    with open(entry, "r+b") as f:
        f.truncate(len(whole) // 2)
    hello(d, model, cache)
    (entry2,) = entries(cache)
    assert os.stat(entry2).st_ino != st.st_ino
    with open(entry2, "rb") as f:
        assert f.read() == whole

    off = tmp_path / "xdg"
    hello(d, model, "off", XDG_CACHE_HOME=str(off), HOME=str(tmp_path / "home"))
    assert not off.exists() and not (tmp_path / "home").exists()
