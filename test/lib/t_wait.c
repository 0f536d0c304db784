/* SPDX-License-Identifier: MIT */
/* Test library (libwctest): waiting on a file or a process (t_wait.h). */
#include "t_wait.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#include "clock.h"
#include "compat.h"

static int64_t now_ms(void)
{
	return (int64_t)(clock_ns() / 1000000);
}

/* The nearest directory above path that exists (path's own first). */
static void existing_dir(const char *path, char *dir, size_t cap)
{
	char *slash;

	snprintf(dir, cap, "%s", path);
	for (;;) {
		slash = strrchr(dir, '/');
		if (!slash) {
			snprintf(dir, cap, ".");
			return;
		}
		if (slash == dir) {
			dir[1] = '\0';
			return;
		}
		*slash = '\0';
		if (!access(dir, F_OK))
			return;
	}
}

int t_wait_file(const char *path, pid_t pid, int ms)
{
	int64_t end = now_ms() + ms;
	int in, pfd = -1, ret;

	if (!access(path, F_OK))
		return 0;
	in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (in < 0)
		return -errno;
	if (pid > 0) {
		pfd = rx_pidfd_open(pid);
		if (pfd < 0) {
			ret = pfd;
			close(in);
			return access(path, F_OK) ? ret : 0;
		}
	}
	for (;;) {
		struct pollfd p[2] = { { .fd = in, .events = POLLIN },
				       { .fd = pfd, .events = POLLIN } };
		char dir[PATH_MAX], ev[4096];
		int64_t left;
		int wd;

		/* the directory first, then the look: a file made between the
		 * two is seen by the look, one made after by the watch */
		existing_dir(path, dir, sizeof(dir));
		wd = inotify_add_watch(in, dir, IN_CREATE | IN_MOVED_TO |
				       IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF);
		if (wd < 0) {
			ret = -errno;
			break;
		}
		if (!access(path, F_OK)) {
			ret = 0;
			break;
		}
		left = end - now_ms();
		if (left <= 0) {
			ret = -ETIMEDOUT;
			break;
		}
		if (poll(p, pfd >= 0 ? 2 : 1, (int)(left > INT_MAX ? INT_MAX : left)) < 0 &&
		    errno != EINTR) {
			ret = -errno;
			break;
		}
		if (pfd >= 0 && (p[1].revents & POLLIN) && access(path, F_OK)) {
			ret = -ESRCH;
			break;
		}
		while (read(in, ev, sizeof(ev)) > 0)
			;
		inotify_rm_watch(in, wd);
	}
	close(in);
	if (pfd >= 0)
		close(pfd);
	return ret;
}
