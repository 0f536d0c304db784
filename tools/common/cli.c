/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "release.h"

bool cli_version(int argc, char **argv, const char *prog)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			break;
		if (!strcmp(argv[i], "--version")) {
			printf("%s (wcache) %s\n", prog, WCACHE_VERSION);
			return true;
		}
	}
	return false;
}

int cli_getopt(int argc, char **argv, const char *shortopts,
	       const struct option *longopts, const char *prog)
{
	int idx = -1, c = getopt_long(argc, argv, shortopts, longopts, &idx);
	const struct option *o;
	const char *text;
	size_t n;

	/* idx is set for a long option that was taken; the text is the
	 * element just passed, or the one before when the value was the
	 * next element (--model DIR) */
	if (c == -1 || idx < 0 || optind < 2)
		return c;
	o = &longopts[idx];
	text = argv[optind - 1];
	if (o->has_arg == required_argument && optarg == text && optind >= 3)
		text = argv[optind - 2];
	if (strncmp(text, "--", 2))
		return c;
	n = strcspn(text + 2, "=");
	if (n == strlen(o->name) && !strncmp(text + 2, o->name, n))
		return c;
	fprintf(stderr, "%s: '%.*s' is not an option (options are given whole, not abbreviated): did you mean --%s?\n",
		prog, (int)n + 2, text, o->name);
	return CLI_OPT_ABBREV;
}

int cli_parse_secs(const char *v, double lo, double hi, double *out)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi)
		return -EINVAL;
	*out = x;
	return 0;
}

static void cli_usage(FILE *f, const char *prog, const struct cli_cmd *cmds,
		      const struct cli_help *help)
{
	fprintf(f, "usage: %s COMMAND [options]   (%s COMMAND --help for details)\n\n"
		   "%s\n\ncommands:\n", prog, prog, help->about);
	for (const struct cli_cmd *c = cmds; c->name; c++)
		if (c->summary)
			fprintf(f, "  %-10s %s\n", c->name, c->summary);
	fprintf(f, "\nExamples:\n%s"
		   "\nExit status: 0 success, 2 usage (an unknown command); each\n"
		   "command's --help lists its own.\n", help->examples);
}

int cli_main(int argc, char **argv, const char *prog,
	     const struct cli_cmd *cmds, const struct cli_help *help)
{
	if (argc < 2) {
		cli_usage(stderr, prog, cmds, help);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		cli_usage(stdout, prog, cmds, help);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		cli_version(argc, argv, prog);
		return 0;
	}
	for (const struct cli_cmd *c = cmds; c->name; c++) {
		char name[64];

		if (strcmp(argv[1], c->name))
			continue;
		snprintf(name, sizeof(name), "%s %s", prog, c->name);
		if (cli_version(argc - 1, argv + 1, name))
			return 0;
		return c->run(argc - 1, argv + 1);
	}
	fprintf(stderr, "%s: unknown command '%s'; run '%s --help' for the list\n",
		prog, argv[1], prog);
	return 2;
}
