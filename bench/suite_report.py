#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Assembles bench/run's raw results into one JSON file and a markdown table.

    suite_report.py RESULTS_DIR OUT.json MODEL_DIR QUICK

RESULTS_DIR holds what bench/run wrote (wcbench/pingpong_floor JSON,
redis-benchmark CSV, timings, /proc samples). Each table row pairs a wcache
figure with its floor or peer from the same run, the ratio, the target and
whether it is met. Missing inputs make a row say so instead of failing.
"""
import csv
import datetime
import json
import os
import platform
import socket
import statistics
import sys


def load_json(d, name):
    try:
        with open(os.path.join(d, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_text(d, name):
    try:
        with open(os.path.join(d, name)) as f:
            return f.read().strip()
    except OSError:
        return None


def redis_csv(d, name):
    """redis-benchmark --csv: the PING_MBULK row, latencies in us."""
    try:
        with open(os.path.join(d, name)) as f:
            for row in csv.DictReader(f):
                if row["test"] == "PING_MBULK":
                    return {
                        "requests_per_s": float(row["rps"]),
                        "p50_us": float(row["p50_latency_ms"]) * 1e3,
                        "p95_us": float(row["p95_latency_ms"]) * 1e3,
                        "p99_us": float(row["p99_latency_ms"]) * 1e3,
                        "max_us": float(row["max_latency_ms"]) * 1e3,
                        "mean_us": float(row["avg_latency_ms"]) * 1e3,
                    }
    except (OSError, KeyError, ValueError):
        pass
    return None


def rounds(d, name, ext, loader):
    """Every round's result of NAME.<round>.EXT, in round order."""
    out, r = [], 1
    while os.path.exists(os.path.join(d, f"{name}.{r}.{ext}")):
        out.append(loader(d, f"{name}.{r}.{ext}"))
        r += 1
    return [x for x in out if x is not None]


def med(values):
    v = [x for x in values if x is not None]
    return statistics.median(v) if v else None


def kib(s):
    return int(s.split()[1]) if s else None


def series(r, name, key):
    try:
        return r["series"][name][key]
    except (TypeError, KeyError):
        return None


def metric(r, key):
    try:
        return r["metrics"][key]
    except (TypeError, KeyError):
        return None


CDF_FRACS = [i / 100 for i in range(1, 100)] + [0.995, 0.999, 0.9999, 1.0]
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"]


def cdf_median(results, name):
    """Per quantile, the median over rounds of a series' "cdf_us"."""
    cdfs = [x["series"][name]["cdf_us"] for x in results
            if x and name in x.get("series", {})
            and len(x["series"][name].get("cdf_us", [])) == len(CDF_FRACS)]
    if not cdfs:
        return None
    return [statistics.median(c[i] for c in cdfs) for i in range(len(CDF_FRACS))]


