#!/usr/bin/env bash
# wcd's metrics say which rank they are of (issue 26, Operations: Metrics):
# every sample, from the HTTP endpoint and from wcctl metrics (the METRICS
# request), starts its labels with device, rank (pp_rank * tp_size +
# tp_rank) and the layout (tp_rank, tp_size, pp_rank, pp_size, ep_rank,
# ep_size), so that one Prometheus scraping every rank of a node keeps
# their series apart; promtool accepts the text where it is installed.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
command -v curl >/dev/null || skip "curl is not installed (make deps)"
e2e_init mlabels
MSOCK=$E2E_DIR/m.sock
e2e_start_wcd --tp-size 2 --tp-rank 1 --pp-size 2 --pp-rank 1 --metrics-listen "unix:$MSOCK"
curl -sS --max-time 10 --unix-socket "$MSOCK" -o "$E2E_DIR/http" http://wcd/metrics ||
	fail "GET /metrics over $MSOCK"
"$BIN/wcctl" metrics --device "$DEVICE" --runtime-dir "$RUNDIR" >"$E2E_DIR/ctl" ||
	fail "wcctl metrics --device $DEVICE"
want='device="host-'$DEVNAME'",rank="3",tp_rank="1",tp_size="2",pp_rank="1",pp_size="2",ep_rank="0",ep_size="1"'
for f in http ctl; do
	samples=$(grep -vc '^#' "$E2E_DIR/$f")
	[ "$samples" -ge 50 ] || fail "$f: only $samples samples: $(head -5 "$E2E_DIR/$f")"
	# every sample: name{<the rank's labels>[,its own]} value
	bad=$(grep -v '^#' "$E2E_DIR/$f" | grep -Fv "{$want}" | grep -Fv "{$want," | head -3)
	[ -z "$bad" ] || fail "$f: samples without the rank's labels $want: $bad"
	expect_eq "$f: a sample with its own labels" \
		"$(grep -c "^wcache_state{$want,state=\"ready\"} 1\$" "$E2E_DIR/$f")" 1
	expect_eq "$f: a sample without its own labels" \
		"$(grep -c "^wcache_model_version{$want} 1\$" "$E2E_DIR/$f")" 1
	if command -v promtool >/dev/null; then
		promtool check metrics <"$E2E_DIR/$f" >"$E2E_DIR/$f.lint" 2>&1 ||
			fail "$f: promtool check metrics: $(cat "$E2E_DIR/$f.lint")"
	fi
done
echo ok
