/* SPDX-License-Identifier: MIT */
/* Test library (libwctest): the reactor tests' helpers (rx_util.h). */
#include "rx_util.h"

int rx_test_fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		T_FAIL("opendir /proc/self/fd failed");
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;
}

bool rx_test_cloexec(int fd)
{
	int fl = fcntl(fd, F_GETFD);

	return fl >= 0 && (fl & FD_CLOEXEC);
}
