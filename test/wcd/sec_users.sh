#!/usr/bin/env bash
# Engines of other users (issue 26, item 6): wcd --allow-uid, --allow-gid
# and --socket-group open the socket and the runtime directory as far as
# they must and no further. As root, with engines (wcattach) run through
# setpriv as other uids:
#  - --allow-uid 65534: nobody attaches and verifies (the directory was
#    0700 and the socket 0600, so it got "permission denied ... ask for
#    --allow-uid 65534", the flag the daemon had); another uid is refused
#    by the daemon, naming --allow-uid with its uid;
#  - --socket-group G (a group made here): a member (supplementary group,
#    or primary) attaches; a uid outside the group cannot connect, and the
#    client's sentence names the directory and --socket-group;
#  - --allow-gid G alone: a member attaches, another uid is refused;
#  - the groups survive a handover (wcctl restart); wcctl start
#    --socket-group gives the group to every rank;
#  - a daemon of another user serves root's engines (root could read its
#    memory anyway); an engine trusts a daemon of another uid only when told to
#    (WCACHE_TRUST_UID) or when it runs as the system account "wcache"
#    (the shipped units' user; made here for the test when there is none);
#  - never a write bit for group or others on the directory, never a read
#    bit for them either; bad --socket-mode and --socket-group values are
#    usage errors naming the value.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/e2e_lib.bash"
[ "$(id -u)" = 0 ] || skip "needs root to run engines as other users"
command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"
command -v groupadd >/dev/null || skip "groupadd (passwd) is not installed"
setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null ||
	skip "setpriv cannot switch to uid 65534 here"
e2e_init users
setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$BIN/wcattach" ||
	skip "uid 65534 cannot execute $BIN/wcattach (a parent directory is closed)"
grp=wct-users-$$
groupadd "$grp" || skip "groupadd $grp failed"
big=wct-big-$$
trap 'e2e_cleanup; groupdel "$grp" 2>/dev/null; groupdel "$big" 2>/dev/null' EXIT
gid=$(getent group "$grp" | cut -d: -f3)
[ -n "$gid" ] || fail "no gid for the group $grp just made"

