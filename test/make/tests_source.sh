#!/usr/bin/env bash
# Every shell test sources its helpers from a file that exists: a test whose
# `. "$(dirname "$0")/X"` names no file runs on without fail, skip or
# tmpdir (bash only says "command not found" and goes on), so it can never
# fail (two did after test/ moved into rooms). It first proves itself on a
# planted test that sources a missing file.
. "$(dirname "$0")/../lib/lib.sh"

# missing FILE...: "FILE: X" for each sourced "$(dirname "$0")/X" not there
missing() {
	local f x
	for f; do
		sed -n 's/^[[:space:]]*\(\.\|source\) "\$(dirname "\$0")\/\([^"]*\)".*/\2/p' "$f" |
			while read -r x; do
				[ -f "$(dirname "$f")/$x" ] || echo "$f: $x"
			done
	done
}

d=$(tmpdir)
trap 'rm -rf "$d"' EXIT
mkdir -p "$d/room" "$d/lib"
: >"$d/lib/lib.sh"
printf '#!/bin/bash\n. "$(dirname "$0")/lib.sh"\n' >"$d/room/bad.sh"
printf '#!/bin/bash\n. "$(dirname "$0")/../lib/lib.sh"\n' >"$d/room/good.sh"
out=$(missing "$d/room/bad.sh" "$d/room/good.sh")
expect_has "a planted test sourcing a missing file is found" "$out" "bad.sh: lib.sh"
expect_no "a test sourcing an existing file is not" "$out" "good.sh"

cd "$WC_TOP" || fail "no WC_TOP"
mapfile -t tests < <(find test -name '*.sh' -o -name '*.bash' | sort)
[ ${#tests[@]} -gt 50 ] || fail "found only ${#tests[@]} shell tests under test/"
bad=$(missing "${tests[@]}")
[ -z "$bad" ] || fail "shell tests source files that do not exist (fix the path):
$bad"
echo "ok: ${#tests[@]} shell files source only files that exist"
