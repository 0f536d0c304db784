#!/usr/bin/env bash
# wcctl metrics --all (issue 26, Operations: Metrics): the ranks' texts
# merged into one valid exposition, which promtool accepts: one HELP and
# one TYPE per family, before all of its samples, every rank's samples
# beneath, told apart by their labels, and the same series as the ranks
# give one by one. Before, the texts were printed one after another and
# promtool refused the second HELP line of wcache_build_info.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
command -v python3 >/dev/null || skip "python3 is not installed"
e2e_init mall
DEVICE0=$DEVICE
e2e_start_wcd --tp-size 2 --tp-rank 0
# the second rank: another device in the same runtime directory
DEVICE=host:$DEVNAME-1 READY=$RUNDIR/host-$DEVNAME-1.ready
e2e_start_wcd --tp-size 2 --tp-rank 1
ctl() { "$BIN/wcctl" metrics --runtime-dir "$RUNDIR" "$@"; }
ctl --all >"$E2E_DIR/all0" || fail "wcctl metrics --all: exit $?"
ctl --all >"$E2E_DIR/all" || fail "wcctl metrics --all (again): exit $?"
ctl --device "$DEVICE0" >"$E2E_DIR/r0" || fail "wcctl metrics --device $DEVICE0"
ctl --device "$DEVICE" >"$E2E_DIR/r1" || fail "wcctl metrics --device $DEVICE"
if command -v promtool >/dev/null; then
	promtool check metrics <"$E2E_DIR/all" >"$E2E_DIR/lint" 2>&1 ||
		fail "promtool check metrics on wcctl metrics --all: $(cat "$E2E_DIR/lint")"
fi
python3 - "$E2E_DIR" "host-$DEVNAME" <<'PY' || fail "wcctl metrics --all is not one valid exposition"
import re, sys
d, dev = sys.argv[1], sys.argv[2]
SFX = ("_bucket", "_sum", "_count")

def parse(path):
    """families in order, each with its HELP/TYPE counts and sample keys;
    fails on what the text format forbids"""
    fams, order, cur, keys = {}, [], None, []
    for n, line in enumerate(open(path), 1):
        line = line.rstrip("\n")
        m = re.match(r"# (HELP|TYPE) (\S+)", line)
        if m:
            kind, name = m.groups()
            f = fams.setdefault(name, {"HELP": 0, "TYPE": 0, "samples": 0})
            if name not in order:
                order.append(name)
            if f["samples"]:
                raise SystemExit("%s:%d: %s of %s after its samples" % (path, n, kind, name))
            f[kind] += 1
            if f[kind] > 1:
                raise SystemExit("%s:%d: a second %s line for %s" % (path, n, kind, name))
            cur = name
            continue
        if not line or line.startswith("#"):
            continue
        key = line.rsplit(" ", 1)[0]
        name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", key).group(0)
        fam = cur if cur and (name == cur or name in [cur + s for s in SFX]) else None
        if fam is None:
            raise SystemExit("%s:%d: sample %s is not beneath its family's HELP/TYPE (%s)" % (path, n, name, cur))
        fams[fam]["samples"] += 1
        keys.append(key)
    if len(set(keys)) != len(keys):
        dup = sorted(k for k in set(keys) if keys.count(k) > 1)
        raise SystemExit("%s: the same series twice: %s" % (path, dup[:3]))
    return fams, keys

fams, keys = parse(d + "/all")
f0, k0 = parse(d + "/r0")
f1, k1 = parse(d + "/r1")
for name, f in fams.items():
    assert f["HELP"] == 1 and f["TYPE"] == 1, (name, f)
assert set(fams) == set(f0) | set(f1), set(fams) ^ (set(f0) | set(f1))
assert set(keys) == set(k0) | set(k1), sorted(set(keys) ^ (set(k0) | set(k1)))[:5]
assert len(keys) == len(k0) + len(k1), (len(keys), len(k0), len(k1))
for r, devname in ((0, dev), (1, dev + "-1")):
    want = 'wcache_state{device="%s",rank="%d",tp_rank="%d",tp_size="2",' % (devname, r, r)
    assert any(k.startswith(want) and 'state="ready"' in k for k in keys), want
print("%d families, %d samples of 2 ranks" % (len(fams), len(keys)))
PY
echo ok
