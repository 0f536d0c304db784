#!/usr/bin/env bash
# CLI conventions (issue 16) that need no daemon: every tool and subcommand
# answers -h, --help and --version with exit 0; every --help ends with two
# or three examples, then the exit codes; wcgen's usage errors exit 2 and
# its failures 1; wcctl inspect exits 1 when the verdict is REFUSED; wcctl
# start checks the layout before it looks for GPUs.
source "$(dirname "$0")/../lib/lib.sh"
for b in wcd wcctl wcattach wcgen wcbench; do
	[ -x "$BIN/$b" ] || skip "$b not built"
done
T=$(tmpdir)
trap 'rm -rf "$T"' EXIT

# every subcommand that wcctl --help and wcbench --help list
subs() { "$BIN/$1" --help | awk '/^commands:/ { f = 1; next } f && /^  [a-z]/ { print $1 } f && /^$/ { exit }'; }
cmds=("wcd" "wcctl" "wcattach" "wcgen" "wcbench")
for c in $(subs wcctl); do cmds+=("wcctl $c"); done
for c in $(subs wcbench); do cmds+=("wcbench $c"); done
[ "${#cmds[@]}" -ge 19 ] || fail "only ${#cmds[@]} commands found: ${cmds[*]}"

for c in "${cmds[@]}"; do
	read -r -a argv <<<"$c"
	bin=$BIN/${argv[0]}
	sub=("${argv[@]:1}")
	"$bin" "${sub[@]}" -h >"$T/h" 2>&1; rc=$?
	expect_eq "'$c -h' exit" "$rc" 0
	"$bin" "${sub[@]}" --help >"$T/help" 2>&1; rc=$?
	expect_eq "'$c --help' exit" "$rc" 0
	cmp -s "$T/h" "$T/help" || fail "'$c -h' differs from '$c --help'"
	out=$("$bin" "${sub[@]}" --version 2>&1); rc=$?
	expect_eq "'$c --version' exit" "$rc" 0
	[[ $out =~ ^"$c (wcache) "[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
		fail "'$c --version' printed '$out', want '$c (wcache) X.Y.Z'"
	# the last paragraph is the exit codes, the one before the examples
	python3 - "$c" "$T/help" <<'PY' || fail "'$c --help' does not end with examples and exit codes"
import sys
name, path = sys.argv[1], sys.argv[2]
paras = [p for p in open(path).read().split("\n\n") if p.strip()]
last, ex = paras[-1].splitlines(), paras[-2].splitlines()
tool = name.split()[0]
ok = last[0].startswith("Exit status: 0") and ex[0] == "Examples:"
def runs_cmd(l, c):
    return l == "  " + c or l.startswith("  " + c + " ")
runs = [l for l in ex[1:] if runs_cmd(l, tool)]
ok = ok and 2 <= len(runs) == len(ex) - 1 <= 3
if name != tool:  # a subcommand's examples run that subcommand
    ok = ok and all(runs_cmd(l, name) for l in runs)
if not ok:
    print("\n\n".join(paras[-2:]))
sys.exit(0 if ok else 1)
PY
done

# wcgen: usage errors exit 2, failures 1
for args in "tiny" "nosuch --out $T/x" "tiny --out $T/x --dtype q4" \
	"tiny --out $T/x --seed pi" "tiny --out $T/x --shard-size 5XB" \
	"tiny --out $T/x --headers-only --verify" "tiny --out $T/x --nosuch" \
	"tiny --out $T/x --quant awq:128"; do
	"$BIN/wcgen" $args >/dev/null 2>"$T/err"; rc=$?
	expect_eq "wcgen $args" "$rc" 2
	[ -s "$T/err" ] || fail "wcgen $args: exit 2 without a word"
done
"$BIN/wcgen" tiny --out "$T/g" --headers-only >/dev/null || fail "wcgen tiny"
"$BIN/wcgen" tiny --out "$T/g" --headers-only >/dev/null 2>&1; rc=$?
expect_eq "wcgen over an existing model (a failure, not usage)" "$rc" 1

# wcctl inspect: REFUSED is exit 1; a servable checkpoint 0
"$BIN/wcgen" tiny --out "$T/awq" --quant awq --headers-only >/dev/null || fail "wcgen awq"
out=$("$BIN/wcctl" inspect "$T/awq"); rc=$?
expect_eq "inspect REFUSED" "$rc" 1
expect_has "inspect REFUSED" "$out" "REFUSED"
"$BIN/wcctl" inspect "$T/awq" --json >"$T/awq.json"; rc=$?
expect_eq "inspect --json REFUSED" "$rc" 1
python3 -m json.tool "$T/awq.json" >/dev/null || fail "inspect --json of a REFUSED model is not JSON"
"$BIN/wcctl" inspect "$T/g" >/dev/null; rc=$?
expect_eq "inspect servable" "$rc" 0

# wcctl start: the layout is checked first, with no GPU on this machine
# the error is the layout's (2), not "no GPU found"
out=$("$BIN/wcctl" start --model "$T/g" --tp-size 2 --nnodes 2 --node-rank 5 2>&1); rc=$?
expect_eq "start with a bad --node-rank" "$rc" 2
expect_has "start with a bad --node-rank" "$out" "--node-rank 5"
expect_no "start with a bad --node-rank" "$out" "no GPU"
out=$("$BIN/wcctl" start --model "$T/g" --tp-size 3 --nnodes 2 2>&1); rc=$?
expect_eq "start with tp not divisible by nodes" "$rc" 2
# SGLang's spellings, and --dry-run (CUDA ordinals without nvidia-smi)
out=$("$BIN/wcctl" start --model-path "$T/g" --tensor-parallel-size 4 \
	--pipeline-parallel-size 2 --nnodes 2 --node-rank 1 --dry-run -- --log-level debug 2>/dev/null); rc=$?
expect_eq "start --dry-run (SGLang spellings)" "$rc" 0
expect_has "dry-run plan" "$out" "node 1 would start 4 weight cache daemons (pp_ranks=1..1, tp_ranks=0..3)"
expect_has "dry-run rank" "$out" "pp1/tp3      7      3"
expect_has "dry-run command" "$out" "--model $T/g --device 3"
expect_has "dry-run command" "$out" "--tp-size 4 --tp-rank 3 --pp-size 2 --pp-rank 1 --log-level debug"
out=$("$BIN/wcctl" start --model "$T/g" --tp 2 --backend host --device-prefix d \
	--runtime-dir "$T/run" --dry-run --json); rc=$?
expect_eq "start --dry-run --json" "$rc" 0
got=$(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
r = d["ranks"][1]
print(d["dry_run"], d["ranks_on_node"], r["device"], r["tp_rank"], r["argv"][1:5], r["log"].endswith("/host-d1.log"))' "$out")
expect_eq "start --dry-run --json" "$got" "True 2 host:d1 1 ['--model', '$T/g', '--device', 'host:d1'] True"
[ -e "$T/run" ] && fail "--dry-run created the runtime directory"
# wcd takes SGLang's spellings too: the model path reaches the model check
T2=$T/wcd
out=$("$BIN/wcd" --model-path "$T/nomodel" --tensor-parallel-size 2 --tp-rank 1 \
	--pipeline-parallel-size 1 --device host:cli --runtime-dir "$T2" 2>&1); rc=$?
expect_eq "wcd --model-path of a missing directory" "$rc" 1
expect_has "wcd --model-path" "$out" "$T/nomodel"
# wcctl metrics: 2 usage, 1 no daemon, 3 none found by --all
"$BIN/wcctl" metrics >/dev/null 2>&1; rc=$?
expect_eq "wcctl metrics without a target" "$rc" 2
"$BIN/wcctl" metrics --device host:none --runtime-dir "$T/empty" >/dev/null 2>&1; rc=$?
expect_eq "wcctl metrics with no daemon" "$rc" 1
mkdir -p "$T/empty"
out=$("$BIN/wcctl" metrics --all --runtime-dir "$T/empty"); rc=$?
expect_eq "wcctl metrics --all with none" "$rc" 3
expect_has "wcctl metrics --all with none" "$out" "no wcache daemon found"

# timeouts are seconds with decimals everywhere (wcbench rtt too)
out=$("$BIN/wcbench" rtt --socket "$T/none.sock" --timeout 0.5 -n 10 2>&1); rc=$?
expect_eq "wcbench rtt --timeout 0.5 (no daemon)" "$rc" 1
expect_has "wcbench rtt --timeout 0.5" "$out" "cannot connect"
out=$("$BIN/wcbench" rtt --socket "$T/none.sock" --timeout soon 2>&1)
expect_has "wcbench rtt --timeout soon" "$out" "is not a number"
echo "all CLI conventions hold for ${#cmds[@]} commands"
