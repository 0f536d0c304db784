#!/usr/bin/env bash
# Layouts that broke the daemon (issue 26, item 4), through the tools:
#  - 'view v.{L} = G G G G' (one part four times): wcd crashed on it (a
#    read past the pool); wcd and wcctl inspect refuse it, naming the line;
#  - a view in a --rules file named like a checkpoint tensor (every attach
#    failed on the doubled name): refused when planned, naming the line;
#  - a rule glob of many stars against the model's names (the backtracking
#    matcher took minutes: wcctl inspect never ended): inspect finishes.
. "$(dirname "$0")/../lib/lib.sh"
[ -x "$BIN/wcgen" ] && [ -x "$BIN/wcctl" ] && [ -x "$BIN/wcd" ] || skip "wcgen/wcctl/wcd not built"
d=$(tmpdir); trap 'rm -rf "$d"' EXIT
"$BIN/wcgen" tiny --out "$d/m" --headers-only >/dev/null || fail "wcgen"
G=model.layers.{L}.mlp.gate_proj.weight
printf '* replicate\n# the issue'"'"'s layout\nview v.{L} = %s %s %s %s\n' "$G" "$G" "$G" "$G" >"$d/g4.layout"
printf 'view model.layers.{L}.mlp.up_proj.weight = model.layers.{L}.mlp.down_proj.weight\n' >"$d/named.rules"
# 12 stars, each before a '?': C(40, 12) tries per name for a backtracker
printf '*?*?*?*?*?*?*?*?*?*?*?*?Z dim0\n' >"$d/stars.rules"

out=$(timeout 60 "$BIN/wcctl" inspect "$d/m" --tp-size 1 --layout "$d/g4.layout" 2>&1); rc=$?
expect_eq "inspect of a part named four times: exit" "$rc" 1
expect_has "inspect names the line" "$out" "g4.layout:3:"
expect_has "inspect names the part" "$out" "part 'model.layers.{L}.mlp.gate_proj.weight' is named twice"

out=$(timeout 60 "$BIN/wcctl" inspect "$d/m" --tp-size 2 --rules "$d/named.rules" 2>&1); rc=$?
expect_eq "inspect of a view named like a tensor: exit" "$rc" 1
expect_has "inspect: the line and the name" "$out" "named.rules:1: view 'model.layers.0.mlp.up_proj.weight' is named like a tensor of the checkpoint"

out=$(timeout 60 "$BIN/wcctl" inspect "$d/m" --tp-size 2 --rules "$d/stars.rules" 2>&1); rc=$?
[ "$rc" = 124 ] && fail "wcctl inspect with a rule of 12 stars did not finish within 60 s"
expect_eq "inspect with a rule of many stars: exit" "$rc" 0
expect_has "many stars: the plan" "$out" "# rank 1: tp 1/2"

rt=$d/rt; mkdir -p "$rt"
out=$(timeout 60 "$BIN/wcd" --model "$d/m" --device host:lb --runtime-dir "$rt" --layout "$d/g4.layout" 2>&1); rc=$?
expect_eq "wcd with a part named four times: exit" "$rc" 1
expect_has "wcd names the line" "$out" "g4.layout:3:"
expect_has "wcd names the part" "$out" "is named twice"
out=$(timeout 60 "$BIN/wcd" --model "$d/m" --device host:lb --runtime-dir "$rt" --rules "$d/named.rules" 2>&1); rc=$?
expect_eq "wcd with a view named like a tensor: exit" "$rc" 1
expect_has "wcd: the line and the name" "$out" "named.rules:1: view 'model.layers.0.mlp.up_proj.weight' is named like a tensor of the checkpoint"
echo ok
