/* SPDX-License-Identifier: MIT */
/*
 * The latency CDF as a hand-written SVG (no dependencies): one line per
 * series, latency on a log10 axis (decades with 2x and 5x minor ticks),
 * cumulative fraction on a linear axis with guides at p50, p90 and p99, and
 * a legend above the plot with each series' p50 and p99. Each line has at
 * most SVG_POINTS points, taken at evenly spaced ranks, so the file stays
 * small for any n.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "wcbench.h"

#define SVG_W 760
#define SVG_L 70
#define SVG_R 24
#define SVG_T0 48   /* top margin above the legend */
#define SVG_LEGEND 18 /* legend line height */
#define SVG_B 58
#define SVG_POINTS 600
#define SVG_SUBTITLE_MAX 110 /* characters that fit the width */

static const char *colors[] = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
				"#9467bd", "#8c564b", "#e377c2", "#7f7f7f" };

/* Writes s with the five XML specials escaped. */
static void xml_put(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&apos;", f); break;
		default: fputc(*s, f);
		}
	}
}

/* As xml_put, cut to max characters with "..." (the subtitle must fit). */
static void xml_put_cut(FILE *f, const char *s, size_t max)
{
	char buf[256];
	size_t n = strnlen(s, sizeof(buf) - 1);

	if (max < 4 || max >= sizeof(buf))
		max = sizeof(buf) - 1;
	memcpy(buf, s, n);
	buf[n] = 0;
	if (n > max)
		memcpy(buf + max - 3, "...", 4);
	xml_put(f, buf);
}

static void decade_label(char *buf, size_t size, int d)
{
	static const char *units[] = { "ns", "us", "ms", "s" };
	int u = d / 3;

	if (u > 3)
		u = 3;
	snprintf(buf, size, "%.0f %s", pow(10, d - 3 * u), units[u]);
}

struct axis {
	double lo, hi;  /* log10 ns */
	double pw, ph;  /* plot size */
	double top;     /* plot's top edge, below the legend */
};

static double ax_x(const struct axis *a, double ns)
{
	double v = log10(ns < 1 ? 1 : ns);

	return SVG_L + (v - a->lo) / (a->hi - a->lo) * a->pw;
}

static double ax_y(const struct axis *a, double frac)
{
	return a->top + (1 - frac) * a->ph;
}

static void draw_axes(FILE *f, const struct axis *a)
{
	char label[32];

	fprintf(f, "<rect x='%d' y='%.0f' width='%.0f' height='%.0f' "
		"fill='none' stroke='#444'/>\n", SVG_L, a->top, a->pw, a->ph);
	for (int d = (int)a->lo; d <= (int)a->hi; d++) {
		for (int m = 1; m <= 5; m += (m == 1 ? 1 : 3)) {
			double x = ax_x(a, m * pow(10, d));

			if (x < SVG_L - 0.5 || x > SVG_L + a->pw + 0.5)
				continue;
			fprintf(f, "<line x1='%.1f' y1='%.0f' x2='%.1f' y2='%.0f' "
				"stroke='%s'/>\n", x, a->top, x, a->top + a->ph,
				m == 1 ? "#ccc" : "#eee");
			if (m != 1)
				continue;
			decade_label(label, sizeof(label), d);
			fprintf(f, "<text x='%.1f' y='%.0f' text-anchor='middle'>"
				"%s</text>\n", x, a->top + a->ph + 18, label);
		}
	}
	for (int i = 0; i <= 4; i++) {
		double y = ax_y(a, i / 4.0);

		fprintf(f, "<line x1='%d' y1='%.1f' x2='%.0f' y2='%.1f' "
			"stroke='#eee'/>\n<text x='%d' y='%.1f' "
			"text-anchor='end'>%.2f</text>\n", SVG_L, y,
			SVG_L + a->pw, y, SVG_L - 6, y + 4, i / 4.0);
	}
	for (int i = 0; i < 3; i++) {
		static const double g[] = { 0.5, 0.9, 0.99 };
		static const char *gl[] = { "p50", "p90", "p99" };
		double y = ax_y(a, g[i]);

		fprintf(f, "<line x1='%d' y1='%.1f' x2='%.0f' y2='%.1f' "
			"stroke='#999' stroke-dasharray='4 4'/>\n<text x='%.0f' "
			"y='%.1f' fill='#777' text-anchor='end'>%s</text>\n",
			SVG_L, y, SVG_L + a->pw, y, SVG_L + a->pw - 4, y - 3,
			gl[i]);
	}
	fprintf(f, "<text x='%.0f' y='%.0f' text-anchor='middle'>latency "
		"(log scale)</text>\n", SVG_L + a->pw / 2, a->top + a->ph + 40);
	fprintf(f, "<text transform='translate(16 %.0f) rotate(-90)' "
		"text-anchor='middle'>fraction of samples at or below</text>\n",
		a->top + a->ph / 2);
}

