#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A partial in-place update on the host backend (issue 29: a partial
update's cost follows what changed), against a running wcd --device host:

  push_host.py --runtime-dir DIR [--device host] [--frac 0.04] [-r 5]

Takes whole tensors of the first layers (name order) up to --frac of the
served bytes, as the trainer's sources (clones in this process), and
times, alternating round by round: the floor, a copy of the same bytes
into fresh memory (torch.empty_like + copy_: page faults included, as a
session's fresh memfds have them), and update_from(partial=True,
in_place=True) of them. Prints the p50 of each, their ratio, the daemon's
reply and the library's phases (wc_push_times) of the last update.
"""
import argparse
import statistics
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtime-dir", required=True)
    ap.add_argument("--device", default="host")
    ap.add_argument("--frac", type=float, default=0.04)
    ap.add_argument("-r", "--rounds", type=int, default=5)
    a = ap.parse_args()
    import wcache
    conn = wcache.connect(device=a.device, runtime_dir=a.runtime_dir, timeout_ms=-1)
    m = conn.attach()
    ts = m.tensors()
    # checkpoint tensors: no view (fused, stacked) and no alias (wcache.h)
    ck = {t.name for t in m.manifest if not t.flags & 0x6}
    total = sum(ts[n].numel() * ts[n].element_size() for n in ck)
    src, got = {}, 0
    for n in sorted(k for k in ck if ".layers." in k):
        if got >= a.frac * total:
            break
        src[n] = ts[n].clone()
        got += src[n].numel() * src[n].element_size()
    del ts
    m.detach()
    floor, push, res = [], [], None
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for t in src.values():
            t.new_empty(t.shape).copy_(t)
        floor.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        res = conn.update_from(src, partial=True, in_place=True)
        push.append(time.perf_counter() - t0)
    f, p = statistics.median(floor), statistics.median(push)
    print("%d tensors, %d bytes of %d (%.1f%%)" % (len(src), got, total, 100.0 * got / total))
    print("floor (copy into fresh memory): p50 %.2f ms" % (f * 1e3))
    print("update_from(partial, in_place): p50 %.2f ms, %.2fx the floor" % (p * 1e3, p / f))
    print("reply: %s" % res.msg)
    print("phases: %s" % ", ".join("%s %s" % (k, "%.2f ms" % (v / 1e6) if k.endswith("_ns") else v)
                                   for k, v in conn.push_times().items()))
    conn.close()


if __name__ == "__main__":
    main()
