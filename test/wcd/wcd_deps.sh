#!/usr/bin/env bash
# tools/wcd's files depend one way (tools/wcd/wcd.h lists them top to
# bottom, and must list every file: checked too): a file calls the files
# below it and never back, so that each can
# be read, changed and tested with only what is under it. This fails on a
# circle. An edge A -> B means A.o uses a symbol that B.o defines (nm), so
# calls through the hooks main.c registers (server_hooks) are no edge.
#
# First it proves itself: two objects that call each other must be found.
. "$(dirname "$0")/../lib/lib.sh"
command -v nm >/dev/null || skip "nm (binutils) is not installed"
command -v tsort >/dev/null || skip "tsort (coreutils) is not installed"

# edges DIR [SRCDIR]: "A B sym" for every symbol A.o uses that B.o defines
# (only the objects of SRCDIR's .c files when given: stale ones are left out)
edges() {
	local dir=$1 src=${2:-} o objs=()
	if [ -n "$src" ]; then
		for o in "$src"/*.c; do objs+=("$dir/$(basename "$o" .c).o"); done
	else
		objs=("$dir"/*.o)
	fi
	for o in "${objs[@]}"; do
		nm --defined-only "$o" | awk -v f="$(basename "$o" .o)" \
			'$2 ~ /^[TDBRC]$/ { print "D", f, $3 }'
		nm -u "$o" | awk -v f="$(basename "$o" .o)" '{ print "U", f, $2 }'
	done | awk '$1 == "D" { def[$3] = $2; next }
		    { use[NR] = $2 " " $3 }
		    END { for (i in use) { split(use[i], a, " ");
			  if (a[2] in def && def[a[2]] != a[1])
				print a[1], def[a[2]], a[2] } }' | sort -u
}

# check DIR [SRCDIR]: 0 when the files form no circle; else prints it, returns 1
check() {
	local e out
	e=$(edges "$1" "${2:-}")
	[ -n "$e" ] || { echo "no edges found in $1"; return 2; }
	if ! out=$(awk '{ print $1, $2 }' <<<"$e" | sort -u | tsort 2>&1 >/dev/null) ||
	   [ -n "$out" ]; then
		echo "$out"
		# the calls among the files of the loop (tsort names them)
		local loop
		loop=$(sed -n 's/^tsort: \([A-Za-z0-9_]*\)$/\1/p' <<<"$out" | tr '\n' ' ')
		echo "the calls among them (caller callee symbol):"
		awk -v l=" $loop" 'index(l, " " $1 " ") && index(l, " " $2 " ")' <<<"$e"
		return 1
	fi
	return 0
}

d=$(tmpdir)
trap 'rm -rf "$d"' EXIT
printf 'int b(int);\nint a(int x) { return x ? b(x - 1) : 0; }\n' >"$d/a.c"
printf 'int a(int);\nint b(int x) { return a(x); }\n' >"$d/b.c"
printf 'int a(int);\nint c(void) { return a(1); }\n' >"$d/c.c"
for f in a b c; do cc -c -o "$d/$f.o" "$d/$f.c" || fail "cc $f.c"; done
check "$d" >"$d/out" && fail "a circle a <-> b was not found"
grep -q "loop" "$d/out" || fail "no loop named: $(cat "$d/out")"
rm "$d/b.o"
check "$d" >"$d/out" || fail "c -> a alone is no circle: $(cat "$d/out")"

obj=$WC_TOP/$BUILD/obj/tools/wcd
src=$WC_TOP/tools/wcd
# wcd.h's file map names every file of the folder
map=$(sed -n '1,/^#ifndef WCD_H/p' "$src/wcd.h")
for f in "$src"/*.c "$src"/*.h; do
	b=$(basename "$f")
	grep -qE "(^| |\()$b([ ),]|$)" <<<"$map" ||
		fail "tools/wcd/$b is not in the file map at the top of tools/wcd/wcd.h: add a line saying what it does"
done
n=0
for c in "$src"/*.c; do
	o=$obj/$(basename "$c" .c).o
	[ -f "$o" ] || fail "$o is not built (make first)"
	n=$((n + 1))
done
check "$obj" "$src" || fail "a circle among tools/wcd's files (above): move the shared part down or call up through a hook"
echo "tools/wcd: $(edges "$obj" "$src" | awk '{ print $1, $2 }' | sort -u | wc -l) edges among $n files, no circle"
