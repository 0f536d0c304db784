#!/usr/bin/env bash
# An engine builds against wcache.h and libwcache.so alone: the header
# compiles as C99 and C++ with only libc headers, the shared library exports
# exactly the wc_ API (its insides stay local), needs only libc and jansson
# (no liburing, no reactor inside), and a program linked with -lwcache runs
# and gets the library's message for a missing daemon.
. "$(dirname "$0")/../lib/lib.sh"
so=$WC_TOP/$BUILD/lib/libwcache.so
[ -f "$so" ] || fail "$so is not built"
d=$(tmpdir)
trap 'rm -rf "$d"' EXIT
cp "$WC_TOP/tools/libwcache/wcache.h" "$d/"
cat >"$d/engine.c" <<'C'
#include <stdio.h>
#include <string.h>
#include "wcache.h"
int main(int argc, char **argv)
{
	struct wc_connect_opts o = { .device = "host:engine", .runtime_dir = argv[1] };
	struct wc_conn *c;
	struct wc_error e;
	int r = wc_connect(&o, &c, &e);

	printf("api %d rc %d code %d: %s\n", wc_api_version(), r, e.code, e.msg);
	return argc == 2 && r < 0 && e.code > 0 && strlen(e.msg) > 0 ? 0 : 1;
}
C
# a sanitizer build's library needs the same runtime in the program
san=
case $BUILD in build-*) san="-fsanitize=$(echo "${BUILD#build-}" | tr - ,)" ;; esac
cc -std=c99 -Wall -Wextra -Werror -pedantic $san -I"$d" -o "$d/engine" "$d/engine.c" \
	-L"$(dirname "$so")" -lwcache -Wl,-rpath,"$(dirname "$so")" ||
	fail "an engine does not build against wcache.h + libwcache.so"
if command -v c++ >/dev/null; then
	c++ -x c++ -std=c++11 -Wall -Werror -fsyntax-only -I"$d" "$d/engine.c" ||
		fail "wcache.h does not compile as C++"
fi
# libwcache.so has the soname libwcache.so.0: the build has that link beside
# it, so the engine runs from the rpath alone (issue 15, item 9)
[ -L "$so.0" ] && [ "$(readlink "$so.0")" = libwcache.so ] ||
	fail "$so.0 is not a link to libwcache.so"
out=$(env -u LD_LIBRARY_PATH "$d/engine" "$d/run" 2>&1) || fail "engine: $out"
expect_has "engine run" "$out" "api 2 rc -2 code 2: no wcache daemon for host:engine"

# it needs libc and jansson only (plus a sanitizer build's runtimes): no
# liburing, and no reactor or io_uring code inside
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' |
	grep -Ev '^(libc\.so\.6|ld-linux-x86-64\.so\.2|libjansson\.so\.4|libm\.so\.6|libasan\.so\.[0-9]+|libubsan\.so\.[0-9]+)$')
[ -z "$needed" ] || fail "libwcache.so needs [$(echo $needed)] beyond libc and jansson: an engine would have to install them"
inside=$(nm "$so" | awk '$3 ~ /^(rx_|rx__|io_uring_|__io_uring)/ {print $3}' | head -5)
[ -z "$inside" ] || fail "libwcache.so carries reactor/io_uring code [$(echo $inside)]: the client library uses none of it"

exported=$(nm -D --defined-only "$so" | awk '$2 == "T" || $2 == "D" || $2 == "B" {print $3}' |
	sed 's/@.*//' | sort -u)
api=$(grep -o '\bwc_[a-z_0-9]*(' "$WC_TOP/tools/libwcache/wcache.h" | tr -d '(' | sort -u)
[ "$exported" == "$api" ] || fail "libwcache.so exports [$(echo $exported)] but wcache.h declares [$(echo $api)]: list every API function in tools/libwcache/libwcache.map"
echo ok
