# Shell test helpers: source from a test/*.sh. Exit 0 pass, 1 fail, 77 skip.
set -u
: "${BUILD:=build}"
: "${WC_TOP:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
BIN=$WC_TOP/$BUILD/bin
# waits on events, not the clock: a file, a text or line in it, a process's
# end (test/lib/bin/wc_waitfor.c says how)
WAITFOR=$WC_TOP/$BUILD/test/lib/bin/wc_waitfor
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "skip: $*"; exit 77; }
# expect_eq WHAT GOT WANT
expect_eq() { [ "$2" == "$3" ] || fail "$1: got '$2', want '$3'"; }
# expect_has WHAT HAYSTACK NEEDLE
expect_has() { [[ $2 == *"$3"* ]] || fail "$1: '$2' does not contain '$3'"; }
# expect_no WHAT HAYSTACK NEEDLE
expect_no() { [[ $2 != *"$3"* ]] || fail "$1: '$2' contains '$3'"; }
tmpdir() { local d; d=$(mktemp -d /tmp/wct.XXXXXX); echo "$d"; }
