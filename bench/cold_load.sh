#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Cold host-backend loads against cat after a drop, alternated in rounds.
#
#   bench/cold_load.sh [-n ROUNDS] MODEL [LABEL=WCD-OPTIONS ...]
#
# Each round: drop the page cache (sync; echo 3 >/proc/sys/vm/drop_caches),
# cat every shard to /dev/null; then, for each configuration, drop again and
# run `wcbench load --drop-caches` with its wcd options (LABEL= alone: the
# defaults). Per run it prints GB/s (wcd's own load figure: parse + fill +
# hash), the ratio to this round's cat, the read and hash phases, the CPU
# seconds (user+sys of wcbench and its wcd) and the disk's view from
# /sys/block/DEV/stat (reads, average request, average queue depth); then
# the median ratio and its range per configuration, and the load average.
# Default configurations: splice (the default) and read (--direct-fill
# read). Needs root (drop_caches) and a built tree (BUILD=build).
set -euo pipefail

TOP=$(cd "$(dirname "$0")/.." && pwd)
BIN=$TOP/${BUILD:-build}/bin
N=3
[ "${1:-}" = -n ] && { N=$2; shift 2; }
[ $# -ge 1 ] || { sed -n '3,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
MODEL=$1; shift
[ $# -gt 0 ] || set -- "splice=" "read=--direct-fill read"
[ "$(id -u)" = 0 ] || { echo "cold_load.sh: needs root to drop the page cache" >&2; exit 1; }
FILES=$(find "$MODEL" -maxdepth 1 -name '*.safetensors' | sort)
BYTES=$(cat $FILES | wc -c)
DEV=$(lsblk -no pkname "$(df --output=source "$MODEL" | tail -1)" 2>/dev/null || true)
[ -n "$DEV" ] || DEV=$(basename "$(df --output=source "$MODEL" | tail -1)")
STAT=/sys/block/$DEV/stat
TMP=$(mktemp -d /tmp/cold_load.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
disk() { [ -r "$STAT" ] && awk '{print $1, $3, $10, $11}' "$STAT" || echo "0 0 0 0"; }
# diskdiff BEFORE AFTER: reads, average KiB, average queue depth
diskdiff() {
	awk -v a="$1" -v b="$2" 'BEGIN { split(a, x); split(b, y)
		n = y[1] - x[1]; s = y[2] - x[2]; io = y[3] - x[3]; q = y[4] - x[4]
		printf "%d reads of %.0f KiB, QD %.1f", n, n ? s / 2 / n : 0, io ? q / io : 0 }'
}

echo "model $MODEL: $BYTES bytes; disk $DEV; $(nproc) CPUs; load before $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$N"); do
	drop; d0=$(disk); t0=$(date +%s%N)
	cat $FILES >/dev/null
	t1=$(date +%s%N); d1=$(disk)
	cat_gbps=$(awk -v b="$BYTES" -v n=$((t1 - t0)) 'BEGIN { printf "%.3f", b / n }')
	echo "round $r: cat $cat_gbps GB/s ($(diskdiff "$d0" "$d1"))"
	for c in "$@"; do
		label=${c%%=*} opts=${c#*=}
		drop; d0=$(disk)
		# shellcheck disable=SC2086
		/usr/bin/time -o "$TMP/cpu" -f "%U %S" "$BIN/wcbench" load --model "$MODEL" \
			--device host:cold-load --drop-caches --json -q -- $opts >"$TMP/out.json"
		d1=$(disk)
		python3 - "$TMP/out.json" "$cat_gbps" "$label" "$(cat "$TMP/cpu")" \
			"$(diskdiff "$d0" "$d1")" <<'PY' | tee -a "$TMP/ratios"
import json, sys
m = json.load(open(sys.argv[1]))["metrics"]
cat, label, (u, s) = float(sys.argv[2]), sys.argv[3], sys.argv[4].split()
print("  %-10s %.3f GB/s  x%.2f of cat  read %.3f s  hash after %.3f s  cpu %.2f s  (%s)"
      % (label, m["load_gbps"], m["load_gbps"] / cat, m["read_seconds"],
         m["hash_seconds"], float(u) + float(s), sys.argv[5]))
PY
	done
done
for c in "$@"; do
	label=${c%%=*}
	awk -v l="$label" '$1 == l { sub(/^x/, "", $4); print $4 }' "$TMP/ratios" | sort -n |
		awk -v l="$label" '{ v[NR] = $1 } END { printf "%-10s ratio to cat: median x%.2f, range x%.2f..x%.2f over %d rounds\n", l, v[int((NR + 1) / 2)], v[1], v[NR], NR }'
done
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
