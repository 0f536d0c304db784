#!/usr/bin/env bash
# mkman.sh BINARY SECTION: prints BINARY's man page (roff) on stdout, made
# from its own --help (and each subcommand's, for the tools with commands:
# wcctl, wcbench) and --version, so the pages never drift from the tools:
# the --help texts are the one source. Layout of a --help text: a "usage:"
# paragraph (SYNOPSIS), a description paragraph (its first sentence is the
# NAME line), then options, examples and exit codes (kept as written).
# Exit 1 when the binary does not answer --help or --version.
set -euo pipefail
bin=$1 sec=$2
name=$(basename "$bin")
help=$("$bin" --help) || { echo "mkman.sh: $bin --help failed" >&2; exit 1; }
version=$("$bin" --version) || { echo "mkman.sh: $bin --version failed" >&2; exit 1; }
version=${version##* }

# roff-safe text: backslashes, leading dots and quotes, and minus signs
esc() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" -e 's/-/\\-/g'; }
# para N: the N-th blank-line separated paragraph of stdin (1-based)
para() { awk -v n="$1" 'BEGIN { RS = ""; ORS = "\n" } NR == n { print; exit }'; }
# rest N: stdin from paragraph N on
rest() { awk -v n="$1" 'BEGIN { RS = ""; ORS = "\n\n" } NR >= n { print }'; }

usage=$(printf '%s\n' "$help" | para 1 | sed '1s/^usage: //')
desc=$(printf '%s\n' "$help" | para 2 | tr '\n' ' ' | sed 's/  */ /g; s/ $//')
summary=$(printf '%s\n' "$desc" | sed 's/\([.:;]\) .*/\1/; s/[.:;]$//')
summary="$(printf '%s' "${summary:0:1}" | tr '[:upper:]' '[:lower:]')${summary:1}"

upper=$(printf '%s' "$name" | tr '[:lower:]' '[:upper:]')
printf '.\\" %s(%s), made by tools/dist/man/mkman.sh from `%s --help`; do not edit.\n' "$name" "$sec" "$name"
printf '.TH %s %s "" "wcache %s" "wcache manual"\n' "$upper" "$sec" "$version"
printf '.SH NAME\n%s \\- %s\n' "$name" "$(printf '%s\n' "$summary" | esc)"
printf '.SH SYNOPSIS\n.nf\n%s\n.fi\n' "$(printf '%s\n' "$usage" | esc)"
printf '.SH DESCRIPTION\n%s\n' "$(printf '%s\n' "$desc" | esc)"
printf '.PP\n.nf\n%s\n.fi\n' "$(printf '%s\n' "$help" | rest 3 | esc)"

# the commands of wcctl and wcbench, each with its own --help
cmds=$(printf '%s\n' "$help" | awk '/^commands:$/ { on = 1; next } on && /^$/ { exit }
	on && /^  [a-z][a-z-]*  / { print $1 }')
if [ -n "$cmds" ]; then
	printf '.SH COMMANDS\n'
	for c in $cmds; do
		h=$("$bin" "$c" --help) || { echo "mkman.sh: $bin $c --help failed" >&2; exit 1; }
		printf '.SS "%s %s"\n.nf\n%s\n.fi\n' "$name" "$c" "$(printf '%s\n' "$h" | esc)"
	done
fi
see=
for t in wcd.8 wcctl.8 wcattach.1 wcgen.1 wcbench.1; do
	[ "$t" = "$name.$sec" ] || see="$see${see:+,
}.BR ${t%.*} (${t##*.})"
done
printf '.SH SEE ALSO\n%s\n' "$see"
printf '.PP\nThe README.md of the wcache sources, and those of tools/wcd/, tools/wcctl/\nand tools/dist/ for the details.\n'