def draw_cdfs(path, title, subtitle, lines):
    """A hand-written SVG in the style of wcbench --svg: latency (log axis)
    against the fraction of requests at or below it, one line per side."""
    import math
    lines = [(n, c) for n, c in lines if c]
    if not lines:
        return
    lo = math.floor(math.log10(max(min(c[0] for _, c in lines), 0.01)))
    hi = math.ceil(math.log10(max(c[-1] for _, c in lines)))
    hi = max(hi, lo + 1)
    W, L, R = 760, 70, 24
    top = 48 + 18 * len(lines) + 8
    ph, pw = 340, W - L - R
    H = int(top + ph + 58)
    x = lambda us: L + (math.log10(max(us, 0.01)) - lo) / (hi - lo) * pw
    y = lambda f: top + (1 - f) * ph
    esc = lambda t: (t.replace("&", "&amp;").replace("<", "&lt;")
                     .replace(">", "&gt;"))
    o = [f"<?xml version='1.0' encoding='UTF-8'?>",
         f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='{H}' "
         f"viewBox='0 0 {W} {H}' font-family='sans-serif' font-size='12'>",
         "<rect width='100%' height='100%' fill='white'/>",
         f"<text x='{L}' y='20' font-size='15' font-weight='bold'>{esc(title)}</text>",
         f"<text x='{L}' y='38' fill='#555'>{esc(subtitle)}</text>",
         f"<rect x='{L}' y='{top}' width='{pw}' height='{ph}' fill='none' stroke='#444'/>"]
    units = ["us", "ms", "s"]
    for dec in range(lo, hi + 1):
        for m in (1, 2, 5):
            xv = x(m * 10 ** dec)
            if xv > L + pw + 0.5:
                continue
            o.append(f"<line x1='{xv:.1f}' y1='{top}' x2='{xv:.1f}' y2='{top + ph}' "
                     f"stroke='{'#ccc' if m == 1 else '#eee'}'/>")
            if m == 1:
                u = min(max(dec, 0) // 3, 2)
                lab = f"{10 ** dec / 1000 ** u:g} {units[u]}"
                o.append(f"<text x='{xv:.1f}' y='{top + ph + 18}' "
                         f"text-anchor='middle'>{lab}</text>")
    for f, lab in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
        o.append(f"<line x1='{L}' y1='{y(f):.1f}' x2='{L + pw}' y2='{y(f):.1f}' "
                 f"stroke='#999' stroke-dasharray='4 4'/><text x='{L + pw - 4}' "
                 f"y='{y(f) - 3:.1f}' fill='#777' text-anchor='end'>{lab}</text>")
    for i in range(5):
        o.append(f"<text x='{L - 6}' y='{y(i / 4) + 4:.1f}' text-anchor='end'>{i / 4:.2f}</text>")
    for k, (name, c) in enumerate(lines):
        col = COLORS[k % len(COLORS)]
        pts, prev = [], y(0)
        for us, f in zip(c, CDF_FRACS):
            pts.append(f"{x(us):.1f},{prev:.1f} {x(us):.1f},{y(f):.1f}")
            prev = y(f)
        o.append(f"<polyline fill='none' stroke='{col}' stroke-width='2' points='{' '.join(pts)}'/>")
        ly = 48 + 18 * (k + 0.7)
        o.append(f"<line x1='{L}' y1='{ly - 4:.0f}' x2='{L + 20}' y2='{ly - 4:.0f}' "
                 f"stroke='{col}' stroke-width='3'/><text x='{L + 26}' y='{ly:.0f}'>"
                 f"{esc(name)}: p50 {c[49]:.1f} us, p99 {c[98]:.1f} us</text>")
    o.append(f"<text x='{L + pw / 2:.0f}' y='{top + ph + 40}' text-anchor='middle'>"
             "round-trip latency (log scale)</text>")
    o.append(f"<text transform='translate(16 {top + ph / 2:.0f}) rotate(-90)' "
             "text-anchor='middle'>fraction of requests at or below</text>")
    o.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(o) + "\n")


def steal_percent(d):
    """Share of CPU time the hypervisor took (steal) during the run."""
    a, b = read_text(d, "stat_before.txt"), read_text(d, "stat_after.txt")
    if not a or not b:
        return None
    x = [int(v) for v in a.split()[1:]]
    y = [int(v) for v in b.split()[1:]]
    total = sum(y) - sum(x)
    return 100.0 * (y[7] - x[7]) / total if total > 0 and len(x) > 7 else None


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    return {"host": socket.gethostname(), "cpus": os.cpu_count(),
            "cpu_model": model, "kernel": platform.release(), "memory": mem}


def fmt(v, unit):
    if v is None:
        return "n/a"
    if unit == "us":
        return f"{v:.1f} us" if v < 1000 else f"{v / 1e3:.2f} ms"
    if unit == "1/s":
        return f"{v:,.0f} /s"
    if unit == "GB/s":
        return f"{v:.2f} GB/s"
    if unit == "KiB":
        return f"{v:+,d} KiB"
    if unit == "%":
        return f"{v:.0f}%"
    return f"{v} {unit}"


