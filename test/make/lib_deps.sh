#!/usr/bin/env bash
# The libraries' files depend one way (issue 28, item 4): proto/'s modules
# in the order of proto/README.md (base, wire, model, plan: a module
# includes and calls only itself and the modules before it), and within
# each proto module, gpu/, tools/libwcache, reactor/, tools/common, wcctl, wcbench
# and wcgen no circle among the files (tools/wcd: test/wcd/wcd_deps.sh),
# by #include (from the sources) and by call (an edge A -> B when A.o uses
# a symbol B.o defines, as test/wcd/wcd_deps.sh reads them; a call through a
# table of function pointers, gpu's backend table, is no edge).
#
# First it proves itself: two objects that call each other, and two headers
# that include each other, must be found.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/deps.sh"
command -v nm >/dev/null || skip "nm (binutils) is not installed"
command -v tsort >/dev/null || skip "tsort (coreutils) is not installed"

MODS="base wire model plan"

# sym_edges OBJ...: "A B sym" for every symbol A.o uses that B.o defines
sym_edges() {
	local o
	for o in "$@"; do echo "$(basename "$o" .o) $o"; done | nm_edges
}

# inc_edges FILE...: "A B" for every #include "B" of A that is one of FILE
inc_edges() {
	local f names=" "
	for f in "$@"; do names+="$(basename "$f") "; done
	for f in "$@"; do
		sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f" | while read -r h; do
			[[ $names == *" $h "* ]] && echo "$(basename "$f") $h"
		done
	done | sort -u
}

d=$(tmpdir)
trap 'rm -rf "$d"' EXIT
printf 'int b(int);\nint a(int x) { return x ? b(x - 1) : 0; }\n' >"$d/a.c"
printf 'int a(int);\nint b(int x) { return a(x); }\n' >"$d/b.c"
for f in a b; do cc -c -o "$d/$f.o" "$d/$f.c" || fail "cc $f.c"; done
sym_edges "$d/a.o" "$d/b.o" | circle planted >/dev/null && fail "a call circle a <-> b was not found"
printf '#include "y.h"\n' >"$d/x.h"
printf '#include "x.h"\n' >"$d/y.h"
inc_edges "$d/x.h" "$d/y.h" | circle planted >/dev/null && fail "an include circle x.h <-> y.h was not found"
sym_edges "$d/a.o" | circle alone >/dev/null || fail "one object alone is no circle"

top=$WC_TOP
obj=$WC_TOP/$BUILD/obj
# objects of DIR's sources (stale ones are left out)
objs() {
	local c
	for c in "$top/$1"/*.c; do
		if [ ! -f "$obj/$1/$(basename "$c" .c).o" ]; then
			# gpu/ builds either cuda*.c or nocuda.c (the Makefile's CUDA)
			case $1/$(basename "$c") in gpu/cuda*.c|gpu/nocuda.c) continue ;; esac
			fail "$obj/$1/$(basename "$c" .c).o is not built (make first)"
		fi
		echo "$obj/$1/$(basename "$c" .c).o"
	done
	for c in "$top/$1"/*.cu; do
		[ -f "$c" ] && [ -f "$obj/$1/$(basename "$c").o" ] && echo "$obj/$1/$(basename "$c").o"
	done
	return 0
}

# proto: every header a module's file includes is its own or an earlier
# module's; every call goes to its own module or an earlier one
declare -A mod_of rank
i=0
for m in $MODS; do
	[ -d "$top/proto/$m" ] || fail "proto/$m is missing (proto/README.md lists the modules)"
	rank[$m]=$i; i=$((i + 1))
	for f in "$top/proto/$m"/*.[ch]; do mod_of[$(basename "$f")]=$m; done
done
for f in "$top"/proto/*.[ch]; do
	[ -e "$f" ] && fail "proto/$(basename "$f") is outside the modules: move it into one of proto/{${MODS// /,}}"
done
n=0
for m in $MODS; do
	for f in "$top/proto/$m"/*.[ch]; do
		n=$((n + 1))
		while read -r h; do
			hm=${mod_of[$h]:-}
			[ -n "$hm" ] || continue
			[ "${rank[$hm]}" -le "${rank[$m]}" ] ||
				fail "proto/$m/$(basename "$f") includes $h of proto/$hm, a module after $m (proto/README.md has the order)"
		done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
	done
done
inc_edges "$top"/proto/*/*.[ch] | circle "proto includes" || fail "an include circle among proto/'s headers (above)"
all=()
for m in $MODS; do mapfile -t -O "${#all[@]}" all < <(objs "proto/$m"); done
while read -r a b s; do
	ma=${mod_of[$a.c]:-} mb=${mod_of[$b.c]:-}
	[ -n "$ma" ] && [ -n "$mb" ] || continue
	[ "${rank[$mb]}" -le "${rank[$ma]}" ] ||
		fail "proto/$ma/$a.c calls $s of proto/$mb/$b.c, a module after $ma (proto/README.md has the order)"
done < <(sym_edges "${all[@]}")
for m in $MODS; do
	mapfile -t o < <(objs "proto/$m")
	sym_edges "${o[@]}" | circle "proto/$m" || fail "a call circle among proto/$m's files (above)"
done

# gpu/, tools/libwcache and the tools beside wcd (whose folders
# test/wcd/wcd_deps.sh checks): no circle, by call and by include
for dir in gpu tools/libwcache reactor tools/common tools/wcctl tools/wcbench tools/wcgen tools/wcattach; do
	[ -d "$top/$dir" ] || fail "$dir is missing: fix this script's list of folders"
	# objs fails (a source not built) in its subshell: stop here then
	list=$(objs "$dir") || exit 1
	mapfile -t o <<<"$list"
	# one source is no circle; otherwise every source has its object
	srcs=("$top/$dir"/*.c)
	[ "${#srcs[@]}" -gt 1 ] || continue
	[ "${#o[@]}" -gt 1 ] || fail "no objects of $dir found (make first)"
	sym_edges "${o[@]}" | circle "$dir" || fail "a call circle among $dir's files (above): move the shared part down or call up through a table"
	inc_edges "$top/$dir"/*.[ch] | circle "$dir includes" || fail "an include circle among $dir's headers (above)"
done
echo "proto: $n files in 4 modules, one way; gpu, tools/libwcache, reactor and the other tools: no circle (tools/wcd: test/wcd/wcd_deps.sh)"
