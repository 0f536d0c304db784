/* SPDX-License-Identifier: MIT */
/* wcctl: launcher and admin tool. `wcctl CMD --help` describes each command. */

#include "cli.h"
#include "log.h"
#include "wcctl.h"

static const struct cli_cmd cmds[] = {
	/* Commands are added here as their files land. */
	{ "start", "start this node's rank daemons and wait until ready", wcctl_start },
	{ "status", "show every rank daemon's state (table or --json)", wcctl_status },
	{ "stop", "stop one rank daemon (--device) or all of them (--all)", wcctl_stop },
	{ "restart", "hand a rank daemon over to a new wcd: no reload, engines stay attached", wcctl_restart },
	{ "clean", "remove the runtime files of dead daemons", wcctl_clean },
	{ "inspect", "validate a checkpoint file or model directory and summarise it", wcctl_inspect },
	{ "manifest", "list every tensor a running daemon serves, with its XXH3-128", wcctl_manifest },
	{ "verify", "re-read a daemon's checkpoint and compare every hash with what it serves", wcctl_verify },
	{ "sleep", "release a daemon's device memory (level 1: keep a host copy; 2: drop)", wcctl_sleep },
	{ "wake", "restore a sleeping daemon's weights and re-check every hash", wcctl_wake },
	{ "update", "load a new checkpoint version beside the served one and publish it", wcctl_update },
	{ "metrics", "print a daemon's metrics (Prometheus text format)", wcctl_metrics },
	{ NULL, NULL, NULL },
};

static const struct cli_help help = {
	"Launches and administers wcache rank daemons (wcd).",
	"  wcctl start --model /models/llama --tp-size 8\n"
	"  wcctl status\n"
	"  wcctl stop --all\n",
};

int main(int argc, char **argv)
{
	log_init("wcctl", LOG_INFO);
	return cli_main(argc, argv, "wcctl", cmds, &help);
}
