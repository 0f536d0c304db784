#!/usr/bin/env bash
# tools/wcd depends one way: its folders (tools/wcd/wcd.h maps them top to
# bottom), and the files inside each folder, call and include the ones
# below them and never back, so that each can be read, changed and tested
# with only what is under it. This fails on a circle, among the files or
# among the folders. An edge A -> B means that A's object uses a symbol
# B's object defines (nm), or that A's .c or .h includes B's header
# (#include "folder/b.h"): a file and its header of the same name are one
# node, so inline header code and the structs a header shares count too.
# Calls through the hooks main.c registers (server_hooks, d->ready_write)
# are no edge.
#
# It also fails on a file its folder's header does not name (each folder
# has one header whose opening comment says "<folder>/ folder" and lists
# its files; wcd.h names the folders).
#
# First it proves itself: circles it plants (of calls between two files,
# of includes between two folders) must be found.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/deps.sh"
command -v nm >/dev/null || skip "nm (binutils) is not installed"
command -v tsort >/dev/null || skip "tsort (coreutils) is not installed"

# node SRC PATH: a file's node, its path under SRC without .c/.h
node() { local p=${2#"$1"/}; echo "${p%.[ch]}"; }

# edges SRC OBJ: "A B why" for every symbol A.o uses that B.o defines and
# every header of SRC that A includes (OBJ: SRC's objects, one per .c)
edges() {
	local src=$1 obj=$2 f n inc
	for f in $(find "$src" -name '*.c' | sort); do
		n=$(node "$src" "$f")
		echo "$n $obj/$n.o"
	done | nm_edges
	for f in $(find "$src" -name '*.[ch]' | sort); do
		n=$(node "$src" "$f")
		for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
			# the folder-named form, or a header beside the file
			if [ -f "$src/$inc" ]; then
				inc=$(node "$src" "$src/$inc")
			elif [ -f "$(dirname "$f")/$inc" ]; then
				inc=$(node "$src" "$(dirname "$f")/$inc")
			else
				continue
			fi
			[ "$inc" = "$n" ] || echo "$n $inc #include"
		done
	done
}

folder() { case $1 in */*) echo "${1%%/*}" ;; *) echo . ;; esac; }

# check_edges EDGES: 0 when neither the files nor the folders of the
# "A B why" edges form a circle
check_edges() {
	local e=$1 fe a b w
	[ -n "$e" ] || { echo "no edges found"; return 2; }
	circle files <<<"$e" || return 1
	fe=$(while read -r a b w; do
		a=$(folder "$a") b=$(folder "$b")
		[ "$a" = "$b" ] || echo "$a $b $w"
	done <<<"$e")
	[ -z "$fe" ] || circle folders <<<"$fe" || return 1
	return 0
}

# check SRC OBJ: check_edges of SRC's edges
check() { check_edges "$(edges "$1" "$2")"; }

d=$(tmpdir)
trap 'rm -rf "$d"' EXIT
mkdir -p "$d/s/x" "$d/s/y" "$d/o/x" "$d/o/y"
printf 'int b(int);\nint a(int x) { return x ? b(x - 1) : 0; }\n' >"$d/s/x/a.c"
printf 'int a(int);\nint b(int x) { return a(x); }\n' >"$d/s/x/b.c"
printf 'int a(int);\nint c(void) { return a(1); }\n' >"$d/s/y/c.c"
build() { for f in x/a x/b y/c; do cc -c -o "$d/o/$f.o" "$d/s/$f.c" || fail "cc $f.c"; done; }
build
check "$d/s" "$d/o" >"$d/out" && fail "a circle a <-> b was not found"
grep -q "loop" "$d/out" || fail "no loop named: $(cat "$d/out")"
printf 'int b(int x) { return x; }\n' >"$d/s/x/b.c"
build
check "$d/s" "$d/o" >"$d/out" || fail "y/c -> x/a alone is no circle: $(cat "$d/out")"
# folder y calls down into x; x/b.h including y/c.h is a circle of folders
printf '#include "y/c.h"\n' >"$d/s/x/b.h"
printf '\n' >"$d/s/y/c.h"
check "$d/s" "$d/o" >"$d/out" && fail "a circle of folders x <-> y (an #include) was not found"
grep -q "#include" "$d/out" || fail "the include is not named: $(cat "$d/out")"

src=$WC_TOP/tools/wcd
obj=$WC_TOP/$BUILD/obj/tools/wcd
n=0
for c in $(find "$src" -name '*.c'); do
	o=$obj/$(node "$src" "$c").o
	[ -f "$o" ] || fail "$o is not built (make first)"
	n=$((n + 1))
done

# the maps: wcd.h names every folder and the top's files; each folder's
# header (the one that says "<folder>/ folder") names the folder's files
named() { # MAPFILE NAME
	sed -n '1,/^#ifndef /p' "$1" | grep -qE "(^| |\()$2([ ),]|$)"
}
for f in "$src"/*.c "$src"/*.h; do
	named "$src/wcd.h" "$(basename "$f")" ||
		fail "tools/wcd/$(basename "$f") is not in the map at the top of tools/wcd/wcd.h: add a line saying what it does"
done
for dir in "$src"/*/; do
	dir=${dir%/}
	b=$(basename "$dir")
	named "$src/wcd.h" "$b/" ||
		fail "tools/wcd/$b/ is not in the map at the top of tools/wcd/wcd.h: add a line saying what it holds"
	map=
	for h in "$dir"/*.h; do
		sed -n '1,/^#ifndef /p' "$h" | grep -q "$b/ folder" && { map=$h; break; }
	done
	[ -n "$map" ] || fail "no header of tools/wcd/$b/ says \"$b/ folder\" and lists its files"
	for f in "$dir"/*.[ch]; do
		[ "$f" = "$map" ] && continue
		named "$map" "$(basename "$f")" ||
			fail "tools/wcd/$b/$(basename "$f") is not in the map at the top of ${map#"$WC_TOP"/}: add a line saying what it does"
	done
done

e=$(edges "$src" "$obj")
check_edges "$e" || fail "a circle in tools/wcd (above): move the shared part down or call up through a hook"
echo "tools/wcd: $(awk '{ print $1, $2 }' <<<"$e" | sort -u | wc -l) edges among $n files," \
	"$(find "$src" -mindepth 1 -type d | wc -l) folders, no circle"
