#!/usr/bin/env bash
# A plain `make` on a machine without the build packages (issue 26): before
# anything is compiled, one message names the Debian packages whose headers
# the compiler does not find and says to run `make deps`; with them all
# there the check is silent. The machine without them is a compiler that
# sees only an include directory of our own (-nostdinc) holding jansson.h
# and xxhash.h: liburing-dev and libdlpack-dev are then missing.
. "$(dirname "$0")/../lib/lib.sh"
command -v make >/dev/null || skip "no make"
T=$(tmpdir)
trap 'rm -rf "$T"' EXIT
# not the outer make's -j, jobserver or variables
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES SANITIZE
mk() { make -C "$WC_TOP" --no-print-directory T= "$@"; }

out=$(mk -s check-deps 2>&1); rc=$?
expect_eq "check-deps on this machine (output: $out)" "$rc" 0
expect_eq "check-deps on this machine says nothing" "$out" ""

mkdir "$T/inc"
touch "$T/inc/jansson.h" "$T/inc/xxhash.h"
printf '#!/bin/sh\nexec cc -nostdinc -isystem "%s" "$@"\n' "$T/inc" >"$T/cc"
chmod +x "$T/cc"
# a plain make (all) into a build directory of its own: nothing compiled
out=$(mk all CC="$T/cc" BUILD="$T/build" 2>&1); rc=$?
[ "$rc" -ne 0 ] || fail "make with liburing and dlpack missing exited 0: $out"
expect_has "make without liburing, dlpack" "$out" "make: missing build packages: liburing-dev libdlpack-dev ($T/cc finds no header of theirs); run 'make deps' as root"
expect_no "make without liburing, dlpack" "$out" "libjansson-dev"
expect_no "make without liburing, dlpack" "$out" "libxxhash-dev"
[ ! -e "$T/build" ] || fail "make compiled something before the check: $(ls -R "$T/build" | head)"

# no compiler at all
out=$(mk all CC="$T/nosuch-cc" BUILD="$T/build" 2>&1); rc=$?
[ "$rc" -ne 0 ] || fail "make without a compiler exited 0: $out"
expect_has "make without a compiler" "$out" "the C compiler '$T/nosuch-cc' is not found: run 'make deps'"
echo ok
