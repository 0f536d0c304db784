/* SPDX-License-Identifier: MIT */
/*
 * The shell tests' waits on events (test/lib/t_wait.h) instead of loops of
 * sleeps:
 *
 *   wc_waitfor [-p PID] [-t SECONDS] FILE          FILE exists
 *   wc_waitfor [-p PID] [-t SECONDS] -g TEXT FILE  FILE holds TEXT (a fixed
 *                                                  string, as grep -F)
 *   wc_waitfor [-p PID] [-t SECONDS] -e REGEX FILE a line of FILE matches
 *                                                  REGEX (POSIX extended)
 *   wc_waitfor [-p PID] [-t SECONDS] -d FILE       FILE does not exist
 *   wc_waitfor [-t SECONDS] -x PID                 PID has ended
 *
 * each while PID lives (its pidfd), at most SECONDS (default 20): exit 0
 * once it holds, 1 when PID ended first, 2 after SECONDS, 3 on a usage or
 * system error. A file is looked at again on each change in its directory
 * (inotify), a process watched through its pidfd (any process, not only a
 * child: a zombie has ended).
 */
#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "t_wait.h"

/* a line of path matches the regex_t arg */
static bool has_line(const char *path, void *arg)
{
	FILE *f = fopen(path, "re");
	char *line = NULL;
	size_t cap = 0;
	bool found = false;
	ssize_t n;

	if (!f)
		return false;
	while (!found && (n = getline(&line, &cap, f)) >= 0) {
		if (n > 0 && line[n - 1] == '\n')
			line[n - 1] = '\0';
		found = regexec(arg, line, 0, NULL, 0) == 0;
	}
	free(line);
	fclose(f);
	return found;
}

static int usage(void)
{
	fprintf(stderr, "usage: wc_waitfor [-p PID] [-t SECONDS] [-g TEXT | -e REGEX | -d] FILE\n"
		"       wc_waitfor [-t SECONDS] -x PID\n");
	return 3;
}

int main(int argc, char **argv)
{
	const char *text = NULL, *re = NULL;
	regex_t rx;
	bool del = false, ended = false;
	double secs = 20;
	pid_t pid = 0;
	int c, r, ms;

	while ((c = getopt(argc, argv, "p:t:g:e:dx")) != -1) {
		switch (c) {
		case 'p': pid = (pid_t)atoi(optarg); break;
		case 't': secs = atof(optarg); break;
		case 'g': text = optarg; break;
		case 'e': re = optarg; break;
		case 'd': del = true; break;
		case 'x': ended = true; break;
		default: return usage();
		}
	}
	if (optind != argc - 1 || !!text + !!re + del + ended > 1 ||
	    (ended && pid))
		return usage();
	ms = (int)(secs * 1000);
	if (ended) {
		pid = (pid_t)atoi(argv[optind]);
		if (pid <= 0)
			return usage();
		r = t_wait_exit(pid, ms);
	} else if (text) {
		r = t_wait_text(argv[optind], text, pid, ms);
	} else if (re) {
		if (regcomp(&rx, re, REG_EXTENDED | REG_NOSUB)) {
			fprintf(stderr, "wc_waitfor: '%s' is not an extended regular expression\n",
				re);
			return 3;
		}
		r = t_wait_until(argv[optind], has_line, &rx, pid, ms);
		regfree(&rx);
	} else if (del) {
		r = t_wait_gone(argv[optind], pid, ms);
	} else {
		r = t_wait_file(argv[optind], pid, ms);
	}
	if (r == -ESRCH)
		return 1;
	if (r == -ETIMEDOUT)
		return 2;
	if (r < 0) {
		fprintf(stderr, "wc_waitfor %s: %s\n", argv[optind], strerror(-r));
		return 3;
	}
	return 0;
}
