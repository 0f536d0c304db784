#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""attach(wait=False)'s thread beside an engine thread that runs Python:
how long the thread takes alone and while this thread spins in Python for
--busy-ms (each return of a thread into Python waits for the GIL, up to
its switch interval, 5 ms by default).

  py_pending.py --model DIR --runtime-dir RD --device host:NAME [-n 8] [--busy-ms 30]

Alternated, -n times each, on one connection; prints the thread's time
(PendingModel.finished - started), median, min and max of each.
"""
import argparse
import statistics
import time

import wcache


def busy(ms):
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--runtime-dir", required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--busy-ms", type=float, default=30)
    a = ap.parse_args()
    res = {"alone": [], "beside busy Python": []}
    with wcache.connect(device=a.device, runtime_dir=a.runtime_dir) as c:
        for _ in range(a.n):
            for k in res:
                p = c.attach(model_dir=a.model, wait=False)
                if k != "alone":
                    busy(a.busy_ms)
                m = p.result()
                res[k].append((p.finished - p.started) * 1e3)
                m.detach()
    for k, v in res.items():
        print("%-20s the attach thread %.2f ms median [%.2f, %.2f] of %d" % (
            k, statistics.median(v), min(v), max(v), len(v)))


if __name__ == "__main__":
    main()
