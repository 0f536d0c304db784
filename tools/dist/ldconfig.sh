#!/bin/sh
# SPDX-License-Identifier: MIT
# make install's last step (DESTDIR empty, a real install): make the loader
# find LIBDIR/libwcache.so.0. LIBDIR among the loader's directories (what
# `ldconfig -v -N` lists, and /lib, /usr/lib): ldconfig, as root. Else a
# line says how the library is found instead: the Python package beside it
# (installed under the same prefix) or through pkg-config; an engine by its
# rpath. $LDCONFIG: the ldconfig to run (tests give a stand-in).
# Usage: tools/dist/ldconfig.sh LIBDIR PCDIR
set -u
libdir=$1 pcdir=$2
ldconfig=${LDCONFIG:-$(command -v ldconfig || echo /sbin/ldconfig)}
real=$(readlink -f "$libdir")
found=
for d in /lib /usr/lib $($ldconfig -v -N 2>/dev/null | sed -n 's|^\(/[^:]*\):.*|\1|p'); do
	if [ "$(readlink -f "$d")" = "$real" ]; then found=1; break; fi
done
if [ -z "$found" ]; then
	echo "make install: $libdir is not among the loader's directories (ldconfig -v -N), so" \
		"ldconfig was not run: the Python package finds libwcache.so.0 there when installed" \
		"under the same prefix, else through pkg-config (PKG_CONFIG_PATH=$pcdir) or WCACHE_LIB;" \
		"an engine links it with -Wl,-rpath,$libdir (or runs with LD_LIBRARY_PATH=$libdir)"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "make install: run ldconfig as root, so that the loader finds $libdir/libwcache.so.0"
	exit 0
fi
$ldconfig || { echo "make install: ldconfig failed (exit $?): the loader may not find $libdir/libwcache.so.0 until it runs" >&2; exit 1; }
echo "make install: ran ldconfig: the loader finds $libdir/libwcache.so.0"
