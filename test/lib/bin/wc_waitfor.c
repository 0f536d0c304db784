/* SPDX-License-Identifier: MIT */
/*
 * wc_waitfor [-p PID] [-t SECONDS] FILE: waits for FILE to exist (inotify)
 * while PID lives (its pidfd), at most SECONDS (default 20): exit 0 once it
 * exists, 1 when PID ended first, 2 after SECONDS, 3 on a usage or system
 * error. The shell tests' wait on a ready file (test/lib/wcd.bash,
 * e2e_lib.bash) instead of a loop of sleeps.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "t_wait.h"

int main(int argc, char **argv)
{
	double secs = 20;
	pid_t pid = 0;
	int c, r;

	while ((c = getopt(argc, argv, "p:t:")) != -1) {
		switch (c) {
		case 'p':
			pid = (pid_t)atoi(optarg);
			break;
		case 't':
			secs = atof(optarg);
			break;
		default:
			return 3;
		}
	}
	if (optind != argc - 1) {
		fprintf(stderr, "usage: wc_waitfor [-p PID] [-t SECONDS] FILE\n");
		return 3;
	}
	r = t_wait_file(argv[optind], pid, (int)(secs * 1000));
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
