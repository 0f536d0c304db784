/* SPDX-License-Identifier: MIT */
/* Runtime directory, ready files and lock holders for wcctl (rundir.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "base.h"
#include "err.h"
#include "rundir.h"

#define DEVICE_KEY "{device}"

int rundir_init(struct rundir *rd, const char *runtime_dir, char *err)
{
	const char *key, *base;
	int ret;

	memset(rd, 0, sizeof(*rd));
	ret = paths_template_env(rd->tmpl, sizeof(rd->tmpl), runtime_dir, err);
	if (ret)
		return ret;
	key = strstr(rd->tmpl, DEVICE_KEY);
	base = strrchr(rd->tmpl, '/');
	if (!key || !base || base > key || strchr(key, '/') ||
	    strlen(base + 1) > NAME_MAX)
		return base_errf(err, EINVAL,
			       "path template '%s' must be an absolute path with {device} in its file name, e.g. /run/wcache/{device}",
			       rd->tmpl);
	snprintf(rd->dir, sizeof(rd->dir), "%.*s", (int)(base - rd->tmpl),
		 rd->tmpl);
	if (!rd->dir[0])
		strcpy(rd->dir, "/");
	snprintf(rd->pre, sizeof(rd->pre), "%.*s", (int)(key - base - 1),
		 base + 1);
	snprintf(rd->post, sizeof(rd->post), "%s", key + strlen(DEVICE_KEY));
	return 0;
}

int rundir_mkdir(const struct rundir *rd, char *err)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s", rd->dir);
	for (char *s = p + 1;; s++) {
		bool last = !*s;

		if (*s != '/' && !last)
			continue;
		*s = '\0';
		if (mkdir(p, 0700) && errno != EEXIST)
			return base_errf(err, errno,
				       "cannot create the runtime directory %s: %s; choose another with --runtime-dir",
				       p, strerror(errno));
		if (last)
			break;
		*s = '/';
	}
	return 0;
}

int rundir_check_writable(const struct rundir *rd, char *err)
{
	char p[PATH_MAX];
	int fd;

	if (snprintf(p, sizeof(p), "%s/.wcctl-probe-XXXXXX", rd->dir) >=
	    (int)sizeof(p))
		return base_errf(err, ENAMETOOLONG, "runtime directory %s: path too long",
			       rd->dir);
	fd = mkstemp(p);
	if (fd < 0)
		return base_errf(err, errno,
			       "the runtime directory %s is not writable: %s; fix its permissions (it must be writable by uid %u) or pick another with --runtime-dir",
			       rd->dir, strerror(errno), (unsigned)getuid());
	close(fd);
	unlink(p);
	return 0;
}

int rundir_paths(const struct rundir *rd, const char *name, struct paths *p,
		 char *err)
{
	return paths_resolve(p, rd->tmpl, name, err);
}

static int name_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

int rundir_scan(const struct rundir *rd, const char *suffix,
		rundir_name *names, int max, char *err)
{
	size_t pre = strlen(rd->pre), post = strlen(rd->post);
	size_t suf = strlen(suffix);
	struct dirent *de;
	DIR *d;
	int n = 0;

	d = opendir(rd->dir);
	if (!d) {
		if (errno == ENOENT)
			return 0;
		return base_errf(err, errno, "cannot read %s: %s", rd->dir,
			       strerror(errno));
	}
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name), mid;

		if (len <= pre + post + suf ||
		    strncmp(de->d_name, rd->pre, pre) ||
		    strcmp(de->d_name + len - suf, suffix) ||
		    strncmp(de->d_name + len - suf - post, rd->post, post))
			continue;
		mid = len - pre - post - suf;
		if (mid >= sizeof(names[0]))
			continue;
		if (n == max) {
			closedir(d);
			return base_errf(err, E2BIG,
				       "more than %d devices in %s; clean it with 'wcctl clean'",
				       max, rd->dir);
		}
		snprintf(names[n++], sizeof(names[0]), "%.*s", (int)mid,
			 de->d_name + pre);
	}
	closedir(d);
	WC_ASSERT(n <= max);
	qsort(names, n, sizeof(names[0]), name_cmp);
	return n;
}

/* Lines of /proc/locks: "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF";
 * waiters are marked "1: -> FLOCK ..." and are skipped. */
