/* SPDX-License-Identifier: MIT */
/*
 * wcbench: the latency tool. Each subcommand (rtt, attach, load, liveness)
 * fills a report -- named latency series plus scalar metrics -- and the
 * shared code prints it as a table for people, as JSON (--json) for scripts,
 * and draws the latency CDF as a hand-written SVG (--svg FILE).
 *
 * Bounds: WB_SERIES_MAX series and WB_METRICS_MAX metrics per report; each
 * series holds at most WB_SAMPLES_MAX samples (checked before growing).
 */
#ifndef WCBENCH_H
#define WCBENCH_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "clock.h" /* clock_ns: the durations measured here */

#define WB_SERIES_MAX 8
#define WB_METRICS_MAX 48
#define WB_NOTES_MAX 8
#define WB_SAMPLES_MAX (64u << 20)  /* 64 Mi samples = 512 MiB per series */
#define WB_NAME_LEN 48

struct wb_series {
	char name[WB_NAME_LEN];
	uint64_t *ns;           /* samples in nanoseconds */
	size_t n;
	size_t cap;
	bool sorted;
};

struct wb_metric {
	char name[WB_NAME_LEN];
	double value;
	char unit[16];
};

struct wb_report {
	char bench[16];                 /* "rtt", "attach", ... */
	char params[512];               /* one line: what was run */
	struct wb_series series[WB_SERIES_MAX];
	unsigned nseries;
	struct wb_metric metrics[WB_METRICS_MAX];
	unsigned nmetrics;
	char notes[WB_NOTES_MAX][256];
	unsigned nnotes;
};

/* Output options every subcommand takes. */
struct wb_out {
	bool json;
	bool quiet;
	const char *svg;
};

/* --json, --svg FILE, -q/--quiet, -h/--help: append to a subcommand's
 * getopt_long table; wb_out_opt handles their codes. */
#define WB_OPT_JSON 0x1001
#define WB_OPT_SVG 0x1002
#define WB_LONGOPTS_OUT                                     \
	{ "json", no_argument, NULL, WB_OPT_JSON },         \
	{ "svg", required_argument, NULL, WB_OPT_SVG },     \
	{ "quiet", no_argument, NULL, 'q' },                \
	{ "help", no_argument, NULL, 'h' }
#define WB_HELP_OUT                                                          \
	"  --json          print one JSON object on stdout instead of the table\n" \
	"  --svg FILE      draw the latency CDF of every series into FILE\n"    \
	"  -q, --quiet     no progress on stderr\n"                              \
	"  -h, --help      this text\n"

/* Returns true when c was one of the output options. */
bool wb_out_opt(struct wb_out *o, int c, const char *arg);

/* --- report --------------------------------------------------------------- */

void wb_report_init(struct wb_report *r, const char *bench);
void wb_report_free(struct wb_report *r);
/* Adds a series expecting about `expect` samples (allocated now, so the
 * hot path does not allocate); dies when over the bounds. */
struct wb_series *wb_series_add(struct wb_report *r, const char *name,
				size_t expect);
/* Appends one sample; grows (doubling, up to WB_SAMPLES_MAX) if needed. */
void wb_series_push(struct wb_series *s, uint64_t ns);
/* Percentile p in [0, 100] by nearest rank (sorts once). 0 if empty. */
uint64_t wb_series_pct(struct wb_series *s, double p);
double wb_series_mean(const struct wb_series *s);
void wb_metric_add(struct wb_report *r, const char *name, double value,
		   const char *unit);
void wb_note_add(struct wb_report *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* JSON series carry "cdf_us": the latency at 1%, 2%, ... 99%, 99.5%,
 * 99.9%, 99.99% and 100% (WB_CDF_QUANTILES values). */
#define WB_CDF_QUANTILES 103

/* Prints the table (or JSON with o->json) on stdout and writes the SVG if
 * asked for. Returns 0, or 1 when the SVG could not be written. */
int wb_report_emit(struct wb_report *r, const struct wb_out *o);
/* Draws the CDF of every non-empty series (log-scaled latency axis). */
int wb_svg_write(struct wb_report *r, const char *path);

/* --- progress on stderr --------------------------------------------------- */

/* At most every 0.25 s on a terminal (overwriting one line), every 2 s
 * otherwise; nothing when quiet. wb_progress_end clears the line. */
void wb_progress(const struct wb_out *o, const char *what, uint64_t done,
		 uint64_t total);
void wb_progress_end(const struct wb_out *o);

/* --- helpers -------------------------------------------------------------- */

/* Latency for people: "12.3 us" below 1 ms, then "1.234 ms", "1.234 s". */
void wb_fmt_ns(char *buf, size_t size, uint64_t ns);
/* Parses a count with an optional k/m suffix (1000s); dies with the option
 * name on anything else or outside [min, max]. */
uint64_t wb_parse_count(const char *opt, const char *s, uint64_t min,
			uint64_t max);
double wb_parse_double(const char *opt, const char *s, double min, double max);
/* Socket path from --socket, or --runtime-dir/--device through the runtime
 * path rules of proto/base/paths.h. Dies with a hint when neither works. */
void wb_socket_path(char *out, size_t size, const char *socket,
		    const char *runtime_dir, const char *device);
/* Connects a SOCK_STREAM unix socket (blocking, close-on-exec): fd or
 * -errno. */
int wb_connect(const char *path);
/* VmRSS of pid in KiB, or -1. */
long wb_rss_kib(int pid);

/* --- subcommands ---------------------------------------------------------- */

int wb_rtt(int argc, char **argv);
int wb_attach(int argc, char **argv);
int wb_load(int argc, char **argv);
int wb_liveness(int argc, char **argv);
/* The hidden child of `liveness`: sleeps to a deadline, stamps, exits. */
int wb_liveness_child(int argc, char **argv);

#endif
