/* SPDX-License-Identifier: MIT */
/*
 * wcctl clean: removes the files (.ready .sock .lock .log, ready temp files)
 * of daemons that are gone. A device whose lock is held belongs to a live
 * daemon and is never touched; the lock is held by us while removing, so a
 * daemon starting at that moment is refused instead of losing its files.
 * A daemon that died serving (its ready file was left) leaves a record,
 * <device>.dead (the ready file's lines and cleaned_at=), which status
 * lists as DEAD, so a rank that died does not vanish from status; a
 * daemon serving the device again, or --forget, removes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "err.h"
#include "log.h"
#include "rundir.h"
#include "wcctl.h"

static void clean_usage(FILE *f)
{
	fprintf(f,
"usage: wcctl clean [--runtime-dir DIR] [--keep-logs] [--forget]\n"
"\n"
"Removes the runtime files of dead daemons (those whose lock nobody holds);\n"
"a live daemon's files are never touched. A daemon that died serving (its\n"
"ready file was left) is recorded in <device>.dead, which wcctl status shows\n"
"as DEAD (exit 4) until a daemon serves that device again.\n"
"\n"
"  --runtime-dir DIR as given to wcctl start / wcd (default: the environment's)\n"
"  --keep-logs       keep the .log files\n"
"  --forget          remove the .dead records too (the ranks are gone for good)\n"
"\n"
"Examples:\n"
"  wcctl clean\n"
"  wcctl clean --runtime-dir /run/wcache --keep-logs\n"
"\n"
"Exit status: 0 done (also when nothing was left), 1 an error, 2 usage.\n");
}

/* The ready file's text (and parsed) when it is one: its length, else 0. */
static ssize_t read_ready(const char *path, char *buf, size_t cap,
			  struct ready_info *ri)
{
	char err[BASE_ERR_LEN];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return 0;
	n = read(fd, buf, cap - 1);
	close(fd);
	if (n <= 0 || ready_parse(ri, buf, (size_t)n, path, err))
		return 0;
	return n;
}

/* <device>.dead: the ready file's lines and cleaned_at=UNIX_SECONDS,
 * written to a temporary file and renamed. 0 or -1 (said). */
static int write_dead(const char *path, const char *text, size_t len)
{
	char tmp[PATHS_MAX + 16], tail[64];
	int fd, k, ok;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		log_warn("cannot record the dead daemon in %s: %s", path, strerror(errno));
		return -1;
	}
	k = snprintf(tail, sizeof(tail), "%scleaned_at=%lld\n",
		     len && text[len - 1] != '\n' ? "\n" : "", (long long)time(NULL));
	ok = write(fd, text, len) == (ssize_t)len &&
	     write(fd, tail, (size_t)k) == k;
	if (close(fd) || !ok || rename(tmp, path)) {
		log_warn("cannot record the dead daemon in %s: %s", path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
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
		{ "forget", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const suffixes[] = { ".lock", ".ready", ".sock",
						 ".log", ".dead" };
	static rundir_name names[RUNDIR_DEVICES_MAX], found[RUNDIR_DEVICES_MAX];
	const char *runtime_dir = NULL;
	int c, n = 0, keep_logs = 0, removed = 0, dead = 0, live = 0;
	bool forget = false;
	char err[BASE_ERR_LEN];
	struct rundir rd;

	optind = 1;
	while ((c = cli_getopt(argc, argv, "h", lo, "wcctl clean")) != -1) {
		switch (c) {
		case 'r': runtime_dir = optarg; break;
		case 'k': keep_logs = 1; break;
		case 'f': forget = true; break;
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
		char text[READY_FILE_MAX + 1], dead_path[PATHS_MAX + 8];
		struct ready_info ri;
		struct paths p;
		ssize_t len;
		int ret;

		if (rundir_paths(&rd, names[i], &p, err)) {
			log_error("%s", err);
			continue;
		}
		snprintf(dead_path, sizeof(dead_path), "%s.dead", p.prefix);
		len = read_ready(p.ready, text, sizeof(text), &ri);
		ret = rundir_remove(&rd, &p, keep_logs, err);
		if (ret < 0) {
			log_info("kept %s: %s", names[i], err);
			unlink(dead_path);   /* it serves again */
			live++;
			continue;
		}
		if (forget && unlink(dead_path) == 0)
			log_info("forgot the dead daemon on %s (%s)", names[i],
				 dead_path);
		if (!ret)
			continue;
		if (len > 0 && !forget && write_dead(dead_path, text, (size_t)len) == 0)
			log_info("removed %d file%s of the dead daemon on %s (pid %d, pp%d/tp%d of %s); wcctl status shows it as DEAD until a daemon serves %s again (start it with wcctl start) or wcctl clean --forget",
				 ret, ret == 1 ? "" : "s", names[i], ri.pid,
				 ri.pp_rank, ri.tp_rank, ri.model, names[i]);
		else
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
