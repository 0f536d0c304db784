#!/usr/bin/env bash
# wcd's fault points (the tests' hooks) are one table, and the docs cannot
# drift from it: tools/wcd/daemon/fault.c's entries, F(POINT, "NAME",
# TYPE, "what it does"), must be tools/wcd/README.md's "Fault points"
# table, row for row; every point must be read somewhere in tools/wcd
# (FAULT_POINT) and set by some test or bench script (a hook nothing uses
# is dead); every hook-like name (WCD_TEST_*, WCD_HANDOVER_*) that test/,
# bench/ or tools/wcd mention must be in the table (a typo, or a hook gone
# from the code, would leave a test that tests nothing); and no getenv is
# left in tools/wcd outside fault.c. First it proves itself: a README with
# a row missing, and a test that sets an unknown hook, must fail.
. "$(dirname "$0")/../lib/lib.sh"
cd "$WC_TOP" || fail "cd $WC_TOP"
table=tools/wcd/daemon/fault.c
readme=tools/wcd/README.md

# the table's rows as the README writes them: | `NAME` | type | what |
rows_src() {
	perl -0777 -ne 'while (/\bF\((\w+), "(\w+)", (FLAG|NUM|STR),\s*"((?:[^"\\]|\\.)*)"\)/g) {
		my ($n, $t, $w) = ($2, lc($3), $4);
		$t = { flag => "flag", num => "number", str => "string" }->{$t};
		print "| `$n` | $t | $w |\n";
	}' "$table"
}
# the README's rows: the table after the "## Fault points" heading
rows_doc() {
	sed -n '/^## Fault points/,/^## /p' "$1" | grep '^| `WCD_'
}
# check_doc README: 0 when its rows are the table's
check_doc() {
	local want got
	want=$(rows_src) got=$(rows_doc "$1")
	[ "$got" = "$want" ] && return 0
	echo "$1's \"Fault points\" table is not $table's; the rows it should have:"
	echo "$want"
	echo "the difference (< README, > fault.c):"
	diff <(echo "$got") <(echo "$want")
	return 1
}
# the hook-like names that files mention (not this file's planted one, not
# a header's guard)
hooks_in() {
	grep -rhoE --exclude="$(basename "$0")" \
		'\bWCD_(TEST_[A-Z0-9_]*[A-Z0-9]|HANDOVER_[A-Z_]*[A-Z])\b' "$@" |
		grep -v '_H$' | sort -u
}
# check_known FILES...: 0 when every hook-like name they mention is a point
check_known() {
	local names n bad=
	names=$(grep -oE '"WCD_[A-Z0-9_]+"' "$table" | tr -d '"')
	for n in $(hooks_in "$@"); do
		grep -qx "$n" <<<"$names" || bad="$bad $n"
	done
	[ -z "$bad" ] && return 0
	echo "not in $table's table:$bad: add the point there (and to $readme), or fix the name"
	return 1
}

n=$(rows_src | wc -l)
[ "$n" -ge 30 ] || fail "found $n entries in $table (F(POINT, \"NAME\", TYPE, \"what\")): the test no longer reads its form"
d=$(tmpdir)
trap 'rm -rf "$d"' EXIT
grep -v '^| `WCD_TEST_PACK`' "$readme" >"$d/README.md"
check_doc "$d/README.md" >"$d/out" && fail "a README without WCD_TEST_PACK's row passed"
grep -q "WCD_TEST_PACK" "$d/out" || fail "the missing row is not named: $(cat "$d/out")"
printf 'setenv("WCD_TEST_NO_SUCH_HOOK", "1", 1);\n' >"$d/t.c"
check_known "$d/t.c" >"$d/out" && fail "an unknown hook set by a test passed"
grep -q "WCD_TEST_NO_SUCH_HOOK" "$d/out" || fail "the unknown hook is not named: $(cat "$d/out")"

check_doc "$readme" || fail "$readme and $table disagree (above)"
check_known test bench tools/wcd || fail "a hook name is not a fault point (above)"
for name in $(grep -oE '"WCD_[A-Z0-9_]+"' "$table" | tr -d '"'); do
	p=$(sed -n "s/.*F(\([A-Z0-9_]*\), \"$name\".*/\1/p" "$table")
	grep -rqw --include='*.c' "FAULT_$p" tools/wcd --exclude=fault.c ||
		fail "FAULT_$p ($name) is read nowhere in tools/wcd: remove it from $table"
	grep -rqw "$name" test bench --exclude="$(basename "$0")" ||
		fail "$name is set by no test or bench script: test it, or remove the point"
done
left=$(grep -rn '\bgetenv(' --include='*.c' tools/wcd | grep -v "^$table:" || true)
[ -z "$left" ] || fail "getenv outside $table (a hook belongs in its table, read through daemon/fault.h): $left"
echo "ok: $n fault points"
