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
