/* SPDX-License-Identifier: MIT */
/*
 * Waiting on events instead of sleeping: a file that appears (inotify on
 * its directory, or the nearest one that exists) while a process lives
 * (its pidfd). The code is in t_wait.c (libwctest); test/lib/bin/wc_waitfor
 * is the same for the shell tests.
 */
#ifndef WC_TEST_T_WAIT_H
#define WC_TEST_T_WAIT_H

#include <sys/types.h>

/* Waits up to ms for path to exist while pid (when > 0) lives: 0 once it
 * exists, -ESRCH when pid ended first, -ETIMEDOUT after ms, or another
 * -errno (inotify or pidfd_open failed). */
int t_wait_file(const char *path, pid_t pid, int ms);

#endif
