/* SPDX-License-Identifier: MIT */
/*
 * Ownership of a device's runtime files. flock on <prefix>.lock decides:
 * the kernel drops the lock when its holder dies, so a held lock always
 * means a live daemon and a free one means leftovers (no pid-reuse race, as
 * a pid-alive check would have). The holder writes its pid into the lock
 * file so that a refused start can name it.
 *
 * --force: SIGTERM the owner through a pidfd, wait up to --force-wait
 * (default 10 s) for it to exit, then SIGKILL, then take the lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "compat.h"
#include "err.h"
#include "log.h"
#include "ready.h"
#include "serve/own.h"
#include "serve/access.h"

/* The pid the owner wrote into the lock file, or -1. */
static pid_t owner_pid(int fd)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	long v;

	if (n <= 0)
		return -1;
	buf[n] = '\0';
	v = strtol(buf, NULL, 10);
	return v > 0 ? (pid_t)v : -1;
}

/* Waits up to ms for pidfd to become readable (the process exited). */
static bool wait_exit(int pidfd, int ms)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	uint64_t end = rx_now_ns() + (uint64_t)ms * 1000000;

	for (;;) {
		uint64_t now = rx_now_ns();
		int r;

		if (now >= end)
			return false;
		r = poll(&p, 1, (int)((end - now) / 1000000) + 1);
		if (r > 0)
			return true;
		if (r < 0 && errno != EINTR)
			return false;
	}
}

/* Stops the live owner pid: SIGTERM, wait, SIGKILL. */
static int force_stop(struct wcd *d, pid_t pid, char *err)
{
	int pidfd = rx_pidfd_open(pid);

	if (pidfd < 0) {
		if (errno == ESRCH)
			return 0;   /* gone already */
		return base_errf(err, errno,
			       "--force: cannot open a pidfd for the owner pid %d: %s",
			       (int)pid, strerror(errno));
	}
	log_warn("--force: sending SIGTERM to the owner of device %s, pid %d",
		 d->paths.device, (int)pid);
	if (rx_pidfd_send_signal(pidfd, SIGTERM) && errno != ESRCH) {
		int e = errno;

		close(pidfd);
		return base_errf(err, e,
			       "--force: cannot signal the owner pid %d: %s (is it another user's?)",
			       (int)pid, strerror(e));
	}
	if (!wait_exit(pidfd, (int)d->o.force_wait_ms)) {
		log_warn("--force: pid %d did not exit within %g s; sending SIGKILL",
			 (int)pid, d->o.force_wait_ms / 1000.0);
		rx_pidfd_send_signal(pidfd, SIGKILL);
		wait_exit(pidfd, 5000);
	}
	close(pidfd);
	return 0;
}

/* Removes a leftover file; logs it. */
static void remove_stale(const char *path)
{
	if (unlink(path) == 0)
		log_info("removed stale %s (its daemon is gone)", path);
	else if (errno != ENOENT)
		log_warn("cannot remove stale %s: %s", path, strerror(errno));
}

int own_acquire(struct wcd *d, char *err)
{
	struct ready_info ri;
	char rerr[BASE_ERR_LEN], pidtxt[32];
	struct stat st;
	pid_t pid;
	int fd, ret, n;

	ret = paths_mkdir(d->paths.dir, err);
	if (!ret)
		ret = access_dir_open(d, err);
	if (ret)
		return ret;
	/* The lock file outlives daemons, so O_EXCL cannot be used; the
	 * directory check above and O_NOFOLLOW keep it from being a link. */
	fd = open(d->paths.lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK |
		  O_CLOEXEC, 0600);
	if (fd < 0)
		return base_errf(err, errno, "cannot open the lock file %s: %s%s",
			       d->paths.lock, strerror(errno),
			       errno == ELOOP ? " (it is a symbolic link, never followed: remove it)" : "");
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		ret = base_errf(err, EINVAL,
			      "the lock file %s is not a regular file; remove it",
			      d->paths.lock);
		goto out_close;
	}
	for (int attempt = 0; flock(fd, LOCK_EX | LOCK_NB); attempt++) {
		if (errno != EWOULDBLOCK) {
			ret = base_errf(err, errno, "flock %s: %s",
				      d->paths.lock, strerror(errno));
			goto out_close;
		}
		pid = owner_pid(fd);
		if (!d->o.force) {
			const char *state = "unknown";

			if (ready_read_file(&ri, d->paths.ready, rerr) == 0)
				state = ri.state;
			ret = base_errf(err, EBUSY,
				      "device %s is already served by wcd pid %d (ready file %s, state %s): stop it with 'wcctl stop --device %s%s%s' or take over with --force",
				      d->paths.device, (int)pid, d->paths.ready,
				      state, d->o.device,
				      d->o.runtime_dir ? " --runtime-dir " : "",
				      d->o.runtime_dir ? d->o.runtime_dir : "");
			goto out_close;
		}
		if (attempt >= 3) {
			ret = base_errf(err, EBUSY,
				      "--force: the lock %s is still held after stopping pid %d; find its holder with 'fuser %s'",
				      d->paths.lock, (int)pid, d->paths.lock);
			goto out_close;
		}
		if (pid > 0 && pid != getpid()) {
			ret = force_stop(d, pid, err);
			if (ret)
				goto out_close;
		}
		/* Give the kernel a moment to drop the dead holder's lock. */
		usleep(50000);
	}
	/* We own the device now; whatever is published is stale. */
	remove_stale(d->paths.sock);
	remove_stale(d->paths.ready);
	n = snprintf(pidtxt, sizeof(pidtxt), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) || pwrite(fd, pidtxt, (size_t)n, 0) != n)
		log_warn("cannot write the pid into %s: %s", d->paths.lock,
			 strerror(errno));
	d->lock_fd = fd;
	return 0;

out_close:
	close(fd);
	return ret;
}

void own_remove_published(struct wcd *d)
{
	unlink(d->paths.sock);
	unlink(d->paths.ready);
}

void own_release(struct wcd *d)
{
	if (d->lock_fd < 0)
		return;
	/* The lock file itself stays: removing it would race a starting
	 * daemon that already opened it. */
	if (ftruncate(d->lock_fd, 0))
		log_debug("truncate %s: %s", d->paths.lock, strerror(errno));
	flock(d->lock_fd, LOCK_UN);
	close(d->lock_fd);
	d->lock_fd = -1;
}
