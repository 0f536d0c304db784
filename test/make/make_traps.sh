#!/usr/bin/env bash
# The Makefile's traps (issue 12): in a copy of the tree and of its build
# (so only what the test breaks is compiled again),
#   - a test whose source no longer compiles is reported failed ("not
#     built") by `make test T=...`, never run from its old binary;
#   - a library source that no longer compiles fails every test and tool
#     linked with it the same way;
#   - a plain `make test` stops at a build error;
#   - `make CFLAGS=-O0` and `make CPPFLAGS=...` keep the flags the code needs.
. "$(dirname "$0")/../lib/lib.sh"
[ -n "${WC_MAKE_TRAPS:-}" ] && skip "already inside make_traps (no recursion)"
[ -d "$WC_TOP/$BUILD/test" ] || skip "$BUILD is not built"
san=${BUILD#build}; san=${san#-}; san=${san//-/,}
W=$(tmpdir)
trap 'rm -rf "$W"' EXIT
src=$W/src
mkdir "$src"
tar -C "$WC_TOP" --exclude=./.git --exclude='./build' --exclude='./build-*' \
	--exclude='./.dev' -cf - . | tar -C "$src" -xf - || fail "copying the tree"
cp -a "$WC_TOP/$BUILD" "$src/$BUILD" || fail "copying $BUILD"
export WC_MAKE_TRAPS=1
# Not the outer make's T=, -j or jobserver.
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES T SANITIZE
mk() { make -C "$src" --no-print-directory SANITIZE="$san" "$@"; }

# 0. The copy is up to date: a test passes from it as it is.
out=$(mk test T=rx_timer 2>&1); rc=$?
expect_eq "make test T=rx_timer in the untouched copy (output: $out)" "$rc" 0
expect_has "untouched copy" "$out" "PASS  rx_timer"

# 1. A broken test source.
echo '#error broken on purpose by test/make/make_traps.sh' >>"$src/test/reactor/rx_timer.c"
out=$(mk test T=rx_timer 2>&1); rc=$?
[ "$rc" -ne 0 ] || fail "make test T=rx_timer with a compile error exited 0: $out"
expect_has "broken test" "$out" "broken on purpose"
expect_has "broken test" "$out" "FAIL  rx_timer                     not built (the build failed"
expect_has "broken test" "$out" "0 passed, 1 failed, 0 skipped"
[[ $out != *"PASS  rx_timer"* ]] || fail "the old rx_timer binary ran: $out"
[ ! -e "$src/$BUILD/test/rx_timer" ] || fail "the old rx_timer binary was left in place"

cp "$WC_TOP/test/reactor/rx_timer.c" "$src/test/reactor/rx_timer.c"

# 2. A broken library source: everything linked with it is stale.
echo '#error broken on purpose by test/make/make_traps.sh' >>"$src/proto/base/hash.c"
out=$(mk test T=rx_timer 2>&1); rc=$?
[ "$rc" -ne 0 ] || fail "make test T=rx_timer with a broken library exited 0: $out"
expect_has "broken library" "$out" "FAIL  rx_timer                     not built (the build failed"
expect_has "broken library" "$out" "FAIL  $BUILD/bin/wcd"
[[ $out != *"PASS"* ]] || fail "an old binary ran after a library failed to build: $out"

# 3. A plain make test stops at the error, before running anything (the
# libraries come first, so this compiles little else).
out=$(mk test 2>&1); rc=$?
[ "$rc" -ne 0 ] || fail "a plain make test with a compile error exited 0"
expect_has "plain make test" "$out" "broken on purpose"
[[ $out != *" passed, "* ]] || fail "a plain make test ran tests after a build error: $out"
cp "$WC_TOP/proto/base/hash.c" "$src/proto/base/hash.c"

# 4. The user's flags add to the required ones.
o=$BUILD/obj/test/reactor/rx_timer.o
cmd=$(mk -n -B CFLAGS=-O0 CPPFLAGS=-DWC_TRAPS "$o" 2>&1)
for f in -std=gnu11 -fPIC -pthread -Wall -Wextra -O0 -DWC_TRAPS -D_GNU_SOURCE -Ireactor; do
	[[ " $cmd " == *" $f "* ]] || fail "make CFLAGS=-O0 CPPFLAGS=-DWC_TRAPS: '$f' is missing from: $cmd"
done
[[ " $cmd " == *" -Werror "* ]] || fail "make CFLAGS=-O0 dropped -Werror: $cmd"
cmd=$(mk -n -B CFLAGS=-O0 WERROR=0 "$o" 2>&1)
[[ " $cmd " != *" -Werror "* ]] || fail "WERROR=0 kept -Werror: $cmd"
echo ok
