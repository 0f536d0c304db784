/* SPDX-License-Identifier: MIT */
/*
 * wcctl's view of the runtime directory: the path template (proto/base/paths.h)
 * split around {device} so that the directory can be listed, and who holds a
 * device's lock. Library-style: 0 / -errno and one sentence in err
 * (BASE_ERR_LEN).
 */
#ifndef WCCTL_RUNDIR_H
#define WCCTL_RUNDIR_H

#include <limits.h>
#include <sys/types.h>

#include "paths.h"
#include "ready.h"

#define RUNDIR_DEVICES_MAX 1024 /* devices one scan returns */

struct rundir {
	char tmpl[PATHS_MAX];   /* e.g. /run/user/1000/wcache/{device} */
	char dir[PATHS_MAX];    /* the directory holding the files */
	char pre[NAME_MAX + 1]; /* file name part before {device} */
	char post[NAME_MAX + 1];/* ... and after it */
};

typedef char rundir_name[PATHS_DEVICE_MAX + 1];

/* runtime_dir: --runtime-dir or NULL (then WCACHE_SOCKET_TEMPLATE, then
 * $XDG_RUNTIME_DIR/wcache, then /tmp/wcache-$UID). wcctl lists the
 * directory, so {device} must be in the template's last path component. */
int rundir_init(struct rundir *rd, const char *runtime_dir, char *err);
/* Creates the directory (0700) and any missing parents. */
int rundir_mkdir(const struct rundir *rd, char *err);
/* Creates and removes a file in the directory: 0, or -errno with the
 * real cause (permissions, a read-only file system) in err. */
int rundir_check_writable(const struct rundir *rd, char *err);
/* The device's files (name: file-name safe, e.g. host-0). */
int rundir_paths(const struct rundir *rd, const char *name, struct paths *p,
		 char *err);
/* Device names that have a file ending in suffix (".ready", ".lock"),
 * sorted; returns the count (at most max) or -errno. A missing directory
 * is 0 devices. */
int rundir_scan(const struct rundir *rd, const char *suffix,
		rundir_name *names, int max, char *err);

/* Who holds the lock on lock_path: 1 and *pid (0 when the holder's pid
 * cannot be told, e.g. an OFD lock) when held, 0 when free or absent, or
 * -errno. Read from /proc/locks, so it never takes the lock itself (a
 * daemon starting at that moment is not disturbed). */
int lock_holder(const char *lock_path, pid_t *pid, char *err);

/* Removes the device's .ready, .sock, .lock (and .log unless keep_log) and
 * any leftover ready temp file, unless a process holds its lock: then
 * nothing is removed and -EBUSY is returned. Returns the number of files
 * removed. */
int rundir_remove(const struct rundir *rd, const struct paths *p,
		  int keep_log, char *err);

#endif
