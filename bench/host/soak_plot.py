#!/usr/bin/env python3
"""bench/host/soak's report: a markdown table from the soak JSON and an SVG of the
daemon's RSS and descriptor count over time (handovers show as pid changes).
No plotting library: the SVG is written by hand."""
import json
import sys


def svg(samples, path, title):
    w, h, m = 720, 300, 50
    ts = [s["t"] for s in samples] or [0]
    tmax = max(ts) or 1
    rss = [s["rss_kb"] / 1024 for s in samples]
    fds = [s["fds"] for s in samples]
    rmax = max(rss + [1]) * 1.2
    fmax = max(fds + [1]) * 1.2

    def pts(vals, vmax):
        return " ".join("%.1f,%.1f" % (m + (w - 2 * m) * t / tmax,
                                       h - m - (h - 2 * m) * v / vmax)
                        for t, v in zip(ts, vals))
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18">%s</text>' % (m, title),
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (m, h - m, w - m, h - m),
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (m, m, m, h - m),
           '<text x="%d" y="%d">time (s), 0 .. %.0f</text>' % (w / 2 - 40, h - m + 28, tmax),
           '<text x="4" y="%d" fill="#1f77b4">RSS MiB (max %.1f)</text>' % (m - 8, rmax / 1.2),
           '<text x="%d" y="%d" fill="#d62728">fds (max %d)</text>' % (w - m - 80, m - 8, int(fmax / 1.2)),
           '<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="%s"/>' % pts(rss, rmax),
           '<polyline fill="none" stroke="#d62728" stroke-width="2" points="%s"/>' % pts(fds, fmax)]
    prev = None
    for s in samples:
        if prev is not None and s["pid"] != prev:
            x = m + (w - 2 * m) * s["t"] / tmax
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999" '
                       'stroke-dasharray="3,3"/>' % (x, m, x, h - m))
        prev = s["pid"]
    out.append('<text x="%d" y="%d" fill="#999">dashed: a handover (new pid)</text>' % (m + 4, h - m - 6))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    r = json.load(open(sys.argv[1]))
    title = "wcd soak: %d clients, %.0f s, %d kills, %d handovers" % (
        r["clients"], r["seconds"], r["kills"], r["restarts"])
    if len(sys.argv) > 3:
        title += " (%s)" % sys.argv[3]
    svg(r["samples"], sys.argv[2], title)
    print(title)
    print()
    print("| request | count | errors | p50 us | p99 us |")
    print("| --- | ---: | ---: | ---: | ---: |")
    tot = err = 0
    for k, v in r["requests"].items():
        print("| %s | %d | %d | %.0f | %.0f |" % (k, v["count"], v["errors"], v["p50_us"], v["p99_us"]))
        tot += v["count"]
        err += v["errors"]
    print("| all | %d | %d | | |" % (tot, err))
    s = [x for x in r["samples"] if x["rss_kb"] >= 0]
    if s:
        print()
        print("daemon: RSS %.1f -> %.1f MiB (max %.1f), fds %d -> %d (max %d); "
              "handovers %d (%d failed, mean %.2f s, max %.2f s); kills %d" % (
                  s[0]["rss_kb"] / 1024, s[-1]["rss_kb"] / 1024,
                  max(x["rss_kb"] for x in s) / 1024, s[0]["fds"], s[-1]["fds"],
                  max(x["fds"] for x in s), r["restarts"], r["restart_failures"],
                  r["restart_s_mean"], r["restart_s_max"], r["kills"]))


main()
