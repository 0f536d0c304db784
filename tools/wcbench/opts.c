// SPDX-License-Identifier: MIT
/*
 * wcbench's command line: one parser for what the commands share (the
 * output options; the daemon's socket, runtime directory and device; the
 * model), each command adding its own options through a callback, and the
 * same rules for all: whole option names (cli_getopt), --help on stdout
 * with exit 0, a usage error on stderr with exit 2.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "log.h"
#include "wcbench.h"

enum {
	OPT_JSON = 0x1001, OPT_SVG, OPT_SOCKET, OPT_RUNTIME_DIR, OPT_DEVICE,
	OPT_MODEL,
};

static const struct option target_opts[] = {
	{ "socket", required_argument, NULL, OPT_SOCKET },
	{ "runtime-dir", required_argument, NULL, OPT_RUNTIME_DIR },
	{ "device", required_argument, NULL, OPT_DEVICE },
};
static const struct option model_opt =
	{ "model", required_argument, NULL, OPT_MODEL };
static const struct option out_opts[] = {
	{ "json", no_argument, NULL, OPT_JSON },
	{ "svg", required_argument, NULL, OPT_SVG },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
};

/* Appends o to lo[*n], dying when past WB_LONGOPTS_MAX (a command's table
 * grew: raise the bound). */
static void add(struct option *lo, unsigned *n, const struct option *o)
{
	if (*n >= WB_LONGOPTS_MAX)
		die("wcbench: more than %d long options", WB_LONGOPTS_MAX);
	lo[(*n)++] = *o;
}

/* The shared option c into a; false when c is not one of them. */
static bool shared_opt(struct wb_args *a, int c, const char *arg)
{
	switch (c) {
	case OPT_JSON: a->out.json = true; return true;
	case OPT_SVG: a->out.svg = arg; return true;
	case 'q': a->out.quiet = true; return true;
	case OPT_SOCKET: a->socket = arg; return true;
	case OPT_RUNTIME_DIR: a->runtime_dir = arg; return true;
	case OPT_DEVICE: a->device = arg; return true;
	case OPT_MODEL: a->model = arg; return true;
	}
	return false;
}

void wb_parse(int argc, char **argv, const struct wb_cmd *cmd, void *ctx,
	      struct wb_args *a)
{
	struct option lo[WB_LONGOPTS_MAX + 1];
	char so[64];
	unsigned n = 0;
	int c;

	memset(a, 0, sizeof(*a));
	if (cmd->takes & WB_TAKES_TARGET)
		for (unsigned i = 0; i < 3; i++)
			add(lo, &n, &target_opts[i]);
	else if (cmd->takes & WB_TAKES_DEVICE)
		add(lo, &n, &target_opts[2]);
	if (cmd->takes & WB_TAKES_MODEL)
		add(lo, &n, &model_opt);
	for (const struct option *o = cmd->longopts; o && o->name; o++)
		add(lo, &n, o);
	for (unsigned i = 0; i < 4; i++)
		add(lo, &n, &out_opts[i]);
	memset(&lo[n], 0, sizeof(lo[n]));
	if (snprintf(so, sizeof(so), "%sqh", cmd->shortopts ? : "") >=
	    (int)sizeof(so))
		die("%s: its short options '%s' are too many", cmd->prog,
		    cmd->shortopts);

	while ((c = cli_getopt(argc, argv, so, lo, cmd->prog)) != -1) {
		if (shared_opt(a, c, optarg))
			continue;
		if (c == 'h') {
			cmd->usage(stdout);
			exit(0);
		}
		if (!cmd->opt || !cmd->opt(ctx, c, optarg)) {
			cmd->usage(stderr);
			exit(2);
		}
	}
	if (optind != argc && !(cmd->takes & WB_TAKES_OPERANDS)) {
		fprintf(stderr, "%s: unexpected argument '%s'\n", cmd->prog,
			argv[optind]);
		exit(2);
	}
	a->operands = argv + optind;
	a->noperands = argc - optind;
}
