# Sourced by the dependency checks (test/wcd/wcd_deps.sh,
# test/make/lib_deps.sh): edges between files read from their objects, and
# tsort's verdict on them.

# nm_edges: reads "NODE OBJECT" lines; prints "A B symbol" for every symbol
# A's object uses that B's object defines (an edge A -> B; a call through a
# table of function pointers is none)
nm_edges() {
	local n o
	while read -r n o; do
		nm --defined-only "$o" | awk -v f="$n" '$2 ~ /^[TDBRC]$/ { print "D", f, $3 }'
		nm -u "$o" | awk -v f="$n" '{ print "U", f, $2 }'
	done | awk '$1 == "D" { def[$3] = $2; next }
		    { use[NR] = $2 " " $3 }
		    END { for (i in use) { split(use[i], a, " ");
			  if (a[2] in def && def[a[2]] != a[1])
				print a[1], def[a[2]], a[2] } }' | sort -u
}

# circle WHAT: reads "A B [why]" edges; 0 when they form no circle, else
# prints the loop tsort names and the edges among its members, returns 1
circle() {
	local what=$1 e out loop
	e=$(awk '$1 != $2' | sort -u)
	[ -n "$e" ] || return 0
	out=$(awk '{ print $1, $2 }' <<<"$e" | sort -u | tsort 2>&1 >/dev/null) || true
	[ -z "$out" ] && return 0
	echo "$what: $out"
	loop=$(sed -n 's/^tsort: \([A-Za-z0-9_./-]*\)$/\1/p' <<<"$out" | tr '\n' ' ')
	echo "the edges among them (from to symbol-or-#include):"
	awk -v l=" $loop" 'index(l, " " $1 " ") && index(l, " " $2 " ")' <<<"$e"
	return 1
}