def main():
    d, out, model, quick = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    places = (read_text(d, "places.txt") or "unpinned").split()
    live = load_json(d, "liveness.json")
    att = load_json(d, "attach.json")
    att2 = load_json(d, "attach2.json")
    lw = load_json(d, "load_warm.json")
    lc = load_json(d, "load_cold.json")
    nbytes = int(read_text(d, "model_bytes.txt") or 0)
    rss0 = kib(read_text(d, "rss_before.txt"))
    rss1 = kib(read_text(d, "rss_after.txt"))

    def gbps(secs_name):
        s = read_text(d, secs_name)
        return nbytes / float(s) / 1e9 if s and float(s) > 0 else None

    rtt64s = rounds(d, "rtt64", "json", load_json)
    redis64s = rounds(d, "redis64", "csv", redis_csv)

    def ms(results, name, key):
        """Median over rounds of a wcbench-shaped series value."""
        return med(series(x, name, key) for x in results)

    def mm(results, key):
        return med(metric(x, key) for x in results)

    def mr(results, key):
        return med(x[key] for x in results)

    rows = []

    def row(figure, ours, peer_name, peer, unit, target=None, ok=None,
            ratio=None):
        if ratio is None and ours is not None and peer:
            ratio = ours / peer
        rows.append({"figure": figure, "wcache": ours, "peer_name": peer_name,
                     "peer": peer, "unit": unit,
                     "ratio": ratio, "target": target,
                     "met": None if ok is None or ours is None else ok})

    where = {"cross": "client and daemon on two CPUs",
             "same": "client and daemon on one CPU",
             "unpinned": "unpinned"}
    raw_req = {}
    for pl in places:
        floors = rounds(d, f"floor.{pl}", "json", load_json)
        rtt1s = rounds(d, f"rtt1.{pl}", "json", load_json)
        redis1s = rounds(d, f"redis1.{pl}", "csv", redis_csv)
        raw_req[pl] = {"floor": floors, "rtt1": rtt1s, "redis1": redis1s}
        p50_1 = ms(rtt1s, "ping", "p50_us")
        f50 = ms(floors, "ping", "p50_us")
        w = where.get(pl, pl)
        row(f"PING p50, 1 connection, {w}", p50_1,
            "socketpair ping-pong (floor)", f50, "us", "<= 1.2x floor",
            p50_1 is not None and f50 is not None and p50_1 <= 1.2 * f50)
        row(f"PING p99, 1 connection, {w}", ms(rtt1s, "ping", "p99_us"),
            "socketpair ping-pong (floor)", ms(floors, "ping", "p99_us"),
            "us")
        row(f"PING p50, 1 connection, {w}", p50_1,
            "redis-server PING (redis-benchmark)", mr(redis1s, "p50_us"),
            "us")
        row(f"requests/s, 1 connection, {w}", mm(rtt1s, "requests_per_s"),
            "redis-server PING (redis-benchmark)",
            mr(redis1s, "requests_per_s"), "1/s")
        draw_cdfs(f"{out[:-5]}-ping-{pl}.svg",
                  f"PING round trip, 1 connection, {w}",
                  f"wcd (wcbench rtt) vs the socketpair floor; per-quantile "
                  f"median of {len(rtt1s)} rounds",
                  [("wcd", cdf_median(rtt1s, "ping")),
                   ("socketpair floor", cdf_median(floors, "ping"))])
    r64 = mm(rtt64s, "requests_per_s")
    p64 = mr(redis64s, "requests_per_s")
    w = where.get(places[0], places[0])
    row(f"requests/s, 64 connections, {w}", r64,
        "redis-server PING (redis-benchmark)", p64, "1/s", ">= 1.5x redis",
        r64 is not None and p64 is not None and r64 >= 1.5 * p64)
    row("PING p99, 64 connections", ms(rtt64s, "ping", "p99_us"),
        "redis-server PING (redis-benchmark)", mr(redis64s, "p99_us"), "us")
    row("wcd CPU use at 64 connections", mm(rtt64s, "server_cpu_percent"),
        "the client's (wcbench rtt)", mm(rtt64s, "client_cpu_percent"), "%")
    nrss = read_text(d, "rss_requests.txt")
    drss = rss1 - rss0 if rss0 is not None and rss1 is not None else None
    row(f"wcd VmRSS change across {int(nrss or 0):,} PINGs", drss,
        f"before: {rss0} KiB" if rss0 else "", None, "KiB", "within 1 MiB",
        drss is not None and abs(drss) <= 1024)
    l99 = series(live, "reactor (pidfd)", "p99_us")
    row("liveness p99 (exit to report)", l99, "poll every 2 s",
        series(live, "poll every 2 s", "p99_us"), "us", "<= 1 ms",
        l99 is not None and l99 <= 1000)
    row("liveness p99 (exit to report)", l99,
        "floor: a parent blocked in waitpid",
        series(live, "floor: blocking waitpid", "p99_us"), "us")
    row("liveness p50 (exit to report)",
        series(live, "reactor (pidfd)", "p50_us"), "poll every 2 s",
        series(live, "poll every 2 s", "p50_us"), "us")
    a50 = series(att, "cycle (total)", "p50_us")
    cat_s = read_text(d, "cat_warm.txt")
    cat_us = float(cat_s) * 1e6 if cat_s else None
    row("attach llama-1b p50, host, 1 process", a50,
        "read the model from the page cache (cat)", cat_us, "us", "<= 1 ms",
        a50 is not None and a50 <= 1000)
    row("attach llama-1b p99, host, 1 process",
        series(att, "cycle (total)", "p99_us"),
        "read the model from the page cache (cat)", cat_us, "us")
    row("attach llama-1b, host: a new process's first cycle (computes the identity)",
        series(att, "first cycle of a process", "p50_us"),
        "read the model from the page cache (cat)", cat_us, "us")
    row("attach llama-1b p50, host, 1 process, no identity sent",
        series(load_json(d, "attach_noid.json"), "cycle (total)", "p50_us"),
        "read the model from the page cache (cat)", cat_us, "us")
    row("attach llama-1b p50, host, 2 processes",
        series(att2, "cycle (total)", "p50_us"),
        "read the model from the page cache (cat)", cat_us, "us")
    row("load, warm page cache (wcd, host backend)", metric(lw, "load_gbps"),
        "cat from the page cache", gbps("cat_warm.txt"), "GB/s")
    row("load, warm page cache (wcd, host backend)", metric(lw, "load_gbps"),
        "copy to /dev/shm", gbps("shm_warm.txt"), "GB/s")
    row("load, warm: wcd's read phase (file -> memfd)",
        metric(lw, "read_gbps"), "copy to /dev/shm", gbps("shm_warm.txt"),
        "GB/s")
    row("load, warm: wcd's hash phase after the fill (n/a: all hashed as they landed)",
        metric(lw, "hash_gbps"), "", None, "GB/s")
    if lc:
        nr = len((read_text(d, "cold_rounds.txt") or "").split("\n"))
        ours, peer = metric(lc, "load_gbps"), gbps("cat_cold.txt")
        row("load, cold (page cache dropped): round of the median ratio"
            + (f" of {nr}" if nr > 1 else ""), ours,
            "cat after a drop, same round", peer, "GB/s", ">= 0.9x cat",
            ours is not None and bool(peer) and ours >= 0.9 * peer)
        low = load_json(d, "load_cold_low.json")
        if low:
            row(f"load, cold: round of the lowest ratio of {nr}",
                metric(low, "load_gbps"), "cat after a drop, same round",
                gbps("cat_cold_low.txt"), "GB/s")

    now = datetime.datetime.now(datetime.timezone.utc)
    res = {
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "quick": quick == "1",
        "model": model,
        "model_bytes": nbytes,
        "load_before": read_text(d, "load_before.txt"),
        "load_after": read_text(d, "load_after.txt"),
        "steal_percent": steal_percent(d),
        "redis_version": read_text(d, "redis_version.txt"),
        "commands": (read_text(d, "commands.txt") or "").splitlines(),
        "table": rows,
        "rounds": len(rtt64s),
        "placements": places,
        "raw": {"requests_1_connection": raw_req, "rtt64": rtt64s,
                "redis64": redis64s, "liveness": live,
                "attach": att, "attach2": att2, "load_warm": lw,
                "load_cold": lc, "rss_before_kib": rss0,
                "rss_after_kib": rss1,
                "cat_warm_s": read_text(d, "cat_warm.txt"),
                "shm_warm_s": read_text(d, "shm_warm.txt"),
                "cat_cold_s": read_text(d, "cat_cold.txt"),
                "cold_rounds": read_text(d, "cold_rounds.txt")},
        "skipped": [s for s in (read_text(d, "gpu_skipped.txt"),
                                read_text(d, "cold_skipped.txt")) if s],
        "gpu_logs": sorted(os.listdir(os.path.join(d, "gpu")))
        if os.path.isdir(os.path.join(d, "gpu")) else [],
    }
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")

    m = res["machine"]
    print(f"### bench/run, {res['date']}, {m['host']}: {m['cpus']} x "
          f"{m['cpu_model']}, {m['memory']}, Linux {m['kernel']}")
    steal = res["steal_percent"]
    steal = f"{steal:.1f}%" if steal is not None else "n/a"
    quick = " (--quick: not for the record)" if res["quick"] else ""
    print(f"load average before: {res['load_before']}; after: "
          f"{res['load_after']}; CPU time stolen by the hypervisor during "
          f"the run: {steal}{quick}")
    print()
    print("| figure | wcache | floor / peer (same run) | ratio | target | met |")
    print("| --- | ---: | --- | ---: | --- | --- |")
    for r in rows:
        peer = r["peer_name"]
        if r["peer"] is not None:
            peer += ": " + fmt(r["peer"], r["unit"])
        ratio = ""
        if r["ratio"] is not None and r["ratio"] > 0:
            ratio = (f"{r['ratio']:.2f}x" if r["ratio"] >= 0.1
                     else f"1/{1 / r['ratio']:,.0f}")
        met = {True: "yes", False: "**no**", None: ""}[r["met"]]
        ours = fmt(r["wcache"], r["unit"])
        print(f"| {r['figure']} | {ours} | {peer} | {ratio} | "
              f"{r['target'] or ''} | {met} |")
    print()
    print(f"Request figures: median over {res['rounds']} interleaved rounds "
          "(floor, wcd, redis-server in turn); wcd and redis-server pinned "
          "to CPU 1, the client on CPU 0 (two CPUs) or CPU 1 (one CPU), the "
          "floor placed alike. "
          "Each side of a request figure uses its own native client: wcbench "
          "rtt (blocking for one connection, one io_uring for 64) for wcd, "
          "redis-benchmark for redis-server, both on unix sockets.")
    for s in res["skipped"]:
        print(f"Skipped: {s}")
    print(f"Raw results: {out}")


if __name__ == "__main__":
    main()
