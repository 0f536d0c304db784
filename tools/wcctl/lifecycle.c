/* SPDX-License-Identifier: MIT */
/*
 * wcctl sleep | wake | update: the lifecycle requests of one rank daemon,
 * through libwcache (wc_sleep, wc_wake, wc_update). Each prints the
 * daemon's one-line answer on success and its refusal on stderr, exit 1;
 * --json prints the outcome as one object either way.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "wcache.h"
#include "wcctl.h"
#include "utf8.h"

#define LIFE_TIMEOUT_MS_DEFAULT 600000   /* a reload of a large model */

enum life_cmd { CMD_SLEEP, CMD_WAKE, CMD_UPDATE };

static const char *const life_names[] = { "sleep", "wake", "update" };

static void life_usage(FILE *f, enum life_cmd cmd)
{
	static const char *const what[] = {
		"usage: wcctl sleep --level 1|2 (--device D | --all) [--runtime-dir DIR | --socket PATH]\n"
		"\n"
		"Releases the daemon's device memory. Level 1 keeps a copy in host memory\n"
		"(pinned on CUDA) so that wake restores at copy speed; level 2 drops the\n"
		"weights and wake reloads them from disk. Refused while any engine is\n"
		"attached (the weights are shared zero-copy).\n",
		"usage: wcctl wake (--device D | --all) [--runtime-dir DIR | --socket PATH]\n"
		"\n"
		"Restores the weights of a sleeping daemon and re-checks every tensor's\n"
		"XXH3-128 against the manifest; on a mismatch the daemon stays asleep.\n",
		"usage: wcctl update [--model DIR] [--allow-layout-change] (--device D | --all)\n"
		"                    [--runtime-dir DIR | --socket PATH]\n"
		"\n"
		"Loads a new checkpoint of the served model (the same directory re-read, or\n"
		"DIR) beside the current one and publishes it as the next version; engines\n"
		"attached to the old version are told and keep it until they detach.\n"
		"Every tensor must keep its name, dtype and shape (engines bound them);\n"
		"--allow-layout-change publishes another layout anyway.\n",
	};

	static const char *const examples[] = {
		"Examples:\n"
		"  wcctl sleep --level 1 --device 0\n"
		"  wcctl sleep --level 2 --device host:demo --runtime-dir /run/wcache --json\n",
		"Examples:\n"
		"  wcctl wake --device 0\n"
		"  wcctl wake --device host-demo --runtime-dir /run/wcache --json\n",
		"Examples:\n"
		"  wcctl update --device 0\n"
		"  wcctl update --device 0 --model /ckpt/step-200 --timeout 1800 --json\n",
	};

	fprintf(f, "%s\n"
		"  --device D          host, host:NAME, host-NAME (as status prints it), a\n"
		"                      CUDA ordinal or GPU-<uuid>\n"
		"  --all               every daemon with a ready file in the runtime\n"
		"                      directory, one after the other; each line starts\n"
		"                      with the device (with --json: one object a line)\n"
		"  --runtime-dir DIR   the daemons' runtime directory\n"
		"  --socket PATH       the daemon's socket instead\n"
		"  --timeout SECONDS   how long to wait for the reply (default 600;\n"
		"                      decimals allowed)\n"
		"  --json              the outcome as one JSON object on stdout\n"
		"\n%s"
		"\nExit status: 0 done, 1 refused or failed (the reason on stderr, or in\n"
		"\"error\" with --json; with --all: for any daemon), 2 usage, 3 no daemon\n"
		"was found (--all).\n",
		what[cmd], examples[cmd]);
}

/* --json: one object, the outcome whether it succeeded or not. */
static void life_json(const char *name, const char *target, int ret,
		      const struct wc_life_result *r, const struct wc_error *e)
{
	json_t *o = json_pack("{s:s, s:o, s:b}", "command", name, "device",
			      json_text(target), "ok", ret == 0);
	char *s;

	if (ret < 0) {
		json_object_set_new(o, "error", json_text(e->msg));
		json_object_set_new(o, "errno", json_integer(-ret));
	} else {
		json_object_set_new(o, "version", json_integer((json_int_t)r->version));
		json_object_set_new(o, "level", json_integer(r->level));
		json_object_set_new(o, "bytes", json_integer((json_int_t)r->bytes));
		json_object_set_new(o, "seconds", json_real(r->seconds));
		json_object_set_new(o, "verify_seconds", json_real(r->verify_seconds));
		json_object_set_new(o, "message", json_text(r->msg));
	}
	s = json_dumps(o, JSON_PRESERVE_ORDER);
	printf("%s\n", s ? s : "{}");
	free(s);
	json_decref(o);
}

