#!/usr/bin/env bash
# make install / make uninstall into a DESTDIR (PREFIX=/usr):
#   - the files land where they should (tools, libraries, headers,
#     pkg-config file, man pages, systemd units, layouts, LICENSE,
#     examples);
#   - `pkg-config --cflags --libs wcache` builds an engine (a small C
#     program) against the installed header and library, and it attaches
#     to the installed wcd serving a wcgen model;
#   - each man page renders (groff, warnings are failures) and carries
#     every option of its tool's --help (of each command, for wcctl and
#     wcbench);
#   - make uninstall leaves no file behind.
. "$(dirname "$0")/../lib/lib.sh"
command -v pkg-config >/dev/null || fail "pkg-config is not installed (make deps)"
command -v groff >/dev/null || fail "groff is not installed (make deps: groff-base)"
san=${BUILD#build}; san=${san#-}; san=${san//-/,}
W=$(tmpdir)
D=$W/root
wpid=
trap '[ -n "$wpid" ] && kill -KILL "$wpid" 2>/dev/null; rm -rf "$W"' EXIT
# not the outer make's goals, T= or jobserver
unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES T SANITIZE
mk() { make -C "$WC_TOP" --no-print-directory SANITIZE="$san" PREFIX=/usr DESTDIR="$D" "$@"; }

out=$(mk install 2>&1) || fail "make install DESTDIR=$D: $out"
(cd "$D" && find . -type f -o -type l | sort) >"$W/files"
want="./usr/bin/wcattach ./usr/bin/wcbench ./usr/bin/wcctl ./usr/bin/wcd ./usr/bin/wcgen
./usr/include/wcache.h ./usr/include/wcreactor.h
./usr/lib/libwcache.a ./usr/lib/libwcache.so ./usr/lib/libwcache.so.0 ./usr/lib/libwcgpu.a
./usr/lib/libwcproto.a ./usr/lib/libwcreactor.a ./usr/lib/pkgconfig/wcache.pc
./usr/lib/systemd/system/wcache.service ./usr/lib/systemd/system/wcd@.service ./usr/lib/sysusers.d/wcache.conf
./usr/share/doc/wcache/LICENSE ./usr/share/doc/wcache/examples/engine-pod.yaml
./usr/share/doc/wcache/examples/wcache-daemonset.yaml ./usr/share/doc/wcache/examples/wcache.env
./usr/share/doc/wcache/examples/wcache.sbatch ./usr/share/doc/wcache/examples/wcd-0.env
./usr/share/man/man1/wcattach.1 ./usr/share/man/man1/wcbench.1 ./usr/share/man/man1/wcgen.1
./usr/share/man/man8/wcctl.8 ./usr/share/man/man8/wcd.8"
for l in "$WC_TOP"/proto/plan/layouts/*.layout; do
	[ -e "$l" ] && want+=" ./usr/share/wcache/layouts/${l##*/}"
done
expect_eq "installed files" "$(tr '\n' ' ' <"$W/files")" "$(echo $want | tr ' ' '\n' | sort | tr '\n' ' ')"
grep -q "^ExecStart=/usr/bin/wcd " "$D/usr/lib/systemd/system/wcd@.service" ||
	fail "wcd@.service does not run /usr/bin/wcd: $(grep ExecStart "$D/usr/lib/systemd/system/wcd@.service")"
cmp -s "$D/usr/share/doc/wcache/LICENSE" "$WC_TOP/tools/dist/LICENSE" || fail "LICENSE differs"
grep -q "^MIT License" "$D/usr/share/doc/wcache/LICENSE" || fail "the LICENSE is not MIT's"

