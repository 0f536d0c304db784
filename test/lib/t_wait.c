/* SPDX-License-Identifier: MIT */
/* Test library (libwctest): waiting on a file or a process (t_wait.h). */
#include "t_wait.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
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

/* the events in a directory that may change what a wait looks at */
#define T_WAIT_EVENTS (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | \
		       IN_MODIFY | IN_CLOSE_WRITE | IN_ATTRIB | \
		       IN_DELETE_SELF | IN_MOVE_SELF)

static int timeout_left(int64_t end)
{
	int64_t left = end - now_ms();

	return left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

int t_wait_until(const char *path, bool (*done)(const char *path, void *arg),
		 void *arg, pid_t pid, int ms)
{
	int64_t end = now_ms() + ms;
	int in, pfd = -1, ret;

	if (done(path, arg))
		return 0;
	in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (in < 0)
		return -errno;
	if (pid > 0) {
		pfd = rx_pidfd_open(pid);
		if (pfd < 0) {
			ret = pfd;
			close(in);
			return done(path, arg) ? 0 : ret;
		}
	}
	for (;;) {
		struct pollfd p[2] = { { .fd = in, .events = POLLIN },
				       { .fd = pfd, .events = POLLIN } };
		char dir[PATH_MAX], ev[4096];
		int wd, left;

		/* the directory first, then the look: a change made between
		 * the two is seen by the look, one made after by the watch */
		existing_dir(path, dir, sizeof(dir));
		wd = inotify_add_watch(in, dir, T_WAIT_EVENTS);
		if (wd < 0) {
			ret = -errno;
			break;
		}
		if (done(path, arg)) {
			ret = 0;
			break;
		}
		left = timeout_left(end);
		if (!left) {
			ret = -ETIMEDOUT;
			break;
		}
		if (poll(p, pfd >= 0 ? 2 : 1, left) < 0 && errno != EINTR) {
			ret = -errno;
			break;
		}
		if (pfd >= 0 && (p[1].revents & POLLIN) && !done(path, arg)) {
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

static bool exists(const char *path, void *arg)
{
	(void)arg;
	return !access(path, F_OK);
}

static bool gone(const char *path, void *arg)
{
	(void)arg;
	return access(path, F_OK) && errno == ENOENT;
}

bool t_file_has(const char *path, const char *text)
{
	size_t len = strlen(text), keep = 0;
	char buf[65536 + 1];
	bool found = false;
	ssize_t n;
	int fd;

	if (len >= sizeof(buf) / 2)
		return false;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	/* chunk by chunk, the last len - 1 bytes kept for a text across two */
	while (!found &&
	       (n = read(fd, buf + keep, sizeof(buf) - 1 - keep)) > 0) {
		size_t have = keep + (size_t)n;

		buf[have] = '\0';
		found = memmem(buf, have, text, len) != NULL;
		keep = len && have >= len ? len - 1 : have < len ? have : 0;
		memmove(buf, buf + have - keep, keep);
	}
	close(fd);
	return found || !len;
}

static bool has_text(const char *path, void *arg)
{
	return t_file_has(path, arg);
}

int t_wait_file(const char *path, pid_t pid, int ms)
{
	return t_wait_until(path, exists, NULL, pid, ms);
}

int t_wait_gone(const char *path, pid_t pid, int ms)
{
	return t_wait_until(path, gone, NULL, pid, ms);
}

int t_wait_text(const char *path, const char *text, pid_t pid, int ms)
{
	return t_wait_until(path, has_text, (void *)text, pid, ms);
}

int t_wait_exit(pid_t pid, int ms)
{
	struct pollfd p = { .fd = rx_pidfd_open(pid), .events = POLLIN };
	int64_t end = now_ms() + ms;
	int ret, k;

	if (p.fd < 0)
		return p.fd == -ESRCH ? 0 : p.fd;
	for (;;) {
		k = poll(&p, 1, timeout_left(end));
		if (k > 0) {
			ret = 0;
			break;
		}
		if (k == 0) {
			ret = -ETIMEDOUT;
			break;
		}
		if (errno != EINTR) {
			ret = -errno;
			break;
		}
	}
	close(p.fd);
	return ret;
}

void t_count_init(struct t_count *c)
{
	pthread_condattr_t a;

	pthread_mutex_init(&c->mu, NULL);
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cv, &a);
	pthread_condattr_destroy(&a);
	c->n = 0;
}

void t_count_set(struct t_count *c, int n)
{
	pthread_mutex_lock(&c->mu);
	c->n = n;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

void t_count_add(struct t_count *c, int k)
{
	pthread_mutex_lock(&c->mu);
	c->n += k;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
}

int t_count_get(struct t_count *c)
{
	int n;

	pthread_mutex_lock(&c->mu);
	n = c->n;
	pthread_mutex_unlock(&c->mu);
	return n;
}

int t_count_wait(struct t_count *c, int n, int ms)
{
	struct timespec end;
	int ret = 0;

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += ms / 1000;
	end.tv_nsec += (long)(ms % 1000) * 1000000;
	if (end.tv_nsec >= 1000000000) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&c->mu);
	while (c->n < n && ret != ETIMEDOUT)
		ret = pthread_cond_timedwait(&c->cv, &c->mu, &end);
	ret = c->n >= n ? 0 : -ETIMEDOUT;
	pthread_mutex_unlock(&c->mu);
	return ret;
}
