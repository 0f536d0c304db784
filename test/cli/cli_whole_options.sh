#!/usr/bin/env bash
# Long options are taken whole (issue 26): GNU getopt_long takes any unique
# prefix, so "wcctl update --all" was --allow-layout-change. In every tool
# and subcommand, each option its --help lists, given without its last
# letter, is a usage error (exit 2) that names the whole option and runs
# nothing; the whole names, with "=VALUE" or a separate value, still work.
source "$(dirname "$0")/../lib/lib.sh"
for b in wcd wcctl wcattach wcgen wcbench; do
	[ -x "$BIN/$b" ] || skip "$b not built"
done
T=$(tmpdir)
trap 'rm -rf "$T"' EXIT
export WCACHE_SOCKET_TEMPLATE=$T/run/{device}

subs() { "$BIN/$1" --help | awk '/^commands:/ { f = 1; next } f && /^  [a-z]/ { print $1 } f && /^$/ { exit }'; }
cmds=("wcd" "wcattach" "wcgen")
for c in $(subs wcctl); do cmds+=("wcctl $c"); done
for c in $(subs wcbench); do cmds+=("wcbench $c"); done
[ "${#cmds[@]}" -ge 19 ] || fail "only ${#cmds[@]} commands found: ${cmds[*]}"

checked=0
for c in "${cmds[@]}"; do
	read -r -a argv <<<"$c"
	bin=$BIN/${argv[0]}
	sub=("${argv[@]:1}")
	# the options the help describes: lines "  --name ..." or "  -x, --name"
	"$bin" "${sub[@]}" --help >"$T/help" 2>&1
	mapfile -t opts < <(sed -nE 's/^ {2,}(-[a-zA-Z], )?--([a-z][a-z0-9-]+).*/\2/p' "$T/help" | sort -u)
	[ "${#opts[@]}" -ge 1 ] || fail "'$c --help' lists no option"
	mapfile -t named < <(grep -oE -- '--[a-z][a-z0-9-]+' "$T/help" | sed 's/^--//' | sort -u)
	for o in "${opts[@]}"; do
		short=${o%?}
		[ "${#short}" -ge 2 ] || continue
		# a prefix of another option is ambiguous, not an abbreviation
		amb=0
		for p in "${named[@]}"; do
			[ "$p" != "$o" ] && [[ $p == "$short"* ]] && amb=1
		done
		[ "$amb" = 1 ] && continue
		out=$("$bin" "${sub[@]}" "--$short" x 2>&1); rc=$?
		expect_eq "'$c --$short x' exit (output: $out)" "$rc" 2
		# a prefix of two options the help does not both list (sleep's
		# --al: --all, and update's --allow-layout-change of the shared
		# table) is getopt's ambiguity, a usage error naming both
		[[ $out == *"option '--$short' is ambiguous; possibilities:"*"'--$o'"* ]] ||
			expect_has "'$c --$short x'" "$out" "'--$short' is not an option (options are given whole, not abbreviated): did you mean --$o?"
		checked=$((checked + 1))
	done
done
[ "$checked" -ge 150 ] || fail "only $checked abbreviations checked"

# the cases of the issue: update --all without --all support would have
# been --allow-layout-change; sleep's --all named update's option
out=$("$BIN/wcctl" update --device host:0 --allow 2>&1); rc=$?
expect_eq "update --allow" "$rc" 2
expect_has "update --allow" "$out" "did you mean --allow-layout-change?"
# "--name=VALUE": the text before '=' is compared
out=$("$BIN/wcctl" start --model-pa=/m --tp-size 1 --backend host --dry-run 2>&1); rc=$?
expect_eq "start --model-pa=/m" "$rc" 2
expect_has "start --model-pa=/m" "$out" "'--model-pa' is not an option (options are given whole, not abbreviated): did you mean --model-path?"
expect_no "start --model-pa=/m" "$out" "wcd --model"
# after a word that is no option (getopt permutes it to the end)
out=$("$BIN/wcgen" tiny --ou "$T/g" 2>&1); rc=$?
expect_eq "wcgen tiny --ou" "$rc" 2
[ ! -e "$T/g" ] || fail "wcgen tiny --ou wrote $T/g"

# bench/host/soak (no --help of its own)
if [ -x "$WC_TOP/$BUILD/bench/soak" ]; then
	out=$("$WC_TOP/$BUILD/bench/soak" --sock x 2>&1); rc=$?
	expect_eq "soak --sock x" "$rc" 2
	expect_has "soak --sock x" "$out" "did you mean --socket?"
fi

# whole names work: =VALUE, a separate value, and start's documented --tp
out=$("$BIN/wcctl" start --model=/m --tp 2 --backend=host --dry-run 2>&1); rc=$?
expect_eq "start --model=/m --tp 2 --dry-run (output: $out)" "$rc" 0
expect_has "start --tp 2" "$out" "--tp-size 2"
out=$("$BIN/wcctl" start --model-path /m --tensor-parallel-size 1 --backend host --dry-run 2>&1); rc=$?
expect_eq "start --model-path --tensor-parallel-size (output: $out)" "$rc" 0
out=$("$BIN/wcd" --model "$T/none" --tp-size 1 --tp-rank 0 2>&1); rc=$?
expect_no "wcd with whole names" "$out" "is not an option"
# wcd's --tp (SGLang's, as the README says) was ambiguous (--tp-size or
# --tp-rank): it is --tp-size; the rank check shows it was taken
out=$("$BIN/wcd" --model "$T/none" --tp 2 --tp-rank 2 2>&1); rc=$?
expect_eq "wcd --tp 2 --tp-rank 2 (output: $out)" "$rc" 2
expect_has "wcd --tp 2 --tp-rank 2" "$out" "--tp-rank must be below --tp-size"
echo "ok: $checked abbreviations refused"
