/* SPDX-License-Identifier: MIT */
/*
 * The shell tests' waits on events (test/lib/t_wait.h) instead of loops of
 * sleeps:
 *
 *   wc_waitfor [-p PID] [-t SECONDS] FILE          FILE exists
 *   wc_waitfor [-p PID] [-t SECONDS] -g TEXT FILE  FILE holds TEXT (a fixed
 *                                                  string, as grep -F)
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "t_wait.h"

static int usage(void)
{
	fprintf(stderr, "usage: wc_waitfor [-p PID] [-t SECONDS] [-g TEXT | -d] FILE\n"
		"       wc_waitfor [-t SECONDS] -x PID\n");
	return 3;
}

int main(int argc, char **argv)
{
	const char *text = NULL;
	bool del = false, ended = false;
	double secs = 20;
	pid_t pid = 0;
	int c, r, ms;

	while ((c = getopt(argc, argv, "p:t:g:dx")) != -1) {
		switch (c) {
		case 'p': pid = (pid_t)atoi(optarg); break;
		case 't': secs = atof(optarg); break;
		case 'g': text = optarg; break;
		case 'd': del = true; break;
		case 'x': ended = true; break;
		default: return usage();
		}
	}
	if (optind != argc - 1 || (text && del) || (ended && (text || del || pid)))
		return usage();
	ms = (int)(secs * 1000);
	if (ended) {
		pid = (pid_t)atoi(argv[optind]);
		if (pid <= 0)
			return usage();
		r = t_wait_exit(pid, ms);
	} else if (text) {
		r = t_wait_text(argv[optind], text, pid, ms);
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
