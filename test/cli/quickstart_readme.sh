#!/usr/bin/env bash
# README.md's quick start without a GPU runs as written: its ```sh block
# under "**Without a GPU**", with build/bin/ as this build's, /tmp/tiny in
# a directory of this test's, and the default runtime directory
# ($XDG_RUNTIME_DIR/wcache) in it too. Every line must succeed; the status
# must list both ranks ready and the attach must verify.
. "$(dirname "$0")/../lib/lib.sh"
for b in wcgen wcctl wcd wcattach; do [ -x "$BIN/$b" ] || skip "$b not built"; done
T=$(tmpdir)
export XDG_RUNTIME_DIR=$T/xdg
unset WCACHE_SOCKET_TEMPLATE
mkdir -m 0700 "$XDG_RUNTIME_DIR"
trap '"$BIN/wcctl" stop --all >/dev/null 2>&1; rm -rf "$T"' EXIT
block=$(awk '/^\*\*Without a GPU\*\*/ {s=1; next} s && /^```sh$/ {c=1; next}
	c && /^```$/ {exit} c {print}' "$WC_TOP/README.md")
[ -n "$block" ] || fail "no \`\`\`sh block after '**Without a GPU**' in README.md"
expect_has "the quick start" "$block" "--backend host"
n=0
while IFS= read -r line; do
	cmd=${line%%#*}
	case $cmd in make*) continue ;; esac
	[ -n "${cmd// /}" ] || continue
	cmd=${cmd//build\/bin\//$BIN/}
	cmd=${cmd//\/tmp\/tiny/$T/tiny}
	out=$(eval "$cmd" 2>&1) || fail "README quick start: '$line' failed: $out"
	case $line in
	*"wcctl status"*) expect_eq "ranks ready" "$(grep -cE '^host-[01] .* ready ' <<<"$out")" 2 ;;
	*wcattach*) expect_has "attach" "$out" "all hashes match" ;;
	esac
	n=$((n + 1))
done <<<"$block"
[ "$n" -ge 5 ] || fail "only $n commands run from the quick start"
echo "README quick start (host backend): $n commands ran"