static int life_main(enum life_cmd cmd, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "socket", required_argument, NULL, 's' },
		{ "level", required_argument, NULL, 'l' },
		{ "model", required_argument, NULL, 'm' },
		{ "allow-layout-change", no_argument, NULL, 'L' },
		{ "all", no_argument, NULL, 'a' },
		{ "timeout", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct wc_connect_opts co = { .timeout_ms = LIFE_TIMEOUT_MS_DEFAULT };
	const char *name = life_names[cmd], *model = NULL;
	struct wc_life_result r;
	struct wc_error e;
	struct wc_conn *c;
	char label[32], *end;
	long level = 0;
	bool json = false, allow_layout = false, all = false;
	double t;
	int ch, ret;

	snprintf(label, sizeof(label), "wcctl %s", name);
	co.label = label;
	optind = 1;
	while ((ch = cli_getopt(argc, argv, "h", lo, label)) != -1) {
		switch (ch) {
		case 'd': co.device = optarg; break;
		case 'r': co.runtime_dir = optarg; break;
		case 's': co.socket = optarg; break;
		case 'l':
			if (cmd != CMD_SLEEP) {
				fprintf(stderr, "wcctl %s: --level belongs to wcctl sleep\n", name);
				return 2;
			}
			level = strtol(optarg, &end, 10);
			if (*end || (level != 1 && level != 2)) {
				fprintf(stderr, "wcctl %s: --level takes 1 or 2 (sleep only), got '%s'\n",
					name, optarg);
				return 2;
			}
			break;
		case 'm':
			if (cmd != CMD_UPDATE) {
				fprintf(stderr, "wcctl %s: --model belongs to wcctl update\n", name);
				return 2;
			}
			model = optarg;
			break;
		case 'L':
			if (cmd != CMD_UPDATE) {
				fprintf(stderr, "wcctl %s: --allow-layout-change belongs to wcctl update\n", name);
				return 2;
			}
			allow_layout = true;
			break;
		case 't':
			if (cli_parse_secs(optarg, 0.001, 86400, &t)) {
				fprintf(stderr, "wcctl %s: --timeout takes seconds (0 to 86400), got '%s'\n",
					name, optarg);
				return 2;
			}
			co.timeout_ms = (int)(t * 1000);
			break;
		case 'j': json = true; break;
		case 'a': all = true; break;
		case 'h': life_usage(stdout, cmd); return 0;
		default: life_usage(stderr, cmd); return 2;
		}
	}
	if (cmd == CMD_SLEEP && !level) {
		fprintf(stderr, "wcctl sleep: give --level 1 (keep a host copy) or --level 2 (reload from disk on wake)\n");
		return 2;
	}
	if (all && (co.device || co.socket)) {
		fprintf(stderr, "wcctl %s: give --device D, --socket PATH or --all, not two of them\n", name);
		return 2;
	}
	if (all && optind == argc)
		return wcctl_each_daemon(co.runtime_dir, argc, argv,
					 cmd == CMD_SLEEP ? wcctl_sleep :
					 cmd == CMD_WAKE ? wcctl_wake :
					 wcctl_update);
	if (wcctl_need_target(&co, optind < argc))
		return 2;
	memset(&r, 0, sizeof(r));
	ret = wc_connect(&co, &c, &e);
	if (ret == 0) {
		if (cmd == CMD_SLEEP)
			ret = wc_sleep(c, (unsigned)level, &r, &e);
		else if (cmd == CMD_WAKE)
			ret = wc_wake(c, &r, &e);
		else
			ret = wc_update_flags(c, model, allow_layout ?
					      WC_UPDATE_ALLOW_LAYOUT_CHANGE : 0,
					      &r, &e);
		wc_close(c);
	}
	if (json)
		life_json(name, co.device ? co.device : co.socket, ret, &r, &e);
	else if (ret < 0)
		fprintf(stderr, "wcctl %s: %s%s%s\n", name,
			wcctl_all_device ? wcctl_all_device : "",
			wcctl_all_device ? ": " : "", e.msg);
	else
		printf("%s%s%s\n", wcctl_all_device ? wcctl_all_device : "",
		       wcctl_all_device ? ": " : "", r.msg);
	if (fflush(stdout))
		return 1;
	return ret < 0 ? 1 : 0;
}

int wcctl_sleep(int argc, char **argv)
{
	return life_main(CMD_SLEEP, argc, argv);
}

int wcctl_wake(int argc, char **argv)
{
	return life_main(CMD_WAKE, argc, argv);
}

int wcctl_update(int argc, char **argv)
{
	return life_main(CMD_UPDATE, argc, argv);
}
