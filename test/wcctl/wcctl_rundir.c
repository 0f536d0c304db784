/* SPDX-License-Identifier: MIT */
/*
 * wcctl's runtime-directory helpers (tools/wcctl/rundir.c, compiled in):
 * templates with text around {device}, listing devices by suffix, who holds
 * a device's flock (read from /proc/locks, for our own lock and a child's),
 * and removal that refuses a held device and takes every leftover of a
 * dead one.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"
#include "tools/wcctl/rundir.c"

static char dir[] = "/tmp/wct-rundir.XXXXXX";

static void touch(const char *name)
{
	char p[PATHS_MAX];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	T_ASSERT(fd >= 0);
	close(fd);
}

static bool exists(const char *name)
{
	char p[PATHS_MAX];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

static void check_templates(void)
{
	char err[BASE_ERR_LEN], tmpl[PATHS_MAX];
	struct rundir rd;
	struct paths p;

	T_OK(rundir_init(&rd, dir, err));
	T_EQ_STR(rd.dir, dir);
	T_EQ_STR(rd.pre, "");
	T_EQ_STR(rd.post, "");
	snprintf(tmpl, sizeof(tmpl), "%s/wc-{device}.d", dir);
	setenv("WCACHE_SOCKET_TEMPLATE", tmpl, 1);
	T_OK(rundir_init(&rd, NULL, err));
	T_EQ_STR(rd.dir, dir);
	T_EQ_STR(rd.pre, "wc-");
	T_EQ_STR(rd.post, ".d");
	T_OK(rundir_paths(&rd, "host-a", &p, err));
	T_HAS(p.ready, "/wc-host-a.d.ready");
	setenv("WCACHE_SOCKET_TEMPLATE", "/tmp/{device}/sock", 1);
	T_EQ_INT(rundir_init(&rd, NULL, err), -EINVAL);
	T_HAS(err, "{device} in its file name");
	unsetenv("WCACHE_SOCKET_TEMPLATE");
}

static void check_scan(void)
{
	rundir_name names[4];
	char err[BASE_ERR_LEN], tmpl[PATHS_MAX];
	struct rundir rd;
	int n;

	touch("host-b.ready");
	touch("host-a.ready");
	touch("host-a.lock");
	touch("host-c.ready.tmp.123"); /* a writer's temp file: not ready */
	touch("notes.txt");
	T_OK(rundir_init(&rd, dir, err));
	n = rundir_scan(&rd, ".ready", names, 4, err);
	T_EQ_INT(n, 2);
	T_EQ_STR(names[0], "host-a");
	T_EQ_STR(names[1], "host-b");
	T_EQ_INT(rundir_scan(&rd, ".ready", names, 1, err), -E2BIG);
	T_HAS(err, "more than 1 devices");
	snprintf(tmpl, sizeof(tmpl), "%s/wc-{device}.d", dir);
	setenv("WCACHE_SOCKET_TEMPLATE", tmpl, 1);
	T_OK(rundir_init(&rd, NULL, err));
	touch("wc-GPU-1234.d.ready");
	n = rundir_scan(&rd, ".ready", names, 4, err);
	T_EQ_INT(n, 1);
	T_EQ_STR(names[0], "GPU-1234");
	unsetenv("WCACHE_SOCKET_TEMPLATE");
	T_OK(rundir_init(&rd, "/nonexistent/wcache", err));
	T_EQ_INT(rundir_scan(&rd, ".ready", names, 4, err), 0);
}

static void check_locks(void)
{
	char err[BASE_ERR_LEN], lock[PATHS_MAX];
	struct rundir rd;
	struct paths p;
	int pipefd[2], fd, st;
	pid_t pid, child;
	char c;

	T_OK(rundir_init(&rd, dir, err));
	T_OK(rundir_paths(&rd, "host-a", &p, err));
	snprintf(lock, sizeof(lock), "%s", p.lock);
	T_EQ_INT(lock_holder(lock, &pid, err), 0);
	T_EQ_INT(lock_holder("/nonexistent/x.lock", &pid, err), 0);

	/* our own flock */
	fd = open(lock, O_RDWR | O_CLOEXEC);
	T_ASSERT(fd >= 0);
	T_OK(flock(fd, LOCK_EX | LOCK_NB));
	T_EQ_INT(lock_holder(lock, &pid, err), 1);
	T_EQ_INT(pid, getpid());
	T_EQ_INT(rundir_remove(&rd, &p, 0, err), -EBUSY);
	T_HAS(err, "held by a running daemon");
	T_ASSERT(exists("host-a.ready") && exists("host-a.lock"));
	close(fd);
	T_EQ_INT(lock_holder(lock, &pid, err), 0);

	/* a child's flock: held while it lives, free once it is gone */
	T_OK(pipe2(pipefd, O_CLOEXEC));
	child = fork();
	T_ASSERT(child >= 0);
	if (!child) {
		int cfd = open(lock, O_RDWR);

		if (cfd < 0 || flock(cfd, LOCK_EX))
			_exit(1);
		if (write(pipefd[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	T_EQ_INT(read(pipefd[0], &c, 1), 1);
	T_EQ_INT(lock_holder(lock, &pid, err), 1);
	T_EQ_INT(pid, child);
	kill(child, SIGKILL);
	waitpid(child, &st, 0);
	T_EQ_INT(lock_holder(lock, &pid, err), 0);
	close(pipefd[0]);
	close(pipefd[1]);

	/* a dead daemon's files, temp file included, all go; the log stays
	 * when asked */
	touch("host-a.sock");
	touch("host-a.log");
	touch("host-a.ready.tmp.77");
	T_EQ_INT(rundir_remove(&rd, &p, 1, err), 4);
	T_ASSERT(!exists("host-a.ready") && !exists("host-a.sock"));
	T_ASSERT(!exists("host-a.lock") && !exists("host-a.ready.tmp.77"));
	T_ASSERT(exists("host-a.log"));
	T_EQ_INT(rundir_remove(&rd, &p, 0, err), 1);
	T_ASSERT(!exists("host-a.log"));
	T_ASSERT(exists("host-b.ready")); /* another device is untouched */
}

int main(void)
{
	char cmd[PATHS_MAX + 16];

	T_ASSERT(mkdtemp(dir));
	check_templates();
	check_scan();
	check_locks();
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	T_EQ_INT(system(cmd), 0);
	return 0;
}