static void draw_series(FILE *f, const struct axis *a, struct wb_series *s,
			unsigned idx)
{
	size_t pts = s->n < SVG_POINTS ? s->n : SVG_POINTS;
	const char *color = colors[idx % 8];
	char p50[32], p99[32];
	double ly = SVG_T0 + SVG_LEGEND * (idx + 0.7), prev_y = ax_y(a, 0);

	wb_series_pct(s, 50); /* sorts */
	fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' "
		"points='", color);
	for (size_t i = 0; i < pts; i++) {
		size_t k = pts > 1 ? i * (s->n - 1) / (pts - 1) : 0;
		double y = ax_y(a, (double)(k + 1) / (double)s->n);
		double x = ax_x(a, (double)s->ns[k]);

		fprintf(f, "%.1f,%.1f %.1f,%.1f ", x, prev_y, x, y);
		prev_y = y;
	}
	fprintf(f, "'/>\n");
	wb_fmt_ns(p50, sizeof(p50), wb_series_pct(s, 50));
	wb_fmt_ns(p99, sizeof(p99), wb_series_pct(s, 99));
	fprintf(f, "<line x1='%d' y1='%.0f' x2='%d' y2='%.0f' stroke='%s' "
		"stroke-width='3'/>\n<text x='%d' y='%.0f'>", SVG_L, ly - 4,
		SVG_L + 20, ly - 4, color, SVG_L + 26, ly);
	xml_put(f, s->name);
	fprintf(f, ": n=%zu, p50 %s, p99 %s</text>\n", s->n, p50, p99);
}

int wb_svg_write(struct wb_report *r, const char *path)
{
	struct axis a = { .pw = SVG_W - SVG_L - SVG_R };
	double lo = INFINITY, hi = 0;
	unsigned drawn = 0, shown = 0;
	int h;
	FILE *f;

	for (unsigned i = 0; i < r->nseries; i++) {
		struct wb_series *s = &r->series[i];

		if (!s->n)
			continue;
		shown++;
		lo = fmin(lo, (double)wb_series_pct(s, 0));
		hi = fmax(hi, (double)wb_series_pct(s, 100));
	}
	if (lo == INFINITY) {
		log_error("--svg %s: the report has no latency samples to draw",
			  path);
		return -EINVAL;
	}
	a.top = SVG_T0 + SVG_LEGEND * shown + 8;
	a.ph = 340;
	h = (int)(a.top + a.ph) + SVG_B;
	a.lo = floor(log10(lo < 1 ? 1 : lo));
	a.hi = ceil(log10(hi < 1 ? 1 : hi));
	if (a.hi <= a.lo)
		a.hi = a.lo + 1;
	f = fopen(path, "we");
	if (!f) {
		log_error("--svg %s: cannot create the file: %s; pick a writable "
			  "path", path, strerror(errno));
		return -errno;
	}
	fprintf(f, "<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns="
		"'http://www.w3.org/2000/svg' width='%d' height='%d' "
		"viewBox='0 0 %d %d' font-family='sans-serif' font-size='12'>\n"
		"<rect width='100%%' height='100%%' fill='white'/>\n",
		SVG_W, h, SVG_W, h);
	fprintf(f, "<text x='%d' y='20' font-size='15' font-weight='bold'>"
		"wcbench %s: latency CDF</text>\n<text x='%d' y='38' "
		"fill='#555'>", SVG_L, r->bench, SVG_L);
	xml_put_cut(f, r->params, SVG_SUBTITLE_MAX);
	fprintf(f, "</text>\n");
	draw_axes(f, &a);
	for (unsigned i = 0; i < r->nseries; i++)
		if (r->series[i].n)
			draw_series(f, &a, &r->series[i], drawn++);
	fprintf(f, "</svg>\n");
	if (fclose(f) != 0) {
		log_error("--svg %s: write failed: %s", path, strerror(errno));
		return -EIO;
	}
	return 0;
}
