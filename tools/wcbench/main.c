/* SPDX-License-Identifier: MIT */
/*
 * wcbench: request latency, attach latency, load throughput and liveness
 * detection of wcache, for performance engineers. `wcbench CMD --help`
 * describes each command.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "log.h"
#include "wcbench.h"

struct wb_cmd {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
};

static const struct wb_cmd cmds[] = {
	{ "rtt", "PING round trips: p50..p99.9, max, requests/s", wb_rtt },
	{ "attach", "whole attach cycles from M processes, per phase",
	  wb_attach },
	{ "load", "start a wcd on a model; time and GB/s of each phase",
	  wb_load },
	{ "liveness", "child exit to report: pidfd reactor vs 2 s polling",
	  wb_liveness },
	{ NULL, NULL, NULL },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: wcbench COMMAND [options]   (wcbench COMMAND --help "
		   "for details)\n\nMeasures a wcache daemon (wcd) and its "
		   "parts; every command prints a table,\nor JSON with --json, "
		   "and draws the latency CDF with --svg FILE.\n\ncommands:\n");
	for (const struct wb_cmd *c = cmds; c->name; c++)
		fprintf(f, "  %-10s %s\n", c->name, c->summary);
	fprintf(f, "\nExamples:\n"
		   "  wcbench rtt --device host:demo -n 100k\n"
		   "  wcbench attach --device 0 --model /models/llama -n 1000 -p 4\n"
		   "  wcbench liveness --svg liveness.svg\n"
		   "\nExit status: 0 success, 2 usage (an unknown command); each\n"
		   "command's --help lists its own.\n");
}

int main(int argc, char **argv)
{
	log_init("wcbench", LOG_INFO);
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		cli_version(argc, argv, "wcbench");
		return 0;
	}
	/* Not listed: what `liveness` spawns. */
	if (!strcmp(argv[1], "__liveness-child"))
		return wb_liveness_child(argc - 1, argv + 1);
	for (const struct wb_cmd *c = cmds; c->name; c++) {
		char prog[64];

		if (strcmp(argv[1], c->name))
			continue;
		snprintf(prog, sizeof(prog), "wcbench %s", c->name);
		if (cli_version(argc - 1, argv + 1, prog))
			return 0;
		return c->run(argc - 1, argv + 1);
	}
	fprintf(stderr, "wcbench: unknown command '%s'; run 'wcbench --help' "
		"for the list\n", argv[1]);
	return 2;
}
