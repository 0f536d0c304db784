/* SPDX-License-Identifier: MIT */
/*
 * wcctl clean: removes the files (.ready .sock .lock .log, ready temp files)
 * of daemons that are gone. A device whose lock is held belongs to a live
 * daemon and is never touched; the lock is held by us while removing, so a
 * daemon starting at that moment is refused instead of losing its files.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "err.h"
#include "log.h"
#include "rundir.h"
#include "wcctl.h"

static void clean_usage(FILE *f)
{
	fprintf(f,
"usage: wcctl clean [--runtime-dir DIR] [--keep-logs]\n"
"\n"
"Removes the runtime files of dead daemons (those whose lock nobody holds);\n"
"a live daemon's files are never touched.\n"
"\n"
"  --runtime-dir DIR as given to wcctl start / wcd (default: the environment's)\n"
"  --keep-logs       keep the .log files\n"
"\n"
"Examples:\n"
"  wcctl clean\n"
"  wcctl clean --runtime-dir /run/wcache --keep-logs\n"
"\n"
"Exit status: 0 done (also when nothing was left), 1 an error, 2 usage.\n");
}

/* Adds the names in add[0..na) missing from names[0..n); returns the new n. */
static int merge_names(rundir_name *names, int n, const rundir_name *add,
		       int na, int max)
{
	for (int i = 0; i < na; i++) {
		bool seen = false;

		for (int j = 0; j < n && !seen; j++)
			seen = !strcmp(names[j], add[i]);
		if (!seen && n < max)
			memcpy(names[n++], add[i], sizeof(names[0]));
	}
	return n;
}

int wcctl_clean(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "keep-logs", no_argument, NULL, 'k' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const suffixes[] = { ".lock", ".ready", ".sock",
						 ".log" };
	static rundir_name names[RUNDIR_DEVICES_MAX], found[RUNDIR_DEVICES_MAX];
	const char *runtime_dir = NULL;
	int c, n = 0, keep_logs = 0, removed = 0, dead = 0, live = 0;
	char err[WC_ERR_LEN];
	struct rundir rd;

	optind = 1;
	while ((c = cli_getopt(argc, argv, "h", lo, "wcctl clean")) != -1) {
		switch (c) {
		case 'r': runtime_dir = optarg; break;
		case 'k': keep_logs = 1; break;
		case 'h': clean_usage(stdout); return 0;
		default: clean_usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		clean_usage(stderr);
		return 2;
	}
	if (rundir_init(&rd, runtime_dir, err)) {
		log_error("%s", err);
		return 2;
	}
	for (size_t s = 0; s < sizeof(suffixes) / sizeof(suffixes[0]); s++) {
		int k = rundir_scan(&rd, suffixes[s], found,
				    RUNDIR_DEVICES_MAX, err);

		if (k < 0) {
			log_error("%s", err);
			return 1;
		}
		n = merge_names(names, n, found, k, RUNDIR_DEVICES_MAX);
	}
	for (int i = 0; i < n; i++) {
		struct paths p;
		int ret;

		if (rundir_paths(&rd, names[i], &p, err)) {
			log_error("%s", err);
			continue;
		}
		ret = rundir_remove(&rd, &p, keep_logs, err);
		if (ret < 0) {
			log_info("kept %s: %s", names[i], err);
			live++;
			continue;
		}
		if (!ret)
			continue;
		log_info("removed %d file%s of the dead daemon on %s", ret,
			 ret == 1 ? "" : "s", names[i]);
		removed += ret;
		dead++;
	}
	log_info("removed %d file%s of %d dead daemon%s in %s; %d live daemon%s left alone",
		 removed, removed == 1 ? "" : "s", dead, dead == 1 ? "" : "s",
		 rd.dir, live, live == 1 ? "" : "s");
	return 0;
}