int lock_holder(const char *lock_path, pid_t *pid, char *err)
{
	char line[256];
	struct stat st;
	FILE *f;
	int held = 0;

	*pid = 0;
	if (stat(lock_path, &st)) {
		if (errno == ENOENT)
			return 0;
		return base_errf(err, errno, "cannot stat %s: %s", lock_path,
			       strerror(errno));
	}
	f = fopen("/proc/locks", "re");
	if (!f)
		return base_errf(err, errno,
			       "cannot read /proc/locks to find who holds %s: %s; mount /proc",
			       lock_path, strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		char type[16], mode[16], rw[16];
		unsigned maj, min;
		unsigned long long ino;
		long long p;

		if (strstr(line, "->"))
			continue;
		if (sscanf(line, "%*d: %15s %15s %15s %lld %x:%x:%llu", type,
			   mode, rw, &p, &maj, &min, &ino) != 7)
			continue;
		if (ino != (unsigned long long)st.st_ino ||
		    maj != major(st.st_dev) || min != minor(st.st_dev))
			continue;
		held = 1;
		if (p > 0 && p <= INT32_MAX)
			*pid = (pid_t)p;
		break;
	}
	fclose(f);
	return held;
}

static int unlink_quiet(const char *path)
{
	return unlink(path) == 0 ? 1 : 0;
}

int rundir_remove(const struct rundir *rd, const struct paths *p,
		 int keep_log, char *err)
{
	char tmp_pre[PATHS_MAX];
	struct dirent *de;
	int lfd, ret, n = 0;
	pid_t pid;
	size_t tn;
	DIR *d;

	ret = lock_holder(p->lock, &pid, err);
	if (ret < 0)
		return ret;
	if (ret > 0)
		return base_errf(err, EBUSY,
			       "device %s is held by a running daemon (pid %d); stop it with 'wcctl stop --device %s'",
			       p->device, (int)pid, p->device);
	/* Hold the lock while removing, so a daemon starting right now is
	 * refused rather than losing its files under it. */
	lfd = open(p->lock, O_RDWR | O_CLOEXEC);
	if (lfd >= 0 && flock(lfd, LOCK_EX | LOCK_NB)) {
		close(lfd);
		return base_errf(err, EBUSY,
			       "device %s was just taken by a starting daemon; leaving its files",
			       p->device);
	}
	n += unlink_quiet(p->ready);
	n += unlink_quiet(p->sock);
	if (!keep_log)
		n += unlink_quiet(p->log);
	/* ready temp files: <prefix>.ready.tmp.PID */
	snprintf(tmp_pre, sizeof(tmp_pre), "%s", strrchr(p->ready, '/') ?
		 strrchr(p->ready, '/') + 1 : p->ready);
	tn = strlen(tmp_pre);
	d = opendir(rd->dir);
	while (d && (de = readdir(d))) {
		char path[PATHS_MAX + NAME_MAX + 2];

		if (strncmp(de->d_name, tmp_pre, tn) ||
		    strncmp(de->d_name + tn, ".tmp.", 5))
			continue;
		snprintf(path, sizeof(path), "%s/%s", rd->dir, de->d_name);
		n += unlink_quiet(path);
	}
	if (d)
		closedir(d);
	/* The lock file last, still locked: a daemon that opened the old
	 * file is refused by our lock; one that opens the path after the
	 * unlink creates a new file. */
	n += unlink_quiet(p->lock);
	if (lfd >= 0)
		close(lfd);
	return n;
}
