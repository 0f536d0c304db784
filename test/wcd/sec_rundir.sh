#!/usr/bin/env bash
# Runtime files are never written through another user's directory or a
# link (issue 15, item 1). uid 65534 (nobody) plays the attacker: it
# pre-creates runtime directories and plants links to a file of root's,
# and serves a socket of its own. As root:
#  - wcd refuses a runtime dir owned by nobody, naming owner, mode and fix,
#    and leaves the linked-to file alone; also a dir writable by others, a
#    dir that is a symbolic link, and (in a dir of ours) a lock that is a link;
#  - wcctl start never writes a rank log through a link;
#  - libwcache refuses a daemon that runs as nobody (wcattach exits 1 naming
#    the uid) unless told to trust that uid (--trust-uid).
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/wcd.bash"
[ "$(id -u)" = 0 ] || skip "needs root to play two users"
command -v setpriv >/dev/null || skip "setpriv (util-linux) is not installed"
asnobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
asnobody true 2>/dev/null || skip "setpriv cannot switch to uid 65534 here"
wcd_init secrun
chmod 0755 "$W"
asnobody test -x "$BIN/wcd" -a -r "$W/model/config.json" ||
	skip "uid 65534 cannot run $BIN/wcd or read the model (a parent directory is closed)"
victim=$W/victim
echo precious >"$victim"
pub=$W/pub
mkdir -m 1777 "$pub"
model=(--model "$W/model")

victim_intact() {
	[ "$(cat "$victim")" = precious ] || fail "$1: root's file was overwritten through a link: '$(cat "$victim")'"
}

# 1. A runtime dir nobody made, with the lock file a link to root's file.
asnobody mkdir -m 0777 "$pub/evil"
asnobody ln -s "$victim" "$pub/evil/host-sec.lock"
asnobody ln -s "$victim" "$pub/evil/host-sec.ready"
out=$(timeout -k 2 20 "$BIN/wcd" "${model[@]}" --device host:sec --runtime-dir "$pub/evil" 2>&1); rc=$?
echo "$out"
victim_intact "foreign dir"
expect_eq "wcd in a foreign dir: exit" "$rc" 1
expect_has "names the owner" "$out" "owned by nobody (uid 65534)"
expect_has "names the mode" "$out" "mode 0777"
expect_has "says the fix" "$out" "--runtime-dir"

# 2. The same with a 0700 dir of nobody's (root can still enter it).
asnobody mkdir -m 0700 "$pub/evil2"
asnobody ln -s "$victim" "$pub/evil2/host-sec.lock"
out=$(timeout -k 2 20 "$BIN/wcd" "${model[@]}" --device host:sec --runtime-dir "$pub/evil2" 2>&1); rc=$?
victim_intact "foreign 0700 dir"
expect_eq "wcd in a foreign 0700 dir: exit" "$rc" 1
expect_has "names the owner" "$out" "owned by nobody (uid 65534) (mode 0700)"

# 3. A dir of root's that everyone may write to.
mkdir -m 0777 "$W/open"
chmod 0777 "$W/open"
out=$(timeout -k 2 20 "$BIN/wcd" "${model[@]}" --device host:sec --runtime-dir "$W/open" 2>&1); rc=$?
expect_eq "wcd in a world-writable dir: exit" "$rc" 1
expect_has "writable dir refused" "$out" "mode 0777: writable by every user"

# 4. The runtime dir is a link (to a dir nobody controls).
asnobody ln -s "$pub/evil2" "$pub/link"
out=$(timeout -k 2 20 "$BIN/wcd" "${model[@]}" --device host:sec --runtime-dir "$pub/link" 2>&1); rc=$?
victim_intact "linked dir"
expect_eq "wcd on a linked dir: exit" "$rc" 1
expect_has "link refused" "$out" "is a symbolic link"

# 5. Our own dir, but a link where the lock goes (a leftover): refused.
mkdir -m 0700 "$W/own"
ln -s "$victim" "$W/own/host-sec.lock"
out=$(timeout -k 2 20 "$BIN/wcd" "${model[@]}" --device host:sec --runtime-dir "$W/own" 2>&1); rc=$?
victim_intact "lock link"
expect_eq "wcd with a linked lock: exit" "$rc" 1
expect_has "lock link refused" "$out" "symbolic link"
rm "$W/own/host-sec.lock"

# 6. wcctl start: a link where the rank's log goes is not written through.
ln -s "$victim" "$W/own/host-0.log"
out=$(timeout -k 2 60 "$BIN/wcctl" start "${model[@]}" --tp-size 1 --backend host --runtime-dir "$W/own" --timeout 30 2>&1); rc=$?
victim_intact "wcctl log link"
expect_eq "wcctl start: exit" "$rc" 0
[ -f "$W/own/host-0.log" ] && [ ! -L "$W/own/host-0.log" ] ||
	fail "the rank log is not a fresh regular file"
"$BIN/wcctl" stop --all --runtime-dir "$W/own" >/dev/null 2>&1
out=$(timeout -k 2 20 "$BIN/wcctl" start "${model[@]}" --tp-size 1 --backend host --runtime-dir "$pub/evil" --timeout 30 2>&1); rc=$?
victim_intact "wcctl in a foreign dir"
[ "$rc" != 0 ] || fail "wcctl start in nobody's directory succeeded: $out"
expect_has "wcctl names the owner" "$out" "owned by nobody (uid 65534)"

# 7. An impostor: a daemon of nobody's (its own dir, socket opened up).
mkdir -m 0755 "$W/nb"
chown 65534:65534 "$W/nb"
setpriv --reuid=65534 --regid=65534 --clear-groups "$BIN/wcd" "${model[@]}" --device host:imp --runtime-dir "$W/nb/rt" --allow-uid 0 >"$W/imp.log" 2>&1 &
imp=$!
WCD_PIDS+=("$imp")
wait_file "$W/nb/rt/host-imp.ready" "$imp" || { cat "$W/imp.log"; fail "nobody's wcd not ready"; }
chmod 0755 "$W/nb/rt"
asnobody chmod 0666 "$W/nb/rt/host-imp.sock"
out=$("$BIN/wcattach" --socket "$W/nb/rt/host-imp.sock" 2>&1); rc=$?
echo "$out"
expect_eq "root engine against nobody's daemon: exit" "$rc" 1
expect_has "refusal names the uid" "$out" "runs as uid 65534"
expect_has "refusal names the fix" "$out" "--trust-uid 65534"
out=$("$BIN/wcattach" --socket "$W/nb/rt/host-imp.sock" --trust-uid 65534 2>&1) ||
	fail "--trust-uid 65534 still refused: $out"
expect_has "trusted uid" "$out" "attached"
echo ok
