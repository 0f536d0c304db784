# SPDX-License-Identifier: MIT
"""python -m wcache status [--json] [--runtime-dir DIR] [--timeout-ms MS]
python -m wcache prepare MODEL_DIR [--dtype bfloat16] [--buffers-device cuda]
                         [--attn-implementation sdpa] [--cache DIR]

Prints what `wcctl status` prints: one row per daemon with a ready file
(DEVICE RANK STATE MODEL VERSION GB TENSORS CLIENTS UPTIME), from each
daemon's STATUS; one that does not answer is UNREACHABLE with what its ready
file says; a device locked by a daemon still loading (no ready file yet) is
STARTING. Exit status as wcctl status's: 0 every daemon found answered, 3
none was found, 4 one is UNREACHABLE, 5 none is but one is still STARTING,
2 usage.

prepare writes the module cache that wcache.torch.empty_pretrained reads
(transformers needed), so that an engine's first start is a hit too: run
it with what the engine passes (the same dtype, buffers device and
attention implementation; another one is another key). Prints hit or
written and the file; exit 0, 1 when the module could not be kept (the
reason printed), 2 on usage or without transformers.
"""
import argparse
import glob
import json
import os
import sys

from . import Error, connect


def runtime_glob(runtime_dir, suffix=".ready"):
    """The ready files' (suffix: the lock files') glob under the
    runtime-path rules of wcache.h (the paths escaped: a directory named
    "run[1]" is no pattern)."""
    esc = glob.escape
    if runtime_dir:
        return os.path.join(esc(runtime_dir), "*" + suffix)
    tmpl = os.environ.get("WCACHE_SOCKET_TEMPLATE")
    if tmpl:
        return "*".join(esc(p) for p in tmpl.split("{device}")) + suffix
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    base = os.path.join(xdg, "wcache") if xdg else "/tmp/wcache-%d" % os.getuid()
    return os.path.join(esc(base), "*" + suffix)


def lock_holder(path):
    """(held, pid) of a lock file: whether a process holds its flock, and
    which (-1: not known, as wcctl says), read from /proc/locks as wcctl does (never by
    taking the lock, which a starting wcd could then fail to take). Lines:
    "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; waiters ("->") skipped."""
    try:
        st = os.stat(path)
        with open("/proc/locks") as f:
            lines = f.readlines()
    except OSError:
        return False, 0
    for line in lines:
        parts = line.split()
        if "->" in parts or len(parts) < 6:
            continue
        try:
            pid = int(parts[4])
            maj, mn, ino = parts[5].split(":")
            if int(ino) == st.st_ino and int(maj, 16) == os.major(st.st_dev) \
                    and int(mn, 16) == os.minor(st.st_dev):
                return True, pid if pid > 0 else -1
        except ValueError:
            continue
    return False, -1


def read_ready(path):
    """The ready file's key=value lines; values are the bytes wcd wrote
    (paths: not always UTF-8), decoded as os decodes paths."""
    out = {}
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            k, sep, v = line.rstrip("\n").partition("=")
            if sep:
                out[k] = v
    return out


