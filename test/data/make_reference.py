#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes reference safetensors files with the reference writers, for
test/proto/st_reference.sh to parse with our strict C parser.

Needs torch, safetensors, transformers and xxhash (the GPU machine has them;
this checkout's build machine does not). Run from the repository root:

    python3 test/data/make_reference.py test/data/reference

and commit test/data/reference/ (well under 2 MB). It writes:

    dtypes.safetensors   safetensors.torch.save_file: every dtype this torch
                         and safetensors can store, a scalar, an empty tensor,
                         a non-contiguous source, __metadata__
    numpy.safetensors    safetensors.numpy.save_file: a few numpy dtypes
    llama/               transformers save_pretrained of a tiny random
                         LlamaForCausalLM, sharded (max_shard_size) so it has
                         model.safetensors.index.json
    hashes.txt           FILE<TAB>TENSOR<TAB>DTYPE<TAB>SHAPE<TAB>XXH3-128 for
                         every tensor: the hash is Python xxhash.xxh3_128 over
                         the tensor's bytes as the reference loader returns
                         them (safetensors.torch.load_file / numpy), the dtype
                         and shape as the writer put them in the header
    versions.txt         library versions used
"""
import json
import os
import struct
import sys

import numpy as np
import torch
import xxhash
import safetensors
import safetensors.numpy
import safetensors.torch
import transformers


def raw_bytes(t):
    """The tensor's bytes in memory order (little-endian, as on disk)."""
    t = t.detach().contiguous().cpu()
    if t.is_complex():
        t = torch.view_as_real(t).contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def try_dtype(name, make):
    """A tensor of a dtype this torch/safetensors may lack, or None."""
    dt = getattr(torch, name, None)
    if dt is None:
        return None
    try:
        t = make(dt)
        safetensors.torch.save({"x": t})  # can this safetensors store it?
        return t
    except Exception as e:  # noqa: BLE001 - report and skip the dtype
        print(f"skip {name}: {e}", file=sys.stderr)
        return None


def main():
    # The hex must be the canonical (big-endian) form `xxhsum -H2` prints.
    want = "06b05ab6733a618578af5f94892f3950"  # xxhsum -H2 of b"abc"
    if xxhash.xxh3_128(b"abc").hexdigest() != want:
        sys.exit("this xxhash's xxh3_128 hexdigest is not canonical: " +
                 xxhash.xxh3_128(b"abc").hexdigest())
    out = sys.argv[1] if len(sys.argv) > 1 else "test/data/reference"
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)
    g = torch.Generator().manual_seed(1234)

    # 1. safetensors.torch.save_file, every dtype it can store.
    base = torch.randn(3, 5, generator=g)
    tensors = {
        "f32": base.clone(),
        "f16": base.to(torch.float16),
        "bf16": base.to(torch.bfloat16),
        "f64": base.to(torch.float64),
        "i8": (base * 40).clamp(-128, 127).to(torch.int8),
        "u8": (base * 40 + 100).clamp(0, 255).to(torch.uint8),
        "i16": (base * 1000).to(torch.int16),
        "i32": (base * 100000).to(torch.int32),
        "i64": (base * 1e9).to(torch.int64),
        "bool": base > 0,
        "scalar": torch.tensor(3.25),
        "empty": torch.zeros(0, 4),
        "empty_bf16": torch.zeros(2, 0, 3, dtype=torch.bfloat16),
        "one": torch.ones(1),
        "rank4": torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5),
        "transposed": base.t().contiguous(),
    }
    for name, make in [
        ("float8_e4m3fn", lambda dt: base.to(dt)),
        ("float8_e5m2", lambda dt: base.to(dt)),
        ("float8_e8m0fnu", lambda dt: base.abs().to(dt)),
        ("uint16", lambda dt: (base * 100 + 400).to(torch.int32).to(dt)),
        ("uint32", lambda dt: (base * 100 + 400).to(torch.int64).to(dt)),
        ("uint64", lambda dt: (base * 100 + 400).to(torch.int64).to(dt)),
        ("complex64", lambda dt: torch.complex(base, -base).to(dt)),
    ]:
        t = try_dtype(name, make)
        if t is not None:
            tensors[name] = t
    safetensors.torch.save_file(tensors, os.path.join(out, "dtypes.safetensors"),
                                metadata={"format": "pt", "note": "wcache reference"})

    # 2. safetensors.numpy.save_file.
    rng = np.random.default_rng(5)
    arrays = {
        "np_f32": rng.standard_normal((4, 6)).astype(np.float32),
        "np_f16": rng.standard_normal((7,)).astype(np.float16),
        "np_i64": rng.integers(-5, 5, (2, 2, 2)).astype(np.int64),
        "np_u16": rng.integers(0, 60000, (9,)).astype(np.uint16),
        "np_bool": rng.integers(0, 2, (5,)).astype(np.bool_),
        "np_scalar": np.array(7, dtype=np.int32),
    }
    safetensors.numpy.save_file(arrays, os.path.join(out, "numpy.safetensors"))

    # 3. transformers save_pretrained, sharded, with an index.
    cfg = transformers.LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=128, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    mdir = os.path.join(out, "llama")
    try:
        model.save_pretrained(mdir, max_shard_size="100KB", safe_serialization=True)
    except TypeError:  # transformers without the safe_serialization switch
        model.save_pretrained(mdir, max_shard_size="100KB")
    if not os.path.exists(os.path.join(mdir, "model.safetensors.index.json")):
        sys.exit("save_pretrained wrote no index: lower max_shard_size")

    # hashes.txt: every tensor of every file, through the reference loaders.
    lines = []
    files = ["dtypes.safetensors", "numpy.safetensors"] + sorted(
        "llama/" + f for f in os.listdir(mdir) if f.endswith(".safetensors"))
    for rel in files:
        path = os.path.join(out, rel)
        hdr = header(path)
        if rel == "numpy.safetensors":
            loaded = {k: v.tobytes() for k, v in safetensors.numpy.load_file(path).items()}
        else:
            loaded = {k: raw_bytes(v) for k, v in safetensors.torch.load_file(path).items()}
        for name in sorted(loaded):
            info = hdr[name]
            shape = ",".join(str(d) for d in info["shape"])
            lines.append("\t".join([rel, name, info["dtype"], shape,
                                    xxhash.xxh3_128(loaded[name]).hexdigest()]))
    with open(os.path.join(out, "hashes.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "versions.txt"), "w") as f:
        f.write(f"torch {torch.__version__}\nsafetensors {safetensors.__version__}\n"
                f"transformers {transformers.__version__}\nxxhash {getattr(xxhash, 'VERSION', '?')}\n"
                f"numpy {np.__version__}\n")
    total = sum(os.path.getsize(os.path.join(dp, f))
                for dp, _, fs in os.walk(out) for f in fs)
    print(f"wrote {len(lines)} tensors in {len(files)} files to {out} ({total} bytes)")
    if total > 2 * 1024 * 1024:
        sys.exit(f"reference data is {total} bytes, over 2 MB")


if __name__ == "__main__":
    main()
