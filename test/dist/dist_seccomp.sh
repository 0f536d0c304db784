#!/usr/bin/env bash
# The system call filter of the systemd units (tools/dist/systemd/*.in:
# SystemCallFilter=, as systemd reads it: the first line an allow list,
# each later ~ line taken out of it, groups expanded by systemd-analyze
# syscall-filter) admits every call that wcctl start --foreground and its
# wcd make, traced with strace -f from start to stop on the host backend:
# a load, an engine's attach and verify, a metrics scrape, a sleep and a
# wake, the socket group (the units' --socket-group), SIGTERM. A call the
# filter refuses would fail the unit with EPERM at run time; here it is
# named, with the unit. A control filter that lacks one of the traced
# calls must be caught (so the check checks). The plain build only: a
# sanitizer's runtime makes calls of its own.
. "$(dirname "$0")/../lib/lib.sh"
command -v strace >/dev/null || fail "strace is not installed (make deps installs it)"
command -v systemd-analyze >/dev/null || fail "systemd-analyze is not installed (make deps installs systemd)"
[ "$BUILD" = build ] || skip "$BUILD is a sanitizer build: its runtime's calls are not the daemon's (the plain build is checked)"
strace -f -qq -o /dev/null true 2>/dev/null || skip "strace cannot trace here (ptrace refused)"
W=$(tmpdir)
spid=
trap '[ -n "$spid" ] && kill -KILL "$spid" 2>/dev/null; rm -rf "$W"' EXIT
"$BIN/wcgen" tiny --out "$W/model" >/dev/null 2>&1 || fail "wcgen tiny failed"
RUN=$W/run

strace -f -qq -o "$W/trace" "$BIN/wcctl" start --foreground --model "$W/model" --tp-size 1 \
	--backend host --runtime-dir "$RUN" --socket-group "$(id -g)" \
	--metrics-listen "unix:$RUN/" --timeout 60 >"$W/start.log" 2>&1 &
spid=$!
"$WAITFOR" -p "$spid" -t 30 "$RUN/host-0.ready"
[ $? = 1 ] && { cat "$W/start.log"; fail "wcctl start exited under strace"; }
[ -e "$RUN/host-0.ready" ] || fail "no ready file after 30 s: $(cat "$W/start.log")"
out=$("$BIN/wcattach" --device host:0 --runtime-dir "$RUN" --verify 2>&1) || fail "attach: $out"
curl -sf --unix-socket "$RUN/host-0.metrics.sock" http://wcd/metrics >"$W/metrics" ||
	fail "the metrics scrape failed"
out=$("$BIN/wcctl" sleep --device host:0 --level 1 --runtime-dir "$RUN" 2>&1) || fail "wcctl sleep: $out"
out=$("$BIN/wcctl" wake --device host:0 --runtime-dir "$RUN" 2>&1) || fail "wcctl wake: $out"
ctl=$(pgrep -P "$spid")
[ -n "$ctl" ] || fail "no wcctl under strace $spid"
kill -TERM "$ctl"
wait "$spid"
spid=

# check UNIT_FILE TRACE: the calls of TRACE the unit's filter refuses
/usr/bin/python3 - "$W/trace" "$WC_TOP"/tools/dist/systemd/*.service.in <<'PY' || fail "the units' system call filter"
import re, subprocess, sys
trace, units = sys.argv[1], sys.argv[2:]
cache = {}

def expand(name):
    """the calls of a name: itself, or a group's members, recursively"""
    if not name.startswith("@"):
        return {name}
    if name not in cache:
        out = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager", name],
                             check=True, capture_output=True, text=True).stdout
        got = set()
        for line in out.splitlines()[1:]:
            line = line.strip()
            if line and not line.startswith("#"):
                got |= expand(line)
        cache[name] = got
    return cache[name]

def allowed(unit):
    lines = [l.split("=", 1)[1].split() for l in open(unit)
             if l.startswith("SystemCallFilter=")]
    if not lines or lines[0][0].startswith("~"):
        return None
    ok = set()
    for words in lines:
        neg = words[0].startswith("~")
        names = set().union(*(expand(w.lstrip("~")) for w in words))
        ok = ok - names if neg else ok | names
    return ok

calls = set()
for line in open(trace):
    m = re.match(r"\d+\s+([a-z0-9_]+)\(", line)
    if m:
        calls.add(m.group(1))
if len(calls) < 30:
    sys.exit("only %d calls traced: %s" % (len(calls), sorted(calls)))
bad = 0
for u in units:
    ok = allowed(u)
    if ok is None:
        print("%s: no SystemCallFilter= allow list" % u); bad = 1; continue
    refused = sorted(calls - ok)
    if refused:
        print("%s refuses calls wcctl/wcd make: %s" % (u, " ".join(refused))); bad = 1
# the control: the first unit with io_uring_enter taken out (a ~ line, as
# an operator's drop-in would add) must refuse exactly that call
ctl = trace + ".control.service"
with open(ctl, "w") as f:
    f.write(open(units[0]).read() + "SystemCallFilter=~io_uring_enter\n")
ok = allowed(ctl) or set()
if sorted(calls - ok) != ["io_uring_enter"]:
    print("control: a filter without io_uring_enter refuses %s" % sorted(calls - ok)); bad = 1
print("%d distinct calls traced, all admitted by %d unit(s)" % (len(calls), len(units)))
sys.exit(bad)
PY
echo ok
