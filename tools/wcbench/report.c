/* SPDX-License-Identifier: MIT */
/*
 * Reports: latency series (percentiles by nearest rank), metrics, notes,
 * printed as a table or as JSON; progress lines on stderr; small helpers
 * shared by the subcommands.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "log.h"
#include "paths.h"
#include "wcbench.h"

void wb_report_init(struct wb_report *r, const char *bench)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->bench, sizeof(r->bench), "%s", bench);
}

void wb_report_free(struct wb_report *r)
{
	for (unsigned i = 0; i < r->nseries; i++)
		free(r->series[i].ns);
	r->nseries = 0;
}

struct wb_series *wb_series_add(struct wb_report *r, const char *name,
				size_t expect)
{
	struct wb_series *s;

	if (r->nseries >= WB_SERIES_MAX)
		die("more than %d series in one report", WB_SERIES_MAX);
	if (expect > WB_SAMPLES_MAX)
		die("%zu samples asked for series '%s'; at most %u fit, "
		    "ask for fewer requests", expect, name, WB_SAMPLES_MAX);
	if (expect < 16)
		expect = 16;
	s = &r->series[r->nseries++];
	memset(s, 0, sizeof(*s));
	snprintf(s->name, sizeof(s->name), "%s", name);
	s->ns = malloc(expect * sizeof(*s->ns));
	if (!s->ns)
		die("no memory for %zu samples", expect);
	s->cap = expect;
	return s;
}

void wb_metric_add(struct wb_report *r, const char *name, double value,
		   const char *unit)
{
	struct wb_metric *m;

	if (r->nmetrics >= WB_METRICS_MAX)
		die("more than %d metrics in one report", WB_METRICS_MAX);
	m = &r->metrics[r->nmetrics++];
	snprintf(m->name, sizeof(m->name), "%s", name);
	snprintf(m->unit, sizeof(m->unit), "%s", unit ? unit : "");
	m->value = value;
}

void wb_note_add(struct wb_report *r, const char *fmt, ...)
{
	va_list ap;

	if (r->nnotes >= WB_NOTES_MAX)
		return;
	va_start(ap, fmt);
	vsnprintf(r->notes[r->nnotes++], sizeof(r->notes[0]), fmt, ap);
	va_end(ap);
}

static const double pcts[] = { 50, 90, 99, 99.9 };
static const char *pct_keys[] = { "p50_us", "p90_us", "p99_us", "p999_us" };

static void emit_table(struct wb_report *r)
{
	char b[7][32];

	printf("wcbench %s: %s\n", r->bench, r->params);
	if (r->nseries) {
		printf("  %-22s %9s %11s %11s %11s %11s %11s %11s\n", "latency",
		       "n", "p50", "p90", "p99", "p99.9", "max", "mean");
		for (unsigned i = 0; i < r->nseries; i++) {
			struct wb_series *s = &r->series[i];

			for (unsigned k = 0; k < 4; k++)
				wb_fmt_ns(b[k], sizeof(b[k]), wb_series_pct(s, pcts[k]));
			wb_fmt_ns(b[4], sizeof(b[4]), wb_series_pct(s, 100));
			wb_fmt_ns(b[5], sizeof(b[5]), (uint64_t)wb_series_mean(s));
			printf("  %-22s %9zu %11s %11s %11s %11s %11s %11s\n",
			       s->name, s->n, b[0], b[1], b[2], b[3], b[4], b[5]);
		}
	}
	for (unsigned i = 0; i < r->nmetrics; i++) {
		const struct wb_metric *m = &r->metrics[i];
		double v = m->value;

		if (fabs(v) >= 1000 || v == floor(v))
			printf("  %-22s %.0f %s\n", m->name, v, m->unit);
		else
			printf("  %-22s %.3f %s\n", m->name, v, m->unit);
	}
	for (unsigned i = 0; i < r->nnotes; i++)
		printf("  note: %s\n", r->notes[i]);
}

/* The latency at each of WB_CDF_QUANTILES fractions (1%, 2%, ... 99%, then
 * 99.5, 99.9, 99.99 and 100%), so that scripts can draw or compare whole
 * distributions without the samples. */
static json_t *cdf_points(struct wb_series *s)
{
	json_t *a = json_array();

	for (unsigned i = 1; i <= 99; i++)
		json_array_append_new(a, json_real((double)wb_series_pct(s, i) /
						    1e3));
	json_array_append_new(a, json_real((double)wb_series_pct(s, 99.5) / 1e3));
	json_array_append_new(a, json_real((double)wb_series_pct(s, 99.9) / 1e3));
	json_array_append_new(a, json_real((double)wb_series_pct(s, 99.99) / 1e3));
	json_array_append_new(a, json_real((double)wb_series_pct(s, 100) / 1e3));
	return a;
}

