#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Does --direct-fill read still earn its code? Warm host-backend loads of
# one model: read (io_uring reads into the pools' mappings, then a hash
# phase) against splice (the default: fill workers, hashing as tensors
# land) and pread (splice refused, WCD_TEST_NO_SPLICE=1: the splice fill's
# fallback, what a file system without splice gets), alternated for ROUNDS
# rounds (the order rotates every round, so that none always runs first).
#
#   [ROUNDS=5] [DEVICE=host:df] [BUILD=build] bench/gpu/direct_fill.sh MODEL
#
# MODEL: a model directory (e.g. build/bin/wcgen llama-8b --out /root/m8b);
# it is read once first (cat) so that every load is warm. Per run one line:
# wcd's load GB/s (parse + fill + hash), its read and hash phases and the
# CPU seconds of wcbench and its wcd; then per fill the median of each over
# the rounds. Runs on the host backend (no GPU is used: the direct path
# needs pools with a CPU mapping); meant for the H200 host, whose core
# count and memory bandwidth the 2-core development box does not have.
set -euo pipefail

TOP=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$TOP/${BUILD:-build}/bin
N=${ROUNDS:-5}
DEV=${DEVICE:-host:df}
[ $# -eq 1 ] || { sed -n '3,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
MODEL=$1
[ -f "$MODEL/config.json" ] || { echo "direct_fill.sh: $MODEL has no config.json: give a model directory (build/bin/wcgen llama-8b --out DIR makes one)" >&2; exit 1; }
export LD_LIBRARY_PATH=$TOP/${BUILD:-build}/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
TMP=$(mktemp -d /tmp/direct_fill.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
cat "$MODEL"/*.safetensors >/dev/null

# one FILL: a warm load; its line on stdout and into $TMP/runs
one() {
	local fill=$1 round=$2 opt=$1 env=
	[ "$fill" = pread ] && { opt=splice; env=WCD_TEST_NO_SPLICE=1; }
	env $env /usr/bin/time -o "$TMP/cpu" -f "%U %S" "$BIN/wcbench" load \
		--model "$MODEL" --device "$DEV" --json -q -- \
		--direct-fill "$opt" >"$TMP/out.json"
	python3 - "$TMP/out.json" "$fill" "$round" "$(cat "$TMP/cpu")" <<'PY' | tee -a "$TMP/runs"
import json, sys
m = json.load(open(sys.argv[1]))["metrics"]
u, s = sys.argv[4].split()
print("round %s %-6s load %.3f GB/s  read %.3f s  hash after %.3f s  cpu %.2f s"
      % (sys.argv[3], sys.argv[2], m["load_gbps"], m["read_seconds"],
         m["hash_seconds"], float(u) + float(s)))
PY
}

echo "model $MODEL ($(cat "$MODEL"/*.safetensors | wc -c) bytes), device $DEV, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
FILLS=(read splice pread)
for r in $(seq "$N"); do
	for i in 0 1 2; do one "${FILLS[$(( (i + r - 1) % 3 ))]}" "$r"; done
done
python3 - "$TMP/runs" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    w = line.split()
    runs.setdefault(w[2], []).append((float(w[4]), float(w[7]),
                                      float(w[11]), float(w[14])))
for fill in ("read", "splice", "pread"):
    r = runs.get(fill, [])
    if r:
        med = [statistics.median(x[i] for x in r) for i in range(4)]
        print("median %-6s load %.3f GB/s  read %.3f s  hash after %.3f s  cpu %.2f s  (%d runs)"
              % (fill, *med, len(r)))
for other in ("splice", "pread"):
    if runs.get("read") and runs.get(other):
        a = statistics.median(x[0] for x in runs["read"])
        b = statistics.median(x[0] for x in runs[other])
        print("read / %s load GB/s: x%.2f" % (other, a / b if b else 0))
PY
