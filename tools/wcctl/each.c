/* SPDX-License-Identifier: MIT */
/*
 * --all for the commands that act on one daemon (sleep, wake, update,
 * verify, restart): the command runs once per daemon that has a ready file
 * in the runtime directory, in name order, as if given --device NAME
 * instead of --all, so each daemon's output is the command's own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "err.h"
#include "log.h"
#include "rundir.h"
#include "wcctl.h"

const char *wcctl_all_device;

int wcctl_ready_devices(struct rundir *rd, const char *runtime_dir,
			rundir_name *names)
{
	char err[BASE_ERR_LEN];
	int n;

	if (rundir_init(rd, runtime_dir, err)) {
		log_error("%s", err);
		return -2;
	}
	n = rundir_scan(rd, ".ready", names, RUNDIR_DEVICES_MAX, err);
	if (n < 0) {
		log_error("%s", err);
		return -1;
	}
	return n;
}

int wcctl_each_daemon(const char *runtime_dir, int argc, char **argv,
		      int (*run)(int argc, char **argv))
{
	static rundir_name names[RUNDIR_DEVICES_MAX];
	struct rundir rd;
	char **one;
	int n, na = 0, rc = 0;

	n = wcctl_ready_devices(&rd, runtime_dir, names);
	if (n < 0)
		return -n;
	if (!n) {
		fprintf(stderr, "wcctl %s --all: no wcache daemon found in %s (start them with 'wcctl start', or give the --runtime-dir they use)\n",
			argv[0], rd.dir);
		return 3;
	}
	one = calloc((size_t)argc + 3, sizeof(*one));
	if (!one)
		die("out of memory");
	/* argv less --all, plus --device NAME */
	for (int i = 0; i < argc; i++)
		if (strcmp(argv[i], "--all"))
			one[na++] = argv[i];
	one[na++] = "--device";
	WC_ASSERT(na <= argc + 1 && n <= RUNDIR_DEVICES_MAX);   /* one's size */
	for (int i = 0; i < n; i++) {
		int r;

		one[na] = names[i];
		one[na + 1] = NULL;
		wcctl_all_device = names[i];
		r = run(na + 1, one);
		if (r == 2) {   /* a usage error is the same for every daemon */
			rc = 2;
			break;
		}
		if (r)
			rc = 1;
	}
	wcctl_all_device = NULL;
	free(one);
	return rc;
}
