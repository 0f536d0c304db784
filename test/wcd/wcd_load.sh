#!/usr/bin/env bash
# wcd's loader: the direct path (reads into the pools) and the staged path
# (staging slots + copy_to_pool, small slots so that pieces and 2-D row
# groups span many slots) give the same manifest; at tp 1 every hash equals
# the file's (wcctl inspect --hashes); at tp 2 both ranks' dim-0 and dim-1
# splits hash like the column/row slices cut from the file by numpy
# (xxhsum -H2); with and without hash threads and O_DIRECT, and with
# page-cache reads in parts (--read-part). The direct path both ways
# (--direct-fill splice, the default, and read), and splice refused
# (WCD_TEST_NO_SPLICE=1: pread takes over), also on a qwen2-tiny cut into
# small shards (tensors at offsets and of sizes that are not multiples of
# 4096). Also --no-hash, and wcd's usage and start-up errors.
. "$(dirname "$0")/../lib/lib.sh"
. "$(dirname "$0")/../lib/wcd.bash"
wcd_init load
command -v xxhsum >/dev/null || skip "xxhsum is not installed"
[ -x "$BIN/wcctl" ] || skip "wcctl is not built"

# serve NAME ARGS...: starts wcd on host:NAME, saves its manifest as
# $W/NAME.txt (name and hash columns), stops it.
serve() {
	local name=$1; shift
	wcd_bg "$W/$name.log" --model "$W/model" --device "host:$name" --runtime-dir "$RT" "$@"
	local p=$LAST
	wait_file "$RT/host-$name.ready" "$p" || { cat "$W/$name.log"; fail "$name: not ready"; }
	"$BIN/wcctl" manifest --runtime-dir "$RT" --device "host:$name" >"$W/$name.raw" ||
		fail "$name: wcctl manifest"
	grep -v '^#' "$W/$name.raw" | awk '{print $NF "  " $1}' | sort -k2 >"$W/$name.all"
	# the checkpoint's names (the fused views are checked below)
	grep -v -e '\.qkv_proj\.' -e '\.gate_up_proj\.' "$W/$name.all" >"$W/$name.txt"
	kill -TERM "$p"; wait_exit "$p"
	expect_eq "$name exit" "$RC" 0
}

serve d1 --load-path direct
serve s1 --load-path staged --slots 3 --slot-size 64K
serve s3 --load-path staged --slots 5 --slot-size 64K --hash-threads 3 --direct-io on
serve s0 --load-path staged --slots 2 --slot-size 64K --hash-threads 0 --direct-io off
serve dt --load-path direct --hash-threads 4
serve dr --load-path direct --direct-fill read
WCD_TEST_NO_SPLICE=1 serve dn --load-path direct
serve d0 --load-path direct --read-ahead 0
serve d6 --load-path direct --read-ahead 64K
# page-cache reads in parts: 4 per slot; 32 asked for, so 16 larger ones;
# one whole read per slot
serve sp --load-path staged --slots 3 --slot-size 256K --read-part 64K --direct-io off
serve sq --load-path staged --slots 2 --slot-size 2M --read-part 64K --direct-io off
serve sw --load-path staged --slots 4 --slot-size 128K --read-part 0 --hash-on cpu
"$BIN/wcctl" inspect "$W/model" --hashes | sort -k2 >"$W/file.txt"
expect_eq "tensors" "$(wc -l <"$W/d1.txt")" 39
expect_eq "tensors and views" "$(wc -l <"$W/d1.all")" 47
cmp -s "$W/d1.txt" "$W/file.txt" || { diff "$W/d1.txt" "$W/file.txt"; fail "direct hashes differ from the file's"; }
for s in s1 s3 s0 dt sp sq sw dr dn d0 d6; do
	cmp -s "$W/$s.txt" "$W/file.txt" || { diff "$W/$s.txt" "$W/file.txt"; fail "$s: hashes differ from the file's"; }
done
expect_has "hash threads" "$(cat "$W/s3.log")" "on hash threads, overlapped"
expect_has "loop-thread hash" "$(cat "$W/s0.log")" "on the loop thread"
expect_has "no O_DIRECT" "$(cat "$W/s0.log")" "0 of 4 shards O_DIRECT"
expect_has "direct hash threads" "$(cat "$W/dt.log")" "on 4 threads"
expect_has "staged log" "$(cat "$W/s1.log")" "staged"
expect_has "direct log" "$(cat "$W/d1.log")" "direct into the pools, splice"
expect_has "splice hashes overlapped" "$(cat "$W/d1.log")" "of hashing overlapped with it"
expect_has "read fill log" "$(cat "$W/dr.log")" "direct into the pools, 0 of"
expect_has "read fill hash phase" "$(cat "$W/dr.log")" "XXH3-128 per tensor on"
expect_has "splice refused" "$(cat "$W/dn.log")" "splice into the pools was refused"
expect_has "pread fill log" "$(cat "$W/dn.log")" "pread: splice refused"
cmp -s "$W/d1.all" "$W/dr.all" || { diff "$W/d1.all" "$W/dr.all"; fail "splice and read fills differ (views included)"; }
cmp -s "$W/d1.all" "$W/dn.all" || { diff "$W/d1.all" "$W/dn.all"; fail "splice and pread fills differ (views included)"; }

