#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the seeds of the wire_push fuzz target into
test/fuzz/corpus/wire_push: one well-formed payload of each message of an
update session (proto/wire/wire_push.h), behind the byte that picks its
decoder. Run it again after a layout change of those messages."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "wire_push")


def s(b):
    return struct.pack("<I", len(b)) + b


def pool(size, fd):
    return struct.pack("<QQIII", size, size, 1, 0, fd) + b"\0" * 64


def tensor(name, dims, pool_i, off, size, pieces):
    b = s(name) + s(b"BF16") + bytes([len(dims)]) + b"".join(struct.pack("<Q", d) for d in dims)
    b += struct.pack("<IQQI", pool_i, off, size, len(pieces))
    for pc in pieces:
        b += struct.pack("<QQQQQ", *pc)
    return b


SEEDS = {
    "open": bytes([0]) + struct.pack("<IQI", 7, 3, 5000),
    "opened": bytes([1]) + struct.pack("<QQQIQII", 7, 4, 3, 2, 4096, 60000, 2)
    + pool(4096, 0) + pool(8192, 1),
    "plan_req": bytes([2]) + struct.pack("<II", 0, 0),
    "plan": bytes([3]) + struct.pack("<III", 2, 0, 2)
    + tensor(b"model.embed_tokens.weight", [64, 16], 0, 0, 1024, [(1024, 1024, 1, 1024, 0)])
    + tensor(b"model.layers.0.mlp.down_proj.weight", [16, 32], 0, 1024, 512,
             [(32, 32, 16, 64, 0)]),
    "commit": bytes([4]) + struct.pack("<QII", 7, 1, 2) + struct.pack("<IIII", 0, 3, 3, 1),
    "abort": bytes([5]) + struct.pack("<Q", 7),
    "pause": bytes([6]) + struct.pack("<I", 1),
}

os.makedirs(OUT, exist_ok=True)
for k, v in SEEDS.items():
    with open(os.path.join(OUT, k), "wb") as f:
        f.write(v)
