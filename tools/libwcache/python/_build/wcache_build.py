# SPDX-License-Identifier: MIT
"""The package's own PEP 517 build backend (pyproject.toml: backend-path):
the wheel of a pure-Python package is a zip of its files and three
metadata files, which the standard library writes. It needs nothing
installed, so `pip install tools/libwcache/python` works offline in any
venv (pip's build isolation has nothing to fetch: no setuptools, which a
Python 3.12 venv no longer has), and `pip install -e` too (a .pth file).

Metadata comes from pyproject.toml's [project] table (tomllib where the
Python has it, 3.11+; else the few lines of it this file reads).
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "wcache"
_EPOCH = (1980, 1, 1, 0, 0, 0)   # zip's first date: the same wheel from the same files


def _project():
    """pyproject.toml's [project] table (name, version, description,
    requires-python, optional-dependencies)."""
    path = os.path.join(HERE, "pyproject.toml")
    try:
        import tomllib
        with open(path, "rb") as f:
            return tomllib.load(f)["project"]
    except ImportError:
        pass
    out, table = {}, None
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            m = re.match(r"\[([^\]]+)\]\Z", line)
            if m:
                table = m.group(1)
                continue
            m = re.match(r'([A-Za-z0-9_-]+)\s*=\s*(.*)\Z', line)
            if not m or table not in ("project", "project.optional-dependencies"):
                continue
            key, val = m.groups()
            vals = re.findall(r'"([^"]*)"', val)
            if table == "project" and val.startswith('"'):
                out[key] = vals[0]
            elif table == "project.optional-dependencies":
                out.setdefault("optional-dependencies", {})[key] = vals
    return out


def _names(p):
    name = p["name"]
    return name, p["version"], "%s-%s" % (name.replace("-", "_"), p["version"])


def _metadata(p):
    name, version, _ = _names(p)
    lines = ["Metadata-Version: 2.1", "Name: " + name, "Version: " + version,
             "Summary: " + p.get("description", ""), "License: MIT"]
    if p.get("requires-python"):
        lines.append("Requires-Python: " + p["requires-python"])
    for extra, reqs in sorted(p.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: " + extra)
        lines += ["Requires-Dist: %s ; extra == \"%s\"" % (r, extra) for r in reqs]
    readme = os.path.join(HERE, "README.md")
    body = ""
    if os.path.isfile(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme) as f:
            body = "\n" + f.read()
    return ("\n".join(lines) + "\n" + body).encode()


_WHEEL = b"Wheel-Version: 1.0\nGenerator: wcache_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _dist_info(p):
    """{file name: bytes} of the .dist-info directory (RECORD apart)."""
    d = _names(p)[2] + ".dist-info/"
    return {d + "METADATA": _metadata(p), d + "WHEEL": _WHEEL,
            d + "top_level.txt": (PACKAGE + "\n").encode()}


def _package_files():
    """{path in the wheel: bytes} of every file of the package (no caches)."""
    out = {}
    root = os.path.join(HERE, PACKAGE)
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            if f.endswith((".pyc", ".pyo")):
                continue
            full = os.path.join(d, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, HERE).replace(os.sep, "/")] = fh.read()
    return out


def _write_wheel(wheel_directory, files, p):
    _, _, base = _names(p)
    files = dict(files, **_dist_info(p))
    record = base + ".dist-info/RECORD"
    lines = []
    for path, data in files.items():
        h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append("%s,sha256=%s,%d" % (path, h, len(data)))
    lines.append(record + ",,")
    files[record] = ("\n".join(lines) + "\n").encode()
    name = base + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            zi = zipfile.ZipInfo(path, _EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return name


# -- PEP 517 / 660 hooks --------------------------------------------------
def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_sdist = get_requires_for_build_editable = get_requires_for_build_wheel


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p = _project()
    for path, data in _dist_info(p).items():
        full = os.path.join(metadata_directory, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
    return _names(p)[2] + ".dist-info"


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files(), _project())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel of one .pth file naming this directory: the source is imported in place."""
    p = _project()
    return _write_wheel(wheel_directory, {"__editable__.%s.pth" % _names(p)[2]: (HERE + "\n").encode()}, p)


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = _names(p)[2]
    name = base + ".tar.gz"
    files = dict(_package_files())
    for extra in ("pyproject.toml", "README.md", "_build/wcache_build.py"):
        with open(os.path.join(HERE, extra), "rb") as f:
            files[extra] = f.read()
    files["PKG-INFO"] = _metadata(p)
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for path, data in sorted(files.items()):
            ti = tarfile.TarInfo("%s/%s" % (base, path))
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 315532800
            t.addfile(ti, io.BytesIO(data))
    return name