# odd offsets and sizes: qwen2-tiny (vocab 515, biases) in shards of about
# 100 KB; splice, read and refused splice against the file's hashes
"$BIN/wcgen" qwen2-tiny --out "$W/q2" --shard-size 100KB >"$W/q2gen.log" 2>&1 ||
	{ cat "$W/q2gen.log"; fail "wcgen qwen2-tiny"; }
"$BIN/wcctl" inspect "$W/q2" --hashes | sort -k2 >"$W/q2file.txt"
for m in "splice" "read" "splice WCD_TEST_NO_SPLICE=1"; do
	set -- $m
	n=$1${2:+-nosplice}
	env ${2:-X=1} "$BIN/wcd" --model "$W/q2" --device host:q2$n --runtime-dir "$RT" \
		--direct-fill $1 >"$W/q2$n.log" 2>&1 &
	p=$!; WCD_PIDS+=("$p")
	wait_file "$RT/host-q2$n.ready" "$p" || { cat "$W/q2$n.log"; fail "q2 $m: not ready"; }
	"$BIN/wcctl" manifest --runtime-dir "$RT" --device "host:q2$n" >"$W/q2$n.raw" ||
		fail "q2 $m: wcctl manifest"
	grep -v '^#' "$W/q2$n.raw" | awk '{print $NF "  " $1}' | sort -k2 |
		grep -v -e '\.qkv_proj\.' -e '\.gate_up_proj\.' >"$W/q2$n.txt"
	kill -TERM "$p"; wait_exit "$p"
	cmp -s "$W/q2$n.txt" "$W/q2file.txt" || { diff "$W/q2$n.txt" "$W/q2file.txt"; fail "q2 $m: hashes differ from the file's"; }
done
expect_has "q2 refused" "$(cat "$W/q2splice-nosplice.log")" "splice into the pools was refused"
for ph in parse read copy hash publish; do
	expect_has "phase $ph" "$(cat "$W/s1.log")" "phase $ph: "
done

# tp 2: both paths agree for both ranks; the splits equal numpy's slices,
# and the fused views numpy's concatenations of them. tp 4 rank 3: the 2
# KV heads are replicated, rank 3 holds KV head 1.
for r in 0 1; do
	serve d2r$r --load-path direct --tp-size 2 --tp-rank $r
	serve s2r$r --load-path staged --slots 4 --slot-size 64K --tp-size 2 --tp-rank $r
	cmp -s "$W/d2r$r.all" "$W/s2r$r.all" || { diff "$W/d2r$r.all" "$W/s2r$r.all"; fail "rank $r: paths differ"; }