# an engine built with pkg-config alone, attaching to the installed wcd
export PKG_CONFIG_PATH=$D/usr/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$D
ver=$(sed -n 's/^#define WCACHE_VERSION "\(.*\)"/\1/p' "$WC_TOP"/tools/common/*.h)
[ -n "$ver" ] || fail "no WCACHE_VERSION in tools/common/*.h"
expect_eq "pkg-config --modversion" "$(pkg-config --modversion wcache)" "$ver"
flags=$(pkg-config --cflags --libs wcache | sed 's/ *$//') || fail "pkg-config --cflags --libs wcache failed"
expect_eq "pkg-config flags" "$flags" "-I$D/usr/include -L$D/usr/lib -lwcache"
cat >"$W/engine.c" <<'C'
#include <stdio.h>
#include <wcache.h>

int main(int argc, char **argv)
{
	struct wc_connect_opts o = { .device = "host:pc", .runtime_dir = argv[1] };
	struct wc_expect x = { .model_dir = argv[2], .tp_size = 1, .pp_size = 1 };
	const struct wc_tensor *t;
	struct wc_conn *c;
	struct wc_model *m;
	struct wc_error e;

	if (argc != 3 || wc_connect(&o, &c, &e) || wc_hello(c, &x, NULL, &e) ||
	    wc_attach(c, 0, &m, NULL, &e)) {
		fprintf(stderr, "engine: %s\n", argc == 3 ? e.msg : "usage");
		return 1;
	}
	t = wc_tensor_find(m, "model.norm.weight");
	printf("attached: %s %s %llu bytes\n", t ? t->name : "none",
	       t ? t->dtype : "-", t ? (unsigned long long)t->bytes : 0ull);
	wc_detach(m, &e);
	wc_close(c);
	return t ? 0 : 1;
}
C
sanflag=${san:+-fsanitize=$san}
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror $sanflag -o "$W/engine" "$W/engine.c" $flags ||
	fail "the engine does not build with pkg-config's flags: $flags"
"$D/usr/bin/wcgen" tiny --out "$W/model" >/dev/null 2>&1 || fail "the installed wcgen failed"
"$D/usr/bin/wcd" --model "$W/model" --device host:pc --runtime-dir "$W/rt" >"$W/wcd.log" 2>&1 &
wpid=$!
"$WAITFOR" -p "$wpid" -t 20 "$W/rt/host-pc.ready"
[ $? = 1 ] && { cat "$W/wcd.log"; fail "the installed wcd exited"; }
out=$(LD_LIBRARY_PATH=$D/usr/lib "$W/engine" "$W/rt" "$W/model" 2>&1) || fail "engine: $out"
expect_has "engine" "$out" "attached: model.norm.weight "
LD_LIBRARY_PATH=$D/usr/lib ldd "$W/engine" | grep -q "$D/usr/lib/libwcache.so.0" || fail "the engine did not load the installed libwcache.so.0"
kill -TERM "$wpid"; wait "$wpid"; expect_eq "wcd exit" "$?" 0; wpid=

# the man pages: render cleanly, and hold every option of the --help texts
for page in wcd.8 wcctl.8 wcattach.1 wcgen.1 wcbench.1; do
	sec=${page##*.} tool=${page%.*}
	f=$D/usr/share/man/man$sec/$page
	[ -s "$f" ] || fail "$page is empty"
	text=$(groff -man -Tascii -ww "$f" 2>"$W/groff.err" | col -b) || fail "groff $page failed"
	[ -s "$W/groff.err" ] && fail "groff warns about $page: $(cat "$W/groff.err")"
	[[ $text =~ NAME[[:space:]]+$tool\ +-\ +[a-z] ]] || fail "$page has no NAME line: $text"
	helps=$("$D/usr/bin/$tool" --help)
	for c in $(printf '%s\n' "$helps" | awk '/^commands:$/ { on = 1; next } on && /^$/ { exit } on && /^  [a-z]/ { print $1 }'); do
		helps+=$'\n'$("$D/usr/bin/$tool" "$c" --help)
		expect_has "$page command $c" "$text" "$tool $c"
	done
	for opt in $(printf '%s\n' "$helps" | grep -o -- '--[a-z][a-z0-9-]*' | sort -u); do
		[[ $text == *"$opt"* ]] || fail "$page lacks $opt (in $tool's --help)"
	done
done
if command -v man >/dev/null; then
	man -l "$D/usr/share/man/man8/wcd.8" 2>/dev/null | grep -q -- "--force-wait" ||
		fail "man -l wcd.8 does not show --force-wait"
fi

out=$(mk uninstall 2>&1) || fail "make uninstall: $out"
left=$(cd "$D" && find . -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left: $left"
[ ! -e "$D/usr/share/doc/wcache" ] || fail "make uninstall left the directory share/doc/wcache"
echo ok
