# Helpers for wcctl's shell tests (sourced after test/lib/lib.sh).
# Every daemon a test starts is remembered (from wcctl's "started wcd
# pid=N" lines and from ready files) and killed by pid on exit.
FAKE=$WC_TOP/test/wcctl/wcctl_fakewcd.py
WCCTL=$BIN/wcctl
T=$(tmpdir)
RUN=$T/run
PIDS=()

wcctl_cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$T"
}
trap wcctl_cleanup EXIT

# remember_pids FILE: adds the pids named in a wcctl output file
remember_pids() {
	local p
	for p in $(grep -o 'started wcd pid=[0-9]*' "$1" | cut -d= -f2); do
		PIDS+=("$p")
	done
}

# alive PID: the process exists and is not a zombie
alive() {
	local st
	st=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null)
	[ -n "$st" ] && [ "$st" != Z ]
}

# expect_gone FILE: none of the daemons named in FILE is alive
expect_gone() {
	local p
	for p in $(grep -o 'started wcd pid=[0-9]*' "$1" | cut -d= -f2); do
		alive "$p" && fail "daemon pid $p is still running"
	done
	return 0
}

# expect_empty DIR: no file left in DIR
expect_empty() {
	local left
	left=$(ls -A "$1" 2>/dev/null)
	[ -z "$left" ] || fail "files left in $1: $left"
}

# ready_pid DIR NAME: the pid in NAME's ready file
ready_pid() { sed -n 's/^pid=//p' "$1/$2.ready"; }
