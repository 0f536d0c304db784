/* SPDX-License-Identifier: MIT */
/*
 * wcctl metrics: a daemon's metrics in the Prometheus text format, asked
 * over its socket (METRICS request), the same text its --metrics-listen
 * endpoint serves. --all asks every daemon that has a ready file and
 * merges their texts (expo.c): one HELP and TYPE per family, every
 * daemon's samples beneath, told apart by their device and rank labels,
 * so that the whole is valid exposition a scraper or promtool takes.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "expo.h"
#include "log.h"
#include "rundir.h"
#include "wcache.h"
#include "wcctl.h"

static void metrics_usage(FILE *f)
{
	fprintf(f,
"usage: wcctl metrics (--device D | --all | --socket PATH) [--runtime-dir DIR]\n"
"                     [--timeout SEC]\n"
"\n"
"Prints a daemon's metrics in the Prometheus text exposition format (the\n"
"wcache_* families its --metrics-listen endpoint serves), asked over the\n"
"daemon's socket, so no HTTP port is needed.\n"
"\n"
"  --device D        host, host:NAME, host-NAME, a CUDA ordinal or GPU-<uuid>\n"
"  --all             every daemon with a ready file, merged into one valid\n"
"                    text: one HELP and TYPE per family, every daemon's\n"
"                    samples beneath (their device and rank labels differ)\n"
"  --socket PATH     the daemon's socket instead\n"
"  --runtime-dir DIR as given to wcctl start / wcd (default: the environment's)\n"
"  --timeout SEC     per daemon (default 5; decimals allowed)\n"
"\n"
"Examples:\n"
"  wcctl metrics --device 0\n"
"  wcctl metrics --all --runtime-dir /run/wcache\n"
"  wcctl metrics --device host-0 | grep wcache_requests_total\n"
"\n"
"Exit status: 0 printed, 1 a daemon did not answer (the others are printed),\n"
"2 usage, 3 no daemon was found (--all).\n");
}

/* One daemon's metrics text (the caller frees it), or NULL after saying
 * why on stderr. */
static char *metrics_get(struct wc_connect_opts *co, const char *name)
{
	struct wc_conn *c = NULL;
	struct wc_error e;
	char *text = NULL;

	if (wc_connect(co, &c, &e) || wc_metrics(c, &text, &e)) {
		fprintf(stderr, "wcctl metrics: %s%s%s\n", name ? name : "",
			name ? ": " : "", e.msg);
		free(text);
		text = NULL;
	}
	wc_close(c);
	return text;
}

/* Prints one daemon's metrics; 0 or 1. */
static int metrics_one(struct wc_connect_opts *co)
{
	char *text = metrics_get(co, NULL);

	if (!text)
		return 1;
	fputs(text, stdout);
	free(text);
	return 0;
}

/* --all: every daemon of the rundir's names[0..n), merged; 0 or 1 (a
 * daemon did not answer or a part was left out: the rest is printed). */
static int metrics_all(struct wc_connect_opts *co, struct rundir *rd,
		       rundir_name *names, int n)
{
	struct expo *e = expo_new();
	char err[BASE_ERR_LEN], *out;
	int rc = 0, ret;

	if (!e) {
		fprintf(stderr, "wcctl metrics: out of memory\n");
		return 1;
	}
	for (int i = 0; i < n; i++) {
		struct wc_connect_opts one = *co;
		struct ready_info ri;
		struct paths p;
		char *text;

		if (rundir_paths(rd, names[i], &p, err) ||
		    ready_read_file(&ri, p.ready, err)) {
			fprintf(stderr, "wcctl metrics: %s: %s\n", names[i], err);
			rc = 1;
			continue;
		}
		one.socket = ri.socket[0] ? ri.socket : p.sock;
		one.device = NULL;
		one.runtime_dir = NULL;
		text = metrics_get(&one, names[i]);
		if (!text) {
			rc = 1;
			continue;
		}
		ret = expo_add(e, names[i], text, err, sizeof(err));
		free(text);
		if (ret) {
			fprintf(stderr, "wcctl metrics: %s\n",
				ret < 0 ? strerror(-ret) : err);
			rc = 1;
		}
	}
	out = expo_text(e);
	expo_free(e);
	if (!out) {
		fprintf(stderr, "wcctl metrics: out of memory\n");
		return 1;
	}
	fputs(out, stdout);
	free(out);
	return rc;
}

int wcctl_metrics(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "all", no_argument, NULL, 'a' },
		{ "socket", required_argument, NULL, 's' },
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static rundir_name names[RUNDIR_DEVICES_MAX];
	struct wc_connect_opts co = { .label = "wcctl metrics",
				      .timeout_ms = 5000 };
	struct rundir rd;
	bool all = false;
	double t;
	int ch, n;

	optind = 1;
	while ((ch = cli_getopt(argc, argv, "h", lo, "wcctl metrics")) != -1) {
		switch (ch) {
		case 'd': co.device = optarg; break;
		case 'a': all = true; break;
		case 's': co.socket = optarg; break;
		case 'r': co.runtime_dir = optarg; break;
		case 't':
			if (cli_parse_secs(optarg, 0.001, 3600, &t)) {
				fprintf(stderr, "wcctl metrics: --timeout '%s' is not a number of seconds in 0.001..3600\n",
					optarg);
				return 2;
			}
			co.timeout_ms = (int)(t * 1000 + 0.5);
			break;
		case 'h': metrics_usage(stdout); return 0;
		default: metrics_usage(stderr); return 2;
		}
	}
	if (optind < argc || (!!co.device + !!co.socket + all) != 1) {
		fprintf(stderr, "wcctl metrics: give one of --device D, --all or --socket PATH; see --help\n");
		return 2;
	}
	if (!all)
		return metrics_one(&co);
	n = wcctl_ready_devices(&rd, co.runtime_dir, names);
	if (n < 0)
		return -n;
	if (!n) {
		printf("# no wcache daemon found in %s\n", rd.dir);
		return 3;
	}
	return metrics_all(&co, &rd, names, n);
}