static void emit_json(struct wb_report *r)
{
	json_t *root = json_object(), *series = json_object();
	json_t *metrics = json_object(), *units = json_object();
	json_t *notes = json_array();
	char *text;

	json_object_set_new(root, "bench", json_string(r->bench));
	json_object_set_new(root, "params", json_string(r->params));
	for (unsigned i = 0; i < r->nseries; i++) {
		struct wb_series *s = &r->series[i];
		json_t *o = json_object();

		json_object_set_new(o, "n", json_integer((json_int_t)s->n));
		json_object_set_new(o, "min_us",
				    json_real((double)wb_series_pct(s, 0) / 1e3));
		for (unsigned k = 0; k < 4; k++)
			json_object_set_new(o, pct_keys[k],
				json_real((double)wb_series_pct(s, pcts[k]) / 1e3));
		json_object_set_new(o, "max_us",
				    json_real((double)wb_series_pct(s, 100) / 1e3));
		json_object_set_new(o, "mean_us",
				    json_real(wb_series_mean(s) / 1e3));
		json_object_set_new(o, "cdf_us", cdf_points(s));
		json_object_set_new(series, s->name, o);
	}
	for (unsigned i = 0; i < r->nmetrics; i++) {
		json_object_set_new(metrics, r->metrics[i].name,
				    json_real(r->metrics[i].value));
		json_object_set_new(units, r->metrics[i].name,
				    json_string(r->metrics[i].unit));
	}
	for (unsigned i = 0; i < r->nnotes; i++)
		json_array_append_new(notes, json_string(r->notes[i]));
	json_object_set_new(root, "series", series);
	json_object_set_new(root, "metrics", metrics);
	json_object_set_new(root, "units", units);
	json_object_set_new(root, "notes", notes);
	text = json_dumps(root, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
	if (!text)
		die("could not format the JSON report (out of memory)");
	printf("%s\n", text);
	free(text);
	json_decref(root);
}

int wb_report_emit(struct wb_report *r, const struct wb_out *o)
{
	int rc = 0;

	if (o->json)
		emit_json(r);
	else
		emit_table(r);
	fflush(stdout);
	if (o->svg && wb_svg_write(r, o->svg) < 0)
		rc = 1;
	return rc;
}

/* --- progress ------------------------------------------------------------- */

static uint64_t progress_last_ns;
static bool progress_shown;

void wb_progress(const struct wb_out *o, const char *what, uint64_t done,
		 uint64_t total)
{
	static int tty = -1; /* isatty is a system call: ask once */
	uint64_t now, every;

	if (o->quiet)
		return;
	if (tty < 0)
		tty = isatty(STDERR_FILENO);
	now = clock_ns();
	every = tty ? 250000000ull : 2000000000ull;
	if (!progress_last_ns) {
		progress_last_ns = now;
		return;
	}
	if (now - progress_last_ns < every)
		return;
	progress_last_ns = now;
	fprintf(stderr, "%swcbench: %s %llu/%llu (%.0f%%)%s", tty ? "\r" : "",
		what, (unsigned long long)done, (unsigned long long)total,
		total ? 100.0 * (double)done / (double)total : 0.0,
		tty ? "   " : "\n");
	progress_shown = tty;
}

void wb_progress_end(const struct wb_out *o)
{
	if (!o->quiet && progress_shown)
		fprintf(stderr, "\r%60s\r", "");
	progress_shown = false;
	progress_last_ns = 0;
}

/* --- helpers -------------------------------------------------------------- */

uint64_t wb_parse_count(const char *opt, const char *s, uint64_t min,
			uint64_t max)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (end == s || errno)
		goto bad;
	if (*end == 'k' || *end == 'K')
		mul = 1000, end++;
	else if (*end == 'm' || *end == 'M')
		mul = 1000000, end++;
	if (*end || v > max / mul || v * mul < min)
		goto bad;
	return v * mul;
bad:
	die("%s '%s' is not a whole number in [%llu, %llu] "
	    "(k and m suffixes allowed)", opt, s, (unsigned long long)min,
	    (unsigned long long)max);
}

double wb_parse_double(const char *opt, const char *s, double min, double max)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end || errno || !(v >= min && v <= max))
		die("%s '%s' is not a number in [%g, %g]", opt, s, min,
		    max);
	return v;
}

int wb_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		close(fd);
		return rc;
	}
	return fd;
}

long wb_rss_kib(int pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

void wb_socket_path(char *out, size_t size, const char *socket,
		    const char *runtime_dir, const char *device)
{
	char tmpl[PATHS_MAX], name[PATHS_DEVICE_MAX + 1], err[BASE_ERR_LEN];
	static struct paths p; /* 5 paths of PATHS_MAX: keep it off the stack */

	if (socket) {
		snprintf(out, size, "%s", socket);
		return;
	}
	if (paths_template_env(tmpl, sizeof(tmpl), runtime_dir, err) < 0 ||
	    paths_device_name(device ? device : "host", name, sizeof(name),
			      err) < 0 ||
	    paths_resolve(&p, tmpl, name, err) < 0)
		die("%s (or give the daemon's socket with --socket "
		    "PATH)", err);
	snprintf(out, size, "%s", p.sock);
}
