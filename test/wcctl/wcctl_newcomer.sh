#!/usr/bin/env bash
# Newcomer edges (issue 26) that need no GPU:
#   - wcctl inspect of a directory without config.json says so, exit 1
#     (it printed "verdict: unquantized (verified)": a quantized checkpoint
#     would pass);
#   - a tp size that splits neither the heads nor the vocabulary names the
#     heads (lm_head sorts first, so the vocabulary was named), in wcctl
#     inspect and in wcd; a tp that splits the heads but no MLP width still
#     names that width;
#   - wcctl status --backend host lists the host daemons (it was an
#     unknown option), --backend cuda none of them;
#   - the device hints name host-NAME, as status prints the daemons.
. "$(dirname "$0")/../lib/lib.sh"
T=$(tmpdir)
export WCACHE_SOCKET_TEMPLATE=$T/run/{device}
trap '"$BIN/wcctl" stop --all >/dev/null 2>&1; rm -rf "$T"' EXIT
"$BIN/wcgen" llama-gqa --out "$T/m" >/dev/null 2>&1 || fail "wcgen llama-gqa"

# inspect without config.json
mkdir "$T/noconf"
cp "$T/m/model.safetensors" "$T/noconf/"
out=$("$BIN/wcctl" inspect "$T/noconf" 2>&1); rc=$?
expect_eq "inspect without config.json (output: $out)" "$rc" 1
expect_has "inspect without config.json" "$out" "wcctl inspect: $T/noconf has no config.json, so its architecture, dtype and quantization cannot be told"
expect_no "inspect without config.json" "$out" "verdict:"
out=$("$BIN/wcctl" inspect "$T/m" 2>&1) || fail "inspect with config.json: $out"
expect_has "inspect with config.json" "$out" "verdict:       unquantized (verified)"

# tp 3 splits neither the 8 heads (2 KV heads) nor the 1000-row vocabulary
out=$("$BIN/wcctl" inspect "$T/m" --tp-size 3 2>&1); rc=$?
expect_eq "inspect --tp-size 3" "$rc" 1
expect_has "inspect --tp-size 3" "$out" "2 heads (num_key_value_heads) do not split over tp size 3"
expect_no "inspect --tp-size 3" "$out" "lm_head"
out=$("$BIN/wcd" --model "$T/m" --tp-size 3 --tp-rank 0 --device host:tp3 --runtime-dir "$T/run" 2>&1); rc=$?
[ "$rc" -ne 0 ] || fail "wcd --tp-size 3 served: $out"
expect_has "wcd --tp-size 3" "$out" "2 heads (num_key_value_heads) do not split over tp size 3"
# heads split, the vocabulary not (padding off): the vocabulary is named
out=$("$BIN/wcctl" inspect "$T/m" --tp-size 2 --vocab-pad 0 2>&1) || fail "inspect --tp-size 2 --vocab-pad 0: $out"
"$BIN/wcgen" tiny --out "$T/tiny" >/dev/null 2>&1 || fail "wcgen tiny"
out=$("$BIN/wcctl" inspect "$T/tiny" --tp-size 3 2>&1); rc=$?
expect_eq "inspect tiny --tp-size 3" "$rc" 1
expect_has "inspect tiny --tp-size 3" "$out" "heads (num_key_value_heads) do not split over tp size 3"
out=$("$BIN/wcctl" inspect "$T/m" --tp-size 4 --vocab-pad 0 2>&1); rc=$?
expect_eq "inspect --tp-size 4 --vocab-pad 0 (1000 rows: 4 divides)" "$rc" 0

# status --backend
out=$("$BIN/wcctl" start --model "$T/m" --tp-size 2 --backend host --timeout 60 2>&1) ||
	fail "wcctl start: $out"
out=$("$BIN/wcctl" status --backend host 2>&1) || fail "status --backend host: $out"
expect_eq "status --backend host rows" "$(grep -c '^host-[01] ' <<<"$out")" 2
out=$("$BIN/wcctl" status --backend cuda 2>&1); rc=$?
expect_eq "status --backend cuda (host daemons only)" "$rc" 3
expect_has "status --backend cuda" "$out" "no wcache daemon of the cuda backend found in $T/run"
out=$("$BIN/wcctl" status --backend gpu 2>&1); rc=$?
expect_eq "status --backend gpu" "$rc" 2
expect_has "status --backend gpu" "$out" "--backend 'gpu' is not cuda or host"

# the hints name the daemons as status does; that name works
for c in "sleep --level 1" wake update verify manifest; do
	expect_has "wcctl $c --help" "$("$BIN/wcctl" $c --help)" "host-NAME (as status prints it)"
done
expect_has "wcattach --help" "$("$BIN/wcattach" --help)" "host-NAME (as wcctl status prints"
expect_has "wcctl start --help" "$("$BIN/wcctl" start --help)" "name host-<prefix><g>"
out=$("$BIN/wcctl" stop --device nosuch 2>&1); rc=$?
expect_eq "stop --device nosuch" "$rc" 2
expect_has "stop --device nosuch" "$out" "use host, host:NAME or host-NAME (as wcctl status prints it)"
out=$("$BIN/wcctl" manifest --device host-1 2>&1) || fail "manifest --device host-1: $out"
echo ok
