#!/usr/bin/env bash
# test/run.sh fails a shell test that exits 0 after bash could not find a
# command it runs (a helper that was not sourced, a typo): bash goes on
# past it, so such a test may pass without checking anything. A test that
# only prints those words itself still passes.
. "$(dirname "$0")/../lib/lib.sh"
d=$(tmpdir)
trap 'rm -rf "$d"' EXIT
printf '#!/bin/bash\nno_such_helper_of_ours "a check"\nexit 0\n' >"$d/t_missing.sh"
printf '#!/bin/bash\necho "x: line 3: y: command not found"\nexit 0\n' >"$d/t_says.sh"
printf '#!/bin/bash\nexit 0\n' >"$d/t_fine.sh"
out=$(WC_TOP=$WC_TOP "$WC_TOP/test/run.sh" "$d/t_missing.sh" "$d/t_says.sh" "$d/t_fine.sh" 2>&1)
expect_has "the summary (output: $out)" "$out" "2 passed, 1 failed, 0 skipped"
expect_has "the missing command's test fails" "$out" "FAIL  t_missing"
expect_has "the reason is shown" "$out" "bash could not find a command the test runs"
expect_has "a test printing the words passes" "$out" "PASS  t_says"
echo "ok"