def uptime(s):
    t = int(s)
    if t < 60:
        return "%ds" % t
    if t < 3600:
        return "%dm%02ds" % (t // 60, t % 60)
    if t < 86400:
        return "%dh%02dm" % (t // 3600, t % 3600 // 60)
    return "%dd%02dh" % (t // 86400, t % 86400 // 3600)


def rows(pattern, timeout_ms):
    out = []
    for path in sorted(glob.glob(pattern)):
        dev = os.path.basename(path)[:-len(".ready")]
        r = {"device": dev, "ready_path": path, "status": None, "why": ""}
        try:
            r["ready"] = read_ready(path)
            sock = r["ready"].get("socket") or path[:-len(".ready")] + ".sock"
            with connect(socket=sock, timeout_ms=timeout_ms, label="python -m wcache status") as c:
                r["status"] = c.status()
        except (Error, OSError) as e:
            r["why"] = str(e)
        out.append(r)
    return out


def starting_rows(pattern, have):
    """Rows of devices locked by a daemon still loading (a lock file
    held, no ready file yet: STARTING), as wcctl status lists them; have:
    the devices listed already."""
    out = []
    for path in sorted(glob.glob(pattern)):
        dev = os.path.basename(path)[:-len(".lock")]
        if dev in have:
            continue
        held, pid = lock_holder(path)
        if held:
            out.append({"device": dev, "status": None, "starting": True, "pid": pid,
                        "why": "no ready file yet (still loading)"})
    return out


def base_name(p):
    return os.path.basename(p.rstrip("/")) or p


def _shown(line):
    """line printable on any stdout: a path's bytes that are not UTF-8 as U+FFFD."""
    return line.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def print_table(rs):
    def out(line):
        print(_shown(line))
    w = max([20] + [len(r["device"]) for r in rs])
    fmt = "%-*s %-10s %-12s %-20s %7s %8s %8s %7s %8s"
    out(fmt % (w, "DEVICE", "RANK", "STATE", "MODEL", "VERSION", "GB", "TENSORS", "CLIENTS", "UPTIME"))
    for r in rs:
        s = r["status"]
        if r.get("starting"):
            out(fmt % (w, r["device"], "-", "STARTING", "-", "-", "-", "-", "-", "-"))
        elif s:
            clients = sum(1 for c in s.get("clients", []) if c.get("pid") != os.getpid())
            out("%-*s %-10s %-12s %-20s %7.0f %8.3f %8.0f %7d %8s" % (
                w, r["device"], "pp%d/tp%d" % (s.get("pp_rank", 0), s.get("tp_rank", 0)),
                s.get("state", "?"), base_name(s.get("model", "?")), s.get("version", 0),
                s.get("bytes", 0) / 1e9, s.get("tensors", 0), clients,
                uptime(s.get("uptime_seconds", 0))))
        else:
            rd = r.get("ready", {})
            out("%-*s %-10s %-12s %-20s %7s %8.3f %8s %7s %8s" % (
                w, r["device"], "pp%s/tp%s" % (rd.get("pp_rank", "0"), rd.get("tp_rank", "0")),
                "UNREACHABLE", base_name(rd.get("model", "-")), rd.get("version", "-"),
                int(rd.get("bytes", 0) or 0) / 1e9, rd.get("tensors", "-"), "-", "-"))
    for r in rs:
        if r.get("starting"):
            out("%s: wcd pid %d holds the device and is still loading (no ready file yet)"
                % (r["device"], r["pid"]))
        elif not r["status"]:
            rd = r.get("ready", {})
            out("%s: UNREACHABLE: %s; its ready file %s says pid %s, socket %s, state %s" % (
                r["device"], r["why"], r["ready_path"], rd.get("pid", "?"),
                rd.get("socket", "?"), rd.get("state", "?")))


def prepare(a):
    try:
        import torch
        import transformers  # noqa: F401 (empty_pretrained's, said here first)
    except ImportError as e:
        print("python -m wcache prepare: %s (it builds the model with transformers and torch)" % e,
              file=sys.stderr)
        return 2
    from . import torch as wt
    cfg = os.path.join(a.model_dir, "config.json")
    if not os.path.isfile(cfg):
        print("python -m wcache prepare: %s is not a model directory: %s %s (give the "
              "directory of the checkpoint, where its config.json is)"
              % (a.model_dir, cfg, "is not a file" if os.path.exists(cfg) else "does not exist"),
              file=sys.stderr)
        return 2
    dtype = None if a.dtype == "none" else getattr(torch, a.dtype, None)
    if a.dtype != "none" and not isinstance(dtype, torch.dtype):
        print("python -m wcache prepare: --dtype %s is not a torch dtype (bfloat16, float16, float32, "
              "none)" % a.dtype, file=sys.stderr)
        return 2
    if a.buffers_device is not None:
        try:
            torch.device(a.buffers_device)
        except (RuntimeError, ValueError, TypeError) as e:
            print("python -m wcache prepare: --buffers-device %s is not a torch device (cpu, cuda, "
                  "cuda:1): %s" % (a.buffers_device, e), file=sys.stderr)
            return 2
    kw = {"attn_implementation": a.attn_implementation} if a.attn_implementation else {}
    how = {}
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        wt.empty_pretrained(a.model_dir, dtype=dtype, buffers_device=a.buffers_device,
                            cache=a.cache if a.cache else True, how=how, **kw)
    if how["cache"] == "hit":
        print("hit: %s (already kept)" % how["path"])
        return 0
    if how["saved"]:
        print("written: %s" % how["path"])
        return 0
    print("python -m wcache prepare: not kept: %s" % (how["why"] or "; ".join(str(x.message) for x in w)),
          file=sys.stderr)
    return 1


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m wcache", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    st = sub.add_parser("status", help="what wcctl status prints")
    st.add_argument("--json", action="store_true")
    st.add_argument("--runtime-dir")
    st.add_argument("--timeout-ms", type=int, default=2000)
    pr = sub.add_parser("prepare", help="write the module cache of a transformers checkpoint")
    pr.add_argument("model_dir")
    pr.add_argument("--dtype", default="bfloat16", help="torch dtype name (default bfloat16; none: no dtype passed, from_config's default)")
    pr.add_argument("--buffers-device", default=None,
                    help="where the buffers go, as the engine's init_empty (e.g. cuda, cuda:1; default: "
                         "where the constructors put them)")
    pr.add_argument("--attn-implementation", default=None, help="passed to from_config (e.g. sdpa)")
    pr.add_argument("--cache", default=None, help="the cache directory (default: the module cache's)")
    a = ap.parse_args(argv)
    if a.cmd == "prepare":
        return prepare(a)
    if a.cmd != "status":
        ap.print_usage(sys.stderr)
        return 2
    rs = rows(runtime_glob(a.runtime_dir), a.timeout_ms)
    rs += starting_rows(runtime_glob(a.runtime_dir, ".lock"), {r["device"] for r in rs})
    if a.json:
        out = []
        for r in rs:
            if r["status"]:
                o = dict(r["status"], reachable=True, ready_file=r["ready_path"])
            elif r.get("starting"):
                o = {"device": r["device"], "reachable": False, "state": "STARTING",
                     "error": r["why"], "pid": r["pid"]}
            else:
                o = {"device": r["device"], "reachable": False, "state": "UNREACHABLE",
                     "error": r["why"], "ready_file": r["ready_path"], "ready": r.get("ready", {})}
            out.append(o)
        print(json.dumps(out, indent=2))
    elif rs:
        print_table(rs)
    else:
        print("no wcache daemon found (%s)" % runtime_glob(a.runtime_dir))
    # wcctl status's exit codes: 0 every daemon found answered, 3 none was
    # found, 4 one is unreachable, 5 none is but one is still starting
    starting = sum(1 for r in rs if r.get("starting"))
    answered = sum(1 for r in rs if r["status"])
    if not rs:
        return 3
    if answered + starting < len(rs):
        return 4
    return 5 if starting else 0


if __name__ == "__main__":
    sys.exit(main())
