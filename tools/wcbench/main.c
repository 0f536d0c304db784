/* SPDX-License-Identifier: MIT */
/*
 * wcbench: request latency, attach latency, load throughput and liveness
 * detection of wcache, for performance engineers. `wcbench CMD --help`
 * describes each command.
 */

#include "cli.h"
#include "log.h"
#include "wcbench.h"

static const struct cli_cmd cmds[] = {
	{ "rtt", "PING round trips: p50..p99.9, max, requests/s", wb_rtt },
	{ "attach", "whole attach cycles from M processes, per phase",
	  wb_attach },
	{ "load", "start a wcd on a model; time and GB/s of each phase",
	  wb_load },
	{ "liveness", "child exit to report: pidfd reactor vs 2 s polling",
	  wb_liveness },
	/* Not listed: what `liveness` spawns. */
	{ "__liveness-child", NULL, wb_liveness_child },
	{ NULL, NULL, NULL },
};

static const struct cli_help help = {
	"Measures a wcache daemon (wcd) and its parts; every command prints a table,\n"
	"or JSON with --json, and draws the latency CDF with --svg FILE.",
	"  wcbench rtt --device host:demo -n 100k\n"
	"  wcbench attach --device 0 --model /models/llama -n 1000 -p 4\n"
	"  wcbench liveness --svg liveness.svg\n",
};

int main(int argc, char **argv)
{
	log_init("wcbench", LOG_INFO);
	return cli_main(argc, argv, "wcbench", cmds, &help);
}
