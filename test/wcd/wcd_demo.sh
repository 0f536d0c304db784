#!/usr/bin/env bash
# `make run`'s script (tools/run-demo.sh) end to end: it must say OK, exit 0
# and leave no daemon and no temp directory behind.
. "$(dirname "$0")/../lib/lib.sh"
for t in wcgen wcd wcattach wcctl; do [ -x "$BIN/$t" ] || skip "$t is not built"; done
before=$(ls -d /tmp/wcache-demo.* 2>/dev/null | sort)
out=$(BUILD=$BUILD bash "$WC_TOP/tools/run-demo.sh" 2>&1) || { echo "$out"; fail "run-demo.sh exit $?"; }
expect_has "demo" "$out" "make run: OK"
expect_has "demo" "$out" "all hashes match"
expect_has "demo" "$out" "exited 0 and removed its socket and ready file"
after=$(ls -d /tmp/wcache-demo.* 2>/dev/null | sort)
expect_eq "temp dirs left" "$after" "$before"
echo ok