# as UID GID [setpriv group option] -- command...
as() {
	local u=$1 g=$2 groups=$3
	shift 3
	setpriv --reuid="$u" --regid="$g" $groups "$@"
}
attach() { "$@" "$BIN/wcattach" --socket "$SOCK" --verify 2>&1; }
# (after a handover WCD_PID is not our child: tail --pid waits for it)
stop_wcd() { kill "$WCD_PID"; wait "$WCD_PID" 2>/dev/null || tail --pid="$WCD_PID" -f /dev/null; }
mode() { stat -c %a "$1"; }
# nothing but x for group and others on the directory
dir_closed() {
	local m
	m=$(stat -c %a "$RUNDIR")
	(( (8#$m & 8#066) == 0 )) || fail "$1: the runtime directory is $m: readable or writable by others"
}

# 1. --allow-uid 65534: the allowed engine attaches; nothing chmod'ed by hand
e2e_start_wcd --allow-uid 65534
expect_eq "--allow-uid: directory mode" "$(mode "$RUNDIR")" 711
expect_eq "--allow-uid: socket mode" "$(mode "$SOCK")" 666
dir_closed "--allow-uid"
out=$(attach as 65534 65534 --clear-groups) || fail "--allow-uid 65534: nobody refused: $out"
expect_has "nobody attaches" "$out" "all hashes match"
out=$(attach as 65533 65533 --clear-groups) && fail "uid 65533 was served: $out"
echo "$out"
expect_has "another uid: refused by the daemon" "$out" "uid 65533 (gid 65533) may not use this daemon"
expect_has "another uid: the fix" "$out" "--allow-uid 65533"
stop_wcd

# 2. --socket-group: members attach, others cannot even connect
rm -rf "$RUNDIR"
e2e_start_wcd --socket-group "$grp"
expect_eq "--socket-group: directory mode" "$(mode "$RUNDIR")" 710
expect_eq "--socket-group: directory group" "$(stat -c %g "$RUNDIR")" "$gid"
expect_eq "--socket-group: socket mode" "$(mode "$SOCK")" 660
expect_eq "--socket-group: socket group" "$(stat -c %g "$SOCK")" "$gid"
dir_closed "--socket-group"
out=$(attach as 65533 65533 --groups="$gid") || fail "a supplementary member refused: $out"
expect_has "supplementary member" "$out" "all hashes match"
out=$(attach as 65533 "$gid" --clear-groups) || fail "a primary member refused: $out"
expect_has "primary member" "$out" "all hashes match"
out=$(attach as 65532 65532 --clear-groups) && fail "uid 65532, not in $grp, was served: $out"
echo "$out"
expect_has "outsider: what" "$out" "permission denied connecting to $SOCK: uid 65532 may not enter the directory $RUNDIR (mode 0710"
expect_has "outsider: the fix" "$out" "--socket-group GROUP and run the engine in that group"
expect_no "outsider: not the old advice" "$out" "ask for --allow-uid"

# 3. the groups survive a handover (the socket and directory stay as made)
"$BIN/wcctl" restart --device "$DEVICE" --runtime-dir "$RUNDIR" >"$E2E_DIR/restart.out" 2>&1 ||
	fail "wcctl restart: $(cat "$E2E_DIR/restart.out")"
wait "$WCD_PID" 2>/dev/null
WCD_PID=$(sed -n 's/^pid=//p' "$READY")
WCD_PIDS+=("$WCD_PID")
out=$(attach as 65533 65533 --groups="$gid") || fail "a member refused after the handover: $out"
expect_has "member after the handover" "$out" "all hashes match"
out=$(attach as 65532 65532 --groups=65531) && fail "an outsider was served after the handover: $out"
stop_wcd

# 4. --allow-gid alone: the socket is open, the daemon checks the groups
e2e_start_wcd --allow-gid "$gid"
expect_eq "--allow-gid: socket mode" "$(mode "$SOCK")" 666
dir_closed "--allow-gid"
out=$(attach as 65533 65533 --groups="$gid") || fail "--allow-gid: a member refused: $out"
expect_has "--allow-gid member" "$out" "all hashes match"
out=$(attach as 65532 65532 --clear-groups) && fail "--allow-gid: an outsider was served: $out"
expect_has "--allow-gid outsider refused" "$out" "uid 65532 (gid 65532) may not use this daemon"
expect_has "--allow-gid outsider: the fix" "$out" "--allow-gid, --socket-group"
stop_wcd

# 5. a directory that others could write is still refused, option or not
chmod 0730 "$RUNDIR"
out=$("$BIN/wcd" --model "$MODEL" --device "$DEVICE" --runtime-dir "$RUNDIR" --socket-group "$grp" 2>&1); rc=$?
expect_eq "group-writable dir with --socket-group: exit" "$rc" 1
expect_has "group-writable dir refused" "$out" "writable by its group"
chmod 0700 "$RUNDIR"

# 7. a daemon of another uid: trusted by WCACHE_TRUST_UID, or as "wcache"
# other_wcd UID NAME: starts wcd as UID in a directory of its own, open
# to every user (--socket-mode 0666: root passes the file system anyway;
# wcd serves root without --allow-uid 0); sets OSOCK
other_wcd() {
	local d=$E2E_DIR/$2
	mkdir -m 0755 "$d"
	chown "$1" "$d"
	setpriv --reuid="$1" --regid=65534 --clear-groups "$BIN/wcd" --model "$MODEL" \
		--device "host:$2-$$" --runtime-dir "$d/rt" --socket-mode 0666 >"$d.log" 2>&1 &
	WCD_PIDS+=("$!")
	OSOCK=$d/rt/host-$2-$$.sock
	local rc=0
	"$WAITFOR" -p "$!" -t 30 "$d/rt/host-$2-$$.ready" || rc=$?
	[ $rc = 0 ] && return 0
	[ $rc = 1 ] && { cat "$d.log"; fail "wcd as uid $1 exited"; }
	fail "wcd as uid $1 not ready"
}
other_wcd 65534 nb
out=$(env -u WCACHE_TRUST_UID "$BIN/wcattach" --socket "$OSOCK" 2>&1) && fail "a daemon of uid 65534 was trusted: $out"
expect_has "untrusted daemon: the fix" "$out" "WCACHE_TRUST_UID=65534"
out=$(WCACHE_TRUST_UID=65534 "$BIN/wcattach" --socket "$OSOCK" --verify 2>&1) ||
	fail "WCACHE_TRUST_UID=65534 still refused: $out"
expect_has "WCACHE_TRUST_UID" "$out" "all hashes match"
# the "wcache" account, made here under a lock when missing (and removed)
exec 9>/tmp/wct-wcache-account.lock
flock 9
made=
if ! getent passwd wcache >/dev/null; then
	useradd --system --no-create-home --shell /usr/sbin/nologin wcache ||
		fail "useradd wcache failed"
	made=1
fi
wuid=$(id -u wcache)
other_wcd "$wuid" wc
out=$(env -u WCACHE_TRUST_UID "$BIN/wcattach" --socket "$OSOCK" --verify 2>&1); rc=$?
kill "${WCD_PIDS[-1]}"
wait "${WCD_PIDS[-1]}" 2>/dev/null
[ -z "$made" ] || userdel wcache || fail "userdel wcache (made by this test) failed"
exec 9>&-
expect_eq "a daemon of the wcache account: exit ($out)" "$rc" 0
expect_has "the wcache account is trusted" "$out" "all hashes match"

# 8. wcctl start --socket-group passes the group to every rank
crun=$E2E_DIR/crun
out=$("$BIN/wcctl" start --model "$MODEL" --tp-size 2 --backend host --runtime-dir "$crun" \
	--socket-group "$grp" --timeout 60 2>&1) || fail "wcctl start --socket-group: $out"
for r in 0 1; do
	WCD_PIDS+=("$(sed -n 's/^pid=//p' "$crun/host-$r.ready")")
	expect_eq "wcctl start: rank $r socket group" "$(stat -c %g "$crun/host-$r.sock")" "$gid"
	out=$(setpriv --reuid=65533 --regid=65533 --groups="$gid" "$BIN/wcattach" \
		--socket "$crun/host-$r.sock" --verify 2>&1) || fail "wcctl start: a member refused by rank $r: $out"
done
expect_eq "wcctl start: directory mode" "$(mode "$crun")" 710
"$BIN/wcctl" stop --all --runtime-dir "$crun" >/dev/null 2>&1 || fail "wcctl stop --all"

# 6. usage errors name the value
out=$("$BIN/wcd" --model "$MODEL" --socket-mode 0777 2>&1); rc=$?
expect_eq "--socket-mode 0777: exit" "$rc" 2
expect_has "--socket-mode 0777" "$out" "bad --socket-mode '0777'"
out=$("$BIN/wcd" --model "$MODEL" --socket-group wct-no-such-group 2>&1); rc=$?
expect_eq "unknown --socket-group: exit" "$rc" 2
expect_has "unknown --socket-group" "$out" "--socket-group 'wct-no-such-group': no such group"
# 9. a --socket-group whose entry is over a page (many members: getgrnam_r
#    says ERANGE to a 4 KiB buffer) is found, not "no such group"
groupadd "$big" || fail "groupadd $big failed"
members=$(seq -f 'wct-m%04g' 1 600 | paste -sd,)
sed -i "s/^$big:\([^:]*\):\([0-9]*\):\$/$big:\1:\2:$members/" /etc/group
bgid=$(getent group "$big" | cut -d: -f3)
(( $(getent group "$big" | wc -c) > 4096 )) || fail "the entry of $big is not over 4 KiB"
rm -rf "$RUNDIR"
e2e_start_wcd --socket-group "$big"
expect_eq "--socket-group of 600 members: socket group" "$(stat -c %g "$SOCK")" "$bgid"
stop_wcd
echo ok