done
# a dim-1 split read row by row: read fill and refused splice (pread)
serve r2r1 --load-path direct --direct-fill read --tp-size 2 --tp-rank 1
WCD_TEST_NO_SPLICE=1 serve n2r1 --load-path direct --tp-size 2 --tp-rank 1
cmp -s "$W/d2r1.all" "$W/r2r1.all" || { diff "$W/d2r1.all" "$W/r2r1.all"; fail "tp 2 rank 1: splice and read fills differ"; }
cmp -s "$W/d2r1.all" "$W/n2r1.all" || { diff "$W/d2r1.all" "$W/n2r1.all"; fail "tp 2 rank 1: splice and pread fills differ"; }
serve d4r3 --load-path direct --tp-size 4 --tp-rank 3
serve s4r3 --load-path staged --slots 3 --slot-size 64K --hash-threads 2 --tp-size 4 --tp-rank 3
cmp -s "$W/d4r3.all" "$W/s4r3.all" || { diff "$W/d4r3.all" "$W/s4r3.all"; fail "tp 4 rank 3: paths differ"; }
expect_has "qkv_proj shape at tp 2" "$(cat "$W/d2r1.raw")" "model.layers.2.self_attn.qkv_proj.weight  BF16  [256, 256]  131072"
expect_has "qkv_proj shape at tp 4" "$(cat "$W/d4r3.raw")" "model.layers.2.self_attn.qkv_proj.weight  BF16  [192, 256]  98304"
expect_has "k_proj shape at tp 4" "$(cat "$W/d4r3.raw")" "model.layers.2.self_attn.k_proj.weight  BF16  [64, 256]  32768"
/usr/bin/python3 - "$W/model" "$W" <<'PY' || fail "slicing with numpy"
import json, struct, sys, numpy as np
model, out = sys.argv[1], sys.argv[2]
idx = json.load(open(model + "/model.safetensors.index.json"))["weight_map"]
def load(name):
    f = open(model + "/" + idx[name], "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))[name]
    b, e = h["data_offsets"]
    f.seek(8 + n + b)
    return np.frombuffer(f.read(e - b), dtype=np.uint16).reshape(h["shape"])
for name, dim in [("model.layers.0.self_attn.q_proj.weight", 0),
                  ("model.layers.1.self_attn.o_proj.weight", 1),
                  ("model.layers.3.mlp.down_proj.weight", 1)]:
    t = load(name)
    for r in (0, 1):
        k = t.shape[dim] // 2
        s = t[k * r:k * (r + 1)] if dim == 0 else t[:, k * r:k * (r + 1)]
        open("%s/slice-%s-%d" % (out, name, r), "wb").write(np.ascontiguousarray(s).tobytes())
# fused views: [q_r; k_r; v_r] and [gate_r; up_r] on dim 0 (vLLM's order)
def rows(name, a, b):
    return load(name)[a:b]
for L in (0, 3):
    p = "model.layers.%d." % L
    for tp, r in ((2, 0), (2, 1), (4, 3)):
        hd, kvh = 64, 2
        q = rows(p + "self_attn.q_proj.weight", r * 4 // tp * hd, (r + 1) * 4 // tp * hd)
        kh = r // (tp // kvh) if tp > kvh else r
        k = rows(p + "self_attn.k_proj.weight", kh * hd, (kh + 1) * hd)
        v = rows(p + "self_attn.v_proj.weight", kh * hd, (kh + 1) * hd)
        i = 688 // tp
        gu = np.concatenate([rows(p + "mlp.gate_proj.weight", r * i, (r + 1) * i),
                             rows(p + "mlp.up_proj.weight", r * i, (r + 1) * i)])
        for nm, arr in (("self_attn.qkv_proj.weight", np.concatenate([q, k, v])),
                        ("mlp.gate_up_proj.weight", gu)):
            open("%s/fused-%s-%d-%d" % (out, p + nm, tp, r), "wb").write(
                np.ascontiguousarray(arr).tobytes())
PY
for r in 0 1; do
	for name in model.layers.0.self_attn.q_proj.weight model.layers.1.self_attn.o_proj.weight \
		model.layers.3.mlp.down_proj.weight; do
		want=$(xxhsum -H2 "$W/slice-$name-$r" 2>/dev/null | awk '{print $1}')
		want=${want#XXH128_}
		got=$(awk -v n="$name" '$2 == n {print $1}' "$W/d2r$r.txt")
		expect_eq "rank $r $name" "$got" "$want"
	done
done
n=0
for f in "$W"/fused-*; do
	n=$((n + 1))
	b=${f##*/fused-}; r=${b##*-}; b=${b%-*}; tp=${b##*-}; name=${b%-*}
	want=$(xxhsum -H2 "$f" 2>/dev/null | awk '{print $1}')
	want=${want#XXH128_}
	got=$(awk -v n="$name" '$2 == n {print $1}' "$W/d${tp}r$r.all")
	[ -n "$got" ] || fail "tp $tp rank $r does not serve $name"
	expect_eq "tp $tp rank $r $name = parts concatenated" "$got" "$want"
done
expect_eq "fused views checked" "$n" 12

# --no-hash: served without hashes, said so in the log.
serve nh --no-hash
expect_has "no-hash log" "$(cat "$W/nh.log")" "phase hash: skipped (--no-hash)"

# The page-cache probe of --direct-io auto (staged path): cachestat(2) and
# its mincore(2) fallback (WCD_TEST_NO_CACHESTAT=1) both see the model
# cached after the loads above, and both see it gone once the cache is
# dropped for the shards (dd iflag=nocache: posix_fadvise DONTNEED; skipped
# where the file system keeps the pages, as tmpfs does).
probe() {     # probe NAME [env]: the load's page-cache verdicts
	env $2 "$BIN/wcd" --model "$W/model" --device "host:$1" --runtime-dir "$RT" \
		--load-path staged --slots 2 --slot-size 64K --log-level debug \
		>"$W/$1.log" 2>&1 &
	local p=$!
	wait_file "$RT/host-$1.ready" "$p" || { cat "$W/$1.log"; fail "$1: not ready"; }
	kill -TERM "$p"; wait_exit "$p"
	grep -c "in the page cache: $3" "$W/$1.log"
}
shards=$(ls "$W"/model/*.safetensors | wc -l)
expect_eq "cachestat: cached" "$(probe pcs "" buffered)" "$shards"
expect_eq "mincore: cached" "$(probe pcm WCD_TEST_NO_CACHESTAT=1 buffered)" "$shards"
drop() { for f in "$W"/model/*.safetensors; do dd if="$f" iflag=nocache count=0 status=none; done; }
drop
if [ "$(probe pds "" O_DIRECT)" = "$shards" ]; then
	drop
	expect_eq "mincore: dropped" "$(probe pdm WCD_TEST_NO_CACHESTAT=1 O_DIRECT)" "$shards"
else
	grep "page cache" "$W/pds.log" | head -2
	echo "the file system kept the pages after dd iflag=nocache: not checked"
fi

# Usage errors exit 2; start-up errors exit 1 with a reason.
out=$("$BIN/wcd" --help); expect_eq "--help exit" "$?" 0
expect_has "--help" "$out" "--load-path direct|staged"
out=$("$BIN/wcd" 2>&1); expect_eq "no --model exit" "$?" 2
expect_has "no --model" "$out" "--model DIR is required"
out=$("$BIN/wcd" --model "$W/model" --tp-size 2 --tp-rank 2 2>&1); expect_eq "tp rank exit" "$?" 2
expect_has "tp rank" "$out" "--tp-rank must be below --tp-size"
out=$("$BIN/wcd" --model "$W/model" --bogus 2>&1); expect_eq "unknown option exit" "$?" 2
expect_has "unknown option" "$out" "'--bogus'"
out=$("$BIN/wcd" --model "$W/model" --load-path fast 2>&1); expect_eq "load-path exit" "$?" 2
out=$("$BIN/wcd" --model "$W/model" --direct-fill mmap 2>&1); expect_eq "direct-fill exit" "$?" 2
expect_has "direct-fill" "$out" "bad --direct-fill 'mmap' (splice or read)"
out=$("$BIN/wcd" --model "$W/model" --read-ahead 17G 2>&1); expect_eq "read-ahead exit" "$?" 2
expect_has "read-ahead" "$out" "--read-ahead 17G is over 16G"
out=$("$BIN/wcd" --model "$W/nonexistent" --device host:x --runtime-dir "$RT" 2>&1)
expect_eq "missing model exit" "$?" 1
expect_has "missing model" "$out" "$W/nonexistent"
out=$("$BIN/wcd" --model "$W/model" --device tpu:0 --runtime-dir "$RT" 2>&1)
expect_eq "bad device exit" "$?" 1
expect_has "bad device" "$out" "unknown device 'tpu:0'"
out=$("$BIN/wcd" --model "$W/model" --device host:x --ipc legacy --runtime-dir "$RT" 2>&1)
expect_eq "legacy on host exit" "$?" 1
expect_has "legacy on host" "$out" "--ipc legacy needs a CUDA device"
out=$("$BIN/wcd" --model "$W/model" --device host:x --hash-on device --runtime-dir "$RT" 2>&1)
expect_eq "device hash on host exit" "$?" 1
expect_has "device hash on host" "$out" "--hash-on device needs a CUDA device"
out=$("$BIN/wcd" --model "$W/model" --hash-on gpu 2>&1); expect_eq "hash-on exit" "$?" 2
expect_has "hash-on" "$out" "bad --hash-on 'gpu' (auto, device or cpu)"
# every choice option: a bad value exits 2 naming the option, the value and
# the choices
for c in "--ipc|vmm or legacy" "--load-path|direct or staged" \
	 "--sleep-arena|free or keep" "--takeover-verify|none or hash" \
	 "--hash-on|auto, device or cpu" "--direct-fill|splice or read" \
	 "--direct-io|auto, on or off"; do
	opt=${c%%|*}
	out=$("$BIN/wcd" --model "$W/model" "$opt" nope 2>&1); expect_eq "$opt nope exit" "$?" 2
	expect_has "$opt nope" "$out" "bad $opt 'nope' (${c#*|})"
done
out=$("$BIN/wcd" --model "$W/model" --read-part 1000 2>&1); expect_eq "read-part exit" "$?" 2
expect_has "read-part" "$out" "--read-part 1000: use 0 or a multiple of 4096 from 64K"
echo ok
