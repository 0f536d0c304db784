# SPDX-License-Identifier: MIT
"""python -m wcache status exits as wcctl status does: 0 every daemon
found answered, 3 none was found, 4 one is UNREACHABLE (even when another
answered), 5 none is unreachable but one is still STARTING (its lock held,
no ready file yet); STARTING rows in the table and in --json as wcctl's."""
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys

from conftest import BIN, PKG


def both(rundir, *args):
    """(python -m wcache status's (rc, out), wcctl status's (rc, out))."""
    env = dict(os.environ, PYTHONPATH=PKG)
    py = subprocess.run([sys.executable, "-m", "wcache", "status", "--runtime-dir", rundir] + list(args),
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=60)
    wc = subprocess.run([os.path.join(BIN, "wcctl"), "status", "--runtime-dir", rundir] + list(args),
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    return (py.returncode, py.stdout.decode()), (wc.returncode, wc.stdout.decode())


def test_exit_codes_as_wcctl(daemons, tiny):
    up = daemons(tiny, "up")
    py, wc = both(up.rundir)
    assert py[0] == wc[0] == 0, (py, wc)
    # a device locked by a daemon still loading (here: this test holds
    # the lock, as a loading wcd does, and there is no ready file): 5
    lock = os.path.join(up.rundir, "host-loading.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        py, wc = both(up.rundir)
        assert py[0] == wc[0] == 5, (py, wc)
        assert "host-loading" in py[1] and "STARTING" in py[1], py[1]
        assert "wcd pid %d holds the device and is still loading" % os.getpid() in py[1], py[1]
        # the table's rows as wcctl's (but UPTIME, the two ran a moment apart)
        a = [l.split() for l in py[1].splitlines()]
        b = [l.split() for l in wc[1].splitlines()]
        assert [r[:8] for r in a] == [r[:8] for r in b], (py[1], wc[1])
        pj, wj = both(up.rundir, "--json")
        assert pj[0] == wj[0] == 5
        got = {o["device"]: o for o in json.loads(pj[1])}
        want = {o["device"]: o for o in json.loads(wj[1])}
        s, w = got["host-loading"], want["host-loading"]
        assert s == w == {"device": "host-loading", "reachable": False, "state": "STARTING",
                          "error": "no ready file yet (still loading)", "pid": os.getpid()}, (s, w)
        fcntl.flock(fd, fcntl.LOCK_UN)
        # a lock file nobody holds is a leftover, not a daemon
        py, wc = both(up.rundir)
        assert py[0] == wc[0] == 0, (py, wc)
        assert "host-loading" not in py[1]
    finally:
        os.close(fd)
    # one daemon answers, another's ready file is left by a killed one: 4
    gone = daemons(tiny, "gone")
    gone.kill(signal.SIGKILL)      # its ready file stays, naming its socket
    shutil.copy(gone.ready, os.path.join(up.rundir, os.path.basename(gone.ready)))
    py, wc = both(up.rundir)
    assert py[0] == wc[0] == 4, (py, wc)
    assert "UNREACHABLE" in py[1]
    pj, wj = both(up.rundir, "--json")
    assert pj[0] == wj[0] == 4
    states = {o["device"]: o.get("state") for o in json.loads(pj[1])}
    assert states == {o["device"]: o.get("state") for o in json.loads(wj[1])}, (pj[1], wj[1])
    # only the unreachable one: 4; none at all: 3
    py, wc = both(gone.rundir)
    assert py[0] == wc[0] == 4, (py, wc)
    py, wc = both(up.rundir + "-none")
    assert py[0] == wc[0] == 3, (py, wc)
