#!/usr/bin/env bash
# The systemd units (tools/dist/systemd), as `make install` writes them,
# run wcd as the wcache user with an exposure of at most 3
# (`systemd-analyze security --offline`), with the sysusers.d file that
# makes that user, and pass `systemd-analyze verify` (their binaries and man pages must exist:
# installed here under PREFIX=<temp dir>, no DESTDIR); a unit that names a
# missing binary fails it (so the check checks). Skips (77) only where
# systemd-analyze cannot verify even a trivial unit on this machine, with
# its output as the reason.
. "$(dirname "$0")/../lib/lib.sh"
command -v systemd-analyze >/dev/null || fail "systemd-analyze is not installed (make deps installs systemd)"
san=${BUILD#build}; san=${san#-}; san=${san//-/,}
W=$(tmpdir)
trap 'rm -rf "$W"' EXIT
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES T SANITIZE

# a control: if this fails, the machine cannot run verify at all
mkdir "$W/ctl"
printf '[Unit]\nDescription=control\n\n[Service]\nExecStart=/bin/true\n' >"$W/ctl/wct-control.service"
if ! out=$(systemd-analyze verify --man=no "$W/ctl/wct-control.service" 2>&1); then
	skip "systemd-analyze verify fails on a trivial unit here: $out"
fi

P=$W/prefix
out=$(make -C "$WC_TOP" --no-print-directory SANITIZE="$san" PREFIX="$P" install 2>&1) ||
	fail "make install PREFIX=$P: $out"
units=$P/lib/systemd/system
for u in wcd@.service wcache.service; do
	[ -f "$units/$u" ] || fail "make install did not install $u"
	grep -q "^ExecStart=$P/bin/" "$units/$u" || fail "$u does not run the installed binary"
	grep -q "^Type=notify" "$units/$u" || fail "$u is not Type=notify"
done
# wcd@0.service: an instance of the template (verify loads it from there)
out=$(cd "$units" && MANPATH=$P/share/man systemd-analyze verify \
	"$units/wcd@0.service" "$units/wcache.service" 2>&1) ||
	fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify warns: $out"
# the same with a binary that is not there must fail
sed "s|^ExecStart=$P/bin/wcd |ExecStart=$P/bin/no-such-wcd |" "$units/wcd@.service" >"$W/ctl/wcd@.service"
out=$(MANPATH=$P/share/man systemd-analyze verify "$W/ctl/wcd@0.service" 2>&1) &&
	fail "systemd-analyze verify passed a unit whose binary is missing"
expect_has "missing binary" "$out" "no-such-wcd"
# hardening (issue 26): each unit's exposure (systemd-analyze security
# --offline) is at most 3; the trivial control unit is over it (so the
# threshold bites). --threshold counts in tenths (its default, 100, is the
# 10.0 of the printed scale): 30 is 3.0.
systemd-analyze security --offline=yes --threshold=30 "$W/ctl/wct-control.service" >/dev/null 2>&1 &&
	fail "systemd-analyze security --threshold=3 passed the control unit"
for u in wcd@0.service wcache.service; do
	out=$(cd "$units" && systemd-analyze security --offline=yes --threshold=30 "$units/$u" 2>&1) ||
		fail "$u is over exposure 3: $(grep -v '^✓' <<<"$out")"
	echo "$u: $(tail -1 <<<"$out")"
done
# the user and group wcache: the units run as them, serve the group, and
# the sysusers.d file make install puts beside them makes both
for u in wcd@.service wcache.service; do
	grep -qx "User=wcache" "$units/$u" && grep -qx "Group=wcache" "$units/$u" ||
		fail "$u does not run as User=wcache Group=wcache"
	grep -q "^ExecStart=.* --socket-group wcache " "$units/$u" ||
		fail "$u does not serve the group wcache (--socket-group wcache)"
	grep -qx "CapabilityBoundingSet=" "$units/$u" || fail "$u keeps capabilities"
done
su=$P/lib/sysusers.d/wcache.conf
[ -f "$su" ] || fail "make install did not install $su"
mkdir -p "$W/sysroot/etc"
out=$(systemd-sysusers --root="$W/sysroot" --dry-run "$su" 2>&1) || fail "systemd-sysusers $su: $out"
expect_has "sysusers makes the group" "$out" "Creating group 'wcache'"
expect_has "sysusers makes the user" "$out" "Creating user 'wcache'"
# the command lines the units run, with the example environment files, are
# ones wcd and wcctl take (options are parsed before --help)
ex=$P/share/doc/wcache/examples
for pair in "wcd@.service wcd-0.env" "wcache.service wcache.env"; do
	set -- $pair
	cmd=$(sed -n 's/^ExecStart=//p' "$units/$1" | sed 's/%I/0/g; s/%i/0/g')
	# shellcheck disable=SC1090,SC2086
	out=$(. "$ex/$2" && eval "set -- $cmd" && "$@" --help 2>&1 >/dev/null) ||
		fail "$1 with $2: '$cmd' is refused: $out"
done
echo ok
