# SPDX-License-Identifier: MIT
"""What `make test` gives every Python test (test/run.sh counts each case):
WCACHE_LIB names the built libwcache.so, which loads and answers, and
PYTHONPATH leads to tools/libwcache/python."""
import ctypes
import os
import re


def test_wcache_lib_loads_and_matches_header():
    lib = os.environ["WCACHE_LIB"]
    assert os.path.isfile(lib), "WCACHE_LIB=%s is not a file" % lib
    so = ctypes.CDLL(lib)
    header = os.path.join(os.environ["WC_TOP"], "tools/libwcache/wcache.h")
    m = re.search(r"#define WC_API_VERSION (\d+)", open(header).read())
    assert m, "no WC_API_VERSION in " + header
    assert so.wc_api_version() == int(m.group(1))


def test_pythonpath_names_the_package_dir():
    want = os.path.join(os.environ["WC_TOP"], "tools/libwcache/python")
    assert want in os.environ.get("PYTHONPATH", "").split(os.pathsep)
