import sys, os, time
sys.path.insert(0, "bench/gpu")
import push_bench as pb
import wcache
sd = pb.load_trainer(sys.argv[1])
names = list(sd)
total = sum(v.numel() * v.element_size() for v in sd.values())
part = pb.pick(sorted(names), sd, 0.02 * total, lambda k: ".layers." in k)
attn = pb.pick(sorted(names, key=pb.layer_key), sd, 0.02 * total,
               lambda k: ".self_attn." in k and k.endswith("_proj.weight"))
conn = wcache.connect(device="0", runtime_dir=sys.argv[2])
for label, flags, s in (("inplace", 4, sd), ("inpl-mlp", 6, {k: sd[k] for k in part}),
                        ("inpl-attn", 6, {k: sd[k] for k in attn})):
    for r in range(4):
        ph = pb.push_phases(conn, s, flags)
        sys.stderr.flush()
        print("P %s: " % label + ", ".join("%s %.3f" % (k[:-2], v * 1e3) for k, v in ph.items()), flush=True)
conn.close()
