#!/usr/bin/env bash
# The engine-layout reference (test/layout_ref/, Python 3 + numpy + xxhash):
# its own checks, then real wcd ranks on the host backend against it.
. "$(dirname "$0")/lib.sh"
[ -x "$BIN/wcd" ] && [ -x "$BIN/wcctl" ] && [ -x "$BIN/wcgen" ] || skip "wcd, wcctl or wcgen is not built"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
"$PY" -c 'import numpy, xxhash, pytest' 2>/dev/null ||
	skip "python3 with numpy, xxhash and pytest is missing (Debian: python3-numpy python3-xxhash python3-pytest)"
cd "$WC_TOP/test/layout_ref" || fail "no test/layout_ref"
export WC_TOP BUILD
exec "$PY" -m pytest -q -p no:cacheprovider -rfE --tb=short .
