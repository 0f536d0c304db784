/* SPDX-License-Identifier: MIT */
/*
 * sd_notify(3) in one datagram; see sdnotify.h. Costs a socket, a sendto
 * and a close per message (a handful per process lifetime).
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sdnotify.h"

static char notify_path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];

void sdnotify_init(void)
{
	const char *p = getenv("NOTIFY_SOCKET");

	if (p && strlen(p) < sizeof(notify_path))
		snprintf(notify_path, sizeof(notify_path), "%s", p);
	unsetenv("NOTIFY_SOCKET");
}

int sdnotify_send(const char *fmt, ...)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t plen = strlen(notify_path);
	char msg[512];
	va_list ap;
	ssize_t n;
	int fd, len, ret = 0;

	if (!plen)
		return 0;
	if ((notify_path[0] != '/' && notify_path[0] != '@') ||
	    plen > sizeof(sa.sun_path))
		return -EINVAL;
	va_start(ap, fmt);
	len = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (len < 0 || (size_t)len >= sizeof(msg))
		return -EMSGSIZE;
	memcpy(sa.sun_path, notify_path, plen);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0';   /* abstract namespace */
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	n = sendto(fd, msg, (size_t)len, MSG_NOSIGNAL, (struct sockaddr *)&sa,
		   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen));
	if (n < 0)
		ret = -errno;
	close(fd);
	return ret;
}
