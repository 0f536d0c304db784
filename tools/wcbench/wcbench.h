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

/* The help lines of the output options (their parsing is wb_parse's). */
#define WB_HELP_OUT                                                          \
	"  --json          print one JSON object on stdout instead of the table\n" \
	"  --svg FILE      draw the latency CDF of every series into FILE\n"    \
	"  -q, --quiet     no progress on stderr\n"                              \
	"  -h, --help      this text\n"
/* The help lines of --socket and --runtime-dir (WB_TAKES_TARGET). */
#define WB_HELP_SOCKET                                                   \
	"  --socket PATH          the daemon's socket (else from "         \
	"--runtime-dir/--device)\n"                                        \
	"  --runtime-dir DIR      runtime directory (the socket is "       \
	"DIR/<device>.sock)\n"

/* --- the command line (opts.c) ------------------------------------------- */

/* The options a command shares with others, besides the output ones
 * (--json, --svg FILE, -q/--quiet, -h/--help), which every command takes. */
#define WB_TAKES_TARGET   0x1u  /* --socket, --runtime-dir, --device */
#define WB_TAKES_DEVICE   0x2u  /* --device alone */
#define WB_TAKES_MODEL    0x4u  /* --model DIR */
#define WB_TAKES_OPERANDS 0x8u  /* arguments after the options (load's
				 * "-- WCD-OPTIONS") instead of a usage error */
/* The most long options of one command, shared ones included. */
#define WB_LONGOPTS_MAX 32

/* What the shared options gave (NULL: not given). */
struct wb_args {
	struct wb_out out;
	const char *socket;
	const char *runtime_dir;
	const char *device;
	const char *model;
	char **operands;        /* WB_TAKES_OPERANDS: what follows */
	int noperands;
};

/* A command's line: its shared options and its own. */
struct wb_cmd {
	const char *prog;               /* "wcbench attach", for messages */
	unsigned takes;                 /* WB_TAKES_* */
	const char *shortopts;          /* its own, in getopt's form ("n:p:") */
	const struct option *longopts;  /* its own, ending with a NULL name */
	void (*usage)(FILE *f);         /* its --help */
	/* takes one of its own options (getopt's code, its argument or
	 * NULL); false when c is none of them */
	bool (*opt)(void *ctx, int c, const char *arg);
};

/* Parses argv for cmd (cli_getopt: whole option names only): the shared
 * options into a, the command's own through cmd->opt(ctx, ...). --help
 * prints cmd->usage on stdout and exits 0; an unknown, abbreviated or
 * incomplete option prints it on stderr and exits 2, as does an operand
 * where the command takes none ("unexpected argument"). The long options
 * are the shared ones first, then the command's, then the output ones:
 * the order getopt lists an ambiguous prefix's candidates in. */
void wb_parse(int argc, char **argv, const struct wb_cmd *cmd, void *ctx,
	      struct wb_args *a);

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
