/* SPDX-License-Identifier: MIT */
/*
 * Latency series: samples pushed as they come (bounded by
 * WB_SAMPLES_MAX), percentiles by nearest rank (sorted once, on first
 * asked), the mean; and how a duration prints. Below report.c and svg.c,
 * which both read series (so that neither calls the other's helpers).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"
#include "wcbench.h"

void wb_series_push(struct wb_series *s, uint64_t ns)
{
	if (s->n == s->cap) {
		size_t cap = s->cap * 2;
		uint64_t *p;

		if (cap > WB_SAMPLES_MAX)
			cap = WB_SAMPLES_MAX;
		if (cap <= s->n)
			return; /* full: the bound keeps the first samples */
		p = realloc(s->ns, cap * sizeof(*p));
		if (!p)
			die("no memory for %zu samples", cap);
		s->ns = p;
		s->cap = cap;
	}
	s->ns[s->n++] = ns;
	s->sorted = false;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void series_sort(struct wb_series *s)
{
	if (!s->sorted)
		qsort(s->ns, s->n, sizeof(*s->ns), cmp_u64);
	s->sorted = true;
}

uint64_t wb_series_pct(struct wb_series *s, double p)
{
	size_t rank;

	if (!s->n)
		return 0;
	series_sort(s);
	rank = (size_t)ceil(p / 100.0 * (double)s->n);
	if (rank < 1)
		rank = 1;
	if (rank > s->n)
		rank = s->n;
	return s->ns[rank - 1];
}

double wb_series_mean(const struct wb_series *s)
{
	double sum = 0;

	for (size_t i = 0; i < s->n; i++)
		sum += (double)s->ns[i];
	return s->n ? sum / (double)s->n : 0;
}

void wb_fmt_ns(char *buf, size_t size, uint64_t ns)
{
	if (ns < 1000000)
		snprintf(buf, size, "%.1f us", (double)ns / 1e3);
	else if (ns < 1000000000)
		snprintf(buf, size, "%.3f ms", (double)ns / 1e6);
	else
		snprintf(buf, size, "%.3f s", (double)ns / 1e9);
}
