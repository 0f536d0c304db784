/* SPDX-License-Identifier: MIT */
/*
 * Conventions every tool and subcommand keeps (issue 16): --version prints
 * "PROG (wcache) VERSION" and exits 0, -h is --help, usage errors exit 2,
 * timeouts are seconds (decimals allowed).
 */
#ifndef WC_CLI_H
#define WC_CLI_H

#include <stdbool.h>

/* True when argv (before a "--") holds --version; prints the version line
 * for prog to stdout then. Call first thing in each command. */
bool cli_version(int argc, char **argv, const char *prog);

/* Parses seconds ("10", "0.5") within [lo, hi]; 0 or -EINVAL. */
int cli_parse_secs(const char *v, double lo, double hi, double *out);

#endif
