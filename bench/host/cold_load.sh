#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Cold host-backend loads against cat after a drop, alternated in rounds.
#
#   bench/host/cold_load.sh [-n ROUNDS] MODEL [LABEL=WCD-OPTIONS ...]
#
# Each round: cat every shard to /dev/null, and for each configuration
# `wcbench load --drop-caches` with its wcd options (LABEL= alone: the
# defaults; leading NAME=VALUE words go to the environment), each after its
# own drop of the page cache (sync; echo 3 >/proc/sys/vm/drop_caches); the
# order rotates from round to round (cat first, then second, ...), since
# this VM's disk moves by 2x from one read of the model to the next and
# what runs first in a round must not always be the same. Per run it prints GB/s (wcd's own load figure: parse + fill +
# hash), the ratio to this round's cat, the read and hash phases, the CPU
# seconds (user+sys of wcbench and its wcd) and the disk's view from
# /sys/block/DEV/stat (reads, average request, average queue depth); then
# the median ratio and its range per configuration, and the load average.
# Default configurations: splice (the default) and read (--direct-fill
# read). Needs root (drop_caches) and a built tree (BUILD=build).
set -euo pipefail

TOP=$(cd "$(dirname "$0")/../.." && pwd)
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
# run_wcd LABEL OPTS: one cold wcd load; its line into $TMP/round
run_wcd() {
	local label=$1 opts=$2 envs=() w
	# shellcheck disable=SC2086
	set -- $opts
	while [ $# -gt 0 ] && [[ $1 =~ ^[A-Z_][A-Z0-9_]*= ]]; do envs+=("$1"); shift; done
	drop; d0=$(disk)
	env "${envs[@]}" /usr/bin/time -o "$TMP/cpu" -f "%U %S" "$BIN/wcbench" load \
		--model "$MODEL" --device host:cold-load --drop-caches --json -q -- "$@" \
		>"$TMP/out.json"
	d1=$(disk)
	w=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["metrics"]["load_gbps"])' "$TMP/out.json")
	python3 - "$TMP/out.json" "$label" "$(cat "$TMP/cpu")" "$(diskdiff "$d0" "$d1")" <<'PY' >>"$TMP/round"
import json, sys
m = json.load(open(sys.argv[1]))["metrics"]
label, (u, s) = sys.argv[2], sys.argv[3].split()
print("%s %.3f read %.3f s  hash after %.3f s  cpu %.2f s  (%s)"
      % (label, m["load_gbps"], m["read_seconds"], m["hash_seconds"],
         float(u) + float(s), sys.argv[4]))
PY
}

K=$(($# + 1))
for r in $(seq "$N"); do
	: >"$TMP/round"
	order=""
	for i in $(seq 0 $((K - 1))); do
		j=$(( (i + r - 1) % K ))
		if [ $j = 0 ]; then
			order="$order cat"
			drop; d0=$(disk); t0=$(date +%s%N)
			cat $FILES >/dev/null
			t1=$(date +%s%N); d1=$(disk)
			cat_gbps=$(awk -v b="$BYTES" -v n=$((t1 - t0)) 'BEGIN { printf "%.3f", b / n }')
			cat_disk=$(diskdiff "$d0" "$d1")
		else
			c=${!j}
			order="$order ${c%%=*}"
			run_wcd "${c%%=*}" "${c#*=}"
		fi
	done
	echo "round $r (order:$order): cat $cat_gbps GB/s ($cat_disk)"
	while read -r label g rest; do
		printf '  %-10s %.3f GB/s  x%.2f of cat  %s\n' "$label" "$g" \
			"$(awk -v a="$g" -v b="$cat_gbps" 'BEGIN { print a / b }')" "$rest"
	done <"$TMP/round" | tee -a "$TMP/ratios"
done
for c in "$@"; do
	label=${c%%=*}
	awk -v l="$label" '$1 == l { sub(/^x/, "", $4); print $4 }' "$TMP/ratios" | sort -n |
		awk -v l="$label" '{ v[NR] = $1 } END { printf "%-10s ratio to cat: median x%.2f, range x%.2f..x%.2f over %d rounds\n", l, v[int((NR + 1) / 2)], v[1], v[NR], NR }'
done
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
