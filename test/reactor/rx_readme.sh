#!/usr/bin/env bash
# reactor/README.md's "Embedding the reactor" example is test/reactor/rx_embed.c's
# marked region, byte for byte, so the two cannot drift apart.
. "$(dirname "$0")/../lib/lib.sh"
readme=$WC_TOP/reactor/README.md
src=$WC_TOP/test/reactor/rx_embed.c
want=$(sed -n '\#^/\* --- README: embedding --- \*/$#,\#^/\* --- end --- \*/$#p' "$src" | sed '1d;$d')
got=$(awk '/^## Embedding the reactor$/ {s=1; next} s && /^## / {exit}
	s && /^```c$/ {c=1; next} c && /^```$/ {exit} c {print}' "$readme")
[ -n "$want" ] || fail "no marked region in test/reactor/rx_embed.c"
[ -n "$got" ] || fail "no \`\`\`c block under '## Embedding the reactor' in reactor/README.md"
[ "$got" == "$want" ] || fail "reactor/README.md example differs from test/reactor/rx_embed.c: $(diff <(echo "$want") <(echo "$got") | head -20)"
echo "reactor/README.md example matches test/reactor/rx_embed.c ($(echo "$want" | wc -l) lines)"
