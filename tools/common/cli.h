/* SPDX-License-Identifier: MIT */
/*
 * Conventions every tool and subcommand keeps (issue 16): --version prints
 * "PROG (wcache) VERSION" and exits 0, -h is --help, usage errors exit 2,
 * timeouts are seconds (decimals allowed).
 */
#ifndef WC_CLI_H
#define WC_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

/* True when argv (before a "--") holds --version; prints the version line
 * for prog to stdout then. Call first thing in each command. */
bool cli_version(int argc, char **argv, const char *prog);

/* getopt_long, except that a long option is taken only by its whole name
 * (GNU's takes any unique prefix, so "wcctl update --all" became
 * --allow-layout-change). An abbreviation prints "PROG: '--all' is not an
 * option (options are given whole): did you mean --allow-layout-change?"
 * and returns CLI_OPT_ABBREV, a usage error like getopt_long's '?' (a
 * switch's default: takes both). prog names the tool ("wcctl update"). */
#define CLI_OPT_ABBREV 0x7fff0000
int cli_getopt(int argc, char **argv, const char *shortopts,
	       const struct option *longopts, const char *prog);

/* Parses seconds ("10", "0.5") within [lo, hi]; 0 or -EINVAL. */
int cli_parse_secs(const char *v, double lo, double hi, double *out);

/* A command of a multi-command tool (wcctl, wcbench). argv[0] of run is
 * the command's name. summary NULL: not listed by --help (a helper the
 * tool spawns). A table ends with a NULL name. */
struct cli_cmd {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
};

/* What a multi-command tool's --help says around its command list. */
struct cli_help {
	const char *about;    /* paragraph(s) after the usage line */
	const char *examples; /* lines, each "  PROG ...\n" */
};

/* The main of a multi-command tool: no command prints the usage to stderr
 * (exit 2); --help, -h and help print it to stdout (0); --version the
 * version line; "PROG CMD ..." runs CMD (its --version first), any other
 * word is a usage error (2). */
int cli_main(int argc, char **argv, const char *prog,
	     const struct cli_cmd *cmds, const struct cli_help *help);

#endif
